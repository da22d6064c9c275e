"""``OffPeakTimetable``: one run per allowed window, started when it opens; the data interval is the window.

``OffPeakTimetable(windows=["22:00-06:00"], days="mon-fri", timezone="America/New_York")`` starts a run at
22:00 New York time on weekdays, with ``data_interval_start`` = 22:00 and ``data_interval_end`` = 06:00 the
next morning, so downstream tasks (``SpotWindowSensor``) know how long the window lasts. The window math is in
``costaware.core.windows`` (DST-correct: a window may last 7 or 9 hours on the nights clocks change).

Register it with the plugin (``timetables = [OffPeakTimetable]``) and import it in DAGs from
``costaware.timetables``; both name the same class, whose registry key is
``costaware.timetables.off_peak.OffPeakTimetable``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pendulum
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction, Timetable

from costaware.core.carbon import MAX_POWER_KW, OBJECTIVES, Objective
from costaware.core.errors import ConfigurationError, CostawareError
from costaware.core.given import not_given
from costaware.core.ledger import utcnow
from costaware.core.windows import Window, WindowSchedule, cheapest_start, power_hourly_values

log = logging.getLogger(__name__)


def _number(value: object, name: str, unit: str) -> float:
    """``value`` as a float, or a ConfigurationError naming the argument (``"2h"`` is not a number)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name}={value!r} is not a number of {unit}: write it as e.g. 2") from None


def _pendulum(instant: datetime) -> pendulum.DateTime:
    return pendulum.instance(instant, tz="UTC")


