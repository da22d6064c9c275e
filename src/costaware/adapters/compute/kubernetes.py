"""The ``kubernetes`` backend: one pod per attempt, on a spot or on-demand node pool.

The market is a node selector: ``karpenter.sh/capacity-type: spot|on-demand`` by default, or any label (e.g.
EKS managed node groups' ``eks.amazonaws.com/capacityType: SPOT|ON_DEMAND``). A node drain (spot reclaim,
Karpenter or the Node Termination Handler) sends SIGTERM; the training checkpoints and exits 75 within
``termination_grace_seconds``. Billed seconds are the container's run time; the instance type is the node's
``node.kubernetes.io/instance-type`` label. The cncf.kubernetes provider is an optional extra, imported here
only when the backend talks to a cluster; rendering the pod needs nothing.

Every job runs under the launcher: the container's ``command: ["costaware-run", ..., "--"]`` with the job's
command as ``args`` (the built-in trainers: ``python -m costaware.training.entrypoint --spec URI``), the job
contract's variables in ``env`` and its local folders on an ``emptyDir`` volume at ``work_dir``. A user
command's pod has ``terminationGracePeriodSeconds`` = the job's grace period + 10 s (the launcher's own
SIGKILL comes first, then it has 10 s to push the last checkpoint); the built-in trainers' has
``termination_grace_seconds``, and their launcher's grace period is 10 s shorter. ``image=`` of the operator
wins over ``image``.

A request with an ``availability_zone`` (either market) gets a required node affinity on
``topology.kubernetes.io/zone`` In [zone], so the pod schedules only on nodes of that zone (Karpenter launches
one there); its status reports that zone, else the zone label of the node it ran on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from costaware.adapters.compute.base import (
    MARKETS,
    STOP_REQUESTED_AT,
    FoundJob,
    JobRequest,
    JobState,
    JobStatus,
    require_ec2_instance_type,
    require_object_store,
    whole_number,
)
from costaware.adapters.compute.job_contract import (
    GRACE_SECONDS,
    LAUNCHER_MARGIN_SECONDS,
    MISSING_LAUNCHER_ADVICE,
    RESUBMIT_EXIT_CODES,
    launcher_grace_seconds,
    launcher_not_found,
)
from costaware.core.errors import ComputeBackendError, ConfigurationError, JobNotFoundError
from costaware.core.ledger import utcnow

KARPENTER_LABEL = "karpenter.sh/capacity-type"
KARPENTER_VALUES = {"spot": "spot", "on_demand": "on-demand"}
EKS_LABEL = "eks.amazonaws.com/capacityType"
EKS_VALUES = {"spot": "SPOT", "on_demand": "ON_DEMAND"}
INSTANCE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
_INSTALL = "pip install 'airflow-provider-costaware[kubernetes]' (apache-airflow-providers-cncf-kubernetes)"
#: Where a user command's local folders live: an emptyDir volume, writable even on a read-only root.
WORK_DIR = "/costaware"
_WORK_VOLUME = "costaware-work"
#: The built-in trainers' pod's SIGTERM-to-SIGKILL (``termination_grace_seconds``), inside the spot notice.
TERMINATION_GRACE_SECONDS = 110


def pod_grace_seconds(grace_seconds: float, *, is_command: bool, termination_grace_seconds: int) -> int:
    """The pod's ``terminationGracePeriodSeconds``: when the kubelet kills it after a stop or a drain.

    A user command's is its own grace period + 10 s (the launcher's last push first); the built-in
    trainers' is ``termination_grace_seconds``.
    """
    if is_command:
        return math.ceil(grace_seconds) + LAUNCHER_MARGIN_SECONDS
    return int(termination_grace_seconds)


def render_pod(
    request: JobRequest,
    *,
    image: str,
    namespace: str = "default",
    capacity_label: str = KARPENTER_LABEL,
    capacity_values: Mapping[str, str] | None = None,
    resources: Mapping[str, Any] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    node_selector: Mapping[str, str] | None = None,
    service_account: str | None = None,
    termination_grace_seconds: int = TERMINATION_GRACE_SECONDS,
    labels: Mapping[str, str] | None = None,
    work_dir: str = WORK_DIR,
) -> dict[str, Any]:
    """The pod manifest of one attempt (pure): the entrypoint on a node of the attempt's market.

    A user command's pod runs the request's image (else ``image``) and its own grace period + 10 s instead
    of ``termination_grace_seconds``.
    """
    require_object_store(request, "kubernetes")
    require_ec2_instance_type(request, "kubernetes")
    values = dict(capacity_values or (EKS_VALUES if capacity_label == EKS_LABEL else KARPENTER_VALUES))
    if request.market not in values:
        raise ConfigurationError(
            f"capacity_values {values} have no value for market {request.market!r}: give spot and on_demand"
        )
    if not 0 < termination_grace_seconds < 120:
        raise ConfigurationError(
            f"termination_grace_seconds must be 1-119 (inside the 2-minute spot notice), got "
            f"{termination_grace_seconds!r}"
        )
    selector = {**dict(node_selector or {}), capacity_label: values[request.market]}
    zone = request.availability_zone
    if zone and selector.get(ZONE_LABEL, zone) != zone:
        raise ConfigurationError(
            f"node_selector pins {ZONE_LABEL}={selector[ZONE_LABEL]!r} but pod {request.job_name!r} asks for "
            f"zone {zone!r}: drop {ZONE_LABEL} from node_selector to let attempts move across zones"
        )
    if request.instance_type:
        selector.setdefault(INSTANCE_LABEL, request.instance_type)
    env = request.environment(work_dir=work_dir)
    grace = pod_grace_seconds(
        request.grace_seconds,
        is_command=request.is_command,
        termination_grace_seconds=termination_grace_seconds,
    )
    if not request.is_command:
        # The built-in trainers' pod keeps termination_grace_seconds; their launcher sends its own SIGKILL
        # 10 s earlier, so that it can still push the last checkpoint before the kubelet's.
        env[GRACE_SECONDS] = f"{launcher_grace_seconds(grace):g}"
    launcher = request.command()
    split = launcher.index("--") + 1
    container: dict[str, Any] = {
        "name": TRAIN_CONTAINER,
        "image": request.image or image,
        "command": launcher[:split],
        "args": launcher[split:],
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "resources": dict(resources or {}),
        "volumeMounts": [{"name": _WORK_VOLUME, "mountPath": work_dir}],
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace,
        "activeDeadlineSeconds": int(request.max_runtime_seconds),
        "nodeSelector": selector,
        "tolerations": [dict(t) for t in tolerations],
        "containers": [container],
        "volumes": [{"name": _WORK_VOLUME, "emptyDir": {}}],
    }
    if zone:
        term = {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [zone]}]}
        required = {"nodeSelectorTerms": [term]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    if service_account:
        spec["serviceAccountName"] = service_account
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": request.job_name,
            "namespace": namespace,
            "labels": {
                **dict(labels or {}),
                "app.kubernetes.io/managed-by": "costaware",
                "costaware/market": request.market,
            },
        },
        "spec": spec,
    }


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
#: The training's container in the pods :func:`render_pod` writes.
TRAIN_CONTAINER = "train"
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
#: The API server's refusals of a pod that a retry cannot mend, by HTTP status, with what to check.
REFUSED_POD = {
    400: "check resources, tolerations and node_selector in backend_options",
    403: "the connection's account may not create pods there: grant it 'create' on pods (RBAC)",
    404: "check namespace in backend_options: the namespace must exist",
    422: "check resources, tolerations, node_selector and service_account in backend_options",
}
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


def _checked_capacity_values(values: Mapping[str, str] | None) -> dict[str, str] | None:
    """``capacity_values`` with a label value for each market, or None (the label's defaults).

    Raises:
        ConfigurationError: a market without a value, or a key that is no market: a pod of that market
            failed at its submit, an on-demand fallback after the spot attempts had been paid for.
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
    return given


class KubernetesBackend:
    """Pods on a Kubernetes cluster with spot and on-demand node pools.

    Args:
        image: Image with costaware and the trainer's libraries (a user command's ``image=`` wins).
        namespace: Namespace of the pods.
        kubernetes_conn_id: Airflow Kubernetes connection (cncf.kubernetes provider).
        capacity_label: Node label that tells spot from on-demand.
        capacity_values: Its value per market (default for Karpenter or EKS labels).
        resources: Container resources, e.g. ``{"requests": {"cpu": "4", "memory": "16Gi"}}``.
        tolerations: Pod tolerations (e.g. of a spot taint).
        node_selector: Further node labels to require.
        service_account: Service account (e.g. with IRSA access to the S3 stores).
        termination_grace_seconds: SIGTERM to SIGKILL on a drain (< 120 s, the spot notice) of the built-in
            trainers; a user command's pod gets its ``preemption_grace_seconds`` + 10.
        work_dir: Where the job's emptyDir volume (checkpoint, output, metrics) is mounted.
    """

    name = "kubernetes"
    places_zones = True

    @staticmethod
    def check_zones(options: Mapping[str, Any], zones: Sequence[str]) -> None:
        """A ``node_selector`` that pins a zone pins every attempt there: refused before any job.

        Other zones were refused only when an attempt moved there, failing the task after a preemption
        had been paid for.

        Raises:
            ConfigurationError: zones other than the one ``node_selector`` pins, named with it.
        """
        selector = options.get("node_selector") or {}
        if not isinstance(selector, Mapping) or ZONE_LABEL not in selector:
            return
        pinned = str(selector[ZONE_LABEL])
        others = [zone for zone in zones if zone != pinned]
        if others:
            raise ConfigurationError(
                f"availability_zones {', '.join(map(repr, others))} cannot be placed: backend_options "
                f"node_selector pins {ZONE_LABEL}={pinned!r}; drop {ZONE_LABEL} from node_selector to let "
                f"attempts move across zones, or allow only {pinned!r}"
            )

    def __init__(
        self,
        *,
        namespace: str = "default",
        kubernetes_conn_id: str = "kubernetes_default",
        capacity_label: str = KARPENTER_LABEL,
        capacity_values: Mapping[str, str] | None = None,
        resources: Mapping[str, Any] | None = None,
        tolerations: Sequence[Mapping[str, Any]] = (),
        node_selector: Mapping[str, str] | None = None,
        service_account: str | None = None,
        termination_grace_seconds: int = TERMINATION_GRACE_SECONDS,
        work_dir: str = WORK_DIR,
        image: str = "",
    ) -> None:
        self.image, self.namespace, self.kubernetes_conn_id = image, namespace, kubernetes_conn_id
        self.capacity_label, self.capacity_values = capacity_label, _checked_capacity_values(capacity_values)
        self.resources, self.tolerations = dict(resources or {}), [dict(t) for t in tolerations]
        self.node_selector, self.service_account = dict(node_selector or {}), service_account
        self.termination_grace_seconds = whole_number(
            termination_grace_seconds, "termination_grace_seconds", low=1, high=119
        )
        self.work_dir = work_dir

    def render(self, request: JobRequest) -> dict[str, Any]:
        """The pod of ``request``; the request's image (the operator's ``image=``) wins over ``image``."""
        if not (request.image or self.image):
            raise ConfigurationError(
                f"pod {request.job_name!r} has no image: pass image= to the operator or set image in "
                "backend_options"
            )
        return render_pod(
            request,
            image=self.image,
            namespace=self.namespace,
            capacity_label=self.capacity_label,
            capacity_values=self.capacity_values,
            resources=self.resources,
            tolerations=self.tolerations,
            node_selector=self.node_selector,
            service_account=self.service_account,
            termination_grace_seconds=self.termination_grace_seconds,
            work_dir=self.work_dir,
        )

    def _api(self) -> Any:
        try:
            from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
            from kubernetes import client
        except ImportError as e:
            raise ConfigurationError(
                f"the kubernetes backend needs the cncf.kubernetes provider: {_INSTALL}"
            ) from e
        return client.CoreV1Api(KubernetesHook(conn_id=self.kubernetes_conn_id).get_conn())

    def submit(self, request: JobRequest) -> str:
        body = self.render(request)
        api = self._api()
        try:
            api.create_namespaced_pod(namespace=self.namespace, body=body)
        except Exception as e:
            status = getattr(e, "status", None)
            if status == 409:  # AlreadyExists: submitted before (an Airflow retry)
                return request.job_name
            if status in REFUSED_POD:
                # Retried, each try was refused the same way (and a last one read as a passing failure).
                raise ConfigurationError(
                    f"cannot create pod {request.job_name!r} in namespace {self.namespace!r}: {e}; "
                    f"{REFUSED_POD[status]}"
                ) from e
            raise ComputeBackendError(f"cannot create pod {request.job_name!r}: {e}") from e
        return request.job_name

    def find(self, job_name: str) -> FoundJob | None:
        api = self._api()
        try:
            pod = api.api_client.sanitize_for_serialization(api.read_namespaced_pod(job_name, self.namespace))
        except Exception as e:
            if getattr(e, "status", None) == 404:
                return None
            raise ComputeBackendError(f"cannot read pod {job_name!r}: {e}") from e
        # The kubelet's start of the pod (before its image pull: never less than it ran), else its creation.
        started = _instant((pod.get("status") or {}).get("startTime"))
        created = _instant((pod.get("metadata") or {}).get("creationTimestamp"))
        # Ended where Kubernetes ended it too (a pod ended only for us runs on until a poll deletes it).
        status = status_from_pod(pod, now=utcnow())
        phase = str((pod.get("status") or {}).get("phase"))
        ended = status.state.done and status.ended_at is not None and phase in ("Succeeded", "Failed")
        return FoundJob(
            job_id=job_name,
            started_at=started.timestamp() if started else None,
            created_at=created.timestamp() if created else None,
            ended_at=status.ended_at if ended else None,
            end_state=status.state if ended else None,
            market=status.market,  # its costaware/market label
        )

    def poll(self, job_id: str) -> JobStatus:
        api = self._api()
        try:
            pod = api.api_client.sanitize_for_serialization(api.read_namespaced_pod(job_id, self.namespace))
        except Exception as e:
            if getattr(e, "status", None) == 404:  # deleted (a stop, a drain, the pod GC) and gone
                raise JobNotFoundError(f"pod {job_id!r} is not in namespace {self.namespace!r}") from e
            raise ComputeBackendError(f"cannot read pod {job_id!r}: {e}") from e
        node = pod.get("spec", {}).get("nodeName")
        labels: Mapping[str, str] = {}
        taints: list[Mapping[str, Any]] = []
        try:
            if node:
                read = api.api_client.sanitize_for_serialization(api.read_node(node))
                labels = (read.get("metadata") or {}).get("labels") or {}
                taints = list((read.get("spec") or {}).get("taints") or [])
        except Exception:
            # Only the instance type and zone labels, and the unreachable taint: a reclaimed node already
            # deleted, or a service account without the cluster-wide "get nodes", must not read as the pod
            # being gone.
            labels, taints = {}, []
        status = status_from_pod(pod, labels, now=utcnow(), node_taints=taints)
        if status.state.done and str(pod.get("status", {}).get("phase")) in ("Pending", "Running", "Unknown"):
            # Ended for us, not for Kubernetes: a container that cannot start waits on its paid node till
            # activeDeadlineSeconds (and starts, unwatched, once its image comes), a training done beside a
            # sidecar leaves the pod running, a pod whose node lost contact may run on once it is back.
            # Deleted now.
            self.stop(job_id)
        return status

    def stop(self, job_id: str) -> None:
        """Delete the pod: its container gets SIGTERM (and checkpoints), then the pod is gone.

        A later poll may then find nothing (``JobNotFoundError``); the operator ends the attempt from the
        status it saw last (as for a pod a drain deleted: see ``vanished_job_status``).
        """
        try:
            self._api().delete_namespaced_pod(job_id, self.namespace)
        except Exception as e:
            if getattr(e, "status", None) == 404:  # already gone: nothing left to stop
                return
            raise ComputeBackendError(f"cannot delete pod {job_id!r}: {e}") from e

    def logs(self, job_id: str, tail: int = 20) -> str:
        try:
            return str(self._api().read_namespaced_pod_log(job_id, self.namespace, tail_lines=tail))
        except Exception as e:
            return f"no logs: {e}"
