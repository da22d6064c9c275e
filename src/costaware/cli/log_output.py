"""Logs on stderr, data on stdout: ``costaware ... --format json | jq`` must read nothing but the data.

Airflow points its console logging at stdout when it is imported, which a command does only when it needs
it (a connection, the ledger's hook): a stale-price warning or the AWS hook's "AWS Connection ..." line then
came before the JSON and broke every pipe. Importing Airflow up front to fix that would cost every command
seconds, so the fix runs right after Airflow's own import, whenever that happens.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _Stderr:
    """Writes to whatever ``sys.stderr`` is at the time.

    A handler given the object itself kept it after it was swapped (and closed: pytest's capture).
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()

    @property
    def buffer(self) -> _StderrBytes:  # what a bytes logger (Airflow's JSON logs) writes to
        return _STDERR_BYTES


class _StderrBytes:
    """Bytes to whatever ``sys.stderr`` is at the time (``[logging] json_logs`` writes bytes)."""

    def write(self, data: bytes) -> int:
        buffer = getattr(sys.stderr, "buffer", None)
        if buffer is not None:
            return int(buffer.write(data))
        return sys.stderr.write(data.decode("utf-8", "replace"))

    def flush(self) -> None:
        sys.stderr.flush()


_STDERR = _Stderr()
_STDERR_BYTES = _StderrBytes()


def route_logs_to_stderr() -> None:
    """Move Airflow's console logs to stderr as soon as Airflow is imported (undo: :func:`stop_routing`).

    A process that imported Airflow before (a program or a test calling ``main()``) keeps its logging as
    it set it: only the ``costaware`` command's own process is changed.
    """
    if "airflow" not in sys.modules and not any(isinstance(f, _AfterAirflowImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterAirflowImport())


def stop_routing() -> None:
    """Take the import hook out again where Airflow was not imported (a program that called ``main()``)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterAirflowImport)]


def _to_stderr() -> None:
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
                handler.setStream(_STDERR)
    try:
        import structlog
    except ImportError:
        return
    factory = structlog.get_config().get("logger_factory")
    if getattr(factory, "io", sys.stderr) is None:  # Airflow's factory: None writes to stdout
        bytes_out = issubclass(getattr(factory, "cls", object), structlog.BytesLogger)  # json_logs
        factory.io = _STDERR_BYTES if bytes_out else _STDERR  # type: ignore[union-attr]


class _AfterAirflowImport(importlib.abc.MetaPathFinder):
    """Finds ``airflow`` as Python would, and moves its logs to stderr once its package has run."""

    _finding = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "airflow" or self._finding:
            return None
        self._finding = True  # find_spec below must not find this finder again
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_package = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            # Once Airflow runs, not at a mere look-up (importlib.util.find_spec("airflow") imports nothing).
            stop_routing()
            data_out, sys.stdout = sys.stdout, _STDERR  # what logs while the package runs, and its handlers
            try:
                run_package(module)
            finally:
                sys.stdout = data_out
            _to_stderr()  # loggers made later write to stdout unless their factory says otherwise

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
