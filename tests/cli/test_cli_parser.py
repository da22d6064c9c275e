"""The parser built from the declarations: lazy command modules, shared arguments, one error handler."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from decimal import Decimal

import pytest

from costaware import Ledger
from costaware.cli import build_parser, main
from costaware.cli.arguments import ActionCommand, GroupCommand
from costaware.cli.config import COMMANDS
from costaware.cli.output import FORMATS, emit, render_table
from costaware.core.budgets import Period
from costaware.core.ledger import GROUP_BYS, Kind, LedgerEntry


def _actions() -> list[ActionCommand]:
    return [sub for cmd in COMMANDS for sub in (cmd.subcommands if isinstance(cmd, GroupCommand) else (cmd,))]


def _leaf_parsers(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _leaf_parsers(sub, (*words, name)) or {" ".join((*words, name)): sub}
    return found


@pytest.mark.parametrize("command", _actions(), ids=lambda c: c.func.path)
def test_every_declared_function_exists(command: ActionCommand) -> None:
    assert callable(command.func.load())


def test_help_imports_no_command_module_and_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from costaware.cli import build_parser\n"
        "build_parser().format_help()\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('airflow', 'sqlalchemy', 'pandas')]\n"
        "commands = [m for m in sys.modules if m.startswith('costaware.cli.commands.')]\n"
        "print(heavy, commands)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[] []", done.stderr


def test_python_dash_m_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "costaware.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "usage: costaware" in done.stdout, done.stderr


def test_every_format_flag_has_the_same_choices() -> None:
    parsers = _leaf_parsers(build_parser())
    formats = {
        name: tuple(a.choices or ())
        for name, p in parsers.items()
        for a in p._actions
        if "--format" in a.option_strings
    }
    assert formats.pop("runs show") == ("text", "json")  # one run's record, not rows
    assert formats and set(formats.values()) == {FORMATS}


def test_period_and_group_by_come_from_the_core_constants() -> None:
    parsers = _leaf_parsers(build_parser())
    (period,) = [a for a in parsers["budget set"]._actions if "--period" in a.option_strings]
    assert list(period.choices or ()) == [p.value for p in Period]
    (group_by,) = [a for a in parsers["report"]._actions if "--group-by" in a.option_strings]
    assert str(group_by.metavar) == "{" + ",".join((*GROUP_BYS, "tag:<name>")) + "}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "--format", "yaml"], "invalid choice: 'yaml'"),
        (["budget", "list", "--format", "xml"], "invalid choice: 'xml'"),
        (
            ["budget", "set", "--scope", "team=ml", "--period", "weekly", "--cap-usd", "1"],
            "invalid choice: 'weekly'",
        ),
        (["audit", "--action", "deleted"], "invalid choice: 'deleted'"),
        (
            ["simulate", "--prices", "p.json", "--jobs", "j.csv", "--policy", "cheapest"],
            "invalid choice: 'cheapest'",
        ),
        # Told by the top parser, whose usage says nothing of the command's options.
        (
            ["prices", "show", "m5.large", "--regoin", "us-east-1"],
            "costaware prices show: error: unrecognized arguments: --regoin us-east-1 (did you mean "
            "--region?)",
        ),
        # Options are matched whole: `--gpu A100` was read as --gpu-model, `--per month` as --period, and
        # an error spoke of an option never typed.
        (
            ["prices", "list", "--gpu", "A100"],
            "costaware prices list: error: unrecognized arguments: --gpu A100 (did you mean --gpu-model?)",
        ),
        (
            ["budget", "set", "--scope", "team=ml", "--per", "month", "--cap-usd", "1"],
            "costaware budget set: error: the following arguments are required: --period (write --period in "
            "full, not --per)",
        ),
        (
            ["budget", "set", "--scope", "team=ml", "--period", "month", "--cap", "1"],
            "costaware budget set: error: unrecognized arguments: --cap 1 (did you mean --cap-gpu-hours, "
            "--cap-usd?)",
        ),
        # Before the command: the top parser took its value for the command ("invalid choice: 'x'").
        (
            ["--ledger", "x", "report"],
            "costaware: error: unrecognized arguments: --ledger (did you mean --ledger-url?)",
        ),
        # The run id is positional here (`report` takes --run-id): --dag-id was offered as the one meant.
        (
            ["runs", "show", "--run-id", "manual__1", "--dag-id", "d"],
            "costaware runs show: error: unrecognized arguments: --run-id (--run-id is not an option here: "
            "write the run_id alone, without it)",
        ),
    ],
)
def test_argument_errors_name_the_bad_value(
    ledger_url: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--ledger-url", ledger_url, *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert Ledger.from_url(ledger_url).budgets() == []


def test_period_is_matched_whatever_its_case(ledger_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["budget", "set", "--scope", "team=ml", "--period", "Month", "--cap-usd", "10"]
    assert main(["--ledger-url", ledger_url, *argv]) == 0
    assert "per month" in capsys.readouterr().out


def test_every_keyword_is_matched_whatever_its_case(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # --period Month was accepted, --group-by TASK and --format JSON refused: one rule now, for every choice.
    ledger = Ledger.from_url(ledger_url)
    ledger.record(LedgerEntry(dag_id="d", run_id="r", task_id="t", kind=Kind.COMPUTE, usd=Decimal("1"),
                              tags={"Team": "ml"}))  # fmt: skip
    report = ["--ledger-url", ledger_url, "report"]
    assert main([*report, "--group-by", "TASK", "--format", "JSON"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["group_by"] == "task" and [r["group"] for r in shown["rows"]] == ["d.t"]
    # The keyword "tag:" whatever its case; the tag's own name as given (tags are matched exactly).
    assert main([*report, "--group-by", "TAG:Team", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[:2][1].startswith("ml,")
    assert main([*report, "--group-by", "Taks"]) == 2
    assert "cannot group by 'Taks'" in capsys.readouterr().err
    assert main(["--ledger-url", ledger_url, "audit", "--action", "Budget_Set", "--format", "Csv"]) == 0
    with pytest.raises(SystemExit):
        main([*report, "--group-by", " "])
    assert "--group-by: empty: give what one row of the report is" in capsys.readouterr().err


def test_ledger_url_may_follow_the_command(ledger_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "budget",
        "set",
        "--scope",
        "team=ml",
        "--period",
        "day",
        "--cap-usd",
        "5",
        "--ledger-url",
        ledger_url,
    ]
    assert main(argv) == 0
    assert main(["budget", "list", "--format", "json", "--ledger-url", ledger_url]) == 0
    out = capsys.readouterr().out
    (budget,) = json.loads(out[out.index("[") :])
    assert budget["scope"] == "team=ml" and budget["cap_usd"] == "5.000000"
    # Both places: the same URL is fine; two different ones were read as the last, in silence.
    assert main(["--ledger-url", ledger_url, "budget", "list", "--ledger-url", ledger_url]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main(["--ledger-url", "sqlite:////tmp/other.db", "budget", "list", "--ledger-url", ledger_url])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    twice = "--ledger-url is given twice, before the command (sqlite:////tmp/other.db) and after it"
    assert f"{twice} ({ledger_url}): give one" in err


def test_emit_writes_one_table_csv_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [["a", "$0.17", 2], ["b", "$1,234.500002", 10]]
    table = render_table(["name", "usd", "n"], rows)
    lines = table.splitlines()
    assert lines[0].split() == ["name", "usd", "n"] and set(lines[1]) <= {"-", " "}
    assert lines[2].index(".") == lines[3].index(".")  # cents and micro-dollars line up
    emit(rows, "csv", headers=["name", "usd", "n"])
    assert capsys.readouterr().out == "name,usd,n\r\na,0.17,2\r\nb,1234.500002,10\r\n"  # numbers a sheet sums
    emit(rows, "json", headers=["name", "usd", "n"])
    assert json.loads(capsys.readouterr().out)[1] == {"name": "b", "usd": "$1,234.500002", "n": 10}


def test_csv_text_is_never_a_spreadsheet_formula(capsys: pytest.CaptureFixture[str]) -> None:
    # "-", the tables' mark for none, is an empty cell (it came out as the text "'-").
    rows = [["+1+cmd|calc", "-0.5", '=HYPERLINK("x")', "@SUM(A1)", "-$2.00", "plain", "-"]]
    emit(rows, "csv", headers=list("abcdefg"))
    out = capsys.readouterr().out.splitlines()[1]
    assert out == '\'+1+cmd|calc,-0.5,"\'=HYPERLINK(""x"")",\'@SUM(A1),-2.00,plain,'


def test_a_value_that_starts_with_a_dash_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["alerts", "set", "--scope", "project=x", "--period", "month", "--thresholds", "-10%"])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "argument --thresholds: expected one argument (give --thresholds its value; a value" in err
    assert "with '-' goes after '=', as in --thresholds=-VALUE" in err


def test_a_value_left_out_is_asked_for(ledger_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    # `--cap-usd $CAP` with CAP unset: the hint spoke only of values that start with '-'.
    argv = ["budget", "set", "--scope", "team=ml", "--cap-usd", "--period", "month"]
    with pytest.raises(SystemExit) as ended:
        main(["--ledger-url", ledger_url, *argv])
    assert ended.value.code == 2
    assert "argument --cap-usd: expected one argument (give --cap-usd its value;" in capsys.readouterr().err
    assert Ledger.from_url(ledger_url).budgets() == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["budget", "set", "--scope", "project=x", "--period", "month", "--cap-usd", "2", "--cap-usd", "3"],
         "argument --cap-usd: given twice ('2', then '3'): give it once"),
        (["report", "--since", "2026-01-01", "--since=2026-02-01"],
         "argument --since: given twice (2026-01-01T00:00:00+00:00, then 2026-02-01T00:00:00+00:00)"),
        (["report", "--format", "json", "--format", "csv"],
         "argument --format: given twice ('json', then 'csv')"),
    ],
)  # fmt: skip
def test_a_single_valued_option_given_twice_is_refused_and_nothing_is_written(
    argv: list[str], message: str, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # argparse kept the last in silence: `--cap-usd 2 --cap-usd 3` set a $3 cap.
    with pytest.raises(SystemExit) as exited:
        main(["--ledger-url", ledger_url, *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert Ledger.from_url(ledger_url).budgets() == []


def test_an_option_repeated_with_the_same_value_is_read_once(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["budget", "set", "--scope", "project=x", "--period", "month", "--cap-usd", "3", "--cap-usd=3"]
    assert main(["--ledger-url", ledger_url, *argv]) == 0
    assert [b.cap_usd for b in Ledger.from_url(ledger_url).budgets()] == [Decimal(3)]


def test_a_group_s_help_names_as_commands_only_the_actions_it_has() -> None:
    # `costaware --help` said "jobs: ... list them, stop and bill them": no `jobs list` exists (listing is
    # `jobs reconcile --dry-run`), and "spool: list them, ..." where the action is `spool show`.
    import re

    groups = [cmd for cmd in COMMANDS if isinstance(cmd, GroupCommand)]
    action_names = {sub.name for group in groups for sub in group.subcommands}
    for group in groups:
        own = {sub.name for sub in group.subcommands}
        named = set(re.findall(r"[a-z]+", group.help)) & action_names
        assert named <= own, (group.name, group.help, sorted(named - own))
    jobs = next(group for group in groups if group.name == "jobs")
    assert "reconcile" in jobs.help and "--dry-run" in jobs.help, jobs.help
