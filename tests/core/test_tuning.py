from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.tuning import (
    FinishedTrial,
    RungSchedule,
    StopReason,
    StudySpec,
    TrialState,
    TrialTiming,
    TuningCaps,
    estimate_trial_seconds,
    fall_adjusted_value,
    parse_search_space,
    promotable,
    seconds_for_usd,
    stop_reason,
    trial_costs,
    trial_label,
    trials_since_improvement,
    usd_for_seconds,
    wall_clock_left,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
P, C = TrialState.PROMOTED, TrialState.PRUNED


@pytest.mark.parametrize(
    ("args", "rungs"),
    [
        ((3, 15, 2, 2), (3, 15)),  # the example: a 3-epoch warm-up, the top half to 15
        ((10, 160, 2, None), (10, 20, 40, 80, 160)),
        ((8, 32, 2, None), (8, 16, 32)),
        ((1, 27, 3, None), (1, 3, 9, 27)),
        ((1, 30, 3, None), (1, 3, 9, 27, 30)),
        ((5, 5, 2, None), (5,)),
        ((10, 160, 2, 3), (10, 20, 160)),
    ],
)
def test_geometric_rungs(args: tuple[int, int, int, int | None], rungs: tuple[int, ...]) -> None:
    assert RungSchedule.geometric(*args).rungs == rungs


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 10, 2, None), "need 1 <= min_resource <= max_resource, got min_resource=0"),
        ((10, 5, 2, None), "max_resource=5"),
        ((1, 10, 1, None), "reduction_factor must be >= 2, got 1"),
        ((1, 10, 2, 0), "max_rungs must be >= 1, got 0"),
    ],
)
def test_bad_rungs_name_the_value(args: tuple[int, int, int, int | None], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        RungSchedule.geometric(*args)


def test_explicit_rungs_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="strictly increasing"):
        RungSchedule((5, 3))
    with pytest.raises(ConfigurationError, match="whole resources >= 1"):
        RungSchedule((0, 3))


def test_expected_resource_per_trial_under_successive_halving() -> None:
    assert RungSchedule((3, 15), 2).expected_resource_per_trial() == 3 + 12 / 2
    assert RungSchedule((1, 3, 9, 27), 3).expected_resource_per_trial() == pytest.approx(
        1 + 2 / 3 + 6 / 9 + 18 / 27
    )
    assert RungSchedule((20,), 2).expected_resource_per_trial() == 20


@pytest.mark.parametrize(
    ("value", "competing", "eta", "direction", "expected"),
    [
        (0.7, [], 2, "maximize", True),  # the first result at a rung always moves up (ASHA)
        (0.6, [0.7], 2, "maximize", False),  # 2 results, keep 1: the better one
        (0.8, [0.7], 2, "maximize", True),
        (0.7, [0.7], 2, "maximize", True),  # a tie with the cut-off moves up
        (0.65, [0.9, 0.8, 0.6], 2, "maximize", False),  # 4 results, keep 2: cut-off 0.8
        (0.85, [0.9, 0.8, 0.6], 2, "maximize", True),
        (0.8, [0.9, 0.7, 0.6, 0.5, 0.4], 3, "maximize", True),  # 6 results, keep 2
        (0.7, [0.9, 0.8, 0.6, 0.5, 0.4], 3, "maximize", False),
        (0.2, [0.3, 0.5, 0.9], 2, "minimize", True),  # loss: lower is better
        (0.6, [0.3, 0.5, 0.9], 2, "minimize", False),
        (float("nan"), [], 2, "maximize", False),
        (0.5, [float("nan"), 0.4], 2, "maximize", True),  # NaN results do not compete
    ],
)
def test_promotion_keeps_the_top_fraction(
    value: float, competing: list[float], eta: int, direction: str, expected: bool
) -> None:
    assert promotable(value, competing, eta, direction) is expected


@pytest.mark.parametrize(
    ("value", "competing", "stopped", "eta", "expected"),
    [
        # The reported run: #0, cut at 16 with 0.61711, held the one place of 2; #2 (0.61708) was pruned.
        (0.61708, [], [0.61711], 2, True),
        # 3 results, keep 1: #2 went on from 16 and holds it; #7 moves up only ahead of #2.
        (0.6169, [0.61708], [0.61711], 2, False),
        (0.62, [0.61708], [0.61711], 2, True),
        # The stopped count among the results: 4 results keep 2, the 2 that can go on.
        (0.5, [0.6], [0.9, 0.8], 2, True),
        # but a rung never moves up more than 1/eta of what it saw: 6 results, eta 3, keep 2 of the 4 going.
        (0.6, [0.9, 0.8, 0.7], [0.95, 0.99], 3, False),
        (0.85, [0.9, 0.8, 0.7], [0.95, 0.99], 3, True),
        (0.5, [], [float("nan")], 2, True),  # a NaN stopped result counts for nothing
    ],
)
def test_a_result_that_cannot_go_on_counts_but_holds_no_place_at_its_rung(
    value: float, competing: list[float], stopped: list[float], eta: int, expected: bool
) -> None:
    assert promotable(value, competing, eta, "maximize", stopped=stopped) is expected


