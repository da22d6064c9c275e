"""What a spot tuning study was billed, per trial and stage, and what it would have cost without the prune.

Pure: the rows are the ledger's entries (``Ledger.entries``), read by
:func:`costaware.training.spot_tuning.study_spend`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from costaware.core.tuning.spot_plan import ZERO, SpotTuningSettings, StageCost


@dataclass(frozen=True, slots=True)
class TrialSpend:
    """What the ledger billed one trial per stage: dollars, billed hours, attempts."""

    warmup_usd: Decimal = ZERO
    warmup_hours: Decimal = ZERO
    warmup_attempts: int = 0
    full_usd: Decimal = ZERO
    full_hours: Decimal = ZERO
    full_attempts: int = 0

    @property
    def usd(self) -> Decimal:
        return self.warmup_usd + self.full_usd

    @property
    def hours(self) -> Decimal:
        return self.warmup_hours + self.full_hours

    def billed(self, stage: str, usd: Decimal, hours: Decimal) -> TrialSpend:
        """This spend plus one billed attempt of ``stage`` (``warmup`` or ``full``)."""
        return replace(
            self,
            **{
                f"{stage}_usd": getattr(self, f"{stage}_usd") + usd,
                f"{stage}_hours": getattr(self, f"{stage}_hours") + hours,
                f"{stage}_attempts": getattr(self, f"{stage}_attempts") + 1,
            },
        )


def spend_by_trial(rows: Iterable[Mapping[str, Any]], *, study: str) -> dict[str, TrialSpend]:
    """Billed dollars and hours per trial and stage, from ledger entries (dicts as ``Ledger.entries``).

    Only actual (not estimated) entries tagged ``study=<study>`` and ``trial=<n>`` whose price came from the
    compute backend (``price_source`` ``remote:...``) count: the worker's own wait is not the trial's compute.
    An entry of task ``full`` is the promoted run's, any other the warm-up's.
    """
    spend: dict[str, TrialSpend] = {}
    for row in rows:
        tags = row.get("tags") or {}
        if row["estimated"] or tags.get("study") != study or "trial" not in tags:
            continue
        if not str(row.get("price_source") or "").startswith("remote:"):
            continue
        stage = "full" if row["task_id"] == "full" else "warmup"
        trial = str(tags["trial"])
        spend[trial] = spend.get(trial, TrialSpend()).billed(
            stage, Decimal(str(row["usd"])), Decimal(str(row["quantity"]))
        )
    return spend


def study_spent(spend: Mapping[str, TrialSpend], *, gpus: object) -> StageCost:
    """What the study spent in all: dollars, and GPU-hours as billed hours x the trial's GPUs."""
    hours = sum((s.hours for s in spend.values()), ZERO)
    return StageCost(sum((s.usd for s in spend.values()), ZERO), hours * Decimal(str(gpus)))


def cost_without_prune(
    spend: Mapping[str, TrialSpend], *, trials: int, added_epochs: int, warmup_epochs: int
) -> Decimal:
    """What every planned trial trained to full epochs would have cost, from what the study was billed.

    Each trial's warm-up as billed (the mean warm-up for one that did not run), plus the added epochs at
    the promoted runs' billed cost per added epoch (the warm-ups' per epoch when none was promoted).
    """
    warmups = [s.warmup_usd for s in spend.values() if s.warmup_usd]
    if not warmups:
        return ZERO
    mean_warmup = sum(warmups, ZERO) / len(warmups)
    fulls = [s.full_usd / added_epochs for s in spend.values() if s.full_usd]
    per_added = sum(fulls, ZERO) / len(fulls) if fulls else mean_warmup / warmup_epochs
    return sum(warmups, ZERO) + (trials - len(warmups)) * mean_warmup + trials * added_epochs * per_added


@dataclass(frozen=True, slots=True)
class StudyCost:
    """What a study was billed, and what training every planned trial in full would have cost."""

    usd: Decimal
    usd_all_full: Decimal
    trials_billed: int
    planned_trials: int
    full_epochs: int

    @property
    def usd_saved(self) -> Decimal:
        return self.usd_all_full - self.usd

    def summary(self) -> str:
        """One line: the cost, per trial, without the prune, and the saving."""
        per_trial = self.usd / max(self.trials_billed, 1)
        share = self.usd_saved / self.usd_all_full if self.usd_all_full else ZERO
        return (
            f"The study cost ${self.usd:.6f} over {self.trials_billed} trials (${per_trial:.6f} per trial); "
            f"all {self.planned_trials} to {self.full_epochs} epochs: ${self.usd_all_full:.6f}; "
            f"saved ${self.usd_saved:.6f} ({share:.0%})"
        )


def study_cost(
    spend: Mapping[str, TrialSpend], *, planned_trials: int, settings: SpotTuningSettings
) -> StudyCost:
    """The study's :class:`StudyCost` from what the ledger billed each trial (:func:`spend_by_trial`)."""
    all_full = cost_without_prune(
        spend, trials=planned_trials, added_epochs=settings.added_epochs, warmup_epochs=settings.warmup_epochs
    )
    spent = sum((s.usd for s in spend.values()), ZERO)
    return StudyCost(spent, all_full, len(spend), planned_trials, settings.full_epochs)
