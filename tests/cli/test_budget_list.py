from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from costaware import Ledger
from costaware.cli import main

RUNS = [f"budgeted_tuning-manual__2026-12-0{n}T09:37:35" for n in (1, 2, 3)]
FOLDED = "and 3 study budgets (a tuning study's own cap each): `costaware budget list --studies` lists them"


@pytest.fixture
def nightly_studies(ledger_url: str) -> list[str]:
    """A team's budget beside the study budgets three runs of the budgeted_tuning example left."""
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    for run in RUNS:
        ledger.set_budget(f"project=flight-delays,study={run}", "total", "0.05")
    ledger.dispose()
    return [f"project=flight-delays,study={run}" for run in RUNS]


def listed(ledger_url: str, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["--ledger-url", ledger_url, "budget", "list", *argv]) == 0
    return capsys.readouterr().out


def test_the_budget_table_counts_study_budgets_in_one_line_and_studies_lists_them(
    ledger_url: str, capsys: pytest.CaptureFixture[str], nightly_studies: list[str]
) -> None:
    # Every run of the budgeted_tuning example left a row here, for good: the teams' budgets got buried.
    table = listed(ledger_url, capsys)
    assert "project=churn" in table and "study=" not in table
    assert table.rstrip().endswith(FOLDED)
    # The command it gives works, and lists the study budgets alone, with no fold line.
    studies = listed(ledger_url, capsys, *shlex.split(FOLDED.split("`")[1])[3:])
    assert [line.split()[0] for line in studies.splitlines()[2:]] == nightly_studies
    assert "project=churn" not in studies and "study budgets" not in studies
    # Nothing was deleted: the budgets (and the report by study) stay.
    assert len(Ledger.from_url(ledger_url).budgets()) == 4


def test_json_and_csv_still_list_every_budget_and_studies_narrows_them(
    ledger_url: str, capsys: pytest.CaptureFixture[str], nightly_studies: list[str]
) -> None:
    every = json.loads(listed(ledger_url, capsys, "--format", "json"))
    assert [b["scope"] for b in every] == ["project=churn", *nightly_studies]
    assert set(every[0]) == {"scope", "period", "cap_usd", "cap_gpu_hours", "timezone"}
    studies = json.loads(listed(ledger_url, capsys, "--studies", "--format", "json"))
    assert studies == every[1:]
    assert len(listed(ledger_url, capsys, "--format", "csv").splitlines()) == 1 + 4