def test_search_space_parses_all_kinds() -> None:
    specs = parse_search_space(
        {
            "lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
            "depth": {"type": "int", "low": 2, "high": 8, "step": 2},
            "leaves": {"type": "categorical", "choices": [15, 31]},
        }
    )
    assert [(p.name, p.kind) for p in specs] == [("lr", "float"), ("depth", "int"), ("leaves", "categorical")]
    assert parse_search_space({p.name: p.to_json() for p in specs}) == specs


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({}, "search_space must be a non-empty mapping"),
        ({"lr": {"type": "uniform", "low": 0, "high": 1}}, "'lr' has type 'uniform': use one of float, int"),
        ({"lr": {"type": "float", "low": 1, "high": 0}}, r"'lr' has an empty range \[1.0, 0.0\]"),
        (
            {"lr": {"type": "float", "low": 0, "high": 1, "log": True}},
            "log-scaled, so low must be > 0, got 0",
        ),
        ({"lr": {"type": "float", "high": 1}}, "needs numeric 'low' and 'high'"),
        ({"n": {"type": "int", "low": 1.5, "high": 3}}, r"'n' needs whole bounds, got \[1.5, 3.0\]"),
        ({"c": {"type": "categorical", "choices": []}}, "'c' needs a non-empty 'choices' list"),
        ({"lr": 0.1}, "entry 'lr' must be a mapping"),
        (
            {"lr": {"type": "float", "low": 0, "high": 1, "step": -1}},
            "'lr' has step -1: a step must be a finite",
        ),
        # nan and inf were taken as a float's step, and an int's failed with a bare ValueError/OverflowError
        (
            {"lr": {"type": "float", "low": 0, "high": 1, "step": math.nan}},
            "'lr' has step nan: a step must be",
        ),
        (
            {"lr": {"type": "float", "low": 0, "high": 1, "step": "inf"}},
            "'lr' has step 'inf': a step must be",
        ),
        (
            {"n": {"type": "int", "low": 1, "high": 10, "step": math.nan}},
            "'n' has step nan: a step must be a",
        ),
        (
            {"n": {"type": "int", "low": 1, "high": 10, "step": math.inf}},
            "'n' has step inf: a step must be a",
        ),
        # Typos that were taken without a word, or failed only once money was reserved:
        ({"n": {"type": "int", "low": 1, "high": 10, "step": 0.5}}, "'n' needs a whole step, got 0.5"),
        (
            {"lr": {"type": "float", "low": 0.1, "high": 1, "log": "false"}},
            "has log 'false', a str: write the JSON value true or",
        ),
        ({"lr": {"type": "float", "low": 0.1, "high": 1, "lgo": True}}, r"unknown key\(s\) 'lgo' \(did you"),
        ({"c": {"type": "categorical", "choices": "abc"}}, "needs 'choices' as a list, got 'abc'"),
        ({"lr": {"type": "float", "low": 0, "high": 1, "step": "x"}}, "has step 'x': a step is a number"),
    ],
)
def test_bad_search_space_names_the_parameter(space: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigurationError, match=message):
        parse_search_space(space)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_usd": "0", "max_trials": 4}, "max_usd must be more than \\$0, got '0'"),
        ({"max_usd": "-1", "max_trials": 4}, "max_usd must be more than \\$0, got '-1': no trial could run"),
        ({"max_usd": "abc", "max_trials": 4}, "max_usd must be a number of USD"),
        ({"max_usd": "5", "max_trials": 0}, "max_trials must be a whole number >= 1, got 0"),
        ({"max_usd": "5", "max_trials": "2.5"}, "max_trials must be a whole number >= 1, got '2.5'"),
        (
            {"max_usd": "5", "max_trials": 4, "max_wall_seconds": "-3"},
            "max_wall_seconds must be a number > 0",
        ),
        (
            {"max_usd": "5", "max_trials": 4, "plateau_trials": 0},
            "plateau_trials must be a whole number >= 1",
        ),
        (
            {"max_usd": "5", "max_trials": 4, "plateau_min_delta": "nan"},
            "plateau_min_delta must be a number >= 0",
        ),
        (
            {"max_usd": "5", "max_trials": 4, "max_gpu_hours": "-2"},
            "max_gpu_hours must be a number >= 0, got .-2.",
        ),
        (
            {"max_usd": "1", "max_trials": 2, "max_gpu_hours": "two"},
            "max_gpu_hours must be a number >= 0, got .two.",
        ),
    ],
)
def test_bad_caps_name_the_value(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigurationError, match=message):
        TuningCaps.create(**kwargs)


