"""The trial task of a budgeted tuning study: :class:`BudgetedTuningOperator`, one trial per mapped slot.

Split from :mod:`costaware.operators.tuning`, which re-exports the operator: import it from there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowSkipException

from costaware.extras import require
from costaware.glue import airflow_errors
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs
from costaware.operators.templating import as_written, keyword_arguments, native_rendered, rendered_keywords
from costaware.operators.tuning_args import (
    DEFAULT_STUDY_LOAD_SECONDS,
    check_study_load_seconds,
    check_trial_trainer,
    retry_wait_seconds,
    seconds_since_try_began,
)
from costaware.operators.tuning_study import _StudyOperator
from costaware.training.study_arguments import resolve_trial_trainer

require("tuning", needed_by=__name__)  # at DAG parse time, with the pip line, rather than in a trial

if TYPE_CHECKING:
    from decimal import Decimal

    from airflow.sdk import Context


class BudgetedTuningOperator(WarnsOfDroppedDefaultArgs, _StudyOperator):
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
        # The trial's line (label, parameters, decision) is logged once, by run_trial, into this task's log.
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
