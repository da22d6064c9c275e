"""Helpers for remote-training tests and the preemption benchmark: drive an operator through its deferrals."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import numpy as np
import pandas as pd
from airflow.sdk.exceptions import TaskDeferred

#: The test trainers (``slow_trainer``, ...) that local training jobs import.
TRAINING = Path(__file__).resolve().parents[1] / "training"


def training_pythonpath() -> str:
    """``PYTHONPATH`` of a local training job: the test trainers first."""
    return os.pathsep.join([str(TRAINING), os.environ.get("PYTHONPATH", "")])


def local_operator_args(tmp: Path) -> dict[str, Any]:
    """The ``RemoteTrainingOperator`` arguments every local-backend test shares: data, stores, job folder."""
    return {
        "task_id": "train",
        "data_path": str(tmp / "data"),
        "label_column": "y",
        "feature_columns": ["x1", "x2", "c"],
        "model_store": str(tmp / "models"),
        "checkpoint_store": str(tmp / "ckpt"),
        "backend_options": {"root": str(tmp / "jobs"), "env": {"PYTHONPATH": training_pythonpath()}},
    }


def m5_decision(market: str = "spot") -> dict[str, str]:
    """A spot decision for an m5.large in us-east-1 ($0.10/h spot, $0.40 on-demand), due in 10 minutes."""
    from datetime import timedelta

    from costaware.core.ledger import utcnow

    now = utcnow()
    return {
        "market": market,
        "usd_per_hour": "0.1" if market == "spot" else "0.4",
        "instance_type": "m5.large",
        "region": "us-east-1",
        "on_demand_usd_per_hour": "0.4",
        "deadline": (now + timedelta(minutes=10)).isoformat(),
        "latest_start": (now + timedelta(minutes=8)).isoformat(),
    }


def command_operator_args(tmp: Path, mode: str) -> dict[str, Any]:
    """``RemoteTrainingOperator`` arguments of a team's command, ``own_train.py MODE``, on the local backend.

    What the script saw per attempt goes to ``tmp/seen.jsonl``; the spot decision is :func:`m5_decision`.
    """
    import sys

    return {
        "task_id": "train",
        "command": [sys.executable, str(TRAINING / "own_train.py"), mode],
        "model_store": str(tmp / "models"),
        "checkpoint_store": str(tmp / "ckpt"),
        "backend_options": {"root": str(tmp / "jobs"), "env": {"OWN_TRAIN_LOG": str(tmp / "seen.jsonl")}},
        "spot_decision": m5_decision(),
        "poll_interval": 0.1,
    }


def write_data(folder: Path, rows: int = 3000, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {"x1": rng.normal(size=rows), "x2": rng.normal(size=rows), "c": rng.choice(["a", "b", "c"], rows)}
    )
    logit = 1.5 * frame.x1 - frame.x2
    frame["y"] = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(int)
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / "day-001.parquet", index=False)
    return folder


def context_for(run_id: str = "scheduled__2026-01-01", try_number: int = 1, **xcom: Any) -> dict[str, Any]:
    """A task context with a task instance whose ``xcom_pull`` returns ``xcom[task_ids]``."""
    ti = SimpleNamespace(
        dag_id="remote_dag",
        task_id="train",
        run_id=run_id,
        try_number=try_number,
        map_index=-1,
        xcom_pull=lambda task_ids=None, **_: xcom.get(task_ids),
    )
    return {"ti": ti, "run_id": run_id, "params": {}}


def reimported(trigger: Any) -> Any:
    """The trigger as the triggerer builds it: from its class path and JSON-round-tripped kwargs."""
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))


async def _first_event(trigger: Any, timeout: float) -> Any:
    return await asyncio.wait_for(trigger.run().__anext__(), timeout)


def drive(operator: Any, context: dict[str, Any], *, timeout: float = 300.0) -> tuple[Any, int]:
    """Run ``execute`` and every deferral to the end; returns the result and how many deferrals there were."""
    deferrals = 0
    try:
        return operator.execute(context), deferrals
    except TaskDeferred as d:
        deferred = d
    while True:
        deferrals += 1
        event = asyncio.run(_first_event(reimported(deferred.trigger), timeout))
        try:
            return getattr(operator, deferred.method_name)(context, event=event.payload), deferrals
        except TaskDeferred as d:
            deferred = d


# -- moto ------------------------------------------------------------------------------------------------


def aws_client(service: str, endpoint: str) -> Any:
    """A boto3 client of moto's server with explicit test credentials (what a test itself does on AWS)."""
    return boto3.client(
        service,
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def make_batch_queues(aws: str) -> dict[str, str]:
    """A SPOT and an EC2 compute environment with a queue each, and a job definition, on moto (no Docker)."""
    post = urllib.request.Request(
        f"{aws}/moto-api/config",
        data=json.dumps({"batch": {"use_docker": False}}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(post, timeout=10).read()
    ec2, iam, b = aws_client("ec2", aws), aws_client("iam", aws), aws_client("batch", aws)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="batch", Description="batch", VpcId=vpc)["GroupId"]
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    role = iam.create_role(RoleName=f"batch-{vpc}", AssumeRolePolicyDocument=trust)["Role"]["Arn"]
    profile = iam.create_instance_profile(InstanceProfileName=f"batch-{vpc}")["InstanceProfile"]["Arn"]
    names = {}
    for kind in ("SPOT", "EC2"):
        env = b.create_compute_environment(
            computeEnvironmentName=f"ce-{kind}-{vpc}",
            type="MANAGED",
            state="ENABLED",
            computeResources={
                "type": kind,
                "minvCpus": 0,
                "maxvCpus": 4,
                "desiredvCpus": 0,
                "instanceTypes": ["m5.large"],
                "subnets": [subnet],
                "securityGroupIds": [group],
                "instanceRole": profile,
                **({"bidPercentage": 60, "spotIamFleetRole": role} if kind == "SPOT" else {}),
            },
            serviceRole=role,
        )
        queue = b.create_job_queue(
            jobQueueName=f"q-{kind}-{vpc}",
            state="ENABLED",
            priority=1,
            computeEnvironmentOrder=[{"order": 1, "computeEnvironment": env["computeEnvironmentArn"]}],
        )
        names[kind] = queue["jobQueueName"]
    definition = b.register_job_definition(
        jobDefinitionName=f"train-{vpc}",
        type="container",
        containerProperties={"image": "costaware:1", "vcpus": 1, "memory": 512, "command": ["true"]},
    )
    return {
        "spot_queue": names["SPOT"],
        "on_demand_queue": names["EC2"],
        "job_definition": definition["jobDefinitionName"],
    }


class ScriptedPolls:
    """A backend whose polls answer ``answers`` in turn (an exception is raised), its stops kept."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers, self.stops = answers, []  # type: list[Any], list[str]

    def poll(self, job_id: str) -> Any:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def stop(self, job_id: str) -> None:
        self.stops.append(job_id)
