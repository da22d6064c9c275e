"""Carbon sources: recorded files with the bundled fallback, and the live GB Carbon Intensity API.

The live source runs against recorded API answers (``tests/fixtures/carbon``) served by a real HTTP server
on 127.0.0.1, reached through the ``costaware_carbon`` connection as a deployment configures it.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from costaware.adapters.carbon_source import (
    PUBLIC_URL,
    CarbonSourceUnavailableError,
    LiveCarbon,
    RecordedCarbon,
    base_url_from_connection,
    carbon_source,
)
from costaware.core.errors import ConfigurationError, InvalidPriceDataError, PriceNotFoundError
from costaware.core.series import PriceSeries

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "carbon"
UTC = timezone.utc
T0 = datetime(2026, 11, 20, tzinfo=UTC)


# -- recorded -----------------------------------------------------------------------------------------------


def test_recorded_folder_reads_zone_files_and_windows_them() -> None:
    source = RecordedCarbon(FIXTURES / "GB_2026-11.csv")
    series = source.intensity("GB", T0 + timedelta(minutes=90), T0 + timedelta(hours=4))
    assert series.points == [(T0 + timedelta(hours=h), Decimal(120 + h)) for h in (1, 2, 3)]
    assert "recorded" in series.name and "GB_2026-11.csv" in series.name


def test_recorded_direct_basis() -> None:
    series = RecordedCarbon(FIXTURES / "GB_2026-11.csv", basis="direct").intensity(
        "GB", T0, T0 + timedelta(hours=1)
    )
    assert series.points == [(T0, Decimal(100))]


def test_bundled_fallback_for_zones_without_a_file(tmp_path: Path) -> None:
    source = RecordedCarbon(tmp_path)
    start = datetime(2023, 3, 1, tzinfo=UTC)
    series = source.intensity("DE-LU", start, start + timedelta(hours=3))
    assert len(series) == 3 and "DE-LU_2023.csv" in series.name
    assert source.zones == ["AU-NSW", "DE-LU", "GB", "US-CAL-CISO"]
    with pytest.raises(PriceNotFoundError, match="no recorded carbon intensity for grid zone 'DE-LU'"):
        RecordedCarbon(tmp_path, bundled=False).intensity("DE-LU", start, start + timedelta(hours=1))
    with pytest.raises(PriceNotFoundError, match="grid zone 'de-lu': did you mean 'DE-LU'\\? Zone names are"):
        source.intensity("de-lu", start, start + timedelta(hours=1))  # not "import a file as de-lu"


def test_a_two_letter_zone_is_asked_about_only_where_its_spaces_differ(tmp_path: Path) -> None:
    # One letter off was asked about: "did you mean 'PL'?" for PK (Pakistan), 'GB' for GR (Greece), GN
    # (Guinea). Any two letters may be a real zone; a space around the recorded one's may not.
    (tmp_path / "PL_2026-11.csv").write_bytes((FIXTURES / "GB_2026-11.csv").read_bytes())
    source = RecordedCarbon(tmp_path)
    for typed, meant in ((" PL", "'PL'"), ("GB ", "'GB'")):
        with pytest.raises(PriceNotFoundError) as caught:
            source.intensity(typed, T0, T0 + timedelta(hours=1))
        assert f"grid zone {typed!r}: did you mean {meant}? Zone ids are written with '-'," in str(
            caught.value
        )
    for typed in ("PK", "GR", "GN", "gn", "XX"):
        with pytest.raises(PriceNotFoundError) as caught:
            source.intensity(typed, T0, T0 + timedelta(hours=1))
        assert "did you mean" not in str(caught.value), typed
        # In the real zone's own case: imported as "gn", it was never read for GN.
        assert f"costaware carbon import FILE --zone {typed.upper()}" in str(caught.value)


def test_a_zone_file_comes_first_and_the_bundled_year_serves_the_rest(tmp_path: Path) -> None:
    (tmp_path / "GB_2026-11.csv").write_bytes((FIXTURES / "GB_2026-11.csv").read_bytes())
    source = RecordedCarbon(tmp_path)
    assert source.intensity("GB", T0, T0 + timedelta(hours=1)).points == [(T0, Decimal(120))]
    # A window the imported file does not cover comes from the bundled 2023 file (it used to fail: an import
    # of a few hours hid the zone's bundled year).
    march = datetime(2023, 3, 1, tzinfo=UTC)
    assert "GB_2023.csv" in source.intensity("GB", march, march + timedelta(hours=2)).name
    with pytest.raises(
        PriceNotFoundError, match=r"GB_2026-11.csv \(gCO2e/kWh, lca\) covers 2026-11-20 00:00.*GB_2023.csv"
    ):
        source.intensity("GB", datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 3, 2, tzinfo=UTC))


def test_recorded_forecast_is_a_perfect_forecast_and_says_so() -> None:
    source = RecordedCarbon(FIXTURES / "GB_2026-11.csv")
    forecast = source.forecast("GB", T0 + timedelta(hours=10), 3)
    assert [v for _, v in forecast.points] == [Decimal(130), Decimal(131), Decimal(132)]
    assert forecast.name.endswith("recorded values as a perfect forecast")


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda s: s.intensity("GB", T0, T0), ConfigurationError, "is not after start"),
        (lambda s: s.intensity("GB", T0.replace(tzinfo=None), T0), ConfigurationError, "has no time zone"),
        (lambda s: s.forecast("GB", T0, 0), ConfigurationError, "hours must be a whole number >= 1"),
        (lambda s: s.forecast("GB", T0 + timedelta(hours=47), 2), PriceNotFoundError, "2026-11-22 00:00"),
        (
            lambda s: s.intensity("XX", T0, T0 + timedelta(hours=1)),
            PriceNotFoundError,
            "carbon import FILE --zone XX",
        ),
    ],
)
def test_recorded_errors(call, error: type[Exception], message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=message):
        call(RecordedCarbon(FIXTURES / "GB_2026-11.csv", bundled=False))


def test_a_bad_recorded_file_is_named() -> None:
    with pytest.raises(InvalidPriceDataError, match=r"GB_bad.csv.*'not-a-number' is not a number"):
        RecordedCarbon(FIXTURES / "GB_bad.csv").intensity("GB", T0, T0 + timedelta(hours=1))


LINE_ENDS = [
    pytest.param("\r", "", id="cr"),
    pytest.param("\r\n", "", id="crlf"),
    pytest.param("\n", "\ufeff", id="lf-bom"),
    pytest.param("\r", "\ufeff", id="cr-bom"),
]


@pytest.mark.parametrize(("line_end", "bom"), LINE_ENDS)
def test_a_recorded_file_reads_alike_whatever_its_line_ends(tmp_path: Path, line_end: str, bom: str) -> None:
    # Read as bytes and decoded, a CR-only file (Excel for Mac's "CSV (Macintosh)") kept its '\r' and csv
    # refused it ("new-line character seen in unquoted field"): the folder's reader, and so every read of it.
    lines = (FIXTURES / "GB_2026-11.csv").read_text(encoding="utf-8").splitlines()
    (tmp_path / "GB_saved.csv").write_bytes((bom + line_end.join(lines) + line_end).encode("utf-8"))
    window = (T0, T0 + timedelta(hours=48))
    expected = RecordedCarbon(FIXTURES / "GB_2026-11.csv", bundled=False).intensity("GB", *window).points
    assert RecordedCarbon(tmp_path, bundled=False).intensity("GB", *window).points == expected
    direct = RecordedCarbon(tmp_path, basis="direct", bundled=False).intensity("GB", *window)
    assert direct.points[0] == (T0, Decimal(100))
    # A bad value is named by the line an editor shows it on, whatever ends the lines.
    lines[2] = lines[2].replace(",121,", ",abc,")
    (tmp_path / "GB_saved.csv").write_bytes((bom + line_end.join(lines) + line_end).encode("utf-8"))
    with pytest.raises(
        InvalidPriceDataError, match=r"GB_saved\.csv .*line 3: intensity 'abc' is not a number"
    ):
        RecordedCarbon(tmp_path, bundled=False).intensity("GB", *window)


def test_factory_specs(tmp_path: Path) -> None:
    assert isinstance(carbon_source("recorded"), RecordedCarbon)
    bundled = carbon_source("bundled")
    assert isinstance(bundled, RecordedCarbon) and bundled.files == {}
    assert isinstance(carbon_source(str(FIXTURES / "GB_2026-11.csv")), RecordedCarbon)
    assert isinstance(carbon_source("live", conn_id=None), LiveCarbon)
    with pytest.raises(ConfigurationError, match="'nowhere' is not 'recorded', 'bundled', 'live' nor"):
        carbon_source("nowhere")
    with pytest.raises(ConfigurationError, match="does not exist"):
        RecordedCarbon(tmp_path / "missing")


def test_a_source_typed_wrong_or_a_missing_file_says_what_was_meant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "--source bundeld" and "--source GB_2024.csv" (not there) both said only "is not 'recorded', 'bundled',
    # 'live' nor an existing folder or file": no guess at the word, no folder the path was looked in.
    with pytest.raises(ConfigurationError) as raised:
        carbon_source("bundeld")
    assert "'bundeld' is not 'recorded', 'bundled', 'live' (did you mean 'bundled'?) nor" in str(raised.value)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as raised:
        carbon_source("GB_2024.csv")
    assert str(raised.value) == (
        f"carbon source 'GB_2024.csv' does not exist (a relative path, read as {tmp_path / 'GB_2024.csv'}): "
        "check the name, or give the full path of a folder or file of <ZONE>_<anything>.csv; or use "
        "'recorded', 'bundled' or 'live'"
    )


# -- live, against recorded answers on 127.0.0.1 ------------------------------------------------------------


class _Api(http.server.BaseHTTPRequestHandler):
    """Serves ``fixtures/carbon/<path>.json``; ``/status500/...`` fails, ``/badjson/...`` is truncated.

    ``/negative/...`` answers an intensity below zero.
    """

    requests: list[str]

    def do_GET(self) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        if self.path.startswith("/status500/"):
            self._answer(500, b'{"error": "internal"}')
            return
        if self.path.startswith("/badjson/"):
            self._answer(200, (FIXTURES / "bad_json.txt").read_bytes())
            return
        if self.path.startswith("/empty/"):  # the API's answer for half hours it has nothing for
            self._answer(200, b'{"data": []}')
            return
        if self.path.startswith("/nulls/"):  # a half hour whose actual and forecast are both unknown
            record = {"from": "2026-11-20T06:00Z", "to": "2026-11-20T06:30Z"}
            self._answer(200, json.dumps({"data": [record | {"intensity": {"forecast": None}}]}).encode())
            return
        if self.path.startswith("/late/"):  # a forecast that begins three hours after the half hour asked
            record = {"from": "2026-11-20T09:00Z", "to": "2026-11-20T09:30Z", "intensity": {"forecast": 90}}
            self._answer(200, json.dumps({"data": [record]}).encode())
            return
        if self.path.startswith("/negative/"):  # one half hour's intensity below zero, actual and forecast
            record = {"from": "2026-11-20T06:00Z", "to": "2026-11-20T06:30Z", "intensity": {"forecast": -5}}
            self._answer(
                200, json.dumps({"data": [record | {"intensity": {"forecast": -5, "actual": -5}}]}).encode()
            )
            return
        name = self.path.strip("/").replace("/", "_").replace(":", "") + ".json"
        file = FIXTURES / name
        if not file.is_file():
            self._answer(404, b'{"error": {"code": "404", "message": "not recorded"}}')
            return
        self._answer(200, file.read_bytes())

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[http.server.ThreadingHTTPServer]:
    """The recorded API on 127.0.0.1, and the ``costaware_carbon`` connection pointing at it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("AIRFLOW_CONN_COSTAWARE_CARBON", json.dumps({"conn_type": "http", "host": base}))
    yield server
    server.shutdown()
    server.server_close()


