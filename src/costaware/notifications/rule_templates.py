"""What a budget's own notifiers render with, and the checks of their templates before an alert is due.

A rule stored in the ledger renders with the alert and the run's names only (:func:`rule_context`), never
the task's context; a template that fails with them, or reads a field an alert lacks, is refused by name.

Split from :mod:`costaware.notifications.budget`, which re-exports every public name.
"""

from __future__ import annotations

import copy
import difflib
import shlex
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from costaware.core.budget_forecast import FORECAST
from costaware.core.errors import ConfigurationError
from costaware.notifications.alert_config import notifiers_from_spec
from costaware.notifications.budget_alert import BudgetAlert

# What a budget's own notifiers' templates see (rule_context): no secrets reachable from the ledger's rows.
RULE_TEMPLATE_NAMES = ("costaware_alert", "dag_id", "run_id", "task_id", "ds", "ts")


def rule_context(context: Mapping[str, Any]) -> dict[str, Any]:
    """The alert and the run's names, as plain values: no ``conn``, ``var``, ``ti`` or other live objects."""
    ti = context.get("ti") or context.get("task_instance")
    names = {name: getattr(ti, name, None) for name in ("dag_id", "run_id", "task_id")}
    plain = {key: context.get(key) for key in ("ds", "ts", "costaware_alert")}
    return {key: value for key, value in {**names, **plain}.items() if value is not None}


def sample_rule_context(budget: str) -> dict[str, Any]:
    """What a budget's own notifiers would render with at an alert of ``budget``, for checks before one."""
    alert = BudgetAlert(budget, "2026-01", "80%", Decimal("8"), Decimal("10"), Decimal("12"))
    names = {name: f"<{name}>" for name in RULE_TEMPLATE_NAMES if name != "costaware_alert"}
    return {**names, "costaware_alert": alert.as_dict()}


def rule_template_failure(
    spec: object, context: Mapping[str, Any], notifier: Any = None
) -> tuple[str, str] | None:
    """The first template of a budget's own notifier that fails to render with ``context``, and why.

    Rendered as the notifier renders when it sends (its ``template_fields``, its Jinja environment), so that
    what renders there is never refused: ``{{ conn is defined }}`` renders, ``{{ ti.task_id }}`` fails
    ("'ti' is undefined") at every alert of the budget. ``notifier`` is the one built from ``spec``; where
    its class cannot be imported here, every string in the kwargs is rendered as a notifier would.
    """
    if notifier is not None:
        trial = copy.copy(notifier)  # a notifier renders in place
        fields = [(field, getattr(trial, field, None)) for field in trial.template_fields]
        # As BaseNotifier.__call__: the template fields join the context; falsy ones are not rendered.
        merged = {**context, **dict(fields)}
        env = trial.get_template_env(dag=merged.get("dag"))
        for _, value in fields:
            if not value or callable(value):
                continue
            try:
                trial.render_template(value, merged, env, set())
            except Exception as e:  # whatever fails here fails at every alert of the budget
                return _first_template(value), f"{type(e).__name__}: {e}"
        return None
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(cache_size=0)  # a notifier's own, without a DAG
    kwargs = spec.get("kwargs") if isinstance(spec, Mapping) else None
    for template in _strings(kwargs):
        try:
            env.from_string(template).render(context)
        except Exception as e:
            return template, f"{type(e).__name__}: {e}"
    return None


