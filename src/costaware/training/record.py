"""What a finished training knows of how to reproduce it: the trainer, its seeds, the data and the code.

The runner adds :func:`training_record` to its result, so the task that records the run's outcome needs no
trainer of its own: for ``RemoteTrainingOperator`` the trainer ran in another image (whose libraries,
seeds and trainer class the worker may not have).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from typing import Any

#: Libraries whose version changes what a trainer produces.
MODEL_LIBRARIES = ("numpy", "pandas", "scikit-learn", "xgboost", "lightgbm")
SEED_NAMES = ("seed", "random_state", "random_seed")
PACKAGE = "airflow-provider-costaware"


def package_version() -> str:
    """The installed version of airflow-provider-costaware (the module's version when run from source)."""
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        from costaware import __version__

        return f"{__version__} (source)"


def trainer_seeds(trainer: Any) -> dict[str, int]:
    """Every seed a trainer uses: its ``seed`` attribute and seed-like keys of its ``params``."""
    seeds: dict[str, int] = {}
    if isinstance(getattr(trainer, "seed", None), int):
        seeds["seed"] = int(trainer.seed)
    params = getattr(trainer, "params", None)
    if isinstance(params, Mapping):
        for name in SEED_NAMES:
            if isinstance(params.get(name), int):
                seeds[f"params.{name}"] = int(params[name])
    return seeds


def iterations_of(trainer: Any, steps: int) -> tuple[int, str]:
    """Boosting rounds (steps x rounds per step) for boosters, else epochs (one per step)."""
    per_step = getattr(trainer, "rounds_per_step", None) or getattr(trainer, "trees_per_step", None)
    if isinstance(per_step, int) and per_step > 0:
        return steps * per_step, "rounds"
    return steps, "epochs"


def training_record(
    trainer: Any,
    *,
    trainer_name: str,
    trainer_params: Mapping[str, Any],
    steps: int,
    data_fingerprint: str,
) -> dict[str, Any]:
    """The reproducibility facts of one training, as JSON: what ``runs show`` prints of a run.

    Args:
        trainer: The trainer that trained (its seeds and steps' size are read from it).
        trainer_name: Its name as the model store keeps it (built-in name or ``module:Class``).
        trainer_params: The parameters it was built with.
        steps: The steps it trained.
        data_fingerprint: SHA-256 over the training data it read.
    """
    from costaware.core.fingerprint import library_versions

    iterations, unit = iterations_of(trainer, steps)
    return {
        "trainer": trainer_name,
        "trainer_params": dict(trainer_params),
        "seeds": trainer_seeds(trainer),
        "iterations": iterations,
        "iteration_unit": unit,
        "data_fingerprint": data_fingerprint,
        "package_version": package_version(),
        "libraries": {k: v for k, v in library_versions(MODEL_LIBRARIES).items() if v != "absent"},
    }
