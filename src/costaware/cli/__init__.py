"""The ``costaware`` command: budgets, cost reports, prices, policy replay and the feature cache.

Commands are declared as data in :mod:`costaware.cli.config` and their modules, under
:mod:`costaware.cli.commands`, are imported only when the command runs; every command prints rows through
:func:`costaware.cli.output.emit`. The console script is ``costaware = "costaware.cli:main"``;
``python -m costaware.cli`` runs the same.
"""

from __future__ import annotations

from costaware.cli.parser import build_parser, main

__all__ = ["build_parser", "main"]
