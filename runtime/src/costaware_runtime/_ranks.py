"""The ranks of a torch.distributed training (torchrun, DDP) agreeing on when to save and stop.

Each rank hears the preemption notice (torchrun passes the SIGTERM to every worker) and reads its own clock
at its own moment. A rank that stopped or saved alone left the others in the step's gradient all-reduce,
which a save's own collectives (the Trainer gathers its flop count) or the stopped rank never answered: the
group hung until torchrun SIGKILLed it, with nothing committed. So every rank takes the same decision,
one all-reduce of a few flags per step, and only then saves or stops.

torch is never imported here: a job that has not imported it runs single-process, and pays nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any


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


def any_rank(flags: Sequence[bool]) -> list[bool]:
    """Each of ``flags``, true where it is true on any rank; as given outside a distributed group.

    Every rank must call it at the same point (a collective): once per step, from the same place.
    """
    distributed = _group()
    if distributed is None:
        return list(flags)
    torch = sys.modules["torch"]
    # NCCL reduces CUDA tensors only; gloo (and a "cpu:gloo,cuda:nccl" group) takes CPU ones.
    on_gpu = distributed.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    tensor = torch.tensor([int(flag) for flag in flags], dtype=torch.int32, device=device)
    distributed.all_reduce(tensor, op=distributed.ReduceOp.MAX)
    return [bool(value) for value in tensor.tolist()]


def wait_for_all() -> None:
    """Wait until every rank gets here (a barrier); nothing outside a distributed group."""
    distributed = _group()
    if distributed is not None:
        distributed.barrier()
