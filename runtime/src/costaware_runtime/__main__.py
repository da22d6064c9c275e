"""``python -m costaware_runtime``: the same as ``costaware-run``."""

from costaware_runtime.launcher import main

raise SystemExit(main())
