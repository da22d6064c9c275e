"""``costaware budget set|delete|list|show|holds``: manage budgets, see what is spent, reserved and left."""

from __future__ import annotations

import argparse
import shlex
import sys
from decimal import Decimal
from typing import Any

from costaware.cli.arguments import open_ledger
from costaware.cli.commands.governance import current_actor, forecast_cell, forecast_rows
from costaware.cli.output import emit, plain
from costaware.core.money import format_usd_exact


def budget_set(args: argparse.Namespace) -> int:
    """Create or change a budget; the change goes into the audit trail under the current user."""
    from costaware.core.budgets import Budget, find_budget, kept_cap, kept_settings

    given = args.cap_gpu_hours
    gpu_given = None if str(given).strip().lower() == "none" else given
    # What is given is checked before the ledger is opened: a mistyped cap made an empty ledger file at a
    # --ledger-url that had none (a mistyped path too), then was refused.
    Budget.create(
        args.scope,
        args.period,
        "0" if args.cap_usd is None else args.cap_usd,
        cap_gpu_hours=gpu_given,
        timezone=args.timezone or "UTC",
    )
    give_cap = "give its cap, e.g. --cap-usd 250"

    # A ledger that does not exist yet has no budget to keep the cap of: refused before the file is made.
    def refuse_without_cap() -> object:
        return kept_cap(None, args.cap_usd, scope=args.scope, period=args.period, give=give_cap)

    ledger = open_ledger(args, before_creating=refuse_without_cap)
    budgets = ledger.budgets()
    existing = {(str(b.scope), b.period) for b in budgets}
    # Changing a budget changes what is given; --cap-gpu-hours none drops the GPU-hour cap.
    current = find_budget(budgets, args.scope, args.period)
    gpu_cap, zone = kept_settings(
        current,
        cap_gpu_hours=gpu_given,
        gpu_given=given is not None,
        timezone=args.timezone,
    )
    cap = kept_cap(current, args.cap_usd, scope=args.scope, period=args.period, give=give_cap)
    budget = ledger.set_budget(
        args.scope, args.period, cap, cap_gpu_hours=gpu_cap, timezone=zone, actor=current_actor()
    )
    hours = None if budget.cap_gpu_hours is None else plain(budget.cap_gpu_hours)
    gpu = f", {hours} GPU-hours" if hours is not None else ""
    kept = []  # what an existing budget kept because it was not given
    if current is not None and args.cap_usd is None:
        kept.append(f"cap {format_usd_exact(budget.cap_usd)}")
    if current is not None and args.cap_gpu_hours is None and hours is not None:
        kept.append(f"GPU-hour cap {hours}")
    if current is not None and args.timezone is None:
        kept.append(f"time zone {budget.timezone}")
    print(
        f"budget '{budget.label}' set: {format_usd_exact(budget.cap_usd)} "
        + ("in total" if budget.period.value == "total" else f"per {budget.period.value}")
        + gpu
        + (f" (kept its {' and '.join(kept)})" if kept else "")
    )
    from costaware.core.windows import inverted_offset_note

    zone_note = inverted_offset_note(budget.timezone) if args.timezone is not None else None
    if zone_note:
        # Etc/GMT+1 is a valid zone, but one hour behind UTC: most who type it mean the other way round.
        print(f"costaware: note: {zone_note}; its periods start at midnight there", file=sys.stderr)
    if budget.cap_usd == 0 and args.cap_usd is not None:
        # "--cap-usd $500" unquoted: the shell reads $5 as a variable (empty) and passes "00".
        print(
            f"costaware: note: a $0 cap refuses every hold of {budget.scope}; if you typed a $ amount, "
            "quote it ('$500') or leave the $ out (500): the shell reads $5 as a variable",
            file=sys.stderr,
        )
    if budget.cap_gpu_hours == 0 and gpu_given is not None:
        _say_zero_gpu_cap(ledger, budget)
    _say_over_cap(ledger, budget)
    _say_close_tags(ledger, budget.scope)
    scope = str(budget.scope)
    same_period = [s for s, period in existing if period == budget.period]
    twins = sorted(s for s in same_period if s != scope and s.casefold() == scope.casefold())
    if (scope, budget.period) not in existing and twins:
        # Tags match exactly, so a scope that differs only in case is a second budget over other runs.
        print(
            f"costaware: note: this is a new budget beside {', '.join(repr(t) for t in twins)} (per "
            f"{budget.period.value}): scopes match tags exactly, so '{scope}' counts only runs tagged that "
            f"way; to change an existing budget, give its scope: "
            + " or ".join(f"--scope {t}" for t in twins),
            file=sys.stderr,
        )
    return 0


