"""``costaware spool show|drain``: cost entries the ledger could not take are written on demand, none lost."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from costaware import Ledger
from costaware.cli import main
from costaware.core.ledger import Kind, LedgerEntry, reservation_holder
from costaware.ledger_spool import STALE_CLAIM_SECONDS, spool_entry

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/ledger"


def _entry(task_id: str) -> LedgerEntry:
    return LedgerEntry(
        dag_id="retrain", run_id="run1", task_id=task_id, kind=Kind.COMPUTE, usd=Decimal("2"),
        tags={"project": "churn"},
    )  # fmt: skip


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine's spool, under its own AIRFLOW_HOME."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.delenv("AIRFLOW_CONN_COSTAWARE_LEDGER", raising=False)
    return tmp_path / "airflow" / "costaware" / "spool"


def test_drain_writes_what_waits_once_the_ledger_is_back_and_settles_holds(
    spool: Path,
    ledger: Ledger,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A pod per task (KubernetesExecutor) spooled rows that no later task on that machine would ever write.
    ledger.set_budget("project=churn", "month", "100")
    hold = ledger.reserve("project=churn", "60", holder=reservation_holder("retrain", "run1", "prep", -1))
    for task_id in ("prep", "train"):
        spool_entry(spool, _entry(task_id), "costaware_ledger", retrying=False)

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", UNREACHABLE)
    assert main(["spool", "drain"]) == 1
    out, err = capsys.readouterr()
    assert f"spool {spool}: 0 written, 2 still waiting, 0 refused" in out
    assert "ledger 'costaware_ledger' could not be written" in err
    assert len(list(spool.glob("*.json"))) == 2 and not list(spool.glob("*.claimed"))  # put back
    assert ledger.entries(dag_id="retrain") == []

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    assert main(["spool", "show"]) == 0
    shown = capsys.readouterr().out
    assert shown.count("waiting") == 2 and "prep" in shown and "train" in shown
    assert main(["spool", "drain", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["written"], summary["still_waiting"], summary["refused"]) == (2, 0, 0)
    assert sorted(r["task_id"] for r in ledger.entries(dag_id="retrain")) == ["prep", "train"]
    assert ledger.latest_reservation(hold.holder or "").status == "settled"  # type: ignore[union-attr]
    assert list(spool.iterdir()) == []
    assert main(["spool", "drain"]) == 0  # nothing left: nothing written twice
    assert "0 written, 0 still waiting" in capsys.readouterr().out
    assert len(ledger.entries(dag_id="retrain")) == 2


def test_drain_writes_each_entry_to_its_own_ledger_and_sets_aside_what_the_ledger_refuses(
    spool: Path,
    ledger: Ledger,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    team_url = f"sqlite:///{tmp_path / 'team.db'}"
    team = Ledger.from_url(team_url)
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    monkeypatch.setenv(
        "AIRFLOW_CONN_TEAM_LEDGER", json.dumps({"conn_type": "generic", "extra": {"url": team_url}})
    )
    spool_entry(spool, _entry("ours"), "costaware_ledger", retrying=False)
    spool_entry(spool, _entry("theirs"), "team_ledger", retrying=False)
    (spool / "0-bad.json").write_text(json.dumps({"entry": {"usd": "1"}}))  # no DAG, no task: refused
    # Claimed by a drain at work now (left to it), and by one killed 16 minutes ago (put back, written).
    working = spool / f"{_entry('w').entry_uid}.json.{int(time.time())}.{os.getpid()}.claimed"
    working.write_text(json.dumps({"entry": {"usd": "1"}}))
    dead = spool_entry(spool, _entry("dead"), "costaware_ledger", retrying=False)
    dead.rename(spool / f"{dead.name}.{int(time.time()) - STALE_CLAIM_SECONDS - 60}.4242.claimed")

    assert main(["spool", "drain"]) == 1
    out, err = capsys.readouterr()
    assert f"spool {spool}: 3 written, 1 still waiting, 1 refused" in out
    assert "1 entry that could not be written (unreadable, or refused by the ledger) is kept in" in err
    assert "claimed by another drain" in err
    assert sorted(r["task_id"] for r in ledger.entries(dag_id="retrain")) == ["dead", "ours"]
    assert [r["task_id"] for r in team.entries(dag_id="retrain")] == ["theirs"]
    assert [p.name for p in (spool / "refused").iterdir()] == ["0-bad.json"]
    assert list(spool.glob("*.claimed")) == [working]
    assert main(["spool", "show", "--format", "json"]) == 0
    states = {row["file"]: row["state"] for row in json.loads(capsys.readouterr().out)}
    assert states == {working.name: "claimed", "0-bad.json": "refused"}
    # Drained where it is mounted, the hints name that folder: a bare `spool show` lists this machine's.
    assert main(["spool", "drain", "--spool-dir", str(spool)]) == 1
    err = capsys.readouterr().err
    assert f"(`costaware spool show --spool-dir {spool}` lists them" in err
    assert f"run `costaware spool drain --spool-dir {spool}` again then" in err
    team.dispose()


def test_spool_commands_name_the_folder_given_by_its_absolute_path(
    spool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # './~/airflow/costaware/spool' (a folder named '~' here) was printed as 'spool ~/airflow/...': pathlib
    # drops the './', and the line named the home's spool, not the one drained.
    here = tmp_path / "cwd"
    given = here / "~" / "airflow" / "costaware" / "spool"
    given.mkdir(parents=True)
    monkeypatch.chdir(here)
    assert main(["spool", "drain", "--spool-dir", "./~/airflow/costaware/spool"]) == 0
    assert capsys.readouterr().out.startswith(f"spool {given}: 0 written")
    assert main(["spool", "show", "--spool-dir", "./~/airflow/costaware/spool"]) == 0
    assert capsys.readouterr().out.startswith(f"spool {given}: empty")


def test_spool_commands_refuse_a_folder_that_is_not_one_and_a_ledger_url(
    spool: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool_entry(spool, _entry("prep"), "costaware_ledger", retrying=False)
    assert main(["spool", "show", "--spool-dir", str(tmp_path / "nope")]) == 2
    assert f"--spool-dir '{tmp_path / 'nope'}' is not a folder" in capsys.readouterr().err
    # Written to a URL given here, an entry would count against budgets its task never held money in.
    assert main(["--ledger-url", f"sqlite:///{tmp_path / 'other.db'}", "spool", "drain"]) == 2
    assert "leave --ledger-url out" in capsys.readouterr().err
    assert len(list(spool.glob("*.json"))) == 1 and not (tmp_path / "other.db").exists()
    # A machine that never spooled anything: an empty spool, not an error.
    assert main(["spool", "show", "--spool-dir", str(tmp_path)]) == 0
    assert "empty, no cost entry waits" in capsys.readouterr().out


def test_drain_on_a_machine_without_the_workers_ledger_leaves_the_entries_waiting(
    spool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The hook falls back to a SQLite file under $AIRFLOW_HOME where no connection is set: run where the
    # workers' settings are not, the drain emptied the spool into a new ledger that no budget reads.
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_TEAM_LEDGER", raising=False)
    spool_entry(spool, _entry("ours"), "costaware_ledger", retrying=False)
    spool_entry(spool, _entry("theirs"), "team_ledger", retrying=False)
    assert main(["spool", "drain"]) == 1
    out, err = capsys.readouterr()
    assert "0 written, 2 still waiting, 0 refused" in out
    embedded = tmp_path / "airflow" / "costaware" / "ledger.db"
    assert f"no ledger at {embedded}: this machine does not see the workers' ledger" in err
    assert "the connection 'team_ledger' does not exist on this machine: set AIRFLOW_CONN_TEAM_LEDGER" in err
    assert not embedded.exists() and len(list(spool.glob("*.json"))) == 2


def test_drain_of_a_ledger_that_cannot_be_reached_names_no_option_the_command_refuses(
    spool: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The ledger's error said "Check the URL (--ledger-url, the 'costaware_ledger' connection or ...)" for
    # the connection 'team_ledger', inside the one command that refuses --ledger-url.
    monkeypatch.setenv(
        "AIRFLOW_CONN_TEAM_LEDGER", json.dumps({"conn_type": "generic", "extra": {"url": UNREACHABLE}})
    )
    spool_entry(spool, _entry("theirs"), "team_ledger", retrying=False)
    assert main(["spool", "drain"]) == 1
    err = capsys.readouterr().err
    assert "costaware: ledger 'team_ledger' could not be written (cannot reach the cost ledger at" in err
    where = "the ledger connection (ledger_conn_id, e.g. AIRFLOW_CONN_<ID>) or COSTAWARE_LEDGER_URL"
    assert f"Check the URL ({where})" in err
    assert "--ledger-url" not in err and "'costaware_ledger' connection" not in err
    assert len(list(spool.glob("*.json"))) == 1


def test_drain_says_a_file_that_is_no_entry_is_unreadable_not_refused_by_the_ledger(
    spool: Path,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A file cut short read "refused by the ledger (Expecting property name ...)": the ledger never saw it.
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    spool.mkdir(parents=True)
    (spool / "cut.json").write_text("{not json")
    assert main(["spool", "drain"]) == 1
    logged = caplog.text + capsys.readouterr().err
    assert "spooled cut.json is not a readable entry (Expecting property name" in logged
    assert "refused by the ledger (Expecting" not in logged
    assert [p.name for p in (spool / "refused").iterdir()] == ["cut.json"]


def test_a_metadata_database_that_cannot_be_read_refuses_a_drain_that_puts_back_a_stale_claim(
    tmp_path: Path,
) -> None:
    # A killed drain's claim, put back by this drain, was not among the connections asked up front: its
    # look-up failed mid-drain, the other ledger's entries were written, and the line said "nothing drained".
    from services import airflow_env, run_command

    home = tmp_path / "home"
    home.mkdir()
    (home / "airflow.db").write_bytes(b"")  # not migrated: the costaware_ledger connection cannot be read
    team_url = f"sqlite:///{tmp_path / 'team.db'}"
    team = Ledger.from_url(team_url)
    env = airflow_env(home, tmp_path / "dags", AIRFLOW_CONN_TEAM_LEDGER=team_url)
    spool = home / "costaware" / "spool"
    spool_entry(spool, _entry("prep"), "team_ledger", retrying=False)
    killed = spool_entry(spool, _entry("train"), "costaware_ledger", retrying=False)
    claimed_at = int(time.time()) - STALE_CLAIM_SECONDS - 60
    killed.rename(killed.with_name(f"{killed.name}.{claimed_at}.4242.claimed"))

    done = run_command(env, "costaware", "spool", "drain", timeout=120)
    assert done.returncode == 2, done.stderr
    assert "cannot read connection 'costaware_ledger' from Airflow's metadata database" in done.stderr
    assert "nothing drained" in done.stderr
    assert team.entries(dag_id="retrain") == []  # refused whole, as for a waiting entry of that ledger
    assert len(list(spool.glob("*.json"))) == 1 and len(list(spool.glob("*.claimed"))) == 1
    team.dispose()


def test_a_connection_first_seen_mid_drain_that_cannot_be_read_does_not_say_nothing_was_drained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An entry spooled after the drain asked its connections up front is looked up when its turn comes;
    # a failure there said "nothing drained" beside the entries just written.
    from airflow_db import airflow_metadata_db

    from costaware.cli.commands.spool import _kept_in_airflow_database
    from costaware.core.errors import CostawareError

    airflow_metadata_db(tmp_path, monkeypatch)  # a real database, without Airflow's connection table
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("AIRFLOW_CONN_LATE_LEDGER", raising=False)
    with pytest.raises(CostawareError) as up_front:
        _kept_in_airflow_database("late_ledger")
    assert "nothing drained" in str(up_front.value)
    with pytest.raises(CostawareError) as mid_drain:
        _kept_in_airflow_database("late_ledger", mid_drain=True)
    said = str(mid_drain.value)
    assert "cannot read connection 'late_ledger' from Airflow's metadata database" in said
    assert "nothing drained" not in said and "AIRFLOW_CONN_LATE_LEDGER" in said


def test_a_spool_dir_in_an_unknown_users_home_is_named_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Path.expanduser raised a bare RuntimeError ('Could not determine home directory.'), a traceback.
    assert main(["spool", "show", "--spool-dir", "~nosuchuser/spool"]) != 0
    err = capsys.readouterr().err
    assert (
        "--spool-dir '~nosuchuser/spool' starts with the home folder of user 'nosuchuser', whom this" in err
    )
    assert "Traceback" not in err and "RuntimeError" not in err


def test_drain_says_entries_the_ledger_had_already_apart_from_those_written(
    spool: Path,
    ledger: Ledger,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A spooled entry whose write had committed (its answer lost), or a spool file copied back: the ledger
    # keeps its own row, and the command said "1 written" of a bill it billed no more.
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    prep, train = _entry("prep"), _entry("train")
    assert ledger.record(prep)
    spool_entry(spool, prep, "costaware_ledger", retrying=False)
    spool_entry(spool, train, "costaware_ledger", retrying=False)
    assert main(["spool", "drain"]) == 0  # nothing left unwritten
    said = f"spool {spool}: 1 written, 0 still waiting, 0 refused, 1 already in the ledger: not written again"
    assert said in capsys.readouterr().out
    assert sorted(r["task_id"] for r in ledger.entries(dag_id="retrain")) == ["prep", "train"]
    spool_entry(spool, train, "costaware_ledger", retrying=False)  # copied back
    assert main(["spool", "drain", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["written"], summary["already_in_ledger"]) == (0, 1)


def test_drain_csv_adds_its_new_column_last_and_its_help_says_exactly_when_it_exits_1(
    spool: Path,
    ledger: Ledger,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # already_in_ledger went in between written and still_waiting: a script reading the row by position
    # read the duplicates as entries still waiting. The help said "exits 1 when any was not written",
    # though the entries the ledger had already, not written, exit 0.
    import csv

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    prep = _entry("prep")
    assert ledger.record(prep)
    spool_entry(spool, prep, "costaware_ledger", retrying=False)
    assert main(["spool", "drain", "--format", "csv"]) == 0
    header, row = csv.reader(capsys.readouterr().out.splitlines())
    before = ["spool", "also_drained", "written", "still_waiting", "refused", "billed_already", "unsure"]
    assert header == [*before, "unavailable_ledgers", "already_in_ledger"]
    assert (row[2], row[3], row[-1]) == ("0", "0", "1")
    with pytest.raises(SystemExit):
        main(["spool", "drain", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "exits 1 when any was not written" not in said
    assert (
        "exits 1 when any still waits, was refused by this drain or was kept for a person, else 0 (an entry "
        "in the ledger already, or a bill billed meanwhile, is not lost)."
    ) in said


def test_drain_says_how_many_bills_it_dropped_as_billed_meanwhile(
    spool: Path,
    ledger: Ledger,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A bill spooled while the ledger was down, billed meanwhile under another key (a kill's, by the job's
    # name): the drain dropped it, and the command said "0 written, 0 still waiting, 0 refused".
    from costaware.training.attempt_duplicates import DuplicateCheck
    from costaware.training.remote import attempt_key, attempt_uid

    identity = {"dag_id": "retrain", "run_id": "run1", "task_id": "train", "map_index": -1}
    billed = LedgerEntry(
        dag_id="retrain", run_id="run1", task_id="train", kind=Kind.COMPUTE, usd=Decimal("2"),
        quantity=Decimal("0.5"), tags={"project": "churn"},
        entry_uid=attempt_uid(attempt_key(identity, "j", legacy=True)),
    )  # fmt: skip
    ledger.record(billed)
    spooled = replace(billed, entry_uid=attempt_uid(attempt_key(identity, "j", 1000.0)))
    check = DuplicateCheck(
        entry_uid=spooled.entry_uid, quantity=str(spooled.quantity), job_id="j", ended_at=1000.0,
        billable_seconds=1800.0, instances=1, backend="batch", identity=identity, keyed_by_name=False,
    )  # fmt: skip
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    spool_entry(spool, spooled, "costaware_ledger", retrying=True, duplicate_check=check.to_json())
    assert main(["spool", "drain"]) == 0
    said = f"0 written, 0 still waiting, 0 refused, 1 already billed meanwhile: moved to {spool / 'billed'}"
    assert said in capsys.readouterr().out
    assert len(ledger.entries(dag_id="retrain")) == 1
    spool_entry(spool, spooled, "costaware_ledger", retrying=True, duplicate_check=check.to_json())
    assert main(["spool", "drain", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["billed_already"] == 1
    # Kept, not deleted: `spool show` lists it as billed, and no pending count includes it.
    assert main(["spool", "show", "--format", "json"]) == 0
    assert [row["state"] for row in json.loads(capsys.readouterr().out)] == ["billed"]
    # Its help says where those bills went.
    with pytest.raises(SystemExit):
        main(["spool", "drain", "--help"])
    assert "moved to billed/ in the spool" in " ".join(capsys.readouterr().out.split())


def test_drain_keeps_a_bill_for_a_person_where_a_row_of_the_job_gives_no_end(
    spool: Path,
    ledger: Ledger,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A row of the job's name written by a version whose notes gave no end: the drain took its writing for
    # its run's end, read a new try's bill of the same run hours later as a later run, and wrote the bill
    # too. Kept for a person now, and the command says so (exit 1: something waits on someone).
    from costaware.cli.pending import spooled_here, what_waits
    from costaware.training.attempt_duplicates import DuplicateCheck
    from costaware.training.remote import attempt_key, attempt_uid

    identity = {"dag_id": "retrain", "run_id": "run1", "task_id": "train", "map_index": -1}
    older = LedgerEntry(
        dag_id="retrain", run_id="run1", task_id="train", kind=Kind.COMPUTE, usd=Decimal("1"),
        quantity=Decimal("1"), unit="hour", price_source="remote:local", cause="success",
        note="attempt 1, job j on local, 3600.0 s billed: ok", tags={"project": "churn"},
        entry_uid=attempt_uid(attempt_key(identity, "j", 5000.0)),
    )  # fmt: skip
    ledger.record(older)
    spooled = replace(older, entry_uid=attempt_uid(attempt_key(identity, "j", legacy=True)), cause="killed")
    check = DuplicateCheck(
        entry_uid=spooled.entry_uid, quantity="0.5", job_id="j", ended_at=1000.0,
        billable_seconds=1800.0, instances=1, backend="local", identity=identity, keyed_by_name=True,
    )  # fmt: skip
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    spool_entry(spool, spooled, "costaware_ledger", retrying=False, duplicate_check=check.to_json())
    with caplog.at_level(logging.ERROR, logger="costaware.ledger_spool"):
        assert main(["spool", "drain"]) == 1
    said = "0 written, 0 still waiting, 0 refused, 1 kept for a person (a row of the job's name may bill"
    out = capsys.readouterr().out
    assert said in out and f"moved to {spool / 'unsure'}" in out
    assert [e["entry_uid"] for e in ledger.entries(dag_id="retrain")] == [older.entry_uid]
    kept = spool / "unsure" / f"{spooled.entry_uid}.json"
    # Not in billed/ beside bills that were billed: there `spool show` called it billed and no count saw it.
    assert kept.is_file() and not (spool / "billed").exists()
    assert f"Kept in {spool / 'unsure'}:" in caplog.text and f"move it back into {spool} and" in caplog.text
    assert main(["spool", "show", "--format", "json"]) == 0
    assert [row["state"] for row in json.loads(capsys.readouterr().out)] == ["unsure"]
    (counted,) = spooled_here(dag_id="retrain", run_id="run1")
    assert (counted.folder, counted.waiting, counted.unsure) == (spool, 0, 1)
    # What waits of the run names where its bill is kept.
    assert f"1 remote bill of it is kept for a person in {spool / 'unsure'}" in what_waits(
        ledger, "retrain", "run1"
    )
    # Marked and moved back as the log says, the next drain writes it.
    kept.write_text(json.dumps({**json.loads(kept.read_text()), "another_run": True}))
    kept.replace(spool / kept.name)
    assert main(["spool", "drain"]) == 0
    assert len(ledger.entries(dag_id="retrain")) == 2
    assert spooled_here(dag_id="retrain") == []


def test_drain_and_the_pending_count_see_an_earlier_releases_spool(
    spool: Path,
    tmp_path: Path,
    ledger: Ledger,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # An earlier release spooled under './~/airflow' (AIRFLOW_HOME='~/airflow' not expanded). The listener
    # drained that folder too, but `spool drain` and the CLI's count of what waits looked at the real
    # spool alone: its entries were never written by the command, nor counted.
    from costaware.cli.pending import spooled_here, what_waits

    earlier = tmp_path / "cwd" / "~" / "airflow" / "costaware" / "spool"
    monkeypatch.setenv("AIRFLOW_HOME", "~/airflow")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    spool_entry(earlier, _entry("old"), "costaware_ledger", retrying=False)
    monkeypatch.chdir(tmp_path / "cwd")
    spool = tmp_path / "home" / "airflow" / "costaware" / "spool"
    spool_entry(spool, _entry("new"), "costaware_ledger", retrying=False)
    # Counted per folder, each named: summed under the current folder's name, an entry was said to wait
    # in it while `spool show` of it found it empty.
    counts = spooled_here(dag_id="retrain")
    assert [(c.folder, c.waiting, c.earlier) for c in counts] == [(spool, 1, False), (earlier, 1, True)]
    said = what_waits(ledger, "retrain", None)
    assert (
        f"2 cost entries of it wait in the spools {spool} (1) and an earlier release's {earlier} (1) ("
        in said
    )
    # `spool show` lists the earlier folder's entry too, by its whole path.
    assert main(["spool", "show", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(row["file"], row["task_id"]) for row in listed] == [
        (next(spool.glob("*.json")).name, "new"),
        (str(next(earlier.glob("*.json"))), "old"),
    ]
    # A bill billed meanwhile found in the earlier folder goes to that folder's billed/, and is said so.
    _spool_billed_meanwhile(earlier, ledger)
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    assert main(["spool", "drain"]) == 0
    assert f"1 already billed meanwhile: moved to {earlier / 'billed'}" in capsys.readouterr().out
    assert sorted(r["task_id"] for r in ledger.entries(dag_id="retrain") if r["task_id"] != "train") == [
        "new",
        "old",
    ]
    assert spooled_here(dag_id="retrain") == []
    assert main(["spool", "show", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["state"], Path(row["file"]).parent) == ("billed", earlier / "billed")


def _spool_billed_meanwhile(folder: Path, ledger: Ledger) -> None:
    """Spool in ``folder`` a remote bill that ``ledger`` already has under its job's name (a kill's key)."""
    from costaware.training.attempt_duplicates import DuplicateCheck
    from costaware.training.remote import attempt_key, attempt_uid

    identity = {"dag_id": "retrain", "run_id": "run1", "task_id": "train", "map_index": -1}
    billed = LedgerEntry(
        dag_id="retrain", run_id="run1", task_id="train", kind=Kind.COMPUTE, usd=Decimal("2"),
        quantity=Decimal("0.5"), tags={"project": "churn"},
        entry_uid=attempt_uid(attempt_key(identity, "j", legacy=True)),
    )  # fmt: skip
    ledger.record(billed)
    spooled = replace(billed, entry_uid=attempt_uid(attempt_key(identity, "j", 1000.0)))
    check = DuplicateCheck(
        entry_uid=spooled.entry_uid, quantity=str(spooled.quantity), job_id="j", ended_at=1000.0,
        billable_seconds=1800.0, instances=1, backend="batch", identity=identity, keyed_by_name=False,
    )  # fmt: skip
    spool_entry(folder, spooled, "costaware_ledger", retrying=True, duplicate_check=check.to_json())


def test_drop_removes_a_kept_bill_and_releases_its_hold_and_names_a_bad_uid(
    spool: Path,
    ledger: Ledger,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A kept bill a person found billed already was deleted by hand, and its hold (held in its budgets while
    # it was kept) stayed held for 30 days: there was no command for it.
    from costaware.ledger_spool import keep_unsure
    from costaware.spool_settle import unsure_holder

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger.set_budget("project=churn", "month", "10")
    bill = replace(_entry("train"), entry_uid="attempt-kept")
    row = {"entry_uid": "older", "usd": "2", "incurred_at": "2026-12-01T00:00:00+00:00", "try_number": 1}
    with caplog.at_level(logging.ERROR, logger="costaware.ledger_spool"):
        kept = keep_unsure(bill, "costaware_ledger", {"job_id": "j"}, row, ledger=ledger)
    assert kept.path is not None and kept.hold is not None
    # Its ERROR names the command, not "delete the file" (which left the hold held).
    assert "if it bills this run, run `costaware spool drop attempt-kept`" in caplog.text
    # `spool show` says each kept bill's hold: this one's, and none for one kept while no ledger answered.
    unheld = replace(_entry("train"), entry_uid="attempt-unheld", usd=Decimal("3"))
    keep_unsure(unheld, "costaware_ledger", {"job_id": "j"}, row)
    assert main(["spool", "show", "--format", "json"]) == 0
    holds = {r["file"]: r["hold"] for r in json.loads(capsys.readouterr().out)}
    assert holds == {"attempt-kept.json": "held $2.00", "attempt-unheld.json": "none"}
    (spool / "unsure" / "attempt-unheld.json").unlink()
    # A bad uid: an error naming it and the command that lists the kept bills; nothing removed.
    assert main(["spool", "drop", "no-such-bill"]) == 2
    err = capsys.readouterr().err
    assert "no bill 'no-such-bill' is kept in" in err and "`costaware spool show`" in err
    assert kept.path.is_file() and ledger.open_holds_of(unsure_holder(bill)) == [kept.hold]
    assert main(["spool", "drop", "attempt-kept"]) == 0
    out = capsys.readouterr().out
    assert (
        f"dropped {kept.path} (entry attempt-kept, $2.00, not written): released its hold {kept.hold.id}"
        in out
    )
    assert not kept.path.exists() and ledger.open_holds_of(unsure_holder(bill)) == []
    (usage,) = ledger.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd) == (Decimal(0), Decimal(0))


def test_a_kept_bill_dropped_as_its_hold_is_taken_leaves_no_hold(
    spool: Path, ledger: Ledger, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # keep_unsure said "run `costaware spool drop <uid>`" before it took the hold: a drop in between found
    # no hold, removed the file, and the hold taken just after stayed 30 days with no file.
    from costaware import ledger_spool
    from costaware.ledger_spool import keep_unsure
    from costaware.spool_settle import unsure_holder

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger.set_budget("project=churn", "month", "10")
    hold_unsure = ledger_spool.hold_unsure

    def dropped_first(held_in: Any, entry: Any) -> Any:
        assert main(["spool", "drop", entry.entry_uid]) == 0
        return hold_unsure(held_in, entry)

    monkeypatch.setattr(ledger_spool, "hold_unsure", dropped_first)
    bill = replace(_entry("train"), entry_uid="attempt-raced")
    row = {"entry_uid": "older", "usd": "2", "incurred_at": "2026-12-01T00:00:00+00:00", "try_number": 1}
    kept = keep_unsure(bill, "costaware_ledger", {"job_id": "j"}, row, ledger=ledger)
    assert kept.path is not None and not kept.path.exists() and kept.hold is None
    assert ledger.open_holds_of(unsure_holder(bill)) == []
    (usage,) = ledger.usage("project=churn")
    assert usage.reserved_usd == Decimal(0)


def test_a_hold_kept_for_a_bill_between_drops_read_and_its_unlink_is_released(
    spool: Path,
    ledger: Ledger,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # drop read the holds and released them, then removed the file; the keeper takes its hold, then looks
    # for the file. Both of the keeper's steps between drop's read and its unlink: nobody released the hold
    # (held 30 days, no file). drop reads the holds again once the file is gone.
    from costaware import ledger_spool
    from costaware.ledger_spool import keep_unsure
    from costaware.spool_settle import unsure_holder

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger.set_budget("project=churn", "month", "10")
    bill = replace(_entry("train"), entry_uid="attempt-raced")
    row = {"entry_uid": "older", "usd": "2", "incurred_at": "2026-12-01T00:00:00+00:00", "try_number": 1}
    kept = keep_unsure(bill, "costaware_ledger", {"job_id": "j"}, row)  # no ledger answered: no hold yet
    assert kept.path is not None and kept.hold is None
    kept_path = kept.path
    open_holds_of = Ledger.open_holds_of
    keeper_holds: list[Any] = []

    def keeper_holds_after_drops_read(self: Ledger, holder: str) -> Any:
        held = open_holds_of(self, holder)
        if not keeper_holds:  # the keeper's hold-and-check, between drop's read and its unlink
            keeper_holds.append(ledger_spool._hold_while_kept(ledger, bill, kept_path))
        return held

    monkeypatch.setattr(Ledger, "open_holds_of", keeper_holds_after_drops_read)
    assert main(["spool", "drop", "attempt-raced"]) == 0
    out = capsys.readouterr().out

    (hold,) = keeper_holds
    assert hold is not None  # the file was there as the keeper looked: it kept its hold
    assert not kept_path.exists()
    assert open_holds_of(ledger, unsure_holder(bill)) == []
    assert f"released its hold {hold.id} ($2.00)" in out
    (usage,) = ledger.usage("project=churn")
    assert usage.reserved_usd == Decimal(0)


def test_a_bill_kept_again_just_after_drop_removed_its_file_keeps_its_new_hold(
    spool: Path,
    ledger: Ledger,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # drop's second read of the holds released every hold of the bill's holder; a later try that kept the same
    # bill again right after the unlink (file written, hold taken, file seen) lost its new hold: a kept file
    # that no budget counted, and drop said it had released it.
    from costaware import ledger_spool
    from costaware.ledger_spool import keep_unsure
    from costaware.spool_settle import unsure_holder

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger.set_budget("project=churn", "month", "10")
    bill = replace(_entry("train"), entry_uid="attempt-raced")
    row = {"entry_uid": "older", "usd": "2", "incurred_at": "2026-12-01T00:00:00+00:00", "try_number": 1}
    kept = keep_unsure(bill, "costaware_ledger", {"job_id": "j"}, row)  # no ledger answered: no hold yet
    assert kept.path is not None
    kept_path = kept.path
    content = kept_path.read_bytes()
    unlink = Path.unlink
    keeper_holds: list[Any] = []

    def unlink_then_kept_again(self: Path, missing_ok: bool = False) -> None:
        unlink(self, missing_ok=missing_ok)
        if self == kept_path and not keeper_holds:  # a later try keeps the same bill again at once
            kept_path.write_bytes(content)
            keeper_holds.append(ledger_spool._hold_while_kept(ledger, bill, kept_path))

    monkeypatch.setattr(Path, "unlink", unlink_then_kept_again)
    assert main(["spool", "drop", "attempt-raced"]) == 0
    out = capsys.readouterr().out

    (hold,) = keeper_holds
    assert hold is not None and kept_path.exists()
    # the new keep's hold, still held
    assert [h.id for h in ledger.open_holds_of(unsure_holder(bill))] == [hold.id]
    assert hold.id not in out
    (usage,) = ledger.usage("project=churn")
    assert usage.reserved_usd == Decimal(2)


def test_drop_says_where_the_ledger_stops_answering_before_it_reads_the_holds_again(
    spool: Path,
    ledger: Ledger,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The file removed and its hold released, the second read of the holds (one taken meanwhile) cannot be
    # made: drop says what it did and where such a hold is listed, not a raw ledger error.
    from costaware.core.errors import LedgerUnavailableError
    from costaware.ledger_spool import keep_unsure

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger.set_budget("project=churn", "month", "10")
    bill = replace(_entry("train"), entry_uid="attempt-kept")
    row = {"entry_uid": "older", "usd": "2", "incurred_at": "2026-12-01T00:00:00+00:00", "try_number": 1}
    kept = keep_unsure(bill, "costaware_ledger", {"job_id": "j"}, row, ledger=ledger)
    assert kept.path is not None and kept.hold is not None
    open_holds_of = Ledger.open_holds_of
    reads: list[str] = []

    def down_at_the_second_read(self: Ledger, holder: str) -> Any:
        reads.append(holder)
        if len(reads) > 1:
            raise LedgerUnavailableError("cannot reach the cost ledger (connection refused)")
        return open_holds_of(self, holder)

    monkeypatch.setattr(Ledger, "open_holds_of", down_at_the_second_read)
    assert main(["spool", "drop", "attempt-kept"]) == 2
    err = capsys.readouterr().err

    assert (
        f"attempt-kept: released its hold {kept.hold.id} ($2.00) and removed {kept.path}, but the ledger "
        "stopped answering before a hold taken for it as it was dropped could be looked for (cannot reach"
    ) in err
    assert "`costaware budget holds` lists such a hold" in err and "Traceback" not in err
    assert not kept.path.exists()
    (usage,) = ledger.usage("project=churn")
    assert usage.reserved_usd == Decimal(0)


def test_drop_says_nothing_is_dropped_while_the_ledger_is_down_and_a_file_it_cannot_remove(
    spool: Path,
    ledger: Ledger,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The ledger down: the generic "cannot reach the cost ledger ... nothing was recorded or reserved", not
    # what a drop did or what to do. The file not removable once its hold was released: a raw traceback.
    from costaware.ledger_spool import keep_unsure
    from costaware.spool_settle import unsure_holder

    ledger.set_budget("project=churn", "month", "10")
    bill = replace(_entry("train"), entry_uid="attempt-kept")
    row = {"entry_uid": "older", "usd": "2", "incurred_at": "2026-12-01T00:00:00+00:00", "try_number": 1}
    kept = keep_unsure(bill, "costaware_ledger", {"job_id": "j"}, row, ledger=ledger)
    assert kept.path is not None and kept.hold is not None
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", UNREACHABLE)
    assert main(["spool", "drop", "attempt-kept"]) == 2
    err = capsys.readouterr().err
    assert (
        f"nothing dropped: attempt-kept is kept in {kept.path}; run `costaware spool drop attempt-kept` again"
        in err
    )
    assert "once the ledger answers (" in err
    assert kept.path.is_file() and ledger.open_holds_of(unsure_holder(bill)) == [kept.hold]
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)

    def read_only(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", read_only)
    assert main(["spool", "drop", "attempt-kept"]) == 2
    err = capsys.readouterr().err
    assert (
        f"attempt-kept: released its hold {kept.hold.id} ($2.00), but {kept.path} could not be removed "
        "(Permission denied): the file stays; remove it by hand" in err
    )
    assert "Traceback" not in err
    assert kept.path.is_file() and ledger.open_holds_of(unsure_holder(bill)) == []
