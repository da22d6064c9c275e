"""``costaware audit`` and the forecast columns of ``costaware budget show``.

The forecast counts the runs still to come from the DAGs' timetables in the Airflow metadata database when
Airflow and its database are reachable from where the command runs; elsewhere it forecasts what is
committed (spent + reserved) only, and says so.
"""

from __future__ import annotations

import argparse
import getpass
import importlib
import inspect
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from costaware.cli.arguments import open_ledger
from costaware.cli.output import emit
from costaware.core.money import format_usd_exact

_BY_NAME = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def current_actor() -> str:
    """Who runs this command, for the audit trail (``$USER``, else ``unknown``)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def forecast_rows(ledger: Any, usages: Sequence[Any], *, schedule: Any = None) -> list[dict[str, Any]]:
    """For each usage (of ``Ledger.usage``), its forecast fields; ``None`` for per-run budgets.

    Args:
        ledger: The ledger.
        usages: ``BudgetUsage`` rows, as ``budget show`` prints them.
        schedule: A ``RunSchedule``; default: the Airflow metadata database's timetables.
    """
    from costaware.adapters.ledger.governance import budget_outlook
    from costaware.core.budgets import Period
    from costaware.core.ledger import utcnow

    if schedule is None:
        from costaware.adapters.airflow_schedule import AirflowSchedule

        schedule = AirflowSchedule()
    by_label = {b.label: b for b in ledger.budgets()}
    at = utcnow()  # one instant for every budget: a DAG's runs in a window are counted once
    out: list[dict[str, Any]] = []
    for usage in usages:
        budget = by_label.get(usage.label)
        if budget is None or budget.period is Period.RUN:
            # The same keys as a forecast row: a script reading row["runs_left"] failed on a per-run budget.
            out.append(
                {
                    "forecast_usd": None,
                    "forecast_low_usd": None,
                    "forecast_high_usd": None,
                    "runs_left": None,
                    "forecast_above_cap": None,
                }
            )
            continue
        f = budget_outlook(ledger, budget, schedule, at=at).forecast
        out.append(
            {
                "forecast_usd": str(f.forecast_usd),
                "forecast_low_usd": str(f.low_usd),
                "forecast_high_usd": str(f.high_usd),
                "runs_left": f.runs_left,
                "forecast_above_cap": f.crosses(usage.cap_usd),
            }
        )
    return out


def forecast_cell(row: dict[str, Any]) -> str:
    """``$12.00 ($10.00-$15.00)``, or ``-`` without a forecast."""
    if row.get("forecast_usd") is None:
        return "-"
    from decimal import Decimal

    mark = " !" if row.get("forecast_above_cap") else ""
    return (
        f"{format_usd_exact(Decimal(row['forecast_usd']))} "
        f"({format_usd_exact(Decimal(row['forecast_low_usd']))}"
        f"-{format_usd_exact(Decimal(row['forecast_high_usd']))}){mark}"
    )


def audit(args: argparse.Namespace) -> int:
    """Print the audit trail: who changed which budget, approved or overrode what, and when."""
    from costaware.adapters.ledger.audit import audit_log

    entries = audit_log(open_ledger(args, reading=True, read_only=True), since=args.since, action=args.action)
    if not entries and args.format == "table":
        print("no audit entries" + (f" since {args.since.isoformat()}" if args.since else ""))
        return 0
    headers = ["when (UTC)", "who", "action", "target", "details"]
    rows = [
        [
            e.at.strftime("%Y-%m-%d %H:%M:%S"),
            e.actor,
            e.action,
            e.target,
            json.dumps(e.details, sort_keys=True, default=str),
        ]
        for e in entries
    ]
    payload = [
        {
            "id": e.id,
            "at": e.at.isoformat(),
            "actor": e.actor,
            "action": e.action,
            "target": e.target,
            "details": e.details,
        }
        for e in entries
    ]
    # Every column is text: left-aligned (right-aligned, the details were padded to the widest row).
    emit(rows, args.format, headers=headers, payload=payload, labels=len(headers))
    return 0


def alerts_set(args: argparse.Namespace) -> int:
    """Set a budget's own alert thresholds and notifiers."""
    from costaware.adapters.ledger.governance import set_alert_rule
    from costaware.core.budgets import Period, Scope
    from costaware.core.errors import ConfigurationError
    from costaware.notifications.budget import (
        RULE_TEMPLATE_NAMES,
        require_notifier_class,
        rule_template_failure,
        sample_rule_context,
        unknown_alert_fields,
    )

    try:
        notifiers = None if args.notifiers is None else json.loads(args.notifiers)
    except json.JSONDecodeError as e:
        raise ConfigurationError(
            f"--notifiers {args.notifiers!r} is not JSON: give e.g. "
            '\'[{"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier", '
            '"kwargs": {"to": "a@b.c"}}]\''
        ) from e
    if notifiers is not None and not isinstance(notifiers, list):
        raise ConfigurationError(f"--notifiers must be a JSON list, got {args.notifiers!r}")
    label = f"{Scope.parse(args.scope)}/{Period.parse(args.period).value}"
    for spec in notifiers or []:
        found = (
            _importable(spec["class"])
            if isinstance(spec, dict) and isinstance(spec.get("class"), str)
            else None
        )
        built = None
        if found is not None:  # what cannot be imported here is warned about below; workers check it again
            require_notifier_class(found, spec["class"])
            _check_kwargs(found, spec)
            built = _built(found, spec)
        elif isinstance(spec, dict) and isinstance(spec.get("class"), str):
            _refuse_a_misspelt_class(spec["class"])
        # Rendered as the workers render it, without the task's context (its conn and var read secrets):
        # the one rule for both, so that what renders there (`{{ conn is defined }}`) is taken here.
        failure = rule_template_failure(spec, sample_rule_context(label), built)
        if failure:
            template, failed_with = failure
            raise ConfigurationError(
                f"notifier {spec['class']!r}: its template {template!r} fails to render ({failed_with}) with "
                f"what a budget's own notifiers see: use only {list(RULE_TEMPLATE_NAMES)} (e.g. "
                "{{ costaware_alert.message }}), or set the notifier in [costaware] alert_notifiers, whose "
                "templates get the task's context"
            )
        for template, field, close in unknown_alert_fields(spec):
            hint = f"did you mean {close!r}? " if close else ""
            raise ConfigurationError(
                f"notifier {spec['class']!r}: its template {template!r} reads costaware_alert.{field}, which "
                f"an alert does not have, and would send it empty: {hint}an alert has "
                f"{', '.join(sample_rule_context(label)['costaware_alert'])}"
            )
    rule = set_alert_rule(
        # A rule needs its budget, so a ledger that does not exist (a mistyped URL) is not made for it.
        open_ledger(args, reading=True),
        label,
        thresholds=args.thresholds,
        notifiers=notifiers,
        actor=current_actor(),
    )
    thresholds = ", ".join(rule.thresholds) if rule.thresholds else "the [costaware] defaults"
    targets = f"{len(rule.notifiers)} notifier(s)" if rule.notifiers else "the [costaware] notifiers"
    print(f"alerts of budget '{label}': {thresholds}; {targets}")
    for spec in notifiers or []:
        why = _not_importable(str(spec["class"]))
        if why:  # the workers may have it where this machine does not: a warning, not a refusal
            print(
                f"costaware: warning: notifier class {spec['class']!r} cannot be imported here ({why}); "
                "an alert fails to send unless the workers can import it",
                file=sys.stderr,
            )
    return 0


