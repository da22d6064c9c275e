"""The ranks of a torch.distributed training (torchrun, DDP) agreeing on when to save and stop.

Each rank hears the preemption notice (torchrun passes the SIGTERM to every worker) and reads its own clock
at its own moment. A rank that stopped or saved alone left the others in the step's gradient all-reduce,
which a save's own collectives (the Trainer gathers its flop count) or the stopped rank never answered: the
group hung until torchrun SIGKILLed it, with nothing committed. So every rank takes the same decision,
one all-reduce of a few flags per step, and only then saves or stops.

Every rank must make these calls, at the same point: a rank that never does (a callback given to rank 0's
Trainer only, the decision taken under ``if rank == 0``) or that died leaves the others waiting in them. That
wait ends at ``wait_seconds`` when given, else at the process group's own timeout (``init_process_group``'s
``timeout``: gloo's default is 30 minutes), with a :class:`ContractError` that says so, not a bare "Timed out
waiting 1800000ms for recv".

torch is never imported here: a job that has not imported it runs single-process, and pays nothing.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from costaware_runtime.errors import ContractError


def _group() -> Any:
    """``torch.distributed`` when this process is one of an initialized group of two or more, else None."""
    torch = sys.modules.get("torch")
    distributed = getattr(torch, "distributed", None)
    if distributed is None or not distributed.is_available() or not distributed.is_initialized():
        return None
    return distributed if distributed.get_world_size() > 1 else None


def is_distributed() -> bool:
    """True in a torch.distributed group of two or more processes."""
    return _group() is not None


def is_rank_zero() -> bool:
    """True outside a distributed group, and on its rank 0."""
    distributed = _group()
    return distributed is None or distributed.get_rank() == 0


def check_wait_seconds(wait_seconds: float | None) -> float | None:
    """``wait_seconds`` if it is None or seconds > 0.

    Raises:
        ContractError: It is not.
    """
    if wait_seconds is None:
        return None
    if (
        isinstance(wait_seconds, bool)
        or not isinstance(wait_seconds, int | float)
        or not (math.isfinite(wait_seconds) and wait_seconds > 0)
    ):
        raise ContractError(
            f"wait_seconds={wait_seconds!r} is not a wait: pass seconds > 0, or None for the process group's "
            "own timeout"
        )
    return float(wait_seconds)


def any_rank(flags: Sequence[bool], wait_seconds: float | None = None) -> list[bool]:
    """Each of ``flags``, true where it is true on any rank; as given outside a distributed group.

    Every rank must call it at the same point (a collective): once per step, from the same place.

    Raises:
        ContractError: Not every rank joined within ``wait_seconds`` (None: the process group's timeout).
    """
    check_wait_seconds(wait_seconds)
    distributed = _group()
    if distributed is None:
        return list(flags)
    torch = sys.modules["torch"]
    # NCCL reduces CUDA tensors only; gloo (and a "cpu:gloo,cuda:nccl" group) takes CPU ones.
    on_gpu = distributed.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    tensor = torch.tensor([int(flag) for flag in flags], dtype=torch.int32, device=device)
    work = distributed.all_reduce(tensor, op=distributed.ReduceOp.MAX, async_op=True)
    _wait(distributed, work, "agree on when to save and stop", wait_seconds)
    return [bool(value) for value in tensor.tolist()]


def wait_for_all(wait_seconds: float | None = None) -> None:
    """Wait until every rank gets here (a barrier); nothing outside a distributed group.

    Raises:
        ContractError: Not every rank got here within ``wait_seconds`` (None: the process group's timeout).
    """
    check_wait_seconds(wait_seconds)
    distributed = _group()
    if distributed is not None:
        _wait(distributed, distributed.barrier(async_op=True), "wait for the save", wait_seconds)


def _wait(distributed: Any, work: Any, what: str, wait_seconds: float | None) -> None:
    """Wait for the collective ``work``; a rank that never joined it fails this one with a clear error."""
    began = time.monotonic()
    try:
        if wait_seconds is None:
            work.wait()
        else:
            work.wait(timedelta(seconds=wait_seconds))
    except RuntimeError as e:  # gloo's timeout or closed peer, NCCL's DistBackendError
        raise ContractError(
            f"rank {distributed.get_rank()} of {distributed.get_world_size()} waited "
            f"{time.monotonic() - began:.1f} s for the other ranks to {what} (costaware_runtime's "
            f"checkpoint_decision, exit_preempted or CostawareCallback), and not all came ({e}): call it on "
            "every rank at the same point of every step (the Trainer's callbacks=[CostawareCallback()] on "
            "every rank, never under 'if rank == 0'); a rank that died leaves the others here too"
        ) from e
