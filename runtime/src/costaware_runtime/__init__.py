"""costaware-runtime: what a training job needs to run under costaware, with the standard library only.

The job contract (``runtime/README.md``): the provider runs ``costaware-run -- <command>``; the command
reads its folders from the environment, saves checkpoints with a commit marker, writes its metrics, leaves
its model in the output folder, and on SIGTERM saves and exits 75. Framework helpers live in
``costaware_runtime.torch``, ``.huggingface`` and ``.boosting`` and import their framework when used.
"""

from __future__ import annotations

__version__ = "0.1.10"

from costaware_runtime.checkpoints import (
    checkpoint_folder,
    clear_checkpoints,
    commit,
    latest_step,
    load_bytes,
    prune,
    push,
    restore,
    retire,
    save_bytes,
)
from costaware_runtime.contract import (
    EXIT_CONTRACT_ERROR,
    EXIT_PREEMPTED,
    EXIT_PREEMPTED_BEFORE_CHECKPOINT,
    EXIT_PREEMPTED_WITHOUT_CHECKPOINT,
    EXIT_SYNC_FAILED,
    JobEnvironment,
    attempt,
    checkpoint_dir,
    checkpoint_every_seconds,
    market,
    output_dir,
)
from costaware_runtime.errors import (
    CheckpointChangedError,
    ContractError,
    CostawareRuntimeError,
    MetricsError,
    StoreError,
)
from costaware_runtime.metrics import read_metrics, write_metrics
from costaware_runtime.outputs import download_outputs, read_manifest
from costaware_runtime.preemption import PreemptionGuard, exit_preempted, preemption_requested
from costaware_runtime.schedule import CheckpointTimer

__all__ = [
    "EXIT_CONTRACT_ERROR",
    "EXIT_PREEMPTED",
    "EXIT_PREEMPTED_BEFORE_CHECKPOINT",
    "EXIT_PREEMPTED_WITHOUT_CHECKPOINT",
    "EXIT_SYNC_FAILED",
    "CheckpointChangedError",
    "CheckpointTimer",
    "ContractError",
    "CostawareRuntimeError",
    "JobEnvironment",
    "MetricsError",
    "PreemptionGuard",
    "StoreError",
    "__version__",
    "attempt",
    "checkpoint_dir",
    "checkpoint_every_seconds",
    "checkpoint_folder",
    "clear_checkpoints",
    "commit",
    "download_outputs",
    "exit_preempted",
    "latest_step",
    "load_bytes",
    "market",
    "output_dir",
    "preemption_requested",
    "prune",
    "push",
    "read_manifest",
    "read_metrics",
    "restore",
    "retire",
    "save_bytes",
    "write_metrics",
]
