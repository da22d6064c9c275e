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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, TaskGroup
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from costaware.core.errors import ConfigurationError
from costaware.core.tuning.caps import StopReason
from costaware.core.tuning.costs import MAX_KEEP_FOR_RETRY_SECONDS as MAX_KEEP_FOR_RETRY_SECONDS
from costaware.extras import require
from costaware.glue import DEFAULT_LEDGER_CONN_ID, airflow_errors, first_failed_tasks
from costaware.operators.templating import (
    as_written,
    is_written_out,
    keyword_arguments,
    native_rendered,
    rendered_keywords,
)
from costaware.operators.tuning_args import (
    DEFAULT_STUDY_LOAD_SECONDS,
    check_on_exceeded,
    check_study_load_seconds,
    check_trial_concurrency,
    check_trial_trainer,
    max_map_length,
    retry_wait_seconds,
    seconds_since_try_began,
)
from costaware.operators.tuning_args import MAX_STUDY_LOAD_SECONDS as MAX_STUDY_LOAD_SECONDS
from costaware.training.study_arguments import (
    DEFAULT_INSTANCE_TYPE,
    DEFAULT_MARKET,
    DEFAULT_REGION,
    StudyArguments,
    resolve_trial_trainer,
)

require("tuning", needed_by=__name__)  # at DAG parse time, with the pip line, rather than in a trial

__all__ = [
    "BudgetedTuningOperator",
    "TuningStudyCreateOperator",
    "TuningStudySummarizeOperator",
    "budgeted_tuning",
]

if TYPE_CHECKING:
    from decimal import Decimal

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


class TuningStudyCreateOperator(_StudyOperator):
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


