"""``costaware report --efficiency``: measured utilization per task, idle cost, and right-sizing advice.

Its options (``--runs-per-month``, ``--min-tries``, ...) are declared with ``report``'s in
:mod:`costaware.cli.config`.
"""

from __future__ import annotations

import argparse
import sys
from decimal import Decimal

from costaware.cli.arguments import check_range, open_ledger, run_asked_for, why_empty
from costaware.cli.output import emit
from costaware.core.errors import ConfigurationError, CostawareError
from costaware.core.money import format_usd_exact


def report_efficiency(args: argparse.Namespace) -> int:
    """Print measured utilization per task and the right-sizing advice."""
    from costaware.adapters.ledger.reports import Filters
    from costaware.adapters.ledger.views import measurements_in
    from costaware.adapters.price_source import current_catalog, discounts_from_settings
    from costaware.core.efficiency import advise_tasks, utilization_by_task

    # Named by their flags here: the library's errors name its arguments (min_tries).
    check_range("--min-tries", args.min_tries, low=1)
    if args.runs_per_month is not None:
        try:
            check_range("--runs-per-month", args.runs_per_month, low=0, low_included=False)
        except ConfigurationError as e:
            # 0 saved $0 a month on every suggestion, and so hid all of them under --min-saving-usd.
            raise ConfigurationError(
                f"{e}: the monthly saving is per run times runs a month; give how often the DAG runs, or "
                "leave it out to use each DAG's schedule"
            ) from e
    try:
        check_range("--memory-margin", args.memory_margin, low=0, high=10)
    except ConfigurationError as e:
        # 25 (meant as 25%) was refused as out of range, without saying the margin is a fraction.
        raise ConfigurationError(f"{e}: a fraction of the measured peak memory, 0.25 for 25%") from e
    if args.group_by != "task":
        raise CostawareError(
            f"--group-by {args.group_by} does not apply to --efficiency: its rows are always one per task"
        )
    ledger = open_ledger(args, reading=True, read_only=True)
    # The tries of the runs the filters select, as the Cost page reads them: --scope and a run too.
    filters = Filters(args.since, args.until, args.dag_id, args.scope, run_asked_for(args, ledger))
    measured = measurements_in(ledger, filters)
    # Nothing measured for a DAG, run or tag the ledger has no entry of: a typo, said as `report` says it.
    why = "" if measured else why_empty(ledger, args)
    if why and args.format != "table":  # beside the data on stdout, as `report` puts it
        print(f"costaware: note: no entries{why}", file=sys.stderr)
    from costaware.core.money import parse_usd

    floor = parse_usd(args.min_saving_usd, name="--min-saving-usd")
    rows = utilization_by_task(measured)
    every = advise_tasks(
        current_catalog(ledger),  # the prices RightSizeOperator decides on: refreshed or imported ones too
        measured,
        runs_per_month=args.runs_per_month,
        min_tries=args.min_tries,
        memory_margin=args.memory_margin,
        discounts=discounts_from_settings(),  # on-demand types compared at the prices the ledger bills
    )
    advice = [a for a in every if a.monthly_saving_usd >= floor]
    hidden = len(every) - len(advice)
    if args.format == "json":
        payload = {"tasks": rows, "advice": [a.to_json() for a in advice], "advice_under_min_saving": hidden}
        emit([], "json", headers=[], payload=payload)
        return 0
    headers = [
        "task",
        "tries",
        "instance",
        "wall s",
        "CPU s",
        "CPU util",
        "peak GiB",
        "of GiB",
        "cost",
        "idle cost",
    ]
    table = [
        [
            r["task_id"] if args.dag_id else f"{r['dag_id']}.{r['task_id']}",
            r["tries"],
            r["instance_type"] or "-",
            f"{r['wall_seconds']:.2f}",
            f"{r['cpu_seconds']:.2f}",
            "-" if r["cpu_utilization"] is None else f"{r['cpu_utilization']:.1%}",
            f"{r['peak_memory_gib']:.3f}",
            r["memory_gib"] or "-",
            format_usd_exact(Decimal(r["usd"])),
            "-" if r["idle_usd"] is None else format_usd_exact(Decimal(r["idle_usd"])),
        ]
        for r in rows
    ]
    if args.format == "csv":
        # A number a spreadsheet computes with, a fraction of 1 as JSON gives it: "45.0%" was text.
        for cells, r in zip(table, rows, strict=True):
            cells[5] = "" if r["cpu_utilization"] is None else f"{r['cpu_utilization']:g}"
        emit(table, "csv", headers=headers)
        return 0
    print("efficiency" + (f" of DAG {args.dag_id}" if args.dag_id else "") + " (measured successful tries)")
    if not rows:
        if why:
            print(f"(no entries{why})")
        elif args.since or args.until or args.scope not in (None, "*"):
            # --scope's default "*" was named as if given: "no measured tries match --scope *".
            scope = args.scope if args.scope != "*" else None
            given = {"since": args.since, "until": args.until, "scope": scope}
            window = " ".join(
                f"--{name} {value.isoformat() if hasattr(value, 'isoformat') else value}"
                for name, value in given.items()
                if value
            )
            print(f"(no measured tries match {window}: widen them, or leave them out)")
        else:
            print("(no measured tries: the costaware listener measures each task try it prices)")
        return 0
    emit(table, "table", headers=headers)
    total = sum((Decimal(r["usd"]) for r in rows), Decimal(0))
    idle = sum((Decimal(r["idle_usd"] or 0) for r in rows), Decimal(0))
    print(f"idle cost: {format_usd_exact(idle)} of {format_usd_exact(total)} (vCPU time left unused)")
    print()
    small = (
        f"; {hidden} suggestion(s) under {format_usd_exact(floor)}/month hidden "
        "(--min-saving-usd 0 shows them)"
        if hidden
        else ""
    )
    if not advice and hidden:
        # "No cheaper type fits" was wrong: they fit, each saving less than the floor a month.
        print(
            f"right-sizing: {hidden} cheaper type(s) fit, each saving under {format_usd_exact(floor)}/month "
            "(--min-saving-usd 0 shows them)"
        )
        return 0
    most = max(rows, key=lambda r: int(r["tries"]))
    if not advice and int(most["tries"]) < args.min_tries:
        # "No cheaper type fits" read as a verdict, where no task had been sized at all.
        print(
            f"right-sizing: no task has {args.min_tries} measured successful tries yet (the most: "
            f"{most['tries']}, {most['dag_id']}.{most['task_id']}): run it more, or lower --min-tries"
        )
        return 0
    if not advice:
        print(
            f"right-sizing: no cheaper type fits (tasks need {args.min_tries}+ measured tries; "
            "local and unknown instance types are not sized)"
        )
        return 0
    print("right-sizing (cheapest catalog type that fits the measured peak memory and busy cores):")
    for a in advice:
        print(
            f"  {a.dag_id}.{a.task_id}: {a.current.instance_type} -> {a.suggested.instance_type} "
            f"({a.suggested.vcpus} vCPUs, {a.suggested.memory_gib} GiB): saves "
            f"{format_usd_exact(a.saving_per_run_usd)} per run, "
            f"{format_usd_exact(a.monthly_saving_usd)}/month at {a.runs_per_month:g} runs/month "
            f"({a.frequency_basis})"
        )
        print(f"      {a.requirements.describe()}")
    if small:
        print(small[2:])
    return 0
