from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pendulum
import pytest
import time_machine
from airflow.timetables.base import DataInterval, TimeRestriction
from clocks import CLOCKS

from costaware.core.errors import ConfigurationError
from costaware.timetables import OffPeakTimetable, off_peak

NY = "America/New_York"
UTC = pendulum.UTC


def utc(text: str) -> pendulum.DateTime:
    return pendulum.parse(text).in_timezone(UTC)  # type: ignore[union-attr]


def runs(tt: OffPeakTimetable, earliest: str, count: int, *, catchup: bool = True) -> list[DataInterval]:
    restriction = TimeRestriction(earliest=utc(earliest), latest=None, catchup=catchup)
    last = None
    found = []
    for _ in range(count):
        info = tt.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
        assert info is not None and info.data_interval is not None
        assert info.run_after == info.data_interval.start  # runs start when the window opens
        found.append(info.data_interval)
        last = info.data_interval
    return found


def test_dag_imports_the_class_the_plugin_registers() -> None:
    # The plugin registers costaware.timetables.off_peak.OffPeakTimetable; the key is module + qualname.
    assert OffPeakTimetable is off_peak.OffPeakTimetable
    assert f"{OffPeakTimetable.__module__}.{OffPeakTimetable.__qualname__}" == (
        "costaware.timetables.off_peak.OffPeakTimetable"
    )


@pytest.mark.parametrize(
    ("earliest", "expected"),
    [
        # Spring forward, Sun 2025-03-09 02:00 EST -> 03:00 EDT: the Saturday-night window lasts 7 h.
        (
            "2025-03-07T12:00:00Z",
            [
                ("2025-03-08T03:00:00Z", "2025-03-08T11:00:00Z"),  # Fri 22:00 EST -> Sat 06:00 EST (8 h)
                ("2025-03-09T03:00:00Z", "2025-03-09T10:00:00Z"),  # Sat 22:00 EST -> Sun 06:00 EDT (7 h)
                ("2025-03-10T02:00:00Z", "2025-03-10T10:00:00Z"),  # Sun 22:00 EDT -> Mon 06:00 EDT (8 h)
            ],
        ),
        # Fall back, Sun 2025-11-02 02:00 EDT -> 01:00 EST: the Saturday-night window lasts 9 h.
        (
            "2025-10-31T12:00:00Z",
            [
                ("2025-11-01T02:00:00Z", "2025-11-01T10:00:00Z"),  # Fri 22:00 EDT -> Sat 06:00 EDT
                ("2025-11-02T02:00:00Z", "2025-11-02T11:00:00Z"),  # Sat 22:00 EDT -> Sun 06:00 EST (9 h)
                ("2025-11-03T03:00:00Z", "2025-11-03T11:00:00Z"),  # Sun 22:00 EST -> Mon 06:00 EST
            ],
        ),
    ],
    ids=["spring-forward", "fall-back"],
)
def test_next_runs_across_dst(earliest: str, expected: list[tuple[str, str]]) -> None:
    tt = OffPeakTimetable(windows=["22:00-06:00"], days="daily", timezone=NY)
    got = [(i.start, i.end) for i in runs(tt, earliest, 3)]
    assert got == [(utc(a), utc(b)) for a, b in expected]


def test_weekday_windows_skip_the_weekend() -> None:
    tt = OffPeakTimetable(windows=["22:00-06:00"], days="mon-fri", timezone=NY)
    starts = [i.start.in_timezone(NY) for i in runs(tt, "2025-03-06T12:00:00Z", 4)]  # from Thursday
    assert [s.format("ddd HH:mm") for s in starts] == ["Thu 22:00", "Fri 22:00", "Mon 22:00", "Tue 22:00"]


def test_window_starting_in_the_spring_gap_opens_when_the_clock_jumps() -> None:
    tt = OffPeakTimetable(windows=["02:30-04:00"], days="daily", timezone=NY)
    first = runs(tt, "2025-03-09T00:00:00Z", 1)[0]
    # 02:30 does not exist that night: the window opens at 03:00 EDT (07:00Z) and closes at 04:00 EDT.
    assert (first.start, first.end) == (utc("2025-03-09T07:00:00Z"), utc("2025-03-09T08:00:00Z"))


@pytest.mark.parametrize("instant", [*CLOCKS, "2026-11-24T23:59:59.999+00:00"])
def test_catchup_false_starts_from_the_current_or_next_window(instant: str) -> None:
    tt = OffPeakTimetable(windows=["00:00-24:00"], days="daily", timezone="UTC")
    restriction = TimeRestriction(earliest=utc("2020-01-01T00:00:00Z"), latest=None, catchup=False)
    with time_machine.travel(instant, tick=False):  # frozen: the window cannot close mid-test
        info = tt.next_dagrun_info(last_automated_data_interval=None, restriction=restriction)
        now = pendulum.now("UTC")
    assert info is not None and info.data_interval is not None
    assert info.data_interval.start <= now < info.data_interval.end  # today's window, not 2020's
    caught_up = runs(tt, "2020-01-01T00:00:00Z", 2, catchup=True)
    assert caught_up[0].start == utc("2020-01-01T00:00:00Z")
    assert caught_up[1].start == utc("2020-01-02T00:00:00Z")


