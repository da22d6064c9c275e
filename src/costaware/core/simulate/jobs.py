"""The jobs a simulation schedules, and each job rounded onto the tick grid.

A :class:`Job` is one row of the jobs file, checked the moment it is built so that a replay never starts on a
job no schedule could meet. :class:`TickPlan` is the same job counted in ticks, rounded so that it is never
optimistic: work and restart overhead up, the deadline down. A ``best_effort`` job's deadline is soft: its
hard deadline, the one the plan counts to, is ``runtime_hours`` later.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from costaware.core.carbon import MAX_POWER_KW
from costaware.core.errors import ConfigurationError

_JOB_FIELDS = (
    "name",
    "instance_type",
    "region",
    "submit_time",
    "runtime_hours",
    "deadline_hours",
    "checkpoint_minutes",
    "restart_overhead_minutes",
)


#: Every column a jobs file may have: the required ones, then the optional ones.
_KNOWN_FIELDS = (*_JOB_FIELDS, "power_kw", "availability_zone", "priority", "zones")

#: The most hours a job's runtime or deadline may span: ten years (1e9 hours overflowed the calendar).
MAX_JOB_HOURS = Decimal(87_600)


def _number(
    job: str, column: str, value: object, *, positive: bool = False, at_most: Decimal | None = None
) -> Decimal:
    try:
        number = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        number = Decimal("NaN")
    if not number.is_finite() or number < 0 or (positive and number == 0):
        need = "a number > 0" if positive else "a number >= 0"
        raise ConfigurationError(f"job {job!r}: {column} must be {need}, got {value!r}")
    if at_most is not None and number > at_most:
        raise ConfigurationError(
            f"job {job!r}: {column} must be at most {at_most} (ten years), got {value!r}"
        )
    return number


def _power_kw(job: str, value: object) -> Decimal:
    kw = _number(job, "power_kw", value, positive=True)
    if kw > Decimal(str(MAX_POWER_KW)):
        raise ConfigurationError(
            f"job {job!r}: power_kw={value!r} is not a machine's power in kW (0 to {MAX_POWER_KW:g}): watts "
            f"given as kW? 6500 W is 6.5 kW"
        )
    return kw


@dataclass(frozen=True, slots=True)
class Job:
    """One retrain to schedule.

    Attributes:
        name: Unique name.
        instance_type: EC2 instance type (ignored for pricing when ``power_kw`` is set).
        region: Region of the prices to use.
        submit_time: When the job may start (aware).
        runtime_hours: Work needed, uninterrupted.
        deadline_hours: Hours after ``submit_time`` by which the job must be done.
        checkpoint_minutes: Minutes of work between checkpoints (0: none).
        restart_overhead_minutes: Minutes lost at each (re)start.
        power_kw: Power draw on the team's own hardware; set for electricity-priced jobs.
        availability_zone: Use this zone's spot price; by default the region's cheapest zone at each instant.
        priority: ``critical`` (never paused, keeps room for one preemption), ``normal`` or ``best_effort``
            (its deadline is soft: it may finish up to ``runtime_hours`` after it, and that is not a miss).
        zones: Several zones to run in: each (re)start goes to the cheapest zone with capacity, and a job
            preempted in one zone fails over to another (each zone has its own prices and capacity trace).
    """

    name: str
    instance_type: str
    region: str
    submit_time: datetime
    runtime_hours: Decimal
    deadline_hours: Decimal
    checkpoint_minutes: Decimal = Decimal(30)
    restart_overhead_minutes: Decimal = Decimal(0)
    power_kw: Decimal | None = None
    availability_zone: str | None = None
    priority: str = "normal"
    zones: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from costaware.core.spot_window import check_priority

        object.__setattr__(self, "priority", check_priority(self.priority))
        # Checked here too, not only when read from a file: a Job built in Python with runtime_hours 0 cost
        # nothing and missed nothing, and a negative overhead crashed the replay.
        for column, positive in (
            ("runtime_hours", True),
            ("deadline_hours", True),
            ("checkpoint_minutes", False),
            ("restart_overhead_minutes", False),
        ):
            limit = MAX_JOB_HOURS if column.endswith("_hours") else None
            value = _number(self.name, column, getattr(self, column), positive=positive, at_most=limit)
            object.__setattr__(self, column, value)
        if self.zones and self.availability_zone:
            raise ConfigurationError(
                f"job {self.name!r} sets both availability_zone {self.availability_zone!r} and zones "
                f"{'|'.join(self.zones)}; give one zone or a list of zones"
            )
        repeated = sorted({z for z in self.zones if self.zones.count(z) > 1})
        if repeated:
            # Replayed as two zones with one trace: a preempted job "failed over" to the zone it left, and
            # the restart-thrash guard needed each copy to churn before it fired.
            raise ConfigurationError(
                f"job {self.name!r} lists zone(s) {', '.join(repeated)} more than once in zones "
                f"{'|'.join(self.zones)}; list each zone once"
            )
        if self.submit_time.tzinfo is None or self.submit_time.utcoffset() is None:
            raise ConfigurationError(
                f"job {self.name!r}: submit_time {self.submit_time.isoformat()} has no time zone; "
                f"write it with one, e.g. '{self.submit_time.isoformat()}Z'"
            )
        overhead_hours = self.restart_overhead_minutes / 60
        if self.deadline_hours < self.runtime_hours + overhead_hours:
            raise ConfigurationError(
                f"job {self.name!r}: deadline_hours {self.deadline_hours} is shorter than runtime_hours "
                f"{self.runtime_hours} plus the restart overhead ({self.restart_overhead_minutes} min); "
                "no schedule can meet it"
            )

    @classmethod
    def from_mapping(cls, row: Mapping[str, object]) -> Job:
        """A job from one row of a jobs file (CSV strings or JSON values).

        Raises:
            ConfigurationError: a missing column or a bad value; the message names the job and the value.
        """
        name = str(row.get("name") or "").strip() or "<unnamed>"
        unknown = sorted(str(c) for c in row if c not in _KNOWN_FIELDS)
        if unknown:
            # "availabilty_zone" or "prio": the setting was dropped in silence, the job replayed without it.
            import difflib

            meant = [m for c in unknown for m in difflib.get_close_matches(c, _KNOWN_FIELDS, n=1, cutoff=0.6)]
            raise ConfigurationError(
                f"job {name!r} has unknown column(s) {', '.join(map(repr, unknown))}"
                + (f" (did you mean {', '.join(map(repr, meant))}?)" if meant else "")
                + f"; the columns are {', '.join(_KNOWN_FIELDS)}"
            )
        power = row.get("power_kw")
        # A job with its own power (an on-premises box on power prices) has no instance type or region.
        needed = [c for c in _JOB_FIELDS if power in (None, "") or c not in ("instance_type", "region")]
        missing = [c for c in needed if row.get(c) in (None, "")]
        if missing:
            raise ConfigurationError(
                f"job {name!r} lacks {', '.join(missing)}; every job needs {', '.join(needed)}"
                + ("" if power not in (None, "") else " (or power_kw instead of instance_type and region)")
            )
        raw_time = str(row["submit_time"]).strip()
        try:
            submit = datetime.fromisoformat(raw_time.replace("Z", "+00:00"))
        except ValueError as e:
            raise ConfigurationError(f"job {name!r}: submit_time {raw_time!r} is not an ISO-8601 time") from e
        zone = str(row.get("availability_zone") or "").strip() or None
        priority = str(row.get("priority") or "").strip() or "normal"
        raw_zones = row.get("zones") or ()
        # "a|b" in a CSV cell; "a,b" too, in a quoted cell or JSON text (the operator's own spelling).
        listed = (
            raw_zones.replace(",", "|").split("|")
            if isinstance(raw_zones, str)
            else list(map(str, raw_zones))  # type: ignore[call-overload]
        )
        zones = tuple(z.strip() for z in listed if z.strip())
        from costaware.core.spot_window import PRIORITIES

        if priority.lower().replace("-", "_") not in PRIORITIES:
            raise ConfigurationError(
                f"job {name!r}: priority {priority!r} is unknown; choose one of {', '.join(PRIORITIES)}"
            )
        return cls(
            name=name,
            instance_type=str(row.get("instance_type") or "").strip(),
            region=str(row.get("region") or "").strip(),
            submit_time=submit,
            runtime_hours=_number(
                name, "runtime_hours", row["runtime_hours"], positive=True, at_most=MAX_JOB_HOURS
            ),
            deadline_hours=_number(
                name, "deadline_hours", row["deadline_hours"], positive=True, at_most=MAX_JOB_HOURS
            ),
            checkpoint_minutes=_number(name, "checkpoint_minutes", row["checkpoint_minutes"]),
            restart_overhead_minutes=_number(
                name, "restart_overhead_minutes", row["restart_overhead_minutes"]
            ),
            power_kw=None if power in (None, "") else _power_kw(name, power),
            availability_zone=zone,
            priority=priority,
            zones=zones,
        )


@dataclass(frozen=True, slots=True)
class TickPlan:
    """A job in ticks: work, deadline, restart overhead and checkpoint spacing."""

    tick_hours: float
    work: int
    deadline: int
    overhead: int
    checkpoint: int

    @classmethod
    def of(cls, job: Job, tick: timedelta) -> TickPlan:
        """Round a job onto the grid, never optimistic: work, overhead, checkpoint spacing up; deadline down.

        Raises:
            ConfigurationError: after rounding, work plus overhead no longer fits before the deadline.
        """
        minutes = Decimal(tick.total_seconds()) / 60
        work = math.ceil(job.runtime_hours * 60 / minutes)
        overhead = math.ceil(job.restart_overhead_minutes / minutes)
        hard_hours = job.deadline_hours + (job.runtime_hours if job.priority == "best_effort" else 0)
        deadline = math.floor(hard_hours * 60 / minutes)
        checkpoint = max(1, math.ceil(job.checkpoint_minutes / minutes)) if job.checkpoint_minutes > 0 else 0
        if work + overhead > deadline:
            # A job that fits in exact minutes fails only by the grid's rounding: a finer tick is the fix.
            fits = job.runtime_hours * 60 + job.restart_overhead_minutes <= hard_hours * 60
            raise ConfigurationError(
                f"job {job.name!r}: on a {minutes}-minute grid it needs {work + overhead} ticks but its "
                f"deadline is {deadline} ticks away; "
                + ("take a finer tick (--tick-minutes)" if fits else "raise deadline_hours")
            )
        return cls(tick.total_seconds() / 3600, work, deadline, overhead, checkpoint)

    @property
    def horizon(self) -> int:
        """Ticks of prices needed: up to the deadline, plus a forced on-demand finish after it."""
        return self.deadline + self.work + self.overhead + 1
