"""Slots waiting for one study's money at once, outside Airflow, their waits interleaved on one clock."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import pytest
from clocks import hold_clock_modules
from test_tuning_slot_hold import slot_holds
from test_tuning_trial import InstantTrainer, study_spec

from costaware import Ledger
from costaware.core.tuning import StudySpec, TuningCaps
from costaware.training.tuning import EntryOwner, SlotResult, create_study, run_trial

#: Real seconds a slot waits for its turn before the test calls it stuck (a slot blocked on the ledger's lock
#: while the slot holding it waits for its turn).
TURN_TIMEOUT_SECONDS = 120.0


class TurnClock:
    """One clock for slots run in threads, one at a time: a slot's sleep hands the turn to the one due first.

    The ledger's holds (:func:`~clocks.hold_clock_modules`), the slots' waits (``reservations``' ``utcnow``
    and ``time``) and the waiting slots' records (``arbitration``'s ``utcnow``) read it; it moves only as
    slots sleep. What the slots do, and in which order, is the same at any load of the machine.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from costaware.training.tuning import arbitration, reservations

        self.seconds = 0.0
        self._base = datetime(2026, 12, 1, tzinfo=UTC)
        self._turn = threading.Condition()
        self._due: dict[str, float] = {}  # a sleeping slot's name: when it wakes
        self._order: list[str] = []  # who goes first of slots due at once
        self._running: str | None = None
        for module in (*hold_clock_modules(), reservations, arbitration):
            monkeypatch.setattr(module, "utcnow", self.utcnow)
        monkeypatch.setattr(reservations, "time", SimpleNamespace(monotonic=self.monotonic, sleep=self.sleep))

    def utcnow(self) -> datetime:
        return self._base + timedelta(seconds=self.seconds)

    def monotonic(self) -> float:
        return self.seconds

    def sleep(self, seconds: float) -> None:
        """The calling slot sleeps ``seconds``: the slot due first runs meanwhile."""
        name = threading.current_thread().name
        with self._turn:
            self._due[name] = self.seconds + seconds
            self._pass_turn()
            self._wait_turn(name)

    def run(self, slots: dict[str, tuple[float, Callable[[], SlotResult]]]) -> dict[str, SlotResult]:
        """Run each slot (name: its start, what it runs) in a thread of that name; what each returned."""
        results: dict[str, SlotResult] = {}
        errors: list[BaseException] = []

        def take_turns(name: str, slot: Callable[[], SlotResult]) -> None:
            try:
                with self._turn:
                    self._wait_turn(name)
                results[name] = slot()
            except BaseException as e:
                errors.append(e)
            finally:
                with self._turn:
                    self._pass_turn()

        with self._turn:
            for name, (start, _) in slots.items():
                self._due[name] = start
                self._order.append(name)
        threads = [
            threading.Thread(target=take_turns, name=n, args=(n, slot)) for n, (_, slot) in slots.items()
        ]
        for thread in threads:
            thread.start()
        with self._turn:
            self._pass_turn()
        for thread in threads:
            thread.join(timeout=TURN_TIMEOUT_SECONDS * 2)
        assert not [t.name for t in threads if t.is_alive()], "a slot never finished"
        if errors:
            raise errors[0]
        return results

    def _pass_turn(self) -> None:
        self._running = None
        if self._due:
            name = min(self._due, key=lambda n: (self._due[n], self._order.index(n)))
            self.seconds = max(self.seconds, self._due.pop(name))
            self._running = name
        self._turn.notify_all()

    def _wait_turn(self, name: str) -> None:
        if not self._turn.wait_for(lambda: self._running == name, timeout=TURN_TIMEOUT_SECONDS):
            raise AssertionError(f"{name} waited {TURN_TIMEOUT_SECONDS:g} s for its turn at {self.seconds} s")


