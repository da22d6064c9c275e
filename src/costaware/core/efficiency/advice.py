"""Right-sizing advice: the cheapest catalog type that would have fit a task's measured tries.

The saving is priced per run on both types at the market the task ran on, and per month at the task's run
frequency (from its schedule, or the runs seen when it has none). On-demand prices are those after the
``[costaware] discounts`` that apply to each type and the task's team, as the ledger bills them, so a
family's savings plan can make its larger type the cheaper one. Pure: callers pass the catalog, the
measurements and the discount rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from costaware.core.discounts import Discount, apply_discount, discount_for
from costaware.core.efficiency.measurement import Measurement, by_task, recency
from costaware.core.efficiency.requirements import Requirements, measured_requirements
from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.ledger import Market
from costaware.core.money import MICRO_USD, format_usd
from costaware.core.prices import BURSTABLE, LEGACY, InstanceOffer, PriceCatalog

DAYS_PER_MONTH = 730 / 24


@dataclass(frozen=True, slots=True)
class Advice:
    """A cheaper instance type for one task, and what it saves.

    ``saving_per_run_usd`` prices the task's mean hours per run on both types at the market it ran on;
    ``monthly_saving_usd`` multiplies that by ``runs_per_month`` (its source in ``frequency_basis``).
    """

    dag_id: str
    task_id: str
    current: InstanceOffer
    suggested: InstanceOffer
    market: Market
    requirements: Requirements
    hours_per_run: float
    current_usd_per_run: Decimal
    suggested_usd_per_run: Decimal
    runs_per_month: float
    frequency_basis: str

    @property
    def saving_per_run_usd(self) -> Decimal:
        return self.current_usd_per_run - self.suggested_usd_per_run

    @property
    def monthly_saving_usd(self) -> Decimal:
        return (self.saving_per_run_usd * Decimal(str(round(self.runs_per_month, 4)))).quantize(MICRO_USD)

    def reason(self) -> str:
        c, s = self.current, self.suggested
        return (
            f"{self.dag_id}.{self.task_id}: {self.requirements.describe()}; it runs on {c.instance_type} "
            f"({c.vcpus} vCPUs, {c.memory_gib} GiB). {s.instance_type} ({s.vcpus} vCPUs, {s.memory_gib} GiB) "
            f"fits: {format_usd(self.suggested_usd_per_run)} instead of "
            f"{format_usd(self.current_usd_per_run)} per run, saving {format_usd(self.monthly_saving_usd)}"
            f"/month at {self.runs_per_month:g} runs/month ({self.frequency_basis})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "current_instance_type": self.current.instance_type,
            "suggested_instance_type": self.suggested.instance_type,
            "region": self.current.region,
            "market": self.market.value,
            "needed_memory_gib": str(self.requirements.memory_gib),
            "needed_vcpus": self.requirements.vcpus,
            "peak_memory_gib": round(self.requirements.peak_memory_gib, 4),
            "peak_cores_used": round(self.requirements.peak_cores_used, 4),
            "tries": self.requirements.tries,
            "hours_per_run": round(self.hours_per_run, 6),
            "current_usd_per_run": str(self.current_usd_per_run),
            "suggested_usd_per_run": str(self.suggested_usd_per_run),
            "saving_per_run_usd": str(self.saving_per_run_usd),
            "runs_per_month": round(self.runs_per_month, 4),
            "frequency_basis": self.frequency_basis,
            "monthly_saving_usd": str(self.monthly_saving_usd),
            "reason": self.reason(),
        }


def hourly_price(
    catalog: PriceCatalog,
    offer: InstanceOffer,
    market: Market,
    discounts: Sequence[Discount] = (),
    team: str | None = None,
) -> Decimal:
    """The type's price on ``market``: the spot advisor's estimate for spot (on-demand when it has none).

    On-demand, the largest of ``discounts`` that applies to the type or ``team`` is taken off, as the
    ledger prices an on-demand try; spot is never discounted there either.
    """
    if market is Market.SPOT:
        try:
            return catalog.spot_estimate_usd_per_hour(offer.instance_type, offer.region)
        except PriceNotFoundError:
            return offer.usd_per_hour
    tags = {"team": team} if team else None
    return apply_discount(offer.usd_per_hour, discount_for(discounts, offer.instance_type, tags))


def advise(
    catalog: PriceCatalog,
    measurements: Sequence[Measurement],
    *,
    runs_per_month: float | None = None,
    min_tries: int = 3,
    memory_margin: float = 0.25,
    cpu_margin: float = 0.25,
    allow_burstable: bool = False,
    discounts: Sequence[Discount] = (),
) -> Advice | None:
    """The cheapest catalog type that fits a task's measured tries, when cheaper than its current type.

    The task's current type, region and market are those of its newest try. Candidates have at least the
    measured memory and busy cores (plus margins), no fewer GPUs than the current type (and none when it has
    none), the current type's processor architecture (a task measured on x86_64 may not run on arm64: its
    wheels or container image may not exist there), and are not burstable unless ``allow_burstable`` nor of
    a Xen-era family (``LEGACY``). The runtime per run is assumed unchanged: the candidate has every core the
    task kept busy, of a current generation.

    Args:
        catalog: Prices and sizes.
        measurements: Successful tries of one task (of one DAG), any order.
        runs_per_month: How often the task runs; None: the newest schedule-derived frequency measured, else
            the frequency its runs were seen at.
        min_tries: Fewer measured tries than this: no advice (the sample is too small).
        memory_margin: Headroom added to the peak memory (0.25 = 25 %).
        cpu_margin: Headroom added to the busy cores.
        allow_burstable: Also suggest burstable (``t*``) types.
        discounts: The ``[costaware] discounts`` rules; on-demand prices are compared after them.

    Returns:
        The advice, or None when too few tries, the instance is local or unknown, or nothing cheaper fits.

    Raises:
        ConfigurationError: measurements of several tasks, a bad margin, ``min_tries`` < 1 or a negative
            ``runs_per_month``.
    """
    if min_tries < 1:
        raise ConfigurationError(f"min_tries must be at least 1, got {min_tries}")
    if runs_per_month is not None and not (math.isfinite(runs_per_month) and runs_per_month >= 0):
        raise ConfigurationError(f"runs_per_month must be a number >= 0, got {runs_per_month}")
    tasks = {(m.dag_id, m.task_id) for m in measurements}
    if len(tasks) > 1:
        raise ConfigurationError(f"advise() takes the tries of one task, got {sorted(tasks)}")
    requirements = measured_requirements(measurements, memory_margin=memory_margin, cpu_margin=cpu_margin)
    if len(measurements) < min_tries:
        return None
    newest = max(measurements, key=recency)
    if not newest.instance_type or not newest.region:
        return None
    market = Market.parse(newest.market or "on_demand")
    if market is Market.LOCAL:
        return None  # the team's own hardware: nothing to buy smaller
    try:
        current = catalog.offer(newest.instance_type, newest.region)
    except PriceNotFoundError:
        return None
    same = [m for m in measurements if m.instance_type == current.instance_type]
    runs = {m.run_id for m in same}
    hours_per_run = sum(m.wall_seconds for m in same) / 3600 / len(runs)
    rate_now = hourly_price(catalog, current, market, discounts, newest.team)
    best: tuple[Decimal, InstanceOffer] | None = None
    for offer in catalog.instances(
        region=current.region,
        min_vcpus=requirements.vcpus,
        min_memory_gib=requirements.memory_gib,
        min_gpus=current.gpus,
        gpu_model=current.gpu_model or None,
        arch=current.arch or None,
    ):
        if offer.instance_type == current.instance_type or (current.gpus == 0 and offer.gpus > 0):
            continue
        if not allow_burstable and BURSTABLE.match(offer.instance_type):
            continue
        if LEGACY.match(offer.instance_type):  # a decade-old core: the measured runtime does not carry over
            continue
        rate = hourly_price(catalog, offer, market, discounts, newest.team)
        if best is None or (rate, offer.instance_type) < (best[0], best[1].instance_type):
            best = (rate, offer)
    if best is None or best[0] >= rate_now:
        return None
    frequency, basis = _frequency(measurements, runs_per_month)
    hours = Decimal(str(round(hours_per_run, 9)))
    return Advice(
        dag_id=newest.dag_id,
        task_id=newest.task_id,
        current=current,
        suggested=best[1],
        market=market,
        requirements=requirements,
        hours_per_run=hours_per_run,
        current_usd_per_run=(rate_now * hours).quantize(MICRO_USD),
        suggested_usd_per_run=(best[0] * hours).quantize(MICRO_USD),
        runs_per_month=frequency,
        frequency_basis=basis,
    )


def _frequency(measurements: Sequence[Measurement], given: float | None) -> tuple[float, str]:
    if given is not None:
        return given, "given"
    scheduled = [m for m in measurements if m.runs_per_month is not None]
    if scheduled:
        return float(max(scheduled, key=recency).runs_per_month or 0.0), "from the DAG's schedule"
    # Unscheduled (manual or Asset-triggered): runs seen per month, over at least one month, so a burst
    # of runs on one day is not taken for a daily habit.
    times = [m.measured_at for m in measurements if m.measured_at is not None]
    days = (max(times) - min(times)).total_seconds() / 86400 if times else 0.0
    runs = len({m.run_id for m in measurements})
    return runs * DAYS_PER_MONTH / max(days, DAYS_PER_MONTH), "runs seen; the DAG has no schedule"


def advise_tasks(
    catalog: PriceCatalog,
    measured: Sequence[Measurement],
    *,
    runs_per_month: float | None = None,
    min_tries: int = 3,
    memory_margin: float = 0.25,
    discounts: Sequence[Discount] = (),
) -> list[Advice]:
    """Advice for every task in ``measured`` that has enough tries and a cheaper fit, largest saving first."""
    found = []
    for tries in by_task(measured).values():
        advice = advise(
            catalog,
            tries,
            runs_per_month=runs_per_month,
            min_tries=min_tries,
            memory_margin=memory_margin,
            discounts=discounts,
        )
        if advice is not None:
            found.append(advice)
    return sorted(found, key=lambda a: (a.monthly_saving_usd, a.task_id), reverse=True)
