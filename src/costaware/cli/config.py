"""Every ``costaware`` command, declared as data: its name, help, arguments and function.

A command's module is named by import path and imported only when that command runs (Airflow's
``cli_config.py`` does the same), so ``costaware --help`` stays fast. :mod:`costaware.cli.parser` builds
the parser from :data:`COMMANDS`, and ``scripts/cli_docs.py`` writes ``docs/cli.md`` from that parser.
"""

from __future__ import annotations

from costaware.cli.arguments import (
    ARG_CREATE_LEDGER,
    ARG_DAG_ID,
    ARG_FORMAT,
    ARG_GROUP_BY,
    ARG_LEDGER_URL,
    ARG_NEW_SCOPE,
    ARG_PERIOD,
    ARG_SCOPE,
    ARG_SERVICE,
    ARG_SINCE,
    ARG_TYPES,
    ARG_UNTIL,
    ActionCommand,
    Arg,
    GroupCommand,
    LazyChoices,
    fraction,
    lazy_load_command,
    when,
)
from costaware.cli.output import FORMATS
from costaware.core.policies import POLICIES
from costaware.core.simulate import DEFAULT_POLICIES
from costaware.settings import FEATURE_CACHE_ENV

DESCRIPTION = "Budgets, cost reports and prices for ML retrains."
_COMMANDS = "costaware.cli.commands"

# -- budget ---------------------------------------------------------------------------------------

BUDGET_COMMANDS = (
    ActionCommand(
        "set",
        "create or change a budget",
        lazy_load_command(f"{_COMMANDS}.budget.budget_set"),
        (
            ARG_NEW_SCOPE,
            ARG_PERIOD,
            Arg(
                "--cap-usd",
                default=None,
                help="the cap in USD, e.g. 250 (changing a budget: default its own)",
            ),
            Arg(
                "--cap-gpu-hours",
                default=None,
                help="optional cap in GPU-hours (changing a budget: default its own; 'none' drops it)",
            ),
            Arg(
                "--timezone",
                default=None,
                help="where days and months start (IANA name; default UTC, or the budget's own if it exists)",
            ),
            ARG_LEDGER_URL,
        ),
    ),
    ActionCommand(
        "delete",
        "delete a budget (the spend it counted stays in the ledger)",
        lazy_load_command(f"{_COMMANDS}.budget.budget_delete"),
        (ARG_SCOPE, ARG_PERIOD, ARG_LEDGER_URL),
    ),
    ActionCommand(
        "list",
        "list budgets",
        lazy_load_command(f"{_COMMANDS}.budget.budget_list"),
        (ARG_FORMAT, ARG_LEDGER_URL),
    ),
    ActionCommand(
        "show",
        "spent, reserved and left for the budgets covering a scope",
        lazy_load_command(f"{_COMMANDS}.budget.budget_show"),
        (
            Arg(
                "--scope",
                required=True,
                help="tags, e.g. project=churn: every budget covering them",
                if_empty="give the tags of the work, e.g. --scope project=churn, or '*' for the catch-all",
            ),
            Arg("--run-id", default=None, help="the DAG run, for budgets with period 'run'"),
            Arg(
                "--dag-id",
                default=None,
                help="the DAG of --run-id (run ids such as scheduled__<date> repeat across DAGs; "
                "without it, that run id of every DAG)",
            ),
            ARG_FORMAT,
            Arg(
                "--no-schedule",
                action="store_true",
                help="forecast without reading DAG timetables from Airflow (committed spend only)",
            ),
            ARG_LEDGER_URL,
        ),
    ),
    ActionCommand(
        "holds",
        "the open holds (reservations) behind 'reserved': which task holds how much, until when",
        lazy_load_command(f"{_COMMANDS}.budget.budget_holds"),
        (
            Arg("--scope", default="*", help="only holds of these tags, e.g. project=churn (default: all)"),
            ARG_FORMAT,
            ARG_LEDGER_URL,
        ),
    ),
    ActionCommand(
        "release",
        "give back a hold whose task has ended without settling it (its run was killed); audited",
        lazy_load_command(f"{_COMMANDS}.budget.budget_release"),
        (
            Arg(
                "--holder",
                required=True,
                help="the hold's holder as `budget holds` shows it under 'held by' (dag/run/task/map, "
                "search/id/trial/rung, ...), or the id it shows for a hold with no holder",
            ),
            Arg(
                "--force",
                action="store_true",
                help="release without checking in Airflow's metadata database that the holding task has "
                "ended (a run of `airflow dags test` stopped with Ctrl-C still reads running)",
            ),
            ARG_LEDGER_URL,
        ),
    ),
)

# -- report ---------------------------------------------------------------------------------------

