"""Every setting costaware reads, in one place.

The ``[costaware]`` options, the ``COSTAWARE_*`` variables and the embedded stores under
``$AIRFLOW_HOME/costaware``. An option is read through :func:`option`, which knows its default, so the
code cannot read an option that the provider info does not document (its config section is built from
:data:`OPTIONS`). Values are read when asked, not cached at import: a deployment (or a test) that changes
the environment sees it.

The module imports no Airflow at import time, and works without Airflow: the CLI on a laptop reads an
option from ``AIRFLOW__COSTAWARE__<NAME>`` as Airflow itself would. The variables a compute backend passes
to a training job (``COSTAWARE_MODEL_DIR`` and the like) are the job's contract, not settings: they live
in ``costaware.adapters.compute.job_contract`` and the runtime.
"""

from __future__ import annotations

import configparser
import difflib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

# Re-exported: callers (and tests) read the home from here, where every setting is read.
from costaware.settings_home import airflow_home as airflow_home
from costaware.settings_home import airflow_home_as_written as airflow_home_as_written
from costaware.settings_home import warn_of_earlier_costaware_folder

SECTION = "costaware"
ENV_PREFIX = f"AIRFLOW__{SECTION.upper()}__"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Option:
    """One ``[costaware]`` option as the provider info documents it."""

    name: str
    description: str
    default: str
    example: str
    kind: str = "string"  # the provider info's type: string, boolean, integer or float


OPTIONS: dict[str, Option] = {
    option.name: option
    for option in (
        Option(
            "worker_instance_type",
            "EC2 instance type a task is priced on when the task itself names none (docs/budgets.md).",
            "m5.large",
            "c7i.2xlarge",
        ),
        Option(
            "worker_region",
            "AWS region a task is priced in when the task itself names none (docs/budgets.md).",
            "us-east-1",
            "eu-west-1",
        ),
        Option(
            "worker_grid_zone",
            "Grid zone whose carbon intensity the workers draw from (e.g. US-CAL-CISO), for tasks that name "
            "none; empty: the grid zone of the task's region in data/region_grids.csv (docs/carbon.md).",
            "",
            "US-CAL-CISO",
        ),
        Option(
            "worker_market",
            "Market (on_demand or spot) a task is priced on when the task itself names none "
            "(docs/budgets.md).",
            "on_demand",
            "spot",
        ),
        Option(
            "price_aws_conn_id",
            "Airflow AWS connection for live on-demand prices from the AWS Price List API; empty: no live "
            "look-ups (cache, then the bundled snapshot). See docs/prices.md.",
            "",
            "aws_pricing",
        ),
        Option(
            "price_ttl_hours",
            "Hours a cached price counts as fresh; an older one is used only after the snapshot and is "
            "flagged stale.",
            "168",
            "24",
            "float",
        ),
        Option(
            "discounts",
            "Discounts on on-demand prices (savings plans, enterprise agreements) as 'team:<name>=<percent>' "
            "or 'family:<prefix>=<percent>', comma-separated; the largest matching rule applies.",
            "",
            "team:ml=12, family:p4d=30",
        ),
        Option(
            "alert_thresholds",
            "Budget alert thresholds for budgets without their own rules: percentages of the cap and "
            "'forecast' (forecast above cap); empty: 50%,80%,100%,forecast. In airflow.cfg write each % "
            "as %% (an environment variable takes it as is). See docs/governance.md.",
            "",
            "50%%,80%%,100%%,forecast",
        ),
        Option(
            "alert_notifiers",
            "JSON list of Airflow notifiers that receive budget alerts, each "
            '{"class": ..., "kwargs": {...}}; empty: alerts go to the task log only.',
            "",
            '[{"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier", '
            '"kwargs": {"to": "lead@example.com"}}]',
        ),
        Option(
            "budget_admin_role",
            "Role (simple auth manager) allowed to create or change budgets from the Cost page and its API.",
            "ADMIN",
            "OP",
        ),
    )
}

LEDGER_URL_ENV = "COSTAWARE_LEDGER_URL"
FEATURE_CACHE_ENV = "COSTAWARE_FEATURE_CACHE"
WORKER_REGION_ENV = "COSTAWARE_WORKER_REGION"

#: The ``COSTAWARE_*`` variables the provider reads, and what each sets (docs/deployment.md lists them too).
ENVIRONMENT: dict[str, str] = {
    LEDGER_URL_ENV: "SQLAlchemy URL of the ledger when no 'costaware_ledger' connection is set (and for the "
    "CLI); default: a SQLite file at $AIRFLOW_HOME/costaware/ledger.db.",
    FEATURE_CACHE_ENV: "Root of the feature cache (a folder or s3://bucket/prefix); default: "
    "$AIRFLOW_HOME/costaware/features.",
    WORKER_REGION_ENV: "Region of the Airflow worker, for the data-locality guard when the task names none.",
}


