"""Placing an attempt in a zone: each backend honours ``JobRequest.availability_zone`` or refuses it.

Batch runs against moto's server, Kubernetes against the pod it renders, the local backend and the preemption
replay with real child processes.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from remote_support import aws_client, make_batch_queues

from costaware.adapters.compute import batch, sagemaker
from costaware.adapters.compute.base import (
    JobRequest,
    JobState,
    JobStatus,
    open_backend,
    require_zone_placement,
)
from costaware.adapters.compute.kubernetes import ZONE_LABEL, render_pod, status_from_pod
from costaware.adapters.compute.local import LocalBackend
from costaware.adapters.compute.replay import Preemption, PreemptionInjector
from costaware.core.errors import ConfigurationError

ROLE = "arn:aws:iam::123456789012:role/train"


def request(market: str = "spot", zone: str = "", **kwargs: Any) -> JobRequest:
    args: dict[str, Any] = {
        "job_name": f"train-0123456789-a1-{market.replace('_', '')}",
        "spec_uri": "s3://ml/jobs/spec.json",
        "market": market,
        "instance_type": "m5.large",
        "checkpoint_uri": "s3://ml/ckpt/dag/train/run",
        "availability_zone": zone,
        **kwargs,
    }
    return JobRequest(**args)


# -- the request, the status and the check before submitting ----------------------------------------------


@pytest.mark.parametrize("zone", ["us-east-1a", "use1-az4", "eu-west-3c", "zone-b", "a"])
def test_zone_names_of_aws_and_kubernetes_are_taken(zone: str) -> None:
    assert request(zone=zone).availability_zone == zone


@pytest.mark.parametrize("zone", ["us east 1a", "-us-east-1a", "us-east-1a-", "us_east_1a", "z" * 64, "a/b"])
def test_a_bad_zone_name_is_refused_with_its_value(zone: str) -> None:
    with pytest.raises(ConfigurationError, match=f"availability zone {zone!r} is not a zone name"):
        request(zone=zone)


def test_status_round_trips_its_zone_and_reads_an_older_state_without_one() -> None:
    status = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", availability_zone="us-east-1b")
    assert JobStatus.from_dict(status.to_dict()) == status
    older = status.to_dict()
    del older["availability_zone"]
    assert JobStatus.from_dict(older).availability_zone == ""


@pytest.mark.parametrize("backend", ["local", "batch", "kubernetes"])
def test_zones_are_accepted_on_backends_that_place_by_zone(backend: str) -> None:
    require_zone_placement(backend, ["us-east-1a", "us-east-1b"])


def test_zones_on_sagemaker_are_refused_and_no_zones_is_fine() -> None:
    require_zone_placement("sagemaker", [])
    with pytest.raises(
        ConfigurationError,
        match=r"sagemaker backend cannot place a job in zones 'us-east-1a': SageMaker chooses the zone "
        r"itself .* use the batch or kubernetes backend .* or leave zones unset",
    ):
        require_zone_placement("sagemaker", ["us-east-1a"])


@pytest.mark.parametrize(
    ("backend", "zones", "message"),
    [
        ("batch", ["us east"], "availability zone 'us east' is not a zone name"),
        ("batch", "us-east-1a", "zones must be a list of zone names, got the string 'us-east-1a'"),
        ("emr", ["us-east-1a"], "unknown compute backend 'emr'"),
    ],
)
def test_bad_zone_settings_are_refused(backend: str, zones: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        require_zone_placement(backend, zones)


def test_sagemaker_refuses_a_request_with_a_zone_before_any_call() -> None:
    backend = open_backend("sagemaker", {"role_arn": ROLE, "output_s3_uri": "s3://ml/out", "image_uri": "i"})
    zoned = request(zone="us-east-1a", instance_type="ml.m5.xlarge")
    # submit builds the request first: no client is made, no call reaches AWS
    with pytest.raises(
        ConfigurationError, match="asks for zone 'us-east-1a', but SageMaker chooses the zone"
    ):
        backend.submit(zoned)
    unzoned = sagemaker.training_job_request(
        request(instance_type="ml.m5.xlarge"), role_arn=ROLE, image_uri="i", output_s3_uri="s3://o"
    )
    assert unzoned["EnableManagedSpotTraining"] is True


# -- Batch -----------------------------------------------------------------------------------------------


@pytest.fixture
def zoned_queues(aws: str) -> dict[str, Any]:
    """The usual spot and on-demand queues plus two more spot queues standing for zones a and b."""
    queues = make_batch_queues(aws)
    a, b = make_batch_queues(aws), make_batch_queues(aws)
    return {**queues, "spot_queues": {"us-east-1a": a["spot_queue"], "us-east-1b": b["spot_queue"]}}


def test_batch_queue_per_zone_shape() -> None:
    queues = {"us-east-1a": "spot-a", "us-east-1b": "spot-b"}
    body = batch.submit_job_request(
        request(zone="us-east-1b"),
        spot_queue="spot",
        on_demand_queue="od",
        job_definition="t",
        spot_queues=queues,
    )
    assert body["jobQueue"] == "spot-b"
    # one on-demand queue: the zone is not placed
    on_demand = request("on_demand", zone="us-east-1b")
    assert batch.queue_for(on_demand, spot_queue="spot", on_demand_queue="od", spot_queues=queues) == "od"
    assert batch.queue_for(request(), spot_queue="spot", on_demand_queue="od", spot_queues=queues) == "spot"


@pytest.mark.parametrize(
    ("spot_queues", "message"),
    [
        (
            None,
            "asks for zone 'us-east-1c' but the backend has no spot_queues: configure one spot job queue per "
            "zone",
        ),
        (
            {"us-east-1a": "qa", "us-east-1b": "qb"},
            r"asks for zone 'us-east-1c', which spot_queues does not have "
            r"\(it has 'us-east-1a', 'us-east-1b'\)",
        ),
    ],
)
def test_batch_zone_without_a_queue_is_refused_before_aws(
    aws: str, zoned_queues: dict[str, Any], spot_queues: dict[str, str] | None, message: str
) -> None:
    options = {**zoned_queues, "spot_queues": spot_queues, "aws_conn_id": "moto_aws"}
    backend = open_backend("batch", options)
    with pytest.raises(ConfigurationError, match=message):
        backend.submit(request(zone="us-east-1c"))
    client = aws_client("batch", aws)
    for queue in [zoned_queues["spot_queue"], *zoned_queues["spot_queues"].values()]:
        named = [{"name": "JOB_NAME", "values": ["train-0123456789-a1-spot"]}]
        assert client.list_jobs(jobQueue=queue, filters=named)["jobSummaryList"] == []  # nothing submitted


@pytest.mark.parametrize(
    ("spot_queues", "message"),
    [
        ({"us east": "q"}, "availability zone 'us east' is not a zone name"),
        ({"us-east-1a": ""}, r"spot_queues has no job queue for zone\(s\) 'us-east-1a'"),
    ],
)
def test_batch_bad_spot_queues_are_refused(spot_queues: dict[str, str], message: str) -> None:
    options = {"spot_queue": "s", "on_demand_queue": "o", "job_definition": "t", "spot_queues": spot_queues}
    with pytest.raises(ConfigurationError, match=message):
        open_backend("batch", options)


def test_batch_spot_attempt_goes_to_its_zones_queue_and_reports_the_zone(
    aws: str, zoned_queues: dict[str, Any]
) -> None:
    backend = batch.BatchBackend(**zoned_queues, aws_conn_id="moto_aws")
    zoned = request(zone="us-east-1b")
    job_id = backend.submit(zoned)
    assert backend.submit(zoned) == job_id  # a retry finds the job in the zone's queue
    described = aws_client("batch", aws).describe_jobs(jobs=[job_id])["jobs"][0]
    assert described["jobQueue"].endswith(zoned_queues["spot_queues"]["us-east-1b"])
    status = backend.poll(job_id)
    assert (status.market, status.availability_zone) == ("spot", "us-east-1b")
    # the zone comes from the queue, which counts as spot without the market tag too
    assert backend.queue_zone(described["jobQueue"]) == "us-east-1b"
    assert backend.queue_zone(zoned_queues["spot_queue"]) == ""
    plain = backend.poll(backend.submit(request(job_name="train-0123456789-a2-spot")))
    assert (plain.market, plain.availability_zone) == ("spot", "")
    on_demand = backend.poll(backend.submit(request("on_demand", zone="us-east-1a")))
    assert (on_demand.market, on_demand.availability_zone) == ("on_demand", "")


# -- Kubernetes ------------------------------------------------------------------------------------------


def zone_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms: list[dict[str, Any]] = affinity["nodeSelectorTerms"]
    return terms


@pytest.mark.parametrize("market", ["spot", "on_demand"])
def test_kubernetes_pod_is_held_to_its_zone_and_reports_it(market: str) -> None:
    pod = render_pod(request(market, zone="us-east-1b"), image="costaware:1")
    assert zone_terms(pod) == [
        {
            "matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1b"]}
            ]
        }
    ]
    assert ZONE_LABEL not in pod["spec"]["nodeSelector"]
    status = status_from_pod({**pod, "status": {"phase": "Pending"}})
    assert (status.state, status.availability_zone) == (JobState.PENDING, "us-east-1b")


def test_kubernetes_pod_without_a_zone_has_no_affinity_and_reports_its_nodes_zone() -> None:
    pod = render_pod(request(), image="costaware:1")
    assert "affinity" not in pod["spec"]
    status = status_from_pod({**pod, "status": {"phase": "Running"}}, {ZONE_LABEL: "us-east-1c"})
    assert status.availability_zone == "us-east-1c"
    assert status_from_pod({**pod, "status": {"phase": "Running"}}).availability_zone == ""


def test_kubernetes_zone_pinned_by_the_node_selector_conflicts_with_another_zone() -> None:
    with pytest.raises(
        ConfigurationError, match=r"node_selector pins topology\.kubernetes\.io/zone='us-east-1a'"
    ):
        render_pod(request(zone="us-east-1b"), image="i", node_selector={ZONE_LABEL: "us-east-1a"})
    same = render_pod(request(zone="us-east-1a"), image="i", node_selector={ZONE_LABEL: "us-east-1a"})
    assert zone_terms(same)[0]["matchExpressions"][0]["values"] == ["us-east-1a"]


# -- local backend and the preemption replay -------------------------------------------------------------


def local_request(tmp: Path, name: str, zone: str = "", market: str = "spot") -> JobRequest:
    staging = tmp / "models" / "_staging" / name
    return JobRequest(
        job_name=name,
        spec_uri="",
        market=market,
        instance_type="m5.large",
        checkpoint_uri=str(tmp / "ckpt" / name),
        user_command=(sys.executable, "-c", "import time; time.sleep(60)"),
        output_uri=str(staging / "output"),
        result_uri=str(staging / "result.json"),
        availability_zone=zone,
    )


def wait_for(backend: LocalBackend, job_id: str, states: set[JobState], within: float = 15.0) -> JobStatus:
    deadline = time.monotonic() + within
    while (status := backend.poll(job_id)).state not in states:
        assert time.monotonic() < deadline, f"{job_id} still {status.state} after {within}s"
        time.sleep(0.05)
    return status


def test_per_zone_capacity_file_needs_a_zone_on_a_spot_request(tmp_path: Path) -> None:
    backend = LocalBackend(root=str(tmp_path / "jobs"), capacity_file=str(tmp_path / "capacity-{zone}"))
    with pytest.raises(
        ConfigurationError, match=r"is one file per zone \(\{zone\}\), so a spot request needs"
    ):
        backend.submit(local_request(tmp_path, "nozone-a1"))
    assert not (tmp_path / "jobs" / "nozone-a1").exists()  # nothing was written


@pytest.mark.parametrize(
    ("capacity_file", "samples", "message"),
    [
        ("capacity", {"us-east-1a": [True]}, r"needs a capacity_file with \{zone\}"),
        ("capacity-{zone}", [True], r"one file per zone \(\{zone\}\) but the replay has one trace"),
        ("capacity-{zone}", {"a": [True], "b": [True, False]}, "must have one length"),
        ("capacity-{zone}", {"a b": [True]}, "availability zone 'a b' is not a zone name"),
    ],
)
def test_replay_traces_must_match_the_capacity_file(
    tmp_path: Path, capacity_file: str, samples: Any, message: str
) -> None:
    backend = LocalBackend(root=str(tmp_path / "jobs"), capacity_file=str(tmp_path / capacity_file))
    with pytest.raises(ConfigurationError, match=message):
        PreemptionInjector(backend, samples, tick_seconds=0.1)
    assert list(tmp_path.iterdir()) == []  # no capacity file written


def test_a_capacity_file_without_zone_serves_every_zone(tmp_path: Path) -> None:
    backend = LocalBackend(root=str(tmp_path / "jobs"), capacity_file=str(tmp_path / "capacity"))
    (tmp_path / "capacity").write_text("0")
    job = backend.submit(local_request(tmp_path, "anyzone-a1", zone="us-east-1a"))
    time.sleep(0.5)
    status = backend.poll(job)
    assert (status.state, status.availability_zone) == (JobState.PENDING, "us-east-1a")
    backend.stop(job)
    assert wait_for(backend, job, {JobState.INTERRUPTED}).billable_seconds == 0.0


def test_a_drop_in_one_zone_preempts_only_that_zones_jobs(tmp_path: Path) -> None:
    backend = LocalBackend(root=str(tmp_path / "jobs"), capacity_file=str(tmp_path / "capacity-{zone}"))
    traces = {"zone-a": [True, False] + [False] * 200, "zone-b": [True] * 202}
    injector = PreemptionInjector(backend, traces, tick_seconds=0.2, signals=(signal.SIGKILL,))
    assert (tmp_path / "capacity-zone-a").read_text() == (tmp_path / "capacity-zone-b").read_text() == "1"
    in_a = backend.submit(local_request(tmp_path, "in-a-a1", zone="zone-a"))
    in_b = backend.submit(local_request(tmp_path, "in-b-a1", zone="zone-b"))
    on_demand = backend.submit(local_request(tmp_path, "od-a-a1", zone="zone-a", market="on_demand"))
    jobs = (in_a, in_b, on_demand)
    try:
        for job in jobs:
            wait_for(backend, job, {JobState.RUNNING})
        with injector:
            preempted = wait_for(backend, in_a, {JobState.INTERRUPTED})
            time.sleep(0.5)  # a few more ticks: zone b keeps its capacity
            assert (tmp_path / "capacity-zone-a").read_text() == "0"
            # a new spot job in zone a waits for capacity there; one in zone b starts
            waiting = backend.submit(local_request(tmp_path, "later-a-a1", zone="zone-a"))
            time.sleep(0.5)
            assert backend.poll(waiting).state is JobState.PENDING
            assert backend.poll(in_b).state is JobState.RUNNING
            assert backend.poll(on_demand).state is JobState.RUNNING
        assert preempted.availability_zone == "zone-a"
        assert [(p.job_id, p.zone, p.signum) for p in injector.preemptions] == [
            (in_a, "zone-a", int(signal.SIGKILL))
        ]
        assert isinstance(injector.preemptions[0], Preemption)
        assert backend.poll(in_b).availability_zone == "zone-b"
    finally:
        for job in (*jobs, "later-a-a1"):
            if (tmp_path / "jobs" / job).exists():
                backend.stop(job)
                backend.signal(job, signal.SIGKILL)


def test_a_local_job_whose_start_time_is_not_written_yet_is_pending_not_56_years_old(tmp_path: Path) -> None:
    # The supervisor wrote "started" in place: a poll between its open and its write read "" as epoch 0,
    # and a stop in that moment billed decades.
    backend = LocalBackend(root=str(tmp_path / "jobs"))
    folder = tmp_path / "jobs" / "half-a1"
    folder.mkdir(parents=True)
    (folder / "request.json").write_text('{"market": "spot", "instance_type": "m5.large"}')
    (folder / "started").write_text("")
    assert backend.poll("half-a1").state == JobState.PENDING
    (folder / "started").write_text(repr(time.time() - 5))
    running = backend.poll("half-a1")
    assert running.state == JobState.RUNNING and 5 <= running.billable_seconds < 60


def test_a_local_job_that_cannot_start_leaves_no_folder_for_its_retry_to_find(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Left behind, the folder made every retry's submit "submitted before": pending for ever.
    import subprocess

    from costaware.core.errors import ComputeBackendError

    def no_fork(*args: Any, **kwargs: Any) -> Any:
        raise OSError(11, "Resource temporarily unavailable")

    backend = LocalBackend(root=str(tmp_path / "jobs"))
    monkeypatch.setattr(subprocess, "Popen", no_fork)
    with pytest.raises(ComputeBackendError, match="cannot start local job 'nofork-a1'"):
        backend.submit(local_request(tmp_path, "nofork-a1"))
    assert backend.find("nofork-a1") is None


def test_a_launcher_killed_with_sigkill_takes_its_training_with_it(tmp_path: Path) -> None:
    # The launcher runs the command in a process group of its own: `kill -9` of the launcher left the
    # training running, unbilled, beside the next attempt that resumed from its checkpoint.
    import os
    import signal

    import psutil

    backend = LocalBackend(root=str(tmp_path / "jobs"))
    job = backend.submit(local_request(tmp_path, "orphan-a1", market="on_demand"))
    wait_for(backend, job, {JobState.RUNNING})
    launcher = None
    deadline = time.monotonic() + 15
    while launcher is None or not launcher.children():  # the launcher has started its command
        assert time.monotonic() < deadline, "the launcher never started its command"
        pid = backend.pid(job)
        launcher = psutil.Process(pid) if pid else None
        time.sleep(0.05)
    (training,) = launcher.children()
    os.kill(launcher.pid, signal.SIGKILL)
    ended = wait_for(backend, job, {JobState.INTERRUPTED, JobState.FAILED, JobState.SUCCEEDED})
    assert ended.exit_code == -signal.SIGKILL
    assert not training.is_running() or training.status() == psutil.STATUS_ZOMBIE


def test_a_local_job_whose_supervisor_died_is_an_interruption_billed_to_its_last_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker container restart (here: the supervisor killed alone) left the job RUNNING for ever, its
    # bill growing with the clock until the wait's limit, and the training running on beside the retry.
    import os

    import psutil

    from costaware.adapters.compute import local

    backend = LocalBackend(root=str(tmp_path / "jobs"))
    job = backend.submit(local_request(tmp_path, "gone-a1", market="on_demand"))
    wait_for(backend, job, {JobState.RUNNING})
    deadline = time.monotonic() + 15
    while not (launcher_pid := backend.pid(job)) or not psutil.Process(launcher_pid).children():
        assert time.monotonic() < deadline, "the launcher never started its command"
        time.sleep(0.05)
    launcher = psutil.Process(launcher_pid)
    (training,) = launcher.children()
    supervisor = launcher.parent()
    assert supervisor is not None and "costaware.adapters.compute.local" in " ".join(supervisor.cmdline())
    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.wait(10)
    last_beat = float((tmp_path / "jobs" / job / "alive").read_text())
    assert backend.poll(job).state == JobState.RUNNING  # a heartbeat younger than the limit: still running
    monkeypatch.setattr(local, "GONE_AFTER_SECONDS", 0.2)
    time.sleep(0.5)
    ended = backend.poll(job)
    assert ended.state == JobState.INTERRUPTED and ended.exit_code == -signal.SIGKILL
    assert (
        ended.reason.startswith("its supervisor stopped at ")
        and "billed to its last heartbeat" in ended.reason
    )
    assert ended.ended_at == last_beat  # billed to the heartbeat, not to the poll
    assert 0 <= ended.billable_seconds <= local.HEARTBEAT_SECONDS + 5
    for process in (launcher, training):  # what the supervisor left running is stopped with it
        with pytest.raises(psutil.NoSuchProcess):
            process.wait(10)
            process.status()
    assert backend.poll(job) == ended  # recorded: every later poll reads the same end


def test_a_local_job_whose_supervisor_never_started_ran_nothing_and_bills_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import os

    from costaware.adapters.compute import local

    backend = LocalBackend(root=str(tmp_path / "jobs"))
    folder = tmp_path / "jobs" / "never-a1"
    folder.mkdir(parents=True)
    (folder / "request.json").write_text(
        json.dumps({"market": "spot", "instance_type": "m5.large", "heartbeat_seconds": 5.0})
    )
    assert (
        backend.poll("never-a1").state == JobState.PENDING
    )  # just submitted: its supervisor may be starting
    an_hour_ago = time.time() - 3600
    os.utime(folder / "request.json", (an_hour_ago, an_hour_ago))
    ended = backend.poll("never-a1")
    assert ended.state == JobState.INTERRUPTED and ended.billable_seconds == 0
    # An older release's supervisor writes no heartbeat: its job is read as before, never ended by a poll.
    (older := tmp_path / "jobs" / "older-a1").mkdir()
    (older / "request.json").write_text('{"market": "spot", "instance_type": "m5.large"}')
    os.utime(older / "request.json", (an_hour_ago, an_hour_ago))
    assert backend.poll("older-a1").state == JobState.PENDING
    assert local.GONE_AFTER_SECONDS > 10 * local.HEARTBEAT_SECONDS


def test_a_heartbeat_that_cannot_be_written_does_not_end_the_supervisor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An OSError (a full disk, a network folder's hiccup) ended supervise() with a traceback: two minutes
    # later a poll took the job for gone and killed the healthy training.
    from costaware.adapters.compute.local import _heartbeat

    (tmp_path / "alive").mkdir()  # the write's rename onto it fails
    beat = _heartbeat(tmp_path)
    beat(now=True)
    assert "cannot write the heartbeat" in capsys.readouterr().err


def test_the_supervisor_runs_on_the_workers_interpreter_and_the_job_on_its_own(tmp_path: Path) -> None:
    # With python= a venv of costaware-runtime alone, the supervisor (costaware's own module) died at once
    # there, and the job was read as preempted, again and again up to max_attempts.
    import psutil

    calls = tmp_path / "calls"
    job_python = tmp_path / "venv" / "bin" / "python"
    job_python.parent.mkdir(parents=True)
    job_python.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {sys.executable} "$@"\n')
    job_python.chmod(0o755)
    backend = LocalBackend(root=str(tmp_path / "jobs"), python=str(job_python))
    job = backend.submit(local_request(tmp_path, "own-python-a1", market="on_demand"))
    try:
        wait_for(backend, job, {JobState.RUNNING})
        deadline = time.monotonic() + 15
        while not (launcher_pid := backend.pid(job)):
            assert time.monotonic() < deadline, "the launcher never started"
            time.sleep(0.05)
        supervisor = psutil.Process(launcher_pid).parent()
        assert supervisor is not None and supervisor.cmdline()[:3] == [
            sys.executable,
            "-m",
            "costaware.adapters.compute.local",
        ]
        ran = calls.read_text()
        assert "costaware_runtime" in ran  # the job's own interpreter ran the launcher...
        assert "costaware.adapters.compute.local" not in ran  # ...and not the supervisor
    finally:
        backend.stop(job)


def test_kubernetes_zones_a_node_selector_pin_excludes_are_refused_before_any_job() -> None:
    # Accepted, the move of a preempted attempt to us-east-1b failed the task after the preemption was paid.
    pinned = {"image": "i", "node_selector": {ZONE_LABEL: "us-east-1a"}}
    with pytest.raises(
        ConfigurationError,
        match=r"availability_zones 'us-east-1b' cannot be placed: backend_options node_selector pins "
        r"topology\.kubernetes\.io/zone='us-east-1a'",
    ):
        require_zone_placement("kubernetes", ["us-east-1a", "us-east-1b"], pinned)
    require_zone_placement("kubernetes", ["us-east-1a"], pinned)
    require_zone_placement("kubernetes", ["us-east-1a", "us-east-1b"], {"image": "i"})


def test_a_local_job_found_by_its_name_says_when_it_was_submitted_and_started(tmp_path: Path) -> None:
    # A retry that cannot poll the job it follows bills it from these, not from its own re-attach.
    import json
    import os

    backend = LocalBackend(root=str(tmp_path / "jobs"))
    folder = tmp_path / "jobs" / "train-a1"
    folder.mkdir(parents=True)
    (folder / "request.json").write_text(json.dumps({"market": "spot", "instance_type": "m5.large"}))
    os.utime(folder / "request.json", (1_700_000_000.0, 1_700_000_000.0))
    found = backend.find("train-a1")
    assert found is not None and (found.started_at, found.created_at) == (None, 1_700_000_000.0)
    assert found.market == "spot"  # as submitted: a retry that cannot read it bills it there
    assert found.run_token == ""  # an older release's folder: its bills mark no run
    (folder / "request.json").write_text(json.dumps({"market": "spot", "run_token": "a" * 32}))
    assert backend.find("train-a1").run_token == "a" * 32  # type: ignore[union-attr]
    (folder / "started").write_text("1700000060.5")
    found = backend.find("train-a1")
    assert found is not None and found.running_since == found.started_at == 1_700_000_060.5
    assert backend.find("train-a2") is None


@pytest.mark.parametrize(("exit_code", "state"), [(0, "succeeded"), (75, "interrupted"), (1, "failed")])
def test_a_local_job_found_by_its_name_after_it_ended_says_when_and_how_as_its_poll_does(
    tmp_path: Path, exit_code: int, state: str
) -> None:
    # The job's name is the same on every try and clear: one that ended days ago was billed up to now.
    import json

    backend = LocalBackend(root=str(tmp_path / "jobs"))
    folder = tmp_path / "jobs" / "train-a1"
    folder.mkdir(parents=True)
    (folder / "request.json").write_text(json.dumps({"market": "spot", "instance_type": "m5.large"}))
    (folder / "started").write_text("1700000060.5")
    found = backend.find("train-a1")
    assert found is not None and (found.ended_at, found.end_state) == (None, None)
    ended = {"exit_code": exit_code, "started_at": 1_700_000_060.5, "stopped_at": 1_700_003_660.5}
    (folder / "exit.json").write_text(json.dumps(ended))
    found, polled = backend.find("train-a1"), backend.poll("train-a1")
    assert found is not None and found.end_state is not None and found.end_state.value == state
    assert (found.end_state, found.ended_at) == (
        polled.state,
        polled.ended_at,
    ) and found.ended_at == 1_700_003_660.5


def test_a_local_job_asked_to_stop_says_when(tmp_path: Path) -> None:
    # A wait re-created by a triggerer restart that cannot read its kept state sent its stop at the cap again:
    # the job's own folder tells that a stop was asked, and when.
    import json
    import os

    from costaware.adapters.compute.base import STOP_REQUESTED_AT

    backend = LocalBackend(root=str(tmp_path / "jobs"))
    folder = tmp_path / "jobs" / "j"
    folder.mkdir(parents=True)
    request = {"market": "spot", "instance_type": "local", "env": {}}
    (folder / "request.json").write_text(json.dumps(request))
    (folder / "started").write_text("1000.0")
    assert STOP_REQUESTED_AT not in backend.poll("j").metrics
    (folder / "stop").touch()
    os.utime(folder / "stop", (1500.0, 1500.0))
    status = backend.poll("j")
    assert status.state == JobState.RUNNING and status.metrics[STOP_REQUESTED_AT] == 1500.0
