"""``costaware budget``: set and delete budgets, see what is spent, reserved and left, release holds.

One module per pair of commands: :mod:`~costaware.cli.commands.budget_set` (set, delete),
:mod:`~costaware.cli.commands.budget_show` (list, show) and :mod:`~costaware.cli.commands.budget_holds`
(holds, release). :mod:`costaware.cli.config` names the commands here, so a test that patches one of them
on this module patches the one that runs. The helpers, once defined here, are importable from here too.
"""

from __future__ import annotations

from costaware.cli.commands.budget_holds import (
    _refuse_while_a_task_may_bill,
    _release_said,
    _spent_in_budget,
    budget_holds,
    budget_release,
)
from costaware.cli.commands.budget_set import (
    _say_close_tags,
    _say_over_cap,
    _say_zero_gpu_cap,
    budget_delete,
    budget_set,
)
from costaware.cli.commands.budget_show import (
    _run_is_known,
    _say_quoted,
    _say_unpriced,
    _say_unset,
    _unknown_run_note,
    budget_list,
    budget_show,
)

__all__ = [
    "_refuse_while_a_task_may_bill",
    "_release_said",
    "_run_is_known",
    "_say_close_tags",
    "_say_over_cap",
    "_say_quoted",
    "_say_unpriced",
    "_say_unset",
    "_say_zero_gpu_cap",
    "_spent_in_budget",
    "_unknown_run_note",
    "budget_delete",
    "budget_holds",
    "budget_list",
    "budget_release",
    "budget_set",
    "budget_show",
]
