from __future__ import annotations

import logging
import os
import re
import signal
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from airflow.sdk.exceptions import AirflowFailException
from contexts import task_context

from costaware.adapters.model_store import ModelStore
from costaware.core.errors import ConfigurationError
from costaware.operators.warm_start import WarmStartRetrainOperator
from costaware.training.checkpointing import PreemptedError
from costaware.training.trainers import SGDTrainer, TrainingData

FEATURES = ["x1", "x2", "c"]


def _day(folder: Path, day: int, rows: int = 1500, shift: float = 0.0) -> Path:
    rng = np.random.default_rng(day)
    frame = pd.DataFrame(
        {
            "x1": rng.normal(shift, 1, rows),
            "x2": rng.normal(size=rows),
            "c": rng.choice(["a", "b", "c"], rows),
        }
    )
    frame["delay"] = 20 * (frame.x1 - frame.x2) + rng.normal(0, 15, rows)  # label: delay > 15
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"day-{day:03d}.parquet"
    frame.to_parquet(path, index=False)
    return path


def _context(run_id: str = "scheduled__2026-01-01", try_number: int = 1) -> dict[str, Any]:
    return task_context("retrain", dag_id="retrain_dag", run_id=run_id, try_number=try_number)


def _operator(tmp: Path, day: int, **kwargs: Any) -> WarmStartRetrainOperator:
    args: dict[str, Any] = {
        "task_id": "retrain",
        "data_path": str(tmp / "landing"),
        "new_data_path": str(tmp / "landing" / f"day-{day:03d}.parquet"),
        "label_column": "delay",
        "label_threshold": 15,
        "feature_columns": FEATURES,
        "model_store": str(tmp / "models"),
        "checkpoint_store": str(tmp / "ckpt"),
        "checkpoint_every_steps": 2,
        "usd_per_hour": "0.40",
        "policy_params": {"max_warm_steps": 3},
        **kwargs,
    }
    return WarmStartRetrainOperator(**args)