def _built(cls: Any, spec: dict[str, Any]) -> Any:
    """The notifier ``spec`` names, built to render its templates; None where its constructor refuses here."""
    try:
        return cls(**(spec.get("kwargs") or {}))
    except Exception:  # e.g. a connection this machine lacks: its strings are rendered without it
        return None


def _check_kwargs(cls: object, spec: dict[str, Any]) -> None:
    """Refuse kwargs the notifier's constructor cannot take: every alert of the budget failed to send.

    Raises:
        ConfigurationError: a required argument is missing or an unknown one is given.
    """
    from costaware.core.errors import ConfigurationError

    kwargs = spec.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigurationError(f"notifier {spec['class']!r}: kwargs must be an object, got {kwargs!r}")
    try:
        inspect.signature(cls).bind(**kwargs)  # type: ignore[arg-type]
    except TypeError as e:  # said with what to write: "kwargs []" alone left the fix to guess
        takes = f" (it takes {', '.join(_kwargs_to_give(cls))})" if isinstance(cls, type) else ""
        raise ConfigurationError(
            f"notifier {spec['class']!r} cannot take kwargs {sorted(kwargs)}: {e}: fix its kwargs{takes}"
        ) from e
    except ValueError:  # no signature to read (a C class): the workers say it when they build it
        return
    # SmtpNotifier's **kwargs go on to BaseNotifier, which takes none of them: `subjet` bound above, and the
    # worker refused the rule at every alert ("unexpected keyword argument 'subjet'").
    if not isinstance(cls, type):  # refused as no notifier class before this
        return
    unknown = _kwargs_no_init_takes(cls, kwargs)
    if not unknown:
        return
    try:
        cls(**kwargs)
    except TypeError as e:
        # Only Python's own refusal names a kwarg nobody takes; a notifier's own check ("priority must be an
        # int") took the name, and its text says what to fix.
        if "unexpected keyword argument" not in str(e):
            raise ConfigurationError(
                f"notifier {spec['class']!r} refuses kwargs {sorted(kwargs)}: {e}: fix its kwargs"
            ) from e
    except Exception:  # it got past the arguments (a connection missing here): they were taken
        return
    else:  # a notifier of its own that keeps its **kwargs: they were taken
        return
    from costaware.core.errors import did_you_mean

    known = _kwargs_to_give(cls)
    hints = [f"{name!r}{did_you_mean(name, known)}" for name in unknown]
    raise ConfigurationError(
        f"notifier {spec['class']!r} takes no kwarg {', '.join(hints)}: fix the name in its kwargs "
        f"(it takes {', '.join(known)})"
    )


