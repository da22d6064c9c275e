"""``partial`` of our mapped operators warns of the arguments Airflow drops from its ``default_args``."""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from types import FrameType
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG, BaseOperator

from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.operators.tuning import BudgetedTuningOperator
from costaware.operators.warm_start import WarmStartRetrainOperator
from costaware.sensors.spend_cap import SpendCapSensor


def _trainer(params: dict[str, Any]) -> object:  # never called: the DAG is only parsed
    raise AssertionError("not trained at parse")


#: Each class's mapped argument and one element of it.
_MAPPED: dict[type, tuple[str, list[Any]]] = {
    RemoteTrainingOperator: ("command", [["python", "train.py", "--fold", "1"]]),
    SpendCapSensor: ("estimated_usd", ["1"]),
    BudgetedTuningOperator: ("slot", [0]),
    WarmStartRetrainOperator: ("data_path", ["/srv/data/2026-11.parquet"]),
}


def _said(names: str, cls: type) -> str:
    return (
        f"task 'mapped': {cls.__name__}.partial(default_args=...) gives {names}, which Airflow drops from a "
        f"mapped task's own default_args (it keeps BaseOperator's arguments alone): pass {names} to "
        ".partial() itself, or in the DAG's default_args"
    )


@pytest.mark.parametrize(
    ("cls", "given", "default_args", "names"),
    [
        # max_usd given there capped no copy: each ran without a cap, in silence.
        (
            RemoteTrainingOperator,
            {"model_store": "/srv/models", "instance_type": "m5.large", "region": "us-east-1"},
            {"max_usd": "5", "retries": 2},
            "max_usd",
        ),
        # Its own arguments, and a sensor's (poke_interval, passed on through **kwargs), alike.
        (
            SpendCapSensor,
            {"scope": "project=churn"},
            {"on_exceeded": "skip", "poke_interval": 7, "retries": 2},
            "on_exceeded, poke_interval",
        ),
        # The trials of budgeted_tuning, mapped over the plan's slots: a slower study load given there was
        # dropped, each slot waited the default.
        (
            BudgetedTuningOperator,
            {"study_name": "churn", "trainer": _trainer},
            {"study_load_seconds": 120, "retries": 2},
            "study_load_seconds",
        ),
        # A retrain mapped over the month's files: force_full given there was dropped, each copy warm-started.
        (
            WarmStartRetrainOperator,
            {"model_store": "/srv/models", "label_column": "churned", "feature_columns": ["tenure"]},
            {"force_full": True, "retries": 2},
            "force_full",
        ),
    ],
)
def test_an_argument_given_only_in_the_default_args_of_partial_is_warned_of_as_airflow_drops_it(
    cls: type, given: dict[str, Any], default_args: dict[str, Any], names: str
) -> None:
    mapped_argument, element = _MAPPED[cls]
    with DAG("partial_defaults", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
        with pytest.warns(UserWarning, match=re.escape(_said(names, cls))) as said:
            mapped = cls.partial(task_id="mapped", default_args=default_args, **given).expand(
                **{mapped_argument: element}
            )
        # Named at the DAG's line that called partial, not in costaware.
        assert [w.filename for w in said if "drops from a mapped" in str(w.message)] == [__file__]
        copy = mapped.unmap({mapped_argument: element[0]})
        for name in names.split(", "):  # what the warning is about
            assert getattr(copy, name) != default_args[name]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Airflow's own arguments, and ours given to partial: nothing
            own = {name: default_args[name] for name in names.split(", ")}
            cls.partial(task_id="kept", default_args={"retries": 2, **own}, **own, **given).expand(
                **{mapped_argument: element}
            )


def test_partial_on_a_task_is_refused_as_airflow_refuses_it() -> None:
    with DAG("partial_task", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
        task = SpendCapSensor(task_id="gate", scope="project=churn", estimated_usd="1")
    with pytest.raises(TypeError, match="partial can only be called on Operator classes"):
        task.partial(task_id="copy")


def _our_operator_classes() -> dict[str, type]:
    """Every public operator and sensor class of ours: in provider info's modules and the packages'."""
    import importlib
    import inspect
    import pkgutil

    from airflow.sdk import BaseOperator

    import costaware.operators
    import costaware.sensors
    from costaware.get_provider_info import OPERATOR_MODULES, SENSOR_MODULES

    names = set(OPERATOR_MODULES) | set(SENSOR_MODULES)
    for package in (costaware.operators, costaware.sensors):
        names |= {f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)}
    found: dict[str, type] = {}
    for name in sorted(names):
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseOperator)
                and value.__module__ == name
                and attr.endswith(("Operator", "Sensor"))
                and not attr.startswith("_")
            ):
                found[attr] = value
    return found