def test_caps_from_template_strings_round_trip() -> None:
    caps = TuningCaps.create(max_usd="$100", max_trials="24", max_wall_seconds="3600", plateau_trials="5")
    assert (caps.max_usd, caps.max_trials, caps.max_wall_seconds, caps.plateau_trials) == (
        Decimal(100),
        24,
        3600.0,
        5,
    )
    assert TuningCaps.from_json(caps.to_json()) == caps


@pytest.mark.parametrize(
    ("trials", "direction", "delta", "since"),
    [
        ([], "maximize", 0.0, 0),
        ([FinishedTrial(C, None), FinishedTrial(C, None)], "maximize", 0.0, 0),  # nothing to improve on yet
        ([FinishedTrial(P, 0.7), FinishedTrial(C, None), FinishedTrial(P, 0.69)], "maximize", 0.0, 2),
        ([FinishedTrial(P, 0.7), FinishedTrial(C, None), FinishedTrial(P, 0.75)], "maximize", 0.0, 0),
        ([FinishedTrial(P, 0.7), FinishedTrial(P, 0.7005), FinishedTrial(P, 0.701)], "maximize", 0.002, 2),
        # small gains add up from the last improvement's value: 0.7025 is 0.0025 past 0.7, progress
        ([FinishedTrial(P, 0.7), FinishedTrial(P, 0.7015), FinishedTrial(P, 0.7025)], "maximize", 0.002, 0),
        ([FinishedTrial(P, v) for v in (0.800, 0.806, 0.812, 0.818, 0.824)], "maximize", 0.01, 0),
        ([FinishedTrial(P, v) for v in (1.0, 0.994, 0.988, 0.982, 0.976)], "minimize", 0.01, 0),
        ([FinishedTrial(P, v) for v in (0.800, 0.806, 0.809)], "maximize", 0.01, 2),
        ([FinishedTrial(P, 0.7), FinishedTrial(P, 0.703)], "maximize", 0.002, 0),
        ([FinishedTrial(P, 2.0), FinishedTrial(P, 1.5), FinishedTrial(P, 1.6)], "minimize", 0.1, 1),
        ([FinishedTrial(P, 0.7), FinishedTrial(TrialState.CUT, 0.9)], "maximize", 0.0, 1),  # cut: not in full
    ],
)
def test_trials_since_improvement(
    trials: list[FinishedTrial], direction: str, delta: float, since: int
) -> None:
    assert trials_since_improvement(trials, direction, delta) == since


def test_stop_rules_in_order() -> None:
    caps = TuningCaps.create(
        max_usd="10", max_trials=5, max_wall_seconds=60, plateau_trials=2, plateau_min_delta=0.01
    )
    finished = [FinishedTrial(P, 0.7), FinishedTrial(C), FinishedTrial(P, 0.705)]

    def why(started: int, seconds: float, done: list[FinishedTrial]) -> StopReason | None:
        found = stop_reason(
            caps,
            direction="maximize",
            trials_started=started,
            finished=done,
            started_at=T0,
            now=T0 + timedelta(seconds=seconds),
        )
        return None if found is None else found[0]

    assert why(3, 10, finished[:2]) is None
    assert why(5, 10, []) is StopReason.MAX_TRIALS
    assert why(3, 60, []) is StopReason.WALL_CLOCK
    assert why(3, 10, finished) is StopReason.PLATEAU
    reason = stop_reason(
        caps, direction="maximize", trials_started=3, finished=finished, started_at=T0, now=T0
    )
    assert reason is not None and "not improved by 0.01 for 2 trials" in reason[1]
    assert wall_clock_left(caps, T0, T0 + timedelta(seconds=45)) == 15
    assert wall_clock_left(caps, T0, T0 + timedelta(seconds=75)) == 0
    assert wall_clock_left(TuningCaps.create(max_usd=1, max_trials=1), T0, T0) is None


