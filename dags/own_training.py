"""A team's own PyTorch script retrained on spot: costaware runs it, the script stays a plain script.

The training is ``examples/own_training/train_delay.py``, a 130-line PyTorch regression of the arrival delay
in minutes. It imports ``costaware_runtime`` (the slim runtime, no Airflow) for four things: load the newest
checkpoint, save one now and then, write its metrics, leave its model in the output folder.

1. ``prepare``      on the local backend, checks the script and interpreter are there; then the replayed
                    2013 day's training and holdout arrays (``train.npz``, ``holdout.npz``);
2. ``spend_gate``   the training's budget is reserved from the project's monthly budget;
3. ``spot_window``  spot when the price is good, on-demand when waiting would miss the deadline;
4. ``train``        ``RemoteTrainingOperator(command=[...])``: the script under ``costaware-run`` on the
                    backend; a preemption resumes it from its checkpoint; each attempt is a ledger entry;
                    its output folder becomes a model version carrying the script's metrics;
5. ``promote``      the candidate replaces the champion only if its holdout RMSE is not worse.

Runs on the ``local`` backend (a child process of the worker, which then needs ``torch``) once the project
has a budget (``costaware budget set --scope project=flight-delays --period month --cap-usd 25``):
``airflow dags test own_training 2013-02-01``. On Batch or Kubernetes give ``backend``, ``image`` (built
from ``runtime/Dockerfile.train.example``), ``backend_options``, ``python=python``, and a ``data_root`` on
S3 (SageMaker trains only on ``ml.*`` types, not this DAG's c5.4xlarge). Every task reaches AWS through the
SDK's default credential chain (``aws_conn_id=None``), not the ``aws_default`` connection: the worker needs
the keys (and, for MinIO or moto, ``AWS_ENDPOINT_URL``) in its environment or role. See
docs/own-training.md.
"""

from __future__ import annotations

from datetime import timedelta
from importlib import resources
from pathlib import Path

import pendulum
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from costaware.operators.promote import ModelPromoteOperator
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.params import (
    check_local_command,
    check_remote_backend,
    check_run_conf,
    remote_backend_params,
    seconds_param,
    spot_deadline_param,
    tag_param,
)
from costaware.sensors.spend_cap import SpendCapSensor
from costaware.sensors.spot_window import SpotWindowSensor

TEAM = "ml-platform"
PROJECT = "flight-delays"
REGION = "us-east-1"
#: What the spot window watches and every attempt is priced as: the type of the recorded spot history.
INSTANCE_TYPE = "c5.4xlarge"
SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "own_training" / "train_delay.py"
RECORDED_SPOT_PRICES = str(
    resources.files("costaware") / "data" / f"spot_history_{INSTANCE_TYPE}_{REGION}.json"
)


def prepared(name: str) -> str:
    """A template of one value the ``prepare`` task returned."""
    return "{{ ti.xcom_pull(task_ids='prepare')['" + name + "'] }}"


