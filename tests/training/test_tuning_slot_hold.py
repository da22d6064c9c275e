"""A trial slot's hold on its time before its trial's reservation: it pays the try's bill while needed."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from test_tuning_trial import FakeClock, study_spec

from costaware import Ledger
from costaware.core.budgets import Scope
from costaware.core.errors import BudgetExceededError
from costaware.core.ledger import Kind, LedgerEntry
from costaware.ledger_spool import record_and_settle
from costaware.training.tuning import create_study
from costaware.training.tuning.reservations import hold_slot_time, reserve_trial_cost

TEAM = Scope.of({"team": "ml"})
SLOT_HOLDER = "tune/r1/trial/1"


def _slot_bill(usd: str, tags: dict[str, str]) -> LedgerEntry:
    """The cost listener's entry for slot 1's try."""
    return LedgerEntry(
        dag_id="tune",
        run_id="r1",
        task_id="trial",
        map_index=1,
        kind=Kind.COMPUTE,
        usd=Decimal(usd),
        tags=tags,
    )


def _hold_slot(ledger: Ledger, tags: dict[str, str], purpose: str = "slot 1") -> Any:
    """Slot 1's hold: 60 s of study load at the worker's $0.096/h."""
    return hold_slot_time(
        ledger, tags, Decimal("0.0016"), holder=SLOT_HOLDER, run_id="r1", dag_id="tune", seconds=60.0,
        purpose=purpose,
    )  # fmt: skip


def test_a_slot_hold_keeps_counting_while_its_slot_waits_an_hour_for_the_studys_money(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slot 1 waited past its own 60 s for a hold of the study kept 3 h: its 600 s slot hold lapsed meanwhile,
    # another task could reserve that money, and the refused slot's try was billed with nothing held.
    clock = FakeClock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("waits", max_usd="1", max_trials=5, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    ledger.set_budget(TEAM, "total", Decimal("10"))
    running = reserve_trial_cost(ledger, spec, lambda: 0.8, "tune/r1/trial/0", "r1", 0, 1.0)
    ledger.extend(running.id, clock.utcnow() + timedelta(hours=3))  # kept for its retry
    slot = _hold_slot(ledger, {"team": "ml"})
    assert slot is not None

    with pytest.raises(BudgetExceededError):
        reserve_trial_cost(
            ledger, spec, lambda: 0.8, SLOT_HOLDER, "r1", 1, 10.0, replacing=slot.id, bill_tags={"team": "ml"}
        )

    assert clock.seconds > 3600  # it waited an hour, far past the slot hold's first 600 s
    (team,) = ledger.usage(TEAM)
    assert team.reserved_usd == slot.usd  # still held when the slot gives up
    with pytest.raises(BudgetExceededError):
        ledger.reserve(TEAM, Decimal("10"), holder="other/r1/gate/-1")
    record_and_settle(ledger, _slot_bill("0.0016", {"team": "ml"}))
    (bill,) = [e for e in ledger.entries() if e["task_id"] == "trial"]
    assert bill["reservation_id"] == slot.id
    (team,) = ledger.usage(TEAM)
    assert team.spent_usd + team.reserved_usd <= team.cap_usd


def test_a_retry_that_finds_its_earlier_slot_hold_keeps_it_for_its_own_load(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Try 1 failed loading the study after 250 s; try 2, 300 s later, got the hold back as it stood: 50 s left
    # for a load it is let take 60 s, and its bill settled nothing once it lapsed.
    clock = FakeClock(monkeypatch)
    ledger = Ledger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.set_budget(TEAM, "total", Decimal("1"))
    first = _hold_slot(ledger, {"team": "ml"}, purpose="try 1")
    assert first is not None
    record_and_settle(ledger, _slot_bill("0.0067", {"team": "ml"}), retrying=True)
    clock.sleep(550)

    second = _hold_slot(ledger, {"team": "ml"}, purpose="try 2")

    assert second is not None and second.id == first.id
    assert second.expires_at >= clock.utcnow() + timedelta(seconds=600)


def _spend_the_teams_budget(ledger: Ledger, cap: str, spent: str) -> None:
    ledger.set_budget(TEAM, "total", Decimal(cap))
    if Decimal(spent) > 0:
        ledger.record(
            LedgerEntry(
                dag_id="other",
                run_id="r",
                task_id="t",
                kind=Kind.STORAGE,
                usd=Decimal(spent),
                tags={"team": "ml"},
            )
        )


def test_a_slot_refused_by_a_budget_over_the_dags_tags_that_holds_nothing_of_the_study_stops_at_once(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The team's money was spent by others and no hold of the study is in its budget: nothing the study's
    # running trial gives back makes room there. The slot polled an hour, paid from a budget at its cap.
    clock = FakeClock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("team-spent", max_usd="2", max_trials=5, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    _spend_the_teams_budget(ledger, cap="0.5", spent="0.5")
    running = reserve_trial_cost(ledger, spec, lambda: 0.8, "tune/r1/trial/0", "r1", 0, 1.0)
    ledger.extend(running.id, clock.utcnow() + timedelta(hours=3))

    with pytest.raises(BudgetExceededError, match="team=ml/total"):
        reserve_trial_cost(ledger, spec, lambda: 0.8, SLOT_HOLDER, "r1", 1, 1.0, bill_tags={"team": "ml"})

    assert clock.seconds == 0


def test_a_slot_counts_back_only_what_its_hold_has_unpaid_when_a_budget_over_the_dags_tags_is_short(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Try 1 billed $0.45 of its $0.50 slot hold, grown back for try 2 as far as the team's $1 cap allowed
    # ($0.60, $0.15 unpaid). Try 2's $0.30 trial does not fit the team's budget even once that hold is given
    # back ($0.85 spent), and no hold of the study is in it. Counting the hold's whole $0.60 as room, the
    # slot waited for the study's running trial, billed all the while from a budget at its cap.
    clock = FakeClock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("paid-slot", max_usd="10", max_trials=5, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    _spend_the_teams_budget(ledger, cap="1", spent="0.4")
    slot = _hold_slot(ledger, {"team": "ml"}, purpose="try 1")
    assert slot is not None
    ledger.grow(slot.id, "0.5")
    record_and_settle(ledger, _slot_bill("0.45", {"team": "ml"}), retrying=True)
    assert ledger.unpaid(slot.id)[0] == Decimal("0.15")
    running = reserve_trial_cost(ledger, spec, lambda: 0.8, "tune/r1/trial/0", "r1", 0, 1.0)
    ledger.extend(running.id, clock.utcnow() + timedelta(hours=3))

    with pytest.raises(BudgetExceededError, match="team=ml/total"):
        reserve_trial_cost(
            ledger, spec, lambda: 0.3, SLOT_HOLDER, "r1", 1, 1.0, replacing=slot.id, bill_tags={"team": "ml"}
        )

    assert clock.seconds == 0


def test_a_slot_whose_own_hold_is_all_its_study_holds_does_not_wait_for_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slot's hold over the study's own tags is the only one in the study's budget, and the project's
    # budget is short even once the trial's reservation gives it back. The slot took that hold for a trial
    # in flight whose money may come back, and waited an hour for it (renewing it as it waited).
    clock = FakeClock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("own-hold", max_usd="10", max_trials=5, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    project = {"project": "own-hold"}
    ledger.set_budget(Scope.of(project), "total", Decimal("1"))
    ledger.record(
        LedgerEntry(
            dag_id="other", run_id="r", task_id="t", kind=Kind.STORAGE, usd=Decimal("0.8"), tags=project
        )
    )
    slot = _hold_slot(ledger, spec.budget_scope.as_dict())
    assert slot is not None

    with pytest.raises(BudgetExceededError, match="project=own-hold/total"):
        reserve_trial_cost(ledger, spec, lambda: 0.3, SLOT_HOLDER, "r1", 1, 1.0, replacing=slot.id)

    assert clock.seconds == 0


def test_a_slot_refused_by_a_budget_over_the_dags_tags_waits_while_the_studys_trials_hold_its_money(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The team's budget is short only while another trial of the study (billed to the team too) holds $0.80.
    clock = FakeClock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("team-held", max_usd="10", max_trials=5, fallback_trial_seconds=0.8)
    create_study(url, ledger, spec)
    _spend_the_teams_budget(ledger, cap="1", spent="0")
    running = reserve_trial_cost(
        ledger, spec, lambda: 0.8, "tune/r1/trial/0", "r1", 0, 1.0, bill_tags={"team": "ml"}
    )

    granted = reserve_trial_cost(
        ledger, spec, lambda: 0.8, SLOT_HOLDER, "r1", 1, 1.0, bill_tags={"team": "ml"}
    )

    assert granted.id != running.id and clock.utcnow() >= running.expires_at


def test_a_retry_in_a_dag_tagged_with_its_studys_scope_is_paid_from_its_earlier_trys_trial_hold(
    tmp_path: Any,
) -> None:
    # The DAG carries the study's own tags, so the trial's hold is over the very tags of the slot's hold: the
    # retry's hold_slot_time found try 1's trial hold as if it were a slot hold, and the trial's reservation
    # replaced it, asking the whole estimate again where the budget had room only for what try 1 left.
    import optuna
    from test_tuning_trial import InstantTrainer, Killed, SteppedMeter

    from costaware.training.tuning import EntryOwner, run_trial

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("own-tags", max_usd="100", max_trials=2, fallback_trial_seconds=10.0, pruner="none")
    create_study(url, ledger, spec)
    tags, holder = spec.budget_scope.as_dict(), "own-tags/r1/trial/0"
    meter = SteppedMeter()

    class DiesAtFour(InstantTrainer):
        def advance(self, resource: int) -> float:
            meter.now += 1.0
            if resource == 4:
                raise Killed
            return 0.5

    class Climbs(InstantTrainer):
        def advance(self, resource: int) -> float:
            meter.now += 1.0
            return resource / 10

    def slot(trainer: Any) -> Any:
        held = hold_slot_time(
            ledger, tags, Decimal("0.0016"), holder=holder, run_id="r1", dag_id="own-tags", seconds=60.0,
            purpose="slot 0",
        )  # fmt: skip
        assert held is not None
        return run_trial(
            storage_url=url, ledger=ledger, study_name="own-tags", trainer=trainer, holder=holder, slot=0,
            run_id="r1", settle_as=EntryOwner(dag_id="own-tags", run_id="r1", map_index=0), meter=meter,
            slot_hold=held.id, bill_tags=tags,
        )  # fmt: skip

    with pytest.raises(Killed):
        slot(DiesAtFour)
    (trial_hold,) = ledger.open_reservations()
    ledger.record(
        LedgerEntry(
            dag_id="own-tags", run_id="r1", task_id="trial", map_index=0, kind=Kind.COMPUTE, usd=Decimal(3),
            tags=tags, reservation_id=trial_hold.id,
        )
    )  # fmt: skip
    # Room for what try 1 left of its hold, not for the whole estimate again.
    ledger.set_budget(spec.budget_scope, "total", trial_hold.usd)

    result = slot(Climbs)

    assert result.ran, result.reason
    assert result.trial is not None and result.trial.reservation_id == trial_hold.id
    (old, retried) = optuna.load_study(study_name="own-tags", storage=url).get_trials()
    assert old.state == optuna.trial.TrialState.FAIL and retried.params == old.params
    (usage,) = ledger.usage(spec.budget_scope)
    assert usage.spent_usd + usage.reserved_usd <= usage.cap_usd


def test_a_slot_hold_refused_growth_while_another_hold_settles_is_grown_not_held_again(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from costaware.training.tuning.reservations import _keep_slot_hold

    # A slot that gives way settles its hold between the first slot's refused grow and its reading of the
    # budgets: no budget is short any more. Before, the hold was held again under a new id, with a WARNING
    # that a budget set since it was made held nothing of it, which no budget was.
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    ledger.set_budget(TEAM, "total", Decimal("1.00"))
    slot = _hold_slot(ledger, {"team": "ml"})
    assert slot is not None
    giving_way = ledger.reserve(TEAM, Decimal("0.95"), holder="tune/r1/trial/2")

    class SettlesAfterTheGrow:
        """The ledger, where the other slot's hold is given back just after the first grow is refused."""

        def __init__(self) -> None:
            self.grows = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(ledger, name)

        def grow(self, hold_id: str, usd: Decimal) -> Any:
            grown = ledger.grow(hold_id, usd)
            self.grows += 1
            if self.grows == 1:
                ledger.release(giving_way.id)
            return grown

    kept = _keep_slot_hold(SettlesAfterTheGrow(), slot.id, 1, 1.0, 60.0, Decimal("3.60"), 30.0, run_id="r1")  # type: ignore[arg-type]
    assert kept == slot.id
    (hold,) = ledger.open_reservations()
    assert hold.id == slot.id and hold.usd == Decimal("0.091")  # 91 s at $3.60/h
    assert "held again" not in caplog.text


