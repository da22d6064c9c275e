"""The costaware command against a real SQLite ledger."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from airflow_db import airflow_metadata_db

from costaware import Ledger
from costaware.adapters.ledger.audit import audit_log
from costaware.cli import main
from costaware.core.ledger import Kind, LedgerEntry


def test_report_splits_preemption_from_other_failures(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger.from_url(ledger_url)
    for try_number, outcome, cause in (
        (1, "failed", "preemption"),
        (2, "failed", "error"),
        (3, "success", ""),
    ):
        ledger.record(
            LedgerEntry(
                dag_id="d",
                run_id="r",
                task_id="train",
                kind=Kind.COMPUTE,
                usd=Decimal("1"),
                try_number=try_number,
                outcome=outcome,
                cause=cause,
            )
        )
    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "d"]) == 0
    out = capsys.readouterr().out
    assert "failed tries: 1 after a spot preemption, 1 after other errors" in out
    assert main(["--ledger-url", ledger_url, "report", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["failed_tries"] == {"preemption": 1, "other": 1}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_try_is_counted_once_however_many_failed_entries_it_has(
    backend: str, ledger_url: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    # A remote training's failed attempt (code_error) and the worker's own time in the same try (error):
    # one failed try, not two. Its preempted attempts before are "interrupted": no failed try, no minus.
    from services import fresh_postgres_database

    url = (
        ledger_url
        if backend == "sqlite"
        else fresh_postgres_database(request.getfixturevalue("postgres_url"))
    )
    ledger = Ledger.from_url(url)
    rows = [
        ("interrupted", "preemption"),
        ("interrupted", "preemption"),
        ("failed", "code_error"),
        ("failed", "error"),
    ]
    for n, (outcome, cause) in enumerate(rows):
        ledger.record(
            LedgerEntry(dag_id="d", run_id="r", task_id="train", kind=Kind.COMPUTE, usd=Decimal("1"),
                        try_number=1, outcome=outcome, cause=cause, note=f"entry {n}")
        )  # fmt: skip
    assert main(["--ledger-url", url, "report", "--dag-id", "d", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["failed_tries"] == {"preemption": 0, "other": 1}
    assert main(["--ledger-url", url, "report", "--dag-id", "d"]) == 0
    assert "failed tries: 0 after a spot preemption, 1 after other errors" in capsys.readouterr().out
    ledger.dispose()


#: ``costaware budget set`` of one budget, less its cap.
SET_BUDGET = ["budget", "set", "--scope", "project=x", "--period", "month"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*SET_BUDGET, "--cap-usd", "-1"], "zero or more"),
        ([*SET_BUDGET, "--cap-usd", "nan"], "finite"),
        (["budget", "set", "--scope", "project", "--period", "month", "--cap-usd", "1"], "not key=value"),
        (["report", "--group-by", "week"], "cannot group by 'week'"),
        (["report", "--last-run"], "--last-run needs --dag-id"),
        # --run-id was silently ignored.
        (
            ["report", "--dag-id", "d", "--last-run", "--run-id", "r1"],
            "--last-run and --run-id 'r1' both name",
        ),
        (["prices", "show", "m5.lrage"], "did you mean m5.large"),
        # Matched without case; a region far from all listed the regions, not `prices list` (types only).
        (["prices", "show", "M5.LARGE"], "did you mean m5.large"),
        (["prices", "show", "m5.large", "--region", "US-EAST-1"], "did you mean us-east-1"),
        (["prices", "show", "m5.large", "--region", "mars-1"], "the regions are af-south-1, ap-east-1"),
        (["prices", "show", "m5.large", "--service", "sagemaker"], "named with 'ml.', e.g. 'ml.m5.large'"),
        # A decimal comma read as a thousands separator set $255 (25,5) and $123 (1,2,3) before.
        ([*SET_BUDGET, "--cap-usd", "25,5"], "write a decimal point"),
        ([*SET_BUDGET, "--cap-usd", "1,2,3"], "a comma may only group thousands"),
        # Rounded to a $0 cap (blocks everything) before; the next two were tracebacks.
        ([*SET_BUDGET, "--cap-usd", "0.0000001"], "stored as $0"),
        ([*SET_BUDGET, "--cap-usd", "1e308"], "is more than the ledger can store"),
        ([*SET_BUDGET, "--cap-usd", "99999999999999999999"], "is more than the ledger can store"),
        ([*SET_BUDGET, "--cap-usd", "5", "--cap-gpu-hours", "-1"], "GPU-hours >= 0 and at most 9,223,372"),
        (["report", "--since", "2026-12-01", "--until", "2026-11-01"], "is not before --until"),
        (
            ["report", "--since", "2026-11-01", "--until", "2026-11-01"],
            "the range is empty: --until is exclusive",
        ),
        (
            ["cache", "evict", "--max-age-days", "-1"],
            "--max-age-days must be more than 0 and at most 36500, got -1",
        ),
        (
            ["cache", "evict", "--max-total-gb", "inf"],
            "--max-total-gb must be a finite number, 0 or more and at most",
        ),  # traceback
        (["cache", "gc", "--older-than-minutes", "-5"], "--older-than-minutes must be 0 or more"),
        (["runs", "list", "--limit", "0"], "--limit must be 1 or more, got 0"),  # said "no outcomes yet"
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(
    ledger_url: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    Ledger.from_url(ledger_url).dispose()  # an empty ledger: the bad input, not its absence, is refused
    assert main(["--ledger-url", ledger_url, *argv]) == 2
    assert message in capsys.readouterr().err
    assert Ledger.from_url(ledger_url).budgets() == []


def test_budget_round_trip(ledger_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "--ledger-url",
                ledger_url,
                "budget",
                "set",
                "--scope",
                "project=x",
                "--period",
                "month",
                "--cap-usd",
                "100",
                "--timezone",
                "Europe/Berlin",
            ]
        )
        == 0
    )
    assert (
        main(["--ledger-url", ledger_url, "budget", "show", "--scope", "project=x", "--format", "json"]) == 0
    )
    out = capsys.readouterr().out
    (usage,) = json.loads(out[out.index("[") :])
    assert usage["cap_usd"] == "100.000000" and usage["left_usd"] == "100.000000"
    # CSV cells are plain numbers: the forecast was one "$0.00 ($0.00-$0.00)" cell.
    argv = ["--ledger-url", ledger_url, "budget", "show", "--scope", "project=x", "--no-schedule"]
    assert main([*argv, "--format", "csv"]) == 0
    header, row = capsys.readouterr().out.splitlines()[-2:]
    assert header == (
        "budget,cap,spent,reserved,left,forecast,forecast low,forecast high,"
        "GPU-hour cap,GPU-hours spent,GPU-hours reserved"
    )
    assert row.split(",")[1:] == [
        *("100.00", "0.00", "0.00", "100.00", "0.000000", "0.000000", "0.000000"),
        *("", "0", "0"),  # no GPU-hour cap: its columns are there all the same
    ]


def test_the_workers_ledger_connection_is_the_clis_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The compose file gives the workers AIRFLOW_CONN_COSTAWARE_LEDGER only: a budget the CLI set went to a
    # SQLite file of its own that no worker read. The connection wins over COSTAWARE_LEDGER_URL, as in
    # CostLedgerHook.
    shared = tmp_path / "shared.db"
    connection = {"conn_type": "costaware_ledger", "extra": {"url": f"sqlite:///{shared}"}}
    monkeypatch.setenv("AIRFLOW_CONN_COSTAWARE_LEDGER", json.dumps(connection))
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{tmp_path / 'other.db'}")
    assert main(["budget", "set", "--scope", "project=x", "--period", "month", "--cap-usd", "100"]) == 0
    assert [b.label for b in Ledger.from_url(f"sqlite:///{shared}").budgets()] == ["project=x/month"]
    assert not (tmp_path / "other.db").exists()


def test_a_ledger_connection_kept_in_airflows_metadata_database_is_the_clis_default(tmp_path: Path) -> None:
    # `airflow connections add costaware_ledger` (or the UI) keeps it in the metadata database, which the
    # workers read: `costaware budget set` wrote its budget to COSTAWARE_LEDGER_URL's file instead, and the
    # gate then found no budget.
    from services import migrated_airflow_env, run_command

    shared = tmp_path / "shared.db"
    env = migrated_airflow_env(tmp_path / "home", tmp_path / "dags")
    added = run_command(
        env, "airflow", "connections", "add", "costaware_ledger", "--conn-uri", f"sqlite:///{shared}"
    )
    assert added.returncode == 0, added.stderr
    done = run_command(
        env, "costaware", "budget", "set", "--scope", "project=x", "--period", "month", "--cap-usd", "100"
    )
    assert done.returncode == 0, done.stderr
    assert [b.label for b in Ledger.from_url(f"sqlite:///{shared}").budgets()] == ["project=x/month"]
    assert not Path(env["COSTAWARE_LEDGER_URL"].removeprefix("sqlite:///")).exists()
    # Airflow's import turned its INFO logging on: the new ledger's migration steps and the budget were
    # logged as `[info]` lines, which the same command without that database does not write.
    assert "info" not in done.stderr.lower(), done.stderr
    # A drain wrote the workers' spooled entries to COSTAWARE_LEDGER_URL's (or the SQLite) file instead.
    from costaware.ledger_spool import spool_entry

    entry = LedgerEntry(dag_id="nightly", run_id="r1", task_id="t", kind=Kind.COMPUTE, usd=Decimal("7"))
    spool_entry(tmp_path / "home" / "costaware" / "spool", entry, "costaware_ledger", retrying=False)
    drained = run_command(env, "costaware", "spool", "drain")
    assert drained.returncode == 0, drained.stderr
    assert "1 written, 0 still waiting" in drained.stdout
    assert [e["dag_id"] for e in Ledger.from_url(f"sqlite:///{shared}").entries()] == ["nightly"]
    assert not Path(env["COSTAWARE_LEDGER_URL"].removeprefix("sqlite:///")).exists()
    # --ledger-url still wins.
    other = tmp_path / "other.db"
    done = run_command(
        env,
        "costaware",
        "--ledger-url",
        f"sqlite:///{other}",
        "budget",
        "set",
        "--scope",
        "project=y",
        "--period",
        "month",
        "--cap-usd",
        "5",
    )
    assert done.returncode == 0, done.stderr
    assert [b.label for b in Ledger.from_url(f"sqlite:///{other}").budgets()] == ["project=y/month"]


def test_a_secrets_backend_is_asked_for_the_ledger_connection_where_airflow_home_has_no_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With no airflow.db in AIRFLOW_HOME nothing was asked, though a Vault-like backend kept the connection
    # the workers read: the budget went to the fallback ledger.
    from costaware.cli.arguments import _airflow_cfg, _airflow_database_may_exist

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    for name in ("AIRFLOW__SECRETS__BACKEND", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        monkeypatch.delenv(name, raising=False)
    assert not _airflow_database_may_exist(_airflow_cfg())
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND", "team.secrets.Vault")
    assert _airflow_database_may_exist(_airflow_cfg())
    monkeypatch.delenv("AIRFLOW__SECRETS__BACKEND")
    (tmp_path / "airflow.cfg").write_text("[secrets]\nbackend = team.secrets.Vault\n")
    assert _airflow_database_may_exist(_airflow_cfg())


def test_an_airflow_metadata_database_that_cannot_be_read_refuses_writes_and_is_warned_of_by_reads(
    tmp_path: Path,
) -> None:
    # An unmigrated (empty) airflow.db: Airflow's look-up logged that failure at debug level and answered
    # "no such connection", so budget set (and spool drain) wrote COSTAWARE_LEDGER_URL's ledger without a
    # word, where the workers' costaware_ledger connection may name another.
    from services import airflow_env, run_command

    from costaware.ledger_spool import spool_entry

    home = tmp_path / "home"
    home.mkdir()
    (home / "airflow.db").write_bytes(b"")
    env = airflow_env(home, tmp_path / "dags")
    fallback_url = env["COSTAWARE_LEDGER_URL"]
    # Named, the database that could not be read: a user with several AIRFLOW_HOMEs was left to guess.
    unreadable = (
        "cannot read connection 'costaware_ledger' from Airflow's metadata database at "
        f"sqlite:///{home / 'airflow.db'} (no such table"
    )
    budget_set = ["budget", "set", "--scope", "project=x", "--period", "month", "--cap-usd", "7"]

    refused = run_command(env, "costaware", *budget_set)
    assert refused.returncode == 2, refused.stderr
    assert unreadable in refused.stderr
    assert "`airflow db migrate`" in refused.stderr and "give --ledger-url" in refused.stderr
    assert not Path(fallback_url.removeprefix("sqlite:///")).exists()

    # --ledger-url asks no database; a command that only reads says it and reads the fallback.
    done = run_command(env, "costaware", "--ledger-url", fallback_url, *budget_set)
    assert done.returncode == 0, done.stderr
    listed = run_command(env, "costaware", "budget", "list")
    assert listed.returncode == 0, listed.stderr
    assert "project=x" in listed.stdout
    assert f"costaware: warning: {unreadable}" in listed.stderr

    spool = home / "costaware" / "spool"
    entry = LedgerEntry(dag_id="nightly", run_id="r1", task_id="t", kind=Kind.COMPUTE, usd=Decimal("7"))
    spool_entry(spool, entry, "costaware_ledger", retrying=False)
    drained = run_command(env, "costaware", "spool", "drain")
    assert drained.returncode == 2, drained.stderr
    assert unreadable in drained.stderr and "nothing drained" in drained.stderr
    assert "AIRFLOW_CONN_COSTAWARE_LEDGER" in drained.stderr
    assert Ledger.from_url(fallback_url).entries() == []
    assert len(list(spool.glob("*.json"))) == 1  # still waiting, unclaimed


def test_a_scope_no_entry_has_names_the_values_there_are(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger.from_url(ledger_url)
    ledger.record(
        LedgerEntry(
            dag_id="d", run_id="r", task_id="t", kind=Kind.COMPUTE, usd=Decimal(1), tags={"project": "churn"}
        )
    )
    assert main(["--ledger-url", ledger_url, "report", "--scope", "project=Churn"]) == 0
    assert "no recent entry has project=Churn; check its spelling and case (project: churn)" in (
        capsys.readouterr().out
    )


def test_budget_delete_removes_a_budget_once_nothing_is_held_in_it(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A catch-all '*' budget set by mistake counted every reservation, and no command removed it.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("*", "month", "50")
    held = ledger.reserve("project=x", "2", holder="d/r/train/-1")
    delete = ["--ledger-url", ledger_url, "budget", "delete", "--scope", "*", "--period", "month"]
    assert main(delete) == 2
    err = capsys.readouterr().err
    assert "budget '*/month' has 1 open reservation(s) holding $2.00: delete it once" in err
    assert "(`costaware budget holds --scope '*'` lists them" in err  # `budget show` did not
    ledger.settle(held.id, "1.5")
    assert main(delete) == 0
    out = capsys.readouterr().out
    assert "budget '*/month' deleted (its cap was $50.00) with its alert settings" in out
    assert ledger.budgets() == []
    (audit,) = audit_log(ledger, action="budget_delete")
    assert audit.target == "*/month" and audit.details["cap_usd"] == "50.000000"
    assert main(delete) == 2
    assert "no budget '*/month' to delete (budgets: none)" in capsys.readouterr().err
    # An unset shell variable would name the catch-all '*': refused, as budget set refuses it.
    ledger.set_budget("*", "month", "50")
    with pytest.raises(SystemExit, match="2"):
        main([*delete[:5], " ", *delete[6:]])
    assert "argument --scope: empty: give the budget's tags" in capsys.readouterr().err
    assert [b.label for b in ledger.budgets()] == ["*/month"]


def test_budget_show_of_everything_lists_the_budgets_instead_of_advising_a_catch_all(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 'budget show --scope *' (a newcomer asking for every budget) was told to set a catch-all cap on every
    # team's runs; the reservation's own hint (kept for a SpendCapSensor over '*') is not the CLI's answer.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "50")
    assert main(["--ledger-url", ledger_url, "budget", "show", "--scope", "*"]) == 2
    err = capsys.readouterr().err
    assert (
        "no budget has the catch-all scope '*' (budgets: 'project=churn/month'): `costaware budget list` "
        "lists them all; give one's scope to see its spend (e.g. --scope 'project=churn')"
    ) in err
    assert "budget set" not in err


def test_changing_a_budget_keeps_what_is_not_given(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Raising the cap used to drop the GPU-hour cap and reset the time zone to UTC, saying nothing.
    argv = ["--ledger-url", ledger_url, "budget", "set", "--scope", "project=x", "--period", "month"]
    assert main([*argv, "--cap-usd", "5", "--cap-gpu-hours", "10", "--timezone", "Europe/Berlin"]) == 0
    capsys.readouterr()
    assert main(["--ledger-url", ledger_url, "budget", "list"]) == 0
    assert re.search(
        r"project=x +month +\$5\.00 +10 +Europe/Berlin", capsys.readouterr().out
    )  # was 10.000000
    assert main([*argv, "--cap-usd", "6"]) == 0
    assert "(kept its GPU-hour cap 10 and time zone Europe/Berlin)" in capsys.readouterr().out
    (budget,) = Ledger.from_url(ledger_url).budgets()
    assert (budget.cap_usd, budget.cap_gpu_hours, budget.timezone) == (6, 10, "Europe/Berlin")
    # Only what changes: the cap is kept too (--cap-usd was required).
    assert main([*argv, "--cap-gpu-hours", "none"]) == 0
    assert "(kept its cap $6.00 and time zone Europe/Berlin)" in capsys.readouterr().out
    assert main([*argv, "--cap-usd", "6", "--cap-gpu-hours", "none", "--timezone", "UTC"]) == 0
    assert "kept" not in capsys.readouterr().out
    (budget,) = Ledger.from_url(ledger_url).budgets()
    assert (budget.cap_usd, budget.cap_gpu_hours, budget.timezone) == (6, None, "UTC")
    assert main([*argv[:5], "project=new", *argv[6:]]) == 2  # a new budget needs its cap
    assert "budget 'project=new/month' does not exist yet: give its cap, e.g. --cap-usd 250" in (
        capsys.readouterr().err
    )
    # A new budget still starts in UTC with no GPU-hour cap.
    assert main([*argv[:5], "project=y", *argv[6:], "--cap-usd", "1"]) == 0
    assert [(b.cap_gpu_hours, b.timezone) for b in Ledger.from_url(ledger_url).budgets()][1] == (None, "UTC")


def test_a_budget_whose_tags_no_entry_or_hold_has_names_the_close_value_they_have(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 'flight delays' beside entries tagged 'flight-delays': set without a word, it capped nothing.
    ledger = Ledger.from_url(ledger_url)
    ledger.record(
        LedgerEntry(dag_id="d", run_id="r", task_id="t", kind=Kind.COMPUTE, usd=Decimal(1),
                    tags={"project": "flight-delays"})
    )  # fmt: skip

    def budget_set(scope: str) -> str:
        argv = ["--ledger-url", ledger_url, "budget", "set", "--scope", scope, "--period", "month"]
        assert main([*argv, "--cap-usd", "100"]) == 0
        return capsys.readouterr().err

    err = budget_set("project=flight delays")
    assert "note: no entry or open hold of the ledger is tagged project=flight delays" in err
    assert "did you mean 'flight-delays'?" in err and "--scope project=flight-delays" in err
    assert "note:" not in budget_set("project=flight-delays")  # the ledger's own value: nothing to say
    assert "note:" not in budget_set("project=churn")  # a new project, nothing close: nothing to say
    # A hold carries the tags too: a task holding money under them before its first entry.
    assert "note:" not in budget_set("project=loans")
    ledger.reserve("project=loans", Decimal(1), holder="d/r/t/-1")
    assert "did you mean 'loans'?" in budget_set("project=loan")
    # A value with a space is shell-quoted: pasted as printed, it was two arguments.
    ledger.record(
        LedgerEntry(dag_id="d", run_id="r", task_id="t2", kind=Kind.COMPUTE, usd=Decimal(1),
                    tags={"project": "flight ops"})
    )  # fmt: skip
    assert "(--scope 'project=flight ops')" in budget_set("project=flight-ops")


def test_a_scope_differing_only_in_case_is_a_second_budget_and_says_so(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def budget_set(scope: str) -> str:
        argv = ["--ledger-url", ledger_url, "budget", "set", "--scope", scope, "--period", "month"]
        assert main([*argv, "--cap-usd", "100"]) == 0
        return capsys.readouterr().err

    assert "new budget beside" not in budget_set("project=x")
    err = budget_set("Project=X")
    assert "note: this is a new budget beside 'project=x' (per month)" in err
    assert "give its scope: --scope project=x" in err
    assert "new budget beside" not in budget_set("Project=X")  # changing it again says nothing
    assert sorted(str(b.scope) for b in Ledger.from_url(ledger_url).budgets()) == ["Project=X", "project=x"]
    # Beside two, both are named: the first alone was not always the one meant.
    assert "give its scope: --scope Project=X or --scope project=x" in budget_set("PROJECT=X")
    # Another period is another budget anyway: nothing to say.
    argv = ["--ledger-url", ledger_url, "budget", "set", "--scope", "PROJECT=x", "--period", "day"]
    assert main([*argv, "--cap-usd", "5"]) == 0
    assert "new budget beside" not in capsys.readouterr().err


def test_a_zero_cap_says_what_an_unquoted_dollar_does(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # "--cap-usd $500" unquoted reaches us as "00": a $0 cap that refused every hold, without a word.
    assert main(["--ledger-url", ledger_url, *SET_BUDGET, "--cap-usd", "00"]) == 0
    assert "note: a $0 cap refuses every hold of project=x; if you typed a $ amount, quote it" in (
        capsys.readouterr().err
    )
    assert main(["--ledger-url", ledger_url, *SET_BUDGET, "--cap-usd", "500"]) == 0
    assert "note" not in capsys.readouterr().err


def test_a_zero_gpu_hour_cap_says_it_refuses_every_gpu_hold_and_how_to_drop_the_cap(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # As a $0 cap is: set without a word, where 0 may have been meant as "no limit".
    argv = ["--ledger-url", ledger_url, *SET_BUDGET, "--cap-usd", "500"]
    assert main([*argv, "--cap-gpu-hours", "0.0"]) == 0
    assert (
        "note: a 0 GPU-hour cap refuses every hold of project=x that needs GPU-hours (those needing none "
        "pass); for no GPU-hour cap give --cap-gpu-hours none"
    ) in capsys.readouterr().err
    (budget,) = Ledger.from_url(ledger_url).budgets()
    assert budget.cap_gpu_hours == 0
    # Kept, not given again: said once, when set.
    assert main(argv) == 0
    assert "note" not in capsys.readouterr().err
    assert main([*argv, "--cap-gpu-hours", "4"]) == 0
    assert "note" not in capsys.readouterr().err


@pytest.mark.parametrize(("spent", "held"), [("1.5", "0"), ("0", "2"), ("1.5", "2")])
def test_a_zero_gpu_hour_cap_over_gpu_hours_spent_or_held_says_every_hold_is_refused(
    spent: str, held: str, ledger_url: str, capsys: pytest.CaptureFixture[str], clock: object
) -> None:
    # "(those needing none pass)" was false once the period had GPU-hours spent or held: past the cap, a hold
    # of 0 GPU-hours is refused too.
    from decimal import Decimal

    from costaware.core.errors import BudgetExceededError
    from costaware.core.ledger import Kind, LedgerEntry

    ledger = Ledger.from_url(ledger_url)
    ledger.record(
        LedgerEntry(dag_id="d", run_id="r", task_id="t", kind=Kind.COMPUTE, usd=Decimal(1),
                    gpu_hours=Decimal(spent), tags={"project": "x"})
    )  # fmt: skip
    argv = ["--ledger-url", ledger_url, *SET_BUDGET, "--cap-usd", "500", "--cap-gpu-hours"]
    assert main([*argv, "10"]) == 0
    if held != "0":
        ledger.reserve("project=x", "1", gpu_hours=held, holder="d/r2/t/-1")
    capsys.readouterr()
    assert main([*argv, "0"]) == 0
    err = capsys.readouterr().err
    said = (
        rf"note: a 0 GPU-hour cap refuses every hold of project=x \(project=x/month \(\d{{4}}-\d\d\) has "
        rf"{re.escape(spent)} GPU-hours spent and {held} held, past it, so holds needing none are refused "
        r"too until the period ends\); for no GPU-hour cap give --cap-gpu-hours none"
    )
    assert re.search(said, err), err
    with pytest.raises(BudgetExceededError, match="GPU-hour"):
        ledger.reserve("project=x", "1", gpu_hours=0, holder="d/r3/t/-1")


def test_budget_show_names_the_budget_like_the_page_and_logs_with_every_digit(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from decimal import Decimal

    from costaware.core.ledger import Kind, LedgerEntry

    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=flight-delays", "month", "25")
    ledger.record(
        LedgerEntry(
            dag_id="d",
            run_id="r",
            task_id="t",
            kind=Kind.COMPUTE,
            usd=Decimal("0.001655"),
            tags={"project": "flight-delays"},
        )
    )
    assert main(["--ledger-url", ledger_url, "budget", "show", "--scope", "project=flight-delays"]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("project=")]
    period = ledger.usage("project=flight-delays")[0].period_key
    assert row.startswith(f"project=flight-delays/month ({period})")
    assert "$0.001655" in row and "$24.998345" in row and "$25.00 " in row


def test_budget_holds_lists_what_is_reserved_and_by_which_task(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `budget show` gave the reserved total only: which task held it, and until when, needed SQL.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "10")
    ledger.set_budget("project=other", "month", "10")
    held = ledger.reserve(
        "project=churn,team=ml", "1.25", gpu_hours="0.5", holder="retrain/scheduled__1/train/-1", run_id="r"
    )
    ledger.reserve("project=other", "2", holder="other/r2/fit/-1", run_id="r2")
    settled = ledger.reserve("project=churn", "3", holder="retrain/scheduled__0/train/-1", run_id="r0")
    ledger.settle(settled.id, "1")
    # An attempt billed while the hold stays open: paid from it, so only the rest is reserved.
    ledger.record(
        LedgerEntry("retrain", "scheduled__1", "train", Kind.COMPUTE, Decimal("0.75"), reservation_id=held.id)
    )
    argv = ["--ledger-url", ledger_url, "budget", "holds", "--scope", "project=churn"]
    assert main([*argv, "--format", "json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert (shown["id"], shown["usd"], shown["paid_usd"]) == (held.id, "1.250000", "0.750000")
    assert shown["holder"] == "retrain/scheduled__1/train/-1"
    assert shown["budgets"] == ["project=churn/month"]
    assert main(["--ledger-url", ledger_url, "budget", "holds"]) == 0
    table = capsys.readouterr().out
    assert "retrain/scheduled__1/train/-1" in table and "$1.25" in table and "other/r2/fit/-1" in table
    assert "scheduled__0" not in table  # settled: no longer held
    assert main(["--ledger-url", ledger_url, "budget", "holds", "--scope", "project=none"]) == 0
    assert "no open holds of project=none: nothing is reserved" in capsys.readouterr().out
    # A mistyped tag read as "nothing is reserved" while a task held money under the real one.
    ledger.record(
        LedgerEntry("retrain", "scheduled__0", "train", Kind.COMPUTE, Decimal(1), tags={"project": "churn"})
    )
    assert main(["--ledger-url", ledger_url, "budget", "holds", "--scope", "project=chrun"]) == 0
    assert (
        "nothing is reserved (no recent entry has project=chrun; check its spelling and case (project: churn"
        in (capsys.readouterr().out)
    )
    assert (
        main(["--ledger-url", ledger_url, "budget", "holds", "--scope", "project=chrun", "--format", "json"])
        == 0
    )
    out, err = capsys.readouterr()
    assert (
        json.loads(out) == []
        and "note: no open holds of project=chrun: no recent entry has project=chrun" in err
    )
    with pytest.raises(SystemExit, match="2"):
        main(["--ledger-url", ledger_url, "budget", "holds", "--scope", ""])
    assert "argument --scope: empty: give a value (only holds of" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("holder", "kind"),
    [
        ("retrain/scheduled__1/train/-1", "task (dag/run/task/map)"),
        ("retrain/scheduled__1/fetch/-1/egress", "task egress (dag/run/task/map/egress)"),
        ("search/s-7/3/0", "search rung (search/id/trial/rung)"),
        ("search/s-7/tail", "search tail (search/id/tail)"),
        (None, "none (release by id)"),
    ],
)
def test_budget_holds_says_which_form_each_holder_has(
    ledger_url: str, capsys: pytest.CaptureFixture[str], holder: str | None, kind: str
) -> None:
    # One title, "held by (dag/run/task/map, or search/id/trial/rung)", misread a search's tail, a task's
    # egress and a hold with no holder: each row now names its own holder's form.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "10")
    held = ledger.reserve("project=churn", "1", holder=holder, run_id="r")
    argv = ["--ledger-url", ledger_url, "budget", "holds"]
    assert main(argv) == 0
    header, _, row = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["held", "by", "holder", "is"]
    assert row.split("  ")[0] == (holder or f"(none: id {held.id})")
    assert f"  {kind}  " in row
    assert main([*argv, "--format", "json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert (shown["holder"], shown["holder_kind"]) == (holder, kind.partition(" (")[0])


def test_budget_show_gives_the_gpu_hours_beside_the_dollars_where_a_budget_caps_them(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The spot tuning plan's GPU-hour cap binds before its dollars: `budget show` used to leave it out."""
    from decimal import Decimal

    from costaware.core.ledger import Kind, LedgerEntry

    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=p,study=s", "total", "100", cap_gpu_hours="20")
    ledger.record(
        LedgerEntry(
            dag_id="d",
            run_id="r",
            task_id="t",
            kind=Kind.COMPUTE,
            usd=Decimal("0.41"),
            quantity=Decimal("1"),
            gpu_hours=Decimal("1.5"),
            tags={"project": "p", "study": "s"},
        )
    )
    ledger.reserve("project=p,study=s", "1", gpu_hours="0.3", holder="h")
    argv = ["--ledger-url", ledger_url, "budget", "show", "--scope", "project=p,study=s"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    (row,) = [line for line in lines if line.startswith("project=")]
    assert any(line.startswith("budget ") and line.endswith("GPU-hours") for line in lines)
    assert row.endswith("1.5 spent, 0.3 reserved, of 20")
    assert main([*argv, "--format", "json"]) == 0
    out = capsys.readouterr().out
    (usage,) = json.loads(out[out.index("[") :])
    assert (usage["cap_gpu_hours"], usage["spent_gpu_hours"], usage["reserved_gpu_hours"]) == (
        "20.000000",
        "1.500000",
        "0.300000",
    )
    # CSV: three numbers a spreadsheet sums, not the table's "1.5 spent, 0.3 reserved, of 20" text.
    assert main([*argv, "--format", "csv", "--no-schedule"]) == 0
    import csv
    import io

    (shown,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    gpu = [shown[c] for c in ("GPU-hour cap", "GPU-hours spent", "GPU-hours reserved")]
    assert [Decimal(v) for v in gpu] == [Decimal("20"), Decimal("1.5"), Decimal("0.3")]


def test_trial_report_shows_cost_per_successful_trial(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger.from_url(ledger_url)
    for n, (label, usd) in enumerate(
        (("#0 promoted@15", "3"), ("#1 pruned@3", "1"), ("#2 promoted@15", "2"))
    ):
        ledger.record(
            LedgerEntry(
                dag_id="tune",
                run_id="r",
                task_id="trial",
                map_index=n,
                kind=Kind.COMPUTE,
                usd=Decimal(usd),
                trial=label,
            )
        )
    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "tune", "--group-by", "trial"]) == 0
    out = capsys.readouterr().out
    assert "3 trials, 2 trained to full fidelity: $2.00 per trial, $3.00 per successful trial" in out
    trials = ["--ledger-url", ledger_url, "report", "--group-by", "trial", "--format", "json"]
    assert main([*trials, "--dag-id", "tune"]) == 0
    assert json.loads(capsys.readouterr().out)["trials"]["per_successful_trial_usd"] == "3.000000"
    # A search whose every trial was pruned: JSON's null, not the text "None".
    ledger.record(
        LedgerEntry(
            dag_id="cut", run_id="r", task_id="trial", kind=Kind.COMPUTE, usd=Decimal(1), trial="#0 pruned@3"
        )
    )
    assert main([*trials, "--dag-id", "cut"]) == 0
    shown = json.loads(capsys.readouterr().out)["trials"]
    assert (shown["successful"], shown["per_successful_trial_usd"]) == (0, None)
    # A budgeted_search's rungs ("#3@1", "#3@rung2"): counted with the trial's ending where a row gives it,
    # else as a trial that did not end (the budget cut it). They had no summary at all.
    for label, usd in (("#0@1", "1"), ("#0 promoted@9", "3"), ("#1@1", "1"), ("#1 pruned@3", "1"),
                       ("#3@rung1", "1"), ("#3@rung2", "1"), ("tail", "1")):  # fmt: skip
        ledger.record(
            LedgerEntry(dag_id="search", run_id="r", task_id="search", kind=Kind.COMPUTE, usd=Decimal(usd),
                        trial=label)
        )  # fmt: skip
    assert main([*trials, "--dag-id", "search"]) == 0
    shown = json.loads(capsys.readouterr().out)["trials"]
    assert (shown["trials"], shown["successful"]) == (3, 1)
    assert (shown["per_trial_usd"], shown["per_successful_trial_usd"]) == ("2.666667", "8.000000")


def test_trial_report_over_several_runs_counts_each_run_s_trials_apart(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every run of a search numbers its trials from #0: merged by label, run r1's trial #0 cut by the budget
    # ("#0@1" alone) was counted as a rung of run r2's promoted #0, and two promoted #1s left their rungs
    # over as a third trial that never ended.
    ledger = Ledger.from_url(ledger_url)
    rows = {
        "r1": (("#0@1", "1"), ("#1@1", "1"), ("#1 promoted@9", "3")),
        "r2": (("#0@1", "1"), ("#0 promoted@9", "3"), ("#1@1", "1"), ("#1 promoted@9", "3")),
    }
    for run_id, labels in rows.items():
        for label, usd in labels:
            ledger.record(
                LedgerEntry(dag_id="search", run_id=run_id, task_id="search", kind=Kind.COMPUTE,
                            usd=Decimal(usd), trial=label)
            )  # fmt: skip
    # The same labels in another DAG's run of the same id are that DAG's trials.
    ledger.record(
        LedgerEntry(dag_id="other", run_id="r1", task_id="t", kind=Kind.COMPUTE, usd=Decimal(2),
                    trial="#0 pruned@3")
    )  # fmt: skip
    trials = ["--ledger-url", ledger_url, "report", "--group-by", "trial", "--format", "json"]
    assert main([*trials, "--dag-id", "search"]) == 0
    shown = json.loads(capsys.readouterr().out)["trials"]
    assert (shown["trials"], shown["successful"]) == (4, 3)  # r1: #0 cut, #1 promoted; r2: both promoted
    assert (shown["per_trial_usd"], shown["per_successful_trial_usd"]) == ("3.250000", "4.333333")
    assert main([*trials, "--dag-id", "search", "--run-id", "r1"]) == 0
    assert json.loads(capsys.readouterr().out)["trials"]["trials"] == 2
    assert main(trials) == 0  # every DAG: other/r1's #0 is a trial of its own
    shown = json.loads(capsys.readouterr().out)["trials"]
    assert (shown["trials"], shown["successful"]) == (5, 3)


def test_trial_report_rows_keep_each_run_s_trials_apart(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The summary counted each run's trials apart, but the rows summed one label over every run: "#0
    # promoted@9" read $6.00 over 2 entries where run r1's trial cost $1.00 and r2's $5.00.
    ledger = Ledger.from_url(ledger_url)
    for run_id, usd in (("r1", "1"), ("r2", "5")):
        ledger.record(
            LedgerEntry("search", run_id, "search", Kind.COMPUTE, Decimal(usd), trial="#0 promoted@9")
        )
    ledger.record(LedgerEntry("other", "r1", "t", Kind.COMPUTE, Decimal(2), trial="#0 promoted@9"))
    ledger.record(LedgerEntry("search", "r2", "prep", Kind.COMPUTE, Decimal("0.5")))  # no trial
    report = ["--ledger-url", ledger_url, "report", "--group-by", "trial"]
    assert main([*report, "--format", "json"]) == 0
    rows = {r["group"]: (r["entries"], r["usd"]) for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows == {
        "search/r2 #0 promoted@9": (1, "5.000000"),
        "other/r1 #0 promoted@9": (1, "2.000000"),
        "search/r1 #0 promoted@9": (1, "1.000000"),
        "(none)": (1, "0.500000"),
    }
    # One DAG's rows name the run only; one run's the label alone, as before.
    assert main([*report, "--dag-id", "search"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in lines[3:6]] == ["r2 #0 promoted@9", "r1 #0 promoted@9", "(none)"]
    assert main([*report, "--dag-id", "search", "--last-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "cost report for DAG search, run r2"
    assert lines[3].startswith("#0 promoted@9 ") and "$5.00" in lines[3]


def test_report_writes_dollars_like_the_cost_page_with_decimal_points_lined_up(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger.from_url(ledger_url)
    for run_id, usd in (("r-cents", "0.17"), ("r-micros", "0.170002"), ("r-big", "1234.5")):
        ledger.record(
            LedgerEntry(dag_id="d", run_id=run_id, task_id="t", kind=Kind.COMPUTE, usd=Decimal(usd))
        )
    assert main(["--ledger-url", ledger_url, "report", "--group-by", "run"]) == 0
    lines = {
        line.split()[0]: line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(("d/r-", "TOTAL"))
    }
    assert "$0.17 " in lines["d/r-cents"] and "$0.170000" not in lines["d/r-cents"]  # the page's format
    assert "$1,234.50 " in lines["d/r-big"] and "$1,234.840002" in lines["TOTAL"]
    points = {line.index(".", line.index("$")) for line in lines.values()}
    assert len(points) == 1  # the actual column's decimal points line up
    assert main(["--ledger-url", ledger_url, "report", "--group-by", "run", "--format", "csv"]) == 0
    assert ",0.17," in capsys.readouterr().out  # CSV cells are plain numbers, not padded


def test_a_report_of_one_dag_does_not_repeat_its_name_in_each_run_or_task(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger.from_url(ledger_url)
    for dag_id, run_id in (("nightly", "scheduled__2026-11-23T00:00:00+00:00"), ("other", "manual_1")):
        ledger.record(
            LedgerEntry(dag_id=dag_id, run_id=run_id, task_id="train", kind=Kind.COMPUTE, usd=Decimal(1))
        )
    report = ["--ledger-url", ledger_url, "report", "--dag-id", "nightly"]
    for group_by in ("run", "task"):
        assert main([*report, "--group-by", group_by, "--format", "csv"]) == 0
        labels = [line.split(",")[0] for line in capsys.readouterr().out.splitlines()[1:]]
        assert labels == [{"run": "scheduled__2026-11-23T00:00:00+00:00", "task": "train"}[group_by]]
    assert main([*report, "--group-by", "run"]) == 0
    assert (
        "\nscheduled__2026-11-23T00:00:00+00:00  " in capsys.readouterr().out
    )  # was "nightly/scheduled__..."
    assert main([*report, "--group-by", "run", "--format", "json"]) == 0  # JSON keeps the whole group
    assert [r["group"] for r in json.loads(capsys.readouterr().out)["rows"]] == [
        "nightly/scheduled__2026-11-23T00:00:00+00:00"
    ]
    assert main(["--ledger-url", ledger_url, "report", "--group-by", "run", "--format", "csv"]) == 0
    assert "nightly/scheduled__2026-11-23T00:00:00+00:00," in capsys.readouterr().out  # every DAG: named


def test_report_sums_kg_co2e_per_group_and_says_unknown(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger.from_url(ledger_url)
    for task, kg in (("known", "0.25"), ("known", "1.5"), ("partly", "2"), ("partly", None), ("none", None)):
        ledger.record(
            LedgerEntry(
                "d",
                "r",
                task,
                Kind.COMPUTE,
                Decimal("1"),
                kg_co2e=None if kg is None else Decimal(kg),
                carbon_method="unknown: region 'us-east-1' has no grid zone" if kg is None else "",
            )
        )
    ledger.record(LedgerEntry("d", "r", "egress", Kind.EGRESS, Decimal("1")))  # not estimated: "-"

    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "d", "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    rows = {r["group"]: (r["kg_co2e"], r["co2e_unknown_entries"]) for r in payload["rows"]}
    assert rows == {
        "d.known": ("1.750000", 0),
        "d.partly": ("2.000000", 1),
        "d.none": (None, 1),
        "d.egress": (None, 0),
    }
    assert (payload["total"]["kg_co2e"], payload["total"]["co2e_unknown_entries"]) == ("3.750000", 2)
    # CSV: the known sum as a number and the entries it lacks beside it ("2.000+?" and "unknown" were text).
    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "d", "--format", "csv"]) == 0
    import csv
    import io

    shown = {
        r["task"]: (r["kg CO2e"], r["kg CO2e unknown entries"])
        for r in csv.DictReader(io.StringIO(capsys.readouterr().out))
    }
    assert shown == {
        "known": ("1.750000", "0"),
        "partly": ("2.000000", "1"),
        "none": ("", "1"),
        "egress": ("", "0"),
    }

    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "d"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    assert "kg" in lines[next(k for k in lines if lines[k][-2:] == ["kg", "CO2e"])]
    assert lines["known"][-1] == "1.750"
    assert lines["partly"][-1] == "2.000+?"
    assert lines["none"][-1] == "unknown"
    assert lines["egress"][-1] == "-"
    assert lines["TOTAL"][-1] == "3.750+?"
    assert "kg CO2e: 2 compute entries have unknown emissions" in out
    # The footer's "carbon_method says which" names where to read it (no command showed it).
    assert "costaware runs show RUN --format json" in out
    assert main(["--ledger-url", ledger_url, "runs", "show", "r", "--dag-id", "d", "--format", "json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    unknown = [e for e in shown["entries"] if e["kind"] == "compute" and e["kg_co2e"] is None]
    assert [e["carbon_method"] for e in unknown] == ["unknown: region 'us-east-1' has no grid zone"] * 2

    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "d", "--group-by", "dag"]) == 0
    assert "3.750+?" in capsys.readouterr().out


def test_a_report_for_a_dag_the_ledger_does_not_know_is_an_error(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Ledger.from_url(ledger_url).record(
        LedgerEntry(dag_id="d", run_id="r", task_id="t", kind=Kind.COMPUTE, usd=Decimal("1"))
    )
    # It answered exit 0 with a note (empty CSV or JSON: "it cost nothing") where `runs show --last` and
    # `report --last-run` answered exit 2: one rule now, an id the ledger has never seen is an error.
    for fmt in ("table", "csv", "json"):
        assert main(["--ledger-url", ledger_url, "report", "--dag-id", "dd", "--format", fmt]) == 2
        out, err = capsys.readouterr()
        assert out == "" and "error: the ledger has no entries for DAG 'dd': check the name" in err
        assert "did you mean 'd'?" in err
    # A mistyped run id read as a run that cost nothing.
    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "d", "--run-id", "nope"]) == 2
    assert "the ledger has no entries for run 'nope' of DAG 'd': check the run id" in capsys.readouterr().err
    assert main(["--ledger-url", ledger_url, "report", "--run-id", "nope", "--format", "csv"]) == 2
    assert "the ledger has no entries for run 'nope': check the run id" in capsys.readouterr().err
    # A known DAG with nothing in the range is an empty answer, exit 0.
    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "d", "--since", "2099-01-01"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "(no entries)"
    argv = ["--ledger-url", ledger_url, "report", "--dag-id", "d", "--since", "2099-01-01", "--format", "csv"]
    assert main(argv) == 0
    assert capsys.readouterr().err == ""  # a known DAG, nothing in the range: nothing to check


def test_grouping_by_a_tag_no_entry_has_says_so(ledger_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    Ledger.from_url(ledger_url).record(
        LedgerEntry(
            dag_id="d", run_id="r", task_id="t", kind=Kind.COMPUTE, usd=Decimal("1"), tags={"stage": "train"}
        )
    )
    assert main(["--ledger-url", ledger_url, "report", "--group-by", "tag:stgae"]) == 0
    out = capsys.readouterr().out
    meant = "no entry in this report has the tag 'stgae' (did you mean 'stage'?): check its spelling and case"
    assert meant + " (tags on the ledger's" in out
    assert "stage" in out.split("newest entries:")[1]
    assert main(["--ledger-url", ledger_url, "report", "--group-by", "tag:stgae", "--format", "json"]) == 0
    assert "check its spelling" in json.loads(capsys.readouterr().out)["note"]
    assert main(["--ledger-url", ledger_url, "report", "--group-by", "tag:stage"]) == 0
    assert "no entry in this report has the tag" not in capsys.readouterr().out
    # Spelled right, but the entries that carry it are outside the selection: no spelling advice.
    Ledger.from_url(ledger_url).record(
        LedgerEntry(dag_id="d", run_id="r2", task_id="t", kind=Kind.COMPUTE, usd=Decimal("1"))
    )
    assert main(["--ledger-url", ledger_url, "report", "--run-id", "r2", "--group-by", "tag:stage"]) == 0
    out = capsys.readouterr().out
    assert "no entry in this report has the tag 'stage'" in out and "check its spelling" not in out


def test_a_reader_that_stops_early_gets_no_traceback(ledger_url: str, tmp_path: Path) -> None:
    ledger = Ledger.from_url(ledger_url)
    for n in range(2000):  # more than a pipe holds (64 KiB), so the writer is still writing when head exits
        ledger.set_budget(f"project=p{n}", "month", "5")
    script = "from costaware.cli import main; raise SystemExit(main())"
    piped = subprocess.run(
        f"{sys.executable} -c {shlex.quote(script)} --ledger-url {ledger_url} budget list | head -1",
        shell=True,
        capture_output=True,
        text=True,
        check=True,
        executable="/bin/bash",
    )
    assert len(piped.stdout.splitlines()) == 1
    assert "Traceback" not in piped.stderr and "BrokenPipeError" not in piped.stderr, piped.stderr


@pytest.mark.parametrize(
    "argv",
    [["report"], ["budget", "list"], ["budget", "show", "--scope", "project=x"], ["runs", "list"], ["audit"],
     ["alerts", "list"], ["report", "--efficiency"], ["prices", "show"],
     ["budget", "delete", "--scope", "project=x", "--period", "month"],
     ["budget", "release", "--holder", "h"]],
)  # fmt: skip
def test_a_read_of_a_ledger_file_that_does_not_exist_creates_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # A mistyped location used to get a new, empty ledger (folders and all) and report "nothing".
    typo = tmp_path / "nonexistent" / "dir" / "ledger.db"
    assert main(["--ledger-url", f"sqlite:///{typo}", *argv]) == 2
    assert (
        f"no ledger at {typo}: check --ledger-url, AIRFLOW_CONN_COSTAWARE_LEDGER or COSTAWARE_LEDGER_URL"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "nonexistent").exists()
    # A command that writes makes it, as before.
    assert main(["--ledger-url", f"sqlite:///{typo}", "budget", "set", "--scope", "project=x", "--period",
                 "month", "--cap-usd", "5"]) == 0  # fmt: skip
    assert typo.exists()


def test_budget_show_names_the_per_run_budgets_it_cannot_show_without_a_run(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--ledger-url", ledger_url, "budget"]
    assert main([*argv, "set", "--scope", "project=r", "--period", "run", "--cap-usd", "5"]) == 0
    # Only a per-run budget: said so (it read "no budget covers scope 'project=r'", naming that budget).
    assert main([*argv, "show", "--scope", "project=r"]) == 2
    assert "only per-run budgets cover scope 'project=r' (project=r/run): give --run-id RUN" in (
        capsys.readouterr().err
    )
    assert main([*argv, "set", "--scope", "project=r", "--period", "month", "--cap-usd", "50"]) == 0
    capsys.readouterr()
    assert main([*argv, "show", "--scope", "project=r"]) == 0
    assert "per-run budget(s) project=r/run also apply: give --run-id" in capsys.readouterr().out
    assert main([*argv, "show", "--scope", "project=r", "--run-id", "x"]) == 0
    shown = capsys.readouterr()
    assert "project=r/run (run:x)" in shown.out
    # A run the ledger has never seen (a typo) showed its whole cap left without a word.
    assert "the ledger has no entry or hold of run 'x': check the run id" in shown.err
    # It pointed at `costaware runs list`, which lists retrain outcomes only, not a spend gate's runs.
    assert "(`costaware report --group-by run` lists the runs with costs)" in shown.err
    assert main([*argv, "show", "--scope", "project=r", "--run-id", "x", "--dag-id", "churn"]) == 0
    assert "the ledger has no entry or hold of DAG 'churn': check the DAG id" in capsys.readouterr().err
    Ledger.from_url(ledger_url).reserve("project=r", "1", holder="d/x/train/-1", run_id="x")
    assert main([*argv, "show", "--scope", "project=r", "--run-id", "x"]) == 0
    assert "no entry or hold" not in capsys.readouterr().err
    # JSON: every row has the same keys (the per-run one lacked runs_left and forecast_above_cap).
    assert (
        main([*argv, "show", "--scope", "project=r", "--run-id", "x", "--format", "json", "--no-schedule"])
        == 0
    )
    rows = {row["budget"]: row for row in json.loads(capsys.readouterr().out)}
    month, run = rows["project=r/month"], rows["project=r/run"]
    assert set(run) == set(month) and (run["runs_left"], run["forecast_above_cap"]) == (None, None)
    # Run ids repeat across DAGs: --dag-id names the run of one DAG, whose hold it counts.
    assert main([*argv, "show", "--scope", "project=r", "--run-id", "x", "--dag-id", "d"]) == 0
    shown = capsys.readouterr()
    assert "project=r/run (run@d/x)" in shown.out and "no entry or hold" not in shown.err
    assert main([*argv, "show", "--scope", "project=r", "--run-id", "x", "--dag-id", "other"]) == 0
    assert "no entry or hold of DAG 'other'" in capsys.readouterr().err
    assert main([*argv, "show", "--scope", "project=r", "--dag-id", "d"]) == 2
    assert "--dag-id d names the DAG of a run: give --run-id RUN too" in capsys.readouterr().err


def test_budget_show_counts_a_search_that_holds_money_as_a_known_run(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A search bills its entries to DAG "search" (its owner) and run <search id>; before its first rung was
    # billed it had only holds, whose holder names no DAG, and `budget show --dag-id search --run-id <id>`
    # said "the ledger has no entry or hold of DAG 'search'".
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=r", "run", "5")
    ledger.reserve(
        "project=r,search=ab12cd34", "1", holder="search/ab12cd34/tail", run_id="ab12cd34", dag_id="search"
    )
    argv = ["--ledger-url", ledger_url, "budget", "show", "--scope", "project=r", "--run-id", "ab12cd34"]
    for named, row in (([], "(run:ab12cd34)"), (["--dag-id", "search"], "(run@search/ab12cd34)")):
        assert main([*argv, *named]) == 0
        shown = capsys.readouterr()
        assert f"project=r/run {row}  $5.00    $0.00       $1.00   $4.00" in shown.out  # the hold counted
        assert "no entry or hold" not in shown.err
    assert main([*argv[:-1], "ab12cd3"]) == 0  # a mistyped search id is still said
    assert "the ledger has no entry or hold of run 'ab12cd3'" in capsys.readouterr().err


def test_budget_show_counts_a_run_whose_id_has_an_empty_part_and_holds_money_as_known(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # read_holder could not read 'd/nightly//train/-1': the run holding money was 'no entry or hold'.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=r", "run", "5")
    ledger.reserve("project=r", "1", holder="d/nightly//train/-1", run_id="nightly/", dag_id="d")
    argv = ["--ledger-url", ledger_url, "budget", "show", "--scope", "project=r", "--run-id", "nightly/"]
    for named in ([], ["--dag-id", "d"]):
        assert main([*argv, *named]) == 0
        assert "no entry or hold" not in capsys.readouterr().err
    assert main([*argv, "--dag-id", "e"]) == 0  # another DAG is still said unknown
    assert "the ledger has no entry or hold of DAG 'e'" in capsys.readouterr().err


def test_report_of_a_run_whose_id_has_an_empty_part_says_its_hold_waits(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # "What waits" read 'd/nightly//train/-1' as no holder: a run holding money was a mistyped name (exit 2).
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=r", "month", "5")
    ledger.reserve("project=r", "1", holder="d/nightly//train/-1", run_id="nightly/", dag_id="d")
    report = ["--ledger-url", ledger_url, "report", "--dag-id", "d"]
    for named in ([], ["--run-id", "nightly/"]):
        assert main([*report, *named]) == 0
        assert "1 open hold of it reserves $1.00" in capsys.readouterr().err
    assert main([*report, "--run-id", "nightly"]) == 2  # another run is still said unknown
    assert "the ledger has no entries for run 'nightly' of DAG 'd'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("named", "said"),
    [
        (["--run-id", "r9"], "no entry or hold of run 'r9': check the run id (`costaware report --group-by"),
        (["--run-id", "r9", "--dag-id", "retrain"], "of run 'r9' of DAG 'retrain': check the run id (`"),
        (
            ["--run-id", "r1", "--dag-id", "retrian"],
            "no entry or hold of DAG 'retrian': check the DAG id; did you mean 'retrain'? (DAGs in the",
        ),
    ],
    ids=["no-dag", "known-dag", "misspelt-dag"],
)
def test_budget_show_hints_only_a_command_that_works(
    ledger_url: str, capsys: pytest.CaptureFixture[str], named: list[str], said: str
) -> None:
    # With a misspelt --dag-id it hinted `costaware report --dag-id <the typo> --group-by run`, refused
    # (exit 2) as an unknown DAG; with none, `--dag-id DAG`, refused as much when copied.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "run", "10")
    ledger.record(LedgerEntry("retrain", "r1", "train", Kind.COMPUTE, Decimal(1), tags={"project": "churn"}))
    argv = ["--ledger-url", ledger_url, "budget", "show", "--scope", "project=churn", "--no-schedule"]
    assert main([*argv, *named]) == 0
    note = capsys.readouterr().err
    assert said in note
    for hinted in re.findall(r"`costaware ([^`]*)`", note):
        assert main(["--ledger-url", ledger_url, *shlex.split(hinted)]) == 0, hinted
        assert "r1" in capsys.readouterr().out


def test_the_report_says_when_cost_entries_wait_in_this_machine_s_spool(
    ledger_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ledger was unreachable: the listener kept the rows there, and every report undercounted in silence.
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    Ledger.from_url(ledger_url).dispose()
    report = ["--ledger-url", ledger_url, "report"]
    assert main(report) == 0
    assert "spool:" not in capsys.readouterr().out
    spool = tmp_path / "costaware" / "spool"
    spool.mkdir(parents=True)
    (spool / "a1.json").write_text("{}")
    (spool / "b2.json").write_text("{}")
    # One a task process took to write and was killed before it did: it waits as much.
    (spool / "c3.json.1764547200.4242.claimed").write_text("{}")
    assert main(report) == 0
    assert f"spool: 3 cost entries wait in {spool}" in capsys.readouterr().out
    assert main([*report, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["spooled_entries_here"] == 3


def test_a_missing_ledger_file_says_how_many_entries_wait_in_the_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first runs met a ledger that could not be written: the report said only "no ledger at ...".
    from costaware.ledger_spool import REFUSED, spool_entry

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    spool = tmp_path / "costaware" / "spool"
    for run_id in ("r1", "r2"):
        entry = LedgerEntry(dag_id="nightly", run_id=run_id, task_id="t", kind=Kind.COMPUTE, usd=Decimal("7"))
        spool_entry(spool, entry, "costaware_ledger", retrying=False)
    refused = LedgerEntry(dag_id="nightly", run_id="r3", task_id="t", kind=Kind.COMPUTE, usd=Decimal("1"))
    spool_entry(spool / REFUSED, refused, "costaware_ledger", retrying=False)  # counts nowhere until fixed
    assert main(["report"]) == 2
    assert (
        f"no ledger at {tmp_path / 'costaware' / 'ledger.db'} (2 cost entries of this machine wait in the "
        f"spool {spool} for the ledger the tasks used: `costaware spool show` lists them, `costaware spool "
        "drain` writes them there): check --ledger-url"
    ) in capsys.readouterr().err
    assert not (tmp_path / "costaware" / "ledger.db").exists()


def test_a_dag_whose_costs_only_wait_is_no_unknown_name(
    ledger_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its first run met a ledger that was down (or its first task only holds money yet): the report said
    # "the ledger has no entries for DAG 'nightly': check the name" (exit 2) and never the spool's note.
    from costaware.ledger_spool import REFUSED, spool_entry

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    ledger = Ledger.from_url(ledger_url)
    ledger.record(LedgerEntry(dag_id="other", run_id="r0", task_id="t", kind=Kind.COMPUTE, usd=Decimal("1")))
    spool = tmp_path / "costaware" / "spool"
    nightly = LedgerEntry(dag_id="nightly", run_id="r1", task_id="train", kind=Kind.COMPUTE, usd=Decimal("7"))
    spool_entry(spool, nightly, "costaware_ledger", retrying=False)
    # One the ledger refused counts nowhere until fixed: it makes no DAG known.
    spool_entry(spool / REFUSED, LedgerEntry(dag_id="refused", run_id="r", task_id="t", kind=Kind.COMPUTE,
                usd=Decimal("1")), "costaware_ledger", retrying=False)  # fmt: skip
    report = ["--ledger-url", ledger_url, "report"]
    for asked in (["--dag-id", "nightly"], ["--dag-id", "nightly", "--run-id", "r1"]):
        assert main([*report, *asked]) == 0
        out, err = capsys.readouterr()
        assert "(no entries" in out and f"spool: 1 cost entry waits in {spool}" in out
        named = "run 'r1' of DAG 'nightly'" if "--run-id" in asked else "DAG 'nightly'"
        assert f"has no entries for {named} yet; 1 cost entry of it waits in the spool {spool}" in err
    assert main([*report, "--dag-id", "other", "--run-id", "r2"]) == 2
    # `costaware runs list` it pointed at lists retrain outcomes only: none for a DAG without a retrain.
    assert (
        "the ledger has no entries for run 'r2' of DAG 'other': check the run id (`costaware report "
        "--dag-id other --group-by run` lists the runs with costs)" in capsys.readouterr().err
    )
    assert main(["--ledger-url", ledger_url, "report", "--group-by", "run", "--dag-id", "other"]) == 0
    assert "r0" in capsys.readouterr().out
    assert main([*report, "--dag-id", "nightly", "--run-id", "r2"]) == 2
    assert "the ledger has no entries for run 'r2' of DAG 'nightly'" in capsys.readouterr().err
    for unknown in ("nightyl", "refused"):
        assert main([*report, "--dag-id", unknown]) == 2
        assert f"the ledger has no entries for DAG {unknown!r}: check the name" in capsys.readouterr().err
    ledger.set_budget("project=x", "month", "5")
    ledger.reserve("project=x", "4", holder="held/manual__1/train/-1", run_id="manual__1", dag_id="held")
    assert main([*report, "--dag-id", "held"]) == 0
    err = capsys.readouterr().err
    assert (
        "has no entries for DAG 'held' yet; 1 open hold of it reserves $4.00 (`costaware budget holds`" in err
    )
    # --last-run said "the ledger has no entries for DAG 'held' yet" (exit 2), unlike --dag-id alone.
    for efficiency in ([], ["--efficiency"]):
        assert main([*report, "--dag-id", "held", "--last-run", *efficiency]) == 0
        out, err = capsys.readouterr()
        assert "(no " in out
        assert (
            "note: the ledger has no entries for DAG 'held' yet, so no last run; 1 open hold of it reserves "
            "$4.00" in err
        )
    # runs show --last said it "has cost entries in the ledger" and to run `costaware runs show None`.
    assert main(["--ledger-url", ledger_url, "runs", "show", "--last", "--dag-id", "held"]) == 2
    err = capsys.readouterr().err
    assert "DAG 'held' has no entries in the ledger yet and no recorded retrain outcome" in err
    assert "runs show None" not in err and "has cost entries" not in err


@pytest.mark.usefixtures("clock")
def test_a_run_whose_only_cost_is_a_hold_of_a_holder_outside_airflow_is_reported(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The holder names no run (a trial run outside Airflow): `report --run-id` refused the run as unknown
    # (exit 2), though the per-run budget held $2.50 in it.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "run", "10")
    ledger.reserve("project=x", "2.5", holder="my-trainer-7", run_id="r1", dag_id="trials")
    report = ["--ledger-url", ledger_url, "report", "--dag-id", "trials"]
    assert main([*report, "--run-id", "r1"]) == 0
    assert (
        "no entries for run 'r1' of DAG 'trials' yet; 1 open hold of it reserves $2.50"
        in capsys.readouterr().err
    )
    # Another run, or another DAG's run of that id, is not it.
    assert main([*report, "--run-id", "r2"]) == 2
    assert "the ledger has no entries for run 'r2' of DAG 'trials'" in capsys.readouterr().err
    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "other", "--run-id", "r1"]) == 2
    assert "the ledger has no entries for DAG 'other'" in capsys.readouterr().err
    # Reserved for a run id alone ('run:r9', any DAG's): that run is known, no DAG is made known by it.
    ledger.reserve("project=x", "1", holder="my-trainer-8", run_id="r9")
    assert main(["--ledger-url", ledger_url, "report", "--run-id", "r9"]) == 0
    assert "1 open hold of it reserves $1.00" in capsys.readouterr().err
    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "trails"]) == 2
    assert "the ledger has no entries for DAG 'trails'" in capsys.readouterr().err


@pytest.mark.usefixtures("clock")
def test_a_run_whose_only_cost_is_a_runless_hold_outside_airflow_is_told_why_it_cannot_be_reported(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Under budgets per month and day the hold keeps its holder and budgets alone, not the run it was
    # reserved for: `report --run-id` said only "no entries for run", as for a mistyped id.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "10")
    ledger.set_budget("project=x", "day", "5")
    ledger.reserve("project=x", "2.5", holder="my-trainer-7", run_id="r1", dag_id="trials")
    why = (
        "if its cost is held outside Airflow: 1 open hold of 'my-trainer-7' reserves $2.50 but names no run: "
        "a hold keeps a "
        "run id only in a per-run budget (`costaware budget set --period run`), so one of this run cannot be "
        "told from it (`costaware budget holds` lists it)"
    )
    assert main(["--ledger-url", ledger_url, "report", "--run-id", "r1"]) == 2
    err = capsys.readouterr().err
    assert "the ledger has no entries for run 'r1'" in err and why in err
    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "trials", "--run-id", "r1"]) == 2
    assert why in capsys.readouterr().err
    # A DAG asked for alone is no run: nothing said of the holds.
    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "trials"]) == 2
    assert "outside Airflow" not in capsys.readouterr().err


def test_the_runless_hold_note_is_said_only_where_it_can_apply_and_sums_what_is_unpaid(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The note summed the holds' whole amounts, and read as this run's explanation. A trainer outside Airflow
    # may bill under a DAG the ledger knows (its entries paid from its holds): the note stays, as a
    # possibility, where a run id is missing, mistyped or not.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "10")
    hold = ledger.reserve("project=x", "2.5", holder="my-trainer-7", run_id="r1", dag_id="trials")
    paid = LedgerEntry(
        dag_id="nightly", run_id="r0", task_id="t", kind=Kind.COMPUTE, usd=Decimal("1"),
        tags={"project": "x"}, reservation_id=hold.id,
    )  # fmt: skip
    ledger.record(paid)
    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "nightly", "--run-id", "r0-typo"]) == 2
    err = capsys.readouterr().err
    assert "no entries for run 'r0-typo'" in err
    assert "if its cost is held outside Airflow: 1 open hold of 'my-trainer-7' reserves $1.50" in err
    assert main(["--ledger-url", ledger_url, "report", "--run-id", "r1"]) == 2
    assert "'my-trainer-7' reserves $1.50 but names no run" in capsys.readouterr().err


@pytest.mark.parametrize("json_logs", [False, True])
def test_logs_go_to_stderr_even_when_airflow_is_imported_during_the_command(
    tmp_path: Path, json_logs: bool
) -> None:
    # Airflow points its console logs at stdout once imported (a connection, a stale price's warning): the
    # lines came before `--format json`'s data and broke `| jq`. A fresh process: Airflow not imported yet.
    import os
    import subprocess
    import sys

    script = (
        "import importlib.util\n"
        "from costaware.cli.log_output import route_logs_to_stderr\n"
        "route_logs_to_stderr()\n"
        "importlib.util.find_spec('airflow')\n"  # a look-up imports nothing: the hook stays for the import
        "import logging, structlog, airflow\n"
        "logging.getLogger('costaware.adapters.price_source').warning('stale price')\n"
        "structlog.get_logger('airflow.sdk').warning('AWS Connection')\n"
        "print('[1]')\n"
    )
    # JSON logs write bytes: the text-only stand-in for stderr raised TypeError on the first line.
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__LOGGING__JSON_LOGS": str(json_logs)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout == "[1]\n"
    assert "stale price" in done.stderr and "AWS Connection" in done.stderr


def test_budget_show_refuses_an_empty_scope_and_notes_one_no_budget_names(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--ledger-url", ledger_url, "budget"]
    assert main([*argv, "set", "--scope", "*", "--period", "total", "--cap-usd", "100"]) == 0
    assert main([*argv, "set", "--scope", "project=churn", "--period", "month", "--cap-usd", "5"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit, match="2"):
        main([*argv, "show", "--scope", ""])
    assert "argument --scope: empty: give the tags of the work" in capsys.readouterr().err
    # A typo showed the catch-all budget alone, as if that were all there is.
    assert main([*argv, "show", "--scope", "project=chrun"]) == 0
    assert "no budget names scope 'project=chrun': only the catch-all" in capsys.readouterr().err
    assert main([*argv, "show", "--scope", "project=churn"]) == 0
    assert "no budget names" not in capsys.readouterr().err
    # A study's scope with a mistyped run id showed the project's budget alone, the study's unsaid.
    assert (
        main([*argv, "set", "--scope", "project=churn,study=run-1", "--period", "total", "--cap-usd", "9"])
        == 0
    )
    capsys.readouterr()
    assert main([*argv, "show", "--scope", "project=churn,study=run-l"]) == 0
    shown = capsys.readouterr()
    assert "project=churn/month" in shown.out and "study=run-1" not in shown.out
    assert "no budget names scope 'project=churn,study=run-l': only the broader budget(s) above" in shown.err
    assert main([*argv, "show", "--scope", "study=run-1,project=churn"]) == 0
    assert "no budget names" not in capsys.readouterr().err


def test_budget_release_gives_back_a_hold_nothing_will_settle_and_audits_it(
    ledger_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C of `airflow dags test` left the task's hold counting as reserved for a day, with no way out.
    monkeypatch.setenv("USER", "ops")
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "5")
    ledger.reserve("project=x", "1", holder="d/manual__1/train/-1", run_id="manual__1")
    argv = ["--ledger-url", ledger_url, "budget"]
    assert main([*argv, "release", "--holder", "d/manual__2/train/-1"]) == 2
    assert (
        "no open hold of 'd/manual__2/train/-1' (open holds: 'd/manual__1/train/-1')"
        in capsys.readouterr().err
    )
    # Its task still reads running in Airflow (tests/cli/test_budget_release.py): --force, as the docs say.
    assert main([*argv, "release", "--holder", "d/manual__1/train/-1", "--force"]) == 0
    assert "released $1.00 held by d/manual__1/train/-1 in project=x/month" in capsys.readouterr().out
    assert ledger.open_reservations() == []
    assert main(["--ledger-url", ledger_url, "audit", "--action", "hold_release", "--format", "json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)
    assert (line["action"], line["target"]) == ("hold_release", "d/manual__1/train/-1")
    # One reserved from Python with no holder is listed and released by its id (it could not be at all).
    anonymous = ledger.reserve("project=x", "2")
    assert main([*argv, "holds"]) == 0
    assert f"(none: id {anonymous.id})" in capsys.readouterr().out
    # A holder typed wrong lists it by the id to give, not as ''.
    assert main([*argv, "release", "--holder", "d/manual__9/train/-1"]) == 2
    assert f"(open holds: {anonymous.id!r}); give the holder" in capsys.readouterr().err
    assert main([*argv, "release", "--holder", anonymous.id]) == 0
    assert f"released $2.00 held by {anonymous.id} in project=x/month" in capsys.readouterr().out
    assert ledger.open_reservations() == []


@pytest.mark.parametrize("period", ["month", "total"])
def test_budget_set_says_when_the_new_cap_is_under_what_is_spent_and_reserved(
    period: str, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Lowered mid-period without a word: "left" turned negative unseen and the next gate was refused.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", period, "10")
    held = ledger.reserve("project=x", "4", holder="d/manual__1/train/-1", run_id="manual__1")
    ledger.record(LedgerEntry("d", "manual__0", "train", Kind.COMPUTE, Decimal("3"), tags={"project": "x"}))
    set_cap = ["--ledger-url", ledger_url, "budget", "set", "--scope", "project=x", "--period", period]
    assert main([*set_cap, "--cap-usd", "5"]) == 0
    err = capsys.readouterr().err
    assert (
        f"note: project=x/{period} " in err
        and "has $3.00 spent and $4.00 reserved, $2.00 over its cap $5.00" in err
    )
    assert ("the period ends or the cap is raised" in err) is (period == "month")
    assert [r.id for r in ledger.open_reservations()] == [held.id]  # the hold and the spend are kept
    assert main([*set_cap, "--cap-usd", "7"]) == 0  # exactly what is committed: nothing over it
    assert "over its cap" not in capsys.readouterr().err


def test_budget_release_reports_and_audits_what_was_still_reserved_not_the_whole_hold(
    ledger_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It said "released $0.05" (audit usd 0.050000) while $0.000455 of the hold was paid and $0.049545 held.
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put("d", "manual__1", "train", "failed", run_state="failed")
    put("d", "manual__2", "train", "failed", run_state="failed")
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "5")
    held = ledger.reserve("project=x", "0.05", holder="d/manual__1/train/-1", run_id="manual__1")
    ledger.record(
        LedgerEntry(
            "d", "manual__1", "train", Kind.COMPUTE, Decimal("0.000455"), tags={"project": "x"},
            reservation_id=held.id,
        )
    )  # fmt: skip
    argv = ["--ledger-url", ledger_url, "budget"]
    assert main([*argv, "release", "--holder", "d/manual__1/train/-1"]) == 0
    assert capsys.readouterr().out.strip() == (
        "released $0.049545 held by d/manual__1/train/-1 in project=x/month (what was still reserved: "
        "$0.000455 of its $0.05 hold was paid from it and stays spent)"
    )
    assert main(["--ledger-url", ledger_url, "audit", "--action", "hold_release", "--format", "json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)
    details = line["details"]
    figures = [Decimal(details[k]) for k in ("usd", "held_usd", "paid_usd")]
    assert figures == [Decimal("0.049545"), Decimal("0.05"), Decimal("0.000455")]
    # Billed past its hold (a training's attempts): nothing was left to give back, and it said "$0.060455 of
    # its $0.05 hold was paid from it".
    held = ledger.reserve("project=x", "0.05", holder="d/manual__2/train/-1", run_id="manual__2")
    ledger.record(
        LedgerEntry(
            "d", "manual__2", "train", Kind.COMPUTE, Decimal("0.06"), tags={"project": "x"},
            reservation_id=held.id,
        )
    )  # fmt: skip
    assert main([*argv, "release", "--holder", "d/manual__2/train/-1"]) == 0
    assert capsys.readouterr().out.strip() == (
        "released $0.00 held by d/manual__2/train/-1 in project=x/month (nothing was still reserved: $0.06 "
        "was billed against its $0.05 hold and stays spent)"
    )


@pytest.mark.parametrize(
    ("zone", "meant"), [("europe/berlin", "Europe/Berlin"), ("Europe/Berln", "Europe/Berlin")]
)
def test_a_misspelt_budget_time_zone_names_the_one_meant(
    ledger_url: str, capsys: pytest.CaptureFixture[str], zone: str, meant: str
) -> None:
    # It said only "unknown time zone", where a timetable's zone names the one meant.
    argv = ["--ledger-url", ledger_url, "budget", "set", "--scope", "project=x", "--period", "day"]
    assert main([*argv, "--cap-usd", "3", "--timezone", zone]) == 2
    assert f"unknown time zone {zone!r} (did you mean {meant!r}?)" in capsys.readouterr().err
    assert Ledger.from_url(ledger_url).budgets() == []


@pytest.mark.parametrize(
    ("zone", "said"),
    [
        ("UTC+1", "(UTC+01:00 is the IANA zone 'Etc/GMT-1': the Etc/GMT names invert the sign; or give"),
        ("GMT-5", "(UTC-05:00 is the IANA zone 'Etc/GMT+5': the Etc/GMT names invert the sign; or give"),
        ("UTC+05:30", "(no IANA zone is a fixed UTC+05:30: give the region's"),
        ("UTC+0", "(UTC+00:00 is the IANA zone 'UTC')"),
        # A bare offset, as an ISO time writes it, got no hint at all.
        ("+01:00", "(UTC+01:00 is the IANA zone 'Etc/GMT-1': the Etc/GMT names invert the sign; or give"),
        ("-0500", "(UTC-05:00 is the IANA zone 'Etc/GMT+5': the Etc/GMT names invert the sign; or give"),
        ("+05:30", "(no IANA zone is a fixed UTC+05:30: give the region's"),
    ],
)
def test_a_budget_time_zone_typed_as_an_offset_names_the_iana_zone(
    ledger_url: str, capsys: pytest.CaptureFixture[str], zone: str, said: str
) -> None:
    # "UTC+1" was refused with "use an IANA name such as 'Europe/Berlin'", never naming Etc/GMT-1.
    argv = ["--ledger-url", ledger_url, "budget", "set", "--scope", "project=x", "--period", "day"]
    assert main([*argv, "--cap-usd", "3", "--timezone", zone]) == 2
    assert f"unknown time zone {zone!r} {said}" in capsys.readouterr().err
    assert Ledger.from_url(ledger_url).budgets() == []


def test_an_etc_gmt_budget_time_zone_is_set_with_a_note_of_its_inverted_sign(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Etc/GMT+1 is UTC-1 (POSIX's sign): it was accepted without a word, the day starting 2 hours off.
    argv = [
        "--ledger-url",
        ledger_url,
        "budget",
        "set",
        "--scope",
        "project=x",
        "--period",
        "day",
        "--cap-usd",
    ]
    assert main([*argv, "3", "--timezone", "Etc/GMT+1"]) == 0
    assert (
        "note: time zone 'Etc/GMT+1' is UTC-01:00 (the Etc/GMT names invert the sign, POSIX style); for "
        "UTC+01:00 give 'Etc/GMT-1'"
    ) in capsys.readouterr().err
    assert [b.timezone for b in Ledger.from_url(ledger_url).budgets()] == ["Etc/GMT+1"]
    assert main([*argv, "3", "--timezone", "Etc/GMT-1"]) == 0  # either sign: it says which offset it is
    assert "note: time zone 'Etc/GMT-1' is UTC+01:00" in capsys.readouterr().err
    for zone in ("Europe/Berlin", "Etc/GMT+0"):
        assert main([*argv, "3", "--timezone", zone]) == 0
        assert "note: time zone" not in capsys.readouterr().err
    assert main([*argv, "4"]) == 0  # the zone kept, not given again: no note each time
    assert "note: time zone" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # An unset shell variable: it set a catch-all budget that gated every run.
        (["budget", "set", "--scope", " ", "--period", "month", "--cap-usd", "1"], "or '*' for the budget"),
        # A script's unset variable: the default ledger was written without a word.
        (["--ledger-url", " ", *SET_BUDGET, "--cap-usd", "5"], "--ledger-url: empty: give the ledger's URL"),
        ([*SET_BUDGET, "--cap-usd", "5", "--ledger-url", ""], "--ledger-url: empty: give the ledger's URL"),
        # Read as "not given": the default time zone, the default store (listed, or evicted from).
        ([*SET_BUDGET, "--cap-usd", "5", "--timezone", ""], "--timezone: empty: give a value (where days"),
        (["cache", "evict", "--store", "", "--max-entries", "1"], "--store: empty: give a value (cache root"),
        (["cache", "list", "--region", " "], "--region: empty: give a value (S3 client region), or leave"),
        # An empty table of every type, as if no filter were given.
        (["prices", "list", "--gpu-model", ""], "--gpu-model: empty: give a value (this GPU"),
        # It made a ledger before it refused the type.
        (["prices", "show", ""], "argument instance_type: empty: give a value (e.g. m5.large"),
        (["prices", "show", "m5.large", "--region", ""], "--region: empty: give a value (AWS region code"),
        (["prices", "import", "missing.json", "--types", ""], "--types: empty: give a type or pattern"),
        (["prices", "refresh", "--types", " "], "--types: empty: give a type or pattern"),
        (["carbon", "show", "--zone", ""], "--zone: empty: give a value (grid zone, e.g. GB"),
        (["budget", "release", "--holder", ""], "--holder: empty: give a value (the hold's holder"),
        (["simulate", "--jobs", "jobs.csv", "--prices", "a.json", "--prices", ""], "--prices: empty"),
    ],
)
def test_blank_text_is_refused_by_the_parser_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    # Blank text is most often an unset shell variable, never meant as "not given".
    ledger_file, store = tmp_path / "ledger.db", tmp_path / "features"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{ledger_file}")
        mp.setenv("COSTAWARE_FEATURE_CACHE", str(store))
        with pytest.raises(SystemExit, match="2"):
            main(argv)
    assert message in capsys.readouterr().err
    assert not ledger_file.exists() and not store.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["cache", "evict", "--max-age-days", "x"],
            "argument --max-age-days: 'x' is not a number: type it in digits, e.g. 2.5",
        ),
        (
            ["prices", "list", "--min-memory-gib", "2,5"],
            "argument --min-memory-gib: '2,5' is not a number: type it in digits, e.g. 2.5 (a '.' before the "
            "decimals, not ',')",
        ),
        (
            ["cache", "gc", "--older-than-minutes", "ten"],
            "argument --older-than-minutes: 'ten' is not a number: type it in digits, e.g. 60",
        ),
        (
            ["report", "--efficiency", "--memory-margin", "25%"],
            "argument --memory-margin: '25%' is no fraction: give one as a number, e.g. 0.25 for 25%",
        ),
        (
            ["cache", "evict", "--max-entries", "1.5"],
            "argument --max-entries: '1.5' is not a whole number: type it in digits, e.g. 20",
        ),
    ],
)
def test_a_number_that_does_not_parse_is_said_with_the_option_the_value_and_what_to_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    # argparse said "invalid float value: 'x'": Python's type name, not what to type.
    ledger_file = tmp_path / "ledger.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{ledger_file}")
        with pytest.raises(SystemExit, match="2"):
            main(argv)
    err = capsys.readouterr().err
    assert message in err and "invalid" not in err
    assert not ledger_file.exists()


def test_numbers_still_parse_as_python_reads_them() -> None:
    from costaware.cli.arguments import number_type

    assert number_type(float)(" 2.5 ") == 2.5 and number_type(float)("1e3") == 1000.0
    assert number_type(int)("7") == 7 and isinstance(number_type(int)("7"), int)


def test_budget_show_says_entries_that_count_nothing_because_they_could_not_be_priced(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A misspelt worker_instance_type made every try $0: the report said so, the budget read low in silence.
    from costaware.core.ledger import UNPRICED

    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "5")
    ledger.record(
        LedgerEntry("d", "r", "t", Kind.COMPUTE, Decimal("0"), tags={"project": "x"}, price_source=UNPRICED)
    )
    assert main(["--ledger-url", ledger_url, "budget", "show", "--scope", "project=x"]) == 0
    assert "note: 1 entry of project=x in these periods could not be priced and count $0" in (
        capsys.readouterr().err
    )


def test_ctrl_c_ends_with_one_line_and_exit_status_130(ledger_url: str, tmp_path: Path) -> None:
    import errno
    import os
    import signal
    import time

    # A FIFO holds `prices import` in its read until Ctrl-C comes: the command is interrupted mid-way.
    offer = tmp_path / "offer.json"
    os.mkfifo(offer)
    script = "from costaware.cli import main; raise SystemExit(main())"
    command = subprocess.Popen(
        [sys.executable, "-c", script, "--ledger-url", ledger_url, "prices", "import", str(offer)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while True:  # a writer can open the FIFO once the command has opened it to read
        try:
            writer = os.open(offer, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as e:
            assert e.errno == errno.ENXIO and time.monotonic() < deadline and command.poll() is None
            time.sleep(0.05)
    try:
        time.sleep(0.2)  # into its read, which waits for text that never comes
        command.send_signal(signal.SIGINT)
        out, err = command.communicate(timeout=60)
    finally:
        os.close(writer)
    assert command.returncode == 130, err
    assert err.strip().splitlines()[-1] == "costaware: interrupted" and "Traceback" not in err, err
    assert out == "" and not (tmp_path / "ledger.db").exists()  # nothing imported, no ledger made


def test_a_ledger_connection_written_as_a_sqlalchemy_url_reaches_postgres(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AIRFLOW_CONN_COSTAWARE_LEDGER copied from AIRFLOW__DATABASE__SQL_ALCHEMY_CONN (postgresql+psycopg2://)
    # failed every task and command with "has type 'postgresql+psycopg2': the ledger needs a ... 'postgres'
    # ... connection", though its fields are PostgreSQL's.
    monkeypatch.setenv("AIRFLOW_CONN_COSTAWARE_LEDGER", postgres_url)
    scope = f"project=sqlalchemy-url-{uuid.uuid4().hex[:8]}"
    assert main(["budget", "set", "--scope", scope, "--period", "month", "--cap-usd", "100"]) == 0
    assert f"{scope}/month" in [b.label for b in Ledger.from_url(postgres_url).budgets()]


def test_a_ledger_connection_with_another_driver_says_how_to_write_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_COSTAWARE_LEDGER", "postgresql+asyncpg://u@db:5432/costaware")
    assert main(["budget", "show", "--scope", "project=x"]) == 2
    assert (
        "has type 'postgresql+asyncpg': the ledger needs a 'costaware_ledger', 'postgres' or 'sqlite' "
        'connection, or any connection whose extra holds {"url": "postgresql+psycopg2://..."} (as a URL, '
        "write postgres://... instead of postgresql+asyncpg://...)"
    ) in capsys.readouterr().err


def test_a_ledger_url_naming_a_database_not_created_says_to_create_it(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The server answered "database ... does not exist"; the message said only to check the URL, though
    # the URL was right and the database had not been made (costaware makes its tables, not the database).
    missing = postgres_url.rsplit("/", 1)[0] + "/costaware_not_created"
    assert main(["--ledger-url", missing, "budget", "show", "--scope", "project=x"]) == 2
    assert (
        'database "costaware_not_created" does not exist. Check the URL (--ledger-url, the '
        "'costaware_ledger' connection or COSTAWARE_LEDGER_URL), or create the database first (CREATE "
        "DATABASE costaware_not_created;): costaware creates its tables, not the database; nothing was "
        "recorded"
    ) in capsys.readouterr().err


@pytest.mark.parametrize(
    "url",
    ["postgres://airflow:secret@127.0.0.1:1", "postgres://airflow:secret@127.0.0.1:1/", "postgresql://db"],
)
def test_a_ledger_url_naming_no_database_is_refused(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    # postgres://airflow:...@host:5432 (the database forgotten) made the ledger's tables in the user's own
    # database, 'airflow': Airflow's metadata, with no word said.
    assert main(["--ledger-url", url, "budget", "show", "--scope", "project=x"]) == 2
    err = capsys.readouterr().err
    assert "names no database: add one, e.g. postgresql+psycopg2://" in err and "/costaware (CREATE" in err
    assert "secret" not in err


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg2://?service=costaware",
        "postgresql://u@h/?dbname=costaware",
        "postgres://u@h?dbname=costaware&sslmode=require",
    ],
)
def test_a_ledger_url_naming_its_database_in_the_query_is_taken(url: str) -> None:
    # libpq reads the database from ?dbname= or a ?service= entry: such URLs were refused as naming none.
    from costaware.adapters.ledger.engine import ledger_engine

    engine = ledger_engine(url)  # connects lazily: nothing to reach here
    assert engine.url.get_backend_name() == "postgresql"
    engine.dispose()


def test_a_ledger_url_naming_no_database_suggests_one_url_that_names_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--ledger-url", "postgres://u@h/?sslmode=require", "budget", "show", "--scope", "x=y"]) == 2
    err = capsys.readouterr().err
    assert (
        "names no database: add one, e.g. postgresql+psycopg2://u@h/costaware?sslmode=require (CREATE" in err
    )


def test_a_database_not_created_fails_the_task_without_retry(postgres_url: str) -> None:
    # It was a LedgerUnavailableError, which Airflow retries as an outage: a task waited out every retry
    # to fail on what no retry creates. It is a configuration error now; a server that is down stays one.
    from airflow.sdk.exceptions import AirflowFailException

    from costaware.core.errors import ConfigurationError, LedgerUnavailableError
    from costaware.glue import airflow_errors

    missing = postgres_url.rsplit("/", 1)[0] + "/costaware_not_created"
    with pytest.raises(ConfigurationError, match="create the database first") as raised:
        Ledger.from_url(missing)
    assert not isinstance(raised.value, LedgerUnavailableError)
    failed = pytest.raises(AirflowFailException, match='database "costaware_not_created" does not exist')
    with failed, airflow_errors():
        Ledger.from_url(missing)
    host = postgres_url.rsplit("@", 1)[1].split("/", 1)[0]
    down = postgres_url.replace(host, "127.0.0.1:1")  # nothing listens: an outage, retried
    with pytest.raises(LedgerUnavailableError):
        Ledger.from_url(down)


@pytest.mark.parametrize(
    ("cfg", "said"),
    [
        (
            "[costaware]\nworker_instance_type = m5.large\n[costaware]\nworker_grid_zone = GB\n",
            "airflow.cfg line 3 starts a second [costaware] section: merge its options into the first one",
        ),
        (
            "[costaware]\nworker_instance_type = m5.large\nworker_instance_type = c5.large\n",
            "airflow.cfg line 3 sets 'worker_instance_type' of [costaware] a second time: keep one",
        ),
    ],
)
def test_an_airflow_cfg_configparser_refuses_is_one_line_not_a_traceback(
    tmp_path: Path, cfg: str, said: str
) -> None:
    # configparser's DuplicateSectionError came as a traceback through Airflow's import.
    import os

    (tmp_path / "airflow.cfg").write_text(cfg)
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    # Unit-test mode reads unit_tests.cfg instead: the file a deployment reads is the one to test.
    env = {k: v for k, v in env.items() if not k.startswith(("AIRFLOW__COSTAWARE__", "AIRFLOW__CORE__UNIT"))}
    script = "from costaware.cli import main; raise SystemExit(main())"
    done = subprocess.run(
        [sys.executable, "-c", script, "prices", "show", "m5.large"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert f"costaware: error: airflow.cfg cannot be read: {tmp_path / 'airflow.cfg'} line" in done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ('project="churn"', '"churn" is in quotes, which would be part of the tag and match no task\'s tags: '
                            "drop them (--scope project=churn)"),
        ("'project'=churn,team=\u201cml\u201d", "'project', \u201cml\u201d are in quotes"),
    ],
)  # fmt: skip
def test_a_budget_scope_in_quotes_is_refused_naming_the_scope_without_them(
    scope: str, message: str, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--scope 'project="churn"'` made a budget over the value "churn" with its quotes: it capped nothing.
    argv = ["--ledger-url", ledger_url, "budget", "set", "--scope", scope, "--period", "month"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--cap-usd", "100"])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert Ledger.from_url(ledger_url).budgets() == []


def test_a_budget_whose_tag_name_no_entry_has_names_the_close_tag_name(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--scope projct=churn` beside entries tagged project=churn was told of close values, none: silence.
    ledger = Ledger.from_url(ledger_url)
    ledger.record(
        LedgerEntry(dag_id="d", run_id="r", task_id="t", kind=Kind.COMPUTE, usd=Decimal(1),
                    tags={"project": "churn", "team": "ml"})
    )  # fmt: skip

    def budget_set(scope: str) -> str:
        argv = ["--ledger-url", ledger_url, "budget", "set", "--scope", scope, "--period", "month"]
        assert main([*argv, "--cap-usd", "100"]) == 0
        return capsys.readouterr().err

    assert "did you mean 'project'? (--scope project=churn)" in budget_set("projct=churn")
    assert "did you mean 'project'? (--scope project=churn)" in budget_set("Project=churn")
    # A misspelt name and value both: the value is compared with the values of the name meant.
    assert "did you mean 'project' and 'churn'? (--scope project=churn,team=ml)" in budget_set(
        "projct=chrun,team=ml"
    )
    assert "note:" not in budget_set("owner=ana")  # nothing close: a new tag, nothing to say


def _cli_in_fresh_interpreter(home: Path, metadata_url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """The costaware command in its own interpreter (Airflow not yet imported) with this metadata database."""
    import os

    unset = ("AIRFLOW__", "AIRFLOW_CONN_", "COSTAWARE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(unset)}
    env |= {"AIRFLOW_HOME": str(home), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata_url}
    # The costaware under test, not the one installed in the interpreter's environment.
    import costaware

    env["PYTHONPATH"] = os.pathsep.join([str(Path(costaware.__file__).parents[1]), env.get("PYTHONPATH", "")])
    script = "from costaware.cli import main; raise SystemExit(main())"
    return subprocess.run(
        [sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_metadata_database_that_does_not_answer_is_named_within_seconds_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    # A PostgreSQL that takes the TCP connection and never answers (hung, or behind a proxy): libpq waited
    # without end (no connect_timeout), and the command left an empty $AIRFLOW_HOME/logs behind.
    import socket
    import time

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepted by the kernel, never read: no answer to the startup packet
        port = silent.getsockname()[1]
        url = f"postgresql+psycopg2://airflow:s3cret-pw@127.0.0.1:{port}/airflow"
        started = time.monotonic()
        done = _cli_in_fresh_interpreter(tmp_path, url, "budget", "set", "--scope", "project=x",
                                         "--period", "month", "--cap-usd", "3")  # fmt: skip
        waited = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert waited < 45, waited
    assert (
        f"cannot read connection 'costaware_ledger' from Airflow's metadata database at "
        f"postgresql+psycopg2://airflow:***@127.0.0.1:{port}/airflow"
    ) in done.stderr
    assert "it did not answer within 5 s; check that it is up and reachable from here" in done.stderr
    assert "nothing written" in done.stderr and "s3cret" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no logs folder, no ledger


def test_a_connect_timeout_in_the_metadata_url_is_the_one_used_and_said(tmp_path: Path) -> None:
    # SQLAlchemy's connect_args win over the URL's query: the look-up's 5 s replaced a URL's own
    # ?connect_timeout= (a slow Aurora Serverless waking up was refused after 5 s), and the message said 5 s.
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        url = f"postgresql+psycopg2://airflow:pw@127.0.0.1:{port}/airflow?connect_timeout=2"
        done = _cli_in_fresh_interpreter(tmp_path, url, "budget", "set", "--scope", "project=x",
                                         "--period", "month", "--cap-usd", "3")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "it did not answer within 2 s; check that it is up and reachable from here" in done.stderr
    assert "within 5 s" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_failed_metadata_look_up_leaves_no_airflow_log_folder(tmp_path: Path) -> None:
    # An airflow.db that is not migrated: the look-up fails at once, but Airflow's import made logs/.
    (tmp_path / "airflow.db").touch()
    done = _cli_in_fresh_interpreter(tmp_path, f"sqlite:///{tmp_path / 'airflow.db'}", "budget", "list")
    assert (
        "cannot read connection 'costaware_ledger' from Airflow's metadata database at sqlite" in done.stderr
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["airflow.db"]


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--cap-usd", "lots"], "cap of budget 'project=q/month' must be a number of USD such as '4.20'"),
        (["--cap-usd", "5", "--cap-gpu-hours", "-1"], "GPU-hour cap of budget 'project=q/month'"),
        (["--cap-usd", "5", "--timezone", "utc"], "unknown time zone 'utc' (did you mean 'UTC'?)"),
        # No cap for a budget that cannot exist yet (no ledger): the file was made, then the set refused.
        ([], "budget 'project=q/month' does not exist yet: give its cap, e.g. --cap-usd 250"),
        (["--cap-gpu-hours", "0"], "budget 'project=q/month' does not exist yet: give its cap"),
    ],
)
def test_a_refused_budget_set_makes_no_ledger_file(
    tmp_path: Path, option: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A mistyped cap made an empty ledger at --ledger-url (created, then the cap was refused).
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    argv = ["--ledger-url", url, "budget", "set", "--scope", "project=q", "--period", "month", *option]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "creating one there" not in err
    assert not (tmp_path / "ledger.db").exists()


def test_a_budget_set_without_a_cap_leaves_a_postgres_database_without_tables(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # PostgreSQL's database is made by hand, but opening the ledger made its tables, then the set was refused.
    from services import fresh_postgres_database
    from sqlalchemy import create_engine, inspect

    url = fresh_postgres_database(postgres_url, "no_cap")
    argv = ["--ledger-url", url, "budget", "set", "--scope", "project=q", "--period", "month"]
    assert main(argv) == 2
    assert "budget 'project=q/month' does not exist yet: give its cap" in capsys.readouterr().err
    engine = create_engine(url)
    assert inspect(engine).get_table_names() == []
    engine.dispose()
    # With its cap the same database gets its tables and the budget.
    assert main([*argv, "--cap-usd", "5"]) == 0
    assert [b.label for b in Ledger.from_url(url).budgets()] == ["project=q/month"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_budget_set_on_a_database_without_ledger_tables_says_it_creates_them(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    # A mistyped database name got the ledger's tables in silence, where a missing SQLite file is said.
    from services import fresh_postgres_database
    from sqlalchemy import create_engine, text

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'other.db'}"
        other = create_engine(url)
        with other.begin() as conn:
            conn.execute(text("CREATE TABLE other (id INTEGER)"))
        other.dispose()
    else:
        url = fresh_postgres_database(request.getfixturevalue("postgres_url"), "typo")
    argv = ["--ledger-url", url, "budget", "set", "--scope", "project=q", "--period", "month"]
    assert main([*argv, "--cap-usd", "5"]) == 0
    assert (
        f"costaware: no ledger at {url} (the database has no costaware tables) yet: creating one there"
    ) in capsys.readouterr().err
    # A ledger now: said once.
    assert main([*argv, "--cap-usd", "6"]) == 0
    assert "creating one there" not in capsys.readouterr().err


def test_budget_list_flags_a_budget_set_in_quotes_with_how_to_replace_it(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Set before quoted scopes were refused (or through the Python API): listed as any other, capping nothing.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget('project="team-a"', "month", "100", cap_gpu_hours="8", timezone="Europe/Berlin")
    ledger.set_budget("project=b,team='ml'", "day", "5")
    ledger.set_budget("project=b", "day", "5")
    ledger.set_budget("project='b'", "day", "3")
    assert main(["--ledger-url", ledger_url, "budget", "list", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)) == 4
    notes = captured.err.strip().splitlines()
    assert notes == [
        "costaware: note: "
        'budget \'project="team-a"/month\' has "team-a" in quotes, which are part of the tag and match '
        "no task's tags, so it caps nothing: set it without them, then delete it (`costaware budget set "
        "--scope project=team-a --period month --cap-usd 100 --cap-gpu-hours 8 --timezone Europe/Berlin`, "
        "then `costaware budget delete --scope 'project=\"team-a\"' --period month`)",
        "costaware: note: "
        "budget 'project='b'/day' has 'b' in quotes, which are part of the tag and match no task's "
        "tags, so it caps nothing: budget 'project=b/day' is the one without them; delete it "
        "(`costaware budget delete --scope 'project='\"'\"'b'\"'\"'' --period day`)",
        "costaware: note: "
        "budget 'project=b,team='ml'/day' has 'ml' in quotes, which are part of the tag and match no "
        "task's tags, so it caps nothing: set it without them, then delete it (`costaware budget set --scope "
        "project=b,team=ml --period day --cap-usd 5`, then `costaware budget delete --scope "
        "'project=b,team='\"'\"'ml'\"'\"'' --period day`)",
    ]
    # The commands it gives work as given, and leave nothing to flag.
    for command in re.findall(r"`costaware ([^`]+)`", captured.err):
        assert main(["--ledger-url", ledger_url, *shlex.split(command)]) == 0
    capsys.readouterr()
    assert main(["--ledger-url", ledger_url, "budget", "list"]) == 0
    assert "note" not in capsys.readouterr().err
    assert sorted(b.label for b in Ledger.from_url(ledger_url).budgets()) == [
        "project=b,team=ml/day",
        "project=b/day",
        "project=team-a/month",
    ]


def test_budget_list_flags_a_budget_whose_value_is_only_quotes_with_its_delete(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # project="" without its quotes is 'project=', no scope: the table was printed, then the command exited 2
    # with an error naming no budget.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget('project=""', "month", "100")
    ledger.set_budget("project=b", "day", "5")
    assert main(["--ledger-url", ledger_url, "budget", "list", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)) == 2
    assert captured.err.strip().splitlines() == [
        "costaware: note: "
        'budget \'project=""/month\' has "" in quotes, which are part of the tag and match no task\'s '
        "tags, so it caps nothing: without them it is no scope; delete it (`costaware budget delete --scope "
        "'project=\"\"' --period month`)"
    ]
    (command,) = re.findall(r"`costaware ([^`]+)`", captured.err)
    assert main(["--ledger-url", ledger_url, *shlex.split(command)]) == 0
    assert [b.label for b in Ledger.from_url(ledger_url).budgets()] == ["project=b/day"]


@pytest.mark.parametrize("scope", ['project=""', "project=\u201c\u201d,team=ml"])
def test_budget_set_with_a_value_only_in_quotes_suggests_no_empty_value(
    scope: str, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # It advised "drop them (--scope project=)", which is refused in turn.
    argv = ["--ledger-url", ledger_url, "budget", "set", "--scope", scope, "--period", "month"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--cap-usd", "100"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert (
        "in quotes, which would be part of the tag and match no task's tags, and without them tag 'project' "
        "would have no value: write the tag's name and the value its tasks are tagged with, without quotes"
    ) in err, err
    assert "--scope project=" not in err
    assert Ledger.from_url(ledger_url).budgets() == []


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize(
    "command", [["budget", "list"], ["report"], ["budget", "show", "--scope", "project=x"]]
)
def test_a_command_that_reads_a_database_without_ledger_tables_says_so_and_makes_none(
    backend: str,
    command: list[str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A mistyped database name (another team's, Airflow's own) got the ledger's tables from a command that
    # only reads, which then reported "no budgets" or "no entries" as if it were the real ledger.
    from services import fresh_postgres_database
    from sqlalchemy import create_engine, inspect, text

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'other.db'}"
        other = create_engine(url)
        with other.begin() as conn:
            conn.execute(text("CREATE TABLE other (id INTEGER)"))
        other.dispose()
    else:
        url = fresh_postgres_database(request.getfixturevalue("postgres_url"), "not_a_ledger")
    assert main(["--ledger-url", url, *command]) == 2
    err = capsys.readouterr().err
    assert " (the database has no costaware tables): check --ledger-url" in err, err
    engine = create_engine(url)
    assert [t for t in inspect(engine).get_table_names() if t.startswith("costaware")] == []
    engine.dispose()


def test_every_note_of_a_budget_listing_has_the_clis_one_prefix(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A scope read as unset was said with "costaware: note:", a quoted one beside it with "note:" alone.
    from sqlalchemy import update

    from costaware.adapters.ledger import schema

    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=old", "month", "5")
    ledger.set_budget("project=older", "month", "5")
    with ledger.transaction() as conn:
        for old, stored in (("project=old", "project=null"), ("project=older", 'project="churn"')):
            conn.execute(update(schema.budgets).where(schema.budgets.c.scope == old).values(scope=stored))
    ledger.dispose()
    assert main(["--ledger-url", ledger_url, "budget", "list"]) == 0
    notes = capsys.readouterr().err.strip().splitlines()
    assert len(notes) == 2 and all(n.startswith("costaware: note: budget ") for n in notes), notes
    assert main(["--ledger-url", ledger_url, *SET_BUDGET, "--cap-usd", "00"]) == 0
    assert capsys.readouterr().err.startswith("costaware: note: a $0 cap refuses every hold")


def test_a_budget_whose_scope_reads_as_unset_is_flagged_with_how_to_delete_it(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Made before such scopes were refused: listed and shown as a live cap though no new spend counts in it,
    # and `budget show --scope project=None` advised a `budget set` that is refused.
    from sqlalchemy import update

    from costaware.adapters.ledger import schema

    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    ledger.set_budget("project=old", "month", "5")
    with ledger.transaction() as conn:
        conn.execute(
            update(schema.budgets).where(schema.budgets.c.scope == "project=old").values(scope="project=null")
        )
    ledger.dispose()
    delete = "`costaware budget delete --scope project=null --period month`"
    assert main(["--ledger-url", ledger_url, "budget", "list"]) == 0
    listed = capsys.readouterr()
    assert "project=null" in listed.out and "project=churn" in listed.out
    assert listed.err.strip().splitlines() == [
        "costaware: note: budget 'project=null/month': its scope reads as unset (project=null, what a "
        f"template of an unset param renders): no new spend counts in it; delete it with {delete}"
    ]
    argv = ["--ledger-url", ledger_url, "budget", "show", "--no-schedule", "--scope"]
    assert main([*argv, "project=null"]) == 0
    assert "its scope reads as unset" in capsys.readouterr().err
    assert main([*argv, "project=churn"]) == 0
    assert "reads as unset" not in capsys.readouterr().err
    assert main([*argv, "project=None"]) == 2
    refused = capsys.readouterr().err
    assert "tag 'project' has value 'None', which says it was never set" in refused
    assert "budget set" not in refused
    # The command it gives works as given, and leaves nothing to flag.
    assert main(["--ledger-url", ledger_url, *shlex.split(delete.strip("`").removeprefix("costaware "))]) == 0
    capsys.readouterr()
    assert main(["--ledger-url", ledger_url, "budget", "list"]) == 0
    assert "reads as unset" not in capsys.readouterr().err
