"""Budgets: a scope (a tag filter), a period, and a cap in USD (and optionally GPU-hours).

``check_cap`` is the rule a reservation must pass, over figures the ledger reads inside its lock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from costaware.core.errors import BudgetExceededError, ConfigurationError, InvalidBudgetError
from costaware.core.given import not_given
from costaware.core.money import MICRO_USD, format_gpu_hours, format_usd_exact, parse_gpu_hours, parse_usd
from costaware.core.windows import zone_name_hint

#: A tag name (``team``, ``cost-center``): the ledger, the CLI and the Cost page's filters all use this.
TAG_NAME_PATTERN = r"[A-Za-z][A-Za-z0-9_.-]{0,63}"
_TAG_KEY = re.compile(rf"^{TAG_NAME_PATTERN}$")
#: The tags a run's params or conf give every cost it records, declared by the DAG or not.
TAG_NAMES = ("team", "project", "owner")
_ALL = "*"

# A value the ledger can store: not blank, without "," or "=" (they separate a scope's key=value parts).
# Stored tags are read by it: a budget made project=None before unset_problem must still load.
_STORABLE_TAG_VALUE = r"^[^,=]*[^,=\s][^,=]*$"
TAG_VALUE_PATTERN = r"^(?!\s*(?:None|null)\s*$)" + _STORABLE_TAG_VALUE[1:]
"""A new tag value: not blank, not ``None`` or ``null`` (:func:`unset_problem`), without ``,`` or ``=``.

