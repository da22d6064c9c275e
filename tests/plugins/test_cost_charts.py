"""Charts and tables that stay readable: many groups, long run ids, large amounts (issue 23: D9, D10, D13)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from html import unescape

import pytest
from fastapi.testclient import TestClient

from costaware import Ledger
from costaware.adapters.ledger.entries import insert_entry
from costaware.adapters.ledger.reports import fold_daily
from costaware.cli import main
from costaware.core.ledger import Kind, LedgerEntry
from costaware.plugins.ui import charts
from costaware.plugins.ui.app import cost_app
from costaware.plugins.ui.deps import readable_dags, require_login

RUN_IDS = (
    "scheduled__2013-02-01T00:00:00+00:00",
    "scheduled__2013-02-02T00:00:00+00:00",
    "manual__2026-11-23T18:00:00.123456+00:00",
    "manual__2026-11-23T18:00:00.654321+00:00",
    "asset_triggered__2026-11-23T18:00:00.123456+00:00",
    "asset_triggered__2026-11-23T18:00:00.123457+00:00",
)


def labels_and_bars(svg: str) -> list[tuple[str, float, float]]:
    """Each bar's label text, where the label column ends (bar x) and the bar's width."""
    found = re.findall(
        r'<text x="0" y="[\d.]+" class="label">([^<]*)</text><rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"',
        svg,
    )
    return [(unescape(text), float(x), float(w)) for text, x, w in found]


# -- D10: labels that tell runs apart, amounts that are never clipped ------------------------------


def test_run_labels_are_whole_or_shortened_where_they_do_not_differ() -> None:
    svg = charts.horizontal_bars([(run, Decimal(i + 1)) for i, run in enumerate(RUN_IDS)], "Runs")
    found = labels_and_bars(svg)
    labels = [text for text, _, _ in found]
    assert len(set(labels)) == len(RUN_IDS)  # no two runs look alike
    for run in RUN_IDS[:4]:  # up to 44 characters: whole
        assert run in labels
    long_ones = [label for label in labels if label.startswith("asset_")]
    assert long_ones and all(len(label) <= charts.MAX_LABEL_CHARS and "…" in label for label in long_ones)
    assert sorted(label[-7:-1] for label in long_ones) == ["123456", "123457"]  # kept where they differ
    for text, bar_x, _ in found:  # the label column is as wide as its longest label: no bar covers one
        assert charts.text_px(text) <= bar_x
    for run in RUN_IDS:  # the whole id is the bar's tooltip
        assert f"<title>{run}: " in svg


@pytest.mark.parametrize(
    ("names", "max_chars"),
    [
        (["a" * 60 + "1", "a" * 60 + "2"], 44),  # differ only at the end
        (["p" * 20 + "x" + "s" * 40, "p" * 20 + "y" + "s" * 40], 30),  # differ in the middle
        (["same-start-" + "q" * 50, "other-" + "q" * 50], 20),  # differ at the start
        (["z" * 30 + "1" + "w" * 5 + "1", "z" * 30 + "1" + "w" * 5 + "2", "z" * 30 + "2" + "w" * 6], 12),
    ],
)
def test_short_labels_stay_apart(names: list[str], max_chars: int) -> None:
    labels = charts.short_labels(names, max_chars)
    assert len(set(labels)) == len(names)
    assert all(len(label) <= max_chars or label == name for label, name in zip(labels, names, strict=True))


def test_the_y_axis_amount_is_never_clipped() -> None:
    for top in (Decimal("0.001655"), Decimal("9.99"), Decimal("1234567.891234"), Decimal("987654321.5")):
        svg = charts.stacked_bars([(date(2026, 11, 1), "dag", top)], "Spend")
        x, label = re.search(
            r'<text x="([\d.]+)" y="[\d.]+" class="tick" text-anchor="end">([^<]+)</text>', svg
        ).groups()  # type: ignore[union-attr]
        assert label == charts.money(top)
        assert float(x) - charts.text_px(label) >= 0, (
            label,
            x,
        )  # drawn right-aligned at x: starts at 0 or more
        burn = charts.burn_down_line([(date(2026, 11, 1), top)], top * 2, "Budget")
        x, label = re.search(
            r'<text x="([\d.]+)" y="[\d.]+" class="tick" text-anchor="end">([^<]+)</text>', burn
        ).groups()  # type: ignore[union-attr]
        assert float(x) - charts.text_px(label) >= 0, (label, x)


def test_bar_amounts_stay_inside_the_chart() -> None:
    svg = charts.horizontal_bars(
        [("big", Decimal("123456789.123456")), ("small", Decimal("0.000001"))], "By team"
    )
    for x, text in re.findall(r'<text x="([\d.]+)" y="[\d.]+" class="value">([^<]+)</text>', svg):
        assert float(x) + charts.text_px(text) <= charts.WIDTH, text


# -- D9: distinct colours for up to 20 groups, then "other" ----------------------------------------


def daily(groups: int) -> list[tuple[date, str, Decimal]]:
    return [(date(2026, 11, 1 + g % 3), f"dag_{g:02d}", Decimal(100 - g)) for g in range(groups)]


def fills(svg: str) -> dict[str, str]:
    """Legend entry -> its colour."""
    return dict(
        (name, colour)
        for colour, name in re.findall(r'<i style="background:(#[0-9a-f]{6})"></i>([^<]+)</span>', svg)
    )


def test_twenty_groups_get_twenty_distinct_colours() -> None:
    legend = fills(charts.stacked_bars(daily(20), "Spend"))
    assert (
        len(legend) == 20 and len(set(legend.values())) == 20 and charts.OTHER_COLOUR not in legend.values()
    )


def test_past_twenty_groups_the_rest_is_one_grey_other() -> None:
    points, folded = fold_daily(daily(25))
    assert folded == 5
    legend = fills(charts.stacked_bars(points, "Spend", other="other (5 groups)"))
    assert len(legend) == 21 and list(legend)[-1] == "other (5 groups)"
    assert legend["other (5 groups)"] == charts.OTHER_COLOUR and len(set(legend.values())) == 21
    assert "dag_00" in legend and "dag_19" in legend and "dag_20" not in legend  # the costliest kept
    total = sum(usd for _, _, usd in points)
    assert total == sum(usd for _, _, usd in daily(25))  # nothing lost in the fold


@pytest.fixture
def many_runs(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """1,200 runs of one DAG, run n costing n micro-dollars more than run n-1."""
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger = Ledger.from_url(ledger_url)
    now = datetime.now(timezone.utc)
    with ledger.transaction() as conn:  # one transaction: 1,200 commits would take seconds
        for n in range(1200):
            insert_entry(
                conn,
                LedgerEntry(
                    dag_id="nightly",
                    run_id=f"scheduled__{(date(2020, 1, 1) + timedelta(days=n)).isoformat()}T00:00:00+00:00",
                    task_id="train",
                    kind=Kind.COMPUTE,
                    usd=Decimal("0.01") + Decimal(n) / 1_000_000,
                    incurred_at=now - timedelta(hours=1 + n % 48),
                ),
            )
    cost_app.dependency_overrides[require_login] = lambda: None
    cost_app.dependency_overrides[readable_dags] = lambda: None
    yield TestClient(cost_app)
    cost_app.dependency_overrides.clear()
    ledger.dispose()


def test_thousands_of_groups_show_the_top_twenty_and_a_total_for_the_rest(many_runs: TestClient) -> None:
    html = many_runs.get("/", params={"group_by": "run"}).text
    table = html[html.index("<h2>Spend by run</h2>") : html.index("<h2>Runs</h2>")]
    assert table.count("<tr>") + table.count('<tr class="rest">') == 1 + 20 + 1  # header, top 20, the rest
    assert "other (1,180 groups)" in table and "The 20 costliest groups" in table
    spend = many_runs.get("/api/spend", params={"group_by": "run"}).json()
    rest = sorted(Decimal(r["usd"]) for r in spend["rows"])[:1180]
    assert f"<td>{charts.money(sum(rest, Decimal(0)))}</td>" in table  # the rest's total, to the micro-dollar
    assert len(spend["rows"]) == 1200 and spend["other"] is None  # the JSON keeps every group unless asked
    legend = fills(html[html.index("<h2>Spend over time</h2>") : html.index("<h2>Budgets</h2>")])
    assert len(legend) == 21 and "other (1,180 groups)" in legend
    runs = html[html.index("<h2>Runs</h2>") : html.index("<h2>Most expensive")]
    assert "+ 1,190 more runs: $" in runs

    limited = many_runs.get("/api/spend", params={"group_by": "run", "limit": 20}).json()
    assert len(limited["rows"]) == 20 and limited["other"]["groups"] == 1180
    assert limited["other"]["group"] == "other (1,180 groups)"
    assert Decimal(limited["other"]["usd"]) == sum(rest, Decimal(0))
    days = many_runs.get("/api/daily", params={"group_by": "run", "limit": 20}).json()
    assert days["other"] == {"group": "other (1,180 groups)", "groups": 1180}
    assert len({p["group"] for p in days["points"]}) == 21


# -- D13: one money format on the page and in the CLI's tables ------------------------------------


def test_the_page_and_the_cli_write_dollars_alike(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger = Ledger.from_url(ledger_url)
    for dag_id, usd in (("cheap", "0.001655"), ("half", "0.5"), ("big", "1234.5")):
        ledger.record(
            LedgerEntry(dag_id=dag_id, run_id=dag_id, task_id="t", kind=Kind.COMPUTE, usd=Decimal(usd))
        )
    assert main(["--ledger-url", ledger_url, "report", "--group-by", "dag"]) == 0
    cli = capsys.readouterr().out
    cost_app.dependency_overrides[require_login] = lambda: None
    cost_app.dependency_overrides[readable_dags] = lambda: None
    try:
        html = TestClient(cost_app).get("/", params={"group_by": "dag"}).text
    finally:
        cost_app.dependency_overrides.clear()
    table = html[html.index("<h2>Spend by dag</h2>") : html.index("<h2>Runs</h2>")]
    charts_html = html[html.index("<h2>Spend by tag</h2>") :]
    for shown in ("$0.001655", "$0.50", "$1,234.50", "$1,235.001655"):
        assert shown in cli, shown
    for shown in ("$0.001655", "$0.50", "$1,234.50"):
        assert f"<td>{shown}</td>" in table and f">{shown}</text>" in charts_html, shown
    assert "$1,235.001655" in html  # the Spent card: the CLI's TOTAL
    assert "$0.500000" not in cli + html and "$0.5<" not in html


# -- negative entries (credits, refunds) -------------------------------------------------------------


def bars(svg: str) -> list[tuple[float, float]]:
    """Each stacked bar segment's y and height."""
    found = re.findall(r'<rect x="[\d.-]+" y="([\d.-]+)" width="[\d.-]+" height="([\d.-]+)"', svg)
    return [(float(y), float(h)) for y, h in found]


