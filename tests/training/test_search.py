"""Budgeted search in one process: Optuna proposes and prunes, a real SQLite ledger pays rung by rung."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import optuna
import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.money import format_usd_exact
from costaware.training.search import budgeted_search

PRICE = Decimal("3600")  # USD per hour: one second costs one dollar, so costs read as seconds
SPACE = {
    "a": optuna.distributions.CategoricalDistribution([0, 1, 2, 3]),
    "b": optuna.distributions.CategoricalDistribution([0, 1, 2]),
}


class Clock:
    """The meter: advances only when a model trains (one second per unit of resource) or is told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Quadratic:
    """A model whose metric grows with resource towards a peak at a=2, b=1; training moves the clock."""

    def __init__(self, params: dict[str, Any], clock: Clock) -> None:
        self.params, self.clock, self.trained = params, clock, 0

    def advance(self, resource: int) -> float:
        self.clock.now += resource - self.trained
        self.trained = resource
        peak = 1.0 - 0.1 * (self.params["a"] - 2) ** 2 - 0.1 * (self.params["b"] - 1) ** 2
        return peak * resource / (resource + 1)


def search(
    ledger: Any,
    cap: str,
    clock: Clock,
    make_model: Callable[[dict[str, Any]], Quadratic] | None = None,
    space: dict[str, Any] = SPACE,
    usd_per_hour: Decimal = PRICE,
    **kwargs: Any,
) -> Any:
    return budgeted_search(
        make_model or (lambda params: Quadratic(params, clock)),
        space=space,
        rungs=[1, 3, 9],
        ledger=ledger,
        scope={"study": "toy"},
        cap_usd=Decimal(cap),
        usd_per_hour=usd_per_hour,
        first_rung_seconds=1.0,
        meter=clock,
        seed=7,
        **kwargs,
    )


def test_the_spend_never_passes_the_cap_and_every_rung_is_in_the_ledger(ledger: Any) -> None:
    clock = Clock()
    result = search(ledger, "40", clock)

    assert result.spent_usd <= Decimal("40")
    assert result.spent_usd == Decimal(str(clock.now))  # every second used is billed, once
    assert "budget" in result.stop
    entries = ledger.entries()
    assert sum(Decimal(str(e["usd"])) for e in entries) == result.spent_usd
    assert len(entries) == sum(len(t.rungs) for t in result.trials)
    assert not ledger.open_reservations()
    assert result.best_value is not None
    assert result.best_value == max(t.value for t in result.trials if t.value is not None)
    # Every configuration of the toy trains at the same speed: once a trial is cut, no new one could reach
    # the last rung, so the search stops instead of paying first rungs that lead nowhere.
    states = [t.state for t in result.trials]
    assert states[-1] == "cut" and "cut" not in states[:-1], states


def test_each_search_has_a_budget_of_its_own_and_leaves_the_scopes_alone(ledger: Any) -> None:
    # The total budget was set on the scope itself: a project's scope got a $10 cap for all time, and a
    # second search on it got only what the first one left.
    ledger.set_budget("study=toy", "month", "100")
    first = search(ledger, "10", Clock())
    second = search(ledger, "40", Clock())

    total = sum(Decimal(str(e["usd"])) for e in ledger.entries())
    assert Decimal(0) < first.spent_usd <= 10 and Decimal(10) < second.spent_usd <= 40
    assert second.spent_usd == total - first.spent_usd
    assert first.budget_scope != second.budget_scope and first.budget_scope.startswith("search=")
    # The scope's own budget is untouched, and counts both; each search's own is gone once it ended.
    assert {b.label: b.cap_usd for b in ledger.budgets()} == {"study=toy/month": 100}
    (month,) = ledger.usage("study=toy")
    assert month.spent_usd == total


def test_with_money_enough_it_tries_every_configuration_once_and_finds_the_peak(ledger: Any) -> None:
    clock = Clock()
    result = search(ledger, "10000", clock, max_repeats=50)

    assert "covered" in result.stop
    params = [tuple(sorted(t.params.items())) for t in result.trials]
    assert len(params) == len(set(params)) == 12
    assert result.best_params == {"a": 2, "b": 1}
    assert result.states.get("pruned", 0) > 0  # Hyperband stopped some early


class Crossing(Quadratic):
    """Short training ranks the configurations exactly the other way round: the worst at 9 leads at rungs 1
    and 3 (a high learning rate ahead after a few epochs), ``a=2, b=1`` wins at 9."""

    def advance(self, resource: int) -> float:
        full = super().advance(resource)
        return full if resource == 9 else 1.0 - full


def test_a_rung_that_ranks_the_completed_trials_the_other_way_is_no_longer_pruned_at(ledger: Any) -> None:
    """The default pruner decides at every rung from the start; where short training ranks like full
    fidelity (the toy) it keeps every rung, where it misleads (``Crossing``) the completed trials show it and
    the rungs are dropped: every configuration then runs in full, those pruned before included."""
    alike = search(ledger, "10000", Clock(), max_repeats=50)
    assert alike.prune_rungs == (1, 3)
    assert alike.states.get("pruned", 0) > 0

    clock = Clock()
    crossing = search(
        ledger, "10000", clock, make_model=lambda params: Crossing(params, clock), max_repeats=50
    )
    assert crossing.prune_rungs == ()
    assert crossing.best_params == {"a": 2, "b": 1}
    completed = {tuple(sorted(t.params.items())) for t in crossing.trials if t.state == "complete"}
    assert len(completed) == 12  # a configuration pruned at a misleading rung was proposed again, in full


def test_hyperband_brackets_share_the_trials_as_optuna_does_and_each_gets_one_early() -> None:
    """At 1/3/9/15 epochs and eta 3 the brackets judged from 1, 3, 9 and never get 27, 12, 6 and 4 trials of
    49 (Optuna's allocation); every bracket has its first trial within the first six."""
    from costaware.training.search_rungs import bracket_weights, next_bracket

    weights = bracket_weights(3, 3)
    assert weights == [27, 12, 6, 4]
    counts, order = [0, 0, 0, 0], []
    for _ in range(49):
        order.append(next_bracket(counts, weights))
        counts[order[-1]] += 1
    assert counts == weights
    assert set(order[:6]) == {0, 1, 2, 3}
    assert bracket_weights(0, 3) == [1]  # one rung: a single bracket, never judged


def test_the_last_bracket_runs_in_full_and_a_trial_is_judged_only_from_its_brackets_first_rung(
    ledger: Any,
) -> None:
    result = search(ledger, "10000", Clock(), max_repeats=50)
    by_bracket: dict[int, list[Any]] = {}
    for t in result.trials:
        by_bracket.setdefault(t.bracket, []).append(t)
    assert set(by_bracket) == {0, 1, 2}  # rungs 1/3/9: judged from 1, from 3, never
    assert all(t.state == "complete" for t in by_bracket[2])
    assert all(t.rungs[-1][0] != 1 for t in by_bracket[1] if t.state == "pruned")
    assert all(len(t.rungs) == 3 for t in by_bracket[2])  # scored at every rung: the fair evidence


