"""Right-sizing: the (instance type, market) with the least expected cost that fits the job and its deadline.

Expected cost = unit price x predicted runtime, plus for spot the expected work lost to interruptions.
Predicted runtime comes from the job's own recorded runs: on the same type, their median; on other types,
each run scaled by a throughput profile (relative speed of the two types); with no recorded runs, the
user's ``fallback_hours`` (on ``reference_type`` when given, scaled the same way). Pure: the caller passes
the catalog and the recorded runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from costaware.core.checkpoint_interval import mean_seconds_between_interruptions
from costaware.core.discounts import Discount, apply_discount, discount_for
from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.ledger import Market
from costaware.core.money import MICRO_USD
from costaware.core.prices import BURSTABLE, LEGACY, InstanceOffer, PriceCatalog, normalize_arch
from costaware.core.tuning.caps import positive_number

#: Mid-points of the Spot Instance Advisor's interruption ranges (shares of instances interrupted in a month).
INTERRUPTION_MIDPOINTS = {"<5%": 0.025, "5-10%": 0.075, "10-15%": 0.125, "15-20%": 0.175, ">20%": 0.25}


@dataclass(frozen=True, slots=True)
class RuntimeObservation:
    """One recorded run of the job: the instance type it ran on and how long it took."""

    instance_type: str
    hours: float


@dataclass(frozen=True, slots=True)
class ThroughputProfile:
    """How fast the job runs on each instance type, relative to the others.

    ``speeds`` gives measured relative speeds (e.g. from a benchmark: ``{"c5.xlarge": 1.0, "c5.4xlarge":
    3.2}``); once given, only the types listed have a speed (a measured figure and a count's are not on one
    scale). Without ``speeds``, a type's speed is ``count ** exponent`` where count is its vCPUs
    (``basis="vcpus"``, CPU-bound jobs) or GPUs (``basis="gpus"``); ``exponent`` below 1 says the job does
    not scale perfectly (0.0 says the job runs equally fast everywhere, e.g. single-threaded).
    """

    speeds: Mapping[str, float] = field(default_factory=dict)
    basis: str = "vcpus"
    exponent: float = 0.8

    def __post_init__(self) -> None:
        if self.basis not in ("vcpus", "gpus"):
            raise ConfigurationError(f"throughput basis must be 'vcpus' or 'gpus', got {self.basis!r}")
        if not math.isfinite(self.exponent) or not 0 <= self.exponent <= 2:
            raise ConfigurationError(f"throughput exponent must be between 0 and 2, got {self.exponent}")
        bad = {k: v for k, v in self.speeds.items() if not (math.isfinite(float(v)) and float(v) > 0)}
        if bad:
            raise ConfigurationError(f"throughput speeds must be positive numbers, got {bad}")

    def knows(self, instance_type: str) -> bool:
        """Whether the profile gives ``instance_type`` a speed: every type, unless ``speeds`` is given."""
        return not self.speeds or instance_type in self.speeds

    def speed(self, offer: InstanceOffer) -> float:
        """The job's relative speed on ``offer``'s type (0.0: it cannot run there).

        Raises:
            ConfigurationError: ``speeds`` is given and does not list the type.
        """
        if offer.instance_type in self.speeds:
            return float(self.speeds[offer.instance_type])
        if self.speeds:
            # Scaled by its vCPUs it would be on another scale than the measured figures: with
            # {"c5.xlarge": 1.0}, c5.2xlarge got 8 ** 0.8 = 5.3, five times c5.xlarge instead of 1.7.
            raise ConfigurationError(
                f"instance type {offer.instance_type!r} is not in throughput (which lists "
                f"{', '.join(sorted(self.speeds))}): give its relative speed too, or leave throughput out "
                f"to scale every type by its {self.basis}"
            )
        count = float(offer.vcpus if self.basis == "vcpus" else offer.gpus)
        if count <= 0:
            return 0.0  # a GPU job on a type without GPUs does not run at all
        return float(count**self.exponent)


@dataclass(frozen=True, slots=True)
class RightSizeJob:
    """What the job needs.

    Args:
        memory_gib: Memory the job needs; types with less are rejected.
        deadline_hours: Hours from now by which the job must finish (None: no deadline).
        min_gpus: GPUs the job needs.
        gpu_model: GPU model the job needs (None: any).
        min_vcpus: vCPUs the job needs.
        fallback_hours: Runtime to assume when the job has no recorded run anywhere.
        reference_type: The type ``fallback_hours`` was measured on (None: the same on every type).
        markets: Markets to consider.
        checkpoint_minutes: How often the job checkpoints (None: it does not; a spot interruption loses
            half the run on average).
        restart_minutes: Time to get a new spot instance and resume after an interruption.
        arch: Processor architecture the job needs: ``x86_64`` or ``arm64`` (None: any).
    """

    memory_gib: Decimal
    deadline_hours: float | None = None
    min_gpus: Decimal = Decimal(0)
    gpu_model: str | None = None
    min_vcpus: int = 0
    fallback_hours: float | None = None
    reference_type: str | None = None
    markets: tuple[Market, ...] = (Market.ON_DEMAND, Market.SPOT)
    checkpoint_minutes: float | None = None
    restart_minutes: float = 5.0
    arch: str | None = None

    def __post_init__(self) -> None:
        if self.arch is not None:
            object.__setattr__(self, "arch", normalize_arch(self.arch))
        if not self.memory_gib.is_finite() or self.memory_gib < 0:
            raise ConfigurationError(f"memory_gib must be a number >= 0, got {self.memory_gib}")
        if self.deadline_hours is not None and not (
            self.deadline_hours > 0 and math.isfinite(self.deadline_hours)
        ):
            raise ConfigurationError(
                f"deadline_hours must be a positive number of hours from now, got {self.deadline_hours}: "
                "a deadline in the past cannot be met"
            )
        if self.fallback_hours is not None and not (
            self.fallback_hours > 0 and math.isfinite(self.fallback_hours)
        ):
            raise ConfigurationError(f"fallback_hours must be > 0, got {self.fallback_hours}")
        if not self.markets:
            raise ConfigurationError("markets must name at least one of on_demand, spot")
        object.__setattr__(self, "markets", tuple(Market.parse(m) for m in self.markets))
        if Market.LOCAL in self.markets:
            raise ConfigurationError(
                "right-sizing chooses cloud instances: use markets on_demand and/or spot"
            )
        # A number given as text ("30" from a form) compared with 0 raised a bare TypeError.
        if self.checkpoint_minutes is not None:
            every = positive_number(self.checkpoint_minutes, "checkpoint_minutes", unit="minutes")
            object.__setattr__(self, "checkpoint_minutes", every)
        restart = positive_number(self.restart_minutes, "restart_minutes", allow_zero=True, unit="minutes")
        object.__setattr__(self, "restart_minutes", restart)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One (instance type, market) with its price, predicted runtime and expected cost."""

    instance_type: str
    market: Market
    region: str
    usd_per_hour: Decimal
    memory_gib: Decimal
    predicted_hours: float
    expected_hours: float
    expected_usd: Decimal
    runtime_basis: str

    def to_json(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "market": self.market.value,
            "region": self.region,
            "usd_per_hour": str(self.usd_per_hour),
            "memory_gib": str(self.memory_gib),
            "predicted_hours": round(self.predicted_hours, 4),
            "expected_hours": round(self.expected_hours, 4),
            "expected_usd": str(self.expected_usd),
            "runtime_basis": self.runtime_basis,
        }


