"""The ``prices``, ``carbon`` and ``simulate`` commands, declared as data (see :mod:`.config`).

What a run would cost: on-demand prices, grid carbon intensity, and policies replayed over recorded markets.
"""

from __future__ import annotations

from costaware.cli.arguments import (
    ARG_CREATE_LEDGER,
    ARG_FORMAT,
    ARG_LEDGER_URL,
    ARG_SERVICE,
    ARG_TYPES,
    COMMANDS_PACKAGE,
    ActionCommand,
    Arg,
    lazy_load_command,
    when,
)
from costaware.core.policies import POLICIES
from costaware.core.simulate import DEFAULT_POLICIES

_COMMANDS = COMMANDS_PACKAGE

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
                help="first hour: an ISO date (its midnight UTC) or an ISO datetime with a zone; default "
                "now: the source's forecast from now (for hours a recorded source lacks, the bundled year's "
                "at the same dates: a typical-year estimate)",
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
            "<ZONE>_imported.csv, where --source recorded finds it; a bad file writes nothing. A second "
            "import of a zone merges with the first: the new file replaces the earlier records from its "
            "first record to its last plus its own step, and the others are kept (delete the file to start "
            "over)."
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
