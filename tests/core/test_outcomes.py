from __future__ import annotations

from decimal import Decimal

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.outcomes import ReproRecord, RunOutcome, summarize


def outcome(
    run: str, usd: str, value: float, champion: float | None, promoted: bool, metric: str = "roc_auc"
):  # type: ignore[no-untyped-def]
    return RunOutcome(
        dag_id="d",
        run_id=run,
        model_version=f"v-{run}",
        metric=metric,
        metric_value=value,
        champion_metric=champion,
        promoted=promoted,
        usd=Decimal(usd),
    )


def test_gain_follows_the_metric_direction() -> None:
    assert outcome("a", "1", 0.72, 0.70, True).gain == pytest.approx(0.02)
    # log loss: lower is better, so 0.40 after 0.45 is a gain of 0.05
    assert outcome("a", "1", 0.40, 0.45, True, metric="log_loss").gain == pytest.approx(0.05)
    assert outcome("a", "1", 0.72, None, True).gain is None  # first model: nothing to gain over
    assert outcome("a", "1", float("nan"), 0.7, False).gain is None
    assert outcome("a", "1", 3.1, 3.4, True, metric="rmse").gain == pytest.approx(0.3)
    # a team's own metric: the ledger keeps its name but not its direction, so no gain is claimed
    assert outcome("a", "1", 0.10, 0.12, True, metric="wer").gain is None


def test_cost_per_unit_gain_of_one_run() -> None:
    assert outcome("a", "0.50", 0.72, 0.70, True).usd_per_unit_gain == Decimal("25.000000")
    assert outcome("a", "0.50", 0.69, 0.70, False).usd_per_unit_gain is None


@pytest.mark.parametrize(
    ("value", "champion", "metric"),
    [
        (0.1 + 0.2, 0.3, "roc_auc"),  # a gain of 5.6e-17: float noise once read as $9e15 per unit
        (0.8 + 1e-16, 0.8, "roc_auc"),
        (1e-27, 0.0, "roc_auc"),  # a real but tiny gain: decimal.InvalidOperation in the division
        (0.0, 1e-27, "rmse"),
    ],
)
def test_a_gain_too_small_to_price_has_no_per_unit_figure_and_never_raises(
    value: float, champion: float, metric: str
) -> None:
    runs = [outcome("a", "5", value, champion, True, metric=metric)]
    assert runs[0].usd_per_unit_gain is None
    s = summarize(runs)
    assert (s.usd, s.usd_per_unit_gain) == (Decimal(5), None)
    # beside a real gain, the noise adds nothing to what the dollars bought
    better = (0.72, 0.70) if metric == "roc_auc" else (0.70, 0.72)  # a gain of 0.02 either way
    s = summarize([*runs, outcome("b", "0.5", *better, True, metric=metric)])
    assert s.usd_per_unit_gain == Decimal("275.000000")


def test_summary_cost_per_run_per_promoted_and_per_gain() -> None:
    runs = [
        outcome("1", "0.30", 0.70, None, True),
        outcome("2", "0.20", 0.69, 0.70, False),
        outcome("3", "0.10", 0.74, 0.70, True),
    ]
    s = summarize(runs)
    assert (s.runs, s.promoted, s.usd) == (3, 2, Decimal("0.60"))
    assert s.per_run_usd == Decimal("0.200000")
    assert s.per_promoted_usd == Decimal("0.300000")
    assert s.usd_per_unit_gain == Decimal("15.000000")  # all $0.60 bought the 0.04 gain of run 3


def test_a_run_with_several_models_is_counted_and_priced_once() -> None:
    # A tuning run records a model version per trial, each carrying the run's whole cost.
    tuning = [
        RunOutcome(
            dag_id="d",
            run_id="r1",
            model_version=f"v{n}",
            metric="roc_auc",
            metric_value=0.7,
            promoted=n == 0,
            usd=Decimal("0.60"),
        )
        for n in range(6)
    ]
    s = summarize([*tuning, outcome("2", "0.20", 0.69, 0.70, False)])
    assert (s.runs, s.promoted, s.usd) == (2, 1, Decimal("0.80"))
    assert s.per_run_usd == Decimal("0.400000") and s.per_promoted_usd == Decimal("0.800000")


def test_summary_refuses_mixed_metrics() -> None:
    with pytest.raises(ConfigurationError, match=r"several metrics \['log_loss', 'roc_auc'\]"):
        summarize([outcome("1", "1", 0.7, None, True), outcome("2", "1", 0.4, 0.5, True, metric="log_loss")])


def test_repro_record_round_trips_and_digest_depends_on_every_field() -> None:
    record = ReproRecord(
        data_fingerprint="abc",
        features_key="k1",
        package_version="0.1.0",
        trainer="sklearn-sgd",
        trainer_params={"epochs": 5, "categorical": ["a"]},
        seeds={"seed": 0},
    )
    again = ReproRecord.from_json(record.to_json())
    assert again.to_json() == record.to_json() and again.digest == record.digest
    other = ReproRecord.from_json({**record.to_json(), "seeds": {"seed": 1}})
    assert other.digest != record.digest