DAG params that become tags carry the same rule, split into simpler JSON-schema keywords
(:func:`costaware.params.tag_param`) so that the refusal names what is wrong; a trigger with such a value is
refused before the run starts, naming the param: a trigger form's ``null`` was read as not given and the
run's tag dropped without a word. (A lookahead is valid in JSON schema's ECMA-262 regexes and Python's.)
"""
TAG_VALUE_RULE = "non-empty, not 'None' or 'null', without ',' or '='"
#: The longest tag value: the ledger's team/project/owner columns hold 128 characters.
MAX_TAG_VALUE = 128
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def unset_problem(key: str, value: object) -> str | None:
    """Why ``key=value`` must not be written as a new tag: its value says it was never set.

    Checked where tags are written (entries, budgets, holds), not where stored ones are read: a budget
    made ``project=None`` before this check must still load, and be deleted.
    """
    if not_given(value):  # ``null`` too: what ``| tojson`` renders of an unset param became project=null
        # str(None) would have made a real tag of it, "project=None", as would a template of an unset param.
        return (
            f"tag {key!r} has value {value!r}, which says it was never set (a template of an unset param "
            "renders 'None', or 'null' through | tojson): give it a value, or leave the tag out"
        )
    return None


def tag_problem(key: str, value: object) -> str | None:
    """Why ``key=value`` cannot be an allocation tag, or None when it can."""
    if not _TAG_KEY.match(str(key)):
        return (
            f"tag name {key!r} is not allowed: start with a letter, then letters, digits, '_', '.', '-' "
            "(at most 64 characters)"
        )
    if not re.match(_STORABLE_TAG_VALUE, str(value)):
        return f"tag {key!r} has value {value!r}: it must be non-empty, without ',' or '='"
    # PostgreSQL refused such an entry where SQLite took it: spooled, it blocked every later one there.
    if len(str(value).strip()) > MAX_TAG_VALUE:
        return f"tag {key!r} has a value of {len(str(value).strip())} characters: at most {MAX_TAG_VALUE}"
    if _CONTROL.search(str(value)):
        return f"tag {key!r} has value {value!r}: it must hold no control characters (a NUL, a newline)"
    return None


_QUOTE_MARKS = "'\"\u2018\u2019\u201c\u201d"


def quoted_in_scope(text: str) -> tuple[list[str], str] | None:
    """The tag names and values of scope ``text`` in quotes, and the scope without them; None if none.

    ``project="churn"`` (a shell's or a YAML's quotes kept) names the value ``"churn"``, quotes included,
    which no task's tags have: a budget over it caps nothing.
    """
    parts = [part.partition("=") for part in text.split(",")]
    words = [word.strip() for key, _, value in parts for word in (key, value) if word.strip()]
    quoted = [word for word in words if word[0] in _QUOTE_MARKS or word[-1] in _QUOTE_MARKS]
    if not quoted:
        return None

    def bare(word: str) -> str:
        return word.strip().strip(_QUOTE_MARKS).strip()

    return quoted, ",".join(f"{bare(key)}{sep}{bare(value)}" for key, sep, value in parts)


def quoted_scope_refusal(text: str, write: Callable[[str], str]) -> str | None:
    """Why scope ``text`` is refused for a tag name or value in quotes, or None where none is.

    The CLI and the Cost API refuse it alike; each says how to give the scope without them in its own terms.

    Args:
        text: The scope as given.
        write: The scope without the quotes, as the caller takes it (``--scope project=churn``).
    """
    quoted = quoted_in_scope(text)
    if quoted is None:
        return None
    parts, bare = quoted
    said = (
        f"{text!r}: {', '.join(parts)} {'is' if len(parts) == 1 else 'are'} in quotes, which would be "
        "part of the tag and match no task's tags"
    )
    # 'project=""' without its quotes is 'project=', no scope: suggesting it was refused in turn.
    pairs = [(key.strip(), value.strip()) for key, _, value in (p.partition("=") for p in bare.split(","))]
    empty = [
        f"tag {key!r} would have no value" if key else "a tag would have no name"
        for key, value in pairs
        if not key or not value
    ]
    if empty:
        return (
            f"{said}, and without them {' and '.join(empty)}: write the tag's name and the value its tasks "
            "are tagged with, without quotes"
        )
    try:
        Scope.parse(bare)
    except InvalidBudgetError as e:
        return f"{said}, and without them: {e}"
    return f"{said}: drop them ({write(bare)})"


def valid_tags(tags: Mapping[str, object]) -> tuple[dict[str, str], dict[str, str]]:
    """Split ``tags`` into those that can be recorded and, for the others, why not (by tag name)."""
    kept: dict[str, str] = {}
    dropped: dict[str, str] = {}
    for key, value in tags.items():
        problem = unset_problem(key, value) or tag_problem(key, value)
        if problem is None:
            kept[key] = str(value).strip()
        else:
            dropped[key] = problem
    return kept, dropped


class Period(str, Enum):
    """How often a budget's cap starts afresh."""

    RUN = "run"  # each DAG run has its own cap
    DAY = "day"
    MONTH = "month"
    TOTAL = "total"  # never resets

    @classmethod
    def parse(cls, value: str | Period) -> Period:
        try:
            return cls(value.value if isinstance(value, Period) else str(value).strip().lower())
        except ValueError as e:
            choices = ", ".join(p.value for p in cls)
            raise InvalidBudgetError(f"unknown budget period {value!r}: use one of {choices}") from e


