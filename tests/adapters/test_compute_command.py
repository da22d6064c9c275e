"""A team's own command on every backend: the request shapes with ``image``/``command`` (issue 24, item 6).

SageMaker and Batch go to moto's server on 127.0.0.1; Kubernetes is checked on the pod spec it renders. The
local backend's contract is tested for real in ``tests/operators/test_remote_training_command.py``.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hung_mount import hung_mount
from remote_support import aws_client, make_batch_queues
from test_compute_zones import local_request, wait_for

from costaware.adapters.compute import batch, kubernetes, sagemaker
from costaware.adapters.compute.base import JobRequest, JobState, open_backend
from costaware.core.errors import ConfigurationError, StoreUnavailableError

ROLE = "arn:aws:iam::123456789012:role/train"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/team-train:7"
COMMAND = ("python", "train.py", "--epochs", "5")
STAGING = "s3://ml/models/_staging/train-0123456789/attempt-2"


def request(market: str = "spot", **kwargs: Any) -> JobRequest:
    args: dict[str, Any] = {
        "job_name": f"train-0123456789-a2-{market.replace('_', '')}",
        "spec_uri": "",
        "market": market,
        "instance_type": "ml.g5.xlarge",
        "checkpoint_uri": "s3://ml/ckpt/dag/train/run",
        "model_store": "s3://ml/models",
        "max_runtime_seconds": 3600,
        "max_wait_seconds": 7200,
        "env": {"COSTAWARE_S3_ENDPOINT_URL": "http://minio:9000"},
        "user_command": COMMAND,
        "image": IMAGE,
        "output_uri": f"{STAGING}/output",
        "result_uri": f"{STAGING}/result.json",
        "attempt": 2,
        "grace_seconds": 100.0,
        **kwargs,
    }
    return JobRequest(**args)


def contract(work_dir: str, checkpoint_dir: str | None = None, market: str = "spot") -> dict[str, str]:
    return {
        "COSTAWARE_S3_ENDPOINT_URL": "http://minio:9000",
        "COSTAWARE_CHECKPOINT_DIR": checkpoint_dir or f"{work_dir}/checkpoints",
        "COSTAWARE_CHECKPOINT_URI": "s3://ml/ckpt/dag/train/run",
        "COSTAWARE_OUTPUT_DIR": f"{work_dir}/output",
        "COSTAWARE_OUTPUT_URI": f"{STAGING}/output",
        "COSTAWARE_METRICS_PATH": f"{work_dir}/metrics.json",
        "COSTAWARE_RESULT_URI": f"{STAGING}/result.json",
        "COSTAWARE_ATTEMPT": "2",
        "COSTAWARE_MARKET": market,
        "COSTAWARE_GRACE_SECONDS": "100",
    }


# -- the request -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"user_command": ("python train.py",)}, None),
        ({"output_uri": ""}, "runs a user command but has no output_uri"),
        ({"result_uri": "", "checkpoint_uri": ""}, "has no checkpoint_uri, result_uri"),
        ({"user_command": ("python", "")}, "has elements that are not non-empty strings"),
        ({"grace_seconds": 0}, "preemption_grace_seconds must be a number of seconds > 0, got 0"),
        ({"user_command": (), "spec_uri": ""}, "spec_uri is empty"),
    ],
)
def test_a_command_request_needs_its_contract_locations(kwargs: dict[str, Any], message: str | None) -> None:
    if message is None:
        assert request(**kwargs).command()[-1] == "python train.py"  # one element: the user's choice
        return
    with pytest.raises(ConfigurationError, match=message):
        request(**kwargs)


def test_the_command_runs_under_the_launcher_with_the_contract_environment() -> None:
    job = request()
    assert job.command() == ["costaware-run", "--", *COMMAND]
    assert job.environment(work_dir="/w") == contract("/w")
    # The built-in trainers: the same launcher and contract, but no output folder (they store their model).
    builtin = request(user_command=(), spec_uri="s3://ml/jobs/spec.json")
    assert builtin.command() == [
        "costaware-run",
        "--no-outputs",
        "--",
        "python",
        "-m",
        "costaware.training.entrypoint",
        "--spec",
        "s3://ml/jobs/spec.json",
    ]
    assert builtin.environment(work_dir="/w") == {
        name: value
        for name, value in contract("/w").items()
        if name not in ("COSTAWARE_OUTPUT_DIR", "COSTAWARE_OUTPUT_URI", "COSTAWARE_RESULT_URI")
    }


@pytest.mark.parametrize("backend", ["sagemaker", "batch", "kubernetes"])
def test_remote_backends_refuse_local_staging(backend: str) -> None:
    local = request(output_uri="/data/models/_staging/x/output", model_store="")
    with pytest.raises(
        ConfigurationError, match=r"jobs need an s3:// model_store, got '/data/models/_staging"
    ):
        if backend == "sagemaker":
            sagemaker.training_job_request(local, role_arn=ROLE, image_uri="", output_s3_uri="s3://o")
        elif backend == "batch":
            batch.submit_job_request(local, spot_queue="s", on_demand_queue="o", job_definition="d")
        else:
            kubernetes.render_pod(local, image="i")


# -- SageMaker -------------------------------------------------------------------------------------------


def test_sagemaker_runs_the_image_and_the_command_with_the_contract() -> None:
    config = sagemaker.training_job_request(
        request(), role_arn=ROLE, image_uri="fallback:1", output_s3_uri="s3://ml/out", environment={"A": "1"}
    )
    algo = config["AlgorithmSpecification"]
    assert algo["TrainingImage"] == IMAGE  # the operator's image= wins over image_uri
    assert algo["ContainerEntrypoint"] == ["costaware-run", "--no-sync", "--"]
    assert algo["ContainerArguments"] == list(COMMAND)
    # SageMaker syncs /opt/ml/checkpoints with the checkpoint URI itself: the launcher does not (--no-sync)
    assert config["CheckpointConfig"] == {
        "S3Uri": "s3://ml/ckpt/dag/train/run",
        "LocalPath": "/opt/ml/checkpoints",
    }
    assert config["Environment"] == {"A": "1", **contract("/opt/ml/costaware", "/opt/ml/checkpoints")}
    assert config["EnableManagedSpotTraining"] is True
    fallback = sagemaker.training_job_request(
        request(image=""), role_arn=ROLE, image_uri="fallback:1", output_s3_uri="s3://ml/out"
    )
    assert fallback["AlgorithmSpecification"]["TrainingImage"] == "fallback:1"
    with pytest.raises(
        ConfigurationError, match="has no image: pass image= to the operator or set image_uri"
    ):
        sagemaker.training_job_request(request(image=""), role_arn=ROLE, image_uri="", output_s3_uri="s3://o")


def test_sagemaker_creates_the_command_job_on_moto_without_an_image_uri_option(aws: str) -> None:
    backend = open_backend(
        "sagemaker", {"role_arn": ROLE, "output_s3_uri": "s3://ml/out", "aws_conn_id": "moto_aws"}
    )
    job = request()
    assert backend.submit(job) == backend.submit(job) == job.job_name
    described = aws_client("sagemaker", aws).describe_training_job(TrainingJobName=job.job_name)
    algo = described["AlgorithmSpecification"]
    assert algo["TrainingImage"] == IMAGE
    assert algo["ContainerEntrypoint"] == ["costaware-run", "--no-sync", "--"]
    assert algo["ContainerArguments"] == list(COMMAND)
    assert described["CheckpointConfig"]["S3Uri"] == "s3://ml/ckpt/dag/train/run"
    assert described["EnableManagedSpotTraining"] is True
    assert backend.poll(job.job_name).state == JobState.SUCCEEDED  # moto completes at once


# -- Batch -----------------------------------------------------------------------------------------------


def test_batch_overrides_command_and_environment() -> None:
    body = batch.submit_job_request(
        request(instance_type="m5.large"),
        spot_queue="spot-q",
        on_demand_queue="od-q",
        job_definition="arn:aws:batch:us-east-1:1:job-definition/train:3",
    )
    overrides = body["containerOverrides"]
    assert overrides["command"] == ["costaware-run", "--", *COMMAND]
    assert {e["name"]: e["value"] for e in overrides["environment"]} == contract("/tmp/costaware")
    assert body["jobDefinition"] == "arn:aws:batch:us-east-1:1:job-definition/train:3"


def test_batch_runs_an_image_through_a_copy_of_the_job_definition(aws: str) -> None:
    queues = make_batch_queues(aws)
    client = aws_client("batch", aws)
    backend = open_backend("batch", {**queues, "aws_conn_id": "moto_aws"})
    name = queues["job_definition"]
    (original,) = client.describe_job_definitions(jobDefinitionName=name)["jobDefinitions"]
    job_id = backend.submit(request(instance_type="m5.large"))
    (job,) = client.describe_jobs(jobs=[job_id])["jobs"]
    (copy,) = client.describe_job_definitions(jobDefinitions=[job["jobDefinition"]])["jobDefinitions"]
    assert copy["jobDefinitionName"].startswith(f"{name}-image-")
    assert copy["containerProperties"] == {**original["containerProperties"], "image": IMAGE}
    # the job definition itself keeps its one revision: jobs that name it run what they always ran
    assert len(client.describe_job_definitions(jobDefinitionName=name)["jobDefinitions"]) == 1
    container = job["container"]
    assert container["command"] == ["costaware-run", "--", *COMMAND]
    environment = {e["name"]: e["value"] for e in container["environment"]}
    assert environment.pop("AWS_BATCH_JOB_ID")  # Batch's own
    # The launcher's grace period ends 10 s before ECS's SIGKILL (30 s after SIGTERM), not at 100 s.
    assert environment == {**contract("/tmp/costaware"), "COSTAWARE_GRACE_SECONDS": "20"}

    # The next attempt reuses the copy, and a job without image= runs the job definition as it is.
    again = backend.submit(request(instance_type="m5.large", job_name="train-0123456789-a3"))
    assert client.describe_jobs(jobs=[again])["jobs"][0]["jobDefinition"] == job["jobDefinition"]
    copies = client.describe_job_definitions(jobDefinitionName=copy["jobDefinitionName"])["jobDefinitions"]
    assert len(copies) == 1
    plain = backend.submit(request(instance_type="m5.large", job_name="train-0123456789-a4", image=""))
    assert client.describe_jobs(jobs=[plain])["jobs"][0]["jobDefinition"] in (
        name,
        original["jobDefinitionArn"],
    )


def test_batch_names_a_job_definition_that_does_not_exist(aws: str) -> None:
    queues = make_batch_queues(aws)
    backend = open_backend("batch", {**queues, "job_definition": "nope:4", "aws_conn_id": "moto_aws"})
    with pytest.raises(ConfigurationError, match="Batch job definition 'nope:4' has no active revision"):
        backend.submit(request(instance_type="m5.large"))


@pytest.mark.parametrize(
    ("code", "state"),
    [
        (75, JobState.INTERRUPTED),
        (77, JobState.INTERRUPTED),
        (74, JobState.INTERRUPTED),
        (76, JobState.FAILED),
        (1, JobState.FAILED),
    ],
)
def test_batch_exit_codes_of_the_contract(code: int, state: JobState) -> None:
    job = {
        "jobId": "j",
        "status": "FAILED",
        "attempts": [{"startedAt": 0, "stoppedAt": 1000, "container": {"exitCode": code}}],
    }
    status = batch.status_from_description(job, "spot", "m5.large")
    assert (status.state, status.exit_code) == (state, code)


# -- Kubernetes ------------------------------------------------------------------------------------------


def test_the_pod_runs_the_image_and_the_command_with_the_grace_period_and_a_work_volume() -> None:
    pod = kubernetes.render_pod(
        request(instance_type="g5.xlarge"), image="fallback:1", termination_grace_seconds=30
    )
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["image"] == IMAGE
    assert container["command"] == ["costaware-run", "--"] and container["args"] == list(COMMAND)
    assert {e["name"]: e["value"] for e in container["env"]} == contract("/costaware")
    assert spec["terminationGracePeriodSeconds"] == 110  # the job's 100 s + 10 s for the launcher
    assert container["volumeMounts"] == [{"name": "costaware-work", "mountPath": "/costaware"}]
    assert spec["volumes"] == [{"name": "costaware-work", "emptyDir": {}}]
    backend = open_backend("kubernetes", {"image": "fallback:1"})
    plain = backend.render(request(image="", instance_type="g5.xlarge"))  # type: ignore[attr-defined]
    assert plain["spec"]["containers"][0]["image"] == "fallback:1"
    with pytest.raises(ConfigurationError, match="has no image: pass image= to the operator or set image"):
        open_backend("kubernetes", {}).render(request(image=""))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("code", "state"), [(75, JobState.INTERRUPTED), (77, JobState.INTERRUPTED), (76, JobState.FAILED)]
)
def test_pod_exit_codes_of_the_contract(code: int, state: JobState) -> None:
    pod = {
        "metadata": {"name": "p", "labels": {"costaware/market": "spot"}},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"state": {"terminated": {"exitCode": code, "reason": "Error"}}}],
        },
    }
    assert kubernetes.status_from_pod(pod).state == state


def test_a_local_store_the_worker_may_not_write_is_refused_though_its_mode_allows(tmp_path: Path) -> None:
    # os.access passed root on sysfs or a read-only mount: the job failed at its first save, after training.
    from costaware.adapters.compute.base import require_usable_locations

    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
    else:
        folder = Path("/sys/kernel")
        try:
            (folder / "costaware-probe").touch()
            pytest.skip("no folder here refuses root a new file")
        except OSError:
            pass
    store = str(folder / "models")
    with pytest.raises(ConfigurationError) as caught:
        require_usable_locations("local", model_store=store)
    assert str(caught.value).startswith(
        f"model_store {store!r} cannot be written: this worker may not create a file in {str(folder)!r} ("
    )
    assert "give a folder it may write, or change the folder's permissions" in str(caught.value)
    require_usable_locations("local", model_store=str(tmp_path / "models"))  # a folder it may write
    assert list(tmp_path.glob("*")) in ([], [tmp_path / "read-only"])  # the write check left nothing


@pytest.mark.parametrize("rendered", [" ", "None", "None ", "null", " null"])
def test_a_location_rendered_from_an_unset_param_is_refused_as_naming_nothing(rendered: str) -> None:
    # " " and "null" were read as a relative path (named '' or 'null', an absolute one under it offered).
    from costaware.adapters.compute.base import require_usable_locations

    with pytest.raises(ConfigurationError) as caught:
        require_usable_locations("local", model_store=rendered)
    assert str(caught.value) == (
        f"model_store {rendered!r} names nothing (what a template renders of a param or XCom that is not "
        "set): give a location"
    )
    require_usable_locations("local", model_store="", spec_uri=None)  # not set: a command has no spec


@pytest.mark.parametrize(
    ("name", "location"),
    [("model_store", "/"), ("model_store", "file:///"), ("checkpoint_store", "//"), ("model_store", "~/.")],
)
def test_a_store_at_the_machines_root_is_refused(
    name: str, location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # model_store='/' was found only inside the bought job, which made its versions' folders under /.
    from costaware.adapters.compute.base import require_usable_locations

    monkeypatch.setenv("HOME", "/")  # "~" is / too (OpenShift's random uids)
    example = "/srv/ml/models" if name == "model_store" else "/srv/ml/checkpoints"
    # "~" is the worker's home, checked there: the DAG processor's is not the worker's.
    in_a_home = location.startswith("~")
    if in_a_home:
        require_usable_locations("local", on_this_machine=False, **{name: location})
    with pytest.raises(ConfigurationError) as caught:
        require_usable_locations("local", on_this_machine=in_a_home, **{name: location})
    assert str(caught.value) == (
        f"{name} {location!r} is the root, /, of the whole machine: its files would be written in folders "
        f"made directly under /; give a folder of its own such as {example!r} or an s3:// URI"
    )


@pytest.mark.parametrize("spec", ["/spec.json", "file:///spec.json", "//./spec.json"])
def test_a_spec_file_in_the_machines_root_is_refused(spec: str) -> None:
    # Only folders were checked: spec_uri='{{ params.dir }}/spec.json' rendered '/spec.json' wrote the spec,
    # and the job's result.json beside it, directly in /.
    from costaware.adapters.compute.base import require_usable_locations

    with pytest.raises(ConfigurationError) as caught:
        require_usable_locations("local", on_this_machine=False, spec_uri=spec, model_store="/srv/ml/models")
    assert str(caught.value) == (
        f"spec_uri {spec!r} is a file in the root, /, of the whole machine: it, and the files written beside "
        "it, would be written directly in /; give a file in a folder of its own such as "
        "'/srv/ml/jobs/spec.json' or an s3:// URI"
    )


def test_a_spec_file_in_a_symbolic_link_to_the_root_is_refused_on_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import costaware_runtime.stores

    from costaware.adapters.compute.base import require_usable_locations

    def check_writes(folder: Path) -> Any:
        raise AssertionError(f"{folder} was write-checked")  # never a write check in the real /

    monkeypatch.setattr(costaware_runtime.stores, "check_writes", check_writes)
    link = tmp_path / "jobs"
    link.symlink_to("/")
    with pytest.raises(ConfigurationError, match=re.escape(f"({str(link)!r} is a symbolic link that leads")):
        require_usable_locations("local", spec_uri=str(link / "spec.json"))


@pytest.mark.parametrize("name", ["model_store", "checkpoint_store"])
def test_a_store_that_is_a_symbolic_link_to_the_root_is_refused_on_this_machine(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the path as written was compared with "/": the job made its folders under / through the link.
    import costaware_runtime.stores

    from costaware.adapters.compute.base import require_usable_locations

    def check_writes(folder: Path) -> Any:
        raise AssertionError(f"{folder} was write-checked")  # never a write check in the real /

    monkeypatch.setattr(costaware_runtime.stores, "check_writes", check_writes)
    link = tmp_path / "store"
    link.symlink_to("/")
    # Parsed, the link is not looked at: the worker's disk, not the DAG processor's, says where it leads.
    require_usable_locations("local", on_this_machine=False, **{name: str(link)})
    with pytest.raises(ConfigurationError) as caught:
        require_usable_locations("local", **{name: str(link)})
    assert str(caught.value).startswith(
        f"{name} {str(link)!r} is the root, /, of the whole machine ({str(link)!r} is a symbolic link that "
        "leads there): its files would be written in folders made directly under /"
    )


def test_a_store_in_a_home_this_machine_does_not_know_is_refused_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Path.expanduser raised a bare RuntimeError ("Could not determine home directory"): a DAG's import
    # error, or the task's start, was a traceback naming no argument.
    import pwd

    from costaware.adapters.compute.base import expand_home, require_usable_locations

    # Parsed, it is left to the worker, whose users and home are not the DAG processor's.
    require_usable_locations("local", on_this_machine=False, model_store="~nosuchuser/models")
    with pytest.raises(ConfigurationError) as caught:
        require_usable_locations("local", model_store="~nosuchuser/models")
    assert str(caught.value) == (
        "model_store '~nosuchuser/models' starts with the home folder of user 'nosuchuser', whom this "
        "machine does not know: give an absolute path such as '/srv/ml/models' or '~/...' (your own home)"
    )

    def no_entry(uid: int) -> Any:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("HOME", raising=False)  # OpenShift's random uid: no HOME, no passwd entry
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    said = "checkpoint_store '~/ckpt' starts with '~', but this process has no home folder (HOME is unset"
    require_usable_locations("local", on_this_machine=False, checkpoint_store="~/ckpt")  # a DAG parses
    with pytest.raises(ConfigurationError, match=re.escape(said)):
        require_usable_locations("local", checkpoint_store="~/ckpt")
    with pytest.raises(ConfigurationError, match=re.escape(said)):
        expand_home("~/ckpt", "checkpoint_store")  # the job's start expands it so


@pytest.mark.parametrize(
    ("name", "example"),
    [
        ("model_store", "/srv/ml/models"),
        ("checkpoint_store", "/srv/ml/checkpoints"),
        ("data", "/srv/ml/store"),
    ],
)
def test_a_home_the_jobs_start_does_not_know_is_told_the_arguments_own_example(
    name: str, example: str
) -> None:
    # expand_home offered '/srv/ml/store' whatever the argument: a checkpoint store was told no such folder.
    from costaware.adapters.compute.base import expand_home

    with pytest.raises(ConfigurationError) as caught:
        expand_home("~nosuchuser/x", name)
    assert str(caught.value).endswith(f"give an absolute path such as {example!r} or '~/...' (your own home)")


def _failing(monkeypatch: pytest.MonkeyPatch, folder: Path, name: str, code: int) -> None:
    """Make ``os.<name>`` of a path in ``folder`` fail with ``code``, as a mount's filesystem answers."""
    real = getattr(os, name)

    def fake(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path).parent == folder:
            raise OSError(code, os.strerror(code), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, name, fake)


