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

For one process only: under distributed XGBoost (Dask, Spark, ``xgboost.collective``) or LightGBM the workers
do not agree when to stop (no collective here, unlike ``costaware_runtime.torch``). A worker that hears the
notice exits alone and the others hang in the next round until the grace period ends (runtime/README.md).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from costaware_runtime import _files
from costaware_runtime.checkpoints import checkpoint_folder, commit, held_file, prune, read_marker
from costaware_runtime.contract import process_rank
from costaware_runtime.preemption import exit_preempted, preemption_requested
from costaware_runtime.schedule import CheckpointTimer

XGBOOST_FILE = "model.json"
LIGHTGBM_FILE = "model.txt"


def latest_model_path(directory: Path | str | None = None) -> Path | None:
    """The booster file of the newest committed checkpoint (for ``xgb_model=``, ``init_model=``), or None.

    Raises:
        ContractError: The newest checkpoint holds no booster file (another helper saved it).
    """
    marker = read_marker(directory)
    if marker is None:
        return None
    # Committed by something else: training from scratch here would lose the restored rounds.
    hint = "it was saved by another helper (save_bytes, torch.save): load it with that one"
    return held_file(marker, [XGBOOST_FILE, LIGHTGBM_FILE], directory, hint=hint)


def _check_every(every_rounds: int | None, timer: CheckpointTimer | None) -> int | None:
    if every_rounds is None and timer is not None:
        return None
    if type(every_rounds) is not int or every_rounds < 1:
        raise ValueError(
            f"every_rounds={every_rounds!r} is not a number of rounds: use a whole number >= 1 (None only "
            "with timer=CheckpointTimer(), to save by time)"
        )
    return every_rounds


class _RoundSaver:
    """What both callbacks do after a round: save when it is due or the notice came, then exit on the notice.

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
        super().__init__()  # the framework's base class, when there is one (XGBoost's TrainingCallback)
        self.every_rounds = _check_every(every_rounds, timer)
        self.timer = timer
        self.directory = directory
        self.keep = keep
        preemption_requested()  # built in the main thread before training: install the handler now

    def _after_round(self, rounds: int, serialize: Callable[[], bytes], name: str) -> None:
        preempted = preemption_requested()
        by_rounds = self.every_rounds is not None and rounds % self.every_rounds == 0
        due = (self.timer is not None and self.timer.due()) or by_rounds or preempted
        # Rank 0 alone: every worker of a distributed training saving into one folder set the marker back
        # to the slowest one's round, and pruned the newer round rank 0 had committed.
        if due and process_rank() == 0:
            began = time.monotonic()
            path = checkpoint_folder(rounds, self.directory) / name
            _files.write_bytes(path, serialize())
            commit(self.directory, rounds, [path], save_seconds=time.monotonic() - began)
            prune(self.directory, self.keep)
        if preempted:
            exit_preempted()


class LightGBMCheckpoint(_RoundSaver):
    """A ``lightgbm.train`` callback: save every ``every_rounds`` rounds; on preemption save and exit 75.

    Arguments as :class:`_RoundSaver`'s (``timer=CheckpointTimer()``: also by time).
    """

    order = 40  # after LightGBM's own early stopping (30), so a stopped round is not saved twice
    before_iteration = False

    def __call__(self, env: Any) -> None:
        # iteration counts from 0 and on from init_model's rounds; the model is serialized only to save
        self._after_round(env.iteration + 1, lambda: env.model.model_to_string().encode(), LIGHTGBM_FILE)


@functools.cache
def _xgboost_class() -> type:
    try:
        from xgboost.callback import TrainingCallback
    except ImportError as e:
        raise ImportError(f"XGBoostCheckpoint needs xgboost: pip install xgboost ({e})") from e

    class XGBoostCheckpoint(_RoundSaver, TrainingCallback):
        """An ``xgboost.train`` callback: save every ``every_rounds`` rounds; on preemption save, exit 75.

        Arguments as :class:`_RoundSaver`'s (``timer=CheckpointTimer()``: also by time).
        """

        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            # num_boosted_rounds counts the init model's rounds too, unlike epoch
            rounds = model.num_boosted_rounds()
            self._after_round(rounds, lambda: bytes(model.save_raw(raw_format="json")), XGBOOST_FILE)
            return False

    return XGBoostCheckpoint


def __getattr__(name: str) -> Any:
    if name == "XGBoostCheckpoint":
        return _xgboost_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
