"""The spot tuning plan's rules: sampling, sizing to the caps, the prune, promotions, the no-prune cost."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.tuning.spot_plan import (
    PromotionDecision,
    SpotTuningSettings,
    StageCost,
    Warmup,
    decide_promotions,
    kept_count,
    plan_study,
    rank,
    sample_trials,
    study_size,
)
from costaware.core.tuning.spot_spend import (
    TrialSpend,
    cost_without_prune,
    spend_by_trial,
    study_cost,
    study_spent,
)

SPACE: dict[str, tuple[str, Any]] = {
    "lr": ("log", (1e-4, 1e-2)),
    "hidden": ("choice", (32, 64, 128, 256)),
    "dropout": ("uniform", (0.0, 0.3)),
}
PLAN = {"max_usd": 100, "max_gpu_hours": 20, "max_trials": 40, "warmup_epochs": 3, "full_epochs": 15}


def _settings(**changed: Any) -> SpotTuningSettings:
    return SpotTuningSettings.create(**{**PLAN, "keep_fraction": 0.5, "epoch_minutes": 4, **changed})


def test_the_seed_s_plan_is_sized_to_the_gpu_hour_cap() -> None:
    """40 trials of 3 + 12 epochs at 4 minutes each need 24 GPU-hours: the plan runs 25, within 20.

    Each promotion is held at its cap, 1.5 times its 0.8 GPU-hours: 25 x 0.2 + 12 x 1.2 = 19.4.
    """
    settings = _settings()
    warmup, promotion = settings.stage_costs(usd_per_hour="0.41", gpus=1)
    assert (warmup.gpu_hours, promotion.gpu_hours) == (Decimal("0.2"), Decimal("0.8"))
    caps = settings.stage_cap(warmup), settings.stage_cap(promotion)
    assert study_size(settings, warmup, *caps) == 25
    plan = plan_study(settings, usd_per_hour="0.41", gpus=1)
    assert (plan.trials, plan.kept) == (25, 12)
    assert (plan.warmup_cap, plan.promotion_cap) == (
        StageCost(Decimal("0.123"), Decimal("0.3")),
        StageCost(Decimal("0.492"), Decimal("1.2")),
    )
    assert plan.total.gpu_hours == Decimal("19.4") <= settings.max_gpu_hours
    assert plan.total.usd < settings.max_usd  # the GPU-hour cap binds first
    assert not (warmup.times(26) + plan.promotion_cap.times(kept_count(26, 0.5))).fits(settings.caps)
    assert plan.describe(settings).startswith(
        "25 of 40 trials fit $100 and 20 GPU-hours: warm-up $0.0820 each (stopped at $0.1230)"
    )
    # With no room to overrun, the plan is the one of the estimates alone: 33 trials.
    exact = plan_study(_settings(overrun_factor=1), usd_per_hour="0.41", gpus=1)
    assert (exact.trials, exact.kept, exact.warmup_cap) == (33, 16, exact.warmup)


def test_every_warm_up_s_cap_must_fit_at_once() -> None:
    """Warm-ups are all reserved at their caps before any starts: 10 x 3 x 0.2 = 6 of a 5 GPU-hour cap."""
    settings = _settings(max_trials=10, full_epochs=4, max_gpu_hours=5, overrun_factor=3)
    plan = plan_study(settings, usd_per_hour=1, gpus=1)  # a promotion adds one epoch: 0.0667 GPU-hours
    assert plan.trials == 8 and plan.warmup_cap.times(8).gpu_hours <= 5 < plan.warmup_cap.times(9).gpu_hours


def test_a_cap_is_never_below_its_floor_and_holds_the_gpu_hours_its_dollars_buy() -> None:
    settings = _settings(epoch_minutes="0.001")
    # $0.05 at $0.5 an hour buys 0.1 hours: 0.2 GPU-hours on 2 GPUs, whatever the estimate's were.
    plan = plan_study(settings, usd_per_hour="0.5", gpus=2, floor_usd=Decimal("0.05"))
    assert plan.warmup_cap == StageCost(Decimal("0.05"), Decimal("0.2")) == plan.promotion_cap
    above = settings.stage_cap(StageCost(Decimal(1), Decimal(1)), floor_usd=Decimal("0.05"))
    assert above == StageCost(Decimal("1.5"), Decimal("1.5"))
    # Rounded up to the micro-unit the ledger reserves: the sized figure is the reserved one.
    assert settings.stage_cap(StageCost(Decimal("0.0000001"), Decimal(0))).usd == Decimal("0.000001")


def test_the_dollar_cap_binds_when_it_is_the_smaller() -> None:
    # $0.20 a warm-up, $0.80 a promotion held at $1.20: 3 trials and 1 promotion fit $2, 4 and 2 do not.
    plan = plan_study(_settings(max_usd=2), usd_per_hour=1, gpus=1)
    assert (plan.trials, plan.kept) == (3, 1)
    assert (
        plan.total.usd
        <= 2
        < (
            plan.warmup.times(plan.trials + 1) + plan.promotion_cap.times(kept_count(plan.trials + 1, 0.5))
        ).usd
    )


def test_a_plan_with_no_room_for_one_trial_says_what_one_needs() -> None:
    with pytest.raises(
        ConfigurationError,
        # One trial at $0.41 an hour: a warm-up of $0.082 and a promotion held at $0.492, 0.2 + 1.2 GPU-hours.
        match=r"need an estimated \$0\.4100 .* on spot g5\.xlarge.*one trial needs caps of at least "
        r"\$0\.5740 and 1\.4000 GPU-hours: raise the cap that is short",
    ):
        plan_study(_settings(max_usd="0.1"), usd_per_hour="0.41", gpus=1, on="spot g5.xlarge")
    with pytest.raises(
        ConfigurationError,
        match=r"; at overrun_factor 1\.5 a warm-up may cost up to \$0\.1230 and 0\.3000 GPU-hours and a "
        r"promotion up to \$0\.4920 and 1\.2000 before it is stopped; the caps are \$0\.5 and 20",
    ):
        plan_study(_settings(max_usd="0.5"), usd_per_hour="0.41", gpus=1)


@pytest.mark.parametrize(
    ("trials", "keep_fraction", "kept"),
    [(0, 0.5, 0), (1, 0.5, 1), (3, 0.5, 1), (4, 0.5, 2), (40, 0.25, 10), (3, 1, 3), (10, 0.3, 3)],
)
def test_the_prune_keeps_the_top_share_and_at_least_one(trials: int, keep_fraction: float, kept: int) -> None:
    assert kept_count(trials, keep_fraction) == kept


def test_sampling_is_seeded_and_a_smaller_study_runs_a_prefix() -> None:
    assert sample_trials(SPACE, 4, 13) == sample_trials(SPACE, 40, 13)[:4]
    assert sample_trials(SPACE, 4, 13) != sample_trials(SPACE, 4, 14)
    for hparams in sample_trials(SPACE, 40, 13):
        assert 1e-4 <= hparams["lr"] <= 1e-2 and 0 <= hparams["dropout"] <= 0.3
        assert hparams["hidden"] in (32, 64, 128, 256)


@pytest.mark.parametrize(
    "space",
    [
        {"x": ("uniform", (0.1, 0.4999))},  # 0.49996 rounds to 0.5
        {"x": ("uniform", (0.0001, 0.0012))},  # 0.0004 rounds to 0.0
        {"x": ("log", (0.00123456, 0.00125))},  # 0.0012349 rounds to 0.00123
        {"x": ("log", (0.5, 0.9999))},  # 0.99996 rounds to 1.0
        {"x": ("uniform", (0.00015, 0.00015)), "y": ("log", (0.0012345, 0.0012345))},  # one value each
    ],
)
def test_a_rounded_value_stays_within_its_range(space: dict[str, Any]) -> None:
    drawn = [h for n in range(50) for h in sample_trials(space, 200, n)]
    for hparams in drawn:
        for name, (_, (low, high)) in space.items():
            assert low <= hparams[name] <= high
    if space["x"][1][0] == space["x"][1][1]:
        assert {h["x"] for h in drawn} == {0.00015} and {h["y"] for h in drawn} == {0.0012345}


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({"lr": ("normal", (0, 1))}, r"'lr' has kind 'normal': use one of"),
        ({"lr": ("log", (0.0, 1e-2))}, r"'lr' \(log\) has range \(0\.0, 0\.01\).*low > 0"),
        ({"dropout": ("uniform", (0.3, 0.1))}, r"'dropout' \(uniform\) has range .*low <= high"),
        ({"hidden": ("choice", ())}, r"'hidden' has no values"),
        (
            {"lr": ("uniform", (0.0001, 0.0004))},
            r"'lr' \(uniform\) has range \(0\.0001, 0\.0004\), narrower than the 0\.001 its values are "
            r"rounded to .*every trial would get the same value: widen the range, or make it log",
        ),
        ({"lr": ("log", (0.00123456, 0.0012349))}, r"'lr' \(log\) has range .* narrower than the 1e-05"),
    ],
)
def test_a_bad_search_space_is_refused_by_name(space: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        sample_trials(space, 1, 13)


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({"max_usd": 0}, r"max_usd must be a finite number above 0, got 0: give the study's dollar cap"),
        ({"max_usd": -5}, r"max_usd must be .* got -5"),
        ({"max_usd": math.nan}, r"max_usd must be .* got nan"),
        ({"max_usd": "abc"}, r"max_usd must be .* got 'abc'"),
        ({"max_gpu_hours": 0}, r"max_gpu_hours must be a finite number above 0, got 0: give the study's GPU"),
        ({"max_gpu_hours": -1.5}, r"max_gpu_hours must be .* got -1\.5"),
        ({"max_gpu_hours": math.nan}, r"max_gpu_hours must be .* got nan"),
        ({"max_gpu_hours": math.inf}, r"max_gpu_hours must be .* got inf"),
        ({"keep_fraction": 0}, r"keep_fraction must be more than 0 and at most 1, got 0: .*e\.g\. 0\.5"),
        ({"keep_fraction": 1.5}, r"keep_fraction must be .* got 1\.5"),
        ({"keep_fraction": -0.5}, r"keep_fraction must be .* got -0\.5"),
        ({"keep_fraction": math.nan}, r"keep_fraction must be .* got nan"),
        ({"warmup_epochs": 15}, r"full_epochs 15 must be more than warmup_epochs 15: .*raise full_epochs"),
        ({"warmup_epochs": 20}, r"full_epochs 15 must be more than warmup_epochs 20"),
        ({"warmup_epochs": 0}, r"warmup_epochs must be a whole number of at least 1, got 0"),
        ({"max_trials": 0}, r"max_trials must be a whole number of at least 1, got 0: give how many trials"),
        ({"max_trials": -3}, r"max_trials must be .* got -3"),
        ({"max_trials": 2.5}, r"max_trials must be .* got 2\.5"),
        ({"max_trials": True}, r"max_trials must be .* got True"),
        ({"epoch_minutes": 0}, r"epoch_minutes must be a number of minutes above 0, got 0"),
        ({"epoch_minutes": math.nan}, r"epoch_minutes must be .* got nan"),
        ({"overrun_factor": 0.9}, r"overrun_factor must be from 1 to 10, got 0\.9: .*e\.g\. 1\.5"),
        ({"overrun_factor": 11}, r"overrun_factor must be from 1 to 10, got 11"),
        ({"overrun_factor": math.nan}, r"overrun_factor must be .* got nan"),
        ({"overrun_factor": "x"}, r"overrun_factor must be .* got 'x'"),
    ],
)
def test_bad_settings_are_refused_by_name_with_what_to_do(changed: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _settings(**changed)


def test_settings_from_form_strings() -> None:
    settings = _settings(max_usd="$100", max_gpu_hours="20", max_trials="40", keep_fraction="1")
    assert (settings.max_usd, settings.max_trials, settings.keep_fraction) == (Decimal(100), 40, 1.0)
    assert (settings.added_epochs, settings.caps) == (12, StageCost(Decimal(100), Decimal(20)))


def _warmups(*usd: int) -> list[Warmup]:
    return [Warmup(n, float(n), Decimal(u), Decimal(u)) for n, u in enumerate(usd)]


@pytest.mark.parametrize(
    ("spent", "caps", "promoted", "why"),
    [
        ((4, 4), (100, 100), [0, 1], ["pruned", "pruned"]),
        ((4, 4), (8, 100), [0], ["stopped by the cap", "pruned", "pruned"]),  # 4 + 3 fits, + 3 not
        ((4, 4), (100, 6.5), [], ["stopped by the cap"] * 2 + ["pruned"] * 2),  # GPU-hours stop it
        ((4, 4), (6, 6), [], ["stopped by the cap"] * 2 + ["pruned"] * 2),  # the estimate (2) would fit
    ],
)
def test_promotions_stop_at_either_cap(
    spent: tuple[float, float], caps: tuple[float, float], promoted: list[int], why: list[str]
) -> None:
    """A warm-up of $1 over 2 epochs: a promotion of 4 more is estimated at $2 and held at its cap, $3."""
    spent_cost = StageCost(Decimal(spent[0]), Decimal(spent[1]))
    settings = _settings(
        max_usd=str(caps[0]), max_gpu_hours=str(caps[1]), warmup_epochs=2, full_epochs=6, overrun_factor=1.5
    )
    decisions = decide_promotions(_warmups(1, 1, 1, 1), keep=2, spent=spent_cost, settings=settings)
    assert [d.trial for d in decisions] == [0, 1, 2, 3]  # one per warm-up, in the ranked order
    up = [d for d in decisions if d.promoted]
    assert [d.trial for d in up] == promoted
    assert all(d.estimate == StageCost(Decimal(2), Decimal(2)) for d in up)
    assert all(d.cap == StageCost(Decimal(3), Decimal(3)) for d in up)
    assert [d.reason.split(":")[0] for d in decisions if not d.promoted] == why
    assert spent_cost.usd + sum(d.cap.usd for d in up) <= Decimal(str(caps[0]))


def test_the_reasons_name_the_rank_and_the_caps() -> None:
    settings = _settings(max_usd=4, max_gpu_hours=10, warmup_epochs=1, full_epochs=3, overrun_factor=1)
    decisions = decide_promotions(
        _warmups(1, 1, 1), keep=2, spent=StageCost(Decimal(3), Decimal(0)), settings=settings
    )
    assert [d.reason for d in decisions] == [
        "stopped by the cap: $5.0000 of $4, 2.0000 of 10 GPU-hours with it",
        "stopped by the cap: trial 0, ranked above it, did not fit; the promotions stop at the first that "
        "does not",
        "pruned: rank 3 of 3, 2 kept",
    ]
    settings = _settings(max_usd=10, max_gpu_hours=10, warmup_epochs=1, full_epochs=3)
    decisions = decide_promotions(
        _warmups(1), keep=1, spent=StageCost(Decimal(1), Decimal(1)), settings=settings
    )
    assert decisions[0].reason == "promoted (est. $2.0000, stopped at $3.0000)"
    refused = PromotionDecision(0, True, "promoted").stopped("stopped by the ledger: no")
    assert (refused.promoted, refused.reason) == (False, "stopped by the ledger: no")


def test_promotions_stop_at_the_first_that_does_not_fit_not_skip_to_a_worse_cheaper_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The best warm-up cost $2 (a promotion held at $6), the next $1 ($3): a cap of $5 holds only the second.

    It was promoted in the best one's place, while the docs (and ``reserve_promotions``, at the ledger's first
    refusal) stop the promotions at the first that does not fit.
    """
    settings = _settings(max_usd=5, max_gpu_hours=100, warmup_epochs=2, full_epochs=6)
    ranked = [Warmup(0, 0.1, Decimal(2), Decimal(2)), Warmup(1, 0.2, Decimal(1), Decimal(1))]
    ranked.append(Warmup(2, 0.3, Decimal(1), Decimal(1)))
    with caplog.at_level("INFO", logger="costaware.core.tuning.spot_plan"):
        none = StageCost(Decimal(0), Decimal(0))
        decisions = decide_promotions(ranked, keep=2, spent=none, settings=settings)
    assert [d.promoted for d in decisions] == [False, False, False]
    assert decisions[0].reason == "stopped by the cap: $6.0000 of $5, 6.0000 of 100 GPU-hours with it"
    assert decisions[1].reason.startswith("stopped by the cap: trial 0, ranked above it, did not fit")
    assert decisions[1].cap == StageCost(Decimal(3), Decimal(3))  # it would have fit
    assert decisions[2].reason == "pruned: rank 3 of 3, 2 kept"
    assert (
        "promotions stop at trial 0 (rank 1 of 3, stopped by the cap: $6.0000 of $5, 6.0000 of 100 GPU-hours "
        "with it): 1 more of the top 2, ranked below it, are not promoted" in caplog.text
    )


