"""`airflow dags test budgeted_tuning` in a fresh home: trials are pruned and promoted, each in the ledger."""

from __future__ import annotations

import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from services import migrated_airflow_env, run_command

from costaware import Ledger

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return migrated_airflow_env(tmp_path_factory.mktemp("tuning-home"), ROOT / "dags")


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_command(env, *args)


@pytest.mark.slow
def test_tuning_dag_prunes_and_promotes_and_reports_each_trial(airflow_env: dict[str, str]) -> None:
    run = _run(airflow_env, "airflow", "dags", "test", "budgeted_tuning")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    sized = r"right-size for budgeted_tuning\.tuning\.trial \(sized declared\): m5\.large on_demand"
    assert re.search(sized, output)

    ledger = Ledger.from_url(airflow_env["COSTAWARE_LEDGER_URL"])
    run_id = ledger.last_run_id("budgeted_tuning")
    rows = ledger.entries(dag_id="budgeted_tuning", run_id=run_id)
    slots = [r for r in rows if r["task_id"] == "tuning.trial"]
    assert len(slots) == 8  # max_trials slots, one priced entry each
    trials = [r for r in slots if r["trial"]]
    stopped = [r for r in slots if not r["trial"]]
    assert len(trials) >= 4 and all(r["outcome"] == "skipped" for r in stopped)
    if stopped:  # a stop rule fired (the plateau, with these settings): the later slots were skipped
        assert re.search(r"study budgeted_tuning-\S+ stopped \((plateau|budget)\)", output)
    states = {r["tags"]["trial_state"] for r in trials}
    assert {"pruned", "promoted"} <= states, states
    for r in trials:
        assert (
            r["trial"] == f"#{r['trial'].split()[0][1:]} {r['tags']['trial_state']}@{r['tags']['fidelity']}"
        )
        assert r["instance_type"] == "m5.large" and r["reservation_id"] is not None
        assert r["tags"]["project"] == "flight-delays" and r["tags"]["study"].startswith("budgeted_tuning-")
    promoted = [r for r in trials if r["tags"]["trial_state"] == "promoted"]
    assert all(r["tags"]["fidelity"] == "32" for r in promoted)
    assert ledger.open_reservations() == []  # the listener settled every trial's reservation

    report = _run(
        airflow_env, "costaware", "report", "--dag-id", "budgeted_tuning", "--last-run", "--group-by", "trial"
    )
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    assert any(re.match(r"#\d+ pruned@(8|16) ", line) for line in lines), report.stdout
    assert any(re.match(r"#\d+ promoted@32 ", line) for line in lines), report.stdout
    by_state = _run(
        airflow_env,
        "costaware",
        "report",
        "--dag-id",
        "budgeted_tuning",
        "--last-run",
        "--group-by",
        "tag:trial_state",
        "--format",
        "json",
    )
    assert by_state.returncode == 0, by_state.stderr
    assert {'"group": "pruned"', '"group": "promoted"'} <= {
        m.group(0) for m in re.finditer(r'"group": "\w+"', by_state.stdout)
    }
    summary = re.search(r"per trial \$([\d.]+), per successful trial \$([\d.]+)", output)
    assert summary is not None
    spent = sum((r["usd"] for r in trials), Decimal(0))
    assert Decimal(summary.group(2)) == (spent / len(promoted)).quantize(Decimal("0.000001"))