@dataclass(frozen=True, slots=True)
class Scope:
    """A conjunction of ``key=value`` tag filters; the empty scope (``*``) matches everything.

    ``Scope.parse("project=churn,team=ml")`` matches every ledger entry tagged both ``project=churn``
    and ``team=ml``.
    """

    tags: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str | Scope | Mapping[str, str]) -> Scope:
        """Parse ``"key=value,key=value"``; ``"*"`` or ``""`` is the scope of everything."""
        if isinstance(text, Scope):
            return text
        if isinstance(text, Mapping):
            return cls.of(text)
        raw = str(text).strip()
        if raw in ("", _ALL):
            return cls()
        pairs: dict[str, str] = {}
        for part in raw.split(","):
            key, sep, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not value:
                tag_name, colon, tag_value = part.strip().partition(":")
                # project:churn is how a DAG tag is written; the scope of that tag is project=churn.
                example = (
                    f"{tag_name.strip()}={tag_value.strip()}"
                    if colon and not sep and tag_name.strip() and tag_value.strip()
                    else "project=churn,team=ml"
                )
                raise InvalidBudgetError(
                    f"scope part {part.strip()!r} of {raw!r} is not key=value: write e.g. {example!r}"
                )
            if key in pairs and pairs[key] != value:
                # A scope is an AND of tags, and an entry has one value per tag: no entry could match.
                raise InvalidBudgetError(
                    f"scope {raw!r} names tag {key!r} twice with different values ({pairs[key]!r} and "
                    f"{value!r}), which no entry has: keep one, e.g. '{key}={pairs[key]}', and look at the "
                    "other on its own"
                )
            pairs[key] = value
        return cls.of(pairs)

    @classmethod
    def given(cls, text: str | Scope | Mapping[str, str] | None, *, what: str = "scope") -> Scope:
        """:meth:`parse` for a scope money is set for or held in: a blank one is refused, not read as ``*``.

        A template that rendered empty (``{{ params.project }}`` unset) set a budget over every run, or held
        money in it; ``"*"`` says that on purpose.

        Raises:
            InvalidBudgetError: ``text`` is None or blank.
        """
        if text is None or (isinstance(text, str) and not text.strip()):
            raise InvalidBudgetError(
                f"{what} is empty: give the tags it counts, e.g. 'project=churn', or '*' for every run"
            )
        scope = cls.parse(text)
        for key, value in scope.tags:
            problem = unset_problem(key, value)
            if problem is not None:
                raise InvalidBudgetError(problem)
        return scope

    @classmethod
    def of(cls, tags: Mapping[str, str]) -> Scope:
        for key, value in tags.items():
            problem = tag_problem(key, value)
            if problem is not None:
                raise InvalidBudgetError(problem)
        return cls(tuple(sorted((k, str(v).strip()) for k, v in tags.items())))

    def as_dict(self) -> dict[str, str]:
        return dict(self.tags)

    def matches(self, tags: Mapping[str, str]) -> bool:
        """Whether an entry with these tags falls inside this scope."""
        return all(tags.get(key) == value for key, value in self.tags)

    def covers(self, other: Scope) -> bool:
        """Whether every entry of ``other`` falls inside this scope (this scope's filters are a subset)."""
        return set(self.tags) <= set(other.tags)

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.tags) or _ALL


def parse_timezone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; raises ``InvalidBudgetError`` naming it when unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        # The timetables' zones name the one meant ('europe/berlin'); a budget's said only "unknown".
        raise InvalidBudgetError(
            f"unknown time zone {name!r}{zone_name_hint(str(name))}: use an IANA name such as "
            "'Europe/Berlin' or 'UTC'"
        ) from e


@dataclass(frozen=True, slots=True)
class Budget:
    """A USD cap (and optional GPU-hour cap) on what a scope may spend in one period."""

    scope: Scope
    period: Period
    cap_usd: Decimal
    cap_gpu_hours: Decimal | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        parse_usd(self.cap_usd, name=f"cap of budget '{self.scope}/{self.period.value}'")
        if self.cap_gpu_hours is not None and (not self.cap_gpu_hours.is_finite() or self.cap_gpu_hours < 0):
            raise InvalidBudgetError(
                f"GPU-hour cap of budget '{self.scope}/{self.period.value}' must be zero or more, "
                f"got {self.cap_gpu_hours}"
            )
        parse_timezone(self.timezone)

    @classmethod
    def create(
        cls,
        scope: str | Scope,
        period: str | Period,
        cap_usd: object,
        cap_gpu_hours: object | None = None,
        timezone: str = "UTC",
    ) -> Budget:
        """Build a budget from user input, with errors that name the bad value."""
        parsed_scope, parsed_period = Scope.given(scope, what="budget scope"), Period.parse(period)
        label = f"budget '{parsed_scope}/{parsed_period.value}'"
        try:
            cap = parse_usd(cap_usd, name=f"cap of {label}")
            gpu = (
                None if cap_gpu_hours is None else _gpu_hours(cap_gpu_hours, name=f"GPU-hour cap of {label}")
            )
        except ValueError as e:
            raise InvalidBudgetError(str(e)) from e
        if 0 < cap < MICRO_USD:
            # The ledger keeps whole micro-dollars: this cap would be stored as $0, which blocks all spending.
            raise InvalidBudgetError(
                f"cap of {label} {cap_usd!r} is below the ledger's micro-dollar: it would be stored as $0; "
                "give at least 0.000001 (or 0 to block all spending)"
            )
        return cls(parsed_scope, parsed_period, cap, gpu, timezone)

    @property
    def label(self) -> str:
        return f"{self.scope}/{self.period.value}"


