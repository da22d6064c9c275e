"""One trial slot's money: what the slot spends before its reservation is granted is reserved too."""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from typing import Any

from costaware import Ledger
from costaware.core.tuning import RungSchedule, StudySpec, TuningCaps, parse_search_space
from costaware.training.tuning import EntryOwner, create_study, run_trial


class SteppedMeter:
    """A trial clock that moves only when told: the slot's time is exact, whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class InstantTrainer:
    def __init__(self, params: dict[str, Any]) -> None:
        self.x = float(params["x"])

    def advance(self, resource: int) -> float:
        return -((self.x - 0.3) ** 2) + resource / 1000


def test_a_slot_that_waits_for_money_reserves_its_wait_and_settles_within_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = StudySpec(
        study_name="waits",
        direction="maximize",
        search_space=parse_search_space({"x": {"type": "float", "low": 0.0, "high": 1.0}}),
        schedule=RungSchedule.geometric(1, 4, 2),
        caps=TuningCaps.create(max_usd=Decimal("10.00"), max_trials=5),
        sampler="random",
        scope={"project": "waits"},
        usd_per_hour=Decimal(3600),  # $1 a second of the slot's clock
        fallback_trial_seconds=2.0,
        slack_seconds=0.5,
    )
    create_study(url, ledger, spec)
    # Another trial of the study holds $9: this slot's $2.50 does not fit until it settles.
    other = ledger.reserve(spec.budget_scope, Decimal("9.00"), holder="other-trial")
    meter = SteppedMeter()

    def other_trial_finishes() -> None:
        time.sleep(0.3)
        meter.now += 5.0  # the waiting slot's machine was paid five seconds meanwhile
        ledger.settle(other.id, Decimal("0.50"))

    finisher = threading.Thread(target=other_trial_finishes)
    finisher.start()
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
    finisher.join()

    trial = result.trial
    assert result.ran and trial is not None
    # Reserved: the five seconds waited, the two-second estimate and the half-second slack.
    assert trial.reserved_usd == Decimal("7.500000")
    assert trial.settled_usd == Decimal("5.000000") and trial.settled_usd <= trial.reserved_usd
    assert trial.fidelity == 4  # the wait did not eat the training's money: trained in full
    assert ledger.spent(spec.budget_scope) == Decimal("5.000000")
