"""The Kubernetes backend's node labels, checked as the API server checks them, before any pod.

``node_selector``, ``capacity_label`` and ``capacity_values`` all go into every pod's ``nodeSelector``.

It went through ``dict(node_selector or {})`` as it came: text was a bare ``ValueError`` once the task had
reserved its money, and a number or a key or value that is no label was refused by the API server only at
the pod's create. The API server validates a pod's ``nodeSelector`` as labels (``ValidatePodSpec`` calls
``ValidateLabels``); the rules are those of Kubernetes' ``IsLabelKey`` and ``IsLabelValue``
(k8s.io/apimachinery/pkg/api/validate/content/kube.go).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from costaware.adapters.compute.jobs import MARKETS
from costaware.core.errors import ConfigurationError, visible_repr

KARPENTER_LABEL = "karpenter.sh/capacity-type"
KARPENTER_VALUES = {"spot": "spot", "on_demand": "on-demand"}
EKS_LABEL = "eks.amazonaws.com/capacityType"
EKS_VALUES = {"spot": "SPOT", "on_demand": "ON_DEMAND"}

#: A label key's name part and a label value (IsLabelKey, IsLabelValue: at most 63 characters each).
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_MAX_CHARS = 63
#: A label key's optional prefix: a lowercase DNS-1123 subdomain of at most 253 characters.
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_SUBDOMAIN_MAX_CHARS = 253

#: What a label key and a label value may be, for messages.
LABEL_KEY_RULE = (
    "a name of 1 to 63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit, after "
    "an optional lowercase DNS subdomain and '/' (e.g. 'example.com/team')"
)
LABEL_VALUE_RULE = "'' or up to 63 letters, digits, '-', '_' or '.' that start and end with a letter or digit"


def node_selector_labels(selector: object) -> dict[str, str]:
    """``node_selector`` (backend_options) as a dict of node label key to value the API server takes.

    Raises:
        ConfigurationError: ``selector`` is neither a mapping nor None, or has a key or value that is no
            string or no Kubernetes label key or value; named, with what to write instead.
    """
    if selector is None:
        return {}
    what = "backend_options['node_selector'] of the kubernetes backend"
    if not isinstance(selector, Mapping):
        pairs = _pairs_dict(selector)
        write = f"; write it as {pairs!r}" if pairs else ""
        example = "" if write else ", such as {'team': 'ml'}"
        raise ConfigurationError(
            f"{what} must be a dict of node label to value{example}: got the {type(selector).__name__} "
            f"{selector!r}{write}"
        )
    for key, value in selector.items():
        if not isinstance(key, str):
            raise ConfigurationError(
                f"{what} has the {type(key).__name__} {key!r} as a key: node labels are strings; write it as "
                f"{str(key)!r}"
            )
        if not isinstance(value, str):
            raise ConfigurationError(
                f"{what} gives {key!r} the {type(value).__name__} {value!r}: node label values are strings; "
                f"write it as {'' if value is None else str(value)!r}"
            )
        if not is_label_key(key):
            raise ConfigurationError(
                f"{what} has the key {visible_repr(key)}, which is no Kubernetes label: {LABEL_KEY_RULE}"
            )
        if not is_label_value(value):
            raise ConfigurationError(
                f"{what} gives {key!r} the value {visible_repr(value)}, which is no Kubernetes label value: "
                f"{LABEL_VALUE_RULE}"
            )
    return dict(selector)


def _pairs_dict(selector: object) -> dict[object, object] | None:
    """The dict a non-empty list of pairs means, else None (a key no dict can hold, such as a list, too)."""
    if not (
        isinstance(selector, list | tuple)
        and selector
        and all(isinstance(pair, list | tuple) and len(pair) == 2 for pair in selector)
    ):
        return None
    try:
        return dict(selector)
    except TypeError:
        return None


def capacity_label_key(label: object) -> str:
    """``capacity_label``, the node label that tells spot from on-demand, as a Kubernetes label key.

    Raises:
        ConfigurationError: no string or no label key: every pod's nodeSelector carries it, and the API
            server refused each at its create.
    """
    if not (isinstance(label, str) and is_label_key(label)):
        raise ConfigurationError(f"capacity_label {label!r} is no Kubernetes label: {LABEL_KEY_RULE}")
    return label


def capacity_label_values(values: object) -> dict[str, str] | None:
    """``capacity_values`` with a label value for each market, or None (the label's defaults).

    Raises:
        ConfigurationError: a market without a value, a key that is no market, or a value that is no label
            value: a pod of that market failed at its submit, an on-demand fallback after the spot attempts
            had been paid for.
    """
    if not values:
        return None
    if not isinstance(values, Mapping):
        raise ConfigurationError(
            f"capacity_values must map each market to its node label value, got {values!r}: e.g. "
            f"{EKS_VALUES!r}"
        )
    given = {str(k): str(v) for k, v in values.items()}
    missing = [market for market in MARKETS if not given.get(market, "").strip()]
    unknown = sorted(set(given) - set(MARKETS))
    if missing or unknown:
        raise ConfigurationError(
            f"capacity_values {given!r} must give a node label value for each of {', '.join(MARKETS)} "
            f"(missing: {', '.join(missing) or 'none'}; not a market: {', '.join(unknown) or 'none'})"
        )
    for market, value in given.items():
        if not is_label_value(value):
            raise ConfigurationError(
                f"capacity_values gives {market!r} the value {value!r}, which is no Kubernetes label value: "
                f"{LABEL_VALUE_RULE}"
            )
    return given


def is_label_key(key: str) -> bool:
    """Whether ``key`` is a Kubernetes label key: ``[prefix/]name`` (IsLabelKey)."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= DNS_SUBDOMAIN_MAX_CHARS and DNS_SUBDOMAIN.fullmatch(prefix)):
        return False  # an empty prefix, a second '/', or no DNS subdomain
    return len(name) <= LABEL_MAX_CHARS and LABEL_NAME.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a Kubernetes label value, the empty one included (IsLabelValue)."""
    return value == "" or (len(value) <= LABEL_MAX_CHARS and LABEL_NAME.fullmatch(value) is not None)
