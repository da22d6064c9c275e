"""Budgeted multi-fidelity search in one process: Optuna proposes and prunes, the ledger pays rung by rung.

Optuna does what it is good at: its sampler (TPE by default) proposes the configurations and its pruner
(Hyperband by default) decides after each rung whether a trial goes on. The money is ours: before
every rung the search reserves that rung's estimated cost in the cost ledger, and settles it with what the
rung really used once it ran. A rung that cannot be reserved is not run, so the spend never passes the cap;
after such a cut the search goes on only while the money left could carry the fastest configuration seen
through every rung (no money on trials that can no longer finish), and none sits idle in a reservation for
a whole trial.

Every second the search uses (training, Optuna, the ledger) is settled against some rung: each settlement
bills the time since the previous one.

This is the sequential form, for one worker (a notebook, a benchmark, one Airflow task). The Airflow
tuning operator runs trials in parallel slots with :func:`costaware.training.tuning.run_trial`.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.core.errors import BudgetExceededError, ConfigurationError
from costaware.core.ledger import Kind, LedgerEntry, Market, compute_cost
from costaware.core.tuning import usd_for_seconds
from costaware.extras import require

require("tuning", needed_by=__name__)  # with the pip line, not an import error inside a search

if TYPE_CHECKING:
    import optuna

    from costaware.adapters.ledger_store import Ledger
    from costaware.training.tuning import FidelityModel

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SearchTrial:
    """One configuration the search tried: the rungs it ran and how it ended."""

    number: int
    params: dict[str, Any]
    rungs: tuple[tuple[int, float], ...]
    state: str  # "complete", "pruned", "cut" (its next rung could not be paid) or "repeat" (seen before)

    @property
    def value(self) -> float | None:
        """The value at full fidelity (None unless the trial completed)."""
        return self.rungs[-1][1] if self.state == "complete" and self.rungs else None


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What the search found, what it tried and what it spent."""

    best_params: dict[str, Any] | None
    best_value: float | None
    trials: tuple[SearchTrial, ...]
    spent_usd: Decimal
    stop: str
    states: dict[str, int] = field(default_factory=dict)