def _gpu_hours(value: object, *, name: str) -> Decimal:
    """A GPU-hour cap from user input: a finite number >= 0 (the message says GPU-hours, not USD).

    Read as amounts are (``parse_usd``: a comma only groups thousands), then checked as hours: stored in
    micro-units as money is, so a cap below a micro-hour would be stored as 0.
    """
    try:
        hours = parse_gpu_hours(value, name=name)
    except ConfigurationError as e:
        raise InvalidBudgetError(str(e)) from None
    if 0 < hours < MICRO_USD:
        raise InvalidBudgetError(
            f"{name} {value!r} is below a micro-hour: it would be stored as 0; give at least 0.000001"
        )
    return hours


@dataclass(frozen=True, slots=True)
class PeriodWindow:
    """One period of a budget: ``key`` names it in the ledger; start/end bound it in UTC (None: unbounded)."""

    key: str
    start: datetime | None
    end: datetime | None


def find_budget(budgets: Iterable[Budget], scope: str | Scope, period: str | Period) -> Budget | None:
    """The budget of (``scope``, ``period``) among ``budgets``, or None."""
    key = (str(Scope.parse(scope)), Period.parse(period))
    return next((b for b in budgets if (str(b.scope), b.period) == key), None)


def kept_settings(
    current: Budget | None, *, cap_gpu_hours: object, gpu_given: bool, timezone: str | None
) -> tuple[object, str]:
    """The GPU-hour cap and time zone a change sets: what it gives, else the budget's own.

    A change that leaves them out keeps them (a cap raise dropped the GPU-hour cap and reset the time zone
    before); a new budget has no GPU-hour cap and starts in UTC. ``gpu_given`` with ``cap_gpu_hours`` None
    drops the GPU-hour cap.
    """
    if not gpu_given:
        cap_gpu_hours = current.cap_gpu_hours if current is not None else None
    return cap_gpu_hours, timezone or (current.timezone if current is not None else "UTC")


def kept_cap(current: Budget | None, cap_usd: object, *, scope: str, period: str, give: str) -> object:
    """The USD cap a change sets: what it gives, else the budget's own.

    Raises:
        InvalidBudgetError: none given for a budget that does not exist yet; ``give`` says how to give it.
    """
    if cap_usd is not None:
        return cap_usd
    if current is None:
        raise InvalidBudgetError(
            f"budget '{Scope.parse(scope)}/{Period.parse(period).value}' does not exist yet: {give}"
        )
    return current.cap_usd


#: The longest period key the ledger stores (its holds' and alerts' ``period_key`` column).
MAX_PERIOD_KEY_CHARS = 300


def run_key(run_id: str, dag_id: str | None = None) -> str:
    """The period key of a DAG run: ``run@<dag>/<run>``, or ``run:<run>`` for that run id of any DAG.

    A DAG run is its DAG and its run id: two daily DAGs share the run id ``scheduled__<date>``, and each
    counted the other's spend against its per-run cap. The two forms cannot be confused (a DAG id has no
    ``/``; a run id may, where a deployment allows it). Without the DAG, or where the key would pass the
    column (a DAG id of 250 characters), the run id alone: it counts every DAG's run of it, more, never less.
    """
    key = f"run@{dag_id}/{run_id}" if dag_id else f"run:{run_id}"
    return key if len(key) <= MAX_PERIOD_KEY_CHARS else f"run:{run_id}"


