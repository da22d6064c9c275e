"""One syntax for naming objects: ``module:attr``; the dotted form still works, with a DeprecationWarning."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from costaware.core.errors import ConfigurationError
from costaware.importing import import_object
from costaware.training.trainers import (
    SGDTrainer,
    resolve_trainer,
    same_trainer,
    stored_trainer,
    trainer_path,
)


def test_module_attr_imports_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert import_object("costaware.training.trainers:SGDTrainer", what="trainer") is SGDTrainer
        assert isinstance(resolve_trainer("costaware.training.trainers:SGDTrainer"), SGDTrainer)


def test_the_dotted_form_warns_with_the_new_spelling() -> None:
    with pytest.warns(DeprecationWarning, match=r"write 'costaware\.training\.trainers:SGDTrainer'"):
        assert isinstance(resolve_trainer("costaware.training.trainers.SGDTrainer"), SGDTrainer)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nodots", r"trainer must be 'package\.module:name', got 'nodots'"),
        (":SGDTrainer", r"trainer must be 'package\.module:name', got ':SGDTrainer'"),
        ("costaware.training.trainers:", r"trainer must be 'package\.module:name'"),
        ("costaware.training.trainers:Nope", r"cannot import trainer 'costaware\.training\.trainers:Nope'"),
        ("costaware.no_such_module:X", r"cannot import trainer 'costaware\.no_such_module:X'"),
    ],
)
def test_bad_paths_name_the_value(path: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        import_object(path, what="trainer")


def test_a_misspelt_name_in_a_module_that_imports_is_named_with_the_closest() -> None:
    # 'boosting_trainr' said only "module ... has no attribute 'boosting_trainr'", in every trial's log.
    with pytest.raises(ConfigurationError) as refused:
        import_object("costaware.training.tuning:boosting_trainr", what="trainer")
    assert str(refused.value) == (
        "cannot import trainer 'costaware.training.tuning:boosting_trainr': module "
        "'costaware.training.tuning' has no attribute 'boosting_trainr': did you mean "
        "'costaware.training.tuning:boosting_trainer'?"
    )


def test_a_module_whose_own_import_raises_attribute_error_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # np.float (removed in NumPy 1.24) at the module's import: a bare AttributeError, retried as if transient.
    (tmp_path / "stale_trainer_module.py").write_text(
        "import types\nX = types.SimpleNamespace().float\ndef train(**kw):\n    return 0.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError) as refused:
        import_object("stale_trainer_module:train", what="trainer")
    assert str(refused.value).startswith("cannot import trainer 'stale_trainer_module:train': ")
    assert "has no attribute 'float'" in str(refused.value)
    assert "did you mean" not in str(refused.value)  # the hint is for the name looked up only


def test_unknown_builtin_trainer_lists_the_choices() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown trainer 'sgd': use one of sklearn-sgd, "):
        resolve_trainer("sgd")


def test_stored_names_old_and_new_resolve_to_the_same_trainer_silently() -> None:
    trainer = resolve_trainer("sklearn-sgd")
    assert trainer_path(trainer) == "sklearn-sgd"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old = resolve_trainer(stored_trainer("costaware.training.trainers.SGDTrainer"))
    assert isinstance(old, SGDTrainer)
    assert same_trainer("pkg.mod.MyTrainer", "pkg.mod:MyTrainer")
    assert not same_trainer("pkg.mod.MyTrainer", "pkg.mod:OtherTrainer")


class HalfTrainer:
    """Has all but ``save`` and ``load``."""

    name, model_format = "half", "skops"

    def init_model(self, data: object, *, champion: object = None) -> None: ...
    def n_steps(self, data: object, *, warm: bool) -> int: ...
    def fit_step(self, model: object, data: object, *, step: int) -> None: ...
    def predict(self, model: object, features: object) -> None: ...


def test_a_trainer_missing_members_is_told_which() -> None:
    # The message listed all eight members, the present ones too.
    with pytest.raises(ConfigurationError, match=r":HalfTrainer lacks save, load of the Trainer protocol's"):
        resolve_trainer(f"{__name__}:HalfTrainer")
    with pytest.raises(
        ConfigurationError, match=r"lacks save, load of the Trainer protocol's members \(name, "
    ):
        resolve_trainer(HalfTrainer())  # type: ignore[arg-type]


class NoPredict(HalfTrainer):
    def save(self, model: object, path: object) -> None: ...
    def load(self, path: object) -> None: ...

    predict = None  # type: ignore[assignment]


def test_a_trainer_member_that_is_no_method_is_told_which() -> None:
    # "NoPredict lacks none of the Trainer protocol's members": it had predict, as None.
    with pytest.raises(ConfigurationError, match=r":NoPredict lacks predict \(a method, got None\) of the"):
        resolve_trainer(f"{__name__}:NoPredict")