def test_a_rung_is_judged_at_only_while_the_trials_that_ran_through_it_unjudged_rank_it_above_chance() -> (
    None
):
    """The evidence of a rung is the completed trials that ran through it unjudged; the survivors of pruning
    there do not count, whatever they show. Without evidence a rung is not judged at."""
    from costaware.training.search_rungs import trusted_rungs

    def trials(judged: tuple[int, ...], *values: tuple[float, float, float]) -> list[tuple[Any, Any]]:
        return [(judged, ((1, a), (3, b), (9, c))) for a, b, c in values]

    ordered = [(0.1 * k, 0.1 * k, 0.1 * k) for k in range(1, 4)]
    reversed_at_1 = [(0.4 - a, b, c) for a, b, c in ordered]
    flat_at_3 = [(a, 0.5, c) for a, b, c in ordered]
    # Fewer than three fair trials: no verdict yet, no rung judged at (they train in full).
    assert trusted_rungs(trials((), *ordered[:2]), (1, 3), 3) == ()
    assert trusted_rungs(trials((), *ordered), (1, 3), 3) == (1, 3)
    # Rung 1 against full fidelity the other way, seen by trials judged only at 3 (rung 3's evidence is the
    # trials judged only at 1, in order): rung 1 goes.
    assert trusted_rungs(trials((1,), *ordered) + trials((3,), *reversed_at_1), (1, 3), 3) == (3,)
    # The survivors of rung 1 do not count for it, in order as they are: rung 1 has no evidence.
    assert trusted_rungs(trials((1,), *ordered) + trials((1, 3), *ordered), (1, 3), 3) == (3,)
    # No relation at rung 3 (tau 0): it goes, and rung 1 with it, though rung 1 ranks in order.
    assert trusted_rungs(trials((), *flat_at_3), (1, 3), 3) == ()
    # Trials judged at rung 3 are no evidence for it: not judged at, and rung 1 neither.
    assert trusted_rungs(trials((3,), *ordered), (1, 3), 3) == ()
    # A weak but positive relation keeps a rung: one pair of three out of order (tau 1/3).
    assert trusted_rungs(trials((), (0.1, 0.2, 0.1), (0.2, 0.1, 0.2), (0.3, 0.3, 0.3)), (1, 3), 3) == (1, 3)


def test_a_rung_that_would_have_pruned_the_best_at_full_fidelity_is_not_judged_at() -> None:
    """Rank correlation is not enough: where the rung orders most trials right but puts the one that wins at
    full fidelity outside its top ``1/eta`` (a slow learner still climbing), judging there drops it."""
    from costaware.training.search_rungs import keeps_the_winner, trusted_rungs

    def trials(*values: tuple[float, float, float]) -> list[tuple[Any, Any]]:
        return [((), ((1, a), (3, b), (9, c))) for a, b, c in values]

    # Rung 3 orders five of six in their final order (tau > 0), but the final winner is 4th there.
    slow_winner = [
        (0.1, 0.1, 0.1),
        (0.2, 0.2, 0.2),
        (0.3, 0.6, 0.3),
        (0.4, 0.5, 0.4),
        (0.5, 0.4, 0.9),
        (0.6, 0.7, 0.6),
    ]
    assert trusted_rungs(trials(*slow_winner), (1, 3), 3) == (1, 3)  # by tau alone: kept
    assert (
        trusted_rungs(trials(*slow_winner), (1, 3), 3, reduction_factor=3) == ()
    )  # it would have pruned the winner
    # The same values with the winner in rung 3's top third: kept.
    in_top = [(a, b, c) for a, b, c in slow_winner[:4]] + [(0.5, 0.65, 0.9), (0.6, 0.7, 0.6)]
    assert trusted_rungs(trials(*in_top), (1, 3), 3, reduction_factor=3) == (1, 3)
    # Minimising, the winner is the lowest value at full fidelity.
    assert keeps_the_winner([(0.1, 0.1), (0.2, 0.3), (0.9, 0.2)], 3, "minimize")
    assert not keeps_the_winner([(0.1, 0.2), (0.2, 0.3), (0.9, 0.1)], 3, "minimize")


def test_a_trial_is_judged_only_at_the_rungs_trusted_when_it_passed_them(ledger: Any) -> None:
    """Where short training misleads (``Crossing``) the rungs are dropped; the trials after that pass them
    unjudged, and each trial's ``judged`` says where it was judged."""
    clock = Clock()
    result = search(ledger, "10000", clock, make_model=lambda params: Crossing(params, clock), max_repeats=50)
    assert result.prune_rungs == ()
    for t in result.trials:
        assert set(t.judged) <= {1, 3} and all(r >= (1, 3, 9)[t.bracket] for r in t.judged)
        if t.state == "pruned":
            assert t.rungs[-1][0] == t.judged[-1]
    assert not result.trials[-1].judged


def test_a_given_pruner_is_used_as_it_is(ledger: Any) -> None:
    result = search(ledger, "10000", Clock(), max_repeats=50, pruner=optuna.pruners.NopPruner())
    assert result.prune_rungs is None and result.states == {"complete": 12}


def test_rounding_to_the_micro_dollar_is_carried_not_dropped(ledger: Any) -> None:
    """At 0.4 micro-dollars a second, rungs of 1, 2 and 6 s cost 0.4, 0.8 and 2.4 micro-dollars: rounded one
    by one they would bill less than was used; carried, the ledger's total is the time used rounded up."""
    clock = Clock()
    price = Decimal("0.00144")  # USD per hour: $0.0000004 a second
    result = search(ledger, "0.001", clock, usd_per_hour=price, pruner=optuna.pruners.NopPruner())
    used = Decimal(str(clock.now)) * price / 3600
    assert used <= result.spent_usd <= used + Decimal("0.000001")  # the float sum of seconds may round up
    assert sum(Decimal(str(e["usd"])) for e in ledger.entries()) == result.spent_usd


class Ticking(Clock):
    """A meter whose every reading takes ``tick`` seconds: the search's own bookkeeping is not free."""

    def __init__(self, tick: float) -> None:
        super().__init__()
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


@pytest.mark.parametrize("cap", ["3.5", "3.75", "4", "4.5", "5", "6.25", "7", "9.5", "12", "20"])
def test_the_searchs_own_bookkeeping_is_paid_within_the_cap(ledger: Any, cap: str) -> None:
    # Reserved only when the search ended, the time after the last rung found the cap spent by the rungs
    # and was billed past it ("spent 0.000008" of a cap of 0.000001 with no rung run).
    clock = Ticking(0.1)
    result = search(ledger, cap, clock)

    assert result.spent_usd <= Decimal(cap), result.stop
    assert "past the cap" not in result.stop
    # Each cap here is at least the least one named ($3.50): it pays a rung. The setup was reserved with the
    # first rung, beyond what that cap leaves beside the bookkeeping's hold, and none ran at $3.50 to $3.60.
    assert result.trials and result.trials[0].rungs, result.stop
    # Billed all the same: every second from the meter's first reading to its last is in the ledger, rounded
    # up to the micro-dollar.
    used = Decimal(str(round(clock.now - clock.tick, 6)))
    assert sum(Decimal(str(e["usd"])) for e in ledger.entries()) == result.spent_usd
    assert used <= result.spent_usd <= used + Decimal("0.000001")  # the float sum of seconds may round up
    assert not ledger.open_reservations() and ledger.budgets() == []


