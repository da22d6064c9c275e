"""The plan task of a budgeted tuning study: :class:`TuningStudyCreateOperator`, and the study tasks' base.

Split from :mod:`costaware.operators.tuning`, which re-exports the operator: import it from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from costaware.extras import require
from costaware.glue import DEFAULT_LEDGER_CONN_ID, airflow_errors
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs
from costaware.operators.templating import is_written_out
from costaware.operators.tuning_args import max_map_length
from costaware.training.study_arguments import (
    DEFAULT_INSTANCE_TYPE,
    DEFAULT_MARKET,
    DEFAULT_REGION,
    StudyArguments,
)

require("tuning", needed_by=__name__)  # at DAG parse time, with the pip line, rather than in a trial

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.core.tuning import StudySpec
    from costaware.hooks.ledger import CostLedgerHook


class _StudyOperator(BaseOperator):
    """Shared arguments of the study tasks: where the study and the ledger are."""

    def __init__(
        self,
        *,
        study_name: str,
        storage_url: str | None = None,
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.study_name = study_name
        self.storage_url = storage_url
        self.ledger_conn_id = ledger_conn_id

    @cached_property
    def hook(self) -> CostLedgerHook:
        from costaware.hooks.ledger import CostLedgerHook

        return CostLedgerHook(self.ledger_conn_id)

    def study_storage(self) -> str:
        """The study's storage URL: ``storage_url``, else the ledger's own database."""
        return self.storage_url or self.hook.get_url()


class TuningStudyCreateOperator(WarnsOfDroppedDefaultArgs, _StudyOperator):
    """Creates (or reopens) a budget-capped study in the RDB storage and sets its budget in the ledger.

    See docs/tuning.md.

    The study's settings are stored with it, so every trial task reads the same ones. The budget is
    ``max_usd`` (and ``max_gpu_hours``) for scope ``study=<study_name>`` plus ``scope``, for all time;
    each trial reserves from it (and from any wider budget covering ``scope``, e.g. the project's month).

    Returns (XCom) the list of trial slots to map over: ``max_trials`` less the trials the study already has.

    Args:
        study_name: Name of the study (templated); a name used before continues that study.
        search_space: Parameters to tune, e.g. ``{"learning_rate": {"type": "float", "low": 0.01,
            "high": 0.3, "log": True}, "max_leaf_nodes": {"type": "categorical", "choices": [15, 31]}}``
            (templated).
        min_resource: Fidelity of the first rung (epochs, boosting rounds, data percent) (templated).
        max_resource: Full fidelity, the last rung (templated).
        reduction_factor: At each rung the top ``1/reduction_factor`` move up (templated).
        max_rungs: At most this many rungs (the last is ``max_resource``); None: every ``min * eta^k``.
        max_usd: USD cap of the study (templated).
        max_trials: Most trials the study runs (templated).
        max_gpu_hours: GPU-hour cap of the study (templated).
        max_wall_seconds: No trial starts after the study has run this long in this DAG run (counted from
            its ``plan``); running ones stop (templated).
        plateau_trials: Stop after this many trials without the best value improving (templated).
        plateau_min_delta: What counts as an improvement for the plateau rule (templated).
        direction: ``maximize`` or ``minimize``.
        pruner: ``successive_halving`` (at the rungs), ``hyperband`` (Optuna's) or ``none``.
        sampler: ``tpe`` or ``random``.
        seed: Seed of the sampler (each slot's seed is drawn from it, the slot and the task instance).
        scope: Ledger tags the trials are charged to, e.g. ``{"project": "churn"}`` (templated).
        instance_type: Instance the trials run on, for the estimate and the ledger (templated).
        region: Region of that instance (templated).
        market: ``on_demand`` or ``spot`` (templated).
        usd_per_hour: Price of that compute; None: the catalog's (templated).
        fallback_trial_seconds: Seconds one full-fidelity trial is assumed to take until one has finished
            (templated).
        safety_factor: Estimates from finished trials are multiplied by this before reserving.
        slack_seconds: Seconds added to every trial's reservation for scheduling noise (returned if unused).
        storage_url: Optuna storage URL (templated); None: the ledger's database.
        ledger_conn_id: Airflow connection of the cost ledger.
        **kwargs: ``BaseOperator`` arguments.
    """

    template_fields: Sequence[str] = (
        "study_name",
        "search_space",
        "min_resource",
        "max_resource",
        "reduction_factor",
        "max_usd",
        "max_trials",
        "max_gpu_hours",
        "max_wall_seconds",
        "plateau_trials",
        "plateau_min_delta",
        "scope",
        "instance_type",
        "region",
        "market",
        "usd_per_hour",
        "fallback_trial_seconds",
        "storage_url",
        "ledger_conn_id",
    )
    ui_color = "#efe6fb"

    def __init__(
        self,
        *,
        study_name: str,
        search_space: Mapping[str, Mapping[str, Any]],
        min_resource: int | str,
        max_resource: int | str,
        max_usd: str | float,
        max_trials: int | str,
        reduction_factor: int | str = 2,
        max_rungs: int | None = None,
        max_gpu_hours: str | float | None = None,
        max_wall_seconds: float | str | None = None,
        plateau_trials: int | str | None = None,
        plateau_min_delta: float | str = 0.0,
        direction: str = "maximize",
        pruner: str = "successive_halving",
        sampler: str = "tpe",
        seed: int = 0,
        scope: Mapping[str, str] | None = None,
        instance_type: str = DEFAULT_INSTANCE_TYPE,
        region: str = DEFAULT_REGION,
        market: str = DEFAULT_MARKET,
        usd_per_hour: str | float | None = None,
        fallback_trial_seconds: float | str = 600.0,
        safety_factor: float = 1.5,
        slack_seconds: float = 2.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(study_name=study_name, **kwargs)
        from costaware.core.tuning.study import check_study_choices

        # Not templated: a typo fails when the DAG is parsed, not when the plan task runs.
        check_study_choices(direction=direction, pruner=pruner, sampler=sampler)
        self.search_space = search_space
        self.min_resource = min_resource
        self.max_resource = max_resource
        self.reduction_factor = reduction_factor
        self.max_rungs = max_rungs
        self.max_usd = max_usd
        self.max_trials = max_trials
        self.max_gpu_hours = max_gpu_hours
        self.max_wall_seconds = max_wall_seconds
        self.plateau_trials = plateau_trials
        self.plateau_min_delta = plateau_min_delta
        self.direction = direction
        self.pruner = pruner
        self.sampler = sampler
        self.seed = seed
        self.scope = scope if scope is not None else {}
        self.instance_type = instance_type
        self.region = region
        self.market = market
        self.usd_per_hour = usd_per_hour
        self.fallback_trial_seconds = fallback_trial_seconds
        self.safety_factor = safety_factor
        self.slack_seconds = slack_seconds
        # A written-out space, rung range, cap or scope that is wrong fails now, not when the plan task runs.
        StudyArguments.of(self).check_written(is_written_out)

    def execute(self, context: Context) -> list[int]:
        from costaware.training.tuning import create_study

        with airflow_errors():
            spec = self.spec()
            # The plan's slots past Airflow's limit were refused only after the study and budget were made.
            plan = create_study(self.study_storage(), self.hook.get_conn(), spec, max_slots=max_map_length())
        if spec.caps.max_gpu_hours is not None and not spec.gpus:
            self.log.warning(
                "max_gpu_hours=%s binds nothing: %s has no GPU (the study's cap is max_usd)",
                spec.caps.max_gpu_hours,
                spec.instance_type,
            )
        self.log.info(
            "study %s: %d slot(s) (%d trial(s) already started), rungs %s, cap $%s on %s %s at $%s/h",
            plan["study_name"],
            len(plan["slots"]),
            plan["trials_already_started"],
            plan["rungs"],
            plan["max_usd"],
            spec.instance_type,
            spec.market,
            spec.usd_per_hour,
        )
        return list(plan["slots"])

    def spec(self) -> StudySpec:
        """The study's settings from the (rendered) arguments; prices from the catalog when not given."""
        return StudyArguments.of(self).spec()