def test_a_dag_without_start_date_runs_in_the_window_open_now_or_the_next() -> None:
    # Airflow 3 takes a DAG without start_date (with catchup off); its cron timetables schedule it from
    # now, where this one returned None and the DAG never ran, with nothing to say why.
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("no_start", schedule=OffPeakTimetable(["22:00-06:00"], timezone=NY), catchup=False) as dag:
        EmptyOperator(task_id="t")
    scheduled = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    with time_machine.travel("2025-06-11T16:00:00Z", tick=False):  # noon in New York, between windows
        between = scheduled.next_dagrun_info(last_automated_run_info=None)
    with time_machine.travel("2025-06-11T04:00:00Z", tick=False):  # midnight: a window is open
        inside = scheduled.next_dagrun_info(last_automated_run_info=None)
    assert between is not None and between.data_interval is not None
    assert (between.data_interval.start, between.data_interval.end) == (
        utc("2025-06-12T02:00:00Z"),
        utc("2025-06-12T10:00:00Z"),
    )
    assert inside is not None and inside.data_interval is not None
    assert inside.data_interval.start == utc("2025-06-11T02:00:00Z")


def test_latest_stops_the_schedule() -> None:
    tt = OffPeakTimetable(windows=["22:00-06:00"], timezone="UTC")
    restriction = TimeRestriction(
        earliest=utc("2025-01-01T00:00:00Z"), latest=utc("2025-01-01T21:00:00Z"), catchup=True
    )
    assert tt.next_dagrun_info(last_automated_data_interval=None, restriction=restriction) is None


@pytest.mark.parametrize(
    ("run_after", "start", "end"),
    [
        # inside a window (00:00 EDT): that window
        ("2025-06-11T04:00:00Z", "2025-06-11T02:00:00Z", "2025-06-11T10:00:00Z"),
        # between windows (noon EDT), what the trigger form's "now" gives: the next window, not the last
        ("2025-06-11T16:00:00Z", "2025-06-12T02:00:00Z", "2025-06-12T10:00:00Z"),
        # the instant a window closes: the next one
        ("2025-06-11T10:00:00Z", "2025-06-12T02:00:00Z", "2025-06-12T10:00:00Z"),
        # the instant a window opens: that one
        ("2025-06-11T02:00:00Z", "2025-06-11T02:00:00Z", "2025-06-11T10:00:00Z"),
    ],
)
def test_manual_run_gets_the_open_or_the_next_window(run_after: str, start: str, end: str) -> None:
    tt = OffPeakTimetable(windows=["22:00-06:00"], timezone=NY)
    interval = tt.infer_manual_data_interval(run_after=utc(run_after))
    assert (interval.start, interval.end) == (utc(start), utc(end))


def test_manual_run_from_the_form_never_gets_an_ended_window(clock: object) -> None:
    # The form pre-fills the logical date with now: whatever the hour, the window has not ended yet.
    import pendulum

    from costaware.core.ledger import utcnow

    tt = OffPeakTimetable(windows=["22:00-06:00"], days="mon-fri", timezone=NY)
    now = pendulum.instance(utcnow())
    interval = tt.infer_manual_data_interval(run_after=now)
    assert interval.end > now and interval.start - now < pendulum.duration(days=4)


def test_summary_description_and_serialization() -> None:
    tt = OffPeakTimetable(windows=["22:00-06:00", "12:00-13:00"], days="mon-fri", timezone=NY)
    assert tt.summary == "off-peak 12:00-13:00, 22:00-06:00 mon-fri (America/New_York)"
    assert "data interval is the window" in tt.description
    again = OffPeakTimetable.deserialize(tt.serialize())
    assert again == tt and again.summary == tt.summary


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"windows": ["25:00-03:00"]}, "'25:00' cannot exist"),
        ({"windows": ["22:00-22:00"]}, "opens and closes at the same time"),
        ({"windows": ["22-06"]}, "is not a time of day"),
        ({"windows": ["22:00-06:00", "05:00-07:00"]}, "overlap"),
        ({"windows": []}, "windows is empty"),
        ({"days": "mon-frx"}, "'mon-frx' is not a day"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'; use an IANA name"),
        # A misspelt zone was named with a stock example only, not the zone meant.
        ({"timezone": "America/NewYork"}, r"'America/NewYork' \(did you mean 'America/New_York'\?\)"),
        ({"timezone": "europe/berlin"}, r"'europe/berlin' \(did you mean 'Europe/Berlin'\?\)"),
    ],
)
def test_bad_arguments_name_the_value(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        OffPeakTimetable(**kwargs)  # type: ignore[arg-type]


def test_dag_with_timetable_serializes_when_registered(tmp_path: Path) -> None:
    # A fresh interpreter whose plugins folder registers the class as the costaware plugin does; the
    # serializer must find it under the key costaware.timetables.off_peak.OffPeakTimetable.
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "offpeak_registration.py").write_text(
        "from airflow.plugins_manager import AirflowPlugin\n"
        "from costaware.timetables.off_peak import OffPeakTimetable\n"
        "class OffPeakRegistration(AirflowPlugin):\n"
        "    name = 'offpeak_registration_test'\n"
        "    timetables = [OffPeakTimetable]\n"
    )
    script = tmp_path / "check.py"
    script.write_text(
        "from airflow.serialization.encoders import encode_timetable\n"
        "from airflow.serialization.decoders import decode_timetable\n"
        "from costaware.timetables import OffPeakTimetable\n"
        "tt = OffPeakTimetable(windows=['22:00-06:00'], days='mon-fri', timezone='America/New_York')\n"
        "data = encode_timetable(tt)\n"
        "print(data['__type'])\n"
        "print(decode_timetable(data).summary)\n"
    )
    env = {**os.environ, "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "costaware.timetables.off_peak.OffPeakTimetable" in done.stdout
    assert "off-peak 22:00-06:00 mon-fri (America/New_York)" in done.stdout
