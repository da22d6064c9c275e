"""A study's settings: everything a trial slot needs, stored with the study so every worker reads the same."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from costaware.core.budgets import Scope
from costaware.core.errors import ConfigurationError
from costaware.core.tuning.caps import TuningCaps
from costaware.core.tuning.rungs import RungSchedule
from costaware.core.tuning.search_space import ParamSpec, parse_search_space

DIRECTIONS = ("maximize", "minimize")
PRUNERS = ("successive_halving", "hyperband", "none")
SAMPLERS = ("tpe", "random")


#: Tags a study's ledger entries carry of their own: a ``scope`` may not name them (``study`` would be
#: dropped for the study's name, and a trial's ``trial_state`` or ``fidelity`` would take its entries out of
#: the budget scope, so the cap would never bind).
RESERVED_SCOPE_KEYS = ("study", "trial_state", "fidelity")


def check_study_scope(scope: Mapping[str, str]) -> None:
    """Refuse a scope key that the study's own entries use (named, with why)."""
    taken = [key for key in scope if key in RESERVED_SCOPE_KEYS]
    if taken:
        raise ConfigurationError(
            f"scope names {', '.join(map(repr, taken))}, which the study's own ledger entries use "
            f"({', '.join(RESERVED_SCOPE_KEYS)}): name the study with study_name and choose other tag names"
        )


def check_study_choices(*, direction: str, pruner: str, sampler: str) -> None:
    """Refuse a direction, pruner or sampler that is not one of the known names (named, with the choices)."""
    for name, value, choices in (
        ("direction", direction, DIRECTIONS),
        ("pruner", pruner, PRUNERS),
        ("sampler", sampler, SAMPLERS),
    ):
        if value not in choices:
            raise ConfigurationError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


@dataclass(frozen=True, slots=True)
class StudySpec:
    """Everything a trial slot needs to run a trial; stored with the study so every worker reads the same.

    Each trial reserves its estimated full-fidelity seconds (see
    :func:`~costaware.core.tuning.costs.estimate_trial_seconds`) plus ``slack_seconds`` for what follows
    training and a busy worker's scheduling noise; what it does not use returns to the budget when it settles.
    """

    study_name: str
    direction: str
    search_space: tuple[ParamSpec, ...]
    schedule: RungSchedule
    caps: TuningCaps
    pruner: str = "successive_halving"
    sampler: str = "tpe"
    seed: int = 0
    scope: Mapping[str, str] = field(default_factory=dict)
    instance_type: str = "m5.large"
    region: str = "us-east-1"
    market: str = "on_demand"
    usd_per_hour: Decimal = Decimal("0.096")
    gpus: Decimal = Decimal(0)
    fallback_trial_seconds: float = 600.0
    safety_factor: float = 1.5
    slack_seconds: float = 2.0

    def __post_init__(self) -> None:
        check_study_choices(direction=self.direction, pruner=self.pruner, sampler=self.sampler)
        if not self.study_name or any(c in self.study_name for c in ",="):
            raise ConfigurationError(
                f"study_name {self.study_name!r} must be non-empty, without ',' or '=' (it is a ledger tag)"
            )
        if not self.usd_per_hour.is_finite() or self.usd_per_hour < 0:
            raise ConfigurationError(f"usd_per_hour must be >= 0, got {self.usd_per_hour}")
        if self.fallback_trial_seconds <= 0 or not math.isfinite(self.fallback_trial_seconds):
            raise ConfigurationError(
                f"fallback_trial_seconds must be > 0 (the cost estimate before any trial finished), "
                f"got {self.fallback_trial_seconds}"
            )
        if self.safety_factor < 1:
            raise ConfigurationError(f"safety_factor must be >= 1, got {self.safety_factor}")
        if not (self.slack_seconds >= 0 and math.isfinite(self.slack_seconds)):
            raise ConfigurationError(f"slack_seconds must be >= 0, got {self.slack_seconds}")

    @property
    def budget_scope(self) -> Scope:
        """The ledger scope of the study's own budget: its tags plus ``study=<name>``."""
        return Scope.of({**dict(self.scope), "study": self.study_name})

    def to_json(self) -> dict[str, Any]:
        return {
            "study_name": self.study_name,
            "direction": self.direction,
            "search_space": {p.name: p.to_json() for p in self.search_space},
            "rungs": list(self.schedule.rungs),
            "reduction_factor": self.schedule.reduction_factor,
            "caps": self.caps.to_json(),
            "pruner": self.pruner,
            "sampler": self.sampler,
            "seed": self.seed,
            "scope": dict(self.scope),
            "instance_type": self.instance_type,
            "region": self.region,
            "market": self.market,
            "usd_per_hour": str(self.usd_per_hour),
            "gpus": str(self.gpus),
            "fallback_trial_seconds": self.fallback_trial_seconds,
            "safety_factor": self.safety_factor,
            "slack_seconds": self.slack_seconds,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StudySpec:
        values = dict(data)
        return cls(
            study_name=str(values["study_name"]),
            direction=str(values["direction"]),
            search_space=parse_search_space(values["search_space"]),
            schedule=RungSchedule(tuple(int(r) for r in values["rungs"]), int(values["reduction_factor"])),
            caps=TuningCaps.from_json(values["caps"]),
            pruner=str(values["pruner"]),
            sampler=str(values["sampler"]),
            seed=int(values["seed"]),
            scope=dict(values.get("scope") or {}),
            instance_type=str(values["instance_type"]),
            region=str(values["region"]),
            market=str(values["market"]),
            usd_per_hour=Decimal(str(values["usd_per_hour"])),
            gpus=Decimal(str(values.get("gpus", "0"))),
            fallback_trial_seconds=float(values["fallback_trial_seconds"]),
            safety_factor=float(values["safety_factor"]),
            slack_seconds=float(values.get("slack_seconds", 2.0)),
        )
