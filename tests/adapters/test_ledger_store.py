from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from services import fresh_postgres_database
from sqlalchemy import func, select

from costaware import Ledger
from costaware.adapters.ledger import schema
from costaware.adapters.ledger.governance import alert_rules, set_alert_rule
from costaware.core.errors import (
    BudgetExceededError,
    BudgetNotFoundError,
    ConfigurationError,
    InvalidBudgetError,
    LedgerUnavailableError,
    ReservationNotFoundError,
)
from costaware.core.ledger import Kind, LedgerEntry, Reservation


def entry(usd: str, **overrides: object) -> LedgerEntry:
    values: dict[str, object] = {
        "dag_id": "d",
        "run_id": "r1",
        "task_id": "train",
        "kind": Kind.COMPUTE,
        "usd": Decimal(usd),
        "quantity": Decimal("1"),
        "tags": {"project": "churn", "team": "ml"},
    }
    values.update(overrides)
    return LedgerEntry(**values)  # type: ignore[arg-type]


def count(ledger: Ledger, table: object) -> int:
    with ledger.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]


def test_budget_set_replaces_and_lists(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "100")
    any_ledger.set_budget("project=churn", "month", "150", cap_gpu_hours="10")
    (budget,) = any_ledger.budgets()
    assert (str(budget.scope), budget.period.value, budget.cap_usd, budget.cap_gpu_hours) == (
        "project=churn",
        "month",
        Decimal("150"),
        Decimal("10"),
    )


@pytest.mark.parametrize(("cap", "message"), [("-1", "zero or more"), ("nan", "finite"), ("x", "'x'")])
def test_bad_budget_writes_nothing(any_ledger: Ledger, cap: str, message: str) -> None:
    with pytest.raises(InvalidBudgetError, match=message):
        any_ledger.set_budget("project=churn", "month", cap)
    assert count(any_ledger, schema.budgets) == 0


def test_reserve_settle_release_and_usage(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "10")
    first = any_ledger.reserve("project=churn,team=ml", "4", purpose="task 'train'")
    second = any_ledger.reserve("project=churn", "5")
    (usage,) = any_ledger.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd, usage.left_usd) == (0, Decimal(9), Decimal(1))
    with pytest.raises(
        BudgetExceededError, match=r"has \$1.00 left .* task 'x' needs an estimated \$2.00"
    ) as info:
        any_ledger.reserve("project=churn", "2", purpose="task 'x'")
    assert info.value.cap_usd == "10.000000"
    any_ledger.settle(first.id, "3.5", entry=entry("3.5"))
    any_ledger.release(second.id)
    (usage,) = any_ledger.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd) == (Decimal("3.5"), 0)
    assert any_ledger.settle(first.id, "99").settled_usd == Decimal("3.5")  # settling twice changes nothing
    assert count(any_ledger, schema.entries) == 1
    with pytest.raises(ReservationNotFoundError, match="nope"):
        any_ledger.release("nope")


def test_an_open_hold_counts_less_what_it_has_paid_for_already(any_ledger: Ledger) -> None:
    # A training's attempts are billed while its hold stays open: counted as spent and as held, $50 of a
    # $60 hold left a $100 budget at -$10 and refused another task's $5.
    any_ledger.set_budget("project=churn", "month", "100", cap_gpu_hours="10")
    hold = any_ledger.reserve("project=churn", "60", gpu_hours="4", holder="d/r1/train/-1")
    any_ledger.record(entry("50", reservation_id=hold.id, gpu_hours=Decimal("3")))
    any_ledger.record(entry("7", reservation_id=hold.id, estimated=True))  # an estimate pays for nothing
    any_ledger.record(entry("2"))  # another task's spend, not paid from the hold
    (usage,) = any_ledger.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd, usage.left_usd) == (Decimal(52), Decimal(10), Decimal(38))
    assert (usage.spent_gpu_hours, usage.reserved_gpu_hours) == (Decimal(3), Decimal(1))
    any_ledger.reserve("project=churn", "5")  # refused before
    any_ledger.record(entry("65", reservation_id=hold.id))  # past its hold: nothing more is held
    (usage,) = any_ledger.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd) == (Decimal(117), Decimal(5))
    any_ledger.settle(hold.id, "115")
    (usage,) = any_ledger.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd) == (Decimal(117), Decimal(5))


def test_a_refusal_says_whether_a_new_period_can_make_room(any_ledger: Ledger) -> None:
    # A skip or a wait on a refusal no period renews lasts for good: the study's own total budget spent.
    any_ledger.set_budget("project=churn", "month", "10")
    any_ledger.set_budget("study=s1", "total", "10")
    any_ledger.record(entry("9", tags={"project": "churn", "study": "s1"}))
    refusals = {}
    for scope, amount in (("project=churn", "5"), ("project=other,study=s1", "5"), ("project=churn", "11")):
        with pytest.raises(BudgetExceededError) as refused:
            any_ledger.reserve(scope, amount)
        refusals[(scope, amount)] = refused.value.renews
    assert refusals == {
        ("project=churn", "5"): True,  # next month has room
        ("project=other,study=s1", "5"): False,  # a total budget never starts afresh
        ("project=churn", "11"): False,  # more than the whole cap
    }


def test_holder_makes_reserve_idempotent(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "10")
    a = any_ledger.reserve("project=churn", "6", holder="d/r/train/-1")
    b = any_ledger.reserve("project=churn", "6", holder="d/r/train/-1")
    assert a.id == b.id
    assert any_ledger.usage("project=churn")[0].reserved_usd == 6


def test_a_reservation_replacing_its_holders_hold_frees_it_only_when_granted(any_ledger: Ledger) -> None:
    # A trial slot's small hold for loading its study, then its trial's reservation in a wider scope.
    any_ledger.set_budget("project=churn", "total", "10")
    any_ledger.set_budget("project=churn,study=s", "total", "5")
    early = any_ledger.reserve("project=churn", "1", holder="d/r/trial/0")
    with pytest.raises(BudgetExceededError, match="study=s"):
        any_ledger.reserve("project=churn,study=s", "6", holder="d/r/trial/0", replacing=early.id)
    assert [r.id for r in any_ledger.open_reservations()] == [early.id]  # refused: still held
    # Granted: it needs room for $9.50 where the $1 hold is counted no more ($10.50 with it).
    any_ledger.set_budget("project=churn,study=s", "total", "10")
    trial = any_ledger.reserve("project=churn,study=s", "9.5", holder="d/r/trial/0", replacing=early.id)
    assert trial.id != early.id and [r.id for r in any_ledger.open_reservations()] == [trial.id]
    assert {u.label: u.reserved_usd for u in any_ledger.usage("project=churn,study=s")} == {
        "project=churn/total": Decimal("9.5"),
        "project=churn,study=s/total": Decimal("9.5"),
    }
    with pytest.raises(ConfigurationError, match=r"held by 'd/r/trial/0', not 'd/r/trial/1'"):
        any_ledger.reserve("project=churn", "0.1", holder="d/r/trial/1", replacing=trial.id)
    assert [r.id for r in any_ledger.open_reservations()] == [trial.id]