def test_rank_is_by_loss_then_trial() -> None:
    warmups = [Warmup(2, 1.0, Decimal(0), Decimal(0)), Warmup(0, 2.0, Decimal(0), Decimal(0))]
    warmups.append(Warmup(1, 1.0, Decimal(0), Decimal(0)))
    assert [w.trial for w in rank(warmups)] == [1, 2, 0]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_warm_up_whose_loss_is_not_finite_ranks_last_and_is_never_promoted(bad: float) -> None:
    """A diverged trial (nan) once took the only place kept and the best trial was pruned."""
    warmups = [Warmup(n, loss, Decimal(1), Decimal(1)) for n, loss in enumerate((bad, 0.3, 0.1))]
    ranked = rank(warmups)
    assert [w.trial for w in ranked] == [2, 1, 0]
    settings = _settings(max_usd=100, max_gpu_hours=100, warmup_epochs=1, full_epochs=3)
    decisions = decide_promotions(ranked, keep=1, spent=StageCost(Decimal(0), Decimal(0)), settings=settings)
    assert [(d.trial, d.promoted) for d in decisions] == [(2, True), (1, False), (0, False)]
    decisions = decide_promotions(ranked, keep=3, spent=StageCost(Decimal(0), Decimal(0)), settings=settings)
    assert [d.trial for d in decisions if d.promoted] == [2, 1]
    assert decisions[2].reason == (
        f"not promoted: its loss is {bad}, not a finite number (the training diverged)"
    )


