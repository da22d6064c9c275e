"""Budget-capped multi-fidelity tuning as Airflow tasks: create the study, trials as mapped tasks, summarize.

``budgeted_tuning(...)`` builds the three tasks in a task group, one call in a DAG::

    tune = budgeted_tuning(
        group_id="tune", study_name="delays-{{ run_id }}", trainer=boosting_trainer,
        trainer_kwargs={"train_path": ..., "valid_path": ..., "label": "delayed"},
        search_space={"learning_rate": {"type": "float", "low": 0.02, "high": 0.3, "log": True}},
        min_resource=10, max_resource=80, max_usd="100", max_trials=24,
    )

``plan`` (:class:`TuningStudyCreateOperator`) -> ``trial`` (:class:`BudgetedTuningOperator`, mapped over the
plan's slots, one trial per task instance, as many in parallel as workers allow) -> ``summarize``
(:class:`TuningStudySummarizeOperator`, runs whatever the trials did).

Each task's operator has its module (:mod:`.tuning_study`, :mod:`.tuning_trial`, :mod:`.tuning_summary`);
all three, with what tests and DAGs imported from here before the split, stay importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow.sdk import TaskGroup

from costaware.core.tuning.costs import MAX_KEEP_FOR_RETRY_SECONDS as MAX_KEEP_FOR_RETRY_SECONDS
from costaware.extras import require
from costaware.glue import DEFAULT_LEDGER_CONN_ID
from costaware.operators.templating import keyword_arguments
from costaware.operators.tuning_args import (
    DEFAULT_STUDY_LOAD_SECONDS,
    check_study_load_seconds,
    check_trial_concurrency,
    check_trial_trainer,
)
from costaware.operators.tuning_args import MAX_STUDY_LOAD_SECONDS as MAX_STUDY_LOAD_SECONDS
from costaware.operators.tuning_args import retry_wait_seconds as retry_wait_seconds  # tests read it here
from costaware.operators.tuning_study import TuningStudyCreateOperator
from costaware.operators.tuning_summary import TuningStudySummarizeOperator
from costaware.operators.tuning_trial import BudgetedTuningOperator

require("tuning", needed_by=__name__)  # at DAG parse time, with the pip line, rather than in a trial

__all__ = [
    "BudgetedTuningOperator",
    "TuningStudyCreateOperator",
    "TuningStudySummarizeOperator",
    "budgeted_tuning",
]


def budgeted_tuning(
    *,
    group_id: str = "tuning",
    study_name: str,
    trainer: Callable[..., Any] | str,
    trainer_kwargs: Mapping[str, Any] | str | None = None,
    storage_url: str | None = None,
    ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
    trial_retries: int = 1,
    max_active_trials: int | None = None,
    on_exceeded: str = "fail",
    study_load_seconds: float = DEFAULT_STUDY_LOAD_SECONDS,
    **study: Any,
) -> TaskGroup:
    """A task group ``plan -> trial (mapped) -> summarize`` that runs one budget-capped study.

    Args:
        group_id: Id of the task group.
        study_name: The study (templated), e.g. ``"churn-{{ ds }}"``.
        trainer: See :class:`BudgetedTuningOperator`.
        trainer_kwargs: See :class:`BudgetedTuningOperator` (templated).
        storage_url: Optuna storage URL; None: the ledger's database.
        ledger_conn_id: Airflow connection of the cost ledger.
        trial_retries: Retries of each trial task (a retry trains the trial's parameters again).
        max_active_trials: Most trial tasks running at once in a DAG run (None: as workers allow).
        on_exceeded: See :class:`TuningStudySummarizeOperator`: ``fail`` or ``skip`` a run whose budget had
            no room for one trial.
        study_load_seconds: See :class:`BudgetedTuningOperator`.
        **study: The study's settings, passed to :class:`TuningStudyCreateOperator` (``search_space``,
            ``min_resource``, ``max_resource``, ``max_usd``, ``max_trials``, ...).
    """
    # partial() builds no operator until the trials are mapped: check the trainer here, as the DAG is parsed.
    check_trial_trainer(trainer)
    max_active_trials, trial_retries = check_trial_concurrency(max_active_trials, trial_retries)
    study_load_seconds = check_study_load_seconds(study_load_seconds)
    shared: dict[str, Any] = {
        "study_name": study_name,
        "storage_url": storage_url,
        "ledger_conn_id": ledger_conn_id,
    }
    with TaskGroup(group_id=group_id) as group:
        plan = TuningStudyCreateOperator(task_id="plan", **shared, **study)
        trial_args: dict[str, Any] = {"retries": trial_retries}
        if max_active_trials is not None:
            trial_args["max_active_tis_per_dagrun"] = max_active_trials
        trials = BudgetedTuningOperator.partial(
            task_id="trial",
            trainer=trainer,
            trainer_kwargs=keyword_arguments(trainer_kwargs, "trainer_kwargs"),
            study_load_seconds=study_load_seconds,
            **shared,
            **trial_args,
        ).expand(slot=plan.output)
        # The trials' real id: inside another group it is "ml.tuning.trial", not "tuning.trial" (the summary
        # found none of them, and failed no trial left running).
        summary = TuningStudySummarizeOperator(
            task_id="summarize", trial_task_id=trials.task_id, on_exceeded=on_exceeded, **shared
        )
        trials >> summary
    return group
