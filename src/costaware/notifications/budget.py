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

The checks are here; the alert itself is in :mod:`.budget_alert`, the settings and notifier specs in
:mod:`.alert_config`, and what a budget's own notifiers render with in :mod:`.rule_templates`. Every name
stays importable from here.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from costaware.core.budget_forecast import DEFAULT_THRESHOLDS, FORECAST, crossed_thresholds, parse_thresholds
from costaware.core.errors import BudgetNotFoundError, ConfigurationError
from costaware.glue import DEFAULT_LEDGER_CONN_ID, dag_of
from costaware.notifications.alert_config import close_class_path as close_class_path
from costaware.notifications.alert_config import close_module_path as close_module_path
from costaware.notifications.alert_config import configured_notifiers as configured_notifiers
from costaware.notifications.alert_config import configured_thresholds as configured_thresholds
from costaware.notifications.alert_config import notifiers_from_spec as notifiers_from_spec
from costaware.notifications.alert_config import require_notifier_class as require_notifier_class
from costaware.notifications.budget_alert import BudgetAlert as BudgetAlert
from costaware.notifications.rule_templates import RULE_TEMPLATE_NAMES as RULE_TEMPLATE_NAMES
from costaware.notifications.rule_templates import (
    refuse_a_rule_that_cannot_render as refuse_a_rule_that_cannot_render,
)
from costaware.notifications.rule_templates import rule_context as rule_context
from costaware.notifications.rule_templates import rule_template_failure as rule_template_failure
from costaware.notifications.rule_templates import sample_rule_context as sample_rule_context
from costaware.notifications.rule_templates import unknown_alert_fields as unknown_alert_fields

log = logging.getLogger(__name__)


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