def is_run_key(key: str) -> bool:
    """Whether ``key`` is a DAG run's (see :func:`run_key`)."""
    return key.startswith(("run:", "run@"))


def run_of_key(key: str) -> tuple[str | None, str]:
    """(DAG id or None for any DAG, run id) of a :func:`run_key`."""
    if key.startswith("run@"):
        dag_id, _, run_id = key[4:].partition("/")
        return dag_id, run_id
    return None, key[4:]


def period_window(
    period: Period, at: datetime, tz_name: str = "UTC", run_id: str | None = None, dag_id: str | None = None
) -> PeriodWindow:
    """The period of ``period`` that contains instant ``at``, in the budget's time zone.

    Day and month boundaries are local midnights, so a month in ``America/New_York`` starts at 04:00 or
    05:00 UTC depending on DST.

    Raises:
        InvalidBudgetError: ``at`` is naive, or a run period is asked for without a run id.
    """
    if at.tzinfo is None:
        raise InvalidBudgetError(f"time {at.isoformat()} has no time zone: pass an aware datetime")
    if period is Period.TOTAL:
        return PeriodWindow("total", None, None)
    if period is Period.RUN:
        if not run_id:
            raise InvalidBudgetError("a budget with period 'run' needs the DAG run id of the spend")
        return PeriodWindow(run_key(run_id, dag_id), None, None)
    tz = parse_timezone(tz_name)
    local = at.astimezone(tz)
    if period is Period.DAY:
        start = datetime(local.year, local.month, local.day, tzinfo=tz)
        tomorrow = local.date() + timedelta(days=1)
        nxt = datetime(tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=tz)
        key = start.strftime("%Y-%m-%d")
    else:
        start = datetime(local.year, local.month, 1, tzinfo=tz)
        nxt = datetime(local.year + (local.month == 12), local.month % 12 + 1, 1, tzinfo=tz)
        key = start.strftime("%Y-%m")
    return PeriodWindow(key, start.astimezone(timezone.utc), nxt.astimezone(timezone.utc))


class CapStanding(Protocol):
    """Where a budget stands in its period (``costaware.core.ledger.BudgetUsage`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def period_key(self) -> str: ...
    @property
    def cap_usd(self) -> Decimal: ...
    @property
    def spent_usd(self) -> Decimal: ...
    @property
    def reserved_usd(self) -> Decimal: ...
    @property
    def left_usd(self) -> Decimal: ...
    @property
    def cap_gpu_hours(self) -> Decimal | None: ...
    @property
    def spent_gpu_hours(self) -> Decimal: ...
    @property
    def reserved_gpu_hours(self) -> Decimal: ...
    @property
    def left_gpu_hours(self) -> Decimal | None: ...


#: What a refusal tells a person to do; a caller whose budget is set another way says that instead.
RAISE_THE_CAP_ONLY = "raise the cap with `costaware budget set`"
RAISE_THE_CAP = f"{RAISE_THE_CAP_ONLY} or lower the estimate"
#: What a refusal for want of GPU-hours says to do (a caller whose cap comes from elsewhere replaces it).
RAISE_THE_GPU_HOUR_CAP = "raise the GPU-hour cap"


def cap_advice_in(message: str) -> str:
    """Which of the refusal's two pieces of advice ``message`` holds, for a caller to replace with its own.

    The longer first: a budget with nothing left is told only to raise the cap, not to lower the estimate.
    """
    return RAISE_THE_CAP if RAISE_THE_CAP in message else RAISE_THE_CAP_ONLY


def _holds_hint(reserved_usd: Decimal) -> str:
    """Where the reserved money is: a killed run's hold (Ctrl-C of `dags test`) stays open until expiry."""
    if reserved_usd <= 0:
        return ""
    return (
        f"; the {format_usd_exact(reserved_usd)} reserved is held by open holds: `costaware budget holds` "
        "lists them, and `costaware budget release --holder <holder>` gives back one whose run was killed "
        "or deleted (nothing else settles it before it expires)"
    )


