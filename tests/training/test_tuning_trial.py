"""One trial slot's money: what the slot spends before its reservation is granted is reserved too."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from clocks import hold_clock_modules

from costaware import Ledger
from costaware.core.errors import BudgetExceededError, ConfigurationError
from costaware.core.ledger import Kind, LedgerEntry
from costaware.core.tuning import RungSchedule, StudySpec, TuningCaps, parse_search_space
from costaware.training.tuning import EntryOwner, create_study, run_trial, summarize_study


class SteppedMeter:
    """A trial clock that moves only when told: the slot's time is exact, whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


class InstantTrainer:
    def __init__(self, params: dict[str, Any]) -> None:
        self.x = float(params["x"])

    def advance(self, resource: int) -> float:
        return -((self.x - 0.3) ** 2) + resource / 1000


def one_trial(url: str, ledger: Ledger, spec: StudySpec, trainer: Any, meter: SteppedMeter) -> Any:
    """Slot 0 of ``spec``'s study, run outside Airflow on ``meter``'s clock."""
    return run_trial(
        storage_url=url,
        ledger=ledger,
        study_name=spec.study_name,
        trainer=trainer,
        holder=f"{spec.study_name}-slot-0",
        slot=0,
        settle_as=EntryOwner(dag_id=spec.study_name, run_id="r1", map_index=0),
        meter=meter,
    )


def study_spec(name: str, *, max_usd: str, max_trials: int, **kwargs: Any) -> StudySpec:
    """A study of one float ``x`` in [0, 1] at rungs 1, 2, 4, sampled at random, $1 a second of slot time."""
    return StudySpec(
        study_name=name,
        direction="maximize",
        search_space=parse_search_space({"x": {"type": "float", "low": 0.0, "high": 1.0}}),
        schedule=RungSchedule.geometric(1, 4, 2),
        caps=TuningCaps.create(max_usd=Decimal(max_usd), max_trials=max_trials),
        sampler="random",
        scope={"project": name},
        usd_per_hour=Decimal(3600),
        slack_seconds=0.5,
        **kwargs,
    )


