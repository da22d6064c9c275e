"""Budgeted multi-fidelity search in one process: Optuna proposes and prunes, the ledger pays rung by rung.

Optuna does what it is good at: its sampler (TPE by default) proposes the configurations. Whether a trial
goes on after a rung is Hyperband's decision by default (or a given Optuna pruner's): each trial belongs
to a bracket, judged from the first rung, from the second, ..., or never, and at a rung it is judged at it
goes on only in the top ``1/eta`` of its bracket there. Which rungs are judged at is shown, not assumed: a
rung is judged at only once the completed trials that ran through it unjudged (those of later brackets, and
every trial that passed it while it was not judged at, as all do at first) rank it against full fidelity
above chance (Kendall's tau > 0) and would have kept the best of them at full fidelity
(:mod:`costaware.training.search_rungs`). Until then the trials train in full, scored at every rung: the
search is a budgeted TPE search that learns where short training can be trusted. Short training that
misleads (a high learning rate ahead after a few epochs, behind at the end) then never decides which
configurations go on.

A completed trial is ranked, and told to the sampler, by its value at full fidelity less how far that value
fell from its best rung (:meth:`SearchTrial.score`): a configuration whose metric got worse as it trained on
is past its best, and the lucky end of a falling curve would otherwise win the search and do worse on new
data than its value said. ``SearchResult.best_value`` stays the winner's value at full fidelity.

The money is ours: a cap that cannot pay the first rung and the search's own bookkeeping is refused, and a
search that another budget over its scope leaves less than that returns before anything is spent. The
bookkeeping's hold in the cost ledger is measured by default (``slack_seconds=None``): once the setup before
the first rung (the study, the budget, the first proposal) has run, the search holds its time x
``safety_factor`` (a cap that cannot pay that and the first rung's reservation is refused then, the setup
billed) and reserves the first rung before the first model is made (a refusal spends only the setup, billed
as ``setup``). Right after each rung's bill, and before the next rung, it grows the hold, from what is left
beside it, to the bookkeeping measured between rungs (the time billed with a rung beyond its training and
making) x ``safety_factor``; where it cannot grow that far, no rung is run that would leave the bookkeeping
unpaid: the search stops as a refused rung stops it, naming the budget with the least left. No measurement
foresees a slow-down: bookkeeping that slows down beyond what was measured is billed past the cap (a given
``slack_seconds`` holds more up front). A given ``slack_seconds`` is held from the start, fixed, and refuses
a cap before anything is spent.
Before every rung the search reserves, from what is left beside that hold, the rung's estimated
cost and the time used since the last settlement (proposals, the model's making), and settles it with what
the rung really used once it ran. A rung that cannot be reserved is not run, so the spend passes the cap
only where a rung ran past its reservation when the budget had no room left beside it (a rung is one call
to the model and is not interrupted: what it used is billed, and a warning says by how much the cap was
passed), or the bookkeeping after the last rung took longer than its hold and the money left (the setup, run
before a measured hold is reserved, is billed as it ran: past the cap only where it alone took more; so is
a first model's making slower than its first rung's reservation).
After a cut the search goes on only while the money left could carry the fastest configuration seen through
every rung (no money on trials that can no longer finish), and none sits idle in a reservation for a whole
trial.

Every second the search uses (training, Optuna, the ledger) is settled against some rung: each settlement
bills the time since the previous one (the first, since the search started). The ledger counts whole
micro-dollars, and a rung can cost only a few: each settlement therefore brings what was billed up to the
time used so far rounded up (the rounding is carried, never dropped, so the ledger's total is never below
the time it was given), and the time after the last rung (the last proposal, the refused reservation) is
settled on the bookkeeping hold when the search ends.

This is the sequential form, for one worker (a notebook, a benchmark, one Airflow task). The Airflow
tuning operator runs trials in parallel slots with :func:`costaware.training.tuning.run_trial`.
"""

from __future__ import annotations

import logging
import math
import numbers
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.core.budgets import RAISE_THE_CAP, RAISE_THE_CAP_ONLY
from costaware.core.errors import BudgetExceededError, ConfigurationError
from costaware.core.money import MICRO_USD, format_usd_exact
from costaware.core.tuning import TrialState, fall_adjusted_value, trial_label, usd_for_seconds
from costaware.core.tuning.rungs import promotable
from costaware.extras import require
from costaware.training.search_billing import SearchBilling, tightest_budget
from costaware.training.search_rungs import bracket_weights, next_bracket, trusted_rungs

require("tuning", needed_by=__name__)  # with the pip line, not an import error inside a search