def run_two_slots(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    max_gpu_hours: str,
    slot_0_ask_seconds_at_200: float = 0.0,
) -> tuple[TurnClock, StudySpec, str, Ledger, dict[str, SlotResult]]:
    """Slot 0 waits alone for other runs' trials, slot 1 asks late beside it: the clock, study, url, results.

    $1 a second on 1 GPU (GPU-hours said in GPU-seconds here): a $355 study under ``max_gpu_hours``, trials
    estimated at 98 s. Slot 0 polls every 5 s; its hold holds GPU time past its need (headroom), and its
    record says the spare it gives up once others wait. Its own lease (197.4 s) is over at its poll at 200 s:
    from then on it pauses 30 s. Slot 1 (a far store: a 6.7 s read, a $73.70 hold before the load) asks at
    199.5 s, refused GPU time beside slot 0's hold. ``slot_0_ask_seconds_at_200``: how long slot 0's ask for
    its trial at 200 s takes (a wait for the ledger's lock; slot 1 runs meanwhile).
    """
    import costaware.training.tuning.trial as trial_module

    clock = TurnClock(monkeypatch)
    caps = TuningCaps.create(max_usd=Decimal(355), max_trials=5, max_gpu_hours=Decimal(max_gpu_hours))
    spec = replace(
        study_spec("turns", max_usd="355", max_trials=5, fallback_trial_seconds=98.0),
        gpus=Decimal(1),
        caps=caps,
    )
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    create_study(url, ledger, spec)
    # Other runs' trials hold dollars while slot 0 waits, ending one by one, none leaving room for its trial:
    # the last at 197 s, after slot 0's last poll within its lease, before slot 1 asks.
    for number, (usd, ends_at) in enumerate([(50, 47.0), (50, 97.0), (50, 147.0), (120, 197.0)]):
        ledger.reserve(
            spec.budget_scope, Decimal(usd), gpu_hours=Decimal(0), holder=f"turns/other/trial/{number}",
            ttl=timedelta(seconds=ends_at),
        )  # fmt: skip
    read = trial_module.stopped_before_load

    def far_store_for_slot_1(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "slot-1":
            clock.sleep(6.7)  # slot 0 polls meanwhile
        return read(*args, **kwargs)

    monkeypatch.setattr(trial_module, "stopped_before_load", far_store_for_slot_1)
    reserve = ledger.reserve

    def slow_ask_of_slot_0(*args: Any, **kwargs: Any) -> Any:
        asks_trial = str(kwargs.get("purpose", "")).startswith("trial slot 0 ")
        if asks_trial and threading.current_thread().name == "slot-0" and clock.seconds == 200.0:
            clock.seconds += slot_0_ask_seconds_at_200
        return reserve(*args, **kwargs)

    monkeypatch.setattr(ledger, "reserve", slow_ask_of_slot_0)

    def slot(number: int, poll_seconds: float, **kwargs: Any) -> Callable[[], SlotResult]:
        return lambda: run_trial(
            storage_url=url, ledger=ledger, study_name=spec.study_name, trainer=InstantTrainer,
            holder=f"slot-{number}", slot=number, meter=clock.monotonic, wait_poll_seconds=poll_seconds,
            settle_as=EntryOwner(dag_id=spec.study_name, run_id="r1", map_index=number), **kwargs,
        )  # fmt: skip

    caplog.set_level("INFO", logger="costaware.training.tuning.reservations")
    results = clock.run(
        {"slot-0": (0.0, slot(0, 5.0, seconds_already_used=0.2)), "slot-1": (192.8, slot(1, 1.0))}
    )
    return clock, spec, url, ledger, results


def assert_within_caps(ledger: Ledger, spec: StudySpec) -> None:
    (study,) = ledger.usage(spec.budget_scope)
    assert study.cap_gpu_hours is not None
    assert study.spent_usd <= study.cap_usd and study.spent_gpu_hours <= study.cap_gpu_hours


def test_a_slot_past_its_own_lease_gives_back_the_whole_spare_it_recorded_when_another_slot_waits_for_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Slot 1 waits for slot 0's spare, its trial fitting once the spare is given up. At slot 0's poll at
    # 200 s, its own lease over, it pauses 30 s, and trimmed its hold to its need and 10 polls of that pause
    # (300 s): it gave up none of the spare, and slot 1 gave way (97 GPU-seconds of room for the 106 its
    # trial needs), the study's money unspent. Its margin is now the one its recorded spare was counted past:
    # both trials run.
    from costaware.training.tuning.reservations import gpu_hours_for

    clock, spec, url, ledger, results = run_two_slots(tmp_path, monkeypatch, caplog, "0.109722")

    assert "slot 1 waits: its trial fits once the other waiting slots give up the" in caplog.text
    assert clock.seconds == 230.0  # slot 0's last ask: its poll at 200 s, then a 30 s pause
    assert results["slot-1"].ran, results["slot-1"].reason
    # At 200 s slot 0 kept its need to the end of its 30 s pause and 10 of its 5 s polls, not of that pause.
    trimmed = gpu_hours_for(200.2 + 30.0 + 0.5, spec.gpus) + gpu_hours_for(10 * 5.0, spec.gpus)
    assert trimmed in [h["gpu_hours"] for h in slot_holds(url, "slot-0")]
    assert results["slot-0"].ran, results["slot-0"].reason  # its trial fits once slot 1's has settled
    assert_within_caps(ledger, spec)


@pytest.mark.parametrize("max_gpu_hours", ["0.107", "0.100"])
def test_a_slot_does_not_wait_for_a_spare_the_other_slot_cannot_give_back_at_its_next_poll(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, max_gpu_hours: str
) -> None:
    # Under a tighter cap, slot 0's spare recorded at 195 s (past that poll's need, 5 s pause) was more than
    # its trim at 200 s gave back: its need there is 30 s longer (its 30 s pause). Slot 1 waited for the
    # 0.011042 GPU-hours recorded (0.107), got back 0.002708, and gave way after all: "0.029027 GPU-hours of
    # room ... for the 0.029500 GPU-hours its trial needs". Recorded past the longest pause, the spare is
    # what the trim gives back: too little for slot 1's trial, it gives way at its first refusal.
    _, spec, _, ledger, results = run_two_slots(tmp_path, monkeypatch, caplog, max_gpu_hours)

    assert "waits: its trial fits once the other waiting slots give up" not in caplog.text
    assert not results["slot-1"].ran
    assert "slot 1 runs no trial and gives way" in results["slot-1"].reason
    assert results["slot-0"].ran, results["slot-0"].reason
    assert_within_caps(ledger, spec)


@pytest.mark.parametrize("max_gpu_hours", ["0.108", "0.1086", "0.109"])
def test_a_slot_gives_back_the_whole_spare_it_recorded_though_its_ask_between_two_polls_took_time(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, max_gpu_hours: str
) -> None:
    # Slot 0's spare recorded at 195 s was counted past the longest pause it may take (30 s), not past its
    # ask at 200 s: that ask taking 3 s (a wait for the ledger's lock), its need at the trim was 3 s longer,
    # the trim kept its whole margin and gave back 3 s less than the spare, and slot 1, which waited for the
    # spare, gave way ("0.029794 GPU-hours of room ... for the 0.030195 GPU-hours its trial needs" at
    # 0.1086). The trim now takes its margin down to give back the whole spare. Given back whole but 3 s
    # late, slot 1's need had grown by those 3 s meanwhile: at 0.108 it waited and gave way 0.000168
    # GPU-hours short. The trim gives back the GPU time it is late by too.
    from costaware.training.tuning.reservations import gpu_hours_for

    _, spec, url, ledger, results = run_two_slots(
        tmp_path, monkeypatch, caplog, max_gpu_hours, slot_0_ask_seconds_at_200=3.0
    )

    waited_for = re.search(r"slot 1 waits: .* give up the ([0-9.]+) GPU-hours", caplog.text)
    assert waited_for is not None, caplog.text
    held = [h["gpu_hours"] for h in slot_holds(url, "slot-0")]
    given_back = [before - after for before, after in pairwise(held) if after < before]
    # The whole spare, and the 3 s its trim came late by (due at 200 s, its poll after the 5 s pause at 195)
    assert given_back == [Decimal(waited_for.group(1)) + gpu_hours_for(3.0, spec.gpus)]
    assert results["slot-1"].ran, results["slot-1"].reason
    assert results["slot-0"].ran, results["slot-0"].reason
    assert_within_caps(ledger, spec)


@pytest.mark.parametrize("max_gpu_hours", ["0.1072", "0.1074"])
def test_a_slot_waits_for_a_spare_only_where_its_need_at_the_trim_fits(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, max_gpu_hours: str
) -> None:
    # Slot 1, refused at 199.5 s, compared slot 0's spare with its need then; the spare comes back at slot
    # 0's poll at 200 s, and slot 1 asks again at 200.5 s, its need a second longer. Its trial fitted by
    # 0.6 s (0.1072) and 0.7 s (0.1074): it waited, got the whole spare back, and gave way anyway, "0.029227
    # GPU-hours of room ... for the 0.0295 GPU-hours its trial needs". Counted at the trim and its next
    # poll after it, its need does not fit: it gives way at its first refusal, and slot 0 runs.
    _, spec, _, ledger, results = run_two_slots(tmp_path, monkeypatch, caplog, max_gpu_hours)

    assert "waits: its trial fits once the other waiting slots give up" not in caplog.text
    assert not results["slot-1"].ran
    assert "slot 1 runs no trial and gives way" in results["slot-1"].reason
    assert results["slot-0"].ran, results["slot-0"].reason
    assert_within_caps(ledger, spec)