def test_full_retrain_on_day_one_then_warm_starts_with_reasons(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ModelStore.open(str(tmp_path / "models"))
    modes, parents = [], []
    for day in range(1, 6):
        _day(tmp_path / "landing", day)
        with caplog.at_level(logging.INFO):
            result = _operator(tmp_path, day).execute(_context(f"run-{day}"))
        store.set_champion(result["version"])
        modes.append(result["mode"])
        parents.append(result["parent"])
        assert f"retrain mode: {result['mode']}; reason: {result['reason']}" in caplog.text
    assert modes == ["full", "warm", "warm", "warm", "full"]  # max_warm_steps=3 forces day five
    assert parents[0] is None and parents[4] is None and all(parents[1:4])
    meta = store.champion()
    assert meta is not None and meta.reason.startswith("3 warm steps since the last full retrain")
    day2 = store.get(parents[2])
    assert (day2.mode, day2.warm_steps_since_full, day2.metrics["rows"]) == ("warm", 1, 1500)
    assert day2.run["run_id"] == "run-2" and day2.cost_usd is not None and float(day2.cost_usd) > 0
    assert store.get(parents[1]).metrics["rows"] == 1500 and store.get(parents[1]).mode == "full"
    assert meta.metrics["rows"] == 5 * 1500  # the full retrain read the whole landing folder
    assert not any((tmp_path / "ckpt").rglob("*.ckpt"))


@pytest.mark.parametrize("unset", ["None", "null", ""])
def test_a_price_template_of_an_unset_param_trains_without_a_cost(tmp_path: Path, unset: str) -> None:
    # usd_per_hour="{{ params.rate }}" with the param left blank rendered "None": the run failed after
    # reading the data ("usd_per_hour 'None' is not an amount").
    _day(tmp_path / "landing", 1)
    op = _operator(tmp_path, 1, usd_per_hour="{{ params.rate }}")
    op.usd_per_hour = unset  # as rendered
    result = op.execute(_context("r1"))
    assert ModelStore.open(str(tmp_path / "models")).get(result["version"]).cost_usd is None


@pytest.mark.parametrize("free", [0, "0", 0.0])
def test_a_rate_of_zero_is_a_cost_of_zero_not_an_unknown_one(tmp_path: Path, free: object) -> None:
    # usd_per_hour=0 (the team's own box) was dropped as "not given" by an `or None`, so the model version's
    # cost was unknown, while "0" gave $0 and the cost listener billed the try at $0/hour.
    from costaware.try_pricing import compute_of

    _day(tmp_path / "landing", 1)
    op = _operator(tmp_path, 1, usd_per_hour=free)
    assert compute_of(op)["usd_per_hour"] == 0  # as the try is billed
    cost = ModelStore.open(str(tmp_path / "models")).get(op.execute(_context("r1"))["version"]).cost_usd
    assert cost is not None and Decimal(cost) == 0


def test_the_version_s_cost_is_at_the_rate_the_try_is_billed_at(tmp_path: Path) -> None:
    # The try was billed at the costaware_compute param's $2/hour, but the model version's cost was unknown:
    # the training was handed only the operator's own usd_per_hour.
    from costaware.try_pricing import compute_of

    _day(tmp_path / "landing", 1)
    op = _operator(tmp_path, 1, usd_per_hour=None, params={"costaware_compute": {"usd_per_hour": "2"}})
    assert compute_of(op)["usd_per_hour"] == Decimal(2)  # as the try is billed
    version = ModelStore.open(str(tmp_path / "models")).get(op.execute(_context("r1"))["version"])
    assert version.cost_usd is not None and Decimal(version.cost_usd) > 0


def test_force_full_and_drift_trigger_full_retrains(tmp_path: Path) -> None:
    store = ModelStore.open(str(tmp_path / "models"))
    _day(tmp_path / "landing", 1)
    store.set_champion(_operator(tmp_path, 1).execute(_context("r1"))["version"])
    _day(tmp_path / "landing", 2)
    forced = _operator(tmp_path, 2, force_full="{{ params.force_full }}")
    forced.force_full = "True"  # as rendered from the template
    assert forced.execute(_context("r2"))["reason"] == "full retrain requested (force_full)"
    _day(tmp_path / "landing", 3, shift=2.5)
    result = _operator(tmp_path, 3).execute(_context("r3"))
    assert result["mode"] == "full" and "feature 'x1' drifted" in result["reason"]
    assert result["drift"]["psi"]["x1"] > 0.25


class PreemptedOnceTrainer(SGDTrainer):
    """Receives a real SIGTERM (the spot notice) while its third step runs, once per process."""

    fired = False

    def fit_step(self, model: Any, data: TrainingData, *, step: int) -> Any:
        if step == 2 and not PreemptedOnceTrainer.fired:
            PreemptedOnceTrainer.fired = True
            os.kill(os.getpid(), signal.SIGTERM)
        return super().fit_step(model, data, step=step)


def test_sigterm_raises_a_retryable_preemption_and_the_retry_resumes(tmp_path: Path) -> None:
    _day(tmp_path / "landing", 1)
    op = _operator(tmp_path, 1, trainer=f"{__name__}:PreemptedOnceTrainer", trainer_params={"epochs": 6})
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(PreemptedError) as caught:
        op.execute(_context("r1", try_number=1))
    assert not isinstance(caught.value, AirflowFailException)
    assert caught.value.ledger_cause == "preemption" and caught.value.step == 3
    assert signal.getsignal(signal.SIGTERM) == previous  # handler restored
    retry = _operator(tmp_path, 1, trainer=f"{__name__}:PreemptedOnceTrainer", trainer_params={"epochs": 6})
    result = retry.execute(_context("r1", try_number=2))
    assert result["resumed_from_step"] == 3 and result["steps"] == 6
    assert (
        ModelStore.open(str(tmp_path / "models"))
        .get(result["version"])
        .trainer.endswith("PreemptedOnceTrainer")
    )


def test_on_kill_requests_a_checkpoint(tmp_path: Path) -> None:
    _day(tmp_path / "landing", 1)
    op = _operator(tmp_path, 1, trainer_params={"epochs": 4})
    original = op._remember

    def remember_and_kill(checkpointer: Any) -> None:
        original(checkpointer)
        op.on_kill()  # as Airflow's task runner does on SIGTERM

    op._remember = remember_and_kill  # type: ignore[method-assign]
    with pytest.raises(PreemptedError, match="after step 1 saved"):
        op.execute(_context())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trainer": "no.such:Trainer"}, "cannot import trainer 'no.such:Trainer'"),
        ({"trainer_params": {"epochs": 0}}, "epochs must be an integer >= 1, got 0"),
        ({"feature_columns": ["x1", "nope"]}, r"columns \['nope'\] are not in"),
        ({"force_full": "maybe"}, "force_full must be true or false, got 'maybe'"),
        (
            {"new_data_path": "/does/not/exist.parquet"},
            "data '/does/not/exist.parquet' does not exist",
        ),
        ({"label_threshold": None}, r"label column 'delay' has values .* not 0/1"),
    ],
)
def test_bad_configuration_fails_without_retry_and_writes_nothing(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    _day(tmp_path / "landing", 1)
    with pytest.raises(AirflowFailException, match=message):
        _operator(tmp_path, 1, **kwargs).execute(_context())
    assert ModelStore.open(str(tmp_path / "models")).version_ids() == []
    assert not any((tmp_path / "ckpt").rglob("*.ckpt"))


def test_an_instance_type_no_price_source_knows_fails_before_any_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cost listener recorded its tries at $0, unpriced: the training's cost was never counted.
    _day(tmp_path / "landing", 1)
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.db'}")
    op = _operator(tmp_path, 1, instance_type="m5.larg", region="us-east-1", usd_per_hour=None)
    with pytest.raises(AirflowFailException, match=r"'m5\.larg'.*did you mean m5\.large"):
        op.execute(_context())
    assert ModelStore.open(str(tmp_path / "models")).version_ids() == []
    assert not any((tmp_path / "ckpt").rglob("*.ckpt"))
    # Given its own rate, the type is only a label: not priced, not checked; a templated rate stays unchecked.
    _operator(tmp_path, 1, instance_type="m5.larg", usd_per_hour="{{ params.rate }}")
    assert _operator(tmp_path, 1, instance_type="m5.large", region="us-east-1", usd_per_hour=None).execute(
        _context()
    )["version"]


@pytest.mark.parametrize("rendered", [" ", "None ", " null"])
def test_a_rate_and_market_rendered_blank_are_checked_as_the_bill_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rendered: str
) -> None:
    # The bill (try_pricing) read a rendered " " as not given, priced from the catalog, but the check before
    # training refused it as "usd_per_hour ' ' is no number of USD" (and a market " " as no market).
    from costaware.try_pricing import compute_of

    _day(tmp_path / "landing", 1)
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.db'}")
    templated = {"usd_per_hour": "{{ params.rate }}", "market": "{{ params.market }}"}
    op = _operator(tmp_path, 1, instance_type="m5.large", region="us-east-1", **templated)
    op.usd_per_hour = op.market = rendered  # as rendered
    assert compute_of(op) == {
        "instance_type": "m5.large",
        "region": "us-east-1",
        "market": "on_demand",
        "usd_per_hour": None,
    }
    result = op.execute(_context())
    assert ModelStore.open(str(tmp_path / "models")).get(result["version"]).cost_usd is None
    # What the bill cannot price is what the check names: the type, not the blank rate.
    misspelt = _operator(tmp_path, 1, instance_type="m5.larg", region="us-east-1", **templated)
    misspelt.usd_per_hour = misspelt.market = rendered
    with pytest.raises(AirflowFailException, match=r"'m5\.larg'.*did you mean m5\.large"):
        misspelt.execute(_context("r2"))
    # Written out, as when parsed.
    assert _operator(tmp_path, 1, usd_per_hour=rendered, market=rendered).usd_per_hour == rendered


