"""The spot tuning plan's rules: sample, size to the caps, prune, promote within the caps, price the saving.

The plan (``dags/spot_tuning.py``): every trial is warmed up for ``warmup_epochs``; the top ``keep_fraction``
of the warm-ups by a loss (lower is better) is promoted to ``full_epochs``, continuing from its warm-up; the
study never plans or promotes past a dollar cap and a GPU-hour cap. Each stage of a trial may cost up to
``overrun_factor`` times its estimate and is stopped there (its ``max_usd``), and that much is reserved in the
study's budget before it starts: a stage that runs long (a slow epoch, preemptions) cannot take the study
past its caps. These functions decide, from plain facts, how many trials fit, which warm-ups are promoted
and what training every trial in full would have cost; reading prices and the ledger, and reserving, is
:mod:`costaware.training.spot_tuning`'s.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import ROUND_CEILING, Decimal
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.money import parse_usd

log = logging.getLogger(__name__)

#: The kinds of a search space entry: log-uniform floats, uniform floats, one of the values.
SPACE_KINDS = ("log", "uniform", "choice")
ZERO = Decimal(0)
#: The most ``overrun_factor`` may be: beyond it a cap no longer says what a trial should cost.
MAX_OVERRUN_FACTOR = 10.0


def sample_trials(
    space: Mapping[str, tuple[str, Sequence[Any]]], count: int, seed: int
) -> list[dict[str, Any]]:
    """``count`` configurations of ``space`` drawn with a generator seeded by ``seed``.

    Trial ``n`` gets the same configuration whatever ``count`` is, so a smaller study runs a prefix. A
    ``uniform`` value is rounded to 3 decimals, a ``log`` one to 3 significant digits, then kept within the
    range.

    Args:
        space: Name -> (kind, values): ``("log", (low, high))``, ``("uniform", (low, high))`` or
            ``("choice", (a, b, ...))``.
        count: How many configurations.
        seed: Seeds the generator.

    Raises:
        ConfigurationError: an unknown kind, a range that is not (low, high) with 0 < low <= high for
            ``log``, or one narrower than the rounding (but not a single value, low == high).
    """
    for name, (kind, values) in space.items():
        if kind not in SPACE_KINDS:
            raise ConfigurationError(f"search space {name!r} has kind {kind!r}: use one of {SPACE_KINDS}")
        if kind != "choice" and (
            len(values) != 2 or values[0] > values[1] or (kind == "log" and values[0] <= 0)
        ):
            raise ConfigurationError(
                f"search space {name!r} ({kind}) has range {tuple(values)!r}: "
                "give (low, high) with low <= high" + (" and low > 0" if kind == "log" else "")
            )
        if kind == "choice" and not values:
            raise ConfigurationError(f"search space {name!r} has no values to choose from")
        if kind != "choice" and 0 < values[1] - values[0] < _rounding_step(kind, values[0]):
            step = _rounding_step(kind, values[0])
            raise ConfigurationError(
                f"search space {name!r} ({kind}) has range {tuple(values)!r}, narrower than the {step:g} its "
                "values are rounded to (uniform: 3 decimals, log: 3 significant digits), so every trial "
                "would get the same value: widen the range"
                + (", or make it log (rounded to 3 significant digits)" if kind == "uniform" else "")
            )
    rng = random.Random(seed)
    trials = []
    for _ in range(count):
        hparams: dict[str, Any] = {}
        for name, (kind, values) in space.items():
            if kind == "log":
                drawn = float(f"{math.exp(rng.uniform(*map(math.log, values))):.3g}")
            elif kind == "uniform":
                drawn = round(rng.uniform(*values), 3)
            else:
                hparams[name] = rng.choice(values)
                continue
            # Rounding can step past an end (0.0012349 -> 0.00123 below a low of 0.00123456).
            hparams[name] = min(max(drawn, values[0]), values[1])
        trials.append(hparams)
    return trials


def _rounding_step(kind: str, low: float) -> float:
    """The spacing of the rounded values near ``low``: 0.001 (uniform), or 3 significant digits' (log)."""
    if kind == "uniform":
        return 1e-3
    return 10.0 ** (math.floor(math.log10(low)) - 2)