@dataclass(frozen=True, slots=True)
class RightSizeDecision:
    """The choice, the next cheapest feasible candidates, the candidates rejected and why, and the reason."""

    choice: Candidate
    runners_up: tuple[Candidate, ...]
    rejected: tuple[tuple[str, str], ...]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            **self.choice.to_json(),
            "reason": self.reason,
            "runners_up": [c.to_json() for c in self.runners_up],
            "rejected": [{"candidate": name, "why": why} for name, why in self.rejected],
        }


def predict_hours(
    offer: InstanceOffer,
    observations: Sequence[RuntimeObservation],
    catalog: PriceCatalog,
    profile: ThroughputProfile,
    job: RightSizeJob,
) -> tuple[float, str] | None:
    """Predicted runtime of the job on ``offer``'s type and how it was predicted; None if it cannot run there.

    Raises:
        ConfigurationError: no recorded run can be scaled and the job has no ``fallback_hours``, or the
            profile's ``speeds`` leave out ``offer``'s type or ``job.reference_type``.
    """
    target_speed = profile.speed(offer)
    if target_speed <= 0:
        return None
    same = [o.hours for o in observations if o.instance_type == offer.instance_type]
    if same:
        return statistics.median(same), f"median of {len(same)} recorded run(s) on {offer.instance_type}"
    scaled, sources = [], set()
    for obs in observations:
        if not profile.knows(obs.instance_type):
            continue  # a run on a type the given speeds leave out: nothing to scale it by
        try:
            seen = catalog.offer(obs.instance_type, offer.region)
        except PriceNotFoundError:
            continue  # a type not sold in this region: its runs cannot be scaled by the catalog's sizes
        seen_speed = profile.speed(seen)
        if seen_speed > 0:
            scaled.append(obs.hours * seen_speed / target_speed)
            sources.add(obs.instance_type)
    if scaled:
        return (
            statistics.median(scaled),
            f"median of {len(scaled)} recorded run(s) on {', '.join(sorted(sources))}, scaled by throughput",
        )
    if job.fallback_hours is None:
        raise ConfigurationError(
            "the job has no recorded run on a type in the catalog"
            + (" that throughput lists" if profile.speeds else "")
            + " and no fallback_hours: give fallback_hours (the runtime on reference_type) until it has run "
            "once"
        )
    if job.reference_type is None:
        return job.fallback_hours, "fallback_hours (no recorded run; same on every type)"
    reference = catalog.offer(job.reference_type, offer.region)
    return (
        job.fallback_hours * profile.speed(reference) / target_speed,
        f"fallback_hours on {job.reference_type}, scaled by throughput (no recorded run)",
    )


