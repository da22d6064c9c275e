"""Stop the job of a remote training's wait whose task was killed, and bill one not seen to end.

The job is asked to stop and awaited (:meth:`KilledJobStopping._stop_job`); one not seen to end in time, or
whose stop and bill failed in a worker's wait, is billed to the end of its grace period, the latest it can
run (:meth:`KilledJobStopping._billed_to_latest_end`). What is billed, and the hold's settling, are
:mod:`costaware.triggers.remote_kill_billing`'s.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from costaware.core.ledger import utcnow
from costaware.core.series import parse_instant
from costaware.triggers.remote_gone_job import GoneJobBilling
from costaware.triggers.remote_job_status import (
    GONE_IS_FINAL_BACKENDS,
    stopped_job_status,
    vanished_job_status,
)


# A mixin of RemoteTrainingJobTrigger (through KilledJobBilling), not a trigger of its own.
class KilledJobStopping(GoneJobBilling):
    """The stop of a killed task's job, of ``RemoteTrainingJobTrigger``: its end, or the latest it can run."""

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
