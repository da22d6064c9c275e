"""Budgeted multi-fidelity search in one process: Optuna proposes and prunes, the ledger pays rung by rung.

Optuna does what it is good at: its sampler (TPE by default) proposes the configurations and its pruner
(Hyperband by default) decides after each rung whether a trial goes on. Which rungs it decides at is
checked, not assumed: the default pruner decides at every rung from the first trial on (no trial pays
for full fidelity only to tell which rungs to trust), and a rung whose values rank the completed trials
the other way from full fidelity beyond chance is dropped, with every rung below it (short training that
misleads); trials stop only at the rungs kept and at the last.

The money is ours: before every rung the search reserves that rung's estimated cost in the cost ledger, and
settles it with what the rung really used once it ran. A rung that cannot be reserved is not run, so the
spend never passes the cap; after such a cut the search goes on only while the money left could carry the
fastest configuration seen through every rung (no money on trials that can no longer finish), and none sits
idle in a reservation for a whole trial.

Every second the search uses (training, Optuna, the ledger) is settled against some rung: each settlement
bills the time since the previous one (the first, since the search started). The ledger counts whole
micro-dollars, and a rung can cost only a few: each settlement therefore brings what was billed up to the
time used so far rounded up (the rounding is carried, never dropped, so the ledger's total is never below
the time it was given), and the time after the last rung (the last proposal, the refused reservation) is
settled on a reservation of its own when the search ends.

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
from costaware.core.tuning import usd_for_seconds
from costaware.extras import require
from costaware.training.search_billing import SearchBilling
from costaware.training.search_rungs import rungs_still_trusted

require("tuning", needed_by=__name__)  # with the pip line, not an import error inside a search

if TYPE_CHECKING:
    import optuna

    from costaware.adapters.ledger.store import Ledger
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
    #: The rungs the default pruner decided at when the search ended (empty: every early rung ranked the
    #: completed trials the other way from full fidelity; None: a pruner was given).
    prune_rungs: tuple[int, ...] | None = None


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
        sampler: Optuna sampler (default ``TPESampler(seed=seed, n_startup_trials=reduction_factor)``: its
            first ``reduction_factor`` trials at random).
        pruner: Optuna pruner, used as given at every rung. By default Optuna's ``HyperbandPruner`` (one
            bracket per rung, :func:`~costaware.training.tuning.hyperband_pruner`) at every rung from the
            first trial; an early rung whose values rank the completed trials the other way from their
            full-fidelity values beyond chance (Kendall's tau negative at the one-sided 5 % level,
            :func:`~costaware.training.search_rungs.rungs_still_trusted`) is dropped with every rung below
            it, for good, and trials stop only at the rungs kept and the last
            (``SearchResult.prune_rungs``). Where short training ranks configurations the other way (a high
            learning rate ahead after a few epochs, behind at the end) pruning there drops the
            configurations that win. Checking on the trials that complete anyway, instead of first running
            ``reduction_factor`` trials through every rung to choose, leaves the budget to the search: in
            the regime where multi-fidelity matters (a budget of about ten full trainings) those trials
            took a quarter to a half of it (``benchmarks/tuning.py``).
        reduction_factor: Of the default sampler and pruner (>= 2).
        safety_factor: Reserve this many times a rung's estimated seconds (a first rung: the slowest time
            the same span took, else at the slowest speed seen; a later rung: at the trial's own speed on its
            latest rung, or after a probe the slowest time of the same span scaled by the trial's speed on
            the probe). A first step past the first rung that cannot be reserved becomes a probe: the first
            rung alone, so that a fast configuration can still use money a slow one could not.
        max_trials: Stop after this many configurations were trained.
        max_repeats: Stop after this many proposals in a row repeated a configuration already tried.
        meter: The clock that measures what the search uses (process CPU seconds by default).
        owner: ``(dag_id, task_id)`` of the ledger entries.
        seed: Seed of the default sampler.
    """
    import optuna

    from costaware.core.budgets import Scope
    from costaware.training.tuning.optuna_glue import hyperband_pruner

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
    started = meter()  # what comes before the first rung (the budget, the study) is billed with it
    # The default pruner: Hyperband at every rung until the completed trials show a rung that misleads.
    # prune_rungs stays None with a given pruner, used as it is.
    prune_rungs: tuple[int, ...] | None = tuple(rung_list[:-1]) if pruner is None else None
    pruner = pruner or hyperband_pruner(rung_list, reduction_factor)
    budget_scope = Scope.of(dict(scope))
    ledger.set_budget(budget_scope, "total", cap_usd)
    study = optuna.create_study(
        direction="maximize" if direction == "maximize" else "minimize",
        sampler=sampler or optuna.samplers.TPESampler(seed=seed, n_startup_trials=reduction_factor),
        pruner=pruner,
    )
    run = uuid.uuid4().hex[:8]
    seen: dict[tuple[Any, ...], SearchTrial] = {}
    trials: list[SearchTrial] = []
    guess = first_rung_seconds / rung_list[0]
    measured: float | None = None  # seconds per unit of resource: the slowest rung seen
    fastest: float | None = None  # seconds per unit of the fastest configuration seen
    cheapest: float | None = None  # training seconds of the cheapest trial that reached the last rung
    overhead = 0.0  # the most time outside training billed with one rung
    ladder = rung_list  # the rungs a trial stops at
    slowest_rung: dict[tuple[int, int], float] = {}  # (from, to): the slowest training seconds seen
    repeats = 0
    stop = ""
    billing = SearchBilling(
        ledger,
        budget_scope=budget_scope,
        tags=scope,
        usd_per_hour=usd_per_hour,
        owner=owner,
        run=run,
        meter=meter,
        started=started,
    )

    # Billed with the first rung, but no part of what every rung needs besides its training.
    setup = meter() - started
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
        latest: float | None = None  # and on its latest rung
        trained_total = 0.0
        spans: dict[int, float] = {}  # this trial's training seconds from each rung it passed (and 0) on
        steps = list(ladder)
        probing = False
        scale: float | None = None  # after a probe: this configuration's time on it over the slowest one's
        while len(done) < len(steps):
            rung = steps[len(done)]
            # A first rung is priced at the slowest time the same span took before, else at the slowest
            # speed seen (this configuration's is unknown yet); later rungs at this configuration's own speed
            # on its latest rung: pricing a fast configuration's long last rung at the slowest one's speed,
            # or at its own first rung's (which carries the fixed cost of a fit and of scoring over a few
            # units), would refuse rungs the money left can pay. After a probe, the slowest time of the
            # same span scaled by how this configuration ran the probe.
            if scale is not None and (previous, rung) in slowest_rung:
                estimate = slowest_rung[(previous, rung)] * scale
            elif latest is not None:
                estimate = latest * (rung - previous)
            elif (previous, rung) in slowest_rung:
                estimate = slowest_rung[(previous, rung)]
            else:
                estimate = (measured or guess) * (rung - previous)
            seconds = estimate * safety_factor + overhead
            try:
                reservation = ledger.reserve(
                    budget_scope,
                    usd_for_seconds(seconds, usd_per_hour),
                    holder=f"search/{run}/{trial.number}/{rung}",
                    ttl=timedelta(seconds=max(2 * seconds, 60.0)),
                    purpose=f"rung {rung} of trial {trial.number}",
                )
            except BudgetExceededError as e:
                if not done and steps[0] != rung_list[0] and (0, rung_list[0]) in slowest_rung:
                    # A first step straight past the first rung, priced at the slowest configuration's time,
                    # does not fit: the first rung alone (a probe) tells this configuration's speed.
                    steps.insert(0, rung_list[0])
                    probing = True
                    continue
                state, stop = "cut", str(e)
                break
            tick = meter()
            value = float(model.advance(rung))
            trained = meter() - tick
            if probing and not done:
                scale = trained / max(slowest_rung[(0, rung)], trained)
            latest = trained / (rung - previous)
            spans = {start: before + trained for start, before in spans.items()}
            spans[previous] = trained
            for start, span_seconds in spans.items():  # also through the rungs in between: never less
                slowest_rung[(start, rung)] = max(slowest_rung.get((start, rung), 0.0), span_seconds)
            own = max(own or 0.0, latest)
            measured = max(measured or 0.0, own)
            trained_total += trained
            previous = rung
            done.append((rung, value))
            trial.report(value, rung)
            pruned = rung != steps[-1] and trial.should_prune()
            billed = billing.bill(
                reservation.id, f"#{trial.number}@{rung}", f"{dict(trial.params)}: {value:.4f}"
            )
            overhead = max(overhead, billed - trained - setup)
            setup = 0.0
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
        if state == "complete":
            cheapest = trained_total if cheapest is None else min(cheapest, trained_total)
        if prune_rungs and state == "complete":
            # A completed trial tells how each rung it passed ranks against full fidelity. A rung that ranks
            # the completed trials the other way is dropped, with the rungs below it; trials then stop only
            # at the rungs kept (a rung where nothing is decided costs a score for nothing).
            kept = rungs_still_trusted(
                [t.rungs for t in trials if t.value is not None], prune_rungs, reduction_factor
            )
            if kept != prune_rungs:
                # A configuration pruned at a dropped rung was judged by a rung that misleads: it may be
                # proposed again and run in full.
                dropped = set(prune_rungs) - set(kept)
                for earlier_key, earlier in list(seen.items()):
                    if earlier.state == "pruned" and earlier.rungs and earlier.rungs[-1][0] in dropped:
                        del seen[earlier_key]
                prune_rungs = kept
                study.pruner = (
                    hyperband_pruner([*kept, rung_list[-1]], reduction_factor)
                    if kept
                    else optuna.pruners.NopPruner()
                )
                ladder = [*kept, rung_list[-1]]
                log.info("budgeted search now prunes at rungs %s", list(kept) or "none")
        if state == "cut" and fastest is not None:
            # Only a trial that reaches the last rung counts. Go on only if what is left could carry even
            # the fastest configuration seen through every rung (what the cheapest completed trial really
            # used, else the fastest speed seen over every unit); else new trials would pay first rungs and
            # be cut in turn, and the rest of the money is better left unspent.
            trial_seconds = cheapest if cheapest is not None else fastest * rung_list[-1]
            left = float(cap_usd - ledger.spent(budget_scope)) * 3600 / float(usd_per_hour)
            if left < trial_seconds * safety_factor + len(ladder) * overhead:
                stop = f"{stop}; not even the fastest configuration seen could reach the last rung"
                break
    else:
        stop = f"max_trials={max_trials} configurations trained"
    stop = billing.settle_tail(stop)
    complete = [t for t in trials if t.value is not None]
    best = None
    if complete:
        pick = max if direction == "maximize" else min
        best = pick(complete, key=lambda t: t.value if t.value is not None else 0.0)
    states: dict[str, int] = {}
    for t in trials:
        states[t.state] = states.get(t.state, 0) + 1
    return SearchResult(
        prune_rungs=prune_rungs,
        best_params=best.params if best else None,
        best_value=best.value if best else None,
        trials=tuple(trials),
        spent_usd=ledger.spent(budget_scope),
        stop=stop,
        states=states,
    )
