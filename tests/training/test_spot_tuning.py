"""The spot tuning plan's IO: prices from the bundled catalog, the study's budget, spend and reservations."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from costaware.adapters.price_files import bundled_catalog
from costaware.core.errors import BudgetExceededError, ConfigurationError
from costaware.core.ledger import Kind, LedgerEntry
from costaware.core.tuning.spot_plan import PromotionDecision, SpotTuningSettings, StageCost
from costaware.core.tuning.spot_spend import TrialSpend
from costaware.training.spot_tuning import (
    TrialPrices,
    finished_results,
    open_study,
    reserve_promotions,
    select_promotions,
    spend_table,
    stage_floor_usd,
    study_spend,
    trial_prices,
    version_files,
)

SCOPE = "project=p,study=run1"
SETTINGS = SpotTuningSettings.create(
    max_usd=10, max_gpu_hours=20, max_trials=4, warmup_epochs=1, full_epochs=3, keep_fraction=0.5
)


def test_trial_prices_come_from_the_bundled_list_unless_given() -> None:
    catalog = bundled_catalog()
    prices = trial_prices(catalog, "g5.xlarge", "us-east-1")
    assert (prices.on_demand_usd_per_hour, prices.gpus) == (Decimal("1.006"), Decimal(1))
    assert prices.spot_usd_per_hour == catalog.spot_estimate_usd_per_hour("g5.xlarge", "us-east-1")
    assert prices.usd_per_hour("spot") < prices.usd_per_hour("on_demand")
    given = trial_prices(catalog, "ml.g5.xlarge", "us-east-1", spot_given=0.5, on_demand_given=1.4)
    assert given == TrialPrices(Decimal("0.5"), Decimal("1.4"), Decimal(1))
    with pytest.raises(
        ConfigurationError, match=r"ml\.g5\.xlarge is a SageMaker type.*give spot_usd_per_hour"
    ):
        trial_prices(catalog, "ml.g5.xlarge", "us-east-1", spot_given=0.5)


def test_a_promoted_run_resumes_from_its_warm_up_s_version_files() -> None:
    assert version_files("s3://b/models/", "v1") == "s3://b/models/versions/v1/files"
    results = [{"metrics": {"trial": 0}, "version": "v"}, None, {"error": "x"}]
    assert finished_results(results) == [results[0]]
    assert finished_results(results[0]) == [results[0]] and finished_results(None) == []


def test_open_study_sets_the_budget_and_reserves_every_warm_up(ledger: Any) -> None:
    prices = TrialPrices(Decimal("0.5"), Decimal(1), Decimal(1))
    local = {"backend": "local", "backend_options": {}}
    plan = open_study(ledger, SCOPE, SETTINGS, prices, market="spot", dag_id="d", run_id="run1", **local)
    assert plan.trials == 4  # 4 x 1 epoch + 2 x 2 epochs at $0.5/hour with 1-minute epochs: cents
    held = ledger.open_reservations(holder_prefix="d/run1/warmup/")
    assert sorted(r.holder for r in held) == [f"d/run1/warmup/{n}" for n in range(4)]
    # Each is held at its cap: 1.5 x $0.0083 is less than a stage's least, 710 s at the $0.5 spot price,
    # whose GPU-hours are what it buys there; an on-demand attempt needs less (170 s at $1).
    assert stage_floor_usd(prices, "spot", **local) == Decimal(710) / 2 / 3600
    cheap = TrialPrices(Decimal("0.1"), Decimal(1), Decimal(1))
    assert stage_floor_usd(cheap, "spot", **local) == Decimal(170) / 3600
    assert plan.warmup_cap == StageCost(Decimal("0.098612"), Decimal("0.197224")) == plan.promotion_cap
    assert all(r.usd == plan.warmup_cap.usd and r.gpu_hours == plan.warmup_cap.gpu_hours for r in held)


@pytest.mark.parametrize(
    ("backend", "command", "stop"),
    [
        ("sagemaker", (), 120),  # SageMaker ends a job 120 s after its SIGTERM, whatever the grace
        ("kubernetes", ("python", "train.py"), 120),  # a command's pod: its grace + 10 s
        ("batch", (), 110),
        ("local", (), 110),
    ],
)
def test_a_stage_capped_at_its_least_starts_an_attempt_on_every_backend(
    backend: str, command: tuple[str, ...], stop: int
) -> None:
    # The least cap was sized with the 110 s grace alone: on SageMaker or a Kubernetes command the operator
    # subtracts the backend's 120 s from what the cap buys (170 s), leaving 50 s, under the 60 s it starts an
    # attempt for: no trial started.
    from dataclasses import replace

    from attempt_states import CAPTURED  # tests/support/

    from costaware.training.attempt_effects import MIN_CAPPED_SECONDS, cap_rate, capped_seconds
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    prices = TrialPrices(Decimal("0.1"), Decimal(1), Decimal(1))  # an on-demand attempt's least binds
    known = stage_floor_usd(prices, "spot", backend=backend)
    assert known == Decimal(MIN_CAPPED_SECONDS + stop) / 3600
    unknown = stage_floor_usd(prices, "spot")  # the backend not known: the longest stop of any backend
    assert unknown == Decimal(MIN_CAPPED_SECONDS + 120) / 3600
    for floor in (known, unknown):
        cap = SETTINGS.stage_cap(StageCost(Decimal(0), Decimal(0)), floor_usd=floor).usd  # as the plan caps
        plan = replace(
            RemotePlan.from_json(CAPTURED),
            backend=backend,
            backend_options={},
            grace_seconds=110.0,
            max_usd=str(cap),
            on_demand_usd_per_hour="1",
            billing=None,
            deadline=None,
        )
        state = AttemptState(plan=plan, spot_usd_per_hour="0.1", command=command)
        for market in ("spot", "on_demand"):
            assert capped_seconds(state, cap_rate(state, market)) >= MIN_CAPPED_SECONDS, (floor, market)


def test_the_seed_s_plan_caps_each_stage_at_one_and_a_half_times_its_estimate(ledger: Any) -> None:
    """With the bundled g5.xlarge prices on spot the factor, not the floor, sets every cap."""
    settings = SpotTuningSettings.create(
        max_usd=100, max_gpu_hours=20, max_trials=40, warmup_epochs=3, full_epochs=15, epoch_minutes=4
    )
    prices = trial_prices(bundled_catalog(), "g5.xlarge", "us-east-1")
    plan = open_study(ledger, SCOPE, settings, prices, market="spot", dag_id="d", run_id="run1")
    assert (plan.trials, plan.kept) == (25, 12)
    assert plan.warmup_cap.usd == (plan.warmup.usd * Decimal("1.5")).quantize(
        Decimal("0.000001"), "ROUND_CEILING"
    )
    assert plan.warmup_cap.gpu_hours == Decimal("0.3") and plan.promotion_cap.gpu_hours == Decimal("1.2")
    assert plan.warmup_cap.usd > stage_floor_usd(prices, "spot")


def test_a_plan_too_big_for_one_trial_writes_nothing(ledger: Any) -> None:
    prices = TrialPrices(Decimal(1000), Decimal(1000), Decimal(1))
    with pytest.raises(ConfigurationError, match="one warm-up and its promotion need"):
        open_study(ledger, SCOPE, SETTINGS, prices, market="spot", dag_id="d", run_id="run1")
    assert ledger.open_reservations() == []


def test_a_warm_up_the_project_s_budget_cannot_hold_names_its_trial(ledger: Any) -> None:
    ledger.set_budget("project=p", "total", "0.3")  # room for one warm-up at its cap, $0.2 on-demand
    prices = TrialPrices(Decimal(1), Decimal(1), Decimal(1))
    with pytest.raises(BudgetExceededError, match=r"trial 1 cannot be reserved"):
        open_study(ledger, SCOPE, SETTINGS, prices, market="on_demand", dag_id="d", run_id="run1")


def test_reserve_promotions_stops_at_the_first_refusal(ledger: Any) -> None:
    ledger.set_budget(SCOPE, "total", "3")

    def promote(trial: int, usd: int) -> PromotionDecision:
        # Reserved at its cap, not its estimate (half of it here).
        cap = StageCost(Decimal(usd), Decimal(0))
        return PromotionDecision(trial, True, "promoted", StageCost(Decimal(usd) / 2, Decimal(0)), cap)

    pruned = PromotionDecision(9, False, "pruned: rank 4 of 4, 3 kept")
    decisions = [promote(0, 2), promote(1, 2), promote(2, 1), pruned]
    out = reserve_promotions(ledger, SCOPE, decisions, dag_id="d", run_id="run1")
    assert [d.promoted for d in out] == [True, False, False, False]
    assert out[1].reason.startswith("stopped by the ledger: ") and out[3] == pruned
    assert [r.holder for r in ledger.open_reservations(holder_prefix="d/run1/full/")] == ["d/run1/full/0"]


def _bill(ledger: Any, trial: int, task_id: str, usd: str, hours: str, cause: str = "") -> None:
    ledger.record(
        LedgerEntry(
            "d",
            "run1",
            task_id,
            Kind.COMPUTE,
            Decimal(usd),
            map_index=trial,
            quantity=Decimal(hours),
            tags={"study": "run1", "trial": str(trial), "stage": task_id},
            price_source="remote:local",
            cause=cause,
        )
    )


def test_select_promotions_ranks_prunes_and_reserves_from_the_ledger(ledger: Any) -> None:
    ledger.set_budget(SCOPE, "total", "10", cap_gpu_hours="20")
    for trial, usd in enumerate(("1", "1", "1", "1")):
        _bill(ledger, trial, "warmup", usd, "0.5")
    results = [
        {"metrics": {"trial": n, "val_rmse": rmse}, "version": f"v{n}"} for n, rmse in enumerate((4, 2, 3, 1))
    ]
    selection = select_promotions(
        ledger,
        [*results, None],
        settings=SETTINGS,
        study="run1",
        scope=SCOPE,
        prices=TrialPrices(Decimal("0.5"), Decimal(2), Decimal(2)),  # $2 an hour: $1 a GPU-hour
        market="on_demand",
        dag_id="d",
        run_id="run1",
    )
    assert [w.trial for w in selection.ranked] == [3, 1, 2, 0]
    assert [w.trial for w, _ in selection.promoted] == [3, 1]
    assert [d.cap for _, d in selection.promoted] == [StageCost(Decimal(3), Decimal(3))] * 2  # 1.5 x $2
    assert selection.spent == StageCost(Decimal(4), Decimal(4))  # 4 x 0.5 billed hours x 2 GPUs
    assert selection.ranked[0].gpu_hours == 1 and selection.decisions[0].estimate == StageCost(
        Decimal(2), Decimal(2)
    )
    assert selection.to_xcom()["pruned"] == [
        {"trial": 2, "reason": "pruned: rank 3 of 4, 2 kept"},
        {"trial": 0, "reason": "pruned: rank 4 of 4, 2 kept"},
    ]
    report = selection.report(SETTINGS.caps)
    assert "trial   3: holdout loss 1.000 -> promoted (est. $2.0000, stopped at $3.0000)" in report
    held = ledger.open_reservations(holder_prefix="d/run1/full/")
    assert sorted(r.holder for r in held) == ["d/run1/full/0", "d/run1/full/1"]
    assert all(r.usd == 3 for r in held)


def test_a_warm_up_with_a_nan_or_missing_loss_ranks_last_and_is_not_promoted(ledger: Any) -> None:
    ledger.set_budget(SCOPE, "total", "10", cap_gpu_hours="20")
    for trial in range(4):
        _bill(ledger, trial, "warmup", "1", "0.5")
    losses: tuple[Any, ...] = (float("nan"), 2, None, 1)
    results = [{"metrics": {"trial": n, "val_rmse": v}, "version": f"v{n}"} for n, v in enumerate(losses)]
    selection = select_promotions(
        ledger,
        results,
        settings=SETTINGS,
        study="run1",
        scope=SCOPE,
        prices=TrialPrices(Decimal("0.5"), Decimal(2), Decimal(2)),
        market="on_demand",
        dag_id="d",
        run_id="run1",
    )
    assert [w.trial for w in selection.ranked] == [3, 1, 0, 2]
    assert [w.trial for w, _ in selection.promoted] == [3, 1]


def test_select_promotions_without_a_finished_warm_up_says_so(ledger: Any) -> None:
    prices = TrialPrices(Decimal("0.5"), Decimal(1), Decimal(1))
    kwargs: dict[str, Any] = {"settings": SETTINGS, "study": "run1", "scope": SCOPE, "prices": prices}
    kwargs["market"] = "spot"
    with pytest.raises(
        ValueError, match=r"no warm-up finished: nothing to rank \(see the warmup task's logs\)$"
    ):
        select_promotions(ledger, [None], **kwargs, dag_id="d", run_id="run1")
    # Warm-ups its cap stopped: the message says that an epoch took longer than the plan said.
    _bill(ledger, 0, "warmup", "0.04", "0.08", cause="max_usd")
    _bill(ledger, 1, "warmup", "0.01", "0.02", cause="preemption")
    with pytest.raises(ValueError, match=r"; 1 was stopped at the cap of overrun_factor 1\.5 .*raise epoch_"):
        select_promotions(ledger, [None], **kwargs, dag_id="d", run_id="run1")


def test_a_warm_up_stopped_at_its_cap_is_reported_beside_the_ranked_ones(ledger: Any) -> None:
    ledger.set_budget(SCOPE, "total", "10", cap_gpu_hours="20")
    _bill(ledger, 0, "warmup", "0.05", "0.1", cause="max_usd")
    _bill(ledger, 1, "warmup", "0.01", "0.02")
    selection = select_promotions(
        ledger,
        [{"metrics": {"trial": 1, "val_rmse": 3.0}, "version": "v1"}],
        settings=SETTINGS,
        study="run1",
        scope=SCOPE,
        prices=TrialPrices(Decimal("0.5"), Decimal(1), Decimal(1)),
        market="spot",
        dag_id="d",
        run_id="run1",
    )
    assert selection.capped == (0,) and selection.to_xcom()["capped"] == [0]
    assert selection.report(SETTINGS.caps).endswith(
        "trial   0: an attempt was stopped at its cap; its warm-up did not finish"
    )


def test_study_spend_reads_the_run_s_entries(ledger: Any) -> None:
    _bill(ledger, 0, "warmup", "1", "0.5")
    _bill(ledger, 0, "full", "2", "1")
    spend = study_spend(ledger, dag_id="d", run_id="run1", study="run1")
    assert spend == {"0": TrialSpend(Decimal(1), Decimal("0.5"), 1, Decimal(2), Decimal(1), 1)}
    assert spend_table(spend).splitlines()[1].split() == ["0", "1", "1.000000", "1", "2.000000"]
