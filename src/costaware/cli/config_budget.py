"""The ``budget``, ``report``, ``audit`` and ``alerts`` commands, declared as data (see :mod:`.config`).

Money the ledger holds: the budgets, what was spent against them, and who changed them.
"""

from __future__ import annotations

from costaware.cli.arguments import (
    ARG_DAG_ID,
    ARG_FORMAT,
    ARG_GROUP_BY,
    ARG_LEDGER_URL,
    ARG_NEW_SCOPE,
    ARG_PERIOD,
    ARG_SCOPE,
    ARG_SINCE,
    ARG_UNTIL,
    COMMANDS_PACKAGE,
    ActionCommand,
    Arg,
    LazyChoices,
    fraction,
    lazy_load_command,
)

_COMMANDS = COMMANDS_PACKAGE

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
        (
            Arg(
                "--studies",
                action="store_true",
                help="list the tuning studies' own budgets (scope with study=<name>, or search=<id> that "
                "a killed budgeted_search left) only; the table otherwise counts them in one line (json and "
                "csv list every budget)",
            ),
            ARG_FORMAT,
            ARG_LEDGER_URL,
        ),
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
        lazy_load_command(f"{_COMMANDS}.alerts_set.alerts_set"),
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
        lazy_load_command(f"{_COMMANDS}.alerts_list.alerts_list"),
        (ARG_FORMAT, ARG_LEDGER_URL),
    ),
)