def _say_close_tags(ledger: Any, scope: Any) -> None:
    """Say when no entry or open hold has the scope's tags but some have a close name or value.

    'project=flight delays' beside entries tagged 'flight-delays', or 'projct=churn' beside entries tagged
    'project', was set without a word and capped nothing. Read as ``report`` reads a tag
    (:func:`~costaware.adapters.ledger.views.recent_tags`), and every open hold.
    """
    import difflib

    from costaware.adapters.ledger.views import recent_tags

    wanted = dict(scope.tags)
    tagged = recent_tags(ledger) + [dict(r.scope.tags) for r in ledger.open_reservations()]
    if not wanted or any(all(tags.get(k) == v for k, v in wanted.items()) for tags in tagged):
        return
    names = sorted({name for tags in tagged for name in tags})
    meant: dict[str, str] = {}
    changes = []
    for key, value in wanted.items():
        name = key
        if key not in names:
            # A misspelt tag name: the values of the name meant are the ones to compare.
            by_case = [known for known in names if known.casefold() == key.casefold()]
            name = (by_case or difflib.get_close_matches(key, names, n=1) or [key])[0]
        seen = sorted({tags[name] for tags in tagged if name in tags})
        meant[name] = value if value in seen else (difflib.get_close_matches(value, seen, n=1) or [value])[0]
        changes += [repr(new) for new, old in ((name, key), (meant[name], value)) if new != old]
    if not changes:
        return  # a new project, say: nothing close to suggest
    print(
        f"costaware: note: no entry or open hold of the ledger is tagged {scope}, so this budget caps "
        f"nothing yet; did you mean {' and '.join(changes)}? "
        f"(--scope {shlex.quote(','.join(f'{k}={v}' for k, v in meant.items()))}); scopes match tags exactly",
        file=sys.stderr,
    )


def _say_zero_gpu_cap(ledger: Any, budget: Any) -> None:
    """Say what a 0 GPU-hour cap refuses, as a $0 cap is said.

    Where 0 means "no limit" (as in many tools), every GPU hold was refused unsaid. Once the period has
    GPU-hours spent or held, it is past the cap, and holds needing none are refused too.
    """
    from costaware.core.budgets import Period

    usage = next((u for u in ledger.usage(budget.scope) if u.label == budget.label), None)
    used = Decimal(0) if usage is None else usage.spent_gpu_hours + usage.reserved_gpu_hours
    if budget.period is Period.RUN or usage is None or used <= 0:
        refused = "that needs GPU-hours (those needing none pass)"
    else:
        until = "" if budget.period is Period.TOTAL else " until the period ends"
        refused = (
            f"({usage.name} has {plain(usage.spent_gpu_hours)} GPU-hours spent and "
            f"{plain(usage.reserved_gpu_hours)} held, past it, so holds needing none are refused too{until})"
        )
    print(
        f"costaware: note: a 0 GPU-hour cap refuses every hold of {budget.scope} {refused}; for no GPU-hour "
        "cap give --cap-gpu-hours none",
        file=sys.stderr,
    )


def _say_over_cap(ledger: Any, budget: Any) -> None:
    """Say when a cap is set below what its period has spent and reserved already.

    The cap was taken without a word, and "left" turned negative unseen: the next gate in it was refused.
    """
    from costaware.core.budgets import Period

    if budget.period is Period.RUN:  # each run starts afresh: nothing is committed to a cap yet
        return
    usage = next((u for u in ledger.usage(budget.scope) if u.label == budget.label), None)
    if usage is None or usage.left_usd >= 0:
        return
    until = "" if budget.period is Period.TOTAL else " the period ends or"
    print(
        f"costaware: note: {usage.name} has {format_usd_exact(usage.spent_usd)} spent and "
        f"{format_usd_exact(usage.reserved_usd)} reserved, {format_usd_exact(-usage.left_usd)} over its "
        f"cap {format_usd_exact(usage.cap_usd)}: new holds in it are refused without an approval "
        f"until{until} the cap is raised (`costaware budget holds --scope '{budget.scope}'` lists what is "
        "reserved)",
        file=sys.stderr,
    )


