"""The summary task of a budgeted tuning study: :class:`TuningStudySummarizeOperator`.

Split from :mod:`costaware.operators.tuning`, which re-exports the operator: import it from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from costaware.core.errors import ConfigurationError
from costaware.core.tuning.caps import StopReason
from costaware.extras import require
from costaware.glue import airflow_errors, first_failed_tasks
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs
from costaware.operators.tuning_args import check_on_exceeded
from costaware.operators.tuning_study import _StudyOperator

require("tuning", needed_by=__name__)  # at DAG parse time, with the pip line, rather than in a trial

if TYPE_CHECKING:
    from airflow.sdk import Context


class TuningStudySummarizeOperator(WarnsOfDroppedDefaultArgs, _StudyOperator):
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