def test_a_local_store_whose_filesystem_failed_its_write_check_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full disk, an I/O error, a stale NFS handle was a ConfigurationError (not retried) telling the team
    # to change the folder's permissions, where the job's launcher reads the same as passing (exit 74).
    from costaware.adapters.compute.base import require_usable_locations

    _failing(monkeypatch, tmp_path, "rename", errno.EIO)
    _failing(monkeypatch, tmp_path, "unlink", errno.EIO)
    store = str(tmp_path / "models")
    with pytest.raises(StoreUnavailableError) as caught:
        require_usable_locations("local", model_store=store)
    (probe,) = tmp_path.iterdir()
    said = str(caught.value)
    assert said.startswith(
        f"model_store {store!r} could not be checked: this worker could not rename a file in "
        f"{str(tmp_path)!r} ([Errno 5] Input/output error: "
    )
    assert said.endswith(
        f"; its write check {str(probe)!r} stays there; check that filesystem (its free space, its mount): "
        "it is checked again when the task is retried, where it has retries left"
    )
    assert "the task's retry" not in said  # a task with retries=0 has none
    assert isinstance(caught.value.__cause__, OSError) and caught.value.__cause__.errno == errno.EIO


def test_a_local_store_on_a_mount_that_cannot_rename_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Mountpoint for S3 answers ENOSYS to a rename: no permission would help, the s3:// URI does.
    from costaware.adapters.compute.base import require_usable_locations

    _failing(monkeypatch, tmp_path, "rename", errno.ENOSYS)
    store = str(tmp_path / "models")
    with pytest.raises(ConfigurationError) as caught:
        require_usable_locations("local", model_store=store)
    assert str(caught.value) == (
        f"model_store {store!r} cannot be written: this worker may not rename a file in {str(tmp_path)!r} "
        "(Function not implemented), which a store needs; give a folder on a filesystem that does (a "
        "Mountpoint for S3 renames no file: give the bucket's s3:// URI)"
    )


