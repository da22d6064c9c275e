"""The old import path of ``costaware simulate``; the command lives in :mod:`costaware.cli.commands.simulate`.

``main`` is the one ``costaware`` entry point, :func:`costaware.cli.main`.
"""

from __future__ import annotations

from costaware.cli import main
from costaware.cli.commands.simulate import read_jobs, zone_files

__all__ = ["main", "read_jobs", "zone_files"]

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