def test_a_slot_that_waits_for_money_reserves_its_wait_and_settles_within_it(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from costaware.training.tuning import reservations

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("waits", max_usd="30.00", max_trials=5, fallback_trial_seconds=20.0)
    create_study(url, ledger, spec)
    # Another trial of the study holds $20: this slot's $20.50 does not fit until it settles. The $10 left
    # holds the slot's wait (it is held step by step before each sleep: with $1 left, as this test had it,
    # five seconds of waiting at $1 a second were paid with nothing held, and the slot now stops waiting).
    other = ledger.reserve(spec.budget_scope, Decimal("20.00"), holder="other-trial")
    meter = SteppedMeter()
    sleeps = []

    def the_other_trial_finishes_as_the_slot_waits(seconds: float) -> None:
        # Done in the slot's own sleeps, not by a thread on the wall clock: under load a thread's settle
        # fell anywhere in the slot's ask, and a slot that had read the clock just before was granted its
        # money on the earlier reading.
        sleeps.append(seconds)
        if len(sleeps) == 1:
            meter.now += 5.0  # the waiting slot's machine was paid five seconds meanwhile
        elif len(sleeps) == 2:
            ledger.settle(other.id, Decimal("0.50"))  # once the slot has asked again on those five seconds

    clock = SimpleNamespace(monotonic=time.monotonic, sleep=the_other_trial_finishes_as_the_slot_waits)
    monkeypatch.setattr(reservations, "time", clock)
    result = run_trial(
        storage_url=url,
        ledger=ledger,
        study_name=spec.study_name,
        trainer=InstantTrainer,
        holder="waiting-slot",
        wait_poll_seconds=0.05,
        slot=1,
        settle_as=EntryOwner(dag_id="waits", run_id="r1", map_index=0),
        meter=meter,
    )

    assert sleeps == [0.05, 0.05]  # refused before and after the five seconds, granted once the other settled
    trial = result.trial
    assert result.ran and trial is not None
    # Reserved: the five seconds waited, the 20-second estimate and the half-second slack.
    assert trial.reserved_usd == Decimal("25.500000")
    assert trial.settled_usd == Decimal("5.000000") and trial.settled_usd <= trial.reserved_usd
    assert trial.fidelity == 4  # the wait did not eat the training's money: trained in full
    assert ledger.spent(spec.budget_scope) == Decimal("5.000000")


def test_a_slot_refused_just_as_the_trial_it_waits_for_settles_asks_again_and_runs(  # type: ignore[no-untyped-def]
    tmp_path, monkeypatch
) -> None:
    # The other trial settled between the slot's refused ask and its read of the study's usage: that read
    # found nothing in flight, took the refusal for money spent, and the slot stopped the study with $29.50
    # of its $30 free (the whole unit suite on a loaded machine hit it, in this file's wait test too).
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("settles", max_usd="30.00", max_trials=5, fallback_trial_seconds=20.0)
    create_study(url, ledger, spec)
    other = ledger.reserve(spec.budget_scope, Decimal("20.00"), holder="other-trial")
    real_reserve = ledger.reserve
    refusals = []

    def reserve_as_the_other_trial_settles(*args: Any, **kwargs: Any) -> Any:
        try:
            return real_reserve(*args, **kwargs)
        except BudgetExceededError as e:
            if kwargs.get("holder") == "settling-slot" and not refusals:
                refusals.append(str(e))
                ledger.settle(other.id, Decimal("0.50"))  # after the refusal, before the slot reads the usage
            raise

    monkeypatch.setattr(ledger, "reserve", reserve_as_the_other_trial_settles)
    result = run_trial(
        storage_url=url,
        ledger=ledger,
        study_name=spec.study_name,
        trainer=InstantTrainer,
        holder="settling-slot",
        wait_poll_seconds=0.05,
        slot=1,
        settle_as=EntryOwner(dag_id="settles", run_id="r1", map_index=0),
        meter=SteppedMeter(),
    )

    assert refusals and "needs an estimated $20.50" in refusals[0]  # refused while the other trial held $20
    assert result.ran and result.trial is not None, result.reason
    assert result.stop is None
    assert result.trial.reserved_usd == Decimal("20.500000")  # the 20-second estimate and the slack
    assert ledger.spent(spec.budget_scope) == result.trial.settled_usd  # the other settled with no entry


class CurveTrainer:
    """``x < 0.5``: a curve that falls from 0.9 to 0.7; else one that climbs to 0.68 and stays there."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.falls = float(params["x"]) < 0.5

    def advance(self, resource: int) -> float:
        return {1: 0.9, 2: 0.8, 4: 0.7}[resource] if self.falls else {1: 0.5, 2: 0.6, 4: 0.68}[resource]


def test_the_summary_ranks_a_climbing_curve_above_a_falling_one_that_ends_higher(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("curves", max_usd="100.00", max_trials=8, fallback_trial_seconds=1.0, pruner="none")
    create_study(url, ledger, spec)
    owner = EntryOwner(dag_id="curves", run_id="r1", map_index=0)
    results = [
        run_trial(
            storage_url=url,
            ledger=ledger,
            study_name=spec.study_name,
            trainer=CurveTrainer,
            holder=f"slot-{slot}",
            slot=slot,
            settle_as=owner,
            meter=SteppedMeter(),
        ).trial
        for slot in range(8)
    ]
    finals = {r.value for r in results if r is not None}
    assert finals == {0.7, 0.68}  # both curves ran, every trial in full

    summary = summarize_study(url, ledger, spec.study_name)
    best = summary["best"]
    # By its last value the falling curve would win (0.7); less its fall of 0.2 it scores 0.5.
    assert best["value"] == 0.68 and best["score"] == 0.68
    assert best["params"]["x"] >= 0.5


def test_a_rung_that_slows_down_past_the_trial_s_reservation_is_billed_and_said(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """Estimated at 2 s, the trial reserves 2 + 0.5 s; rungs 1 and 2 take 0.2 s each, rung 4 takes 6 s.

    A rung is not interrupted: the trial is billed its 6.4 s (past the $2.50 reserved), and a warning says so.
    """
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("slows", max_usd="100.00", max_trials=1, fallback_trial_seconds=2.0, pruner="none")
    create_study(url, ledger, spec)
    meter = SteppedMeter()

    class SlowsAtFour:
        def __init__(self, params: dict[str, Any]) -> None:
            pass

        def advance(self, resource: int) -> float:
            meter.now += {1: 0.2, 2: 0.2, 4: 6.0}[resource]
            return resource / 10

    result = one_trial(url, ledger, spec, SlowsAtFour, meter)
    trial = result.trial
    assert trial is not None and trial.fidelity == 4
    assert trial.settled_usd == Decimal("6.400000") > trial.reserved_usd == Decimal("2.500000")
    assert "rung 4 took 6.00 s and the trial has used 6.40 s, past the 2.50 s its reservation" in caplog.text


def test_two_runs_planned_at_once_number_their_slots_alike_but_propose_different_parameters(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("twice", max_usd="100.00", max_trials=8, fallback_trial_seconds=1.0, pruner="none")
    first_plan, second_plan = create_study(url, ledger, spec), create_study(url, ledger, spec)
    assert first_plan["slots"] == second_plan["slots"]  # neither run had started a trial

    def proposal(run_id: str, holder: str) -> float:
        result = run_trial(
            storage_url=url,
            ledger=ledger,
            study_name=spec.study_name,
            trainer=InstantTrainer,
            holder=holder,
            slot=first_plan["slots"][0],
            settle_as=EntryOwner(dag_id="twice", run_id=run_id, map_index=0),
            meter=SteppedMeter(),
        )
        assert result.trial is not None
        return float(result.trial.params["x"])

    first = proposal("r1", "twice/r1/trial/0")
    assert proposal("r2", "twice/r2/trial/0") != first


def test_a_study_name_used_again_for_another_question_is_refused_before_anything_is_written(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Optuna kept the first direction while the summary took the new one: both spaces' trials ranked together.
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    first = study_spec("again", max_usd="10.00", max_trials=3)
    create_study(url, ledger, first)
    create_study(url, ledger, replace(first, caps=TuningCaps.create(max_usd=Decimal("20"), max_trials=5)))
    # Choices that JSON turns into lists compare equal to what the storage gives back.
    pairs = {"p": {"type": "categorical", "choices": [(1, 2), (3,)]}}
    paired = replace(first, study_name="pairs", search_space=parse_search_space(pairs))
    create_study(url, ledger, paired)
    create_study(url, ledger, paired)
    other_space = parse_search_space({"y": {"type": "int", "low": 1, "high": 9}})
    for changed, message in [
        (replace(first, direction="minimize"), "exists with direction maximize \\(now minimize\\)"),
        (replace(first, search_space=other_space), "exists with search space .*'x'.* \\(now .*'y'"),
    ]:
        with pytest.raises(ConfigurationError, match=message):
            create_study(url, ledger, changed)
    (budget,) = [b for b in ledger.budgets() if "study=again" in str(b.scope)]
    assert budget.cap_usd == Decimal("20")  # the refused runs changed nothing


def test_a_trial_cut_by_the_study_s_wall_clock_says_so_not_that_its_money_ran_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    # The study's clock is the real one (600 s, whatever the machine's load); the trial's is stepped. The
    # reservation (5,000 s) would let the trial go on: only the wall clock stops it.
    spec = study_spec("walled", max_usd="100000", max_trials=1, fallback_trial_seconds=5000.0, pruner="none")
    caps = TuningCaps.create(max_usd=Decimal("100000"), max_trials=1, max_wall_seconds=600)
    spec = replace(spec, caps=caps)
    create_study(url, ledger, spec)
    meter = SteppedMeter()

    class SlowTrainer(InstantTrainer):
        def advance(self, resource: int) -> float:
            meter.now += 400 * resource  # 400 s a unit: rung 2 would end past the study's 600 s
            return super().advance(resource)

    result = one_trial(url, ledger, spec, SlowTrainer, meter)
    assert result.trial is not None and result.trial.state == "cut"
    assert result.trial.decision.startswith(
        "cut before 2: the study's max_wall_seconds (600 s) leaves this trial"
    )


def test_a_continued_study_s_wall_clock_starts_with_its_dag_run(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Kept from the first run, the start made every later run of a nightly study stop at its first slot.
    from datetime import datetime, timedelta, timezone

    import optuna

    from costaware.training.tuning import study as study_module

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("nightly", max_usd="10", max_trials=4)
    spec = replace(spec, caps=TuningCaps.create(max_usd=Decimal("10"), max_trials=4, max_wall_seconds=60))
    first = datetime(2026, 11, 1, 2, tzinfo=timezone.utc)
    for night in (first, first + timedelta(days=1)):
        monkeypatch.setattr(study_module, "utcnow", lambda night=night: night)
        create_study(url, ledger, spec)
        started = optuna.load_study(study_name="nightly", storage=url).user_attrs[study_module.STARTED_ATTR]
        assert datetime.fromisoformat(started) == night


def test_a_trial_whose_metric_is_nan_failed_and_is_not_promoted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A diverged configuration was "promoted@32 ... trained in full, nan": Optuna refused the value, and the
    # summary counted it as promoted.
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("diverged", max_usd="100", max_trials=1, fallback_trial_seconds=1.0, pruner="none")
    create_study(url, ledger, spec)

    class Diverging(InstantTrainer):
        def advance(self, resource: int) -> float:
            super().advance(resource)
            return float("nan") if resource > spec.schedule.rungs[0] else 0.5

    result = one_trial(url, ledger, spec, Diverging, SteppedMeter())
    assert result.trial is not None and result.trial.state == "failed"
    assert "its metric is nan, not a number" in result.trial.decision
    assert all(value == value for _, value in result.trial.rungs)  # no NaN kept (JSON cannot hold it)
    summary = summarize_study(url, ledger, "diverged")
    assert summary["states"] == {"failed": 1} and summary["best"] is None


def test_a_trial_whose_lease_cannot_be_written_fails_and_gives_back_its_money(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Asked, then its lease unwritten (a locked SQLite storage): the trial stayed RUNNING with no lease, so
    # no stale rule ever ended it and it counted against max_trials for good; its hold stayed open.
    import optuna

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("locked", max_usd="100", max_trials=2, fallback_trial_seconds=1.0)
    create_study(url, ledger, spec)

    def locked(self: Any, key: str, value: Any) -> None:
        raise RuntimeError("database is locked")

    with monkeypatch.context() as patch:
        patch.setattr(optuna.trial.Trial, "set_user_attr", locked)
        with pytest.raises(RuntimeError, match="database is locked"):
            one_trial(url, ledger, spec, InstantTrainer, SteppedMeter())
    study = optuna.load_study(study_name="locked", storage=url)
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.FAIL]
    assert ledger.open_reservations() == []
    assert one_trial(url, ledger, spec, InstantTrainer, SteppedMeter()).trial is not None  # the study goes on


def test_a_retried_trial_gets_its_hold_back_less_what_its_failed_try_paid(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A failed try's hold stays open for the retry (the listener pays the try from it): the retry got the
    # whole hold back and trained as if it were free, and the study spent $1.30 of its $1 cap.
    from costaware.core.ledger import Kind, LedgerEntry
    from costaware.training.tuning.reservations import reserve_trial_cost

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("retried", max_usd="1", max_trials=2, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    holder = "tuning/r1/trial/0"
    first = reserve_trial_cost(ledger, spec, lambda: 0.8, holder, "r1", 0, 0.01)
    assert first.usd == Decimal("0.8")
    paid = LedgerEntry(
        "tuning", "r1", "trial", Kind.COMPUTE, Decimal("0.5"), tags=spec.budget_scope.as_dict(),
        reservation_id=first.id,
    )  # fmt: skip
    ledger.record(paid)  # the failed try, paid from the hold
    again = reserve_trial_cost(ledger, spec, lambda: 0.8, holder, "r1", 0, 0.01)
    assert again.id == first.id
    assert again.usd == Decimal("0.5")  # the hold grew to the cap ($1): $0.50 of it is this try's
    (usage,) = [u for u in ledger.usage(spec.budget_scope) if u.label.endswith("/total")]
    assert usage.spent_usd + usage.reserved_usd <= usage.cap_usd


def test_a_retry_after_its_hold_expired_reserves_the_whole_estimate_again(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # docs/tuning.md said the retry pays from the same hold; Airflow's retry delay (5 min by default) outlives
    # a hold of 2 x the estimate, and the retry then reserves anew: refused where the cap has no room for
    # the whole estimate (never overspent), granted where it has.
    from datetime import timedelta

    from costaware.core.ledger import Kind, LedgerEntry, utcnow
    from costaware.training.tuning.reservations import reserve_trial_cost

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("expired", max_usd="1", max_trials=2, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    holder = "tuning/r1/trial/0"
    first = reserve_trial_cost(ledger, spec, lambda: 0.8, holder, "r1", 0, 0.01)
    paid = LedgerEntry(
        "tuning", "r1", "trial", Kind.COMPUTE, Decimal("0.5"), tags=spec.budget_scope.as_dict(),
        reservation_id=first.id,
    )  # fmt: skip
    ledger.record(paid)  # the failed try, paid from the hold
    retried_at = utcnow() + timedelta(minutes=5)  # the default retry delay: the 60 s hold has expired
    for module in hold_clock_modules():
        monkeypatch.setattr(module, "utcnow", lambda: retried_at)
    with pytest.raises(BudgetExceededError, match=r"has \$0.50 left .* needs an estimated \$0.80"):
        reserve_trial_cost(ledger, spec, lambda: 0.8, holder, "r1", 0, 0.01)
    again = reserve_trial_cost(ledger, spec, lambda: 0.4, holder, "r1", 0, 0.01)  # room for this one
    assert again.id != first.id and again.usd == Decimal("0.4")
    (usage,) = [u for u in ledger.usage(spec.budget_scope) if u.label.endswith("/total")]
    assert usage.spent_usd + usage.reserved_usd <= usage.cap_usd


def test_a_hold_kept_for_the_retry_delay_is_found_again_and_kept_for_the_retrys_own_lease(
    tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # The retry 5 minutes later found the hold gone and reserved the whole $0.80 again, which the $0.50 left
    # of the cap refused: the study stopped where the retry would have trained on what was left.
    from datetime import timedelta

    from costaware.core.ledger import Kind, LedgerEntry, utcnow
    from costaware.training.tuning import reservations as trial_reservations
    from costaware.training.tuning.reservations import reserve_trial_cost

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("kept", max_usd="1", max_trials=2, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    holder = "tuning/r1/trial/0"
    first = reserve_trial_cost(ledger, spec, lambda: 0.8, holder, "r1", 0, 0.01, keep_for_retry_seconds=300)
    paid = LedgerEntry(
        "tuning", "r1", "trial", Kind.COMPUTE, Decimal("0.5"), tags=spec.budget_scope.as_dict(),
        reservation_id=first.id,
    )  # fmt: skip
    ledger.record(paid)  # the failed try, paid from the hold
    retried_at = utcnow() + timedelta(minutes=5)
    for module in (*hold_clock_modules(), trial_reservations):
        monkeypatch.setattr(module, "utcnow", lambda: retried_at)
    again = reserve_trial_cost(ledger, spec, lambda: 0.8, holder, "r1", 0, 0.01)  # the last try: no keep
    assert again.id == first.id and again.usd == Decimal("0.5")
    assert again.expires_at >= retried_at + timedelta(seconds=60)  # as long as a hold made now
    (usage,) = [u for u in ledger.usage(spec.budget_scope) if u.label.endswith("/total")]
    assert usage.spent_usd + usage.reserved_usd <= usage.cap_usd


class FakeClock:
    """The ledger's ``utcnow`` and a slot's wait (``time``) on one clock, moved only by the wait's sleep."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from datetime import UTC, datetime
        from types import SimpleNamespace

        from costaware.training.tuning import reservations as trial_reservations

        self.seconds = 0.0
        self.base = datetime(2026, 12, 1, tzinfo=UTC)
        for module in (*hold_clock_modules(), trial_reservations):
            monkeypatch.setattr(module, "utcnow", self.utcnow)
        monkeypatch.setattr(
            trial_reservations, "time", SimpleNamespace(monotonic=self.monotonic, sleep=self.sleep)
        )

    def utcnow(self) -> Any:
        from datetime import timedelta

        return self.base + timedelta(seconds=self.seconds)

    def monotonic(self) -> float:
        return self.seconds

    def sleep(self, seconds: float) -> None:
        self.seconds += seconds


def test_a_slot_waits_for_a_hold_kept_for_a_retry_instead_of_stopping_the_study(
    tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # Slot 0's try failed with a retry left: its $0.80 hold is kept 60 s + the 300 s retry delay. Slot 1,
    # refused the $0.80 the $1 cap has no room for, waited only its own 60 s, then stopped the study for good;
    # the kept hold's end (or the retry settling it) would have made room.
    from costaware.training.tuning.reservations import reserve_trial_cost

    clock = FakeClock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("kept-wait", max_usd="1", max_trials=5, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    kept = reserve_trial_cost(
        ledger, spec, lambda: 0.8, "tune/r1/trial/0", "r1", 0, 1.0, keep_for_retry_seconds=300
    )
    clock.seconds += 1  # slot 0's trainer raised; its task is up for retry
    granted = reserve_trial_cost(ledger, spec, lambda: 0.8, "tune/r1/trial/1", "r1", 1, 1.0)
    assert granted.id != kept.id and granted.usd == Decimal("0.8")
    assert clock.utcnow() >= kept.expires_at  # granted once the kept hold ended, not before
    assert clock.seconds - 1 < 60 + 300 + 1.0  # and within a poll of it
    (usage,) = [u for u in ledger.usage(spec.budget_scope) if u.label.endswith("/total")]
    assert usage.spent_usd + usage.reserved_usd <= usage.cap_usd  # never two holds of $0.80 in the $1


def test_a_slot_past_its_own_wait_asks_once_per_poll_and_sleeps_towards_the_holds_end(
    tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # Past its own 60 s, a refused slot read every open hold in the ledger each 1 s poll (one query per
    # hold: 300 other DAGs' gates made 310 statements a poll), for up to an hour. It now asks for the end
    # of the study's own holds in one query, and sleeps towards the first one's expiry (30 s at most).
    from datetime import timedelta

    import sqlalchemy

    from costaware.core.budgets import Scope
    from costaware.training.tuning import reservations as trial_reservations
    from costaware.training.tuning.reservations import LATE_POLL_SECONDS, reserve_trial_cost

    clock = FakeClock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("late-polls", max_usd="1", max_trials=5, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    kept = reserve_trial_cost(
        ledger, spec, lambda: 0.8, "tune/r1/trial/0", "r1", 0, 1.0, keep_for_retry_seconds=300
    )
    other_holds = 40  # other DAGs' spend gates, open meanwhile
    ledger.set_budget(Scope.of({"project": "other"}), "total", Decimal("1000"))
    for i in range(other_holds):
        ledger.reserve(
            Scope.of({"project": "other"}), Decimal("1"), holder=f"other/r{i}/gate/-1", run_id=f"r{i}",
            dag_id="other", ttl=timedelta(hours=2), purpose="gate",
        )  # fmt: skip
    statements: list[float] = []  # the clock at each statement
    sqlalchemy.event.listen(
        ledger.engine, "before_cursor_execute", lambda *_: statements.append(clock.seconds)
    )
    sleeps: list[tuple[float, float]] = []  # (at, for how long)

    def recorded_sleep(seconds: float) -> None:
        sleeps.append((clock.seconds, seconds))
        clock.sleep(seconds)

    monkeypatch.setattr(trial_reservations.time, "sleep", recorded_sleep)

    granted = reserve_trial_cost(ledger, spec, lambda: 0.8, "tune/r1/trial/1", "r1", 1, 1.0)

    assert granted.id != kept.id and clock.utcnow() >= kept.expires_at  # granted once the kept hold ended
    late = [seconds for at, seconds in sleeps if at >= 60]
    assert late and max(late) == LATE_POLL_SECONDS  # towards the hold's end, 300 s away: not each second
    assert len(late) <= 300 / LATE_POLL_SECONDS + 2
    late_statements = [at for at in statements if at >= 60]
    assert len(late_statements) / len(late) < other_holds  # what the study holds only, in one query


def test_a_slot_waits_for_the_studys_holds_an_hour_past_its_own_wait_at_most(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A hold kept longer than any retry delay (held three hours) does not keep a slot paid to wait for hours.
    from datetime import timedelta

    from costaware.core.tuning import MAX_KEEP_FOR_RETRY_SECONDS
    from costaware.training.tuning.reservations import reserve_trial_cost

    clock = FakeClock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("long-hold", max_usd="1", max_trials=5, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    held = reserve_trial_cost(ledger, spec, lambda: 0.8, "tune/r1/trial/0", "r1", 0, 1.0)
    ledger.extend(held.id, clock.utcnow() + timedelta(hours=3))
    with pytest.raises(BudgetExceededError):
        reserve_trial_cost(ledger, spec, lambda: 0.8, "tune/r1/trial/1", "r1", 1, 10.0)
    assert 60 + MAX_KEEP_FOR_RETRY_SECONDS <= clock.seconds < 60 + MAX_KEEP_FOR_RETRY_SECONDS + 10.0


def test_a_retry_that_finds_its_hold_with_little_time_left_keeps_it_for_its_own_lease(
    tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # The hold found again ended where the earlier try's lease did: the retry's trial (whose Optuna lease is
    # the hold's end) trained on past it, its hold expired under it and another slot failed the trial.
    from datetime import timedelta

    from costaware.training.tuning import reservations as trial_reservations
    from costaware.training.tuning.reservations import reserve_trial_cost

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("late", max_usd="100", max_trials=2, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    first = reserve_trial_cost(ledger, spec, lambda: 0.8, "tuning/r1/trial/0", "r1", 0, 0.01)
    retried_at = first.created_at + timedelta(seconds=50)  # 10 s of the 60 s hold left
    for module in (*hold_clock_modules(), trial_reservations):
        monkeypatch.setattr(module, "utcnow", lambda: retried_at, raising=False)
    again = reserve_trial_cost(ledger, spec, lambda: 0.8, "tuning/r1/trial/0", "r1", 0, 0.01)
    assert again.id == first.id
    assert again.expires_at >= retried_at + timedelta(seconds=60)


class Killed(BaseException):
    """What a worker sees when it is killed mid-trial (SIGTERM, spot notice): the trial stays RUNNING."""


def test_a_retried_trial_is_ranked_on_its_own_rungs_and_paid_from_the_same_hold(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The retry took over the trial its killed try left RUNNING and trained from the first rung again;
    # Optuna ignored its reports of rungs 1 and 2 (only a warning), so the trial kept the dead try's 0.9 and
    # 0.95 beside the retry's 0.7, and the summary scored it 0.45 (0.7 less its "fall" from 0.95).
    import optuna

    from costaware.core.ledger import Kind, LedgerEntry

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("retry", max_usd="100", max_trials=2, fallback_trial_seconds=10.0, pruner="none")
    create_study(url, ledger, spec)
    meter = SteppedMeter()

    class DiesAtFour(InstantTrainer):
        def advance(self, resource: int) -> float:
            meter.now += 1.0
            if resource == 4:
                raise Killed
            return {1: 0.9, 2: 0.95}[resource]

    class Climbs(InstantTrainer):
        def advance(self, resource: int) -> float:
            meter.now += 1.0
            return {1: 0.5, 2: 0.6, 4: 0.7}[resource]

    with pytest.raises(Killed):
        one_trial(url, ledger, spec, DiesAtFour, meter)
    (hold,) = ledger.open_reservations()
    study = optuna.load_study(study_name="retry", storage=url)
    (left,) = study.get_trials()
    assert left.state == optuna.trial.TrialState.RUNNING and left.intermediate_values == {1: 0.9, 2: 0.95}
    # The cost listener bills the killed try from the hold, as it does in Airflow.
    ledger.record(
        LedgerEntry(
            "retry", "r1", "trial", Kind.COMPUTE, Decimal(3), tags=spec.budget_scope.as_dict(),
            reservation_id=hold.id,
        )
    )  # fmt: skip

    result = one_trial(url, ledger, spec, Climbs, meter)  # the retry: the same holder
    trial = result.trial
    assert trial is not None and trial.resumed and trial.number != left.number
    assert trial.params == left.params and trial.rungs == ((1, 0.5), (2, 0.6), (4, 0.7))
    trials = {t.number: t for t in optuna.load_study(study_name="retry", storage=url).get_trials()}
    assert trials[trial.number].intermediate_values == {1: 0.5, 2: 0.6, 4: 0.7}
    old = trials[left.number]
    assert old.state == optuna.trial.TrialState.FAIL
    assert old.user_attrs["costaware"]["decision"] == (
        f"failed: its task was retried: trial #{trial.number} trains its parameters again from the first rung"
    )
    summary = summarize_study(url, ledger, "retry")
    assert summary["best"]["number"] == trial.number
    assert summary["best"]["value"] == summary["best"]["score"] == 0.7
    assert summary["states"] == {"failed": 1, "promoted": 1}
    # The retry paid from the same hold, less what the killed try was billed, and settled it.
    assert trial.reservation_id == hold.id and trial.reserved_usd == hold.usd
    assert trial.settled_usd == Decimal(3) and ledger.open_reservations() == []
    assert ledger.spent(spec.budget_scope) == Decimal(6)


def _label_files(tmp_path: Any, valid_labels: list[Any]) -> dict[str, str]:
    """Parquet files of a feature ``f`` and a label ``y``: training of both classes, validation as given."""
    import pandas as pd

    train = pd.DataFrame({"f": [float(i) for i in range(20)], "y": [i % 2 for i in range(20)]})
    valid = pd.DataFrame({"f": [float(i) for i in range(len(valid_labels))], "y": valid_labels})
    train.to_parquet(tmp_path / "train.parquet", index=False)
    valid.to_parquet(tmp_path / "valid.parquet", index=False)
    return {
        "train_path": str(tmp_path / "train.parquet"),
        "valid_path": str(tmp_path / "valid.parquet"),
        "label": "y",
    }


def test_a_one_class_validation_set_is_refused_before_any_slot_reserves(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Every trial failed "its metric is nan ... (the training diverged?)" after its slot had reserved money
    # and trained a rung: ROC AUC of one class is not defined.
    import optuna

    from costaware.training.tuning import boosting_trainer

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("one-class", max_usd="100", max_trials=2, fallback_trial_seconds=1.0)
    create_study(url, ledger, spec)
    kwargs = _label_files(tmp_path, [0] * 8)
    with pytest.raises(ConfigurationError) as refused:
        run_trial(
            storage_url=url,
            ledger=ledger,
            study_name=spec.study_name,
            trainer=boosting_trainer,
            trainer_kwargs=kwargs,
            holder="one-class/slot-0",
            slot=0,
            settle_as=EntryOwner(dag_id="one-class", run_id="r1", map_index=0),
            meter=SteppedMeter(),
        )
    assert str(refused.value).startswith(
        f"the validation set's label column 'y' ({kwargs['valid_path']}) holds one class only, 0: "
    )
    assert ledger.open_reservations() == [] and ledger.entries() == []
    assert optuna.load_study(study_name="one-class", storage=url).get_trials() == []


@pytest.mark.parametrize("argument", ["train_path", "valid_path"])
def test_a_trainer_path_that_cannot_be_read_is_refused_naming_it_before_any_slot_reserves(
    tmp_path: Any, argument: str
) -> None:
    # A typo'd path failed every slot with a bare FileNotFoundError (not a configuration error), which
    # Airflow retried: the run waited out each slot's retry delay for a file that would never appear.
    import optuna

    from costaware.training.tuning import boosting_trainer

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("typo", max_usd="100", max_trials=2, fallback_trial_seconds=1.0)
    create_study(url, ledger, spec)
    kwargs = _label_files(tmp_path, [0, 1, 0, 1])
    missing = str(tmp_path / "vaild.parquet")
    not_parquet = tmp_path / "notes.txt"
    not_parquet.write_text("delayed\n1\n")
    for path, reason in ((missing, "no such file"), (str(not_parquet), "ArrowInvalid: ")):
        with pytest.raises(ConfigurationError) as refused:
            run_trial(
                storage_url=url,
                ledger=ledger,
                study_name=spec.study_name,
                trainer=boosting_trainer,
                trainer_kwargs={**kwargs, argument: path},
                holder="typo/slot-0",
                slot=0,
                settle_as=EntryOwner(dag_id="typo", run_id="r1", map_index=0),
                meter=SteppedMeter(),
            )
        assert str(refused.value).startswith(
            f"trainer_kwargs {argument}={path!r} cannot be read as a Parquet file ({reason}"
        )
        assert str(refused.value).endswith("give the path of an existing Parquet file")
    assert ledger.open_reservations() == [] and ledger.entries() == []
    assert optuna.load_study(study_name="typo", storage=url).get_trials() == []


@pytest.mark.parametrize(
    ("valid_labels", "found"),
    [
        ([1, 1, None], "holds one class only, 1.0:"),  # a missing label is no class
        ([None, None], "holds no class (no row with a label):"),
        ([0, 1, 2, 1], "holds 3 classes (0, 1, 2):"),
        (["late", "late"], "holds one class only, 'late':"),
    ],
)
def test_the_boosting_model_refuses_a_label_it_cannot_score(valid_labels: list[Any], found: str) -> None:
    import pandas as pd

    from costaware.training.tuning import BoostingFidelityModel, check_binary_label

    train = pd.DataFrame({"f": [0.0, 1.0, 2.0, 3.0], "y": [0, 1, 0, 1]})
    valid = pd.DataFrame({"f": [0.0] * len(valid_labels), "y": valid_labels})
    column = "^the {} set's label column 'y' "
    with pytest.raises(ConfigurationError, match=column.format("validation") + re.escape(found)):
        BoostingFidelityModel({}, train, valid, "y")
    with pytest.raises(ConfigurationError, match=column.format("training") + "holds one class only, 0"):
        BoostingFidelityModel({}, train.assign(y=0), train, "y")
    with pytest.raises(ConfigurationError, match=r"^the training set has no label column 'label' \(its col"):
        check_binary_label(train, "label", "training")
    check_binary_label(train, "y", "training")  # two classes: nothing to say


def test_on_free_compute_a_trial_is_cut_at_the_gpu_hours_it_reserved(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # At usd_per_hour 0 the trial's $0 reservation bought infinite seconds: it was never cut, and trained on
    # past the GPU-hours it had reserved, so max_gpu_hours did not hold.
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("owned", max_usd="1", max_trials=1, fallback_trial_seconds=2.0, pruner="none")
    caps = TuningCaps.create(max_usd=Decimal(1), max_trials=1, max_gpu_hours="0.01")
    spec = replace(spec, usd_per_hour=Decimal(0), gpus=Decimal(1), caps=caps)
    create_study(url, ledger, spec)
    meter = SteppedMeter()

    class SecondARung(InstantTrainer):
        def advance(self, resource: int) -> float:
            meter.now += 1.0
            return super().advance(resource)

    result = one_trial(url, ledger, spec, SecondARung, meter)
    trial = result.trial
    assert trial is not None and trial.state == "cut" and trial.fidelity == 1
    # 2 s estimated + 0.5 s slack, one GPU: 0.000695 GPU-hours rounded up (never short of the 2.5 s), 2.5 s;
    # rung 2 needs 1.5 s beside the 1 s used.
    assert trial.decision.startswith("cut before 2: its reservation of 0.000695 GPU-hours buys 2.5 s, 1.0 s")
    (usage,) = [u for u in ledger.usage(spec.budget_scope) if u.label.endswith("/total")]
    assert usage.spent_gpu_hours <= Decimal("0.000695") and usage.spent_usd == 0


def test_a_retry_on_free_compute_gets_the_gpu_hours_its_failed_try_left(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The dollars bound nothing at a price of 0: a retry that got its hold's GPU-hours back whole trained as
    # if what its failed try used were still held, past max_gpu_hours.
    from costaware.core.ledger import Kind, LedgerEntry
    from costaware.training.tuning.reservations import reserve_trial_cost

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("owned-retry", max_usd="1", max_trials=2, fallback_trial_seconds=36.0)
    caps = TuningCaps.create(max_usd=Decimal(1), max_trials=2, max_gpu_hours="1")
    spec = replace(spec, usd_per_hour=Decimal(0), gpus=Decimal(1), caps=caps)
    create_study(url, ledger, spec)
    holder = "tuning/r1/trial/0"
    first = reserve_trial_cost(ledger, spec, lambda: 36.0, holder, "r1", 0, 0.01)
    assert (first.usd, first.gpu_hours) == (Decimal(0), Decimal("0.01"))
    paid = LedgerEntry(
        "tuning", "r1", "trial", Kind.COMPUTE, Decimal(0), gpu_hours=Decimal("0.004"),
        tags=spec.budget_scope.as_dict(), reservation_id=first.id,
    )  # fmt: skip
    ledger.record(paid)  # the failed try, paid from the hold
    again = reserve_trial_cost(ledger, spec, lambda: 36.0, holder, "r1", 0, 0.01)
    assert again.id == first.id and again.gpu_hours == Decimal("0.006")


def test_on_free_compute_a_slot_waits_for_the_gpu_hours_running_trials_hold(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # At a price of 0 running trials hold GPU-hours and no dollars: a slot refused while they ran read
    # "nothing in flight" and stopped the study for good, though their holds were about to come back.
    from costaware.core.ledger import Kind, LedgerEntry
    from costaware.training.tuning.reservations import reserve_trial_cost

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("owned-wait", max_usd="1", max_trials=3, fallback_trial_seconds=36.0)
    caps = TuningCaps.create(max_usd=Decimal(1), max_trials=3, max_gpu_hours="0.015")
    spec = replace(spec, usd_per_hour=Decimal(0), gpus=Decimal(1), caps=caps)
    create_study(url, ledger, spec)
    running = reserve_trial_cost(ledger, spec, lambda: 36.0, "other-trial", "r1", 0, 0.01)  # 0.01 GPU-hours
    asked = []

    def seconds_needed() -> float:
        asked.append(1)
        if len(asked) == 2:  # refused once: the running trial settles, having used 0.001 GPU-hours
            used = LedgerEntry(
                "tuning", "r1", "trial", Kind.COMPUTE, Decimal(0), gpu_hours=Decimal("0.001"),
                tags=spec.budget_scope.as_dict(), reservation_id=running.id,
            )  # fmt: skip
            ledger.settle(running.id, Decimal(0), entry=used)
        return 36.0

    held = reserve_trial_cost(ledger, spec, seconds_needed, "waiting-slot", "r1", 1, 0.01)
    assert len(asked) == 2 and held.gpu_hours == Decimal("0.01")
    # With 0.011 GPU-hours spent, no trial of 0.01 fits the 0.015, whatever comes back: refused at once,
    # though another trial holds some.
    used = LedgerEntry(
        "tuning", "r1", "trial", Kind.COMPUTE, Decimal(0), gpu_hours=Decimal("0.01"),
        tags=spec.budget_scope.as_dict(), reservation_id=held.id,
    )  # fmt: skip
    ledger.settle(held.id, Decimal(0), entry=used)
    reserve_trial_cost(ledger, spec, lambda: 7.2, "small-trial", "r1", 2, 0.01)  # 0.002 GPU-hours
    started = time.monotonic()
    with pytest.raises(BudgetExceededError):
        reserve_trial_cost(ledger, spec, lambda: 36.0, "third-slot", "r1", 3, 60.0)
    assert time.monotonic() - started < 30  # not one poll of 60 s


def test_the_boosting_model_treats_string_columns_as_categories_without_changing_the_callers_frames() -> None:
    # budgeted_search's example hands frames to BoostingFidelityModel: one with a string column (a carrier
    # code) failed the first rung, after it was paid, with numpy's "could not convert string to float: 'UA'".
    import pandas as pd

    from costaware.training.tuning import BoostingFidelityModel

    carriers = ["UA", "AA", "DL", "UA"] * 10
    train = pd.DataFrame({"carrier": carriers, "f": [float(i % 7) for i in range(40)]})
    train["y"] = [int(c == "UA") for c in carriers]
    valid = train.iloc[:12].assign(carrier=["B6", "UA", "AA", "DL"] * 3)  # B6: a category train lacks
    model = BoostingFidelityModel({"learning_rate": 0.3}, train, valid, "y")
    score = model.advance(5)
    assert 0.0 <= score <= 1.0
    assert not isinstance(train["carrier"].dtype, pd.CategoricalDtype)
    assert valid["carrier"].tolist()[:2] == ["B6", "UA"]


def test_a_summary_fails_its_own_runs_trials_not_those_of_a_run_whose_id_continues_its_own() -> None:
    import optuna

    from costaware.training.tuning.study import TRIAL_ATTR, fail_stale_trials

    # A run id may hold '/': the select of run 'r' (prefix 'd/r/trial/') failed the still-running trials of
    # run 'r/trial' (holders 'd/r/trial/trial/<i>') of a study both share.
    study = optuna.create_study()
    mine, theirs = study.ask(), study.ask()
    for trial, holder in ((mine, "d/r/trial/0"), (theirs, "d/r/trial/trial/0")):
        trial.set_user_attr(TRIAL_ATTR, {"holder": holder})
    assert fail_stale_trials(study, holder_prefix="d/r/trial/") == [mine.number]
    states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
    assert states == {
        mine.number: optuna.trial.TrialState.FAIL,
        theirs.number: optuna.trial.TrialState.RUNNING,
    }


def test_a_skipped_slot_outside_airflow_records_the_time_it_took_to_decide(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Six slots of a full study each loaded it and read its stop rules on the caller's paid machine, and the
    # ledger held no entry of theirs: in Airflow the listener bills a skipped try; here nothing did.
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("full", max_usd="100.00", max_trials=1, fallback_trial_seconds=1.0)
    create_study(url, ledger, spec)
    owner = EntryOwner(dag_id="full", run_id="r1", map_index=0)
    run_trial(
        storage_url=url, ledger=ledger, study_name="full", trainer=InstantTrainer, holder="slot-0", slot=0,
        settle_as=owner, meter=SteppedMeter(),
    )  # fmt: skip
    spent_by_the_trial = ledger.spent(spec.budget_scope)

    class SlowToDecide(SteppedMeter):
        def __call__(self) -> float:
            self.now += 2.0  # each reading of the clock two seconds after the last
            return super().__call__()

    for slot in range(1, 7):
        result = run_trial(
            storage_url=url, ledger=ledger, study_name="full", trainer=InstantTrainer, holder=f"slot-{slot}",
            slot=slot, settle_as=EntryOwner(dag_id="full", run_id="r1", map_index=slot), meter=SlowToDecide(),
        )  # fmt: skip
        assert not result.ran
    skipped = [row for row in ledger.entries(dag_id="full") if row["outcome"] == "skipped"]
    assert sorted(row["map_index"] for row in skipped) == [1, 2, 3, 4, 5, 6]
    for row in skipped:
        assert row["trial"] == "skipped" and row["tags"]["project"] == "full" and "max_trials" in row["note"]
    first, *after_the_stop = sorted(skipped, key=lambda row: row["map_index"])
    # $1 a second. Slot 1 made the stop: 2 s read to its hold (held before the study is loaded), 2 more to its
    # entry, settled against that hold, not recorded beside it.
    assert first["usd"] == Decimal(4) and first["reservation_id"] is not None
    # The others found it recorded with the study's settings: that read (2 s) is all they did, nothing held.
    assert [(row["usd"], row["reservation_id"]) for row in after_the_stop] == [(Decimal(2), None)] * 5
    assert ledger.spent(spec.budget_scope) == spent_by_the_trial + Decimal(14)
    assert ledger.open_reservations() == []


def test_a_slot_outside_airflow_holds_each_wait_for_money_and_stops_when_it_cannot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Another trial holds $0.97 of a $1 study at $360/h ($0.10 a second) and spends it all 3 s later. The
    # slot waited those 3 s with nothing held, then was refused and recorded $0.30 beside it: $1.27 of $1
    # spent. Now each wait step is held before the slot sleeps; $0.03 of room holds none, so it stops at once.
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = replace(
        study_spec("held-wait", max_usd="1.00", max_trials=5, fallback_trial_seconds=2.0),
        usd_per_hour=Decimal(360),
    )
    create_study(url, ledger, spec)
    other = ledger.reserve(spec.budget_scope, Decimal("0.97"), holder="other-trial")
    spent = LedgerEntry(
        "held-wait", "r1", "trial", Kind.COMPUTE, Decimal("0.97"), tags=spec.budget_scope.as_dict(),
        reservation_id=other.id,
    )  # fmt: skip
    finisher = threading.Timer(3.0, lambda: ledger.settle(other.id, Decimal("0.97"), entry=spent))
    finisher.start()
    try:
        result = run_trial(
            storage_url=url,
            ledger=ledger,
            study_name=spec.study_name,
            trainer=InstantTrainer,
            holder="waiting-slot",
            wait_poll_seconds=0.05,
            slot=1,
            settle_as=EntryOwner(dag_id="held-wait", run_id="r1", map_index=0),
            # A still clock: a read of the study's settings slowed by the machine's load (its load is held
            # as ten such reads) took the room before the wait.
            meter=SteppedMeter(),
        )
        waited_for_the_other = other.id not in {r.id for r in ledger.open_reservations()}
    finally:
        finisher.join()
    assert not result.ran and not waited_for_the_other
    # Named the study's budget and what to do about it (its cap is max_usd).
    assert "slot 1 stops waiting for the study's money" in result.reason
    assert "'project=held-wait,study=held-wait/total'" in result.reason and "raise max_usd" in result.reason
    # No try, no bill and no DAG here: it was told of "its try's time", "the price its bill is charged at".
    assert "at the study's $360/h, the price its skipped entry is recorded at" in result.reason
    assert "try's" not in result.reason and "bill" not in result.reason and "DAG" not in result.reason
    # The study goes on (the other trial's money may come back), and the result says so.
    assert result.goes_on and result.to_json()["goes_on"] is True
    (skipped,) = [row for row in ledger.entries() if row["trial"] == "skipped"]
    assert skipped["reservation_id"] is not None  # settled against the slot's hold, not recorded beside it
    assert skipped["usd"] < Decimal("0.30")
    assert ledger.open_reservations() == []


def test_a_slot_outside_airflow_whose_load_cannot_be_held_runs_no_trial_and_the_study_goes_on(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    import optuna

    from costaware.training.tuning.study import STOP_ATTR

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = replace(
        study_spec("slow-load", max_usd="1.00", max_trials=5, fallback_trial_seconds=2.0),
        usd_per_hour=Decimal(360),
    )
    create_study(url, ledger, spec)
    # Another trial holds $0.97 for 3 s. Before, the slot waited for it with nothing held, its own time
    # growing past what the study had left, and then stopped the study for every later slot.
    ledger.reserve(spec.budget_scope, Decimal("0.97"), holder="other-trial", ttl=timedelta(seconds=3))

    class OneSecondARead(SteppedMeter):
        def __call__(self) -> float:
            self.now += 1.0  # loading the study took a second ($0.10) where $0.03 is left
            return super().__call__()

    result = run_trial(
        storage_url=url,
        ledger=ledger,
        study_name=spec.study_name,
        trainer=InstantTrainer,
        holder="slow-slot",
        slot=2,
        wait_poll_seconds=0.05,
        settle_as=EntryOwner(dag_id="slow-load", run_id="r1", map_index=0),
        meter=OneSecondARead(),
    )
    assert not result.ran
    # Refused before the load: its read of the settings and the load's estimate, not "1.0 s loading".
    assert (
        "slot 2 runs no trial: its time so far (1 s, up to reading the study's settings) and loading the "
        "study's trials (estimated at 10 s, 10 times that read), 11 s at the study's $360/h: $1.10, cannot "
        "be held"
    ) in result.reason
    assert "raise the study's max_usd ($1.00)" in result.reason
    # Trials in flight may give money back: the study is not stopped for the slots after it.
    assert STOP_ATTR not in optuna.load_study(study_name=spec.study_name, storage=url).user_attrs
    assert result.goes_on


def test_a_slot_outside_airflow_whose_load_cannot_be_held_with_nothing_in_flight_stops_the_study(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    import optuna

    from costaware.training.tuning.study import STOP_ATTR

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("spent", max_usd="4.00", max_trials=50, fallback_trial_seconds=2.0)
    create_study(url, ledger, spec)
    ledger.record(
        LedgerEntry("spent", "r0", "trial", Kind.COMPUTE, Decimal("3.90"), tags=spec.budget_scope.as_dict())
    )
    # Before, such a slot returned "the study goes on" without stopping it: a driver running slots until
    # the study stopped never ended, each call billing its load past the cap ($4.42, $4.93, $5.43, ...).
    first = run_trial(
        storage_url=url,
        ledger=ledger,
        study_name=spec.study_name,
        trainer=InstantTrainer,
        holder="s0",
        slot=0,
        seconds_already_used=0.5,
        settle_as=EntryOwner(dag_id="spent", run_id="r1", map_index=0),
    )
    assert not first.ran and not first.goes_on
    assert "slot 0 runs no trial: its time so far (0.5" in first.reason
    assert "0.5 s of it before this call, up to reading the study's settings) and loading" in first.reason
    stopped = optuna.load_study(study_name=spec.study_name, storage=url).user_attrs[STOP_ATTR]
    assert stopped["reason"] == "budget" and stopped["message"] == first.reason
    assert stopped.get("renews") is False  # a total budget: no new period makes room
    # The next slot finds the study stopped, as a driver's loop does.
    second = run_trial(
        storage_url=url,
        ledger=ledger,
        study_name=spec.study_name,
        trainer=InstantTrainer,
        holder="s1",
        slot=1,
        settle_as=EntryOwner(dag_id="spent", run_id="r1", map_index=1),
    )
    assert not second.ran and not second.goes_on and second.reason == first.reason


def _ask_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two slots ask for their trials' money only once both hold their time (as slots started together)."""
    import costaware.training.tuning.trial as trial_module

    both_held = threading.Barrier(2, timeout=30)
    reserve_trial_cost = trial_module.reserve_trial_cost

    def asked_together(*args: Any, **kwargs: Any) -> Any:
        both_held.wait()
        return reserve_trial_cost(*args, **kwargs)

    monkeypatch.setattr(trial_module, "reserve_trial_cost", asked_together)


def test_two_slots_in_airflow_do_not_wait_for_each_others_holds(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import optuna

    import costaware.training.tuning.trial as trial_module
    from costaware.training.tuning.reservations import hold_slot_time
    from costaware.training.tuning.study import STOP_ATTR

    # The operator's form: each try holds its time before the study is loaded (here in the study's own
    # budget, a DAG tagged with the study's tags) and passes the hold; the listener bills the try.
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("mutual-af", max_usd="4.00", max_trials=5, fallback_trial_seconds=2.0)
    create_study(url, ledger, spec)
    tags = spec.budget_scope.as_dict()
    holders = {number: f"mutual-af/r1/trial/{number}" for number in (0, 1)}
    # Slot 1 holds its time first and opens the study; slot 0 holds its own and asks for its trial's money
    # while slot 1 is about to ask (the moment recorded before: slot 1 had loaded the study, not yet
    # asked); slot 1 asks once slot 0 is done. Slot 0 is refused for slot 1's hold alone.
    slot_1_about_to_ask, slot_0_done = threading.Event(), threading.Event()
    reserve_trial_cost = trial_module.reserve_trial_cost

    def slot_1_asks_after_slot_0(*args: Any, **kwargs: Any) -> Any:
        if args[3] == holders[1]:  # reserve_trial_cost(ledger, spec, seconds_needed, holder, ...)
            slot_1_about_to_ask.set()
            assert slot_0_done.wait(timeout=30)
        return reserve_trial_cost(*args, **kwargs)

    monkeypatch.setattr(trial_module, "reserve_trial_cost", slot_1_asks_after_slot_0)
    # Each slot's time on its own clock, moved by no one: on the wall clock at $3600/h a loaded machine's
    # seconds (slot 1 waits for slot 0) priced slot 1's trial past the study's $4 (an estimate of $4.04 to
    # $5.55), and it stopped the study rightly. Here it needs exactly $3.50: its 1 s, 2 s and the slack.
    meters = {number: SteppedMeter() for number in (0, 1)}
    results: dict[int, Any] = {}

    def slot(number: int) -> None:
        if number == 0:
            assert slot_1_about_to_ask.wait(timeout=30)
        held = hold_slot_time(
            ledger, tags, spec.usd_per_hour / 3600, holder=holders[number], run_id="r1", dag_id="mutual-af",
            seconds=1.0, purpose=f"slot {number}",
        )  # fmt: skip
        assert held is not None
        try:
            results[number] = run_trial(
                storage_url=url, ledger=ledger, study_name=spec.study_name, trainer=InstantTrainer,
                holder=holders[number], slot=number, run_id="r1", wait_poll_seconds=0.2,
                seconds_already_used=1.0, slot_hold=held.id, slot_usd_per_hour=spec.usd_per_hour,
                bill_tags=tags, meter=meters[number],
            )  # fmt: skip
        finally:
            if number == 0:
                slot_0_done.set()

    threads = [threading.Thread(target=slot, args=(number,)) for number in (1, 0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Before, slot 1's hold was recorded only as it asked: slot 0 read no record of it, took it for a
    # trial's, waited on it (growing its own hold at the worker's $3600/h until the study's $4 could not
    # hold it) and stopped the study ("slot 0 stops waiting"). Recorded as slot 1 opened the study, it is
    # told from a trial's: slot 0, whose hold came second, gives way at once, the study going on.
    assert sorted(results) == [0, 1] and not any(r.ran for r in results.values())
    gave_way = results[0]
    assert gave_way.goes_on, gave_way.reason
    assert "slot 0 runs no trial and gives way" in gave_way.reason and "stops waiting" not in gave_way.reason
    assert "for the $3.50 its trial needs" in gave_way.reason  # $3 of room beside slot 1's $1 hold
    assert f"the slot that waited first ({holders[1]}) goes on waiting" in gave_way.reason
    assert "the study goes on" in gave_way.reason
    # Slot 0 gave way, its hold left open for the listener to bill: its record deleted at once, slot 1 took
    # that hold for a trial's, could not hold its wait for it and stopped the study ("slot 1 stops waiting
    # ... needs $31.24 held; ... has $3.00 of room"), its money unspent. Kept, it is told from a trial's.
    waited_first = results[1]
    assert waited_first.goes_on and "stops waiting" not in waited_first.reason, waited_first.reason
    assert "only other slots' holds on their own time" in waited_first.reason
    assert "the study goes on" in waited_first.reason
    study = optuna.load_study(study_name=spec.study_name, storage=url)
    assert STOP_ATTR not in study.user_attrs


def test_two_slots_outside_airflow_do_not_wait_for_each_others_holds(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import optuna

    from costaware.training.tuning.study import STOP_ATTR

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    # A trial needs about $13.5 (its $3 load, 10 s, slack): $15 pays it, but not beside the other slot's
    # $3 load (a second and a half to spare on a busy machine).
    spec = study_spec("mutual", max_usd="15.00", max_trials=5, fallback_trial_seconds=10.0)
    create_study(url, ledger, spec)
    # Both slots hold their loads ($3 each) before either asks for its trial.
    _ask_together(monkeypatch)
    # Each slot's time on its own clock, moved by no one: on the wall clock at $3600/h a loaded machine's
    # seconds priced a trial past the whole $15 (about $16.80), and both slots stopped the study rightly.
    meters = {number: SteppedMeter() for number in (0, 1)}
    results: dict[int, Any] = {}

    def slot(number: int) -> None:
        results[number] = run_trial(
            storage_url=url,
            ledger=ledger,
            study_name=spec.study_name,
            trainer=InstantTrainer,
            holder=f"slot-{number}",
            slot=number,
            wait_poll_seconds=0.2,
            seconds_already_used=3.0,
            settle_as=EntryOwner(dag_id="mutual", run_id="r1", map_index=number),
            meter=meters[number],
        )

    threads = [threading.Thread(target=slot, args=(number,)) for number in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Before, each counted the other's hold as a trial's money that may come back: both waited, their holds
    # grew until the study's money was gone, and one stopped waiting, the other stopping the study (a $4
    # study: $3.16 spent on waiting). A slot's hold is spent by its slot, not given back: the slot whose
    # hold came second gives way at once; the first waits for it, then finds that the study's money cannot
    # pay a trial beside the other slot's load, and stops it.
    reasons = [r.reason for r in results.values()]
    assert not any(r.ran or "stops waiting" in r.reason for r in results.values()), reasons
    assert sum(r.goes_on for r in results.values()) == 1, reasons  # before: both waited, none gave way
    (gave_way,) = [r for r in results.values() if r.goes_on]
    assert "runs no trial and gives way" in gave_way.reason
    assert "for the $13.50 its trial needs" in gave_way.reason  # $12 of room beside the other's $3 load
    (stopped,) = [r for r in results.values() if not r.goes_on]
    study_stop = optuna.load_study(study_name=spec.study_name, storage=url).user_attrs[STOP_ATTR]
    assert "has $12.00 left" in stopped.reason and "needs an estimated $13.50" in stopped.reason
    assert study_stop["reason"] == "budget" and study_stop["message"] == stopped.reason
    assert ledger.open_reservations() == []
    assert ledger.spent(spec.budget_scope) == Decimal("6.000000")  # the two slots' loads, $3 each, no more


def test_two_runs_waiting_slots_of_one_number_both_stay_known_to_each_other(tmp_path: Any) -> None:
    # Recorded per slot number, slot 0 of a second DAG run of the study overwrote the first run's record:
    # the first run's waiting hold then read as a trial's money that may come back: a mutual wait.
    import optuna

    from costaware.training.tuning.arbitration import WaitingSlots

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    create_study(url, ledger, study_spec("ow", max_usd="4", max_trials=5))
    study = optuna.load_study(study_name="ow", storage=url)
    first, second = WaitingSlots(study, "ow/run1/trial/0"), WaitingSlots(study, "ow/run2/trial/0")
    first.mark("hold-A")
    second.mark("hold-B")
    assert first.others() == {"hold-B"} and second.others() == {"hold-A"}


def test_a_slot_outside_airflow_holds_its_time_before_the_study_loads_and_grows_it_for_a_long_load(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slot's time was held only once the study was loaded: at $360/h a load was spent before it was held,
    # and the skipped entry ($0.0458) passed the hold ($0.02-0.03) it was settled against.
    import costaware.training.tuning.trial as trial_module

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = replace(
        study_spec("long-load", max_usd="1.00", max_trials=5, fallback_trial_seconds=2.0),
        usd_per_hour=Decimal(360),
    )
    create_study(url, ledger, spec)
    # $0.082 of room: the load's estimate held before it, grown to the 0.3 s it took, not to a wait for the
    # other trial's money (0.5 s of slack more).
    ledger.reserve(spec.budget_scope, Decimal("0.918"), holder="other-trial", ttl=timedelta(seconds=60))
    meter = SteppedMeter()
    stopped_before_load, load_study = trial_module.stopped_before_load, trial_module.load_study
    held_while_loading: list[Decimal] = []

    def read(*args: Any, **kwargs: Any) -> Any:
        meter.now += 0.01  # reading the study's settings takes 0.01 s
        return stopped_before_load(*args, **kwargs)

    def slow_load(*args: Any, **kwargs: Any) -> Any:
        held_while_loading.extend(r.usd for r in ledger.open_reservations() if r.holder == "slow-slot")
        meter.now += 0.3  # loading the study's trials takes 0.3 s ($0.03), three times its estimate
        return load_study(*args, **kwargs)

    monkeypatch.setattr(trial_module, "stopped_before_load", read)
    monkeypatch.setattr(trial_module, "load_study", slow_load)
    result = run_trial(
        storage_url=url,
        ledger=ledger,
        study_name=spec.study_name,
        trainer=InstantTrainer,
        holder="slow-slot",
        slot=1,
        wait_poll_seconds=0.05,
        settle_as=EntryOwner(dag_id="long-load", run_id="r1", map_index=0),
        meter=meter,
    )

    # The read so far and ten such reads for the load (0.11 s), held at the study's price before the load.
    assert held_while_loading == [Decimal("0.011")]
    assert not result.ran and result.goes_on
    (skipped,) = [row for row in ledger.entries() if row["trial"] == "skipped"]
    assert skipped["usd"] == Decimal("0.031")
    hold = ledger.latest_reservation("slow-slot")
    # Grown after the load to the 0.31 s it took (and toward the wait by what the budget had left).
    assert hold is not None and skipped["reservation_id"] == hold.id and hold.usd >= skipped["usd"]
    (study,) = ledger.usage(spec.budget_scope)
    assert study.spent_usd + study.reserved_usd <= study.cap_usd


def test_a_slot_whose_hold_went_unrecorded_as_the_study_opened_fails_with_a_clear_error(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An `assert` checked it, gone under `python -O`: the slot went on to an AttributeError on None.
    import costaware.training.tuning.trial as trial_module

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("unrecorded", max_usd="100", max_trials=5, fallback_trial_seconds=2.0)
    create_study(url, ledger, spec)
    open_slot = trial_module._open_slot

    def open_slot_without_on_open(*args: Any, **kwargs: Any) -> Any:
        kwargs["on_open"] = None
        return open_slot(*args, **kwargs)

    monkeypatch.setattr(trial_module, "_open_slot", open_slot_without_on_open)
    with pytest.raises(RuntimeError, match="slot 0 of study 'unrecorded' opened the study without recording"):
        run_trial(
            storage_url=url, ledger=ledger, study_name=spec.study_name, trainer=InstantTrainer,
            holder="unrecorded/r1/trial/0", slot=0, run_id="r1",
        )  # fmt: skip


@pytest.mark.parametrize("pruner", ["successive_halving", "hyperband"])
def test_a_trial_cut_for_money_at_a_rung_holds_no_place_there_and_the_next_best_trains_in_full(
    tmp_path: Path, pruner: str
) -> None:
    """The reported run on a stepped clock: trial #0, cut for money after rung 2, had the best value there.

    Its value held the one place of rung 2's top half, so #1 (second best at 2) was pruned: no trial could be
    trained in full, and the study promoted nothing with money left. Cut, #0 cannot go on: #1 goes on instead.
    Optuna's Hyperband (its successive halving in the bracket both trials fall in, 0 for study 'cut') kept
    #0's place too, in the rung value it records with the trial.
    """
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("cut", max_usd="1000.00", max_trials=2, fallback_trial_seconds=4.0, pruner=pruner)
    create_study(url, ledger, spec)
    meter = SteppedMeter()

    class SlowFirst:  # 1 s a unit of resource, as on a loaded machine: rung 4 does not fit what #0 reserved
        def __init__(self, params: dict[str, Any]) -> None:
            self.trained = 0

        def advance(self, resource: int) -> float:
            meter.now += resource - self.trained
            self.trained = resource
            return {1: 0.50, 2: 0.61711}[resource]

    class Instant:
        def __init__(self, params: dict[str, Any]) -> None:
            pass

        def advance(self, resource: int) -> float:
            return {1: 0.55, 2: 0.61708, 4: 0.63}[resource]

    def slot(number: int, trainer: Any) -> Any:
        result = run_trial(
            storage_url=url,
            ledger=ledger,
            study_name=spec.study_name,
            trainer=trainer,
            holder=f"cut-slot-{number}",
            slot=number,
            settle_as=EntryOwner(dag_id="cut", run_id="r1", map_index=number),
            meter=meter,
        )
        assert result.trial is not None
        return result.trial

    first = slot(0, SlowFirst)
    assert (first.state, first.fidelity) == ("cut", 2), first.decision
    assert first.decision.startswith("cut before 4: its reservation of $")
    second = slot(1, Instant)
    assert (second.state, second.fidelity, second.value) == ("promoted", 4, 0.63), second.decision
    summary = summarize_study(url, ledger, spec.study_name)
    assert summary["best"]["number"] == second.number
    assert summary["states"] == {"cut": 1, "promoted": 1}
