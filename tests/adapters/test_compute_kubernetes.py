"""The Kubernetes backend against the pod spec it renders and pod statuses (no cluster here)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from costaware.adapters.compute.base import JobRequest, JobState, open_backend
from costaware.adapters.compute.kubernetes import EKS_LABEL, EKS_VALUES, render_pod, status_from_pod
from costaware.core.errors import ComputeBackendError, ConfigurationError, JobNotFoundError


def request(market: str = "spot") -> JobRequest:
    return JobRequest(
        job_name="train-0123456789-a2",
        spec_uri="s3://ml/jobs/spec.json",
        market=market,
        instance_type="g5.xlarge",
        max_runtime_seconds=5400,
        env={"AWS_REGION": "us-east-1"},
    )


def test_spot_pod_on_karpenter_spot_nodes_with_resources_and_tolerations() -> None:
    toleration = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
    resources = {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": "1"}}
    pod = render_pod(
        request(), image="costaware:1", namespace="ml", resources=resources, tolerations=[toleration]
    )
    spec = pod["spec"]
    assert spec["nodeSelector"] == {
        "karpenter.sh/capacity-type": "spot",
        "node.kubernetes.io/instance-type": "g5.xlarge",
    }
    assert spec["tolerations"] == [toleration]
    assert spec["restartPolicy"] == "Never" and spec["terminationGracePeriodSeconds"] == 110
    assert spec["activeDeadlineSeconds"] == 5400
    (container,) = spec["containers"]
    # The built-in trainers run under the launcher, their folders on the work volume.
    assert container["command"] == ["costaware-run", "--no-outputs", "--"]
    assert container["args"] == [
        "python",
        "-m",
        "costaware.training.entrypoint",
        "--spec",
        "s3://ml/jobs/spec.json",
    ]
    assert container["resources"] == resources and container["env"] == [
        {"name": "AWS_REGION", "value": "us-east-1"},
        {"name": "COSTAWARE_ATTEMPT", "value": "1"},
        {"name": "COSTAWARE_CHECKPOINT_DIR", "value": "/costaware/checkpoints"},
        # The launcher's SIGKILL 10 s before the kubelet's, so that it can push the last checkpoint.
        {"name": "COSTAWARE_GRACE_SECONDS", "value": "100"},
        {"name": "COSTAWARE_MARKET", "value": "spot"},
        {"name": "COSTAWARE_METRICS_PATH", "value": "/costaware/metrics.json"},
    ]
    assert container["volumeMounts"] == [{"name": "costaware-work", "mountPath": "/costaware"}]
    assert spec["volumes"] == [{"name": "costaware-work", "emptyDir": {}}]
    assert pod["metadata"]["name"] == "train-0123456789-a2" and pod["metadata"]["namespace"] == "ml"


def test_on_demand_pod_with_the_eks_label() -> None:
    pod = render_pod(request("on_demand"), image="i", capacity_label=EKS_LABEL)
    assert pod["spec"]["nodeSelector"][EKS_LABEL] == "ON_DEMAND"
    custom = render_pod(
        request("spot"), image="i", capacity_label="pool", capacity_values={"spot": "cheap", "on_demand": "x"}
    )
    assert custom["spec"]["nodeSelector"]["pool"] == "cheap"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"capacity_label": "pool", "capacity_values": {"on_demand": "x"}},
            "have no value for market 'spot'",
        ),
        ({"termination_grace_seconds": 300}, "must be 1-119"),
    ],
)
def test_bad_pod_options(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        render_pod(request(), image="i", **kwargs)


def test_backend_renders_without_the_provider_and_asks_for_it_to_talk_to_a_cluster() -> None:
    backend = open_backend("kubernetes", {"image": "costaware:1"})
    assert backend.render(request())["spec"]["nodeSelector"]["karpenter.sh/capacity-type"] == "spot"  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match=r"needs the cncf.kubernetes provider: pip install"):
        backend.submit(request())


def _pod(phase: str, terminated: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    state = {"terminated": terminated} if terminated else {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    return {
        "metadata": {"name": "p", "labels": {"costaware/market": "spot"}},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase, "containerStatuses": [{"state": state}], **status},
    }


@pytest.mark.parametrize(
    ("pod", "state", "seconds"),
    [
        ({"metadata": {"name": "p"}, "status": {"phase": "Pending"}}, JobState.PENDING, 0.0),
        (
            _pod(
                "Succeeded",
                {"exitCode": 0, "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:10:00Z"},
            ),
            JobState.SUCCEEDED,
            600.0,
        ),
        (
            _pod(
                "Failed",
                {"exitCode": 75, "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:00Z"},
            ),
            JobState.INTERRUPTED,
            60.0,
        ),
        (
            _pod(
                "Failed",
                {"exitCode": 1, "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:30Z"},
            ),
            JobState.FAILED,
            30.0,
        ),
        (
            _pod(
                "Failed",
                {"exitCode": 1, "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:30Z"},
                conditions=[{"type": "DisruptionTarget", "status": "True"}],
            ),
            JobState.INTERRUPTED,
            30.0,
        ),
        # The OOM killer's 137 was read as a preemption: up to max_attempts paid attempts, each killed.
        (
            _pod(
                "Failed",
                {
                    "exitCode": 137,
                    "reason": "OOMKilled",
                    "startedAt": "2026-01-01T00:00:00Z",
                    "finishedAt": "2026-01-01T00:00:30Z",
                },
            ),
            JobState.FAILED,
            30.0,
        ),
        (  # the kubelet's SIGKILL after a drain's grace period: the condition says it was a disruption
            _pod(
                "Failed",
                {"exitCode": 137, "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:30Z"},
                conditions=[{"type": "DisruptionTarget", "status": "True"}],
            ),
            JobState.INTERRUPTED,
            30.0,
        ),
    ],
)
def test_pod_status_mapping(pod: dict[str, Any], state: JobState, seconds: float) -> None:
    status = status_from_pod(pod, {"node.kubernetes.io/instance-type": "g5.xlarge"})
    assert (status.state, status.billable_seconds) == (state, seconds)
    assert status.instance_type == "g5.xlarge"
    # A terminated container ended at its startedAt (midnight) plus the billed seconds; others have not ended.
    ended = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() + seconds if seconds else None
    assert status.ended_at == ended


class _ApiException(Exception):
    """What the kubernetes client raises on an HTTP error: the status code in ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__(f"({status}) Reason: {'Not Found' if status == 404 else 'Forbidden'}")
        self.status = status


