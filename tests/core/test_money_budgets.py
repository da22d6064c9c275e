from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from costaware.core.budgets import (
    Budget,
    Period,
    Scope,
    check_cap,
    period_window,
    quoted_scope_refusal,
    valid_tags,
)
from costaware.core.errors import BudgetExceededError, ConfigurationError, InvalidBudgetError
from costaware.core.ledger import BudgetUsage
from costaware.core.money import format_usd, from_micros, parse_usd, to_micros


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("4.20", Decimal("4.20")),
        ("$1,200.50", Decimal("1200.50")),
        ("12,345,678.9", Decimal("12345678.9")),
        (" $ 50 ", Decimal("50")),
        (3, Decimal(3)),
        (0.1, Decimal("0.1")),
        (Decimal("7"), Decimal("7")),
    ],
)
def test_parse_usd_accepts(raw: object, expected: Decimal) -> None:
    assert parse_usd(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("abc", "'abc'"),
        ("nan", "finite"),
        (float("inf"), "finite"),
        ("-1", "zero or more"),
        # A decimal comma is refused: read as a thousands separator it made 25,5 into 255 and 0,125 into 125.
        ("25,5", "a comma may only group thousands"),
        ("0,125", "a comma may only group thousands"),
        ("1,2,3", "a comma may only group thousands"),
        ("1e308", "more than the ledger can store"),
        (True, "boolean"),
        (None, "NoneType"),
    ],
)
def test_parse_usd_rejects_with_the_value(raw: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_usd(raw, name="cap")


@pytest.mark.parametrize(
    ("gpu_hours", "expected"),
    [("1,000", Decimal(1000)), ("20", Decimal(20)), (0, Decimal(0)), ("-1", None), ("$5", None), (True, None),
     ("0.0000001", None)],
)  # fmt: skip
def test_a_gpu_hour_cap_reads_like_an_amount_and_speaks_hours(
    gpu_hours: object, expected: Decimal | None
) -> None:
    if expected is not None:
        assert Budget.create("project=x", "month", "5", cap_gpu_hours=gpu_hours).cap_gpu_hours == expected
        return
    with pytest.raises(InvalidBudgetError, match="GPU-hour cap of budget 'project=x/month'") as refused:
        Budget.create("project=x", "month", "5", cap_gpu_hours=gpu_hours)
    assert "USD" not in str(refused.value)


def test_a_signed_amount_keeps_its_thousands() -> None:
    assert parse_usd("-$1,200", allow_negative=True) == Decimal("-1200")
    assert parse_usd("+1,200") == Decimal("1200")


def test_micros_round_trip_and_half_even() -> None:
    assert to_micros(Decimal("1.2345675")) == 1_234_568
    assert to_micros(Decimal("1.2345665")) == 1_234_566
    assert from_micros(to_micros(Decimal("0.000001"))) == Decimal("0.000001")
    assert from_micros(None) == 0


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (Decimal("1234.5"), "$1,234.50"),
        (Decimal("0.000128"), "$0.000128"),
        (Decimal(0), "$0.00"),
        (Decimal("-2"), "-$2.00"),
    ],
)
def test_format_usd(amount: Decimal, text: str) -> None:
    assert format_usd(amount) == text


def test_scope_parse_canonical_and_matching() -> None:
    scope = Scope.parse(" team=ml , project=churn ")
    assert str(scope) == "project=churn,team=ml"
    assert scope.matches({"project": "churn", "team": "ml", "owner": "x"})
    assert not scope.matches({"project": "churn"})
    assert Scope.parse("project=churn").covers(scope)
    assert not scope.covers(Scope.parse("project=churn"))
    assert str(Scope.parse("*")) == "*" and Scope.parse("").matches({})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("project", "not key=value"),
        ("project=", "not key=value"),
        ("1x=a", "tag name '1x'"),
        ("a=1,a=2", "twice"),
        # A DAG tag's spelling: the example was 'project=churn,team=ml', not the scope meant.
        ("project:churn", "'project:churn' of 'project:churn' is not key=value: write e.g. 'project=churn'$"),
        ("project=x,team:ml", "write e.g. 'team=ml'$"),
        ("project", "write e.g. 'project=churn,team=ml'$"),
    ],
)
def test_scope_rejects(text: str, message: str) -> None:
    with pytest.raises(InvalidBudgetError, match=message):
        Scope.parse(text)


