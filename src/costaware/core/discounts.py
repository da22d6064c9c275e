"""Negotiated discounts on on-demand prices (savings plans, enterprise agreements), per team or family.

Written in the ``[costaware] discounts`` setting as ``kind:name=percent`` entries separated by commas:
``team:ml=12, family:p4d=30, family:ml.g5=8``. ``team`` matches the run's ``team`` tag; ``family`` matches
the instance family (``p4d`` for ``p4d.24xlarge``; ``ml.g5`` for SageMaker's ``ml.g5.xlarge``, which also
matches ``family:g5``). When several match, the largest applies: discounts do not stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from costaware.core.errors import ConfigurationError
from costaware.core.money import MICRO_USD

KINDS = ("team", "family")


#: The largest discount taken, in percent.
MAX_PCT = Decimal(99)


@dataclass(frozen=True, slots=True)
class Discount:
    """A percentage off on-demand list prices for one team or one instance family."""

    kind: str
    name: str
    pct: Decimal

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(f"discount kind must be team or family, got {self.kind!r}")
        if not self.name:
            raise ConfigurationError(f"a {self.kind} discount needs a name, e.g. {self.kind}:ml=10")
        # At most 99: no price plan takes more, and 99.9999999 priced every hour at $0 in silence.
        if not self.pct.is_finite() or not 0 < self.pct <= MAX_PCT:
            raise ConfigurationError(
                f"discount {self.kind}:{self.name} must be a percentage above 0 and at most {MAX_PCT}, got "
                f"{self.pct}"
            )

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.name}"


def parse_discounts(text: str) -> tuple[Discount, ...]:
    """The rules of a ``discounts`` setting (empty text: none).

    Raises:
        ConfigurationError: an entry is not ``team:<name>=<percent>`` or ``family:<name>=<percent>``, or
            names the same team or family twice.
    """
    rules: dict[tuple[str, str], Discount] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        target, found, pct = entry.partition("=")
        kind, colon, name = target.strip().partition(":")
        try:
            value = Decimal(pct.strip().removesuffix("%"))
        except InvalidOperation:
            value = None
        if not found or not colon or value is None:
            raise ConfigurationError(
                f"[costaware] discounts: cannot read {entry!r}; "
                "write entries like 'team:ml=12, family:p4d=30'"
            )
        rule = Discount(kind.strip().lower(), name.strip(), value)
        if rule.kind == "family":
            rule = _family_rule(rule, entry)
        if (rule.kind, rule.name) in rules:
            raise ConfigurationError(f"[costaware] discounts: {rule.label} is given twice")
        rules[(rule.kind, rule.name)] = rule
    return tuple(rules.values())


def _family_rule(rule: Discount, entry: str) -> Discount:
    """A family as instance types name it: lower case, no size (they matched nothing, silently).

    Raises:
        ConfigurationError: a size is given (``p4d.24xlarge``): the rule names a family.
    """
    name = rule.name.lower()
    parts = name.split(".")
    if len(parts) > (2 if parts[0] == "ml" else 1):
        raise ConfigurationError(
            f"[costaware] discounts: {entry!r} names an instance size; a family rule names the family, "
            f"e.g. family:{instance_family(name)}={rule.pct}"
        )
    return Discount(rule.kind, name, rule.pct)


def instance_family(instance_type: str) -> str:
    """``p4d`` for ``p4d.24xlarge``, ``ml.g5`` for ``ml.g5.xlarge``."""
    parts = instance_type.split(".")
    return ".".join(parts[:2]) if parts[0] == "ml" else parts[0]


def discount_for(
    rules: Sequence[Discount], instance_type: str, tags: Mapping[str, str] | None = None
) -> Discount | None:
    """The largest discount that applies to ``instance_type`` run by the team in ``tags``, or None."""
    family = instance_family(instance_type)
    families = {family, family.removeprefix("ml.")}
    team = (tags or {}).get("team")
    matching = [
        r
        for r in rules
        if (r.kind == "family" and r.name in families) or (r.kind == "team" and r.name == team)
    ]
    return max(matching, key=lambda r: r.pct, default=None)


def apply_discount(usd_per_hour: Decimal, discount: Discount | None) -> Decimal:
    """The price after the discount, to the micro-dollar (unchanged without one)."""
    if discount is None:
        return usd_per_hour
    return (usd_per_hour * (100 - discount.pct) / 100).quantize(MICRO_USD)