def kept_count(trials: int, keep_fraction: float) -> int:
    """How many of ``trials`` warm-ups survive the prune: the top ``keep_fraction``, at least one."""
    return max(1, math.floor(trials * keep_fraction + 1e-9)) if trials else 0


@dataclass(frozen=True, slots=True)
class StageCost:
    """Dollars and GPU-hours: of one stage of a trial, of what a study spent, or its caps."""

    usd: Decimal
    gpu_hours: Decimal

    def __add__(self, other: StageCost) -> StageCost:
        return StageCost(self.usd + other.usd, self.gpu_hours + other.gpu_hours)

    def times(self, count: int | Decimal) -> StageCost:
        """``count`` of it."""
        return StageCost(self.usd * count, self.gpu_hours * count)

    def fits(self, caps: StageCost) -> bool:
        """Whether both figures are within ``caps``."""
        return self.usd <= caps.usd and self.gpu_hours <= caps.gpu_hours


@dataclass(frozen=True, slots=True)
class SpotTuningSettings:
    """The plan's settings, validated: the caps, the trial count, the epochs, the share promoted.

    Build it with :meth:`create` from user input (params, strings from templates).
    """

    max_usd: Decimal
    max_gpu_hours: Decimal
    max_trials: int
    warmup_epochs: int
    full_epochs: int
    keep_fraction: float
    epoch_minutes: float
    #: A stage may cost this many times its estimate before it is stopped; that much is reserved for it.
    overrun_factor: float = 1.5

    @classmethod
    def create(
        cls,
        *,
        max_usd: object,
        max_gpu_hours: object,
        max_trials: object,
        warmup_epochs: object,
        full_epochs: object,
        keep_fraction: object = 0.5,
        epoch_minutes: object = 1.0,
        overrun_factor: object = 1.5,
    ) -> SpotTuningSettings:
        """Settings from user input, with errors that name the bad value and what to do.

        Raises:
            ConfigurationError: a cap that is not a finite number above 0; ``max_trials`` or an epoch count
                below 1; ``full_epochs`` not above ``warmup_epochs``; ``keep_fraction`` outside (0, 1];
                ``epoch_minutes`` not a finite number above 0; ``overrun_factor`` outside [1, 10].
        """
        usd = _cap(max_usd, "max_usd", "the study's dollar cap, e.g. 100")
        gpu_hours = _cap(max_gpu_hours, "max_gpu_hours", "the study's GPU-hour cap, e.g. 20")
        trials = _whole(max_trials, "max_trials", "how many trials the study samples at most, e.g. 40")
        warm = _whole(
            warmup_epochs, "warmup_epochs", "the epochs every trial trains before the prune, e.g. 3"
        )
        full = _whole(full_epochs, "full_epochs", "a promoted trial's epochs in all, e.g. 15")
        if full <= warm:
            raise ConfigurationError(
                f"full_epochs {full} must be more than warmup_epochs {warm}: a promotion adds epochs; "
                "raise full_epochs or lower warmup_epochs"
            )
        share = _number(keep_fraction)
        if not 0 < share <= 1:
            raise ConfigurationError(
                f"keep_fraction must be more than 0 and at most 1, got {keep_fraction!r}: it is the share of "
                "warm-ups promoted, e.g. 0.5 to prune the bottom half"
            )
        minutes = _number(epoch_minutes)
        if not (math.isfinite(minutes) and minutes > 0):
            raise ConfigurationError(
                f"epoch_minutes must be a number of minutes above 0, got {epoch_minutes!r}: give an estimate "
                "of one epoch on the instance type"
            )
        overrun = _number(overrun_factor)
        if not 1 <= overrun <= MAX_OVERRUN_FACTOR:
            raise ConfigurationError(
                f"overrun_factor must be from 1 to {MAX_OVERRUN_FACTOR:g}, got {overrun_factor!r}: it is how "
                "many times its estimate a trial's stage may cost before it is stopped, e.g. 1.5"
            )
        return cls(usd, gpu_hours, trials, warm, full, share, minutes, overrun)

    @property
    def added_epochs(self) -> int:
        """The epochs a promotion adds to its warm-up's."""
        return self.full_epochs - self.warmup_epochs

    @property
    def caps(self) -> StageCost:
        return StageCost(self.max_usd, self.max_gpu_hours)

    def stage_cap(
        self, estimate: StageCost, *, floor_usd: Decimal = ZERO, gpu_hours_per_usd: Decimal | None = None
    ) -> StageCost:
        """What a stage estimated at ``estimate`` may cost before it is stopped.

        Dollars: ``overrun_factor`` times the estimate's, and at least ``floor_usd`` (the least a stage's cap
        may be). GPU-hours: what those dollars buy at ``gpu_hours_per_usd``, the GPUs over the lowest price a
        stage is billed at (its ``max_usd`` stops it by dollars, so a stage billed at that price runs that
        long); without it, ``overrun_factor`` times the estimate's.
        """
        factor = Decimal(repr(self.overrun_factor))
        # To the micro-unit the ledger reserves and max_usd states, rounded up: the figure sized is the one
        # reserved and capped at.
        usd = _micro_up(max(estimate.usd * factor, floor_usd))
        gpu_hours = usd * gpu_hours_per_usd if gpu_hours_per_usd is not None else estimate.gpu_hours * factor
        return StageCost(usd, _micro_up(gpu_hours))

    def stage_costs(self, *, usd_per_hour: object, gpus: object) -> tuple[StageCost, StageCost]:
        """Estimated cost of one warm-up and of one promotion's added epochs at a price and GPU count."""
        price, gpu_count = Decimal(str(usd_per_hour)), Decimal(str(gpus))
        minutes = Decimal(repr(self.epoch_minutes))

        def epochs(count: int) -> StageCost:
            hours = count * minutes / 60  # multiplied first: 3 x 4 / 60 is exactly 0.2
            return StageCost(hours * price, hours * gpu_count)

        return epochs(self.warmup_epochs), epochs(self.added_epochs)


