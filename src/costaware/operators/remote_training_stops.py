"""How ``RemoteTrainingOperator`` stops and bills a job no try will follow: a kill, a try failing for good.

Also the wait state a deferred try keeps (an XCom), which a resume without an event and
`costaware jobs reconcile` read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from costaware.operators.remote_training_start import RemoteTrainingStart
from costaware.triggers.remote_training import WAIT_STATE_AWS_CONN_KEY, WAIT_STATE_XCOM_KEY

if TYPE_CHECKING:
    from datetime import timedelta

    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

    from costaware.training.attempts import AttemptState

#: Why a job no try follows is stopped (its entry's note).
UNWATCHED_WHY = "its task failed with no retry left to follow it"
#: How long a kill in the worker waits for the stopped job to end: none. Airflow kills the task process 5 s
#: after its SIGTERM and the billing must be written before then: the job is billed to its grace period's end.
WORKER_KILL_WAIT_SECONDS = 0.0


class RemoteTrainingStops(RemoteTrainingStart):
    """A mixin of ``RemoteTrainingOperator``: stop and bill a killed try's job, or a failing last try's."""

    deferrable: bool
    _kill_handled: bool
    _waiting_on: Any
    _deferred_inline: str | None

    if TYPE_CHECKING:  # BaseOperator's, which the operator puts after its mixins

        def defer(
            self,
            *,
            trigger: BaseTrigger,
            method_name: str,
            kwargs: dict[str, Any] | None = None,
            timeout: timedelta | int | float | None = None,
        ) -> NoReturn: ...

        def resume_execution(
            self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context
        ) -> Any: ...

    @contextmanager
    def _stops_unwatched_job(self, context: Context) -> Iterator[None]:
        """A try that fails for good while a job it submitted runs stops and bills that job.

        Any failure counts: a wait that failed (its polls, a configuration error), a store or ledger error
        while an attempt's end is handled, an ``execution_timeout`` during a submit (a timeout during a wait
        is ``on_kill``'s). A retry would follow the job by its name; without one it ran on, watched and
        billed by nobody.
        """
        from airflow.sdk.exceptions import TaskDeferred

        try:
            yield
        except (TaskDeferred, _TaskKilled):
            raise
        except BaseException as e:
            # A wait's own failures are handled where it polls, a kill during it by on_kill. A Ctrl-C of
            # `dags test` here (an ended attempt billed, the next submitted) ends the task as one in the wait
            # does: for good. A worker's supervisor forwarding its own SIGINT is a failure like any other.
            interrupted = _ctrl_c_of_dags_test(e)
            for_good = interrupted or isinstance(e, AirflowFailException) or _last_try(context)
            looked_up = self._waiting_on is None and for_good
            live = self._running_job_state() if looked_up else None
            unsubmitted, self._unsubmitted = self._unsubmitted, None
            # Given back only where the look-up said there is no job: a submit that created its job and
            # then failed, with the look-up down too, left a job running on this hold.
            # Any failure counts where no retry follows (a transient one on the last try too): kept, the
            # hold blocked the budget until its reservation_ttl with nothing to bill against it.
            no_job = looked_up and live is None and not self._job_unknown
            if no_job and unsubmitted is not None:
                self._settle_refused_start(unsubmitted)
            elif live is None and unsubmitted is not None and for_good:
                self.log.warning(
                    "the task's budget hold is kept until its time limit (reservation_ttl): whether its job "
                    "was created cannot be told; once it is known that none runs, give the hold back with "
                    "`costaware budget release`"
                )
            self._live = self._submitting = None
            stopped = None
            if live is not None and live.current is not None:
                why = "its task was interrupted (Ctrl-C)" if interrupted else UNWATCHED_WHY
                # A job no wait state names (a wait in the worker, a submit not yet deferred) is one
                # `costaware jobs reconcile` cannot find: a refused stop is billed to its grace period now.
                unlisted = not self._wait_state_names(context, live.current.job_id)
                billed = self._stop_unwatched(live, why=why, bill_refused=unlisted)
                stopped = live.current.job_id if billed else None
            if interrupted:
                said = f"job {stopped} stopped and billed" if stopped else "no job was left running"
                raise _interrupted(said) from e
            raise

    def _settle_refused_start(self, state: AttemptState) -> None:
        """Settle the hold of a try that failed for good before its attempt's job existed (a refused submit).

        No job bills against it and no retry follows: left open, it held the budget's money until its time
        limit (reservation_ttl, 6 h by default). A ledger that cannot be reached only warns: the task's own
        failure is what it reports.
        """
        from costaware.training.attempt_holds import task_holder

        try:
            self._settle(state)
        except Exception as e:
            self.log.warning(
                "could not settle the task's budget hold (%s): it is held until its time limit "
                "(reservation_ttl); give it back with `costaware budget release --holder %s`",
                e,
                task_holder(state.plan),
            )

    def _keep_wait_state(self, context: Context, state: AttemptState) -> None:
        """Keep the state the deferred wait watches where a resume without an event reads it (an XCom).

        A failure only warns: the trigger watches the job all the same; a timeout could not stop it.
        """
        push = getattr(context.get("ti"), "xcom_push", None)
        if push is None:  # outside Airflow
            return
        try:
            # With the task's AWS connection, which a reconcile of its job stops and bills with.
            push(
                key=WAIT_STATE_XCOM_KEY, value={**state.to_json(), WAIT_STATE_AWS_CONN_KEY: self.aws_conn_id}
            )
        except Exception as e:
            self.log.warning(
                "could not keep the wait's state in XCom %r (%s): the trigger watches the job all the same, "
                "but a deferral timeout would leave it running",
                WAIT_STATE_XCOM_KEY,
                e,
            )

    def _kept_wait_state(self, context: Context) -> AttemptState | None:
        """The state :meth:`_keep_wait_state` kept for this try's deferred wait; None: none, or unreadable."""
        from costaware.training.attempts import AttemptState

        ti = context.get("ti")
        if ti is None or not hasattr(ti, "xcom_pull"):
            return None
        try:
            kept = ti.xcom_pull(task_ids=ti.task_id, key=WAIT_STATE_XCOM_KEY, map_indexes=ti.map_index)
            return AttemptState.from_json(kept) if kept else None
        except Exception as e:  # the failure to report is the wait's
            self.log.warning("cannot read the wait's state in XCom %r: %s", WAIT_STATE_XCOM_KEY, e)
            return None

    def on_kill(self) -> None:
        """The task was killed while it waited in the worker: stop the job and bill it, as the trigger does.

        A deferred wait is killed in the triggerer (``RemoteTrainingJobTrigger.on_kill``). Airflow calls this
        on SIGTERM (a person's mark or clear, a worker shutting down) and after an ``execution_timeout``,
        and kills the process 5 s after a SIGTERM: the job is stopped and billed at once, to the end of its
        grace period (a retry resumes from its checkpoint). No new attempt starts after it.
        """
        self._killed = True
        trigger = self._waiting_on
        if trigger is None and self._deferred_inline is not None:
            from costaware.triggers.remote_training import inline_wait_running, note_kill_outside_inline_wait

            # `airflow dags test` runs the deferred wait inline, and Airflow's SIGTERM handler (a `kill`, a
            # `timeout`) still calls this, until the task's resumed run binds its own: nothing ended the
            # process after it, and the command waited on while the job trained on.
            if not inline_wait_running():
                # Before the wait started or after it took its event (the job ended): a KeyboardInterrupt
                # here ended the command with the job unbilled. The wait, or the resumed run, ends it.
                self.log.warning(
                    "SIGTERM while the task is deferred in `airflow dags test`: the training is stopped and "
                    "billed as its wait starts, or its ended attempt billed as the task resumes; then it ends"
                )
                note_kill_outside_inline_wait(self._deferred_inline)
                return
            # Ended as its Ctrl-C is: the inline trigger, cancelled, stops and bills the job.
            self.log.warning("SIGTERM during the inline deferred wait of `airflow dags test`: as a Ctrl-C")
            # Once: `timeout` signals the process and then its group, and a second KeyboardInterrupt cut
            # short the trigger's stop and bill.
            self._deferred_inline = None
            raise KeyboardInterrupt
        if trigger is None:
            # Between two waits: the step under way bills the attempt that ended, and starts no new one.
            self.log.info("task killed between two waits: no new attempt starts")
            return
        try:
            self._stop_killed(trigger)
        except _TaskKilled:
            pass  # Airflow ends the task itself
        except Exception:  # never into the frame the signal came in: said, and the task ends as Airflow says
            self.log.exception("could not stop and bill the training job of the killed task")

    def _wait_state_names(self, context: Context, job_id: str) -> bool:
        """Whether the wait state this try kept (what `costaware jobs reconcile` reads) names ``job_id``."""
        if not self.deferrable:
            return False  # a wait in the worker keeps none
        kept = self._kept_wait_state(context)
        return kept is not None and kept.current is not None and kept.current.job_id == job_id

    def _stop_unwatched(
        self, state: AttemptState, *, why: str = UNWATCHED_WHY, bill_refused: bool = False
    ) -> bool:
        """The task fails for good while its job runs: no try follows the job, so it is stopped and billed.

        A retry would follow it by its name; without one it ran on, watched and billed by nobody. ``why``
        goes into the entry's note. Returns whether it was stopped and billed (False: said in the log).
        ``bill_refused``: a job whose stop the backend refuses (or whose stop and bill fails before the bill)
        is billed to its grace period all the same (one no kept wait state names, which `costaware jobs
        reconcile` could never find and bill).
        """
        if state.current is None:
            return False
        try:
            refused = self._trigger(state).stop_and_bill(
                ask_state=False, cause="unwatched", why=why, bill_refused=bill_refused
            )
        except Exception:  # best effort: the task's own failure is what it reports
            self.log.exception("could not stop and bill job %s of the failing task", state.current.job_id)
            return False
        return refused is None  # a refused stop left it unbilled, its hold held (said in the log)

    def _stop_killed(self, trigger: Any) -> NoReturn:
        """Stop and bill the job ``trigger`` waits on, once, and end the task (see :meth:`on_kill`)."""
        if not self._kill_handled:
            self._kill_handled = True  # against a second call while this one runs (a signal during it)
            # In the worker, Airflow's state is not asked (a call to the supervisor from the signal handler
            # could wait on a lock the interrupted code holds), and the job is billed to the end of its grace
            # period at once (the process is killed 5 s after SIGTERM).
            try:
                # The worker keeps no wait state of this job for a reconcile to find it by: one whose stop
                # is refused (or fails before the bill) is billed to its grace period now, or never would be.
                trigger.stop_and_bill(
                    wait_seconds=WORKER_KILL_WAIT_SECONDS, ask_state=False, bill_refused=True
                )
            except BaseException:  # an execution_timeout's alarm during it: the next call tries again
                self._kill_handled = False
                raise
        raise _TaskKilled("the task was killed: its training job was stopped and billed")


