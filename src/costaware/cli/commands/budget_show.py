"""``costaware budget list|show``: the budgets, and what those covering a scope spent, reserved, have left."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from costaware.cli.arguments import open_ledger
from costaware.cli.commands.governance import forecast_cell, forecast_rows
from costaware.cli.output import emit, plain
from costaware.core.money import format_usd_exact


def budget_list(args: argparse.Namespace) -> int:
    """Print the budgets; the table counts the tuning studies' own in one line, ``--studies`` lists those."""
    from costaware.core.budget_listing import LIST_STUDY_BUDGETS, folded_budgets_said, is_study_budget

    every = open_ledger(args, reading=True, read_only=True).budgets()
    if args.studies:
        budgets = [b for b in every if is_study_budget(b)]
    elif args.format == "table":
        # Each run of a tuning DAG that names its study after the run leaves a study budget (kept: its spend
        # is reported by study): listed one by one, they buried the teams' budgets after a few nightly runs.
        budgets = [b for b in every if not is_study_budget(b)]
    else:
        budgets = every  # json and csv list every budget, as before --studies: scripts read them whole
    # A killed budgeted_search's own budget (search=<id>) is folded with them (see core/budget_listing).
    folded = [] if args.studies or args.format != "table" else [b for b in every if is_study_budget(b)]
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
    studies = f"{folded_budgets_said(folded)}: `{LIST_STUDY_BUDGETS}` lists them"
    if not budgets and args.format == "table":
        if args.studies:
            print("no study budgets (a tuning study sets one over its tags and study=<name>, period total)")
        elif folded:
            print(f"no budgets but {studies}")
        else:
            print(
                "no budgets; set one with "
                "`costaware budget set --scope project=<name> --period month --cap-usd 100`"
            )
        return 0
    emit(rows, args.format, headers=["scope", "period", "cap", "GPU-hour cap", "time zone"], payload=payload)
    if folded:
        print(f"and {studies}")
    labels = {b.label for b in every}  # the budget a quoted one meant may be folded away
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
        if str(scope) == "*" and budgets:
            # Asked for everything: the answer is the list of budgets, not the reservation's hint to set a
            # catch-all budget, which would cap every run of every team.
            from costaware.core.budget_listing import NAMED_BUDGETS, budgets_said, is_study_budget

            teams = [b for b in budgets if not is_study_budget(b)]
            # Past a few, or with the study budgets each tuning run leaves, the list counts the rest with
            # the command that lists them.
            whole = len(teams) == len(budgets) <= NAMED_BUDGETS
            raise BudgetNotFoundError(
                f"no budget has the catch-all scope '*' (budgets: {budgets_said(budgets, scope)}): "
                + ("`costaware budget list` lists them all; " if whole else "")
                + f"give one's scope to see its spend (e.g. --scope '{(teams or budgets)[0].scope}')"
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