class _PodGoneApi:
    """The two CoreV1Api calls a stopped pod meets once it is deleted (no cluster here to delete it on)."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.api_client = self

    def sanitize_for_serialization(self, value: Any) -> Any:
        return value

    def read_namespaced_pod(self, name: str, namespace: str) -> Any:
        raise _ApiException(self.status)

    def delete_namespaced_pod(self, name: str, namespace: str) -> Any:
        raise _ApiException(self.status)


def test_a_deleted_pod_is_reported_gone_and_stopping_it_again_is_a_no_op(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = open_backend("kubernetes", {"image": "costaware:1", "namespace": "ml"})
    monkeypatch.setattr(backend, "_api", lambda: _PodGoneApi(404))
    with pytest.raises(JobNotFoundError, match=r"pod 'train-1' is not in namespace 'ml'"):
        backend.poll("train-1")
    backend.stop("train-1")  # already gone: nothing to stop, no error
    # Any other API error stays a (retried) backend error, not "gone".
    monkeypatch.setattr(backend, "_api", lambda: _PodGoneApi(403))
    with pytest.raises(ComputeBackendError, match="cannot read pod 'train-1'") as raised:
        backend.poll("train-1")
    assert not isinstance(raised.value, JobNotFoundError)
    with pytest.raises(ComputeBackendError, match="cannot delete pod 'train-1'"):
        backend.stop("train-1")


class _NodeGoneApi(_PodGoneApi):
    """The pod is there (running); reading its node fails: reclaimed and deleted, or "get nodes" forbidden."""

    def read_namespaced_pod(self, name: str, namespace: str) -> Any:
        return _pod("Running")

    def read_node(self, name: str) -> Any:
        raise _ApiException(self.status)


@pytest.mark.parametrize("status", [404, 403])
def test_a_node_that_cannot_be_read_leaves_its_labels_blank_not_the_pod_gone(
    monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    backend = open_backend("kubernetes", {"image": "costaware:1"})
    monkeypatch.setattr(backend, "_api", lambda: _NodeGoneApi(status))
    polled = backend.poll("p")
    assert polled.state == JobState.RUNNING and polled.instance_type == ""


def test_the_training_containers_status_is_read_beside_an_injected_sidecar() -> None:
    # Statuses come sorted by name: an istio-proxy's 5 s and exit 0 were read as the training's 3 hours,
    # preempted (exit 75): a failure for good, and the hours unbilled.
    def terminated(name: str, code: int, finished: str) -> dict[str, Any]:
        return {
            "name": name,
            "state": {
                "terminated": {"exitCode": code, "startedAt": "2026-01-01T00:00:00Z", "finishedAt": finished}
            },
        }

    pod = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                terminated("istio-proxy", 0, "2026-01-01T00:00:05Z"),
                terminated("train", 75, "2026-01-01T03:00:00Z"),
            ],
        },
    }
    status = status_from_pod(pod)
    assert (status.state, status.billable_seconds, status.exit_code) == (JobState.INTERRUPTED, 10800.0, 75)


def test_an_image_without_the_launcher_fails_naming_it_and_what_to_install() -> None:
    # containerd's StartError (exit 128) read as 'StartError' alone, and the task's message sent the user to
    # "its last log lines": a container that never started has none.
    said = 'failed to create containerd task: exec: "costaware-run": executable file not found in $PATH'
    pod = _pod(
        "Failed",
        {
            "exitCode": 128,
            "reason": "StartError",
            "message": said,
            "startedAt": "2026-01-01T00:00:05Z",
            "finishedAt": "2026-01-01T00:00:05Z",
        },
    )
    status = status_from_pod(pod, now=datetime(2026, 1, 1, 0, 1, tzinfo=timezone.utc))
    assert status.state == JobState.FAILED and status.exit_code == 128
    assert status.reason == (
        f"StartError: {said} (the image has no costaware-run: install costaware-runtime[s3] in it, as "
        "runtime/Dockerfile.train.example does)"
    )


def test_a_start_error_that_finds_the_launcher_is_quoted_without_the_install_advice() -> None:
    # Any StartError naming costaware-run was told the image lacks it: a launcher without its execute bit is
    # in the image, and installing it again mends nothing.
    said = 'failed to create containerd task: exec: "costaware-run": permission denied: unknown'
    pod = _pod(
        "Failed",
        {
            "exitCode": 128,
            "reason": "StartError",
            "message": said,
            "startedAt": "2026-01-01T00:00:05Z",
            "finishedAt": "2026-01-01T00:00:05Z",
        },
    )
    status = status_from_pod(pod, now=datetime(2026, 1, 1, 0, 1, tzinfo=timezone.utc))
    assert (status.state, status.exit_code, status.reason) == (JobState.FAILED, 128, f"StartError: {said}")


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"])
def test_a_container_that_cannot_start_fails_instead_of_pending_for_a_day(reason: str) -> None:
    # It stayed Pending until activeDeadlineSeconds, its GPU node paid the while, the ledger at $0.
    waiting = {"reason": reason, "message": 'Back-off pulling image "ghcr.io/team/trian:1"'}
    pod = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "train", "state": {"waiting": waiting}}],
        },
    }
    status = status_from_pod(pod)
    assert status.state == JobState.FAILED and status.reason.startswith(f"{reason}: Back-off pulling image")
    first_pull = {**pod, "status": {**pod["status"], "containerStatuses": [
        {"name": "train", "state": {"waiting": {"reason": "ErrImagePull"}}}
    ]}}  # fmt: skip
    assert status_from_pod(first_pull).state == JobState.PENDING  # the first failure may be a blip


@pytest.mark.parametrize("reason", ["Terminated", "NodeShutdown", "Shutdown"])
def test_a_node_shutdown_is_a_preemption_in_every_kubernetes_spelling(reason: str) -> None:
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Failed", "reason": reason}}
    assert status_from_pod(pod).state == JobState.INTERRUPTED


@pytest.mark.parametrize(
    ("message", "own"),
    [
        ('Container train exceeded its local ephemeral storage limit "10Gi". ', True),
        ("Pod ephemeral local storage usage exceeds the total limit of containers 10Gi. ", True),
        ('Usage of EmptyDir volume "work" exceeds the limit "4Gi". ', True),
        ("The node was low on resource: ephemeral-storage. Container train was using 9Gi, which exceeds its "
         "request of 0. ", False),
        ("The node was low on resource: memory. ", False),
    ],
)  # fmt: skip
def test_a_pod_evicted_past_its_own_disk_limit_fails_and_node_pressure_is_retried(
    message: str, own: bool
) -> None:
    # The kubelet's messages; the launcher, SIGTERMed by the eviction, exits 75 and the pod is marked
    # disrupted either way. Resubmitted, a pod past its own limit filled its disk again, paid each time.
    pod = _pod(
        "Failed",
        {"exitCode": 75, "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:00Z"},
        reason="Evicted",
        message=message,
        conditions=[{"type": "DisruptionTarget", "status": "True"}],
    )
    status = status_from_pod(pod)
    assert status.state == (JobState.FAILED if own else JobState.INTERRUPTED)
    if own:
        raise_it = "(raise the pod's ephemeral-storage limit in resources=)"
        assert status.reason == f"Evicted: {message.strip()} {raise_it}"


def test_a_templated_grace_period_is_read_as_a_number_and_a_bad_one_named() -> None:
    # "60" from a template raised "TypeError: '<' not supported" at the first submit. A bad one is refused at
    # the task's start (before its money) and at the render, not where a running pod's backend is opened.
    from costaware.adapters.compute.base import check_backend_options

    check_backend_options("kubernetes", {"image": "i", "termination_grace_seconds": "60"})
    pod = render_of({"image": "i", "termination_grace_seconds": "60"})
    assert pod["spec"]["terminationGracePeriodSeconds"] == 60
    given = {"image": "i", "termination_grace_seconds": "sixty"}
    for refuse in (lambda: check_backend_options("kubernetes", given), lambda: render_of(given)):
        with pytest.raises(
            ConfigurationError, match="termination_grace_seconds must be a whole number from 1 to 119"
        ):
            refuse()


class _OnePodApi(_PodGoneApi):
    """The CoreV1Api calls a poll makes, answering with one pod, and the deletes it is asked for."""

    def __init__(self, pod: dict[str, Any]) -> None:
        super().__init__(200)
        self.pod, self.deleted = pod, []

    def read_namespaced_pod(self, name: str, namespace: str) -> Any:
        return self.pod

    def delete_namespaced_pod(self, name: str, namespace: str) -> Any:
        self.deleted.append(name)


def test_a_pod_ended_for_us_but_not_for_kubernetes_is_deleted_at_the_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The training done beside a sidecar left the pod Running (read RUNNING till activeDeadlineSeconds); a
    # container that cannot start was failed but left Pending on its paid node, to start later, unwatched.
    done = {
        "metadata": {"name": "train-1"},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "istio-proxy", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
                {
                    "name": "train",
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "startedAt": "2026-01-01T00:00:00Z",
                            "finishedAt": "2026-01-01T03:00:00Z",
                        }
                    },
                },
            ],
        },
    }
    stuck = {
        "metadata": {"name": "train-2"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "train", "state": {"waiting": {"reason": "ImagePullBackOff"}}}],
        },
    }
    backend = open_backend("kubernetes", {"image": "costaware:1", "namespace": "ml"})
    for pod, state in ((done, JobState.SUCCEEDED), (stuck, JobState.FAILED)):
        api = _OnePodApi(pod)
        monkeypatch.setattr(backend, "_api", lambda api=api: api)
        assert backend.poll(pod["metadata"]["name"]).state == state
        assert api.deleted == [pod["metadata"]["name"]]
    running = {
        **done,
        "status": {"phase": "Running", "containerStatuses": [done["status"]["containerStatuses"][0]]},
    }
    api = _OnePodApi(running)
    monkeypatch.setattr(backend, "_api", lambda: api)
    assert backend.poll("train-1").state == JobState.RUNNING and api.deleted == []  # nothing ended: kept


class _RefusingApi:
    """The API server's answer to a pod create: an HTTP error (no cluster here to refuse it)."""

    def __init__(self, status: int) -> None:
        self.status = status

    def create_namespaced_pod(self, namespace: str, body: Any) -> Any:
        raise _ApiException(self.status)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (404, r"in namespace 'ml': \(404\) Reason: Not Found; check namespace in backend_options"),
        (403, "grant it 'create' on pods"),
        (422, "check resources, tolerations, node_selector and service_account"),
    ],
)
def test_a_pod_the_api_server_refuses_fails_without_retry(
    monkeypatch: pytest.MonkeyPatch, status: int, message: str
) -> None:
    # Each Airflow retry was refused the same way: a missing namespace read as a passing failure.
    backend = open_backend("kubernetes", {"image": "costaware:1", "namespace": "ml"})
    monkeypatch.setattr(backend, "_api", lambda: _RefusingApi(status))
    with pytest.raises(ConfigurationError, match=message):
        backend.submit(request())
    monkeypatch.setattr(backend, "_api", lambda: _RefusingApi(503))
    with pytest.raises(ComputeBackendError, match="cannot create pod") as raised:
        backend.submit(request())
    assert not isinstance(raised.value, ConfigurationError)
    monkeypatch.setattr(backend, "_api", lambda: _RefusingApi(409))
    assert backend.submit(request()) == request().job_name


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"spot": "spot"}, r"missing: on_demand; not a market: none"),
        ({"spot": "spot", "on-demand": "on-demand"}, r"missing: on_demand; not a market: on-demand"),
        ({"spot": "SPOT", "on_demand": ""}, r"missing: on_demand;"),
    ],
)
def test_capacity_values_without_a_market_are_refused_before_any_pod(
    values: dict[str, str], message: str
) -> None:
    # Accepted, the spot attempts ran and were paid for, and the on-demand fallback failed at its submit.
    from costaware.adapters.compute.base import check_backend_options

    options = {"image": "costaware:1", "capacity_values": values}
    for refuse in (lambda: check_backend_options("kubernetes", options), lambda: render_of(options)):
        with pytest.raises(
            ConfigurationError, match=rf"capacity_values .* must give a node label value .*{message}"
        ):
            refuse()
    both = {"spot": "SPOT", "on_demand": "ON_DEMAND"}
    backend = open_backend("kubernetes", {"image": "costaware:1", "capacity_values": both})
    pod = backend.render(request("on_demand"))  # type: ignore[attr-defined]
    assert pod["spec"]["nodeSelector"]["karpenter.sh/capacity-type"] == "ON_DEMAND"


