"""Stops at the cap of a remote training's wait: a job that runs past what is left of ``max_usd``.

A job an earlier try submitted (its backend holds the time limit of then) and a job that runs on a dearer
type than planned are stopped by the wait's polls once they ran what ``max_usd`` buys; the next poll comes
when the stop falls due, a stop not sent is asked again soon, and one sent is kept in the wait state XCom
(:mod:`costaware.triggers.remote_cap_stop_state`) so that a re-created wait does not send it again. What a
job may run on a dearer type is weighed in :mod:`costaware.triggers.remote_cap_price`; the stops of a
job the wait sees listed are :mod:`costaware.triggers.remote_cap_stop_listed`'s, those of a job it does not
see listed :mod:`costaware.triggers.remote_cap_stop_unlisted`'s.
"""

from __future__ import annotations

import threading
from datetime import datetime
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