def option(name: str) -> str:
    """The ``[costaware] <name>`` option (or ``AIRFLOW__COSTAWARE__<NAME>``), else its documented default.

    Raises:
        KeyError: ``name`` is not in :data:`OPTIONS` (document an option before reading it).
    """
    default = OPTIONS[name].default
    log_section_problems()
    return _read(name, default)


def _read(name: str, default: str) -> str:
    """The option as Airflow reads it (the file or its variable), without the section's check."""
    try:
        from airflow.sdk import conf
    except ImportError:  # the CLI on a machine without Airflow reads the variable Airflow would
        return os.environ.get(env_name(name), default)
    except configparser.Error as e:  # Airflow reads airflow.cfg on import
        from costaware.core.errors import ConfigurationError

        raise ConfigurationError(airflow_cfg_problem(e)) from e
    try:
        return str(conf.get(SECTION, name, fallback=default))
    except configparser.InterpolationError as e:
        from costaware.core.errors import ConfigurationError

        # airflow.cfg reads '%' as the start of an interpolation: `alert_thresholds = 50%,80%` failed the
        # alert check after every try and `costaware alerts list` with configparser's traceback.
        raise ConfigurationError(
            f"[costaware] {name} in airflow.cfg cannot be read ({e}): write each '%' as '%%' there "
            f"(e.g. 50%%,80%%), or set {env_name(name)} with a single '%'"
        ) from e


def env_name(name: str) -> str:
    """The variable Airflow reads ``[costaware] <name>`` from: ``AIRFLOW__COSTAWARE__<NAME>``."""
    return f"{ENV_PREFIX}{name.upper()}"


def section_problems() -> list[str]:
    """What is wrong in the ``[costaware]`` section, one line each naming the value and what to set.

    An option no costaware code reads (``worker_instancetype``) is ignored by Airflow without a word, so its
    value never applies; a ``worker_market`` that is no market prices every try on-demand; a
    ``worker_instance_type`` or ``worker_region`` the bundled price catalog does not know, with
    ``worker_market`` spot, records every try that names no compute of its own at $0 (unpriced): a spot
    price is the catalog's on-demand one less its typical saving, which no imported price gives.
    """
    return _section_lines()[0]


def _section_lines() -> tuple[list[str], list[str]]:
    """:func:`section_problems` and :func:`unpriced_worker_compute`, from one read of ``worker_market``."""
    problems = [
        f"{where} is no [costaware] option, so it is ignored: {_known_option_hint(name)}"
        for name, where in sorted(_set_options().items())
        if name not in OPTIONS
    ]
    market, market_problem = worker_market(_read("worker_market", OPTIONS["worker_market"].default))
    problems.extend(market_problem)
    if market == "spot":
        return [*problems, *_unpriced_worker_lines(spot=True)], []
    return problems, _unpriced_worker_lines(spot=False) if market == "on_demand" else []


def _set_options() -> dict[str, str]:
    """Each ``[costaware]`` option set in airflow.cfg or the environment, and where it is set."""
    found: dict[str, str] = {}
    for variable in sorted(os.environ):
        if variable.startswith(ENV_PREFIX):
            name = variable[len(ENV_PREFIX) :].lower().removesuffix("_cmd").removesuffix("_secret")
            found[name] = variable
    try:
        from airflow.sdk import conf

        in_file = conf.options(SECTION) if conf.has_section(SECTION) else []
    except ImportError:  # the CLI without Airflow reads only the variables
        in_file = []
    for option_name in in_file:
        name = option_name.lower().removesuffix("_cmd").removesuffix("_secret")
        found.setdefault(name, f"[{SECTION}] {option_name} in airflow.cfg")
    return found


def _known_option_hint(name: str) -> str:
    close = difflib.get_close_matches(name, list(OPTIONS), n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r} ({env_name(close[0])})? Rename it"
    return f"the options are {', '.join(OPTIONS)}; rename or delete it"


def unpriced_worker_compute() -> list[str]:
    """On-demand workers' type and region the bundled price catalog does not know, one line each.

    Not an error: an on-demand try is also priced from the ledger's price cache (``costaware prices
    import``, ``costaware prices refresh``) and live prices (``price_aws_conn_id``), as the try-cost listener
    looks them up, which a process's start does not open. Where none has it, the try is recorded at $0.
    (Spot workers' are :func:`section_problems`; local ones are priced at their own rate.)
    """
    return _section_lines()[1]


def worker_market(raw: str) -> tuple[str, list[str]]:
    """The workers' market (``raw``: the option's text) as a try is priced on it, and a bad one's problem.

    One that is no market ('spto') is read as on-demand, not refused: else every try priced on the worker
    would fail to be recorded at all.
    """
    from costaware.core.errors import ConfigurationError
    from costaware.core.ledger import Market

    try:
        return Market.parse(raw).value, []
    except ConfigurationError as e:
        return Market.ON_DEMAND.value, [
            f"[costaware] worker_market: {e}. Set it ({env_name('worker_market')}) to the market the workers "
            "run on: until then a try that names none of its own is priced on-demand"
        ]