def _say_unpriced(ledger: Any, scope: Any, usages: list[Any], run_id: str | None) -> None:
    """Say when entries these budgets count could not be priced: they count $0, so the budgets read low."""
    from costaware.adapters.ledger.reports import Filters, summary
    from costaware.core.budgets import find_budget, period_window
    from costaware.core.ledger import utcnow

    budgets = ledger.budgets()
    now = utcnow()
    starts = []
    for usage in usages:
        label_scope, _, period = usage.label.rpartition("/")
        budget = find_budget(budgets, label_scope, period)
        if budget is not None:
            starts.append(period_window(budget.period, now, budget.timezone, run_id).start)
    since = None if not starts or None in starts else min(s for s in starts if s is not None)
    n = summary(ledger, Filters(since=since, scope=str(scope), run_id=run_id)).unpriced_entries
    if n:
        print(
            f"costaware: note: {n} entr{'y' if n == 1 else 'ies'} of {scope} in these periods could not be "
            "priced and count $0, so spent reads low (`costaware report --scope "
            f"{scope}` says why): fix the task's costaware_compute or [costaware] worker_instance_type",
            file=sys.stderr,
        )


def budget_delete(args: argparse.Namespace) -> int:
    """Delete a budget; audited under the current user. A budget that does not exist is an error."""
    from costaware.core.budgets import Period, Scope
    from costaware.core.errors import BudgetNotFoundError

    ledger = open_ledger(args, reading=True)  # a missing ledger has no budget to delete: not made for it
    deleted = ledger.delete_budget(args.scope, args.period, actor=current_actor())
    if deleted is None:
        label = f"{Scope.parse(args.scope)}/{Period.parse(args.period).value}"
        known = ", ".join(f"'{b.label}'" for b in ledger.budgets()) or "none"
        raise BudgetNotFoundError(
            f"no budget '{label}' to delete (budgets: {known}); give its --scope and --period as "
            "`costaware budget list` shows them"
        )
    print(
        f"budget '{deleted.label}' deleted (its cap was {format_usd_exact(deleted.cap_usd)}) with its alert "
        "settings (`alerts set` again after a new `budget set`); the spend it counted and the alerts it sent "
        "stay in the ledger"
    )
    return 0


def budget_list(args: argparse.Namespace) -> int:
    """Print every budget."""
    budgets = open_ledger(args, reading=True, read_only=True).budgets()
    rows = [
        [
            str(b.scope),
            b.period.value,
            format_usd_exact(b.cap_usd),
            "" if b.cap_gpu_hours is None else plain(b.cap_gpu_hours),
            b.timezone,
        ]
        for b in budgets
    ]
    payload = [
        dict(
            zip(
                ("scope", "period", "cap_usd", "cap_gpu_hours", "timezone"),
                (str(b.scope), b.period.value, str(b.cap_usd), b.cap_gpu_hours, b.timezone),
                strict=True,
            )
        )
        for b in budgets
    ]
    if not budgets and args.format == "table":
        print(
            "no budgets; set one with "
            "`costaware budget set --scope project=<name> --period month --cap-usd 100`"
        )
        return 0
    emit(rows, args.format, headers=["scope", "period", "cap", "GPU-hour cap", "time zone"], payload=payload)
    labels = {b.label for b in budgets}
    for budget in budgets:
        _say_quoted(budget, labels)
        _say_unset(budget)
    return 0