def check_cap(usage: CapStanding, amount: Decimal, gpu_hours: Decimal, purpose: str) -> None:
    """Refuse ``amount`` USD (and ``gpu_hours``) for ``purpose`` when they would pass the budget's caps.

    Spent plus reserved plus the amount may reach the cap, not pass it.

    Raises:
        BudgetExceededError: the USD or the GPU-hour cap would be passed; the message names the budget,
            its standing and what to do.
    """
    name = usage.name
    if usage.spent_usd + usage.reserved_usd + amount > usage.cap_usd:
        left = format_usd_exact(max(usage.left_usd, Decimal(0)))
        has = f"{left} left"
        if usage.left_usd < 0:  # spent past its cap already (a task billed above its estimate)
            has = f"nothing left (it is {format_usd_exact(-usage.left_usd)} over its cap)"
        cap, spent = format_usd_exact(usage.cap_usd), format_usd_exact(usage.spent_usd)
        reserved, need = format_usd_exact(usage.reserved_usd), format_usd_exact(amount)
        # A $0 estimate cannot be lowered, nor can any estimate make room in a budget with nothing left:
        # only the cap (or a released hold) can.
        todo = RAISE_THE_CAP if amount > 0 and usage.left_usd > 0 else RAISE_THE_CAP_ONLY
        if amount > usage.cap_usd:
            # A gate that waits would wait for good: a new period starts at the same cap.
            todo = f"it is more than the whole cap, so no new period makes room: {todo}"
        else:  # above the whole cap, no released hold makes room either
            todo += _holds_hint(usage.reserved_usd)
        raise BudgetExceededError(
            f"budget '{name}' has {has} (cap {cap}, spent {spent}, reserved {reserved}); "
            f"{purpose} needs an estimated {need}: {todo}",
            renews=usage.period_key != "total" and amount <= usage.cap_usd,
            scope=name,
            spent_usd=str(usage.spent_usd + usage.reserved_usd),
            cap_usd=str(usage.cap_usd),
            needed_usd=str(amount),
            summary="\n".join(
                [
                    f"Budget refused {purpose}: it needs an estimated {need}, the budget has {has}.",
                    f"  budget:   {name}",
                    f"  cap:      {cap}",
                    f"  spent:    {spent}",
                    f"  reserved: {reserved}",
                    f"  left:     {left}",
                    f"  need:     {need}",
                    f"  to do:    {todo}",
                ]
            ),
        )
    cap_gpu_hours, left_gpu_hours = usage.cap_gpu_hours, usage.left_gpu_hours  # both None without a cap
    if cap_gpu_hours is not None and left_gpu_hours is not None and gpu_hours > left_gpu_hours:
        # Passed already (a task ran past its estimate): "-1 GPU-hours left" read as a typo.
        cap_said, need_said = format_gpu_hours(cap_gpu_hours), format_gpu_hours(gpu_hours)
        has_gpu = f"{format_gpu_hours(left_gpu_hours)} GPU-hours left of {cap_said}"
        if left_gpu_hours < 0:
            over = f"it is {format_gpu_hours(-left_gpu_hours)} GPU-hours over its cap"
            has_gpu = f"no GPU-hours left of {cap_said} ({over})"
        raise BudgetExceededError(
            f"budget '{name}' has {has_gpu}; {purpose} needs {need_said} GPU-hours: {RAISE_THE_GPU_HOUR_CAP}",
            renews=usage.period_key != "total" and gpu_hours <= cap_gpu_hours,
            scope=name,
            # What is committed, as the USD refusal gives it: an approval request shows it as such.
            spent_usd=str(usage.spent_usd + usage.reserved_usd),
            cap_usd=str(usage.cap_usd),
            needed_usd=str(amount),
        )
