"""Trainers by name: the built-in names, ``"pkg.mod:Class"`` paths, and the names the model store keeps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from costaware.core.errors import ConfigurationError, check_keywords, did_you_mean
from costaware.importing import import_object
from costaware.training.trainers.base import Trainer

#: The built-in trainers by name, each the ``module:Class`` where it is defined (``trainer_path`` maps an
#: instance back to its name by this path). ``costaware.training.trainers:<Class>`` names them as well.
BUILT_IN: dict[str, str] = {
    "sklearn-sgd": "costaware.training.trainers.sklearn:SGDTrainer",
    "sklearn-hgb": "costaware.training.trainers.sklearn:HistGradientBoostingTrainer",
    "xgboost": "costaware.training.trainers.boosters:XGBoostTrainer",
    "lightgbm": "costaware.training.trainers.boosters:LightGBMTrainer",
}


def resolve_trainer(trainer: str | Trainer, params: Mapping[str, Any] | None = None) -> Trainer:
    """A trainer from a built-in name, a ``"pkg.mod:Class"`` path (built with ``params``), or an instance."""
    if not isinstance(trainer, str):
        if params:
            raise ConfigurationError("trainer_params only apply when the trainer is given by name")
        if not isinstance(trainer, Trainer):
            raise ConfigurationError(f"trainer {trainer!r} lacks {_missing_members(trainer)}")
        return trainer
    path = check_trainer_choice(trainer, params)
    cls = import_object(path, what="trainer")
    try:
        built = cls(**dict(params or {}))
    except TypeError as e:
        raise ConfigurationError(f"trainer {trainer!r} does not take these trainer_params: {e}") from e
    if not isinstance(built, Trainer):
        raise ConfigurationError(f"{path} lacks {_missing_members(built)}")
    return built


def _missing_members(candidate: object) -> str:
    """Which of the Trainer protocol's members ``candidate`` lacks, and all of them, for the message."""
    # Read from the protocol itself: its attributes, then its methods, as written there.
    methods = [name for name, value in vars(Trainer).items() if not name.startswith("_") and callable(value)]
    members = [*Trainer.__annotations__, *methods]
    missing = [m for m in members if not hasattr(candidate, m)]
    # A method set to something else (predict = None) is there, and still not one: "lacks none" before.
    missing += [
        f"{m} (a method, got {getattr(candidate, m)!r})"
        for m in methods
        if hasattr(candidate, m) and not callable(getattr(candidate, m))
    ]
    return f"{', '.join(missing) or 'none'} of the Trainer protocol's members ({', '.join(members)})"


def check_trainer_choice(trainer: str, params: Mapping[str, Any] | None = None) -> str:
    """Check what can be checked of a trainer given by name without building it; return its path.

    A built-in name must be spelt right and take each of ``params``' names (a typo found here costs nothing;
    found in a remote job it costs a started, billed job). A ``"pkg.mod:Class"`` path is not imported: the
    job's image holds that code, which this machine may not have.

    Raises:
        ConfigurationError: an unknown built-in name, or a parameter a built-in trainer does not take; each
            message names the closest known one.
    """
    path = BUILT_IN.get(trainer, trainer)
    if ":" not in path and "." not in path:
        raise ConfigurationError(
            f"unknown trainer {trainer!r}{did_you_mean(trainer, BUILT_IN)}: use one of {', '.join(BUILT_IN)} "
            "or a path like 'pkg.mod:MyTrainer'"
        )
    if trainer in BUILT_IN:
        check_keywords(
            import_object(path, what="trainer"),
            dict(params or {}),
            field="trainer_params",
            of=f"trainer {trainer!r}",
        )
    return path


def trainer_path(trainer: Trainer) -> str:
    """How the model store names a trainer: its built-in name, else ``module:Class``."""
    path = f"{type(trainer).__module__}:{type(trainer).__qualname__}"
    return next((name for name, p in BUILT_IN.items() if p == path), path)


def stored_trainer(name: str) -> str:
    """A trainer name read from the model store, as :func:`resolve_trainer` takes it.

    Versions stored before ``module:Class`` carry the dotted form; they resolve without a warning.
    """
    if name in BUILT_IN or ":" in name:
        return name
    module, _, attr = name.rpartition(".")
    return f"{module}:{attr}" if module else name


def same_trainer(a: str, b: str) -> bool:
    """Whether two stored trainer names name the same trainer (dotted and ``module:Class`` alike)."""
    return stored_trainer(a) == stored_trainer(b)
