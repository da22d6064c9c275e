"""Ledger values: what one cost entry, one reservation and one report row hold.

Storage lives in ``costaware.adapters.ledger.store``; this module is pure.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, localcontext
from enum import Enum

from costaware.core.budgets import Scope
from costaware.core.carbon import UNKNOWN
from costaware.core.errors import ConfigurationError
from costaware.core.money import MAX_USD, parse_usd

SECONDS_PER_HOUR = Decimal(3600)
#: The longest note an entry keeps (a backend's failure text can run to kilobytes).
MAX_NOTE_CHARS = 500
#: The ``price_source`` of a try that could not be priced (recorded at $0, the reason in its note).
UNPRICED = "unpriced"


def clipped_note(text: str, limit: int = MAX_NOTE_CHARS) -> str:
    """``text``, or its first words within ``limit`` characters and an ellipsis.

    A word is cut only when the last half of the limit holds no space (one long token).
    """
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    words = head.rsplit(" ", 1)[0] if " " in head[limit // 2 :] else head
    return words.rstrip(" ,;:") + "…"


#: Longest value the store keeps for each short text field (free text goes in ``note``).
FIELD_LIMITS = {
    "dag_id": 250,
    "run_id": 250,
    "task_id": 250,
    "trial": 250,
    "instance_type": 64,
    "region": 64,
    "unit": 16,
    "outcome": 16,
    "cause": 32,
    "price_source": 64,
    "reservation_id": 64,
    "carbon_method": 512,
    "carbon_source": 128,
    "unit_price_usd": 40,
}
#: The significant digits a unit price keeps where its text is longer than the store's column: a price is
#: what the money was worked out from, and 24 digits keep it to far below a micro-dollar at any quantity.
UNIT_PRICE_DIGITS = 24
#: The longest ``entry_uid`` the store keys entries by.
MAX_ENTRY_UID = 64
#: Tags with their own indexed column in the store; any other tag lives in a JSON column.
INDEXED_TAGS = ("team", "project", "owner")
#: What a cost report can group by (besides ``tag:<name>``): the CLI, the Cost page and the ledger's queries
#: take their choices from here.
GROUP_BYS = ("dag", "task", "run", "trial", "kind", "market", "cause", "outcome")


def group_by_name(text: str) -> str:
    """``TASK`` -> ``task``, ``TAG:team`` -> ``tag:team``: a keyword whatever its case, a tag as given.

    One reading for the CLI's ``--group-by`` and the Cost API's ``group_by``. Tag names are matched exactly
    (a tag ``Team`` is not ``team``); anything else is kept as it is, so the caller's error names it.
    """
    keyword, colon, tag = text.strip().partition(":")
    if colon and keyword.lower() == "tag":
        return f"tag:{tag}"
    return text.strip().lower() if text.strip().lower() in GROUP_BYS else text


class Kind(str, Enum):
    """What the money paid for."""

    COMPUTE = "compute"
    STORAGE = "storage"
    EGRESS = "egress"


class Market(str, Enum):
    """How compute was bought: spot, on-demand, or local (the team's own hardware at a configured rate)."""

    SPOT = "spot"
    ON_DEMAND = "on_demand"
    LOCAL = "local"

    @classmethod
    def parse(cls, value: str | Market) -> Market:
        text = value.value if isinstance(value, Market) else str(value).strip().lower().replace("-", "_")
        try:
            return cls(text)
        except ValueError as e:
            raise ConfigurationError(
                f"unknown market {value!r}: use one of {', '.join(m.value for m in cls)}"
            ) from e


def utcnow() -> datetime:
    """The current instant, timezone-aware, in UTC."""
    return datetime.now(timezone.utc)


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One cost: who incurred it (dag, run, task, try, trial), for what, how much, and under which tags.

    ``estimated`` entries are forecasts or avoided costs; only actual entries count as spend.
    ``on_demand_usd`` prices the same quantity at on-demand rates, so savings are ``on_demand_usd - usd``.
    ``kg_co2e`` is the estimated emissions (None: unknown, never 0 for unknown; ``carbon_method`` then says
    why), ``kwh`` the energy behind it, ``carbon_source`` the intensity series used
    (see ``costaware.adapters.emissions``).
    """

    dag_id: str
    run_id: str
    task_id: str
    kind: Kind
    usd: Decimal
    try_number: int = 1
    map_index: int = -1
    trial: str | None = None
    instance_type: str | None = None
    region: str | None = None
    market: Market | None = None
    quantity: Decimal = Decimal(0)
    unit: str = "hour"
    unit_price_usd: Decimal = Decimal(0)
    on_demand_usd: Decimal | None = None
    gpu_hours: Decimal = Decimal(0)
    estimated: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)
    incurred_at: datetime = field(default_factory=utcnow)
    outcome: str = "success"
    cause: str = ""
    price_source: str = ""
    note: str = ""
    reservation_id: str | None = None
    kg_co2e: Decimal | None = None
    kwh: Decimal | None = None
    carbon_method: str = ""
    carbon_source: str = ""
    entry_uid: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))
        if self.market is not None:
            object.__setattr__(self, "market", Market.parse(self.market))
        # Kept as parsed: an amount given as text or a float ("3.95", as reserve and set_budget take it)
        # passed this check and then failed the write with "'str' object has no attribute 'is_finite'".
        usd = parse_usd(self.usd, name=f"usd of entry {self.dag_id}/{self.task_id}", allow_negative=True)
        object.__setattr__(self, "usd", usd)
        # Checked here, by name: a NaN or an infinite amount otherwise failed only in the write, with an error
        # that named no field, and a negative quantity was stored and summed.
        for name, negative in _AMOUNTS:
            _check_amount(self, name, allow_negative=negative)
        price = self.unit_price_usd
        if isinstance(price, Decimal) and len(str(price)) > FIELD_LIMITS["unit_price_usd"]:
            # The store keeps a unit price as text of at most 40 characters: one made from a float
            # (Decimal(0.1) is 57 of them) was refused by PostgreSQL, and the entry, its cost, with it.
            with localcontext() as exact:
                exact.prec = UNIT_PRICE_DIGITS
                object.__setattr__(self, "unit_price_usd", +price)
        uid = self.entry_uid
        if not isinstance(uid, str) or not uid.strip() or len(uid) > MAX_ENTRY_UID:
            # The ledger keeps one entry per uid: a blank one keyed different costs alike (all but the first
            # dropped as repeats), and PostgreSQL refused one over its column where SQLite kept it.
            raise ConfigurationError(
                f"ledger entry {self.dag_id}/{self.task_id}: entry_uid {uid!r} must be 1 to {MAX_ENTRY_UID} "
                "characters, not blank: derive it from what identifies the cost (a hash of it, as "
                "try_entry_uid does), or leave it out for a new one"
            )
        if self.incurred_at.tzinfo is None:
            raise ConfigurationError(f"incurred_at {self.incurred_at.isoformat()} has no time zone")
        Scope.of(self.tags)  # validates tag names and values
        if "\x00" in self.note:  # PostgreSQL refuses a NUL in text (an error message can carry one)
            object.__setattr__(self, "note", self.note.replace("\x00", ""))
        for name, limit in FIELD_LIMITS.items():
            value = getattr(self, name)
            if value is not None and len(str(value)) > limit:
                raise ConfigurationError(
                    f"ledger entry field {name} is {len(str(value))} characters, over its limit of {limit}: "
                    f"{str(value)[:60]!r}...; put long text in the entry's note"
                )


#: The entry's numeric fields besides ``usd`` and whether they may be below 0 (``on_demand_usd`` pairs with
#: ``usd``, a credit's included; what was used and what it emitted cannot be).
_AMOUNTS = (
    ("on_demand_usd", True),
    ("unit_price_usd", False),
    ("quantity", False),
    ("gpu_hours", False),
    ("kwh", False),
    ("kg_co2e", False),
)


def _check_amount(entry: LedgerEntry, name: str, *, allow_negative: bool) -> None:
    value = getattr(entry, name)
    if value is None:
        return
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except ArithmeticError:
        number = Decimal("NaN")
    if (
        isinstance(value, bool)
        or not number.is_finite()
        or abs(number) > MAX_USD
        or (number < 0 and not allow_negative)
    ):
        bound = "" if allow_negative else " >= 0"
        raise ConfigurationError(
            f"ledger entry {entry.dag_id}/{entry.task_id}: {name} must be a finite number{bound} of at most "
            f"{int(MAX_USD):,}, got {value!r}: fix what computed it"
        )
    object.__setattr__(entry, name, number)  # the write reads Decimals: "1.5" or 1.5 is kept as one


@dataclass(frozen=True, slots=True)
class Reservation:
    """Money set aside for a task before it runs; settled with the actual cost or released after."""

    id: str
    scope: Scope
    usd: Decimal
    gpu_hours: Decimal
    holder: str | None
    created_at: datetime
    expires_at: datetime
    status: str  # open | settled | released | replaced (by a newer hold of its holder) | expired
    budgets: tuple[str, ...]  # labels of the budgets it counts against, e.g. "project=churn/month"
    settled_usd: Decimal | None = None

    def lapsed(self, at: datetime) -> bool:
        """Whether it counts nothing for having run out at ``at``: marked expired, or open past its limit."""
        return self.status == "expired" or (self.status == "open" and self.expires_at <= at)


@dataclass(frozen=True, slots=True)
class BudgetUsage:
    """Where one budget stands in its current period."""

    label: str
    period_key: str
    cap_usd: Decimal
    spent_usd: Decimal
    reserved_usd: Decimal
    cap_gpu_hours: Decimal | None
    spent_gpu_hours: Decimal
    reserved_gpu_hours: Decimal

    @property
    def left_usd(self) -> Decimal:
        return self.cap_usd - self.spent_usd - self.reserved_usd

    @property
    def left_gpu_hours(self) -> Decimal | None:
        """The GPU-hours left under the cap (negative where passed); None where no GPU-hour cap is set."""
        if self.cap_gpu_hours is None:
            return None
        return self.cap_gpu_hours - self.spent_gpu_hours - self.reserved_gpu_hours

    @property
    def name(self) -> str:
        """The budget's name on the Cost page, in logs and in the CLI: ``project=churn/month (2026-11)``."""
        return f"{self.label} ({self.period_key})"


@dataclass(frozen=True, slots=True)
class ReportRow:
    """Spend of one group (a dag, a task, a tag value, ...)."""

    group: str
    entries: int
    usd: Decimal
    estimated_usd: Decimal
    on_demand_usd: Decimal
    hours: Decimal
    kg_co2e: Decimal | None = None
    co2e_unknown: int = 0

    @property
    def savings_usd(self) -> Decimal:
        return self.on_demand_usd - self.usd

    @property
    def kg_co2e_text(self) -> str:
        """The group's emissions as shown: see :func:`format_kg_co2e`."""
        return format_kg_co2e(self.kg_co2e, self.co2e_unknown)


def total_kg_co2e(rows: Iterable[ReportRow]) -> tuple[Decimal | None, int]:
    """The known kg CO2e of ``rows`` summed (None when no row has any) and their unknown entries."""
    known = [r.kg_co2e for r in rows if r.kg_co2e is not None]
    unknown = sum(r.co2e_unknown for r in rows)
    return (sum(known, Decimal(0)) if known else None), unknown


def format_kg_co2e(kg: Decimal | None, unknown: int) -> str:
    """Summed emissions as the CLI and the Cost page show them.

    ``kg`` is the sum of the known estimates (None: no entry of the group has one), ``unknown`` how many
    compute entries have none. ``12.345`` all known (to the mg under 0.1 kg); ``12.345+?`` the known sum
    plus entries whose emissions are unknown (so the true figure is higher); ``unknown`` every compute
    entry unknown; ``-`` the group has
    no compute entry (storage and egress are not estimated).
    """
    if kg is None:
        return UNKNOWN if unknown else "-"
    text = f"{kg:.3f}" if abs(kg) >= Decimal("0.1") else f"{kg:.6f}"  # grams stay visible
    return f"{text}+?" if unknown else text


def compute_cost(seconds: float | Decimal, usd_per_hour: Decimal) -> tuple[Decimal, Decimal]:
    """Hours and USD for ``seconds`` of compute at ``usd_per_hour``, exact to the micro-dollar."""
    if Decimal(seconds) < 0:
        raise ConfigurationError(f"runtime must be zero or more seconds, got {seconds}")
    exact_hours = Decimal(str(seconds)) / SECONDS_PER_HOUR
    micro = Decimal("0.000001")
    return exact_hours.quantize(micro), (exact_hours * usd_per_hour).quantize(micro)


def try_entry_uid(ti_id: object, try_number: int) -> str:
    """The ``entry_uid`` of the cost listener's entry for one task try: the same wherever it is written.

    ``ti_id`` is Airflow's id of the task instance (a new one each try, and for each run of a run id deleted
    and made again). The worker records a try that ends; the API server records one a person marked while
    it ran. Where both do (the try ended as it was being marked), the ledger keeps the first. The try number
    is part of the key: the scheduler gives a try it puts up for retry the next try's id before the listener
    hears of it, and that entry must not take the next try's key.
    """
    import hashlib

    return "try-" + hashlib.sha256(f"ti\x00{ti_id}\x00{try_number}".encode()).hexdigest()[:40]


def reservation_holder(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The holder key of the reservation made for one task instance (sensor reserves, listener settles)."""
    return f"{dag_id}/{run_id}/{task_id}/{map_index}"


@dataclass(frozen=True, slots=True)
class HolderKey:
    """What a hold's holder key names: a task instance of a DAG run, or a ``budgeted_search``'s rung or tail.

    ``search`` is set for a search's hold, whose ``run_id`` is the search's own id (no Airflow run id) and
    which names no DAG, task or map index; ``suffix`` is what a task's holder adds (a data-locality
    operator's ``egress``).
    """

    run_id: str
    dag_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    suffix: str | None = None
    search: str | None = None  # "rung" or "tail"


def read_holder(holder: str | None) -> HolderKey | None:
    """The one reading of a holder key; None for a holder of another form (reserved from Python, say).

    The forms are :func:`reservation_holder`'s ``dag/run/task/map_index`` (a data-locality hold adds
    ``/egress``), a search's ``search/<id>/<trial>/<rung>`` and ``search/<id>/tail``. A DAG id and a task
    id have no ``/``, a run id may (a deployment's ``allowed_run_id_pattern``): the run id is all between
    the first part and the last two (the last one for a search's tail), empty parts included: ``nightly/``
    and ``a//b`` are run ids (only the DAG id, the task id and the whole run id cannot be empty). A
    search's trial and rung are whole numbers (a rung is never negative, as a task's unmapped map index -1
    is), so a DAG named ``search`` with numeric task ids is all it could be mistaken for.
    """
    parts = (holder or "").split("/")
    if len(parts) >= 3 and parts[0] == "search" and all(parts[1:]):
        if parts[-1] == "tail":
            return HolderKey(run_id="/".join(parts[1:-1]), search="tail")
        if len(parts) >= 4 and parts[-1].isdigit() and parts[-2].isdigit():
            return HolderKey(run_id="/".join(parts[1:-2]), search="rung")
    suffix = None
    if len(parts) >= 5 and not _is_int(parts[-1]):
        suffix = parts.pop()
    run_id = "/".join(parts[1:-2])
    if len(parts) < 4 or not _is_int(parts[-1]) or not (parts[0] and parts[-2] and run_id):
        return None
    return HolderKey(
        run_id=run_id,
        dag_id=parts[0],
        task_id=parts[-2],
        map_index=int(parts[-1]),
        suffix=suffix,
    )


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def holder_run_id(holder: str | None) -> str | None:
    """The run id in a holder key (a search's id for a search's hold); None for a holder of another form."""
    key = read_holder(holder)
    return key.run_id if key is not None else None


def holder_dag_id(holder: str | None) -> str | None:
    """The DAG id in a :func:`reservation_holder` key; None for a search's hold or a holder of other form."""
    key = read_holder(holder)
    return key.dag_id if key is not None else None


def entry_to_json(entry: LedgerEntry) -> dict[str, object]:
    """A JSON-safe dict of an entry (money as strings), e.g. for the spool of entries not yet written."""
    out: dict[str, object] = {}
    for name in LedgerEntry.__slots__:
        value = getattr(entry, name)
        if isinstance(value, Enum):
            value = value.value
        elif isinstance(value, (Decimal, datetime)):
            value = value.isoformat() if isinstance(value, datetime) else str(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[name] = value
    return out


def entry_from_json(data: Mapping[str, object]) -> LedgerEntry:
    """Inverse of :func:`entry_to_json`."""
    values = dict(data)
    for name in ("usd", "quantity", "unit_price_usd", "gpu_hours", "on_demand_usd", "kg_co2e", "kwh"):
        if values.get(name) is not None:
            values[name] = Decimal(str(values[name]))
    values["incurred_at"] = datetime.fromisoformat(str(values["incurred_at"]))
    return LedgerEntry(**values)  # type: ignore[arg-type]