def test_replace_unlike_replaces_a_hold_smaller_than_asked_or_in_another_scope(any_ledger: Ledger) -> None:
    # A gate cleared and run again: its task's open hold is returned only where it holds what is asked.
    any_ledger.set_budget("project=churn", "month", "10")
    any_ledger.set_budget("project=fraud", "month", "1")
    first = any_ledger.reserve("project=churn", "4", holder="d/r/train/-1")
    grown = any_ledger.reserve("project=churn", "6", holder="d/r/train/-1", replace_unlike=True)
    assert grown.id != first.id and grown.usd == 6 and grown.scope == first.scope
    assert any_ledger.release(first.id).status == "replaced"  # given back for the new one already
    assert any_ledger.usage("project=churn")[0].reserved_usd == 6  # not 4, and not 4 + 6
    with pytest.raises(BudgetExceededError):
        any_ledger.reserve("project=churn", "5", holder="d/other/train/-1")  # $4 left, not $6
    # A hold bigger than asked (grown to a max_usd) is kept.
    assert any_ledger.reserve("project=churn", "3", holder="d/r/train/-1", replace_unlike=True).id == grown.id
    # Another scope, refused there: nothing changes, the old hold stays open where it was.
    with pytest.raises(BudgetExceededError, match="project=fraud/month"):
        any_ledger.reserve("project=fraud", "4", holder="d/r/train/-1", replace_unlike=True)
    assert [r.id for r in any_ledger.open_reservations()] == [grown.id]
    assert any_ledger.usage("project=churn")[0].reserved_usd == 6
    any_ledger.set_budget("project=fraud", "month", "5")
    moved = any_ledger.reserve("project=fraud", "4", holder="d/r/train/-1", replace_unlike=True)
    assert str(moved.scope) == "project=fraud" and moved.budgets == ("project=fraud/month",)
    assert [r.id for r in any_ledger.open_reservations()] == [moved.id]
    assert any_ledger.usage("project=churn")[0].reserved_usd == 0
    # More GPU-hours asked than held: replaced too.
    more_gpu = any_ledger.reserve(
        "project=fraud", "4", gpu_hours="1", holder="d/r/train/-1", replace_unlike=True
    )
    assert more_gpu.id != moved.id and more_gpu.gpu_hours == 1


def test_replace_unlike_weighs_what_the_hold_has_not_paid_yet(any_ledger: Ledger) -> None:
    # Try 1 failed after paying $5 of its $6 hold, which stays open for try 2: $1 is still held. A gate run
    # again for $6 got the hold back, and try 2's $6 passed the $10 cap ($11 spent, $15 committed).
    any_ledger.set_budget("project=churn", "month", "10")
    held = any_ledger.reserve("project=churn", "6", gpu_hours="2", holder="d/r1/train/-1")
    any_ledger.record(entry("5", gpu_hours=Decimal("1.5"), reservation_id=held.id))
    assert any_ledger.unpaid(held.id) == (Decimal(1), Decimal("0.5"))
    any_ledger.reserve("project=churn", "4", holder="d/r2/train/-1")
    with pytest.raises(BudgetExceededError, match=r"has \$1\.00 left"):
        any_ledger.reserve("project=churn", "6", holder="d/r1/train/-1", replace_unlike=True)
    assert any_ledger.usage("project=churn")[0].reserved_usd == 5  # refused: the hold stays as it was
    # What it has not paid covers what is asked: kept.
    assert any_ledger.reserve("project=churn", "1", holder="d/r1/train/-1", replace_unlike=True).id == held.id
    # $1 unpaid but 1 GPU-hour asked with 0.5 unpaid: replaced.
    more_gpu = any_ledger.reserve(
        "project=churn", "1", gpu_hours="1", holder="d/r1/train/-1", replace_unlike=True
    )
    assert more_gpu.id != held.id and any_ledger.unpaid(more_gpu.id) == (Decimal(1), Decimal(1))
    usage = any_ledger.usage("project=churn")[0]
    assert (usage.spent_usd, usage.reserved_usd) == (5, 5)


def test_usage_without_a_hold_is_the_room_a_reserve_replacing_it_has_in_each_budget(
    any_ledger: Ledger,
) -> None:
    # A hold of $6 over project=churn,team=ml paid $2 by an entry of both tags and $3 by one of team=ml
    # only: the project's budget counts $4 of it held, the team's $1. Read without it, each budget has
    # what a reserve replacing it is checked against; what the entries paid stays spent.
    any_ledger.set_budget("project=churn", "month", "10")
    any_ledger.set_budget("team=ml", "month", "10")
    held = any_ledger.reserve("project=churn,team=ml", "6", gpu_hours="2", holder="d/r1/train/-1")
    any_ledger.record(entry("2", gpu_hours=Decimal("0.5"), reservation_id=held.id))
    any_ledger.record(entry("3", tags={"team": "ml"}, reservation_id=held.id))
    other = any_ledger.reserve("project=churn,team=ml", "1", holder="d/r2/train/-1")

    def standing(usages: list[Any]) -> dict[str, tuple[Decimal, ...]]:
        return {u.label: (u.spent_usd, u.reserved_usd, u.reserved_gpu_hours) for u in usages}

    scope = "project=churn,team=ml"
    assert standing(any_ledger.usage(scope)) == {
        "project=churn/month": (2, 5, Decimal("1.5")),
        "team=ml/month": (5, 2, Decimal("1.5")),
    }
    without = standing(any_ledger.usage(scope, without=held.id))
    assert without == {"project=churn/month": (2, 1, 0), "team=ml/month": (5, 1, 0)}
    # The room it reads is the reserve's: $5 fits the team's budget without the hold, $5.000001 does not.
    with pytest.raises(BudgetExceededError, match=r"'team=ml/month \(.*\)' has \$4\.00 left"):
        any_ledger.reserve(scope, "4.000001", holder="d/r1/train/-1", replace_unlike=True)
    assert any_ledger.reserve(scope, "4", holder="d/r1/train/-1", replace_unlike=True).id != held.id
    any_ledger.release(other.id)
    assert standing(any_ledger.usage(scope, without=other.id)) == standing(any_ledger.usage(scope))


def test_a_kept_hold_counts_for_the_ttl_asked_now(any_ledger: Ledger) -> None:
    # Kept with its old end, a gate run again at 03:59 passed holding until 04:00 (reservation_ttl 6 h),
    # and the task ran with nothing held.
    import time_machine

    any_ledger.set_budget("project=churn", "month", "10")
    start = datetime(2026, 12, 1, 22, 0, tzinfo=timezone.utc)
    ttl = timedelta(hours=6)
    with time_machine.travel(start, tick=False) as clock:
        held = any_ledger.reserve("project=churn", "4", holder="d/r/train/-1", ttl=ttl)
        clock.move_to(start + timedelta(hours=5, minutes=59))
        again = any_ledger.reserve("project=churn", "4", holder="d/r/train/-1", ttl=ttl, replace_unlike=True)
        assert again.id == held.id and again.expires_at == start + timedelta(hours=11, minutes=59)
        clock.move_to(start + timedelta(hours=6, minutes=1))
        assert [r.id for r in any_ledger.open_reservations()] == [held.id]
        assert any_ledger.usage("project=churn")[0].reserved_usd == 4
        # Never shortened: asked again with a shorter ttl, it keeps its later end.
        shorter = any_ledger.reserve(
            "project=churn", "4", holder="d/r/train/-1", ttl=timedelta(hours=1), replace_unlike=True
        )
        assert shorter.expires_at == again.expires_at


