"""``partial`` of our mapped operators: Airflow's, warning of arguments it drops from its ``default_args``.

Airflow's ``partial`` keeps only BaseOperator's arguments of a task's own ``default_args``, and the mapped
copies are built with the DAG's: an operator's own argument given there was dropped in silence. Through public
API alone: Airflow's ``partial`` classmethod, reached with ``super()``, and the operators' signatures.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.definitions.mappedoperator import OperatorPartial

#: costaware's own source: a warning names the DAG file's line that called ``partial``, not ours.
_COSTAWARE_SOURCE = str(Path(__file__).resolve().parent.parent)


class OnTheClassOnly:
    """``partial`` of an operator class, refused on a task as Airflow's own ``partial`` is.

    A plain classmethod replacing Airflow's descriptor let ``task.partial(...)`` map the task's class.
    """

    def __init__(self, classmethod_name: str) -> None:
        self._classmethod_name = classmethod_name

    def __get__(self, task: object, cls: type | None = None) -> Callable[..., OperatorPartial]:
        if task is not None:

            def partial(**kwargs: Any) -> OperatorPartial:  # named so for Airflow's stack traces
                raise TypeError("partial can only be called on Operator classes, not Tasks themselves")

            return partial
        partial_of_the_class: Callable[..., OperatorPartial] = getattr(cls, self._classmethod_name)
        return partial_of_the_class


def _own_arguments(operator_class: type) -> set[str]:
    """The arguments of ``operator_class`` and its bases' ``__init__`` that BaseOperator's lacks.

    Its bases' too: a sensor's ``poke_interval`` or ``mode``, passed on through ``**kwargs``, are dropped
    alike.
    """
    common = set(inspect.signature(BaseOperator.__init__).parameters)
    own: set[str] = set()
    for klass in operator_class.__mro__:
        if klass is BaseOperator or not issubclass(klass, BaseOperator) or "__init__" not in vars(klass):
            continue
        own |= set(inspect.signature(klass.__init__).parameters)
    return own - common - {"self", "kwargs"}


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside costaware: the DAG's line that called ``partial``."""
    level = 2  # the caller of warn_of_dropped_default_args, whose caller this is
    frame: FrameType | None = sys._getframe(level)
    while frame is not None and frame.f_code.co_filename.startswith(_COSTAWARE_SOURCE):
        level, frame = level + 1, frame.f_back
    return level


def warn_of_dropped_default_args(operator_class: type[BaseOperator], kwargs: Mapping[str, Any]) -> None:
    """Warn of the operator's own arguments given only in ``.partial(default_args=...)``: Airflow drops them.

    Its ``partial`` keeps only BaseOperator's arguments of a task's own ``default_args``, and the mapped
    copies are built with the DAG's: ``version`` given there keyed every copy by its source, in silence.
    """
    defaults = kwargs.get("default_args") or {}
    own = _own_arguments(operator_class)
    dropped = sorted(name for name in defaults if name in own and name not in kwargs)
    if dropped:
        names = ", ".join(dropped)
        warnings.warn(
            f"task {kwargs.get('task_id')!r}: {operator_class.__name__}.partial(default_args=...) gives "
            f"{names}, which Airflow drops from a mapped task's own default_args (it keeps BaseOperator's "
            f"arguments alone): pass {names} to .partial() itself, or in the DAG's default_args",
            UserWarning,
            stacklevel=_caller_stacklevel(),
        )


class WarnsOfDroppedDefaultArgs:
    """A mixin of our operators meant to be mapped: ``partial`` warns of arguments Airflow drops.

    Put before the Airflow base (``class X(WarnsOfDroppedDefaultArgs, BaseOperator)``). A subclass with a
    ``partial`` of its own calls ``super().partial(...)``, which warns.
    """

    @classmethod
    def _partial_warning_of_dropped_default_args(cls, **kwargs: Any) -> OperatorPartial:
        """Airflow's ``partial``, warning first of the arguments it drops from ``default_args``."""
        warn_of_dropped_default_args(cls, kwargs)  # type: ignore[arg-type]  # mixed into a BaseOperator
        partial: OperatorPartial = super().partial(**kwargs)  # type: ignore[misc]  # the Airflow base's
        return partial

    partial = OnTheClassOnly("_partial_warning_of_dropped_default_args")
