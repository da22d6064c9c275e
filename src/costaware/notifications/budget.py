"""Budget alerts: each threshold of each budget fires at most once per period, through Airflow notifiers.

A spend that passes several percentages at once sends the highest of them only; the lower ones are recorded
as covered by it.

The thresholds (default ``50%, 80%, 100%`` of the cap and ``forecast``: the period-end forecast passes the
cap) and the notifiers are set per budget in the ledger (``costaware alerts set``), else come from
``[costaware] alert_thresholds`` and ``[costaware] alert_notifiers``. A notifier is any
``airflow.sdk.BaseNotifier`` (SMTP, Slack, your own), given as
``{"class": "<import path>", "kwargs": {...}}``.
Every alert is also written to the log of the task that saw it.

Which worker sends is decided in the ledger: the first to record (budget, period, threshold) sends; the
others see the row and stay quiet. A notifier that fails is logged; the task goes on.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import json
import logging
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from costaware.core.budget_forecast import (
    DEFAULT_THRESHOLDS,
    FORECAST,
    crossed_thresholds,
    every_threshold_refused,
    parse_thresholds,
)
from costaware.core.errors import BudgetNotFoundError, ConfigurationError
from costaware.core.money import format_usd_exact
from costaware.glue import DEFAULT_LEDGER_CONN_ID, dag_of
from costaware.importing import closest_public_name
from costaware.settings import option

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BudgetAlert:
    """One threshold crossed by one budget in one period."""

    budget: str
    period_key: str
    threshold: str
    spent_usd: Decimal
    cap_usd: Decimal
    forecast_usd: Decimal

    @property
    def message(self) -> str:
        # Every digit to the micro-dollar, as on the Cost page: a forecast of $12.000009 read "$12.00" next
        # to "spent $0.000009", figures that no longer added up.
        if self.threshold == FORECAST:
            what = f"is forecast to end the period at {format_usd_exact(self.forecast_usd)}, above its cap"
        else:
            what = f"passed {self.threshold} of its cap"
        return (
            f"costaware budget '{self.budget}' ({self.period_key}) {what}: spent "
            f"{format_usd_exact(self.spent_usd)} of {format_usd_exact(self.cap_usd)}, "
            f"forecast {format_usd_exact(self.forecast_usd)}"
        )

    def as_dict(self) -> dict[str, str]:
        return {
            "budget": self.budget,
            "period": self.period_key,
            "threshold": self.threshold,
            "spent_usd": str(self.spent_usd),
            "cap_usd": str(self.cap_usd),
            "forecast_usd": str(self.forecast_usd),
            "message": self.message,
        }


def configured_thresholds() -> tuple[str, ...]:
    """``[costaware] alert_thresholds``, else the defaults."""
    raw = option("alert_thresholds")
    if not raw:
        return DEFAULT_THRESHOLDS
    try:
        return parse_thresholds(raw)
    except ConfigurationError as e:
        # Every budget without its own rule reads it: name where the value came from, and every bad item
        # with the good ones set aside (`5,50`: the defaults stood in for the 50% too, unsaid).
        raise ConfigurationError(
            f"[costaware] alert_thresholds ({raw!r}, or AIRFLOW__COSTAWARE__ALERT_THRESHOLDS): "
            f"{every_threshold_refused(raw, refused_whole='the setting') or e}"
        ) from e


def configured_notifiers() -> list[Any]:
    """Notifiers built from ``[costaware] alert_notifiers`` (a JSON list of ``{"class", "kwargs"}``).

    Raises:
        ConfigurationError: the setting is not such a list, or a class cannot be imported.
    """
    raw = option("alert_notifiers")
    return notifiers_from_spec(raw) if raw else []


def notifiers_from_spec(raw: str | Sequence[Mapping[str, Any]]) -> list[Any]:
    """Build notifiers from ``[{"class": "pkg.mod.Notifier", "kwargs": {...}}, ...]`` (JSON or a list)."""
    try:
        specs = json.loads(raw) if isinstance(raw, str) else list(raw)
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"alert_notifiers {raw!r} is not JSON: {e}") from e
    out = []
    for spec in specs:
        if not isinstance(spec, Mapping) or not isinstance(spec.get("class"), str):
            raise ConfigurationError(
                f"alert notifier {spec!r} is not {{'class': '<module.Class>', 'kwargs': {{...}}}}"
            )
        module, _, name = spec["class"].rpartition(".")
        try:
            imported = importlib.import_module(module)
        except (ImportError, ValueError) as e:
            # A module misspelt in a package that is here (smpt for smtp): no provider install would fix it.
            close = close_module_path(spec["class"], e.name if isinstance(e, ModuleNotFoundError) else None)
            fix = f"fix the module path (did you mean {close}?)" if close else "install its provider"
            raise ConfigurationError(
                f"alert notifier class {spec['class']!r} cannot be imported: {e}; {fix}"
            ) from e
        cls = getattr(imported, name, None)
        if cls is None:
            # The module is there: a misspelt class name, which no provider install would fix.
            close = close_class_path(imported, module, name)
            hint = f" (did you mean {close}?)" if close else ""
            raise ConfigurationError(
                f"alert notifier class {spec['class']!r}: module {module!r} has no {name!r}{hint}; "
                "fix the class name"
            )
        require_notifier_class(cls, spec["class"])
        kwargs = dict(spec.get("kwargs") or {})
        try:
            out.append(cls(**kwargs))
        except Exception as e:  # missing or unknown kwargs ("to" for SmtpNotifier): refused by name
            raise ConfigurationError(
                f"alert notifier {spec['class']!r} cannot be made with kwargs {sorted(kwargs)}: {e}"
            ) from e
    return out


def close_class_path(module: object, module_name: str, name: str) -> str | None:
    """The path of the public name in ``module`` closest to a misspelt class ``name``, or None.

    ``notifiers_from_spec`` (the workers) and ``costaware alerts set`` suggest it alike.
    """
    close = closest_public_name(module, name)
    return f"{module_name}.{close}" if close else None


def close_module_path(class_path: str, missing: str | None) -> str | None:
    """``class_path`` with its missing module ``missing`` replaced by the closest one of its package, or None.

    Only where that package is a regular one importable here (``airflow.providers.smtp.notifications``, for
    ``...notifications.smpt``) and the close module imports and has the class: a provider missing under the
    namespace ``airflow.providers``, or a module only a newer provider has, may be installed elsewhere.
    """
    import pkgutil

    package_name, _, last = (missing or "").rpartition(".")
    if not package_name or not class_path.startswith(f"{missing}."):
        return None
    try:
        package = importlib.import_module(package_name)
    except Exception:
        return None
    if getattr(package, "__file__", None) is None or not hasattr(package, "__path__"):  # a namespace
        return None
    close = difflib.get_close_matches(last, [m.name for m in pkgutil.iter_modules(package.__path__)], n=1)
    if not close:
        return None
    # Suggested only where that module has the class: ...notifications.sesv2 (a newer provider, maybe on the
    # workers) is no typo of ...notifications.ses, which has no SesV2Notifier.
    fixed_module, _, name = f"{package_name}.{close[0]}{class_path[len(missing or '') :]}".rpartition(".")
    try:
        module = importlib.import_module(fixed_module)
    except Exception:
        return None
    # The class exactly: a close one (SesNotifier for SesV2Notifier) is more likely another class than a typo.
    return f"{fixed_module}.{name}" if hasattr(module, name) else None


# What a budget's own notifiers' templates see (rule_context): no secrets reachable from the ledger's rows.
RULE_TEMPLATE_NAMES = ("costaware_alert", "dag_id", "run_id", "task_id", "ds", "ts")


def rule_context(context: Mapping[str, Any]) -> dict[str, Any]:
    """The alert and the run's names, as plain values: no ``conn``, ``var``, ``ti`` or other live objects."""
    ti = context.get("ti") or context.get("task_instance")
    names = {name: getattr(ti, name, None) for name in ("dag_id", "run_id", "task_id")}
    plain = {key: context.get(key) for key in ("ds", "ts", "costaware_alert")}
    return {key: value for key, value in {**names, **plain}.items() if value is not None}


