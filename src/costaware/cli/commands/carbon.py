"""``costaware carbon``: show a grid zone's carbon intensity, import a recorded intensity file.

One module per command: :mod:`~costaware.cli.commands.carbon_show` (``show``: what a carbon source gives for
a zone's hours) and :mod:`~costaware.cli.commands.carbon_import` (``import``: check a file and merge it into
the zone's imported file). :mod:`costaware.cli.config` names the commands here. Their helpers are not
re-exported: a test patches them where they run, and one patching this module fails, not passes unpatched.
"""

from __future__ import annotations

from costaware.cli.commands.carbon_import import import_file
from costaware.cli.commands.carbon_show import show

__all__ = ["import_file", "show"]