def _say_unset(budget: Any) -> None:
    """Flag a budget whose scope has a tag that reads as unset (``project=null``), set before it was refused.

    No new entry or hold can carry such a tag, so no new spend counts in it; it was listed as a live cap.
    """
    from costaware.core.given import not_given

    unset = [f"{key}={value}" for key, value in budget.scope.tags if not_given(value)]
    if unset:
        print(
            f"costaware: note: budget '{budget.label}': its scope reads as unset ({', '.join(unset)}, what a "
            "template of an unset param renders): no new spend counts in it; delete it with `costaware "
            f"budget delete --scope {shlex.quote(str(budget.scope))} --period {budget.period.value}`",
            file=sys.stderr,
        )


def _say_quoted(budget: Any, labels: set[str]) -> None:
    """Say how to replace a budget whose scope has a tag in quotes, set before such scopes were refused.

    ``project="team-a"`` caps nothing (no task is tagged with the quotes), and was listed as any other.
    """
    from costaware.core.budgets import Scope, quoted_in_scope
    from costaware.core.errors import ConfigurationError

    quoted = quoted_in_scope(str(budget.scope))
    if quoted is None:
        return
    parts, bare = quoted
    period = budget.period.value
    delete = f"`costaware budget delete --scope {shlex.quote(str(budget.scope))} --period {period}`"
    said = (
        f"costaware: note: budget '{budget.label}' has {', '.join(parts)} in quotes, which are part of the "
        "tag and match no task's tags, so it caps nothing: "
    )
    try:
        meant = Scope.parse(bare)
    except ConfigurationError:
        # project="" without its quotes is no scope ('project='): listed, then exit 2 naming no budget.
        print(f"{said}without them it is no scope; delete it ({delete})", file=sys.stderr)
        return
    if f"{meant}/{period}" in labels:  # the budget meant exists beside it: its cap is kept
        print(
            f"{said}budget '{meant}/{period}' is the one without them; delete it ({delete})",
            file=sys.stderr,
        )
        return
    options = f"--cap-usd {plain(budget.cap_usd)}"
    if budget.cap_gpu_hours is not None:
        options += f" --cap-gpu-hours {plain(budget.cap_gpu_hours)}"
    if budget.timezone != "UTC":
        options += f" --timezone {budget.timezone}"
    print(
        f"{said}set it without them, then delete it "
        f"(`costaware budget set --scope {shlex.quote(bare)} --period {period} {options}`, then {delete})",
        file=sys.stderr,
    )


