"""The period-end forecast and alert thresholds: pure arithmetic, checked by hand."""

from __future__ import annotations

from decimal import Decimal

import pytest

from costaware.core.budget_forecast import (
    DEFAULT_THRESHOLDS,
    DagOutlook,
    crossed_thresholds,
    every_threshold_refused,
    forecast_spend,
    outlooks_from,
    parse_thresholds,
)
from costaware.core.errors import ConfigurationError

D = Decimal


def test_forecast_is_committed_plus_runs_left_times_cost_per_run() -> None:
    # retrain: 3 runs left, recent runs 2, 4, 6 -> mean 4, min 2, max 6; tune: 1 run left at 10.
    f = forecast_spend(
        D("20"),
        [DagOutlook("retrain", 3, (D(2), D(4), D(6))), DagOutlook("tune", 1, (D(10),))],
    )
    assert (f.forecast_usd, f.low_usd, f.high_usd) == (D("42"), D("36"), D("48"))
    assert f.runs_left == 4 and f.unpriced_dags == ()
    assert f.crosses(D("41")) and not f.crosses(D("42"))


@pytest.mark.parametrize(
    ("outlooks", "expected_unpriced"),
    [
        ([], ()),
        ([DagOutlook("manual_only", 0, (D(5),))], ()),
        ([DagOutlook("new_dag", 4, ())], ("new_dag",)),
    ],
)
def test_nothing_to_add_leaves_the_committed_spend(
    outlooks: list[DagOutlook], expected_unpriced: tuple[str, ...]
) -> None:
    f = forecast_spend(D("7.5"), outlooks)
    assert (f.forecast_usd, f.low_usd, f.high_usd) == (D("7.5"), D("7.5"), D("7.5"))
    assert f.unpriced_dags == expected_unpriced


def test_outlooks_join_costs_and_schedules() -> None:
    joined = outlooks_from({"a": [D(1)], "b": [D(2)]}, {"b": 3, "c": 1})
    assert [(o.dag_id, o.runs_left, o.recent_run_usd) for o in joined] == [
        ("a", 0, (D(1),)),
        ("b", 3, (D(2),)),
        ("c", 1, ()),
    ]


def test_a_run_credited_below_zero_is_forecast_at_nothing() -> None:
    # A refund recorded against a run made `budget show` fail: "recent run costs [-100]: each must be >= 0".
    (outlook,) = outlooks_from({"a": [D(-100), D(4)]}, {"a": 2})
    assert outlook.recent_run_usd == (D(0), D(4))


def test_a_period_credited_below_zero_is_forecast_from_its_credit() -> None:
    # A refund above the period's spend made the forecast refuse "committed spend -40 must be ... >= 0".
    f = forecast_spend(D("-40"), [DagOutlook("a", 2, (D(3), D(5)))])
    assert (f.committed_usd, f.forecast_usd, f.low_usd, f.high_usd) == (D(-40), D(-32), D(-34), D(-30))


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: forecast_spend(D("NaN"), []), "committed spend NaN"),
        (lambda: DagOutlook("x", -2, ()), "runs_left=-2"),
        (lambda: DagOutlook("x", 1, (D("-3"),)), "recent run costs"),
    ],
)
def test_bad_inputs_name_the_value(build: object, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("50%,80%,100%,forecast", DEFAULT_THRESHOLDS),
        ([100, "50", "forecast", "50%"], ("50%", "100%", "forecast")),
        (" 90% ", ("90%",)),
        ("1%", ("1%",)),
        # A percentage with a fraction was told it is no percentage.
        ("80.5%,50,80.50%,100.0%", ("50%", "80.5%", "100%")),
        ("1.25%", ("1.25%",)),
    ],
)
def test_thresholds_parse(spec: object, expected: tuple[str, ...]) -> None:
    assert parse_thresholds(spec) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "spec", ["", "0%", "eighty", "50%,soon", "1001", "1000.5%", "1e2%", "nan%", "-5%", "80.%"]
)
def test_bad_thresholds_are_refused(spec: str) -> None:
    with pytest.raises(ConfigurationError, match="threshold"):
        parse_thresholds(spec)


