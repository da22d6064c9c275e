"""Scheduling policies, one strategy per module, and the registry ``costaware simulate --policy`` reads."""

from __future__ import annotations

from costaware.core.errors import ConfigurationError
from costaware.core.policies.availability_aware import AvailabilityAwarePolicy
from costaware.core.policies.base import Action, Hindsight, Policy, Situation
from costaware.core.policies.cheapest_window import CheapestWindowPausingPolicy, CheapestWindowPolicy
from costaware.core.policies.deadline_aware import DeadlineAwarePolicy
from costaware.core.policies.on_demand_now import OnDemandNowPolicy
from costaware.core.policies.oracle import OraclePolicy
from costaware.core.policies.spot_now import SpotNowPolicy

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        OnDemandNowPolicy,
        SpotNowPolicy,
        CheapestWindowPolicy,
        CheapestWindowPausingPolicy,
        DeadlineAwarePolicy,
        AvailabilityAwarePolicy,
        OraclePolicy,
    )
}

__all__ = [
    "POLICIES",
    "Action",
    "AvailabilityAwarePolicy",
    "CheapestWindowPausingPolicy",
    "CheapestWindowPolicy",
    "DeadlineAwarePolicy",
    "Hindsight",
    "OnDemandNowPolicy",
    "OraclePolicy",
    "Policy",
    "Situation",
    "SpotNowPolicy",
    "policy_class",
]


def policy_class(name: str) -> type[Policy]:
    """The policy registered as ``name``.

    Raises:
        ConfigurationError: unknown name; the message lists the known ones.
    """
    try:
        return POLICIES[name]
    except KeyError:
        raise ConfigurationError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