def test_a_local_try_on_a_type_of_the_teams_own_is_not_priced_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cost listener prices no local try from the catalog: a warm start on the team's own box was refused
    # before training for a type name no price source can know.
    _day(tmp_path / "landing", 1)
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.db'}")
    local = _operator(tmp_path, 1, instance_type="dgx-box-1", market="{{ params.market }}", usd_per_hour=None)
    local.market = "local"  # as rendered
    assert local.execute(_context())["version"]
    # The workers' market when the task names none.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_MARKET", "local")
    assert _operator(tmp_path, 1, instance_type="dgx-box-1", usd_per_hour=None).execute(_context())["version"]
    # Any other market is priced from the catalog, so the type is checked.
    spot = _operator(tmp_path, 1, instance_type="dgx-box-1", market="spot", usd_per_hour=None)
    with pytest.raises(AirflowFailException, match=r"'dgx-box-1'"):
        spot.execute(_context())


def _billed(op: WarmStartRetrainOperator) -> Any:
    """The ledger entry the cost listener writes for an hour's try of ``op``."""
    from types import SimpleNamespace

    from costaware.plugins.try_cost import build_entry

    ti = SimpleNamespace(
        dag_id="retrain_dag", run_id="r1", task_id=op.task_id, map_index=-1, try_number=1, task=op, id=None
    )
    return build_entry(ti, "success", None, 3600, {"params": {}})