def _row(trial: str, task_id: str, usd: str, hours: str, **changed: Any) -> dict[str, Any]:
    row = {
        "tags": {"study": "s1", "trial": trial},
        "estimated": False,
        "price_source": "remote:local",
        "task_id": task_id,
        "usd": Decimal(usd),
        "quantity": Decimal(hours),
    }
    return {**row, **changed}


def test_spend_by_trial_counts_only_the_study_s_billed_compute() -> None:
    rows = [
        _row("0", "warmup", "1.5", "0.5"),
        _row("0", "warmup", "0.5", "0.25"),  # a preempted attempt, then its resume
        _row("0", "full", "4", "1"),
        _row("1", "warmup", "2", "1"),
        _row("1", "warmup", "9", "9", estimated=True),
        _row("1", "warmup", "9", "9", price_source="orchestration"),  # the worker's own wait
        _row("1", "warmup", "9", "9", tags={"study": "s2", "trial": "1"}),
        _row("1", "warmup", "9", "9", tags={"study": "s1"}),
    ]
    spend = spend_by_trial(rows, study="s1")
    assert spend == {
        "0": TrialSpend(Decimal(2), Decimal("0.75"), 2, Decimal(4), Decimal(1), 1),
        "1": TrialSpend(Decimal(2), Decimal(1), 1),
    }
    assert (spend["0"].usd, spend["0"].hours) == (Decimal(6), Decimal("1.75"))
    assert study_spent(spend, gpus=4) == StageCost(Decimal(8), Decimal(11))


