"""The ``kubernetes`` backend's reading of a pod: its state, billed seconds, end and zone (pure given now).

A pod's phase alone misleads: a node out of contact leaves it ``Unknown`` or ``Running``, a drain and a stop
both delete it, a sidecar keeps it running after the training ended. :func:`status_from_pod` reads the
training's own container, the pod's conditions and its node's taints to tell them apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from costaware.adapters.compute.base import STOP_REQUESTED_AT, JobState, JobStatus
from costaware.adapters.compute.job_contract import (
    MISSING_LAUNCHER_ADVICE,
    RESUBMIT_EXIT_CODES,
    launcher_not_found,
)
from costaware.adapters.compute.kubernetes_pod import INSTANCE_LABEL, TRAIN_CONTAINER, ZONE_LABEL
from costaware.core.ledger import utcnow


def _instant(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _seconds(start: Any, end: Any, now: datetime | None = None) -> float:
    begin, finish = _instant(start), _instant(end) or now or utcnow()
    return max(0.0, (finish - begin).total_seconds()) if begin else 0.0


def out_of_contact_since(pod: Mapping[str, Any]) -> datetime | None:
    """Since when a pod in phase ``Unknown`` is out of contact, where its status says, else None.

    The node controller marks the pods of a node it lost contact with not ready (the ``Ready`` condition's
    last transition); an eviction of them sets a deletion time.
    """
    status, meta = pod.get("status") or {}, pod.get("metadata") or {}
    ready: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
    )
    if str(ready.get("status")) != "True" and ready.get("lastTransitionTime"):
        return _instant(ready["lastTransitionTime"])
    return _instant(meta.get("deletionTimestamp"))


def failed_pod_end(pod: Mapping[str, Any], *, container_ran: bool) -> datetime | None:
    """When a pod in phase ``Failed`` whose training container has no end (evicted before it ended) ended.

    Its conditions' last transition (the kubelet marks it not ready as it fails it). Else, for a container
    that never ran (billed 0 s, so its end is only its ledger key), its start time, else its creation:
    times the pod's record keeps, where a deletion time set later (a drain, a cleanup hours on) moved its
    end, and its key, and billed it a second time. A container seen running is billed up to its end: there
    the deletion time is the latest it ran (the kubelet kills it by then); with none the pod says no end
    (None), as for a pod that says none of these.
    """
    status, meta = pod.get("status") or {}, pod.get("metadata") or {}
    moved = [_instant(c.get("lastTransitionTime")) for c in status.get("conditions") or []]
    if known := [t for t in moved if t is not None]:
        return max(known)
    if container_ran:
        return _instant(meta.get("deletionTimestamp"))
    for said in (status.get("startTime"), meta.get("creationTimestamp")):
        if (instant := _instant(said)) is not None:
            return instant
    return None


def interrupted_while_running_from(
    pod: Mapping[str, Any], node_taints: Sequence[Mapping[str, Any]] = ()
) -> tuple[datetime, str] | None:
    """From when a pod still in phase ``Running`` counts as interrupted, and why; None if nothing says so.

    Current Kubernetes keeps such a pod's phase ``Running``: its node is tainted
    ``node.kubernetes.io/unreachable`` (counted from then for ``UNKNOWN_PHASE_SECONDS``, as phase
    ``Unknown`` is), and an eviction (or a stop) that its kubelet never confirms leaves it Terminating, with
    a ``deletionTimestamp``, until the Node object is deleted. A reachable kubelet ends a deleted pod by its
    deletion time (the delete plus its grace period): counted from one more grace period past it.
    """
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    candidates: list[tuple[datetime, str]] = []
    tainted = (_instant(t.get("timeAdded")) for t in node_taints if t.get("key") == UNREACHABLE_TAINT)
    if since := next((t for t in tainted if t is not None), None):
        candidates.append(
            (
                since + timedelta(seconds=UNKNOWN_PHASE_SECONDS),
                f"its node has been unreachable since {since.isoformat()}",
            )
        )
    deleted = _instant(meta.get("deletionTimestamp"))
    if deleted is not None:
        grace = spec.get("terminationGracePeriodSeconds", meta.get("deletionGracePeriodSeconds"))
        grace_seconds = float(grace) if grace is not None else DEFAULT_POD_GRACE_SECONDS
        candidates.append(
            (
                deleted + timedelta(seconds=grace_seconds),
                f"it was to be deleted by {deleted.isoformat()} and its node has not confirmed the stop "
                f"{grace_seconds:g} s later (Terminating: the node is out of reach)",
            )
        )
    return min(candidates, key=lambda c: c[0]) if candidates else None


def pod_zone(pod: Mapping[str, Any]) -> str:
    """The zone a pod is held to, empty if none.

    That is its required node affinity on ``topology.kubernetes.io/zone`` with one value (what
    :func:`render_pod` writes), else its node selector's.
    """
    spec = pod.get("spec") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            values = expression.get("values") or []
            if (
                expression.get("key") == ZONE_LABEL
                and expression.get("operator") == "In"
                and len(values) == 1
            ):
                return str(values[0])
    return str((spec.get("nodeSelector") or {}).get(ZONE_LABEL, ""))


#: How long a pod in phase ``Unknown`` (its node lost contact) counts as running before it counts as
#: interrupted and is deleted: Kubernetes' own default before it evicts the pods of an unreachable node
#: (the ``node.kubernetes.io/unreachable`` toleration of 300 s).
UNKNOWN_PHASE_SECONDS = 300.0
#: The taint the node controller puts on a node it lost contact with.
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
#: Kubernetes' terminationGracePeriodSeconds when a pod gives none.
DEFAULT_POD_GRACE_SECONDS = 30.0
#: A pod's reason when its node went away under it: graceful node shutdown (``Terminated`` since
#: Kubernetes 1.21, ``Shutdown`` before; ``NodeShutdown`` for a pod a shutting-down node refused) or an
#: eviction.
NODE_GONE_REASONS = frozenset({"Evicted", "Shutdown", "Terminated", "NodeShutdown"})
#: The kubelet's eviction messages for a pod past its own disk limits (its ephemeral storage, a container's
#: or its emptyDir's): the training's own doing, which a resubmitted pod repeats, paid again. An eviction for
#: the node's pressure ("The node was low on resource: ...") may be a neighbour's doing and is retried.
OWN_LIMIT_EVICTIONS = (
    "exceeded its local ephemeral storage limit",
    "ephemeral local storage usage exceeds the total limit",
    "Usage of EmptyDir volume",
)
#: A container's waiting reasons that no wait ends: the image cannot be pulled (after the kubelet's first
#: retries: ``ImagePullBackOff``) or named, or its configuration is wrong (a missing secret or config map).
CANNOT_START_REASONS = frozenset(
    {
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


def stop_asked_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod was asked to stop (deleted), where it says: None where it was not.

    A delete (``KubernetesBackend.stop``, or a drain's eviction) sets ``deletionTimestamp`` to the delete's
    time plus its grace period (``deletionGracePeriodSeconds``, set with it). Whose delete it was is not
    told here: :func:`status_from_pod` says a stop asked only of a pod not marked ``DisruptionTarget``.
    """
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    deleted = _instant(meta.get("deletionTimestamp"))
    if deleted is None:
        return None
    grace = meta.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds"))
    return deleted - timedelta(seconds=float(grace) if grace is not None else DEFAULT_POD_GRACE_SECONDS)


