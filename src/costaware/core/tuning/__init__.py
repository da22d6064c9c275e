"""Budget-capped multi-fidelity tuning, the pure part: search space, rungs, promotion, caps, stop rules.

The Optuna glue lives in ``costaware.training.tuning``; this package decides, from plain facts, which trials
move up a rung, when a study stops and what a trial is expected to cost. Money caps are not checked here:
they are ledger reservations, atomic in the database (``Ledger.reserve``). One concept per module:

* :mod:`~costaware.core.tuning.trials`: how a trial ended;
* :mod:`~costaware.core.tuning.search_space`: the hyperparameters and their ranges;
* :mod:`~costaware.core.tuning.rungs`: the fidelities trials are compared at, and who moves up;
* :mod:`~costaware.core.tuning.caps`: what a study may use, and when it stops;
* :mod:`~costaware.core.tuning.costs`: what a trial is expected to cost, and what trials did cost;
* :mod:`~costaware.core.tuning.study`: the study's settings, as every worker reads them.
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
from costaware.core.tuning.study import DIRECTIONS, PRUNERS, SAMPLERS, StudySpec
from costaware.core.tuning.trials import FinishedTrial, TrialState, trial_label

__all__ = [
    "DIRECTIONS",
    "PARAM_KINDS",
    "PRUNERS",
    "SAMPLERS",
    "FinishedTrial",
    "ParamSpec",
    "RungSchedule",
    "StopReason",
    "StudySpec",
    "TrialCosts",
    "TrialEstimate",
    "TrialState",
    "TrialTiming",
    "TuningCaps",
    "estimate_trial_seconds",
    "parse_search_space",
    "promotable",
    "seconds_for_usd",
    "stop_reason",
    "trial_costs",
    "trial_label",
    "trials_since_improvement",
    "usd_for_seconds",
    "wall_clock_left",
]