def budget_show(args: argparse.Namespace) -> int:
    """Print cap, spent, reserved, left and the forecast of each budget covering ``--scope``."""
    from costaware.adapters.ledger.governance import NoSchedule
    from costaware.core.budgets import Period, Scope
    from costaware.core.errors import BudgetNotFoundError, ConfigurationError

    if args.dag_id and not args.run_id:
        raise ConfigurationError(f"--dag-id {args.dag_id} names the DAG of a run: give --run-id RUN too")
    ledger = open_ledger(args, reading=True, read_only=True)
    scope = Scope.parse(args.scope)
    # A per-run budget has no usage without a run: said, rather than left out unsaid.
    budgets = ledger.budgets()
    per_run = [b.label for b in budgets if b.period == Period.RUN and b.scope.covers(scope)]
    try:
        usages = ledger.usage(args.scope, run_id=args.run_id, dag_id=args.dag_id)
    except BudgetNotFoundError as e:
        if args.run_id is None and per_run:
            raise BudgetNotFoundError(
                f"only per-run budgets cover scope {str(scope)!r} ({', '.join(per_run)}): give --run-id RUN "
                "to see a run against them"
            ) from e
        others = [b.label for b in budgets]
        if str(scope) == "*" and others:
            # Asked for everything: the answer is the list of budgets, not the reservation's hint to set a
            # catch-all budget, which would cap every run of every team.
            labels = ", ".join(f"'{label}'" for label in others)
            raise BudgetNotFoundError(
                f"no budget has the catch-all scope '*' (budgets: {labels}): `costaware budget list` lists "
                f"them all; give one's scope to see its spend (e.g. --scope '{budgets[0].scope}')"
            ) from e
        raise
    forecasts = forecast_rows(ledger, usages, schedule=NoSchedule() if args.no_schedule else None)
    headers = ["budget", "cap", "spent", "reserved", "left", "forecast (low-high)"]
    rows = [
        [
            u.name,  # project=churn/month (2026-11): the same name as on the Cost page and in task logs
            format_usd_exact(u.cap_usd),
            format_usd_exact(u.spent_usd),
            format_usd_exact(u.reserved_usd),
            format_usd_exact(u.left_usd),
            forecast_cell(f),
        ]
        for u, f in zip(usages, forecasts, strict=True)
    ]
    if args.format != "csv" and any(u.cap_gpu_hours is not None for u in usages):
        # A GPU-hour cap can bind before the dollars do (the spot tuning plan's does): shown beside them.
        headers.append("GPU-hours")
        for row, u in zip(rows, usages, strict=True):
            row.append(
                ""
                if u.cap_gpu_hours is None
                else f"{plain(u.spent_gpu_hours)} spent, {plain(u.reserved_gpu_hours)} reserved, of "
                f"{plain(u.cap_gpu_hours)}"
            )
    payload = [
        {
            "budget": u.label,
            "period": u.period_key,
            "cap_usd": str(u.cap_usd),
            "spent_usd": str(u.spent_usd),
            "reserved_usd": str(u.reserved_usd),
            "left_usd": str(u.left_usd),
            "cap_gpu_hours": None if u.cap_gpu_hours is None else str(u.cap_gpu_hours),
            "spent_gpu_hours": str(u.spent_gpu_hours),
            "reserved_gpu_hours": str(u.reserved_gpu_hours),
            **f,
        }
        for u, f in zip(usages, forecasts, strict=True)
    ]
    if args.format == "csv":
        # Plain numbers a spreadsheet sums: the forecast and its interval in columns of their own.
        headers[5:6] = ["forecast", "forecast low", "forecast high"]
        for row, f in zip(rows, forecasts, strict=True):
            row[5:6] = [f["forecast_usd"] or "", f["forecast_low_usd"] or "", f["forecast_high_usd"] or ""]
        # The GPU-hours as numbers, in columns every budget has: they were one text cell ("0.5 spent, 0
        # reserved, of 40"), in a column only a GPU-hour cap brought.
        headers += ["GPU-hour cap", "GPU-hours spent", "GPU-hours reserved"]
        for row, u in zip(rows, usages, strict=True):
            cap = "" if u.cap_gpu_hours is None else plain(u.cap_gpu_hours)
            row += [cap, plain(u.spent_gpu_hours), plain(u.reserved_gpu_hours)]
    emit(rows, args.format, headers=headers, payload=payload)
    named = {u.label.rpartition("/")[0] for u in usages}
    if str(scope) != "*" and str(scope) not in named:
        # "project=chrun" (a typo) showed the catch-all budget alone, as if that were all there is; and
        # "project=x,study=<mistyped run id>" showed the project's budget alone, the study's left unsaid.
        covering = (
            "only the catch-all budget(s) above cover it"
            if named <= {"*"}
            else "only the broader budget(s) above cover it: check the tags' values (a study's is its run id)"
        )
        print(
            f"costaware: note: no budget names scope {str(scope)!r}: {covering} "
            "(`costaware budget list` lists the budgets)",
            file=sys.stderr,
        )
    shown = {u.label for u in usages}
    for budget in budgets:
        if budget.label in shown:
            _say_unset(budget)
    _say_unpriced(ledger, scope, usages, args.run_id)
    if args.format == "table" and any(f.get("forecast_above_cap") for f in forecasts):
        print("! the forecast passes the cap by the period's end")
    if args.run_id is None and per_run and args.format == "table":
        print(f"per-run budget(s) {', '.join(per_run)} also apply: give --run-id to see one run against them")
    if args.run_id is not None and not _run_is_known(ledger, args.run_id, args.dag_id):
        # A misspelt run id showed the full per-run cap left, as if the run had spent nothing.
        print(f"costaware: note: {_unknown_run_note(ledger, args.run_id, args.dag_id)}", file=sys.stderr)
    return 0


