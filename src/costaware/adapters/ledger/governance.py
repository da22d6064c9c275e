"""Budget governance in the ledger: alert claims and rules, period-end forecasts, visibility, run overrides.

Alert claims use the unique key (budget, period, threshold): of many workers that see a threshold crossed at
once, the one whose insert succeeds sends the alert. Every change is audited (``audit``) in its transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol

from sqlalchemy import String, select
from sqlalchemy.exc import IntegrityError

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.audit import append_audit
from costaware.adapters.ledger.budget_figures import (
    budgets_dags,
    budgets_holding_dags,
    budgets_recent_run_costs,
    holding_dag,
    latest_run_costs,
    recent_runs_query,
)
from costaware.adapters.ledger.budgets import list_budgets
from costaware.adapters.ledger.budgets import usage as budget_usages
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.core.budget_forecast import (
    MAX_THRESHOLD_DECIMALS,
    SpendForecast,
    every_threshold_refused,
    forecast_spend,
    outlooks_from,
    parse_thresholds,
    sort_thresholds,
)
from costaware.core.budget_listing import budgets_said
from costaware.core.budgets import Budget, Period, PeriodWindow, Scope, period_window
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import BudgetUsage, utcnow

RECENT_RUNS = 10
LOOKBACK = timedelta(days=60)

log = logging.getLogger(__name__)


def claim_alert(
    ledger: LedgerDatabase, budget: str, period_key: str, threshold: str, *, details: Mapping[str, Any]
) -> bool:
    """Record that ``threshold`` of ``budget`` fired this period; False when someone recorded it first.

    The claim and its audit line commit together, before the alert is sent: an alert is sent at most once.
    """
    try:
        with ledger.transaction() as conn:
            conn.execute(
                schema.alerts_sent.insert().values(
                    budget=budget, period_key=period_key, threshold=threshold, sent_at=utcnow()
                )
            )
            append_audit(
                conn,
                actor="costaware",
                action="alert",
                target=f"{budget}@{period_key}",
                details={"threshold": threshold, **details},
            )
    except IntegrityError:
        return False
    return True


def unclaim_alert(ledger: LedgerDatabase, budget: str, period_key: str, threshold: str, *, why: str) -> None:
    """Give back an alert's claim that no notifier could deliver, so that a later check sends it again.

    Claimed before sending (at most once), an alert whose every notifier failed (a mail server down for a
    minute) was never sent that period. The audit keeps both lines: the claim, and why it was given back.
    """
    t = schema.alerts_sent
    with ledger.transaction() as conn:
        conn.execute(
            t.delete().where(t.c.budget == budget, t.c.period_key == period_key, t.c.threshold == threshold)
        )
        append_audit(
            conn,
            actor="costaware",
            action="alert",
            target=f"{budget}@{period_key}",
            details={"threshold": threshold, "unsent": why},
        )


def rule_fingerprint(notifiers: Sequence[Mapping[str, Any]]) -> str:
    """A short hash of a budget's notifiers as stored: it changes whenever `alerts set` changes them."""
    stored = json.dumps(list(notifiers), sort_keys=True, default=str)
    return hashlib.sha256(stored.encode()).hexdigest()[:16]


def record_refused_alert(
    ledger: LedgerDatabase,
    budget: str,
    period_key: str,
    threshold: str,
    *,
    rule_fingerprint: str,
    details: Mapping[str, Any],
) -> bool:
    """Audit an alert kept unsent because its budget's rule is refused; False when this rule was audited.

    Once per (rule as stored, threshold, period): every check of the period wrote two lines and an error.
    """
    a = schema.audit
    with ledger.transaction() as conn:
        rows = conn.execute(
            select(a.c.details).where(a.c.action == "alert", a.c.target == f"{budget}@{period_key}")
        ).scalars()
        if any(
            isinstance(d, Mapping)
            and d.get("threshold") == threshold
            and d.get("refused_rule") == rule_fingerprint
            for d in rows
        ):
            return False
        append_audit(
            conn,
            actor="costaware",
            action="alert",
            target=f"{budget}@{period_key}",
            details={"threshold": threshold, **details, "refused_rule": rule_fingerprint},
        )
    return True