REPORT_ARGS = (
    ARG_DAG_ID,
    Arg("--run-id", help="only this DAG run"),
    Arg("--last-run", action="store_true", help="the DAG's most recent run (needs --dag-id)"),
    ARG_SINCE,
    ARG_UNTIL,
    Arg("--scope", default="*", help="only entries with these tags, e.g. project=churn"),
    ARG_GROUP_BY,
    ARG_FORMAT,
    ARG_LEDGER_URL,
    Arg(
        "--efficiency",
        action="store_true",
        help="measured CPU and memory per task, idle cost, and cheaper instance types that fit",
    ),
    Arg(
        "--runs-per-month",
        type=float,
        default=None,
        help="with --efficiency: runs a month (more than 0) for the monthly saving (default: from each DAG's "
        "schedule)",
    ),
    Arg(
        "--min-tries",
        type=int,
        default=3,
        help="with --efficiency: measured tries a task needs before advice (default: 3)",
    ),
    Arg(
        "--memory-margin",
        type=fraction,
        default=0.25,
        help="with --efficiency: headroom over the measured peak memory (default: 0.25 = 25%%)",
    ),
    Arg(
        "--min-saving-usd",
        default="0.01",
        help="with --efficiency: hide suggestions that save less than this per month (default: 0.01)",
    ),
)

# -- governance -----------------------------------------------------------------------------------

AUDIT_ARGS = (
    ARG_SINCE,
    Arg(
        "--action",
        choices=LazyChoices("costaware.adapters.ledger.audit.AUDIT_ACTIONS"),
        metavar="ACTION",
        help="only this kind of entry: %(choices)s",
    ),
    ARG_FORMAT,
    ARG_LEDGER_URL,
)
ALERTS_COMMANDS = (
    ActionCommand(
        "set",
        "a budget's own alert thresholds and notifiers (what is not given stays as it is)",
        lazy_load_command(f"{_COMMANDS}.governance.alerts_set"),
        (
            Arg("--scope", required=True, help="the budget's scope, e.g. project=churn"),
            ARG_PERIOD,
            Arg(
                "--thresholds",
                default=None,
                help="e.g. 50%%,80%%,100%%,forecast; '' for the defaults",
                allow_empty=True,
            ),
            Arg(
                "--notifiers",
                default=None,
                help='JSON list of {"class": "<module.Notifier>", "kwargs": {...}} '
                "(any Airflow BaseNotifier); [] for the [costaware] ones",
            ),
            ARG_LEDGER_URL,
        ),
    ),
    ActionCommand(
        "list",
        "every budget's alert settings and the alerts sent",
        lazy_load_command(f"{_COMMANDS}.governance.alerts_list"),
        (ARG_FORMAT, ARG_LEDGER_URL),
    ),
)

# -- prices ---------------------------------------------------------------------------------------

PRICES_COMMANDS = (
    ActionCommand(
        "list",
        "instance types of the bundled snapshot that fit, cheapest first",
        lazy_load_command(f"{_COMMANDS}.prices.list_prices"),
        (
            Arg("--region", default=None, help="AWS region code, e.g. us-east-1 (default: every region)"),
            Arg("--min-vcpus", type=int, default=0, help="at least this many vCPUs"),
            Arg("--min-memory-gib", type=float, default=0, help="at least this much memory, in GiB"),
            Arg(
                "--min-gpus",
                type=float,
                default=0,
                help="at least this many GPUs: NVIDIA ones, unless --gpu-model names another accelerator",
            ),
            Arg(
                "--gpu-model",
                help="this GPU or accelerator model, in full or without its maker: T4, 'AWS Inferentia'",
            ),
            Arg("--arch", help="x86_64 or arm64"),
            Arg("--limit", type=int, default=20, help="at most this many rows (default: 20)"),
            ARG_FORMAT,
        ),
    ),
    ActionCommand(
        "show",
        "a type's on-demand price with its source and age; without a type, the price cache",
        lazy_load_command(f"{_COMMANDS}.prices.show_prices"),
        (
            Arg("instance_type", nargs="?", help="e.g. m5.large or ml.g5.xlarge"),
            Arg(
                "--region",
                default=None,
                help="AWS region code, e.g. eu-west-1 (default: us-east-1 for a type, every region for the "
                "cache)",
            ),
            ARG_SERVICE,
            Arg("--team", help="show the price after this team's discount"),
            Arg("--aws-conn-id", help="look the price up live through this connection when not cached"),
            ARG_FORMAT,
            ARG_LEDGER_URL,
        ),
    ),
    ActionCommand(
        "refresh",
        "fetch on-demand prices from the AWS Price List API",
        lazy_load_command(f"{_COMMANDS}.prices.refresh_prices"),
        (
            Arg("--region", action="append", help="region code, repeatable (default us-east-1)"),
            Arg("--service", choices=("ec2", "sagemaker"), default="ec2"),
            ARG_TYPES,
            Arg(
                "--aws-conn-id",
                help="Airflow AWS connection (default [costaware] price_aws_conn_id, else aws_default)",
            ),
            ARG_LEDGER_URL,
            ARG_CREATE_LEDGER,
        ),
    ),
    ActionCommand(
        "import",
        "load an AWS Price List offer file (JSON or CSV)",
        lazy_load_command(f"{_COMMANDS}.prices.import_prices"),
        (
            Arg("file", help="index.json or index.csv of AmazonEC2 or AmazonSageMaker"),
            Arg("--region", help="region of the file, for files whose rows name no region code"),
            ARG_TYPES,
            ARG_LEDGER_URL,
            ARG_CREATE_LEDGER,
        ),
    ),
)