@pytest.mark.parametrize(
    ("spent", "credit"),
    [
        ("10", "-8"),  # the day's net $2 was the scale: the $10 bar was five plots tall
        ("3", "-8"),  # a negative net: a negative height
    ],
)
def test_credits_are_left_out_of_the_bars_and_named_below(spent: str, credit: str) -> None:
    day = date(2026, 11, 23)
    svg = charts.stacked_bars([(day, "train", Decimal(spent)), (day, "refunds", Decimal(credit))], "Spend")
    plot = charts.HEIGHT - 2 * charts.PAD
    drawn = bars(svg)
    assert len(drawn) == 1
    for y, h in drawn:
        assert 0 <= h <= plot + 0.05 and charts.PAD - 0.05 <= y <= charts.HEIGHT - charts.PAD
    assert max(h for _, h in drawn) == pytest.approx(plot, abs=0.05)  # the tallest spend fills the plot
    note = f"{charts.money(Decimal(credit))} in all: {charts.money(Decimal(credit))} (refunds on 2026-11-23)"
    assert note in svg


def test_many_credits_are_counted_past_the_first_five() -> None:
    points = [(date(2026, 11, 1 + i), f"credit_{i}", Decimal(-1 - i)) for i in range(8)]
    svg = charts.stacked_bars(points, "Spend")
    assert bars(svg) == [] and "-$36.00 in all" in svg and "and 3 more." in svg
    assert svg.count("(credit_") == 5