def alerts_sent(ledger: LedgerDatabase, budget: str | None = None) -> list[tuple[str, str, str]]:
    """(budget, period key, threshold) of every alert sent, in the order they were sent."""
    t = schema.alerts_sent
    query = select(t.c.budget, t.c.period_key, t.c.threshold).order_by(t.c.id)
    if budget is not None:
        query = query.where(t.c.budget == budget)
    with ledger.reading() as conn:
        return [(r[0], r[1], r[2]) for r in conn.execute(query)]


# -- forecasts -------------------------------------------------------------------------------------


class RunSchedule(Protocol):
    """How many runs a DAG's timetable schedules in ``[start, end)``."""

    def runs_between(self, dag_id: str, start: datetime, end: datetime) -> int: ...


class NoSchedule:
    """No scheduled runs known: the forecast is what is already committed."""

    def runs_between(self, dag_id: str, start: datetime, end: datetime) -> int:
        return 0


def recent_run_costs(
    ledger: LedgerDatabase,
    budget: Budget,
    *,
    at: datetime,
    runs: int = RECENT_RUNS,
    lookback: timedelta = LOOKBACK,
) -> dict[str, list[Decimal]]:
    """Actual cost of each DAG's last ``runs`` runs in the budget's scope, in ``[at - lookback, at]``."""
    query = recent_runs_query(budget, at, lookback)
    with ledger.reading() as conn:
        return latest_run_costs(conn.execute(query).all(), runs)


@dataclass(frozen=True, slots=True)
class BudgetOutlook:
    """A budget now and at the end of its period."""

    budget: Budget
    usage: BudgetUsage
    window: PeriodWindow
    forecast: SpendForecast


def budget_outlook(
    ledger: LedgerDatabase,
    budget: Budget,
    schedule: RunSchedule,
    *,
    at: datetime | None = None,
    without: str | None = None,
) -> BudgetOutlook:
    """Usage and period-end forecast of one day-, month- or total-period budget.

    A total budget has no period end: only what is committed is forecast. ``without``: a reservation left
    out of what is reserved (see ``Ledger.usage``), as a reserve that replaces it weighs the budget.

    Raises:
        ConfigurationError: a per-run budget (each run has its own cap; there is no period to forecast).
    """
    if budget.period is Period.RUN:
        raise ConfigurationError(f"budget '{budget.label}' is per run: there is no period end to forecast")
    at = at or utcnow()
    window = period_window(budget.period, at, budget.timezone)
    (usage,) = [
        u for u in budget_usages(ledger, budget.scope, at=at, without=without) if u.label == budget.label
    ]
    costs = recent_run_costs(ledger, budget, at=at)
    return BudgetOutlook(budget, usage, window, _forecast(usage, window, costs, schedule, at))


def budgets_forecast(
    ledger: LedgerDatabase,
    budgets: Sequence[Budget],
    usages: Sequence[BudgetUsage],
    schedule: RunSchedule,
    *,
    at: datetime,
) -> list[SpendForecast]:
    """The period-end forecast of each of ``budgets`` (none per run) from its usage at ``at``.

    ``budget_outlook``'s, with the recent runs of every budget read at once (``budget_figures.each_budget``).
    """
    costs = budgets_recent_run_costs(ledger, budgets, at=at, runs=RECENT_RUNS, lookback=LOOKBACK)
    return [
        _forecast(usage, period_window(budget.period, at, budget.timezone), cost, schedule, at)
        for budget, usage, cost in zip(budgets, usages, costs, strict=True)
    ]


def _forecast(
    usage: BudgetUsage,
    window: PeriodWindow,
    costs: dict[str, list[Decimal]],
    schedule: RunSchedule,
    at: datetime,
) -> SpendForecast:
    """What ``usage`` will reach by the end of ``window``: committed, plus its DAGs' runs still scheduled."""
    runs_left: dict[str, int] = {}
    if window.end is not None:
        for dag_id in costs:
            runs_left[dag_id] = schedule.runs_between(dag_id, at, window.end)
    return forecast_spend(usage.spent_usd + usage.reserved_usd, outlooks_from(costs, runs_left))


def outlooks(
    ledger: LedgerDatabase, schedule: RunSchedule, *, at: datetime | None = None, scope: str | None = None
) -> list[BudgetOutlook]:
    """Every non-run budget (or those covering ``scope``) with its usage and forecast."""
    wanted = None if scope is None else Scope.parse(scope)
    return [
        budget_outlook(ledger, b, schedule, at=at)
        for b in list_budgets(ledger)
        if b.period is not Period.RUN and (wanted is None or b.scope.covers(wanted))
    ]