def test_every_threshold_refused_names_a_repeated_item_once() -> None:
    # '--thresholds 5,5' said the same refusal twice, and '5,50,50%' listed its 50% twice as not used.
    with pytest.raises(ConfigurationError) as five:
        parse_thresholds("5")
    with pytest.raises(ConfigurationError) as seven:
        parse_thresholds("7")
    assert every_threshold_refused("5,5", refused_whole="the list") == str(five.value)
    assert every_threshold_refused("5, 7,5 ,7", refused_whole="the list") == f"{five.value}; {seven.value}"
    assert every_threshold_refused("5,50,50%,forecast,5,forecast", refused_whole="the setting") == (
        f"{five.value} (the setting is refused whole: its 50%,forecast are not used either)"
    )
    assert every_threshold_refused("50,5,50%", refused_whole="the list") == (
        f"{five.value} (the list is refused whole: its 50% is not used either)"
    )


def test_crossed_thresholds() -> None:
    cap = D(100)
    assert crossed_thresholds(DEFAULT_THRESHOLDS, spent_usd=D(49), cap_usd=cap, forecast_usd=D(90)) == []
    assert crossed_thresholds(DEFAULT_THRESHOLDS, spent_usd=D(50), cap_usd=cap, forecast_usd=D(101)) == [
        "50%",
        "forecast",
    ]
    assert crossed_thresholds(DEFAULT_THRESHOLDS, spent_usd=D(100), cap_usd=cap, forecast_usd=None) == [
        "50%",
        "80%",
        "100%",
    ]


def test_a_bare_1_is_refused_as_ambiguous() -> None:
    # Meant as "at the cap" (1.0), it alerted at 1 % of it; 0.8 is refused, so 1 looked right.
    with pytest.raises(ConfigurationError) as refused:
        parse_thresholds("1,forecast")
    assert str(refused.value) == (
        "alert threshold '1' is ambiguous: write '1%' for 1 percent of the cap, or '100%' for the cap"
    )
    assert parse_thresholds([10]) == ("10%",)  # from 10 on, a bare number is a percentage


@pytest.mark.parametrize(
    ("spec", "write"),
    [
        ("0.8", "'80%'"),
        ("80%,0.95", "'95%'"),
        ("1.0", "'100%'"),
        (".5", "'50%'"),
        ("0.855", "'85.5%'"),
        # '85.555%' was suggested, refused in turn for its 3 decimal places.
        ("0.85555", "'85.56%' (rounded to 2 decimals)"),
    ],
)
def test_a_fraction_of_the_cap_is_refused_with_the_percentage_to_write(spec: str, write: str) -> None:
    # 0.8 (80 % as a fraction) said only "neither a percentage of the cap (1..1000) nor 'forecast'".
    fraction = spec.split(",")[-1]
    with pytest.raises(ConfigurationError) as refused:
        parse_thresholds(spec)
    assert str(refused.value) == (
        f"alert threshold {fraction!r} reads as a fraction of the cap, but thresholds are percentages: "
        f"write {write}"
    )


@pytest.mark.parametrize(("spec", "meant"), [("0.8%", "80"), ("0.805%", "80.5"), ("0.05%", "5")])
def test_a_fraction_with_a_percent_sign_is_refused_saying_what_it_would_mean(spec: str, meant: str) -> None:
    # '0.8%' was "neither a percentage of the cap": it is one, under 1 %, and most likely 80 % mistyped.
    with pytest.raises(ConfigurationError) as refused:
        parse_thresholds(f"50%,{spec}")
    assert str(refused.value) == (
        f"alert threshold {spec!r} is {spec[:-1]} % of the cap, under the least of 1%: "
        f"if you meant {meant} % of the cap, write '{meant}%'"
    )