# -- carbon ---------------------------------------------------------------------------------------

CARBON_COMMANDS = (
    ActionCommand(
        "show",
        "a grid zone's hourly carbon intensity (gCO2e/kWh): recorded, or the source's forecast",
        lazy_load_command(f"{_COMMANDS}.carbon.show"),
        (
            Arg("--zone", required=True, help="grid zone, e.g. GB, DE-LU, US-CAL-CISO, AU-NSW"),
            Arg(
                "--source",
                default="recorded",
                help="recorded (imported files, then the bundled 2023 ones; default), bundled, live (the GB "
                "Carbon Intensity API through the costaware_carbon connection) or a folder or file of "
                "<ZONE>_<anything>.csv",
            ),
            Arg(
                "--start",
                type=when,
                default=None,
                help="first hour (ISO, with a zone); default now: the source's forecast from now (for hours "
                "a recorded source lacks, the bundled year's at the same dates: a typical-year estimate)",
            ),
            Arg("--hours", type=int, default=24, help="how many hours (default: 24)"),
            ARG_FORMAT,
        ),
        description=(
            "Prints the hourly carbon intensity of a grid zone with its mean, min and max, and whether the "
            "values are recorded or forecast. A start in the past reads recorded (or measured) values; no "
            "start, or one in the future, reads the source's forecast (a recorded source gives its recorded "
            "values as a perfect forecast). Hours, past or future, that a recorded source lacks show the "
            "bundled year's values at the same dates, labelled a typical-year estimate: what the ledger's "
            "emissions use for them."
        ),
    ),
    ActionCommand(
        "import",
        "check a recorded carbon intensity CSV and add it to the recorded source",
        lazy_load_command(f"{_COMMANDS}.carbon.import_file"),
        (
            Arg(
                "file",
                help="CSV with timestamp_utc and g_co2eq_per_kwh_lca, optionally g_co2eq_per_kwh_direct (the "
                "shared format)",
            ),
            Arg("--zone", required=True, help="the grid zone the file records, e.g. GB"),
        ),
        description=(
            "Checks the file (hourly, no gaps, gCO2e/kWh numbers in g_co2eq_per_kwh_lca and, where the file "
            "has it, g_co2eq_per_kwh_direct) and copies it to $AIRFLOW_HOME/costaware/carbon/"
            "<ZONE>_imported.csv, where --source recorded finds it; a bad file writes nothing, and a second "
            "import of a zone replaces the first."
        ),
    ),
)

# -- simulate -------------------------------------------------------------------------------------