def holding_dags(ledger: LedgerDatabase, budget: Budget | None = None) -> set[str]:
    """The DAGs whose reservations hold money now (in ``budget``, or in any); a hold with no holder: none.

    A running search counts as ``search <id>`` (see ``budget_figures.holding_dag``).
    """
    b, h, r = schema.budgets, schema.holds, schema.reservations
    query = (
        select(r.c.holder)
        .select_from(h.join(r, r.c.id == h.c.reservation_id).join(b, b.c.id == h.c.budget_id))
        .where(h.c.open.is_(True), r.c.holder.is_not(None))
        .distinct()
    )
    if budget is not None:
        query = query.where(b.c.scope == str(budget.scope), b.c.period == budget.period.value)
    with ledger.reading() as conn:
        return {holding_dag(row[0]) for row in conn.execute(query)}


def _gate_scopes(ledger: LedgerDatabase) -> list[tuple[str, Scope]]:
    """Each DAG whose spend gate asked for money, with the scope it asked in (a scope refused: left out)."""
    from costaware.core.errors import ConfigurationError

    g = schema.gate_requests
    with ledger.reading() as conn:
        gates = conn.execute(select(g.c.dag_id, g.c.scope).distinct()).all()
    asked = []
    for dag_id, scope in gates:
        try:
            asked.append((dag_id, Scope.parse(scope)))
        except ConfigurationError:  # a scope the gate refused: it asked no budget
            continue
    return asked


def visible_budgets(ledger: LedgerDatabase, dag_ids: frozenset[str] | None) -> list[Budget]:
    """The budgets a user who may read ``dag_ids`` may see: those whose involved DAGs are all readable.

    A budget's figures tell about its involved DAGs, so it shows a user nothing more than all of them may
    read: those that spent in its scope, those holding money in it now (a spend gate's reservation: its
    ``reserved_usd``, before anything is spent), and those whose spend gates asked for money in its scope.
    ``None`` means every DAG (all budgets are visible). A budget no DAG has spent in, holds money in or asked
    for money in yet reveals no DAG's cost, so it is visible to every user. The
    feature cache's storage bills count as the budget's other DAGs' (see below); DAGs Airflow no longer knows
    still count: their spend is in the budget's figures, and only those who could read them may see it.
    """
    from costaware.adapters.feature_billing import STORAGE_DAG_ID

    budgets = list_budgets(ledger)
    if dag_ids is None:
        return budgets
    # Each read once for every budget: read per budget, a user with per-DAG access made the Cost page run
    # four statements for each study budget that tuning runs leave (1,242 with 300 of them).
    gate_scopes = _gate_scopes(ledger)
    spent_by, holding = budgets_dags(ledger, budgets), budgets_holding_dags(ledger, budgets)
    visible = []
    for budget, spent, held in zip(budgets, spent_by, holding, strict=True):
        asked = {dag_id for dag_id, scope in gate_scopes if budget.scope.covers(scope)}
        dags = spent | held | asked
        if len(dags) > 1:
            # The feature cache's storage bills have a DAG id of their own, which no per-DAG grant names (FAB
            # refused it to every user without access to all DAGs). The task that bills them records its own
            # entry with the same tags, so its DAG is among the others, and they decide.
            dags.discard(STORAGE_DAG_ID)
        if dags <= dag_ids:
            visible.append(budget)
    return visible


# -- per-budget alert rules ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlertRule:
    """A budget's own alert thresholds and notifiers (``None``: use the ``[costaware]`` settings)."""

    budget: str
    thresholds: tuple[str, ...] | None
    notifiers: list[dict[str, Any]] | None
    #: Stored thresholds left out: refused now, or too long to record an alert sent (see ``alert_rules``).
    refused_thresholds: tuple[str, ...] = ()