def test_a_second_reserve_of_a_holder_waits_for_the_first_and_gets_its_hold(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two tries of one task at once: the other try reserves while this reserve is between looking for the
    # holder's hold and taking the budgets' locks. PostgreSQL only (SQLite serializes the whole reserve): the
    # holder's advisory lock makes the other wait for this one's commit, then hands it this hold.
    import threading

    from costaware.adapters.ledger import reservations

    ledger = Ledger.from_url(fresh_postgres_database(postgres_url))
    ledger.set_budget("project=churn", "month", "10")
    holder = "d/r1/train/-1"
    real_applicable = reservations.applicable
    other: list[Reservation] = []
    waiting = threading.Thread(
        target=lambda: other.append(ledger.reserve("project=churn", "3", holder=holder)), daemon=True
    )

    def the_other_try_reserves_meanwhile(*args: object, **kwargs: object) -> object:
        monkeypatch.setattr(reservations, "applicable", real_applicable)  # the other try's reserve: as it is
        waiting.start()  # on a connection of its own
        waiting.join(timeout=1.0)
        assert waiting.is_alive(), "the other try's reserve did not wait for this one's"
        return real_applicable(*args, **kwargs)

    monkeypatch.setattr(reservations, "applicable", the_other_try_reserves_meanwhile)
    try:
        held = ledger.reserve("project=churn", "3", holder=holder)
        waiting.join(timeout=30)
        assert not waiting.is_alive()
        assert other[0].id == held.id
        assert [r.id for r in ledger.open_reservations()] == [held.id]
    finally:
        ledger.dispose()


def test_every_covering_budget_is_checked(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "100")
    any_ledger.set_budget("team=ml", "day", "3")
    with pytest.raises(BudgetExceededError, match="team=ml/"):
        any_ledger.reserve("project=churn,team=ml", "5")
    reservation = any_ledger.reserve("project=churn,team=other", "5")  # team=ml's cap does not apply
    assert reservation.budgets == ("project=churn/month",)
    assert count(any_ledger, schema.reservations) == 1


def test_grow_raises_a_reservation_as_far_as_every_budget_has_room(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "100")
    any_ledger.set_budget("team=ml", "day", "10")
    other = any_ledger.reserve("team=ml", "3")
    gate = any_ledger.reserve("project=churn,team=ml", "2", holder="d/r/train/-1")
    assert any_ledger.grow(gate.id, "4").usd == 4  # room in both: to the amount asked
    assert any_ledger.grow(gate.id, "1").usd == 4  # never lowered
    grown = any_ledger.grow(gate.id, "20")  # team=ml has $3 left: it grows by that only
    assert grown.usd == 7 and grown.status == "open"
    by_budget = {u.label: u for u in any_ledger.usage("project=churn,team=ml")}
    assert by_budget["team=ml/day"].reserved_usd == 10 and by_budget["team=ml/day"].left_usd == 0
    assert by_budget["project=churn/month"].reserved_usd == 7  # the other reservation is not in it
    assert any_ledger.grow(gate.id, "8").usd == 7  # a full budget gives nothing
    any_ledger.settle(other.id, "0.5", entry=entry("0.5"))
    assert any_ledger.grow(gate.id, "8").usd == 8  # money given back is room again
    any_ledger.settle(gate.id, "1", entry=entry("1"))
    assert any_ledger.grow(gate.id, "9").usd == 8  # a settled reservation stays as it was


def test_grow_gives_nothing_where_the_hold_is_in_another_period_than_its_window(any_ledger: Ledger) -> None:
    # A time zone changed since: the window rebuilt from the reservation's start would leave its own hold out
    # of the sum and see $6 of room where there is none (it grew to $14 under a $10 cap).
    any_ledger.set_budget("project=churn", "day", "10", timezone="Pacific/Kiritimati")
    held = any_ledger.reserve("project=churn", "4")
    any_ledger.set_budget("project=churn", "day", "10", timezone="Pacific/Pago_Pago")  # 25 hours apart
    assert any_ledger.grow(held.id, "100").usd == 4


def test_grow_gives_nothing_where_a_budget_set_since_covers_the_hold(any_ledger: Ledger) -> None:
    # The hold is not in a budget set after it was made: grown to $500, it counted in none of that $10 cap,
    # which then granted its own $10 as well.
    any_ledger.set_budget("project=churn", "month", "1000")
    held = any_ledger.reserve("project=churn", "1", holder="d/r1/train/-1", run_id="r1")
    any_ledger.set_budget("*", "month", "10")
    assert any_ledger.grow(held.id, "500").usd == 1
    assert {u.label: u.reserved_usd for u in any_ledger.usage("project=churn")} == {
        "project=churn/month": 1,
        "*/month": 0,
    }
    later = any_ledger.reserve("project=churn", "1", holder="d/r2/train/-1", run_id="r2")  # in both: grows
    assert any_ledger.grow(later.id, "9").usd == 9


def test_grow_gives_nothing_where_an_approved_overage_passed_the_cap(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "5")
    approved = any_ledger.reserve("project=churn", "6", holder="d/r/train/-1", approved_by="lead")
    assert any_ledger.grow(approved.id, "9").usd == 6
    assert any_ledger.usage("project=churn")[0].reserved_usd == 6


def test_delete_budget_refuses_while_money_is_held_then_keeps_the_spend(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "10")
    any_ledger.set_budget("team=ml", "month", "10")
    held = any_ledger.reserve("project=churn,team=ml", "4", holder="d/r/train/-1")
    with pytest.raises(
        ConfigurationError, match=r"'project=churn/month' has 1 open reservation\(s\) holding \$4"
    ):
        any_ledger.delete_budget("project=churn", "month")
    any_ledger.settle(held.id, "3", entry=entry("3"))
    deleted = any_ledger.delete_budget("project=churn", "month")
    assert deleted is not None and deleted.cap_usd == 10
    assert [b.label for b in any_ledger.budgets()] == ["team=ml/month"]
    assert any_ledger.delete_budget("project=churn", "month") is None
    assert any_ledger.usage("team=ml")[0].spent_usd == 3  # the spend and the other budget's hold are kept
    assert count(any_ledger, schema.entries) == 1 and count(any_ledger, schema.holds) == 1
    # Its alert settings go with it: a budget set again under its name starts from the defaults.
    set_alert_rule(any_ledger, "team=ml/month", thresholds="90%", notifiers=None, actor="lead")
    any_ledger.delete_budget("team=ml", "month")
    assert alert_rules(any_ledger) == {}


def test_no_budget_for_a_mistyped_tag_value_names_the_close_budget(any_ledger: Ledger) -> None:
    # A DAG param 'flight_delays' for the budget's 'flight-delays' was told only to set a budget for the typo.
    any_ledger.set_budget("project=flight-delays", "month", "10")
    with pytest.raises(BudgetNotFoundError) as refused:
        any_ledger.reserve("project=flight_delays", "1")
    assert "no budget covers scope 'project=flight_delays' (did you mean 'project=flight-delays'?)" in str(
        refused.value
    )
    # A task's scope carries more tags than the budget: compared on the budget's own tag names.
    for wider in ("project=flight_delays,team=ml", "dag=retrain,project=flight_delays"):
        with pytest.raises(BudgetNotFoundError, match=r"\(did you mean 'project=flight-delays'\?\)"):
            any_ledger.reserve(wider, "1")
    with pytest.raises(BudgetNotFoundError) as unrelated:
        any_ledger.reserve("team=payments", "1")
    assert "did you mean" not in str(unrelated.value)
    # Another team's budget is no hint: the shared 'project=' made 'project=cv' the one 'project=churn' meant.
    any_ledger.set_budget("project=cv", "month", "10")
    for other in ("project=churn", "project=nlp"):
        with pytest.raises(BudgetNotFoundError) as another_project:
            any_ledger.reserve(other, "1")
        assert "did you mean" not in str(another_project.value)
    # A per-run budget reserved without a run is skipped: the scope itself is no hint.
    any_ledger.set_budget("project=churn-eu", "run", "10")
    with pytest.raises(BudgetNotFoundError) as per_run:
        any_ledger.reserve("project=churn-eu", "1")
    assert "did you mean 'project=churn-eu'" not in str(per_run.value)


def test_no_budget_is_an_error_naming_the_scope(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "1")
    with pytest.raises(
        BudgetNotFoundError, match=r"no budget covers scope 'project=fraud'.*costaware budget set"
    ):
        any_ledger.reserve("project=fraud", "1")
    # A tuning study's budget caps its whole life, as the spot tuning plan sets it.
    with pytest.raises(BudgetNotFoundError, match=r"--scope 'project=fraud,study=s1' --period total"):
        any_ledger.reserve("project=fraud,study=s1", "1")
    # A study's budget is over its project and the study: asked for by the study alone, it is named.
    any_ledger.set_budget("project=churn,study=s2", "total", "5")
    with pytest.raises(
        BudgetNotFoundError,
        match=r"scope 'study=s2' alone; 'project=churn,study=s2/total' cover\(s\) it with more tags \(to see",
    ):
        any_ledger.usage("study=s2")
    # A reservation (a SpendCapSensor's, say) over '*' with only narrower budgets is told how to set one;
    # `costaware budget show --scope '*'` says otherwise (tests/cli).
    with pytest.raises(
        BudgetNotFoundError, match=r"or set one with `costaware budget set --scope '\*' --per"
    ):
        any_ledger.reserve("*", "1", holder="d/r/train/-1")
    assert any_ledger.open_reservations() == []


def test_a_refusal_counts_the_study_budgets_runs_left_instead_of_naming_each(any_ledger: Ledger) -> None:
    # Each run of the budgeted_tuning example leaves its study's budget (study=<run id>): every "no budget
    # covers" refusal named them all, a list that grew with every nightly run.
    any_ledger.set_budget("project=churn", "month", "10")
    runs = [f"budgeted_tuning-manual__2026-12-0{n}T09:37:35" for n in range(1, 8)]
    for run in runs:
        any_ledger.set_budget(f"project=flight-delays,study={run}", "total", "0.05")
    with pytest.raises(BudgetNotFoundError) as refused:
        any_ledger.reserve("project=churn2", "1")
    assert "(did you mean 'project=churn'?) (budgets: 'project=churn/month'; and 7 study budgets " in str(
        refused.value
    )
    assert "(`costaware budget list --studies` lists them)" in str(refused.value)
    assert "study=" not in str(refused.value)
    # Asked for by its project alone, the study budgets are the ones meant: a few named, the rest counted.
    with pytest.raises(BudgetNotFoundError) as narrower:
        any_ledger.usage("project=flight-delays")
    assert str(narrower.value).count("study=budgeted_tuning") == 5 + 1  # and the one its hint gives
    assert "and 2 more (`costaware budget list --studies` lists them) cover(s) it" in str(narrower.value)
    # Alert settings for a budget there is not: the same.
    with pytest.raises(ConfigurationError) as no_alerts:
        set_alert_rule(any_ledger, "project=churn2/month", thresholds="90%", notifiers=None, actor="lead")
    assert "(budgets: 'project=churn/month'; and 7 study budgets (`costaware budget list --studies`" in str(
        no_alerts.value
    )
    # The budgets and what they counted stay: only what a refusal names is shorter.
    assert len(any_ledger.budgets()) == 8


def test_run_budget_is_per_run(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "run", "5")
    any_ledger.reserve("project=churn", "5", run_id="r1")
    any_ledger.reserve("project=churn", "5", run_id="r2")
    with pytest.raises(BudgetExceededError):
        any_ledger.reserve("project=churn", "1", run_id="r1")


def test_a_per_run_budget_counts_one_dags_run_not_every_dag_run_of_that_id(any_ledger: Ledger) -> None:
    # Two daily DAGs share the run id 'scheduled__<date>': each counted the other's spend and holds against
    # its own per-run cap ($5 + $9 of $10 read as one run's $14, so a $4 reservation was refused).
    run = "scheduled__2026-12-01T00:00:00+00:00"
    any_ledger.set_budget("project=churn", "run", "10")
    any_ledger.record(entry("5", dag_id="churn_a", run_id=run))
    any_ledger.record(entry("9", dag_id="churn_b", run_id=run))
    (a,) = any_ledger.usage("project=churn", run_id=run, dag_id="churn_a")
    (b,) = any_ledger.usage("project=churn", run_id=run, dag_id="churn_b")
    assert (a.spent_usd, b.spent_usd) == (Decimal(5), Decimal(9))
    (either,) = any_ledger.usage("project=churn", run_id=run)  # no DAG given: that run id of every DAG
    assert either.spent_usd == Decimal(14)
    any_ledger.reserve("project=churn", "4", run_id=run, dag_id="churn_a", holder=f"churn_a/{run}/train/-1")
    (b,) = any_ledger.usage("project=churn", run_id=run, dag_id="churn_b")
    assert b.reserved_usd == 0  # churn_a's hold is not in churn_b's run
    (either,) = any_ledger.usage("project=churn", run_id=run)
    assert either.reserved_usd == Decimal(4)  # every DAG's run of that id: every DAG's hold
    with pytest.raises(BudgetExceededError):
        any_ledger.reserve("project=churn", "2", run_id=run, dag_id="churn_a")  # $5 + $4 held + $2 > $10
    # A hold made with no DAG (as before holds named theirs) still counts in each DAG's run of its id.
    any_ledger.reserve("project=churn", "0.5", run_id=run, approved_by="lead")  # caps: $14 of any DAG
    (b,) = any_ledger.usage("project=churn", run_id=run, dag_id="churn_b")
    assert b.reserved_usd == Decimal("0.5")


def test_a_run_window_of_any_dag_counts_the_holds_of_its_own_run_id_only(any_ledger: Ledger) -> None:
    # Matched by its ending, run 'r' of every DAG counted run 'x/r''s hold ('run@d/x/r'), and on SQLite
    # (LIKE ignores case) run 'R''s: $9 of others' holds refused its $5 of a $10 cap.
    any_ledger.set_budget("project=churn", "run", "10")
    any_ledger.set_budget("project=churn", "total", "100")  # holds keyed 'total', shorter than 'run@' + '/r'
    any_ledger.reserve("project=churn", "6", run_id="x/r", dag_id="d", holder="d/x/r/train/-1")
    any_ledger.reserve("project=churn", "3", run_id="R", dag_id="d", holder="d/R/train/-1")
    any_ledger.reserve("project=churn", "0.5", run_id="r", dag_id="d", holder="d/r/train/-1")
    any_ledger.reserve("project=churn", "0.25", run_id="r", dag_id="e", holder="e/r/train/-1")
    any_ledger.reserve("project=churn", "0.125", run_id="r")  # no DAG: 'run:r'
    held = {
        run: [u.reserved_usd for u in any_ledger.usage("project=churn", run_id=run)]
        for run in ("r", "x/r", "R")
    }
    total = Decimal("9.875")
    assert held == {"r": [Decimal("0.875"), total], "x/r": [6, total], "R": [3, total]}
    any_ledger.reserve("project=churn", "5", run_id="r")
    assert any_ledger.usage("project=churn", run_id="r")[0].reserved_usd == Decimal("5.875")


def test_a_run_id_with_a_slash_is_never_read_as_a_dag(any_ledger: Ledger) -> None:
    # A deployment's allowed_run_id_pattern may allow '/': the key of a window without a DAG,
    # 'run:manual/2026-12-01', was read as DAG 'manual', run '2026-12-01', which spent nothing, and a
    # tuning trial (its holder's DAG unread) was granted $5 of a $10 cap $9 had already spent.
    from costaware.core.budgets import MAX_PERIOD_KEY_CHARS, run_key, run_of_key
    from costaware.core.ledger import holder_dag_id, holder_run_id

    run = "manual/2026-12-01"
    any_ledger.set_budget("project=churn", "run", "10")
    any_ledger.record(entry("9", dag_id="d", run_id=run))
    for dag_id in ("d", None):
        (usage,) = any_ledger.usage("project=churn", run_id=run, dag_id=dag_id)
        assert usage.spent_usd == Decimal(9), dag_id
    assert holder_dag_id(f"d/{run}/trial/-1") == "d"
    # Its holds read back to the whole run id (they were cut at the '/': 'manual').
    for holder in (f"d/{run}/trial/-1", f"d/{run}/trial/3/egress", f"search/{run}/7/2", f"search/{run}/tail"):
        assert holder_run_id(holder) == run, holder
    assert holder_run_id("d/r/t/-1") == "r" and holder_run_id("search/r/tail") == "r"
    assert holder_run_id("one-part") is None
    with pytest.raises(BudgetExceededError):
        any_ledger.reserve("project=churn", "5", run_id=run)
    assert run_of_key(run_key(run, "d")) == ("d", run) and run_of_key(run_key(run)) == (None, run)
    # A key the column cannot hold (a long DAG id) is the run id's alone: counts more, never less.
    assert run_key("r", "d" * 300) == "run:r" and len(run_key("r", "d" * 250)) <= MAX_PERIOD_KEY_CHARS


def test_gpu_hour_cap(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "1000", cap_gpu_hours="8")
    any_ledger.reserve("project=churn", "1", gpu_hours="6")
    with pytest.raises(BudgetExceededError, match="GPU-hours"):
        any_ledger.reserve("project=churn", "1", gpu_hours="3")


def test_a_gpu_hour_refusal_reads_the_ledgers_hours_as_a_person_writes_them(any_ledger: Ledger) -> None:
    # Read from the ledger (micro-GPU-hours), it said "has no GPU-hours left of 1.000000 (it is 1.000000
    # GPU-hours over its cap)", and "has 0.000000 GPU-hours left of 2.000000" at an exactly spent cap.
    any_ledger.set_budget("project=churn", "month", "1000", cap_gpu_hours="2")
    any_ledger.reserve("project=churn", "1", gpu_hours="2")
    with pytest.raises(BudgetExceededError, match=r"has 0 GPU-hours left of 2; the next task needs 0\.5 GPU"):
        any_ledger.reserve("project=churn", "1", gpu_hours="0.5")
    any_ledger.set_budget("project=churn", "month", "1000", cap_gpu_hours="1")
    with pytest.raises(
        BudgetExceededError, match=r"has no GPU-hours left of 1 \(it is 1 GPU-hours over its cap\); the next"
    ):
        any_ledger.reserve("project=churn", "1", gpu_hours="0.5")


def test_spent_counts_actual_entries_of_the_period_only(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "10")
    any_ledger.record(entry("4"))
    any_ledger.record(entry("50", estimated=True))  # forecasts do not count as spend
    any_ledger.record(entry("50", incurred_at=datetime.now(timezone.utc) - timedelta(days=40)))  # last period
    any_ledger.record(entry("50", tags={"project": "fraud"}))  # another scope
    assert any_ledger.usage("project=churn")[0].spent_usd == 4
    with pytest.raises(BudgetExceededError):
        any_ledger.reserve("project=churn", "6.01")


def test_expired_reservations_stop_counting(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "10")
    any_ledger.reserve("project=churn", "10", ttl=timedelta(milliseconds=1))
    import time

    time.sleep(0.01)
    assert any_ledger.usage("project=churn")[0].reserved_usd == 0
    assert any_ledger.expire_stale() == 1
    assert any_ledger.reserve("project=churn", "10").status == "open"


@pytest.mark.parametrize("change", ["settled", "released", "extended"])
def test_expiry_never_overwrites_what_committed_while_it_waited(postgres_url: str, change: str) -> None:
    # expire_stale read the holds past their TTL, then wrote 'expired' over each by id alone: a settlement
    # committed between the two became 'expired', and an extended hold stopped counting while its job billed.
    import threading
    import time

    import time_machine
    from sqlalchemy import create_engine, text

    from costaware.adapters.ledger.reservations import close

    url = fresh_postgres_database(postgres_url)
    # Autocommit: pg_stat_activity is read once per transaction, so a poll inside one saw its first answer.
    ledger, watcher = Ledger.from_url(url), create_engine(url, isolation_level="AUTOCOMMIT")
    ledger.set_budget("project=churn", "month", "10")
    t0 = datetime(2026, 11, 10, 12, 0, tzinfo=timezone.utc)
    with time_machine.travel(t0, tick=False) as clock:
        held = ledger.reserve("project=churn", "4", ttl=timedelta(hours=1))
        clock.move_to(t0 + timedelta(hours=2))  # past its TTL, not yet marked
        expired: list[int] = []
        with ledger.transaction() as conn:  # the other worker's write, not yet committed
            if change == "extended":
                conn.execute(
                    schema.reservations.update()
                    .where(schema.reservations.c.id == held.id)
                    .values(expires_at=t0 + timedelta(hours=5))
                )
                conn.execute(
                    schema.holds.update()
                    .where(schema.holds.c.reservation_id == held.id)
                    .values(expires_at=t0 + timedelta(hours=5))
                )
            else:
                close(conn, held.id, change, Decimal(3) if change == "settled" else None)
            expiry = threading.Thread(target=lambda: expired.append(ledger.expire_stale()))
            expiry.start()
            waiting = (
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            deadline = time.monotonic() + 30
            with watcher.connect() as watch:
                while not watch.execute(text(waiting)).scalar_one() and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert watch.execute(text(waiting)).scalar_one() == 1  # its write waits for this one
        expiry.join(timeout=30)
        with ledger.engine.connect() as conn:
            status = conn.execute(
                select(schema.reservations.c.status).where(schema.reservations.c.id == held.id)
            ).scalar_one()
        assert expired == [0]
        assert status == ("open" if change == "extended" else change)
        if change == "extended":
            assert ledger.usage("project=churn")[0].reserved_usd == 4  # still counting
    watcher.dispose()
    ledger.dispose()


def test_a_ttl_past_the_last_date_is_refused_by_name(any_ledger: Ledger) -> None:
    # It failed as Python's "OverflowError: date value out of range", naming neither the ttl nor a fix.
    any_ledger.set_budget("project=churn", "month", "10")
    with pytest.raises(ConfigurationError, match=r"reservation ttl 9000000 days, 0:00:00 would end after"):
        any_ledger.reserve("project=churn", "1", ttl=timedelta(days=9_000_000))
    assert count(any_ledger, schema.reservations) == 0
    assert any_ledger.reserve("project=churn", "1", ttl=timedelta(days=365)).usd == 1


def test_a_hold_taken_before_midnight_counts_against_the_next_day(any_ledger: Ledger) -> None:
    # Its job ends after midnight and is billed then: two $90 holds either side of midnight under a $100
    # day cap were both granted, and day 2 ended at $180 spent.
    import time_machine

    any_ledger.set_budget("project=churn", "day", "100")
    with time_machine.travel(datetime(2026, 11, 1, 23, 50, tzinfo=timezone.utc), tick=False) as clock:
        late = any_ledger.reserve("project=churn", "90", holder="d/r1/train/-1")
        clock.move_to(datetime(2026, 11, 2, 0, 10, tzinfo=timezone.utc))
        (usage,) = any_ledger.usage("project=churn")
        assert (usage.period_key, usage.reserved_usd, usage.left_usd) == ("2026-11-02", 90, 10)
        with pytest.raises(BudgetExceededError):
            any_ledger.reserve("project=churn", "90", holder="d/r2/train/-1")
        clock.move_to(datetime(2026, 11, 2, 1, 0, tzinfo=timezone.utc))
        any_ledger.settle(late.id, "90", entry=entry("90"))
        assert any_ledger.usage("project=churn")[0].spent_usd == 90
        # Asked about the first day, the hold made on it and the spend of the second are told apart.
        (first_day,) = any_ledger.usage(
            "project=churn", at=datetime(2026, 11, 1, 23, 55, tzinfo=timezone.utc)
        )
        assert (first_day.period_key, first_day.spent_usd) == ("2026-11-01", 0)


def test_a_hold_keeps_counting_after_its_budgets_time_zone_moves_west(any_ledger: Ledger) -> None:
    # Held at 01:00 UTC on 1 December (key 2026-12-01), then the budget moved to Los Angeles, where it is
    # still 30 November: the hold's key sorted after today's, it counted in no period and a second $10 was
    # granted under the $10 cap.
    import time_machine

    any_ledger.set_budget("project=churn", "day", "10")
    with time_machine.travel(datetime(2026, 12, 1, 1, 0, tzinfo=timezone.utc), tick=False):
        held = any_ledger.reserve("project=churn", "10", holder="d/r1/train/-1")
        any_ledger.set_budget("project=churn", "day", "10", timezone="America/Los_Angeles")
        (usage,) = any_ledger.usage("project=churn")
        assert (usage.period_key, usage.reserved_usd, usage.left_usd) == ("2026-11-30", 10, 0)
        with pytest.raises(BudgetExceededError):
            any_ledger.reserve("project=churn", "10", holder="d/r2/train/-1")
        # Asked about a day that ended before the hold was made, it is not counted there.
        (before,) = any_ledger.usage("project=churn", at=datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc))
        assert (before.period_key, before.reserved_usd) == ("2026-11-29", 0)
        any_ledger.release(held.id)
        assert any_ledger.reserve("project=churn", "10", holder="d/r2/train/-1").usd == 10


def test_a_hold_grown_after_midnight_is_bounded_by_todays_room(any_ledger: Ledger) -> None:
    # grow checked the room of the hold's own day only: today reached $95 spent + $50 held of $100.
    import time_machine

    any_ledger.set_budget("project=churn", "day", "100")
    with time_machine.travel(datetime(2026, 11, 1, 23, 50, tzinfo=timezone.utc), tick=False) as clock:
        held = any_ledger.reserve("project=churn", "10", holder="d/r1/train/-1")
        clock.move_to(datetime(2026, 11, 2, 0, 30, tzinfo=timezone.utc))
        any_ledger.record(entry("85"))  # today: $85 spent + the $10 hold
        assert any_ledger.grow(held.id, "50").usd == 15  # today's $5 of room
        assert any_ledger.usage("project=churn")[0].left_usd == 0


def test_a_settlement_is_never_undone_by_a_release_and_keeps_every_entry(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "10")
    held = any_ledger.reserve("project=churn", "4")
    any_ledger.settle(held.id, "3", entry=entry("3"))
    # A release that read it open before the settlement committed writes nothing over it.
    with any_ledger.transaction() as conn:
        from costaware.adapters.ledger.reservations import close

        close(conn, held.id, "released", None)
        row = conn.execute(
            select(schema.reservations.c.status, schema.reservations.c.settled_usd_micros).where(
                schema.reservations.c.id == held.id
            )
        ).one()
    assert tuple(row) == ("settled", 3_000_000)
    # A second live try of the task settling the same reservation: its entry is recorded all the same.
    any_ledger.settle(held.id, "2", entry=entry("2", try_number=2))
    assert count(any_ledger, schema.entries) == 2
    assert any_ledger.usage("project=churn")[0].spent_usd == 5


def test_a_cost_settled_after_its_hold_was_released_is_kept_and_said_where_it_passes_a_cap(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Released while its task still ran (`budget release --force`), another task took the money, and the
    # task's $4.00 then settled against the released hold: the $5 budget read -$3.00 left, without a word.
    import time_machine

    errors = lambda: [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]  # noqa: E731
    with (
        time_machine.travel(datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc), tick=False),
        caplog.at_level("ERROR", logger="costaware.adapters.ledger.reservations"),
    ):
        any_ledger.set_budget("project=churn", "month", "5")
        held = any_ledger.reserve("project=churn", "4", holder="d/r1/train/-1")
        any_ledger.release(held.id)
        any_ledger.record(entry("4", task_id="other"))
        any_ledger.settle(held.id, "4", entry=entry("4"))
        assert any_ledger.usage("project=churn")[0].left_usd == -3
        assert count(any_ledger, schema.entries) == 2  # the late cost is recorded all the same
        (said,) = errors()
        assert (
            f"the hold {held.id} of d/r1/train/-1 had been released (`costaware budget release`, or its "
            "run's end) when its task's cost of $4.00 was settled: recorded" in said
        )
        assert "project=churn/month (2026-11) is $3.00 over its cap $5.00" in said
        # Within the cap (its run's end released it while its listener was on its way): nothing to say.
        caplog.clear()
        any_ledger.set_budget("project=churn", "month", "100")
        second = any_ledger.reserve("project=churn", "1", holder="d/r2/train/-1")
        any_ledger.release(second.id)
        any_ledger.settle(second.id, "1", entry=entry("1", run_id="r2"))
        assert errors() == []


def test_extend_keeps_an_open_hold_counting_and_never_revives_an_expired_one(any_ledger: Ledger) -> None:
    import time_machine

    any_ledger.set_budget("project=churn", "month", "10")
    t0 = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
    with time_machine.travel(t0, tick=False) as clock:
        job = any_ledger.reserve("project=churn", "8", holder="d/r1/train/-1")  # 6 h by default
        assert any_ledger.extend(job.id, t0 + timedelta(hours=30)).expires_at == t0 + timedelta(hours=30)
        assert any_ledger.extend(job.id, t0 + timedelta(hours=1)).expires_at == t0 + timedelta(hours=30)
        clock.move_to(t0 + timedelta(hours=7))  # past the 6 h the hold had: it still counts
        assert any_ledger.usage("project=churn")[0].reserved_usd == 8
        with pytest.raises(BudgetExceededError):
            any_ledger.reserve("project=churn", "8")
        other = any_ledger.reserve("project=churn", "2", ttl=timedelta(hours=1))
        clock.move_to(t0 + timedelta(hours=9))
        stale = any_ledger.extend(other.id, t0 + timedelta(hours=40))
        assert stale.expires_at == t0 + timedelta(hours=8)  # expired at 8 h: not taken back unchecked
        assert any_ledger.usage("project=churn")[0].reserved_usd == 8


def test_hold_ends_are_those_of_the_budgets_own_open_holds(any_ledger: Ledger) -> None:
    # What a tuning slot past its own wait sleeps towards: one query, other budgets' holds left out.
    import time_machine

    any_ledger.set_budget("study=s", "total", "10")
    any_ledger.set_budget("project=other", "total", "10")
    t0 = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
    with time_machine.travel(t0, tick=False) as clock:
        assert any_ledger.hold_ends("study=s/total") is None
        any_ledger.reserve("study=s", "1", holder="t/r/trial/0", ttl=timedelta(minutes=10))
        any_ledger.reserve("study=s", "1", holder="t/r/trial/1", ttl=timedelta(minutes=30))
        released = any_ledger.reserve("study=s", "1", holder="t/r/trial/2", ttl=timedelta(hours=5))
        any_ledger.release(released.id)
        any_ledger.reserve("project=other", "1", holder="o/r/gate/-1", ttl=timedelta(hours=2))
        ends = any_ledger.hold_ends("study=s/total")
        assert ends == (t0 + timedelta(minutes=10), t0 + timedelta(minutes=30))
        clock.move_to(t0 + timedelta(minutes=20))  # the first expired
        assert any_ledger.hold_ends("study=s/total") == (t0 + timedelta(minutes=30),) * 2


def test_record_is_idempotent_on_entry_uid(any_ledger: Ledger) -> None:
    e = entry("1.25")
    assert any_ledger.record(e) is True
    assert any_ledger.record(e) is False
    assert any_ledger.spent("project=churn") == Decimal("1.25")


def test_an_entry_whose_unit_price_has_many_digits_is_recorded_on_both_databases(any_ledger: Ledger) -> None:
    # A unit price made from a float (Decimal(0.1): 57 characters) passed the entry's checks, and PostgreSQL
    # refused the row ("value too long for type character varying(40)"): the cost was not recorded there.
    for price in (
        Decimal(0.1),  # noqa: RUF032 - the float is the point: its Decimal runs to 57 characters
        Decimal("0.000000123456789012345678901234567890123456789"),
        Decimal(1e12 / 7),
    ):
        priced = entry("0.1", unit_price_usd=price)
        assert any_ledger.record(priced) is True
        (row,) = any_ledger.entries_by_uid([priced.entry_uid])
        assert row["usd"] == Decimal("0.1")
        assert (
            row["unit_price_usd"] == priced.unit_price_usd
        )  # as the entry holds it: the store kept it whole
        assert abs(row["unit_price_usd"] - price) <= price * Decimal("1e-22")


@pytest.mark.parametrize("uid", ["", "   ", "u" * 65])
def test_an_entry_uid_no_store_can_key_by_is_refused_by_name(any_ledger: Ledger, uid: str) -> None:
    # A blank uid keyed every such entry alike (the second, a different cost, was dropped as a repeat), and
    # PostgreSQL refused one over 64 characters as "value too long ... Check the URL" while SQLite kept it.
    with pytest.raises(ConfigurationError, match=rf"entry_uid {uid!r} .*1 to 64 characters"):
        entry("1", entry_uid=uid)
    assert count(any_ledger, schema.entries) == 0
    longest = entry("1", entry_uid="u" * 64)
    assert any_ledger.record(longest) is True and any_ledger.record(entry("2", entry_uid="u" * 63)) is True


def test_report_groupings(any_ledger: Ledger) -> None:
    any_ledger.record(entry("3", on_demand_usd=Decimal("10"), market="spot"))
    any_ledger.record(
        entry("1", task_id="prep", tags={"project": "churn", "team": "data", "cost_center": "42"})
    )
    any_ledger.record(entry("7", estimated=True))
    rows = {r.group: r for r in any_ledger.report(group_by="task")}
    assert rows["d.train"].usd == 3 and rows["d.train"].estimated_usd == 7
    assert rows["d.train"].savings_usd == 7
    assert rows["d.train"].hours == 1  # the estimate's hours are not compute spent
    by_team = {r.group: r.usd for r in any_ledger.report(group_by="tag:team")}
    assert by_team == {"ml": 3, "data": 1}
    by_free_tag = {r.group: r.usd for r in any_ledger.report(group_by="tag:cost_center")}
    assert by_free_tag == {"(none)": 3, "42": 1}
    assert [r.group for r in any_ledger.report(group_by="market")] == ["spot", "(none)"]
    assert sum(r.usd for r in any_ledger.report(group_by="dag", scope="team=data")) == 1
    with pytest.raises(ConfigurationError, match="cannot group by 'week'"):
        any_ledger.report(group_by="week")


def test_newer_schema_is_refused(any_ledger: Ledger) -> None:
    with any_ledger.engine.begin() as conn:
        conn.execute(schema.meta.update().values(value="99"))
    with pytest.raises(ConfigurationError, match="schema v99, newer than this costaware"):
        any_ledger.create_schema()


def test_unreachable_ledger_fails_closed() -> None:
    with pytest.raises(
        LedgerUnavailableError, match=r"cannot reach the cost ledger at .*127\.0\.0\.1:1.*nothing was"
    ):
        Ledger.from_url("postgresql://nobody:secret@127.0.0.1:1/ledger")


def test_password_is_masked_in_errors() -> None:
    with pytest.raises(LedgerUnavailableError) as info:
        Ledger.from_url("postgresql://nobody:s3cret@127.0.0.1:1/ledger")
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "uses 'mysql'"),
        ("not a url", "is not a database URL"),
        ("postgresql+psycopg://u@127.0.0.1/db", "needs the Python module 'psycopg'.*use postgresql://"),
        # SQLAlchemy's int() of the port escaped as a ValueError traceback, the password in it.
        (
            "postgresql://u:s3cret@host:abc/db",
            r"'postgresql://u:\*\*\*@host:abc/db' has a port that is not a",
        ),
    ],
)
def test_bad_ledger_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as refused:
        Ledger.from_url(url)
    assert "s3cret" not in str(refused.value)


