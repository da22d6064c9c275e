from __future__ import annotations

import json
import shlex

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