@pytest.mark.parametrize(
    ("kwargs", "refused"),
    [
        # Only the team's imported on-demand price knows the type; a spot try is priced at the catalog's
        # spot saving: the check passed, the listener recorded the training at $0.
        (
            {"instance_type": "x9.teamtype", "region": "us-east-1", "market": "spot"},
            r"'x9\.teamtype' in 'us-east-1' has an on-demand price \(import-cache\), but a spot try is "
            r"priced at the bundled catalog's typical spot saving.*give usd_per_hour \(the spot rate\), "
            "or run it on_demand",
        ),
        # The same, the market given in the param as a person types it: the hint was missed for 'Spot'.
        (
            {
                "instance_type": "x9.teamtype",
                "region": "us-east-1",
                "params": {"costaware_compute": {"market": "Spot"}},
            },
            r"has an on-demand price \(import-cache\), but a spot try is priced at the bundled catalog",
        ),
        # The same type on-demand is billed at the imported price.
        ({"instance_type": "x9.teamtype", "region": "us-east-1", "market": "on_demand"}, None),
        # A rate the task's costaware_compute param gives is the bill: the check refused the type.
        ({"instance_type": "dgx-box-1", "params": {"costaware_compute": {"usd_per_hour": "2.5"}}}, None),
        (
            {
                "instance_type": "dgx-box-1",
                "params": {"costaware_compute": {"market": "local", "usd_per_hour": 1}},
            },
            None,
        ),
        # A type misspelt in the param went unchecked and was recorded at $0.
        (
            {"params": {"costaware_compute": {"instance_type": "g5.xlarg"}}},
            r"task 'retrain' on 'g5\.xlarg' in 'us-east-1' \(on_demand\) cannot be priced, so its cost would "
            r"be recorded at \$0: unknown instance type 'g5\.xlarg'; did you mean g5\.xlarge",
        ),
        (
            {"params": {"costaware_compute": {"market": "spto"}}},
            r"task 'retrain': its costaware_compute param's market: unknown market 'spto'",
        ),
    ],
)
def test_the_price_check_refuses_exactly_what_the_listener_would_record_at_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], refused: str | None
) -> None:
    from decimal import Decimal

    from costaware.adapters.ledger.store import Ledger
    from costaware.adapters.price_source import PriceCache
    from costaware.core.ledger import utcnow
    from costaware.core.price_list import ListPrice

    _day(tmp_path / "landing", 1)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", url)
    imported = ListPrice("ec2", "x9.teamtype", "us-east-1", Decimal("2.0"))
    PriceCache(Ledger.from_url(url)).put([imported], origin="import", fetched_at=utcnow())
    op = _operator(tmp_path, 1, usd_per_hour=None, **kwargs)
    if refused is None:
        assert op.execute(_context())["version"]
        assert _billed(op).price_source != "unpriced"
        return
    with pytest.raises(AirflowFailException, match=refused):
        op.execute(_context())
    assert ModelStore.open(str(tmp_path / "models")).version_ids() == []
    assert not any((tmp_path / "ckpt").rglob("*.ckpt"))
    if "market" not in refused:  # a param's bad market is billed as the worker's compute
        assert (_billed(op).usd, _billed(op).price_source) == (0, "unpriced")