@pytest.mark.parametrize(
    ("spent", "forecast", "cap"),
    [("11.83", "278.72", "500"), ("11.59", "255.92", "25"), ("5", "99", "100"), ("80", "20", "100")],
    ids=["rising-under-cap", "rising-past-cap", "rising-to-cap", "falling"],
)
def test_the_forecast_label_is_not_struck_through_by_its_line(spent: str, forecast: str, cap: str) -> None:
    # Under the line's end, a rising forecast's label was crossed by the dotted line coming up to it.
    central = Decimal(forecast)
    svg = charts.burn_down_line(
        [(date(2026, 12, 1), Decimal(spent))], Decimal(cap), "Budget", (central, central / 2, central * 2)
    )
    line = re.search(r'<line x1="([\d.]+)" x2="([\d.]+)" y1="([\d.]+)" y2="([\d.]+)" class="forecast"/>', svg)
    label = re.search(r'<text x="([\d.]+)" y="([\d.]+)" [^>]*>(forecast [^<]*)</text>', svg)
    cap_label = re.search(r'<text x="[\d.]+" y="([\d.]+)"[^>]*>cap ', svg)
    assert line and label and cap_label
    x1, x2, y1, y2 = (float(v) for v in line.groups())
    right, baseline = float(label.group(1)), float(label.group(2))
    left, top, bottom = right - charts.text_px(label.group(3)), baseline - 11, baseline + 3
    for step in range(101):  # the line, sampled across the label's width
        x = left + (right - left) * step / 100
        if x1 <= x <= x2:
            y = y1 + (y2 - y1) * (x - x1) / (x2 - x1)
            assert not top <= y <= bottom, (label.group(3), x, y, (top, bottom))
    if central > Decimal(spent):  # moved above the line's end: clear of the cap's label too
        assert abs(float(cap_label.group(1)) - baseline) >= charts.LINE_PX
