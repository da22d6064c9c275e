"""Emissions and the objective every window, spot and pause decision can minimise: cost, carbon, or both.

Energy comes from a power model (``PowerModel``: watts per vCPU between idle and full load, watts per GiB of
memory, GPU board power, the provider's PUE; every coefficient in ``costaware/data/power_model.csv`` with
its source) and the measured utilization of a task try; emissions are that energy times the grid's hourly
carbon intensity (gCO2e/kWh). Pure: the data files are read in ``costaware.adapters.carbon_data``.

One objective, one hourly value: ``cost`` is USD/hour as today; ``carbon`` is kg CO2e/hour; ``cost+carbon``
is USD/hour plus ``carbon_usd_per_tonne`` times tonnes CO2e/hour. Windows, forecasts and policies work on that
value unchanged, so the default ``cost`` changes nothing for today's DAGs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from costaware.core.errors import ConfigurationError, did_you_mean
from costaware.core.given import not_given
from costaware.core.money import parse_usd

OBJECTIVES = ("cost", "carbon", "cost+carbon")
#: The most ``carbon_usd_per_tonne`` takes: carbon prices are tens to a few hundred USD a tonne.
MAX_USD_PER_TONNE = 1_000_000.0
#: The most kW one task's machine is taken to draw: a rack of GPUs draws tens; 6500 is watts typed as kW.
MAX_POWER_KW = 1000.0
#: What an unknown grid intensity is called wherever emissions are shown (never a zero).
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Objective:
    """What a decision minimises.

    Args:
        name: ``cost``, ``carbon`` or ``cost+carbon``.
        carbon_usd_per_tonne: The carbon price of ``cost+carbon`` (USD per tonne CO2e; 0 otherwise).
    """

    name: str = "cost"
    carbon_usd_per_tonne: float = 0.0

    @classmethod
    def parse(cls, name: object, carbon_usd_per_tonne: object = None) -> Objective:
        """Check a (rendered) objective and its carbon price.

        An objective or carbon price that is blank, ``None`` or ``null`` (what a template of an unset param
        renders) is not given (:func:`~costaware.core.given.not_given`): the objective is then ``cost``.

        Raises:
            ConfigurationError: an unknown objective, or a carbon price that is not a number >= 0, or none
                for ``cost+carbon`` (named, with what to pass).
        """
        # Not given (a template of an unset param renders "None", or "null" through | tojson): the default,
        # as RemoteTrainingOperator's plan reads it ("None" was refused here as no objective first).
        text = "cost" if not_given(name) else str(name).strip()
        if text not in OBJECTIVES:
            raise ConfigurationError(
                f"objective {name!r} is not one of {', '.join(OBJECTIVES)}"
                f"{did_you_mean(''.join(text.split()).lower(), OBJECTIVES)}"
            )
        price = 0.0
        # A template of an unset param renders "None", or "null" through | tojson, maybe with spaces: not
        # given, as the remote training's plan reads it ("null" was refused as "not a price" first).
        if not not_given(carbon_usd_per_tonne):
            try:  # money as every amount is read: "$100" and "1,000" too, as --cap-usd takes them
                price = float(parse_usd(carbon_usd_per_tonne, name="carbon_usd_per_tonne"))
            except ConfigurationError:
                price = -1.0
            # Carbon trades at tens to a few hundred USD a tonne: a million is a typo (it was read as any
            # amount the ledger can store, and a huge one was told it was "not >= 0").
            if not 0 <= price <= MAX_USD_PER_TONNE:
                raise ConfigurationError(
                    f"carbon_usd_per_tonne={carbon_usd_per_tonne!r} is not a price in USD per tonne CO2e "
                    f"from 0 to {MAX_USD_PER_TONNE:,.0f} (e.g. 100)"
                )
        elif text == "cost+carbon":
            given = "" if carbon_usd_per_tonne is None else f", got {carbon_usd_per_tonne!r} (not given)"
            raise ConfigurationError(
                f"objective 'cost+carbon' needs carbon_usd_per_tonne (USD per tonne CO2e, e.g. 100){given}"
            )
        return cls(text, price)

    def check_settings_used(self, carbon_usd_per_tonne: object = None, carbon: object = None) -> None:
        """Refuse settings this objective does not read (checked where they are written out).

        A forgotten ``objective=`` left ``carbon="GB"`` unused: no carbon awareness, and no word of it.

        Raises:
            ConfigurationError: ``carbon_usd_per_tonne`` without ``cost+carbon``, or ``carbon`` with ``cost``.
        """
        if not not_given(carbon_usd_per_tonne) and self.name != "cost+carbon":
            raise ConfigurationError(
                f"carbon_usd_per_tonne={carbon_usd_per_tonne!r} is read only by objective 'cost+carbon', not "
                f"{self.name!r}: set objective='cost+carbon', or leave carbon_usd_per_tonne out"
            )
        # "None" or "null" (a param left unset, rendered) is not given: the run reads the region's zone.
        if not not_given(carbon) and not self.needs_carbon:
            raise ConfigurationError(
                f"carbon={carbon!r} is read only by objective 'carbon' or 'cost+carbon', not 'cost': set the "
                "objective, or leave carbon out"
            )

    @property
    def needs_carbon(self) -> bool:
        """Whether the grid's intensity is needed (``cost`` needs none)."""
        return self.name != "cost"

    def hourly_value(self, usd_per_hour: float, power_kw: float, g_co2e_per_kwh: float | None) -> float:
        """The value of one hour of running: USD, kg CO2e, or USD plus the carbon price of the emissions.

        Raises:
            ConfigurationError: the objective needs an intensity and none is known.
        """
        if self.name == "cost":
            return usd_per_hour
        if g_co2e_per_kwh is None:
            raise ConfigurationError(
                f"objective {self.name!r} needs the grid carbon intensity of this hour, and it is unknown: "
                "give a carbon source that covers it, or use objective='cost'"
            )
        kg_per_hour = power_kw * g_co2e_per_kwh / 1000
        if self.name == "carbon":
            return kg_per_hour
        return usd_per_hour + self.carbon_usd_per_tonne * kg_per_hour / 1000

    @property
    def unit(self) -> str:
        """The unit of :meth:`hourly_value` summed over hours."""
        return "kg CO2e" if self.name == "carbon" else "USD"


