"""The search space: which hyperparameters a study samples, over which ranges or choices.

A space arrives as JSON (from a DAG's arguments or a template) and is checked here, once, with errors that
name the parameter, so that a bad range fails the task before any trial has been paid for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from costaware.core.errors import ConfigurationError, did_you_mean

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


#: The keys each kind of parameter takes (a typo such as "lgo" is refused, not ignored).
_RANGE_KEYS = frozenset({"type", "low", "high", "log", "step"})
_KEYS = {"float": _RANGE_KEYS, "int": _RANGE_KEYS, "categorical": frozenset({"type", "choices"})}


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
        known = _KEYS[kind]
        unknown = sorted(str(k) for k in raw if k not in known)
        if unknown:  # "lgo": true was a linear range without a word
            raise ConfigurationError(
                f"search space entry {name!r} has unknown key(s) {', '.join(map(repr, unknown))}"
                f"{did_you_mean(unknown[0], known)}: a {kind} parameter takes {', '.join(sorted(known))}"
            )
        if kind == "categorical":
            raw_choices = raw.get("choices")
            if isinstance(raw_choices, str | bytes | Mapping):  # "abc" was three choices: a, b, c
                raise ConfigurationError(
                    f"categorical parameter {name!r} needs 'choices' as a list, got {raw_choices!r}"
                )
            choices = tuple(raw_choices or ())
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
        log = raw.get("log", False)
        if not isinstance(log, bool):  # "false" as text read as true
            raise ConfigurationError(
                f"parameter {name!r} has log {log!r}, a {type(log).__name__}: write the JSON value true or "
                "false (Python True or False), without quotes"
            )
        try:
            step = None if raw.get("step") is None else float(raw["step"])
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"parameter {name!r} has step {raw['step']!r}: a step is a number"
            ) from None
        if not (math.isfinite(low) and math.isfinite(high)) or low > high:
            raise ConfigurationError(
                f"parameter {name!r} has an empty range [{low}, {high}]: need low <= high"
            )
        if log and low <= 0:
            raise ConfigurationError(f"parameter {name!r} is log-scaled, so low must be > 0, got {low}")
        # nan passed "step <= 0" and inf too; an int one then failed with a bare ValueError/OverflowError.
        if step is not None and (not math.isfinite(step) or step <= 0 or log):
            raise ConfigurationError(
                f"parameter {name!r} has step {raw['step']!r}: a step must be a finite number > 0 and cannot "
                "be combined with log"
            )
        if kind == "int" and (low != int(low) or high != int(high)):
            raise ConfigurationError(f"int parameter {name!r} needs whole bounds, got [{low}, {high}]")
        if kind == "int" and step is not None and step != int(step):
            raise ConfigurationError(f"int parameter {name!r} needs a whole step, got {raw['step']!r}")
        specs.append(ParamSpec(str(name), kind, low, high, log, step))
    return tuple(specs)
