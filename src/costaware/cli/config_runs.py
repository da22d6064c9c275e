"""The ``cache``, ``runs``, ``spool`` and ``jobs`` commands, declared as data (see :mod:`.config`).

What retrain runs leave behind: cached features, run records, cost entries waiting for the ledger, and
remote training jobs nobody follows.
"""

from __future__ import annotations

from costaware.cli.arguments import (
    ARG_DAG_ID,
    ARG_FORMAT,
    ARG_LEDGER_URL,
    COMMANDS_PACKAGE,
    ActionCommand,
    Arg,
    lazy_load_command,
)
from costaware.cli.output import FORMATS
from costaware.settings import FEATURE_CACHE_ENV

_COMMANDS = COMMANDS_PACKAGE

# -- cache ----------------------------------------------------------------------------------------

CACHE_ARGS = (
    Arg(
        "--store",
        default=None,
        help=f"cache root: absolute folder or s3://bucket/prefix (default: ${FEATURE_CACHE_ENV}, "
        "else $AIRFLOW_HOME/costaware/features)",
    ),
    Arg("--endpoint-url", default=None, help="S3 endpoint, e.g. http://127.0.0.1:9000"),
    Arg("--region", default=None, help="S3 client region"),
    ARG_FORMAT,
)
ARG_USD_PER_GB_MONTH = Arg(
    "--usd-per-gb-month", default="0.023", help="storage price (default: S3 Standard, 0.023 USD per GB-month)"
)
CACHE_COMMANDS = (
    ActionCommand(
        "list",
        "entries, most recently used first",
        lazy_load_command(f"{_COMMANDS}.cache.list_entries"),
        CACHE_ARGS,
    ),
    ActionCommand(
        "show",
        "the manifest of one entry (JSON by default)",
        lazy_load_command(f"{_COMMANDS}.cache.show_entry"),
        (
            Arg("key", help="the entry's key, from `costaware cache list`"),
            *(arg for arg in CACHE_ARGS if arg is not ARG_FORMAT),
            # JSON stays the default: scripts read `cache show KEY` as JSON.
            Arg(
                "--format",
                choices=FORMATS,
                default="json",
                help="output format (default: json; table and csv: one field a row, nested values as JSON)",
            ),
        ),
    ),
    ActionCommand(
        "evict",
        "delete entries by age, total size, count, or key",
        lazy_load_command(f"{_COMMANDS}.cache.evict"),
        (
            *CACHE_ARGS,
            ARG_USD_PER_GB_MONTH,
            Arg("--max-age-days", type=float, default=None, help="evict entries created longer ago"),
            Arg("--max-total-gb", type=float, default=None, help="evict least recently used beyond this"),
            Arg("--max-entries", type=int, default=None, help="keep this many most recently used"),
            Arg(
                "--key",
                action="append",
                default=None,
                help="evict exactly this key (repeatable; not with the limits)",
            ),
            Arg("--dry-run", action="store_true", help="only say what would be evicted"),
            Arg(
                "--force",
                action="store_true",
                help=(
                    "with --max-entries 0 or a --max-total-gb that keeps no entry: evict every entry "
                    "(refused without it)"
                ),
            ),
            ARG_LEDGER_URL,
        ),
    ),
    ActionCommand(
        "bill",
        "record storage cost (kind storage) in the ledger up to this hour",
        lazy_load_command(f"{_COMMANDS}.cache.bill"),
        (*CACHE_ARGS, ARG_USD_PER_GB_MONTH, ARG_LEDGER_URL),
    ),
    ActionCommand(
        "gc",
        "delete what killed writers left behind",
        lazy_load_command(f"{_COMMANDS}.cache.collect_garbage"),
        (*CACHE_ARGS, Arg("--older-than-minutes", type=float, default=60.0, help="default: 60")),
    ),
)

# -- runs -----------------------------------------------------------------------------------------

RUNS_COMMANDS = (
    ActionCommand(
        "list",
        "runs with their metric, promotion and cost, oldest first",
        lazy_load_command(f"{_COMMANDS}.runs.list_runs"),
        (ARG_DAG_ID, Arg("--limit", type=int, default=50, help="default: 50"), ARG_FORMAT, ARG_LEDGER_URL),
    ),
    ActionCommand(
        "show",
        "one run's outcome, cost and reproducibility record",
        lazy_load_command(f"{_COMMANDS}.runs.show_run"),
        (
            Arg("run_id", nargs="?", help="the Airflow run id (or --last with --dag-id)"),
            ARG_DAG_ID,
            Arg("--last", action="store_true", help="the newest run of --dag-id that has an outcome"),
            Arg(
                "--format",
                choices=("text", "json"),
                default="text",
                help="json: a list with an item per model the run recorded (a tuning run has several: the "
                "run's cost and entries are on the first; a run with none, one item per DAG with its cost "
                "and entries)",
            ),
            ARG_LEDGER_URL,
        ),
    ),
)

# -- spool ----------------------------------------------------------------------------------------