def _init_parameter_names(cls: type) -> list[str]:
    """The keyword arguments the constructors along ``cls``'s bases take, as ``**kwargs`` passes them on."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            parameters = list(inspect.signature(init).parameters.values())[1:]  # without self
        except (TypeError, ValueError):
            break
        names += [p.name for p in parameters if p.kind in _BY_NAME and p.name not in names]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            break
    return names


def _kwargs_to_give(cls: type) -> list[str]:
    """The kwargs to name in a rule's spec: ``context`` is the task's, passed in by Airflow, not set here."""
    return [name for name in _init_parameter_names(cls) if name != "context"]


def _kwargs_no_init_takes(cls: type, kwargs: dict[str, Any]) -> list[str]:
    """The kwargs that no constructor along ``cls``'s bases names, where its ``**kwargs`` pass them on."""
    taken = set(_init_parameter_names(cls))
    return sorted(name for name in kwargs if name not in taken)


def _refuse_a_misspelt_class(class_path: str) -> None:
    """Refuse a class its module, importable here, does not have: a typo, not a provider missing here.

    ``SmtpNotifer`` was kept with a warning, and every alert of the budget then failed to send.

    Raises:
        ConfigurationError: the module imports and has no such name.
    """
    from costaware.core.errors import ConfigurationError
    from costaware.notifications.budget import close_class_path

    module_name, _, name = class_path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        _refuse_a_misspelt_module(class_path, e.name or "")
        return  # not installed here: the workers may have it, said as a warning later
    except Exception:  # said as a warning later
        return
    if hasattr(module, name):
        return
    close = close_class_path(module, module_name, name)
    hint = f": did you mean {close}?" if close else ""
    raise ConfigurationError(f"notifier class {class_path!r}: module {module_name!r} has no {name!r}{hint}")


def _refuse_a_misspelt_module(class_path: str, missing: str) -> None:
    """Refuse a module missing from a package installed here that has one of a close name: a typo.

    ``...smtp.notifications.smpt.SmtpNotifier`` was kept with a warning, and every alert of the budget then
    failed to send. A provider missing here (``airflow.providers.slack``) may be on the workers: a warning.

    Raises:
        ConfigurationError: the missing module's package is here and has a module of a close name.
    """
    from costaware.core.errors import ConfigurationError
    from costaware.notifications.budget import close_module_path

    fixed = close_module_path(class_path, missing)
    if fixed:
        package_name, _, last = missing.rpartition(".")
        raise ConfigurationError(
            f"notifier class {class_path!r}: package {package_name!r} has no module {last!r}: did you mean "
            f"{fixed}?"
        )


def _importable(class_path: str) -> object | None:
    """What ``class_path`` names, where it can be imported here (else None)."""
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except Exception:  # said by _not_importable
        return None


def _not_importable(class_path: str) -> str | None:
    """Why ``class_path`` cannot be imported in this environment, or None when it can."""
    module, _, name = class_path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except Exception as e:  # a module that fails to import in any way: said, not raised
        return f"{type(e).__name__}: {e}"
    return None if found is not None else f"module {module!r} has no {name!r}"


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
