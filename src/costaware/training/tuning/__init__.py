"""Budget-capped multi-fidelity tuning on Optuna: a study in an RDB, trials reserve money before they run.

One study lives in an Optuna RDB storage (by default the ledger's own database) and its budget lives in the
ledger, so trial slots on any number of workers share both:

* :func:`create_study` stores the study's settings with the study and sets its ledger budget
  (scope ``study=<name>`` plus the caller's tags, period ``total``).
* :func:`run_trial` runs one trial: stop rules, then a reservation of the trial's estimated full-fidelity
  cost (``Ledger.reserve``, atomic in the database), then ask/report/tell rung by rung, pruned by
  successive halving, and never past its reservation (a trial whose next rung would not fit in the money
  it reserved is cut). When the reservation is refused the study stops for good.
* :func:`summarize_study` fails trials left ``RUNNING`` by killed workers and reports the best trial,
  the stop reasons and cost per trial and per successful trial from the ledger.

Optuna's heartbeat does not cover ask/tell, so a trial's lease is its reservation: a trial still
``RUNNING`` after its reservation expired belonged to a worker that died; the next slot marks it failed.
A retry of the same task (same reservation holder) trains that trial's parameters again instead, as a new
trial, and the one it left fails.

The package is split by concern: :mod:`.optuna_glue` (storage, sampler, pruners, search space),
:mod:`.study` (the study's lifecycle), :mod:`.trial` (one trial slot, in steps: :mod:`.trial_reservation`
reserves its trial's cost, :mod:`.trial_steps` trains and tells it, :mod:`.slot_time` holds and records
the slot's own time outside Airflow), :mod:`.reservations` (a trial's money), :mod:`.arbitration` (which
waiting slot goes on), :mod:`.results` (what a slot returns) and :mod:`.fidelity` (what a trial trains).
It needs the ``tuning`` extra (Optuna).
"""

from __future__ import annotations

from costaware.training.tuning.fidelity import (
    BoostingFidelityModel,
    FidelityModel,
    TrainerFactory,
    boosting_trainer,
    check_binary_label,
    check_boosting_inputs,
    is_finite,
)
from costaware.training.tuning.optuna_glue import (
    PRUNING_ATTR,
    TRIAL_ATTR,
    RungSuccessiveHalvingPruner,
    hyperband_pruner,
    make_pruner,
    make_sampler,
    open_storage,
)
from costaware.training.tuning.results import EntryOwner, SlotResult, TrialResult
from costaware.training.tuning.study import (
    SPEC_ATTR,
    STARTED_ATTR,
    STOP_ATTR,
    create_study,
    fail_stale_trials,
    load_study,
    summarize_study,
)
from costaware.training.tuning.trial import TAIL_SECONDS, run_trial

__all__ = [
    "PRUNING_ATTR",
    "SPEC_ATTR",
    "STARTED_ATTR",
    "STOP_ATTR",
    "TAIL_SECONDS",
    "TRIAL_ATTR",
    "BoostingFidelityModel",
    "EntryOwner",
    "FidelityModel",
    "RungSuccessiveHalvingPruner",
    "SlotResult",
    "TrainerFactory",
    "TrialResult",
    "boosting_trainer",
    "check_binary_label",
    "check_boosting_inputs",
    "create_study",
    "fail_stale_trials",
    "hyperband_pruner",
    "is_finite",
    "load_study",
    "make_pruner",
    "make_sampler",
    "open_storage",
    "run_trial",
    "summarize_study",
]
