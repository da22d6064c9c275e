"""``costaware budget``: set and delete budgets, see what is spent, reserved and left, release holds.

One module per pair of commands: :mod:`~costaware.cli.commands.budget_set` (set, delete),
:mod:`~costaware.cli.commands.budget_show` (list, show) and :mod:`~costaware.cli.commands.budget_holds`
(holds, release). :mod:`costaware.cli.config` names the commands here, so a test that patches one of them
on this module patches the one that runs.
"""

from __future__ import annotations

from costaware.cli.commands.budget_holds import (
    budget_holds,
    budget_release,
)
from costaware.cli.commands.budget_set import (
    budget_delete,
    budget_set,
)
from costaware.cli.commands.budget_show import (
    budget_list,
    budget_show,
)

__all__ = [
    "budget_delete",
    "budget_holds",
    "budget_list",
    "budget_release",
    "budget_set",
    "budget_show",
]
