"""The ``kubernetes`` backend's pod manifest: one attempt's pod on a node of its market (pure).

The node labels that tell the markets, zones and instance types apart, the launcher's container and the
grace period of a stop or a drain. :mod:`costaware.adapters.compute.kubernetes` renders it for each submit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from costaware.adapters.compute.base import JobRequest, require_ec2_instance_type, require_object_store
from costaware.adapters.compute.job_contract import (
    GRACE_SECONDS,
    LAUNCHER_MARGIN_SECONDS,
    launcher_grace_seconds,
)

# The capacity labels live with the other node labels' checks; importable from here as before.
from costaware.adapters.compute.node_labels import EKS_LABEL as EKS_LABEL
from costaware.adapters.compute.node_labels import EKS_VALUES as EKS_VALUES
from costaware.adapters.compute.node_labels import KARPENTER_LABEL as KARPENTER_LABEL
from costaware.adapters.compute.node_labels import KARPENTER_VALUES as KARPENTER_VALUES
from costaware.core.errors import ConfigurationError

INSTANCE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
#: Where a user command's local folders live: an emptyDir volume, writable even on a read-only root.
WORK_DIR = "/costaware"
_WORK_VOLUME = "costaware-work"
#: The built-in trainers' pod's SIGTERM-to-SIGKILL (``termination_grace_seconds``), inside the spot notice.
TERMINATION_GRACE_SECONDS = 110
#: The training's container in the pods :func:`render_pod` writes.
TRAIN_CONTAINER = "train"


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