def interruptions_per_hour(interruption_range: str, run_hours: float | None = None) -> float:
    """Hazard rate of a spot interruption from the advisor's range, read as the checkpoint interval reads it.

    The range is the share of the type's spot instances interrupted over the trailing month (taken at its
    mid-point here: an expected cost, not a bound). An instance is exposed for as long as it runs,
    ``run_hours`` (at most the month; None: the month), so the rate is ``-ln(1 - share) / run_hours``:
    ``"<5%"`` over a 2 h run about 0.0127/h, over the month about 3.5e-5/h. See
    ``core.checkpoint_interval.seconds_between_interruptions`` for why.
    """
    share = INTERRUPTION_MIDPOINTS.get(interruption_range.strip())
    if share is None:
        raise ConfigurationError(
            f"unknown interruption range {interruption_range!r}: "
            f"expected one of {', '.join(INTERRUPTION_MIDPOINTS)}"
        )
    if run_hours is not None and not (math.isfinite(run_hours) and run_hours > 0):
        raise ConfigurationError(f"the run's hours must be > 0 to weigh its interruptions, got {run_hours!r}")
    return 3600 / mean_seconds_between_interruptions(share, None if run_hours is None else run_hours * 3600)


def spot_expected_hours(hours: float, rate_per_hour: float, job: RightSizeJob) -> float:
    """Runtime on spot including the expected rework and restarts after interruptions.

    Each interruption loses half a checkpoint interval of work (half the run without checkpoints) and
    ``restart_minutes``; interruptions arrive at ``rate_per_hour`` over the run (a Poisson process).
    """
    lost = hours / 2 if job.checkpoint_minutes is None else min(job.checkpoint_minutes / 60 / 2, hours / 2)
    return hours + rate_per_hour * hours * (lost + job.restart_minutes / 60)


