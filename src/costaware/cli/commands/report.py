"""``costaware report``: spend, estimates, savings versus on-demand and emissions, grouped as asked.

The ``kg CO2e`` column sums the estimated emissions of each group's actual entries
(``costaware.core.ledger.format_kg_co2e``): ``12.345`` every compute entry has an estimate; ``12.345+?``
the known sum, plus compute entries whose emissions are unknown (so the true figure is higher); ``unknown``
none of them has one; ``-`` the group has no compute entry. The JSON output gives ``kg_co2e`` (null when no
entry has an estimate) and ``co2e_unknown_entries``; the CSV output the same two, as the ``kg CO2e`` (empty
when no entry has an estimate) and ``kg CO2e unknown entries`` columns.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from costaware.cli.arguments import open_ledger, run_asked_for, why_empty
from costaware.cli.output import emit
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import format_kg_co2e, total_kg_co2e
from costaware.core.money import format_usd_exact
from costaware.settings import costaware_home


def report(args: argparse.Namespace) -> int:
    """Print spend, estimates and savings versus on-demand, grouped by ``--group-by``."""
    if args.efficiency:
        from costaware.cli.commands.efficiency import report_efficiency

        return report_efficiency(args)
    # Their defaults are the parser's own, so that a changed default is no setting "given".
    parser = getattr(args, "command_parser", None)
    efficiency_only = ("runs_per_month", "min_tries", "memory_margin", "min_saving_usd")
    given = [
        f"--{dest.replace('_', '-')}"
        for dest in efficiency_only
        if parser is not None and getattr(args, dest) != parser.get_default(dest)
    ]
    if given:  # accepted in silence, they changed nothing
        raise ConfigurationError(
            f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only with --efficiency: add "
            f"it, or leave {'it' if len(given) == 1 else 'them'} out"
        )
    ledger = open_ledger(args, reading=True, read_only=True)
    run_id = run_asked_for(args, ledger)
    rows = ledger.report(
        group_by=args.group_by,
        since=args.since,
        until=args.until,
        dag_id=args.dag_id,
        run_id=run_id,
        scope=args.scope,
    )
    total_usd = sum((r.usd for r in rows), Decimal(0))
    total_od = sum((r.on_demand_usd for r in rows), Decimal(0))
    total_est = sum((r.estimated_usd for r in rows), Decimal(0))
    total_hours = sum((r.hours for r in rows), Decimal(0))
    total_kg, total_unknown = total_kg_co2e(rows)
    headers = [args.group_by, "entries", "hours", "actual", "estimated", "on-demand", "savings", "kg CO2e"]
    # One DAG's rows need not repeat its name (a task's group is "<dag>.<task>", a run's "<dag>/<run>", a
    # trial's "<dag>/<run> <label>"), nor one run's its id, as the README's report shows them; JSON keeps the
    # groups whole.
    trial_prefix = f"{args.dag_id}/{run_id} " if run_id else f"{args.dag_id}/"
    prefix = (
        {"task": f"{args.dag_id}.", "run": f"{args.dag_id}/", "trial": trial_prefix}.get(args.group_by, "")
        if args.dag_id
        else ""
    )
    table = [
        [
            r.group.removeprefix(prefix),
            r.entries,
            f"{r.hours:.4f}",
            format_usd_exact(r.usd),
            format_usd_exact(r.estimated_usd),
            format_usd_exact(r.on_demand_usd),
            format_usd_exact(r.savings_usd),
            r.kg_co2e_text,
        ]
        for r in rows
    ]
    payload = {
        "group_by": args.group_by,
        "dag_id": args.dag_id,
        "run_id": run_id,
        "rows": [
            {
                "group": r.group,
                "entries": r.entries,
                "hours": str(r.hours),
                "usd": str(r.usd),
                "estimated_usd": str(r.estimated_usd),
                "on_demand_usd": str(r.on_demand_usd),
                "savings_usd": str(r.savings_usd),
                "kg_co2e": None if r.kg_co2e is None else str(r.kg_co2e),
                "co2e_unknown_entries": r.co2e_unknown,
            }
            for r in rows
        ],
        "total": {
            "usd": str(total_usd),
            "estimated_usd": str(total_est),
            "on_demand_usd": str(total_od),
            "savings_usd": str(total_od - total_usd),
            "hours": str(total_hours),
            "kg_co2e": None if total_kg is None else str(total_kg),
            "co2e_unknown_entries": total_unknown,
            "entries": sum(r.entries for r in rows),
        },
    }
    spooled = _spooled_entries()
    if spooled:
        payload["spooled_entries_here"] = spooled
    from costaware.adapters.ledger.views import untagged_grouping_hint

    untagged_note = untagged_grouping_hint(ledger, args.group_by, [r.group for r in rows]) or None
    if untagged_note:
        payload["note"] = untagged_note
    if args.format == "table":
        title = "cost report"
        if args.dag_id:
            title += f" for DAG {args.dag_id}"
        if run_id:
            title += f", run {run_id}"
        print(title)
        if not rows:
            print(f"(no entries{why_empty(ledger, args)})")
            if spooled:
                print(_spool_note(spooled))
            return 0
        table.append(
            [
                "TOTAL",
                sum(r.entries for r in rows),
                f"{total_hours:.4f}",
                format_usd_exact(total_usd),
                format_usd_exact(total_est),
                format_usd_exact(total_od),
                format_usd_exact(total_od - total_usd),
                format_kg_co2e(total_kg, total_unknown),
            ]
        )
    if not rows:
        why = why_empty(ledger, args)
        if why:  # beside the empty rows a script reads: a mistyped name read as "it cost nothing"
            print(f"costaware: note: no entries{why}", file=sys.stderr)
    from costaware.adapters.ledger.reports import Filters, summary

    totals = summary(ledger, Filters(args.since, args.until, args.dag_id, args.scope, run_id))
    from costaware.adapters.ledger.discounts import discounts_by_rule

    discounts = discounts_by_rule(ledger, Filters(args.since, args.until, args.dag_id, args.scope, run_id))
    payload["discounts"] = {rule: str(usd) for rule, usd in discounts.items()}
    payload["unpriced_entries"] = totals.unpriced_entries
    payload["failed_tries"] = {
        "preemption": totals.preempted_tries,
        "other": totals.failed_tries - totals.preempted_tries,
    }
    per_trial = None
    if args.group_by == "trial":
        from costaware.adapters.ledger.trials import trial_spend

        per_trial = _trial_costs(
            trial_spend(ledger, Filters(args.since, args.until, args.dag_id, args.scope, run_id))
        )
    if per_trial is not None:
        payload["trials"] = {
            "trials": per_trial.trials,
            "successful": per_trial.successful,
            "per_trial_usd": str(per_trial.per_trial_usd),
            # null where no trial was trained to full fidelity: str() gave the text "None"
            "per_successful_trial_usd": (
                None
                if per_trial.per_successful_trial_usd is None
                else str(per_trial.per_successful_trial_usd)
            ),
        }
    if args.format == "csv":
        # Numbers a spreadsheet sums: "0.3+?" and "unknown" were text. The known sum (empty: none known), and
        # beside it how many compute entries it lacks, as JSON gives them.
        headers.append("kg CO2e unknown entries")
        for cells, r in zip(table, rows, strict=True):
            cells[-1] = "" if r.kg_co2e is None else str(r.kg_co2e)
            cells.append(r.co2e_unknown)
    emit(table, args.format, headers=headers, payload=payload)
    if args.format == "table" and per_trial is not None:
        each = (
            "-"
            if per_trial.per_successful_trial_usd is None
            else format_usd_exact(per_trial.per_successful_trial_usd)
        )
        print(
            f"{per_trial.trials} trials, {per_trial.successful} trained to full fidelity: "
            f"{format_usd_exact(per_trial.per_trial_usd or Decimal(0))} per trial, "
            f"{each} per successful trial"
        )
    if args.format == "table" and total_unknown:
        known = "none" if total_kg is None else f"{format_kg_co2e(total_kg, 0)} kg"
        print(
            f"kg CO2e: {total_unknown} compute entr{'y has' if total_unknown == 1 else 'ies have'} unknown "
            "emissions: no grid intensity for its region or time (`costaware carbon import` adds it, a "
            "grid_zone names it), or a power_kw or grid_zone that could not be read; each entry's "
            "carbon_method says which (`costaware runs show RUN --format json`). "
            f"'+?' marks a sum short of them (known: {known})"
        )
    if args.format == "table" and untagged_note:
        print(untagged_note)
    if args.format == "table" and discounts:
        listed = ", ".join(f"{rule} {format_usd_exact(usd)}" for rule, usd in discounts.items())
        print(f"discounts on on-demand prices (part of the savings): {listed}")
    if args.format == "table" and spooled:
        print(_spool_note(spooled))
    if args.format == "table" and totals.unpriced_entries:
        # Counted at $0: a misspelt instance type in a setting made every try on the workers free.
        n = totals.unpriced_entries
        print(
            f"unpriced: {n} entr{'y' if n == 1 else 'ies'} could not be priced and count $0 (a misspelt "
            "instance type, or one no price source knows; each entry's note says why): fix the task's "
            "costaware_compute or [costaware] worker_instance_type, or import its price (`costaware prices "
            "import`)"
        )
    if args.format == "table" and totals.failed_tries:
        print(
            f"failed tries: {totals.preempted_tries} after a spot preemption, "
            f"{totals.failed_tries - totals.preempted_tries} after other errors "
            "(--group-by cause splits their cost)"
        )
    return 0


def _spooled_entries() -> int:
    """How many cost entries wait in this machine's spool (``$AIRFLOW_HOME/costaware/spool``).

    Those a task process has taken to write (``*.claimed``, or left so when it was killed) wait too.
    """
    folder = costaware_home("spool")
    return len(list(folder.glob("*.json"))) + len(list(folder.glob("*.claimed")))


def _spool_note(spooled: int) -> str:
    """Costs a worker on this machine could not write: the report is short of them until they are."""
    return (
        f"spool: {spooled} cost entr{'y waits' if spooled == 1 else 'ies wait'} in {costaware_home('spool')} "
        "(the ledger could not be written when they were recorded) and count nowhere yet: "
        "`costaware spool drain` writes them now (else the next task that records its cost on this machine)"
    )


def _trial_costs(spend: Sequence[tuple[str, str, Decimal]]) -> Any:
    """Cost per trial and per successful trial, from what each trial label of each run spent.

    ``#<n> <state>@<fidelity>`` is one trial that ended so (budgeted_tuning's entry, or the last of a
    budgeted_search trial); ``#<n>@<rung>`` is a rung of a budgeted_search trial, counted with its trial's
    ending where one row gives it, else as a trial that did not end (cut by the budget, or still running).
    Trials are numbered within their run: ``#0`` of one run is not ``#0`` of another.
    """
    from costaware.core.tuning import TrialState, trial_costs

    states = {s.value for s in TrialState}
    ended: dict[tuple[str, str], list[tuple[TrialState, Decimal]]] = {}
    rungs: dict[tuple[str, str], Decimal] = {}
    for run, label, usd in spend:
        found = re.match(r"^#(\d+)(?: ([a-z]+))?@\S+$", label)
        if not found or (found.group(2) is not None and found.group(2) not in states):
            continue
        trial, state = (run, found.group(1)), found.group(2)
        if state is None:
            rungs[trial] = rungs.get(trial, Decimal(0)) + usd
        else:
            ended.setdefault(trial, []).append((TrialState(state), usd))
    for trial, usd in rungs.items():
        endings = ended.get(trial)
        if endings and len(endings) == 1:  # the earlier rungs of the trial that ended so
            endings[0] = (endings[0][0], endings[0][1] + usd)
        else:
            ended.setdefault(trial, []).append((TrialState.RUNNING, usd))
    costs = [cost for endings in ended.values() for cost in endings]
    return trial_costs(costs) if costs else None