@pytest.mark.parametrize(("call", "step"), [("open", "create"), ("unlink", "delete")])
def test_a_local_store_that_cannot_create_or_delete_is_not_told_of_a_mountpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, step: str
) -> None:
    # A create or a delete answered ENOSYS was told "a Mountpoint for S3 renames no file": it renamed none.
    from costaware.adapters.compute.base import require_usable_locations

    _failing(monkeypatch, tmp_path, call, errno.ENOSYS)
    store = str(tmp_path / "models")
    with pytest.raises(ConfigurationError) as caught:
        require_usable_locations("local", model_store=store)
    said = str(caught.value)
    assert said.startswith(
        f"model_store {store!r} cannot be written: this worker may not {step} a file in {str(tmp_path)!r} "
        "(Function not implemented), which a store needs"
    )
    assert said.endswith("; give a folder on a filesystem that does")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("call", ["open", "stat"])
def test_a_local_store_on_a_hung_mount_is_given_up_within_the_stall_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    # The job's launcher bounds its own write checks by COSTAWARE_STORE_STALL_SECONDS; this one, as a local
    # task starts, was not: a hung NFS mount held the Airflow task there for good. Its file made ("open") or
    # the folder looked up ("stat") blocked.
    from costaware.adapters.compute.base import require_usable_locations

    mount = tmp_path / "nfs"
    mount.mkdir()
    store = str(mount / "models")
    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "0.5")
    with hung_mount(monkeypatch, mount, (call,)):
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError) as caught:  # retried: the mount may answer again
            require_usable_locations("local", model_store=store)
        assert time.monotonic() - started < 10
    assert str(caught.value) == (
        f"model_store {store!r} could not be checked: the filesystem holding {store!r} has not answered for "
        "0.5 s (COSTAWARE_STORE_STALL_SECONDS sets how long); check that it answers (a hung NFS or other "
        "network mount): remount it, or give a folder on another filesystem; it is checked again when the "
        "task is retried, where it has retries left"
    )


