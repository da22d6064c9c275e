"""The compute backend protocol: submit a training job, poll it, stop it, read its logs.

Every job runs under the launcher with the job contract's environment
(``costaware.adapters.compute.job_contract``, docs/own-training.md): a team's own command as
``costaware-run -- <command...>``, the built-in trainers as ``costaware-run --no-outputs -- python -m
costaware.training.entrypoint --spec URI`` (they store their model version themselves). ``submit`` is
idempotent by job name: submitting a name that already exists returns that job, so an Airflow retry never
starts a second job for the same attempt. ``poll`` reports one of five states plus what the backend bills
for the job.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

# The job contract, the zone names and the store locations live in modules of their own; every name stays
# importable from here, where DAGs, docs and other modules name it.
from costaware.adapters.compute.job_tags import job_tags
from costaware.adapters.compute.jobs import (
    BILLED_AT_ON_DEMAND,
    COPY_SECONDS_BY_TYPE,
    COPY_SECONDS_LEFT,
    ESTIMATED_SECONDS,
    MARKETS,
    SEEN_BILLABLE_SECONDS,
    STOP_REQUESTED_AT,
    TRAINED_RUNS_SECONDS,
    TRAINING_NOW,
    FoundJob,
    JobRequest,
    JobState,
    JobStatus,
    check_market,
    with_copies_run_out,
)
from costaware.adapters.compute.node_labels import (
    capacity_label_key,
    capacity_label_values,
    node_selector_labels,
)
from costaware.adapters.compute.store_locations import (
    FILE_LOCATIONS,
    REMOTE_BACKENDS,
    expand_home,
    local_job_env,
    require_ec2_instance_type,
    require_object_store,
    require_s3,
    require_usable_locations,
)
from costaware.adapters.compute.zone_names import (
    check_aws_regions,
    check_aws_zone,
    check_zone,
    closest_regions,
    is_aws_region,
    placeable_zone,
    zone_check,
)
from costaware.core.errors import ConfigurationError, check_keywords, did_you_mean

_log = logging.getLogger(__name__)

__all__ = [
    "BACKENDS",
    "BILLED_AT_ON_DEMAND",
    "COPY_SECONDS_BY_TYPE",
    "COPY_SECONDS_LEFT",
    "ESTIMATED_SECONDS",
    "FILE_LOCATIONS",
    "MARKETS",
    "REMOTE_BACKENDS",
    "SEEN_BILLABLE_SECONDS",
    "STOP_REQUESTED_AT",
    "TRAINED_RUNS_SECONDS",
    "TRAINING_NOW",
    "ComputeBackend",
    "FoundJob",
    "JobRequest",
    "JobState",
    "JobStatus",
    "backend_class",
    "billed_instances",
    "capacity_label_key",
    "capacity_label_values",
    "check_aws_regions",
    "check_aws_zone",
    "check_backend",
    "check_backend_options",
    "check_market",
    "check_zone",
    "closest_regions",
    "container_environment",
    "expand_home",
    "is_aws_region",
    "job_tags",
    "local_job_env",
    "node_selector_labels",
    "open_backend",
    "placeable_zone",
    "require_ec2_instance_type",
    "require_object_store",
    "require_s3",
    "require_usable_locations",
    "require_zone_placement",
    "whole_number",
    "with_copies_run_out",
    "zone_check",
]

#: Backend names and the class that implements each (module path, class name).
BACKENDS: dict[str, tuple[str, str]] = {
    "local": ("costaware.adapters.compute.local", "LocalBackend"),
    "sagemaker": ("costaware.adapters.compute.sagemaker", "SageMakerBackend"),
    "batch": ("costaware.adapters.compute.batch", "BatchBackend"),
    "kubernetes": ("costaware.adapters.compute.kubernetes", "KubernetesBackend"),
}


def check_backend(name: object) -> str:
    """``name`` if it is a compute backend's name (a key of :data:`BACKENDS`).

    Raises:
        ConfigurationError: any other value, named, with the known names.
    """
    if not isinstance(name, str) or name not in BACKENDS:
        close = did_you_mean(name.lower(), BACKENDS) if isinstance(name, str) else ""
        raise ConfigurationError(f"unknown compute backend {name!r}{close}: use one of {', '.join(BACKENDS)}")
    return name


def require_zone_placement(
    backend_name: str, zones: Sequence[str], options: Mapping[str, Any] | None = None
) -> None:
    """Refuse ``zones`` on a backend that cannot place jobs by zone (its class has ``places_zones = False``).

    Called before any job is submitted, so that a spot-across-zones setting fails at once instead of at the
    first preemption. No zones is always fine. A backend class whose options say where each zone's jobs go
    also has ``check_zones(options, zones)``, asked here (Batch: a spot queue per zone).

    Args:
        backend_name: The backend name (``local``, ``sagemaker``, ``batch``, ``kubernetes``).
        zones: The zones attempts may be placed in; each must be a valid zone name.
        options: The backend's options (None: the zones are not checked against them).

    Raises:
        ConfigurationError: an unknown backend, a bad zone name, zones on a backend that cannot place by
            zone (SageMaker), or a zone its options do not place, with what to do.
    """
    if not zones:
        return
    if isinstance(zones, str):
        raise ConfigurationError(f"zones must be a list of zone names, got the string {zones!r}")
    for zone in zones:
        zone_check(backend_name)(zone)
    if not getattr(backend_class(backend_name), "places_zones", False):
        label = REMOTE_BACKENDS.get(backend_name, backend_name)
        raise ConfigurationError(
            f"the {backend_name} backend cannot place a job in zones {', '.join(map(repr, zones))}: {label} "
            "chooses the zone itself and its API takes none; use the batch or kubernetes backend to move "
            "spot attempts across zones, or leave zones unset"
        )
    check_zones = getattr(backend_class(backend_name), "check_zones", None)
    if check_zones is not None and options is not None:
        check_zones(dict(options), tuple(zones))


def whole_number(value: object, name: str, *, low: int, high: int) -> int:
    """A backend option that is a whole number from ``low`` to ``high`` (templated options arrive as text).

    Raises:
        ConfigurationError: anything else, naming the option and its value (it was a bare TypeError or
            ValueError at the first submit).
    """
    from decimal import Decimal, InvalidOperation

    try:
        exact = Decimal(str(value).strip()) if not isinstance(value, bool) else None
    except InvalidOperation:
        exact = None
    # 30, "30", 30.0 and "30.0" alike (a template renders 1.0 for one instance); 30.5 is no whole number.
    number = (
        int(exact) if exact is not None and exact.is_finite() and exact == exact.to_integral_value() else None
    )
    if number is None or not low <= number <= high:
        raise ConfigurationError(
            f"backend option {name} must be a whole number from {low} to {high}, got {value!r}"
        )
    return number


def billed_instances(options: Mapping[str, Any]) -> int:
    """How many instances one job bills, from its backend's options (SageMaker's ``instance_count``; else 1).

    A job's ``billable_seconds`` count all of them (instance-seconds): time added to them from the outside
    (a stopped job's grace period) is multiplied by this.
    """
    written = options.get("instance_count") or 1
    try:
        return whole_number(written, "instance_count", low=1, high=1000)
    except ConfigurationError:
        ran = _older_instance_count(written)
        if ran is None:
            raise
    # Options are checked at the task's start and submit since 2bc46ce7; a job submitted before ea3be43c
    # ran with int() of what was written (1.5 as 1, "2" as 2, no upper bound) and is billed as it ran.
    _log.warning(
        "instance_count %r is no whole number from 1 to 1000: its job, submitted by an older costaware "
        "that sent int() of it, is billed as %d instance(s)",
        written,
        ran,
    )
    return ran


def _older_instance_count(written: object) -> int | None:
    """The InstanceCount a costaware before ea3be43c sent for ``written`` (``int()``), None: none it sent."""
    try:
        ran = int(written)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None
    return ran if ran >= 1 else None  # botocore refuses an InstanceCount under 1 before any request


@runtime_checkable
class ComputeBackend(Protocol):
    """Where training jobs run; see the module docstring for the contract.

    Each backend class also sets ``places_zones``: whether it honours ``JobRequest.availability_zone``
    (:func:`require_zone_placement` reads it), and may have a static ``check_zones(options, zones)`` that
    refuses zones its options do not place, and a static ``check_option_values(options)`` that
    :func:`check_backend_options` asks (values only a submit reads, so not its constructor).
    """

    name: str

    def submit(self, request: JobRequest) -> str:
        """Start the job (or find the one already started under this name); returns its id."""
        ...

    def find(self, job_name: str) -> FoundJob | None:
        """The job already submitted under ``job_name`` (an earlier try's), with when it began, or None."""
        ...

    def poll(self, job_id: str) -> JobStatus:
        """The job's state, billed seconds so far, market and instance type."""
        ...

    def stop(self, job_id: str) -> None:
        """Ask the job to stop (SIGTERM first, so it checkpoints)."""
        ...

    def logs(self, job_id: str, tail: int = 20) -> str:
        """The last ``tail`` lines of the job's log (or the backend's status messages)."""
        ...


def backend_class(name: str) -> type:
    """The class of backend ``name`` (its module imported now).

    Raises:
        ConfigurationError: an unknown backend name.
    """
    module, cls = BACKENDS[check_backend(name)]
    found: type = getattr(importlib.import_module(module), cls)
    return found


def open_backend(name: str, options: Mapping[str, Any] | None = None) -> ComputeBackend:
    """The backend ``name`` (``local``, ``sagemaker``, ``batch``, ``kubernetes``) built with ``options``."""
    given = dict(options or {})
    # Not the job's environment: a trigger opens a running job's backend from its options as written to
    # poll, stop or find it, and one an older release submitted must stay stoppable (the task's start and
    # the backend's submit check it).
    _check_option_names(name, given)
    try:
        backend: ComputeBackend = backend_class(name)(**given)
    except TypeError as e:
        raise ConfigurationError(f"compute backend {name!r} does not take these options: {e}") from e
    return backend


def check_backend_options(name: str, options: Mapping[str, Any]) -> None:
    """Refuse an option backend ``name`` does not take, naming it, the closest option and all of them.

    Raises:
        ConfigurationError: an unknown option (a typo would otherwise be a bare ``__init__`` TypeError), a
            required one left out, a local job's ``env`` that is no mapping, a SageMaker job's
            ``environment`` that is no mapping of strings, SageMaker or Batch ``tags`` that AWS refuses, or
            a Kubernetes ``node_selector``, ``capacity_label`` or ``capacity_values`` of no labels, or a
            number option out of its range (SageMaker's ``instance_count`` and ``volume_size_gb``, Batch's
            ``reclaim_retries`` and ``stop_timeout_seconds``, Kubernetes' ``termination_grace_seconds``).
    """
    _check_option_names(name, options)
    if name == "local":
        local_job_env(options.get("env"))
    if name == "sagemaker":
        container_environment(options.get("environment"))
    if name in ("sagemaker", "batch"):
        job_tags(options.get("tags"), name)
    # Values only a submit reads (node labels, numbers): their modules import this one, so each class is
    # asked (as for check_zones).
    check_values = getattr(backend_class(name), "check_option_values", None)
    if check_values is not None:
        check_values(options)


def _check_option_names(name: str, options: Mapping[str, Any]) -> None:
    """Refuse an option backend ``name`` does not take, or a required one left out (its values unread)."""
    import inspect

    cls = backend_class(name)
    check_keywords(cls, options, field="backend_options", of=f"the {name} backend")
    parameters = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    # A required option left out read as a Python signature error ("__init__() missing 1 required ...").
    required = [
        n
        for n, p in parameters.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    missing = [n for n in required if n not in options]
    if missing:
        raise ConfigurationError(
            f"the {name} backend needs backend_options {', '.join(repr(n) for n in missing)} (see "
            "docs/remote-training.md)"
        )


def container_environment(environment: object) -> dict[str, str]:
    """The ``environment`` option as SageMaker's ``Environment`` takes it: each name and value a string.

    Checked before anything is submitted: a string raised a bare ``ValueError`` from ``dict()`` after the
    task had reserved its money, a list of pairs was taken as it came, and a number was refused by botocore
    only at the create.

    Raises:
        ConfigurationError: ``environment`` is neither a mapping nor None, or has a name or value that is no
            string, named with what was given and what to write instead.
    """
    if environment is None:
        return {}
    what = "backend_options['environment'] of the sagemaker backend"
    if not isinstance(environment, Mapping):
        raise ConfigurationError(
            f"{what} must be a dict of variable name to string value, such as {{'PYTHONPATH': "
            f"'/opt/ml/code'}}: got the {type(environment).__name__} {environment!r}"
        )
    for name, value in environment.items():
        if not isinstance(name, str):
            raise ConfigurationError(
                f"{what} names a variable with the {type(name).__name__} {name!r}: SageMaker takes only "
                f"string names; write it as {str(name)!r}"
            )
        if value is None:
            # "write it as 'None'" would set the text None.
            raise ConfigurationError(
                f"{what} gives {name!r} None: SageMaker takes only string values; leave the variable out to "
                "have it unset, or give it a string"
            )
        if isinstance(value, bool):
            # What the job reads as true is its own: 'True' (str()) may not be it.
            raise ConfigurationError(
                f"{what} gives {name!r} the bool {value!r}: SageMaker takes only string values; write it as "
                "the text the job reads, such as 'true' or 'false'"
            )
        if not isinstance(value, str):
            raise ConfigurationError(
                f"{what} gives {name!r} the {type(value).__name__} {value!r}: SageMaker takes only string "
                f"values; write it as {str(value)!r}"
            )
    return dict(environment)