def _unknown_run_note(ledger: Any, run_id: str, dag_id: str | None) -> str:
    """Why ``run_id`` (of ``dag_id``) may be mistyped, and a command that lists the right ids and works."""
    from costaware.cli.arguments import dag_hint, runs_listed
    from costaware.cli.pending import what_waits

    if dag_id and ledger.last_run_id(dag_id) is None and not what_waits(ledger, dag_id, None):
        # A misspelt DAG: the `costaware report --dag-id <it> --group-by run` shown here was refused (exit 2).
        return (
            f"the ledger has no entry or hold of DAG {dag_id!r}: check the DAG id{dag_hint(ledger, dag_id)}"
        )
    of_dag = f" of DAG {dag_id!r}" if dag_id else ""
    # `costaware runs list` lists retrain outcomes only: a spend gate's DAG had no run in it.
    return (
        f"the ledger has no entry or hold of run {run_id!r}{of_dag}: check the run id ({runs_listed(dag_id)})"
    )


def _run_is_known(ledger: Any, run_id: str, dag_id: str | None) -> bool:
    """Whether the ledger has an entry of ``run_id`` (of ``dag_id``), or an open hold of one of its tasks.

    A search's hold (``search/<id>/...``) names its search, not the DAG its entries are billed to (its
    ``owner``, ``search`` by default): it is its search's run whatever ``dag_id`` was given. Read as no hold,
    a search holding money before its first rung was billed was said to be a run the ledger never saw.
    """
    if ledger.entries(run_id=run_id, dag_id=dag_id, limit=1):
        return True
    from costaware.core.ledger import read_holder

    def holds_it(holder: str | None) -> bool:
        key = read_holder(holder)  # once: it was parsed three times a hold
        return key is not None and key.run_id == run_id and (dag_id is None or key.dag_id in (None, dag_id))

    return any(holds_it(r.holder) for r in ledger.open_reservations())


def budget_holds(args: argparse.Namespace) -> int:
    """Print the open reservations (of ``--scope``'s tags): what ``budget show`` counts as reserved.

    A hold is a task's money set aside before it spends it (a spend gate's estimate, a remote training's
    ``max_usd``); it is settled with what the task billed, or released when its run ends.
    """
    from costaware.adapters.airflow_tasks import holder_kind
    from costaware.core.budgets import Scope

    ledger = open_ledger(args, reading=True, read_only=True)
    wanted = Scope.parse(args.scope)
    holds = [r for r in ledger.open_reservations() if wanted.covers(r.scope)]
    holds.sort(key=lambda r: r.created_at)
    if not holds:
        from costaware.adapters.ledger.views import scope_hint

        # A mistyped tag read as "nothing is reserved" while a task held money under the real one.
        hint = scope_hint(ledger, str(wanted)) if str(wanted) != "*" else ""
        if args.format == "table":
            print(
                f"no open holds{'' if str(wanted) == '*' else f' of {wanted}'}: nothing is reserved"
                + (f" ({hint})" if hint else "")
            )
            return 0
        if hint:
            print(f"costaware: note: no open holds of {wanted}: {hint}", file=sys.stderr)
    # A training's attempts are billed while its hold stays open: what is left of it is what is reserved.
    paid = ledger.paid_from([r.id for r in holds])
    rows = [
        [
            r.holder or f"(none: id {r.id})",  # one reserved from Python without a holder: released by its id
            holder_kind(r.holder),
            str(r.scope),
            format_usd_exact(r.usd),
            format_usd_exact(paid.get(r.id, Decimal(0))),
            plain(r.gpu_hours) if r.gpu_hours else "",
            f"{r.created_at:%Y-%m-%d %H:%M} UTC",
            f"{r.expires_at:%Y-%m-%d %H:%M} UTC",
            ", ".join(r.budgets),
        ]
        for r in holds
    ]
    payload = [
        {
            "id": r.id,
            "holder": r.holder,
            "holder_kind": holder_kind(r.holder).partition(" (")[0],
            "scope": str(r.scope),
            "usd": str(r.usd),
            "paid_usd": str(paid.get(r.id, Decimal(0))),
            "gpu_hours": str(r.gpu_hours),
            "created_at": r.created_at.isoformat(),
            "expires_at": r.expires_at.isoformat(),
            "budgets": list(r.budgets),
        }
        for r in holds
    ]
    headers = [
        # One title for every holder's form read wrong for all but one: a search's tail, a task's egress, no
        # holder. Each row says which form its holder has instead.
        "held by",
        "holder is",
        "scope",
        "held",
        "paid so far",
        "GPU-hours",
        "since",
        "until",
        "counted in",
    ]
    emit(rows, args.format, headers=headers, payload=payload, labels=3)
    return 0