def _base(server: http.server.ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_connection_names_the_base_url(
    api: http.server.ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert base_url_from_connection() == _base(api)
    monkeypatch.setenv(
        "AIRFLOW_CONN_CARBON_PARTS",
        json.dumps({"conn_type": "http", "host": "carbon.example", "schema": "http", "port": 8080}),
    )
    assert base_url_from_connection("carbon_parts") == "http://carbon.example:8080"
    assert base_url_from_connection("no_such_carbon_conn") == PUBLIC_URL


def test_live_history_uses_actuals_then_forecast(
    api: http.server.ThreadingHTTPServer, tmp_path: Path
) -> None:
    live = LiveCarbon(cache_dir=tmp_path)
    series = live.intensity("GB", T0, T0 + timedelta(hours=6))
    assert api.requests == ["/intensity/2026-11-20T00:00Z/2026-11-20T06:00Z"]  # type: ignore[attr-defined]
    values = [v for _, v in series.points]
    assert len(values) == 12 and values[0] == Decimal(147)  # actual
    assert values[-1] == Decimal(260)  # no actual yet: the forecast of that half hour
    assert series.mean_usd_per_hour(T0, T0 + timedelta(hours=1)) == Decimal(152)


def test_live_forecast_and_cache_hit(api: http.server.ThreadingHTTPServer, tmp_path: Path) -> None:
    now = [1_000.0]
    live = LiveCarbon(cache_dir=tmp_path, clock=lambda: now[0])
    at = T0 + timedelta(hours=6, minutes=10)  # the API's half hour starts at 06:00
    first = live.forecast("GB", at, 24)
    assert len(first) == 48 and first.start == T0 + timedelta(hours=6) and "forecast" in first.name
    assert live.forecast("GB", at + timedelta(minutes=5), 24).points == first.points
    again = LiveCarbon(cache_dir=tmp_path, clock=lambda: now[0] + 60)  # another process, same disk cache
    assert again.forecast("GB", at, 48).points[:48] == first.points
    assert len(api.requests) == 1 and live.requests == 1 and again.requests == 0  # type: ignore[attr-defined]
    now[0] += 1801  # past the 30 min TTL
    live.forecast("GB", at, 1)
    assert len(api.requests) == 2  # type: ignore[attr-defined]


def test_live_errors_name_the_url(api: http.server.ThreadingHTTPServer, tmp_path: Path) -> None:
    base = _base(api)
    url = f"{base}/status500/intensity/2026-11-20T06:00Z/fw48h"
    with pytest.raises(
        CarbonSourceUnavailableError,
        match=f"HTTP 500 .* for {url}; try again later, or use "
        r"the recorded source.*--source recorded",
    ):
        LiveCarbon(base_url=f"{base}/status500", cache_dir=tmp_path).forecast(
            "GB", T0 + timedelta(hours=6), 2
        )
    url = f"{base}/badjson/intensity/2026-11-20T06:00Z/fw48h"
    with pytest.raises(InvalidPriceDataError, match=f"answered {url} with invalid JSON at line 2"):
        LiveCarbon(base_url=f"{base}/badjson", cache_dir=tmp_path).forecast("GB", T0 + timedelta(hours=6), 2)
    assert list(tmp_path.iterdir()) == []  # nothing bad was cached
    with pytest.raises(CarbonSourceUnavailableError, match=r"HTTP 404 .*/intensity/2026-11-21T00:00Z/fw48h"):
        LiveCarbon(cache_dir=tmp_path).forecast("GB", T0 + timedelta(days=1), 2)


def test_live_bad_intensity_is_told_in_gco2e_per_kwh(
    api: http.server.ThreadingHTTPServer, tmp_path: Path
) -> None:
    # The live answers were read as prices: a bad intensity was told in "(USD per hour)".
    live = LiveCarbon(base_url=f"{_base(api)}/negative", cache_dir=tmp_path)
    at = T0 + timedelta(hours=6)
    for read in (
        lambda: live.forecast("GB", at, 1),
        lambda: live.intensity("GB", at, at + timedelta(hours=1)),
    ):
        with pytest.raises(InvalidPriceDataError, match=r"intensity .*-5.*\(gCO2e per kWh\)$") as caught:
            read()
        assert "USD" not in str(caught.value)


def test_an_empty_live_answer_names_the_request_the_hours_asked_and_what_to_do(
    api: http.server.ThreadingHTTPServer, tmp_path: Path
) -> None:
    # It said "<base URL>: no actual intensity in the answer" (no hours, nothing to do), and a forecast that
    # began after the hours asked "price series 'carbon GB forecast ...' has no records; check the file and
    # its filters", of an API.
    base = _base(api)
    at = T0 + timedelta(hours=6)
    asked = "GB from 2026-11-20T06:00:00+00:00 to 2026-11-20T08:00:00+00:00"
    then = "or use the recorded source, which needs no network"
    for prefix, found in (
        ("empty", "no records"),
        ("nulls", "1 record(s), each with its {} intensity null (unknown to the API)"),
    ):
        live = LiveCarbon(base_url=f"{base}/{prefix}", cache_dir=tmp_path, ttl_seconds=0)
        for forecast, url, key in (
            (False, "2026-11-20T08:00Z", "actual or forecast"),
            (True, "fw48h", "forecast"),
        ):
            with pytest.raises(InvalidPriceDataError) as caught:
                if forecast:
                    live.forecast("GB", at, 2)
                else:
                    live.intensity("GB", at, at + timedelta(hours=2))
            assert str(caught.value).startswith(
                f"carbon intensity API answered {base}/{prefix}/intensity/2026-11-20T06:00Z/{url} with "
                f"{found.format(key)}: it has no intensity for {asked}; ask for other hours or try again "
                f"later, {then}"
            ), caught.value
    late = LiveCarbon(base_url=f"{base}/late", cache_dir=tmp_path, ttl_seconds=0)
    with pytest.raises(InvalidPriceDataError) as caught:
        late.forecast("GB", at, 2)
    assert str(caught.value).startswith(
        f"carbon intensity API answered {base}/late/intensity/2026-11-20T06:00Z/fw48h with a forecast from "
        f"2026-11-20T09:00:00+00:00 only, after the 2 hour(s) asked ({asked}): ask for more hours (up to 48) "
        f"or try again later, {then}"
    ), caught.value
    assert late.forecast("GB", at, 4).points == [(at + timedelta(hours=3), Decimal(90))]  # the part it has


def test_carbon_show_of_an_empty_live_answer_says_the_hours_asked(
    api: http.server.ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from costaware.cli import main

    monkeypatch.setenv(
        "AIRFLOW_CONN_COSTAWARE_CARBON", json.dumps({"conn_type": "http", "host": f"{_base(api)}/empty"})
    )
    argv = [
        "carbon",
        "show",
        "--zone",
        "GB",
        "--source",
        "live",
        "--start",
        "2026-11-20T06:00Z",
        "--hours",
        "2",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "with no records: it has no intensity for GB from 2026-11-20T06:00:00+00:00 to "
        "2026-11-20T08:00:00+00:00; ask for other hours" in err.replace("\n", " ")
    ), err
    assert "filters" not in err and "--source recorded" in err


def test_live_refuses_other_zones_and_horizons(tmp_path: Path) -> None:
    live = LiveCarbon(base_url="http://127.0.0.1:9", cache_dir=tmp_path)
    with pytest.raises(
        ConfigurationError, match=r"covers zone GB only, not 'DE-LU'.*carbon import FILE --zone DE-LU"
    ):
        live.forecast("DE-LU", T0, 2)
    with pytest.raises(ConfigurationError, match="forecasts 48 hours ahead, not 72"):
        live.forecast("GB", T0, 72)
    with pytest.raises(
        CarbonSourceUnavailableError, match="cannot reach the carbon intensity API at http://127"
    ) as unreachable:
        live.intensity("GB", T0, T0 + timedelta(hours=1))
    # It named "the recorded source" without saying how to choose it.
    assert str(unreachable.value).endswith(
        "or use the recorded source, which needs no network (the imported files, then the bundled 2023 "
        "year): --source recorded in `costaware carbon show`, carbon_source('recorded') in Python"
    )
    with pytest.raises(ConfigurationError, match="ttl_seconds must be >= 0"):
        LiveCarbon(base_url="http://127.0.0.1:9", ttl_seconds=-1)


def test_a_window_two_files_cover_together_is_joined_end_to_end(tmp_path: Path) -> None:
    # A try from the end of the bundled 2023 year into an imported 2024 file was refused ("no recorded
    # carbon intensity"), its emissions unknown, though each of its hours is recorded.
    new_year = datetime(2024, 1, 1, tzinfo=UTC)
    rows = [
        f"{(new_year + timedelta(hours=h)):%Y-%m-%dT%H:%M:%SZ},{400 + h},{500 + h},false" for h in range(3)
    ]
    header = (FIXTURES / "GB_2026-11.csv").read_text().splitlines()[0]
    (tmp_path / "GB_2024.csv").write_text("\n".join([header, *rows]) + "\n")
    source = RecordedCarbon(tmp_path)
    series = source.intensity("GB", new_year - timedelta(hours=2), new_year + timedelta(hours=2))
    assert [t for t, _ in series.points] == [new_year + timedelta(hours=h) for h in (-2, -1, 0, 1)]
    assert [v for _, v in series.points][2:] == [Decimal(500), Decimal(501)]
    assert "GB_2023.csv" in series.name and "GB_2024.csv" in series.name
    with pytest.raises(PriceNotFoundError, match="import a file that covers it"):  # an hour in none
        source.intensity("GB", new_year, new_year + timedelta(hours=4))


def test_a_file_keeps_its_hours_in_a_window_the_bundled_year_covers_whole(tmp_path: Path) -> None:
    # A GB file of 2023-06-14 00:00-02:00 asked for 00:00-04:00 was passed over for the bundled 2023 year,
    # which covers the window whole: its two hours showed the bundled values, while `carbon show` noted
    # that the file covered them.
    start = datetime(2023, 6, 14, tzinfo=UTC)
    rows = [f"{(start + timedelta(hours=h)):%Y-%m-%dT%H:%M:%SZ},{100 + h}" for h in range(2)]
    (tmp_path / "GB_june.csv").write_text("\n".join(["timestamp_utc,g_co2eq_per_kwh_lca", *rows]) + "\n")
    source = RecordedCarbon(tmp_path / "GB_june.csv")
    (tmp_path / "empty").mkdir()
    bundled = RecordedCarbon(tmp_path / "empty")  # no file: the bundled year alone
    series = source.intensity("GB", start, start + timedelta(hours=4))
    assert [v for _, v in series.points][:2] == [Decimal(100), Decimal(101)]
    later = bundled.intensity("GB", start + timedelta(hours=2), start + timedelta(hours=4)).points
    assert series.points[2:] == later
    assert "GB_june.csv" in series.name and "GB_2023.csv" in series.name
    # A window inside the bundled year that the file does not touch is still the bundled year's alone.
    assert source.intensity("GB", start + timedelta(hours=2), start + timedelta(hours=3)).points == later[:1]


def test_a_file_named_for_another_zone_is_said_when_nothing_covers_the_window(tmp_path: Path) -> None:
    # --source mydata.csv --zone GB: the file was passed by in silence (its name says zone 'mydata').
    mine = tmp_path / "mydata.csv"
    mine.write_bytes((FIXTURES / "GB_2026-11.csv").read_bytes())
    with pytest.raises(
        PriceNotFoundError, match=r"Not read for GB: mydata.csv \(zone 'mydata'\).*GB_<anything>"
    ):
        RecordedCarbon(mine).intensity("GB", T0, T0 + timedelta(hours=1))
    with pytest.raises(PriceNotFoundError, match=r"Not read for GB: mydata.csv"):
        RecordedCarbon(mine, bundled=False).intensity("GB", T0, T0 + timedelta(hours=1))


def test_a_carbon_file_in_an_unknown_users_home_is_named_not_a_runtime_error() -> None:
    # Path.expanduser raised a bare RuntimeError ('Could not determine home directory.').
    unknown = (
        r"^carbon source '~nosuchuser/carbon.csv' starts with the home folder of user 'nosuchuser', whom"
    )
    with pytest.raises(ConfigurationError, match=unknown):
        carbon_source("~nosuchuser/carbon.csv")


def test_a_half_hourly_file_ends_half_an_hour_after_its_last_record(tmp_path: Path) -> None:
    # A file was taken as covering up to its last record plus an hour: one ending 01:30 supplied its 01:30
    # value for 02:00-02:30, which nobody recorded, instead of the bundled year's.
    rows = [f"2023-06-14T{h:02d}:{m:02d}:00Z,{100 + h * 10 + m // 30}" for h in range(2) for m in (0, 30)]
    (tmp_path / "GB_half.csv").write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "\n".join(rows) + "\n")
    start = datetime(2023, 6, 14, tzinfo=UTC)
    joined = RecordedCarbon([tmp_path]).intensity("GB", start, start + timedelta(hours=4))
    bundled = RecordedCarbon([], bundled=True).intensity("GB", start, start + timedelta(hours=4))
    two = start + timedelta(hours=2)
    assert joined.price_at(start + timedelta(hours=1, minutes=45)) == Decimal(111)
    assert joined.price_at(two + timedelta(minutes=15)) == bundled.price_at(two + timedelta(minutes=15))
    assert RecordedCarbon([tmp_path], bundled=False).files_cover("GB", start, two)
    assert not RecordedCarbon([tmp_path], bundled=False).files_cover("GB", start, two + timedelta(minutes=30))


def test_write_atomically_syncs_the_file_before_the_rename_and_the_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without fsync a crash after the rename could leave the target empty: the rename reached the disk first.
    import os
    import stat

    from costaware.adapters.carbon_source import write_atomically

    target = tmp_path / "GB_imported.csv"
    target.write_bytes(b"old")
    synced: list[tuple[str, bytes]] = []
    fsync = os.fsync

    def spy(fd: int) -> None:
        kind = "folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        synced.append((kind, target.read_bytes()))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    write_atomically(target, b"new")
    # The file while the target still holds the old bytes (before the rename), the folder once it holds new.
    assert synced == [("file", b"old"), ("folder", b"new")]


@pytest.mark.parametrize("refused", ["folder", "file"])
def test_write_atomically_survives_a_mount_that_cannot_sync_a_folder_but_not_a_file(
    refused: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Some FUSE/CIFS mounts answer a folder's fsync with EINVAL: the import failed after the rename was done.
    import errno
    import os
    import stat

    from costaware.adapters.carbon_source import write_atomically

    target = tmp_path / "GB_imported.csv"
    target.write_bytes(b"old")
    fsync = os.fsync

    def einval(fd: int) -> None:
        if ("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file") == refused:
            raise OSError(errno.EINVAL, "Invalid argument")
        fsync(fd)

    monkeypatch.setattr(os, "fsync", einval)
    if refused == "folder":
        write_atomically(target, b"new")
        assert target.read_bytes() == b"new"
    else:  # the file's own sync still fails the write: the old bytes stay, no temporary is left
        with pytest.raises(OSError, match="Invalid argument"):
            write_atomically(target, b"new")
        assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["GB_imported.csv"]


def test_write_atomically_raises_an_error_of_fchown_other_than_a_refused_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A refused owner (EPERM, EINVAL, EOPNOTSUPP) leaves the writer's; a failing disk is no refusal: the old
    # bytes stay and no temporary is left.
    import errno
    import os

    from costaware.adapters.carbon_source import write_atomically

    target = tmp_path / "GB_imported.csv"
    target.write_bytes(b"old")

    def eio(fd: int, uid: int, gid: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fchown", eio)
    with pytest.raises(OSError, match="Input/output error"):
        write_atomically(target, b"new", owner=(4242, 4343))
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["GB_imported.csv"]


def test_an_hour_a_file_ends_inside_is_not_counted_as_covered(tmp_path: Path) -> None:
    # A half-hourly file ending 10:30 counted 10:00-11:00 as recorded, its last value held for the whole hour.
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    (tmp_path / "PL_halves.csv").write_text(
        header + "2026-11-20T09:00:00Z,100\n2026-11-20T09:30:00Z,200\n2026-11-20T10:00:00Z,300\n"
    )
    source = RecordedCarbon(tmp_path, bundled=False)
    start = datetime(2026, 11, 20, 9, tzinfo=UTC)
    assert source.covered_hours("PL", start, 2) == {start: Decimal(150)}
    # Covered whole by two files end to end, the hour counts, each half at its own file's value.
    (tmp_path / "PL_later.csv").write_text(header + "2026-11-20T10:30:00Z,500\n2026-11-20T11:30:00Z,500\n")
    source = RecordedCarbon(tmp_path, bundled=False)
    assert source.covered_hours("PL", start, 2) == {
        start: Decimal(150),
        start + timedelta(hours=1): Decimal(400),
    }


def test_the_split_modules_private_names_still_import_but_are_not_public() -> None:
    # The split listed its private helpers in __all__ to keep `from carbon_source import _joined` working,
    # which made them the module's public interface (star imports, API docs).
    from costaware.adapters import carbon_imported, carbon_live, carbon_recorded, carbon_source, carbon_window

    private = {
        name
        for module in (carbon_imported, carbon_live, carbon_recorded, carbon_window)
        for name in vars(module)
        if name.startswith("_") and not name.startswith("__") and name in vars(carbon_source)
    }
    assert {"_joined", "_HOUR", "_window", "_points", "_then_typical_year"} <= private
    assert all(getattr(carbon_source, name) is not None for name in private)  # old imports keep working
    public = [name for name in carbon_source.__all__ if name.startswith("_")]
    assert public == [], f"private names in carbon_source.__all__: {public}"


def test_a_one_record_file_takes_the_step_of_the_file_whose_end_it_starts_at(tmp_path: Path) -> None:
    # A one-record file was read as an hour, whatever came before it: after a half-hourly file ending
    # 01:00 it covered 01:00-02:00, half an hour nobody recorded (`carbon import` takes the earlier step).
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    (tmp_path / "PL_halves.csv").write_text(header + "2026-11-20T00:00:00Z,100\n2026-11-20T00:30:00Z,110\n")
    (tmp_path / "PL_latest.csv").write_text(header + "2026-11-20T01:00:00Z,120\n")
    (tmp_path / "PL_then.csv").write_text(header + "2026-11-20T01:30:00Z,130\n")  # follows PL_latest.csv
    source = RecordedCarbon(tmp_path, bundled=False)
    assert source.files_cover("PL", T0 + timedelta(hours=1), T0 + timedelta(minutes=90))
    assert not source.files_cover("PL", T0 + timedelta(hours=1), T0 + timedelta(minutes=91))
    assert list(source.covered_hours("PL", T0, 3)) == [T0, T0 + timedelta(hours=1)]
    series = source.intensity("PL", T0 + timedelta(hours=1), T0 + timedelta(hours=2))
    assert series.mean_usd_per_hour(T0 + timedelta(hours=1), T0 + timedelta(hours=2)) == 125


@pytest.mark.parametrize("in_folder", [True, False], ids=["in a folder", "given as --source"])
def test_a_one_record_file_that_follows_no_file_is_not_read_and_named_where_asked(
    tmp_path: Path, in_folder: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # Its end was guessed an hour on: for a half-hourly feed, half an hour nobody recorded. Refusing the
    # zone for it refused windows far from it too: only a window reaching its hour names it.
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    (tmp_path / "PL_hours.csv").write_text(header + "2026-11-20T00:00:00Z,100\n2026-11-20T01:00:00Z,110\n")
    single = tmp_path / "PL_latest.csv"
    single.write_text(header + "2026-11-20T03:00:00Z,130\n")  # not where PL_hours.csv ends (02:00)
    source = RecordedCarbon(tmp_path if in_folder else single, bundled=False)
    why = (
        "PL_latest.csv holds one record (2026-11-20 03:00 UTC) and no other PL file ends where it starts or "
        "begins within the hour after it: one record cannot tell an hour from half an hour, so where it ends "
        "is unknown; not read: add the record after it (the next hour or half hour) to the file, or put it "
        "beside the file it follows"
    )
    warned = caplog.at_level("WARNING", logger="costaware.adapters.carbon_source")
    with warned, pytest.raises(PriceNotFoundError) as caught:
        source.intensity("PL", T0 + timedelta(hours=3), T0 + timedelta(hours=4))
    # Warned of by this read, the error says it short (it said the reason a second time, in full), and never
    # 'see the warning above': the ledger keeps the error's text where no warning is.
    assert str(caught.value).endswith(
        "import a file that covers it. PL_latest.csv holds one record (2026-11-20 03:00 UTC) and is not "
        "read: where it ends is unknown; add the record after it to the file"
    )
    assert f"costaware: {why}" in caplog.text
    # Warned of by an earlier read (once per process: maybe in another task's log), the error says it all.
    caplog.clear()
    warned = caplog.at_level("WARNING", logger="costaware.adapters.carbon_source")
    with warned, pytest.raises(PriceNotFoundError) as again:
        RecordedCarbon(source.named_files or tmp_path, bundled=False).intensity(
            "PL", T0 + timedelta(hours=3), T0 + timedelta(hours=4)
        )
    assert str(again.value).endswith(f"import a file that covers it. {why}") and why not in caplog.text
    with pytest.raises(PriceNotFoundError) as far:
        source.intensity("PL", T0 + timedelta(hours=5), T0 + timedelta(hours=6))
    assert "PL_latest.csv" not in str(far.value)
    if in_folder:
        assert _values(source.intensity("PL", T0, T0 + timedelta(hours=2))) == [100, 110]
    else:
        assert "UTC: no PL file is read; import" in str(caught.value)


HEADER = "timestamp_utc,g_co2eq_per_kwh_lca\n"


def _values(series: PriceSeries) -> list[float]:
    return [float(value) for _, value in series.points]


def test_a_one_record_file_that_cannot_be_placed_is_left_out_not_the_whole_zone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A correction inside a month file's span refused every question about the zone, windows far from it
    # and the 2023 ones the bundled year covers too.
    (tmp_path / "GB_2026-11.csv").write_text((FIXTURES / "GB_2026-11.csv").read_text())
    (tmp_path / "GB_fix.csv").write_text(HEADER + "2026-11-21T10:00:00Z,999\n")
    source = RecordedCarbon(tmp_path)
    with caplog.at_level("WARNING", logger="costaware.adapters.carbon_source"):
        far = source.intensity("GB", T0 + timedelta(hours=1), T0 + timedelta(hours=2))
    assert _values(far) == [121.0]
    assert caplog.text.count("GB_fix.csv holds one record (2026-11-21 10:00 UTC)") == 1
    assert "not read: add the record after it" in caplog.text
    in_2023 = datetime(2023, 6, 1, 12, tzinfo=UTC)
    bundled = RecordedCarbon([], bundled=True).intensity("GB", in_2023, in_2023 + timedelta(hours=2))
    assert source.intensity("GB", in_2023, in_2023 + timedelta(hours=2)).points == bundled.points
    # Its hour is unrecorded as a gap is: the month file answers there, as it would without it.
    at_fix = datetime(2026, 11, 21, 10, tzinfo=UTC)
    assert _values(source.intensity("GB", at_fix, at_fix + timedelta(hours=1))) == [154.0]


def test_a_chain_of_one_record_feed_files_takes_its_step_from_the_next_file(tmp_path: Path) -> None:
    # Each starts an hour after the one before: every window was refused, the first following no file.
    for hour, value in enumerate((110, 120, 130), start=1):
        (tmp_path / f"GB_0{hour}.csv").write_text(HEADER + f"2026-11-20T0{hour - 1}:00:00Z,{value}\n")
    for source in (RecordedCarbon(tmp_path), RecordedCarbon(tmp_path, bundled=False)):
        assert _values(source.intensity("GB", T0 + timedelta(hours=1), T0 + timedelta(hours=3))) == [120, 130]
        assert list(source.covered_hours("GB", T0, 4)) == [T0 + timedelta(hours=h) for h in range(3)]
        assert source.files_cover("GB", T0, T0 + timedelta(hours=1))


def test_a_one_record_file_stands_until_the_next_file_begins_within_the_hour(tmp_path: Path) -> None:
    # After a half-hourly file it took half an hour, though the next record is at 02:00: 01:30-02:00, which
    # a file holding the same three records reads as the 01:00 value, counted as unrecorded.
    (tmp_path / "PL_halves.csv").write_text(HEADER + "2026-11-20T00:00:00Z,100\n2026-11-20T00:30:00Z,110\n")
    (tmp_path / "PL_latest.csv").write_text(HEADER + "2026-11-20T01:00:00Z,120\n")
    (tmp_path / "PL_then.csv").write_text(HEADER + "2026-11-20T02:00:00Z,130\n2026-11-20T03:00:00Z,140\n")
    source = RecordedCarbon(tmp_path, bundled=False)
    assert _values(source.intensity("PL", T0 + timedelta(hours=1), T0 + timedelta(hours=3))) == [120, 130]
    assert source.files_cover("PL", T0 + timedelta(hours=1), T0 + timedelta(hours=2))


def test_a_one_record_file_where_the_bundled_year_ends_takes_its_step(tmp_path: Path) -> None:
    (tmp_path / "GB_2024.csv").write_text(HEADER + "2024-01-01T00:00:00Z,120\n")
    start = datetime(2023, 12, 31, 23, tzinfo=UTC)
    series = RecordedCarbon(tmp_path).intensity("GB", start, start + timedelta(hours=2))
    assert _values(series) == [95.02, 120.0]


def test_a_one_record_file_days_after_an_import_leaves_the_import_and_its_zone_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A feed's latest hour beside the import, 4 days after its end: every decision of the zone raised.
    from costaware.adapters.carbon_source import imported_carbon
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    folder = tmp_path / "costaware" / "carbon"
    folder.mkdir(parents=True)
    (folder / "GB_imported.csv").write_text((FIXTURES / "GB_2026-11.csv").read_text())
    (folder / "GB_latest.csv").write_text(HEADER + "2026-11-26T10:00:00Z,130\n")
    at = T0 + timedelta(hours=3)
    with caplog.at_level("WARNING", logger="costaware.adapters.carbon_source"):
        weighed = carbon_intensity("GB", region=None, objective=Objective("carbon"), at=at)
    assert weighed is not None and weighed.price_at(at) == 123
    assert "GB_latest.csv holds one record (2026-11-26 10:00 UTC)" in caplog.text
    assert imported_carbon("GB", datetime(2026, 11, 26, 10, 30, tzinfo=UTC)) is None  # the typical year


def test_a_one_record_file_left_out_is_warned_of_once_per_process_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Each decision (imported_carbon), emissions figure and carbon_source() reads a fresh RecordedCarbon:
    # its own cache did not stop the warning, logged at every poll of every carbon-aware wait.
    import os

    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    folder = tmp_path / "costaware" / "carbon"
    folder.mkdir(parents=True)
    (folder / "GB_imported.csv").write_text((FIXTURES / "GB_2026-11.csv").read_text())
    latest = folder / "GB_latest.csv"
    latest.write_text(HEADER + "2026-11-26T10:00:00Z,130\n")
    said = "GB_latest.csv holds one record (2026-11-26 10:00 UTC)"
    with caplog.at_level("WARNING", logger="costaware.adapters.carbon_source"):
        for hour in range(5):
            at = T0 + timedelta(hours=hour)
            assert carbon_intensity("GB", region=None, objective=Objective("carbon"), at=at) is not None
        RecordedCarbon().intensity("GB", T0, T0 + timedelta(hours=1))
    assert caplog.text.count(said) == 1
    caplog.clear()
    latest.write_text(HEADER + "2026-11-26T11:00:00Z,140\n")  # written again: a new file to warn of
    stat = latest.stat()
    os.utime(latest, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    with caplog.at_level("WARNING", logger="costaware.adapters.carbon_source"):
        for hour in range(3):
            carbon_intensity("GB", region=None, objective=Objective("carbon"), at=T0 + timedelta(hours=hour))
    assert caplog.text.count("GB_latest.csv holds one record (2026-11-26 11:00 UTC)") == 1


@pytest.mark.parametrize(
    "files",
    [{"PL_b.csv": ("22:30", "22:45")}, {"PL_a.csv": ("21:45", "22:00"), "PL_b.csv": ("22:30", "22:45")}],
    ids=["the-hour-a-file-starts-inside", "two-stretches-in-the-hour"],
)
def test_profile_around_parts_no_given_file_holds_says_so_not_stop_iteration(
    tmp_path: Path, files: dict[str, tuple[str, str]]
) -> None:
    from costaware.adapters.carbon_source import profile_around

    # It looked up the file a part starts (or ends) with in the files given with a bare next(): given files
    # the parts were not read from (none, or another zone's), it raised a bare StopIteration. Its callers
    # (carbon show, the ledger's emissions) pass the files the parts came from: no file input reached it.
    for name, times in files.items():
        rows = "".join(f"2026-11-20T{at}:00Z,{100 + i}\n" for i, at in enumerate(times))
        (tmp_path / name).write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + rows)
    recorded = RecordedCarbon(tmp_path, bundled=False)
    hour = datetime(2026, 11, 20, 22, tzinfo=UTC)
    parts = recorded.recorded_parts("PL", hour, hour + timedelta(hours=1))
    assert len(parts) == len(files)
    profile_around(parts, recorded.zone_files("PL"), hour)  # the files they were read from
    with pytest.raises(ValueError, match=r"no file given holds the recorded part .* 2026-11-20 22:") as e:
        profile_around(parts, [], hour)
    assert "RecordedCarbon.zone_files" in str(e.value)