@dataclass(frozen=True, slots=True)
class Machine:
    """What draws power: vCPUs, memory, GPUs (their model; a fraction for g6f's shares), CPU architecture."""

    vcpus: int
    memory_gib: float
    gpus: float = 0
    gpu_model: str = ""
    arch: str = "x86_64"


@dataclass(frozen=True, slots=True)
class PowerModel:
    """Watts per vCPU (idle..full), per GiB of memory, per GPU (idle..full) by model; the PUE.

    Args:
        cpu_watts: ``arch -> (min, max)`` watts per vCPU.
        memory_watts_per_gib: Watts per GiB of memory.
        gpu_watts: ``model -> (min, max)`` watts per GPU; ``default`` for a model not listed.
        pue: The provider's power usage effectiveness (>= 1).
        sources: ``coefficient -> source`` (for the method recorded with every estimate).
    """

    cpu_watts: Mapping[str, tuple[float, float]]
    memory_watts_per_gib: float
    gpu_watts: Mapping[str, tuple[float, float]]
    pue: float
    sources: Mapping[str, str]

    def power_kw(
        self, machine: Machine, cpu_utilization: float, gpu_utilization: float | None = None
    ) -> float:
        """Average kW drawn at ``cpu_utilization`` (0-1; busy vCPUs / vCPUs) and ``gpu_utilization``.

        Without a GPU measurement GPUs count at full board power: training keeps them busy, and an estimate
        from above never hides emissions.
        """
        low, high = self.cpu_watts.get(machine.arch) or self.cpu_watts["x86_64"]
        cpu = machine.vcpus * (low + _share(cpu_utilization) * (high - low))
        memory = machine.memory_gib * self.memory_watts_per_gib
        gpu = 0.0
        if machine.gpus:
            g_low, g_high = self.gpu_watts.get(machine.gpu_model) or self.gpu_watts["default"]
            share = 1.0 if gpu_utilization is None else _share(gpu_utilization)
            gpu = machine.gpus * (g_low + share * (g_high - g_low))
        return self.pue * (cpu + memory + gpu) / 1000

    def method(self, machine: Machine, *, gpu_measured: bool) -> str:
        """One line naming what the estimate counted (stored with each entry)."""
        parts = [f"{machine.vcpus} vCPU {machine.arch} at measured CPU use", f"{machine.memory_gib:g} GiB"]
        if machine.gpus:
            known = machine.gpu_model in self.gpu_watts
            model = machine.gpu_model if known else f"{machine.gpu_model or 'unknown GPU'} as default"
            parts.append(f"{machine.gpus:g} x {model} at {'measured use' if gpu_measured else 'full power'}")
        return f"power model: {', '.join(parts)}, PUE {self.pue:g}"


@dataclass(frozen=True, slots=True)
class Emissions:
    """The estimated emissions of one task try.

    ``kg_co2e`` is None when the grid's intensity is unknown (``reason`` says why): shown as unknown, never 0.
    """

    kwh: Decimal
    kg_co2e: Decimal | None
    method: str
    source: str
    reason: str = ""


def emissions(
    kwh: float, g_co2e_per_kwh: float | None, *, method: str, source: str, reason: str = ""
) -> Emissions:
    """``kwh`` times the intensity, to the gram; None with ``reason`` when the intensity is unknown."""
    energy = Decimal(repr(round(kwh, 6)))
    if g_co2e_per_kwh is None:
        return Emissions(energy, None, method, source, reason or "grid carbon intensity unknown")
    kg = Decimal(repr(round(kwh * g_co2e_per_kwh / 1000, 3)))
    return Emissions(energy, kg, method, source)


def _share(value: float) -> float:
    if not 0 <= value < math.inf:
        raise ConfigurationError(f"utilization {value!r} is not a share >= 0")
    return min(float(value), 1.0)
