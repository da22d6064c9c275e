"""Stop and bill the job of a remote training's wait whose task was killed, and settle the task's hold.

See :meth:`KilledJobBilling.stop_and_bill`; the trigger's ``on_kill``, a cancel past its deadline of a task
that ended, `airflow dags test`'s Ctrl-C, the operator's last try and ``costaware jobs reconcile`` use it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from costaware.core.ledger import utcnow
from costaware.core.series import parse_instant
from costaware.triggers.remote_gone_job import GoneJobBilling
from costaware.triggers.remote_job_status import (
    GONE_IS_FINAL_BACKENDS,
    stopped_job_status,
    vanished_job_status,
)

if TYPE_CHECKING:
    from costaware.ledger_spool import UnsureBill

#: How long a kill waits for the stopped job to end before it bills the job to the end of its grace period.
#: Airflow 3.3 stops awaiting ``on_kill`` after about a second (it cancels the trigger again at its next
#: loop): the work runs in a thread, which finishes on its own.
KILL_WAIT_SECONDS = 20.0
#: The states of a task that will not run again: a kill that leaves one settles the task's hold.
ENDED_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
#: The states of a task no person ended: its trigger moved to another triggerer, or its worker is going
#: away (shutdown, ``execution_timeout``); the job runs on for the task, or its retry, to follow.
WAITING_STATES = frozenset({"deferred", "running"})


class KilledJobBilling(GoneJobBilling):
    """The stop and bill of :class:`~costaware.triggers.remote_training.RemoteTrainingJobTrigger`'s job."""

    def _stop_and_bill_if_the_task_ended(self) -> None:
        """A cancel past the wait's deadline: stop and bill the job only where the task ended.

        Airflow calls no ``on_kill`` then: a task marked failed or succeeded after the deadline, before the
        scheduler's timeout check, left its job running, unbilled, with no resume to stop it. The task
        that timed out is on its way to its ``__fail__`` resume (scheduled, queued, running) or its retry,
        which follow the job, and one handed to another triggerer still waits; a state that cannot be read
        is taken as one of these, far the likelier, and the job is named for a person to check. An ended
        task may also be one its last try's resume failed, slower than the triggerer: that resume billed
        the job already, and it is found, not billed again.
        """
        verdict = self._task_verdict(unreadable="unknown")
        if verdict == "unknown" and self.job_id is not None:
            self.log.warning(
                "job %s on %s may run on unbilled if the task was ended: check it and stop it by hand",
                self.job_id,
                self.backend,
            )
            return
        if verdict != "ended":
            self.log.info(
                "the wait for job %s was cancelled past its deadline: the task's resume, or its new try, "
                "follows the job",
                self.job_id,
            )
            return
        self.log.warning(
            "the task ended past its wait's deadline (a person's mark, or its last try's resume), when "
            "Airflow calls no on_kill: stopping job %s and billing it, as for a kill",
            self.job_id,
        )
        self.stop_and_bill(ask_state=False)

    def stop_and_bill(
        self,
        *,
        wait_seconds: float = KILL_WAIT_SECONDS,
        poll_seconds: float = 1.0,
        ask_state: bool = True,
        cause: str = "killed",
        why: str = "its task was killed",
        ledger: Any = None,
        bill_refused: bool = False,
    ) -> str | None:
        """Stop the job of a task a person killed, bill what it ran, and settle the task's hold (blocking IO).

        The operator would have billed the attempt when the job ended and settled the hold when the
        training ended; once the task is killed nothing would, and the job would run on, unbilled (a
        clear's new try follows the job by name, but a task marked failed or succeeded has none). The job
        is asked to stop (SIGTERM first: it checkpoints) and billed as it ended; where it has not ended
        within ``wait_seconds``, to the end of its grace period, the latest the backend lets it run. A paused
        training has no job: its hold is settled only. A cleared task's hold is left to its new try.

        With ``ask_state``, Airflow's state of the task says what happened: ended (marked failed or success,
        or its run gone), cleared (it runs again), or still waiting, where no person ended it (a new try
        already follows the job): then the job runs on. Where the state cannot be read (outside Airflow),
        the task is taken as ended.

        ``cause`` and ``why`` say why the job was stopped in its entry (a task failing for good with its job
        still running, no retry left to follow it, uses this too: ``unwatched``). ``ledger``: the ledger to
        bill in, opened by the caller (``costaware jobs reconcile``'s), instead of ``ledger_conn_id``'s.

        Returns None, or why the backend refused the stop of a job then not seen to end: it may run on, so
        nothing is billed (billed to its grace period, it ran on unbilled past it) and the task's hold stays
        held; the error in the log says to stop it by hand, and ``costaware jobs reconcile`` lists it still.
        ``bill_refused``: bill it to its grace period all the same (a wait in the worker, which keeps no wait
        state for a reconcile to find the job by: unbilled, it would never be), and so on any other error
        before the bill (the backend cannot be opened, a poll fails with an error not the backend's).
        Without it, any other error before the bill is raised with the hold held too: the job may run on.
        """
        from costaware.core.errors import BillSpooledError, StopRefused
        from costaware.remote_billing import KilledTrainingBilling
        from costaware.training.attempts import AttemptState

        verdict = self._task_verdict() if ask_state else "ended"
        if verdict == "waiting":
            self.log.info("the task still waits (no person ended it): job %s runs on", self.job_id)
            return None
        refused: str | None = None
        state = AttemptState.from_json(self.state)
        billing = KilledTrainingBilling(
            ledger_conn_id=self.ledger_conn_id, aws_conn_id=self.aws_conn_id, log=self.log, ledger=ledger
        )
        try:
            if self.job_id is not None and state.current is not None:
                try:
                    job, ended, own_end = self._stop_job(
                        state,
                        wait_seconds=wait_seconds,
                        poll_seconds=poll_seconds,
                        why=why,
                        bill_refused=bill_refused,
                    )
                except Exception as e:
                    if not bill_refused:
                        raise
                    # Nothing bills a worker's job later (no wait state names it): billed now, as a stop
                    # refused, to the end of its grace period after a last try to stop it.
                    job, ended, own_end = self._stopped_after_error(state, e, why=why), False, False
                if job is not None:
                    # A job that had ended on its own before the kill keeps its own cause, as does a success.
                    own_cause = None if own_end or job["state"] == "succeeded" else cause
                    # Billed now, whatever the ledger says of another type's price: nothing bills it later.
                    state = billing._bill_attempt(
                        state,
                        job,
                        own_cause,
                        keyed_by_name=not ended,
                        price_unread_raises=False,
                        spool_unwritten=bill_refused,  # nothing bills a worker's job later
                    )
                    if billing.unsure_bill is None:
                        self.log.warning(
                            "%s: job %s stopped and billed, %.0f s for $%s",
                            why,
                            self.job_id,
                            float(job["billable_seconds"]),
                            state.attempts[-1].usd,
                        )
                    else:  # not in the ledger: a row of the job may bill this run (the ERROR above)
                        self._say_bill_kept(why, billing.unsure_bill, state.attempts[-1].usd, job)
        except StopRefused as e:
            verdict, refused = "refused", str(e)
            self.log.error(
                "job %s not billed: the stop was refused (%s): stop job %s on %s by hand; the task's budget "
                "hold stays held, and `costaware jobs reconcile` bills the job once it has ended",
                self.job_id,
                refused,
                self.job_id,
                self.backend,
            )
        except KeyboardInterrupt:
            # Given up (a hung backend or ledger, see _interrupts_wait_for_the_bill): the job may train on
            # unbilled, so its money stays held; settled here, it was freed while the job spent it.
            verdict = "given up"
            raise
        except BillSpooledError as e:
            # Billed, the ledger down: written when it is back. The hold is not settled now (the ledger
            # cannot take that either), and the entry, written later, leaves it open for a new try.
            verdict = "failed"
            self.log.error(
                "job %s stopped; its bill could not be written to the ledger (%s): kept in %s and written "
                "when the ledger is back (with the next cost entry that succeeds, or by `costaware spool "
                "drain`); the task's budget hold stays held until its run ends or its TTL passes",
                self.job_id,
                e,
                e.path,
            )
            raise
        except Exception as e:
            # Raised before the bill (open_backend, a poll failing with an error not the backend's, the
            # ledger's write): the job may train on, or ended unbilled. Settled, its money was freed while
            # the job spent it; held, the TTL or `costaware jobs reconcile` frees it once the job is billed.
            verdict = "failed"
            # A wait in the worker keeps no wait state for the reconcile to find the job by.
            follows = (
                "until its run ends or its TTL passes, and nothing bills the job: record what it ran by hand "
                "(a bill the spool could not take either is logged whole above: save it in the spool)"
                if bill_refused
                else "and `costaware jobs reconcile` bills the job once it has ended"
            )
            self.log.error(
                "job %s not billed (%s: %s): check job %s on %s and stop it by hand if it still runs; "
                "the task's budget hold stays held %s",
                self.job_id,
                type(e).__name__,
                e,
                self.job_id,
                self.backend,
                follows,
            )
            raise
        finally:
            if verdict == "given up":
                self.log.warning(
                    "job %s not billed: the task's budget hold stays held until it expires or a new try "
                    "takes it over",
                    self.job_id,
                )
            elif verdict in ("refused", "failed"):
                pass  # the job may run on: its money stays held (said above)
            elif verdict == "cleared":
                # Its new try took over the task's hold (it may have started already) and settles it with
                # all the attempts, this one included, when it ends.
                self.log.info("the task was cleared: its new try keeps the task's budget hold")
            else:
                billing._settle(state)
        return refused

    def _say_bill_kept(self, why: str, kept: UnsureBill, usd: str, job: Mapping[str, Any]) -> None:
        """Say what became of the kill's bill of ``usd``, kept for a person or only logged, as ``kept`` says.

        A file kept by an earlier try stays as it is: where its dollars differ, it is not this bill that
        waits there (this one is in the ERROR above), and the WARNING names the file's.
        """
        from costaware.ledger_spool import Kept

        if kept.kept in (Kept.NOW, Kept.EARLIER):
            where = "kept in spool/unsure"
        elif kept.kept is Kept.EARLIER_AT_ANOTHER_FIGURE:
            where = (
                f"not kept: spool/unsure keeps this job's bill of ${kept.file_usd} from an earlier try, "
                "logged"
            )
        else:
            where = "not written nor kept: logged"
        self.log.warning(
            "%s: job %s stopped; its bill of $%s (%.0f s) %s for a person (see the ERROR above)",
            why,
            self.job_id,
            usd,
            float(job["billable_seconds"]),
            where,
        )

    def _task_verdict(self, *, unreadable: str = "ended") -> str:
        """``ended``, ``cleared`` or ``waiting``: what Airflow says of the killed task now (see above).

        ``unreadable``: the verdict where the state cannot be read (no task instance: outside Airflow);
        ``unknown`` leaves it to the caller to say what follows.
        """
        ti = getattr(self, "task_instance", None)
        if ti is None:
            return unreadable
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            states = RuntimeTaskInstance.get_task_states(
                dag_id=ti.dag_id, map_index=ti.map_index, task_ids=[ti.task_id], run_ids=[ti.run_id]
            )
        except Exception as e:  # for a kill, the hold is settled: the safe side for a task that ended
            taken_as = "" if unreadable == "unknown" else f": taken as {unreadable}"
            self.log.warning("cannot read the killed task's state (%s)%s", e, taken_as)
            return unreadable
        run = states.get(ti.run_id) or {}
        key = ti.task_id if ti.map_index is None or ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
        if key not in run:
            return "ended"  # its run was deleted
        state = run[key]
        value = str(getattr(state, "value", state))
        if value in ENDED_STATES:
            return "ended"
        return "waiting" if value in WAITING_STATES else "cleared"

    def _stop_job(
        self,
        state: Any,
        *,
        wait_seconds: float,
        poll_seconds: float,
        why: str = "its task was killed",
        bill_refused: bool = False,
    ) -> tuple[dict[str, Any] | None, bool, bool]:
        """Stop the job, wait for its end: its last status, whether that is its end, whether it ended first.

        The third says the job had ended on its own before the stop (it keeps its own cause). A job not seen
        to end within ``wait_seconds`` (still running, gone from the backend, or not answering) is billed to
        the end of its grace period from the stop, the latest the backend lets it run: its billed time so far
        (from the backend's own start time) and the time since, or, where the backend gave none (no start
        time, or no answer), the time since its submit. That is not its end: the entry is keyed by the job's
        name.
        """
        from costaware.adapters.compute.base import (
            JobState,
            JobStatus,
            billed_instances,
            open_backend,
        )
        from costaware.core.errors import ComputeBackendError, JobNotFoundError, StopRefused
        from costaware.training.attempt_effects import stop_seconds

        assert self.job_id is not None and state.current is not None
        backend = open_backend(self.backend, self.backend_options)
        count = billed_instances(self.backend_options)  # billed seconds count every instance
        stopped = state.current.stopped
        seen_at = utcnow()
        unpriced = False  # the backend gave no billed time for the run (its poll failed, or 0 s running)
        status = JobStatus(
            job_id=self.job_id, state=JobState.RUNNING, market=state.current.market, instance_type=""
        )
        try:
            status = backend.poll(self.job_id)
        except JobNotFoundError:
            # Gone before we stopped it (a drain deleted the pod): billed from its last status.
            if not stopped:
                stop_sent = True
                try:
                    # Or not listed yet (a Batch job just submitted): it may start still, so stopped all
                    # the same (a pod already gone is nothing to stop).
                    backend.stop(self.job_id)
                except Exception as e:
                    stop_sent = False
                    self.log.warning(
                        "stopping job %s, which the backend does not list, failed: %s", self.job_id, e
                    )
                vanished = vanished_job_status(
                    self.job_id,
                    state.to_json(),
                    last_seen=self._last_seen,  # from its submit, it was billed time it may have queued
                    now=utcnow(),
                    instances=count,
                    listed_grace=0,
                    backend=self.backend,
                )
                if vanished is None:  # no submit time (an older state): nothing to bill it from
                    self.log.warning("%s; job %s is gone, nothing is billed", why, self.job_id)
                    return None, True, True
                if self.backend not in GONE_IS_FINAL_BACKENDS:
                    # A listing that lags (one DescribeJobs missed it): it may run on after the kill, to
                    # its grace period's end, or its time limit where the stop failed. Keyed by name, as a
                    # cleared try that follows it bills it once.
                    vanished = self._billed_as_gone(vanished, stop_sent=stop_sent)
                    self.log.warning("%s: job %s: %s", why, self.job_id, vanished.reason)
                    return dict(vanished.to_dict()), False, False
                self.log.warning("%s; job %s: %s", why, self.job_id, vanished.reason)
                return dict(vanished.to_dict()), True, True  # ended on its own: an interruption
            gone = stopped_job_status(stopped, now=utcnow(), instances=count)
            return dict(gone.to_dict()), True, False
        except ComputeBackendError as e:  # not answering now: stop it all the same, billed to its latest end
            self.log.warning("polling job %s failed (%s): stopping it all the same", self.job_id, e)
            unpriced = True
        else:
            if status.state.done:
                return dict(status.to_dict()), True, not stopped
        self.log.warning("%s: stopping job %s on %s", why, self.job_id, self.backend)
        stopped_at = utcnow()
        refused: Exception | None = None
        try:
            backend.stop(self.job_id)
        except Exception as e:  # refused (it ended meanwhile: SageMaker's "in status Stopped") or failed
            refused = e
            self.log.warning("stopping job %s failed (%s): waiting for its end all the same", self.job_id, e)
        give_up = time.monotonic() + wait_seconds
        gone = False
        while time.monotonic() < give_up:
            time.sleep(poll_seconds)
            try:
                polled = backend.poll(self.job_id)
            except JobNotFoundError:  # a deleted pod: it ended by now, when exactly is not known
                gone = True
                break
            except ComputeBackendError as e:  # a passing failure: look again
                self.log.warning("polling the stopped job %s failed: %s", self.job_id, e)
                continue
            status, seen_at, unpriced = polled, utcnow(), False
            if status.state.done:
                return dict(status.to_dict()), True, False
        if refused is not None and not gone and not bill_refused:
            # Not stopped, not seen to end: billed to its grace period, it would run on unbilled past it.
            raise StopRefused(f"{type(refused).__name__}: {refused}")
        if gone:
            reason = f"stopped when {why}; the backend no longer has it, billed up to then"
        else:
            reason = (
                f"stopped when {why}; not ended after {wait_seconds:.0f} s, billed to "
                f"{stop_seconds(state):.0f} s after the stop (its grace period, or the backend's own kill if "
                "later), the latest it can run"
            )
        ended = self._billed_to_latest_end(
            state,
            status,
            seen_at=seen_at,
            stopped_at=stopped_at,
            unpriced=unpriced,
            gone=gone,
            why=why,
            reason=reason,
        )
        return dict(ended.to_dict()), False, False

    def _stopped_after_error(self, state: Any, error: Exception, *, why: str) -> dict[str, Any]:
        """The job of a worker's wait whose stop and bill failed with ``error``, billed to its latest end.

        Stopped once more (best effort) and billed, as a stop refused, to its grace period's end from now,
        from its submit: nothing would bill it later.
        """
        from costaware.adapters.compute.base import JobState, JobStatus, open_backend
        from costaware.training.attempt_effects import stop_seconds

        assert self.job_id is not None and state.current is not None
        stopped_at = utcnow()
        stop_failed = ""
        try:
            open_backend(self.backend, self.backend_options).stop(self.job_id)
        except Exception as e:
            stop_failed = (
                f"; its stop failed too ({type(e).__name__}: {e}): check job {self.job_id} on {self.backend} "
                "and stop it by hand if it still runs"
            )
        self.log.error(
            "%s: stopping and billing job %s failed (%s: %s): billed to the end of its grace period all the "
            "same, as nothing bills it later%s",
            why,
            self.job_id,
            type(error).__name__,
            error,
            stop_failed,
        )
        status = JobStatus(
            job_id=self.job_id, state=JobState.RUNNING, market=state.current.market, instance_type=""
        )
        reason = (
            f"stopped when {why}, but its stop and bill failed ({type(error).__name__}: {error}); billed to "
            f"{stop_seconds(state):.0f} s after then (its grace period, or the backend's own kill if later), "
            "the latest it can run"
        )
        ended = self._billed_to_latest_end(
            state,
            status,
            seen_at=stopped_at,
            stopped_at=stopped_at,
            unpriced=True,
            gone=False,
            why=why,
            reason=reason,
        )
        return dict(ended.to_dict())

    def _billed_to_latest_end(
        self,
        state: Any,
        status: Any,
        *,
        seen_at: datetime,
        stopped_at: datetime,
        unpriced: bool,
        gone: bool,
        why: str,
        reason: str,
    ) -> Any:
        """``status`` (as seen at ``seen_at``) of a job not seen to end, billed to the latest it can run.

        ``unpriced``: the backend gave no billed time for the run (billed from the submit instead); ``reason``
        says why it ended, unless it never ran.
        """
        from dataclasses import replace

        from costaware.adapters.compute.base import JobState, billed_instances, with_copies_run_out
        from costaware.training.attempt_effects import stop_seconds

        count = billed_instances(self.backend_options)
        # The backend's own kill comes at stop_seconds (SageMaker's 120 s, the pod's grace + 10 s).
        latest_end = utcnow() if gone else stopped_at + timedelta(seconds=stop_seconds(state))
        billable = status.billable_seconds
        if status.state != JobState.PENDING:
            billable += count * max(0.0, (latest_end - seen_at).total_seconds())
            submitted = state.current.submitted_at
            if submitted and (unpriced or status.billable_seconds == 0):
                # A backend that gave no start time for the run, or did not answer: from this try's submit,
                # which may count time the job queued.
                since = latest_end - parse_instant(submitted, name="submitted_at")
                since_submit = count * since.total_seconds()
                if state.current.followed:  # an earlier try's job: what it ran before this try found it too
                    since_submit += float(state.current.followed["job"].get("billable_seconds") or 0)
                billable = max(billable, since_submit)
        if not gone and status.state == JobState.PENDING and billable == 0:
            reason = f"stopped when {why}, while it waited to start: it never ran"
        ended = replace(
            status,
            billable_seconds=billable,
            state=JobState.INTERRUPTED,
            ended_at=latest_end.timestamp(),
            instance_type=status.instance_type or state.plan.instance_type,
            reason=reason,
        )
        # Not polled to its end: what its copies still run (a Batch copy whose stop failed: to its limit).
        return with_copies_run_out(ended)
