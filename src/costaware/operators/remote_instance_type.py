"""``RemoteTrainingOperator``'s instance type written out in the DAG, checked as each backend names types.

SageMaker names its types ``ml.g5.xlarge``; Batch and Kubernetes (EKS nodes) run on EC2's ``g5.xlarge``; the
local backend runs here and only records the name. A misspelt type ("ml.g5.xlarg", "g5.xlarge ") was refused
by SageMaker or Batch at the submit, after the spend gate had reserved the money, and the local backend took
it without a word.
"""

from __future__ import annotations

import re

from costaware.core.errors import ConfigurationError
from costaware.core.given import blank
from costaware.operators.templating import is_literal

# The sizes AWS sells (xlarge, 24xlarge, metal-48xl, ...): a name with another one is no AWS type at all.
_AWS_TYPE = re.compile(
    r"(?:ml\.)?[a-z][a-z0-9-]*\.(?:\d*xlarge|large|medium|small|micro|nano|metal(?:-\d+xl)?)"
)
_EC2_BACKENDS = ("batch", "kubernetes")
_AWS_BACKENDS = ("sagemaker", *_EC2_BACKENDS)


def check_written_instance_type(instance_type: object, backend: object) -> str | None:
    """Refuse an instance type written out that ``backend`` cannot run on; why it may be a typo, or None.

    Refused, with the nearest known types: blanks around the name (on any backend), an ``ml.*`` type on
    Batch or Kubernetes or an EC2 type on SageMaker, and on those three a name no AWS type has the shape
    of ("g5.xlarg"). Only warned of: a name of that shape the bundled EC2 price list lacks, as the
    SpotWindowSensor does, since the run prices it from the price cache and live prices first (newer AWS
    types, imported prices), and the local backend's types may be the team's own names. A template of
    either argument is read when the task runs.

    Args:
        instance_type: ``instance_type`` as written in the DAG.
        backend: ``backend`` as written in the DAG ("local", "sagemaker", "batch", "kubernetes").

    Returns:
        The warning to log when the DAG is parsed, or None.

    Raises:
        ConfigurationError: a type the backend refuses, named with the types meant.
    """
    if not is_literal(instance_type) or blank(instance_type) is None:
        return None
    name = str(instance_type)
    backend_name = str(backend or "local") if is_literal(backend) else None
    if name != name.strip():
        raise ConfigurationError(
            f"instance_type {name!r} has blanks around it, which no backend's type has: write "
            f"{name.strip()!r}"
        )
    if backend_name in _EC2_BACKENDS and name.startswith("ml."):
        raise ConfigurationError(
            f"instance_type {name!r} is a SageMaker type, but the {backend_name} backend runs on EC2 "
            f"instances: write {name.removeprefix('ml.')!r}, or use the sagemaker backend"
        )
    if backend_name == "sagemaker" and not name.startswith("ml."):
        raise ConfigurationError(
            f"instance_type {name!r} is no SageMaker type: SageMaker names its types with 'ml.', write "
            f"'ml.{name}' (priced at SageMaker's prices, not EC2's)"
        )
    sagemaker = name.startswith("ml.")
    unlisted = _not_in_price_list(name.removeprefix("ml."))
    if unlisted is None:
        return None
    nearest = [f"ml.{close}" if sagemaker else close for close in unlisted]
    hint = f"; the nearest known: {', '.join(nearest)}" if nearest else "; see `costaware prices list`"
    if backend_name in _AWS_BACKENDS and not _AWS_TYPE.fullmatch(name):
        # The local backend (or a templated one, which may render local) runs on names of the team's own.
        raise ConfigurationError(
            f"instance_type {name!r} is no AWS instance type (family.size, e.g. "
            f"{'ml.g5.xlarge' if sagemaker else 'g5.xlarge'}){hint}"
        )
    return (
        f"instance_type {name!r} is not in the bundled EC2 price list{hint}: if it is a typo, correct it; "
        "the run prices it from the price cache (`costaware prices refresh` or `import`), live prices, then "
        "that list, and refuses it there if none has it, unless on_demand_usd_per_hour is given"
    )


def _not_in_price_list(ec2_name: str) -> list[str] | None:
    """None where the bundled price list has ``ec2_name``; else its nearest names there (maybe none)."""
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.prices import closest_names

    known = bundled_catalog().instance_types
    if ec2_name in known:
        return None
    return closest_names(ec2_name, known)
