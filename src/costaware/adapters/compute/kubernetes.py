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

from collections.abc import Mapping, Sequence
from typing import Any

from costaware.adapters.compute.base import (
    FoundJob,
    JobRequest,
    JobStatus,
    node_selector_labels,
    whole_number,
)

# The pod manifest and the reading of a pod's status live in modules of their own; every name stays
# importable from here, where tests, docs and other modules name it.
from costaware.adapters.compute.kubernetes_pod import (
    _WORK_VOLUME,  # noqa: F401
    EKS_LABEL,
    EKS_VALUES,
    INSTANCE_LABEL,
    KARPENTER_LABEL,
    KARPENTER_VALUES,
    TERMINATION_GRACE_SECONDS,
    TRAIN_CONTAINER,
    WORK_DIR,
    ZONE_LABEL,
    pod_grace_seconds,
    render_pod,
)
from costaware.adapters.compute.kubernetes_status import (
    CANNOT_START_REASONS,
    DEFAULT_POD_GRACE_SECONDS,
    NODE_GONE_REASONS,
    OWN_LIMIT_EVICTIONS,
    UNKNOWN_PHASE_SECONDS,
    UNREACHABLE_TAINT,
    _instant,
    _seconds,  # noqa: F401
    failed_pod_end,
    interrupted_while_running_from,
    out_of_contact_since,
    pod_zone,
    status_from_pod,
    stop_asked_at,
)
from costaware.adapters.compute.node_labels import capacity_label_key, capacity_label_values
from costaware.core.errors import ComputeBackendError, ConfigurationError, JobNotFoundError
from costaware.core.ledger import utcnow

__all__ = [
    "CANNOT_START_REASONS",
    "DEFAULT_POD_GRACE_SECONDS",
    "EKS_LABEL",
    "EKS_VALUES",
    "INSTANCE_LABEL",
    "KARPENTER_LABEL",
    "KARPENTER_VALUES",
    "NODE_GONE_REASONS",
    "OWN_LIMIT_EVICTIONS",
    "REFUSED_POD",
    "TERMINATION_GRACE_SECONDS",
    "TRAIN_CONTAINER",
    "UNKNOWN_PHASE_SECONDS",
    "UNREACHABLE_TAINT",
    "WORK_DIR",
    "ZONE_LABEL",
    "KubernetesBackend",
    "check_node_labels",
    "failed_pod_end",
    "interrupted_while_running_from",
    "out_of_contact_since",
    "pod_grace_seconds",
    "pod_zone",
    "render_pod",
    "status_from_pod",
    "stop_asked_at",
]

_INSTALL = "pip install 'airflow-provider-costaware[kubernetes]' (apache-airflow-providers-cncf-kubernetes)"
#: The API server's refusals of a pod that a retry cannot mend, by HTTP status, with what to check.
REFUSED_POD = {
    400: "check resources, tolerations and node_selector in backend_options",
    403: "the connection's account may not create pods there: grant it 'create' on pods (RBAC)",
    404: "check namespace in backend_options: the namespace must exist",
    422: "check resources, tolerations, node_selector and service_account in backend_options",
}


def _checked_grace_seconds(value: object) -> int:
    """``termination_grace_seconds`` as a whole number of seconds inside the 2-minute spot notice."""
    return whole_number(value, "termination_grace_seconds", low=1, high=119)


def check_node_labels(options: Mapping[str, Any]) -> None:
    """Refuse node labels of ``options`` that are no labels, or a grace period that is no whole number.

    ``capacity_label``, ``capacity_values`` and ``node_selector`` must be labels,
    ``termination_grace_seconds`` a whole number from 1 to 119.

    The task's start asks it (``check_backend_options``), before any money, and each submit reads them the
    same way; opening a running pod's backend to poll, find or stop it does not, as none of these read them.

    Raises:
        ConfigurationError: the first of them that is no Kubernetes label (named with the rule) or no
            grace period.
    """
    capacity_label_key(options.get("capacity_label", KARPENTER_LABEL))
    capacity_label_values(options.get("capacity_values"))
    node_selector_labels(options.get("node_selector"))
    _checked_grace_seconds(options.get("termination_grace_seconds", TERMINATION_GRACE_SECONDS))


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

    @staticmethod
    def check_option_values(options: Mapping[str, Any]) -> None:
        """:func:`check_node_labels`, asked by ``check_backend_options`` at the task's start."""
        check_node_labels(options)

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
        # The node labels are kept as written, checked at the render of each pod: a poll, find or stop never
        # reads them, and must reach a pod an older release created with labels it took (see open_backend).
        self.capacity_label, self.capacity_values = capacity_label, capacity_values
        self.resources, self.tolerations = dict(resources or {}), [dict(t) for t in tolerations]
        self.node_selector = node_selector
        self.service_account = service_account
        # Kept as written too (only a render reads it): checked there and at the task's start.
        self.termination_grace_seconds = termination_grace_seconds
        self.work_dir = work_dir

    def render(self, request: JobRequest) -> dict[str, Any]:
        """The pod of ``request``; the request's image (the operator's ``image=``) wins over ``image``."""
        capacity_label = capacity_label_key(self.capacity_label)
        capacity_values = capacity_label_values(self.capacity_values)
        node_selector = node_selector_labels(self.node_selector)
        grace_seconds = _checked_grace_seconds(self.termination_grace_seconds)
        if not (request.image or self.image):
            raise ConfigurationError(
                f"pod {request.job_name!r} has no image: pass image= to the operator or set image in "
                "backend_options"
            )
        return render_pod(
            request,
            image=self.image,
            namespace=self.namespace,
            capacity_label=capacity_label,
            capacity_values=capacity_values,
            resources=self.resources,
            tolerations=self.tolerations,
            node_selector=node_selector,
            service_account=self.service_account,
            termination_grace_seconds=grace_seconds,
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
            # A pod name is reused by a cleared task's new try once the pod is deleted: its uid is not.
            run_token=str((pod.get("metadata") or {}).get("uid") or ""),
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
