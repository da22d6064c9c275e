"""Which slot waits: waiting slots' records in the study, renewed while they wait, lapsed when they died."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

import optuna
import pytest
from test_tuning_trial import FakeClock, InstantTrainer, study_spec

from costaware import Ledger
from costaware.training.tuning import EntryOwner, arbitration, create_study, run_trial
from costaware.training.tuning.arbitration import (
    SLOT_RECORD_GRACE_SECONDS,
    SLOT_RECORD_RENEWED_EVERY_SECONDS,
    WaitingSlots,
)
from costaware.training.tuning.reservations import LATE_POLL_SECONDS, hold_slot_time


def _clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The ledger's, the waits' and the records' clock, moved only by the test and the waits' sleeps."""
    clock = FakeClock(monkeypatch)
    monkeypatch.setattr(arbitration, "utcnow", clock.utcnow)
    return clock


def test_a_waiting_slots_record_counts_while_renewed_and_lapses_once_its_slot_stops(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _clock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    create_study(url, Ledger.from_url(url), study_spec("renewed", max_usd="4", max_trials=5))
    study = optuna.load_study(study_name="renewed", storage=url)
    waiting, behind = WaitingSlots(study, "renewed/r1/trial/0"), WaitingSlots(study, "renewed/r1/trial/1")
    writes = []
    set_attr = study._storage.set_study_system_attr
    monkeypatch.setattr(
        study._storage, "set_study_system_attr", lambda *a: (writes.append(a), set_attr(*a))[-1]
    )
    # A slot that waits 10 minutes for money, renewing its record at each 1 s poll, counts all along.
    for _ in range(600):
        waiting.mark("hold-A")
        assert behind.others() == {"hold-A"}
        clock.seconds += 1.0
    assert len(writes) <= 600 / SLOT_RECORD_RENEWED_EVERY_SECONDS + 1  # not each poll
    # It dies after its last ask: its record counts a while (a live slot's next ask may come that late), and
    # no more than its longest wait and the grace after that ask (its hold, open for its ttl, then counts as
    # a trial's: money that comes back when it ends).
    last_ask = clock.seconds - 1.0
    clock.seconds += SLOT_RECORD_GRACE_SECONDS / 2 - 1.0
    assert behind.others() == {"hold-A"}
    clock.seconds = last_ask + LATE_POLL_SECONDS + SLOT_RECORD_GRACE_SECONDS
    assert behind.others() == set()


def test_a_slot_that_died_waiting_holds_up_later_slots_only_until_its_record_lapses(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slot 0 held its time, recorded the hold as it asked for its trial's money, and died (OOM) before its
    # next ask. Before, its record counted for as long as its hold (600 s): every later slot refused beside
    # it gave way to it, ran no trial (in Airflow a skipped try; outside Airflow a driver's next call billed
    # another study load). Past its record's bound, the dead hold counts as a trial's: slot 1 waits for it
    # to end and runs its trial.
    clock = _clock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    # $0.001 a second; a trial needs about $1.2 (1200 s) and slot 1's wait: $2 has room for it only
    # once the dead slot's $1 hold ends.
    spec = replace(
        study_spec("dead", max_usd="2.00", max_trials=5, fallback_trial_seconds=1200.0),
        usd_per_hour=Decimal("3.6"),
    )
    create_study(url, ledger, spec)
    tags = spec.budget_scope.as_dict()

    def hold(number: int, usd: str) -> Any:
        held = hold_slot_time(
            ledger, tags, Decimal(usd), holder=f"dead/r1/trial/{number}", run_id="r1", dag_id="dead",
            seconds=1.0, purpose=f"slot {number}",
        )  # fmt: skip
        assert held is not None
        return held

    dead = hold(0, "1.00")
    WaitingSlots(optuna.load_study(study_name="dead", storage=url), "dead/r1/trial/0").mark(dead.id)
    clock.seconds += LATE_POLL_SECONDS + SLOT_RECORD_GRACE_SECONDS + 1.0

    result = run_trial(
        storage_url=url, ledger=ledger, study_name=spec.study_name, trainer=InstantTrainer,
        holder="dead/r1/trial/1", slot=1, run_id="r1", wait_poll_seconds=10.0, seconds_already_used=1.0,
        slot_hold=hold(1, "0.001").id, slot_usd_per_hour=spec.usd_per_hour, bill_tags=tags,
        meter=clock.monotonic,
    )  # fmt: skip

    assert result.ran, result.reason
    assert result.trial is not None and result.trial.reservation_id is not None
    assert clock.utcnow() >= dead.expires_at  # granted once the dead slot's hold ended
    (usage,) = ledger.usage(spec.budget_scope)
    assert usage.spent_usd + usage.reserved_usd <= usage.cap_usd


def _records(url: str, name: str) -> dict[str, Any]:
    study = optuna.load_study(study_name=name, storage=url)
    attrs = study._storage.get_study_system_attrs(study._study_id)
    return {key: value for key, value in attrs.items() if key.startswith(arbitration.WAITING_SLOT_ATTR)}


def test_slots_that_stop_waiting_leave_no_record_in_the_study(tmp_path: Any) -> None:
    # One record per holder, never deleted: a study of 200 slots kept 200 of them, read by every waiting
    # slot at each ask.
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("kept", max_usd="1000", max_trials=4, fallback_trial_seconds=2.0)
    create_study(url, ledger, spec)
    for number in range(4):
        result = run_trial(
            storage_url=url, ledger=ledger, study_name="kept", trainer=InstantTrainer,
            holder=f"kept/r1/trial/{number}", slot=number,
            settle_as=EntryOwner(dag_id="kept", run_id="r1", map_index=number),
        )  # fmt: skip
        assert result.ran, result.reason
    assert _records(url, "kept") == {}


def test_forget_keeps_the_records_of_holds_still_open_and_of_records_written_since(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("swept", max_usd="10", max_trials=5)
    create_study(url, ledger, spec)
    study = optuna.load_study(study_name="swept", storage=url)
    scope = spec.budget_scope

    def hold(holder: str) -> str:
        return ledger.reserve(scope, Decimal("0.10"), holder=holder).id

    waiting, ended, rewritten = hold("swept/r1/trial/1"), hold("swept/r1/trial/2"), hold("swept/r1/trial/3")
    me = WaitingSlots(study, "swept/r1/trial/0")
    me.mark(hold("swept/r1/trial/0"))
    WaitingSlots(study, "swept/r1/trial/1").mark(waiting)
    WaitingSlots(study, "swept/r1/trial/2").mark(ended)
    third = WaitingSlots(study, "swept/r1/trial/3")
    third.mark(rewritten)
    ledger.release(ended)
    ledger.release(rewritten)
    # Slot 3 holds its time anew and records it between this slot's read of the records and its delete.
    read = WaitingSlots._records

    def read_then_slot_3_records_anew(self: WaitingSlots) -> dict[str, Any]:
        records = read(self)
        third.mark(hold("swept/r1/trial/3"))
        return records

    monkeypatch.setattr(WaitingSlots, "_records", read_then_slot_3_records_anew)

    assert me.forget(ledger) == 2  # its own, and slot 2's (its hold ended)
    assert sorted(_records(url, "swept")) == [
        f"{arbitration.WAITING_SLOT_ATTR}swept/r1/trial/{number}" for number in (1, 3)
    ]


@pytest.mark.parametrize("failure", ["optuna renamed its table", "the ledger's read failed"])
def test_a_slot_whose_records_cannot_be_deleted_still_runs_its_trial_and_records_its_cost(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, failure: str
) -> None:
    # Deleting the records comes after the trial's money was granted: an error there (a later Optuna that
    # renamed its private table, a locked database) failed the slot with its reservation open until its ttl
    # and, outside Airflow, no entry recorded.
    import sqlalchemy.exc
    from optuna.storages._rdb import models

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    create_study(url, ledger, study_spec("unswept", max_usd="1000", max_trials=4, fallback_trial_seconds=2.0))
    if failure == "optuna renamed its table":
        monkeypatch.delattr(models, "StudySystemAttributeModel")
    else:

        def locked(self: WaitingSlots) -> dict[str, Any]:
            raise sqlalchemy.exc.OperationalError("SELECT ...", {}, Exception("database is locked"))

        monkeypatch.setattr(WaitingSlots, "_records", locked)

    result = run_trial(
        storage_url=url, ledger=ledger, study_name="unswept", trainer=InstantTrainer,
        holder="unswept/r1/trial/0", slot=0, settle_as=EntryOwner(dag_id="unswept", run_id="r1", map_index=0),
    )  # fmt: skip

    assert result.ran, result.reason
    assert ledger.open_reservations() == []
    (entry,) = ledger.entries(dag_id="unswept")
    assert result.trial is not None and entry["reservation_id"] == result.trial.reservation_id
    assert "left in the study" in caplog.text


def test_a_slot_deletes_its_record_only_once_its_trial_started_on_its_reservation(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Out of the money path: the trial that holds the reservation is recorded in the study first.
    from costaware.training.tuning.study import TRIAL_ATTR

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    create_study(url, ledger, study_spec("ordered", max_usd="1000", max_trials=4, fallback_trial_seconds=2.0))
    leased_at_forget: list[list[str]] = []
    forget = WaitingSlots.forget

    def forget_after_the_lease(self: WaitingSlots, ledger: Ledger, **kwargs: Any) -> int:
        trials = self.study.get_trials(deepcopy=False)
        leased_at_forget.append(
            [t.user_attrs[TRIAL_ATTR]["reservation"] for t in trials if TRIAL_ATTR in t.user_attrs]
        )
        return forget(self, ledger, **kwargs)

    monkeypatch.setattr(WaitingSlots, "forget", forget_after_the_lease)
    result = run_trial(
        storage_url=url, ledger=ledger, study_name="ordered", trainer=InstantTrainer,
        holder="ordered/r1/trial/0", slot=0, settle_as=EntryOwner(dag_id="ordered", run_id="r1", map_index=0),
    )  # fmt: skip

    assert result.ran and result.trial is not None, result.reason
    assert leased_at_forget == [[result.trial.reservation_id]]


def test_a_slot_whose_hold_stays_open_for_the_listener_keeps_its_record_until_the_hold_closes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In Airflow a slot that gave way deleted its record at once while its hold stayed open for the listener:
    # the slot that waited first took that hold for a trial's money that may come back.
    _clock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("kept", max_usd="10", max_trials=5)
    create_study(url, ledger, spec)
    gave_way = WaitingSlots(optuna.load_study(study_name="kept", storage=url), "kept/r1/trial/0")
    waiting = WaitingSlots(optuna.load_study(study_name="kept", storage=url), "kept/r1/trial/1")
    hold = ledger.reserve(spec.budget_scope, Decimal("0.10"), holder="kept/r1/trial/0").id
    gave_way.mark(hold)

    assert gave_way.forget(ledger, keep_own_while_open=True) == 0
    assert waiting.others() == {hold}
    ledger.release(hold)  # the listener bills the try
    assert waiting.forget(ledger) == 1  # a later slot's forget deletes it with the hold closed
    assert waiting.others() == set()


def test_a_slot_renewing_its_record_as_another_slot_deletes_it_writes_it_anew(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slot 1's hold ended and it holds its time anew; as it records the new hold, slot 0's forget deletes its
    # old record between Optuna's read of the row and its update: the update found no row
    # (StorageInternalError from a StaleDataError) and failed the waiting slot.
    import threading

    from optuna.storages._rdb import models

    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec("raced", max_usd="10", max_trials=5)
    create_study(url, ledger, spec)
    forgetting = WaitingSlots(optuna.load_study(study_name="raced", storage=url), "raced/r1/trial/0")
    renewing = WaitingSlots(optuna.load_study(study_name="raced", storage=url), "raced/r1/trial/1")
    old = ledger.reserve(spec.budget_scope, Decimal("0.10"), holder="raced/r1/trial/1").id
    renewing.mark(old)
    ledger.release(old)
    new = ledger.reserve(spec.budget_scope, Decimal("0.10"), holder="raced/r1/trial/1").id
    find = models.StudySystemAttributeModel.find_by_study_and_key.__func__
    deleted: list[int] = []

    def find_then_slot_0_forgets(cls: Any, study: Any, key: str, session: Any) -> Any:
        found = find(cls, study, key, session)
        if key == renewing._key and not deleted:
            # Another process's delete: a thread, whose session is its own.
            forgets = threading.Thread(target=lambda: deleted.append(forgetting.forget(ledger)))
            forgets.start()
            forgets.join()
        return found

    monkeypatch.setattr(
        models.StudySystemAttributeModel, "find_by_study_and_key", classmethod(find_then_slot_0_forgets)
    )
    renewing.mark(new)

    assert deleted == [1]  # slot 1's old record, its hold ended
    (record,) = _records(url, "raced").values()
    assert record["hold"] == new
    assert WaitingSlots(optuna.load_study(study_name="raced", storage=url), "raced/r1/trial/2").others() == {
        new
    }


def test_a_waiting_slots_record_counts_all_along_on_a_ledger_slow_to_answer(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slot 0 waits for money, polling every 30 s, on a ledger whose every ask takes 60 s (SQLite's busy
    # timeout: another writer holds the lock). Its record, renewed once a wait, lapsed during its second ask:
    # slot 1, refused then, took its hold for a trial's and waited for it (the two waited for each other).
    from costaware.adapters.ledger.store import Ledger as LedgerStore

    clock = _clock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = replace(
        study_spec("slow", max_usd="2.00", max_trials=5, fallback_trial_seconds=1200.0),
        usd_per_hour=Decimal("3.6"),
    )
    create_study(url, ledger, spec)
    tags = spec.budget_scope.as_dict()

    def hold(number: int) -> Any:
        held = hold_slot_time(
            ledger, tags, Decimal("0.95"), holder=f"slow/r1/trial/{number}", run_id="r1", dag_id="slow",
            seconds=1.0, purpose=f"slot {number}",
        )  # fmt: skip
        assert held is not None
        return held

    held = [hold(0), hold(1)]
    behind = WaitingSlots(optuna.load_study(study_name="slow", storage=url), "slow/r1/trial/1")
    seen: list[tuple[float, set[str]]] = []
    reserve = LedgerStore.reserve

    class Enough(Exception):
        pass

    def slow_reserve(self: Any, scope: Any, usd: Any, **kwargs: Any) -> Any:
        if kwargs.get("holder") == "slow/r1/trial/0":
            clock.seconds += 60.0
            seen.append((clock.seconds, behind.others()))  # slot 1 is refused now: what does it see?
            if len(seen) == 5:
                raise Enough()
        return reserve(self, scope, usd, **kwargs)

    monkeypatch.setattr(LedgerStore, "reserve", slow_reserve)
    with pytest.raises(Enough):
        run_trial(
            storage_url=url, ledger=ledger, study_name="slow", trainer=InstantTrainer,
            holder="slow/r1/trial/0", slot=0, run_id="r1", wait_poll_seconds=30.0, seconds_already_used=1.0,
            slot_hold=held[0].id, slot_usd_per_hour=spec.usd_per_hour, bill_tags=tags, meter=clock.monotonic,
        )  # fmt: skip

    assert [holds for _, holds in seen] == [{held[0].id}] * 5, seen


@pytest.mark.parametrize("skew", [-100.0, 100.0], ids=["writer behind", "reader ahead"])
def test_waiting_slots_on_postgresql_date_their_records_by_the_databases_clock(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, skew: float
) -> None:
    # Slot 0's worker marks its hold with its clock 100 s behind slot 1's: dated by each worker's clock, the
    # record had lapsed 10 s before slot 1 read it, which took the live slot's hold for a trial's (the two
    # waited for each other). On PostgreSQL the database's clock dates and reads them all.
    from datetime import UTC, datetime, timedelta

    name = f"skewed{int(skew)}".replace("-", "m")
    ledger = Ledger.from_url(postgres_url)
    create_study(postgres_url, ledger, study_spec(name, max_usd="4", max_trials=5))
    study = optuna.load_study(study_name=name, storage=postgres_url)

    def worker_clock(offset: float) -> Any:
        return lambda: datetime.now(UTC) + timedelta(seconds=offset)

    monkeypatch.setattr(arbitration, "utcnow", worker_clock(min(skew, 0.0)))
    WaitingSlots(study, f"{name}/r1/trial/0").mark("hold-A")
    monkeypatch.setattr(arbitration, "utcnow", worker_clock(max(skew, 0.0)))
    assert WaitingSlots(study, f"{name}/r1/trial/1").others() == {"hold-A"}
    ledger.dispose()


def test_a_slot_polling_less_often_than_late_slots_keeps_its_record_for_its_own_wait_and_the_grace(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As docs/tuning.md says: a slot polling every 300 s counts 300 s + 60 s past its last renewal, not 90 s.
    clock = _clock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    create_study(url, Ledger.from_url(url), study_spec("polled", max_usd="4", max_trials=5))
    study = optuna.load_study(study_name="polled", storage=url)
    WaitingSlots(study, "polled/r1/trial/0", poll_seconds=300.0).mark("hold-A")
    behind = WaitingSlots(study, "polled/r1/trial/1")
    clock.seconds = 300.0 + SLOT_RECORD_GRACE_SECONDS - 1.0
    assert behind.others() == {"hold-A"}
    clock.seconds = 300.0 + SLOT_RECORD_GRACE_SECONDS
    assert behind.others() == set()


def test_a_slot_held_again_keeps_its_place_as_the_first_to_wait(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ordered by the holds' own times, slot 0, which waited first, lost its place once its hold was held again
    # (a new reservation, made after slot 1's): slot 1 went on waiting as the first, and slot 0 gave way.
    from costaware.training.tuning.reservations import SlotYields, WaitingRecords, reserve_trial_cost

    clock = _clock(monkeypatch)
    spec = replace(study_spec("place", max_usd="1.00", max_trials=5), usd_per_hour=Decimal("3.60"))
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    create_study(url, ledger, spec)
    study = optuna.load_study(study_name="place", storage=url)
    holds = {}
    for number in (0, 1):
        held = hold_slot_time(
            ledger, spec.budget_scope.as_dict(), Decimal("0.30"), holder=f"slot-{number}", run_id="r1",
            dag_id="place", seconds=1.0, purpose=f"slot {number}",
        )  # fmt: skip
        assert held is not None
        holds[number] = (held.id, WaitingSlots(study, f"slot-{number}"))
        holds[number][1].mark(held.id)
        clock.seconds += 5.0
    first_id, first = holds[0]
    again = ledger.reserve(
        spec.budget_scope, Decimal("0.30"), holder="slot-0", run_id="r1", ttl=timedelta(seconds=600),
        replacing=first_id,
    )  # fmt: skip
    first.mark(again.id)  # held again: made after slot 1's hold, the same wait
    second_id, second = holds[1]

    with pytest.raises(SlotYields) as gave_way:
        reserve_trial_cost(
            ledger, spec, lambda: 800.0, "slot-1", "r1", 1, 30.0, replacing=second_id,
            mark_waiting=second.mark, waiting_holds=second.others,
            waiting_records=WaitingRecords(places=second.places, spares=second.spares),
        )  # fmt: skip

    assert "the slot that waited first (slot-0) goes on waiting" in str(gave_way.value)
    assert first.places()[again.id] < second.places()[second_id]


def test_a_recorded_spare_says_when_the_recording_slots_next_poll_gives_it_back(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from costaware.training.tuning.reservations import RecordedSpare

    clock = _clock(monkeypatch)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    create_study(url, Ledger.from_url(url), study_spec("due", max_usd="4", max_trials=5))
    study = optuna.load_study(study_name="due", storage=url)
    waiting, behind = WaitingSlots(study, "due/r1/trial/0"), WaitingSlots(study, "due/r1/trial/1")
    waiting.mark("hold-A", Decimal("0.003902"), spare_due_seconds=5.0)
    clock.seconds += 2.0
    assert behind.spares() == {"hold-A": RecordedSpare(Decimal("0.003902"), 3.0)}
    waiting.mark("hold-A")  # renewed before an ask: the spare and its time stay as recorded
    clock.seconds += 4.5  # the poll is late (its ask waits for a lock): the time is past
    assert behind.spares() == {"hold-A": RecordedSpare(Decimal("0.003902"), -1.5)}
    waiting.mark("hold-B", Decimal("0.001"), spare_due_seconds=30.0)  # held again: the next pause is 30 s
    assert behind.spares() == {"hold-B": RecordedSpare(Decimal("0.001"), 30.0)}