if TYPE_CHECKING:
    import optuna

    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import BudgetUsage
    from costaware.training.tuning import FidelityModel

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SearchTrial:
    """One configuration the search tried: the rungs it ran and how it ended."""

    number: int
    params: dict[str, Any]
    rungs: tuple[tuple[int, float], ...]
    #: "complete", "pruned", "cut" (its next rung could not be paid) or "failed" (its metric was not a
    #: finite number at the rung after its last: it diverged; that rung is not in ``rungs``).
    state: str
    #: Its Hyperband bracket: judged from early rung ``bracket`` on (as many as early rungs: never judged).
    bracket: int = 0
    #: The rungs it was judged at (its bracket's, where pruning was trusted when it passed them).
    judged: tuple[int, ...] = ()

    @property
    def value(self) -> float | None:
        """The value at full fidelity (None unless the trial completed)."""
        return self.rungs[-1][1] if self.state == "complete" and self.rungs else None

    def score(self, direction: str = "maximize") -> float | None:
        """Its value at full fidelity less that value's fall from its best rung (None: not completed).

        See :func:`~costaware.core.tuning.fall_adjusted_value`: why a falling curve ranks lower.
        """
        if self.value is None:
            return None
        return fall_adjusted_value([v for _, v in self.rungs], direction)


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What the search found, what it tried and what it spent."""

    best_params: dict[str, Any] | None
    best_value: float | None
    trials: tuple[SearchTrial, ...]
    spent_usd: Decimal
    stop: str
    states: dict[str, int] = field(default_factory=dict)
    #: The rungs the default pruner judged at when the search ended (empty: no early rung ranked the fair
    #: evidence above chance; None: a pruner was given).
    prune_rungs: tuple[int, ...] | None = None
    #: The search's own budget while it ran, ``scope`` plus ``search=<id>``; deleted at its end, its spend
    #: stays tagged so (``costaware report --scope search=<id>``).
    budget_scope: str = ""


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
    slack_seconds: float | None = None,
    max_trials: int = 10_000,
    max_repeats: int = 200,
    meter: Callable[[], float] = time.monotonic,
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
        scope: Ledger tags of the search's entries, e.g. ``{"project": "churn"}``: the budgets over them
            count its spend too. The search's own budget (``total``, ``cap_usd``) is over these tags plus
            ``search=<id>``, a new id each call (``SearchResult.budget_scope``), deleted when the search
            ends: a project's own budgets are never set or changed by a search.
        cap_usd: The most this search may spend (USD, a ``Decimal`` or its text).
        usd_per_hour: Price of one second of this process, per hour (USD, a ``Decimal`` or its text; more
            than 0: the money left is what stops the search).
        first_rung_seconds: Estimated seconds of the first rung before any rung ran (the user's guess).
        direction: ``maximize`` or ``minimize`` the metric.
        sampler: Optuna sampler (default ``TPESampler(seed=seed)`` with Optuna's defaults: its first 10
            trials at random; a model fitted on three points of a six-dimensional space chases noise).
        pruner: Optuna pruner, used as given at every rung. By default Hyperband's brackets (Li et al.,
            2018; :func:`~costaware.training.search_rungs.bracket_weights`): a trial judged from a given
            rung on goes on from each rung it is judged at only in the top ``1/reduction_factor`` of its
            bracket's values there, and the trials of the last bracket run in full. Every trial stops at
            every rung to be scored, so the trials that ran through a rung unjudged (later brackets, or
            while it was not judged at, as every trial does at first) show how it ranks configurations: a
            rung is judged at only while those of them that completed (at least ``reduction_factor``) rank
            it above chance against full fidelity (Kendall's tau > 0) and judging them there would have
            kept the best of them at full fidelity
            (:func:`~costaware.training.search_rungs.trusted_rungs`; ``SearchResult.prune_rungs``). Where
            short training ranks configurations the other way (a high learning rate ahead after a few
            epochs, behind at the end), pruning there drops the configurations that win; the survivors of
            pruning cannot show it (they span a narrow range at the rung), the unjudged trials can.
        reduction_factor: Of the default sampler and pruner (>= 2).
        safety_factor: Reserve this many times a rung's estimated seconds (a first rung: the slowest time
            it took before, else at the slowest speed seen; a later rung: at the trial's own speed on its
            latest rung).
        slack_seconds: Seconds of the search's own bookkeeping (Optuna, the ledger) held for its whole run
            and paid after its last rung. None (the default): measured, the setup's time x
            ``safety_factor`` once it ran, grown after each rung's bill to the bookkeeping measured between
            rungs x ``safety_factor`` (no room to grow: the search stops); ``cap_usd`` must pay it and the
            first rung's reservation (``first_rung_seconds`` x ``safety_factor``). A slow-down beyond what
            was measured is billed past the cap. A number: that many seconds, held from the start; give one
            where the bookkeeping's time swings more than measured (a busy database).
        max_trials: Stop after this many configurations were trained.
        max_repeats: Stop after this many proposals in a row repeated a configuration already tried.
        meter: The clock that measures what the search uses: wall-clock seconds by default, as a machine
            is billed (CPU seconds of this process would bill a GPU-bound rung at almost nothing, and a
            rung on many threads several times over); ``time.process_time`` where the machine is shared
            and this process is what is paid for.
        owner: ``(dag_id, task_id)`` of the ledger entries.
        seed: Seed of the default sampler.
    """
    import optuna

    from costaware.core.budgets import Scope
    from costaware.core.money import parse_usd

    given_cap = cap_usd
    cap_usd = parse_usd(cap_usd, name="cap_usd")
    if cap_usd < MICRO_USD:
        # A $0 cap refused every rung, yet the bookkeeping after it was billed past it, and the stop said
        # to raise the cap with `costaware budget set`, on a budget the search deletes when it ends.
        raise ConfigurationError(
            f"cap_usd must be at least $0.000001, got {given_cap!r}: no rung could be paid; give what the "
            "search may spend in USD, e.g. '0.50'"
        )
    usd_per_hour = parse_usd(usd_per_hour, name="usd_per_hour", allow_negative=True)
    if usd_per_hour <= 0:
        # Free compute: every rung's reservation is $0, so cap_usd never stops the search, and a cut (another
        # budget refusing) divided by the price.
        raise ConfigurationError(
            f"usd_per_hour must be more than $0, got {usd_per_hour}: the search stops when cap_usd is spent, "
            "which free compute never does; give what an hour of this machine costs you (owned GPUs: their "
            "hourly cost, amortized)"
        )
    if isinstance(scope, str) or not isinstance(scope, Mapping):
        raise ConfigurationError(f"scope must be a mapping of tags ({{'project': 'churn'}}), got {scope!r}")
    if "search" in scope:
        raise ConfigurationError(
            f"scope has a 'search' tag ({scope['search']!r}): that tag is the search's own (its budget is "
            "over scope plus search=<id>); name yours otherwise"
        )
    if isinstance(reduction_factor, bool) or not isinstance(reduction_factor, int) or reduction_factor < 2:
        raise ConfigurationError(f"reduction_factor must be an integer >= 2, got {reduction_factor!r}")
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1:
        raise ConfigurationError(f"max_trials must be an integer >= 1, got {max_trials!r}")
    if isinstance(first_rung_seconds, bool) or not isinstance(first_rung_seconds, int | float):
        raise ConfigurationError(f"first_rung_seconds must be seconds (a number), got {first_rung_seconds!r}")
    # A fractional rung (2.5) is no level the model trains to: refused, not cut to a whole one.
    whole = all(isinstance(r, numbers.Integral) and not isinstance(r, bool) for r in rungs)
    rung_list = [int(r) for r in rungs] if whole else []
    if not rung_list or any(r < 1 for r in rung_list) or rung_list != sorted(set(rung_list)):
        raise ConfigurationError(f"rungs must be increasing integers >= 1, got {list(rungs)!r}")
    if direction not in ("maximize", "minimize"):
        raise ConfigurationError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    if not (first_rung_seconds > 0 and math.isfinite(first_rung_seconds)):
        raise ConfigurationError(f"first_rung_seconds must be > 0, got {first_rung_seconds!r}")
    if (
        isinstance(safety_factor, bool)
        or not isinstance(safety_factor, int | float)
        or not (math.isfinite(safety_factor) and safety_factor >= 1)
    ):
        raise ConfigurationError(f"safety_factor must be a number >= 1, got {safety_factor!r}")
    if slack_seconds is not None and (
        isinstance(slack_seconds, bool)
        or not isinstance(slack_seconds, int | float)
        or not (math.isfinite(slack_seconds) and slack_seconds > 0)
    ):
        raise ConfigurationError(
            f"slack_seconds must be seconds > 0, got {slack_seconds!r}: the search's own bookkeeping "
            "(Optuna, the ledger) is paid from it; or None (the default) to hold what it is measured to take"
        )
    hold_measured = slack_seconds is None  # the bookkeeping's hold is measured, not given (billing.measured)
    # The first rung is reserved at first_rung_seconds x safety_factor beside the bookkeeping's hold (which
    # pays the setup before it): a cap below both cut the first rung, and the setup and bookkeeping were
    # billed past it. Each rounded up as it is reserved, so the first rung fits at exactly this cap.
    first_rung_usd = usd_for_seconds(first_rung_seconds * safety_factor, usd_per_hour)
    # A measured hold is known once the setup ran: checked here at the least it can be (a micro-dollar).
    if slack_seconds is None:  # hold_measured, tested so that mypy knows it a number below
        bookkeeping = "slack_seconds=None: measured once it starts, at least $0.000001"
        least_usd = first_rung_usd + MICRO_USD
    else:
        bookkeeping = f"slack_seconds={slack_seconds:g}"
        least_usd = first_rung_usd + usd_for_seconds(slack_seconds, usd_per_hour)
    if cap_usd < least_usd:
        raise _cap_cannot_pay_one_rung(
            cap_usd, first_rung_seconds, safety_factor, first_rung_usd, bookkeeping, least_usd, usd_per_hour
        )
    if not space:
        raise ConfigurationError("space is empty: give at least one hyperparameter distribution")
    for name, distribution in space.items():
        # budgeted_tuning's JSON form ({"type": "float", ...}) failed deep in Optuna with an AttributeError.
        if not isinstance(distribution, optuna.distributions.BaseDistribution):
            raise ConfigurationError(
                f"space[{name!r}] is {distribution!r}, not an Optuna distribution: write it as, e.g., "
                "optuna.distributions.FloatDistribution(0.01, 0.3, log=True) or "
                "CategoricalDistribution([7, 15, 31]) (the JSON form is budgeted_tuning's search_space)"
            )
    run = uuid.uuid4().hex[:8]
    # A budget of its own: set on the caller's scope, it capped (or freed) a whole project for all time.
    tags = {**scope, "search": run}
    budget_scope = Scope.of(tags)
    # prune_rungs stays None with a given pruner, used as it is at every rung.
    prune_rungs: tuple[int, ...] | None = () if pruner is None else None
    too_low = _short_budget(ledger, budget_scope, run, owner[0], least_usd)
    if too_low is not None:
        # Started, the search's setup (the study, its budget, the refused hold) was billed past that budget.
        has = f"{format_usd_exact(too_low.left_usd)} left" if too_low.left_usd > 0 else "nothing left"
        # Measured, the hold is already the least it can be: any slack_seconds holds more.
        smaller_hold = "" if hold_measured else " or slack_seconds"
        stop = (
            f"no rung was run: budget '{too_low.name}' over the search's scope has {has}, less than the "
            f"{format_usd_exact(least_usd)} the search "
            f"holds before its first rung (the first rung's reservation, first_rung_seconds="
            f"{first_rung_seconds:g} x safety_factor={safety_factor:g}, and its own bookkeeping, "
            f"{bookkeeping}): nothing was spent; raise the cap with `costaware budget "
            f"set`, or give the search a smaller first_rung_seconds{smaller_hold}"
        )
        return SearchResult(
            None, None, (), Decimal(0), stop, prune_rungs=prune_rungs, budget_scope=str(budget_scope)
        )
    started = meter()  # what comes before the first rung (the budget, the study) is billed with it
    early = rung_list[:-1]
    # The default pruner: Hyperband's brackets at the rungs the fair evidence trusts (none before it).
    weights = bracket_weights(len(early), reduction_factor)
    in_bracket = [0] * len(weights)
    # The study first: one that cannot be made (a storage or sampler error) leaves no budget behind.
    study = optuna.create_study(
        direction="maximize" if direction == "maximize" else "minimize",
        sampler=sampler or optuna.samplers.TPESampler(seed=seed),
        pruner=pruner or optuna.pruners.NopPruner(),
    )
    ledger.set_budget(budget_scope, "total", cap_usd)
    seen: dict[tuple[Any, ...], SearchTrial] = {}
    trials: list[SearchTrial] = []
    measured: float | None = None  # seconds per unit of resource: the slowest rung seen
    fastest: float | None = None  # seconds per unit of the fastest configuration seen
    cheapest: float | None = None  # training seconds of the cheapest trial that reached the last rung
    overhead = 0.0  # the most time outside training billed with one rung
    slowest_first = 0.0  # the slowest first rung seen, in training seconds
    slowest_make = 0.0  # the slowest make_model seen, in seconds
    repeats = 0
    stop = ""
    billing = SearchBilling(
        ledger,
        budget_scope=budget_scope,
        tags=tags,
        usd_per_hour=usd_per_hour,
        owner=owner,
        run=run,
        meter=meter,
        started=started,
        measured=hold_measured,
    )

    def judged_at(bracket: int, rung: int) -> bool:
        """Is a trial of ``bracket`` judged at ``rung``: a rung trusted, at or above its bracket's first?"""
        return prune_rungs is not None and rung in prune_rungs and early.index(rung) >= bracket

    def goes_on(bracket: int, rung: int, value: float, number: int) -> bool:
        """Hyperband: is ``value`` in the top ``1/eta`` of the trial's bracket at ``rung``?"""
        competing = [
            v for t in trials if t.bracket == bracket and t.number != number for r, v in t.rungs if r == rung
        ]
        return promotable(value, competing, reduction_factor, direction)

    def reserve_rung(number: int, rung: int, seconds: float) -> tuple[str, int, int]:
        """Reserve ``seconds`` for rung ``rung`` of trial ``number`` (BudgetExceededError: refused)."""
        reservation = ledger.reserve(
            budget_scope,
            usd_for_seconds(seconds, usd_per_hour),
            holder=f"search/{run}/{number}/{rung}",
            run_id=run,  # a per-run budget caps one search
            dag_id=owner[0],
            ttl=timedelta(seconds=max(2 * seconds, 60.0)),
            purpose=f"rung {rung} of trial {number}",
        )
        return (reservation.id, number, rung)

    # The rung reserved and not billed yet: (its reservation, trial number, rung).
    running: tuple[str, int, int] | None = None
    rungs_billed = 0  # none: what was billed is the setup's, never "after the last rung"
    setup_failed = ""  # how a setup refused before any rung is named in its entry
    halted = ""  # the measured bookkeeping the budgets could not hold, seen right after a rung's bill
    try:
        # Held before any rung: reserved only at the end, it found the cap spent by the rungs and was billed
        # past it. No rung is run where even it cannot be held (another budget over the scope has no room).
        # A measured hold is reserved once the setup it is measured on ran (before the first rung). (The
        # test of slack_seconds itself, not billing.measured, tells mypy it is a number here.)
        refused = billing.hold_bookkeeping(slack_seconds) if slack_seconds is not None else ""
        while not refused and len(trials) < max_trials:
            trial = study.ask(dict(space))
            key = tuple(sorted(trial.params.items()))
            if key in seen:
                # A configuration already tried teaches the sampler nothing new: the same outcome, for free.
                repeats += 1
                earlier = seen[key]
                if earlier.value is not None:
                    study.tell(trial, earlier.score(direction))
                elif earlier.state == "failed":
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                else:
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                if repeats >= max_repeats:
                    stop = f"{repeats} proposals repeated configurations already tried: the space is covered"
                    break
                continue
            repeats = 0
            bracket = next_bracket(in_bracket, weights) if prune_rungs is not None else 0
            model: FidelityModel | None = None
            if not trials and not billing.measured:
                # With a given slack_seconds the first model is made in the setup, paid from that hold,
                # reserved before it: one that refuses its inputs (a one-class validation set) fails the
                # search before any rung is reserved. A measured hold is reserved only once the setup ran:
                # there the first model is made once the hold and its first rung are reserved, as a later
                # trial's is, else a slow making ran with nothing reserved in a project budget over the
                # scope and was billed past it.
                tick = meter()
                model = make_model(dict(trial.params))
                slowest_make = meter() - tick
            done: list[tuple[int, float]] = []
            state = "complete"
            previous = 0
            own: float | None = None  # this trial's slowest seconds per unit so far
            latest: float | None = None  # and on its latest rung
            trained_total = 0.0
            judged: list[int] = []
            for rung in rung_list:
                # A first rung is priced at the slowest first rung seen, else at the slowest speed seen (this
                # configuration's is unknown yet); later rungs at this configuration's own speed on its latest
                # rung: pricing a fast configuration's long last rung at the slowest one's speed, or at its
                # own first rung's (which carries the fixed cost of a fit and of scoring over a few units),
                # would refuse rungs the money left can pay.
                if latest is not None:
                    estimate = latest * (rung - previous)
                elif slowest_first:
                    estimate = slowest_first
                elif measured:
                    estimate = measured * (rung - previous)
                else:
                    estimate = first_rung_seconds  # as the least cap was named: guess x the first rung
                now = meter()
                if not trials and not done:
                    if billing.measured:
                        # The setup so far (no model made yet) is held x safety_factor.
                        setup = now - started
                        hold_seconds = setup * safety_factor
                        held = billing.measured_hold_usd(hold_seconds)
                        least = first_rung_usd + held
                        if cap_usd < least:
                            # The setup ran: billed as such (once, by the failure's settlement), and the
                            # budget goes as on any failure.
                            setup_failed = "the search's setup (cap refused)"
                            raise _cap_cannot_pay_one_rung(
                                cap_usd,
                                first_rung_seconds,
                                safety_factor,
                                first_rung_usd,
                                f"its setup, measured {setup:.3f} s, x safety_factor: "
                                f"{format_usd_exact(held)}",
                                least,
                                usd_per_hour,
                                then=f"; the setup's time is billed under {budget_scope}",
                            )
                        refused = billing.hold_bookkeeping(hold_seconds)
                        if refused:
                            state, stop = "cut", refused
                            break
                    # The setup (the budget, the study, the first proposal) is the bookkeeping's: paid from
                    # its hold, not reserved with the first rung, which the least cap named leaves room for.
                    billing.bill_setup(now)
                # The time since the last settlement (the proposals) is billed with this rung: reserved with
                # it, it cannot spend the bookkeeping's hold. A later trial's model is made once its first
                # rung is reserved, at the slowest making seen: made before, a slow making (5 s of loading
                # data) was spent on a rung then refused, and billed past the cap with the bookkeeping.
                unbilled = now - billing.last_bill
                to_make = slowest_make if model is None else 0.0
                seconds = unbilled + to_make + estimate * safety_factor + overhead
                billing.keep_hold()
                if billing.measured:
                    # The bookkeeping after the last rung takes about what it took between rungs: held so
                    # before this rung, else this rung would spend the money that pays it.
                    unpaid = billing.grow_hold(overhead * safety_factor)
                    if unpaid:
                        state, stop = "cut", unpaid
                        break
                try:
                    running = reserve_rung(trial.number, rung, seconds)
                except BudgetExceededError as e:
                    state, stop = "cut", _own_budget_advice(e, budget_scope, cap_usd)
                    break
                making = 0.0
                if model is None:
                    tick = meter()
                    try:
                        model = make_model(dict(trial.params))
                    except BaseException:
                        if not rungs_billed:
                            # No rung ran: the first making is the setup's, billed so with the rest of it
                            # on the bookkeeping hold; the rung's reservation is given back.
                            _release_rung(ledger, running)
                            running = None
                        raise
                    making = meter() - tick
                    slowest_make = max(slowest_make, making)
                    if not rungs_billed and seconds - (meter() - billing.last_bill) < estimate:
                        # The first making's time is unknown before it runs: one that left its rung's
                        # reservation less than the rung's estimate is billed as the setup's, and the rung
                        # reserved anew before it trains, else its training ran on past a budget with no
                        # room left beside the making (5 s of loading data against a $1.50 reservation).
                        made = billing.bill(
                            running[0],
                            "setup",
                            "the first model's making, billed before its first rung trains",
                        )
                        running, making = None, 0.0
                        short, passed = billing.past_cap()
                        if short > 0:
                            log.warning(
                                "the spend passed %s by %s: its first model's making took %.2f s against the "
                                "%.2f s reserved for its first rung; a making is not interrupted, so it is "
                                "billed as it ran (the rung is reserved anew)",
                                passed,
                                format_usd_exact(short),
                                made,
                                seconds,
                            )
                        seconds = estimate * safety_factor + overhead
                        try:
                            running = reserve_rung(trial.number, rung, seconds)
                        except BudgetExceededError as e:
                            state, stop = "cut", _own_budget_advice(e, budget_scope, cap_usd)
                            break
                tick = meter()
                value = float(model.advance(rung))
                trained = meter() - tick
                if not done:
                    slowest_first = max(slowest_first, trained)
                latest = trained / (rung - previous)
                own = max(own or 0.0, latest)
                measured = max(measured or 0.0, own)
                trained_total += trained
                previous = rung
                # A diverged configuration (a learning rate too high) fails at this rung: trained on to the
                # last, it was paid for every rung, recorded complete, and its nan won the search when it
                # came first (no value compares above or below nan).
                failed = not math.isfinite(value)
                if not failed:
                    done.append((rung, value))
                    trial.report(value, rung)
                if failed or rung == rung_list[-1]:
                    pruned = False
                elif prune_rungs is None:
                    pruned = trial.should_prune()
                elif judged_at(bracket, rung):
                    judged.append(rung)
                    pruned = not goes_on(bracket, rung, value, trial.number)
                else:
                    pruned = False
                note = f"{dict(trial.params)}: {value:.4f}"
                # The trial's last entry says how it ended (`#7 pruned@3`), as budgeted_tuning's do: `report
                # --group-by trial` counts the trials, and those trained to full fidelity, from it.
                ended = (
                    TrialState.FAILED
                    if failed
                    else TrialState.PRUNED
                    if pruned
                    else TrialState.PROMOTED
                    if rung == rung_list[-1]
                    else None
                )
                label = f"#{trial.number}@{rung}" if ended is None else trial_label(trial.number, ended, rung)
                billed = billing.bill(
                    running[0],
                    label,
                    f"{note}; failed: not a number" if failed else note,
                    outcome="failed" if failed else "success",
                )
                running = None
                rungs_billed += 1
                if billed > seconds:
                    # Past its reservation (slower training, or the bookkeeping billed with it): that passes
                    # a budget only where it had no room left beside it, which is said, naming that budget.
                    # Counted with the bookkeeping's hold: money the rung took from it passes the cap when the
                    # search ends, unless the tail is shorter than the hold.
                    short, passed = billing.past_cap()
                    if short > 0:
                        over = short - billing.held_usd
                        log.warning(
                            "the spend %s: rung %d of trial %d was billed %.2f s against the %.2f s reserved "
                            "for it (its training took %.2f s, estimated at %.2f s); a rung is not "
                            "interrupted, so it is billed as it ran",
                            f"passed {passed} by {format_usd_exact(over)}"
                            if over > 0
                            else f"took {format_usd_exact(short)} of the money held for its bookkeeping",
                            rung,
                            trial.number,
                            billed,
                            seconds,
                            trained,
                            estimate,
                        )
                overhead = max(overhead, billed - trained - making)  # making is reserved on its own
                if billing.measured:
                    # Checked as soon as the bookkeeping is measured, before the proposals and tells that
                    # come before the next rung: a slow-down seen now stops the search before it spends more.
                    halted = billing.grow_hold(overhead * safety_factor)
                if failed:
                    state = "failed"
                    log.warning(
                        "trial %d %s failed at rung %d: its metric is %s, not a finite number (the training "
                        "diverged?); it is not trained on",
                        trial.number,
                        dict(trial.params),
                        rung,
                        value,
                    )
                    break
                if pruned:
                    state = "pruned"
                    break
                if halted:
                    state = "cut" if rung != rung_list[-1] else state
                    break
            record = SearchTrial(trial.number, dict(trial.params), tuple(done), state, bracket, tuple(judged))
            seen[key] = record
            trials.append(record)
            in_bracket[bracket] += 1
            if state == "complete":
                study.tell(trial, record.score(direction))
            elif state == "failed":
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            elif done:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                break  # not even a new trial's first rung can be paid: the search is over
            if halted:
                stop = halted  # the bookkeeping outgrew what the budgets could hold: no further rung
                break
            if own is not None:
                fastest = own if fastest is None else min(fastest, own)
            if state == "complete":
                cheapest = trained_total if cheapest is None else min(cheapest, trained_total)
            if prune_rungs is not None and state == "complete":
                kept = trusted_rungs(
                    [(t.judged, t.rungs) for t in trials if t.value is not None],
                    early,
                    reduction_factor,
                    reduction_factor=reduction_factor,
                    direction=direction,
                )
                if kept != prune_rungs:
                    # A configuration pruned at a rung no longer judged at was judged by a rung that misleads:
                    # it may be proposed again, and run on.
                    dropped = set(prune_rungs) - set(kept)
                    for earlier_key, earlier in list(seen.items()):
                        if earlier.state == "pruned" and earlier.rungs[-1][0] in dropped:
                            del seen[earlier_key]
                    prune_rungs = kept
                    log.info("budgeted search now prunes at rungs %s", list(kept) or "none")
            if state == "cut" and fastest is not None:
                # Only a trial that reaches the last rung counts. Go on only if what is left could carry even
                # the fastest configuration seen through every rung (what the cheapest completed trial really
                # used, else the fastest speed seen over every unit); else new trials would pay first rungs
                # and be cut in turn, and the rest of the money is better left unspent.
                trial_seconds = cheapest if cheapest is not None else fastest * rung_list[-1]
                left_usd = cap_usd - ledger.spent(budget_scope) - billing.held_usd
                left = float(left_usd) * 3600 / float(usd_per_hour)
                if left < trial_seconds * safety_factor + len(rung_list) * overhead:
                    stop = f"{stop}; not even the fastest configuration seen could reach the last rung"
                    break
        else:
            stop = refused or f"max_trials={max_trials} configurations trained"
    except BaseException as e:
        # A model that raised (out of memory, a configuration it cannot train): what ran is billed, on the
        # rung's reservation, and the search's budget goes, as at its end; else the hold counted against the
        # project's budgets until its time limit and the search's budget stayed for good.
        if rungs_billed:
            _bill_what_ran(billing, running, e)
        else:
            what = setup_failed or f"the search's setup (it failed: {type(e).__name__}: {e})"
            _bill_what_ran(billing, running, e, label="setup", what=what)
        _delete_search_budget(ledger, budget_scope, run)
        raise
    if rungs_billed:
        stop = billing.settle_tail(stop)
    else:
        stop = billing.settle_tail(stop, label="setup", what="the search's setup (no rung run)")
    _delete_search_budget(ledger, budget_scope, run)
    # Only a finite score can win: nan compares neither above nor below, so max/min kept one that came first.
    scores = [(t.score(direction), t) for t in trials]
    scored = [(score, t) for score, t in scores if score is not None and math.isfinite(score)]
    best = None
    if scored:
        pick = max if direction == "maximize" else min
        best = pick(scored, key=lambda pair: pair[0])[1]
    states: dict[str, int] = {}
    for t in trials:
        states[t.state] = states.get(t.state, 0) + 1
    return SearchResult(
        prune_rungs=prune_rungs,
        best_params=best.params if best else None,
        best_value=best.value if best else None,
        trials=tuple(trials),
        # This search's own bill: the scope's spend also holds earlier searches and other tasks.
        spent_usd=billing.billed_usd,
        stop=stop,
        states=states,
        budget_scope=str(budget_scope),
    )