class OffPeakTimetable(Timetable):
    """Runs at the start of each allowed window; the data interval is the window.

    See docs/spot-windows.md.

    Args:
        windows: Local wall-clock windows, e.g. ``["22:00-06:00"]`` (an end before the start is the next day).
        days: Days on which a window opens: ``"mon-fri"``, ``"sat,sun"``, ``"daily"``.
        timezone: IANA zone of the wall-clock times.
        objective: ``cost`` (default), ``carbon`` or ``cost+carbon``: what the start chosen inside each
            window minimises. With ``cost`` and no ``electricity`` a run starts when its window opens, as
            always. (Timetables are not templated: checked when the DAG is built.)
        carbon_usd_per_tonne: Carbon price of ``cost+carbon`` (USD per tonne CO2e).
        carbon: Where the grid intensity comes from: a bundled grid zone (``"GB"``) or a recorded carbon
            intensity CSV path; default the grid zone of ``region``.
        region: Cloud region whose grid the runs draw from (for the default ``carbon``).
        run_hours: How long a run lasts: with an objective, each run starts at the whole hour inside its
            window where a run of this length has the lowest summed hourly value.
        power_kw: What the job draws (kW), the energy of both the electricity and the carbon term.
        electricity: A recorded hourly electricity price CSV (``timestamp_utc,usd_per_mwh``) for the
            cost term of power-priced runs; without it the cost term is 0.
        check_sources: Check the carbon zone and files now (when the DAG is parsed); False where Airflow
            rebuilds the timetable from its serialized form.

    The carbon and electricity files are read when the scheduler asks for the next run, never when the DAG
    is parsed. The data interval stays the whole window; only ``run_after`` moves inside it.

    Raises:
        ConfigurationError: a window that cannot exist (``"25:00-03:00"``), overlapping windows, an unknown
            day or zone, an unknown objective or carbon price, an objective with no ``run_hours``.
    """

    periodic = True
    run_ordering: Sequence[str] = ("data_interval_end", "logical_date")

    def __init__(
        self,
        windows: Sequence[str] | str = ("22:00-06:00",),
        days: str | Sequence[str] = "daily",
        timezone: str = "UTC",
        *,
        objective: str = "cost",
        carbon_usd_per_tonne: float | str | None = None,
        carbon: str | None = None,
        region: str | None = None,
        run_hours: float | None = None,
        power_kw: float = 1.0,
        electricity: str | None = None,
        check_sources: bool = True,
    ) -> None:
        self.windows = [windows] if isinstance(windows, str) else list(windows)
        self.days = days if isinstance(days, str) else ",".join(days)
        self.timezone = str(timezone)
        self._schedule = WindowSchedule.parse(self.windows, self.days, self.timezone)
        # A timetable's arguments are never templates: "None" is a typo, not an unset param, and it was
        # refused before Objective.parse read it as not given. "" (left as cost before) still is cost.
        if isinstance(objective, str) and objective and not_given(objective):
            raise ConfigurationError(
                f"OffPeakTimetable objective={objective!r} names no objective: write one of "
                f"{', '.join(OBJECTIVES)}, or leave objective out for cost"
            )
        if check_sources and isinstance(carbon, str) and carbon and not_given(carbon):
            # check_settings_used reads it as not given (a rendered param's reading), so beside 'cost' it
            # loaded without a word; the timetable would look it up as a zone of that name.
            raise ConfigurationError(
                f"OffPeakTimetable carbon={carbon!r} names no grid zone or file: give one (e.g. 'GB'), or "
                "leave carbon out for the region's grid"
            )
        self._objective = Objective.parse(objective, carbon_usd_per_tonne)
        if check_sources:  # as the DAG is parsed; a DAG serialized before this check still deserializes
            self._objective.check_settings_used(carbon_usd_per_tonne, carbon)
        self.objective = self._objective.name
        self.carbon_usd_per_tonne = (
            None if carbon_usd_per_tonne is None else self._objective.carbon_usd_per_tonne
        )
        self.carbon = carbon
        self.region = region
        self.electricity = electricity
        self.run_hours = None if run_hours is None else _number(run_hours, "run_hours", "hours")
        self.power_kw = _number(power_kw, "power_kw", "kW")
        if self.ranks and (self.run_hours is None or self.run_hours <= 0):
            raise ConfigurationError(
                f"run_hours={run_hours!r}: objective {self.objective!r} chooses the start of each run inside "
                "its window and needs run_hours, how long a run lasts (hours > 0)"
            )
        if not 0 < self.power_kw <= MAX_POWER_KW:
            raise ConfigurationError(
                f"power_kw={power_kw!r} is not a machine's power in kW (more than 0, at most "
                f"{MAX_POWER_KW:g}): watts given as kW? 6500 W is 6.5 kW"
            )
        longest = max(w.end_minute - w.start_minute for w in self._schedule.windows) / 60
        if self.ranks and self.run_hours is not None and self.run_hours > longest:
            raise ConfigurationError(
                f"run_hours={run_hours!r} is longer than the longest window ({longest:g} hours): a run would "
                "go on past its window's end; widen the window or shorten run_hours"
            )
        if self.ranks and check_sources:
            self._check_sources()
        self.description = (
            f"One run per off-peak window {self._schedule.describe()}; the data interval is the window "
            "(DST-aware: a window can be an hour shorter or longer on the nights clocks change)."
        )

    def _check_sources(self) -> None:
        """Refuse a carbon zone, region or file the scheduler could not read, when the DAG is parsed.

        Found later, the scheduler's error would stop the DAG's schedule with nothing in the UI to say why.
        Names and paths only: the series themselves are read when the scheduler asks for the next run.
        """
        from costaware.adapters.spot_market import check_carbon_source, check_local_file

        check_carbon_source(self.carbon, region=self.region, objective=self._objective)
        if self.electricity:
            what = "a recorded hourly electricity price CSV (timestamp_utc,usd_per_mwh) that exists"
            check_local_file(
                self.electricity, "electricity", what, columns=[("timestamp_utc",), ("usd_per_mwh",)]
            )

    @property
    def summary(self) -> str:
        """Short text for the UI's schedule column."""
        return f"off-peak {self._schedule.describe()}"

    @property
    def ranks(self) -> bool:
        """Whether runs start at the best hour inside their window rather than when it opens."""
        return self._objective.needs_carbon or self.electricity is not None

    def serialize(self) -> dict[str, Any]:
        """JSON-able constructor arguments; the objective's only when set (as before for today's DAGs)."""
        data: dict[str, Any] = {"windows": self.windows, "days": self.days, "timezone": self.timezone}
        extra = {
            "objective": self.objective if self.objective != "cost" else None,
            "carbon_usd_per_tonne": self.carbon_usd_per_tonne,
            "carbon": self.carbon,
            "region": self.region,
            "run_hours": self.run_hours,
            "power_kw": self.power_kw if self.power_kw != 1.0 else None,
            "electricity": self.electricity,
        }
        data.update({k: v for k, v in extra.items() if v is not None})
        return data

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> Timetable:
        """Inverse of :meth:`serialize`."""
        extra = {k: v for k, v in data.items() if k not in ("windows", "days", "timezone")}
        # Checked when the DAG was parsed; the scheduler or API server rebuilding it need not see the files.
        return cls(
            windows=data["windows"],
            days=data["days"],
            timezone=data["timezone"],
            check_sources=False,
            **extra,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffPeakTimetable) and self.serialize() == other.serialize()

    def __hash__(self) -> int:
        return hash((tuple(self.windows), self.days, self.timezone, self.objective, self.carbon))

    def _start(self, window: Window) -> pendulum.DateTime:
        """When the run starts: the window's opening, or with an objective its best hour (reads the files).

        A file the scheduler cannot read (moved or deleted since the DAG was parsed, or not on the
        scheduler's machine) starts the run when its window opens, said in the scheduler's log: raised, it
        made Airflow drop the DAG's next run, and the DAG never ran again, with nothing in the UI.
        """
        if not self.ranks or self.run_hours is None:
            return _pendulum(window.start)
        try:
            return self._best_start(window, self.run_hours)
        except (CostawareError, OSError) as e:
            log.error(
                "costaware: OffPeakTimetable %s cannot rank the hours of the window from %s (%s): the run "
                "starts when the window opens; fix carbon= or electricity=",
                self.summary,
                window.start.isoformat(),
                e,
            )
            return _pendulum(window.start)

    def _best_start(self, window: Window, run_hours: float) -> pendulum.DateTime:
        """The window's best hour for the objective, from the carbon and electricity files."""
        from costaware.adapters.spot_market import carbon_intensity
        from costaware.adapters.spot_prices import load_electricity
        from costaware.core.spot_forecast import hourly_series

        hours = max(1, int(window.hours))
        # Followed as far as the window's hours: a year of it cost the scheduler 0.06-0.18 s a decision.
        intensity = carbon_intensity(
            self.carbon,
            region=self.region,
            objective=self._objective,
            at=window.start,
            until=window.start + timedelta(hours=hours),
        )
        prices = load_electricity(self.electricity) if self.electricity else None
        values = power_hourly_values(
            objective=self._objective,
            power_kw=self.power_kw,
            electricity_usd_per_mwh=hourly_series(prices, window.start, hours) if prices else None,
            g_co2e_per_kwh=hourly_series(intensity, window.start, hours) if intensity else None,
            hours=hours,
        )
        return _pendulum(cheapest_start(window, run_hours, values))

    def _info(self, window: Window) -> DagRunInfo:
        start, end = _pendulum(window.start), _pendulum(window.end)
        # The run starts when the window opens (not when it closes, as interval timetables do): the work must
        # happen inside the window. With an objective it starts at the window's best hour for it.
        return DagRunInfo(run_after=self._start(window), data_interval=DataInterval(start=start, end=end))

    def infer_manual_data_interval(self, *, run_after: pendulum.DateTime) -> DataInterval:
        """The window open at ``run_after``, else the next one to open; never one that already ended.

        The trigger form pre-fills the logical date with "now", and Airflow passes it here: a run started by
        hand between windows gets the next window, so its spot window waits for it to open instead of
        deciding against a deadline hours in the past. (A logical date in the past, e.g. a replay with
        ``airflow dags test dag 2013-02-01``, gets the window open then or the next one after it.)
        """
        window = self._schedule.next_window(run_after, include_open=True)
        return DataInterval(start=_pendulum(window.start), end=_pendulum(window.end))

    def next_dagrun_info(
        self, *, last_automated_data_interval: DataInterval | None, restriction: TimeRestriction
    ) -> DagRunInfo | None:
        """The next window after the last run's; without catchup, the window open now or the next one.

        A DAG without a ``start_date`` (Airflow 3 allows one with catchup off) starts with the window open
        now or the next one, as Airflow's cron timetables do: returning None left it without any run.
        """
        if last_automated_data_interval is not None:
            window = self._schedule.next_window(last_automated_data_interval.end)
        elif restriction.earliest is None:
            window = self._schedule.next_window(pendulum.instance(utcnow()), include_open=True)
        else:
            window = self._schedule.next_window(restriction.earliest)
        if not restriction.catchup:
            now = pendulum.instance(utcnow())
            if window.end <= now:
                window = self._schedule.next_window(now, include_open=True)
        if restriction.earliest is not None and window.start < restriction.earliest:
            window = self._schedule.next_window(restriction.earliest)
        if restriction.latest is not None and window.start > restriction.latest:
            return None
        return self._info(window)