def budget_release(args: argparse.Namespace) -> int:
    """Give back the open holds of ``--holder``; audited under the current user.

    For a hold nothing will settle: its run was killed where no run-end listener ran (Ctrl-C of
    ``airflow dags test``), which left it counting as reserved until its time limit, a day or more. A hold
    whose task Airflow's metadata database says may still run (or that cannot be read) is kept unless
    ``--force`` is given: that task would settle its cost against the released hold, past the budget's cap.
    """
    from costaware.adapters.ledger.audit import record_audit
    from costaware.core.errors import InvalidBudgetError

    holder = str(args.holder).strip()
    ledger = open_ledger(args, reading=True)  # nor a hold to release
    # Or its id: a hold reserved from Python without a holder could not be released at all.
    holds = [r for r in ledger.open_reservations() if holder in (r.holder, r.id)]
    if not holds:
        # A hold with no holder is released by its id: listed as '' it named nothing to type.
        open_holders = sorted({r.holder or r.id for r in ledger.open_reservations()})
        listed = ", ".join(repr(h) for h in open_holders[:5]) or "none"
        raise InvalidBudgetError(
            f"no open hold of {holder!r} (open holds: {listed}{' ...' if len(open_holders) > 5 else ''}); "
            "give the holder (or, for a hold with none, its id) as `costaware budget holds` shows it"
        )
    if not args.force:
        _refuse_while_a_task_may_bill(holder, holds)
    for hold in holds:
        # What was paid from it (a training's attempts billed while it stayed open) stays spent: only the
        # rest was reserved, and is what each budget gets back (a budget counts only the entries of its own
        # scope as paid from it). Read in the release's transaction: read before it, an entry paid in
        # between was left out, and a hold closed a moment before was said released here.
        released = ledger.release_hold(hold.id, by_budget=True)
        if not released.released_here:
            print(
                f"the hold of {hold.holder or hold.id} was {released.reservation.status} meanwhile: "
                "nothing released"
            )
            continue
        hold = released.reservation
        back, hold_paid = released.freed_by_budget, released.paid_usd
        freed = max(back.values(), default=Decimal(0))
        record_audit(
            ledger,
            actor=current_actor(),
            action="hold_release",
            target=holder,
            details={
                "reservation": hold.id,
                "usd": str(freed),
                "usd_by_budget": {label: str(usd) for label, usd in back.items()},
                "held_usd": str(hold.usd),
                "paid_usd": str(hold_paid),
                "budgets": list(hold.budgets),
                "forced": bool(args.force),
            },
        )
        print(_release_said(hold, back, hold_paid))
    return 0


def _release_said(hold: Any, back: dict[str, Decimal], hold_paid: Decimal) -> str:
    """What releasing ``hold`` gave back, said per budget where the budgets got different amounts.

    ``back``: what each budget got back; ``hold_paid``: what every entry paid from the hold cost. One note on
    what stays spent, after amounts that differ, contradicted them ("$4.00 back to project=x/month ...
    (nothing was still reserved ...)"): each budget's own is said after its amount instead.
    """
    who = hold.holder or hold.id
    held = format_usd_exact(hold.usd)
    if len(set(back.values())) > 1:
        return f"released the hold of {who}: " + ", ".join(
            f"{format_usd_exact(usd)} back to {label}{_spent_in_budget(hold.usd - usd, hold.usd)}"
            for label, usd in back.items()
        )
    freed = max(back.values(), default=Decimal(0))
    where = ", ".join(hold.budgets) or str(hold.scope)
    said = f"released {format_usd_exact(freed)} held by {who} in {where}"
    if back and hold.usd - freed != min(hold_paid, hold.usd):
        # Entries outside these budgets' scopes paid from it too: only what the budgets count stays spent in
        # them, and the whole of what was paid said so of a part of it.
        scopes = "its scope" if len(back) == 1 else "their scopes"
        return said + _spent_in_budget(hold.usd - freed, hold.usd, scopes)
    if hold_paid >= hold.usd:
        # "$6.25 of its $3.00 hold was paid from it": what was billed passed the hold, none was left.
        said += (
            f" (nothing was still reserved: {format_usd_exact(hold_paid)} was billed against its {held} hold "
            "and stays spent)"
        )
    elif hold_paid:
        said += (
            f" (what was still reserved: {format_usd_exact(hold_paid)} of its {held} hold was paid from it "
            "and stays spent)"
        )
    return said


