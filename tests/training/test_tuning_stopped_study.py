"""A slot that finds its study stopped, outside Airflow: it records the time to read the stop, not a load."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import optuna
import pytest
from test_tuning_trial import InstantTrainer, SteppedMeter, study_spec

from costaware import Ledger
from costaware.training.tuning import EntryOwner, create_study, run_trial
from costaware.training.tuning.study import STOP_ATTR, TRIAL_ATTR

STOP = {"reason": "budget", "message": "study stopped: its budget is spent"}


def _stopped_study(tmp_path: Any, name: str) -> tuple[str, Ledger, Any]:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = study_spec(name, max_usd="1000", max_trials=5, fallback_trial_seconds=2.0)
    create_study(url, ledger, spec)
    optuna.load_study(study_name=name, storage=url).set_user_attr(STOP_ATTR, STOP)
    return url, ledger, spec


def _slow_trials(monkeypatch: pytest.MonkeyPatch, meter: SteppedMeter) -> None:
    """Reading the study's trials takes 30 s on the slot's clock (a far study store, a long study)."""
    get_trials = optuna.study.Study.get_trials

    def slow(self: optuna.study.Study, *args: Any, **kwargs: Any) -> Any:
        meter.now += 30.0
        return get_trials(self, *args, **kwargs)

    monkeypatch.setattr(optuna.study.Study, "get_trials", slow)


def test_a_slot_that_finds_the_study_stopped_records_no_load_of_its_trials(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A driver calling slots after the study stopped: each loaded the study's trials before it read the stop,
    # and recorded that load ($30 at $1 a second) past the study's cap. Its stop is read first now.
    url, ledger, spec = _stopped_study(tmp_path, "after-stop")
    meter = SteppedMeter()
    _slow_trials(monkeypatch, meter)
    result = run_trial(
        storage_url=url, ledger=ledger, study_name="after-stop", trainer=InstantTrainer,
        holder="after-stop/r1/trial/0", slot=0, meter=meter,
        settle_as=EntryOwner(dag_id="after-stop", run_id="r1", map_index=0),
    )  # fmt: skip
    assert not result.ran and not result.goes_on and result.reason == STOP["message"]
    (skipped,) = [row for row in ledger.entries(dag_id="after-stop") if row["outcome"] == "skipped"]
    assert skipped["usd"] == Decimal(0) and skipped["note"] == STOP["message"]
    assert ledger.spent(spec.budget_scope) == Decimal(0)


def test_a_slot_whose_trial_is_still_running_in_a_stopped_study_loads_it_to_resume_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stop read first must not turn away a retry: a trial its holder left running is trained again.
    url, ledger, _ = _stopped_study(tmp_path, "resumed")
    study = optuna.load_study(study_name="resumed", storage=url)
    left = study.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
    left.set_user_attr(TRIAL_ATTR, {"holder": "resumed/r1/trial/0", "state": "running"})
    calls = []
    monkeypatch.setattr(optuna.study.Study, "get_trials", _counted(optuna.study.Study.get_trials, calls))
    result = run_trial(
        storage_url=url, ledger=ledger, study_name="resumed", trainer=InstantTrainer,
        holder="resumed/r1/trial/0", slot=0, meter=SteppedMeter(),
        settle_as=EntryOwner(dag_id="resumed", run_id="r1", map_index=0),
    )  # fmt: skip
    assert calls, "the study was not loaded"
    assert result.ran, result.reason


def _counted(function: Any, calls: list[int]) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return function(*args, **kwargs)

    return counted


@pytest.mark.parametrize("own_trial_running", [False, True], ids=["stopped", "resumed"])
def test_a_slot_given_the_loaded_study_reads_its_stop_before_it_holds_anything(
    tmp_path: Any, own_trial_running: bool
) -> None:
    # Given the study as loaded (loaded=...), the slot held its time first and found the stop only after: a
    # hold written, settled and recorded for a study that was over. Its stop is looked for first, as the
    # slot that loads the study itself does; a trial its holder left running is still resumed.
    from test_tuning_slot_hold import slot_holds

    from costaware.training.tuning import load_study

    url, ledger, spec = _stopped_study(tmp_path, "loaded-stop")
    holder = "loaded-stop/r1/trial/0"
    if own_trial_running:
        study = optuna.load_study(study_name="loaded-stop", storage=url)
        left = study.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
        left.set_user_attr(TRIAL_ATTR, {"holder": holder, "state": "running"})
    result = run_trial(
        storage_url=url, ledger=ledger, study_name="loaded-stop", trainer=InstantTrainer,
        holder=holder, slot=0, meter=SteppedMeter(), loaded=load_study(url, "loaded-stop", 0, holder),
        settle_as=EntryOwner(dag_id="loaded-stop", run_id="r1", map_index=0),
    )  # fmt: skip
    if own_trial_running:
        assert result.ran, result.reason
        return
    assert not result.ran and not result.goes_on and result.reason == STOP["message"]
    assert slot_holds(url, holder) == []
    (skipped,) = [row for row in ledger.entries(dag_id="loaded-stop") if row["outcome"] == "skipped"]
    assert skipped["note"] == STOP["message"] and skipped["reservation_id"] is None
    assert ledger.spent(spec.budget_scope) == Decimal(0)