def test_a_threshold_with_a_fraction_is_crossed_at_its_amount() -> None:
    (threshold,) = parse_thresholds("80.5%")
    crossed = crossed_thresholds((threshold,), spent_usd=D("80.49"), cap_usd=D(100), forecast_usd=None)
    assert crossed == []
    assert crossed_thresholds((threshold,), spent_usd=D("80.5"), cap_usd=D(100), forecast_usd=None) == [
        "80.5%"
    ]


def test_a_percent_written_as_airflow_cfg_writes_it_is_refused_with_the_one_to_write() -> None:
    # AIRFLOW__COSTAWARE__ALERT_THRESHOLDS=50%%,... copied from airflow.cfg read "neither a percentage".
    with pytest.raises(
        ConfigurationError, match=r"'50%%' has '%%', which only airflow.cfg needs .* write '50%'"
    ):
        parse_thresholds("50%%,80%,forecast")


@pytest.mark.parametrize(
    ("spec", "decimals"),
    [
        ("10.00000000000001%", 14),
        ("80.125", 3),
        ("99.999%", 3),
        ("80.1250%", 3),  # trailing zeros are no decimals
        # Past Decimal's 28 digits: normalize() rounded it to '50%', which was accepted.
        ("50.000000000000000000000000000001%", 30),
    ],
)
def test_a_threshold_with_more_than_two_decimals_is_refused_naming_it(spec: str, decimals: int) -> None:
    # Each alert sent stores its threshold in 16 characters: PostgreSQL refused '10.00000000000001%' at
    # every check, and every alert of its budget was lost.
    with pytest.raises(ConfigurationError) as refused:
        parse_thresholds(f"50%,{spec}")
    assert str(refused.value) == (
        f"alert threshold {spec!r} has {decimals} decimal places: at most 2 (e.g. '80.25%'); round it"
    )


@pytest.mark.parametrize(
    ("spec", "percent", "times"),
    [
        ("1.2", "1.2", "120"),
        ("9.99", "9.99", "999"),
        ("2.0", "2", "200"),
        # As 1 is: 2 was read as 2 % where someone writing fractions of the cap meant 200 %.
        ("2", "2", "200"),
        ("9", "9", "900"),
    ],
)
def test_a_bare_number_under_10_is_refused_as_ambiguous(spec: str, percent: str, times: str) -> None:
    # Read silently as 1.2 %, where someone used to fractions (0.8 is refused) meant 120 % of the cap.
    with pytest.raises(ConfigurationError) as refused:
        parse_thresholds(f"50%,{spec}")
    assert str(refused.value) == (
        f"alert threshold {spec!r} is ambiguous: write '{percent}%' for {percent} percent of the cap, or "
        f"'{times}%' for {percent} times the cap"
    )
    assert parse_thresholds(f"{spec}%") == (f"{percent}%",)  # with its '%', it is a percentage
    assert parse_thresholds("10.5") == ("10.5%",)  # as a fraction, past the greatest threshold (1000%)


def test_a_suggested_threshold_is_rounded_to_what_is_accepted_and_said_so() -> None:
    # '1.2345%' and '12.345%' were suggested, each refused in turn for its decimal places.
    with pytest.raises(ConfigurationError) as refused:
        parse_thresholds("1.2345")
    assert str(refused.value) == (
        "alert threshold '1.2345' is ambiguous: write '1.23%' (rounded to 2 decimals) for 1.2345 percent of "
        "the cap, or '123.45%' for 1.2345 times the cap"
    )
    with pytest.raises(ConfigurationError) as refused:
        parse_thresholds("0.12345%")
    assert str(refused.value) == (
        "alert threshold '0.12345%' is 0.12345 % of the cap, under the least of 1%: if you meant 12.345 % of "
        "the cap, write '12.35%' (rounded to 2 decimals)"
    )
    assert parse_thresholds("1.23%,12.35%") == ("1.23%", "12.35%")  # what is suggested is accepted