def test_over_long_fields_are_refused_before_the_database(any_ledger: Ledger) -> None:
    # PostgreSQL enforces column lengths and SQLite does not: the entry itself refuses, on both.
    with pytest.raises(ConfigurationError, match="field price_source is 81 characters, over its limit of 64"):
        entry("1", price_source="x" * 81)
    assert count(any_ledger, schema.entries) == 0


def test_preemption_retries_are_counted_apart_from_code_errors(any_ledger: Ledger) -> None:
    any_ledger.record(entry("2", try_number=1, outcome="failed", cause="preemption"))
    any_ledger.record(entry("1", try_number=2, outcome="failed", cause="error"))
    any_ledger.record(entry("3", try_number=3))
    # No cause is one "(none)" row, as a missing tag is.
    by_cause = {r.group: (r.entries, r.usd) for r in any_ledger.report(group_by="cause")}
    assert by_cause == {"preemption": (1, 2), "error": (1, 1), "(none)": (1, 3)}


def test_daily_spend_is_by_utc_day_whatever_the_sessions_time_zone(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # date() of a timestamptz takes the session's zone: a server or role in New York moved 02:00 UTC spend
    # to the day before.
    from datetime import date

    from costaware.adapters.ledger.reports import Filters, daily_spend

    monkeypatch.setenv("PGTZ", "America/New_York")  # libpq sets the session's time zone from it
    ledger = Ledger.from_url(fresh_postgres_database(postgres_url))
    try:
        at = datetime(2026, 11, 30, 2, tzinfo=timezone.utc)  # 21:00 on Nov 29 in New York
        ledger.record(entry("4", incurred_at=at))
        assert daily_spend(ledger, Filters(), "dag") == [(date(2026, 11, 30), "d", Decimal(4))]
    finally:
        ledger.dispose()


def test_an_entry_written_twice_at_once_is_kept_once_and_its_hold_still_settles(any_ledger: Ledger) -> None:
    # A spooled entry drained while its task's hold is settled with it: on PostgreSQL both transactions
    # looked for the row, saw none, and the second failed on the unique key, rolling back its settle (the
    # hold stayed open until its time limit).
    import threading

    from costaware.adapters.ledger.entries import insert_entry

    any_ledger.set_budget("project=churn", "month", "10")
    hold = any_ledger.reserve("project=churn", "10", holder="d/r1/train/-1")
    twice = entry("3")
    settled: list[Any] = []
    with any_ledger.transaction() as conn:
        assert insert_entry(conn, twice)  # the drain's write, not committed yet
        settling = threading.Thread(
            target=lambda: settled.append(any_ledger.settle(hold.id, "3", entry=twice))
        )
        settling.start()
        settling.join(timeout=1)  # waits on the unique key (PostgreSQL) or the write lock (SQLite)
        assert settling.is_alive()
    settling.join(timeout=60)
    assert [r.status for r in settled] == ["settled"]
    assert [e["usd"] for e in any_ledger.entries(dag_id="d")] == [Decimal("3")]
    (usage,) = any_ledger.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd) == (Decimal("3"), Decimal("0"))


