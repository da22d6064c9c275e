"""The cancels and interrupts of a remote training's wait: `airflow dags test`'s Ctrl-C, Airflow's cancel.

A second Ctrl-C (or SIGTERM) of `airflow dags test` waits for the stop and bill under way; a cancel past
the task's deadline from Airflow's trigger assignment calls no ``on_kill``, and is told apart here.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from costaware.core.ledger import utcnow
from costaware.triggers.remote_kill_billing import KILL_WAIT_SECONDS

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger as _TriggerBase
else:
    # A mixin of RemoteTrainingJobTrigger, not a trigger of its own.
    _TriggerBase = object

#: How long a Ctrl-C (or SIGTERM) of `airflow dags test` waits for a stop and bill under way before it goes
#: through: the stop's own wait and as long again for the backend's and the ledger's calls around it.
BILL_PATIENCE_SECONDS = 2 * KILL_WAIT_SECONDS
#: The message of Airflow 3.3's cancel of a trigger its triggerer no longer holds in the trigger
#: assignment: a person's action on its task (a mark or a clear), the scheduler's timeout check, or a
#: hand-over to another triggerer (a triggerer's shutdown sends none).
#: ``airflow.jobs.triggerer_job_runner._USER_ACTION_CANCEL_MSG``, copied (a private name).
AIRFLOW_USER_ACTION_CANCEL = "__airflow_user_action__"


class WaitInterrupting(_TriggerBase):
    """The cancels and interrupts of :class:`~costaware.triggers.remote_training.RemoteTrainingJobTrigger`."""

    # Set by RemoteTrainingJobTrigger.__init__ (see there).
    backend: str
    job_id: str | None

    @contextmanager
    def _interrupts_wait_for_the_bill(self, clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
        """A second Ctrl-C (or SIGTERM) of `airflow dags test` waits for the stop and bill under way.

        It raised in the middle of it: the hold was settled (``stop_and_bill``'s ``finally``) and the
        stopped job never billed. The stop takes at most ``KILL_WAIT_SECONDS``, but the backend's calls and
        the ledger's writes around it have no bound of their own: a signal after ``BILL_PATIENCE_SECONDS``
        goes through, saying what is left unbilled, so that a hung backend or ledger never leaves the
        command stoppable only by SIGKILL. Only the main thread can set a handler, and the inline trigger
        runs there; elsewhere nothing changes.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        started = clock()
        handled = (signal.SIGINT, signal.SIGTERM)
        previous: dict[int, Any] = {}

        def wait_for_the_bill(signum: int, frame: object) -> None:
            name = signal.Signals(signum).name
            waited = clock() - started
            if waited < BILL_PATIENCE_SECONDS:
                self.log.warning(
                    "%s: still stopping and billing job %s, which takes at most %.0f s: wait for it (a "
                    "signal after %.0f s ends it unbilled)",
                    name,
                    self.job_id,
                    KILL_WAIT_SECONDS,
                    BILL_PATIENCE_SECONDS,
                )
                return
            for number, handler in previous.items():
                signal.signal(number, handler)
            self.log.error(
                "%s after %.0f s of stopping and billing job %s on %r: given up; the job may run on and is "
                "not billed, and the task's budget hold stays held (to its expiry, or until a new try takes "
                "it over): stop it on the backend, then clear the task (its new try follows the job by its "
                "name, bills it and settles the hold)",
                name,
                waited,
                self.job_id,
                self.backend,
            )
            raise KeyboardInterrupt

        previous.update({signum: signal.signal(signum, wait_for_the_bill) for signum in handled})
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _cancelled_by_trigger_assignment_past_the_deadline(self, cancel: asyncio.CancelledError) -> bool:
        """Whether this is a cancel past the deadline from Airflow's trigger assignment, with no ``on_kill``.

        Airflow 3.3.2's triggerer sends one message for every trigger it no longer holds: a person's
        action (a mark or a clear), the scheduler's timeout check, a hand-over to another triggerer. It
        calls ``on_kill`` for it only before the task's ``trigger_timeout``, which it sets on the trigger as
        ``timeout_after``; past it, it re-raises without calling it. Which of them it was, only the task's
        state tells (:meth:`_stop_and_bill_if_the_task_ended`).
        """
        if not (cancel.args and cancel.args[0] == AIRFLOW_USER_ACTION_CANCEL):
            return False
        deadline = getattr(self, "timeout_after", None)
        if not isinstance(deadline, datetime):
            return False
        now = utcnow()
        return (deadline if deadline.tzinfo else deadline.replace(tzinfo=now.tzinfo)) < now
