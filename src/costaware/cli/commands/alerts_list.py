"""``costaware alerts list``: every budget's alert settings and the alerts sent.

It also warns on stderr of what the workers refuse: ``[costaware]`` alert defaults, and stored rules whose
templates cannot render.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from costaware.cli.arguments import open_ledger
from costaware.cli.output import emit


def alerts_list(args: argparse.Namespace) -> int:
    """Print every budget's alert settings and the alerts sent."""
    from costaware.adapters.ledger.governance import alert_rules, alerts_sent

    ledger = open_ledger(args, reading=True, read_only=True)
    rules = alert_rules(ledger)
    sent = alerts_sent(ledger)
    covered = _covered_alerts(ledger)
    from costaware.core.budgets import Period

    rows: list[list[str]] = []
    payload: list[dict[str, Any]] = []

    for b in ledger.budgets():
        if b.period is Period.RUN:
            # No alerts: a run's cap stops the run itself ("(defaults)" read as if the defaults were sent).
            rows.append([b.label, "-", "-", "- (per run: its cap stops the run, no alerts)"])
            payload.append(
                {
                    "budget": b.label,
                    "thresholds": None,
                    "refused_thresholds": [],
                    "notifiers": None,
                    "sent": [],
                    "per_run": True,
                }
            )
            continue
        rule = rules.get(b.label)
        # None or empty: the [costaware] defaults apply (a blank cell read as "no alerts").
        thresholds = list(rule.thresholds or ()) if rule is not None else []
        notifiers = [n["class"] for n in (rule.notifiers or [])] if rule is not None else []
        # A percentage passed with a higher one was never sent: listed as sent, it read as a lost alert.
        claimed = [(p, t) for name, p, t in sent if name == b.label]
        sent_here = [f"{t}@{p}" for p, t in claimed if (b.label, p, t) not in covered]
        covered_here = {f"{t}@{p}": covered[b.label, p, t] for p, t in claimed if (b.label, p, t) in covered}
        shown = [
            f"{t}@{p}" + (f" (covered by {covered[b.label, p, t]})" if (b.label, p, t) in covered else "")
            for p, t in claimed
        ]
        # Left out of every check (stored before today's checks): listed among them, it read as working.
        refused = list(rule.refused_thresholds) if rule is not None else []
        shown_thresholds = ",".join(thresholds) or "(defaults)"
        if refused:
            shown_thresholds += f" (refused, not checked: {','.join(refused)})"
        rows.append(
            [
                b.label,
                shown_thresholds,
                ", ".join(n.rsplit(".", 1)[-1] for n in notifiers) or "(defaults)",
                ", ".join(shown) or "-",
            ]
        )
        payload.append(
            {
                "budget": b.label,
                "thresholds": thresholds or None,
                "refused_thresholds": refused,
                "notifiers": notifiers or None,
                "sent": sent_here,
                "covered": covered_here,
                "per_run": False,
            }
        )
    # Every column is text, so all are left-aligned (as in `audit`): right-aligned, "(defaults)" and "-" sat
    # apart from their headers.
    headers = ["budget", "thresholds", "notifiers", "sent"]
    emit(rows, args.format, headers=headers, payload=payload, labels=len(headers))
    _warn_of_bad_defaults()
    _warn_of_rules_that_cannot_render(rules.values())
    return 0


def _warn_of_rules_that_cannot_render(rules: Iterable[Any]) -> None:
    """Say on stderr which stored rules the workers refuse for their templates (stored before the check)."""
    from costaware.core.errors import ConfigurationError
    from costaware.notifications.budget import refuse_a_rule_that_cannot_render, sample_rule_context

    for rule in rules:
        try:
            refuse_a_rule_that_cannot_render(
                rule.budget, rule.notifiers or [], sample_rule_context(rule.budget)
            )
        except ConfigurationError as e:
            print(
                f"costaware: warning: {e}; until then the workers send its alerts through the [costaware] "
                "alert_notifiers, or, where none are set, keep them unsent and send them once it is fixed",
                file=sys.stderr,
            )