@dataclass(frozen=True, slots=True)
class SpotPlan:
    """How many trials the study runs and promotes, what each stage is expected to cost and its cap."""

    trials: int
    kept: int
    warmup: StageCost
    promotion: StageCost
    #: What a warm-up may cost before it is stopped (reserved for each before any starts).
    warmup_cap: StageCost
    #: What a promotion may cost, as planned (``select`` caps each from its own warm-up's bill).
    promotion_cap: StageCost

    @property
    def total(self) -> StageCost:
        """Every warm-up as expected and every expected promotion at its cap: what the plan holds to."""
        return self.warmup.times(self.trials) + self.promotion_cap.times(self.kept)

    def describe(self, settings: SpotTuningSettings) -> str:
        """One line: how many trials fit the caps, and what each stage is expected to cost and may cost."""
        return (
            f"{self.trials} of {settings.max_trials} trials fit ${settings.max_usd} and "
            f"{settings.max_gpu_hours} GPU-hours: warm-up ${self.warmup.usd:.4f} each (stopped at "
            f"${self.warmup_cap.usd:.4f}), promotion ${self.promotion.usd:.4f} each (stopped at "
            f"${self.promotion_cap.usd:.4f}), {self.kept} promoted"
        )


def gpu_hours_per_usd(gpus: object, usd_per_hour: object) -> Decimal | None:
    """The GPU-hours a dollar buys at ``usd_per_hour`` (None at a price of 0: dollars bound no hours)."""
    price = Decimal(str(usd_per_hour))
    return Decimal(str(gpus)) / price if price > 0 else None


def study_size(
    settings: SpotTuningSettings,
    warmup: StageCost,
    warmup_cap: StageCost,
    promotion_cap: StageCost,
) -> int:
    """The most trials (up to ``max_trials``) the caps hold, or 0.

    Two conditions, each on both caps: every warm-up at its cap at once (all are reserved before any
    starts), and every warm-up as estimated plus every expected promotion at its cap (a promotion is
    reserved at its cap once the warm-ups are billed).
    """
    for trials in range(settings.max_trials, 0, -1):
        kept = kept_count(trials, settings.keep_fraction)
        if warmup_cap.times(trials).fits(settings.caps) and (
            warmup.times(trials) + promotion_cap.times(kept)
        ).fits(settings.caps):
            return trials
    return 0


