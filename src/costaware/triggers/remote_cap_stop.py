"""Stops at the cap of a remote training's wait: a job that runs past what is left of ``max_usd``.

A job an earlier try submitted (its backend holds the time limit of then) and a job that runs on a dearer
type than planned are stopped by the wait's polls once they ran what ``max_usd`` buys; the next poll comes
when the stop falls due, a stop not sent is asked again soon, and one sent is kept in the wait state XCom
(:mod:`costaware.triggers.remote_cap_stop_state`) so that a re-created wait does not send it again. What a
job may run on a dearer type is weighed in :mod:`costaware.triggers.remote_cap_price`; the stops of a
job the wait sees listed are :mod:`costaware.triggers.remote_cap_stop_listed`'s.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.ledger import utcnow
from costaware.core.series import parse_instant
from costaware.triggers.remote_cap_price import OtherTypePricing
from costaware.triggers.remote_cap_stop_state import CapStopKeeping
from costaware.triggers.remote_wait_state import CAP_STOP_KEY

#: The shortest wait before the poll that sends a stop at the cap: a backend's billed time that lags a
#: little behind the wall clock brings the job a second short of it, not a poll after poll at once.
MIN_CAP_STOP_WAIT_SECONDS = 1.0
#: How soon a stop at the cap that fell due and was not sent (it failed, the price was unknown, the poll
#: failed) is asked again; doubled per such retry in a row up to ``CAP_STOP_RETRY_MAX_SECONDS``. Asked at
#: the next ``poll_interval``, the job ran up to that long past the cap; a stop refused for good (no
#: permission) is not asked every few seconds for the rest of the job.
CAP_STOP_RETRY_SECONDS = 5.0
CAP_STOP_RETRY_MAX_SECONDS = 60.0


# A mixin of RemoteTrainingJobTrigger, not a trigger of its own: Airflow knows a trigger by its classpath,
# which stays costaware.triggers.remote_training.RemoteTrainingJobTrigger.
class CapStopping(CapStopKeeping, OtherTypePricing):
    """The stops at the cap of :class:`~costaware.triggers.remote_training.RemoteTrainingJobTrigger`."""

    # Set by RemoteTrainingJobTrigger.__init__ (see there).
    backend: str
    backend_options: dict[str, Any]
    job_id: str | None
    state: dict[str, Any]
    poll_interval: float
    ledger_conn_id: str
    aws_conn_id: str | None
    _last_seen: tuple[Any, datetime] | None
    _other_type_limit: tuple[str, int | None] | None
    _stopped_for_cap: str | None
    _polled_at: datetime | None
    _cap_stopped_at: datetime | None
    _cap_stop_seen: tuple[Any, datetime] | None
    _cap_stop_due_in: float | None
    _price_read_again_in: float | None
    _price_read_retries: int
    _held_cap_stop_due_at: datetime | None
    _cap_stop_again_at: datetime | None
    _cap_stop_unsent: bool
    _gone_unread_since: datetime | None
    _cap_stop_retries: int
    _cap_stop_restored: bool
    _kept_state_read_failures: int
    _cancelled: threading.Event

    def next_poll_in(self) -> float:
        """Seconds to wait before the next poll: ``poll_interval``, or less where a stop at the cap falls due.

        A stop at what is left of ``max_usd`` (a followed job's, a dearer type's) sent at the first poll
        after it fell due let the job run up to one ``poll_interval`` past it, billed past the cap.
        """
        soonest = [at for at in (self._cap_stop_due_in, self._price_read_again_in) if at is not None]
        if not soonest:
            return self.poll_interval
        return min(self.poll_interval, max(MIN_CAP_STOP_WAIT_SECONDS, min(soonest)))

    def _cap_stop_due_after(self, seconds: float) -> None:
        """A stop at the cap falls due after ``seconds`` more of running (the sooner of two is kept)."""
        due = self._cap_stop_due_in
        self._cap_stop_due_in = seconds if due is None else min(due, seconds)

    def _send_cap_stop(
        self,
        job_id: str,
        *,
        stop_after_seconds: int | None = None,
        unlisted: bool = False,
        already_gone: bool = False,
    ) -> bool:
        """Send the stop at the cap (SIGTERM: it checkpoints); False, asked again soon, where it failed.

        Once sent, the job's end is recorded as stopped by ``max_usd`` after ``stop_after_seconds`` of
        running (None: as the state says), and the stop is kept where a re-created wait reads it
        (:meth:`_keep_cap_stop`), ``unlisted`` with it: sent while its backend did not list the job. Sent
        whether or not a re-created wait has read the kept state yet: held back, a first wait's stop let the
        job run on past the cap while the API server did not answer. Not sent where the job's last seen
        status says a stop was asked already (:meth:`_stop_asked_at`): the stop is taken as sent then, and
        where the job is ``already_gone`` (a 404 its backend gives only for a deleted job): nothing is sent.
        """
        if self._polled_after_cancel("stopped at the cap"):
            return False
        from costaware.adapters.compute.base import open_backend

        asked_at = self._stop_asked_at(job_id)
        earlier_stop = self._earlier_try_stop(job_id, asked_at) if asked_at is not None else None
        if asked_at is not None:
            # The wait this one replaces sent it (its kept state unread, or never kept): a second SIGTERM,
            # and the job gone after it billed from this later stop, a little more than the first. Or an
            # earlier try's kill did (a local job's one ``stop`` file): its end is recorded by that cause.
            self.log.info(
                "job %s on %s was asked to stop at %s already, as the backend says%s: not stopped again; "
                "its end is billed from that stop",
                job_id,
                self.backend,
                asked_at.isoformat(),
                f", by an earlier try ({earlier_stop}, as its ledger entry says)" if earlier_stop else "",
            )
        elif not already_gone:  # a deleted pod's delete is a 404 that does nothing (its caller says so)
            # A cancel during the stop call cannot stop it: the stop is then kept only where the task's wait
            # state is still this wait's (:meth:`_xcom_holds_this_wait`).
            try:
                open_backend(self.backend, self.backend_options).stop(job_id)
            except Exception as e:
                self._retry_cap_stop()
                self.log.warning(
                    "stopping job %s failed (%s): asked again in %g s", job_id, e, self.next_poll_in()
                )
                return False
        self._stopped_for_cap, self._cap_stop_retries = job_id, 0
        self._cap_stopped_at = asked_at or self._polled_at
        current = dict(self.state.get("current") or {})
        if stop_after_seconds is not None:
            current["stop_after_seconds"] = stop_after_seconds
        if earlier_stop is not None:
            from costaware.training.attempts import EARLIER_STOP_KEY

            current["followed"] = {**current["followed"], EARLIER_STOP_KEY: earlier_stop}
        sent_at = self._cap_stopped_at or utcnow()
        current[CAP_STOP_KEY] = {"job_id": job_id, "sent_at": sent_at.isoformat(), "unlisted": unlisted}
        if already_gone and self._gone_unread_since is not None:
            # Its first 404, for a re-created wait, which has none of its own: billed to its grace period's
            # end after the stop without it, though no SIGTERM went out (``_final_404_bill``).
            current[CAP_STOP_KEY]["gone_at"] = self._gone_unread_since.isoformat()
        if self._last_seen is not None:
            seen, seen_at = self._last_seen
            current[CAP_STOP_KEY].update(job=seen.to_dict(), seen_at=seen_at.isoformat())
        self.state = {**self.state, "current": current}
        self._keep_cap_stop()
        return True

    def _earlier_try_stop(self, job_id: str, asked_at: datetime) -> str | None:
        """The cause of an earlier try's stop of the followed ``job_id`` asked at ``asked_at``, else None.

        A local job has one ``stop`` file whoever asked: a kill's stop, before this try followed the job,
        read as this wait's stop at the cap, and the job's end was recorded as ``max_usd``. Where the stop
        came before this try found the job and the ledger holds a stop's entry of it (the kill's, keyed by
        the job's name), that entry's cause. A ledger that cannot be read says nothing (None).
        """
        from costaware.hooks.ledger import CostLedgerHook
        from costaware.training.attempts import AttemptState
        from costaware.triggers.remote_job_status import earlier_stop_cause

        followed = (self.state.get("current") or {}).get("followed") or {}
        found_at = followed.get("seen_at")
        if not found_at:
            return None
        try:
            found = parse_instant(str(found_at), name="followed.seen_at")
        except ConfigurationError as e:
            # A kept value that is no time (edited, cut short): raised, the stop at the cap failed with it.
            self.log.warning(
                "cannot tell whether an earlier try stopped job %s (%s): taken as not", job_id, e
            )
            return None
        if asked_at >= found:
            return None
        # A job its stop at the cap is sent to has not ended: only the key of a job still stopping.
        return earlier_stop_cause(
            CostLedgerHook(ledger_conn_id=self.ledger_conn_id),
            AttemptState.from_json(self.state).plan.identity,
            job_id,
            ended_at=None,
            log=self.log,
            otherwise="as stopped at max_usd",
            run_token=str((self.state.get("current") or {}).get("run_token") or ""),
        )

    def _stop_asked_at(self, job_id: str) -> datetime | None:
        """When ``job_id`` was asked to stop, as its last seen status says (None: not, or not said).

        Only some backends say it (``STOP_REQUESTED_AT``); elsewhere a wait that cannot read its kept state
        sends its stop at the cap again.
        """
        from costaware.triggers.remote_job_status import stop_requested_at

        if self._last_seen is None or str(self._last_seen[0].job_id or job_id) != job_id:
            return None
        return stop_requested_at(self._last_seen[0])

    def _polled_after_cancel(self, what: str) -> bool:
        """Whether this wait was cancelled while its poll ran: then the job is not ``what`` by it."""
        if not self._cancelled.is_set():
            return False
        self.log.info(
            "the wait for job %s was cancelled during its poll: the job is not %s by it (whoever follows "
            "the job now does that)",
            self.job_id,
            what,
        )
        return True

    def _retry_cap_stop(self, *, stop_due: bool = True) -> None:
        """A stop at the cap was due (or may be) and was not sent: the next poll comes soon to ask again.

        ``stop_due`` False: a price to read again, not a stop that fell due. Kept apart from the cap's due
        point: taken as it, a job not listed at the next poll was stopped by its id 5 s after a dearer
        type's price could not be read, far short of its cap. Its backoff is counted apart too: counted with
        the stop's, a stop refused once the price was read was asked again 60 s later.
        """
        if stop_due:
            self._cap_stop_retries += 1
            self._cap_stop_due_after(self._retry_wait(self._cap_stop_retries))
        else:
            self._price_read_retries += 1
            wait, again = self._retry_wait(self._price_read_retries), self._price_read_again_in
            self._price_read_again_in = wait if again is None else min(again, wait)

    @staticmethod
    def _retry_wait(retries: int) -> float:
        """Seconds before the ``retries``-th retry in a row: doubled from the shortest, up to the longest."""
        return min(CAP_STOP_RETRY_MAX_SECONDS, CAP_STOP_RETRY_SECONDS * 2.0 ** (retries - 1))

    def _since_poll(self, polled_before: datetime | None, now: datetime) -> float:
        """Seconds from the last poll's start to ``now`` (``poll_interval`` where there was none)."""
        return self.poll_interval if polled_before is None else (now - polled_before).total_seconds()

    def _keep_cap_stop_due(self, due_left: float | None, *, stop_due: bool = True) -> None:
        """A poll gave no status to weigh the cap on: the stop due at the last poll stays due.

        ``due_left``: what is left of it now (:meth:`_since_poll` counted); a retry soon where little is.
        ``stop_due`` False: a price's re-read that stays due, kept apart as :meth:`_retry_cap_stop` says.
        """
        if due_left is None:
            return
        if due_left <= CAP_STOP_RETRY_SECONDS:
            self._retry_cap_stop(stop_due=stop_due)
        elif stop_due:
            self._cap_stop_due_after(due_left)
        else:
            again = self._price_read_again_in
            self._price_read_again_in = due_left if again is None else min(again, due_left)

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
