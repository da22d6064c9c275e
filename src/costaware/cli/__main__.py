"""``python -m costaware.cli``: the ``costaware`` command."""

from __future__ import annotations

import sys

from costaware.cli.parser import main

sys.exit(main())