@pytest.mark.parametrize("value", [None, "None", " None "])
def test_a_tag_value_never_set_is_refused_naming_the_tag(value: object) -> None:
    """None (or a template of an unset param, which renders 'None') once became the tag project=None."""
    message = r"tag 'project' has value .*None.*, which says it was never set .*: give it a value"
    with pytest.raises(InvalidBudgetError, match=message):
        Scope.given(f"team=ml,project={value}")
    with pytest.raises(InvalidBudgetError, match=message):
        Budget.create(f"team=ml,project={value}", "month", "5")
    # Read back, a budget or hold stored so before this check still loads (and can be deleted): refused
    # there, it failed every reservation in the ledger.
    assert Scope.parse(f"team=ml,project={value}").as_dict() == {"team": "ml", "project": "None"}
    kept, dropped = valid_tags({"team": "ml", "project": value})
    assert kept == {"team": "ml"} and list(dropped) == ["project"]
    assert Scope.of({"project": "None-such"}) == Scope.parse("project=None-such")  # only the bare word


@pytest.mark.parametrize("value", ["null", " null "])
def test_a_tag_value_a_tojson_template_of_an_unset_param_renders_is_refused(value: str) -> None:
    # "{{ params.project | tojson }}" of an unset param renders null: it became the tag project=null, where
    # the rest of costaware reads it as not given.
    message = r"tag 'project' has value .*null.*, which says it was never set .*: give it a value"
    with pytest.raises(InvalidBudgetError, match=message):
        Scope.given(f"team=ml,project={value}")
    with pytest.raises(InvalidBudgetError, match=message):
        Budget.create(f"team=ml,project={value}", "month", "5")
    kept, dropped = valid_tags({"team": "ml", "project": value})
    assert kept == {"team": "ml"} and list(dropped) == ["project"]
    assert Scope.of({"project": "nullable"}) == Scope.parse("project=nullable")  # only the bare word


@pytest.mark.parametrize(
    ("cap", "period", "tz", "message"),
    [
        ("-5", "month", "UTC", "zero or more"),
        ("nan", "month", "UTC", "finite"),
        ("5", "weekly", "UTC", "weekly"),
        ("5", "month", "Mars/Olympus", "Mars/Olympus"),
    ],
)
def test_budget_create_rejects(cap: str, period: str, tz: str, message: str) -> None:
    with pytest.raises(InvalidBudgetError, match=message):
        Budget.create("project=churn", period, cap, timezone=tz)


def test_month_window_in_a_zone_with_dst() -> None:
    # 1 March 2026 00:00 in New York is 05:00 UTC (EST); 1 April is 04:00 UTC (EDT).
    at = datetime(2026, 3, 15, 12, tzinfo=timezone.utc)
    window = period_window(Period.MONTH, at, "America/New_York")
    assert window.key == "2026-03"
    assert window.start == datetime(2026, 3, 1, 5, tzinfo=timezone.utc)
    assert window.end == datetime(2026, 4, 1, 4, tzinfo=timezone.utc)


def test_day_window_on_a_23_hour_day() -> None:
    at = datetime(2026, 3, 8, 12, tzinfo=ZoneInfo("America/New_York"))
    window = period_window(Period.DAY, at, "America/New_York")
    assert window.end is not None and window.start is not None
    assert (window.end - window.start).total_seconds() == 23 * 3600