def test_a_cap_below_the_first_rung_and_the_bookkeeping_is_refused_before_anything_is_spent(
    ledger: Any,
) -> None:
    # The first rung's reservation was refused, and the setup and bookkeeping were billed past the cap.
    clock = Ticking(0.1)
    with pytest.raises(ConfigurationError) as refused:
        search(ledger, "3.49", clock, slack_seconds=2.0)
    assert str(refused.value) == (
        "cap_usd $3.49 cannot pay one rung: the first rung's reservation (first_rung_seconds=1 x "
        "safety_factor=1.5: $1.50) and the search's own bookkeeping (slack_seconds=2) cost $3.50 at "
        "usd_per_hour 3600; set cap_usd to at least $3.50 (or lower first_rung_seconds, if the first rung "
        "is shorter)"
    )
    assert ledger.entries() == [] and ledger.budgets() == [] and ledger.open_reservations() == []
    # The cap it names pays a rung, however long the setup before it took (paid from the bookkeeping's hold).
    named = re.search(r"set cap_usd to at least \$([0-9.]+) ", str(refused.value))
    assert named is not None
    for tick in (0.1, 0.001):
        least = search(ledger, named.group(1), Ticking(tick), slack_seconds=2.0)
        assert least.trials and least.trials[0].rungs, least.stop
        assert least.spent_usd <= Decimal(named.group(1)) and "past the cap" not in least.stop
    # A smaller slack_seconds is what a fast ledger needs; the cap must pay it all the same.
    assert search(ledger, "3.49", Ticking(0.01), slack_seconds=1.0).spent_usd <= Decimal("3.49")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rungs": [3, 1]}, "rungs must be increasing"),
        ({"direction": "up"}, "direction must be"),
        ({"first_rung_seconds": 0.0}, "first_rung_seconds must be > 0"),
        ({"safety_factor": 0.5}, "safety_factor must be a number >= 1"),
        # A fractional rung was cut to a whole one (2.5 trained to 2), a nan safety factor passed the check
        # and every rung's reservation failed with a message about the ledger, naming no setting.
        ({"rungs": [1, 2.5, 9]}, r"rungs must be increasing integers >= 1, got \[1, 2\.5, 9\]"),
        ({"safety_factor": float("nan")}, r"safety_factor must be a number >= 1, got nan"),
        ({"safety_factor": "2"}, r"safety_factor must be a number >= 1, got '2'"),
        ({"space": {}}, "space is empty"),
        # budgeted_tuning's JSON form failed in Optuna: "'dict' object has no attribute 'single'".
        (
            {"space": {"x": {"type": "float", "low": -1.0, "high": 1.0}}},
            r"^space\['x'\] is \{'type': 'float', 'low': -1.0, 'high': 1.0\}, not an Optuna distribution: "
            r"write it as, e.g., optuna.distributions.FloatDistribution\(",
        ),
        # Free compute: cap_usd never stopped the search, and a cut divided by the price of 0.
        ({"usd_per_hour": Decimal(0)}, r"usd_per_hour must be more than \$0, got 0: the search stops when"),
        # Said "must be zero or more USD", and zero is refused too.
        ({"usd_per_hour": "-0.1"}, r"usd_per_hour must be more than \$0, got -0.1: the search stops when"),
        # A $0 cap refused every rung, and the bookkeeping after them was billed past it.
        ({"cap_usd": "0"}, r"^cap_usd must be at least \$0.000001, got '0': no rung could be paid; give"),
        ({"cap_usd": "0.0000001"}, r"^cap_usd must be at least \$0.000001, got '0.0000001'"),
        ({"slack_seconds": 0}, r"^slack_seconds must be seconds > 0, got 0: the search's own bookkeeping"),
        ({"slack_seconds": float("inf")}, r"^slack_seconds must be seconds > 0, got inf"),
        ({"cap_usd": "3", "slack_seconds": 2.0}, r"^cap_usd \$3.00 cannot pay one rung: .* at least \$3.50 "),
    ],
)
def test_bad_settings_are_refused_before_anything_is_written(
    ledger: Any, change: dict[str, Any], message: str
) -> None:
    clock = Clock()
    settings: dict[str, Any] = {
        "space": SPACE,
        "rungs": [1, 3, 9],
        "ledger": ledger,
        "scope": {"study": "toy"},
        "cap_usd": Decimal("10"),
        "usd_per_hour": PRICE,
        "first_rung_seconds": 1.0,
        "meter": clock,
        **change,
    }
    with pytest.raises(ConfigurationError, match=message):
        budgeted_search(lambda params: Quadratic(params, clock), **settings)
    assert ledger.budgets() == [] and ledger.entries() == []


class Paced(Quadratic):
    """Trains at ``pace`` seconds a unit of resource."""

    def __init__(self, params: dict[str, Any], clock: Clock, pace: int) -> None:
        super().__init__(params, clock)
        self.pace = pace

    def advance(self, resource: int) -> float:
        self.clock.now += (self.pace - 1) * (resource - self.trained)
        return super().advance(resource)


def paced_search(ledger: Any, cap: str, paces: list[int]) -> Any:
    """A search whose n-th configuration trains at ``paces[n]`` s a unit, over ``len(paces)`` configurations,
    with no pruning (so that only money decides)."""
    clock = Clock()
    pace = iter(paces)
    space = {
        "a": optuna.distributions.CategoricalDistribution(list(range(len(paces)))),
        "b": optuna.distributions.CategoricalDistribution([1]),
    }
    return search(
        ledger,
        cap,
        clock,
        make_model=lambda params: Paced(params, clock, next(pace)),
        space=space,
        pruner=optuna.pruners.NopPruner(),
        max_repeats=5,
    )


def test_after_a_slow_trial_is_cut_a_fast_configuration_may_still_finish(ledger: Any) -> None:
    """Paces 1, 5, 1 s a unit, rungs 1/3/9, cap 50: the first trial completes (9), the slow one pays 15 and is
    cut at its last rung (45 > 26 left); 26 still carry a 1 s configuration (13.5 with the safety factor), so
    the third trial runs and completes (9 more)."""
    result = paced_search(ledger, "50", [1, 5, 1])
    assert [t.state for t in result.trials] == ["complete", "cut", "complete"]
    assert result.spent_usd == Decimal(9 + 15 + 9) <= Decimal(50)


def test_a_fast_configuration_finishes_on_what_a_slow_one_left(ledger: Any) -> None:
    """The first trial trains at 5 s a unit, the second at 1 s: the second's last rung (6 units) is priced at
    its own speed (9 s with the safety factor), not the first one's (45 s), so the 26 s left pay for it."""
    result = paced_search(ledger, "74", [5, 1])
    assert [t.state for t in result.trials] == ["complete", "complete"]
    assert result.spent_usd == Decimal(54) <= Decimal(74)  # 9 units at 5 s, then 9 at 1 s
    assert "covered" in result.stop


class Falls:
    """a=0 peaks at rung 3 (0.80) and falls to 0.78; a=1 climbs to 0.775 and never falls."""

    CURVES = {0: {1: 0.70, 3: 0.80, 9: 0.78}, 1: {1: 0.70, 3: 0.76, 9: 0.775}}

    def __init__(self, params: dict[str, Any], clock: Clock) -> None:
        self.params, self.clock, self.trained = params, clock, 0

    def advance(self, resource: int) -> float:
        self.clock.now += resource - self.trained
        self.trained = resource
        return self.CURVES[self.params["a"]][resource]


def test_a_configuration_past_its_best_ranks_below_one_that_ends_as_high_without_falling(ledger: Any) -> None:
    clock = Clock()
    result = search(
        ledger,
        "1000",
        clock,
        make_model=lambda params: Falls(params, clock),
        space={"a": optuna.distributions.CategoricalDistribution([0, 1])},
        max_repeats=5,
    )
    scores = {t.params["a"]: t.score() for t in result.trials if t.state == "complete"}
    # 0.78 less its fall of 0.02 from 0.80: 0.76; the curve that never fell scores its value, 0.775.
    assert scores == {0: pytest.approx(0.76), 1: pytest.approx(0.775)}
    assert result.best_params == {"a": 1} and result.best_value == pytest.approx(0.775)


@pytest.mark.parametrize(
    ("rungs", "direction", "score"),
    [
        (((1, 0.6), (3, 0.7), (9, 0.65)), "maximize", 0.60),  # fell 0.05 from its best: 0.65 - 0.05
        (((1, 0.6), (3, 0.7), (9, 0.75)), "maximize", 0.75),  # never fell: its value
        (((1, 0.9), (3, 0.4), (9, 0.5)), "minimize", 0.60),  # a loss rose 0.1 from its best: 0.5 + 0.1
    ],
)
def test_the_score_is_the_value_less_its_fall_from_the_best_rung(
    rungs: tuple[tuple[int, float], ...], direction: str, score: float
) -> None:
    from costaware.training.search import SearchTrial

    trial = SearchTrial(0, {}, rungs, "complete")
    assert trial.score(direction) == pytest.approx(score)
    assert SearchTrial(0, {}, rungs[:2], "pruned").score(direction) is None


class SlowsDown(Quadratic):
    """One second a unit up to 3 units, then ten: a worker that got loaded in the middle of a trial."""

    def advance(self, resource: int) -> float:
        self.clock.now += sum(1 if unit <= 3 else 10 for unit in range(self.trained + 1, resource + 1))
        self.trained = resource
        return 0.5