def test_a_market_misspelt_in_a_template_fails_when_rendered_before_any_training(tmp_path: Path) -> None:
    _day(tmp_path / "landing", 1)
    op = _operator(tmp_path, 1, market="{{ ti.xcom_pull(task_ids='spot_window')['market'] }}")
    op.market = "spto"  # what rendering the template gave; the constructor could not check it
    with pytest.raises(AirflowFailException, match="unknown market 'spto': use one of"):
        op.execute(_context())
    assert ModelStore.open(str(tmp_path / "models")).version_ids() == []
    assert not any((tmp_path / "ckpt").rglob("*.ckpt"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"feature_columns": ["x1", "delay"]}, "label column 'delay' is also a feature"),
        ({"feature_columns": []}, "feature_columns is empty"),
        (
            {"checkpoint_every_seconds": None, "checkpoint_every_steps": None},
            "set checkpoint_every_seconds or checkpoint_every_steps",
        ),
        ({"checkpoint_every_seconds": -5}, "checkpoint_every_seconds must be a number > 0"),
        ({"checkpoint_every_steps": 0}, "checkpoint_every_steps must be an integer >= 1"),
        ({"trainer": "tensorflow-magic"}, "unknown trainer 'tensorflow-magic': use one of"),
        ({"trainer": "sklearn_sgd"}, r"unknown trainer 'sklearn_sgd' \(did you mean 'sklearn-sgd'\?\)"),
        (
            {"trainer_params": {"epoch": 4}},
            r"trainer_params 'epoch' is not an option of trainer 'sklearn-sgd' \(did you mean 'epochs'\?\)",
        ),
        ({"policy": "sometimes"}, "unknown retrain policy 'sometimes': use one of drift, "),
        (
            {"policy_params": {"max_psi": 0.3}},
            r"policy_params 'max_psi' is not an option of retrain policy 'drift' \(did you mean "
            "'max_feature_psi'",
        ),
        ({"policy": "always-full", "policy_params": {"max_warm_steps": 3}}, "it takes no options"),
        # Priced at the worker's market with a logged error, and the run ended green.
        ({"market": "spto"}, "unknown market 'spto': use one of"),
        # Checked first: drift_columns=5 raised a bare TypeError before the market was named.
        ({"market": "spto", "drift_columns": 5}, "unknown market 'spto': use one of"),
        (
            {"label_threshold": "abc"},
            r"label_threshold must be a number \(a label above it counts as 1\), got 'abc'",
        ),
        # Never rendered, so written out: "null" trained on the raw label, "None " was refused.
        *[
            (
                {"label_threshold": written},
                rf"got {written!r}: write the number, or leave label_threshold out",
            )
            for written in ("null", "None", "", "None ", " ")
        ],
        # A bare "TypeError: 'int' object is not iterable" failed the parse; text was read letter by letter.
        (
            {"drift_columns": 5},
            r"WarmStartRetrainOperator 'retrain': drift_columns must be a list of column names \(the "
            r"features checked for drift\), got 5: e\.g\. \['dep_delay', 'distance'\], or leave drift",
        ),
        ({"drift_columns": "x1, x2"}, r"drift_columns .*got 'x1, x2': write \['x1', 'x2'\]"),
        ({"drift_columns": ["x1", 3]}, r"drift_columns must be a list of column names .*got \['x1', 3\]"),
        ({"drift_columns": {"x1": 1}}, r"drift_columns must be a list of column names .*got \{'x1': 1\}"),
        ({"drift_columns": "{{ params.cols }}"}, "is a template, but drift_columns is not rendered"),
        # Read letter by letter before.
        ({"feature_columns": "x1, x2"}, r"feature_columns must be a list of column names, .*\['x1', 'x2'\]"),
        # Told to write [''] / ['None'], themselves no columns.
        ({"feature_columns": ""}, r"got the string '': write e\.g\. \['dep_delay', 'distance'\], or leave"),
        ({"feature_columns": "None"}, r"got the string 'None': write e\.g\. \['dep_delay'"),
        # The cost listener ignored it with a warning and priced the catalog's rate instead.
        ({"usd_per_hour": -1}, r"'retrain': usd_per_hour must be zero or more USD, got -1"),
        ({"usd_per_hour": "0.4/h"}, r"'retrain': usd_per_hour .*'0\.4/h'"),
    ],
)
def test_arguments_that_need_no_rendering_fail_when_the_dag_is_parsed(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _operator(tmp_path, 1, **kwargs)


@pytest.mark.parametrize("trainer", ["xgboost", "lightgbm", "sklearn-hgb"])
def test_native_boosters_warm_start_and_round_trip(tmp_path: Path, trainer: str) -> None:
    if trainer != "sklearn-hgb":
        pytest.importorskip(trainer)
    store = ModelStore.open(str(tmp_path / "models"))
    params = {"sklearn-hgb": {"max_iter": 20, "warm_iter": 10, "trees_per_step": 5}}.get(
        trainer, {"num_boost_round": 20, "warm_rounds": 10, "rounds_per_step": 5}
    )
    for day in (1, 2):
        _day(tmp_path / "landing", day)
        result = _operator(tmp_path, day, trainer=trainer, trainer_params=params).execute(_context(f"r{day}"))
        store.set_champion(result["version"])
    assert result["mode"] == "warm" and result["steps"] == 2
    from costaware.training.trainers import resolve_trainer

    champion = store.champion()
    assert champion is not None and champion.model_format == {
        "xgboost": "xgboost-ubj",
        "lightgbm": "lightgbm-txt",
    }.get(trainer, "skops")
    loaded = resolve_trainer(trainer, params)
    model = loaded.load(store.model_bytes(champion))
    holdout = pd.read_parquet(_day(tmp_path / "holdout", 9))
    scores = np.asarray(loaded.predict(model, holdout[FEATURES]))
    assert scores.shape == (1500,) and scores.min() >= 0 and scores.max() <= 1
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(holdout.delay > 15, scores) > 0.8
    if trainer == "xgboost":
        assert model.booster.num_boosted_rounds() == 30
    if trainer == "lightgbm":
        assert model.booster.current_iteration() == 30


def test_a_misspelt_drift_column_is_named_among_the_feature_columns(tmp_path: Path) -> None:
    # The profile's message listed the data's columns with an internal '__label__' among them.
    _day(tmp_path / "landing", 1)
    op = _operator(tmp_path, 1, drift_columns=["x9"])
    with pytest.raises(AirflowFailException, match=r"drift_columns \['x9'\] are not feature columns of this"):
        op.execute(_context("r1"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model_store": "models/rel"}, "model_store 'models/rel' is a relative path"),
        ({"model_store": "file:models/rel"}, "model_store 'file:models/rel' is a relative path"),
        ({"checkpoint_store": "ckpt"}, "checkpoint_store 'ckpt' is a relative path"),
    ],
)
def test_a_relative_store_is_refused_when_the_dag_is_parsed(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    # It was refused only when the task ran, against whatever folder the worker ran in.
    with pytest.raises(ConfigurationError, match=f"{message}.*give an absolute folder such as '/srv/ml/"):
        _operator(tmp_path, 1, **kwargs)
    _operator(tmp_path, 1, model_store="{{ params.store }}")  # a template is checked once rendered
    _operator(tmp_path, 1, model_store="~/models")  # expanded to the worker's home: absolute


@pytest.mark.parametrize("root", ["/", "//", "/.", "/tmp/..", "file:///", "file://localhost/"])
def test_a_root_checkpoint_store_is_refused_when_parsed_and_when_rendered(tmp_path: Path, root: str) -> None:
    # "/" lost its slash to "": each job's checkpoints went to /<dag>/<task>/..., folders made in the root.
    message = f"checkpoint_store {root!r} is the root, /, of the whole machine: its files would be"
    with pytest.raises(ConfigurationError, match=re.escape(f"WarmStartRetrainOperator 'retrain': {message}")):
        _operator(tmp_path, 1, checkpoint_store=root)
    op = _operator(tmp_path, 1, checkpoint_store="{{ params.ckpt }}")  # checked once rendered
    op.checkpoint_store = root  # as Airflow renders it
    with pytest.raises(ConfigurationError, match=re.escape(f"task 'retrain': {message}")):
        op.training_spec()
    op.checkpoint_store = "/srv/ml/ckpt/"
    assert op.training_spec().checkpoint_store == "/srv/ml/ckpt"


@pytest.mark.parametrize("root", ["/", "//", "/.", "file:///"])
def test_a_root_model_store_is_refused_when_the_dag_is_parsed(tmp_path: Path, root: str) -> None:
    # It was refused only when the task opened it, where checkpoint_store was refused as the DAG was parsed.
    message = f"WarmStartRetrainOperator 'retrain': model_store {root!r} is the root, /, of the whole machine"
    with pytest.raises(ConfigurationError, match=re.escape(message) + ".*such as '/srv/ml/models'"):
        _operator(tmp_path, 1, model_store=root)


@pytest.mark.parametrize("home", ["~", "~/", "~/.", "file:~"])
def test_a_checkpoint_store_at_a_home_that_is_the_root_is_refused(
    tmp_path: Path, home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With HOME=/ (OpenShift's random uids) "~" is /: the checks looked only at values starting with "/".
    # The worker's home counts, not the DAG processor's: written out, it is checked as the task starts.
    monkeypatch.setenv("HOME", "/")
    message = (
        f"checkpoint_store {home!r} is the root, /, of the whole machine (the home folder ~ is '/' here)"
    )
    op = _operator(tmp_path, 1, checkpoint_store=home)  # parses
    with pytest.raises(ConfigurationError, match=re.escape(f"task 'retrain': {message}")):
        op.training_spec()
    op = _operator(tmp_path, 1, checkpoint_store="{{ params.ckpt }}")
    op.checkpoint_store = home  # as Airflow renders it
    with pytest.raises(ConfigurationError, match=re.escape(f"task 'retrain': {message}")):
        op.training_spec()
    monkeypatch.setenv("HOME", str(tmp_path))  # a home of its own is a folder like any other
    assert op.training_spec().checkpoint_store == home.rstrip("/")


@pytest.mark.parametrize(
    ("name", "store"), [("model_store", "None"), ("model_store", "null"), ("checkpoint_store", " None ")]
)
def test_a_store_written_as_what_an_unset_param_renders_is_refused_when_the_dag_is_parsed(
    tmp_path: Path, name: str, store: str
) -> None:
    # "None" passed the parse and failed when the task ran; "null" was "a relative path" ('/srv/ml/null').
    message = f"{name} is {store!r}, which names no location (it is what a template of an unset param"
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        _operator(tmp_path, 1, **{name: store})


@pytest.mark.parametrize("rendered", [" ", "None ", "null", " null"])
def test_a_new_data_path_rendered_from_an_unset_param_is_not_given(tmp_path: Path, rendered: str) -> None:
    # As every templated value is read (core.given, stripped): " " was a path to read the new rows from.
    op = _operator(tmp_path, 1, new_data_path="{{ params.new_rows }}")
    op.new_data_path = rendered  # as Airflow renders it
    assert op.training_spec().new_data_path is None
    op.new_data_path = "/data/day-1.parquet"
    assert op.training_spec().new_data_path == "/data/day-1.parquet"