def test_estimates_use_the_slowest_rate_and_largest_overhead() -> None:
    fallback = estimate_trial_seconds([], 100, 30.0)
    assert (fallback.seconds, fallback.seconds_per_unit) == (30.0, None)
    timings = [TrialTiming(10, 2.0, 1.0), TrialTiming(20, 8.0, 0.5)]
    low = estimate_trial_seconds(timings, 100, 30.0, safety_factor=1.5)
    assert low.seconds_per_unit == pytest.approx(0.4)  # 8 s for 20 units: the slowest at the top fidelity
    assert low.seconds == pytest.approx((1.0 + 0.4 * 100) * 1.5)
    timings += [TrialTiming(100, 10.0, 3.0), TrialTiming(100, 12.0, 0.2)]
    found = estimate_trial_seconds(timings, 100, 30.0, safety_factor=1.5)
    assert found.seconds_per_unit == pytest.approx(0.12)  # full runs spread the fixed costs thinner
    assert found.seconds == pytest.approx((3.0 + 0.12 * 100) * 1.5)
    only_cut = estimate_trial_seconds([TrialTiming(0, 0.0, 4.0)], 100, 30.0, safety_factor=2)
    assert (only_cut.seconds, only_cut.seconds_per_unit) == ((4.0 + 30.0) * 2, None)
    with pytest.raises(ConfigurationError, match=r"safety_factor must be >= 1, got 0\.5"):
        estimate_trial_seconds(timings, 100, 30.0, safety_factor=0.5)


def test_money_and_seconds_round_up_for_reservations() -> None:
    assert usd_for_seconds(1.0, Decimal("0.096")) == Decimal("0.000027")  # 0.0000266.. rounded up
    assert usd_for_seconds(3600, Decimal("4.00")) == Decimal("4.000000")
    assert seconds_for_usd(Decimal("3.08"), Decimal("1.40")) == pytest.approx(2.2 * 3600)
    assert math.isinf(seconds_for_usd(Decimal(1), Decimal(0)))


def test_trial_labels_and_costs() -> None:
    assert trial_label(7, TrialState.PRUNED, 3) == "#7 pruned@3"
    costs = trial_costs(
        [(P, Decimal("4.00")), (C, Decimal("1.00")), (C, Decimal("1.00")), (P, Decimal("2.00"))]
    )
    assert (costs.trials, costs.successful, costs.total_usd) == (4, 2, Decimal("8.00"))
    assert (costs.per_trial_usd, costs.per_successful_trial_usd) == (Decimal("2.000000"), Decimal("4.000000"))
    nothing = trial_costs([(C, Decimal("1.00"))])
    assert nothing.per_successful_trial_usd is None and trial_costs([]).per_trial_usd is None


def _spec(**overrides: object) -> StudySpec:
    values: dict[str, object] = {
        "study_name": "churn-2026",
        "direction": "maximize",
        "search_space": parse_search_space({"lr": {"type": "float", "low": 0.01, "high": 0.3}}),
        "schedule": RungSchedule.geometric(3, 15, 2, max_rungs=2),
        "caps": TuningCaps.create(max_usd="100", max_trials=20),
        "scope": {"project": "churn"},
        "usd_per_hour": Decimal("1.40"),
    }
    values.update(overrides)
    return StudySpec(**values)  # type: ignore[arg-type]


def test_study_spec_round_trips_and_scopes_its_budget() -> None:
    spec = _spec()
    assert StudySpec.from_json(spec.to_json()) == spec
    assert str(spec.budget_scope) == "project=churn,study=churn-2026"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"direction": "up"}, "direction must be one of maximize, minimize, got 'up'"),
        ({"pruner": "median"}, "pruner must be one of successive_halving, hyperband, none, got 'median'"),
        ({"sampler": "grid"}, "sampler must be one of tpe, random, got 'grid'"),
        ({"study_name": "a=b"}, "study_name 'a=b' must be non-empty, without ',' or '='"),
        ({"usd_per_hour": Decimal(-1)}, "usd_per_hour must be >= 0, got -1"),
        ({"fallback_trial_seconds": 0.0}, "fallback_trial_seconds must be > 0"),
        ({"safety_factor": 0.9}, "safety_factor must be >= 1, got 0.9"),
    ],
)
def test_bad_study_settings_name_the_value(overrides: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigurationError, match=message):
        _spec(**overrides)


def test_the_fall_adjusted_value_of_no_rungs_is_none_and_a_nan_end_stays_nan() -> None:
    assert fall_adjusted_value([]) is None
    assert math.isnan(fall_adjusted_value([0.7, math.nan]) or 0.0)
    assert fall_adjusted_value([math.nan, 0.6, 0.7]) == pytest.approx(0.7)  # a NaN rung is not a best
    assert fall_adjusted_value([0.3, 0.2, 0.25], "minimize") == pytest.approx(0.3)
