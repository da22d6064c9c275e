"""Which slot waits: waiting slots' records in the study, renewed while they wait, lapsed when they died."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

import optuna
import pytest
from test_tuning_trial import FakeClock, InstantTrainer, study_spec

from costaware import Ledger
from costaware.training.tuning import arbitration, create_study, run_trial
from costaware.training.tuning.arbitration import SLOT_RECORD_GRACE_SECONDS, WaitingSlots
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
    assert len(writes) <= 600 / (SLOT_RECORD_GRACE_SECONDS / 2) + 1  # renewed each half grace, not each poll
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
