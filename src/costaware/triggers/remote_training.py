"""``RemoteTrainingJobTrigger``: polls a compute backend in the triggerer until a training job ends.

Every ``poll_interval`` seconds it asks the backend for the job's status (in a worker thread, never on the
event loop) and emits one event when the job ended, or when a spot job still waits for capacity at
``fallback_at`` (the latest safe start: the operator moves it to on-demand):
``{"status": "success", "job": {...JobStatus...}, "state": {...}, "fallback": bool}`` or
``{"status": "error", "message": ..., "state": {...}}``. ``state`` is the operator's attempt state, echoed
so the operator resumes from the event alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from costaware.core.ledger import utcnow
from costaware.core.series import parse_instant


def job_event(
    status: Any, state: Mapping[str, Any], *, fallback_at: datetime | None, now: datetime
) -> dict[str, Any] | None:
    """The event for a poll result, or None to keep waiting (pure)."""
    from costaware.adapters.compute.base import JobState

    if status.state.done:
        return {"status": "success", "job": status.to_dict(), "state": dict(state), "fallback": False}
    waiting_for_spot = status.state == JobState.PENDING and status.market == "spot"
    if waiting_for_spot and fallback_at is not None and now >= fallback_at:
        return {"status": "success", "job": status.to_dict(), "state": dict(state), "fallback": True}
    return None


class RemoteTrainingJobTrigger(BaseTrigger):
    """Fires when a training job on a compute backend ended (or must fall back to on-demand).

    See docs/remote-training.md.

    Args:
        backend: Backend name (``local``, ``sagemaker``, ``batch``, ``kubernetes``).
        backend_options: Its options, JSON primitives.
        job_id: The job to watch.
        state: The operator's attempt state (JSON primitives), echoed in the event.
        fallback_at: ISO time after which a spot job still pending is reported for fallback (None: never).
        poll_interval: Seconds between polls.
    """

    def __init__(
        self,
        backend: str,
        backend_options: dict[str, Any],
        job_id: str,
        state: dict[str, Any],
        fallback_at: str | None = None,
        poll_interval: float = 30.0,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.backend_options = dict(backend_options)
        self.job_id = job_id
        self.state = dict(state)
        self.fallback_at = fallback_at
        self.poll_interval = poll_interval

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
            },
        )

    def _poll(self) -> Any:
        from costaware.adapters.compute.base import open_backend

        return open_backend(self.backend, self.backend_options).poll(self.job_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        fallback_at = parse_instant(self.fallback_at, name="fallback_at") if self.fallback_at else None
        last = ""
        while True:
            try:
                status = await asyncio.to_thread(self._poll)
            except Exception as e:
                yield TriggerEvent(
                    {"status": "error", "message": f"{type(e).__name__}: {e}", "state": self.state}
                )
                return
            event = job_event(status, self.state, fallback_at=fallback_at, now=utcnow())
            if event is not None:
                yield TriggerEvent(event)
                return
            if status.state.value != last:
                self.log.info("job %s on %s: %s", self.job_id, self.backend, status.state.value)
                last = status.state.value
            await asyncio.sleep(self.poll_interval)
