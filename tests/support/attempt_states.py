"""A remote training's attempt state as an older release serialized it; later releases must read it."""

from __future__ import annotations

from typing import Any

# The state of a paused attempt as RemoteTrainingOperator wrote it before AttemptState existed (captured
# from tests/operators/test_remote_training_pause.py, paths shortened): a trigger serialized then must still
# resume.
CAPTURED: dict[str, Any] = {
    "backend": "local",
    "backend_options": {"root": "/tmp/t/jobs", "env": {"PYTHONPATH": "/work/main/tests/training"}},
    "identity": {
        "dag_id": "remote_dag",
        "run_id": "scheduled__2026-01-01",
        "task_id": "train",
        "try_number": 1,
        "map_index": -1,
    },
    "base_name": "train-380335d228",
    "spec_uri": "/tmp/t/ckpt/_jobs/remote_dag/train/scheduled__2026-01-01/-1/spec.json",
    "result_uri": "/tmp/t/ckpt/_jobs/remote_dag/train/scheduled__2026-01-01/-1/result.json",
    "command": None,
    "image": None,
    "grace_seconds": 110.0,
    "checkpoint_uri": "/tmp/t/ckpt/remote_dag/train/scheduled__2026-01-01/-1",
    "model_store": "/tmp/t/models",
    "job_env": {},
    "instance_type": "m5.large",
    "region": "us-east-1",
    "spot_usd_per_hour": "0.50",
    "on_demand_usd_per_hour": "2.00",
    "deadline": "2026-11-26T15:23:41.332615+00:00",
    "latest_start": "2026-11-26T14:18:41.332615+00:00",
    "tags": {},
    "estimated_usd": None,
    "attempts": [
        {
            "attempt": 1,
            "job_id": "train-380335d228-a1",
            "market": "spot",
            "instance_type": "m5.large",
            "billable_seconds": 10.518391609191895,
            "usd": "0.007701",
            "cause": "preemption",
            "reason": "preempted: checkpoint after step 1",
        }
    ],
    "current": {
        "attempt": 2,
        "job_id": "train-380335d228-a2",
        "market": "spot",
        "pausing": "spot price 3.00 USD/hour is well above the forecast minimum 1.150702",
        "stopped": {
            "job": {
                "job_id": "train-380335d228-a2",
                "state": "running",
                "billable_seconds": 1.5366463661193848,
                "market": "spot",
                "instance_type": "m5.large",
                "reason": "",
                "exit_code": None,
                "metrics": {},
                "ended_at": None,
            },
            "seen_at": "2026-11-24T15:23:43.390640+00:00",
        },
    },
    "first_market": "spot",
    "watch": {
        "prices": "/tmp/t/prices.csv",
        "availability": None,
        "availability_zone": "us-east-1a",
        "runtime_hours": "1",
        "priority": "normal",
        "restart_overhead_minutes": 5.0,
        "history_days": 14,
        "aws_conn_id": "aws_default",
        "region": "us-east-1",
    },
    "billing": {"prices": "/tmp/t/prices.csv", "availability_zone": "us-east-1a"},
}