def right_size(
    catalog: PriceCatalog,
    job: RightSizeJob,
    *,
    region: str,
    observations: Iterable[RuntimeObservation] = (),
    profile: ThroughputProfile | None = None,
    instance_types: Sequence[str] | None = None,
    runners_up: int = 3,
    discounts: Sequence[Discount] = (),
    team: str | None = None,
) -> RightSizeDecision:
    """The cheapest expected (instance type, market) in ``region`` that fits in memory and meets the deadline.

    Args:
        catalog: Prices and sizes.
        job: What the job needs.
        region: Where it runs.
        observations: The job's recorded runs.
        profile: Relative speed of types (default: by vCPUs, exponent 0.8).
        instance_types: Only these types (default: every type in the region).
        runners_up: How many next-cheapest feasible candidates to return.
        discounts: The ``[costaware] discounts`` rules: on-demand candidates are priced after the largest
            that applies to their family or ``team``, as the ledger bills them (spot never is).
        team: The run's ``team`` tag.

    Raises:
        ConfigurationError: no candidate fits and meets the deadline (the message says what came closest),
            or nothing can predict the runtime.
        PriceNotFoundError: unknown region or instance type.
    """
    profile = profile or ThroughputProfile()
    runs = list(observations)
    offers = catalog.instances(
        region=region, min_vcpus=job.min_vcpus, min_gpus=job.min_gpus, gpu_model=job.gpu_model, arch=job.arch
    )
    if instance_types is not None:
        wanted = set(instance_types)
        for name in sorted(wanted - {o.instance_type for o in offers}):
            catalog.offer(name, region)  # unknown names raise with a suggestion
        offers = [o for o in offers if o.instance_type in wanted]
    feasible: list[Candidate] = []
    rejected: list[tuple[str, str]] = []
    fastest: tuple[float, str] | None = None
    for offer in offers:
        if not offer.specs_known:
            rejected.append((offer.instance_type, "the price snapshot has no vCPU and memory figures for it"))
            continue
        if instance_types is None and BURSTABLE.match(offer.instance_type):
            # Its CPU credits run out in a sustained training (list it in instance_types to consider it).
            rejected.append(
                (offer.instance_type, "burstable CPU (t family): throttled once its credits run out")
            )
            continue
        if instance_types is None and LEGACY.match(offer.instance_type):
            rejected.append((offer.instance_type, "a Xen-era family (2006-2015): runtimes do not carry over"))
            continue
        if offer.memory_gib < job.memory_gib:
            rejected.append((offer.instance_type, f"{offer.memory_gib} GiB < {job.memory_gib} GiB needed"))
            continue
        if not profile.knows(offer.instance_type):
            rejected.append(
                (offer.instance_type, "not in throughput: give its relative speed to consider it")
            )
            continue
        predicted = predict_hours(offer, runs, catalog, profile, job)
        if predicted is None:
            rejected.append((offer.instance_type, f"cannot run the job ({profile.basis} = 0)"))
            continue
        hours, basis = predicted
        for market in job.markets:
            name = f"{offer.instance_type} {market.value}"
            if market is Market.SPOT:
                try:
                    advice = catalog.spot_advice(offer.instance_type, region)
                except PriceNotFoundError:
                    rejected.append((name, "no spot advice for this type and region"))
                    continue
                price = catalog.spot_estimate_usd_per_hour(offer.instance_type, region)
                rate = interruptions_per_hour(advice.interruption_range, hours)
                expected = spot_expected_hours(hours, rate, job)
            else:
                discount = discount_for(discounts, offer.instance_type, {"team": team} if team else None)
                price, expected = apply_discount(offer.usd_per_hour, discount), hours
            if fastest is None or expected < fastest[0]:
                fastest = (expected, name)
            if job.deadline_hours is not None and expected > job.deadline_hours:
                rejected.append(
                    (name, f"needs {expected:.2f} h, misses the {job.deadline_hours:.2f} h deadline")
                )
                continue
            cost = (price * Decimal(str(expected))).quantize(MICRO_USD)
            feasible.append(
                Candidate(
                    offer.instance_type, market, region, price, offer.memory_gib, hours, expected, cost, basis
                )
            )
    if not feasible:
        closest = (
            f"; the fastest candidate, {fastest[1]}, needs {fastest[0]:.2f} h" if fastest is not None else ""
        )
        needs = [f"{job.memory_gib} GiB"]
        needs += [f"{job.min_vcpus} vCPUs"] if job.min_vcpus else []
        needs += (
            [f"{job.min_gpus} GPU(s)" + (f" {job.gpu_model}" if job.gpu_model else "")]
            if job.min_gpus
            else []
        )
        levers = ["move the deadline"] if job.deadline_hours is not None else []
        levers += ["lower memory_gib"] + (["min_vcpus"] if job.min_vcpus else [])
        levers += ["give more types' speeds in throughput"] if profile.speeds else []
        if job.gpu_model:
            levers.append("check gpu_model ('NVIDIA T4' or 'T4'; `costaware prices list --gpu-model NAME`)")
        if job.arch:
            levers.append(f"pass arch= for another architecture than {job.arch}")
        raise ConfigurationError(
            f"no instance in {region} with >= {' and >= '.join(needs)}"
            + (f" on {job.arch}" if job.arch else "")
            + (f" finishes within {job.deadline_hours:.2f} h" if job.deadline_hours is not None else " fits")
            + f"{closest}: {', '.join(levers)}, or widen instance_types"
        )
    feasible.sort(key=lambda c: (c.expected_usd, c.expected_hours, c.instance_type, c.market.value))
    best, rest = feasible[0], feasible[1 : 1 + runners_up]
    reason = (
        f"{best.instance_type} {best.market.value}: expected ${best.expected_usd} "
        f"({best.usd_per_hour}/h x {best.expected_hours:.2f} h; {best.runtime_basis})"
        + (f", finishes within the {job.deadline_hours:.2f} h deadline" if job.deadline_hours else "")
        + f", {best.memory_gib} GiB >= {job.memory_gib} GiB"
    )
    if rest:
        nxt = rest[0]
        reason += f"; next cheapest {nxt.instance_type} {nxt.market.value} at ${nxt.expected_usd}"
    return RightSizeDecision(best, tuple(rest), tuple(rejected), reason)


def observations_from_entries(entries: Iterable[Mapping[str, Any]], task_id: str) -> list[RuntimeObservation]:
    """Recorded runs of ``task_id`` from ledger entries: successful, actual compute tries with a runtime."""
    out = []
    for row in entries:
        if (
            row.get("task_id") == task_id
            and row.get("kind") == "compute"
            and row.get("outcome") == "success"
            and not row.get("estimated")
            and row.get("instance_type")
            and row.get("unit", "hour") == "hour"
            and row.get("quantity") is not None
            and Decimal(str(row["quantity"])) > 0
        ):
            out.append(RuntimeObservation(str(row["instance_type"]), float(row["quantity"])))
    return out