def render_of(options: dict[str, Any], market: str = "spot") -> dict[str, Any]:
    pod: dict[str, Any] = open_backend("kubernetes", options).render(request(market))  # type: ignore[attr-defined]
    return pod


def _unknown_pod(**status: Any) -> dict[str, Any]:
    """A pod whose node lost contact: phase Unknown, its training container last seen running."""
    running = {"name": "train", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
    return {
        "metadata": {"name": "train-1", "labels": {"costaware/market": "spot"}},
        "status": {"phase": "Unknown", "containerStatuses": [running], **status},
    }


def test_a_pod_whose_node_lost_contact_runs_billed_then_counts_as_interrupted() -> None:
    # Phase Unknown read as pending: billed 0 s, and watched till the deadline as if it waited for a node.
    from costaware.adapters.compute.kubernetes import UNKNOWN_PHASE_SECONDS

    lost_at = datetime(2026, 1, 1, 1, 0, tzinfo=timezone.utc)
    not_ready = {"type": "Ready", "status": "False", "lastTransitionTime": lost_at.isoformat()}
    pod = _unknown_pod(conditions=[not_ready])
    early = status_from_pod(pod, now=lost_at.replace(minute=2))
    assert (early.state, early.billable_seconds, early.ended_at) == (JobState.RUNNING, 3720.0, None)
    assert "lost contact 120 s ago" in early.reason
    late_at = datetime.fromtimestamp(lost_at.timestamp() + UNKNOWN_PHASE_SECONDS, tz=timezone.utc)
    late = status_from_pod(pod, now=late_at)
    assert (late.state, late.billable_seconds) == (JobState.INTERRUPTED, 3600 + UNKNOWN_PHASE_SECONDS)
    assert late.ended_at == late_at.timestamp() and "counted as an interruption" in late.reason
    # No time to count from: an interruption at once rather than a wait with no end.
    assert status_from_pod(_unknown_pod(), now=lost_at).state == JobState.INTERRUPTED
    # An eviction's deletion time counts when the Ready condition says nothing.
    evicted = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": lost_at.isoformat()}}
    evicted["status"] = {k: v for k, v in pod["status"].items() if k != "conditions"}
    assert status_from_pod(evicted, now=lost_at.replace(minute=1)).state == JobState.RUNNING
    # The container's own end, seen before the contact was lost, decides.
    ended = {"exitCode": 0, "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:30:00Z"}
    done = _unknown_pod(containerStatuses=[{"name": "train", "state": {"terminated": ended}}])
    assert status_from_pod(done, now=lost_at).state == JobState.SUCCEEDED


def test_a_pod_out_of_contact_too_long_is_deleted_at_the_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    # Deleted, it is stopped by its kubelet if its node comes back, instead of running on, unwatched.
    from costaware.adapters.compute import kubernetes

    lost_at = datetime(2026, 1, 1, 1, 0, tzinfo=timezone.utc)
    not_ready = {"type": "Ready", "status": "Unknown", "lastTransitionTime": lost_at.isoformat()}
    api = _OnePodApi(_unknown_pod(conditions=[not_ready]))
    backend = open_backend("kubernetes", {"image": "costaware:1", "namespace": "ml"})
    monkeypatch.setattr(backend, "_api", lambda: api)
    monkeypatch.setattr(kubernetes, "utcnow", lambda: lost_at.replace(minute=1))
    assert backend.poll("train-1").state == JobState.RUNNING and api.deleted == []
    monkeypatch.setattr(kubernetes, "utcnow", lambda: lost_at.replace(minute=10))
    assert backend.poll("train-1").state == JobState.INTERRUPTED and api.deleted == ["train-1"]


def _terminating_pod(deleted_at: datetime, grace: int = 120) -> dict[str, Any]:
    """A pod evicted from a node out of reach: phase still Running, a deletion time its kubelet never met."""
    pod = _unknown_pod()
    pod["metadata"] = {**pod["metadata"], "deletionTimestamp": deleted_at.isoformat()}
    pod["spec"] = {"nodeName": "n1", "terminationGracePeriodSeconds": grace}
    pod["status"] = {**pod["status"], "phase": "Running"}
    return pod


def test_a_running_pod_stuck_terminating_counts_as_interrupted_one_grace_period_past_its_deletion() -> None:
    # Current Kubernetes keeps an unreachable node's evicted pods Running, with a deletionTimestamp, until
    # the Node object goes: read as running, the attempt was billed and not resubmitted, maybe till the
    # deadline.
    from datetime import timedelta

    deleted_at = datetime(2026, 1, 1, 1, 0, tzinfo=timezone.utc)
    pod = _terminating_pod(deleted_at, grace=120)
    within = status_from_pod(pod, now=deleted_at + timedelta(seconds=119))
    assert (within.state, within.billable_seconds, within.ended_at) == (JobState.RUNNING, 3719.0, None)
    late_at = deleted_at + timedelta(seconds=120)
    late = status_from_pod(pod, now=late_at)
    assert (late.state, late.billable_seconds, late.ended_at) == (
        JobState.INTERRUPTED,
        3720.0,
        late_at.timestamp(),
    )
    assert (
        "has not confirmed the stop 120 s later" in late.reason
        and "counted as an interruption" in late.reason
    )
    # Not deleted: running for as long as it runs.
    running = {**pod, "metadata": {k: v for k, v in pod["metadata"].items() if k != "deletionTimestamp"}}
    assert status_from_pod(running, now=deleted_at + timedelta(days=1)).state == JobState.RUNNING


def test_a_running_pod_on_a_node_tainted_unreachable_counts_as_interrupted_after_300_s() -> None:
    # A pod that tolerates the unreachable taint (a blanket "operator: Exists") is never evicted at all.
    from datetime import timedelta

    from costaware.adapters.compute.kubernetes import UNKNOWN_PHASE_SECONDS

    tainted_at = datetime(2026, 1, 1, 1, 0, tzinfo=timezone.utc)
    taints = [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": tainted_at.isoformat()}
    ]
    pod = {**_unknown_pod(), "status": {**_unknown_pod()["status"], "phase": "Running"}}
    early = status_from_pod(pod, now=tainted_at + timedelta(seconds=60), node_taints=taints)
    assert early.state == JobState.RUNNING
    late = status_from_pod(pod, now=tainted_at + timedelta(seconds=UNKNOWN_PHASE_SECONDS), node_taints=taints)
    assert late.state == JobState.INTERRUPTED and "unreachable since" in late.reason
    spot_taint = [{"key": "spot", "effect": "NoSchedule", "timeAdded": tainted_at.isoformat()}]
    assert status_from_pod(pod, now=tainted_at + timedelta(days=1), node_taints=spot_taint).state == (
        JobState.RUNNING
    )


class _UnreachableNodeApi(_OnePodApi):
    """A running pod on a node the node controller tainted unreachable."""

    def __init__(self, pod: dict[str, Any], tainted_at: datetime) -> None:
        super().__init__(pod)
        self.tainted_at = tainted_at

    def read_node(self, name: str) -> Any:
        taint = {"key": "node.kubernetes.io/unreachable", "timeAdded": self.tainted_at.isoformat()}
        return {
            "metadata": {"labels": {"node.kubernetes.io/instance-type": "g5.xlarge"}},
            "spec": {"taints": [taint]},
        }


def test_a_pod_on_a_node_unreachable_too_long_is_deleted_at_the_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    from costaware.adapters.compute import kubernetes

    tainted_at = datetime(2026, 1, 1, 1, 0, tzinfo=timezone.utc)
    pod = _pod("Running")
    api = _UnreachableNodeApi(pod, tainted_at)
    backend = open_backend("kubernetes", {"image": "costaware:1", "namespace": "ml"})
    monkeypatch.setattr(backend, "_api", lambda: api)
    monkeypatch.setattr(kubernetes, "utcnow", lambda: tainted_at.replace(minute=1))
    polled = backend.poll("p")
    assert (polled.state, polled.instance_type, api.deleted) == (JobState.RUNNING, "g5.xlarge", [])
    monkeypatch.setattr(kubernetes, "utcnow", lambda: tainted_at.replace(minute=10))
    assert backend.poll("p").state == JobState.INTERRUPTED and api.deleted == ["p"]


def test_a_pod_found_by_its_name_says_when_it_was_created_and_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A retry that cannot poll the pod it follows bills it from these, not from its own re-attach.
    backend = open_backend("kubernetes", {"image": "costaware:1", "namespace": "ml"})
    pod = _pod("Running", startTime="2026-01-01T00:00:05Z")
    pod["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    monkeypatch.setattr(backend, "_api", lambda: _OnePodApi(pod))
    found = backend.find("p")
    assert found is not None and found.job_id == "p"
    assert found.started_at == datetime(2026, 1, 1, 0, 0, 5, tzinfo=timezone.utc).timestamp()
    assert found.created_at == datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()
    assert found.market == "spot"  # its label: a retry that cannot read it bills it there
    assert found.run_token == ""  # a pod that gives no uid: its bills mark no run
    # The pod's uid marks this run of the name: a pod created again under it after a delete has another.
    pod["metadata"]["uid"] = "6b1f3c7e-0d4a-4c55-9a1e-2f0c8d7b9e10"
    assert backend.find("p").run_token == "6b1f3c7e-0d4a-4c55-9a1e-2f0c8d7b9e10"  # type: ignore[union-attr]
    del pod["status"]["startTime"]  # not started by a kubelet yet: from its creation
    assert backend.find("p").running_since == found.created_at  # type: ignore[union-attr]
    monkeypatch.setattr(backend, "_api", lambda: _PodGoneApi(404))
    assert backend.find("p") is None


def test_a_pod_found_by_its_name_after_it_ended_says_when_and_how_as_its_poll_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pod's name is the same on every try and clear: one that ended days ago was billed up to now.
    backend = open_backend("kubernetes", {"image": "costaware:1", "namespace": "ml"})
    ended = {"exitCode": 75, "startedAt": "2026-01-01T00:00:05Z", "finishedAt": "2026-01-01T01:00:05Z"}
    pod = _pod("Failed", ended, startTime="2026-01-01T00:00:05Z")
    monkeypatch.setattr(backend, "_api", lambda: _OnePodApi(pod))
    found = backend.find("p")
    polled = backend.poll("p")
    assert found is not None and found.end_state == JobState.INTERRUPTED == polled.state
    assert found.ended_at == polled.ended_at == datetime(2026, 1, 1, 1, 0, 5, tzinfo=timezone.utc).timestamp()
    # Ended only for us (its training container done beside a running sidecar): it runs on, not ended.
    monkeypatch.setattr(backend, "_api", lambda: _OnePodApi(_pod("Running", ended)))
    assert backend.find("p").ended_at is None  # type: ignore[union-attr]
    monkeypatch.setattr(backend, "_api", lambda: _OnePodApi(_pod("Running")))
    running = backend.find("p")
    assert running is not None and (running.ended_at, running.end_state) == (None, None)


@pytest.mark.parametrize("started", [True, False], ids=["started", "never started"])
def test_a_pod_failed_before_its_container_ended_is_found_ended_when_the_pod_says(
    monkeypatch: pytest.MonkeyPatch, started: bool
) -> None:
    # Evicted before its container started (no finishedAt), the pod was found unended by a retry: followed
    # as pending, billed up to now, though it ended when its conditions last moved.
    from costaware.adapters.compute import kubernetes

    backend = open_backend("kubernetes", {"image": "costaware:1", "namespace": "ml"})
    midnight = datetime(2026, 1, 1, tzinfo=timezone.utc)
    waiting = {"waiting": {"reason": "ContainerCreating"}}
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Failed", "reason": "Evicted", "containerStatuses": [{"state": waiting}]},
    }
    if started:
        pod["status"]["startTime"] = "2026-01-01T00:00:05Z"
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"},
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:01:05Z"},
        ]
    monkeypatch.setattr(backend, "_api", lambda: _OnePodApi(pod))
    monkeypatch.setattr(kubernetes, "utcnow", lambda: midnight.replace(hour=5))
    found, polled = backend.find("p"), backend.poll("p")
    end = midnight.replace(minute=1, second=5) if started else midnight  # never started: ran 0 s
    assert found is not None and found.end_state == JobState.INTERRUPTED == polled.state
    assert found.ended_at == polled.ended_at == end.timestamp()
    assert polled.billable_seconds == 0.0  # its container never ran


