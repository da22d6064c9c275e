"""The spot tuning example: the $100 plan's trials through ``RemoteTrainingOperator``, pruned and promoted."""

from __future__ import annotations

import ast
import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from services import migrated_airflow_env, run_command

from costaware import Ledger

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = ROOT / "dags" / "spot_tuning.py"
SCRIPT = ROOT / "examples" / "spot_tuning" / "train_trial.py"


def _dag_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spot_tuning_dag", DAG_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spot_tuning_parses_fast_with_its_tasks_and_the_seed_s_plan() -> None:
    started = time.perf_counter()
    bag = DagBag(dag_folder=str(DAG_FILE))
    assert time.perf_counter() - started < 5  # the file imports neither torch nor the runtime
    assert not bag.import_errors
    dag = bag.dags["spot_tuning"]
    assert set(dag.task_ids) == {"prepare", "spot_window", "plan", "warmup", "select", "full", "best"}
    assert dag.get_task("warmup").upstream_task_ids == {"plan"}
    assert dag.get_task("full").upstream_task_ids == {"select"}
    defaults = {name: dag.params[name] for name in dag.params}
    assert {k: defaults[k] for k in ("max_usd", "max_gpu_hours", "max_trials", "warmup_epochs")} == {
        "max_usd": 100,
        "max_gpu_hours": 20,
        "max_trials": 40,
        "warmup_epochs": 3,
    }
    assert (defaults["full_epochs"], defaults["keep_fraction"], defaults["checkpoint_minutes"]) == (
        15,
        0.5,
        15,
    )
    assert defaults["backend"] == "local"


