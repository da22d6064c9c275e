from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from airflow.sdk.exceptions import AirflowFailException
from contexts import task_context

from costaware.adapters.model_store import ModelStore, ModelVersion, new_version_id
from costaware.core.errors import ConfigurationError
from costaware.operators.promote import ModelPromoteOperator
from costaware.training.runner import RetrainJob, run_retrain

FEATURES = ["x1", "x2", "c"]


def _write(path: Path, seed: int, rows: int = 1500, shuffle_label: bool = False) -> Path:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {"x1": rng.normal(size=rows), "x2": rng.normal(size=rows), "c": rng.choice(["a", "b", "c"], rows)}
    )
    frame["y"] = ((frame.x1 - frame.x2 + rng.normal(0, 0.5, rows)) > 0).astype(int)
    if shuffle_label:
        frame["y"] = rng.permutation(frame["y"].to_numpy())
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)
    return path


def _train(tmp: Path, name: str, seed: int, shuffle_label: bool = False) -> str:
    data = _write(tmp / "train" / name / "data.parquet", seed, shuffle_label=shuffle_label)
    job = RetrainJob(
        data_path=str(data),
        label_column="y",
        feature_columns=FEATURES,
        model_store=str(tmp / "models"),
        checkpoint_store=str(tmp / "ckpt"),
        checkpoint_key=f"d/t/{name}",
        policy="always-full",
        trainer_params={"epochs": 3},
    )
    return str(run_retrain(job)["version"])


def _context() -> dict[str, Any]:
    return task_context("promote", dag_id="retrain_dag", run_id="run-1")


def _promote(tmp: Path, candidate: str, **kwargs: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "task_id": "promote",
        "model_store": str(tmp / "models"),
        "candidate": candidate,
        "holdout_path": str(tmp / "holdout.parquet"),
        "label_column": "y",
        **kwargs,
    }
    return ModelPromoteOperator(**args).execute(_context())


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    _write(tmp_path / "holdout.parquet", seed=99)
    return ModelStore.open(str(tmp_path / "models"))


def test_first_candidate_then_worse_candidate(tmp_path: Path, store: ModelStore) -> None:
    good = _train(tmp_path, "good", 1)
    first = _promote(tmp_path, good)
    assert first["promote"] and first["champion_metric"] is None and first["candidate_metric"] > 0.85
    assert store.champion_pointer().version == good  # type: ignore[union-attr]

    worse = _train(tmp_path, "worse", 2, shuffle_label=True)
    decision = _promote(tmp_path, worse, margin="0.01")
    assert not decision["promote"]
    assert decision["champion"] == good and decision["candidate"] == worse
    assert decision["candidate_metric"] < 0.65 < 0.85 < decision["champion_metric"]
    assert "champion kept" in decision["reason"] and decision["margin"] == 0.01
    assert store.champion_pointer().version == good  # type: ignore[union-attr]
    recorded = store.decisions()
    assert [d["candidate"] for d in recorded] == [good, worse]
    assert recorded[-1]["candidate_metric"] == decision["candidate_metric"]
    assert recorded[-1]["champion_metric"] == decision["champion_metric"]
    assert recorded[-1]["holdout_rows"] == 1500 and recorded[-1]["run"]["task_id"] == "promote"


def test_equal_metrics_promote(tmp_path: Path, store: ModelStore) -> None:
    first = _train(tmp_path, "a", 1)
    _promote(tmp_path, first)
    meta = store.get(first)
    twin = store.save(
        ModelVersion(**{**meta.to_dict(), "version": new_version_id(), "model_sha256": "", "created_at": ""}),
        store.model_bytes(meta),
    )
    decision = _promote(tmp_path, twin.version)
    assert decision["promote"] and "equal, promoted" in decision["reason"]
    assert decision["candidate_metric"] == decision["champion_metric"]
    assert store.champion_pointer().version == twin.version  # type: ignore[union-attr]


