"""``RemoteTrainingJobTrigger``: polls a compute backend in the triggerer until a training job ends.

Every ``poll_interval`` seconds it asks the backend for the job's status (in a worker thread, never on the
event loop) and emits one event when the job ended, or when a spot job still waits for capacity at
``fallback_at`` (the latest safe start: the operator moves it to on-demand):
``{"status": "success", "job": {...JobStatus...}, "state": {...}, "fallback": bool}`` or
``{"status": "error", "message": ..., "state": {...}, "configuration": bool}`` (``configuration``: a
configuration error, which a retry cannot fix). ``state`` is the operator's attempt state, echoed
so the operator resumes from the event alone.

With a ``price_watch`` it also reads the spot price at each poll (see :func:`watch_event`):

* ``"mode": "pause"``: while the job runs on spot, an event with ``"pause": reason`` when
  :func:`~costaware.core.spot_window.pause_decision` says the price rose well above the rest of the window
  (the operator stops the job; it resumes from its checkpoint);
* ``"mode": "resume"`` (no job: the training is paused): an event with ``"resume": decision`` (a
  ``SpotDecision.to_xcom()``) when :func:`~costaware.core.spot_window.decide` says start again, on spot or,
  once the latest resume has come, on-demand.

Where a person kills the waiting task (marks it failed or succeeded, or clears it), Airflow calls the
trigger's ``on_kill``: it stops the job and bills what it ran, and settles the task's hold
(:meth:`RemoteTrainingJobTrigger.stop_and_bill`); no task is left to do it. A triggerer restart calls no
``on_kill``: the job runs on, and the trigger goes on watching it (a stop at the cap it had sent is read
back from the task's wait state XCom, ``WAIT_STATE_XCOM_KEY``, and not sent again). Nor does a deferral
timeout: Airflow 3.3.2's scheduler sets the task past its ``trigger_timeout`` scheduled for its ``__fail__``
resume, and its triggerer, cancelling the trigger past that deadline, calls no ``on_kill`` (whatever the
cancel's cause). The resume fails the try (``RemoteTrainingOperator.resume_execution``): with a retry left,
the retry follows the job by its name and bills it; on the last try the resume stops and bills it, from the
state in ``WAIT_STATE_XCOM_KEY``. A person's mark-failed or mark-success of the deferred task after that
deadline, before the scheduler's timeout check, gets no ``on_kill`` and no resume either: on a cancel past
the deadline from Airflow's trigger assignment (a person's action, the timeout check or a hand-over to
another triggerer all send it), the trigger asks the task's state and stops and bills the job itself where
the task ended (:meth:`RemoteTrainingJobTrigger._stop_and_bill_if_the_task_ended`). A task ended after the
scheduler's timeout check, before its resume or retry runs (a person's mark, its DAG run marked failed or
timed out), has its job stopped and billed from that XCom by the run-end listener, or by ``costaware jobs
reconcile`` (:mod:`costaware.remote_reconcile`).

Its polls (:meth:`~costaware.triggers.remote_job_poll.JobPolling.poll_once`) are
:mod:`costaware.triggers.remote_job_poll`'s.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from costaware.core.ledger import utcnow
from costaware.glue import DEFAULT_AWS_CONN_ID
from costaware.triggers.inline_wait import INLINE_WAITS
from costaware.triggers.inline_wait import in_dags_test as in_dags_test
from costaware.triggers.inline_wait import inline_wait_running as inline_wait_running
from costaware.triggers.inline_wait import note_kill_outside_inline_wait as note_kill_outside_inline_wait
from costaware.triggers.inline_wait import take_kill_outside_inline_wait as take_kill_outside_inline_wait
from costaware.triggers.remote_cap_stop import CAP_STOP_RETRY_MAX_SECONDS as CAP_STOP_RETRY_MAX_SECONDS
from costaware.triggers.remote_cap_stop import CAP_STOP_RETRY_SECONDS as CAP_STOP_RETRY_SECONDS
from costaware.triggers.remote_cap_stop import MIN_CAP_STOP_WAIT_SECONDS as MIN_CAP_STOP_WAIT_SECONDS
from costaware.triggers.remote_job_poll import JobPolling
from costaware.triggers.remote_job_status import NOT_LISTED_GRACE_SECONDS as NOT_LISTED_GRACE_SECONDS
from costaware.triggers.remote_job_status import stopped_job_status as stopped_job_status
from costaware.triggers.remote_kill_billing import ENDED_STATES as ENDED_STATES
from costaware.triggers.remote_kill_billing import KILL_WAIT_SECONDS as KILL_WAIT_SECONDS
from costaware.triggers.remote_price_watch import price_event as price_event
from costaware.triggers.remote_wait_interrupt import AIRFLOW_USER_ACTION_CANCEL as AIRFLOW_USER_ACTION_CANCEL
from costaware.triggers.remote_wait_interrupt import BILL_PATIENCE_SECONDS as BILL_PATIENCE_SECONDS
from costaware.triggers.remote_wait_interrupt import WaitInterrupting
from costaware.triggers.remote_wait_state import CAP_STOP_KEY as CAP_STOP_KEY
from costaware.triggers.remote_wait_state import WAIT_STATE_AWS_CONN_KEY as WAIT_STATE_AWS_CONN_KEY
from costaware.triggers.remote_wait_state import WAIT_STATE_XCOM_KEY as WAIT_STATE_XCOM_KEY

# The ``import X as X`` above are re-exported: the operator, the reconcile, the run-end listener and
# tests import them from here, where they were before the wait's parts moved to sibling modules.


class RemoteTrainingJobTrigger(JobPolling, WaitInterrupting, BaseTrigger):
    """Fires when a training job on a compute backend ended (or must fall back, pause or resume).

    See docs/remote-training.md.

    Args:
        backend: Backend name (``local``, ``sagemaker``, ``batch``, ``kubernetes``).
        backend_options: Its options, JSON primitives.
        job_id: The job to watch; ``None`` while the training is paused (then ``price_watch`` is required).
        state: The operator's attempt state, ``costaware.training.attempts.AttemptState.to_json()``, echoed
            in the event.
        fallback_at: ISO time after which a spot job still pending is reported for fallback (None: never).
        poll_interval: Seconds between polls.
        price_watch: Pause or resume on the spot price (see the module docstring), or ``None``.
        ledger_conn_id: The cost ledger a killed task's job is billed in (the operator's).
        aws_conn_id: The AWS connection of the recorded spot prices it is billed at (the operator's).
    """

    def __init__(
        self,
        backend: str,
        backend_options: dict[str, Any],
        job_id: str | None,
        state: dict[str, Any],
        fallback_at: str | None = None,
        poll_interval: float = 30.0,
        price_watch: dict[str, Any] | None = None,
        ledger_conn_id: str = "costaware_ledger",
        aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
    ) -> None:
        super().__init__()
        if job_id is None and price_watch is None:
            raise ValueError("a trigger without a job to watch needs a price_watch to resume on")
        self.backend = backend
        self.backend_options = dict(backend_options)
        self.job_id = job_id
        self.state = dict(state)
        self.fallback_at = fallback_at
        self.poll_interval = poll_interval
        self.price_watch = dict(price_watch) if price_watch else None
        self.ledger_conn_id = ledger_conn_id
        self.aws_conn_id = aws_conn_id
        self._last = ""
        self._poll_errors = 0
        #: The job's latest status and when it was seen: what a job deleted under us is billed from.
        self._last_seen: tuple[Any, datetime] | None = None
        #: This wait's first poll: a job it never saw is not listed yet until NOT_LISTED_GRACE_SECONDS after.
        self._first_poll_at: datetime | None = None
        #: Whether the wait state kept by the wait this one replaces was read (see ``_restore_cap_stop``):
        #: a failed read is tried again at each poll, or its stop at the cap was sent again and the job
        #: billed as gone.
        self._cap_stop_restored = False
        #: Failed reads of that kept state, and when a job gone was first held back for it (cleared when
        #: the job is listed again): past ``UNREAD_KEPT_STATE_READS`` and ``UNREAD_KEPT_STATE_SECONDS`` the
        #: job is billed as gone all the same (see ``_unread_kept_state_bound_reached``).
        self._kept_state_read_failures = 0
        self._gone_unread_since: datetime | None = None
        #: Whether the last keep of this wait's state (a stop at the cap) in XCom failed: kept again at the
        #: next poll (see ``_keep_unkept_cap_stop``).
        self._wait_state_unkept = False
        #: Per job seen on another type than planned: how long it may run there under max_usd (None: no
        #: bound), as last logged (worked out at each poll, logged when it moves); and the job stopped for
        #: it (stopped once).
        self._other_type_limit: tuple[str, int | None] | None = None
        self._stopped_for_cap: str | None = None
        #: The poll under way, and the one that sent the stop at the cap: a job gone after that stop is
        #: billed to its grace period's end after it.
        self._polled_at: datetime | None = None
        self._cap_stopped_at: datetime | None = None
        #: The job's status seen before a stop at the cap that the wait this one replaces sent.
        self._cap_stop_seen: tuple[Any, datetime] | None = None
        #: When a job stopped at the cap and still seen running past its grace period was stopped again
        #: (see ``_stop_again_past_grace``): once per grace period.
        self._cap_stop_again_at: datetime | None = None
        #: Whether the stop at the cap was recorded with no SIGTERM sent (a pod gone at its 404) and the
        #: job is listed since: it is stopped at once, not a grace period after the record.
        self._cap_stop_unsent = False
        #: How many more seconds of running the job has, at the last poll, before a stop at the cap is due
        #: (None: none is due): the next poll comes then, not up to a ``poll_interval`` later.
        self._cap_stop_due_in: float | None = None
        #: When a price that could not be read is asked again (s), kept apart from that due point: it is
        #: no stop falling due (see ``_retry_cap_stop``).
        self._price_read_again_in: float | None = None
        self._price_read_retries = 0
        #: When that stop falls due, kept while a gone job is held back for the kept state (see
        #: ``_stop_held_back_at_cap``); None: not held back, or no stop known to fall due.
        self._held_cap_stop_due_at: datetime | None = None
        #: Whether this wait said when a job stopped at the cap while not listed is taken as gone.
        self._grace_end_said = False
        #: Retries in a row of a stop at the cap that was due and not sent (see ``CAP_STOP_RETRY_SECONDS``).
        self._cap_stop_retries = 0
        #: When the failed polls in a row began (see :meth:`poll_tolerant`), and whether the last poll failed.
        self._failing_since: datetime | None = None
        self._last_poll_failed = False
        #: Set when the triggerer cancels this wait. A cancel cannot stop a poll's thread (asyncio.to_thread):
        #: one still in a backend call went on to stop the job at the cap and write its state over the wait
        #: state XCom the task's new try had kept since. Whoever follows the job now (the new wait, the
        #: task's resume or new try, the kill's stop_and_bill) acts on it instead.
        self._cancelled = threading.Event()

    @property
    def training(self) -> str:
        """The training this wait is part of: its jobs' name stem (``RemotePlan.base_name``)."""
        return str(self.state.get("base_name") or "")  # the plan's keys are at the state's top

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "backend": self.backend,
                "backend_options": self.backend_options,
                "job_id": self.job_id,
                "state": self.state,
                "fallback_at": self.fallback_at,
                "poll_interval": self.poll_interval,
                "price_watch": self.price_watch,
                "ledger_conn_id": self.ledger_conn_id,
                "aws_conn_id": self.aws_conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        delivered = False
        # `airflow dags test` keeps the task's SIGTERM handler (its on_kill) bound while it runs this inline:
        # it may end the wait (see inline_wait_running), never the handing over of an event already taken.
        inline = in_dags_test()
        if inline:
            INLINE_WAITS.running += 1
        try:
            if inline and take_kill_outside_inline_wait(self.training):
                # Its SIGTERM came between the deferral and this wait: ended now, as one during the wait.
                self.log.warning(
                    "SIGTERM before the inline wait: stopping job %s and billing it", self.job_id
                )
                with self._interrupts_wait_for_the_bill():
                    self.stop_and_bill()
                raise KeyboardInterrupt
            async for event in self._watch():
                delivered = True
                if inline:
                    inline = False
                    INLINE_WAITS.running -= 1
                yield event
        except asyncio.CancelledError as cancel:
            self._cancelled.set()
            # A triggerer cancels a trigger it hands to another (the job is watched on), but `airflow dags
            # test` runs it inline and cancels it on Ctrl-C: nobody would watch or bill the job after. Its
            # inline run also cancels the trigger once it has taken the event: the operator handles the job
            # from there (stopping and billing it as killed logged a kill and settled the hold too early).
            if in_dags_test() and not delivered:
                self.log.warning("interrupted: stopping job %s and billing it, as for a kill", self.job_id)
                with self._interrupts_wait_for_the_bill():
                    self.stop_and_bill()
            elif self._cancelled_by_trigger_assignment_past_the_deadline(cancel):
                await asyncio.to_thread(self._stop_and_bill_if_the_task_ended)
            raise
        finally:
            if inline:
                INLINE_WAITS.running -= 1

    async def _watch(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                event = await asyncio.to_thread(self.poll_tolerant, utcnow())
            except Exception as e:
                from costaware.core.errors import ConfigurationError

                yield TriggerEvent(
                    {
                        "status": "error",
                        "message": f"{type(e).__name__}: {e}",
                        "state": self.state,
                        # the operator fails the task without retry: polling again would fail the same way
                        "configuration": isinstance(e, ConfigurationError),
                    }
                )
                return
            if event is not None:
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.next_poll_in())

    async def on_kill(self) -> None:
        """A person killed the waiting task: stop its job and bill it (see :meth:`stop_and_bill`)."""
        await asyncio.to_thread(self.stop_and_bill)