def set_alert_rule(
    ledger: LedgerDatabase,
    budget: str,
    *,
    thresholds: str | None,
    notifiers: list[dict[str, Any]] | None,
    actor: str,
) -> AlertRule:
    """Set the alert thresholds and/or notifiers of one budget (``scope/period``); audited.

    What is None stays as it was. Thresholds ``""`` and notifiers ``[]`` go back to the ``[costaware]``
    ones (an alert with no notifiers of its budget's own uses those).

    Raises:
        ConfigurationError: no such budget, neither given, bad thresholds, or notifiers not
            ``[{"class": ..., "kwargs": {}}]``.
    """
    budgets = sorted(list_budgets(ledger), key=lambda b: b.label)
    if budget not in {b.label for b in budgets}:
        try:
            wanted: Scope | None = Scope.parse(budget.rpartition("/")[0])
        except ConfigurationError:
            wanted = None  # not a scope: no tag to rank the budgets by
        # The study budgets each tuning run leaves are counted, not named, unless a study's was asked for.
        raise ConfigurationError(
            f"no budget {budget!r} (budgets: {budgets_said(budgets, wanted)}); set it first with "
            "`costaware budget set`"
        )
    if budget.endswith("/run"):
        raise ConfigurationError(
            f"budget {budget!r} is per run: alerts are checked for day, month and total budgets only; set "
            "them on one of those"
        )
    if thresholds is None and notifiers is None:
        raise ConfigurationError(
            f"nothing to set for budget {budget!r}: give thresholds, notifiers or both (what is not given "
            "stays as it is)"
        )
    # "" and [] go back to the [costaware] thresholds and notifiers.
    try:
        parsed = None if thresholds is None or not thresholds.strip() else parse_thresholds(thresholds)
    except ConfigurationError as e:
        # Named one by one, as the [costaware] setting's are: the first bad item alone was said.
        every = every_threshold_refused(thresholds or "", refused_whole="the list")
        several = every and "," in (thresholds or "")
        raise ConfigurationError(f"alert thresholds {thresholds!r}: {every}" if several else str(e)) from e
    written = ",".join(parsed or ())
    stored_as = schema.alert_rules.c.thresholds.type
    room = stored_as.length if isinstance(stored_as, String) else None
    if room is not None and len(written) > room:
        # PostgreSQL refused the row, and the error read as a problem with the ledger's URL.
        raise ConfigurationError(
            f"alert thresholds {thresholds!r} are {len(written)} characters as stored ({written!r}): at most "
            f"{room}; give fewer thresholds"
        )
    for spec in notifiers or []:
        if not isinstance(spec, dict) or not isinstance(spec.get("class"), str) or "." not in spec["class"]:
            raise ConfigurationError(
                f"alert notifier {spec!r} is not {{'class': '<module.Class>', 'kwargs': {{...}}}}"
            )
        if not isinstance(spec.get("kwargs", {}), dict):
            raise ConfigurationError(f"kwargs of alert notifier {spec['class']!r} must be an object")
    t = schema.alert_rules
    with ledger.transaction() as conn:
        found = conn.execute(
            select(t.c.id, t.c.thresholds, t.c.notifiers).where(t.c.budget == budget)
        ).first()
        # What is not given stays: setting the notifiers must not reset the thresholds, nor the reverse.
        kept_thresholds, kept_notifiers = (found[1], found[2]) if found else (None, None)
        new_thresholds = kept_thresholds if thresholds is None else (",".join(parsed) if parsed else None)
        new_notifiers = kept_notifiers if notifiers is None else notifiers
        values = {"thresholds": new_thresholds, "notifiers": new_notifiers, "updated_at": utcnow()}
        if found:
            conn.execute(t.update().where(t.c.id == found[0]).values(**values))
        else:
            conn.execute(t.insert().values(budget=budget, **values))
        append_audit(
            conn,
            actor=actor,
            action="alert_rule",
            target=budget,
            # Who is told, not only how: a change of recipients or channel is the change an audit is for.
            details={
                "thresholds": new_thresholds,
                "notifiers": [audited_notifier(n) for n in new_notifiers or []],
            },
        )
    return AlertRule(
        budget,
        None if new_thresholds is None else tuple(new_thresholds.split(",")),
        None if new_notifiers is None else list(new_notifiers),
    )


#: Parts of notifier kwarg names whose values are secrets (a webhook URL is one): named in the audit, never
#: written. Generous on purpose: the audit trail is append-only, so a secret written there stays.
SECRET_KWARGS = (
    "pass",  # password, passwd, smtp_pass
    "pwd",
    "secret",
    "token",
    "webhook",
    "key",
    "credential",
    "auth",
    "bearer",
    "dsn",
    "cookie",
    "session",
    "signature",
    "private",
)
#: The password of a URL's ``user:password@`` part.
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@/\s]+@", re.IGNORECASE)


