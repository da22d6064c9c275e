"""A job its backend no longer lists, billed as gone by a remote training's wait.

Where the backend's "no such job" may lag (Batch's DescribeJobs), the job may run on: it is stopped, best
effort, and billed to its grace period after the stop, or to its time limit where the stop failed. One
gone after this wait stopped it at the cap is billed by :mod:`remote_gone_after_cap_stop`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from costaware.core.ledger import utcnow
from costaware.core.series import parse_instant
from costaware.triggers import MAX_POLL_ERRORS
from costaware.triggers.remote_gone_after_cap_stop import CapStoppedGoneBilling
from costaware.triggers.remote_job_status import (
    GONE_IS_FINAL_BACKENDS,
    NOT_LISTED_GRACE_SECONDS,
    ended_when_found,
    seen_or_followed,
    stop_requested_at,
)

#: A job gone while the kept state of the wait before this one cannot be read is held back (was it stopped
#: at the cap?) for at least this many failed reads and this long after it was first found gone; then it is
#: billed as gone all the same, at the dearer bill. Unbounded, an XCom that never reads back (the API server
#: down for good, a value that never deserializes) kept the job unbilled until the deferral's timeout.
UNREAD_KEPT_STATE_READS = MAX_POLL_ERRORS
UNREAD_KEPT_STATE_SECONDS = NOT_LISTED_GRACE_SECONDS


class GoneJobBilling(CapStoppedGoneBilling):
    """The jobs gone from their backend, of ``RemoteTrainingJobTrigger``."""

    _kept_state_read_failures: int
    _gone_unread_since: datetime | None

    def _unread_kept_state_bound_reached(self, now: datetime) -> bool:
        """Whether a job gone while the kept state is unread has been held back long enough to bill it.

        Billed then from what was last seen, as if no stop at the cap had been sent (to now, and to the
        grace period after a stop sent now): never less than the stop at the cap would have billed.
        """
        if self._gone_unread_since is None:
            self._gone_unread_since = now
        held_for = (now - self._gone_unread_since).total_seconds()
        return (
            self._kept_state_read_failures >= UNREAD_KEPT_STATE_READS
            and held_for >= UNREAD_KEPT_STATE_SECONDS
        )

    def _stop_unlisted(self, now: datetime, status: Any) -> bool | None:
        """Stop a job billed as gone, best effort, before its attempt is resubmitted.

        A Batch or SageMaker job the backend does not list may exist after all (a listing that lags: Batch's
        DescribeJobs is eventually consistent, a job seen once may drop out of it): it would run on beside
        the resubmitted attempt, billed to nobody. Only where the backend's "no such job" is final for a job
        seen before (:data:`GONE_IS_FINAL_BACKENDS`: a deleted pod) is there nothing left to stop.
        The copies of its submit whose stop failed at the last poll (``status``'s ``COPY_SECONDS_LEFT``) are
        stopped too: nothing polls the job, which stopped them again, after this.
        Returns whether the job's own stop went through (None: nothing to stop).
        """
        from costaware.adapters.compute.base import COPY_SECONDS_LEFT, open_backend

        if self._polled_after_cancel("stopped as not listed"):
            return None
        followed = (self.state.get("current") or {}).get("followed")
        seen_at = self._last_seen[1].isoformat() if self._last_seen else followed and followed["seen_at"]
        if seen_at and self.backend in GONE_IS_FINAL_BACKENDS:
            self.log.info(
                "job %s on %s was seen at %s and is gone now: nothing to stop",
                self.job_id,
                self.backend,
                seen_at,
            )
            return None
        if self._last_seen is not None:
            unlisted = f"has not listed since it was seen at {seen_at}"
        elif seen_at:
            unlisted = f"has not listed since this try found it (an earlier try's job) at {seen_at}"
        else:
            submitted = (self.state.get("current") or {}).get("submitted_at")
            since = (now - parse_instant(submitted, name="submitted_at")).total_seconds() if submitted else 0
            unlisted = f"has not listed in the {since:.0f} s since its submit"
        self.log.warning(
            "stopping job %s, which %s %s, in case it exists after all: it is billed to the end of its "
            "grace period after the stop",
            self.job_id,
            self.backend,
            unlisted,
        )
        backend = open_backend(self.backend, self.backend_options)
        for copy_id in (status.metrics.get(COPY_SECONDS_LEFT) or {}).get("unstopped") or []:
            try:
                backend.stop(str(copy_id))
            except Exception as e:
                self.log.warning(
                    "stopping job %s, a copy of %s's submit, failed (%s: %s): stop it by hand; it is billed "
                    "to its time limit",
                    copy_id,
                    self.job_id,
                    type(e).__name__,
                    e,
                )
        try:
            backend.stop(str(self.job_id))
        except Exception as e:
            self.log.warning(
                "stopping job %s, which %s does not list, failed (%s: %s); if it exists after all, stop it "
                "by hand: it is billed to its time limit",
                self.job_id,
                self.backend,
                type(e).__name__,
                e,
            )
            return False
        return True

    def _billed_as_gone(self, status: Any, *, stop_sent: bool | None) -> Any:
        """``status`` (billed up to now) of a job billed as gone that may run on, billed to its latest end.

        See :meth:`_gone_bill`, which this is with a kept state that was read.
        """
        return self._gone_bill(status, stop_sent=stop_sent)[0]

    def _gone_bill(
        self, status: Any, *, stop_sent: bool | None, kept_state_unread: bool = False
    ) -> tuple[Any, datetime | None]:
        """``status`` (billed up to now) of a job billed as gone that may run on, billed to its latest end.

        A job its backend does not list may exist after all (:meth:`_stop_unlisted`): stopped, it runs to
        the end of its grace period (or the backend's own kill); where the stop failed, to its time limit,
        with nothing to watch it. Where nothing was stopped (:data:`GONE_IS_FINAL_BACKENDS`), as it is.
        ``kept_state_unread``: billed at the bound of a kept state never read, within the stop at the cap
        where the job's last seen status says a stop went out by then (:meth:`_within_due_poll_stop`)
        unless this stop failed. Returns the bill, and when that stop was asked where it lowered the bill
        (else None): what the bill did, for the caller to say.
        """
        from dataclasses import replace

        from costaware.adapters.compute.base import billed_instances, with_copies_run_out
        from costaware.training.attempt_effects import MIN_CAPPED_SECONDS, stop_seconds
        from costaware.training.attempts import AttemptState

        if ended_when_found(self.state, self._last_seen) is not None:
            return status, None  # it had ended when this try found it: nothing ran on after its end
        if stop_sent is None or self.backend in GONE_IS_FINAL_BACKENDS:
            return self._within_due_poll_stop(status) if kept_state_unread else (status, None)
        # Nothing polls it again: its copies are billed what they may still run (a failed stop's time limit).
        if not self.state.get("backend"):  # a state without its plan (not the operator's): nothing to size by
            return with_copies_run_out(status), None
        state = AttemptState.from_json(self.state)
        if state.current is None:
            return with_copies_run_out(status), None
        count = billed_instances(self.backend_options)
        grace = stop_seconds(state)
        # The time limit binds the job itself: its copies' seconds (billed with it) come on top.
        copy_seconds = float(status.metrics.get("batch_copy_seconds") or 0.0)
        current = state.current
        if stop_sent:
            own = status.billable_seconds - copy_seconds + count * grace
            more = f"; stopped, billed {grace:.0f} s more, its grace period after the stop"
            if current.stop_after_seconds is not None and not current.stop_by_poll and not current.followed:
                # The limit max_usd left, which its submit gave it and its backend holds (Batch's is 60 s at
                # the least): billed up to the poll that took it as gone, it was billed past that (the cap).
                held_limit = max(MIN_CAPPED_SECONDS, current.stop_after_seconds)
                held = count * (float(held_limit) + grace)
                if own > held:
                    own = held
                    more += f", within its time limit ({held_limit} s)"
            stopped = replace(status, billable_seconds=own + copy_seconds, reason=status.reason + more)
            bounded_at = None
            if kept_state_unread:
                stopped, bounded_at = self._within_due_poll_stop(stopped)
            return with_copies_run_out(stopped), bounded_at
        limit = self._time_limit_held(state, count)
        own = max(status.billable_seconds - copy_seconds, count * (limit + grace))
        more = f"; its stop failed: billed to its time limit ({limit:.0f} s) and grace period ({grace:.0f} s)"
        billed = replace(status, billable_seconds=own + copy_seconds, reason=status.reason + more)
        return with_copies_run_out(billed), None

    def _within_due_poll_stop(self, status: Any) -> tuple[Any, datetime | None]:
        """``status`` billed at most to the grace period's end after the due stop at the cap, if it went.

        A job whose state has its stop at the cap made by the waits' polls (``stop_by_poll``) is stopped
        once its billed seconds reach ``stop_after_seconds`` per instance, but only by a wait alive and
        polling it then: the first wait may die before that, and a re-created one that never sees the job
        listed sends nothing (seen 100 s of 600, the only stop went out at this bound, 1,330 s after its
        submit: billed 710 s, it may have run 1,440 s). Gone while the kept state stays unread, the wait
        knows the stop went out on time only where the job's last seen status says a stop was asked no
        later than the cap fell due (:meth:`_stop_asked_before_due`); else it stays billed up to now.
        Never less than it was seen to run. Copies' seconds are in the billed seconds the stop was weighed
        on, so they are in this bound too. With when that stop was asked where the bound lowered the bill
        (else None: the bill was within it, or none is known).
        """
        from dataclasses import replace

        from costaware.adapters.compute.base import SEEN_BILLABLE_SECONDS, billed_instances
        from costaware.training.attempt_effects import stop_seconds
        from costaware.training.attempts import AttemptState

        if not self.state.get("backend"):  # a state without its plan: nothing to size the grace period by
            return status, None
        state = AttemptState.from_json(self.state)
        current = state.current
        if current is None or current.stop_after_seconds is None or not current.stop_by_poll:
            return status, None
        asked = self._stop_asked_before_due()
        if asked is None:
            return status, None
        count = billed_instances(self.backend_options)
        due = count * float(current.stop_after_seconds)
        grace = stop_seconds(state)
        seen = float(status.metrics.get(SEEN_BILLABLE_SECONDS) or 0.0)
        most = max(due, seen) + count * grace
        if status.billable_seconds <= most:
            return status, None
        said = (
            f"; asked to stop at {asked.isoformat()}, as {self.backend} said, before its stop at the cap "
            f"fell due after {current.stop_after_seconds} s of running: billed at most to that and its grace "
            f"period ({grace:.0f} s), {most:.0f} s"
        )
        return replace(status, billable_seconds=most, reason=status.reason + said), asked

    def _stop_asked_before_due(self) -> datetime | None:
        """When a ``stop_by_poll`` job was asked to stop, where its last seen status says: by its cap's due.

        None: not such a job, or not said (or said asked later). The cap falls due at
        ``stop_after_seconds`` billed seconds per instance: seen at ``seen`` billed seconds, it reached
        them no sooner than ``(due - seen) / count`` seconds later; a stop asked by then (the backend's
        ``STOP_REQUESTED_AT``) held it within the cap and its grace period. The status last seen is this
        wait's, else the one the operator found a followed job at.
        """
        from costaware.adapters.compute.base import billed_instances

        current = self.state.get("current") or {}
        if not current.get("stop_by_poll") or current.get("stop_after_seconds") is None:
            return None
        count = billed_instances(self.backend_options)
        due = count * float(current["stop_after_seconds"])
        last_seen = seen_or_followed(self.state, self._last_seen)
        if last_seen is None:
            return None
        seen, seen_at = last_seen
        asked_at = stop_requested_at(seen)
        if asked_at is None:
            return None
        # An estimate (a followed job never read) is the most it may have billed: due no sooner than that.
        due_at = seen_at + timedelta(seconds=max(0.0, due - float(seen.billable_seconds)) / count)
        return asked_at if asked_at <= due_at else None

    def _time_limit_held(self, state: Any, count: int) -> float:
        """The time limit ``state``'s running job was given at its submit, as near as can be told (s).

        What ``max_usd`` left binds it where the backend holds that (not a stop by a poll). ``count``: its
        billed instances. A followed job's from its creation, else its start as found (at most its queue
        later: then no upper bound).
        """
        from costaware.training.plan.arguments import job_seconds_left

        assert state.current is not None
        submitted = state.current.submitted_at
        start = parse_instant(submitted, name="submitted_at") if submitted else utcnow()
        followed = state.current.followed
        if followed:
            # An earlier try's job: submitted then, not at this try's re-attach (from there, a spot job's
            # limit to the deadline was short by its whole earlier run). Where the backend gave no creation
            # time, from its start as found, at most its queue later.
            if followed.get("created_at"):
                start = parse_instant(followed["created_at"], name="created_at")
            else:
                ran = float(followed["job"].get("billable_seconds") or 0) / count
                start = parse_instant(followed["seen_at"], name="seen_at") - timedelta(seconds=ran)
        limit = float(job_seconds_left(state.plan, start, state.current.market))
        if state.current.stop_after_seconds is not None and not state.current.stop_by_poll:
            limit = min(limit, float(state.current.stop_after_seconds))
        return limit