def _cap_cannot_pay_one_rung(
    cap_usd: Decimal,
    first_rung_seconds: float,
    safety_factor: float,
    first_rung_usd: Decimal,
    bookkeeping: str,
    least_usd: Decimal,
    usd_per_hour: Decimal,
    *,
    then: str = "",
) -> ConfigurationError:
    """The refusal of a ``cap_usd`` below the first rung's reservation and the bookkeeping's hold.

    Said before the start (a given ``slack_seconds``, or the least a measured hold can be) and again once
    the setup ran (the measured hold): ``bookkeeping`` says how the hold was sized, ``then`` what follows.
    """
    return ConfigurationError(
        f"cap_usd {format_usd_exact(cap_usd)} cannot pay one rung: the first rung's reservation "
        f"(first_rung_seconds={first_rung_seconds:g} x safety_factor={safety_factor:g}: "
        f"{format_usd_exact(first_rung_usd)}) and the search's own bookkeeping ({bookkeeping}) cost "
        f"{format_usd_exact(least_usd)} at usd_per_hour {usd_per_hour}; set cap_usd to at least "
        f"{format_usd_exact(least_usd)} (or lower first_rung_seconds, if the first rung is shorter){then}"
    )


def _short_budget(
    ledger: Ledger, budget_scope: Any, run: str, dag_id: str, least_usd: Decimal
) -> BudgetUsage | None:
    """The tightest budget over the search's scope with less than ``least_usd`` left, if one has.

    Read before the search starts (its own budget is not set yet, so only the caller's budgets are read): a
    search that starts runs its setup before its bookkeeping hold can be reserved, and where another budget
    refused that hold, the setup was billed past it. What is read here is a check, as ``cap_usd``'s is.
    """
    from costaware.core.errors import BudgetNotFoundError

    try:
        tightest = tightest_budget(ledger, budget_scope, run, dag_id)  # as SearchBilling.tightest reads it
    except BudgetNotFoundError:
        return None  # no budget over the scope: the search's own is the only one
    return tightest if tightest is not None and tightest.left_usd < least_usd else None


