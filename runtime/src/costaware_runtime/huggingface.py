"""Hugging Face Trainer support: ``CostawareCallback`` and :func:`latest_hf_checkpoint`.

transformers is imported when ``CostawareCallback`` is first looked up, never before::

    from costaware_runtime.huggingface import CostawareCallback, latest_hf_checkpoint

    args = TrainingArguments(output_dir=str(costaware_runtime.checkpoint_dir()), save_steps=500,
                             save_total_limit=2)
    trainer = Trainer(model, args, train_dataset=data, callbacks=[CostawareCallback()])
    trainer.train(resume_from_checkpoint=latest_hf_checkpoint())

Each checkpoint the Trainer saves (``checkpoint-<global_step>/``) is committed, so the launcher pushes it.
On the preemption notice the callback asks the Trainer to save and stop at the end of the current step, then
commits that checkpoint and exits 75 (also where the Trainer skipped that save, as ``save_strategy="best"``
does for a step that is no new best: the next attempt resumes from the newest one saved).
``CostawareCallback(timer=costaware_runtime.CheckpointTimer())`` also
asks for a save whenever the provider's interval (``COSTAWARE_CHECKPOINT_EVERY_SECONDS``) has passed.

Under torchrun the ranks agree at the end of every step (one small all-reduce) and save and stop together;
rank 0 commits once every rank has written its files.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from costaware_runtime import _ranks
from costaware_runtime.checkpoints import commit, read_marker
from costaware_runtime.contract import CHECKPOINT_DIR, checkpoint_dir
from costaware_runtime.errors import ContractError
from costaware_runtime.preemption import exit_preempted, preemption_requested
from costaware_runtime.schedule import CheckpointTimer


def latest_hf_checkpoint(directory: Path | str | None = None) -> str | None:
    """The newest committed Trainer checkpoint folder, for ``trainer.train(resume_from_checkpoint=...)``.

    Returns None when there is none (train from the start). A folder the Trainer wrote but that was never
    committed (the job died while saving) is not returned.
    """
    marker = read_marker(directory)
    if marker is None:
        return None
    folder = Path(directory or checkpoint_dir()) / f"checkpoint-{marker.step}"
    return str(folder) if folder.is_dir() else None


@functools.cache
def _callback_class() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError as e:
        raise ImportError(f"CostawareCallback needs transformers: pip install transformers ({e})") from e

    class CostawareCallback(TrainerCallback):
        """Commits every checkpoint the Trainer saves; on the preemption notice, saves, commits and exits 75.

        Set ``TrainingArguments.output_dir`` to ``COSTAWARE_CHECKPOINT_DIR``: that is where the launcher
        looks for commits. ``timer``: also save at the end of a step whenever it says a checkpoint is due.
        Under torchrun give it to every rank's Trainer: its per-step agreement is a collective, and the
        ranks that call it fail with ``ContractError`` once one has not joined for ``wait_seconds`` (None:
        the process group's own timeout; give more than a save takes).
        """

        def __init__(
            self, *, timer: CheckpointTimer | None = None, wait_seconds: float | None = None
        ) -> None:
            self.stopping = False
            self.timer = timer
            self.wait_seconds = _ranks.check_wait_seconds(wait_seconds)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            preemption_requested()  # installs the SIGTERM handler before the first step
            expected = os.environ.get(CHECKPOINT_DIR)
            if expected and Path(args.output_dir).resolve() != Path(expected).resolve():
                raise ContractError(
                    f"TrainingArguments.output_dir is {args.output_dir!r} but {CHECKPOINT_DIR} is "
                    f"{expected!r}: pass output_dir=str(costaware_runtime.checkpoint_dir()) to sync them"
                )
            return control

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            # Under torchrun every rank takes the same decision (see _ranks): a save has collectives of
            # its own, and a rank that stopped alone left the others in the next step's all-reduce. The
            # interval is rank 0's, so ranks whose timers tick a step apart do not save twice.
            timer_due = self.timer is not None and _ranks.is_rank_zero() and self.timer.due()
            notice, timer_due = _ranks.any_rank([preemption_requested(), timer_due], self.wait_seconds)
            if notice:
                self.stopping = True
                control.should_save = True
                control.should_training_stop = True
            elif timer_due:
                control.should_save = True
            return control

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            # Stopped on the notice without the save it asked for (save_strategy="best" saves a new best
            # only): returning let the job go on as if trained to the end, and its half-trained model was
            # promoted.
            if self.stopping:
                exit_preempted()
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            # The Trainer calls on_save once checkpoint-<global_step>/ is complete (and old ones rotated) on
            # this rank; each rank writes its own rng_state_<rank>.pth there, so rank 0 commits only once
            # every rank has written (else the commit missed, or caught half-written, another rank's file).
            _ranks.wait_for_all(self.wait_seconds)
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                commit(args.output_dir, state.global_step, [folder])
            if self.stopping:
                # A rank that exited first failed the group: torchrun stopped the others, rank 0 committing.
                _ranks.wait_for_all(self.wait_seconds)
                exit_preempted()
            return control

    return CostawareCallback


def __getattr__(name: str) -> Any:
    if name == "CostawareCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