class BudgetedTuningOperator(_StudyOperator):
    """Runs one trial of a budget-capped study; map it over the plan's slots to run trials in parallel.

    See docs/tuning.md.

    Before the trial it checks the study's stop rules (max trials, wall clock, plateau) and reserves the
    trial's estimated full-fidelity cost in the ledger with holder ``dag/run/task/map_index``; when that
    reservation is refused the study stops for good and this task (and every later slot) is skipped. The
    trial then trains rung by rung, reports each rung to Optuna and stops when successive halving prunes
    it, or before a rung its reservation cannot pay for. The cost listener prices this task try, settles
    the reservation and writes one compute entry whose trial is ``#<number> <state>@<fidelity>`` (e.g.
    ``#3 pruned@10``) with tags ``study``, ``trial_state``, ``fidelity`` and the rung results in its note.

    A retry of this task trains the parameters of the trial its earlier try left running again, from the
    first rung, as a new trial (that one is marked failed), paid from the hold the earlier try left: while
    the task has a retry left, its hold is kept for the retry delay too (:func:`retry_wait_seconds`). A
    trial whose worker was killed without a retry is marked failed once its reservation expired (by the
    next slot or the summary).

    Returns (XCom) the trial: ``number``, ``label``, ``state``, ``value``, ``fidelity``, ``rungs``,
    ``decision``, ``params``, ``seconds``, ``reserved_usd``, ...

    Args:
        study_name: The study (templated).
        trainer: ``trainer(params, **trainer_kwargs)`` returning an object whose ``advance(resource)``
            trains up to that fidelity and returns the score; a callable or ``"module:function"``.
        trainer_kwargs: Keyword arguments for the trainer, e.g. data paths (templated): a dict, or a whole
            template or ``XComArg`` that renders one (its text, JSON or a Python dict, is read; anything
            else fails the trial before any money is held). A value written as a template that renders to
            exactly a number or bool literal arrives as an ``int``, ``float`` or ``bool``; other strings
            stay strings.
        slot: The slot number (set by ``expand(slot=...)``).
        study_load_seconds: Seconds the slot is let take before its trial's reservation (loading the study,
            which the estimate needs), held with the try's time so far before the study is loaded, at the
            worker's price, in every budget over the run's tags (60 s unless set; a day at most).
        storage_url: Optuna storage URL (templated); None: the ledger's database.
        ledger_conn_id: Airflow connection of the cost ledger.
        **kwargs: ``BaseOperator`` arguments.
    """

    template_fields: Sequence[str] = ("study_name", "trainer_kwargs", "storage_url", "ledger_conn_id")
    ui_color = "#efe6fb"

    def __init__(
        self,
        *,
        study_name: str,
        trainer: Callable[..., Any] | str,
        trainer_kwargs: Mapping[str, Any] | str | None = None,
        slot: int = 0,
        study_load_seconds: float = DEFAULT_STUDY_LOAD_SECONDS,
        **kwargs: Any,
    ) -> None:
        super().__init__(study_name=study_name, **kwargs)
        check_trial_trainer(trainer)
        self.study_load_seconds = check_study_load_seconds(study_load_seconds)
        self.trainer = trainer
        self.trainer_kwargs = keyword_arguments(trainer_kwargs, "trainer_kwargs")
        self._trainer_kwargs_written = as_written(self.trainer_kwargs)
        self.slot = slot

    def execute(self, context: Context) -> dict[str, Any]:
        from costaware.core.ledger import reservation_holder
        from costaware.glue import annotate_task, run_tags
        from costaware.training.tuning import load_study, run_trial

        ti = context["ti"]
        holder = reservation_holder(
            ti.dag_id, ti.run_id, ti.task_id, -1 if ti.map_index is None else int(ti.map_index)
        )
        with airflow_errors():
            # Before the study is loaded (a far store takes minutes): a slot refused after it was billed
            # that time with nothing held, past a project budget with little left.
            # The run's tags as the cost listener bills this try with them; a task executed with a bare
            # context reads its own params.
            params = context.get("params") or getattr(self, "params", None) or {}
            bill_tags = run_tags(self, {"params": params}, drop_invalid=True)
            slot_hold = self._hold_slot_time(ti, bill_tags, holder)
            trainer = resolve_trial_trainer(self.trainer)
            # Once: run_trial takes it as loaded (study_load_seconds holds one load).
            loaded = load_study(self.study_storage(), str(self.study_name), int(self.slot), holder)
            spec = loaded[1]

            def label(trial: str, tags: dict[str, str], note: str) -> None:
                annotate_task(
                    ti,
                    trial=trial,
                    tags=tags,
                    note=note,
                    instance_type=spec.instance_type,
                    region=spec.region,
                    market=spec.market,
                    usd_per_hour=spec.usd_per_hour,
                )

            result = run_trial(
                storage_url=self.study_storage(),
                ledger=self.hook.get_conn(),
                study_name=str(self.study_name),
                trainer=trainer,
                trainer_kwargs=native_rendered(
                    self._trainer_kwargs_written, rendered_keywords(self.trainer_kwargs, "trainer_kwargs")
                ),
                holder=holder,
                slot=int(self.slot),
                run_id=ti.run_id,
                on_label=label,
                keep_for_retry_seconds=retry_wait_seconds(self, int(ti.try_number), int(ti.max_tries)),
                seconds_already_used=seconds_since_try_began(ti),
                slot_hold=None if slot_hold is None else slot_hold[0],
                slot_usd_per_hour=None if slot_hold is None else slot_hold[1],
                bill_tags=bill_tags,
                loaded=loaded,
            )
        if not result.ran:
            why = result.stop.value if result.stop is not None else "stopped"
            if result.goes_on:  # gave way to a slot that waited first: the study is not stopped
                raise AirflowSkipException(
                    f"study {self.study_name}: no trial in this slot ({why}): {result.reason}"
                )
            raise AirflowSkipException(f"study {self.study_name} stopped ({why}): {result.reason}")
        assert result.trial is not None
        self.log.info("trial %s %s: %s", result.trial.label, result.trial.params, result.trial.decision)
        return result.trial.to_json()

    def _hold_slot_time(self, ti: Any, tags: dict[str, str], holder: str) -> tuple[str, Decimal] | None:
        """Hold the try's time so far plus ``study_load_seconds`` where a refused slot's bill would land.

        Refused, the slot's try is billed by the cost listener to the run's tags on the worker's compute:
        held here in every budget over those tags, priced as the listener prices it, before anything slow.

        Returns:
            The hold's id and the worker's price per hour (a wait for money grows the hold at it), or None
            where no budget counts the try or the worker's compute has no price.

        Raises:
            AirflowSkipException: a budget over the run's tags cannot hold even that time.
        """
        from costaware.core.budgets import RAISE_THE_CAP_ONLY, cap_advice_in
        from costaware.core.errors import BudgetExceededError, CostawareError
        from costaware.training.tuning.reservations import hold_slot_time
        from costaware.try_pricing import charge_of, compute_of

        began = seconds_since_try_began(ti)
        seconds = began + self.study_load_seconds
        compute = compute_of(self)
        try:
            charge = charge_of(compute, tags, self.ledger_conn_id, seconds=seconds)
        except CostawareError as e:  # the listener records such a try at $0: nothing to hold
            self.log.warning("the slot's time before its trial is not held: %s", e)
            return None
        rate = f"${charge.usd_per_hour}/h ({compute['instance_type']} {compute['market']}, the worker's)"
        try:
            held = hold_slot_time(
                self.hook.get_conn(),
                tags,
                charge.usd,
                holder=holder,
                run_id=ti.run_id,
                dag_id=ti.dag_id,
                seconds=seconds,
                purpose=(
                    f"slot {self.slot} of study '{self.study_name}' before its trial's reservation (the "
                    f"task's start, {began:.1f} s so far, and loading the study, study_load_seconds="
                    f"{self.study_load_seconds:g}, at {rate})"
                ),
            )
        except BudgetExceededError as e:
            message = str(e)
            todo = cap_advice_in(message)
            lower = (
                ""
                if todo == RAISE_THE_CAP_ONLY
                else ", or lower study_load_seconds if the study loads faster"
            )
            raise AirflowSkipException(
                f"study {self.study_name}: slot {self.slot} runs no trial, its time before the trial's "
                f"reservation cannot be held: {message.replace(todo, RAISE_THE_CAP_ONLY + lower)}"
            ) from e
        return None if held is None else (held.id, charge.usd_per_hour)


