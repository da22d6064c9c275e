"""Periodic and preemption-triggered checkpoints for step-wise training.

A spot instance gets a two-minute notice before it is reclaimed. On the worker it arrives as SIGTERM
(Airflow's supervisor forwards it to the task process) and the ``Checkpointer`` turns the signal into a flag;
in a job under ``costaware-run`` the runtime's handler does (``costaware_runtime.preemption``) and the
``Checkpointer`` reads that flag. At the end of the current step the training saves a checkpoint and raises
``PreemptedError``: Airflow retries the task, or the job exits 75 (``EXIT_PREEMPTED`` of the job contract);
the retry resumes from that checkpoint. Steps must therefore be shorter than the notice. Without a notice (a
hard kill) at most one checkpoint interval of work is lost.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from costaware_runtime.contract import EXIT_PREEMPTED

from costaware.adapters.checkpoint_store import Checkpoint, CheckpointStorage
from costaware.core.errors import CostawareError
from costaware.training.spec import check_checkpoint_interval

log = logging.getLogger(__name__)

#: Exit code of the training entrypoint (and ``python -m costaware.training.runner``) after a preemption: the
#: job contract's "preempted after a checkpoint" (EX_TEMPFAIL: try again).
PREEMPTED_EXIT_CODE = EXIT_PREEMPTED


class PreemptedError(CostawareError):
    """Raised when training stopped on a preemption notice after saving a checkpoint; a retry resumes it.

    It is a plain exception (not an Airflow fail exception), so Airflow retries the task. The ledger listener
    reads ``ledger_cause`` to count the attempt as a preemption rather than a code error.
    """

    ledger_cause = "preemption"

    def __init__(
        self, message: str, *, step: int, checkpoint_key: str, notice_to_save_seconds: float
    ) -> None:
        super().__init__(message)
        self.step = step
        self.checkpoint_key = checkpoint_key
        self.notice_to_save_seconds = notice_to_save_seconds


class Checkpointer:
    """Saves training state every ``every_seconds`` or ``every_steps``, and at once after a preemption notice.

    Use as a context manager around the training loop: inside it SIGTERM requests a preemption (in the main
    thread; elsewhere call ``request_preemption`` yourself, e.g. from an operator's ``on_kill``). Given
    ``notice``, the SIGTERM handler is someone else's and the ``Checkpointer`` only reads its flag.

    Args:
        store: Where checkpoints go (a ``CheckpointStore``, or the launcher's ``CheckpointFolder``).
        key: The training's key in the store; the same for every retry of one run.
        every_seconds: Save when this many seconds passed since the last save (None: not by time).
        every_steps: Save when this many steps passed since the last save (None: not by steps).
        meta: Plan metadata saved with each checkpoint; a checkpoint with other metadata is not resumed.
        notice: True once a preemption notice arrived that another handler caught: under ``costaware-run``,
            ``costaware_runtime.preemption_requested`` (its first call installs the runtime's SIGTERM
            handler). Read after each step; the notice counts from then. None: the ``Checkpointer``
            handles SIGTERM itself while it is entered.
        clock: Monotonic clock in seconds (tests pass a fake one).
    """

    def __init__(
        self,
        store: CheckpointStorage,
        key: str,
        *,
        every_seconds: float | None = 300.0,
        every_steps: int | None = None,
        meta: Mapping[str, Any] | None = None,
        notice: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_checkpoint_interval(
            every_seconds, every_steps, names=("every_seconds", "every_steps"), prefix="checkpoint "
        )
        self.store = store
        self.key = key
        self.every_seconds = every_seconds
        self.every_steps = every_steps
        self.meta = dict(meta or {})
        self.notice = notice
        self.clock = clock
        self.saves = 0
        #: Wall seconds of each save of this run (serializing the state and writing it), oldest first.
        self.save_seconds: list[float] = []
        self.last_saved_step: int | None = None
        self._last_save_at = clock()
        self._last_save_step = 0
        self._notice_at: float | None = None
        self._previous_handler: Any = None
        self._installed = False

    # -- preemption notice --------------------------------------------------------------------------------

    @property
    def preemption_requested(self) -> bool:
        self._read_notice()
        return self._notice_at is not None

    def _read_notice(self) -> None:
        if self._notice_at is None and self.notice is not None and self.notice():
            self.request_preemption("SIGTERM passed on by costaware-run (preemption notice)")

    def request_preemption(self, reason: str = "preemption notice") -> None:
        """Ask the training to checkpoint and stop at the end of the current step."""
        if self._notice_at is None:
            self._notice_at = self.clock()
            log.warning("%s: will save a checkpoint and stop after the current step", reason)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.request_preemption("SIGTERM (spot interruption notice)")

    def __enter__(self) -> Checkpointer:
        if self.notice is not None:
            self._read_notice()  # the first read installs that handler, if not yet done
        elif threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True
        else:
            log.info("not in the main thread: SIGTERM is not watched; call request_preemption() on a notice")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._installed = False

    # -- saving and resuming ------------------------------------------------------------------------------

    def resume(self) -> Checkpoint | None:
        """The newest usable checkpoint of this training (same plan metadata), or None."""
        checkpoint = self.store.latest(self.key, meta=self.meta)
        if checkpoint:
            self._last_save_step = checkpoint.step
            self.last_saved_step = checkpoint.step
            log.info(
                "resuming %s from the checkpoint after step %d (saved %s)",
                self.key,
                checkpoint.step,
                checkpoint.created_at,
            )
        return checkpoint

    def due(self, step: int) -> bool:
        """Whether a checkpoint is due after ``step`` steps (by steps or by time)."""
        if self.every_steps is not None and step - self._last_save_step >= self.every_steps:
            return True
        return self.every_seconds is not None and self.clock() - self._last_save_at >= self.every_seconds

    def save(self, step: int, state: bytes, *, started_at: float | None = None) -> None:
        """Save ``state`` after ``step`` steps and time it.

        Args:
            step: Steps done.
            state: The serialized training state.
            started_at: ``time.monotonic()`` when the save began (before ``state`` was serialized); default
                now. The save's seconds count from then: the whole pause a save costs the training, which is
                what ``checkpoint_every_seconds="auto"`` weighs (the store records it for the next attempt).
        """
        # The wall clock, never ``self.clock``: the store measures against time.monotonic too.
        began = time.monotonic() if started_at is None else started_at
        self.store.save(self.key, step, state, self.meta, started_at=began)
        took = time.monotonic() - began
        self.save_seconds.append(took)
        self.saves += 1
        self.last_saved_step = step
        self._last_save_step = step
        self._last_save_at = self.clock()
        log.info(
            "checkpoint %s after step %d saved to %s (%d bytes) in %.3f s",
            self.key,
            step,
            self.store.location(self.key),
            len(state),
            took,
        )

    def step_done(self, step: int, state: Callable[[], bytes], *, last: bool = False) -> None:
        """Call after each step with the number of steps done and a way to serialize the state.

        Saves when due; after a preemption notice saves and raises ``PreemptedError``. After the ``last``
        step nothing is saved (the finished model is stored instead), unless a notice arrived.
        """
        self._read_notice()
        if self._notice_at is not None:
            self._timed_save(step, state)
            waited = self.clock() - self._notice_at
            raise PreemptedError(
                f"preempted: checkpoint after step {step} saved {waited:.1f} s after the notice to "
                f"{self.store.location(self.key)}; the retry resumes from it",
                step=step,
                checkpoint_key=self.key,
                notice_to_save_seconds=waited,
            )
        if not last and self.due(step):
            self._timed_save(step, state)

    def _timed_save(self, step: int, state: Callable[[], bytes]) -> None:
        """Serialize and save, timed from before the serializing, except in this process's first save.

        The first save's serializing pays one-time costs (the serializer's imports: skops takes seconds on
        its first use, then a millisecond) that the final model save would pay anyway; counting them as the
        cost of every save would make ``checkpoint_every_seconds="auto"`` save far too seldom. So the first
        save is timed from its write, later ones from before the serializing.
        """
        began = time.monotonic()
        blob = state()
        self.save(step, blob, started_at=began if self.saves else None)

    def finish(self) -> None:
        """Remove this training's checkpoints (call after the trained model is stored)."""
        self.store.clear(self.key)
