"""PyTorch checkpoints in ``COSTAWARE_CHECKPOINT_DIR``: :func:`save` and :func:`load`.

torch is imported inside the functions; the runtime never requires it. A checkpoint is one file,
``checkpoint-<step>/torch.pt``, written to a temporary name and renamed, then committed (marker last); the
two newest are kept locally. Resume::

    from costaware_runtime import torch as ct

    timer = costaware_runtime.CheckpointTimer()
    step = ct.load(model, optimizer) or 0
    for step in range(step, total_steps):
        train_one_step()
        save, stop = ct.checkpoint_decision(timer)  # the same on every rank under torchrun
        if save or (step + 1) % 500 == 0:
            ct.save(model, optimizer, step=step + 1)  # rank 0 writes; the other ranks return None
        if stop:
            ct.exit_preempted()  # every rank exits once rank 0 has committed
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from costaware_runtime import _files, _ranks, preemption
from costaware_runtime.checkpoints import checkpoint_folder, commit, held_file, prune, read_marker
from costaware_runtime.errors import ContractError
from costaware_runtime.schedule import CheckpointTimer

CHECKPOINT_FILE = "torch.pt"


class Decision(NamedTuple):
    """What to do after this step: ``save`` a checkpoint, then ``stop`` (exit 75); stop implies save."""

    save: bool
    stop: bool


def checkpoint_decision(
    timer: CheckpointTimer | None = None, *, wait_seconds: float | None = None
) -> Decision:
    """Whether to save and stop after this step, the same on every rank: call it on each rank every step.

    ``stop`` is true once any rank has the preemption notice; ``save`` as well, or when ``timer`` (rank 0's:
    ranks whose timers tick a step apart would save twice) says a checkpoint is due. Under torchrun the
    ranks agree with one small all-reduce: a rank deciding alone (``cr.preemption_requested()``) stopped at
    its step while the others waited for it in the next one's gradient all-reduce, until torchrun killed
    the group. In a single process it is ``cr.preemption_requested()`` and ``timer.due()``, nothing more.

    A rank that never calls it leaves the others waiting in it: they fail with ``ContractError`` after
    ``wait_seconds`` (None: the process group's own timeout, ``init_process_group(timeout=...)``). Give
    more than rank 0 may spend alone between two calls (its save, an evaluation of its own).
    """
    timer_due = timer is not None and _ranks.is_rank_zero() and timer.due()
    notice, timer_due = _ranks.any_rank([preemption.preemption_requested(), timer_due], wait_seconds)
    return Decision(save=notice or timer_due, stop=notice)


def exit_preempted(*, wait_seconds: float | None = None) -> NoReturn:
    """Exit 75 on every rank together, once rank 0 has saved; ``cr.exit_preempted()`` in a single process.

    Call it on every rank when :func:`checkpoint_decision` says stop. A rank that exited first failed the
    group, and torchrun stopped the others, rank 0 in the middle of its save. ``wait_seconds``: as for
    :func:`checkpoint_decision` (give more than rank 0's save takes).
    """
    _ranks.wait_for_all(wait_seconds)
    preemption.exit_preempted()


def save(
    model: Any,
    optimizer: Any = None,
    *,
    step: int,
    scaler: Any = None,
    directory: Path | str | None = None,
    keep: int = 2,
    **extra: Any,
) -> Path | None:
    """Save and commit the state of ``model`` (and ``optimizer``, ``scaler``) as the checkpoint of ``step``.

    Args:
        model: A ``torch.nn.Module``; DistributedDataParallel and ``torch.compile`` wrappers are unwrapped.
        optimizer: Its optimizer, whose state is saved too.
        step: The step training resumes after.
        scaler: A ``torch.amp.GradScaler``, or anything with ``state_dict()``.
        directory: The checkpoint folder; default ``COSTAWARE_CHECKPOINT_DIR``.
        keep: How many checkpoints to keep locally (the launcher may still be uploading the previous one).
        **extra: More state to save (tensors, numbers, strings, lists and dicts of them): see
            :func:`load_state`.

    Returns:
        The file written, or None on a distributed rank other than 0 (only rank 0 saves).

    Raises:
        ContractError: A value of ``extra`` would not load back with torch's weights-only loader (a numpy
            number, ``np.random.get_state()``); nothing is saved.
    """
    torch = _torch()

    began = time.monotonic()
    if (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_rank()
    ):
        return None
    _check_extra(torch, extra)
    state: dict[str, Any] = {"step": step, "model": _unwrap(model).state_dict(), "extra": extra}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    path = checkpoint_folder(step, directory) / CHECKPOINT_FILE
    with _files.replacing(path) as temp:
        torch.save(state, temp)
    commit(directory, step, [path], save_seconds=time.monotonic() - began)
    prune(directory, keep)
    return path


def load_state(
    map_location: Any = None, *, directory: Path | str | None = None, weights_only: bool = True
) -> dict[str, Any] | None:
    """The saved state of the newest committed checkpoint (keys ``step``, ``model``, ``extra``, ...), or None.

    Raises ``ContractError`` when the newest checkpoint holds no ``torch.pt`` (another helper saved it).

    ``weights_only=True`` (torch's safe loader) allows tensors and plain Python values only; pass False
    only for checkpoints you trust that hold other objects.
    """
    torch = _torch()

    marker = read_marker(directory)
    if marker is None:
        return None
    # Committed by something else (a Hugging Face Trainer, save_bytes): starting over would lose it.
    hint = "it was saved by another helper (save_bytes, a Hugging Face Trainer): load it with that one"
    path = held_file(marker, [CHECKPOINT_FILE], directory, hint=hint)
    state: dict[str, Any] = torch.load(path, map_location=map_location, weights_only=weights_only)
    return state


def load(
    model: Any,
    optimizer: Any = None,
    scaler: Any = None,
    map_location: Any = None,
    *,
    directory: Path | str | None = None,
) -> int | None:
    """Load the newest committed checkpoint into ``model`` (and ``optimizer``, ``scaler``).

    Returns:
        The step to resume after, or None when there is no checkpoint (start from the beginning).
    """
    state = load_state(map_location, directory=directory)
    if state is None:
        return None
    _unwrap(model).load_state_dict(state["model"])
    if optimizer is not None and "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    # A disabled scaler (bfloat16, the CPU) saves {}: nothing to load, and an enabled one would refuse it.
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    return int(state["step"])


def _check_extra(torch: Any, extra: dict[str, Any]) -> None:
    """Refuse a value of ``extra`` that :func:`load_state` could not read back.

    torch.save pickles anything, but the loader is weights-only: a numpy number saved fine and failed only
    on resume after a preemption, so every retry crashed as a code error.
    """
    for key, value in extra.items():
        if isinstance(value, torch.Tensor):
            continue  # always loadable; not worth copying
        buffer = io.BytesIO()
        torch.save(value, buffer)
        buffer.seek(0)
        try:
            torch.load(buffer, weights_only=True, map_location="cpu")  # no second copy on the GPU
        except Exception as e:  # an UnpicklingError that names the refused global
            found = re.search(r"GLOBAL (\S+) was not an allowed global", str(e))
            refused = found.group(1) if found else f"{type(e).__name__}: {e}"
            raise ContractError(
                f"extra {key}= holds a {type(value).__module__}.{type(value).__qualname__} that torch's "
                f"weights-only loader refuses ({refused}), so this checkpoint could not be loaded on resume: "
                "save plain Python values (float(x), array.tolist()) or tensors (torch.from_numpy(array))"
            ) from e


def _unwrap(model: Any) -> Any:
    torch = _torch()

    if isinstance(model, torch.nn.parallel.DistributedDataParallel | torch.nn.DataParallel):
        model = model.module
    return getattr(model, "_orig_mod", model)  # torch.compile's wrapper


def _torch() -> Any:
    """PyTorch, or an ImportError that says how to install it (it is not a dependency of the runtime)."""
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"costaware_runtime.torch needs PyTorch: pip install torch ({e})") from e
    return torch
