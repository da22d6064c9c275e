"""A hold replaced by a newer one of its holder (``reserve(replacing=...)``) is closed as ``replaced``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from clocks import HOLD_CLOCK_MODULES, hold_clock_modules
from services import fresh_postgres_database

from costaware import Ledger
from costaware.core.errors import ReservationNotFoundError
from costaware.core.ledger import Kind, LedgerEntry, reservation_holder, utcnow
from costaware.ledger_spool import record_and_settle

HOLDER = reservation_holder("tune", "r1", "trial", 0)


@pytest.fixture(params=["sqlite", "postgres"])
def any_ledger(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Ledger]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        url = fresh_postgres_database(request.getfixturevalue("postgres_url"))
    ledger = Ledger.from_url(url)
    yield ledger
    ledger.dispose()


def _later(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The ledger's clock ``seconds`` ahead."""
    ahead = utcnow() + timedelta(seconds=seconds)
    for module in hold_clock_modules():
        monkeypatch.setattr(module, "utcnow", lambda: ahead)


def test_a_trial_that_outran_its_hold_is_not_settled_against_the_slot_hold_its_hold_replaced(
    any_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The slot hold's money went to the trial's hold; that hold expired as the trial ran past its lease. The
    # bill was settled against the released slot hold: the entry linked to the wrong hold, and an ERROR said
    # the hold "had been released (`costaware budget release`, or its run's end)".
    any_ledger.set_budget("project=churn", "total", "1")
    slot = any_ledger.reserve("project=churn", "0.0016", holder=HOLDER, run_id="r1", dag_id="tune")
    trial = any_ledger.reserve(
        "project=churn,study=s1", "0.5", holder=HOLDER, run_id="r1", dag_id="tune", ttl=timedelta(seconds=60),
        replacing=slot.id,
    )  # fmt: skip
    _later(monkeypatch, 120)

    with caplog.at_level(logging.WARNING):
        record_and_settle(
            any_ledger,
            LedgerEntry(
                dag_id="tune",
                run_id="r1",
                task_id="trial",
                map_index=0,
                kind=Kind.COMPUTE,
                usd=Decimal("1.2"),
                tags={"project": "churn", "study": "s1"},
            ),
        )

    (bill,) = any_ledger.entries()
    assert bill["reservation_id"] != slot.id
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    replaced = any_ledger.latest_reservation(HOLDER)
    assert replaced is not None and replaced.id == trial.id
    assert any_ledger.reservation_to_settle(HOLDER) is None


def test_a_replaced_hold_says_so_and_a_release_leaves_it_as_it_is(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "total", "1")
    slot = any_ledger.reserve("project=churn", "0.0016", holder=HOLDER)
    trial = any_ledger.reserve("project=churn,study=s1", "0.5", holder=HOLDER, replacing=slot.id)

    assert any_ledger.release(slot.id).status == "replaced"
    assert any_ledger.reservation_to_settle(HOLDER) == trial
    (usage,) = any_ledger.usage("project=churn")
    assert usage.reserved_usd == Decimal("0.5")


def test_replacing_a_reservation_the_ledger_never_held_is_refused_naming_it(any_ledger: Ledger) -> None:
    # The docstring said an id gone already was nothing to do, and the ledger's bare "holds no reservation"
    # came out: an unknown id is refused, saying what to give instead, with nothing reserved.
    any_ledger.set_budget("project=churn", "total", "1")
    with pytest.raises(
        ReservationNotFoundError,
        match=rf"reservation '{'0' * 32}', which the new one of '{HOLDER}' would replace, is not in this "
        "ledger: give the id this ledger's reserve returned for that holder's hold, or reserve without "
        "replacing",
    ):
        any_ledger.reserve("project=churn", "0.1", holder=HOLDER, replacing="0" * 32)
    assert any_ledger.open_reservations() == []


def test_usage_without_a_reservation_the_ledger_never_held_is_refused_naming_it(any_ledger: Ledger) -> None:
    # A mistyped id was ignored: the budgets read with the hold still counted, while reserve(replacing=) with
    # the same id is refused.
    any_ledger.set_budget("project=churn", "total", "10")
    held = any_ledger.reserve("project=churn", "4", holder=HOLDER)
    typo = held.id[:-1]

    with pytest.raises(
        ReservationNotFoundError,
        match=rf"reservation '{typo}', to leave out of the usage of project=churn \(without=\), is not in "
        "this ledger: give the id this ledger's reserve returned, or leave without out",
    ):
        any_ledger.usage("project=churn", without=typo)
    (usage,) = any_ledger.usage("project=churn", without=held.id)
    assert (usage.left_usd, usage.reserved_usd) == (10, 0)
    any_ledger.release(held.id)
    (usage,) = any_ledger.usage("project=churn", without=held.id)  # closed, but this ledger's: read as asked
    assert usage.left_usd == 10


def test_replacing_a_hold_closed_already_reserves_as_asked(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "total", "1")
    slot = any_ledger.reserve("project=churn", "0.1", holder=HOLDER)
    any_ledger.release(slot.id)
    trial = any_ledger.reserve("project=churn", "0.5", holder=HOLDER, replacing=slot.id)
    assert any_ledger.open_reservations() == [trial]
    assert any_ledger.latest_reservation(HOLDER) == trial


def test_a_gates_hold_given_back_for_a_bigger_one_is_not_settled_when_the_bigger_one_lapsed(
    any_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A gate run again asking more (replace_unlike) gave its old hold back as "released": once the new hold
    # expired, the task's bill was settled against that old one, with an ERROR blaming a manual release.
    any_ledger.set_budget("project=churn", "total", "10")
    old = any_ledger.reserve("project=churn", "4", holder=HOLDER, run_id="r1", dag_id="tune")
    new = any_ledger.reserve(
        "project=churn", "6", holder=HOLDER, run_id="r1", dag_id="tune", ttl=timedelta(seconds=60),
        replace_unlike=True,
    )  # fmt: skip
    assert new.id != old.id
    _later(monkeypatch, 120)

    with caplog.at_level(logging.WARNING):
        record_and_settle(
            any_ledger,
            LedgerEntry(
                dag_id="tune", run_id="r1", task_id="trial", map_index=0, kind=Kind.COMPUTE, usd=Decimal("5"),
                tags={"project": "churn"},
            ),
        )  # fmt: skip

    (bill,) = any_ledger.entries()
    assert bill["reservation_id"] != old.id
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_settling_a_replaced_hold_records_the_cost_and_says_to_settle_the_hold_that_replaced_it(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Settled by id after the gate replaced it, the slot hold became 'settled' without a word: its money
    # was in the trial's hold, and the bill was linked to the wrong one.
    any_ledger.set_budget("project=churn", "total", "1")
    slot = any_ledger.reserve("project=churn", "0.0016", holder=HOLDER)
    trial = any_ledger.reserve("project=churn,study=s1", "0.5", holder=HOLDER, replacing=slot.id)
    bill = LedgerEntry(
        dag_id="tune", run_id="r1", task_id="trial", map_index=0, kind=Kind.COMPUTE, usd=Decimal("0.3"),
        tags={"project": "churn", "study": "s1"}, reservation_id=slot.id,
    )  # fmt: skip

    with caplog.at_level(logging.WARNING):
        settled = any_ledger.settle(slot.id, bill.usd, entry=bill)

    assert settled.status == "replaced"
    assert [e["entry_uid"] for e in any_ledger.entries()] == [bill.entry_uid]  # the money is kept
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"the hold {slot.id} of {HOLDER} was replaced by {trial.id}" in warning
    assert f"settle {trial.id} instead" in warning
    assert "(the entry given is recorded all the same)" in warning
    assert any_ledger.reservation_to_settle(HOLDER) == trial


def test_settling_a_replaced_hold_with_no_entry_says_the_budgets_count_nothing_of_it(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # settle(id, "3.95") alone counted the $3.95 nowhere without a word, and the warning it gave said "an
    # entry given is recorded all the same" where none was given.
    any_ledger.set_budget("project=churn", "month", "10")
    small = any_ledger.reserve("project=churn", "1", holder=HOLDER)
    any_ledger.reserve("project=churn", "4", holder=HOLDER, replacing=small.id)

    with caplog.at_level(logging.WARNING):
        assert any_ledger.settle(small.id, "3.95").status == "replaced"

    nothing_counted, replaced = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert nothing_counted.startswith(
        f"asked to settle the replaced hold {small.id} of {HOLDER} with $3.95 but no entry, and no entry was "
        "recorded with its reservation_id: the budgets count nothing of it"
    )
    assert f"the hold {small.id} of {HOLDER} was replaced by" in replaced
    assert "recorded" not in replaced
    assert any_ledger.entries() == []


def test_settling_a_replaced_hold_already_recorded_says_only_that_it_was_replaced(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    any_ledger.set_budget("project=churn", "month", "10")
    small = any_ledger.reserve("project=churn", "1", holder=HOLDER)
    any_ledger.reserve("project=churn", "4", holder=HOLDER, replacing=small.id)

    with caplog.at_level(logging.WARNING):
        any_ledger.settle(small.id, "3.95", already_recorded=True)

    (replaced,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"the hold {small.id} of {HOLDER} was replaced by" in replaced
    assert "recorded" not in replaced  # no entry was given: none "is recorded all the same"


def test_a_replaced_hold_whose_replacement_is_settled_names_no_later_hold_to_settle(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # The warning named the holder's newest hold whatever it was: here a later one that never held this
    # money, as the hold to settle "instead".
    any_ledger.set_budget("project=churn", "month", "10")
    first = any_ledger.reserve("project=churn", "1", holder=HOLDER)
    replacement = any_ledger.reserve("project=churn", "2", holder=HOLDER, replacing=first.id)
    any_ledger.settle(replacement.id, "0", already_recorded=True)
    later = any_ledger.reserve("project=churn", "3", holder=HOLDER)

    with caplog.at_level(logging.WARNING):
        any_ledger.settle(first.id, "1", already_recorded=True)

    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning == (
        f"the hold {first.id} of {HOLDER} was replaced by {replacement.id}, settled since: it stays "
        "replaced, not settled with $1.00, and no open hold holds its money now: there is none to settle "
        "for it"
    )
    assert later.id not in warning


def test_a_hold_replaced_twice_names_the_open_hold_its_money_went_to(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    any_ledger.set_budget("project=churn", "month", "10")
    first = any_ledger.reserve("project=churn", "1", holder=HOLDER)
    second = any_ledger.reserve("project=churn", "2", holder=HOLDER, replacing=first.id)
    third = any_ledger.reserve("project=churn", "3", holder=HOLDER, replacing=second.id)

    with caplog.at_level(logging.WARNING):
        any_ledger.settle(first.id, "1", already_recorded=True)

    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"the hold {first.id} of {HOLDER} was replaced by {third.id}, which holds its money" in warning
    assert f"settle {third.id} instead" in warning


def _open_hold_made_for(ledger: Ledger, holder: str, scope: str, usd: str) -> str:
    """An open hold of ``holder`` beside its other one: as two gates of one task in scopes no budget shares
    reserve at once on PostgreSQL (each locks only its own budgets, so neither sees the other's hold)."""
    from costaware.adapters.ledger import schema

    made = ledger.reserve(scope, usd)
    r = schema.reservations
    with ledger.transaction() as conn:
        conn.execute(r.update().where(r.c.id == made.id).values(holder=holder))
    return made.id


def test_a_holder_with_two_open_holds_keeps_the_one_that_holds_what_is_asked(any_ledger: Ledger) -> None:
    # reserve took whichever open hold the database returned first (no order): the team=ml one, not as
    # asked, was replaced by a second $5 hold in project=churn beside the one already there ($10 held).
    any_ledger.set_budget("project=churn", "month", "10")
    any_ledger.set_budget("team=ml", "month", "10")
    older = any_ledger.reserve("team=ml", "2", holder=HOLDER)
    newer = _open_hold_made_for(any_ledger, HOLDER, "project=churn", "5")

    kept = any_ledger.reserve("project=churn", "5", holder=HOLDER, replace_unlike=True)

    assert kept.id == newer
    assert sorted(r.id for r in any_ledger.open_reservations()) == sorted([older.id, newer])
    assert any_ledger.usage("project=churn")[0].reserved_usd == 5
    # Asked what neither holds: the oldest is replaced, as the gate's trigger weighs it.
    bigger = any_ledger.reserve("team=ml", "3", holder=HOLDER, replace_unlike=True)
    assert sorted(r.id for r in any_ledger.open_reservations()) == sorted([newer, bigger.id])


def _two_open_holds(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """Two open holds of HOLDER in scopes no budget shares, project=a's the older."""
    from costaware.adapters.ledger import reservations, schema

    ledger.set_budget("project=a", "month", "10")
    ledger.set_budget("project=b", "month", "10")
    older = ledger.reserve("project=a", "4", holder=HOLDER, run_id="r1")
    _later(monkeypatch, 60)
    newer = reservations.reserve(ledger, "project=b", "1", holder=HOLDER + "-other", run_id="r1")
    with ledger.transaction() as conn:  # made one after another, as PostgreSQL's race leaves them
        r = schema.reservations
        conn.execute(r.update().where(r.c.id == newer.id).values(holder=HOLDER))
    return older, newer


@pytest.mark.parametrize(("project", "settled"), [("a", "older"), ("b", "newer"), ("c", "older")])
def test_an_entry_settles_the_open_hold_of_its_holder_whose_scope_covers_it(
    any_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, project: str, settled: str
) -> None:
    # The newest open hold was taken: an entry of project=a settled project=b's hold, outside its scope, and
    # left project=a's held. A hold whose scope covers the entry comes first, then the oldest (as reserve).
    older, newer = _two_open_holds(any_ledger, monkeypatch)
    entry = LedgerEntry(
        dag_id="tune",
        run_id="r1",
        task_id="trial",
        map_index=0,
        kind=Kind.COMPUTE,
        usd=Decimal("3.5"),
        tags={"project": project},
    )
    record_and_settle(any_ledger, entry)
    holds = {"older": older.id, "newer": newer.id}
    still_open = {hold.id for hold in any_ledger.open_reservations()}
    assert holds[settled] not in still_open
    assert still_open == set(holds.values()) - {holds[settled]}


def test_every_ledger_module_that_tells_an_expired_hold_by_the_clock_is_one_the_tests_move() -> None:
    # A split (reservation_settle, reservation_freeing) left settle and release on the real clock while the
    # tests moved the others: a replaced hold expired meanwhile read as holding its money.
    import re
    from pathlib import Path

    import costaware.adapters.ledger as ledger_package

    reading_the_clock = {
        path.stem
        for path in Path(ledger_package.__file__).parent.glob("*.py")
        if "utcnow" in (text := path.read_text()) and re.search(r"expires_at|expired|held_in", text)
    }
    assert reading_the_clock - set(HOLD_CLOCK_MODULES) == set(), "add them to tests/support/clocks.py"
