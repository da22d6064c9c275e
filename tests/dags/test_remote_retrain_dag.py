"""`airflow dags test` of the remote retrain example DAG on the local backend, in a fresh Airflow home."""

from __future__ import annotations

import json
import time
import uuid
from datetime import date
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from remote_support import aws_client
from services import migrated_airflow_env, run_command, set_monthly_cap

from costaware import Ledger

ROOT = Path(__file__).resolve().parents[2]


def test_remote_retrain_parses_fast_with_its_tasks() -> None:
    started = time.perf_counter()
    bag = DagBag(dag_folder=str(ROOT / "dags" / "remote_retrain.py"))
    assert time.perf_counter() - started < 5  # generous: the file itself imports no training code
    assert not bag.import_errors
    dag = bag.dags["remote_retrain"]
    assert set(dag.task_ids) == {
        "land_new_data",
        "features",
        "spend_gate",
        "spot_window",
        "retrain",
        "promote",
    }
    # Prices are dollars, checked by the trigger form ("cheap" failed only at retrain, after the gate).
    from airflow.sdk.definitions.param import ParamValidationError

    for name in ("spot_usd_per_hour", "on_demand_usd_per_hour"):
        param = dag.params.get_param(name)
        assert param.resolve("0.069") == "0.069" and param.resolve(None) is None
        with pytest.raises(ParamValidationError):
            param.resolve("cheap")
    # Without it every Batch run warned that its 110 s were cut to what ECS gives; empty: the backend's.
    grace = dag.params.get_param("preemption_grace_seconds")
    assert grace.resolve(None) is None and grace.resolve(20) == 20
    with pytest.raises(ParamValidationError):
        grace.resolve(0)
    assert "params.preemption_grace_seconds" in dag.get_task("retrain").preemption_grace_seconds


@pytest.mark.slow
def test_dags_test_trains_on_the_local_backend_with_one_entry_per_attempt(tmp_path: Path) -> None:
    env = migrated_airflow_env(tmp_path / "home", ROOT / "dags")
    set_monthly_cap(env, "25")
    run = run_command(env, "airflow", "dags", "test", "remote_retrain", "2013-02-01")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "after 1 attempt(s)" in output and "candidate promoted" in output
    ledger = Ledger.from_url(env["COSTAWARE_LEDGER_URL"])
    rows = ledger.entries(dag_id="remote_retrain")
    ledger.dispose()
    retrain = {r["cause"]: r for r in rows if r["task_id"] == "retrain" and not r["estimated"]}
    assert set(retrain) == {"success", "orchestration"}
    assert retrain["success"]["price_source"] == "remote:local" and retrain["success"]["usd"] > 0


@pytest.mark.slow
def test_an_s3_data_root_goes_through_the_aws_default_connection_alone(
    tmp_path: Path, moto_endpoint: str
) -> None:
    # The endpoint is only in the connection: a split or a store written past it would go to real AWS.
    bucket = f"ml-team-{uuid.uuid4().hex[:8]}"
    aws_client("s3", moto_endpoint).create_bucket(Bucket=bucket)
    env = migrated_airflow_env(tmp_path / "home", ROOT / "dags")
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "COSTAWARE_S3_ENDPOINT_URL", "AWS_PROFILE"):
        env.pop(name, None)
    env.update(
        {
            "AWS_EC2_METADATA_DISABLED": "true",
            # The local backend's job is a child of the worker: its keys are the worker's environment's.
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(
                {
                    "conn_type": "aws",
                    "login": "testing",
                    "password": "testing",
                    "extra": {"region_name": "us-east-1", "endpoint_url": moto_endpoint},
                }
            ),
        }
    )
    set_monthly_cap(env, "25")
    conf = json.dumps({"data_root": f"s3://{bucket}/remote"})
    run = run_command(env, "airflow", "dags", "test", "remote_retrain", "2013-02-01", "-c", conf)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "candidate promoted" in output
    listed = aws_client("s3", moto_endpoint).list_objects_v2(Bucket=bucket)
    keys = {o["Key"].split("/")[1] for o in listed.get("Contents", [])}
    assert keys == {"splits", "models", "checkpoints"}


def test_an_s3_data_root_in_a_bucket_that_does_not_exist_fails_features_naming_it(
    tmp_path: Path, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pyarrow's OSError ("AWS Error NO_SUCH_BUCKET during CreateMultipartUpload") escaped as a traceback that
    # named neither data_root nor what to do.
    from airflow.sdk.exceptions import AirflowFailException

    from costaware.examples import flights

    connection = {"region_name": "us-east-1", "endpoint_url": moto_endpoint}
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps({"conn_type": "aws", "login": "testing", "password": "testing", "extra": connection}),
    )
    dag = DagBag(dag_folder=str(ROOT / "dags" / "remote_retrain.py")).dags["remote_retrain"]
    features = dag.get_task("features").python_callable
    missing = f"ml-team-{uuid.uuid4().hex[:8]}"
    context = {"params": {"data_root": f"s3://{missing}/remote"}, "run_id": "manual__2013-02-01"}
    monkeypatch.setitem(features.__globals__, "get_current_context", lambda: context)
    flights.land_days(tmp_path / "landing", date(2013, 1, 3))
    with pytest.raises(AirflowFailException) as refused:
        features({"replay_date": "2013-01-02", "landing": str(tmp_path / "landing")})
    assert str(refused.value) == (
        f"data_root 's3://{missing}/remote': bucket {missing!r} does not exist where the connection "
        "'aws_default' looks (its endpoint_url, else AWS): create the bucket, or give a data_root in one "
        "that exists"
    )