@dag(
    dag_id="own_training",
    schedule=None,
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["costaware", f"team:{TEAM}", f"project:{PROJECT}"],
    params={
        "team": tag_param(TEAM, title="Team", description="Team charged for this run."),
        "project": tag_param(
            PROJECT, title="Project", description="Project charged; its budget gates training."
        ),
        "train_budget_usd": Param(
            0.05,
            type="number",
            exclusiveMinimum=0,
            exclusiveMaximum=1_000_000,
            title="Training budget (USD)",
            description="Reserved from the project's monthly budget before training.",
        ),
        "epochs": Param(
            4,
            type="integer",
            exclusiveMinimum=0,
            exclusiveMaximum=1001,
            title="Epochs",
            description="1-1000.",
        ),
        **remote_backend_params("script"),
        "script": Param(str(SCRIPT), type="string", title="Training script"),
        "step_sleep": seconds_param(
            0.0,
            title="Seconds per step",
            description="slows every step down (demos of a preemption); 0 in real use.",
        ),
        "replay_date": Param(None, type=["null", "string"], format="date", title="Day of 2013 to replay"),
        "spot_deadline": spot_deadline_param(),
        "data_root": Param(
            None,
            type=["null", "string"],
            title="Data folder",
            description="An absolute folder (~ allowed) or an s3:// prefix for the arrays, models and "
            "checkpoints; empty: $AIRFLOW_HOME/costaware/own_training.",
        ),
    },
    doc_md=__doc__,
)
def own_training() -> None:
    @task
    def prepare() -> dict[str, str]:
        """Check the script is here (local backend), land the days up to the replayed one (and the next,
        the holdout), then write the arrays."""
        from costaware.core.errors import ConfigurationError
        from costaware.examples import flights

        context = get_current_context()
        try:  # before the spend gate reserves the training's money
            check_run_conf(context["dag_run"].conf, context["dag"].params)
            check_local_command(context["params"])
            check_remote_backend(
                context["params"],
                job="the training",
                data_root_default="$AIRFLOW_HOME/costaware/own_training",
                instance_type=INSTANCE_TYPE,
                instance_type_hint="this DAG's type is fixed (its recorded spot prices are EC2's), so run it "
                "on batch or kubernetes; on SageMaker, give RemoteTrainingOperator an ml.* instance_type "
                "and its spot_usd_per_hour and on_demand_usd_per_hour in a DAG of your own",
            )
        except ConfigurationError as e:
            raise AirflowFailException(str(e)) from e
        return flights.replay_arrays(context, "own_training")

    arrays = prepare()
    spend_gate = SpendCapSensor(
        task_id="spend_gate",
        scope="project={{ params.project }}",
        estimated_usd="{{ params.train_budget_usd }}",
        for_task_id="train",
        on_exceeded="fail",
        poke_interval=30,
        timeout=6 * 3600,
    )
    spot_window = SpotWindowSensor(
        task_id="spot_window",
        instance_type=INSTANCE_TYPE,
        region=REGION,
        expected_runtime_hours=0.25,
        prices=RECORDED_SPOT_PRICES,
        deadline="{{ params.spot_deadline or '' }}",  # empty: the end of the run's data interval
        aws_conn_id=None,  # the SDK's default chain, as every task of this DAG (live prices only)
        deferrable=True,
        poke_interval=300,
    )
    train = RemoteTrainingOperator(
        task_id="train",
        command=[
            "{{ params.python }}",
            "{{ params.script }}",
            "--data",
            prepared("folder"),
            "--epochs",
            "{{ params.epochs }}",
            "--step-sleep",
            "{{ params.step_sleep }}",
        ],
        image="{{ params.image or '' }}",
        model_store=prepared("models"),
        checkpoint_store=prepared("checkpoints"),
        backend="{{ params.backend }}",
        backend_options="{{ params.backend_options | tojson }}",
        spot_task_id="spot_window",
        prices=RECORDED_SPOT_PRICES,
        # The interval the interruption rate calls for, passed to the script as
        # COSTAWARE_CHECKPOINT_EVERY_SECONDS (its CheckpointTimer saves by it) and re-tuned after preemptions.
        checkpoint_every_seconds="auto",
        aws_conn_id=None,
        poll_interval=2,
        retries=2,
        retry_delay=timedelta(seconds=10),
    )
    promote = ModelPromoteOperator(
        task_id="promote",
        model_store=prepared("models"),
        candidate="{{ ti.xcom_pull(task_ids='train')['version'] }}",
        metric="rmse",
        higher_is_better=False,
        candidate_metrics="{{ ti.xcom_pull(task_ids='train')['metrics'] }}",
        aws_conn_id=None,  # as train: the SDK's default chain, where prepare wrote the arrays too
    )
    arrays >> spend_gate >> spot_window >> train >> promote


own_training()