def _unpriced_worker_lines(*, spot: bool) -> list[str]:
    """The worker's type and region the bundled price catalog does not know, with what that costs."""
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.errors import PriceNotFoundError
    from costaware.core.prices import closest_names

    instance_type = _read("worker_instance_type", OPTIONS["worker_instance_type"].default).strip()
    region = _read("worker_region", OPTIONS["worker_region"].default).strip()
    if (instance_type, region) == (OPTIONS["worker_instance_type"].default, OPTIONS["worker_region"].default):
        # The defaults are in the catalog (a test says so): every process loads the plugin, and parsing the
        # catalog (~50 ms) only to find them there was paid by those that price nothing.
        return []
    catalog = bundled_catalog()
    found = {}
    try:
        catalog.check_instance_type(instance_type)
    except PriceNotFoundError as e:
        found["worker_instance_type"] = (instance_type, str(e))
    if region not in catalog.regions:
        close = closest_names(region, catalog.regions)
        found["worker_region"] = (
            region,
            "unknown region" + (f"; did you mean {', '.join(close)}?" if close else ""),
        )
    if spot:
        # A spot try's price is the catalog's on-demand one less its typical saving: no import helps.
        consequence = (
            "with worker_market spot, every try that names no compute of its own is recorded at $0 "
            "(unpriced), whatever prices were imported: set it"
        )
    else:
        consequence = (
            "a try that names no compute of its own is priced on it only from the ledger's price cache "
            "(`costaware prices import`, `costaware prices refresh`) or live prices (price_aws_conn_id), "
            "else recorded at $0 (unpriced): price it there (then ignore this), or set it"
        )
    return [
        f"[costaware] {name} {value!r} is not in the bundled price catalog ({why}); {consequence} "
        f"({env_name(name)}) to the workers' own, e.g. {OPTIONS[name].default}"
        for name, (value, why) in found.items()
    ]


_section_checked = False


def log_section_problems() -> None:
    """Log each :func:`section_problems` at error level, once per process (the first option read).

    :func:`unpriced_worker_compute` is logged at warning level: imported or live prices may price it.

    A typo must not stop Airflow or a task from starting, so nothing is raised; the check itself failing
    (an unreadable airflow.cfg) is left to the read that follows.
    """
    global _section_checked
    if _section_checked:
        return
    _section_checked = True
    try:
        problems, unpriced = _section_lines()
    except Exception as e:  # the option read that follows says what is wrong with airflow.cfg
        log.debug("costaware: the [costaware] section was not checked: %s", e)
        return
    for problem in problems:
        log.error("costaware: %s", problem)
    for line in unpriced:
        log.warning("costaware: %s", line)


def airflow_cfg_problem(error: configparser.Error) -> str:
    """What is wrong in airflow.cfg and what to do, in one line (configparser's error was a traceback)."""
    if isinstance(error, configparser.DuplicateSectionError):
        return (
            f"airflow.cfg cannot be read: {error.source} line {error.lineno} starts a second "
            f"[{error.section}] section: merge its options into the first one and delete the second header"
        )
    if isinstance(error, configparser.DuplicateOptionError):
        return (
            f"airflow.cfg cannot be read: {error.source} line {error.lineno} sets {error.option!r} of "
            f"[{error.section}] a second time: keep one of the two lines"
        )
    return f"airflow.cfg cannot be read: {' '.join(str(error).split())}: fix the file"


def costaware_home(*parts: str) -> Path:
    """``$AIRFLOW_HOME/costaware/<parts>``: where the embedded ledger, caches and stores live."""
    home = airflow_home()
    # An earlier release's stores under ./~/airflow/costaware/ were silently not found after the upgrade.
    warn_of_earlier_costaware_folder(home)
    return home.joinpath("costaware", *parts)


def default_store(name: str) -> str:
    """``$AIRFLOW_HOME/costaware/<name>`` (the embedded default for models, checkpoints, quality results)."""
    return str(costaware_home(name))


def ledger_url() -> str:
    """``$COSTAWARE_LEDGER_URL``, else a SQLite file at ``$AIRFLOW_HOME/costaware/ledger.db``."""
    return os.environ.get(LEDGER_URL_ENV) or f"sqlite:///{costaware_home('ledger.db')}"


def feature_cache() -> str:
    """``$COSTAWARE_FEATURE_CACHE``, else ``$AIRFLOW_HOME/costaware/features``."""
    return os.environ.get(FEATURE_CACHE_ENV) or default_store("features")


#: Where ``worker_grid_zone`` is set, as a message names it.
WORKER_GRID_ZONE_SETTING = "[costaware] worker_grid_zone (AIRFLOW__COSTAWARE__WORKER_GRID_ZONE)"


def worker_grid_zone() -> str | None:
    """``[costaware] worker_grid_zone``: the grid the workers draw from (tries, local jobs), or None."""
    return option("worker_grid_zone").strip() or None


def worker_region() -> str | None:
    """``$COSTAWARE_WORKER_REGION``: the region of the Airflow worker, or None where it is not set."""
    return os.environ.get(WORKER_REGION_ENV) or None