def unknown_alert_fields(spec: object, *, skip_guarded: bool = False) -> list[tuple[str, str, str | None]]:
    """Each ``costaware_alert.<field>`` a notifier's kwargs read that an alert lacks, with the closest one.

    A budget's own notifiers render without a DAG, where Jinja reads a missing field as empty:
    ``{{ costaware_alert.mesage }}`` rendered, and the alerts went out with an empty subject or text.

    Args:
        spec: ``{"class": ..., "kwargs": {...}}``.
        skip_guarded: Leave out a field read through ``| default(...)`` or tested with ``is defined`` (``is
            undefined``) in its template: under the DAG's StrictUndefined (``[costaware] alert_notifiers``)
            such a template renders.

    Returns:
        ``(template, field, closest field or None)`` for each such field, once per template.
    """
    from jinja2 import nodes
    from jinja2.exceptions import TemplateSyntaxError
    from jinja2.sandbox import SandboxedEnvironment

    fields = list(BudgetAlert("b", "p", FORECAST, Decimal(0), Decimal(0), Decimal(0)).as_dict())
    env = SandboxedEnvironment()
    kwargs = spec.get("kwargs") if isinstance(spec, Mapping) else None
    out: list[tuple[str, str, str | None]] = []
    for template in _strings(kwargs):
        try:
            tree = env.parse(template)
        except TemplateSyntaxError:  # refused by rendering it, or not a template field
            continue
        read: list[tuple[nodes.Expr, nodes.Expr, Any]] = [
            (n, n.node, n.attr) for n in tree.find_all(nodes.Getattr)
        ]
        read += [
            (n, n.node, n.arg.value) for n in tree.find_all(nodes.Getitem) if isinstance(n.arg, nodes.Const)
        ]
        defaulted = {id(f.node) for f in tree.find_all(nodes.Filter) if f.name in ("default", "d")}
        tested = {id(t.node) for t in tree.find_all(nodes.Test) if t.name in ("defined", "undefined")}
        guarded = _reads_inside_their_defined_test(tree, read)
        said: set[str] = set()
        for lookup, node, field in read:
            if not (isinstance(node, nodes.Name) and node.name == "costaware_alert"):
                continue
            if not isinstance(field, str) or field in fields or hasattr(dict, field):  # .items() is a dict's
                continue
            if field in said or (skip_guarded and id(lookup) in defaulted | tested | guarded):
                continue
            said.add(field)
            close = difflib.get_close_matches(field, fields, n=1)
            out.append((template, field, close[0] if close else None))
    return out


def _reads_inside_their_defined_test(tree: Any, read: list[tuple[Any, Any, Any]]) -> set[int]:
    """The ``costaware_alert.<field>`` reads inside ``{% if costaware_alert.<field> is defined %}``'s body.

    Only those render under StrictUndefined: a read of the field elsewhere in the template (after the block,
    in its ``else``, under ``is undefined``) fails, and a test anywhere hid it from the warning.
    """
    from jinja2 import nodes

    def alert_field(lookup: Any) -> Any:
        for node, base, field in read:
            if node is lookup and isinstance(base, nodes.Name) and base.name == "costaware_alert":
                return field
        return None

    inside: set[int] = set()
    for block in tree.find_all(nodes.If):
        test = block.test
        if not (isinstance(test, nodes.Test) and test.name == "defined"):
            continue
        field = alert_field(test.node)
        if field is None:
            continue
        body = {id(n) for part in block.body for n in part.find_all((nodes.Getattr, nodes.Getitem))}
        inside |= {id(node) for node, _, f in read if f == field and id(node) in body}
    return inside


def _strings(value: object) -> list[str]:
    """The strings in ``value``, at any depth of mappings and lists."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings(item)]
    return []


def _first_template(value: object) -> str:
    """The template to name of a template field's value (a list of templates is named whole)."""
    return value if isinstance(value, str) else repr(value)


def refuse_a_rule_that_cannot_render(
    budget: str, specs: Sequence[object], context: Mapping[str, Any], notifiers: Sequence[Any] | None = None
) -> None:
    """Refuse a budget's stored notifiers when one fails to render its templates, naming what to fix.

    ``alerts set`` refuses them, but a rule stored before it did (or written past it) reached the worker,
    where every alert of the budget failed with only "'ti' is undefined", given back and failed again.

    Args:
        budget: The budget's label (``scope/period``).
        specs: The rule's notifiers as stored (``{"class": ..., "kwargs": ...}``).
        context: What they render with: ``rule_context`` of the alert, or ``sample_rule_context``.
        notifiers: The notifiers built from ``specs``, one each; default: built here where importable.

    Raises:
        ConfigurationError: a notifier's template fails to render with ``context``.
    """
    for index, spec in enumerate(specs):
        notifier = notifiers[index] if notifiers is not None else _built_or_none(spec)
        failure = rule_template_failure(spec, context, notifier)
        if failure is None:
            continue
        template, why = failure
        scope, _, period = budget.rpartition("/")
        class_path = spec.get("class") if isinstance(spec, Mapping) else spec
        raise ConfigurationError(
            f"the alert rule of budget {budget!r} has notifier {class_path!r} with template {template!r}, "
            f"which fails to render ({why}): a budget's own notifiers see only {list(RULE_TEMPLATE_NAMES)}; "
            f"set its notifiers again with templates that use only those (e.g. "
            f"{{{{ costaware_alert.message }}}}): costaware alerts set --scope {shlex.quote(scope)} --period "
            f"{period} --notifiers '[...]', or --notifiers '[]' for the [costaware] notifiers"
        )


def _built_or_none(spec: object) -> Any:
    """The notifier ``spec`` names, built; None where it cannot be here (its class is checked elsewhere)."""
    try:
        return notifiers_from_spec([spec])[0]  # type: ignore[list-item]
    except ConfigurationError:
        return None