def test_the_cost_without_the_prune_adds_every_trial_s_epochs_at_the_promoted_runs_price() -> None:
    spend = {
        "0": TrialSpend(warmup_usd=Decimal(1), full_usd=Decimal(8)),
        "1": TrialSpend(warmup_usd=Decimal(3)),
    }
    # 2 warm-ups billed 4, a third planned one at their mean 2; 3 trials x 4 added epochs at 8 / 4 = 2 each.
    assert cost_without_prune(spend, trials=3, added_epochs=4, warmup_epochs=2) == 4 + 2 + 3 * 4 * 2
    no_full = {"0": TrialSpend(warmup_usd=Decimal(1))}
    assert cost_without_prune(no_full, trials=1, added_epochs=4, warmup_epochs=2) == Decimal(
        "3"
    )  # 1 + 4 x 0.5
    assert cost_without_prune({}, trials=3, added_epochs=4, warmup_epochs=2) == 0


def test_the_study_cost_says_what_the_prune_saved() -> None:
    spend = {
        "0": TrialSpend(warmup_usd=Decimal(1), full_usd=Decimal(8)),
        "1": TrialSpend(warmup_usd=Decimal(3)),
    }
    cost = study_cost(spend, planned_trials=3, settings=_settings(warmup_epochs=2, full_epochs=6))
    assert (cost.usd, cost.usd_all_full, cost.usd_saved) == (Decimal(12), Decimal(30), Decimal(18))
    assert cost.summary() == (
        "The study cost $12.000000 over 2 trials ($6.000000 per trial); all 3 to 6 epochs: $30.000000; "
        "saved $18.000000 (60%)"
    )
    assert study_cost({}, planned_trials=3, settings=_settings()).summary().endswith("saved $0.000000 (0%)")


def test_caps_are_read_as_every_other_usd_amount() -> None:
    # "$100" and "1,000.50" are what TuningCaps (budgeted_tuning) takes; the seed's plan takes them too.
    assert _settings(max_usd="$100").max_usd == Decimal(100)
    assert _settings(max_usd="1,000.50").max_usd == Decimal("1000.50")
    with pytest.raises(ConfigurationError, match=r"max_usd must be a finite number above 0, got '25,5'"):
        _settings(max_usd="25,5")  # a comma must group thousands