def test_run_and_total_windows() -> None:
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert period_window(Period.TOTAL, at).key == "total"
    assert period_window(Period.RUN, at, run_id="r1").key == "run:r1"
    with pytest.raises(InvalidBudgetError, match="run id"):
        period_window(Period.RUN, at)
    with pytest.raises(InvalidBudgetError, match="no time zone"):
        period_window(Period.DAY, datetime(2026, 1, 1))


def standing(spent: str, reserved: str, *, gpu_cap: str | None = None, gpu_used: str = "0") -> BudgetUsage:
    return BudgetUsage(
        label="project=churn/month",
        period_key="2026-11",
        cap_usd=Decimal(10),
        spent_usd=Decimal(spent),
        reserved_usd=Decimal(reserved),
        cap_gpu_hours=None if gpu_cap is None else Decimal(gpu_cap),
        spent_gpu_hours=Decimal(gpu_used),
        reserved_gpu_hours=Decimal(0),
    )


@pytest.mark.parametrize(
    ("usage", "usd", "gpu"),
    [
        (standing("0", "0"), "10", "0"),  # the whole cap
        (standing("4", "5.5"), "0.5", "0"),  # up to the cap exactly
        (standing("0", "0", gpu_cap="8", gpu_used="6"), "1", "2"),
        (standing("0", "0"), "0", "0"),
    ],
)
def test_check_cap_lets_what_fits_through(usage: BudgetUsage, usd: str, gpu: str) -> None:
    check_cap(usage, Decimal(usd), Decimal(gpu), "task 'train'")


def test_a_gpu_hour_refusal_gives_the_committed_dollars_as_a_usd_refusal_does() -> None:
    # Its spent_usd was the spend alone ($4 where $9.50 was committed): an approval request built from the
    # refusal showed the budget with $5.50 less committed than a USD refusal of the same budget did.
    with pytest.raises(BudgetExceededError) as info:
        check_cap(standing("4", "5.5", gpu_cap="8", gpu_used="7"), Decimal("0.1"), Decimal(2), "task 'train'")
    assert (info.value.spent_usd, info.value.cap_usd) == ("9.5", "10")


def test_check_cap_refuses_a_usd_overrun_naming_the_budget_and_what_to_do() -> None:
    with pytest.raises(BudgetExceededError) as info:
        check_cap(standing("4", "5.5"), Decimal("0.51"), Decimal(0), "task 'train'")
    error = info.value
    assert str(error) == (
        "budget 'project=churn/month (2026-11)' has $0.50 left (cap $10.00, spent $4.00, reserved $5.50); "
        "task 'train' needs an estimated $0.51: "
        "raise the cap with `costaware budget set` or lower the estimate; the $5.50 reserved is held by "
        "open holds: `costaware budget holds` lists them, and `costaware budget release --holder <holder>` "
        "gives back one whose run was killed or deleted (nothing else settles it before it expires)"
    )
    assert (error.scope, error.spent_usd, error.cap_usd, error.needed_usd) == (
        "project=churn/month (2026-11)",
        "9.5",
        "10",
        "0.51",
    )
    assert error.summary.splitlines()[0] == (
        "Budget refused task 'train': it needs an estimated $0.51, the budget has $0.50 left."
    )


def test_a_budget_over_its_cap_says_by_how_much_and_a_zero_estimate_is_not_told_to_go_lower() -> None:
    # "has $0.00 left ... needs an estimated $0.00: ... or lower the estimate": neither could be done.
    with pytest.raises(BudgetExceededError) as info:
        check_cap(standing("10.25", "0"), Decimal(0), Decimal(0), "task 'zero'")
    assert "has nothing left (it is $0.25 over its cap) (cap $10.00" in str(info.value)
    assert str(info.value).endswith("needs an estimated $0.00: raise the cap with `costaware budget set`")


def test_a_refusal_with_nothing_reserved_names_no_holds() -> None:
    with pytest.raises(BudgetExceededError) as info:
        check_cap(standing("9.5", "0"), Decimal("0.51"), Decimal(0), "task 'train'")
    assert str(info.value).endswith(": raise the cap with `costaware budget set` or lower the estimate")