def test_a_stall_bound_that_is_no_number_of_seconds_is_refused_before_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from costaware.adapters.compute.base import require_usable_locations

    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "5m")
    with pytest.raises(ConfigurationError) as caught:
        require_usable_locations("local", model_store=str(tmp_path / "models"))
    assert str(caught.value) == (
        "COSTAWARE_STORE_STALL_SECONDS='5m' is not a number of seconds > 0: give how long a checkpoint push "
        "or restore may move nothing before it is given up (default 300); this worker's environment sets "
        "it, which a local job inherits: fix it there"
    )
    assert list(tmp_path.iterdir()) == []  # nothing was checked, nor written
    require_usable_locations("local", model_store="s3://ml/models")  # no folder here: nothing bounded


@pytest.mark.parametrize("value", ["1e10", "1e300"])
def test_a_stall_bound_longer_than_a_wait_may_be_is_refused_before_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # Taken as a number of seconds > 0, it crashed the check's thread.join(bound) with a bare OverflowError.
    from costaware.adapters.compute.base import require_usable_locations

    monkeypatch.delenv("COSTAWARE_STORE_STALL_SECONDS", raising=False)
    options = {"env": {"COSTAWARE_STORE_STALL_SECONDS": value}}
    with pytest.raises(ConfigurationError) as caught:
        require_usable_locations("local", backend_options=options, model_store=str(tmp_path / "models"))
    assert str(caught.value) == (
        f"COSTAWARE_STORE_STALL_SECONDS={value!r} is more than the longest wait allowed, "
        f"{threading.TIMEOUT_MAX:.0f} s: give how long a checkpoint push or restore may move nothing before "
        "it is given up, at most that (default 300); the task's backend_options['env'] sets it for its job: "
        "fix it there"
    )
    assert list(tmp_path.iterdir()) == []  # nothing was checked, nor written


