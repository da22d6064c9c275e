"""The spend gate's arguments, checked when the DAG is parsed (``SpendCapSensor.__init__``).

Also :func:`check_same_instances`, the gate's check of its task's mapping, run when it reserves.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence, Set
from datetime import timedelta
from typing import Any

from airflow.sdk.bases.operator import BaseOperatorMeta

ON_EXCEEDED = ("wait", "skip", "fail", "approve")


#: ``approval_timeout`` when not given; another value given with another ``on_exceeded`` (which never asks a
#: person) is refused. Compared by value: the default written out (``timedelta(hours=12)``) is no mistake.
DEFAULT_APPROVAL_TIMEOUT = timedelta(hours=12)

#: The arguments only ``on_exceeded="approve"`` reads.
APPROVAL_ARGUMENTS = ("approvers", "approval_timeout", "on_rejected")


class RecordsArgumentsGiven(BaseOperatorMeta):
    """Records the keyword names an operator's caller wrote, before Airflow fills in its ``default_args``.

    A value written on the gate that was also in ``default_args`` could not be told apart from one filled
    in from there (compared by identity, ``on_rejected="skip"`` or a module's constant list was taken as
    Airflow's): only the names are.
    """

    @classmethod
    def _apply_defaults(cls, func: Any) -> Any:
        fills_defaults = super()._apply_defaults(func)

        @functools.wraps(fills_defaults)
        def record_given(self: Any, *args: Any, **kwargs: Any) -> Any:
            # The outermost call is the caller's (a subclass's __init__ calls this class's with its own).
            if "_costaware_given" not in vars(self):
                object.__setattr__(self, "_costaware_given", frozenset(kwargs))
            return fills_defaults(self, *args, **kwargs)

        # Airflow runs its once-per-instance steps where the class's own __init__ is being run: its test
        # compares the function it wraps with ``__init__.__wrapped__``.
        record_given.__wrapped__ = func
        return record_given


def approval_settings(
    on_exceeded: str,
    approvers: Sequence[str] | None,
    approval_timeout: timedelta | None,
    on_rejected: str,
    from_defaults: Set[str] = frozenset(),
) -> tuple[list[str], timedelta | None, str]:
    """``approvers``, ``approval_timeout`` and ``on_rejected`` checked, as the gate keeps them.

    ``from_defaults``: those of them that came from the DAG's or task group's ``default_args``, not
    refused where ``on_exceeded`` is not ``approve`` (they are meant for the approve gates beside it).

    Raises:
        ValueError: a setting that is not one, or one given on a gate that never asks a person.
    """
    from costaware.sensors.spend_approval import ON_REJECTED, require_hitl

    if on_exceeded == "approve":
        require_hitl()
    if on_rejected not in ON_REJECTED:
        raise ValueError(f"on_rejected={on_rejected!r}: use one of {', '.join(ON_REJECTED)}")
    if approvers is None:  # as HITLOperator's assigned_users=None: any user who may answer
        approvers = ()
    given = approvers
    if isinstance(approvers, Mapping):
        # Its keys were taken without a word: {"ann": "lead"} may mean the values are the user ids.
        raise ValueError(
            f"approvers={given!r} is a dict, whose keys or values could be the user ids: give a list of "
            f"Airflow user ids, e.g. {list(given)!r}"
        )
    if isinstance(approvers, Set):
        approvers = sorted(approvers, key=str)  # no order of its own: one order at every parse
    elif isinstance(approvers, Iterable) and not isinstance(approvers, str | list | tuple):
        # Read once: a generator or map() was used up by the check below, leaving [] ("any user may
        # approve"), so an overage meant for named leads could be approved by anyone.
        approvers = list(approvers)
        if not approvers:  # one map() shared by two gates (or default_args) is empty at the second
            raise ValueError(
                f"approvers={given!r} gave no names (a generator or map() is read once, so a second "
                "gate sharing it gets none, which would let any user approve): give a list, e.g. ['ann']"
            )
    if not isinstance(approvers, list | tuple) or not all(
        isinstance(a, str) and a.strip() for a in approvers
    ):
        # As written in the DAG; what a generator gave beside it, which its repr does not show.
        read = "" if given is approvers or isinstance(given, Set) else f" (it gave {approvers!r})"
        raise ValueError(f"approvers={given!r}{read}: give a list of Airflow user ids, e.g. ['ann']")
    asks = on_exceeded == "approve"
    if approvers and not asks and "approvers" not in from_defaults:
        raise ValueError(
            f"approvers={list(approvers)!r} are asked only with on_exceeded='approve', not "
            f"{on_exceeded!r}: set on_exceeded='approve' or drop approvers"
        )
    if on_rejected != "fail" and not asks and "on_rejected" not in from_defaults:
        raise ValueError(
            f"on_rejected={on_rejected!r} applies only with on_exceeded='approve' (a person's answer), "
            f"not {on_exceeded!r}: set on_exceeded='approve', or on_exceeded={on_rejected!r} for what a "
            "refusal does"
        )
    if approval_timeout != DEFAULT_APPROVAL_TIMEOUT and not asks and "approval_timeout" not in from_defaults:
        # Accepted and never used: the gate waited its sensor timeout, or refused at once, not this.
        raise ValueError(
            f"approval_timeout={approval_timeout!r} applies only with on_exceeded='approve' (how long a "
            f"person may take to answer), not {on_exceeded!r}: set on_exceeded='approve', or drop "
            "approval_timeout (a wait's length is the sensor's timeout)"
        )
    # An int read as hours was 4 seconds: the request timed out (a rejection) before anyone saw it.
    if approval_timeout is not None and (
        not isinstance(approval_timeout, timedelta) or approval_timeout <= timedelta(0)
    ):
        raise ValueError(
            f"approval_timeout={approval_timeout!r}: give a positive timedelta, e.g. timedelta(hours=4)"
        )
    # "ann, lead".split(",") gave " lead", whom no auth manager knows: the request was assigned to nobody
    # of that name, and only the simple auth manager's check could say so. Each user is asked once.
    return list(dict.fromkeys(a.strip() for a in approvers)), approval_timeout, on_rejected


def check_same_instances(gate: Any, task: Any) -> None:
    """Refuse a gate whose map index does not name its task's instance (its hold would never be settled).

    The gate reserves under its own map index; each try of the task settles the hold of its own, and a
    ``RemoteTrainingOperator`` grows the one of its own map index to ``max_usd``. A gate before a mapped task
    (``.expand``) reserved under -1, which no instance (0, 1, ...) settled: the budget counted the estimate
    beside what the instances billed until the run ended, and their ``max_usd`` was never held. Tasks of one
    mapped task group share their map indexes: a gate there reserves for the task instance of its own.

    Raises:
        ConfigurationError: one of them is mapped itself, or they are not in the same mapped task groups.
    """
    from costaware.core.errors import ConfigurationError

    if task is None:
        return
    mapped = getattr(gate, "is_mapped", False) or getattr(task, "is_mapped", False)
    if not mapped and _mapped_groups(gate) == _mapped_groups(task):
        return
    raise ConfigurationError(
        f"spend gate {gate.task_id!r} {_mapping_of(gate)} and its task {task.task_id!r} {_mapping_of(task)}: "
        "the gate reserves under its own map index and each try of the task settles under its own, so "
        "no try would settle the gate's hold (the budget would count it until the run ends) and a "
        "RemoteTrainingOperator would not find it (its max_usd never held); put the gate and the task in "
        "one mapped task group (expanded together, each gate reserves for the task of its map index), or "
        "give a mapped RemoteTrainingOperator budget_scope= and max_usd= instead of a gate (each instance "
        "then holds its own); nothing was reserved"
    )


def _mapped_groups(node: Any) -> tuple[str, ...]:
    """The group ids of the mapped task groups ``node`` is in, innermost first."""
    groups = getattr(node, "iter_mapped_task_groups", None)
    return tuple(group.group_id for group in groups()) if groups is not None else ()


def _mapping_of(node: Any) -> str:
    """How ``node`` is mapped, in words: ``is mapped (.expand)``, ``is in mapped task group 'g'``, ..."""
    if getattr(node, "is_mapped", False):
        return "is mapped (.expand)"
    groups = _mapped_groups(node)
    return f"is in mapped task group {groups[0]!r}" if groups else "is not mapped"


def check_written(scope: Any, estimated_usd: Any, estimated_gpu_hours: Any) -> None:
    """The scope and the estimates as written out, checked when the DAG is parsed (templates: at run time).

    A bare ``"project"``, an empty scope or ``"5 USD"`` passed the parse and failed the run, as
    ``RemoteTrainingOperator``'s ``budget_scope`` did not.

    Raises:
        InvalidBudgetError: a scope that is blank or not ``key=value,...``.
        ConfigurationError: an estimate that is not a number of USD (or GPU-hours) >= 0.
    """
    from costaware.core.budgets import Scope
    from costaware.core.money import parse_gpu_hours, parse_usd
    from costaware.operators.templating import is_literal

    if is_literal(scope):
        Scope.given(scope, what="scope")
    if is_literal(estimated_usd):
        parse_usd(estimated_usd, name="estimated_usd")
    if is_literal(estimated_gpu_hours):
        parse_gpu_hours(estimated_gpu_hours, name="estimated_gpu_hours")
