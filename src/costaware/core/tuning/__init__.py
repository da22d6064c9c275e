"""Budget-capped multi-fidelity tuning, the pure part: search space, rungs, promotion, caps, stop rules.

The Optuna glue lives in ``costaware.training.tuning``; this package decides, from plain facts, which trials
move up a rung, when a study stops and what a trial is expected to cost. Money caps are not checked here:
they are ledger reservations, atomic in the database (``Ledger.reserve``). One concept per module:

* :mod:`~costaware.core.tuning.trials`: how a trial ended, and how completed trials rank;
* :mod:`~costaware.core.tuning.search_space`: the hyperparameters and their ranges;
* :mod:`~costaware.core.tuning.rungs`: the fidelities trials are compared at, and who moves up;
* :mod:`~costaware.core.tuning.caps`: what a study may use, and when it stops;
* :mod:`~costaware.core.tuning.costs`: what a trial is expected to cost, and what trials did cost;
* :mod:`~costaware.core.tuning.study`: the study's settings, as every worker reads them;
* :mod:`~costaware.core.tuning.spot_plan`: the spot tuning plan (warm-up, prune, promote within caps);
* :mod:`~costaware.core.tuning.spot_spend`: what a spot tuning study was billed, and the prune's saving.
"""

from __future__ import annotations

from costaware.core.tuning.caps import (
    StopReason,
    TuningCaps,
    stop_reason,
    trials_since_improvement,
    wall_clock_left,
)
from costaware.core.tuning.costs import (
    MAX_KEEP_FOR_RETRY_SECONDS,
    TrialCosts,
    TrialEstimate,
    TrialTiming,
    estimate_trial_seconds,
    seconds_for_usd,
    trial_costs,
    usd_for_seconds,
)
from costaware.core.tuning.rungs import RungSchedule, promotable
from costaware.core.tuning.search_space import PARAM_KINDS, ParamSpec, parse_search_space
from costaware.core.tuning.spot_plan import (
    PromotionDecision,
    SpotPlan,
    SpotTuningSettings,
    StageCost,
    Warmup,
    decide_promotions,
    kept_count,
    plan_study,
    rank,
    sample_trials,
    study_size,
)
from costaware.core.tuning.spot_spend import (
    StudyCost,
    TrialSpend,
    cost_without_prune,
    spend_by_trial,
    study_cost,
    study_spent,
)
from costaware.core.tuning.study import DIRECTIONS, PRUNERS, SAMPLERS, StudySpec
from costaware.core.tuning.trials import FinishedTrial, TrialState, fall_adjusted_value, trial_label

__all__ = [
    "DIRECTIONS",
    "MAX_KEEP_FOR_RETRY_SECONDS",
    "PARAM_KINDS",
    "PRUNERS",
    "SAMPLERS",
    "FinishedTrial",
    "ParamSpec",
    "PromotionDecision",
    "RungSchedule",
    "SpotPlan",
    "SpotTuningSettings",
    "StageCost",
    "StopReason",
    "StudyCost",
    "StudySpec",
    "TrialCosts",
    "TrialEstimate",
    "TrialSpend",
    "TrialState",
    "TrialTiming",
    "TuningCaps",
    "Warmup",
    "cost_without_prune",
    "decide_promotions",
    "estimate_trial_seconds",
    "fall_adjusted_value",
    "kept_count",
    "parse_search_space",
    "plan_study",
    "promotable",
    "rank",
    "sample_trials",
    "seconds_for_usd",
    "spend_by_trial",
    "stop_reason",
    "study_cost",
    "study_size",
    "study_spent",
    "trial_costs",
    "trial_label",
    "trials_since_improvement",
    "usd_for_seconds",
    "wall_clock_left",
]
