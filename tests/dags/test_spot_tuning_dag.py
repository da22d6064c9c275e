"""The spot tuning example: the $100 plan's trials through ``RemoteTrainingOperator``, pruned and promoted.

Its rules are tested in tests/core/test_spot_plan.py, its ledger and price glue in
tests/training/test_spot_tuning.py; here: the DAG's shape and one ``airflow dags test`` run.
"""

from __future__ import annotations

import ast
import json
import re
import runpy
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from services import migrated_airflow_env, run_command

from costaware import Ledger
from costaware.adapters.price_files import bundled_catalog
from costaware.training.spot_tuning import stage_floor_usd, trial_prices

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = ROOT / "dags" / "spot_tuning.py"
SCRIPT = ROOT / "examples" / "spot_tuning" / "train_trial.py"


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
    schema = dag.params.get_param("max_usd").schema
    assert (schema["type"], schema["exclusiveMinimum"], schema["title"]) == ("number", 0, "Dollar cap (USD)")
    assert dag.params.get_param("max_trials").schema["type"] == "integer"


def test_select_and_best_fail_naming_the_plan_when_it_did_not_finish() -> None:
    # They run "all_done" (a failed trial must not stop the study); when `plan` refused the settings there is
    # no study to rank: a failure naming `plan`, not a TypeError on None, and not a skip, which would end the
    # run "successful" (its last tasks skipped) and never alert a scheduled study.
    from airflow.sdk.exceptions import AirflowFailException

    upstream_result = runpy.run_path(str(DAG_FILE))["upstream_result"]

    class Pushed:
        def __init__(self, values: dict[tuple[str, str], Any]) -> None:
            self.values = values

        def xcom_pull(self, *, task_ids: str, key: str) -> Any:
            return self.values.get((task_ids, key))

    with pytest.raises(AirflowFailException, match=r"'plan' did not finish: nothing to rank, so this run"):
        upstream_result(Pushed({}), "plan", "study")
    assert upstream_result(Pushed({("plan", "study"): {"study": "s"}}), "plan", "study") == {"study": "s"}


@pytest.mark.parametrize(
    ("failed", "said"),
    [
        # `plan` did not run for `prepare`'s failure: its own log says nothing.
        (
            {"prepare": "failed", "spot_window": "upstream_failed", "plan": "upstream_failed"},
            "(it did not run, as 'prepare' failed first: that log says why)",
        ),
        ({"prepare": "success", "spot_window": "success", "plan": "failed"}, "(its log says why)"),
        # A failed task removed from the DAG since (its place unknown) is left out, not the whole pointer.
        (
            {
                "retired": "failed",
                "prepare": "failed",
                "spot_window": "upstream_failed",
                "plan": "upstream_failed",
            },
            "(it did not run, as 'prepare' failed first: that log says why)",
        ),
    ],
)
def test_select_and_best_name_the_task_that_failed_first(failed: dict[str, str], said: str) -> None:
    _fails_saying(failed, "plan", "select", said)


@pytest.mark.parametrize(
    ("failed", "said"),
    [
        # select runs all_done: a failed warm-up trial is normal; select then failing is its own doing.
        ({"warmup": "failed", "select": "failed"}, "(its log says why)"),
        # No state for select (not run): the task that failed first is named, as for plan.
        (
            {"prepare": "failed", "plan": "upstream_failed", "warmup": "upstream_failed", "select": None},
            "(it did not run, as 'prepare' failed first: that log says why)",
        ),
    ],
)
def test_best_blames_select_itself_when_select_ran_and_failed(failed: dict[str, Any], said: str) -> None:
    _fails_saying(failed, "select", "best", said)


