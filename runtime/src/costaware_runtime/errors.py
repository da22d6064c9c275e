"""The runtime's errors: one root, a few leaves."""

from __future__ import annotations


class CostawareRuntimeError(Exception):
    """Root of every error the runtime raises on purpose."""


class ContractError(CostawareRuntimeError):
    """Raised when the job environment or what the job left behind breaks the job contract."""


class MetricsError(ContractError):
    """Raised when a metrics file is missing or is not a JSON object of named finite numbers."""


class StoreError(CostawareRuntimeError):
    """Raised when a checkpoint, output or result store cannot be read or written."""


class StoreStalledError(StoreError):
    """Raised when a store transfer (a checkpoint's, the outputs' or the result's) moved nothing for too long.

    How long is ``COSTAWARE_STORE_STALL_SECONDS``; the transfer is given up.
    """


class CheckpointChangedError(CostawareRuntimeError):
    """Raised when a committed checkpoint's files change or vanish while they are being pushed."""