SIMULATE_ARGS = (
    Arg(
        "--prices",
        action="append",
        metavar="FILE",
        help="spot price history (DescribeSpotPriceHistory JSON or CSV; one file may hold several zones) or "
        "hourly electricity CSV (repeat); required unless --objective carbon",
    ),
    Arg(
        "--carbon",
        metavar="FILE_OR_ZONE",
        help="hourly grid carbon intensity CSV (timestamp_utc,g_co2eq_per_kwh_lca) of the grid the jobs draw "
        "from, or a bundled zone (AU-NSW, DE-LU, GB, US-CAL-CISO: its 2023 year): adds kg CO2e per policy; "
        "needed by --objective carbon and cost+carbon",
    ),
    Arg(
        "--objective",
        default="cost",
        metavar="{cost,carbon,cost+carbon}",
        help="what every policy and the oracle minimise: cost (USD, the default), carbon (kg CO2e) or "
        "cost+carbon (USD plus --carbon-usd-per-tonne times the tonnes CO2e)",
    ),
    Arg(
        "--carbon-usd-per-tonne",
        metavar="N",
        help="carbon price of --objective cost+carbon, USD per tonne CO2e (e.g. 100)",
    ),
    Arg(
        "--availability",
        action="append",
        metavar="FILE",
        help='spot availability trace, JSON {"metadata": {"gap_seconds": 600}, "data": [1, 0, ...]} (0/1 per '
        "gap); repeat with --by-trace to compare traces",
    ),
    Arg(
        "--zones",
        action="append",
        metavar="ZONE=TRACE[,ZONE=TRACE...]",
        help="zones to run in, each with its availability trace; or ZONE[,ZONE...] with one --availability "
        "trace per zone, in order. Jobs without a 'zones' column use them all (start in the cheapest zone "
        "with capacity, fail over on preemption); repeatable",
    ),
    Arg(
        "--by-trace",
        action="store_true",
        help="replay the jobs once per --availability trace and print one row per trace and policy",
    ),
    Arg(
        "--availability-start",
        metavar="TIME",
        help="ISO time, with a time zone (or a date: its midnight UTC), of the first sample of the "
        "--availability and --zones traces (default: the earliest submit time)",
    ),
    Arg(
        "--jobs",
        required=True,
        metavar="FILE",
        help="jobs file, CSV or JSON; optional column 'priority': critical, normal (default) or best_effort",
    ),
    Arg(
        "--policy",
        action="append",
        choices=sorted(POLICIES),
        metavar="NAME",
        help=f"policy to report, repeatable: %(choices)s (default: all: {', '.join(DEFAULT_POLICIES)})",
    ),
    ARG_FORMAT,
    Arg("--on-demand", metavar="FILE", help="on-demand price CSV (default: the bundled AWS snapshot)"),
    Arg(
        "--product",
        action="append",
        metavar="DESCRIPTION",
        help="spot product description to keep (default: Linux/UNIX); repeatable",
    ),
    Arg(
        "--tick-minutes",
        type=float,
        metavar="N",
        help="grid spacing (default: the finest trace's, zones' too, else 10)",
    ),
    Arg(
        "--restart-guard",
        action="store_true",
        help="replay with the restart-thrash guard (off by default, as on the live operator): a job whose "
        "last 2 preempted runs in every zone each kept nothing runs on on-demand to the end",
    ),
)

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
        "the cost entries waiting for the ledger: waiting, claimed by a drain, or refused",
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
            "were written, still wait (their ledger still cannot be written, or another drain holds them) "
            "and were refused (moved to refused/ in the spool); exits 1 when any was not written."
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
            "paid from it staying spent, each said on stderr; --dry-run says what it would free. Exits 1 "
            "when a job could not be stopped and billed, a wait state could not be read, or a kept hold "
            "could not be freed; 2 when --dag-id names no DAG Airflow knows."
        ),
    ),
)

COMMANDS: tuple[ActionCommand | GroupCommand, ...] = (
    GroupCommand("budget", "set and inspect budgets", BUDGET_COMMANDS),
    ActionCommand(
        "report",
        "spend, estimates and savings versus on-demand",
        lazy_load_command(f"{_COMMANDS}.report.report"),
        REPORT_ARGS,
    ),
    ActionCommand(
        "audit",
        "budget changes, approvals, overrides and alerts sent: who, when, what",
        lazy_load_command(f"{_COMMANDS}.governance.audit"),
        AUDIT_ARGS,
    ),
    GroupCommand("alerts", "budget alert thresholds and notifiers", ALERTS_COMMANDS),
    GroupCommand("prices", "look up, refresh and import on-demand prices", PRICES_COMMANDS),
    GroupCommand(
        "carbon", "grid carbon intensity: show recorded or forecast values, import files", CARBON_COMMANDS
    ),
    ActionCommand(
        "simulate",
        "replay scheduling policies over recorded spot prices, availability and electricity prices",
        lazy_load_command(f"{_COMMANDS}.simulate.replay"),
        SIMULATE_ARGS,
        description=(
            "Replays policies over recorded data and prints, per policy: total USD, ratio to the oracle "
            "(the least cost any schedule could reach knowing the future), ratio to on_demand_now, deadline "
            "misses, preemptions and the share of hours on spot. With --carbon also kg CO2e; with "
            "--objective carbon or cost+carbon every policy and the oracle minimise that objective (jobs' "
            "power: their power_kw, else their instance type's at full load) and the ratios compare it."
        ),
    ),
    GroupCommand("cache", "list, show, evict and bill the feature cache", CACHE_COMMANDS),
    GroupCommand("runs", "retrain runs: model outcome, cost and reproducibility record", RUNS_COMMANDS),
    GroupCommand("spool", "cost entries waiting for the ledger: list them, write them now", SPOOL_COMMANDS),
    GroupCommand("jobs", "remote training jobs nobody follows: list them, stop and bill them", JOBS_COMMANDS),
)
