"""Stops at the cap of a job a remote training's wait does not see listed (a listing that lags, or gone).

A stop at the cap that falls due while the backend does not list the job is sent by the job's id; one of a
gone job held back while the wait's kept state is unread is sent once it falls due; and a followed job this
wait never saw has its due point taken as it was found. The stop itself, its retries and its keeping are
:mod:`remote_cap_stop`'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from costaware.core.errors import ConfigurationError
from costaware.core.series import parse_instant
from costaware.triggers.remote_cap_stop import MIN_CAP_STOP_WAIT_SECONDS, CapStopping


# A mixin of RemoteTrainingJobTrigger, not a trigger of its own.
class UnlistedCapStopping(CapStopping):
    """The stops at the cap of a job not listed, of ``RemoteTrainingJobTrigger``."""

    def _stop_unlisted_at_cap(self, due_left: float | None) -> None:
        """Send the stop at the cap that falls due while the job is not listed (a listing that lags).

        Kept due and never sent, the job ran on for up to ``NOT_LISTED_GRACE_SECONDS`` past ``max_usd``:
        a stop goes by the job's id (Batch's TerminateJob), whether or not DescribeJobs lists it now. A wait
        that never saw the job has no last poll's due point: a followed job's is taken as it was found
        (asked only at the first held-back poll, 600 s on, a due point in between was missed by as much).
        """
        job_id = str(self.job_id)
        if self._stopped_for_cap == job_id:
            return
        if self._last_seen is None:
            self._stop_unseen_followed_job_at_cap(job_id)
            return
        if due_left is None:
            return
        if due_left > MIN_CAP_STOP_WAIT_SECONDS:
            self._cap_stop_due_after(due_left)  # not due yet: the wait sleeps up to it (not sent 5 s early)
            return
        self._send_unlisted_cap_stop(job_id)

    def _stop_unseen_followed_job_at_cap(self, job_id: str) -> None:
        """Send the stop at the cap of a followed job this wait has never seen listed, once it falls due.

        Its due point is an instant (:meth:`_followed_cap_stop_due_at`), worked out again at each poll: kept
        from the first, a price unknown then left the planned type's limit for good (a job on a type 4 times
        dearer stopped 900 s after the find, not 310 s), and the price is asked again soon meanwhile.
        """
        followed, now = self._followed_cap_stop_due_at(), self._polled_at
        if followed is None or now is None:
            return
        due_at, priced = followed
        if not priced:
            self._retry_cap_stop(stop_due=False)  # on the dearer type's price, the stop may fall due sooner
        else:
            self._price_read_retries = 0
        left = (due_at - now).total_seconds()
        if left > MIN_CAP_STOP_WAIT_SECONDS:
            self._cap_stop_due_after(left)  # polled again when it falls due
        else:
            self._send_unlisted_cap_stop(job_id)

    def _stop_held_back_at_cap(
        self, due_before: float | None, polled_before: datetime | None, *, first_held: bool
    ) -> None:
        """The stop at the cap of a gone job held back while the kept state is unread: sent once it falls due.

        Each held-back poll asks again soon to read the kept state (:meth:`_retry_cap_stop`), so the next
        poll's ``due_before`` is that retry, not the cap: only retried, the due point was lost and the job
        ran on past ``max_usd`` up to the bound (1,315 s of a 1,200 s cap). Kept as a time instead, taken at
        the ``first_held`` poll only (the last poll's due point, relative to it: later ones are this retry);
        a stop that fails is asked again at the following polls, as each finds the time past, from the
        shortest retry (``CAP_STOP_RETRY_SECONDS``), not the reads' backoff. A wait that never saw the job
        has no last poll's due point: a followed job's is taken as it was found, at each poll
        (:meth:`_followed_cap_stop_due_at`; its ``due_before`` may be a retry to read a price, not its cap).
        """
        job_id = str(self.job_id)
        if self._stopped_for_cap == job_id:
            return
        if self._last_seen is None:
            followed = self._followed_cap_stop_due_at()
            self._held_cap_stop_due_at = None if followed is None else followed[0]
        elif first_held and due_before is not None and polled_before is not None:
            self._held_cap_stop_due_at = polled_before + timedelta(seconds=due_before)
        due_at, now = self._held_cap_stop_due_at, self._polled_at
        if due_at is None or now is None:
            self._retry_cap_stop()  # the kept state is read again soon; no stop known to fall due
            return
        left = (due_at - now).total_seconds()
        if left > MIN_CAP_STOP_WAIT_SECONDS:
            self._retry_cap_stop()  # the kept state is read again soon
            self._cap_stop_due_after(left)  # and polled when the stop falls due, if not sooner
            return
        if polled_before is None or (due_at - polled_before).total_seconds() > MIN_CAP_STOP_WAIT_SECONDS:
            # First poll past it: the reads' backoff (60 s by then) would ask a refused stop again late.
            self._cap_stop_retries = 0
        self._retry_cap_stop()  # the kept state is read again soon
        self._send_unlisted_cap_stop(job_id)

    def _followed_cap_stop_due_at(self) -> tuple[datetime, bool] | None:
        """When the stop at the cap of a followed job this wait never saw falls due, as it was found.

        Unseen, the wait had no due point, and its only stop went out at the hold-back's bound (300 s past
        a 1,200 s cap). Found running with its billed seconds read (not an estimate), it reaches its
        ``stop_after_seconds`` that much later, as a poll of this wait at the find would have weighed it.
        None where it was found otherwise: a job waiting to start starts when capacity comes, and a stop at
        the earliest it may fall due would cut short a run ``max_usd`` paid for. Where what is left buys
        less than ``MIN_CAPPED_SECONDS``, due as it was found, in any state, as a listed job's stop is
        (:meth:`_stop_followed_job_at_cap`): found waiting, it was stopped at the bound, 1,235 s on. With
        it, whether a dearer type's price was read: False, the planned type's limit stands for now.
        """
        from costaware.adapters.compute.base import ESTIMATED_SECONDS, JobState, JobStatus, billed_instances
        from costaware.core.errors import LEDGER_UNREADABLE
        from costaware.training.attempt_effects import MIN_CAPPED_SECONDS

        current = self.state.get("current") or {}
        limit, followed = current.get("stop_after_seconds"), current.get("followed")
        if self._last_seen is not None or not current.get("stop_by_poll") or limit is None or not followed:
            return None
        try:
            found_at = parse_instant(str(followed.get("seen_at")), name="followed.seen_at")
        except ConfigurationError:
            return None  # a kept value that is no time: no due point, the bound's stop as before
        if float(limit) < MIN_CAPPED_SECONDS:
            return found_at, True  # no room for a run: stopped before it starts (or runs on)
        found = JobStatus.from_dict(followed["job"])
        if found.state != JobState.RUNNING or found.metrics.get(ESTIMATED_SECONDS):
            return None
        ran = float(found.billable_seconds) / billed_instances(self.backend_options)
        try:
            other = self._followed_other_type_limit(found)
        except LEDGER_UNREADABLE:
            return found_at + timedelta(seconds=max(0.0, float(limit) - ran)), False
        if other is not None:
            limit = min(float(limit), other)
        return found_at + timedelta(seconds=max(0.0, float(limit) - ran)), True

    def _send_unlisted_cap_stop(self, job_id: str) -> None:
        """Send the stop at the cap, by its id, of ``job_id``, which its backend does not list now.

        Where the backend's "no such job" is final (``GONE_IS_FINAL_BACKENDS``: a deleted pod), nothing runs
        to stop: none is sent (a delete that 404s), and the stop is recorded all the same, not ``unlisted``:
        no SIGTERM went out, so there is no grace period to hold it to; it is billed to its first 404
        (:meth:`~costaware.triggers.remote_gone_after_cap_stop.CapStoppedGoneBilling._gone_after_cap_stop`).
        """
        from costaware.training.attempt_effects import MIN_CAPPED_SECONDS
        from costaware.triggers.remote_job_status import GONE_IS_FINAL_BACKENDS

        already_gone = self.backend in GONE_IS_FINAL_BACKENDS
        current = self.state.get("current") or {}
        limit, found = current.get("stop_after_seconds"), (current.get("followed") or {}).get("job") or {}
        if not already_gone and limit is not None and float(limit) < MIN_CAPPED_SECONDS:
            # Stopped where it was found (:meth:`_followed_cap_stop_due_at`), perhaps before it ran at all.
            self.log.warning(
                "job %s, not listed on %s now, was found %s by this try and what is left of max_usd buys "
                "no run: stopping it by its id",
                job_id,
                self.backend,
                found.get("state") or "in an unknown state",
            )
        elif not already_gone:
            self.log.warning(
                "job %s, not listed on %s now, has run what is left of max_usd: stopping it by its id",
                job_id,
                self.backend,
            )
        else:
            seen = (
                f"since it was seen at {self._last_seen[1].isoformat()}"
                if self._last_seen is not None
                else "and this wait never saw it (an earlier try's job, as this try found it)"
            )
            self.log.warning(
                "job %s is gone from %s %s (its 404 is final: it was deleted), and its stop at what is left "
                "of max_usd falls due now: nothing to stop; its end is billed as stopped at the cap",
                job_id,
                self.backend,
                seen,
            )
        # Its end is recorded as stopped by max_usd, as the stop the poll sends (a dearer type's limit).
        stop_after = None
        other = self._other_type_limit
        if other is not None and other[0] == job_id and other[1] is not None:
            stop_after = self._stopped_after_seconds(other[1])
        self._send_cap_stop(
            job_id, stop_after_seconds=stop_after, unlisted=not already_gone, already_gone=already_gone
        )
