"""Compute backends: where a training job runs (a child process, SageMaker, AWS Batch, Kubernetes).

Every backend implements :class:`~costaware.adapters.compute.base.ComputeBackend`; :func:`open_backend`
builds one by name. SDKs and provider hooks are imported where they are used.
"""

from __future__ import annotations

from costaware.adapters.compute.base import (
    BACKENDS,
    ComputeBackend,
    JobRequest,
    JobState,
    JobStatus,
    open_backend,
)

__all__ = ["BACKENDS", "ComputeBackend", "JobRequest", "JobState", "JobStatus", "open_backend"]