def test_the_trial_script_imports_nothing_of_the_provider() -> None:
    tree = ast.parse(SCRIPT.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {
        str(node.module).split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    }
    assert imported <= {"__future__", "argparse", "json", "math", "sys", "tempfile", "time", "pathlib",
                        "typing", "numpy", "torch", "costaware_runtime"}, imported  # fmt: skip


def test_the_seed_s_plan_is_sized_to_the_gpu_hour_cap() -> None:
    """40 trials of 3 + 12 epochs at 4 minutes each need 24 GPU-hours: the plan runs 33, within 20."""
    dag = _dag_module()
    hours_per_epoch = 4 / 60
    size = dag.study_size(
        max_trials=40,
        keep_fraction=0.5,
        warmup=(3 * hours_per_epoch * 0.41, 3 * hours_per_epoch),
        promotion=(12 * hours_per_epoch * 0.41, 12 * hours_per_epoch),
        max_usd=100,
        max_gpu_hours=20,
    )
    assert size == 33
    kept = dag.kept_count(size, 0.5)
    assert size * 0.2 + kept * 0.8 <= 20 < (size + 1) * 0.2 + dag.kept_count(size + 1, 0.5) * 0.8


@pytest.mark.parametrize(
    ("trials", "keep_fraction", "kept"), [(0, 0.5, 0), (1, 0.5, 1), (3, 0.5, 1), (4, 0.5, 2), (40, 0.25, 10)]
)
def test_the_prune_keeps_the_top_share_and_at_least_one(trials: int, keep_fraction: float, kept: int) -> None:
    assert _dag_module().kept_count(trials, keep_fraction) == kept


def test_sampling_is_seeded_and_a_smaller_study_runs_a_prefix() -> None:
    dag = _dag_module()
    assert dag.sample_trials(4, 13) == dag.sample_trials(40, 13)[:4]
    assert dag.sample_trials(4, 13) != dag.sample_trials(4, 14)
    for hparams in dag.sample_trials(40, 13):
        assert 1e-4 <= hparams["lr"] <= 1e-2 and 0 <= hparams["dropout"] <= 0.3


def _warmups(*usd: float) -> list[dict[str, Any]]:
    return [{"trial": n, "usd": u, "gpu_hours": u} for n, u in enumerate(usd)]


@pytest.mark.parametrize(
    ("spent", "caps", "promoted", "why"),
    [
        ((4.0, 4.0), (100.0, 100.0), [0, 1], ["pruned", "pruned"]),
        ((4.0, 4.0), (7.0, 100.0), [0], ["stopped by the cap", "pruned", "pruned"]),  # 4 + 2 fits, + 2 not
        ((4.0, 4.0), (100.0, 5.5), [], ["stopped by the cap"] * 2 + ["pruned"] * 2),  # GPU-hours stop it
        ((4.0, 4.0), (5.0, 5.0), [], ["stopped by the cap"] * 2 + ["pruned"] * 2),
    ],
)
def test_promotions_stop_at_either_cap(
    spent: tuple[float, float], caps: tuple[float, float], promoted: list[int], why: list[str]
) -> None:
    up, left = _dag_module().promotions(
        _warmups(1, 1, 1, 1), keep=2, spent=spent, caps=caps, added_epochs=4, warmup_epochs=2
    )
    assert [t["trial"] for t in up] == promoted
    assert all(t["est_usd"] == 2.0 for t in up)
    assert [t["reason"].split(":")[0] for t in left] == why
    assert spent[0] + sum(t["est_usd"] for t in up) <= caps[0]


def _run(env: dict[str, str], conf: dict[str, Any]) -> tuple[str, str]:
    run = run_command(env, "airflow", "dags", "test", "spot_tuning", "2013-02-01", "-c", json.dumps(conf))
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    ledger = Ledger.from_url(env["COSTAWARE_LEDGER_URL"])
    try:
        run_id = ledger.last_run_id("spot_tuning")
    finally:
        ledger.dispose()
    assert run_id
    return output, run_id


def _billed(env: dict[str, str], run_id: str) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The billed attempts of a run by (stage, trial)."""
    ledger = Ledger.from_url(env["COSTAWARE_LEDGER_URL"])
    try:
        rows = ledger.entries(dag_id="spot_tuning", run_id=run_id)
    finally:
        ledger.dispose()
    billed: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["task_id"] in ("warmup", "full") and row["price_source"] == "remote:local":
            assert row["tags"]["study"] == run_id and row["tags"]["stage"] == row["task_id"]
            billed.setdefault((row["task_id"], row["tags"]["trial"]), []).append(row)
    return billed


def _versions(home: Path) -> dict[str, dict[str, Any]]:
    """The model versions the trials left (warm-ups and promoted runs), by version id: their metrics."""
    folder = home / "costaware" / "spot_tuning" / "models" / "versions"
    return {p.parent.name: json.loads(p.read_text())["metrics"] for p in folder.glob("*/metadata.json")}


@pytest.mark.slow
def test_dags_test_warms_up_prunes_promotes_and_holds_the_caps(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = migrated_airflow_env(home, ROOT / "dags")
    small = {"warmup_epochs": 1, "full_epochs": 3, "train_days": 7, "poll_seconds": 0.5, "epoch_minutes": 0.5}
    output, run_id = _run(env, {**small, "max_trials": 2})
    billed = _billed(env, run_id)
    warmups = {trial for stage, trial in billed if stage == "warmup"}
    fulls = {trial for stage, trial in billed if stage == "full"}
    assert warmups == {"0", "1"}, billed.keys()
    assert len(fulls) == 1 and fulls < warmups  # the bottom half has no full run
    for rows in billed.values():
        assert rows and all(r["usd"] > 0 and r["outcome"] == "success" for r in rows)
    assert "pruned: rank 2 of 2" in output and "best: trial" in output and "saved $" in output
    # The promoted run continued from its warm-up's version: 2 epochs added to its 1, not 3 from scratch.
    versions = _versions(home)
    promoted = [m for m in versions.values() if m["epochs"] == 3]
    assert len(versions) == 3 and len(promoted) == 1
    assert promoted[0]["started_epochs"] == 1 and str(int(promoted[0]["trial"])) in fulls

    # A dollar cap of twice what trial 0's warm-up cost: it runs again, its promotion does not fit.
    warmup_usd = sum(r["usd"] for r in billed[("warmup", "0")])
    cap = warmup_usd * 2
    output, run_id = _run(env, {**small, "max_trials": 1, "epoch_minutes": 0.001, "max_usd": float(cap)})
    billed = _billed(env, run_id)
    assert list(billed) == [("warmup", "0")], billed.keys()
    assert "stopped by the cap" in output
    assert sum(r["usd"] for rows in billed.values() for r in rows) <= cap


def test_trial_prices_come_from_the_bundled_list_unless_given() -> None:
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.errors import ConfigurationError

    dag, catalog = _dag_module(), bundled_catalog()
    spot, on_demand, gpus = dag.trial_prices(catalog, "g5.xlarge", None)
    assert (on_demand, gpus) == (1.006, 1.0)
    assert spot == float(catalog.spot_estimate_usd_per_hour("g5.xlarge", "us-east-1")) < on_demand
    assert dag.trial_prices(catalog, "ml.g5.xlarge", None, spot_given=0.5, on_demand_given=1.4) == (
        0.5,
        1.4,
        1.0,
    )
    with pytest.raises(ConfigurationError, match=r"ml\.g5\.xlarge is a SageMaker type"):
        dag.trial_prices(catalog, "ml.g5.xlarge", None, spot_given=0.5)


def test_the_cost_without_the_prune_adds_every_trial_s_epochs_at_the_promoted_runs_price() -> None:
    dag = _dag_module()
    cell = dict.fromkeys(dag.SPEND_KEYS, 0.0)
    spend = {"0": {**cell, "warmup_usd": 1.0, "full_usd": 8.0}, "1": {**cell, "warmup_usd": 3.0}}
    # 2 warm-ups billed 4, a third planned one at their mean 2; 3 trials x 4 added epochs at 8 / 4 = 2 each.
    assert dag.cost_without_prune(spend, trials=3, added_epochs=4, warm=2) == 4 + 2 + 3 * 4 * 2
    no_full = {"0": {**cell, "warmup_usd": 1.0}}
    assert dag.cost_without_prune(no_full, trials=1, added_epochs=4, warm=2) == 1 + 4 * 0.5
    assert dag.cost_without_prune({}, trials=3, added_epochs=4, warm=2) == 0.0