def test_a_value_a_column_refuses_in_a_write_is_raised_as_the_costaware_error_it_is(
    any_ledger: Ledger,
) -> None:
    # SQLAlchemy wrapped it in a StatementError: Airflow's error translation saw a database error, not the
    # bad value, and retried the task.
    from costaware.adapters.ledger.window_claims import claim_window
    from costaware.core.errors import ConfigurationError

    naive = datetime(2026, 11, 30, 22)
    with pytest.raises(ConfigurationError):
        claim_window(any_ledger, "d", naive, "r1", datetime(2026, 11, 30, 21, tzinfo=timezone.utc))


def test_a_reservation_without_run_id_says_the_per_run_cap_it_does_not_apply(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # reserve() written as ledger.md showed it (no run_id) passed a $5 per-run cap with $6, in silence.
    any_ledger.set_budget("project=churn", "month", "100")
    any_ledger.set_budget("project=churn", "run", "5")
    with caplog.at_level("WARNING"):
        any_ledger.reserve("project=churn", "6")
    assert "budget project=churn/run is per run: this reservation gave no run_id" in caplog.text
    with pytest.raises(BudgetExceededError, match="project=churn/run"):
        any_ledger.reserve("project=churn", "6", run_id="r1")


def test_a_refusal_names_every_budget_the_amount_would_pass(any_ledger: Ledger) -> None:
    # Named alone, the day's cap was raised, the run ran again, and the per-run cap refused it in turn.
    any_ledger.set_budget("project=churn", "day", "10")
    any_ledger.set_budget("project=churn", "run", "5")
    any_ledger.set_budget("project=churn", "month", "100")
    with pytest.raises(BudgetExceededError) as refused:
        any_ledger.reserve("project=churn", "20", run_id="r1")
    assert "budget 'project=churn/day (" in str(refused.value)
    assert "it would pass 'project=churn/run (run:r1)' too: raise those caps as well" in str(refused.value)
    assert "month" not in str(refused.value).split("; it would pass")[1]
    assert refused.value.renews is False  # 20 is more than the whole per-run cap: no new period makes room


def test_settling_with_an_entry_outside_the_holds_scope_is_said(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Accepted in silence: the hold closed, and the budget it was in never counted the money.
    any_ledger.set_budget("project=churn", "month", "10")
    hold = any_ledger.reserve("project=churn", "1")
    with caplog.at_level("WARNING"):
        any_ledger.settle(hold.id, "0.5", entry=entry("0.5", tags={"project": "other"}))
    assert "outside that scope: the budgets it held in (project=churn/month) do not count its $0.50" in (
        caplog.text
    )


def test_a_budget_stored_with_a_never_set_tag_still_loads_and_can_be_deleted(ledger_url: str) -> None:
    # Refused when read back, one old "project=None" budget failed every reservation in the ledger, and
    # `budget delete` refused to remove it.
    from sqlalchemy import update

    from costaware import Ledger
    from costaware.adapters.ledger import schema

    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    ledger.set_budget("project=old", "month", "5")
    with ledger.transaction() as conn:
        conn.execute(
            update(schema.budgets).where(schema.budgets.c.scope == "project=old").values(scope="project=None")
        )
    assert {str(b.scope) for b in ledger.budgets()} == {"project=churn", "project=None"}
    held = ledger.reserve({"project": "churn"}, "1", holder="t1", run_id="r1")
    assert held.usd == Decimal("1")
    assert ledger.delete_budget("project=None", "month") is not None
    ledger.dispose()


def test_settling_an_amount_with_no_entry_paid_from_the_hold_says_nothing_was_counted(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # settle(r.id, "3.95") with no entry= closed the hold and counted $0 spent, without a word: the library
    # user's $3.95 was missing from every budget.
    warnings = lambda: [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]  # noqa: E731
    any_ledger.set_budget("project=churn", "month", "10")
    with caplog.at_level("WARNING", logger="costaware.adapters.ledger.reservations"):
        held = any_ledger.reserve("project=churn", "5", holder="d/r1/train/-1")
        any_ledger.settle(held.id, "3.95")
        assert any_ledger.usage("project=churn")[0].spent_usd == 0  # the behaviour stays, said
        (said,) = warnings()
        assert f"settled the hold {held.id} of d/r1/train/-1 with $3.95 but no entry" in said
        assert "pass entry=" in said and "already_recorded=True" in said
        # Settled with the cost paid from the hold (a remote training's attempts), or $0: nothing to say.
        caplog.clear()
        paid = any_ledger.reserve("project=churn", "5", holder="d/r2/train/-1")
        any_ledger.record(entry("2", run_id="r2", reservation_id=paid.id))
        any_ledger.settle(paid.id, "2")
        unused = any_ledger.reserve("project=churn", "5", holder="d/r3/train/-1")
        any_ledger.settle(unused.id, "0")
        any_ledger.settle(held.id, "3.95")  # settled already: changes nothing, says nothing again
        recorded = any_ledger.reserve("project=churn", "5", holder="d/r4/train/-1")
        any_ledger.settle(recorded.id, "1", already_recorded=True)  # recorded before, without the hold's id
        assert warnings() == []


def test_a_read_of_a_postgresql_database_not_created_is_a_configuration_error_naming_the_fix(
    postgres_url: str,
) -> None:
    # A write said LedgerDatabaseMissingError (fails at once, with the CREATE DATABASE to run) while a read
    # of the same ledger said LedgerUnavailableError, retried as an outage that no retry ends.
    from costaware.core.errors import LedgerDatabaseMissingError

    not_created = Ledger.from_url(postgres_url.rsplit("/", 1)[0] + "/costaware_never_made", create=False)
    try:
        for use in (not_created.reading, not_created.transaction):
            with pytest.raises(LedgerDatabaseMissingError) as raised, use() as conn:
                conn.execute(select(1))
            assert "CREATE DATABASE costaware_never_made;" in str(raised.value)
        with pytest.raises(LedgerDatabaseMissingError):
            not_created.entries(dag_id="d")
    finally:
        not_created.dispose()