class TuningStudySummarizeOperator(_StudyOperator):
    """Ends a study's DAG run: fails trials left running, logs the best trial, stop reason and costs.

    See docs/tuning.md.

    Runs after every trial task whatever their state (``trigger_rule="all_done"``). Trials of this run still
    ``RUNNING`` (their task died without telling) are marked failed.

    Returns (XCom) the summary: ``best`` (number, value, params), ``trials`` (state, fidelity, value and
    decision of each), ``states`` (counts), ``stop``, ``spent_usd``, ``cost_per_trial_usd``,
    ``cost_per_successful_trial_usd``, ``cost_by_trial`` (each trial of each run, ``<dag>/<run> <label>``).

    Args:
        study_name: The study (templated).
        trial_task_id: Task id of the trial tasks, to find the trials of this run.
        on_exceeded: When the budget had no room for one trial of this run: ``fail`` (the run shows red)
            or ``skip`` (a scheduled study whose project budget is used up for the period skips quietly).
        storage_url: Optuna storage URL (templated); None: the ledger's database.
        ledger_conn_id: Airflow connection of the cost ledger.
        **kwargs: ``BaseOperator`` arguments (``trigger_rule`` defaults to ``all_done``).
    """

    template_fields: Sequence[str] = ("study_name", "storage_url", "ledger_conn_id")
    ui_color = "#efe6fb"

    def __init__(
        self, *, study_name: str, trial_task_id: str, on_exceeded: str = "fail", **kwargs: Any
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(study_name=study_name, **kwargs)
        self.trial_task_id = trial_task_id
        self.on_exceeded = check_on_exceeded(on_exceeded)

    def execute(self, context: Context) -> dict[str, Any]:
        from costaware.core.ledger import reservation_holder
        from costaware.training.tuning import summarize_study

        ti = context["ti"]
        prefix = reservation_holder(ti.dag_id, ti.run_id, self.trial_task_id, 0).rsplit("/", 1)[0] + "/"
        states = self._trial_task_states(ti)
        plan_missed = bool(states) and all(state == "upstream_failed" for state in states)
        with airflow_errors():
            try:
                summary = summarize_study(
                    self.study_storage(), self.hook.get_conn(), str(self.study_name), holder_prefix=prefix
                )
            except ConfigurationError as e:
                if not plan_missed:
                    raise
                # A study named after its run has no earlier summary: "the plan has not run or it failed"
                # alone sent people to a plan whose log is empty when a task before it failed.
                raise AirflowFailException(
                    f"study {self.study_name}: the plan task failed or did not run, so this run made "
                    f"no study and ran no trial: see {self._first_failed_text(ti)}"
                ) from e
        best = summary["best"]
        ran = sum(summary["states"].values())

        def per(usd: str | None) -> str:
            return "n/a" if usd is None else f"${usd}"

        self.log.info(
            "study %s: %s; best %s; spent $%s of $%s; per trial %s, per successful trial %s; stop: %s",
            summary["study_name"],
            ", ".join(f"{n} {s}" for s, n in sorted(summary["states"].items())) or "no trial ran",
            "none"
            if best is None
            else f"#{best['number']} = {best['value']:.4f} (ranked by {best['score']:.4f}: the value less "
            f"its fall from its best rung) {best['params']}",
            summary["spent_usd"],
            summary["cap_usd"],
            per(summary["cost_per_trial_usd"]),
            per(summary["cost_per_successful_trial_usd"]),
            self._stop_text(summary, ran),
        )
        for row in summary["trials"]:
            self.log.info(
                "  #%s %s@%s %s %s",
                row["number"],
                row["state"],
                row["fidelity"],
                row["value"],
                row["decision"],
            )
        if plan_missed:
            # The plan failed: a study of a name used before would otherwise end green with its old summary.
            raise AirflowFailException(
                f"study {summary['study_name']}: the plan task failed or did not run, so this run ran no "
                f"trial: see {self._first_failed_text(ti)} (the summary above is the study as earlier runs "
                "left it)"
            )
        failed = sum(1 for state in states if state in ("failed", "upstream_failed")) if best is None else 0
        if failed:
            # Otherwise the run ends green with nothing to show (a trainer that cannot import, say).
            raise AirflowFailException(
                f"study {summary['study_name']}: no trial finished and {failed} trial task(s) failed: see "
                f"their logs ({self.trial_task_id}); the study's budget was charged ${summary['spent_usd']} "
                # Not "they spent $0": their tries' worker time is billed to the DAG, not to the study.
                f"for trials, and the failed tries' worker time is in the ledger under task "
                f"{self.trial_task_id!r} (`costaware report --group-by task`)"
            )
        if states and all(state == "skipped" for state in states):
            stop = summary["stop"] or {}
            if stop.get("reason") == StopReason.BUDGET.value and stop.get("renews") is False:
                # Skipped, the run read as "no money this month" where no month will ever have enough.
                raise AirflowFailException(
                    f"study {summary['study_name']}: no trial of this run could be paid for, and no new "
                    f"period makes room: {stop.get('message')}"
                )
            if stop.get("reason") == StopReason.BUDGET.value and self.on_exceeded == "skip":
                # A scheduled study whose budget is spent for the period: no money, nothing wrong.
                raise AirflowSkipException(
                    f"study {summary['study_name']}: no trial of this run could be paid for, skipped "
                    f"(on_exceeded='skip'): {stop.get('message')}"
                )
            if ran == 0:
                # Every slot found the study stopped before it had any trial (a budget too small for one).
                hint = (
                    " (on_exceeded='skip' skips such a run instead)"
                    if stop.get("reason") == StopReason.BUDGET.value
                    else ""
                )
                raise AirflowFailException(
                    f"study {summary['study_name']}: no trial ran, and the study has none: "
                    f"{self._stop_text(summary, ran)}{hint}"
                )
        if best is None and ran:
            # Trials ran and none has a value at full fidelity (cut by the wall clock, pruned to the end,
            # diverged): nothing to promote, which ended green before.
            raise AirflowFailException(
                f"study {summary['study_name']}: {ran} trial(s) ran and none was trained in full with a "
                f"value, so there is no best to promote: {self._stop_text(summary, ran)} (see the trials "
                "above; raise max_wall_seconds or max_usd, or check the trainer's metric)"
            )
        return summary

    @staticmethod
    def _first_failed_text(ti: Any) -> str:
        """Whose log says why the plan did not run: the plan may only have failed for an upstream task's."""
        first = first_failed_tasks(ti)
        return f"the log of {', '.join(map(repr, first))}, the first to fail" if first else "its log"

    @staticmethod
    def _stop_text(summary: dict[str, Any], ran: int) -> str:
        """Why the study stopped, for the summary line: a stop rule, no trial finishing, or max_trials."""
        if summary["stop"]:
            return str(summary["stop"]["message"])
        if ran and summary["best"] is None:
            return f"no trial finished ({ran} of {summary['max_trials']} trials ran, none with a value)"
        counted = ran - summary["states"].get("failed", 0)  # a failed trial does not count against max_trials
        if counted >= summary["max_trials"]:
            # A study continued with a lower max_trials may have more trials than it now allows.
            return f"max_trials reached ({counted} trials ran, max_trials {summary['max_trials']})"
        return "no stop rule fired"

    def _trial_task_states(self, ti: Any) -> list[str]:
        """The states of this run's trial tasks (none where Airflow cannot say: a test's stand-in)."""
        try:
            states = ti.get_task_states(dag_id=ti.dag_id, task_ids=[self.trial_task_id], run_ids=[ti.run_id])
        except Exception:  # a check for people: without it the summary still stands
            return []
        found = dict(states or {}).get(ti.run_id) or {}
        return [str(getattr(state, "value", state)) for state in found.values()]


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