def _own_budget_advice(refused: BudgetExceededError, budget_scope: Any, cap_usd: Decimal) -> str:
    """The refusal's message; where the search's own budget refused, it says to raise ``cap_usd``.

    That budget is set from ``cap_usd`` and deleted when the search ends: `costaware budget set`, which the
    ledger's message names, cannot raise it. What it has reserved is the search's own bookkeeping hold, not
    a killed run's hold for `costaware budget release` to give back.
    """
    message = str(refused)
    if not refused.scope.startswith(f"{budget_scope}/"):
        return message
    message = re.sub(
        r"; the (\S+) reserved is held by open holds: .*$",
        r"; the \1 reserved is held for the search's own bookkeeping (slack_seconds)",
        message,
    )
    todo = RAISE_THE_CAP if RAISE_THE_CAP in message else RAISE_THE_CAP_ONLY
    return message.replace(
        todo, f"the search's budget is its cap_usd ({format_usd_exact(cap_usd)}): raise cap_usd"
    )


def _bill_what_ran(
    billing: SearchBilling,
    running: tuple[str, int, int] | None,
    error: BaseException,
    *,
    label: str = "tail",
    what: str = "bookkeeping after the last rung",
) -> None:
    """Bill the time a search used up to its failure: on its running rung's reservation, then the rest.

    The running rung's trial ended there: it is billed as failed (``#3 failed@9``), as a diverged one is;
    a bare rung label (``#3@9``) read as a trial the budget cut.
    """
    try:
        if running is not None:
            reservation_id, number, rung = running
            billing.bill(
                reservation_id,
                trial_label(number, TrialState.FAILED, rung),
                f"the rung failed: {type(error).__name__}: {error}",
                outcome="failed",
            )
    except Exception:
        log.exception("search %s: the rung that failed could not be billed", billing.run)
    # Settled whatever became of the rung's bill: skipped, the bookkeeping hold counted against the project's
    # budgets for hours (its time limit), and the time since was billed nowhere.
    try:
        billing.settle_tail("", label=label, what=what)
    except Exception:
        log.exception("search %s: its bookkeeping after it failed could not be billed", billing.run)


def _release_rung(ledger: Ledger, running: tuple[str, int, int] | None) -> None:
    """Give back a rung's reservation that ran nothing (its model's making failed)."""
    if running is None:
        return
    try:
        ledger.release(running[0])
    except Exception:  # it expires at its time limit; the failure itself is what is raised
        log.exception("rung %d of trial %d: its reservation could not be given back", running[2], running[1])


def _delete_search_budget(ledger: Ledger, budget_scope: Any, run: str) -> None:
    """Delete the search's own budget: its cap served one call (the spend stays, tagged search=<id>).

    Kept, one budget a call piled up, and every reserve and budget check of the ledger reads them all.
    """
    try:
        ledger.delete_budget(budget_scope, "total", actor=f"budgeted_search {run}")
    except Exception as e:  # a rung still held (its settle failed): the budget stays, as said
        log.warning("search %s: its budget %s/total stays: %s", run, budget_scope, e)