def test_a_skipped_slots_entry_past_its_hold_grows_the_hold_before_it_is_billed(tmp_path: Any) -> None:
    # The slot's time after its hold was last grown (the refusal, the entry's write) was billed from a hold
    # that did not cover it: $0.0458 settled against $0.03 held, past what the budget held for it.
    from costaware.training.tuning import EntryOwner
    from costaware.training.tuning.reservations import record_skipped_slot

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("tail", max_usd="1", max_trials=5)  # $1 a second
    create_study(url, ledger, spec)
    hold = ledger.reserve(spec.budget_scope, Decimal("0.30"), holder="slot-1")
    ledger.reserve(spec.budget_scope, Decimal("0.60"), holder="other-trial")

    usd = record_skipped_slot(ledger, spec, 0.4, EntryOwner(dag_id="tail", run_id="r1"), "refused", hold.id)

    assert usd == Decimal("0.4")
    settled = ledger.latest_reservation("slot-1")
    assert settled is not None and settled.usd == Decimal("0.4")  # grown to the entry, then settled by it
    (study,) = ledger.usage(spec.budget_scope)
    assert study.spent_usd + study.reserved_usd <= study.cap_usd


def test_a_skipped_slots_hold_grown_just_before_it_runs_out_is_not_said_to_hold_none(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The hold was grown to the entry while open; the clock read after the grow had passed its end (a
    # millisecond window, made an hour here): the warning said it expired and "held none of it", though the
    # grow had just held all of it.
    from costaware.core.ledger import utcnow
    from costaware.training.tuning import EntryOwner
    from costaware.training.tuning import reservations as trial_reservations
    from costaware.training.tuning.reservations import record_skipped_slot

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("tail", max_usd="1", max_trials=5)  # $1 a second
    create_study(url, ledger, spec)
    hold = ledger.reserve(spec.budget_scope, Decimal("0.30"), holder="slot-1", ttl=timedelta(hours=1))
    grown: list[Any] = []
    grow = ledger.grow

    def grow_then_time_passes(hold_id: str, usd: Any) -> Any:
        grown.append(grow(hold_id, usd))
        return grown[-1]

    def clock() -> Any:
        return utcnow() + (timedelta(hours=2) if grown else timedelta(0))

    monkeypatch.setattr(ledger, "grow", grow_then_time_passes)
    monkeypatch.setattr(trial_reservations, "utcnow", clock)
    with caplog.at_level("WARNING"):
        usd = record_skipped_slot(
            ledger, spec, 0.4, EntryOwner(dag_id="tail", run_id="r1"), "refused", hold.id
        )

    assert usd == Decimal("0.4") and grown[-1].usd == Decimal("0.4")  # held in full by the grow
    assert "held none of it" not in caplog.text
    assert "had no room for the rest" not in caplog.text


def test_a_skipped_slots_hold_that_held_enough_and_runs_out_before_the_grow_is_said_to_hold_none(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The hold already held the entry ($0.50 for $0.40) and ran out between the clock read before the grow
    # and the grow: grow returned it as it stood, so neither "lapsed when asked" nor "not grown in full" held
    # and nothing was said, though the entry was settled against a hold that counted nothing.
    from costaware.adapters.ledger import regrowth
    from costaware.core.ledger import utcnow
    from costaware.training.tuning import EntryOwner
    from costaware.training.tuning import reservations as trial_reservations
    from costaware.training.tuning.reservations import record_skipped_slot

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("tail", max_usd="1", max_trials=5)  # $1 a second
    create_study(url, ledger, spec)
    hold = ledger.reserve(spec.budget_scope, Decimal("0.50"), holder="slot-1", ttl=timedelta(hours=1))
    asked: list[str] = []
    grow = ledger.grow

    def time_passes_then_grow(hold_id: str, usd: Any) -> Any:
        asked.append(hold_id)  # the clock moves past the hold's end as the grow is asked
        return grow(hold_id, usd)

    def clock() -> Any:
        return utcnow() + (timedelta(hours=2) if asked else timedelta(0))

    monkeypatch.setattr(ledger, "grow", time_passes_then_grow)
    monkeypatch.setattr(trial_reservations, "utcnow", clock)
    monkeypatch.setattr(regrowth, "utcnow", clock)
    with caplog.at_level("WARNING"):
        usd = record_skipped_slot(
            ledger, spec, 0.4, EntryOwner(dag_id="tail", run_id="r1"), "refused", hold.id
        )

    assert usd == Decimal("0.4") and asked == [hold.id]
    assert (
        f"is settled against its hold {hold.id}, which expired at "
        f"{hold.expires_at.isoformat(timespec='seconds')} before the entry was recorded: it held none of it"
    ) in caplog.text


def test_a_slot_whose_expired_hold_lost_its_budget_stops_waiting_naming_that_budget(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The team's budget was deleted after the slot's hold expired: holding the slot's time again let the
    # ledger's "no budget covers scope 'team=ml' ...; set one" out of the wait, as if none had been set.
    from costaware.training.tuning.reservations import WaitNotHeld, _keep_slot_hold

    clock = FakeClock(monkeypatch)
    ledger = Ledger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.set_budget(TEAM, "total", Decimal("1"))
    slot = _hold_slot(ledger, {"team": "ml"})
    assert slot is not None
    clock.sleep(700)  # past the hold's 600 s
    ledger.delete_budget(TEAM, "total")

    with pytest.raises(WaitNotHeld) as refused:
        _keep_slot_hold(ledger, slot.id, 1, 5.0, 700.0, Decimal("0.096"), run_id="r1")

    message = str(refused.value)
    assert "budget 'team=ml/total' it was held in was deleted" in message
    assert "costaware budget set --scope 'team=ml' --period total" in message
    assert "no budget covers scope" not in message and "set one" not in message
    # Nothing lost: the slot's hold is left as it was, for its bill to find; nothing new is held.
    (kept,) = [r for r in ledger.open_reservations() if r.holder == SLOT_HOLDER] or [
        ledger.latest_reservation(SLOT_HOLDER)
    ]
    assert kept is not None and kept.id == slot.id


def test_a_slot_hold_its_entries_paid_past_is_held_again_saying_so(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An earlier try's bill paid $0.02 from the slot's $0.0016 hold. Grown for the retry's wait, it was
    # held again under "could not be grown ... though its budgets have room (a budget set since it was
    # made ...)": no budget had been set; what its entries paid past it is what the grow could not hold.
    from costaware.training.tuning.reservations import _keep_slot_hold

    FakeClock(monkeypatch)
    ledger = Ledger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}")
    # $0.003 of room once the bill is spent: the wait's $0.002533 fits, the hold grown beside the bill not.
    ledger.set_budget(TEAM, "total", Decimal("0.023"))
    slot = _hold_slot(ledger, {"team": "ml"})
    assert slot is not None
    # Paid from it as written, with no growth back (a bill the hold was not grown for).
    ledger.record(replace(_slot_bill("0.02", {"team": "ml"}), reservation_id=slot.id))

    with caplog.at_level("WARNING"):
        again = _keep_slot_hold(ledger, slot.id, 1, 5.0, 60.0, Decimal("0.096"), run_id="r1")

    said = " ".join(r.getMessage() for r in caplog.records)
    assert "though its budgets have room" not in said and "a budget set since" not in said
    # Grown by the $0.003 of room twice (each growth up to what was paid reserves nothing), then held again.
    assert "was paid $0.02 by its entries, more than the $0.0076 it holds grown as far as" in said
    assert "the $0.0124 paid past it is spent in them already, so it cannot also hold the $0.002533" in said
    (team,) = ledger.usage(TEAM)
    assert again != slot.id and team.spent_usd + team.reserved_usd <= team.cap_usd


def test_on_free_compute_a_slot_outside_airflow_holds_the_gpu_hours_of_its_wait(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At a price of 0 the slot's hold held $0 and no GPU-hours: its wait for another trial's GPU-hours and
    # its skipped entry (0.007 GPU-hours) were spent past the study's max_gpu_hours with nothing held.
    from test_tuning_trial import InstantTrainer

    from costaware.core.tuning import TuningCaps
    from costaware.training.tuning import EntryOwner, run_trial

    clock = FakeClock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("owned", max_usd="1", max_trials=3, fallback_trial_seconds=36.0)
    caps = TuningCaps.create(max_usd=Decimal(1), max_trials=3, max_gpu_hours="0.015")
    spec = replace(spec, usd_per_hour=Decimal(0), gpus=Decimal(1), caps=caps)
    create_study(url, ledger, spec)
    # Another trial holds 0.012 of the 0.015 GPU-hours for a minute: the slot's 0.01 waits for it.
    ledger.reserve(
        spec.budget_scope, Decimal(0), gpu_hours=Decimal("0.012"), holder="other", ttl=timedelta(seconds=60)
    )

    result = run_trial(
        storage_url=url, ledger=ledger, study_name="owned", trainer=InstantTrainer, holder="slot-1", slot=1,
        wait_poll_seconds=1.0, settle_as=EntryOwner(dag_id="owned", run_id="r1", map_index=1),
        meter=clock.monotonic,  # the slot's time is the wait's clock
    )  # fmt: skip

    assert not result.ran and result.goes_on, result.reason
    assert "GPU-hours" in result.reason
    (skipped,) = [row for row in ledger.entries() if row["trial"] == "skipped"]
    # The hold it was settled against (the slot's last: a wait may hold it again, replacing it).
    (hold,) = [h for h in slot_holds(url, "slot-1") if h["status"] == "settled"]
    assert skipped["reservation_id"] == hold["id"]
    assert Decimal(0) < skipped["gpu_hours"] <= hold["gpu_hours"]  # every GPU-hour it spent was held
    (study,) = ledger.usage(spec.budget_scope)
    assert study.cap_gpu_hours is not None
    assert study.spent_gpu_hours + study.reserved_gpu_hours <= study.cap_gpu_hours


def slot_holds(url: str, holder: str) -> list[dict[str, Any]]:
    """Every reservation row of ``holder`` (open, settled, replaced, ...), oldest first."""
    import sqlalchemy

    from costaware.adapters.ledger import schema

    r = schema.reservations
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sqlalchemy.select(r).where(r.c.holder == holder).order_by(r.c.created_at))
            return [{**row._mapping, "gpu_hours": Decimal(row.gpu_hours_micros) / 1_000_000} for row in rows]
    finally:
        engine.dispose()