def test_a_stall_bound_a_local_task_sets_for_its_job_is_the_one_its_check_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job gets backend_options["env"] over the worker's environment: the check reads what the job gets.
    from costaware.adapters.compute.base import require_usable_locations

    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "5m")  # the worker's, which this job does not get
    store = str(tmp_path / "models")
    options = {"env": {"COSTAWARE_STORE_STALL_SECONDS": "60"}}
    require_usable_locations("local", backend_options=options, model_store=store)
    with pytest.raises(ConfigurationError, match="this worker's environment sets it"):
        require_usable_locations("local", backend_options={"env": {}}, model_store=store)


@pytest.mark.parametrize(
    ("env", "given"),
    [
        ([("COSTAWARE_STORE_STALL_SECONDS", "5m")], "the list [('COSTAWARE_STORE_STALL_SECONDS', '5m')]"),
        ("COSTAWARE_STORE_STALL_SECONDS=5m", "the str 'COSTAWARE_STORE_STALL_SECONDS=5m'"),
    ],
)
def test_a_local_jobs_env_that_is_no_dict_is_refused_by_the_check_and_the_backend_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: object, given: str
) -> None:
    # A list of pairs, which the backend's dict(env) took, was passed over by the start check's read of the
    # stall bound (the job it bought then failed with exit 2); a string was a bare ValueError from dict().
    from costaware.adapters.compute.base import check_backend_options, require_usable_locations
    from costaware.adapters.compute.local import LocalBackend

    monkeypatch.delenv("COSTAWARE_STORE_STALL_SECONDS", raising=False)
    root = str(tmp_path / "jobs")
    refusals = {
        "start check": lambda: require_usable_locations(
            "local", backend_options={"env": env}, model_store=str(tmp_path / "models")
        ),
        "options check": lambda: check_backend_options("local", {"root": root, "env": env}),
        "backend": lambda: LocalBackend(root=root, env=env).submit(  # type: ignore[arg-type]  # a user's
            local_request(tmp_path, "env-a1")
        ),
    }
    for where, refuse in refusals.items():
        with pytest.raises(ConfigurationError) as caught:
            refuse()
        assert str(caught.value) == (
            "backend_options['env'] of the local backend must be a dict of variable name to string value, "
            f"such as {{'PYTHONPATH': '/srv/trainer'}}: got {given}"
        ), where
    assert list(tmp_path.iterdir()) == []  # nothing was checked, nor written