def plan_study(
    settings: SpotTuningSettings,
    *,
    usd_per_hour: object,
    gpus: object,
    on: str = "",
    floor_usd: Decimal = ZERO,
) -> SpotPlan:
    """The study's plan at a trial's price and GPU count.

    Args:
        settings: The caps, trials and epochs.
        usd_per_hour: A trial's price (the lowest it is billed at: its caps' GPU-hours are what they buy).
        gpus: A trial's GPUs (GPU-hours are billed hours x GPUs).
        on: What a trial runs on, for the error (``"spot g5.xlarge"``).
        floor_usd: The least a stage's cap may be (what a job needs to get going).

    Raises:
        ConfigurationError: not even one warm-up and its promotion fit the caps.
    """
    warmup, promotion = settings.stage_costs(usd_per_hour=usd_per_hour, gpus=gpus)
    per_usd = gpu_hours_per_usd(gpus, usd_per_hour)
    warmup_cap = settings.stage_cap(warmup, floor_usd=floor_usd, gpu_hours_per_usd=per_usd)
    promotion_cap = settings.stage_cap(promotion, floor_usd=floor_usd, gpu_hours_per_usd=per_usd)
    trials = study_size(settings, warmup, warmup_cap, promotion_cap)
    if trials == 0:
        one = warmup + promotion
        # The least caps that hold one trial: its warm-up's cap, and the warm-up plus the promotion's cap.
        least = StageCost(
            max(warmup_cap.usd, warmup.usd + promotion_cap.usd),
            max(warmup_cap.gpu_hours, warmup.gpu_hours + promotion_cap.gpu_hours),
        )
        raise ConfigurationError(
            f"one warm-up and its promotion need an estimated ${one.usd:.4f} and {one.gpu_hours:.4f} "
            "GPU-hours"
            + (f" on {on}" if on else "")
            + f"; at overrun_factor {settings.overrun_factor:g} a warm-up may cost up to "
            f"${warmup_cap.usd:.4f} and {warmup_cap.gpu_hours:.4f} GPU-hours and a promotion up to "
            f"${promotion_cap.usd:.4f} and {promotion_cap.gpu_hours:.4f} before it is stopped; the caps are "
            f"${settings.max_usd} and {settings.max_gpu_hours} GPU-hours, and one trial needs caps of at "
            f"least ${_up(least.usd, 4)} and {_up(least.gpu_hours, 4)} GPU-hours: raise the cap that is "
            "short, or lower the epochs"
        )
    kept = kept_count(trials, settings.keep_fraction)
    return SpotPlan(trials, kept, warmup, promotion, warmup_cap, promotion_cap)


@dataclass(frozen=True, slots=True)
class Warmup:
    """A finished warm-up: its loss (lower is better) and what it was billed."""

    trial: int
    loss: float
    usd: Decimal
    gpu_hours: Decimal
    version: str = ""


@dataclass(frozen=True, slots=True)
class PromotionDecision:
    """Whether a warm-up is promoted; if so its estimated cost and its cap, else why not."""

    trial: int
    promoted: bool
    reason: str
    estimate: StageCost = StageCost(ZERO, ZERO)
    #: What the promoted run may cost before it is stopped: what is reserved for it, its ``max_usd``.
    cap: StageCost = StageCost(ZERO, ZERO)

    def stopped(self, reason: str) -> PromotionDecision:
        """This decision turned into a refusal (a reservation the ledger refused)."""
        return replace(self, promoted=False, reason=reason)


def rank(warmups: Iterable[Warmup]) -> list[Warmup]:
    """Best first: lowest loss, then lowest trial number; a loss that is not finite (nan, inf) last."""
    # A NaN compares false both ways, so left in the key it would scramble the order around it.
    return sorted(
        warmups, key=lambda w: (not math.isfinite(w.loss), w.loss if math.isfinite(w.loss) else 0, w.trial)
    )


