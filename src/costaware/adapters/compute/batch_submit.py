"""A Batch job's submit: its ``SubmitJob`` request, its queue, and the job definition that runs its image."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from costaware.adapters.compute.base import JobRequest, require_ec2_instance_type, require_object_store
from costaware.adapters.compute.job_contract import (
    GRACE_SECONDS,
    LAUNCHER_MARGIN_SECONDS,
    launcher_grace_seconds,
)
from costaware.core.errors import ConfigurationError

#: Where a user command's local folders live in the container (writable in any image).
WORK_DIR = "/tmp/costaware"
#: Fields of a job definition that a new revision for another image keeps as they are.
_REVISION_FIELDS = (
    "type",
    "parameters",
    "schedulingPriority",
    "retryStrategy",
    "propagateTags",
    "timeout",
    "tags",
    "platformCapabilities",
)


def submit_job_request(
    request: JobRequest,
    *,
    spot_queue: str,
    on_demand_queue: str,
    job_definition: str,
    tags: Mapping[str, str] | None = None,
    work_dir: str = WORK_DIR,
    spot_queues: Mapping[str, str] | None = None,
    stop_timeout_seconds: float | None = None,
) -> dict[str, Any]:
    """The ``SubmitJob`` request of one attempt (pure); ``job_definition`` is the revision that runs it.

    A spot request with an ``availability_zone`` goes to ``spot_queues[zone]``; an on-demand one to
    ``on_demand_queue`` whatever its zone. Given ECS's ``stop_timeout_seconds`` (SIGTERM to SIGKILL of the
    container), the launcher's grace period ends ``LAUNCHER_MARGIN_SECONDS`` before it, as on Kubernetes:
    the launcher then still pushes the last checkpoint, which a longer grace period had ECS kill mid-push.
    """
    require_object_store(request, "batch")
    require_ec2_instance_type(request, "batch")
    queue = queue_for(
        request, spot_queue=spot_queue, on_demand_queue=on_demand_queue, spot_queues=spot_queues
    )
    environment = request.environment(work_dir=work_dir)
    cut = None if stop_timeout_seconds is None else cut_grace(request.grace_seconds, stop_timeout_seconds)
    if cut is not None:
        environment[GRACE_SECONDS] = f"{cut:g}"
    return {
        "jobName": request.job_name,
        "jobQueue": queue,
        "jobDefinition": job_definition,
        "containerOverrides": {
            "command": request.command(),
            "environment": [{"name": k, "value": v} for k, v in sorted(environment.items())],
        },
        # One attempt: each Batch attempt gets the whole attemptDurationSeconds (and max_usd's stop) again,
        # so a retry inside Batch could run past both; the operator resubmits with what is left. Set here,
        # as the job definition's own retryStrategy would apply otherwise.
        "retryStrategy": {"attempts": 1},
        "timeout": {"attemptDurationSeconds": max(60, int(request.max_runtime_seconds))},
        "tags": {
            **dict(tags or {}),
            "costaware:market": request.market,
            "costaware:instance": request.instance_type,
        },
    }


def cut_grace(grace_seconds: float, stop_timeout_seconds: float) -> float | None:
    """The launcher's grace period where ECS's stop timeout is too short for ``grace_seconds``; else None."""
    if grace_seconds <= stop_timeout_seconds - LAUNCHER_MARGIN_SECONDS:
        return None
    return launcher_grace_seconds(stop_timeout_seconds)


def queue_for(
    request: JobRequest,
    *,
    spot_queue: str,
    on_demand_queue: str,
    spot_queues: Mapping[str, str] | None = None,
) -> str:
    """The job queue of ``request`` (pure): on-demand, spot, or the spot queue of its zone.

    Raises:
        ConfigurationError: a spot request with a zone and no ``spot_queues``, or a zone not in them.
    """
    if request.market != "spot":
        return on_demand_queue  # one on-demand queue: the zone is not placed
    zone = request.availability_zone
    if not zone:
        return spot_queue
    if not spot_queues:
        raise ConfigurationError(
            f"Batch job {request.job_name!r} asks for zone {zone!r} but the backend has no spot_queues: "
            "configure one spot job queue per zone in backend_options, spot_queues={zone: queue}, each on a "
            "SPOT compute environment with subnets in that zone only"
        )
    if zone not in spot_queues:
        raise ConfigurationError(
            f"Batch job {request.job_name!r} asks for zone {zone!r}, which spot_queues does not have (it has "
            f"{', '.join(map(repr, sorted(spot_queues)))}): add a queue for {zone!r} or choose one of those"
        )
    return str(spot_queues[zone])


def _same_queue(described: str, name: str) -> bool:
    """Whether a job's ``jobQueue`` (an ARN) is the configured queue ``name`` (a name or an ARN)."""
    return bool(name) and (described == name or described.endswith(f"/{name}"))


class BatchJobDefinitions:
    """The job definitions of :class:`~costaware.adapters.compute.batch.BatchBackend` (a mixin)."""

    job_definition: str
    region_name: str | None

    if TYPE_CHECKING:

        @property
        def client(self) -> Any: ...

    def _active(self, name: str) -> list[dict[str, Any]]:
        revisions: list[dict[str, Any]] = []
        for page in self.client.get_paginator("describe_job_definitions").paginate(
            jobDefinitionName=name, status="ACTIVE"
        ):
            revisions.extend(page.get("jobDefinitions", []))
        return revisions

    def definition_for(self, image: str) -> str:
        """The job definition that runs ``image``: ``job_definition``, or a copy of it with that image.

        The copy is a job definition of its own, ``<name>-image-<hash of the image>``, so that the latest
        revision of ``job_definition`` (what a job naming it without a revision runs) never changes. A copy
        that matches ``job_definition`` with ``image`` is reused; otherwise a revision of the copy is
        registered.

        Raises:
            ConfigurationError: ``job_definition`` has no active revision, or is not a container job.
        """
        name, _, wanted = self.job_definition.rpartition("/")[2].partition(":")
        revisions = self._active(name)
        chosen = [d for d in revisions if str(d.get("revision")) == wanted] if wanted else revisions
        if not chosen:
            raise ConfigurationError(
                f"Batch job definition {self.job_definition!r} has no active revision in region "
                f"{self.region_name or 'of the connection'}: register it, or fix job_definition"
            )
        base = max(chosen, key=lambda d: int(d.get("revision", 0)))
        properties = dict(base.get("containerProperties") or {})
        if not properties:
            raise ConfigurationError(
                f"Batch job definition {self.job_definition!r} is not a container job: image= works only "
                "with containerProperties; name the image in the job definition instead"
            )
        if properties.get("image") == image:
            return str(base["jobDefinitionArn"])
        wanted_properties = {**properties, "image": image}
        copy = f"{name}-image-{hashlib.sha256(image.encode()).hexdigest()[:12]}"[-128:]
        for other in sorted(self._active(copy), key=lambda d: -int(d.get("revision", 0))):
            if dict(other.get("containerProperties") or {}) == wanted_properties:
                return str(other["jobDefinitionArn"])  # registered for this image before
        kept = {k: base[k] for k in _REVISION_FIELDS if base.get(k) not in (None, {}, [])}
        registered = self.client.register_job_definition(
            jobDefinitionName=copy, containerProperties=wanted_properties, **kept
        )
        return str(registered["jobDefinitionArn"])