def test_a_rung_that_slows_down_past_its_reservation_is_billed_as_it_ran_and_said(
    ledger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Rung 9 was reserved at the trial's speed on rung 3 (6 units x 1 s x 1.5 = 9 s) and took 60 s.

    A rung is one call to the model and is not interrupted: the 60 s are billed, the spend passes the cap of
    20 by 43, and the warning says so, with the rung and its training against its estimate.
    """
    clock = Clock()
    result = search(ledger, "20", clock, make_model=lambda params: SlowsDown(params, clock))
    assert result.spent_usd == Decimal(63) == Decimal(str(clock.now))
    assert not ledger.open_reservations()
    assert (
        "the spend passed the cap by $43.00: rung 9 of trial 0 was billed 60.00 s against the 9.00 s "
        "reserved for it (its training took 60.00 s, estimated at 6.00 s)" in caplog.text
    )


def test_a_rung_past_its_reservation_names_the_project_budget_it_passed(
    ledger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The warning said "passed the cap" ($100, far from spent) where the project's $20 was what was passed.
    ledger.set_budget("study=toy", "total", "20")
    clock = Clock()
    result = search(ledger, "100", clock, make_model=lambda params: SlowsDown(params, clock))
    (usage,) = ledger.usage("study=toy")
    assert usage.left_usd < 0 and result.spent_usd < 100
    assert "the spend passed budget 'study=toy/total (total)' over the search's scope by $" in caplog.text
    assert "passed the cap" not in caplog.text


def test_a_rung_past_its_reservation_names_the_per_run_budget_it_passed(
    ledger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A budget of period 'run' caps each search (its rungs reserve in the search's run): read without the
    # run, it was left out of the budgets over the search, and the warning said "passed the cap" ($100).
    ledger.set_budget("study=toy", "run", "20")
    clock = Clock()
    result = search(ledger, "100", clock, make_model=lambda params: SlowsDown(params, clock))
    run = result.budget_scope.partition("search=")[2].split(",")[0]
    (usage,) = ledger.usage("study=toy", run_id=run, dag_id="search")
    assert usage.left_usd < 0 and result.spent_usd < 100
    assert f"the spend passed budget '{usage.name}' over the search's scope by $" in caplog.text
    assert "passed the cap" not in caplog.text


@pytest.mark.parametrize("slack_seconds", [None, 2.0])
def test_the_stop_names_the_project_budget_a_rung_past_its_reservation_passed(
    ledger: Any, slack_seconds: float | None
) -> None:
    # It said "the spend is $43.16 past the cap" (of $100, $63 spent) where the project's $20 was passed.
    ledger.set_budget("study=toy", "total", "20")
    clock = Ticking(0.01)
    result = search(
        ledger, "100", clock, make_model=lambda params: SlowsDown(params, clock), slack_seconds=slack_seconds
    )
    (usage,) = ledger.usage("study=toy")
    assert result.spent_usd < 100
    assert (
        f"; the spend is {format_usd_exact(-usage.left_usd)} past budget 'study=toy/total (total)' over the "
        "search's scope: a rung ran past its reservation" in result.stop
    ), result.stop


class RunsOutOfMemory(Quadratic):
    """Its third rung trains two seconds, then raises, as a model out of GPU memory does."""

    def advance(self, resource: int) -> float:
        if resource == 9:
            self.clock.now += 2
            raise MemoryError("CUDA out of memory")
        return super().advance(resource)


def test_a_search_whose_model_raises_bills_what_ran_and_leaves_no_hold_or_budget(ledger: Any) -> None:
    # The failing rung's reservation stayed open (counted against the project's budgets until its time
    # limit), the search's own budget stayed for good, and the seconds the rung ran were never billed.
    ledger.set_budget("study=toy", "month", "100")
    clock = Clock()
    with pytest.raises(MemoryError, match="CUDA out of memory"):
        search(ledger, "40", clock, make_model=lambda params: RunsOutOfMemory(params, clock))
    assert ledger.open_reservations() == []
    assert [b.label for b in ledger.budgets()] == ["study=toy/month"]
    billed = sum(Decimal(str(e["usd"])) for e in ledger.entries())
    assert billed == Decimal(str(clock.now)) == Decimal(1 + 2 + 2)  # rungs 1 and 3, then 2 s of rung 9
    (failed,) = [e for e in ledger.entries() if "failed" in (e["note"] or "")]
    assert "MemoryError: CUDA out of memory" in failed["note"]
    # Its trial ended there, failed: billed as a bare rung (#0@9), `report --group-by trial` counted it as
    # a trial the budget cut.
    assert failed["trial"] == "#0 failed@9"
    # Recorded as failed work, not a success: `costaware report --group-by outcome` tells them apart.
    assert failed["outcome"] == "failed"
    assert {e["outcome"] for e in ledger.entries() if e["id"] != failed["id"]} == {"success"}


def test_a_search_whose_failed_rung_cannot_be_billed_still_settles_its_bookkeeping_hold(
    ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The failed rung's bill raising skipped the tail's settlement: the bookkeeping hold counted against the
    # project's budgets for six hours, and the time after the rung was billed nowhere.
    from costaware.training.search_billing import SearchBilling

    real_bill = SearchBilling.bill

    def bill(self: SearchBilling, *args: Any, **kwargs: Any) -> float:
        if kwargs.get("outcome") == "failed":
            raise ConnectionError("ledger went away")
        return real_bill(self, *args, **kwargs)

    monkeypatch.setattr(SearchBilling, "bill", bill)
    clock = Clock()
    with pytest.raises(MemoryError, match="CUDA out of memory"):
        search(ledger, "40", clock, make_model=lambda params: RunsOutOfMemory(params, clock))
    assert [r.holder for r in ledger.open_reservations() if r.holder.endswith("/tail")] == []
    # The seconds the rung ran are billed with the bookkeeping instead: none is lost.
    assert sum(Decimal(str(e["usd"])) for e in ledger.entries()) == Decimal(str(clock.now))


def test_the_bookkeeping_after_the_last_rung_is_billed_even_when_no_money_is_left_to_reserve(
    ledger: Any,
) -> None:
    # The tail was left out of the ledger when the budget was spent to the micro-dollar: money used that no
    # budget saw. It is billed past the cap, as a rung that ran long is, and said.
    from costaware.training.search_billing import SearchBilling

    clock = Clock()
    ledger.set_budget("search=x", "total", "1")
    billing = SearchBilling(
        ledger,
        budget_scope="search=x",  # type: ignore[arg-type]
        tags={"search": "x"},
        usd_per_hour=PRICE,
        owner=("search", "search"),
        run="x",
        meter=clock,
        started=0.0,
    )
    held = ledger.reserve("search=x", "1", holder="search/x/0/1")
    clock.now = 1.0
    billing.bill(held.id, "#0@1", "rung")
    clock.now = 1.5
    stop = billing.settle_tail("budget spent")
    assert "billed past the cap" in stop
    assert sum(Decimal(str(e["usd"])) for e in ledger.entries()) == Decimal("1.5")


def held_billing(ledger: Any, clock: Clock, cap: str, run: str = "x") -> Any:
    from costaware.training.search_billing import SearchBilling

    ledger.set_budget(f"search={run}", "total", cap)
    return SearchBilling(
        ledger,
        budget_scope=f"search={run}",  # type: ignore[arg-type]
        tags={"search": run},
        usd_per_hour=PRICE,
        owner=("search", "search"),
        run=run,
        meter=clock,
        started=clock.now,
    )


def test_the_bookkeeping_after_the_last_rung_is_paid_from_a_hold_no_rung_can_take(ledger: Any) -> None:
    # The tail was reserved only when the search ended: the rungs had spent the cap, and it was billed past.
    from costaware.core.errors import BudgetExceededError

    clock = Clock()
    billing = held_billing(ledger, clock, "5")
    assert billing.hold_bookkeeping(2.0) == ""
    with pytest.raises(BudgetExceededError):
        ledger.reserve("search=x", "3.000001", holder="search/x/0/1")
    rung = ledger.reserve("search=x", "3", holder="search/x/0/1")
    clock.now = 3.0
    billing.bill(rung.id, "#0@1", "rung")
    clock.now = 4.5
    assert billing.settle_tail("budget spent") == "budget spent"
    assert sorted((e["trial"], Decimal(str(e["usd"]))) for e in ledger.entries()) == [
        ("#0@1", Decimal(3)),
        ("tail", Decimal("1.5")),
    ]
    assert ledger.open_reservations() == []


def test_a_tail_longer_than_its_hold_grows_it_as_far_as_the_cap_has_room_and_says_what_passed_it(
    ledger: Any,
) -> None:
    clock = Clock()
    roomy = held_billing(ledger, clock, "6", run="roomy")
    roomy.hold_bookkeeping(2.0)
    clock.now = 3.0  # no rung: the cap has $4 beside the hold, $1 of which the tail uses past it
    assert roomy.settle_tail("cut") == "cut"
    assert roomy.billed_usd == 3

    tight = held_billing(ledger, clock, "2", run="tight")
    tight.hold_bookkeeping(1.0)
    clock.now = 5.5  # 2.5 s of bookkeeping, $1 held, $1 more of room: billed all the same, $0.50 past the cap
    stop = tight.settle_tail("cut")
    assert tight.billed_usd == Decimal("2.5")
    assert stop == (
        "cut; the last 2.500 s (bookkeeping after the last rung) were billed past the cap by $0.50: they "
        "took longer than slack_seconds, and the cap had no room left; raise slack_seconds"
    )
    assert ledger.open_reservations() == []


def test_a_setup_longer_than_its_hold_is_no_spend_past_a_cap_that_had_room(ledger: Any) -> None:
    # 3 s of setup paid from a 2 s hold: the hold read as overdrawn and the stop said the tail was "billed
    # past the cap" where $3.10 of a $3.50 cap was spent.
    clock = Clock()
    billing = held_billing(ledger, clock, "3.5", run="slow-setup")
    billing.hold_bookkeeping(2.0)
    clock.now = 3.0
    billing.bill_setup(clock.now)
    clock.now = 3.1
    assert billing.settle_tail("cut") == "cut"
    assert billing.billed_usd == Decimal("3.1") and ledger.open_reservations() == []


def test_by_default_a_rung_is_billed_the_time_it_ran_not_this_process_cpu_time(ledger: Any) -> None:
    # The default meter was CPU time: a rung waiting on a GPU (here, asleep) was billed almost nothing.
    import time

    class Waits(Quadratic):
        def advance(self, resource: int) -> float:
            time.sleep(0.05 * (resource - self.trained))
            self.trained = resource
            return 0.5

    result = budgeted_search(
        lambda params: Waits(params, Clock()),
        space={"a": optuna.distributions.CategoricalDistribution([0])},
        rungs=[1, 2],
        ledger=ledger,
        scope={"study": "toy"},
        cap_usd=Decimal("10"),
        usd_per_hour=PRICE,
        first_rung_seconds=0.05,
        max_trials=1,
    )
    assert result.spent_usd >= Decimal("0.1")  # two units asleep, a dollar a second


class Diverges(Quadratic):
    """Its metric is nan from rung ``at`` on (a learning rate too high); 0.5 before it."""

    def __init__(self, params: dict[str, Any], clock: Clock, at: int) -> None:
        super().__init__(params, clock)
        self.at = at

    def advance(self, resource: int) -> float:
        self.clock.now += resource - self.trained
        self.trained = resource
        return float("nan") if resource >= self.at else 0.5


class Flat(Quadratic):
    """0.51, 0.52, 0.53 for a = 1, 2, 3 at every rung."""

    def advance(self, resource: int) -> float:
        self.clock.now += resource - self.trained
        self.trained = resource
        return 0.5 + self.params["a"] / 100


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_a_diverged_first_trial_fails_at_its_rung_and_never_wins(
    ledger: Any, direction: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The first trial's nan was accepted at every rung, the trial trained in full and was recorded complete,
    # and max/min over the scores kept its nan as it came first: best_params {'a': 0}, best_value nan.
    clock = Clock()
    made: list[dict[str, Any]] = []

    def make_model(params: dict[str, Any]) -> Quadratic:
        made.append(params)
        return Diverges(params, clock, at=1) if len(made) == 1 else Flat(params, clock)

    result = search(
        ledger,
        "1000",
        clock,
        make_model=make_model,
        space={"a": optuna.distributions.CategoricalDistribution([0, 1, 2, 3])},
        direction=direction,
        pruner=optuna.pruners.NopPruner(),
        max_repeats=5,
    )
    first = result.trials[0]
    assert (first.state, first.rungs) == ("failed", ())
    assert result.states == {"failed": 1, "complete": 3}
    best = (max if direction == "maximize" else min)(result.trials[1:], key=lambda t: t.value)
    assert result.best_params == best.params and result.best_value == best.value
    # Only its first rung (one second) was trained and paid: 1 + 3 x 9 seconds in all.
    assert clock.now == 1 + 3 * 9 and result.spent_usd == Decimal(28)
    assert f"trial 0 {first.params} failed at rung 1: its metric is nan" in caplog.text


def test_a_trial_that_diverges_at_a_later_rung_is_not_trained_on(ledger: Any) -> None:
    clock = Clock()
    result = search(
        ledger,
        "1000",
        clock,
        make_model=lambda params: Diverges(params, clock, at=3),
        space={"a": optuna.distributions.CategoricalDistribution([0])},
        pruner=optuna.pruners.NopPruner(),
        max_repeats=1,
    )
    (trial,) = result.trials
    assert (trial.state, trial.rungs, trial.value) == ("failed", ((1, 0.5),), None)
    assert result.best_params is None and result.best_value is None
    assert clock.now == 3  # rungs 1 and 3 trained, rung 9 never paid
    notes = sorted((e["note"], e["outcome"]) for e in ledger.entries() if e["trial"] != "tail")
    assert notes == [("{'a': 0}: 0.5000", "success"), ("{'a': 0}: nan; failed: not a number", "failed")]


def test_a_one_class_validation_set_is_refused_before_a_rung_is_reserved(ledger: Any) -> None:
    # Every trial paid a first rung and failed on a nan metric: ROC AUC of one class is not defined.
    import pandas as pd

    from costaware.training.tuning import BoostingFidelityModel

    train = pd.DataFrame({"f": [0.0, 1.0, 2.0, 3.0], "y": [0, 1, 0, 1]})
    valid = pd.DataFrame({"f": [0.0, 1.0], "y": [1, 1]})
    refused = r"^the validation set's label column 'y' holds one class only, 1"
    with pytest.raises(ConfigurationError, match=refused):
        search(
            ledger,
            "100",
            Clock(),
            make_model=lambda params: BoostingFidelityModel({}, train, valid, "y"),  # type: ignore[arg-type, return-value]
        )
    assert ledger.entries() == [] and ledger.open_reservations() == [] and ledger.budgets() == []


def test_the_report_by_trial_counts_a_searchs_trials_and_those_trained_in_full(
    ledger: Any, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A search's entries were labelled "#3@9" only: `report --group-by trial` gave no per-trial summary.
    # Each trial's last entry now says how it ended ("#3 promoted@9"), as budgeted_tuning's do.
    import json

    from costaware.cli import main

    clock = Clock()
    result = search(ledger, "40", clock)
    assert main(["--ledger-url", ledger_url, "report", "--group-by", "trial", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)["trials"]
    complete = [t for t in result.trials if t.state == "complete"]
    billed = {int(e["trial"][1:].split("@")[0].split()[0]) for e in ledger.entries() if e["trial"] != "tail"}
    assert complete and summary["trials"] == len(billed)  # a trial the budget cut before a rung cost nothing
    assert summary["successful"] == len(complete)
    trial_usd = result.spent_usd - sum(
        (Decimal(str(e["usd"])) for e in ledger.entries() if e["trial"] == "tail"), Decimal(0)
    )
    assert Decimal(summary["per_successful_trial_usd"]) == (trial_usd / len(complete)).quantize(
        Decimal("0.000001")
    )
    labels = {e["trial"] for e in ledger.entries()}
    for trial in result.trials:
        last = trial.rungs[-1][0] if trial.rungs else None
        ending = {"complete": "promoted"}.get(trial.state, trial.state)
        if last is not None and trial.state in ("complete", "pruned"):
            assert f"#{trial.number} {ending}@{last}" in labels


def test_a_search_cut_by_its_own_budget_says_to_raise_cap_usd(ledger: Any) -> None:
    # The stop said "raise the cap with `costaware budget set`": the search's budget is set from cap_usd and
    # deleted when the search ends, so no command could raise it.
    clock = Clock()
    result = search(
        ledger, "5", clock, slack_seconds=2.0
    )  # rung 3's estimate, 3 s at $1 a second, is over what is left
    assert result.trials[0].state == "cut" and clock.now == 1
    assert result.stop.startswith("budget 'search=")
    assert (
        "the search's budget is its cap_usd ($5.00): raise cap_usd; the $2.00 reserved is held for the "
        "search's own bookkeeping (slack_seconds)" in result.stop
    )
    # Its reserved money is the search's own hold, which no `costaware budget release` should give back.
    assert "costaware budget" not in result.stop
    # Another budget over the scope is the user's: its advice stays.
    ledger.set_budget("study=toy", "month", "0.5")
    assert "raise the cap with `costaware budget set`" in search(ledger, "40", clock).stop


def test_a_study_that_cannot_be_made_leaves_no_budget_behind(ledger: Any, monkeypatch: Any) -> None:
    def refuse(**kwargs: Any) -> Any:
        raise RuntimeError("the study's storage is unreachable")

    monkeypatch.setattr(optuna, "create_study", refuse)
    with pytest.raises(RuntimeError, match="unreachable"):
        search(ledger, "10", Clock())

    assert ledger.budgets() == []


def test_a_ledger_that_fails_the_bookkeeping_hold_leaves_no_budget_behind(
    ledger: Any, monkeypatch: Any
) -> None:
    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the ledger's database went away")

    monkeypatch.setattr(ledger, "reserve", unreachable)
    with pytest.raises(RuntimeError, match="went away"):
        search(ledger, "10", Clock())
    assert ledger.budgets() == [] and ledger.entries() == []


class SlowToMake(Quadratic):
    """A model whose making (loading its data, say) takes ``seconds`` on the meter."""

    def __init__(self, params: dict[str, Any], clock: Clock, seconds: float) -> None:
        clock.now += seconds
        super().__init__(params, clock)


# 17.000001: the first trial's 17 s and the measured hold's least, a micro-dollar kept for the tail (the first
# making is no longer paid from that hold: made once the first rung is reserved, billed as it ran).
@pytest.mark.parametrize("cap", ["17.000001", "17.5", "18", "18.5"])
def test_a_trial_whose_first_rung_is_refused_spends_nothing_on_making_its_model(
    ledger: Any, cap: str
) -> None:
    # Each model took 5 s to make, before its first rung was reserved: the second trial's rung was refused
    # and its 5 s went to the bookkeeping after the last rung, billed up to $2 past the cap.
    clock = Clock()
    made: list[float] = []

    def make_model(params: dict[str, Any]) -> Quadratic:
        made.append(clock.now)
        return SlowToMake(params, clock, 5.0)

    result = search(ledger, cap, clock, make_model=make_model)
    assert [t.state for t in result.trials] == ["complete", "cut"]
    assert len(made) == 1  # the cut trial's model was never made
    assert result.spent_usd <= Decimal(cap) and "past the cap" not in result.stop, result.stop
    assert result.spent_usd == Decimal(str(clock.now))  # every second used is billed all the same


@pytest.mark.parametrize("left", ["0.05", "3.49"])
def test_a_budget_over_the_scope_too_low_for_the_first_rung_and_bookkeeping_stops_it_before_any_spend(
    ledger: Any, left: str
) -> None:
    # A budget over the scope with $0.05 left refused the bookkeeping hold, and the setup before it (the
    # study, the search's budget, the refused hold: 0.1 s) was billed past it.
    ledger.set_budget("study=toy", "total", left)
    result = search(ledger, "10", Ticking(0.1), slack_seconds=2.0)
    assert result.trials == () and result.spent_usd == 0
    assert result.stop == (
        f"no rung was run: budget 'study=toy/total (total)' over the search's scope has ${Decimal(left):.2f} "
        "left, less than the $3.50 the search holds before its first rung (the first rung's reservation, "
        "first_rung_seconds=1 x safety_factor=1.5, and its own bookkeeping, slack_seconds=2): nothing was "
        "spent; raise the cap with `costaware budget set`, or give the search a smaller first_rung_seconds "
        "or slack_seconds"
    )
    assert ledger.entries() == [] and ledger.open_reservations() == []
    assert [str(b.scope) for b in ledger.budgets()] == ["study=toy"]  # the search's own budget never set


def test_a_small_cap_the_fixed_bookkeeping_hold_refused_runs_within_it(ledger: Any) -> None:
    # A fixed 2 s hold refused any cap under $3.50 here ("cannot pay one rung"), though the bookkeeping takes
    # a few hundredths of a second: the measured hold (the default) lets such a cap pay its rungs.
    clock = Ticking(0.01)
    result = search(ledger, "2", clock)

    assert result.trials and result.trials[0].rungs, result.stop
    assert result.spent_usd <= Decimal("2") and "past the cap" not in result.stop, result.stop
    used = Decimal(str(round(clock.now - clock.tick, 6)))
    assert used <= result.spent_usd <= used + Decimal("0.000001")  # every second billed, rounded up
    assert not ledger.open_reservations() and ledger.budgets() == []


def test_a_cap_below_the_first_rung_and_the_measured_setup_is_refused_naming_both(ledger: Any) -> None:
    # The setup takes 0.2 s here (two readings of the meter): x safety_factor 1.5 with the first rung's $1.50
    # reservation, $1.80; a cap of $1.60 cannot pay it.
    clock = Ticking(0.1)
    with pytest.raises(ConfigurationError) as refused:
        search(ledger, "1.6", clock)
    message = str(refused.value)
    assert message.startswith(
        "cap_usd $1.60 cannot pay one rung: the first rung's reservation (first_rung_seconds=1 x "
        "safety_factor=1.5: $1.50) and the search's own bookkeeping (its setup, measured "
    ), message
    named = re.search(r"set cap_usd to at least \$([0-9.]+) ", message)
    assert named is not None and Decimal(named.group(1)) > Decimal("1.6")
    # The setup ran and is billed as such, once, within the cap (a second, empty 'tail' entry followed it);
    # no hold or budget is left behind.
    spent = sum(Decimal(str(e["usd"])) for e in ledger.entries())
    assert 0 < spent <= Decimal("1.6")
    assert [e["trial"] for e in ledger.entries()] == ["setup"]
    assert not ledger.open_reservations() and ledger.budgets() == []
    # The cap it names pays a rung. The first rung's own bookkeeping (its model's making, two readings here)
    # is not in the setup measured: at this least cap a 0.1 s reading passes it, and the stop says so.
    least = search(ledger, named.group(1), Ticking(0.1))
    assert least.trials and least.trials[0].rungs, least.stop
    assert (least.spent_usd > Decimal(named.group(1))) == ("past the cap" in least.stop), least.stop


class SlowsItsBookkeeping(Clock):
    """A meter whose every reading takes ``tick`` seconds until ``after``, then ``slow_tick`` (a ledger that
    became busy mid-search)."""

    def __init__(self, tick: float, slow_tick: float, after: float) -> None:
        super().__init__()
        self.tick, self.slow_tick, self.after = tick, slow_tick, after

    def __call__(self) -> float:
        self.now += self.tick if self.now < self.after else self.slow_tick
        return self.now


def grows_recorded(ledger: Any, monkeypatch: Any) -> list[Decimal]:
    """The amounts the search asks its holds to grow to, in order."""
    asked: list[Decimal] = []
    grow = ledger.grow

    def recording(reservation_id: str, usd: Any) -> Any:
        asked.append(Decimal(str(usd)))
        return grow(reservation_id, usd)

    monkeypatch.setattr(ledger, "grow", recording)
    return asked


def test_a_search_whose_bookkeeping_slows_down_grows_its_hold_and_stays_within_the_cap(
    ledger: Any, monkeypatch: Any
) -> None:
    # From 12 s on every reading of the meter takes 1.5 s: the bookkeeping after the last rung took 3 s, a
    # fixed 2 s hold did not pay it, and the spend passed the cap ("billed past the cap by $0.22").
    asked = grows_recorded(ledger, monkeypatch)
    result = search(ledger, "40", SlowsItsBookkeeping(0.01, 1.5, 12.0))

    assert [t.state for t in result.trials][:2] == ["complete", "complete"], result.stop
    assert result.spent_usd <= Decimal("40") and "past the cap" not in result.stop, result.stop
    assert len(asked) >= 2 and asked == sorted(asked)  # grown as the bookkeeping slowed
    assert not ledger.open_reservations() and ledger.budgets() == []


def test_a_search_whose_bookkeeping_outgrows_what_is_left_stops_before_the_rung(ledger: Any) -> None:
    # From 12 s every reading takes 3 s: held x safety_factor, the bookkeeping between rungs needs more than
    # the cap has left, and no rung is run that would leave it unpaid.
    result = search(ledger, "50", SlowsItsBookkeeping(0.01, 3.0, 12.0))

    assert "no rung was run that would leave the search's own bookkeeping unpaid" in result.stop
    assert "raise cap_usd" in result.stop
    assert result.spent_usd <= Decimal("50") and "past the cap" not in result.stop, result.stop
    assert not ledger.open_reservations() and ledger.budgets() == []


def test_a_given_slack_seconds_is_held_fixed_from_the_start(ledger: Any, monkeypatch: Any) -> None:
    # slack_seconds=2 keeps the fixed hold: reserved before the first proposal, never grown between rungs.
    held: list[Any] = []
    reserve = ledger.reserve

    def recording(*args: Any, **kwargs: Any) -> Any:
        held.append(kwargs["purpose"])
        return reserve(*args, **kwargs)

    monkeypatch.setattr(ledger, "reserve", recording)
    asked = grows_recorded(ledger, monkeypatch)
    result = search(ledger, "40", SlowsItsBookkeeping(0.01, 1.5, 12.0), slack_seconds=2.0)

    assert held[0] == "the search's own bookkeeping (slack_seconds=2)"
    assert asked == [] or len(asked) == 1  # only the tail's, when the search ended
    assert "took longer than slack_seconds" in result.stop  # as before: the 2 s did not pay the slow tail


def test_the_first_model_is_made_only_once_a_budget_over_the_scope_held_its_first_rung(ledger: Any) -> None:
    # Measured, the first model was made before anything was reserved: 5 s of loading data ran with nothing
    # held in the project's budget, the hold was then refused, and the 5 s were billed past that budget as
    # 'tail', "bookkeeping after the last rung". $1.505 passes the check before the start (first rung and a
    # micro-dollar) but not the first rung and the measured setup's hold.
    ledger.set_budget("study=toy", "total", "1.505")
    clock = Ticking(0.01)
    made: list[float] = []

    def make_model(params: dict[str, Any]) -> Quadratic:
        made.append(clock.now)
        return SlowToMake(params, clock, 5.0)

    result = search(ledger, "10", clock, make_model=make_model)

    assert made == [] and result.trials[0].rungs == (), result.stop
    assert {e["trial"] for e in ledger.entries()} == {"setup"}  # no rung ran: all of it is the setup's
    (usage,) = ledger.usage("study=toy")
    assert usage.left_usd >= 0 and result.spent_usd < Decimal("0.1"), result.stop
    assert not ledger.open_reservations()


def test_a_first_model_that_raises_is_billed_as_the_setup(ledger: Any) -> None:
    # Its time was billed as 'tail', "bookkeeping after the last rung", though no rung ran.
    clock = Ticking(0.01)

    def make_model(params: dict[str, Any]) -> Quadratic:
        clock.now += 0.3
        raise ValueError("one-class validation set")

    with pytest.raises(ValueError, match="one-class"):
        search(ledger, "40", clock, make_model=make_model)
    entries = ledger.entries()
    assert entries and {e["trial"] for e in entries} == {"setup"}
    assert "it failed: ValueError: one-class validation set" in entries[0]["note"]
    assert sum(Decimal(str(e["usd"])) for e in entries) >= Decimal("0.3")  # the making is billed
    assert not ledger.open_reservations() and ledger.budgets() == []


def test_a_measured_hold_refused_by_a_short_budget_names_no_slack_seconds_to_lower(ledger: Any) -> None:
    # It said "give the search a smaller first_rung_seconds or slack_seconds": measured, the hold is the
    # least it can be, and any slack_seconds holds more.
    ledger.set_budget("study=toy", "total", "0.05")
    result = search(ledger, "10", Ticking(0.1))
    assert result.spent_usd == 0 and result.stop.endswith("give the search a smaller first_rung_seconds")


def test_a_hold_refused_by_a_project_budget_names_it_not_cap_usd(ledger: Any) -> None:
    # The stop said "raise cap_usd" ($40, far from spent) where the project's $20 refused the hold's growth.
    ledger.set_budget("study=toy", "total", "20")
    result = search(ledger, "40", SlowsItsBookkeeping(0.01, 3.0, 12.0))

    assert "no rung was run that would leave the search's own bookkeeping unpaid" in result.stop
    assert "raise cap_usd" not in result.stop and "the cap had no room" not in result.stop, result.stop
    assert "budget 'study=toy/total (total)' over the search's scope has $" in result.stop
    assert "raise it with `costaware budget set`" in result.stop


def test_a_slowed_bookkeeping_stops_the_search_right_after_the_rung_that_measured_it(ledger: Any) -> None:
    # The hold was checked only before the next rung: the proposals and tells between (two 1.5 s readings)
    # ran first, and the tail billed past the cap was 3 s. Checked right after the rung's bill, only the
    # tail's own reading (1.5 s) is left. Past the cap all the same: no measured hold foresees a slow-down.
    result = search(ledger, "15", SlowsItsBookkeeping(0.01, 1.5, 12.0))

    assert "no rung was run that would leave the search's own bookkeeping unpaid" in result.stop
    (tail,) = [e for e in ledger.entries() if e["trial"] == "tail"]
    assert Decimal(str(tail["usd"])) <= Decimal("1.5"), result.stop
    assert "past the cap" in result.stop  # said, not hidden


def test_a_first_model_slower_than_its_first_rungs_reservation_trains_no_rung_past_a_budget(
    ledger: Any,
) -> None:
    # Made within its first rung's reservation ($1.50), 5 s of loading data spent that and the rung trained
    # on past the project's $3 ($6.07 spent). The making is billed as the setup's and the rung reserved anew.
    ledger.set_budget("study=toy", "total", "3")
    clock = Ticking(0.01)
    making = {"first": True}

    def make_model(params: dict[str, Any]) -> Quadratic:
        seconds, making["first"] = (5.0 if making["first"] else 0.0), False
        return SlowToMake(params, clock, seconds)

    result = search(ledger, "10", clock, make_model=make_model)

    assert result.trials[0].rungs == () and result.trials[0].state == "cut", result.stop
    assert {e["trial"] for e in ledger.entries()} == {"setup"}
    assert result.spent_usd < Decimal("5.1")  # the making's 5 s and a few readings, no rung
    assert not ledger.open_reservations()


def test_a_tail_note_names_only_what_the_tail_took_past_a_budget_and_a_slow_first_making_is_warned(
    ledger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The 5 s first making passed the project's $3 by $2.05, yet the stop said the last 0.010 s (the tail)
    # "were billed past ... by $2.05", and no warning named the making.
    ledger.set_budget("study=toy", "total", "3")
    clock = Ticking(0.01)
    making = {"first": True}

    def make_model(params: dict[str, Any]) -> Quadratic:
        seconds, making["first"] = (5.0 if making["first"] else 0.0), False
        return SlowToMake(params, clock, seconds)

    with caplog.at_level("WARNING", logger="costaware.training.search"):
        result = search(ledger, "10", clock, make_model=make_model)

    tail = re.search(
        r"the last ([0-9.]+) s \(the search's setup \(no rung run\)\) were billed past budget "
        r"'study=toy/total \(total\)' over the search's scope by \$([0-9.]+):",
        result.stop,
    )
    assert tail is not None, result.stop
    assert Decimal(tail.group(2)) <= Decimal(tail.group(1))  # at $1 a second: no more than its own seconds
    (usage,) = ledger.usage("study=toy")
    assert (
        f"the spend is {format_usd_exact(-usage.left_usd)} past budget 'study=toy/total (total)'"
        in result.stop
    )
    assert any(
        r.getMessage().startswith(
            "the spend passed budget 'study=toy/total (total)' over the search's scope by $"
        )
        and "its first model's making took 5.0" in r.getMessage()
        for r in caplog.records
    ), caplog.text  # it said "passed a budget over the search", naming none


def test_what_a_search_cannot_clean_up_is_logged_under_the_searchs_own_logger(
    ledger: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Split out of search.py, these warnings moved to costaware.training.search_holds: a filter or level set
    # for costaware.training.search no longer covered them.
    def refused(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a rung still holds money in it")

    monkeypatch.setattr(type(ledger), "delete_budget", refused)
    with caplog.at_level(logging.WARNING, logger="costaware.training.search"):
        search(ledger, "40", Clock())
    (stays,) = [r for r in caplog.records if "stays: a rung still holds money in it" in r.getMessage()]
    assert stays.name == "costaware.training.search"


class Scripted:
    """A model whose value at each rung and time per unit of resource are given (one entry per trial)."""

    def __init__(self, clock: Clock, values: dict[int, float], seconds_per_unit: float) -> None:
        self.clock, self.values, self.pace, self.trained = clock, values, seconds_per_unit, 0

    def advance(self, resource: int) -> float:
        self.clock.now += self.pace * (resource - self.trained)
        self.trained = resource
        return self.values[resource]


def test_a_trial_cut_for_money_right_after_a_rung_holds_no_place_there(ledger: Any, monkeypatch: Any) -> None:
    """Every early rung trusted (as the fair evidence does once it ranks them above chance), eta 3, rungs
    1/3/9, brackets 0, 1, 0, 2, 0: #2 (bracket 0) leads rung 1 with 0.9 at 10 s a unit, goes on from it, and
    is cut before rung 3 (its 30 s do not fit the 27 left). #4 (bracket 0, 0.7 at rung 1, second of three
    results) was pruned there: #2 held rung 1's one place, which it could not use. Cut, #2's result counts
    but holds no place: #4 goes on and is trained in full."""
    import costaware.training.search as search_module

    monkeypatch.setattr(search_module, "trusted_rungs", lambda pairs, early, *args, **kwargs: tuple(early))
    clock = Clock()
    rising = {1: 0.5, 3: 0.6, 9: 0.7}
    scripts = iter(
        [
            (rising, 1.0),  # #0, bracket 0: completes (nothing judged before a trial completes)
            (rising, 1.0),  # #1, bracket 1: judged at 3 only
            ({1: 0.9, 3: 0.95, 9: 0.99}, 10.0),  # #2, bracket 0: the best at 1, too slow for what is left
            (rising, 1.0),  # #3, bracket 2: never judged
            ({1: 0.7, 3: 0.8, 9: 0.9}, 1.0),  # #4, bracket 0: second at rung 1
        ]
    )
    space = {"a": optuna.distributions.CategoricalDistribution(list(range(10)))}

    def make_model(params: dict[str, Any]) -> Scripted:
        values, pace = next(scripts)
        return Scripted(clock, values, pace)

    result = search(ledger, "55", clock, make_model=make_model, space=space, max_trials=5)

    assert [(t.bracket, t.state) for t in result.trials][:3] == [(0, "complete"), (1, "complete"), (0, "cut")]
    assert result.trials[2].rungs == ((1, 0.9),)
    assert (result.trials[4].bracket, result.trials[4].state) == (0, "complete"), result.trials[4]
    assert result.best_params == result.trials[4].params
    assert result.spent_usd <= Decimal(55)