def decide_promotions(
    ranked: Sequence[Warmup],
    *,
    keep: int,
    spent: StageCost,
    settings: SpotTuningSettings,
    floor_usd: Decimal = ZERO,
    gpu_hours_per_usd: Decimal | None = None,
) -> list[PromotionDecision]:
    """One decision per warm-up of ``ranked`` (best first), in its order.

    A warm-up below the top ``keep`` is pruned, and one whose loss is not finite (it diverged) is never
    promoted. One in the top ``keep`` is promoted while what was spent plus
    the promotions so far plus its own, each at its cap, stays within both caps; the first that does not fit
    is stopped by the cap, and so is every one ranked below it (as ``reserve_promotions`` stops at the
    ledger's first refusal): a worse trial whose promotion costs less is not promoted in a better one's
    place. A promotion is estimated from its warm-up's billed cost per epoch (startup included, so on the
    high side) and capped by ``settings.stage_cap`` (with ``floor_usd`` and ``gpu_hours_per_usd``).
    """
    decisions = []
    total, caps = spent, settings.caps
    per_epoch = Decimal(settings.added_epochs) / settings.warmup_epochs
    stopped = ""  # why the promotions stopped: the first warm-up whose promotion did not fit
    for place, warmup in enumerate(ranked):
        if place >= keep:
            why = f"pruned: rank {place + 1} of {len(ranked)}, {keep} kept"
            decisions.append(PromotionDecision(warmup.trial, False, why))
            continue
        if not math.isfinite(warmup.loss):
            why = f"not promoted: its loss is {warmup.loss}, not a finite number (the training diverged)"
            decisions.append(PromotionDecision(warmup.trial, False, why))
            continue
        estimate = StageCost(warmup.usd * per_epoch, warmup.gpu_hours * per_epoch)
        cap = settings.stage_cap(estimate, floor_usd=floor_usd, gpu_hours_per_usd=gpu_hours_per_usd)
        if stopped:
            decisions.append(PromotionDecision(warmup.trial, False, stopped, estimate, cap))
            continue
        after = total + cap
        if not after.fits(caps):
            why = (
                f"stopped by the cap: ${after.usd:.4f} of ${caps.usd}, {after.gpu_hours:.4f} of "
                f"{caps.gpu_hours} GPU-hours with it"
            )
            decisions.append(PromotionDecision(warmup.trial, False, why, estimate, cap))
            stopped = (
                f"stopped by the cap: trial {warmup.trial}, ranked above it, did not fit; the promotions "
                "stop at the first that does not"
            )
            log.info(
                "promotions stop at trial %d (rank %d of %d, %s): %d more of the top %d, ranked below it, "
                "are not promoted",
                warmup.trial,
                place + 1,
                len(ranked),
                why,
                max(min(keep, len(ranked)) - place - 1, 0),
                keep,
            )
            continue
        total = after
        reason = f"promoted (est. ${estimate.usd:.4f}, stopped at ${cap.usd:.4f})"
        decisions.append(PromotionDecision(warmup.trial, True, reason, estimate, cap))
    return decisions


def _up(value: Decimal, places: int) -> Decimal:
    """``value`` rounded up to ``places`` decimals: a least amount said rounded down would not be enough."""
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_CEILING)


def _micro_up(value: Decimal) -> Decimal:
    return _up(value, 6)


def _number(value: object) -> float:
    try:
        return float(str(value).strip()) if not isinstance(value, bool) else math.nan
    except ValueError:
        return math.nan


def _cap(value: object, name: str, what: str) -> Decimal:
    # Read as every other cap is ("$100", "1,000.50"); refused here with what to give.
    try:
        number: Decimal | None = parse_usd(value, name=name)
    except ConfigurationError:
        number = None
    if number is None or number <= 0:
        raise ConfigurationError(f"{name} must be a finite number above 0, got {value!r}: give {what}")
    return number


def _whole(value: object, name: str, what: str) -> int:
    number = _number(value)
    if not (math.isfinite(number) and number == int(number) and number >= 1):
        raise ConfigurationError(f"{name} must be a whole number of at least 1, got {value!r}: give {what}")
    return int(number)