def status_from_pod(
    pod: Mapping[str, Any],
    node_labels: Mapping[str, str] | None = None,
    *,
    now: datetime | None = None,
    node_taints: Sequence[Mapping[str, Any]] = (),
) -> JobStatus:
    """A ``JobStatus`` from a pod (as a dict, camelCase keys) and its node's labels (pure given ``now``).

    The zone is the one the pod was held to, else its node's ``topology.kubernetes.io/zone`` label. A pod
    in phase ``Unknown`` (its node lost contact) runs, billed, for ``UNKNOWN_PHASE_SECONDS``; then it counts
    as interrupted (see :data:`UNKNOWN_PHASE_SECONDS`). So does a pod still ``Running`` past the bound of
    :func:`interrupted_while_running_from` (its node's ``node_taints`` and its own deletion time).
    """
    now = now or utcnow()
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    phase = str(status.get("phase", "Pending"))
    statuses = status.get("containerStatuses") or []
    # The training's own container: the kubelet sorts statuses by name, so an injected sidecar
    # (istio-proxy) came first, and its 5 s and exit 0 were read as the training's.
    container: dict[str, Any] = next(
        (c for c in statuses if c.get("name") == TRAIN_CONTAINER), next(iter(statuses), {})
    )
    state = container.get("state") or {}
    terminated, running, waiting = state.get("terminated"), state.get("running"), state.get("waiting")
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    disrupted = conditions.get("DisruptionTarget", {}).get("status") == "True"
    reason = str(status.get("reason") or (terminated or {}).get("reason") or phase)
    exit_code = (terminated or {}).get("exitCode")
    finished = _instant((terminated or {}).get("finishedAt"))
    if terminated:
        seconds = _seconds(terminated.get("startedAt"), terminated.get("finishedAt"), now)
    elif running:
        seconds = _seconds(running.get("startedAt"), None, now)
    else:
        seconds = 0.0
    if phase == "Unknown" and not terminated:
        # Its node lost contact: the pod may run on (and its node is paid) or be gone with a reclaimed
        # node. Read as pending, it was billed nothing and watched for as long as the deadline allowed.
        since = out_of_contact_since(pod)
        lost = 0.0 if since is None else max(0.0, (now - since).total_seconds())
        if since is not None and lost < UNKNOWN_PHASE_SECONDS:
            job_state = JobState.RUNNING
            reason = f"Unknown: the pod's node lost contact {lost:.0f} s ago"
        else:
            job_state = JobState.INTERRUPTED
            reason = (
                "Unknown: the pod's node lost contact "
                + (f"{lost:.0f} s ago" if since is not None else "(since when, its status does not say)")
                + ": counted as an interruption, billed up to now, and the pod deleted"
            )
            finished = now
    elif (
        phase == "Running" and not terminated and (stuck := interrupted_while_running_from(pod, node_taints))
    ):
        # Its node is out of reach: the phase stays Running, and read so, the pod was billed (and not
        # resubmitted) until the Node object went, possibly until the deadline.
        lost_at, why = stuck
        if now < lost_at:
            job_state = JobState.RUNNING
        else:
            job_state = JobState.INTERRUPTED
            reason = f"Running, but {why}: counted as an interruption, billed up to now, and the pod deleted"
            finished = now
    elif phase in ("Running", "Unknown") and terminated:
        # The training ended while the pod runs on (a sidecar such as istio-proxy), or before its node lost
        # contact: its own end decides.
        if exit_code == 0:
            job_state = JobState.SUCCEEDED
        elif exit_code in RESUBMIT_EXIT_CODES or disrupted:
            job_state = JobState.INTERRUPTED
        else:
            job_state = JobState.FAILED
    elif phase == "Succeeded":
        job_state = JobState.SUCCEEDED
    elif phase == "Failed":
        # A drain SIGTERMs the launcher, which exits 75 or 77; a 137 or 143 without a disruption is the
        # job's own end (the OOM killer, activeDeadlineSeconds): resubmitted, it would fail again, paid.
        preempted = exit_code in RESUBMIT_EXIT_CODES or disrupted or reason in NODE_GONE_REASONS
        message = str(status.get("message") or "")
        if reason == "Evicted" and any(m in message for m in OWN_LIMIT_EVICTIONS):
            preempted = False
            reason = f"Evicted: {message.strip()} (raise the pod's ephemeral-storage limit in resources=)"
        job_state = JobState.INTERRUPTED if preempted else JobState.FAILED
        if not terminated and (finished := failed_pod_end(pod, container_ran=bool(running))) is not None:
            # Its container never ended (evicted before it started): read as not ended, a retry that
            # found it followed it as pending, billed up to now. A container seen running ran until then.
            seconds = _seconds(running.get("startedAt"), finished) if running else 0.0
        start_error = str((terminated or {}).get("message") or "").strip()
        if not preempted and (terminated or {}).get("reason") == "StartError" and start_error:
            # The container never ran, so there are no log lines to read: the runtime's words are all there
            # is, and 'StartError' alone named neither the missing launcher nor the image. Only a launcher
            # not found is a missing costaware-runtime ('permission denied' is a file mode to fix).
            reason = f"StartError: {start_error}"
            if launcher_not_found(start_error):
                reason += f" ({MISSING_LAUNCHER_ADVICE})"
    elif waiting and str(waiting.get("reason")) in CANNOT_START_REASONS:
        # A bad image or container setting stays Pending until activeDeadlineSeconds (a day), its node
        # paid the while; no retry mends it.
        job_state = JobState.FAILED
        reason = f"{waiting.get('reason')}: {waiting.get('message') or 'the container cannot start'}"
    elif phase == "Running":
        job_state = JobState.RUNNING
    else:
        job_state = JobState.PENDING
    labels = meta.get("labels") or {}
    metrics: dict[str, Any] = {"node": pod.get("spec", {}).get("nodeName")}
    if not job_state.done and (asked := stop_asked_at(pod)) is not None:
        if disrupted:
            # A drain's eviction, the scheduler's preemption, the taint manager's deletion set the deletion
            # time as a stop does: said asked to stop, a wait that could not read its kept state took it for
            # its own stop at the cap (not sent, the end recorded as max_usd). A plain delete (``stop``)
            # marks no DisruptionTarget: the pod ends as the preemption it is.
            by = conditions["DisruptionTarget"].get("reason") or "a disruption"
            reason = f"{reason}; deleted by {by}, not a stop asked here"
        else:
            # A re-created wait that cannot read its kept state sends its stop at the cap no second time.
            metrics[STOP_REQUESTED_AT] = asked.timestamp()
    return JobStatus(
        job_id=str(meta.get("name", "")),
        state=job_state,
        billable_seconds=seconds,
        market=str(labels.get("costaware/market", "")),
        instance_type=str(dict(node_labels or {}).get(INSTANCE_LABEL, "")),
        reason=reason,
        exit_code=int(exit_code) if exit_code is not None else None,
        ended_at=finished.timestamp() if finished else None,
        metrics=metrics,
        availability_zone=pod_zone(pod) or str(dict(node_labels or {}).get(ZONE_LABEL, "")),
    )