def test_a_local_jobs_env_given_as_a_dict_reaches_its_job_as_text(tmp_path: Path) -> None:
    import json

    from costaware.adapters.compute.base import check_backend_options

    env = {"COSTAWARE_STORE_STALL_SECONDS": 60, "PYTHONPATH": "/srv/trainer"}
    check_backend_options("local", {"env": env})
    (tmp_path / "capacity").write_text("0")  # the spot jobs wait for capacity: they never run
    written = {}
    for name, given in [("env-a1", env), ("env-a2", None)]:
        options = {"root": str(tmp_path / "jobs"), "env": given, "capacity_file": str(tmp_path / "capacity")}
        backend = open_backend("local", options)
        job = backend.submit(local_request(tmp_path, name))
        backend.stop(job)
        written[name] = json.loads((tmp_path / "jobs" / job / "request.json").read_text())["env"]
    assert {k: written["env-a1"][k] for k in env} == {
        "COSTAWARE_STORE_STALL_SECONDS": "60",
        "PYTHONPATH": "/srv/trainer",
    }
    assert "PYTHONPATH" not in written["env-a2"]


@pytest.mark.parametrize("env", [[("PYTHONPATH", "/srv/trainer")], [["PYTHONPATH", "/srv/trainer"]]])
def test_a_local_job_an_older_release_submitted_with_env_pairs_can_still_be_polled_and_stopped(
    tmp_path: Path, env: object
) -> None:
    # dict() took a list of pairs before the env was checked. The triggers build a running job's backend
    # from its options as written to poll, stop or find it: refused there, such a job ran on unstopped and
    # unbilled. Only a new submit of them is refused.
    from costaware.adapters.compute.base import check_backend_options

    root = str(tmp_path / "jobs")
    running = open_backend("local", {"root": root}).submit(
        local_request(tmp_path, "older-a1", market="on_demand")
    )
    backend = open_backend("local", {"root": root, "env": env})
    try:
        wait_for(backend, running, {JobState.RUNNING})  # a real process, polled
        found = backend.find(running)
        assert found is not None and found.job_id == running
    finally:
        backend.stop(running)
    assert wait_for(backend, running, {JobState.INTERRUPTED, JobState.FAILED, JobState.SUCCEEDED}).exit_code
    with pytest.raises(ConfigurationError) as caught:
        backend.submit(local_request(tmp_path, "older-a2", market="on_demand"))
    assert str(caught.value) == (
        "backend_options['env'] of the local backend must be a dict of variable name to string value, "
        f"such as {{'PYTHONPATH': '/srv/trainer'}}: got the list {env!r}"
    )
    assert backend.find("older-a2") is None and sorted(p.name for p in (tmp_path / "jobs").iterdir()) == [
        "older-a1"
    ]  # nothing was submitted
    with pytest.raises(ConfigurationError):
        check_backend_options("local", {"root": root, "env": env})  # the task's start, before money


