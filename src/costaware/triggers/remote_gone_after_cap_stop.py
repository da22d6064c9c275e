"""The bill of a job gone from its backend after a remote training's wait stopped it at the cap.

Stopped, it ran to the end of its grace period after the stop at the latest (a stop sent while it was not
listed holds it as gone until then); seen waiting to start at the stop, it never started; a pod whose 404
(final) came before the stop ran no longer than that 404. The bill of a job gone otherwise is
:mod:`remote_gone_job`'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from costaware.core.series import parse_instant
from costaware.triggers.remote_cap_stop_listed import ListedCapStopping
from costaware.triggers.remote_job_status import (
    GONE_IS_FINAL_BACKENDS,
    seen_or_followed,
    vanished_job_status,
)
from costaware.triggers.remote_wait_state import CAP_STOP_KEY


# A mixin of RemoteTrainingJobTrigger (through GoneJobBilling), not a trigger of its own.
class CapStoppedGoneBilling(ListedCapStopping):
    """The jobs gone from their backend after a stop at the cap, of ``RemoteTrainingJobTrigger``."""

    def _cap_stop_grace_end(self) -> datetime | None:
        """When the grace period after this wait's latest stop at the cap ends; None without a plan.

        The latest: a job stopped again, seen running past the first stop's grace period
        (``_stop_again_past_grace``), was billed only to that first end, before it was last seen running.
        """
        from costaware.training.attempt_effects import stop_seconds
        from costaware.training.attempts import AttemptState

        stopped_at = self._cap_stop_again_at or self._cap_stopped_at
        if stopped_at is None or not self.state.get("backend") or not self.state.get("current"):
            return None
        return stopped_at + timedelta(seconds=stop_seconds(AttemptState.from_json(self.state)))

    def _unlisted_cap_stop_grace_left(self, now: datetime) -> float:
        """Seconds left at ``now`` of the grace period after a stop at the cap sent to an unlisted job.

        A poll that does not list the job says nothing of when it ended: it may still be checkpointing up
        to that grace period's end, and is billed to it. Taken as gone sooner, its bill ended after the
        poll that told it (an ``ended_at`` in the future, in the entry's key, note and emissions window).
        0 where the stop was sent while the job was listed, or the grace period has passed.
        """
        sent = (self.state.get("current") or {}).get(CAP_STOP_KEY) or {}
        if not sent.get("unlisted"):  # asked before the plan is read for the grace period: at every poll
            return 0.0
        grace_end = self._cap_stop_grace_end()
        return 0.0 if grace_end is None else max(0.0, (grace_end - now).total_seconds())

    def _gone_after_cap_stop(self, status: Any, *, now: datetime, instances: int) -> Any:
        """``status`` (billed as gone up to ``now``) of a job this wait stopped at the cap before it went.

        The stop went through: it ran to its grace period's end after the stop at the latest, and ended
        stopped by ``max_usd`` as the cap's other stops do (billed up to now, it was an interruption billed
        up to ``NOT_LISTED_GRACE_SECONDS`` past the stop). A stop sent while the job was not listed is
        taken as gone only once that grace period has passed (:meth:`_unlisted_cap_stop_grace_left`), and
        so billed to its end: billed to the poll 5 s after the stop, its grace period went unbilled. A job
        seen waiting to start at the stop or after it never started: billed nothing more (its queue costs
        nothing on any backend; billed to its grace period's end, a job stopped where nothing was left of
        ``max_usd`` was billed that grace period past the cap). A pod whose 404 (final) this wait held back
        for its kept state ran no longer than that first 404 (:meth:`_final_404_bill`).
        """
        from dataclasses import replace

        from costaware.adapters.compute.base import JobState, with_copies_run_out

        stopped_at = self._cap_stopped_at
        # A re-created wait: as seen at the stop; a followed job it never saw: as this try found it.
        last_seen = seen_or_followed(self.state, self._last_seen or self._cap_stop_seen)
        if last_seen is None or stopped_at is None:
            return with_copies_run_out(status)
        final_404 = self._final_404_bill(status, stopped_at, last_seen, instances=instances)
        if final_404 is not None:
            return final_404
        seen, seen_at = last_seen
        if seen.state == JobState.PENDING and seen_at >= stopped_at:
            # Seen before the stop, it may have started in between: billed to the grace period's end below.
            reason = (
                f"stopped at what was left of max_usd at {stopped_at.isoformat()}, before it started (seen "
                f"waiting at {seen_at.isoformat()}); {self.backend} has not listed it since: billed what it "
                "ran before, nothing for its wait"
            )
            self.log.warning("job %s on %s: %s", self.job_id, self.backend, reason)
            never_started = replace(
                status, billable_seconds=seen.billable_seconds, ended_at=seen_at.timestamp(), reason=reason
            )
            return with_copies_run_out(never_started)
        grace_end = self._cap_stop_grace_end()
        # Seen running past it (polls further apart than the grace period), it ran at least to then.
        end = now if grace_end is None else max(seen_at, min(now, grace_end))
        billed = seen.billable_seconds + instances * max(0.0, (end - seen_at).total_seconds())
        again_at = self._cap_stop_again_at
        # The bill runs from the latest stop: a reason naming only the first misread where it ended.
        again = f", stopped again at {again_at.isoformat()}" if again_at is not None else ""
        reason = (
            f"stopped at what was left of max_usd at {stopped_at.isoformat()}{again}; {self.backend} has not "
            f"listed it since: billed to {_bill_end(end, seen_at, grace_end, again=bool(again))}"
        )
        self.log.warning("job %s on %s: %s", self.job_id, self.backend, reason)
        ended = replace(status, billable_seconds=billed, ended_at=end.timestamp(), reason=reason)
        return with_copies_run_out(ended)

    def _final_404_bill(
        self, status: Any, stopped_at: datetime, last_seen: tuple[Any, datetime], *, instances: int
    ) -> Any | None:
        """``status`` of a pod gone (a final 404) by the time of its stop at the cap, billed to that 404.

        Held back for the kept state, the pod was gone from ``_gone_unread_since``: a 404 is final on
        Kubernetes, so it ran no longer, and the stop recorded after it sent no SIGTERM (no grace period
        ran). Billed to the grace period's end after the due point instead, it was billed 280 s past its
        404. Stopped by ``max_usd`` only where the stop fell due by that 404; due later, it went by itself
        (a drain, a reclaim) and is billed as such. ``last_seen``: the status and time the caller found it
        at (:func:`seen_or_followed`). None: not such a pod. A re-created wait, never held back itself,
        takes the first 404 kept with the stop (:meth:`_kept_first_404`).
        """
        from dataclasses import replace

        from costaware.adapters.compute.base import with_copies_run_out

        first_404 = self._gone_unread_since or self._kept_first_404()
        if self.backend not in GONE_IS_FINAL_BACKENDS or first_404 is None:
            return None
        # The sooner of this wait's due point and the stop recorded: an earlier wait's stop (its kept state)
        # before the first 404 stopped it, whatever later point this wait worked out (billed as gone by
        # itself, a new attempt planned, where this wait's own due point was preferred).
        held = self._held_cap_stop_due_at
        due_at = stopped_at if held is None else min(held, stopped_at)
        if due_at > first_404:
            gone = vanished_job_status(
                str(self.job_id),
                self.state,
                last_seen=self._last_seen or self._cap_stop_seen,
                now=first_404,
                instances=instances,
                backend=self.backend,
            )
            return None if gone is None else with_copies_run_out(gone)
        seen, seen_at = last_seen
        end = max(seen_at, first_404)
        reason = (
            f"its stop at what was left of max_usd fell due at {due_at.isoformat()}; {self.backend} had "
            f"deleted it by {first_404.isoformat()} (its 404 is final): billed to then"
        )
        self.log.warning("job %s on %s: %s", self.job_id, self.backend, reason)
        billed = seen.billable_seconds + instances * (end - seen_at).total_seconds()
        ended = replace(status, billable_seconds=billed, ended_at=end.timestamp(), reason=reason)
        return with_copies_run_out(ended)

    def _kept_first_404(self) -> datetime | None:
        """The first 404 kept with this job's stop at the cap, sent to a pod already gone; else None.

        A re-created wait reads it with the stop (``_restore_cap_stop``): without it, the pod was billed
        to its grace period's end after the stop, though its 404 said it was gone and no SIGTERM went out.
        """
        sent = (self.state.get("current") or {}).get(CAP_STOP_KEY) or {}
        gone_at = sent.get("gone_at") if sent.get("job_id") == self.job_id else None
        return parse_instant(str(gone_at), name="cap_stop.gone_at") if gone_at else None


def _bill_end(end: datetime, seen_at: datetime, grace_end: datetime | None, *, again: bool) -> str:
    """Where the bill of a job gone after its stop at the cap ends, said for its reason."""
    stop = "the latest stop" if again else "the stop"
    if grace_end is not None and end == seen_at and seen_at > grace_end:
        return f"when it was last seen running ({seen_at.isoformat()}), past its grace period after {stop}"
    if end == grace_end:
        return f"the end of its grace period after {stop}"
    within = f", within its grace period after {stop}" if grace_end is not None else ""
    return f"the poll that found it gone ({end.isoformat()}){within}"
