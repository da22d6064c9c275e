"""The vocabulary of the attempts state machine: the trigger events it takes and the steps it returns.

An :data:`Event` is what the trigger saw (:func:`event_from_trigger`); a :class:`Step` is what
:func:`~costaware.training.attempts.next_step` says to do. Split from :mod:`costaware.training.attempts`,
which re-exports every name: read them from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from costaware.core.spot_decision import SpotDecision

# -- events --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobEnded:
    """The current job ended (``job``: its status dict).

    ``fallback``: it has not ended but still waits for spot capacity at the latest safe start.
    """

    job: Mapping[str, Any]
    fallback: bool = False


@dataclass(frozen=True, slots=True)
class PriceRose:
    """The spot price rose well above the rest of the window while ``job`` ran (seen at ``seen_at``)."""

    reason: str
    seen_at: str | None
    job: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PriceBack:
    """While paused: the price watch's decision to resume (on spot at its price, or on on-demand)."""

    decision: SpotDecision


Event = JobEnded | PriceRose | PriceBack


def event_from_trigger(event: Mapping[str, Any]) -> Event:
    """The event of a ``RemoteTrainingJobTrigger`` success event dict."""
    if "resume" in event:
        return PriceBack(decision=SpotDecision.from_xcom(event["resume"]))
    if event.get("pause"):
        return PriceRose(reason=str(event["pause"]), seen_at=event.get("seen_at"), job=dict(event["job"]))
    return JobEnded(job=dict(event["job"]), fallback=bool(event.get("fallback")))


# -- steps ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """What to do first, before the step itself.

    ``stop_first``: stop the current job (it still waits for spot capacity); ``record_cause``: record the
    ended current attempt in the ledger with this cause (None: nothing ended).
    """

    record_cause: str | None = None
    stop_first: bool = False


@dataclass(frozen=True, slots=True)
class Submit(Step):
    """Submit the next attempt on ``market``; ``cause_of_previous`` is the cause of the attempt it follows.

    ``market_reason``: why on-demand, where this rule chose it over spot (the attempt's ledger note says it).
    """

    market: str
    cause_of_previous: str | None = None
    market_reason: str = ""


@dataclass(frozen=True, slots=True)
class Pause(Step):
    """Stop the current spot job through a price rise; the wait that follows sees it end."""

    reason: str
    job: Mapping[str, Any]
    seen_at: str


@dataclass(frozen=True, slots=True)
class Resume(Step):
    """After a pause: submit the next attempt on ``market`` (on spot at ``usd_per_hour``)."""

    market: str
    usd_per_hour: str | None
    reason: str = ""

    @property
    def market_reason(self) -> str:
        """Why the attempt runs on on-demand ("" on spot).

        The price watch's reason says why now, not that a pause came first: the ledger note says both.
        """
        if self.market != "on_demand":
            return ""
        return ", ".join(filter(None, ["resumed after a pause by a price rise", self.reason]))


@dataclass(frozen=True, slots=True)
class WaitForPrice(Step):
    """Paused: wait for the spot price to come back (or the latest resume)."""


@dataclass(frozen=True, slots=True)
class Finish(Step):
    """The job succeeded: settle, read its result, register the model."""


@dataclass(frozen=True, slots=True)
class Fail(Step):
    """Fail the task with ``message`` (``retry``: an Airflow retry may help).

    ``job_id``: the failed job, whose last log lines go with the message (and the reservation is settled).
    """

    message: str
    retry: bool = False
    job_id: str | None = None
