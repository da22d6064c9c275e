"""XGBoost and LightGBM callbacks: checkpoint every N rounds or by time, and stop on preemption.

The step of a boosting checkpoint is the number of rounds done. Resume with::

    done = costaware_runtime.latest_step() or 0
    booster = xgboost.train(params, dtrain, num_boost_round=total - done, xgb_model=latest_model_path(),
                            callbacks=[XGBoostCheckpoint(every_rounds=10)])

(``lightgbm.train(..., init_model=latest_model_path(), callbacks=[LightGBMCheckpoint(10)])`` likewise.)
To save at the interval the provider asks for (``COSTAWARE_CHECKPOINT_EVERY_SECONDS``, see
:class:`~costaware_runtime.schedule.CheckpointTimer`), pass ``timer=CheckpointTimer()``, with
``every_rounds=None`` to save by time only.
xgboost is imported when ``XGBoostCheckpoint`` is first looked up; LightGBM never needs importing here.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

from costaware_runtime import _files
from costaware_runtime.checkpoints import FOLDER_PREFIX, checkpoint_folder, commit, prune, read_marker
from costaware_runtime.contract import checkpoint_dir
from costaware_runtime.preemption import exit_preempted, preemption_requested
from costaware_runtime.schedule import CheckpointTimer

XGBOOST_FILE = "model.json"
LIGHTGBM_FILE = "model.txt"


def latest_model_path(directory: Path | str | None = None) -> Path | None:
    """The booster file of the newest committed checkpoint (for ``xgb_model=``, ``init_model=``), or None."""
    marker = read_marker(directory)
    if marker is None:
        return None
    folder = Path(directory) if directory is not None else checkpoint_dir()
    for name in (XGBOOST_FILE, LIGHTGBM_FILE):
        relative = f"{FOLDER_PREFIX}{marker.step}/{name}"
        if relative in {file.path for file in marker.files}:
            return folder / relative
    return None


def _check_every(every_rounds: int | None, timer: CheckpointTimer | None) -> int | None:
    if every_rounds is None and timer is not None:
        return None
    if type(every_rounds) is not int or every_rounds < 1:
        raise ValueError(
            f"every_rounds={every_rounds!r} is not a number of rounds: use a whole number >= 1 (None only "
            "with timer=CheckpointTimer(), to save by time)"
        )
    return every_rounds


def _due(rounds: int, every_rounds: int | None, timer: CheckpointTimer | None) -> bool:
    """Whether this round saves: its count of rounds came round, or the timer says the interval passed."""
    by_rounds = every_rounds is not None and rounds % every_rounds == 0
    return (timer is not None and timer.due()) or by_rounds


def _save(data: bytes, name: str, rounds: int, directory: Path | str | None, keep: int) -> None:
    began = time.monotonic()
    path = checkpoint_folder(rounds, directory) / name
    _files.write_bytes(path, data)
    commit(directory, rounds, [path], save_seconds=time.monotonic() - began)
    prune(directory, keep)


class LightGBMCheckpoint:
    """A ``lightgbm.train`` callback: save every ``every_rounds`` rounds; on preemption save and exit 75.

    Args:
        every_rounds: Rounds between checkpoints (None: by ``timer`` only).
        directory: The checkpoint folder; default ``COSTAWARE_CHECKPOINT_DIR``.
        keep: How many checkpoints to keep locally.
        timer: Also save whenever it says a checkpoint is due (the provider's interval).
    """

    order = 40  # after LightGBM's own early stopping (30), so a stopped round is not saved twice
    before_iteration = False

    def __init__(
        self,
        every_rounds: int | None = 10,
        *,
        directory: Path | str | None = None,
        keep: int = 2,
        timer: CheckpointTimer | None = None,
    ) -> None:
        self.every_rounds = _check_every(every_rounds, timer)
        self.timer = timer
        self.directory = directory
        self.keep = keep
        preemption_requested()  # built in the main thread before training: install the handler now

    def __call__(self, env: Any) -> None:
        rounds = env.iteration + 1  # iteration counts from 0 and on from init_model's rounds
        preempted = preemption_requested()
        if _due(rounds, self.every_rounds, self.timer) or preempted:
            _save(env.model.model_to_string().encode(), LIGHTGBM_FILE, rounds, self.directory, self.keep)
        if preempted:
            exit_preempted()


@functools.cache
def _xgboost_class() -> type:
    try:
        from xgboost.callback import TrainingCallback
    except ImportError as e:
        raise ImportError(f"XGBoostCheckpoint needs xgboost: pip install xgboost ({e})") from e

    class XGBoostCheckpoint(TrainingCallback):
        """An ``xgboost.train`` callback: save every ``every_rounds`` rounds; on preemption save, exit 75.

        Args:
            every_rounds: Rounds between checkpoints (None: by ``timer`` only).
            directory: The checkpoint folder; default ``COSTAWARE_CHECKPOINT_DIR``.
            keep: How many checkpoints to keep locally.
            timer: Also save whenever it says a checkpoint is due (the provider's interval).
        """

        def __init__(
            self,
            every_rounds: int | None = 10,
            *,
            directory: Path | str | None = None,
            keep: int = 2,
            timer: CheckpointTimer | None = None,
        ) -> None:
            super().__init__()
            self.every_rounds = _check_every(every_rounds, timer)
            self.timer = timer
            self.directory = directory
            self.keep = keep
            preemption_requested()

        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            rounds = model.num_boosted_rounds()  # counts init model's rounds too, unlike epoch
            preempted = preemption_requested()
            if _due(rounds, self.every_rounds, self.timer) or preempted:
                _save(
                    bytes(model.save_raw(raw_format="json")), XGBOOST_FILE, rounds, self.directory, self.keep
                )
            if preempted:
                exit_preempted()
            return False

    return XGBoostCheckpoint


def __getattr__(name: str) -> Any:
    if name == "XGBoostCheckpoint":
        return _xgboost_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