@pytest.mark.parametrize("container", ["never ran", "ran"])
def test_a_failed_pods_end_does_not_move_when_a_deletion_time_is_set_later(
    monkeypatch: pytest.MonkeyPatch, container: str
) -> None:
    # A Failed pod without conditions ended at its start time until a deletion time was set (a cleanup
    # hours later): its end, and its ledger key, moved to the deletion, and it was billed a second time.
    from costaware.adapters.compute import kubernetes

    backend = open_backend("kubernetes", {"image": "costaware:1", "namespace": "ml"})
    midnight = datetime(2026, 1, 1, tzinfo=timezone.utc)
    state = (
        {"running": {"startedAt": "2026-01-01T00:00:10Z"}}
        if container == "ran"
        else {"waiting": {"reason": "ContainerCreating"}}
    )
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "startTime": "2026-01-01T00:00:05Z",
            "containerStatuses": [{"state": state}],
        },
    }
    monkeypatch.setattr(backend, "_api", lambda: _OnePodApi(pod))
    monkeypatch.setattr(kubernetes, "utcnow", lambda: midnight.replace(hour=5))
    before = backend.poll("p")
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T03:00:00Z"
    deleted = backend.poll("p")
    if container == "never ran":
        # Billed 0 s either way: its end is its start, whatever a later deletion says.
        assert before.ended_at == deleted.ended_at == midnight.replace(second=5).timestamp()
        assert before.billable_seconds == deleted.billable_seconds == 0.0
    else:
        # A container seen running with no end the pod gives is billed as running (no end, up to now),
        # and once deleted up to its deletion, the latest it ran; never before it ran.
        assert before.ended_at is None and before.billable_seconds == 5 * 3600 - 10
        assert deleted.ended_at == midnight.replace(hour=3).timestamp()
        assert deleted.billable_seconds == 3 * 3600 - 10