def _try_number(context: Context) -> int:
    """This try's number (1 outside Airflow)."""
    tries = getattr(context.get("ti"), "try_number", None)
    return tries if isinstance(tries, int) else 1


def _last_try(context: Context) -> bool:
    """Whether this try is the task's last: a failure now is for good, no retry follows its job."""
    most = getattr(context.get("ti"), "max_tries", None)
    return isinstance(most, int) and _try_number(context) > most


class _TaskKilled(AirflowException):
    """The task was killed while it waited in the worker; its job was stopped and billed."""


def _ctrl_c_of_dags_test(error: BaseException) -> bool:
    """Whether ``error`` is a person's Ctrl-C of ``airflow dags test``, which ends the task for good.

    A worker's supervisor forwards a SIGINT to its task too (the worker stopped with Ctrl-C): failed for
    good, every waiting training of the worker would lose its retries.
    """
    from costaware.triggers.remote_training import in_dags_test

    return isinstance(error, KeyboardInterrupt) and in_dags_test()


def _killed_after_success(outcome: Mapping[str, Any]) -> str:
    """Why a training that succeeded fails its task: `airflow dags test` was killed as its wait ended."""
    version = outcome.get("version")
    stored = f"its model version {version} is stored" if version else "its result is recorded"
    return (
        f"killed (SIGTERM) as its wait ended: the training succeeded and was billed (${outcome.get('usd')}), "
        f"{stored}; the task fails without a retry so that `airflow dags test` stops here and runs none of "
        "its downstream tasks (run the command again to run them: it trains again)"
    )


def _interrupted(done: str) -> AirflowFailException:
    """The failure a Ctrl-C (``KeyboardInterrupt``) ends the task with: for good, so no retry starts a job.

    Raised as such, Airflow retried the task where it had retries (``airflow dags test`` runs the retry at
    once), and the retry started a new attempt.
    """
    return AirflowFailException(
        f"interrupted (Ctrl-C): {done}; the task fails without a retry, so no new attempt starts "
        "(clear the task to train on from its newest checkpoint)"
    )


def _tag_this_try(context: Context, state: AttemptState) -> None:
    """The worker's own entry of this try (the listener's) carries the attempts' tags, ``tags=`` included.

    The listener tags an entry with the DAG's tags and the run's params only: a project given in the
    operator's ``tags`` (and its ``budget_scope``) left the worker's time out of that project's budget.
    """
    from costaware.glue import annotate_task

    ti = context.get("ti")
    if ti is not None and hasattr(ti, "dag_id"):
        annotate_task(ti, tags=dict(state.plan.tags))
