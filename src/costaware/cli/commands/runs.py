"""``costaware runs``: what each retrain run produced, what it cost, and how to reproduce it."""

from __future__ import annotations

import argparse
import json
from decimal import Decimal
from typing import Any

from costaware.cli.arguments import check_range, open_ledger, refuse_unknown_names
from costaware.cli.output import emit
from costaware.core.ledger import read_holder
from costaware.core.money import format_usd_exact


def _metric(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def list_runs(args: argparse.Namespace) -> int:
    """Print retrain runs with their metric, promotion and cost, and the cost per promoted model."""
    from costaware.adapters.ledger.efficiency import outcomes
    from costaware.core.outcomes import summarize

    check_range("--limit", args.limit, low=1)  # 0 read "no retrain outcomes yet", and -1 listed everything
    ledger = open_ledger(args, reading=True, read_only=True)
    refuse_unknown_names(ledger, args.dag_id, None)
    found = outcomes(ledger, dag_id=args.dag_id, limit=args.limit)
    headers = ["run", "model", "metric", "value", "champion", "promoted", "rows", "trained", "cost"]
    table = []
    priced: set[tuple[str, str]] = set()
    for o in found:
        # A run that recorded several models (a tuning run's trials) shows its cost once, on its first row.
        if (o.dag_id, o.run_id) in priced:
            cost = "(above)"
        else:
            cost = "-" if o.usd is None else format_usd_exact(o.usd)
            if o.usd is not None:
                priced.add((o.dag_id, o.run_id))
        trained = "-" if not (o.training_rows or o.iterations) else f"{o.iterations} {o.iteration_unit}"
        table.append(
            [
                o.run_id,
                o.model_version,
                o.metric or "-",
                _metric(o.metric_value),
                _metric(o.champion_metric),
                {True: "yes", False: "no", None: "-"}[o.promoted],
                o.training_rows or "-",  # a team's own command reports its metrics, not rows
                trained,
                cost,
            ]
        )
    metrics = {o.metric for o in found if o.metric}
    summary = summarize(found) if len(metrics) <= 1 else None
    payload = {"runs": _once_per_run(found), "summary": summary.to_json() if summary else None}
    if args.format != "table":
        emit(table, args.format, headers=headers, payload=payload)
        return 0
    if not found:
        whose = f" of DAG {args.dag_id!r}" if args.dag_id else ""
        print(
            f"no retrain outcomes{whose} yet: WarmStartRetrainOperator, RemoteTrainingOperator and "
            "ModelPromoteOperator record them"
        )
        return 0
    emit(table, "table", headers=headers)
    if summary is not None:
        print(_summary_line(summary))
    unlisted = _runs_without_a_model(ledger, found)
    # A run whose task still holds budget is running: it has no model yet, which is not a failure.
    holds = [read_holder(r.holder) for r in ledger.open_reservations() if r.holder]
    holding = {(key.dag_id, key.run_id) for key in holds if key is not None and key.dag_id is not None}
    running = {run: usd for run, usd in unlisted.items() if run in holding}
    ended = {run: usd for run, usd in unlisted.items() if run not in holding}
    if ended:
        count, usd = len(ended), sum(ended.values(), Decimal(0))
        print(
            f"{count} more run(s) of these DAGs since the oldest above trained no model (failed, stopped "
            f"before training, or still running without a hold) and cost {format_usd_exact(usd)}, not "
            "counted above: `costaware runs show RUN_ID --dag-id DAG` says what each paid for"
        )
    if running:
        count, usd = len(running), sum(running.values(), Decimal(0))
        print(
            f"{count} run(s) still running (a task holds budget) have cost {format_usd_exact(usd)} so far, "
            "not counted above"
        )
    return 0


def _once_per_run(found: list[Any], entries: Any = None) -> list[dict[str, Any]]:
    """Each outcome as JSON, a run's cost (and ``entries(outcome)``) on its first model's item only.

    A run that recorded several models (a tuning run's trials) repeated its whole cost on each: a sum over
    the items counted it once per model. The others name the item that has it (``usd_listed_under``), as
    the table's "(above)" does.
    """
    listed: dict[tuple[str, str], str] = {}
    items = []
    for o in found:
        item = o.to_json()
        first = listed.get((o.dag_id, o.run_id))
        if first is not None:
            item |= {"usd": None, "usd_listed_under": first}
        elif o.usd is not None:
            listed[(o.dag_id, o.run_id)] = o.model_version
        if entries is not None:
            item["entries"] = [] if first is not None else entries(o)
        items.append(item)
    return items


def _runs_without_a_model(ledger: Any, found: list[Any]) -> dict[tuple[str, str], Decimal]:
    """``(dag, run) -> usd`` of the listed DAGs' runs since the oldest outcome that recorded none.

    The per-run figures count runs that trained a model; a failed run's spend was left out unsaid.
    """
    times = [o.recorded_at for o in found if o.recorded_at is not None]
    if not times:
        return {}
    since = min(times)
    listed = {(o.dag_id, o.run_id) for o in found}
    missing: dict[tuple[str, str], Decimal] = {}
    for dag_id in sorted({o.dag_id for o in found}):
        for row in ledger.report(group_by="run", dag_id=dag_id, since=since):
            run_id = row.group.removeprefix(f"{dag_id}/")  # a run's group is "<dag>/<run>"
            if (dag_id, run_id) not in listed and row.usd > 0:
                missing[(dag_id, run_id)] = row.usd
    return missing


def _actual_oldest_first(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The actual (not estimated) ones of ``Ledger.entries``' newest-first list, oldest first."""
    return [e for e in reversed(entries) if not e["estimated"]]


def _entries_json(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's actual entries, oldest first, as ``--format json`` gives them (all of them, USD as text)."""
    keys = ("task_id", "kind", "market", "usd", "kg_co2e", "cause", "note", "carbon_method", "carbon_source")
    text = ("usd", "kg_co2e")  # Decimals as text; an unknown kg_co2e stays null
    return [
        {k: str(e[k]) if k in text and e[k] is not None else e[k] for k in keys}
        for e in _actual_oldest_first(entries)
    ]


#: Entries listed under a run's cost at most; a tuning run can hold hundreds.
MAX_ENTRIES_SHOWN = 30


def _print_entries(entries: list[dict[str, Any]], dag_id: str, run_id: str) -> None:
    """The run's actual entries, oldest first: what each cost, on which market, and its note.

    The note says how a remote attempt ended and, for one a rule moved to on-demand, why (the
    restart-thrash guard, no spot capacity by the latest safe start, ...).
    """
    actual = _actual_oldest_first(entries)
    if not actual:
        return
    print("  entries (oldest first: task, kind, market, USD, cause, note)")
    rows = [
        (e["task_id"], e["kind"], e["market"] or "-", format_usd_exact(e["usd"]), e["cause"] or "-")
        for e in actual[:MAX_ENTRIES_SHOWN]
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row, e in zip(rows, actual, strict=False):
        columns = [value.ljust(width) for value, width in zip(row, widths, strict=True)]
        note = " ".join(str(e["note"]).split())  # one line, whatever the backend's text held
        print("    " + "  ".join([*columns, note]).rstrip())
    if len(actual) > MAX_ENTRIES_SHOWN:
        print(
            f"    ... and {len(actual) - MAX_ENTRIES_SHOWN} more: costaware report --dag-id {dag_id} "
            f"--run-id {run_id} --group-by task"
        )


def _summary_line(s: Any) -> str:
    def usd(value: Any) -> str:
        return "-" if value is None else format_usd_exact(value)

    gain = f", {usd(s.usd_per_unit_gain)} per unit of {s.metric} gained" if s.metric else ""
    return (
        f"{s.runs} run(s), {s.promoted} promoted: {usd(s.per_run_usd)} per run, "
        f"{usd(s.per_promoted_usd)} per promoted model{gain}"
    )


def _show_costs_only(entries: list[dict[str, Any]], run_id: str, fmt: str) -> int:
    """A run with costs and no retrain outcome, per DAG: what it spent, and on what."""
    by_dag: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        by_dag.setdefault(str(e["dag_id"]), []).append(e)
    totals = {
        dag: sum((e["usd"] for e in _actual_oldest_first(rows)), Decimal(0)) for dag, rows in by_dag.items()
    }
    if fmt == "json":
        shown = [
            {
                "dag_id": dag,
                "run_id": run_id,
                "outcome": None,
                "usd": str(totals[dag]),
                "entries": _entries_json(rows),
            }
            for dag, rows in by_dag.items()
        ]
        print(json.dumps(shown, indent=2, default=str))
        return 0
    for dag, rows in by_dag.items():
        print(
            f"run {run_id} of DAG {dag}: no retrain outcome recorded (a tuning run records none; a retrain "
            "that failed or stopped before its model was stored neither)"
        )
        print("cost")
        print(f"  run total: {format_usd_exact(totals[dag])} (every actual ledger entry of the run)")
        _print_entries(rows, dag, run_id)
    return 0


#: Record fields of the built-in trainers only: for a team's own command they read empty or meaningless.
_BUILT_IN_ONLY = frozenset({"data_fingerprint", "features_key", "mode", "parent"})


def show_run(args: argparse.Namespace) -> int:
    """Print one run's outcome, cost and reproducibility record."""
    from costaware.adapters.ledger.efficiency import outcomes, run_outcome
    from costaware.core.errors import ConfigurationError, CostawareError

    ledger = open_ledger(args, reading=True, read_only=True)
    run_id = args.run_id
    if args.last:
        if run_id or not args.dag_id:
            raise CostawareError("--last takes no RUN_ID and needs --dag-id, e.g. --last --dag-id nightly")
        refuse_unknown_names(ledger, args.dag_id, None)
        newest = outcomes(ledger, dag_id=args.dag_id, limit=1)
        if not newest:
            # The name is right (refused above otherwise): listing the other DAGs read as if it were not.
            import shlex

            last = ledger.last_run_id(args.dag_id)
            if last is None:
                # Its costs only wait (the note above says where): no entry, no run to point at.
                raise CostawareError(
                    f"DAG {args.dag_id!r} has no entries in the ledger yet and no recorded retrain outcome: "
                    "no run of it to show until its waiting costs are written (the note above says what "
                    "waits)"
                )
            raise CostawareError(
                f"DAG {args.dag_id!r} has cost entries in the ledger but no recorded retrain outcome (a "
                "tuning DAG, or runs that ended before a model was trained, record none; "
                "WarmStartRetrainOperator, RemoteTrainingOperator and ModelPromoteOperator do): "
                f"`costaware runs show {shlex.quote(str(last))} --dag-id {shlex.quote(args.dag_id)}` "
                "shows what its newest run cost"
            )
        run_id = newest[0].run_id
    elif not run_id:
        raise CostawareError("give a RUN_ID (see `costaware runs list`) or --last --dag-id DAG")
    try:
        found = run_outcome(ledger, run_id, dag_id=args.dag_id)
    except ConfigurationError:
        # A run that failed or stopped before any model was trained still cost money: show that.
        spent = ledger.entries(dag_id=args.dag_id, run_id=run_id)
        if not spent:
            raise
        return _show_costs_only(spent, run_id, args.format)
    if args.format == "json":
        shown = _once_per_run(
            found, lambda o: _entries_json(ledger.entries(dag_id=o.dag_id, run_id=o.run_id))
        )
        print(json.dumps(shown, indent=2, default=str))
        return 0
    listed: set[tuple[str, str]] = set()
    for o in found:
        print(f"run {o.run_id} of DAG {o.dag_id}: model {o.model_version} (task {o.task_id or '-'})")
        print("outcome")
        if o.metric:
            gain = "" if o.gain is None else f", gain {o.gain:+.4f} over the previous champion"
            print(f"  {o.metric}: {_metric(o.metric_value)} (champion {_metric(o.champion_metric)}){gain}")
        else:
            print("  not scored yet (no promotion step has judged it)")
        print(f"  promoted: {({True: 'yes', False: 'no', None: 'not decided'})[o.promoted]}")
        if o.training_rows or o.iterations:  # a team's own command reports its metrics, not these
            print(f"  trained on {o.training_rows} rows, {o.iterations} {o.iteration_unit}")
        print("cost")
        total = "-" if o.usd is None else format_usd_exact(o.usd)
        # A run with several models (a tuning run's trials): its cost and entries are listed once.
        first = (o.dag_id, o.run_id) not in listed
        listed.add((o.dag_id, o.run_id))
        whose = (
            "every actual ledger entry of the run"
            if first
            else "the run's, listed under its first model above"
        )
        print(f"  run total: {total} ({whose})")
        if o.usd_per_unit_gain is not None:
            print(f"  {format_usd_exact(o.usd_per_unit_gain)} per unit of {o.metric} gained")
        if first:
            _print_entries(ledger.entries(dag_id=o.dag_id, run_id=o.run_id), o.dag_id, o.run_id)
        print("reproducibility record" + (f" (digest {o.record.digest[:16]})" if o.record else ""))
        if o.record is None:
            print("  none: the retrain did not record one (ledger unreachable, or an older costaware)")
            continue
        own_command = o.record.trainer == "command"
        for name, value in o.record.to_json().items():
            if own_command and name in _BUILT_IN_ONLY and (name in ("mode", "parent") or not value):
                continue  # a team's command: what costaware did not read (a features_key given is shown)
            text = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)
            print(f"  {name}: {text}")
    return 0