@pytest.mark.parametrize(("spent", "reserved"), [("10.25", "0"), ("10", "0"), ("4", "6")])
def test_a_budget_with_nothing_left_is_not_told_to_lower_the_estimate(spent: str, reserved: str) -> None:
    # Left $0 (or less): no estimate above $0 fits, so "or lower the estimate" sent people the wrong way.
    with pytest.raises(BudgetExceededError) as info:
        check_cap(standing(spent, reserved), Decimal("0.05"), Decimal(0), "task 'train'")
    assert "lower the estimate" not in str(info.value)
    assert "needs an estimated $0.05: raise the cap with `costaware budget set`" in str(info.value)
    assert "lower the estimate" not in info.value.summary
    # A killed run's hold (Ctrl-C of `airflow dags test`) is what "reserved" holds: say how to free it.
    assert ("the $6.00 reserved is held by open holds" in str(info.value)) == (reserved == "6")
    assert ("costaware budget release --holder" in info.value.summary) == (reserved == "6")


def test_an_estimate_above_the_whole_cap_is_not_told_that_releasing_holds_helps() -> None:
    with pytest.raises(BudgetExceededError) as info:
        check_cap(standing("0", "2"), Decimal("11"), Decimal(0), "task 'train'")
    assert "more than the whole cap" in str(info.value)
    assert "budget holds" not in str(info.value)


def test_check_cap_refuses_a_gpu_hour_overrun() -> None:
    with pytest.raises(
        BudgetExceededError, match=r"has 2 GPU-hours left of 8; task 'x' needs 3 GPU-hours: raise the GPU"
    ):
        check_cap(standing("0", "0", gpu_cap="8", gpu_used="6"), Decimal(1), Decimal(3), "task 'x'")


@pytest.mark.parametrize(
    ("gpu_used", "over"),
    [("9", "it is 1 GPU-hours over its cap"), ("8.5", "it is 0.5 GPU-hours over its cap")],
)
def test_a_gpu_hour_cap_passed_already_says_nothing_is_left_and_by_how_much(gpu_used: str, over: str) -> None:
    # It said "has -1 GPU-hours left of 8", where a USD cap passed says "has nothing left (it is $X over
    # its cap)".
    with pytest.raises(BudgetExceededError) as info:
        check_cap(standing("0", "0", gpu_cap="8", gpu_used=gpu_used), Decimal(1), Decimal(0), "task 't'")
    assert (
        f"budget 'project=churn/month (2026-11)' has no GPU-hours left of 8 ({over}); task 't' needs 0 "
        "GPU-hours: raise the GPU-hour cap"
    ) == str(info.value)


@pytest.mark.parametrize(
    ("scope", "said"),
    [
        ("project=churn", None),
        ("*", None),
        (
            'project="churn"',
            '\'project="churn"\': "churn" is in quotes, which would be part of the tag and match no task\'s '
            "tags: drop them (as project=churn)",
        ),
        ("'project'=churn, team=\u2018ml\u2019", "'project', \u2018ml\u2019 are in quotes"),
        # Without the quotes no scope: 'drop them (as project=)' was refused in turn.
        ('project=""', "and without them tag 'project' would have no value: write the tag's name and the"),
        ('""=churn', "and without them a tag would have no name: write"),
        ('project="a",project=b', "and without them: scope 'project=a,project=b' names tag 'project' twice"),
    ],
)
def test_a_scope_in_quotes_is_refused_in_the_callers_own_terms(scope: str, said: str | None) -> None:
    refusal = quoted_scope_refusal(scope, lambda bare: f"as {bare}")
    assert refusal is None if said is None else refusal is not None and said in refusal
    if refusal is not None and "without them" in refusal:
        assert "as " not in refusal  # no scope to suggest