def test_a_ledger_with_only_study_budgets_or_none_says_so(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget(f"project=flight-delays,study={RUNS[0]}", "total", "0.05")
    assert listed(ledger_url, capsys).strip() == (
        "no budgets but 1 study budget (a tuning study's own cap each): `costaware budget list --studies` "
        "lists them"
    )
    ledger.delete_budget(f"project=flight-delays,study={RUNS[0]}", "total")
    ledger.set_budget("project=churn", "month", "100")
    ledger.dispose()
    assert listed(ledger_url, capsys, "--studies").strip() == (
        "no study budgets (a tuning study sets one over its tags and study=<name>, period total)"
    )
    assert "study budget" not in listed(ledger_url, capsys)


def test_the_budget_commands_refusals_count_study_budgets_instead_of_naming_each(
    ledger_url: str, capsys: pytest.CaptureFixture[str], nightly_studies: list[str]
) -> None:
    # `budget show --scope '*'` and `budget delete` of a missing budget named every budget there was.
    studies = "and 3 study budgets (`costaware budget list --studies` lists them)"
    argv = ["--ledger-url", ledger_url, "budget"]
    assert main([*argv, "show", "--scope", "*"]) == 2
    err = capsys.readouterr().err
    assert (
        f"no budget has the catch-all scope '*' (budgets: 'project=churn/month'; {studies}): give one's "
        "scope to see its spend (e.g. --scope 'project=churn')"
    ) in err
    assert "study=" not in err
    assert main([*argv, "delete", "--scope", "project=churn2", "--period", "month"]) == 2
    err = capsys.readouterr().err
    assert f"no budget 'project=churn2/month' to delete (budgets: 'project=churn/month'; {studies}); " in err
    assert "study=" not in err
    # A study's budget to delete: the study budgets are the ones it may mean, named.
    assert main([*argv, "delete", "--scope", "project=flight-delays,study=typo", "--period", "total"]) == 2
    err = capsys.readouterr().err
    assert all(f"'{scope}/total'" in err for scope in nightly_studies)
    assert "as `costaware budget list --studies` shows them" in err
    assert len(Ledger.from_url(ledger_url).budgets()) == 4


def test_a_teams_own_search_budget_to_delete_is_pointed_to_the_plain_listing(
    ledger_url: str, capsys: pytest.CaptureFixture[str], nightly_studies: list[str]
) -> None:
    # A team's own search=ranking budget is listed by `budget list`: its refusal pointed to `--studies`,
    # which does not list it, and named the study budgets instead of counting them.
    argv = ["--ledger-url", ledger_url, "budget"]
    assert main([*argv, "set", "--scope", "search=ranking", "--period", "month", "--cap-usd", "5"]) == 0
    capsys.readouterr()
    assert main([*argv, "delete", "--scope", "search=ranking", "--period", "day"]) == 2
    err = capsys.readouterr().err
    assert "'search=ranking/month'" in err and "and 3 study budgets" in err
    assert err.rstrip().endswith("as `costaware budget list` shows them")


CRASHING_SEARCH = """
import sys, time
from decimal import Decimal
from pathlib import Path

import optuna

from costaware import Ledger
from costaware.training.search import budgeted_search


class Hangs:
    def __init__(self, params):
        pass

    def advance(self, resource):
        Path(sys.argv[2]).write_text("training")
        time.sleep(120)  # killed here, as an OOM killer or a lost machine does
        return 0.0


budgeted_search(
    Hangs,
    space={"a": optuna.distributions.CategoricalDistribution([0, 1])},
    rungs=[1, 3],
    ledger=Ledger.from_url(sys.argv[1]),
    scope={"project": "churn"},
    cap_usd=Decimal("5"),
    usd_per_hour=Decimal("3.6"),
    first_rung_seconds=1.0,
)
"""


def test_a_search_killed_mid_rung_leaves_its_budget_and_the_table_counts_it_with_the_study_budgets(
    ledger_url: str, capsys: pytest.CaptureFixture[str], nightly_studies: list[str], tmp_path: Path
) -> None:
    # A search deletes its own budget (search=<id>) as it ends, even on KeyboardInterrupt; killed, it cannot,
    # and each such budget stayed a row of the table, named in every refusal that lists the budgets.
    training = tmp_path / "training"
    process = subprocess.Popen([sys.executable, "-c", CRASHING_SEARCH, ledger_url, str(training)])
    try:
        for _ in range(600):
            if training.exists() or process.poll() is not None:
                break
            time.sleep(0.1)
        assert training.exists(), "the search never started training"
    finally:
        process.kill()
        process.wait()
    (left,) = [b for b in Ledger.from_url(ledger_url).budgets() if "search=" in str(b.scope)]
    assert str(left.scope).startswith("project=churn,search=")

    table = listed(ledger_url, capsys)
    assert "search=" not in table and "project=churn " in table
    assert table.rstrip().endswith(
        "and 4 study budgets (a tuning study's own cap each; 1 left by a budgeted_search that did not end): "
        "`costaware budget list --studies` lists them"
    )
    assert str(left.scope) in listed(ledger_url, capsys, "--studies")
    assert len(json.loads(listed(ledger_url, capsys, "--format", "json"))) == 5  # json lists all, as before
    # A refusal that lists the budgets counts it too, instead of naming it.
    assert main(["--ledger-url", ledger_url, "budget", "show", "--scope", "project=fraud"]) != 0
    refusal = capsys.readouterr().err
    assert "search=" not in refusal and "4 study budgets" in refusal, refusal


def test_a_search_interrupted_from_the_keyboard_deletes_its_own_budget(ledger_url: str) -> None:
    import optuna

    from costaware.training.search import budgeted_search

    class Interrupted:
        def __init__(self, params: object) -> None:
            pass

        def advance(self, resource: int) -> float:
            raise KeyboardInterrupt

    ledger = Ledger.from_url(ledger_url)
    with pytest.raises(KeyboardInterrupt):
        budgeted_search(
            Interrupted,  # type: ignore[arg-type]
            space={"a": optuna.distributions.CategoricalDistribution([0, 1])},
            rungs=[1, 3],
            ledger=ledger,
            scope={"project": "churn"},
            cap_usd=Decimal("5"),
            usd_per_hour=Decimal("3.6"),
            first_rung_seconds=1.0,
        )
    assert ledger.budgets() == []  # nothing to fold: only a killed search leaves one
