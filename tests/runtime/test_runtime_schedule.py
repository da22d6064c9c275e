"""CheckpointTimer: a checkpoint due every ``COSTAWARE_CHECKPOINT_EVERY_SECONDS`` of the job's own clock."""

from __future__ import annotations

import pytest
from costaware_runtime import CheckpointTimer, ContractError, checkpoint_every_seconds


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_due_once_per_interval_counted_from_the_last_due(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTAWARE_CHECKPOINT_EVERY_SECONDS", "657")
    clock = Clock()
    timer = CheckpointTimer(clock=clock)
    assert timer.every_seconds == 657.0
    clock.now += 656.9
    assert not timer.due()
    clock.now += 0.1
    assert timer.due() and not timer.due()  # it starts over at the call that said so
    clock.now += 657.0
    assert timer.due()


def test_the_interval_given_wins_and_without_either_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTAWARE_CHECKPOINT_EVERY_SECONDS", "657")
    assert CheckpointTimer(60).every_seconds == 60.0
    monkeypatch.delenv("COSTAWARE_CHECKPOINT_EVERY_SECONDS")
    assert CheckpointTimer().every_seconds == 300.0
    assert CheckpointTimer(default_seconds=900).every_seconds == 900.0
    assert checkpoint_every_seconds() is None and checkpoint_every_seconds(5.0) == 5.0


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True])
def test_a_bad_interval_names_the_value(bad: object) -> None:
    with pytest.raises(ContractError, match=r"is not seconds > 0: pass every_seconds=600 \(a number\)"):
        CheckpointTimer(bad)  # type: ignore[arg-type]


def test_an_interval_given_as_text_is_told_so() -> None:
    # "'300' is not seconds > 0" contradicted itself.
    with pytest.raises(ContractError, match=r"checkpoint interval '300' is text, not a number of seconds"):
        CheckpointTimer("300")  # type: ignore[arg-type]


def test_a_bad_variable_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTAWARE_CHECKPOINT_EVERY_SECONDS", "often")
    with pytest.raises(ContractError, match="COSTAWARE_CHECKPOINT_EVERY_SECONDS='often' is not a checkpoint"):
        CheckpointTimer()