def _spent_in_budget(paid: Decimal, held: Decimal, scopes: str = "its scope") -> str:
    """`` (...)`` saying ``paid`` of a hold of ``held`` was paid by entries of ``scopes``; "" for none."""
    if paid <= 0:
        return ""
    if paid >= held:
        return (
            f" (nothing was still reserved: entries of {scopes} paid the whole {format_usd_exact(held)} "
            "hold, which stays spent)"
        )
    return (
        f" (the other {format_usd_exact(paid)} of the {format_usd_exact(held)} hold was paid by entries of "
        f"{scopes} and stays spent)"
    )


def _refuse_while_a_task_may_bill(holder: str, holds: list[Any]) -> None:
    """Refuse to release a hold whose task Airflow's metadata database says may still bill, or cannot say.

    Released while its task ran, a hold was settled by that task's cost after the money had been handed to
    others: a $5 budget read -$3.00 left. Holds that name no task instance (reserved from Python) are not
    checked: nothing in Airflow settles them. A budgeted_search's hold is refused without ``--force``: the
    search settles it, and nothing in Airflow says whether it still runs.
    """
    from costaware.adapters.airflow_tasks import (
        AirflowDatabaseUnreadable,
        search_of,
        task_instance_of,
        task_instance_standing,
    )
    from costaware.core.errors import InvalidBudgetError

    for hold in holds:
        search = search_of(hold.holder)
        if search is not None:
            # Its id is the search's own, not a run's: nothing in Airflow says whether it still trains.
            what = "its bookkeeping after the last rung" if hold.holder.endswith("/tail") else "a rung"
            raise InvalidBudgetError(
                f"hold of {holder!r} not released: it is {what} of budgeted_search {search!r}, which runs "
                "outside Airflow's task states, so whether it may still bill cannot be checked. It expires "
                f"by itself at {hold.expires_at:%Y-%m-%d %H:%M} UTC; give --force once the search has "
                "ended (a search still running settles its rung against the released hold, past the "
                "budget's cap)"
            )
        key = task_instance_of(hold.holder)
        if key is None:
            continue
        try:
            standing = task_instance_standing(key)
        except AirflowDatabaseUnreadable as e:
            raise InvalidBudgetError(
                f"hold of {holder!r} not released: cannot read Airflow's metadata database to check that "
                f"{key} has ended ({e}). Run the command with the deployment's AIRFLOW_HOME (or "
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN), or give --force once you know the task runs no more: "
                "a task still running settles its cost against a released hold, past the budget's cap"
            ) from e
        if not standing.found and not standing.run_found:
            # Neither the task nor its run: "let it end or mark it failed" named nothing one could do.
            raise InvalidBudgetError(
                f"hold of {holder!r} not released: {key} is {standing.said()}, so whether it may still "
                "bill cannot be checked. Run the command with the deployment's AIRFLOW_HOME (or "
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN) if this is another one's database; give --force once "
                "you know the task runs no more (its run deleted): a task still running settles its cost "
                "against a released hold, past the budget's cap"
            )
        if not standing.ended:
            raise InvalidBudgetError(
                f"hold of {holder!r} not released: {key} is {standing.said()}, so it may still bill and "
                "would settle its cost against the released hold, past the budget's cap. Let it end (its "
                "run's end releases the hold), or mark it failed; a run of "
                "`airflow dags test` stopped with Ctrl-C still reads running: give --force for that one"
            )