ARG_SPOOL_DIR = Arg(
    "--spool-dir",
    default=None,
    help="the spool folder (default: $AIRFLOW_HOME/costaware/spool, this machine's; give the folder where "
    "a worker's spool volume is mounted here)",
)
SPOOL_COMMANDS = (
    ActionCommand(
        "show",
        "the cost entries waiting for the ledger: waiting, claimed by a drain, refused, billed or unsure "
        "(with the budget hold of each unsure one: held, none, or unknown where its ledger cannot be read)",
        lazy_load_command(f"{_COMMANDS}.spool.show"),
        (ARG_SPOOL_DIR, ARG_FORMAT),
    ),
    ActionCommand(
        "drain",
        "write the waiting cost entries to the ledger each was recorded for, now",
        lazy_load_command(f"{_COMMANDS}.spool.drain"),
        (ARG_SPOOL_DIR, ARG_FORMAT),
        description=(
            "Writes every cost entry waiting in the spool to the ledger its task used (its Airflow "
            "connection, read here as the workers read it, from the environment or the metadata database "
            "of AIRFLOW_HOME: one missing here, or a SQLite ledger not made yet, leaves its entries "
            "waiting; a metadata database that cannot be read refuses the drain, exit 2), settling the "
            "task's hold, as the listener's own drain does and safely beside it: each file is claimed by "
            "renaming it first. Prints how many "
            "were written, were in the ledger already (the same entry_uid: not written again), still "
            "wait (their ledger still cannot be written, or another drain holds them) and were refused "
            "(moved to refused/ in the spool), and how many remote attempts' bills "
            "were not written as billed meanwhile by a new try (moved to billed/ in the spool) or kept "
            "for a person as the ledger cannot tell whether they are billed (moved to unsure/ in the "
            "spool; the log says what to do), both listed by 'costaware spool show'; exits 1 when any "
            "still waits, was refused by this drain or was kept for a person, else 0 (an entry in the "
            "ledger already, or a bill billed meanwhile, is not lost). A bill kept in unsure/ is held in "
            "its budgets meanwhile (a hold of its own, "
            "30 days, taken as it is kept where the ledger answers: one spooled while the ledger was down "
            'gets it as the drain keeps it); marked "another_run": true and moved back, the drain pays '
            "it from that hold."
        ),
    ),
    ActionCommand(
        "drop",
        "remove a bill kept in unsure/ (it bills the run already) and release the hold kept for it",
        lazy_load_command(f"{_COMMANDS}.spool.drop"),
        (
            Arg("entry_uid", help="the kept bill's file name in unsure/, as 'costaware spool show' lists it"),
            ARG_SPOOL_DIR,
            ARG_FORMAT,
        ),
        description=(
            "Removes unsure/<entry_uid>.json from the spool, a remote attempt's bill kept for a person "
            "because the ledger could not tell whether a row of the job's name bills the same run, once "
            "that person found it does (the bill is in the ledger already), and releases the budget hold "
            "kept for it. The hold is released first: where the bill's ledger cannot be opened or written, "
            "nothing is removed. A name not kept there is an error that names it (exit 2); "
            "'costaware spool show' lists the kept bills (state unsure). A bill of another run is not "
            'dropped: add "another_run": true to its file, move it back into the spool and run '
            "'costaware spool drain'."
        ),
    ),
)

# -- jobs -----------------------------------------------------------------------------------------

JOBS_COMMANDS = (
    ActionCommand(
        "reconcile",
        "stop and bill the remote training jobs of ended tasks that no ledger entry bills",
        lazy_load_command(f"{_COMMANDS}.jobs.reconcile"),
        (
            ARG_DAG_ID,
            Arg(
                "--dry-run",
                action="store_true",
                help="list those jobs only, and say what kept holds it would free: stop nothing, bill "
                "nothing, free nothing",
            ),
            Arg(
                "--wait-seconds",
                type=float,
                default=20.0,
                help="how long to wait for a stopped job to end: one not ended by then is billed to the "
                "end of its grace period, the latest it can run; one whose stop the backend refused and "
                "not seen to end is not billed, keeps its hold and is listed again (default: 20)",
            ),
            ARG_FORMAT,
            ARG_LEDGER_URL,
        ),
        description=(
            "Reads, in Airflow's metadata database of AIRFLOW_HOME, the tasks that ended (failed, success, "
            "skipped, upstream_failed, removed) with a deferred RemoteTrainingOperator wait kept in their "
            "XCom costaware_wait_state, and lists the job of each that has no entry in the ledger: a task "
            "ended by a person, or with its run marked failed or timed out, after Airflow's deferral "
            "timeout took its wait away and before its resume or retry ran. Without --dry-run each is "
            "stopped on its backend and billed (cause unwatched), as the last try's resume would have, and "
            "the task's hold settled; the resume, a retry or a trigger that comes after finds the entry and "
            "bills nothing again. A task that ended less than 5 minutes ago while its trigger still ran is "
            "listed as left to that trigger, whose kill stops and bills the job, and not touched. Give "
            "--ledger-url where the tasks bill another ledger than the default; a task whose DAG names "
            "another ledger_conn_id is billed there only (listed as 'bills in CONN' where this machine "
            "cannot read that ledger). A job whose stop the backend refuses is not billed and its hold stays "
            "held: stop it by hand, and the next run bills it. After the billing it frees the hold a run's "
            "end kept for a task whose job is billed already (made before the task ended, the task read "
            "again just before: a cleared task's new try holds it then): released, what the job's entries "
            "paid from it staying spent, each said on stderr; --dry-run says what it would free. A job whose "
            "only entry gives no job end (written before notes gave it, or cut) is listed 'unsure': that "
            "entry may bill part of the run only, so its hold is kept for a person to check and release. "
            "Exits 1 "
            "when a job could not be stopped and billed, a wait state could not be read, or a kept hold "
            "could not be freed; 2 when --dag-id names no DAG Airflow knows."
        ),
    ),
)
