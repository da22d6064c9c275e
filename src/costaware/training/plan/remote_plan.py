"""The plan of a remote training and its parts, as values that travel as JSON: no checks, no IO."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from costaware.core.series import parse_instant

#: The grace period of a plan written before it was part of the plan.
DEFAULT_GRACE_SECONDS = 110.0


@dataclass(frozen=True, slots=True)
class PriceWatch:
    """What pausing a spot attempt on its price needs (``pause_on_price``).

    Args:
        prices: ``"live"`` or the path of a recorded spot price file.
        availability: A spot capacity trace for resumes, or None.
        availability_zone: The zone of the decision, or None (the region's cheapest).
        runtime_hours: The training's expected runtime, a decimal string.
        priority: ``critical``, ``normal`` or ``best_effort``.
        restart_overhead_minutes: What a restart from a checkpoint costs.
        history_days: Days of price history the forecast fits on.
        aws_conn_id: The AWS connection of live prices.
        region: The region of the prices.
        objective: ``cost``, ``carbon`` or ``cost+carbon``: what the pause rule compares.
        carbon_usd_per_tonne: Carbon price of ``cost+carbon``.
        carbon: A bundled grid zone or a recorded carbon intensity CSV; None: the grid zone of ``region``.
    """

    prices: str
    runtime_hours: str
    priority: str = "normal"
    restart_overhead_minutes: float = 5.0
    history_days: int = 14
    availability: str | None = None
    availability_zone: str | None = None
    aws_conn_id: str | None = None
    region: str = "us-east-1"
    objective: str = "cost"
    carbon_usd_per_tonne: float | None = None
    carbon: str | None = None

    def objective_keys(self) -> dict[str, Any]:
        """The objective's keys, only when it is not ``cost``: states and watches of today's jobs stay."""
        if self.objective == "cost":
            return {}
        return {
            "objective": self.objective,
            "carbon_usd_per_tonne": self.carbon_usd_per_tonne,
            "carbon": self.carbon,
        }

    def to_json(self) -> dict[str, Any]:
        return self.objective_keys() | {
            "prices": self.prices,
            "availability": self.availability,
            "availability_zone": self.availability_zone,
            "runtime_hours": self.runtime_hours,
            "priority": self.priority,
            "restart_overhead_minutes": self.restart_overhead_minutes,
            "history_days": self.history_days,
            "aws_conn_id": self.aws_conn_id,
            "region": self.region,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PriceWatch:
        return cls(
            prices=str(data["prices"]),
            availability=data.get("availability") or None,
            availability_zone=data.get("availability_zone") or None,
            runtime_hours=str(data["runtime_hours"]),
            priority=str(data.get("priority") or "normal"),
            restart_overhead_minutes=float(data.get("restart_overhead_minutes", 5.0)),
            history_days=int(data.get("history_days", 14)),
            aws_conn_id=data.get("aws_conn_id"),
            region=str(data.get("region") or "us-east-1"),
            objective=str(data.get("objective") or "cost"),
            carbon_usd_per_tonne=data.get("carbon_usd_per_tonne"),
            carbon=data.get("carbon") or None,
        )


@dataclass(frozen=True, slots=True)
class Billing:
    """Where a spot attempt finds the prices in force over its run (it is billed at their mean)."""

    prices: str
    availability_zone: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"prices": self.prices, "availability_zone": self.availability_zone}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Billing:
        return cls(prices=str(data["prices"]), availability_zone=data.get("availability_zone") or None)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where spot attempts may run, and what choosing the next one's zone needs (``core.zone_choice``).

    Args:
        zones: The allowed zones; empty: the backend's choice in the plan's region (the guard still applies).
        first_zone: The zone of attempt 1 (the decision's), or "".
        zone_availability: ``zone -> capacity trace path`` (capacity unknown without one).
        restart_overhead_seconds: What a restart from a checkpoint costs before training goes on.
        guard: Whether the restart-thrash guard may leave a zone (or send the rest to on-demand).
        runtime_hours: The training's expected runtime (a decimal string), or None (taken as one hour).
        usd_per_gb: ``region -> transfer USD/GB`` from the plan's region, for zones in other regions.
        data_bytes: The training data a job in another region reads across regions.
        availability_start: When the zone traces' first sample is (ISO; default the task's start).
    """

    zones: tuple[str, ...] = ()
    first_zone: str = ""
    zone_availability: Mapping[str, str] = field(default_factory=dict)
    restart_overhead_seconds: float = 300.0
    guard: bool = False
    runtime_hours: str | None = None
    usd_per_gb: Mapping[str, str] = field(default_factory=dict)
    data_bytes: int = 0
    availability_start: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "zones": list(self.zones),
            "first_zone": self.first_zone,
            "zone_availability": dict(self.zone_availability),
            "restart_overhead_seconds": self.restart_overhead_seconds,
            "guard": self.guard,
            "runtime_hours": self.runtime_hours,
            "usd_per_gb": dict(self.usd_per_gb),
            "data_bytes": self.data_bytes,
            "availability_start": self.availability_start,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Placement:
        runtime = data.get("runtime_hours")
        return cls(
            zones=tuple(str(z) for z in data.get("zones") or ()),
            first_zone=str(data.get("first_zone") or ""),
            zone_availability={str(k): str(v) for k, v in dict(data.get("zone_availability") or {}).items()},
            restart_overhead_seconds=float(data.get("restart_overhead_seconds", 300.0)),
            guard=bool(data.get("guard", False)),
            runtime_hours=str(runtime) if runtime is not None else None,
            usd_per_gb={str(k): str(v) for k, v in dict(data.get("usd_per_gb") or {}).items()},
            data_bytes=int(data.get("data_bytes") or 0),
            availability_start=data.get("availability_start") or None,
        )


@dataclass(frozen=True, slots=True)
class RemotePlan:
    """Everything the attempts of one remote training share, fixed when the task starts.

    Args:
        backend: ``local``, ``sagemaker``, ``batch`` or ``kubernetes``.
        backend_options: The backend's options (JSON primitives).
        identity: ``dag_id``, ``run_id``, ``task_id``, ``try_number``, ``map_index`` of the task.
        base_name: Stem of the attempts' job names, stable across Airflow retries.
        instance_type: What every attempt runs on.
        region: Where.
        on_demand_usd_per_hour: The on-demand price, a decimal string.
        first_market: The market of attempt 1.
        first_market_reason: Why attempt 1 runs on on-demand where the spot window decided so (its reason,
            for the attempt's ledger note); "" otherwise (spot, or on-demand given or by default).
        checkpoint_uri: The checkpoint prefix of this training.
        model_store: The model store the model version goes to.
        spec_uri: The built-in trainer's spec ("" for a command).
        result_uri: Where the built-in job writes its summary ("" for a command).
        image: The command's container image, or None.
        grace_seconds: SIGTERM to SIGKILL of a command.
        job_env: Extra environment of every job (the S3 endpoint).
        deadline: When the model must be ready, or None.
        tags: The ledger tags of every attempt.
        estimated_usd: The spot decision's estimate (reserved when no spend gate did), or None.
        checkpoint_every_seconds: The training's checkpoint interval (the most a stop loses), or None.
        watch: Pausing on the price, or None.
        billing: Billing a spot attempt at the mean price over its run, or None (its starting price).
        placement: The allowed zones and the zone choice of each spot attempt.
        max_usd: The most the attempts may bill together, a decimal string, or None (no cap).
        max_usd_note: Why ``max_usd`` is below the task's own (the budgets had no more room), for the
            message that says the cap is spent; "" when it is the task's.
    """

    backend: str
    instance_type: str
    region: str
    on_demand_usd_per_hour: str
    first_market: str
    identity: Mapping[str, Any] = field(default_factory=dict)
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    base_name: str = ""
    checkpoint_uri: str = ""
    model_store: str = ""
    spec_uri: str = ""
    result_uri: str = ""
    image: str | None = None
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    job_env: Mapping[str, str] = field(default_factory=dict)
    deadline: datetime | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    estimated_usd: str | None = None
    checkpoint_every_seconds: float | None = 300.0
    watch: PriceWatch | None = None
    billing: Billing | None = None
    placement: Placement = field(default_factory=Placement)
    first_market_reason: str = ""
    max_usd: str | None = None
    max_usd_note: str = ""

    @property
    def spot_prices(self) -> str | None:
        """Where the attempts find spot prices: the billing's source, else the price watch's (None: none)."""
        return self.billing.prices if self.billing else (self.watch.prices if self.watch else None)

    def to_json(self) -> dict[str, Any]:
        """The plan's keys of the state dict the operator and its trigger carry (JSON primitives)."""
        reason = {"first_market_reason": self.first_market_reason} if self.first_market_reason else {}
        cap = {"max_usd": self.max_usd} if self.max_usd is not None else {}
        if self.max_usd_note:
            cap["max_usd_note"] = self.max_usd_note
        return {
            "backend": self.backend,
            "backend_options": dict(self.backend_options),
            "identity": dict(self.identity),
            "base_name": self.base_name,
            "spec_uri": self.spec_uri,
            "result_uri": self.result_uri,
            "image": self.image,
            "grace_seconds": self.grace_seconds,
            "checkpoint_uri": self.checkpoint_uri,
            "model_store": self.model_store,
            "job_env": dict(self.job_env),
            "instance_type": self.instance_type,
            "region": self.region,
            "on_demand_usd_per_hour": self.on_demand_usd_per_hour,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "tags": dict(self.tags),
            "estimated_usd": self.estimated_usd,
            "first_market": self.first_market,
            "checkpoint_every_seconds": self.checkpoint_every_seconds,
            "watch": self.watch.to_json() if self.watch else None,
            "billing": self.billing.to_json() if self.billing else None,
            "placement": self.placement.to_json(),
            **reason,
            **cap,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RemotePlan:
        """Read :meth:`to_json`'s keys, also from a state an older version wrote (missing keys default)."""
        deadline = data.get("deadline")
        watch = data.get("watch")
        billing = data.get("billing")
        estimated = data.get("estimated_usd")
        return cls(
            backend=str(data["backend"]),
            backend_options=dict(data.get("backend_options") or {}),
            identity=dict(data.get("identity") or {}),
            base_name=str(data.get("base_name") or ""),
            spec_uri=str(data.get("spec_uri") or ""),
            result_uri=str(data.get("result_uri") or ""),
            image=data.get("image") or None,
            grace_seconds=float(data.get("grace_seconds") or DEFAULT_GRACE_SECONDS),
            checkpoint_uri=str(data.get("checkpoint_uri") or ""),
            model_store=str(data.get("model_store") or ""),
            job_env={str(k): str(v) for k, v in dict(data.get("job_env") or {}).items()},
            instance_type=str(data["instance_type"]),
            region=str(data.get("region") or "us-east-1"),
            on_demand_usd_per_hour=str(data["on_demand_usd_per_hour"]),
            deadline=parse_instant(deadline, name="deadline") if deadline else None,
            tags={str(k): str(v) for k, v in dict(data.get("tags") or {}).items()},
            estimated_usd=str(estimated) if estimated is not None else None,
            first_market=str(data.get("first_market") or "on_demand"),
            # A state written before the interval was in the plan: count no work as kept (from above).
            checkpoint_every_seconds=_optional_float(data.get("checkpoint_every_seconds")),
            watch=PriceWatch.from_json(watch) if watch else None,
            billing=Billing.from_json(billing) if billing else None,
            # A state written before zones were in the plan: one zone, the guard at its defaults.
            placement=Placement.from_json(data.get("placement") or {}),
            first_market_reason=str(data.get("first_market_reason") or ""),
            max_usd=str(data["max_usd"]) if data.get("max_usd") is not None else None,
            max_usd_note=str(data.get("max_usd_note") or ""),
        )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
