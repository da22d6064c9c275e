"""The policy interface: at each tick of a job's life, say whether to wait, run on spot or run on-demand.

Shaped like Optuna's pruners: one abstract method, one strategy per module, arguments checked in the
constructor. Policies are pure and see floats: the replay simulator asks them thousands of times per job, so
prices here are ``float`` USD/hour; money becomes ``Decimal`` again where results leave the simulator.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar


class Action(str, Enum):
    """What the job does during one tick."""

    WAIT = "wait"
    SPOT = "spot"
    ON_DEMAND = "on_demand"


@dataclass(frozen=True, slots=True)
class Hindsight:
    """Every price and availability of a job's horizon, per tick; only clairvoyant policies get it.

    ``zones`` holds each zone's spot prices and capacity for a policy that plans zone by zone
    (:attr:`Policy.plans_zones`); ``spot`` and ``available`` are then the collapsed market (the cheapest zone
    with capacity).
    """

    spot: Sequence[float] | None
    available: Sequence[bool] | None
    on_demand: Sequence[float]
    zones: tuple[tuple[Sequence[float], Sequence[bool]], ...] | None = None
    #: Capacity at each tick's start (per zone with ``zones``), where a tick spans several trace samples and
    #: may lose its capacity inside: a job on spot is preempted at a tick's start only where capacity is gone
    #: then, and runs a spot tick only where capacity holds through it. None: as ``available`` (the zones').
    available_at_start: Sequence[bool] | None = None
    zones_at_start: tuple[Sequence[bool], ...] | None = None


@dataclass(frozen=True, slots=True)
class Situation:
    """What a policy knows at the start of tick ``tick`` (ticks count from the job's submit time).

    Work, deadline, overhead and checkpoint spacing are in ticks. ``progress`` is the work done and kept;
    ``running`` is the market the job ran on during the last tick (``WAIT`` when idle) and ``overhead_left``
    the restart ticks it still has to pay there before progress resumes. ``spot_usd_per_hour`` is ``None``
    when the job has no spot market (on-premises power). Forecasts hold one value per tick from submit time,
    fitted on history before submit. ``availability_history`` is the spot capacity seen per tick before submit
    (oldest first), for policies that learn the capacity process. ``priority`` is the job's class:
    ``critical`` (never paused, keeps room for a preemption), ``normal`` or ``best_effort``.
    """

    tick: int
    tick_hours: float
    work_ticks: int
    deadline_tick: int
    overhead_ticks: int
    checkpoint_ticks: int
    progress: int
    running: Action
    overhead_left: int
    spot_usd_per_hour: float | None
    spot_available: bool
    on_demand_usd_per_hour: float
    spot_forecast: Sequence[float] | None
    on_demand_forecast: Sequence[float]
    hindsight: Hindsight | None = None
    availability_history: Sequence[bool] | None = None
    priority: str = "normal"
    #: The real USD/hour of spot and on-demand now when the two fields above hold another objective's values
    #: (kg CO2e under ``carbon``); None: they are USD. Spot is usable on its price, as live.
    usd_spot_now: float | None = None
    usd_on_demand_now: float | None = None
    #: Under ``carbon`` or ``cost+carbon``, the part of ``spot_usd_per_hour`` (and on-demand's) that the
    #: grid's intensity now makes, and of the forecasts per tick; None under ``cost``. A run starting now
    #: meets the intensity of every hour it covers, not the instant's alone.
    carbon_now: float | None = None
    carbon_forecast: Sequence[float] | None = None


class Policy(abc.ABC):
    """A scheduling strategy for one job; the simulator makes a fresh instance per job."""

    #: Name used by ``costaware simulate --policy``.
    name: ClassVar[str]
    #: Whether the policy may read :attr:`Situation.hindsight` (only the oracle).
    clairvoyant: ClassVar[bool] = False
    #: Whether a clairvoyant policy places its spot ticks in zones itself (``zone_at(tick)``); the others run
    #: a zoned job on the collapsed market (clairvoyant) or by the live zone rule.
    plans_zones: ClassVar[bool] = False

    @abc.abstractmethod
    def decide(self, situation: Situation) -> Action:
        """The action for this tick."""

    def zone_at(self, tick: int) -> int:
        """Where a policy that :attr:`plans_zones` runs spot tick ``tick`` (a zone index; -1: not on spot)."""
        return -1
