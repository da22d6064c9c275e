"""The polls of a remote training's wait: one look at its job, and polls again through passing failures.

:meth:`JobPolling.poll_once` decides for both waits, the triggerer's and the operator's synchronous one
(``deferrable=False``): the job ended, falls back to on-demand, pauses or resumes on the spot price, is
stopped at the cap, or is billed as gone. The trigger's life in the triggerer (its run, cancel and kill) is
:mod:`costaware.triggers.remote_training`'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from costaware.core.series import parse_instant
from costaware.triggers import MAX_POLL_ERRORS
from costaware.triggers.remote_cap_stop_unlisted import UnlistedCapStopping
from costaware.triggers.remote_job_status import (
    ended_when_found,
    job_event,
    stopped_job_status,
    vanished_job_status,
)
from costaware.triggers.remote_kill_billing import KilledJobBilling
from costaware.triggers.remote_price_watch import watch_event


# A mixin of RemoteTrainingJobTrigger, not a trigger of its own.
class JobPolling(KilledJobBilling, UnlistedCapStopping):
    """The polls of :class:`~costaware.triggers.remote_training.RemoteTrainingJobTrigger`'s job."""

    # Set by RemoteTrainingJobTrigger.__init__ (see there).
    fallback_at: str | None
    price_watch: dict[str, Any] | None
    _last: str
    _poll_errors: int
    _first_poll_at: datetime | None
    _grace_end_said: bool
    _failing_since: datetime | None
    _last_poll_failed: bool

    def poll_once(self, now: datetime) -> dict[str, Any] | None:
        """One look (blocking IO): the event to emit, or None to keep waiting.

        The operator's synchronous wait (``deferrable=False``) calls this too, so both modes decide alike.
        """
        from costaware.adapters.compute.base import JobState, billed_instances, open_backend
        from costaware.core.errors import JobNotFoundError

        if self.job_id is None:
            assert self.price_watch is not None  # checked in __init__
            return watch_event(self.price_watch, self.state, now=now)
        due_before, self._cap_stop_due_in = self._cap_stop_due_in, None  # worked out again from this poll
        read_before, self._price_read_again_in = self._price_read_again_in, None
        polled_before, self._polled_at = self._polled_at, now
        # What is left of them now: the time since the last poll began, its own included (counted as a
        # poll_interval, a due point drifted later by each poll's time: 145 s past a cap with 10 s polls).
        since_poll = self._since_poll(polled_before, now)
        due_left = None if due_before is None else due_before - since_poll
        read_left = None if read_before is None else read_before - since_poll
        if self._first_poll_at is None:
            self._first_poll_at = now
        if not self._cap_stop_restored:
            self._cap_stop_restored = self._restore_cap_stop()
        self._keep_unkept_cap_stop()
        try:
            status = open_backend(self.backend, self.backend_options).poll(self.job_id)
            # Listed again: a later disappearance is held back its full bound, counted from then.
            self._gone_unread_since = self._held_cap_stop_due_at = None
            self._cap_stop_listed_again()
        except JobNotFoundError:
            count = billed_instances(self.backend_options)
            stopped = (self.state.get("current") or {}).get("stopped")
            if stopped:
                status = stopped_job_status(stopped, now=now, instances=count)
            else:
                current = self.state.get("current") or {}
                status = vanished_job_status(
                    self.job_id,
                    self.state,
                    last_seen=self._last_seen,
                    now=now,
                    instances=count,
                    backend=self.backend,
                    watched_since=self._first_poll_at,
                )
                if status is None:
                    seen = self._last_seen is not None or current.get("followed")
                    if not seen and not current.get("submitted_at"):
                        raise  # no submit time to tell "not listed yet" from gone: a failure, polled again
                    # Not listed yet (a backend's eventual consistency): no failure. Counted as one, five
                    # polls failed the wait long before NOT_LISTED_GRACE_SECONDS could bill it as gone.
                    said = "not listed on %s now, after it was seen" if seen else "not listed on %s yet"
                    self.log.info(f"job %s is {said}: polled again", self.job_id, self.backend)
                    self._stop_unlisted_at_cap(due_left)
                    return None
                unread = not self._cap_stop_restored and self._stopped_for_cap != self.job_id
                if unread and not self._unread_kept_state_bound_reached(now):
                    # Whether the wait before this one stopped it at the cap (billed to its grace period's
                    # end, not stopped again) is unknown until its kept state is read: polled again soon. A
                    # stop at the cap that falls due meanwhile is sent, whatever the kept state says.
                    first_held = self._gone_unread_since == now
                    self._stop_held_back_at_cap(due_before, polled_before, first_held=first_held)
                    self.log.warning(
                        "job %s on %s: %s; not billed as gone until the wait's kept state is read (asked "
                        "again in %g s)",
                        self.job_id,
                        self.backend,
                        status.reason,
                        self.next_poll_in(),
                    )
                    return None
                if unread:
                    stop_sent = self._stop_unlisted(now, status)
                    # Said as the bill did it: bounded only where the backend said the job was asked to stop
                    # before its cap fell due, this stop did not fail, and the bound lowered the bill.
                    billed, asked = self._gone_bill(status, stop_sent=stop_sent, kept_state_unread=True)
                    self.log.warning(
                        "job %s on %s: %s; the wait's kept state is still unread after %d failed read(s) "
                        "over %.0f s: billed as gone now from what was last seen, as if no stop at the cap "
                        "had been sent (the dearer bill of the two, never less than it ran)%s",
                        self.job_id,
                        self.backend,
                        status.reason,
                        self._kept_state_read_failures,
                        (now - (self._gone_unread_since or now)).total_seconds(),
                        f", but not past the grace period after its stop at the cap, since {self.backend} "
                        f"says it was asked to stop at {asked.isoformat()}, before that fell due"
                        if asked
                        else "",
                    )
                    status = billed
                elif self._stopped_for_cap == self.job_id and self._cap_stopped_at is not None:
                    grace_left = self._unlisted_cap_stop_grace_left(now)
                    if grace_left > 0:  # stopped while unlisted: it may checkpoint until then
                        if not self._grace_end_said:  # once: the polls up to it say nothing new
                            self._grace_end_said = True
                            self.log.info(
                                "job %s, stopped at the cap while not listed on %s, is taken as gone at the "
                                "end of its grace period, at %s (in %.0f s)",
                                self.job_id,
                                self.backend,
                                (now + timedelta(seconds=grace_left)).isoformat(),
                                grace_left,
                            )
                        self._cap_stop_due_after(grace_left)
                        return None
                    status = self._gone_after_cap_stop(status, now=now, instances=count)
                elif ended_when_found(self.state, self._last_seen) is not None:
                    self.log.warning("job %s on %s: %s; gone since", self.job_id, self.backend, status.reason)
                else:
                    self.log.warning("job %s on %s: %s", self.job_id, self.backend, status.reason)
                    status = self._billed_as_gone(status, stop_sent=self._stop_unlisted(now, status))
        except Exception:
            self._keep_cap_stop_due(due_left)  # a poll that failed sends no stop: asked again soon
            # Nor reads a price: dropped, the price pending a re-read waited a whole poll_interval more.
            self._keep_cap_stop_due(read_left, stop_due=False)
            self._last_poll_failed = True
            raise
        else:
            self._last_seen = (status, now)
            if self._last_poll_failed:
                # The backoff was for polls that failed, not for a refused stop: a stop this poll finds
                # due (and may be refused) is asked again from the shortest wait, not a minute later.
                self._last_poll_failed, self._cap_stop_retries = False, 0
        fallback_at = parse_instant(self.fallback_at, name="fallback_at") if self.fallback_at else None
        event = job_event(status, self.state, fallback_at=fallback_at, now=now)
        if event is not None:
            return event
        if status.state.value != self._last:
            self.log.info("job %s on %s: %s", self.job_id, self.backend, status.state.value)
            self._last = status.state.value
        if status.state == JobState.RUNNING and status.instance_type:
            self._stop_within_cap_on_other_type(status)
        self._stop_followed_job_at_cap(status)  # waiting to start too, where nothing is left
        self._stop_again_past_grace(status)
        if self.price_watch and status.state == JobState.RUNNING and status.market == "spot":
            try:
                paused = watch_event(self.price_watch, self.state, now=now, running=status.to_dict())
            except Exception as e:  # a price feed that fails must not stop the watch over the training
                # The error's own "the task is retried" is not so here: the watch reads again next poll.
                self.log.warning(
                    "cannot read the spot price (%s: %s); the job runs on, and the price is read again at "
                    "the next poll",
                    type(e).__name__,
                    str(e).removesuffix("; the task is retried"),
                )
                return None
            if paused is not None:
                return {**paused, "job": status.to_dict(), "seen_at": now.isoformat()}
        return None

    def poll_tolerant(self, now: datetime) -> dict[str, Any] | None:
        """:meth:`poll_once`; a passing failure is polled again, up to ``MAX_POLL_ERRORS`` in a row.

        A passing failure: a network error, throttling, a job not listed yet. The job runs on while the poll
        fails; a task failed for it would leave the job unwatched and, with no retry left, unbilled. A
        configuration error fails at once: polling again would fail the same way. Where a stop at the cap is
        due, the failed polls come seconds apart (``CAP_STOP_RETRY_SECONDS``): they fail the wait only once
        they have also failed for ``MAX_POLL_ERRORS - 1`` poll intervals (75 s of throttling failed it, the
        job left running unwatched past the cap).
        """
        from costaware.core.errors import ConfigurationError

        try:
            event = self.poll_once(now)
        except ConfigurationError:
            raise
        except Exception as e:
            if self._poll_errors == 0:
                self._failing_since = now
            self._poll_errors += 1
            failing_for = (now - (self._failing_since or now)).total_seconds()
            polled_sooner = self._cap_stop_due_in is not None  # a due cap stop asks again soon
            lasted = failing_for >= (MAX_POLL_ERRORS - 1) * self.poll_interval
            if self._poll_errors >= MAX_POLL_ERRORS and (lasted or not polled_sooner):
                raise
            self.log.warning(
                "polling job %s on %s failed (%s: %s), %d time(s) in a row: polling again in %g s",
                self.job_id,
                self.backend,
                type(e).__name__,
                e,
                self._poll_errors,
                self.next_poll_in(),
            )
            return None
        self._poll_errors = 0
        return event