def test_a_pod_asked_to_stop_says_when_from_its_deletion_time() -> None:
    # Kubernetes said nothing of a stop asked: a wait re-created by a triggerer restart that cannot read its
    # kept state deleted the pod again at the cap and billed it gone from that later stop. Its deletion time
    # is the delete plus its grace period.
    from datetime import timedelta

    from costaware.adapters.compute.base import STOP_REQUESTED_AT

    deleted_at = datetime(2026, 1, 1, 1, 0, tzinfo=timezone.utc)
    pod = _terminating_pod(deleted_at, grace=120)
    pod["metadata"]["deletionGracePeriodSeconds"] = 90  # the delete's own, which the pod's spec may not be
    status = status_from_pod(pod, now=deleted_at - timedelta(seconds=30))
    assert status.state == JobState.RUNNING
    assert status.metrics[STOP_REQUESTED_AT] == (deleted_at - timedelta(seconds=90)).timestamp()
    del pod["metadata"]["deletionGracePeriodSeconds"]
    said = status_from_pod(pod, now=deleted_at - timedelta(seconds=30)).metrics[STOP_REQUESTED_AT]
    assert said == (deleted_at - timedelta(seconds=120)).timestamp()
    running = {**pod, "metadata": {k: v for k, v in pod["metadata"].items() if k != "deletionTimestamp"}}
    assert STOP_REQUESTED_AT not in status_from_pod(running, now=deleted_at).metrics


