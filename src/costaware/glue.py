"""Internal: the Airflow glue that operators, sensors, triggers and the listener share.

One place for who is running (run identity, allocation tags, the listener's annotations), the default
connection ids, decimal arguments, and how costaware errors become task outcomes (settings and the
embedded stores' paths are in ``costaware.settings``). Operators, sensors and triggers
import from here, never from ``plugins/`` (which only registers things with Airflow).

The module imports no Airflow at import time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from typing import Any

from costaware.core.budgets import TAG_NAMES as TAG_NAMES  # re-exported: the listener reads it here
from costaware.core.errors import BudgetExceededError, ConfigurationError, CrossRegionEgressError

DEFAULT_LEDGER_CONN_ID = "costaware_ledger"
"""The ledger connection every operator, sensor, trigger and the listener use unless told otherwise."""
DEFAULT_AWS_CONN_ID = "aws_default"
"""The AWS connection that live spot prices use unless told otherwise (Airflow's own default)."""

ANNOTATION_FIELDS = ("trial", "instance_type", "region", "market", "usd_per_hour", "cause", "note", "tags")

_ANNOTATIONS: dict[tuple[str, str, str, int, int], dict[str, Any]] = {}


def parse_decimal(
    value: object,
    *,
    name: str,
    non_negative: bool = False,
    positive: bool = False,
    unit: str = "",
    read_at_parse: bool = False,
) -> Decimal:
    """A money, rate or amount argument as a finite ``Decimal``.

    Args:
        value: The argument as given (a number, or text once a template is rendered).
        name: The argument's name, for the message.
        non_negative: Refuse a value below 0.
        positive: Refuse a value of 0 or below.
        unit: What the number counts (``"minutes"``), said in the message.
        read_at_parse: The argument is not templated and is read when the DAG is parsed: a Jinja template
            in it is said to be one (it is never rendered), not only a bad number.

    Raises:
        ConfigurationError: not a finite number, or out of the asked range; the message names ``name``.
    """
    try:
        number: Decimal | None = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        number = None
    what = f"a number of {unit}" if unit else "a number"
    if non_negative or positive:
        what += " > 0" if positive else " >= 0"
    elif number is not None and not number.is_finite():
        what = f"a finite {what.removeprefix('a ')}"
    if (
        number is None
        or not number.is_finite()
        or (non_negative and number < 0)
        or (positive and number <= 0)
    ):
        raise ConfigurationError(f"{name} must be {what}, got {value!r}{_not_rendered(value, read_at_parse)}")
    return number


def _not_rendered(value: object, read_at_parse: bool) -> str:
    """Why a template in an argument read when the DAG is parsed failed as a number: it is never rendered."""
    if read_at_parse and is_template(value):
        return " (it is not templated: it is read when the DAG is parsed; write the number)"
    return ""


def as_bool(value: object, name: str) -> bool:
    """A templated flag: a bool, or the strings true/false/1/0/yes/no."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", "", "none"):
        return False
    raise ConfigurationError(f"{name} must be true or false, got {value!r}")


def run_identity(context: Mapping[str, Any], task_id: str) -> dict[str, Any]:
    """dag_id, run_id, task_id, try_number and map_index of the running task, from its context."""
    ti = context.get("ti") or context.get("task_instance")
    dag = context.get("dag")
    return {
        "dag_id": str(getattr(ti, "dag_id", None) or getattr(dag, "dag_id", None) or "adhoc"),
        "run_id": str(context.get("run_id") or getattr(ti, "run_id", None) or "manual"),
        "task_id": str(getattr(ti, "task_id", None) or task_id),
        "try_number": int(getattr(ti, "try_number", None) or 1),
        "map_index": int(getattr(ti, "map_index", -1) if getattr(ti, "map_index", None) is not None else -1),
    }


def storage_options(aws_conn_id: str | None) -> dict[str, Any]:
    """S3 credentials, region and endpoint of an Airflow AWS connection as keywords (empty: default chain)."""
    if not aws_conn_id:
        return {}
    from costaware.hooks.aws import s3_options

    return dataclasses.asdict(s3_options(aws_conn_id))


def tags_for(dag: Any, params: Mapping[str, Any]) -> dict[str, str]:
    """Allocation tags of a run: DAG tags ``key:value`` or ``key=value``, then params team/project/owner."""
    tags: dict[str, str] = {}
    for tag in sorted(getattr(dag, "tags", None) or []):
        for sep in (":", "="):
            key, found, value = str(tag).partition(sep)  # e.g. "team:ml" or "project=churn"
            if found and key.strip() and value.strip():
                tags[key.strip()] = value.strip()
                break
    from costaware.core.given import not_given

    for name in TAG_NAMES:
        param = params.get(name)
        # Blank, "None" or "null": what a template of an unset param renders, not a project called None.
        if not_given(param):
            continue
        # Stripped, as the cost listener records them: "flight-delays " was a second project.
        tags[name] = str(param).strip()
    return tags


def dag_of(task: Any) -> Any:
    """The task's DAG, or None for an operator run outside any DAG (tests, ad-hoc execute)."""
    try:
        return task.dag
    except (AttributeError, RuntimeError):  # Airflow raises for an operator without one
        return None


def recorded_tags(
    dag: Any, params: Mapping[str, Any], own: Mapping[str, str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """The tags an entry of ``dag``'s run records, and those left out (by tag, why): one rule for both.

    The DAG's ``key:value`` tags and the run's team/project/owner ``params``, then ``own`` (an operator's
    or a try's): what the cost listener records and what an operator's own entries carry must not differ.
    """
    from costaware.core.budgets import valid_tags

    return valid_tags({**tags_for(dag, dict(params)), **dict(own or {})})


def run_tags(
    operator: Any,
    context: Mapping[str, Any],
    own: Mapping[str, str] | None = None,
    *,
    drop_invalid: bool = False,
) -> dict[str, str]:
    """The run's allocation tags as the cost listener sees them, then the operator's own ``tags``.

    Every entry an operator writes itself then carries the same tags as the listener's entries: the DAG's
    ``key:value`` tags and the run's team/project/owner params. ``drop_invalid``: leave out a tag that cannot
    be recorded, as the listener leaves it out of the try's bill, instead of raising (money held where that
    bill counts).

    Raises:
        ConfigurationError: a tag that cannot be recorded (a ``,`` or ``=`` in a run's ``owner``, say),
            naming the tag, its value and what to do. The cost listener still records the try's cost under
            the valid tags.
    """
    kept, dropped = recorded_tags(dag_of(operator), context.get("params") or {}, own)
    if dropped and not drop_invalid:
        raise ConfigurationError(
            f"{'; '.join(dropped.values())}. Trigger the run again with other values (the run params "
            f"{', '.join(TAG_NAMES)} and the DAG's 'key:value' tags become ledger tags)"
        )
    return kept


def check_scope_is_tagged(scope: object, tags: Mapping[str, str], *, task_id: str, gate: str) -> None:
    """Refuse a budget ``scope`` that the task's ledger entries will not be tagged with.

    A reservation is settled by the task's entries, and a budget counts only entries carrying its scope's
    tags: a task tagged otherwise would pass the gate every run and never be charged to the budget.

    Raises:
        ConfigurationError: a tag of the scope missing from ``tags`` or set otherwise, naming both and how to
            tag the run.
    """
    from costaware.core.budgets import Scope, unset_problem

    wanted = Scope.parse(scope if isinstance(scope, Scope | Mapping) else str(scope))
    if any(unset_problem(key, value) for key, value in wanted.tags):
        # 'project=None' (an unset param) is refused where it is reserved, with its own reason: this advice
        # said to tag the DAG 'project:None' or give the run param project='None'.
        return
    wrong = [(key, value) for key, value in wanted.tags if tags.get(key) != value]
    if not wrong:
        return
    key, value = wrong[0]
    has = f"tagged {key}={tags[key]!r}" if key in tags else f"not tagged {key!r}"
    how = (
        f"the run param {key}={value!r}"
        if key in TAG_NAMES
        else f"the operator's tags={{{key!r}: {value!r}}}"
    )
    typo = _scope_typo(wanted.tags, key, value, tags)
    raise ConfigurationError(
        f"{gate} reserves in scope '{wanted}', but task {task_id!r} records its cost {has} "
        f"(its tags: {dict(tags) or 'none'}): the budget would never be charged. "
        f"{typo}{'Otherwise, tag' if typo else 'Tag'} the DAG '{key}:{value}' or give {how}"
    )


def _scope_typo(scope_tags: Sequence[tuple[str, str]], key: str, value: str, tags: Mapping[str, str]) -> str:
    """The scope meant, where its tag ``key=value`` reads as a typo of one the task has ('projct', 'chrun').

    A typo in a gate's scope is likelier than a task meant to carry it: the tag was the one to suggest.
    """
    import difflib

    if key in tags:
        if not difflib.get_close_matches(value, [tags[key]], n=1):
            return ""
        tagged = key
    else:
        close = difflib.get_close_matches(key, list(tags), n=1)
        if not close:
            return ""
        tagged = close[0]
    meant = ",".join(f"{tagged}={tags[tagged]}" if k == key else f"{k}={v}" for k, v in scope_tags)
    return f"A typo in the scope? The task's tags give scope '{meant}'. "


def check_task_of_dag(operator: Any, task_id: str, *, argument: str, otherwise: str) -> None:
    """Refuse a ``task_id`` that is no task of ``operator``'s DAG, with the closest name.

    ``argument`` names where it was given (``for_task_id``); ``otherwise`` says what a typo did before.

    Raises:
        ConfigurationError: the DAG has no such task (not checked for an operator without a DAG).
    """
    import difflib

    tasks = operator.dag.task_dict if operator.has_dag() else {}
    if not tasks or task_id in tasks:
        return
    close = difflib.get_close_matches(str(task_id), list(tasks), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else f": use one of {sorted(tasks)}"
    raise ConfigurationError(
        f"{type(operator).__name__} {operator.task_id!r}: {argument} {task_id!r} is not a task of DAG "
        f"{operator.dag.dag_id!r}{hint}; {otherwise}"
    )


def check_tags(tags: Mapping[str, str], *, owner: str) -> dict[str, str]:
    """An operator's ``tags`` argument, checked when the DAG is parsed.

    Raises:
        ValueError: a tag name or value that cannot be recorded, naming ``owner`` and the tag.
    """
    from costaware.core.budgets import valid_tags

    if not isinstance(tags, Mapping):
        raise ConfigurationError(
            f"{owner}: tags must be a dict of tag name to value, such as {{'project': 'churn'}}, got {tags!r}"
        )
    # A templated value is checked once rendered, when the task runs (run_tags).
    literal = {k: v for k, v in tags.items() if not is_template(v)}
    _, dropped = valid_tags(dict(literal))
    if dropped:
        raise ValueError(f"{owner}: {'; '.join(dropped.values())}")
    return dict(tags)


#: What marks a string as a Jinja template: an expression, a statement or a comment (rendered away).
JINJA_MARKERS = ("{{", "{%", "{#")


def is_template(value: object) -> bool:
    """Whether ``value`` is Jinja text Airflow renders (``{{ ... }}``, ``{% ... %}``, ``{# ... #}``).

    The one test of it: operators, sensors, triggers, hooks and the CLI all ask here.
    """
    return isinstance(value, str) and any(mark in value for mark in JINJA_MARKERS)


def ledger_conn_id_of(task: Any) -> str:
    """The ledger connection ``task`` writes to: its ``ledger_conn_id``, else the default.

    Every costaware operator and sensor keeps ``ledger_conn_id`` among its template fields, so the copy of
    the task that the scheduler and the API server hold (its serialized definition) has it too: a killed
    try and a run's end reach the ledger the task used. One still a template there (rendered only when the
    task runs) falls back to the default ledger.
    """
    conn_id = getattr(task, "ledger_conn_id", None)
    if conn_id is None:  # a mapped task in the scheduler keeps its arguments in partial_kwargs
        partial = getattr(task, "partial_kwargs", None)
        conn_id = partial.get("ledger_conn_id") if isinstance(partial, dict) else None
    if isinstance(conn_id, str) and conn_id.strip() and not is_template(conn_id):
        return conn_id
    return DEFAULT_LEDGER_CONN_ID


def audit_run_overrides(ledger: Any, dag: Any, dag_run: Any, dag_id: str, run_id: str) -> dict[str, Any]:
    """Record in the audit trail, once per run, the trigger params that differ from the DAG's defaults.

    Called by the spend gate before it checks anything (so a run it refuses is audited too) and by the cost
    listener after every try (so is a run with no gate). Returns what was recorded now (empty when nothing
    differs or the run was recorded already).
    """
    from costaware.adapters.ledger.governance import record_run_overrides

    given = dict(getattr(dag_run, "conf", None) or {})
    params = getattr(dag, "params", None)
    if not given or params is None:
        return {}
    defaults = dict(params.dump()) if hasattr(params, "dump") else dict(params)
    changed = {
        key: {"default": defaults.get(key), "given": value}
        for key, value in sorted(given.items())
        if defaults.get(key) != value
    }
    actor = str(getattr(dag_run, "triggering_user_name", None) or "unknown")
    if record_run_overrides(ledger, target=f"{dag_id}/{run_id}", actor=actor, overrides=changed):
        return changed
    return {}


def try_key(ti: Any) -> tuple[str, str, str, int, int]:
    """The key of one task try: dag_id, run_id, task_id, map_index, try_number."""
    return (ti.dag_id, ti.run_id, ti.task_id, int(ti.map_index), int(ti.try_number))


def first_failed_tasks(ti: Any, *, missed: str | None = None) -> list[str]:
    """The tasks of ``ti``'s run that failed first: failed, with no failed task upstream of them.

    A task that runs "all_done" and misses an upstream task's result names these: that upstream task may
    only have failed for theirs (``upstream_failed``), and its log says nothing. Empty where Airflow cannot
    say (outside a run, a test's stand-in). A failed task no longer in the DAG (removed since the run began)
    is left out: its place in the DAG is unknown.

    ``missed``: the upstream task whose result is missing. Empty unless it did not run (``upstream_failed``,
    or no state): one that ran and failed (an "all_done" task after a failed trial, say) is to blame
    itself, and its own log says why.
    """
    try:
        crumbs = ti.get_task_breadcrumbs(dag_id=ti.dag_id, run_id=ti.run_id)
        states = [(c["task_id"], _state_name(c["state"])) for c in crumbs]
        if missed is not None and any(t == missed and s not in ("upstream_failed", None) for t, s in states):
            return []
        failed = {task_id for task_id, state in states if state == "failed"}
        dag = ti.task.dag
        return sorted(
            task_id
            for task_id in failed
            if task_id in dag.task_dict
            and not failed & dag.get_task(task_id).get_flat_relative_ids(upstream=True)
        )
    except Exception:  # a pointer for people: the failure it goes into stands without it
        return []


def _state_name(state: Any) -> str | None:
    """A task state (an enum or its text) as text; None for a task with no state yet."""
    return None if state is None else str(getattr(state, "value", state))


def annotate_task(ti: Any, **fields: Any) -> None:
    """Tell the listener, from inside a running task, what this try really ran on or was.

    Operators learn things at run time that the DAG does not say: the tuning trial a mapped task ran,
    the market and live price a spot decision chose, the cause of a failure. The listener runs in the
    same process right after ``execute``, so it reads these before it prices the try.

    Args:
        ti: The running task instance (``context["ti"]``).
        **fields: Any of ``trial``, ``instance_type``, ``region``, ``market``, ``usd_per_hour``,
            ``cause``, ``note``, and ``tags`` (a dict merged into the entry's tags).

    Raises:
        ValueError: an unknown field name.
    """
    unknown = sorted(set(fields) - set(ANNOTATION_FIELDS))
    if unknown:
        raise ValueError(f"annotate_task got unknown field(s) {unknown}: use {', '.join(ANNOTATION_FIELDS)}")
    _ANNOTATIONS.setdefault(try_key(ti), {}).update(fields)


def pop_annotations(ti: Any) -> dict[str, Any]:
    """What the running try told :func:`annotate_task` (read once, by the listener)."""
    return _ANNOTATIONS.pop(try_key(ti), {})


@contextmanager
def airflow_errors() -> Iterator[None]:
    """Map costaware errors raised inside the block to Airflow exceptions.

    User or configuration errors fail the task without retry (retrying cannot fix a bad value); transient
    errors (the ledger is unreachable) are re-raised so Airflow retries them.
    """
    from airflow.sdk.exceptions import AirflowFailException

    try:
        yield
    except (ConfigurationError, CrossRegionEgressError, BudgetExceededError) as e:
        raise AirflowFailException(str(e)) from e