def _masked(name: str, value: Any) -> Any:
    """``value`` as the audit may keep it: secret names masked at any depth, URL passwords too."""
    if any(word in name.lower() for word in SECRET_KWARGS):
        return "***"
    if isinstance(value, Mapping):
        return {str(k): _masked(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(name, v) for v in value]
    if isinstance(value, str):
        return _URL_PASSWORD.sub(r"\g<head>***@", value)
    return value


def audited_notifier(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A notifier rule as the audit records it: its class and kwargs, secret ones masked (nested too)."""
    kwargs = dict(spec.get("kwargs") or {})
    return {"class": spec.get("class"), "kwargs": {str(k): _masked(str(k), v) for k, v in kwargs.items()}}


def alert_rules(ledger: LedgerDatabase) -> dict[str, AlertRule]:
    """Every budget's own alert rule, by budget label."""
    t = schema.alert_rules
    with ledger.reading() as conn:
        rows = conn.execute(select(t).order_by(t.c.budget)).mappings().all()
    rules = {}
    for r in rows:
        kept, refused = (
            (None, ())
            if r["thresholds"] is None
            else _usable_thresholds(r["budget"], r["thresholds"], ledger=str(ledger.engine.url))
        )
        rules[r["budget"]] = AlertRule(
            r["budget"], kept, None if r["notifiers"] is None else list(r["notifiers"]), refused
        )
    return rules


# (ledger URL, budget, stored thresholds) already warned of: each check of a budget reads its rule again, and
# the same warning filled a scheduler's or worker's log at every check until the rule was repaired.
_WARNED_STORED_RULES: set[tuple[str, str, str]] = set()


def _usable_thresholds(
    budget: str, stored: str, *, ledger: str
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """The stored thresholds of ``budget`` an alert can be checked and recorded with, and those left out.

    A rule stored before today's checks ('10.00000000000001%') failed every alert check of its budget on
    PostgreSQL, the alert's claim being too long for its column: each such threshold is left out and said
    (once per process for the rule as stored in ``ledger``, a URL), with the command that repairs it; the
    others keep working.
    """
    column = schema.alerts_sent.c.threshold.type
    room = column.length if isinstance(column, String) else None
    kept: list[str] = []
    refused: dict[str, str] = {}
    _, unparsed = sort_thresholds(stored.split(","))
    unreadable = dict(unparsed)
    for threshold in stored.split(","):
        if threshold in unreadable:
            refused[threshold] = unreadable[threshold]
            continue
        if room is not None and len(threshold) > room:
            refused[threshold] = f"longer than the {room} characters an alert sent is recorded with"
            continue
        kept.append(threshold)
    scope, _, period = budget.rpartition("/")
    rule_as_stored = (ledger, budget, stored)
    if refused and rule_as_stored not in _WARNED_STORED_RULES:
        _WARNED_STORED_RULES.add(rule_as_stored)
        for threshold, why in refused.items():
            log.warning(
                "costaware: alert threshold %r of budget %s is left out of its alert checks (%s)%s; repair "
                "the rule with `costaware alerts set --scope %s --period %s --thresholds '%s'` (add it back "
                "rounded to %d decimals if you want it)",
                threshold,
                budget,
                why,
                "; its other thresholds work"
                if kept
                else "; no other is left: the [costaware] ones are used",
                shlex.quote(scope),
                period,
                ",".join(kept),
                MAX_THRESHOLD_DECIMALS,
            )
    # None left: the [costaware] thresholds apply, as for a rule without thresholds of its own.
    return (tuple(kept) or None), tuple(refused)


def record_run_overrides(
    ledger: LedgerDatabase, *, target: str, actor: str, overrides: Mapping[str, Any]
) -> bool:
    """Audit the trigger params of a run that differ from the DAG's defaults, once per run (``target``).

    Returns whether a line was added (False: nothing overridden, or this run was recorded already).
    """
    if not overrides:
        return False
    a = schema.audit
    with ledger.transaction() as conn:
        seen = conn.execute(select(a.c.id).where(a.c.action == "override", a.c.target == target)).first()
        if seen:
            return False
        append_audit(conn, actor=actor, action="override", target=target, details=dict(overrides))
    return True