@pytest.mark.parametrize(
    "reason", ["EvictionByEvictionAPI", "PreemptionByScheduler", "DeletionByTaintManager"]
)
def test_a_pod_evicted_or_preempted_is_not_said_asked_to_stop(reason: str) -> None:
    # A drain's eviction (or the scheduler's preemption) sets the deletion time as our stop does: read as a
    # stop asked, a wait that could not read its kept state took it as its own stop at the cap (not sent
    # again, the job's end recorded as max_usd, its bill bounded by that stop). Kubernetes marks such a pod
    # DisruptionTarget; a plain delete (KubernetesBackend.stop) does not.
    from datetime import timedelta

    from costaware.adapters.compute.base import STOP_REQUESTED_AT

    deleted_at = datetime(2026, 1, 1, 1, 0, tzinfo=timezone.utc)
    pod = _terminating_pod(deleted_at, grace=120)
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": reason}
    pod["status"] = {**pod["status"], "conditions": [disruption]}
    evicted = status_from_pod(pod, now=deleted_at - timedelta(seconds=30))
    assert evicted.state == JobState.RUNNING and STOP_REQUESTED_AT not in evicted.metrics
    assert f"{reason}, not a stop asked here" in evicted.reason
    cleared = {**pod, "status": {**pod["status"], "conditions": [{**disruption, "status": "False"}]}}
    assert STOP_REQUESTED_AT in status_from_pod(cleared, now=deleted_at - timedelta(seconds=30)).metrics


