"""The wait state XCom of a remote training's wait: where a stop at the cap it sent is kept and read back.

A triggerer restart re-creates the wait from its deferral's arguments, which know nothing of its polls: the
stop at the cap the wait sent is kept in the task's wait state XCom
(:mod:`costaware.triggers.remote_wait_state`) and taken over from there, so it is not sent again.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from costaware.core.series import parse_instant
from costaware.triggers.remote_wait_state import CAP_STOP_KEY, WAIT_STATE_AWS_CONN_KEY, WAIT_STATE_XCOM_KEY

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger as _TriggerBase
else:
    # A mixin of RemoteTrainingJobTrigger (through CapStopping), not a trigger of its own.
    _TriggerBase = object


class CapStopKeeping(_TriggerBase):
    """The kept stop at the cap of :class:`~costaware.triggers.remote_cap_stop.CapStopping`."""

    # Set by RemoteTrainingJobTrigger.__init__ (see there).
    job_id: str | None
    state: dict[str, Any]
    aws_conn_id: str | None
    _stopped_for_cap: str | None
    _cap_stopped_at: datetime | None
    _cap_stop_again_at: datetime | None
    _cap_stop_seen: tuple[Any, datetime] | None
    _cap_stop_unsent: bool
    _kept_state_read_failures: int
    _wait_state_unkept: bool
    _cancelled: threading.Event

    def _cap_stop_listed_again(self) -> None:
        """The job stopped at the cap while not listed is listed again: its stop is kept as a listed one.

        Kept ``unlisted``, a job gone later was held to the end of its grace period after the stop and
        billed to there (``_unlisted_cap_stop_grace_left``), though it was seen after the stop and ended
        by the poll that found it gone. A first 404 kept with it (``gone_at``) is dropped too: listed since,
        the pod did not end there, and a later 404 billed it to that old one (to the listing before it).
        Such a stop sent no SIGTERM (the pod was gone): it is sent now (``_cap_stop_unsent``), not a grace
        period after the stop was recorded.
        """
        current = self.state.get("current") or {}
        sent = current.get(CAP_STOP_KEY)
        if not isinstance(sent, Mapping) or sent.get("job_id") != self.job_id:
            return
        if not sent.get("unlisted") and "gone_at" not in sent:
            return
        listed = {name: value for name, value in sent.items() if name != "gone_at"}
        if "gone_at" in sent:
            # Kept too: a wait re-created before the job is seen running would wait out a grace period
            # from a stop that sent nothing.
            self._cap_stop_unsent = listed["unsent"] = True
        self.state = {**self.state, "current": {**current, CAP_STOP_KEY: {**listed, "unlisted": False}}}
        self._keep_cap_stop()

    def _keep_cap_stop_again(self, again_at: datetime) -> None:
        """Keep the stop at the cap sent again at ``again_at`` with the first (blocking IO).

        Kept in memory only, a wait re-created after it stopped the job a third time, billed it gone later
        to the first stop's grace period's end (before it was last seen running) and named only that stop.
        A stop sent at last (``unsent``) is no longer owed.
        """
        current = self.state.get("current") or {}
        sent = current.get(CAP_STOP_KEY)
        if not isinstance(sent, Mapping) or sent.get("job_id") != self.job_id:
            return
        again = {name: value for name, value in sent.items() if name != "unsent"}
        again["again_at"] = again_at.isoformat()
        self.state = {**self.state, "current": {**current, CAP_STOP_KEY: again}}
        self._keep_cap_stop()

    def _wait_state_xcom(self) -> dict[str, Any] | None:
        """Where this wait's task keeps its wait state (the operator's XCom), or None: no task (tests)."""
        ti = getattr(self, "task_instance", None)
        if ti is None or not getattr(ti, "task_id", None):
            return None
        map_index = ti.map_index if ti.map_index is not None else -1
        return {
            "key": WAIT_STATE_XCOM_KEY,
            "dag_id": ti.dag_id,
            "task_id": ti.task_id,
            "run_id": ti.run_id,
            "map_index": map_index,
        }

    def _keep_cap_stop(self) -> None:
        """Keep the state with the stop at the cap sent where a re-created wait reads it (blocking IO).

        A triggerer restart re-creates the wait from its deferral's arguments, which knew nothing of the
        stop: it sent the stop again (a second SIGTERM to a local job), and billed a job gone after it as
        gone, up to ``NOT_LISTED_GRACE_SECONDS`` past its grace period. The operator's wait state XCom
        (which a deferral timeout reads too) carries it; a failure warns, and the next poll keeps it again
        (:meth:`_keep_unkept_cap_stop`): the state is then already this wait's, and nothing else writes it.
        Never over another attempt's or job's state (:meth:`_xcom_holds_another_wait`).
        """
        where = self._wait_state_xcom()
        if where is None:
            return
        try:
            from airflow.sdk.execution_time.xcom import XCom

            if self._cancelled.is_set():
                if not self._xcom_holds_this_wait(XCom.get_one(**where)):
                    return
            elif self._xcom_holds_another_wait(where):
                return
            key = where.pop("key")
            XCom.set(key, {**self.state, WAIT_STATE_AWS_CONN_KEY: self.aws_conn_id}, **where)
            self._wait_state_unkept = False
        except Exception as e:
            self._wait_state_unkept = True
            self.log.warning(
                "could not keep the stop at the cap of job %s in XCom (%s: %s): kept again at the next poll "
                "(a triggerer restart before then would send it again)",
                self.job_id,
                type(e).__name__,
                e,
            )

    def _keep_unkept_cap_stop(self) -> None:
        """Keep again the state a failed :meth:`_keep_cap_stop` left unkept (blocking IO).

        The state it carries (a stop sent, a stop listed again) is already this wait's, so no later change
        would write it: a listed-again flag whose write failed stayed ``unlisted`` in XCom, and a re-created
        wait billed the job to its grace period's end after the stop.
        """
        if self._wait_state_unkept:
            self._keep_cap_stop()

    def _xcom_holds_another_wait(self, where: dict[str, Any]) -> bool:
        """Whether the kept wait state is another attempt's or job's: a newer try's, this wait outlived.

        A wait not cancelled yet (a triggerer slow to drop it) wrote its state over the one the task's newer
        try had kept since. A state that cannot be read, or none kept, is not another's: the keep goes on
        (it is what a re-created wait reads its stop from).
        """
        from airflow.sdk.execution_time.xcom import XCom

        try:
            kept = XCom.get_one(**where)
        except Exception:
            return False
        kept_current = kept.get("current") if isinstance(kept, Mapping) else None
        if not isinstance(kept_current, Mapping):
            return False
        current = self.state.get("current") or {}
        if all(kept_current.get(name) == current.get(name) for name in ("attempt", "job_id")):
            return False
        self.log.info(
            "the task's wait state is now another wait's (job %s, attempt %s): the stop at the cap of job %s "
            "(this older wait's) is not kept over it",
            kept_current.get("job_id"),
            kept_current.get("attempt"),
            self.job_id,
        )
        return True

    def _xcom_holds_this_wait(self, kept: Any) -> bool:
        """Whether the kept wait state is still this wait's attempt and job (see :meth:`_send_cap_stop`).

        A wait cancelled while its stop at the cap was under way keeps the stop only there: a triggerer
        handing it over leaves the XCom as it was, and the new wait must know of the stop; a new try of the
        task (a clear, a retry) keeps its own state there, which the old try's would overwrite: a timeout
        of the new try's wait then stopped and billed the old job and left the new one running unbilled.
        """
        kept_current = kept.get("current") if isinstance(kept, Mapping) else None
        current = self.state.get("current") or {}
        if isinstance(kept_current, Mapping) and all(
            kept_current.get(name) == current.get(name) for name in ("attempt", "job_id")
        ):
            return True
        self.log.info(
            "the wait for job %s was cancelled while its stop at the cap was sent: the stop went through, "
            "but the task's wait state now is another wait's (job %s), which is left as it is",
            self.job_id,
            kept_current.get("job_id") if isinstance(kept_current, Mapping) else None,
        )
        return False

    def _restore_cap_stop(self) -> bool:
        """Take over a stop at the cap that the wait this one replaces sent (see :meth:`_keep_cap_stop`).

        Returns whether the kept state was read (or there is none to read): False, the next poll reads again.
        """
        where = self._wait_state_xcom()
        if where is None or self.job_id is None:
            return True
        try:
            from airflow.sdk.execution_time.xcom import XCom

            kept = XCom.get_one(**where)
        except Exception as e:
            self._kept_state_read_failures += 1
            self.log.warning(
                "cannot read the wait's kept state (%s: %s): none taken over, read again at the next poll",
                type(e).__name__,
                e,
            )
            return False
        kept_current = (kept or {}).get("current") if isinstance(kept, Mapping) else None
        current = self.state.get("current") or {}
        if not isinstance(kept_current, Mapping) or not isinstance(kept_current.get(CAP_STOP_KEY), Mapping):
            return True
        same_attempt = kept_current.get("attempt") == current.get("attempt")
        sent = kept_current[CAP_STOP_KEY]
        if not same_attempt or kept_current.get("job_id") != self.job_id or sent.get("job_id") != self.job_id:
            return True  # an earlier wait's, of another job
        from costaware.adapters.compute.base import JobStatus

        self.state = {**self.state, "current": dict(kept_current)}
        self._stopped_for_cap = self.job_id
        self._cap_stopped_at = parse_instant(sent["sent_at"], name="sent_at")
        if sent.get("again_at"):
            self._cap_stop_again_at = parse_instant(sent["again_at"], name="again_at")
        self._cap_stop_unsent = bool(sent.get("unsent"))
        if sent.get("job") and sent.get("seen_at"):
            self._cap_stop_seen = (
                JobStatus.from_dict(sent["job"]),
                parse_instant(sent["seen_at"], name="seen_at"),
            )
        self.log.info(
            "job %s was stopped at what was left of max_usd at %s, before this wait took over: not "
            "stopped again",
            self.job_id,
            sent["sent_at"],
        )
        return True