def require_notifier_class(cls: object, class_path: str) -> None:
    """Refuse anything but an Airflow notifier class: a ledger row names it, and workers would call it.

    ``os.system`` with ``{"command": ...}`` was called as a "notifier": whoever can write alert rules could
    run commands on every worker.

    Raises:
        ConfigurationError: ``cls`` is not a subclass of ``airflow.sdk.BaseNotifier``.
    """
    from airflow.sdk import BaseNotifier

    if not (isinstance(cls, type) and issubclass(cls, BaseNotifier)):
        raise ConfigurationError(
            f"alert notifier {class_path!r} is not an Airflow notifier class (a subclass of "
            "airflow.sdk.BaseNotifier, e.g. airflow.providers.slack.notifications.slack.SlackNotifier): not "
            "called"
        )


def check_budget_alerts(
    ledger: Any,
    tags: Mapping[str, str] | str,
    *,
    context: Mapping[str, Any] | None = None,
    thresholds: Sequence[str] | str | None = None,
    notifiers: Sequence[Any] | None = None,
    schedule: Any = None,
    task_log: logging.Logger | Any = None,
    at: datetime | None = None,
) -> list[BudgetAlert]:
    """Send the alerts newly due for every day-, month- and total-period budget covering ``tags``.

    Args:
        ledger: The ledger.
        tags: Tags of the spend just made (or a scope string): every budget covering them is checked.
        context: The task's context, passed on to the notifiers (with ``costaware_alert`` added).
        thresholds: For budgets without their own rule; default: ``[costaware] alert_thresholds``, else
            50 %, 80 %, 100 % and forecast.
        notifiers: ``BaseNotifier`` instances for budgets without their own notifiers; default:
            ``[costaware] alert_notifiers``.
        schedule: ``RunSchedule`` for the forecast; default: no scheduled runs known.
        task_log: Where each alert is also written (the task's logger).
        at: The instant to check at; default now.

    Returns:
        The alerts this call sent (those another worker sent first are not repeated).
    """
    from costaware.adapters.ledger.governance import (
        NoSchedule,
        alert_rules,
        alerts_sent,
        budget_outlook,
        claim_alert,
        record_refused_alert,
        rule_fingerprint,
        unclaim_alert,
    )
    from costaware.core.budgets import Period, Scope
    from costaware.core.ledger import utcnow

    out_log = task_log or log
    at = at or utcnow()  # one instant for every budget: the DAG's runs in a window are counted once
    # A bad [costaware] setting silenced every budget's alerts, those with rules of their own too: it is
    # said at every check, and the built-in defaults stand in for it.
    if thresholds is not None:  # the caller's own: a bad one is the caller's error, raised
        default_thresholds = parse_thresholds(thresholds)
    else:
        try:
            default_thresholds = configured_thresholds()
        except ConfigurationError as e:
            out_log.error(
                "costaware: %s; the defaults %s are used until it is fixed", e, ",".join(DEFAULT_THRESHOLDS)
            )
            default_thresholds = DEFAULT_THRESHOLDS
    try:
        default_targets = configured_notifiers() if notifiers is None else list(notifiers)
    except ConfigurationError as e:
        out_log.error(
            "costaware: [costaware] alert_notifiers is refused (%s): alerts of budgets without notifiers of "
            "their own go to the task log only until it is fixed",
            e,
        )
        default_targets = []
    rules = alert_rules(ledger)
    scope = Scope.parse(tags)
    sent: list[BudgetAlert] = []
    try:
        covering = [b for b in ledger.budgets() if b.scope.covers(scope) and b.period is not Period.RUN]
    except BudgetNotFoundError:
        return sent
    for budget in covering:
        rule = rules.get(budget.label)
        chosen = rule.thresholds if rule and rule.thresholds else default_thresholds
        targets, own = default_targets, False
        refused: ConfigurationError | None = None  # its own notifiers, refused with no [costaware] ones
        if rule and rule.notifiers:
            try:
                targets, own = notifiers_from_spec(rule.notifiers), True
            except ConfigurationError as e:  # one bad rule must not silence the other budgets' alerts
                if default_targets:
                    _log_refused_rule(out_log, budget.label, e, default_targets)
                else:
                    refused = e
        rendered_once = False  # the rule's templates are tried with this check's first alert of the budget
        sent_before: set[tuple[str, str, str]] | None = None  # read where a refused rule needs it, once
        outlook = budget_outlook(ledger, budget, schedule or NoSchedule(), at=at)
        usage, forecast = outlook.usage, outlook.forecast
        higher: str | None = None  # the highest percentage reached, sent now or by an earlier check
        for threshold in _highest_first(
            crossed_thresholds(
                chosen, spent_usd=usage.spent_usd, cap_usd=usage.cap_usd, forecast_usd=forecast.forecast_usd
            )
        ):
            alert = BudgetAlert(
                budget.label,
                usage.period_key,
                threshold,
                usage.spent_usd,
                usage.cap_usd,
                forecast.forecast_usd,
            )
            if threshold != FORECAST and higher is not None:
                # One spend past several percentages (40 % to 105 %) sent "passed 50 %", "passed 80 %" and
                # "passed 100 %" at once: the highest is sent, the lower ones are recorded as covered by it,
                # so that they do not fire later in the period either.
                covered = {**alert.as_dict(), "covered_by": higher}
                claim_alert(ledger, budget.label, usage.period_key, threshold, details=covered)
                continue
            if threshold != FORECAST:
                higher = threshold
            if own and rule and not default_targets and not rendered_once:
                # Nothing else would send it: tried before the claim, so that a refused rule claims nothing.
                rendered_once = True
                refused = _rule_render_refusal(budget.label, rule, context, alert, targets)
                if refused is not None:
                    targets, own = [], False
            if refused is not None and rule:
                if sent_before is None:
                    sent_before = set(alerts_sent(ledger, budget.label))
                if (budget.label, usage.period_key, threshold) in sent_before:
                    continue  # sent before the rule went bad
                # Claimed, logged and given back at every check of the period (10 checks: 21 audit lines,
                # 10 errors), and its lower thresholds claimed as covered by an alert never sent: kept
                # unclaimed instead, said and audited once per rule as stored, sent once the rule changes.
                if record_refused_alert(
                    ledger,
                    budget.label,
                    usage.period_key,
                    threshold,
                    rule_fingerprint=rule_fingerprint(rule.notifiers or []),
                    details={**alert.as_dict(), "unsent": "its alert rule is refused"},
                ):
                    out_log.warning("%s", alert.message)
                    _log_refused_rule(out_log, budget.label, refused, default_targets)
                break
            if not claim_alert(ledger, budget.label, usage.period_key, threshold, details=alert.as_dict()):
                continue
            out_log.warning("%s", alert.message)
            sent.append(alert)
            notify_context = {**(context or {}), "costaware_alert": alert.as_dict()}
            if own and rule and not rendered_once:
                # With [costaware] notifiers to fall back on, tried once the alert is claimed.
                rendered_once = True
                render_refusal = _rule_render_refusal(budget.label, rule, context, alert, targets)
                if render_refusal is not None:
                    _log_refused_rule(out_log, budget.label, render_refusal, default_targets)
                    targets, own = default_targets, False
            if own:
                # A budget's own notifiers come from a ledger row, not the deployment's config: their
                # templates get the alert and the run's names, not the context (`conn`, `var` read secrets).
                notify_context = rule_context(notify_context)
            failures = []
            for notifier in targets:
                try:
                    # A notifier renders its templates in place: each alert gets a fresh copy.
                    copy.copy(notifier)(notify_context)
                except Exception as e:  # a broken mail server must not fail the task that spent
                    failures.append(f"{type(notifier).__name__}: {e}")
                    out_log.error(
                        "costaware: notifier %s failed for %s: %s", type(notifier).__name__, alert, e
                    )
            if targets and len(failures) == len(targets):
                # None delivered it: given back, the next check sends it again (it was lost for the period).
                try:
                    unclaim_alert(ledger, budget.label, usage.period_key, threshold, why="; ".join(failures))
                except Exception as e:
                    out_log.error("costaware: alert %s stays claimed, unsent: %s", alert, e)
                sent.remove(alert)
    return sent


