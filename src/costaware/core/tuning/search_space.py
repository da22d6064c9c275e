"""The search space: which hyperparameters a study samples, over which ranges or choices.

A space arrives as JSON (from a DAG's arguments or a template) and is checked here, once, with errors that
name the parameter, so that a bad range fails the task before any trial has been paid for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from costaware.core.errors import ConfigurationError

PARAM_KINDS = ("float", "int", "categorical")


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One hyperparameter: a float or int range (optionally log-scaled or stepped) or a list of choices."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def to_json(self) -> dict[str, Any]:
        if self.kind == "categorical":
            return {"type": "categorical", "choices": list(self.choices)}
        out: dict[str, Any] = {"type": self.kind, "low": self.low, "high": self.high, "log": self.log}
        if self.step is not None:
            out["step"] = self.step
        return out


def parse_search_space(space: Mapping[str, Mapping[str, Any]]) -> tuple[ParamSpec, ...]:
    """Validate a JSON search space.

    For example ``{"learning_rate": {"type": "float", "low": 0.01, "high": 0.3, "log": true},
    "max_leaf_nodes": {"type": "categorical", "choices": [15, 31, 63]}}``.

    Raises:
        ConfigurationError: the space is empty, a type is unknown, a range is empty or a log range
            includes zero, or a categorical has no choices; the message names the parameter.
    """
    if not isinstance(space, Mapping) or not space:
        raise ConfigurationError(
            f"search_space must be a non-empty mapping of parameter name to spec, got {space!r}"
        )
    specs = []
    for name, raw in space.items():
        if not isinstance(raw, Mapping):
            raise ConfigurationError(
                f"search space entry {name!r} must be a mapping such as "
                f"{{'type': 'float', 'low': 0.01, 'high': 0.3}}, got {raw!r}"
            )
        kind = str(raw.get("type", "")).lower()
        if kind not in PARAM_KINDS:
            raise ConfigurationError(
                f"search space entry {name!r} has type {raw.get('type')!r}: "
                f"use one of {', '.join(PARAM_KINDS)}"
            )
        if kind == "categorical":
            choices = tuple(raw.get("choices") or ())
            if not choices:
                raise ConfigurationError(f"categorical parameter {name!r} needs a non-empty 'choices' list")
            specs.append(ParamSpec(str(name), kind, choices=choices))
            continue
        try:
            low, high = float(raw["low"]), float(raw["high"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigurationError(
                f"{kind} parameter {name!r} needs numeric 'low' and 'high', got {dict(raw)!r}"
            ) from e
        log = bool(raw.get("log", False))
        step = None if raw.get("step") is None else float(raw["step"])
        if not (math.isfinite(low) and math.isfinite(high)) or low > high:
            raise ConfigurationError(
                f"parameter {name!r} has an empty range [{low}, {high}]: need low <= high"
            )
        if log and low <= 0:
            raise ConfigurationError(f"parameter {name!r} is log-scaled, so low must be > 0, got {low}")
        if step is not None and (step <= 0 or log):
            raise ConfigurationError(
                f"parameter {name!r} has step {step}: a step must be > 0 and cannot be combined with log"
            )
        if kind == "int" and (low != int(low) or high != int(high)):
            raise ConfigurationError(f"int parameter {name!r} needs whole bounds, got [{low}, {high}]")
        specs.append(ParamSpec(str(name), kind, low, high, log, step))
    return tuple(specs)