def test_a_trial_worse_at_a_trusted_rung_than_all_its_evidence_gets_no_verdict_there(
    ledger: Any, monkeypatch: Any, caplog: Any
) -> None:
    """A rung is trusted on the trials that ran through it unjudged, and only as far as their values reach.
    Every early rung trusted, eta 3, rungs 1/3/9, brackets 0, 1, 0, 2, 0, ...: the evidence at rung 1 starts
    at 0.60 (fast starters). #4 (bracket 0) is a slow learner, 0.30 at rung 1 and the best at 9: last of its
    bracket there, it was pruned; below every value the rung was trusted on, it is not judged there (nor at
    rung 3, where the evidence starts at 0.64), trains on, and wins. Completed, it is evidence: #5 (bracket 1,
    judged from rung 3 on), 0.61 at rung 3, within #4's reach now, is judged there like any trial and
    pruned, last of its bracket."""
    import costaware.training.search as search_module

    monkeypatch.setattr(search_module, "trusted_rungs", lambda pairs, early, *args, **kwargs: tuple(early))
    clock = Clock()
    scripts = iter(
        [
            {1: 0.60, 3: 0.65, 9: 0.62},  # #0, bracket 0: completes (nothing judged before a trial completes)
            {1: 0.62, 3: 0.66, 9: 0.63},  # #1, bracket 1: unjudged at rung 1: evidence there
            {1: 0.64, 3: 0.67, 9: 0.64},  # #2, bracket 0: judged at 1, first of its bracket: goes on
            {1: 0.61, 3: 0.64, 9: 0.61},  # #3, bracket 2: never judged
            {1: 0.30, 3: 0.60, 9: 0.90},  # #4, bracket 0: the slow learner
            {1: 0.31, 3: 0.61, 9: 0.95},  # #5, bracket 1
        ]
    )
    space = {"a": optuna.distributions.CategoricalDistribution(list(range(10)))}

    def make_model(params: dict[str, Any]) -> Scripted:
        return Scripted(clock, next(scripts), 1.0)

    with caplog.at_level(logging.INFO, logger="costaware.training.search"):
        result = search(ledger, "10000", clock, make_model=make_model, space=space, max_trials=6)

    assert "trial 4: 0.3000 at rung 1 is worse than all 3 trials the rung is trusted on" in caplog.text
    slow = result.trials[4]
    assert (slow.bracket, slow.state, slow.judged) == (0, "complete", ()), slow
    assert result.trials[2].judged == (1, 3) and result.trials[2].state == "complete"
    late = result.trials[5]
    assert (late.bracket, late.state, late.judged, late.rungs[-1]) == (1, "pruned", (3,), (3, 0.61)), late
    assert result.best_params == slow.params


def test_the_reach_of_a_rungs_evidence_is_its_worst_value_in_the_search_direction() -> None:
    from costaware.training.search_rungs import within_evidence

    evidence = [(0.2, 0.1), (0.4, 0.3)]  # (value at the rung, value at full fidelity)
    assert within_evidence(evidence, 0.2, "maximize")
    assert not within_evidence(evidence, 0.19, "maximize")
    # Minimising, "worse" is higher: the reach is the highest value of the evidence.
    assert within_evidence(evidence, 0.4, "minimize")
    assert not within_evidence(evidence, 0.41, "minimize")
    assert not within_evidence([], 0.5, "maximize")
