"""The rung pruner is a module-level Optuna pruner whose decision lands in the trial's attributes."""

from __future__ import annotations

import optuna
import pytest

from costaware.core.errors import ConfigurationError
from costaware.training.tuning import PRUNING_ATTR, RungSuccessiveHalvingPruner, hyperband_pruner
from costaware.training.tuning.optuna_glue import pruning_note
from costaware.training.tuning.study import TRIAL_ATTR


def _study() -> optuna.study.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = RungSuccessiveHalvingPruner((1, 2, 4), reduction_factor=2, direction="maximize")
    return optuna.create_study(direction="maximize", pruner=pruner)


def test_the_top_half_moves_up_and_the_rest_is_pruned_with_the_reason() -> None:
    study = _study()
    decisions = []
    for value in (0.9, 0.5, 0.95, 0.1):
        trial = study.ask()
        trial.report(value, 1)
        pruned = trial.should_prune()
        decisions.append((pruned, pruning_note(study, trial)))
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    assert [p for p, _ in decisions] == [False, True, False, True]
    assert decisions[0][1] == ""  # nothing is written for a trial that moves up
    assert decisions[1][1] == "pruned at 1: 0.5000 is not in the top 1/2 of 2 result(s) at this rung"
    assert decisions[3][1] == "pruned at 1: 0.1000 is not in the top 1/2 of 4 result(s) at this rung"
    assert study.trials[1].user_attrs[PRUNING_ATTR] == decisions[1][1]


def test_a_trial_cut_after_a_rung_holds_no_place_there_but_keeps_the_one_it_went_on_from() -> None:
    study = _study()
    cut = study.ask()
    for rung, value in ((1, 0.9), (2, 0.9)):
        cut.report(value, rung)
        assert not cut.should_prune()
    cut.set_user_attr(TRIAL_ATTR, {"state": "cut"})  # its money ran out before rung 4
    study.tell(cut, state=optuna.trial.TrialState.PRUNED)

    going = study.ask()
    going.report(0.8, 1)
    assert going.should_prune()  # at rung 1 the cut trial went on: it keeps its place
    assert (
        pruning_note(study, going) == "pruned at 1: 0.8000 is not in the top 1/2 of 2 result(s) at this rung"
    )
    study.tell(going, state=optuna.trial.TrialState.PRUNED)

    decisions = []
    for value in (0.7, 0.6):  # at rung 2 it cannot go on: the best of the others takes the place
        trial = study.ask()
        trial.report(value, 2)
        decisions.append(trial.should_prune())
    assert decisions == [False, True]
    assert pruning_note(study, trial) == (
        "pruned at 2: 0.6000 is not in the top 1/2 of 3 result(s) at this rung (1 of them cut before the "
        "next rung for money or time, holding no place)"
    )


def test_the_last_rung_is_never_pruned() -> None:
    study = _study()
    for value in (0.9, 0.1):
        trial = study.ask()
        trial.report(value, 4)
        assert not trial.should_prune()
        study.tell(trial, value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (((), 2, "maximize"), "needs at least one rung, got none"),
        (((1, 2), 1, "maximize"), "reduction_factor must be >= 2, got 1"),
        (((1, 2), 2, "up"), "direction must be 'maximize' or 'minimize', got 'up'"),
    ],
)
def test_bad_arguments_name_the_value(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RungSuccessiveHalvingPruner(*args)  # type: ignore[arg-type]


def test_hyperband_over_the_rungs_has_one_bracket_per_rung_the_last_one_unpruned() -> None:
    """12/36/100 with eta 3: Optuna's own min_resource=12 would give two brackets, both pruning at 36; from 11
    the third bracket's first decision is at 99, so it trains in full (Hyperband's plain random search)."""
    pruner = hyperband_pruner((12, 36, 100), 3)
    study = optuna.create_study(direction="maximize", pruner=pruner)
    trial = study.ask()
    trial.report(0.5, 12)
    trial.should_prune()  # Optuna sets its brackets up on the first call
    assert (pruner._min_resource, pruner._n_brackets) == (11, 3)
    assert hyperband_pruner((20, 60, 300), 3)._min_resource == 20  # a long last step keeps the first rung
    with pytest.raises(ConfigurationError, match="reduction_factor must be >= 2, got 1"):
        hyperband_pruner((1, 3), 1)
