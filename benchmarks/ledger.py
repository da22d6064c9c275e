"""Ledger throughput and report latency on SQLite and PostgreSQL.

1. Reservations per second with 1, 4 and 16 processes racing for one budget (every reservation is
   atomic: check + insert under the database lock), against the baseline of plain inserts of the
   same rows with no lock and no cap check, in the same run.
2. Latency of a month report grouped by tag (``tag:team``) over a ledger holding 1,000,000 entries
   spread over 12 months, on PostgreSQL (target < 200 ms) and SQLite, against the baseline of fetching
   the month's rows and grouping them in pandas.

Run: ``.venv/bin/python benchmarks/ledger.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, scratch_dir, table
from services import postgres_server
from sqlalchemy import create_engine, text

from costaware import Ledger
from costaware.adapters.ledger import schema

REPORT_TARGET_MS = 200.0
TEAMS = [f"team-{n}" for n in range(20)]


def _reserve_worker(url: str, count: int, barrier) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    ledger = Ledger.from_url(url)
    barrier.wait()  # every process is connected before anyone starts
    start = time.time()
    for _ in range(count):
        ledger.reserve("project=bench", "0.01")
    end = time.time()
    ledger.dispose()
    return start, end


def _insert_worker(url: str, count: int, barrier) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    ledger = Ledger.from_url(url)
    now = datetime.now(timezone.utc)
    barrier.wait()
    start = time.time()
    for _ in range(count):
        with ledger.engine.begin() as conn:
            conn.execute(
                schema.reservations.insert().values(
                    id=uuid.uuid4().hex,
                    scope="project=bench",
                    holder=None,
                    usd_micros=10_000,
                    gpu_hours_micros=0,
                    status="open",
                    created_at=now,
                    expires_at=now + timedelta(hours=1),
                    budgets=[],
                )
            )
    end = time.time()
    ledger.dispose()
    return start, end


def _fresh(url_factory, name: str) -> str:  # type: ignore[no-untyped-def]
    url = url_factory(name)
    ledger = Ledger.from_url(url)
    ledger.set_budget("project=bench", "month", "1000000")
    ledger.dispose()
    return str(url)


def throughput(url_factory, processes: int, per_process: int, worker) -> float:  # type: ignore[no-untyped-def]
    url = _fresh(url_factory, f"b{uuid.uuid4().hex[:8]}")
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(processes) as pool:
        barrier = manager.Barrier(processes)
        spans = pool.starmap(worker, [(url, per_process, barrier)] * processes)
    first_start, last_end = min(s for s, _ in spans), max(e for _, e in spans)
    return processes * per_process / (last_end - first_start)


def fill(url: str, rows: int) -> None:
    """Insert ``rows`` entries over the last 12 months, 20 teams, in bulk."""
    ledger = Ledger.from_url(url)
    now = datetime.now(timezone.utc)
    batch = []
    for n in range(rows):
        team = TEAMS[n % len(TEAMS)]
        batch.append(
            {
                "entry_uid": uuid.uuid4().hex,
                "incurred_at": now - timedelta(minutes=(n * 525_600) // rows),
                "dag_id": f"dag{n % 50}",
                "run_id": f"run{n // 10}",
                "task_id": f"task{n % 7}",
                "try_number": 1,
                "map_index": -1,
                "trial": None,
                "kind": "compute",
                "instance_type": "m5.large",
                "region": "us-east-1",
                "market": "on_demand",
                "quantity_micros": 100_000,
                "unit": "hour",
                "unit_price_usd": "0.096",
                "usd_micros": 9_600,
                "on_demand_usd_micros": 9_600,
                "gpu_hours_micros": 0,
                "estimated": False,
                "team": team,
                "project": f"p{n % 9}",
                "owner": None,
                "tags": {"team": team},
                "outcome": "success",
                "cause": "",
                "price_source": "on-demand-list",
                "note": "",
                "reservation_id": None,
            }
        )
        if len(batch) == 20_000:
            with ledger.engine.begin() as conn:
                conn.execute(schema.entries.insert(), batch)
            batch = []
    if batch:
        with ledger.engine.begin() as conn:
            conn.execute(schema.entries.insert(), batch)
    if ledger.engine.dialect.name == "postgresql":
        with ledger.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE costaware_entries"))
    ledger.dispose()


def report_latency(url: str, repeats: int) -> tuple[float, float, int]:
    """Median ms of the month report and of the pandas baseline, and the month's entry count."""
    import pandas as pd

    ledger = Ledger.from_url(url)
    now = datetime.now(timezone.utc)
    since = datetime(now.year, now.month, 1, tzinfo=timezone.utc)
    timings, baseline = [], []
    rows = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rows = ledger.report(group_by="tag:team", since=since)
        timings.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        with ledger.engine.connect() as conn:
            frame = pd.read_sql(schema.entries.select().where(schema.entries.c.incurred_at >= since), conn)
        frame.groupby("team")["usd_micros"].sum()
        baseline.append((time.perf_counter() - t0) * 1000)
    ledger.dispose()
    return statistics.median(timings), statistics.median(baseline), sum(r.entries for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer reservations and 100k entries (~1 min)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    per_process_total = 200 if args.quick else 1200
    report_rows = 100_000 if args.quick else 1_000_000

    tmp = scratch_dir("costaware-bench-")
    result: dict[str, object] = {"benchmark": "ledger", "quick": args.quick}
    with postgres_server() as pg_base:
        admin = create_engine(pg_base, isolation_level="AUTOCOMMIT")

        def pg_url(name: str) -> str:
            with admin.connect() as conn:
                conn.execute(text(f"CREATE DATABASE {name}"))
            return pg_base.rsplit("/", 1)[0] + f"/{name}"

        def sqlite_url(name: str) -> str:
            return f"sqlite:///{tmp / name}.db"

        rows = []
        throughput_result: dict[str, dict[str, float]] = {}
        for backend, factory in (("sqlite", sqlite_url), ("postgresql", pg_url)):
            for processes in (1, 4, 16):
                per_process = max(per_process_total // processes, 10)
                atomic = throughput(factory, processes, per_process, _reserve_worker)
                plain = throughput(factory, processes, per_process, _insert_worker)
                throughput_result[f"{backend}_{processes}"] = {
                    "reservations_per_s": round(atomic, 1),
                    "baseline_inserts_per_s": round(plain, 1),
                    "ratio": round(atomic / plain, 3),
                }
                rows.append([backend, processes, f"{atomic:.0f}", f"{plain:.0f}", f"{atomic / plain:.2f}"])
        print("Reservations per second (atomic reserve vs plain unlocked insert of the same row)")
        print(table(["database", "processes", "reserve/s", "insert/s", "ratio"], rows))
        result["throughput"] = throughput_result

        report_rows_out = []
        report_result: dict[str, dict[str, float]] = {}
        for backend, url in (("postgresql", pg_url("report")), ("sqlite", sqlite_url("report"))):
            Ledger.from_url(url).dispose()
            t0 = time.perf_counter()
            fill(url, report_rows)
            fill_s = time.perf_counter() - t0
            ms, base_ms, month_entries = report_latency(url, repeats=7)
            report_result[backend] = {
                "entries": report_rows,
                "month_entries": month_entries,
                "report_ms": round(ms, 1),
                "baseline_pandas_ms": round(base_ms, 1),
                "ratio": round(ms / base_ms, 3),
            }
            report_rows_out.append(
                [
                    backend,
                    report_rows,
                    month_entries,
                    f"{ms:.1f}",
                    f"{base_ms:.1f}",
                    f"{ms / base_ms:.3f}",
                    f"{fill_s:.0f}",
                ]
            )
        admin.dispose()
    print()
    print("Month report grouped by tag:team (median of 7) vs fetching the month into pandas and grouping")
    print(
        table(
            ["database", "entries", "month entries", "report ms", "pandas ms", "ratio", "fill s"],
            report_rows_out,
        )
    )
    pg_ms = report_result["postgresql"]["report_ms"]
    result["report"] = report_result
    result["target"] = {"postgresql_month_report_ms_below": REPORT_TARGET_MS, "entries": 1_000_000}
    result["target_met"] = bool(pg_ms < REPORT_TARGET_MS and report_rows >= 1_000_000)
    caveat = "" if report_rows >= 1_000_000 else "; --quick cannot meet it"
    print(
        f"\nPostgreSQL month report: {pg_ms:.1f} ms over {report_rows:,} entries "
        f"(target < {REPORT_TARGET_MS:.0f} ms over 1,000,000{caveat})"
    )
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
