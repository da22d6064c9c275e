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

The money is ours: how a search is refused before it starts, holds its bookkeeping, reserves each rung and
where it can pass a cap is told in :mod:`costaware.training.search_holds`; every second it uses is settled
against some rung, rounded up to the micro-dollar and carried (:mod:`costaware.training.search_billing`).

This is the sequential form, for one worker (a notebook, a benchmark, one Airflow task). The Airflow
tuning operator runs trials in parallel slots with :func:`costaware.training.tuning.run_trial`.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.core.errors import BudgetExceededError
from costaware.core.money import format_usd_exact
from costaware.core.tuning import TrialState, trial_label
from costaware.core.tuning.rungs import promotable
from costaware.extras import require
from costaware.training.search_arguments import check_space, checked_settings
from costaware.training.search_billing import SearchBilling
from costaware.training.search_holds import (
    bill_what_ran,
    cap_cannot_pay_one_rung,
    delete_search_budget,
    least_cap,
    making_past_reservation,
    no_room_to_start,
    own_budget_advice,
    release_rung,
    rung_past_reservation,
    short_budget,
)
from costaware.training.search_results import SearchResult, SearchTrial, search_result
from costaware.training.search_rungs import (
    bracket_weights,
    next_bracket,
    rung_evidence,
    trusted_rungs,
    within_evidence,
)

require("tuning", needed_by=__name__)  # with the pip line, not an import error inside a search

if TYPE_CHECKING:
    import optuna

    from costaware.adapters.ledger.store import Ledger
    from costaware.training.tuning import FidelityModel

__all__ = ["SearchResult", "SearchTrial", "budgeted_search"]  # the results' home is search_results

log = logging.getLogger(__name__)


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
            (:func:`~costaware.training.search_rungs.trusted_rungs`; ``SearchResult.prune_rungs``), and
            only as far as their values reach: a trial worse at the rung than all of them gets no verdict
            there (:func:`~costaware.training.search_rungs.within_evidence`). Where
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

    cap_usd, usd_per_hour, rung_list = checked_settings(
        cap_usd=cap_usd,
        usd_per_hour=usd_per_hour,
        scope=scope,
        reduction_factor=reduction_factor,
        max_trials=max_trials,
        first_rung_seconds=first_rung_seconds,
        rungs=rungs,
        direction=direction,
        safety_factor=safety_factor,
        slack_seconds=slack_seconds,
    )
    hold_measured = slack_seconds is None  # the bookkeeping's hold is measured, not given (billing.measured)
    first_rung_usd, bookkeeping, least_usd = least_cap(
        first_rung_seconds, safety_factor, slack_seconds, usd_per_hour
    )
    if cap_usd < least_usd:
        raise cap_cannot_pay_one_rung(
            cap_usd, first_rung_seconds, safety_factor, first_rung_usd, bookkeeping, least_usd, usd_per_hour
        )
    check_space(space)
    run = uuid.uuid4().hex[:8]
    # A budget of its own: set on the caller's scope, it capped (or freed) a whole project for all time.
    tags = {**scope, "search": run}
    budget_scope = Scope.of(tags)
    # prune_rungs stays None with a given pruner, used as it is at every rung.
    prune_rungs: tuple[int, ...] | None = () if pruner is None else None
    too_low = short_budget(ledger, budget_scope, run, owner[0], least_usd)
    if too_low is not None:
        # Started, the search's setup (the study, its budget, the refused hold) was billed past that budget.
        stop = no_room_to_start(
            too_low, least_usd, first_rung_seconds, safety_factor, bookkeeping, hold_measured
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
        """Hyperband: is ``value`` in the top ``1/eta`` of the trial's bracket at ``rung``?

        A trial cut for money right after ``rung`` (its last) cannot go on from it: its result counts among
        the rung's, but holds none of its places (as in the study's pruner, ``promotable``'s ``stopped``).
        Holding one, a cut trial with the best value there had the next best pruned.
        """
        competing: list[float] = []
        stopped: list[float] = []
        for t in trials:
            if t.bracket != bracket or t.number == number:
                continue
            for r, v in t.rungs:
                if r == rung:
                    cut_here = t.state == "cut" and t.rungs[-1][0] == rung
                    (stopped if cut_here else competing).append(v)
        return promotable(value, competing, reduction_factor, direction, stopped=stopped)

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
                            raise cap_cannot_pay_one_rung(
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
                    running = billing.reserve_rung(trial.number, rung, seconds)
                except BudgetExceededError as e:
                    state, stop = "cut", own_budget_advice(e, budget_scope, cap_usd)
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
                            release_rung(ledger, running)
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
                        said = making_past_reservation(billing, made, seconds)
                        if said:
                            log.warning("%s", said)
                        seconds = estimate * safety_factor + overhead
                        try:
                            running = billing.reserve_rung(trial.number, rung, seconds)
                        except BudgetExceededError as e:
                            state, stop = "cut", own_budget_advice(e, budget_scope, cap_usd)
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
                    evidence = rung_evidence(
                        ((t.judged, t.rungs) for t in trials if t.value is not None), rung
                    )
                    if within_evidence(evidence, value, direction):
                        judged.append(rung)
                        pruned = not goes_on(bracket, rung, value, trial.number)
                    else:
                        pruned = False
                        log.info(
                            "trial %d: %.4f at rung %d is worse than all %d trials the rung is trusted "
                            "on: no verdict there, it trains on",
                            trial.number,
                            value,
                            rung,
                            len(evidence),
                        )
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
                    said = rung_past_reservation(
                        billing, rung, trial.number, billed, seconds, trained, estimate
                    )
                    if said:
                        log.warning("%s", said)
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
            bill_what_ran(billing, running, e)
        else:
            what = setup_failed or f"the search's setup (it failed: {type(e).__name__}: {e})"
            bill_what_ran(billing, running, e, label="setup", what=what)
        delete_search_budget(ledger, budget_scope, run)
        raise
    if rungs_billed:
        stop = billing.settle_tail(stop)
    else:
        stop = billing.settle_tail(stop, label="setup", what="the search's setup (no rung run)")
    delete_search_budget(ledger, budget_scope, run)
    return search_result(
        trials,
        direction,
        # This search's own bill: the scope's spend also holds earlier searches and other tasks.
        spent_usd=billing.billed_usd,
        stop=stop,
        prune_rungs=prune_rungs,
        budget_scope=str(budget_scope),
    )
