"""`costaware budget release` gives back a hold only when Airflow says its task can bill no more.

Released while its task ran, the hold was settled by that task's cost after the money had gone to others:
a $5 budget read -$3.00 left. The metadata database here is a real SQLite one with Airflow's own tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow_db import airflow_metadata_db

from costaware import Ledger
from costaware.cli import main

HOLDER = "nightly/manual__1/train/-1"


def _held(ledger_url: str) -> Ledger:
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "5")
    ledger.reserve("project=x", "4", holder=HOLDER, run_id="manual__1", dag_id="nightly")
    return ledger


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ("running", "is running"),
        ("queued", "is queued"),
        ("deferred", "is deferred"),
        ("up_for_retry", "is up_for_retry"),
        (None, "is not started (its run is running)"),
    ],
)
def test_a_hold_whose_task_may_still_bill_is_kept_unless_forced(
    state: str | None,
    said: str,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put("nightly", "manual__1", "train", state)
    ledger = _held(ledger_url)
    argv = ["--ledger-url", ledger_url, "budget", "release", "--holder", HOLDER]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"hold of '{HOLDER}' not released: task 'train' (map index -1) of DAG 'nightly' run 'manual__1' "
        in err
    )
    assert said in err and "give --force" in err
    assert [r.holder for r in ledger.open_reservations()] == [HOLDER]
    # The task then bills $8: settled against the hold still open, the budget was never handed the money.
    assert main([*argv, "--force"]) == 0
    assert "released $4.00 held by" in capsys.readouterr().out
    assert ledger.open_reservations() == []
    assert main(["--ledger-url", ledger_url, "audit", "--action", "hold_release", "--format", "json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)
    assert line["details"]["forced"] is True


@pytest.mark.parametrize(
    ("state", "run_state"),
    [("success", "running"), ("failed", "failed"), ("skipped", "success"), (None, "failed")],
)
def test_a_hold_whose_task_has_ended_is_released(
    state: str | None,
    run_state: str,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put("nightly", "manual__1", "train", state, run_state=run_state)
    ledger = _held(ledger_url)
    assert main(["--ledger-url", ledger_url, "budget", "release", "--holder", HOLDER]) == 0
    assert "released $4.00 held by nightly/manual__1/train/-1 in project=x/month" in capsys.readouterr().out
    assert ledger.open_reservations() == []


def test_a_task_the_database_does_not_know_or_an_unreadable_database_needs_force(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put("other", "manual__1", "train", "success")
    ledger = _held(ledger_url)
    argv = ["--ledger-url", ledger_url, "budget", "release", "--holder", HOLDER]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "is not in Airflow's metadata database (nor is its run), so whether it may still bill" in err
    assert err.count("in Airflow's metadata database") == 1
    # No task or run to let end or mark failed: where to look instead, and --force.
    assert "mark it failed" not in err and "deployment's AIRFLOW_HOME" in err and "give --force once" in err
    # A metadata database never migrated (the AIRFLOW_HOME of a laptop, not the deployment's).
    from airflow import settings
    from sqlalchemy import create_engine
    from sqlalchemy.orm import scoped_session, sessionmaker

    bare = create_engine(f"sqlite:///{tmp_path / 'bare.db'}")
    monkeypatch.setattr(settings, "Session", scoped_session(sessionmaker(bind=bare)))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot read Airflow's metadata database to check that task 'train'" in err
    assert "no such table: task_instance" in err and "AIRFLOW_HOME" in err and "--force" in err
    assert len(ledger.open_reservations()) == 1
    assert main([*argv, "--force"]) == 0
    assert ledger.open_reservations() == []


def test_a_hold_naming_no_task_instance_is_released_unchecked(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow import settings

    monkeypatch.setattr(settings, "Session", None)  # no database at all: nothing is asked of it
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "5")
    anonymous = ledger.reserve("project=x", "2")
    assert main(["--ledger-url", ledger_url, "budget", "release", "--holder", anonymous.id]) == 0
    assert ledger.open_reservations() == []


def test_an_egress_hold_is_checked_as_its_task(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put("nightly", "manual__1", "copy", "running")
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "5")
    ledger.reserve("project=x", "1", holder="nightly/manual__1/copy/-1/egress", run_id="manual__1")
    argv = ["--ledger-url", ledger_url, "budget", "release", "--holder", "nightly/manual__1/copy/-1/egress"]
    assert main(argv) == 2
    assert "task 'copy' (map index -1) of DAG 'nightly' run 'manual__1' is running" in capsys.readouterr().err


@pytest.mark.parametrize("holder", ["search/manual__1/3/9", "search/1a2b3c4d/tail"])
def test_a_search_hold_is_not_read_as_a_task_and_needs_force(
    holder: str,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A rung's hold was read as task '3' (map index 9) of a DAG 'search' that does not exist.
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put("tune", "manual__1", "search", "success", run_state="success")
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "5")
    hold = ledger.reserve("project=x", "4", holder=holder, run_id="manual__1", dag_id="tune")
    argv = ["--ledger-url", ledger_url, "budget", "release", "--holder", holder]
    assert main(argv) == 2
    err = capsys.readouterr().err
    search = holder.split("/")[1]
    # The tail hold is no rung: it holds the search's time after its last one.
    what = "its bookkeeping after the last rung" if holder.endswith("/tail") else "a rung"
    assert f"hold of {holder!r} not released: it is {what} of budgeted_search {search!r}" in err
    assert f"expires by itself at {hold.expires_at:%Y-%m-%d %H:%M} UTC; give --force once the search" in err
    assert "DAG 'search'" not in err and "metadata database" not in err
    assert [r.holder for r in ledger.open_reservations()] == [holder]
    assert main([*argv, "--force"]) == 0
    assert ledger.open_reservations() == []


def test_a_dag_named_search_keeps_its_task_check() -> None:
    from costaware.adapters.airflow_tasks import TaskInstanceKey, search_of, task_instance_of

    assert search_of("search/manual__1/train/-1") is None
    assert task_instance_of("search/manual__1/train/-1") == TaskInstanceKey(
        "search", "manual__1", "train", -1
    )
    assert task_instance_of("search/manual__1/3/9") is None
    assert search_of("search/ab12cd34/3/9") == "ab12cd34"


@pytest.mark.parametrize(
    "holder",
    [
        "d/manual/2026-12-01/train/-1",
        "d/r/train/3/egress",
        "search/manual/2026-12-01/train/-1",  # a DAG named search
        "search/ab12cd34/3/9",
        "search/ab12cd34/tail",
        "search/manual/2026-12-01/tail",
    ],
)
def test_the_ledger_and_budget_release_read_a_holder_alike(holder: str) -> None:
    # Two parsers read holders: a search's rung was DAG 'search' to the ledger, a search's tail whose id
    # has a '/' was the search's run to the ledger but no search to `budget release`.
    from costaware.adapters.airflow_tasks import search_of, task_instance_of
    from costaware.core.ledger import holder_dag_id, holder_run_id

    search, task = search_of(holder), task_instance_of(holder)
    assert (search is None) is (task is not None), holder
    if task is not None:
        assert (holder_dag_id(holder), holder_run_id(holder)) == (task.dag_id, task.run_id)
    else:
        assert (holder_dag_id(holder), holder_run_id(holder)) == (None, search)


@pytest.mark.parametrize("run_id", ["nightly/", "a//b"])
def test_a_hold_of_a_run_id_with_an_empty_part_is_kept_while_its_task_runs(
    run_id: str,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Its holder ('d/nightly//train/-1') named no task instance: released unchecked while the task ran.
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put("d", run_id, "train", "running")
    holder = f"d/{run_id}/train/-1"
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "5")
    ledger.reserve("project=x", "4", holder=holder, run_id=run_id, dag_id="d")
    assert main(["--ledger-url", ledger_url, "budget", "holds", "--format", "json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert shown["holder_kind"] == "task"
    assert main(["--ledger-url", ledger_url, "budget", "release", "--holder", holder]) == 2
    err = capsys.readouterr().err
    assert f"task 'train' (map index -1) of DAG 'd' run {run_id!r} is running" in err
    assert [r.holder for r in ledger.open_reservations()] == [holder]


def test_each_budget_a_hold_is_in_is_told_what_it_gets_back(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A $4 hold in project=x and team=ml paid $1 by an entry tagged team=ml only (not project=x's spend):
    # project=x counts the whole $4 as reserved, team=ml $3. Both were told (and audited) $3 came back.
    from decimal import Decimal

    from costaware.core.ledger import Kind, LedgerEntry

    put = airflow_metadata_db(tmp_path, monkeypatch)
    put("nightly", "manual__1", "train", "failed", run_state="failed")
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "5")
    ledger.set_budget("team=ml", "month", "10")
    held = ledger.reserve("project=x,team=ml", "4", holder=HOLDER, run_id="manual__1", dag_id="nightly")
    ledger.record(
        LedgerEntry(
            "nightly", "manual__1", "train", Kind.COMPUTE, Decimal("1"), tags={"team": "ml"},
            reservation_id=held.id,
        )
    )  # fmt: skip
    reserved_before = {u.label: u.reserved_usd for u in ledger.usage("project=x,team=ml")}
    assert main(["--ledger-url", ledger_url, "budget", "release", "--holder", HOLDER]) == 0
    said = capsys.readouterr().out
    reserved_after = {u.label: u.reserved_usd for u in ledger.usage("project=x,team=ml")}
    back = {label: reserved_before[label] - reserved_after[label] for label in reserved_before}
    assert back == {"project=x/month": Decimal(4), "team=ml/month": Decimal(3)}
    assert "$4.00 back to project=x/month" in said and "$3.00 back to team=ml/month" in said
    assert main(["--ledger-url", ledger_url, "audit", "--action", "hold_release", "--format", "json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)
    by_budget = {k: Decimal(v) for k, v in line["details"]["usd_by_budget"].items()}
    assert by_budget == back


def test_a_hold_whose_holder_names_no_airflow_run_reports_its_per_run_budget_too(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A trial run outside Airflow with a run id: its holder 'my-search' names no run, so the run was read as
    # None and project=x/run (which the release gives $4 back too) was left out of the report and the audit.
    from decimal import Decimal

    from costaware.core.ledger import Kind, LedgerEntry

    ledger = Ledger.from_url(ledger_url)
    for scope, period in (("project=x", "month"), ("project=x", "run"), ("team=ml", "month")):
        ledger.set_budget(scope, period, "10")
    held = ledger.reserve("project=x,team=ml", "4", holder="my-search", run_id="r1", dag_id="d")
    ledger.record(
        LedgerEntry("d", "r1", "t", Kind.COMPUTE, Decimal("1"), tags={"team": "ml"}, reservation_id=held.id)
    )

    def reserved() -> dict[str, Decimal]:
        return {u.label: u.reserved_usd for u in ledger.usage("project=x,team=ml", run_id="r1", dag_id="d")}

    before = reserved()
    assert main(["--ledger-url", ledger_url, "budget", "release", "--holder", "my-search"]) == 0
    said = capsys.readouterr().out
    back = {label: usd - reserved()[label] for label, usd in before.items()}
    assert back == {"project=x/month": Decimal(4), "project=x/run": Decimal(4), "team=ml/month": Decimal(3)}
    assert "$4.00 back to project=x/run" in said
    assert main(["--ledger-url", ledger_url, "audit", "--action", "hold_release", "--format", "json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)
    assert {k: Decimal(v) for k, v in line["details"]["usd_by_budget"].items()} == back


ML, BOTH, OTHER = {"team": "ml"}, {"project": "x", "team": "ml"}, {"other": "z"}


@pytest.mark.parametrize(
    ("budgets", "paid", "said"),
    [
        # Only team=ml's entries paid it: project=x got the whole hold back, and the note after both amounts
        # said nothing was still reserved ("$4.00 was billed against its $4.00 hold").
        (
            ("project=x", "team=ml"),
            [(ML, "4")],
            "released the hold of my-search: $4.00 back to project=x/month, $0.00 back to team=ml/month "
            "(nothing was still reserved: entries of its scope paid the whole $4.00 hold, which stays spent)",
        ),
        (
            ("project=x", "team=ml"),
            [(ML, "1")],
            "released the hold of my-search: $4.00 back to project=x/month, $3.00 back to team=ml/month "
            "(the other $1.00 of the $4.00 hold was paid by entries of its scope and stays spent)",
        ),
        # One budget, none of whose entries paid it: "released $4.00 ... ($1.00 of its $4.00 hold was paid
        # from it and stays spent)".
        (("project=x",), [(ML, "1")], "released $4.00 held by my-search in project=x/month"),
        # The same back to both, $2.00 paid from it of which they count $1.00.
        (
            ("project=x", "team=ml"),
            [(BOTH, "1"), (OTHER, "1")],
            "released $3.00 held by my-search in project=x/month, team=ml/month (the other $1.00 of the "
            "$4.00 hold was paid by entries of their scopes and stays spent)",
        ),
    ],
)
def test_what_stays_spent_is_said_of_each_budget_as_it_counts_it(
    budgets: tuple[str, ...],
    paid: list[tuple[dict[str, str], str]],
    said: str,
    ledger_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from decimal import Decimal

    from costaware.core.ledger import Kind, LedgerEntry

    ledger = Ledger.from_url(ledger_url)
    for scope in budgets:
        ledger.set_budget(scope, "month", "10")
    held = ledger.reserve("project=x,team=ml", "4", holder="my-search")
    for tags, usd in paid:
        ledger.record(
            LedgerEntry("d", "r1", "t", Kind.COMPUTE, Decimal(usd), tags=tags, reservation_id=held.id)
        )
    assert main(["--ledger-url", ledger_url, "budget", "release", "--holder", "my-search"]) == 0
    assert capsys.readouterr().out.strip() == said


def _entry_paid_from(hold_id: str, usd: str) -> Any:
    from costaware.core.ledger import Kind, LedgerEntry

    return LedgerEntry(
        dag_id="nightly",
        run_id="manual__1",
        task_id="train",
        kind=Kind.COMPUTE,
        usd=Decimal(usd),
        tags={"project": "x"},
        reservation_id=hold_id,
    )


def _just_before_the_release(monkeypatch: pytest.MonkeyPatch, write: Callable[[], object]) -> None:
    """Run ``write`` (another process's) just before the first write after the holds are listed."""
    from costaware.adapters.ledger.engine import LedgerDatabase

    armed = [False]
    listed, real_transaction = Ledger.open_reservations, LedgerDatabase.transaction

    def listing(self: Ledger, **kwargs: Any) -> Any:
        armed[0] = True
        return listed(self, **kwargs)

    @contextmanager
    def transaction(self: LedgerDatabase) -> Iterator[Any]:
        if armed[0]:
            armed[0] = False
            write()
        with real_transaction(self) as conn:
            yield conn

    monkeypatch.setattr(Ledger, "open_reservations", listing)
    monkeypatch.setattr(LedgerDatabase, "transaction", transaction)


def test_release_says_what_it_freed_with_an_entry_paid_just_before_it(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each budget's figure was read before the release, in another transaction: an entry of $3 paid from
    # the $4 hold in between, the command said "released $4.00" and audited $4.00 where $1.00 came back.
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put("nightly", "manual__1", "train", "success", run_state="running")
    ledger = _held(ledger_url)
    (hold,) = ledger.open_reservations()
    other = Ledger.from_url(ledger_url)
    _just_before_the_release(monkeypatch, lambda: other.record(_entry_paid_from(hold.id, "3")))

    assert main(["--ledger-url", ledger_url, "budget", "release", "--holder", HOLDER]) == 0

    out = capsys.readouterr().out
    assert "released $1.00 held by nightly/manual__1/train/-1 in project=x/month" in out
    assert "$3.00 of its $4.00 hold was paid from it and stays spent" in out
    (usage,) = ledger.usage("project=x")
    assert (usage.spent_usd, usage.reserved_usd) == (Decimal(3), Decimal(0))
    assert main(["--ledger-url", ledger_url, "audit", "--action", "hold_release", "--format", "json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)
    assert (line["details"]["usd"], line["details"]["paid_usd"]) == ("1.000000", "3.000000")
    other.dispose()


def test_a_hold_released_elsewhere_just_before_is_said_so_and_not_audited_again(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The release took no compare-and-set: a hold the run's end released a moment before was said
    # "released $4.00" here, and audited as a release by hand that freed $4.00 again.
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put("nightly", "manual__1", "train", "success", run_state="running")
    ledger = _held(ledger_url)
    (hold,) = ledger.open_reservations()
    other = Ledger.from_url(ledger_url)
    _just_before_the_release(monkeypatch, lambda: other.release(hold.id))

    assert main(["--ledger-url", ledger_url, "budget", "release", "--holder", HOLDER]) == 0

    out = capsys.readouterr().out
    assert f"the hold of {HOLDER} was released meanwhile: nothing released" in out
    assert "released $" not in out
    assert main(["--ledger-url", ledger_url, "audit", "--action", "hold_release", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    other.dispose()