def _rule_render_refusal(
    budget: str, rule: Any, context: Mapping[str, Any] | None, alert: BudgetAlert, notifiers: Sequence[Any]
) -> ConfigurationError | None:
    """Why the budget's own notifiers cannot send ``alert`` (a template fails to render), or None.

    A stored rule whose template fails to render (`{{ ti.task_id }}`) failed every alert of its budget,
    given back and failed again all period: it is refused, by name.
    """
    try:
        refuse_a_rule_that_cannot_render(
            budget,
            rule.notifiers or [],
            rule_context({**(context or {}), "costaware_alert": alert.as_dict()}),
            notifiers,
        )
    except ConfigurationError as e:
        return e
    return None


def _log_refused_rule(
    out_log: Any, budget: str, error: ConfigurationError, default_targets: Sequence[Any]
) -> None:
    """Say that a budget's own notifiers are refused, what sends its alerts instead and how to fix it."""
    instead = (
        "the [costaware] ones are used"
        if default_targets
        else "no [costaware] alert_notifiers are set: its alerts are kept unsent, to be sent once it is fixed"
    )
    fix = "" if "costaware alerts set" in str(error) else "; fix them with `costaware alerts set`"
    out_log.error(
        "costaware: the alert notifiers of budget %s are refused (%s): %s%s", budget, error, instead, fix
    )