def budgeted_search(
    make_model: Callable[[dict[str, Any]], FidelityModel],
    *,
    space: Mapping[str, optuna.distributions.BaseDistribution],
    rungs: Sequence[int],
    ledger: Ledger,
    scope: Mapping[str, str],
    cap_usd: Decimal,
    usd_per_hour: Decimal,
    first_rung_seconds: float,
    direction: str = "maximize",
    sampler: optuna.samplers.BaseSampler | None = None,
    pruner: optuna.pruners.BasePruner | None = None,
    reduction_factor: int = 3,
    safety_factor: float = 1.5,
    max_trials: int = 10_000,
    max_repeats: int = 200,
    meter: Callable[[], float] = time.process_time,
    owner: tuple[str, str] = ("search", "search"),
    seed: int | None = None,
) -> SearchResult:
    """Search ``space`` with Optuna, paying each rung from a ledger budget of ``cap_usd`` over ``scope``.

    Args:
        make_model: ``make_model(params)`` returns a model whose ``advance(n)`` trains up to ``n`` units of
            resource in total and returns the validation metric.
        space: Optuna distributions of the hyperparameters.
        rungs: Increasing resource levels; the last is full fidelity.
        ledger: Where the budget, the reservations and the compute entries live.
        scope: Ledger tags of the search's budget (a ``total`` budget of ``cap_usd`` is set on them).
        cap_usd: The most the search may spend.
        usd_per_hour: Price of one second of this process, per hour.
        first_rung_seconds: Estimated seconds of the first rung before any rung ran (the user's guess).
        direction: ``maximize`` or ``minimize`` the metric.
        sampler: Optuna sampler (default ``TPESampler(seed=seed)``).
        pruner: Optuna pruner (default ``HyperbandPruner`` from the first rung to the last, with
            ``reduction_factor``; its brackets that start at a later rung hedge against configurations that
            start slowly, such as a low learning rate).
        reduction_factor: Of the default pruner.
        safety_factor: Reserve this many times a rung's estimated seconds (a first rung: at the slowest speed
            seen; a later rung: at the trial's own slowest speed on its earlier rungs).
        max_trials: Stop after this many configurations were trained.
        max_repeats: Stop after this many proposals in a row repeated a configuration already tried.
        meter: The clock that measures what the search uses (process CPU seconds by default).
        owner: ``(dag_id, task_id)`` of the ledger entries.
        seed: Seed of the default sampler.
    """
    import optuna

    from costaware.core.budgets import Scope

    rung_list = [int(r) for r in rungs]
    if not rung_list or any(r < 1 for r in rung_list) or rung_list != sorted(set(rung_list)):
        raise ConfigurationError(f"rungs must be increasing integers >= 1, got {list(rungs)!r}")
    if direction not in ("maximize", "minimize"):
        raise ConfigurationError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    if not (first_rung_seconds > 0 and math.isfinite(first_rung_seconds)):
        raise ConfigurationError(f"first_rung_seconds must be > 0, got {first_rung_seconds!r}")
    if safety_factor < 1:
        raise ConfigurationError(f"safety_factor must be >= 1, got {safety_factor!r}")
    if not space:
        raise ConfigurationError("space is empty: give at least one hyperparameter distribution")
    budget_scope = Scope.of(dict(scope))
    ledger.set_budget(budget_scope, "total", cap_usd)
    study = optuna.create_study(
        direction="maximize" if direction == "maximize" else "minimize",
        sampler=sampler or optuna.samplers.TPESampler(seed=seed),
        pruner=pruner
        or optuna.pruners.HyperbandPruner(
            min_resource=rung_list[0], max_resource=rung_list[-1], reduction_factor=reduction_factor
        ),
    )
    run = uuid.uuid4().hex[:8]
    seen: dict[tuple[Any, ...], SearchTrial] = {}
    trials: list[SearchTrial] = []
    guess = first_rung_seconds / rung_list[0]
    measured: float | None = None  # seconds per unit of resource: the slowest rung seen
    fastest: float | None = None  # seconds per unit of the fastest configuration seen
    overhead = 0.0  # the most time outside training billed with one rung
    last_bill = meter()
    repeats = 0
    stop = ""

    def bill(reservation_id: str, label: str, note: str) -> float:
        """Settle the reservation with the seconds used since the last settlement; returns them."""
        nonlocal last_bill
        now = meter()
        seconds = now - last_bill
        hours, usd = compute_cost(seconds, usd_per_hour)
        last_bill = now
        entry = LedgerEntry(
            dag_id=owner[0],
            run_id=run,
            task_id=owner[1],
            trial=label,
            kind=Kind.COMPUTE,
            usd=usd,
            instance_type="local",
            region="local",
            market=Market.ON_DEMAND,
            quantity=hours,
            unit_price_usd=usd_per_hour,
            tags=dict(scope),
            outcome="success",
            price_source="given",
            note=note[:500],
            reservation_id=reservation_id,
        )
        ledger.settle(reservation_id, usd, entry=entry)
        return seconds

    while len(trials) < max_trials:
        trial = study.ask(dict(space))
        key = tuple(sorted(trial.params.items()))
        if key in seen:
            # A configuration already tried teaches the sampler nothing new: the same outcome, for free.
            repeats += 1
            earlier = seen[key]
            if earlier.value is not None:
                study.tell(trial, earlier.value)
            else:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            if repeats >= max_repeats:
                stop = f"{repeats} proposals repeated configurations already tried: the space is covered"
                break
            continue
        repeats = 0
        model = make_model(dict(trial.params))
        done: list[tuple[int, float]] = []
        state = "complete"
        previous = 0
        own: float | None = None  # this trial's slowest seconds per unit so far
        for rung in rung_list:
            # A first rung is priced at the slowest configuration seen (this one's speed is unknown yet);
            # later rungs at this configuration's own speed: pricing a fast configuration's long last rung
            # at the slowest one's speed would refuse rungs the money left can pay.
            rate = own if own is not None else (measured or guess)
            seconds = rate * (rung - previous) * safety_factor + overhead
            try:
                reservation = ledger.reserve(
                    budget_scope,
                    usd_for_seconds(seconds, usd_per_hour),
                    holder=f"search/{run}/{trial.number}/{rung}",
                    ttl=timedelta(seconds=max(2 * seconds, 60.0)),
                    purpose=f"rung {rung} of trial {trial.number}",
                )
            except BudgetExceededError as e:
                state, stop = "cut", str(e)
                break
            tick = meter()
            value = float(model.advance(rung))
            trained = meter() - tick
            own = max(own or 0.0, trained / (rung - previous))
            measured = max(measured or 0.0, own)
            previous = rung
            done.append((rung, value))
            trial.report(value, rung)
            pruned = rung != rung_list[-1] and trial.should_prune()
            billed = bill(reservation.id, f"#{trial.number}@{rung}", f"{dict(trial.params)}: {value:.4f}")
            overhead = max(overhead, billed - trained)
            if pruned:
                state = "pruned"
                break
        record = SearchTrial(trial.number, dict(trial.params), tuple(done), state)
        seen[key] = record
        trials.append(record)
        if state == "complete":
            study.tell(trial, done[-1][1])
        elif done:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            break  # not even a new trial's first rung can be paid: the search is over
        if own is not None:
            fastest = own if fastest is None else min(fastest, own)
        if state == "cut" and fastest is not None:
            # Only a trial that reaches the last rung counts. Go on only if what is left could carry even
            # the fastest configuration seen through every rung; else new trials would pay first rungs and
            # be cut in turn, and the rest of the money is better left unspent.
            left = float(cap_usd - ledger.spent(budget_scope)) * 3600 / float(usd_per_hour)
            if left < fastest * rung_list[-1] * safety_factor + len(rung_list) * overhead:
                stop = f"{stop}; not even the fastest configuration seen could reach the last rung"
                break
    else:
        stop = f"max_trials={max_trials} configurations trained"
    complete = [t for t in trials if t.value is not None]
    best = None
    if complete:
        pick = max if direction == "maximize" else min
        best = pick(complete, key=lambda t: t.value if t.value is not None else 0.0)
    states: dict[str, int] = {}
    for t in trials:
        states[t.state] = states.get(t.state, 0) + 1
    return SearchResult(
        best_params=best.params if best else None,
        best_value=best.value if best else None,
        trials=tuple(trials),
        spent_usd=ledger.spent(budget_scope),
        stop=stop,
        states=states,
    )