def _fails_saying(failed: dict[str, Any], missed: str, asking: str, said: str) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    dag = DagBag(dag_folder=str(DAG_FILE)).dags["spot_tuning"]
    upstream_result = runpy.run_path(str(DAG_FILE))["upstream_result"]

    class Run:
        dag_id, run_id, task = "spot_tuning", "manual__1", dag.get_task(asking)

        def xcom_pull(self, *, task_ids: str, key: str) -> Any:
            return None

        def get_task_breadcrumbs(self, *, dag_id: str, run_id: str) -> list[dict[str, Any]]:
            return [
                {"task_id": task_id, "map_index": -1, "state": state} for task_id, state in failed.items()
            ]

    with pytest.raises(AirflowFailException) as caught:
        upstream_result(Run(), missed, "study")
    assert (
        str(caught.value) == f"{missed!r} did not finish: nothing to rank, so this run fails with it {said}"
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"warmup_epochs": 5, "full_epochs": 3}, "full_epochs 3 must be more than warmup_epochs 5"),
        ({"instance_type": "g5.xlarg"}, "unknown instance type 'g5.xlarg'; did you mean g5.xlarge"),
        ({"instance_type": "ml.g5.xlarge"}, "ml.g5.xlarge is a SageMaker type, whose prices are not in"),
        # Each failed every warm-up after the plan had set the study's budget, one per run.
        (
            {"backend": "sagemaker", "backend_options": {"role_arn": "arn:aws:iam::1:role/r"}},
            "the sagemaker backend needs backend_options 'output_s3_uri' (see docs/remote-training.md); "
            "SageMaker jobs need an s3:// data_root, got '$AIRFLOW_HOME/costaware/spot_tuning'",
        ),
        ({"backend": "batch"}, "Batch backend needs spot_queue, on_demand_queue, job_definition"),
        ({"backend_options": {"roots": "/tmp"}}, "'roots' is not an option of the local backend"),
        # Refused only at each warm-up's submit, after the plan had set the study's budget and reserved.
        (
            {
                "backend": "sagemaker",
                "image": "1.dkr.ecr.us-east-1.amazonaws.com/trial:1",
                "data_root": "s3://bucket/spot-tuning",
                "backend_options": {"role_arn": "arn:aws:iam::1:role/r", "output_s3_uri": "s3://bucket/out"},
            },
            "the sagemaker backend cannot run the trials: SageMaker trains only on ml.* instance types, and "
            "the trials would run on 'g5.xlarge': give instance_type as SageMaker names it (ml.g5.xlarge) "
            "with its spot_usd_per_hour and on_demand_usd_per_hour (SageMaker's prices, not EC2's)",
        ),
    ],
)
def test_prepare_refuses_bad_settings_before_anything_is_recorded(
    changes: dict[str, Any], message: str
) -> None:
    # `prepare` is the first task: a typo fails there, before the spot window records its estimate.
    from airflow.sdk.exceptions import AirflowFailException

    module = runpy.run_path(str(DAG_FILE))
    dag_params = module["spot_tuning"]().params
    params = {name: dag_params[name] for name in dag_params}
    module["check_params"](params)  # the defaults pass
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        module["check_params"]({**params, **changes})


def test_the_trial_script_imports_nothing_of_the_provider() -> None:
    tree = ast.parse(SCRIPT.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {
        str(node.module).split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    }
    assert imported <= {"__future__", "argparse", "json", "math", "sys", "tempfile", "time", "pathlib",
                        "typing", "numpy", "torch", "costaware_runtime"}, imported  # fmt: skip


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

    # Every stage ran under its cap, what the study reserved for it: the warm-ups' from the plan, the
    # promotion's from its own warm-up's bill (each at least a stage's least: epochs of 30 s are a demo).
    assert output.count("is left of max_usd") >= 3, output[-6000:]
    assert "(stopped at $" in output  # the plan and the promotion say where they are stopped

    # A dollar cap that holds one warm-up at its cap but not the promotion of 4,999 more epochs at the
    # warm-up's billed cost per epoch (x 1.5): it is refused unless the warm-up cost under $0.00004 (a third
    # of a second on spot), which no run of the script does.
    # A stage's least cap on on-demand, the most it can be (a past day: the window chose on-demand).
    prices = trial_prices(bundled_catalog(), "g5.xlarge", "us-east-1")
    floor = stage_floor_usd(prices, "on_demand", backend="local")
    cap = floor * Decimal("1.25")
    one = {"max_trials": 1, "full_epochs": 5000, "epoch_minutes": 0.001, "max_usd": float(cap)}
    output, run_id = _run(env, {**small, **one})
    billed = _billed(env, run_id)
    # The warm-up is the study's only spend: the promotion that would take it past the cap never started.
    assert list(billed) == [("warmup", "0")], billed.keys()
    assert "stopped by the cap" in output
    ledger = Ledger.from_url(env["COSTAWARE_LEDGER_URL"])
    try:
        assert not ledger.open_reservations()  # nothing is left held for a promotion that did not run
    finally:
        ledger.dispose()


def test_the_winner_is_ranked_as_budgeted_search_ranks_a_loss_that_rose() -> None:
    pick_winner = runpy.run_path(str(DAG_FILE))["pick_winner"]
    warmups = [{"trial": 1, "loss": 15.0, "version": "w1"}, {"trial": 2, "loss": 14.8, "version": "w2"}]
    # Trial 2 ended lower (15.54 < 15.60) but rose from its warm-up's 14.80: past its best, it ranks 16.28.
    promoted = [{"trial": 1, "loss": 15.60, "version": "f1"}, {"trial": 2, "loss": 15.54, "version": "f2"}]
    winner, note = pick_winner(promoted, warmups)
    assert winner["version"] == "f1" and "ranked by 16.200: its RMSE rose from 15.000" in note
    # A promotion that kept improving ranks by its RMSE alone, and says nothing more.
    improved = [{"trial": 1, "loss": 14.0, "version": "f1"}, {"trial": 2, "loss": 14.5, "version": "f2"}]
    assert pick_winner(improved, warmups) == (improved[0], "")
    # No promotion finished: the best warm-up.
    assert pick_winner([], warmups) == (warmups[1], "")