def _highest_first(thresholds: Sequence[str]) -> list[str]:
    """The percentages from the highest down, then ``forecast`` (it is about another figure)."""
    percents = sorted(
        (t for t in thresholds if t != FORECAST), key=lambda t: Decimal(t.removesuffix("%")), reverse=True
    )
    return [*percents, *(t for t in thresholds if t == FORECAST)]


def alerts_after_spend(
    ti: Any, tags: Mapping[str, str], ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID
) -> None:
    """The listener's call after a try's cost is recorded: check the budgets its tags fall in.

    The forecast counts the runs the task's own DAG schedules (a worker cannot read other DAGs' timetables
    in Airflow 3). Errors are logged: an alert never fails the task.
    """
    from costaware.adapters.airflow_schedule import TASK_MAX_RUNS, TimetableSchedule
    from costaware.hooks.ledger import CostLedgerHook

    task = getattr(ti, "task", None)
    try:
        dag = dag_of(task)  # not getattr's default: an operator in no DAG raises RuntimeError
        timetable = getattr(dag, "timetable", None)
        # Bounded: the listener that calls this is killed past [core] task_success_overtime.
        schedule = TimetableSchedule(
            {ti.dag_id: timetable} if timetable is not None else {}, max_runs=TASK_MAX_RUNS
        )
        try:
            context: Mapping[str, Any] = ti.get_template_context()
        except Exception:  # the context only feeds the notifiers' templates
            context = {}
        check_budget_alerts(
            CostLedgerHook(ledger_conn_id).get_conn(),
            tags,
            context=context,
            schedule=schedule,
            task_log=getattr(task, "log", None) or log,  # the operator's logger writes to the task log
        )
    except Exception as e:
        log.error("costaware: budget alerts for %s.%s not checked: %s", ti.dag_id, ti.task_id, e)


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