class _RecordingApi:
    """Takes every pod create (the API server's validation is what the backend must do before it)."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> None:
        self.created.append(body)


SELECTOR = "backend_options['node_selector'] of the kubernetes backend "
LABEL_KEY_RULE = (
    "which is no Kubernetes label: a name of 1 to 63 letters, digits, '-', '_' or '.' that starts and ends "
    "with a letter or digit, after an optional lowercase DNS subdomain and '/' (e.g. 'example.com/team')"
)
LABEL_VALUE_RULE = (
    "which is no Kubernetes label value: '' or up to 63 letters, digits, '-', '_' or '.' that start and end "
    "with a letter or digit"
)


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        # dict() raised a bare ValueError once the task had reserved its money.
        ("team=ml", "must be a dict of node label to value, such as {'team': 'ml'}: got the str 'team=ml'"),
        (
            [("team", "ml")],
            "must be a dict of node label to value: got the list [('team', 'ml')]; write it as "
            "{'team': 'ml'}",
        ),
        # The rest reached the pod's create, where the API server refuses them (ValidatePodSpec checks
        # nodeSelector as labels): after the money was reserved.
        ({"gpus": 1}, "gives 'gpus' the int 1: node label values are strings; write it as '1'"),
        ({7: "x"}, "has the int 7 as a key: node labels are strings; write it as '7'"),
        ({"team ml": "x"}, f"has the key 'team ml', {LABEL_KEY_RULE}"),
        ({"": "x"}, f"has the key '', {LABEL_KEY_RULE}"),
        ({"Example.com/team": "x"}, f"has the key 'Example.com/team', {LABEL_KEY_RULE}"),
        ({"a/b/c": "x"}, f"has the key 'a/b/c', {LABEL_KEY_RULE}"),
        ({"/team": "x"}, f"has the key '/team', {LABEL_KEY_RULE}"),
        ({"t" * 64: "x"}, f"has the key {'t' * 64!r}, {LABEL_KEY_RULE}"),
        ({"team": "ml team"}, f"gives 'team' the value 'ml team', {LABEL_VALUE_RULE}"),
        ({"team": "-ml"}, f"gives 'team' the value '-ml', {LABEL_VALUE_RULE}"),
        ({"team": "v" * 64}, f"gives 'team' the value {'v' * 64!r}, {LABEL_VALUE_RULE}"),
    ],
)
def test_a_node_selector_of_no_labels_is_refused_before_any_pod(
    monkeypatch: pytest.MonkeyPatch, selector: object, message: str
) -> None:
    from costaware.adapters.compute.base import check_backend_options
    from costaware.adapters.compute.kubernetes import KubernetesBackend

    api = _RecordingApi()
    monkeypatch.setattr(KubernetesBackend, "_api", lambda self: api)
    options = {"image": "costaware:1", "node_selector": selector}
    for where, refuse in {
        "options check": lambda: check_backend_options("kubernetes", options),
        "backend": lambda: open_backend("kubernetes", options).submit(request()),
    }.items():
        with pytest.raises(ConfigurationError) as caught:
            refuse()
        assert str(caught.value) == SELECTOR + message, where
    assert api.created == []  # no pod was created


def test_a_node_selector_of_labels_reaches_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    from costaware.adapters.compute.kubernetes import KubernetesBackend

    api = _RecordingApi()
    monkeypatch.setattr(KubernetesBackend, "_api", lambda self: api)
    # The edges Kubernetes' IsLabelKey and IsLabelValue take: a prefix, 63 characters, an empty value.
    selector = {
        "example.com/team": "ML_team-1.0",
        "n" * 63: "v" * 63,
        f"{'a' * 63}.{'b' * 63}.{'c' * 63}.{'d' * 61}/x": "",
        "pool": "A",
    }
    open_backend("kubernetes", {"image": "costaware:1", "node_selector": selector}).submit(request())
    (pod,) = api.created
    assert pod["spec"]["nodeSelector"] == {
        **selector,
        "karpenter.sh/capacity-type": "spot",
        "node.kubernetes.io/instance-type": "g5.xlarge",
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"capacity_label": "capacity type"},
            "capacity_label 'capacity type' is no Kubernetes label: " + LABEL_KEY_RULE.split(": ", 1)[1],
        ),
        ({"capacity_label": None}, "capacity_label None is no Kubernetes label: "),
        (
            {"capacity_values": {"spot": "spot", "on_demand": "on demand"}},
            "capacity_values gives 'on_demand' the value 'on demand', which is no Kubernetes label value: ",
        ),
        (
            {"capacity_values": {"spot": "spot"}},
            "capacity_values {'spot': 'spot'} must give a node label value",
        ),
        ({"capacity_values": "spot=spot"}, "capacity_values must map each market to its node label value"),
    ],
)
def test_a_capacity_label_or_value_that_is_no_label_is_refused_as_the_task_starts(
    options: dict[str, Any], message: str
) -> None:
    # Passed check_backend_options (the task's start, before its money is reserved) and was refused only
    # when the backend was built, after the money was reserved.
    from costaware.adapters.compute.base import check_backend_options

    with pytest.raises(ConfigurationError) as caught:
        check_backend_options("kubernetes", {"image": "costaware:1", **options})
    assert str(caught.value).startswith(message)


def test_the_default_or_eks_capacity_labels_pass_the_options_check() -> None:
    from costaware.adapters.compute.base import check_backend_options

    check_backend_options("kubernetes", {"image": "costaware:1"})
    check_backend_options(
        "kubernetes", {"image": "costaware:1", "capacity_label": EKS_LABEL, "capacity_values": EKS_VALUES}
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"capacity_label": "capacity type"},
            "capacity_label 'capacity type' is no Kubernetes label: " + LABEL_KEY_RULE.split(": ", 1)[1],
        ),
        (
            {"capacity_values": {"spot": "spot", "on_demand": "on demand"}},
            f"capacity_values gives 'on_demand' the value 'on demand', {LABEL_VALUE_RULE}",
        ),
    ],
)
def test_a_capacity_label_or_value_that_is_no_label_is_refused_before_any_pod(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], message: str
) -> None:
    # Every pod's nodeSelector carries them: the API server refused the pod at its create, an on-demand
    # fallback's only after the spot attempts had been paid for.
    from costaware.adapters.compute.base import check_backend_options
    from costaware.adapters.compute.kubernetes import KubernetesBackend

    api = _RecordingApi()
    monkeypatch.setattr(KubernetesBackend, "_api", lambda self: api)
    given = {"image": "costaware:1", **options}
    for where, refuse in {
        "options check": lambda: check_backend_options("kubernetes", given),
        "backend": lambda: open_backend("kubernetes", given).submit(request("on_demand")),
    }.items():
        with pytest.raises(ConfigurationError) as caught:
            refuse()
        assert str(caught.value) == message, where
    assert api.created == []  # no pod was created


class _RunningPodApi(_RecordingApi, _OnePodApi):
    """A running spot pod an older release created, its node, the deletes asked and the creates taken."""

    def __init__(self) -> None:
        _OnePodApi.__init__(self, {**_pod("Running"), "metadata": {"name": "train-1", "uid": "u1"}})
        _RecordingApi.__init__(self)
        self.pod["metadata"]["labels"] = {"costaware/market": "spot"}

    def read_node(self, name: str) -> Any:
        return {"metadata": {"labels": {"node.kubernetes.io/instance-type": "g5.xlarge"}}}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # dict() took pairs; the pod was created with them.
        (
            {"node_selector": [("team", "ml")]},
            SELECTOR + "must be a dict of node label to value: got the list [('team', 'ml')]; write it as "
            "{'team': 'ml'}",
        ),
        # Its spot pods were created; only the on-demand fallback's create was refused.
        (
            {"capacity_values": {"spot": "spot", "on_demand": "on demand"}},
            f"capacity_values gives 'on_demand' the value 'on demand', {LABEL_VALUE_RULE}",
        ),
        # Checked where the backend was opened: after the task's money was held, and at each poll.
        (
            {"termination_grace_seconds": 120},
            "backend option termination_grace_seconds must be a whole number from 1 to 119, got 120",
        ),
    ],
)
def test_a_pod_an_older_release_created_with_node_labels_it_took_can_still_be_polled_and_stopped(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], message: str
) -> None:
    # The triggers build a running job's backend from its options as written to poll, stop or find it:
    # refused there, such a pod ran on unstopped and unbilled. Only a new submit of them is refused.
    from costaware.adapters.compute.base import check_backend_options
    from costaware.adapters.compute.kubernetes import KubernetesBackend

    api = _RunningPodApi()
    monkeypatch.setattr(KubernetesBackend, "_api", lambda self: api)
    given = {"image": "costaware:1", **options}
    backend = open_backend("kubernetes", given)
    status = backend.poll("train-1")
    assert (status.state, status.market, status.instance_type) == (JobState.RUNNING, "spot", "g5.xlarge")
    found = backend.find("train-1")
    assert found is not None and (found.job_id, found.run_token) == ("train-1", "u1")
    backend.stop("train-1")
    assert api.deleted == ["train-1"]
    for where, refuse in {
        "options check": lambda: check_backend_options("kubernetes", given),
        "backend": lambda: backend.submit(request("on_demand")),
    }.items():
        with pytest.raises(ConfigurationError) as caught:
            refuse()
        assert str(caught.value) == message, where
    assert api.created == []  # no pod was created


def test_a_list_whose_key_no_dict_can_hold_is_refused_without_a_dict_to_write() -> None:
    from costaware.adapters.compute.node_labels import node_selector_labels

    # Building the "write it as" suggestion raised a bare TypeError (unhashable type: 'list').
    with pytest.raises(ConfigurationError) as caught:
        node_selector_labels([[["a"], "b"]])
    assert str(caught.value) == (
        "backend_options['node_selector'] of the kubernetes backend must be a dict of node label to value, "
        "such as {'team': 'ml'}: got the list [[['a'], 'b']]"
    )


def test_an_invisible_character_in_a_refused_label_key_is_shown_escaped() -> None:
    from costaware.adapters.compute.node_labels import node_selector_labels

    with pytest.raises(ConfigurationError) as caught:
        node_selector_labels({"cafe\u0301": "x"})
    assert str(caught.value).startswith(
        "backend_options['node_selector'] of the kubernetes backend has the key 'cafe\\u0301', which is no "
    )