def _covered_alerts(ledger: Any) -> dict[tuple[str, str, str], str]:
    """(budget, period key, threshold) of each percentage claimed as covered by a higher one sent with it."""
    from costaware.adapters.ledger.audit import audit_log

    covered: dict[tuple[str, str, str], str] = {}
    for line in audit_log(ledger, action="alert"):
        higher = line.details.get("covered_by")
        budget, period_key = line.details.get("budget"), line.details.get("period")
        if higher and budget and period_key:
            covered[str(budget), str(period_key), str(line.details.get("threshold"))] = str(higher)
    return covered


def _warn_of_bad_defaults() -> None:
    """Say on stderr when "(defaults)" stands for a [costaware] setting the workers refuse."""
    from costaware.core.budget_forecast import DEFAULT_THRESHOLDS
    from costaware.core.errors import ConfigurationError
    from costaware.notifications.budget import (
        configured_notifiers,
        configured_thresholds,
        notifiers_from_spec,
    )
    from costaware.settings import option

    try:
        configured_thresholds()
    except ConfigurationError as e:
        print(f"costaware: warning: {e}; the workers use {','.join(DEFAULT_THRESHOLDS)}", file=sys.stderr)
    try:
        raw = option("alert_notifiers")
        specs = json.loads(raw) if raw else []
    except (ConfigurationError, json.JSONDecodeError):
        specs = None
    if not isinstance(specs, list):  # not even a list: said as the workers say it
        specs = []
        try:
            configured_notifiers()
        except ConfigurationError as e:
            _say_alert_notifiers_refused(e)
            return
    for spec in specs:  # one at a time: a class missing here may be on the workers, unlike a bad kwarg
        try:
            notifiers_from_spec([spec])
        except ConfigurationError as e:
            if not _missing_here_only(spec, e):
                _say_alert_notifiers_refused(e)
                return
            why = f"{type(e.__cause__).__name__}: {e.__cause__}"
            print(
                f"costaware: warning: [costaware] alert_notifiers: notifier class {spec['class']!r} cannot "
                f"be imported here ({why}); an alert fails to send unless the workers can import it",
                file=sys.stderr,
            )
    # Read from the template strings alone: a class missing here (Slack's provider) is checked too.
    _warn_of_configured_fields_an_alert_lacks(specs)


def _say_alert_notifiers_refused(e: Exception) -> None:
    print(
        f"costaware: warning: [costaware] alert_notifiers is refused ({e}): the workers send the alerts "
        "of budgets without notifiers of their own to the task log only",
        file=sys.stderr,
    )


def _missing_here_only(spec: Any, refused: Exception) -> bool:
    """Whether ``spec`` was refused only for a module this machine lacks (not a typo of one it has)."""
    from costaware.notifications.budget import close_module_path

    cause = refused.__cause__
    if not isinstance(cause, ImportError):
        return False
    missing = cause.name if isinstance(cause, ModuleNotFoundError) else None
    return close_module_path(str(spec["class"]), missing) is None


def _warn_of_configured_fields_an_alert_lacks(specs: Sequence[Any]) -> None:
    """Say on stderr which ``[costaware] alert_notifiers`` templates read a field an alert does not have.

    With the task's context (its DAG's StrictUndefined) ``{{ costaware_alert.mesage }}`` fails every send of
    that notifier, and nothing here said why. A read guarded by ``| default(...)`` or ``is defined`` renders.
    """
    from costaware.notifications.budget import unknown_alert_fields

    for spec in specs:
        for template, field, close in unknown_alert_fields(spec, skip_guarded=True):
            hint = f" (did you mean {close!r}?)" if close else ""
            print(
                f"costaware: warning: [costaware] alert_notifiers: notifier {spec['class']!r}: its template "
                f"{template!r} reads costaware_alert.{field}, which an alert does not have{hint}: this "
                "notifier fails to send every alert (where another notifier delivers it, the alert counts as "
                "sent and this one misses it; where none does, it is given back unsent and tried again at "
                "each check)",
                file=sys.stderr,
            )
