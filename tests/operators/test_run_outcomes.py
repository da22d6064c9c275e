"""The retrain and promote operators record each run's outcome and reproducibility record in the ledger."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from costaware import Ledger
from costaware.adapters.ledger.efficiency import outcomes, run_outcome
from costaware.adapters.model_store import ModelStore
from costaware.core.ledger import Kind, LedgerEntry
from costaware.operators.promote import ModelPromoteOperator
from costaware.operators.warm_start import WarmStartRetrainOperator

FEATURES = ["x1", "x2", "c"]


def write(path: Path, seed: int, rows: int = 1500) -> Path:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {"x1": rng.normal(size=rows), "x2": rng.normal(size=rows), "c": rng.choice(["a", "b", "c"], rows)}
    )
    frame["y"] = ((frame.x1 - frame.x2 + rng.normal(0, 0.5, rows)) > 0).astype(int)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)
    return path


def context(run_id: str, task_id: str, dag_file: Path | None = None) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="nightly", task_id=task_id, run_id=run_id, try_number=1, map_index=-1)
    dag = SimpleNamespace(dag_id="nightly", fileloc=str(dag_file) if dag_file else None)
    return {"ti": ti, "run_id": run_id, "params": {}, "dag": dag}


def retrain(tmp: Path, store: str, run_id: str, **kwargs: Any) -> dict[str, Any]:
    operator = WarmStartRetrainOperator(
        task_id="retrain",
        data_path=str(tmp / "train.parquet"),
        label_column="y",
        feature_columns=FEATURES,
        model_store=str(tmp / store),
        checkpoint_store=str(tmp / "ckpt" / store),
        features_key="feedc0de" * 4,
        policy="always-full",
        **kwargs,
    )
    return operator.execute(context(run_id, "retrain", tmp / "dag.py"))  # type: ignore[arg-type]


@pytest.fixture
def env_ledger(ledger_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Ledger:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    write(tmp_path / "train.parquet", seed=1)
    write(tmp_path / "holdout.parquet", seed=2)
    (tmp_path / "dag.py").write_text("# the DAG file\n")
    return Ledger.from_url(ledger_url)


@pytest.mark.parametrize(
    ("trainer", "params", "unit", "iterations", "change"),
    [
        ("sklearn-sgd", {"epochs": 4, "seed": 7}, "epochs", 4, {"seed": 8}),
        # Histogram boosting without subsampling ignores its seed: change the rounds instead.
        ("sklearn-hgb", {"max_iter": 20, "trees_per_step": 5, "seed": 7}, "rounds", 20, {"max_iter": 25}),
    ],
)
def test_two_runs_with_the_same_record_give_the_same_model(
    env_ledger: Ledger,
    tmp_path: Path,
    trainer: str,
    params: dict[str, Any],
    unit: str,
    iterations: int,
    change: dict[str, Any],
) -> None:
    first = retrain(tmp_path, "models-a", "run-a", trainer=trainer, trainer_params=params)
    second = retrain(tmp_path, "models-b", "run-b", trainer=trainer, trainer_params=params)
    (a,), (b,) = run_outcome(env_ledger, "run-a"), run_outcome(env_ledger, "run-b")
    assert a.record is not None and b.record is not None
    assert a.record.digest == b.record.digest
    assert a.record.seeds == {"seed": 7} and a.record.features_key == "feedc0de" * 4
    assert a.record.dag_file_sha256 == __import__("hashlib").sha256(b"# the DAG file\n").hexdigest()
    assert (a.iterations, a.iteration_unit, a.training_rows) == (iterations, unit, 1500)
    predict_a = predictions(tmp_path / "models-a", first["version"], trainer, params)
    predict_b = predictions(tmp_path / "models-b", second["version"], trainer, params)
    assert np.array_equal(predict_a, predict_b)  # the same model: identical scores on every holdout row
    # Another seed (or parameter) is another record, and another model.
    third = retrain(tmp_path, "models-c", "run-c", trainer=trainer, trainer_params={**params, **change})
    (c,) = run_outcome(env_ledger, "run-c")
    assert c.record is not None and c.record.digest != a.record.digest
    assert not np.array_equal(
        predictions(tmp_path / "models-c", third["version"], trainer, params), predict_a
    )


def predictions(store: Path, version: str, trainer: str, params: dict[str, Any]) -> Any:
    """The model's scores on the holdout rows."""
    from costaware.training.trainers import resolve_trainer

    models = ModelStore.open(str(store))
    fitted = resolve_trainer(trainer, params)
    holdout = pd.read_parquet(store.parent / "holdout.parquet")[FEATURES]
    return fitted.predict(fitted.load(models.model_bytes(models.get(version))), holdout)


def test_promotion_adds_metric_and_decision_next_to_the_run_cost(env_ledger: Ledger, tmp_path: Path) -> None:
    env_ledger.record(
        LedgerEntry(
            dag_id="nightly", run_id="run-1", task_id="retrain", kind=Kind.COMPUTE, usd=Decimal("0.12")
        )
    )
    version = retrain(tmp_path, "models", "run-1", trainer_params={"epochs": 3})["version"]
    decision = ModelPromoteOperator(
        task_id="promote",
        model_store=str(tmp_path / "models"),
        candidate=version,
        holdout_path=str(tmp_path / "holdout.parquet"),
        label_column="y",
    ).execute(context("run-1", "promote"))  # type: ignore[arg-type]
    assert decision["promote"] is True
    (o,) = outcomes(env_ledger, dag_id="nightly")
    assert (o.run_id, o.model_version, o.metric, o.promoted) == ("run-1", version, "roc_auc", True)
    assert o.metric_value == pytest.approx(decision["candidate_metric"])
    assert o.champion_metric is None and o.gain is None  # the first champion: nothing to gain over
    assert o.usd == Decimal("0.12") and o.record is not None and o.training_rows == 1500


def test_an_unreachable_ledger_does_not_fail_the_retrain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "train.parquet", seed=1)
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", "postgresql://costaware:x@127.0.0.1:9/ledger")  # nobody there
    result = retrain(tmp_path, "models", "run-1", trainer_params={"epochs": 2})
    assert result["version"]
    assert "could not record the outcome of run run-1" in caplog.text


def test_a_result_without_a_record_gives_no_record_rather_than_an_empty_one() -> None:
    # A job of an older version wrote no "record": an empty one would share its digest with every other.
    from costaware.operators.run_record import retrain_outcome

    identity = {"dag_id": "nightly", "run_id": "run-old", "task_id": "train"}
    result = {"version": "v1", "rows": 10, "steps": 3, "mode": "full"}
    outcome = retrain_outcome(context={}, identity=identity, result=result)
    assert outcome.record is None
    assert (outcome.training_rows, outcome.iterations, outcome.iteration_unit) == (10, 3, "epochs")
