"""The rung pruner is a module-level Optuna pruner whose decision lands in the trial's attributes."""

from __future__ import annotations

import optuna
import pytest

from costaware.core.errors import ConfigurationError
from costaware.training.tuning import PRUNING_ATTR, RungSuccessiveHalvingPruner
from costaware.training.tuning.optuna_glue import pruning_note


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