@pytest.mark.parametrize("status", ["interrupted", "failed"])
def test_candidate_from_interrupted_or_failed_run_is_never_promoted(
    tmp_path: Path, store: ModelStore, status: str
) -> None:
    champion = _train(tmp_path, "a", 1)
    _promote(tmp_path, champion)
    meta = store.get(_train(tmp_path, "b", 3))
    bad = store.save(
        ModelVersion(
            **{
                **meta.to_dict(),
                "version": new_version_id(),
                "status": status,
                "model_sha256": "",
                "created_at": "",
            }
        ),
        b"never loaded",
    )
    decision = _promote(tmp_path, bad.version, margin=1.0)
    assert not decision["promote"] and f"status {status!r}" in decision["reason"]
    assert decision["candidate_metric"] is None
    assert store.champion_pointer().version == champion  # type: ignore[union-attr]


def test_half_written_candidate_is_never_promoted(tmp_path: Path, store: ModelStore) -> None:
    half = new_version_id()
    store.blobs.write_bytes(f"versions/{half}/model.skops", b"cut off")
    decision = _promote(tmp_path, half)
    assert not decision["promote"] and "status 'incomplete'" in decision["reason"]
    assert store.champion_pointer() is None


@pytest.mark.parametrize(
    ("candidate", "kwargs", "message"),
    [
        ("v-missing", {}, "model version 'v-missing' is not in"),
        ("None", {}, "no candidate version given"),
        ("TRAINED", {"margin": "-1"}, "margin must be a finite number >= 0, got -1"),
        ("TRAINED", {"holdout_path": "/nowhere/holdout.parquet"}, "does not exist"),
        ("TRAINED", {"label_column": "x1"}, r"label column 'x1' has values"),
    ],
)
def test_bad_input_fails_and_promotes_nothing(
    tmp_path: Path, store: ModelStore, candidate: str, kwargs: dict[str, Any], message: str
) -> None:
    if candidate == "TRAINED":
        candidate = _train(tmp_path, "a", 1)
    with pytest.raises(AirflowFailException, match=message):
        _promote(tmp_path, candidate, **kwargs)
    assert store.champion_pointer() is None and store.decisions() == []


UNKNOWN_METRIC = "unknown metric 'f1': use one of roc_auc, average_precision, accuracy, log_loss, brier"


def test_unknown_metric_fails_when_the_operator_is_built_before_any_training() -> None:
    with pytest.raises(ConfigurationError, match=UNKNOWN_METRIC):
        ModelPromoteOperator(
            task_id="promote",
            model_store="/m",
            candidate="v",
            holdout_path="/h",
            label_column="y",
            metric="f1",
        )


def test_a_dag_with_an_unknown_metric_does_not_parse(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    dag_file = tmp_path / "bad_metric.py"
    dag_file.write_text(
        "from airflow.sdk import DAG\n"
        "from costaware.operators.promote import ModelPromoteOperator\n"
        "with DAG('bad_metric', schedule=None):\n"
        "    ModelPromoteOperator(task_id='promote', model_store='/m', candidate='v', holdout_path='/h',\n"
        "                         label_column='y', metric='f1')\n"
    )
    bag = DagBag(dag_folder=str(dag_file))
    assert "bad_metric" not in bag.dags
    (error,) = bag.import_errors.values()
    assert UNKNOWN_METRIC in error


def test_templated_metric_is_checked_once_rendered(tmp_path: Path, store: ModelStore) -> None:
    from airflow.sdk import DAG

    candidate = _train(tmp_path, "a", 1)
    with DAG("promote_dag", schedule=None):
        op = ModelPromoteOperator(
            task_id="promote",
            model_store=str(tmp_path / "models"),
            candidate=candidate,
            holdout_path=str(tmp_path / "holdout.parquet"),
            label_column="y",
            metric="{{ params.metric }}",
        )
    for metric in ("f1", "log_loss"):
        context = {**_context(), "params": {"metric": metric}}
        op.metric = "{{ params.metric }}"
        op.render_template_fields(context)
        if metric == "f1":
            with pytest.raises(AirflowFailException, match=UNKNOWN_METRIC):
                op.execute(context)
            assert store.champion_pointer() is None and store.decisions() == []
        else:
            assert op.execute(context)["metric"] == "log_loss"