@pytest.mark.parametrize("backend", ["sagemaker", "batch", "kubernetes"])
@pytest.mark.parametrize("env", [{"COSTAWARE_STORE_STALL_SECONDS": "5m"}, "COSTAWARE_STORE_STALL_SECONDS=5m"])
def test_the_start_check_reads_no_env_of_a_remote_backend(backend: str, env: object) -> None:
    # Its job runs on another machine, whose folders are not checked here: no stall bound to read, no env
    # (an option of the local backend alone: the options check names it unknown there).
    from costaware.adapters.compute.base import require_usable_locations

    require_usable_locations(backend, backend_options={"env": env}, model_store="s3://ml-team/models")


@pytest.mark.parametrize("launcher_reads", [(), ("checkpoint_store",)])
def test_a_local_path_holding_a_scheme_separator_is_a_local_folder(
    tmp_path: Path, launcher_reads: tuple[str, ...]
) -> None:
    # '://' anywhere made /data/a://b a URI: told to give a local folder (an absolute path), which it is, or
    # that its scheme '' no store can open; the job's launcher takes it as a folder.
    from costaware.adapters.compute.base import require_usable_locations

    folder = f"{tmp_path}/a://b"
    require_usable_locations("local", launcher_reads=launcher_reads, checkpoint_store=folder)
    assert list(tmp_path.iterdir()) == []  # checked through tmp_path, where it would be made
    with pytest.raises(ConfigurationError, match="is not a location a training job can use"):
        require_usable_locations("local", launcher_reads=("checkpoint_store",), checkpoint_store="gs://b/x")