def test_every_operator_of_ours_mixes_in_the_dropped_default_args_warning_before_airflow() -> None:
    import inspect

    from airflow.sdk import BaseOperator

    from costaware.operators.base_partial import OnTheClassOnly, WarnsOfDroppedDefaultArgs

    classes = _our_operator_classes()
    assert {"CachedFeaturesOperator", "RemoteTrainingOperator", "SpendCapSensor"} <= set(classes)
    # Without it, a class's own arguments given in .partial(default_args=...) are dropped in silence.
    forgot = sorted(n for n, c in classes.items() if not issubclass(c, WarnsOfDroppedDefaultArgs))
    assert not forgot, f"{forgot}: mix in WarnsOfDroppedDefaultArgs before the Airflow base"
    for name, cls in classes.items():
        # Before the Airflow base, or super().partial skips the warning; partial on the class alone.
        assert cls.__mro__.index(WarnsOfDroppedDefaultArgs) < cls.__mro__.index(BaseOperator), name
        assert isinstance(inspect.getattr_static(cls, "partial"), OnTheClassOnly), name


@pytest.mark.parametrize("name", sorted(_our_operator_classes()))
def test_every_own_argument_of_a_mapped_operator_is_warned_of_when_given_only_in_partials_default_args(
    name: str,
) -> None:
    # The warning reads the arguments off the __init__ signatures: one taken positionally or through
    # **kwargs alone would be missed; each must be keyword-only, and each is named when dropped.
    import inspect

    from airflow.sdk import BaseOperator

    from costaware.operators.base_partial import _own_arguments

    cls = _our_operator_classes()[name]
    for klass in cls.__mro__:
        if issubclass(klass, BaseOperator) and klass is not BaseOperator and "__init__" in vars(klass):
            for parameter in list(inspect.signature(klass.__init__).parameters.values())[1:]:
                assert parameter.kind in (parameter.KEYWORD_ONLY, parameter.VAR_KEYWORD), (
                    f"{klass.__name__}.__init__ takes {parameter.name} {parameter.kind.description}"
                )
    own = sorted(_own_arguments(cls))
    assert own
    with DAG("partial_probe", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
        upstream = BaseOperator(task_id="upstream")
        with pytest.warns(UserWarning, match=re.escape(_said(", ".join(own), cls))):
            cls.partial(task_id="mapped", default_args=dict.fromkeys(own, "x")).expand_kwargs(upstream.output)


def _declared_at(cls: type) -> dict[str, Any]:
    """Each own argument of ``cls`` -> the code of the ``__init__`` (ours or a base's) that declares it."""
    import inspect

    from costaware.operators.base_partial import _own_arguments

    own = _own_arguments(cls)
    declared: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):  # the nearest declaration last, as it is the one that binds
        if issubclass(klass, BaseOperator) and klass is not BaseOperator and "__init__" in vars(klass):
            for name in inspect.signature(klass.__init__).parameters:
                if name in own:
                    declared[name] = inspect.unwrap(vars(klass)["__init__"]).__code__
    return declared


@pytest.mark.parametrize("name", sorted(_our_operator_classes()))
def test_every_argument_the_warning_names_reaches_a_mapped_copy_from_the_dags_default_args(name: str) -> None:
    # The warning's advice, "pass them ... in the DAG's default_args", was checked for the sensors' mode,
    # poke_interval and timezone only: each own argument of every class, given only there, must reach the
    # __init__ that declares it when a mapped copy is built (Airflow builds the copies with the DAG's
    # default_args). Seen as that __init__ is entered: its body may refuse the probes, which are no values.
    cls = _our_operator_classes()[name]
    declared = _declared_at(cls)
    # The required ones too: Airflow fills them in from there before it asks for them.
    probes = {arg: f"<dag default_args {arg}>" for arg in declared}
    seen: dict[Any, dict[str, Any]] = {}
    codes = set(declared.values())

    def on_call(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code in codes and frame.f_code not in seen:
            seen[frame.f_code] = dict(frame.f_locals)

    with DAG("defaults_probe", schedule=None, start_date=pendulum.datetime(2026, 1, 1), default_args=probes):
        upstream = BaseOperator(task_id="upstream")
        mapped = cls.partial(task_id="mapped").expand_kwargs(upstream.output)
    sys.setprofile(on_call)
    try:
        with contextlib.suppress(Exception):  # the probes are no values: only what reached __init__ is asked
            mapped.unmap({})
    finally:
        sys.setprofile(None)
    # Each declaring __init__ entered: a body that refused the probes before its super().__init__ would
    # hide its base's arguments from this test (none does).
    assert set(declared.values()) <= set(seen), f"{name}: an __init__ was never entered"
    reached = {arg: seen[code].get(arg) for arg, code in declared.items()}
    wrong = {arg: value for arg, value in reached.items() if value != probes[arg]}
    assert not wrong, f"{name}: given in the DAG's default_args, these reached the copy otherwise: {wrong}"
