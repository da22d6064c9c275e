"""How ``RemoteTrainingOperator`` waits on its attempts: in the worker or deferred, and its resumes."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from costaware.core.ledger import utcnow
from costaware.glue import airflow_errors
from costaware.operators.remote_training_stops import (
    RemoteTrainingStops,
    _ctrl_c_of_dags_test,
    _interrupted,
    _killed_after_success,
    _last_try,
    _tag_this_try,
    _TaskKilled,
    _try_number,
)
from costaware.triggers.remote_training import WAIT_STATE_XCOM_KEY

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.training.attempts import AttemptState


class RemoteTrainingWait(RemoteTrainingStops):
    """A mixin of ``RemoteTrainingOperator``: wait on each attempt, and act on how its wait ended."""

    def _wait(self, context: Context, state: AttemptState) -> Any:
        from costaware.training.attempts import AttemptState
        from costaware.training.plan import wait_limit

        while True:
            self._live = state if state.current is not None else None
            timeout = wait_limit(state.plan, utcnow(), state.current.market if state.current else None)
            with airflow_errors():
                trigger = self._trigger(state)
                # The budgets hold the attempts' money for as long as this wait may last: a hold past its
                # time limit (6 h by default) stopped counting while the job still billed.
                self._keep_holds(state, utcnow() + timeout + timedelta(hours=1))
            # What on_kill stops and bills (a kill, an execution_timeout), published before the check below.
            self._waiting_on = trigger
            if self._killed:  # killed while the step before ran (a submit): its new job is stopped here
                self._stop_killed(trigger)
            if self.deferrable:
                self._waiting_on = None  # the triggerer watches it from here
                self._keep_wait_state(context, state)
                from costaware.triggers.remote_training import in_dags_test

                self._deferred_inline = state.plan.base_name if in_dags_test() else None
                self.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)
            # In the worker: poll the same trigger (its price watch and state-change logging) until it fires.
            try:
                with airflow_errors():
                    event = trigger.poll_tolerant(utcnow())
                    while event is None and not self._killed:
                        time.sleep(trigger.next_poll_in())  # sooner where a stop at the cap falls due
                        event = trigger.poll_tolerant(utcnow())
            except KeyboardInterrupt as e:
                # Ctrl-C of `airflow dags test`, which runs the task in its own process and calls no
                # on_kill: the job ran on, unbilled, while the task failed. Stopped and billed as a kill.
                # A worker shut down with Ctrl-C forwards the SIGINT to its tasks: the same stop, and the
                # task fails as it did (a retry resumes from the checkpoint), not for good.
                self.on_kill()
                if not _ctrl_c_of_dags_test(e):
                    raise
                done = (
                    "training job stopped and billed"
                    if self._kill_handled
                    else "its training job could not be stopped (the error is above): stop it yourself"
                )
                raise _interrupted(done) from e
            except Exception:
                # A failed wait, not a kill: its job is _stops_unwatched_job's, as a failed step's is.
                self._waiting_on = None
                raise
            if self._killed:
                self._stop_killed(trigger)
            self._waiting_on = None
            if "state" in event:
                # As a deferred wait's event is read (execute_complete): the wait may have set a stop of its
                # own (a job on a dearer type stopped within max_usd), which its end is recorded by.
                with airflow_errors():
                    state = AttemptState.from_json(event["state"])
            # A kill from here on: the ended attempt is billed below, and no new one starts (_submit).
            outcome = self._on_event(context, state, event)
            if isinstance(outcome, dict):
                return outcome
            state = outcome

    def _on_event(self, context: Context, state: AttemptState, event: Mapping[str, Any]) -> Any:
        """Act on a trigger event: resume a pause, pause a job, or handle a job that ended."""
        from costaware.training.attempts import event_from_trigger
        from costaware.triggers.remote_training import in_dags_test

        with airflow_errors():
            outcome = self._step(context, state, event_from_trigger(event))
        if isinstance(outcome, dict) and self._killed and in_dags_test():
            # Killed as the job's end was handled: returned, the task succeeded and `dags test` ran its
            # downstream tasks, though the command was asked to stop. The training is billed and stored, the
            # task fails. A worker's SIGTERM (its shutdown) is Airflow's: the success stands.
            raise AirflowFailException(_killed_after_success(outcome))
        return outcome

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: record the attempt, then finish, fail or wait for the next attempt."""
        from costaware.training.attempts import AttemptState
        from costaware.triggers.remote_training import in_dags_test, take_kill_outside_inline_wait

        self._deferred_inline = None  # the trigger has fired: this process runs the task again
        if not event or "state" not in event:
            raise AirflowException(f"remote training trigger ended without a job status: {event!r}")
        if event.get("status") != "success":
            try:
                failed_state = AttemptState.from_json(event["state"])
            except Exception as e:  # an older or partial state: the failure below is what matters
                self.log.debug("no attempt state in the failed wait's event: %s", e)
            else:
                _tag_this_try(context, failed_state)  # the worker time of a failed try is this task's too
                self._live = failed_state if failed_state.current is not None else None
            with self._stops_unwatched_job(context):
                if event.get("configuration"):  # a retry would fail the same way
                    raise AirflowFailException(f"polling the training job failed: {event.get('message')}")
                raise AirflowException(f"polling the training job failed: {event.get('message')}")
        with airflow_errors():
            state = AttemptState.from_json(event["state"])
        _tag_this_try(context, state)
        self._retry = _try_number(context) > 1
        self._live = state if state.current is not None else None
        # `airflow dags test` killed after its inline wait took the event: the attempt that ended is billed
        # below, then the task ends, as for a kill during the wait (no new attempt, no retry).
        self._killed = take_kill_outside_inline_wait(state.plan.base_name)
        with self._stops_unwatched_job(context):
            try:
                outcome = self._on_event(context, state, event)
                if isinstance(outcome, dict):
                    return outcome
                return self._wait(context, outcome)
            except (AirflowException, _TaskKilled) as e:
                # A worker's SIGTERM (its shutdown) keeps the task's retries: the retry trains on from the
                # newest checkpoint. Only `airflow dags test`, asked to stop, fails for good.
                if not self._killed or not in_dags_test() or isinstance(e, AirflowFailException):
                    raise
                raise AirflowFailException(
                    f"killed (SIGTERM) as its wait ended: {e}; the task fails without a retry (clear it to "
                    "train on from its newest checkpoint)"
                ) from e

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Airflow's resume; a wait that ended with no event stops and bills its job on the last try.

        A deferral timeout (the wait's limit passed: the backend did not end the job at its own time limit,
        a Batch job queued or retried past it) or a trigger that failed resumes the task only to fail it,
        in ``BaseOperator.resume_execution``, before ``execute_complete`` runs, and no trigger ``on_kill``
        is called. The job ran on: with no retry left to follow it by its name, it was never billed and
        the task's hold stayed open.
        """
        from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR
        from airflow.sdk.exceptions import TaskDeferralError, TaskDeferralTimeout

        if next_method != TRIGGER_FAIL_REPR:
            return super().resume_execution(next_method, next_kwargs, context)
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except (TaskDeferralTimeout, TaskDeferralError) as e:
            self._wait_ended_unseen(context, e)

    def _wait_ended_unseen(self, context: Context, error: Exception) -> NoReturn:
        """Fail the try whose wait ended with no event (see :meth:`resume_execution`).

        Its job may run on: on the last try it is stopped and billed (cause ``unwatched``) and the hold
        settled; with a retry left, the retry follows it by its name, as after any failed try.
        """
        from airflow.sdk.exceptions import TaskDeferralTimeout

        if isinstance(error, TaskDeferralTimeout):
            what = "the wait for the training job timed out (Airflow's deferral timeout)"
        else:
            what = f"the trigger watching the training job failed ({error})"
        state = self._kept_wait_state(context)
        if state is not None:
            _tag_this_try(context, state)  # the worker time of this try is the training's too
            if state.current is None:
                raise AirflowException(
                    f"{what} while the training was paused, with no job running: a retry, or a clear, "
                    "resumes it from its checkpoint"
                ) from error
        job = (
            f"job {state.current.job_id} (attempt {state.current.attempt})" if state and state.current else ""
        )
        if not _last_try(context):
            raise AirflowException(
                f"{what}; {job or 'its job'} may still run: the retry follows it by its name and bills it"
            ) from error
        if state is None:
            raise AirflowException(
                f"{what}; no retry is left to follow its job, and the wait's state is not there to stop it "
                f"from (XCom {WAIT_STATE_XCOM_KEY!r}): look for this task's jobs on the {self.backend!r} "
                "backend and stop any still running"
            ) from error
        if self._stop_unwatched(state, why=f"{what} with no retry left to follow it"):
            done = "it was stopped and billed (cause unwatched), and the task's hold settled"
        else:
            done = f"stopping it failed (see above): stop it on the {state.plan.backend!r} backend by hand"
        raise AirflowException(
            f"{what}; no retry is left to follow {job}: {done}; clear the task to resume from its checkpoint"
        ) from error
