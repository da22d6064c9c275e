"""The flight-delay retrain on ``RemoteTrainingOperator``: training leaves the worker for a compute backend.

1. ``land_new_data``  the replayed 2013 day (and the next one, the holdout) land as Parquet;
2. ``features``       train / new / holdout feature files;
3. ``spend_gate``     the training's budget is reserved from the project's monthly budget (and
                      ``train_max_usd`` caps what its attempts may bill, stopping one in time);
4. ``spot_window``    spot when the price is good, on-demand when waiting would miss the deadline;
5. ``retrain``        the training runs on the backend (default ``local``: a child process of the worker),
                      checkpointed; an interruption resubmits it from the checkpoint, on spot while slack is
                      left, on on-demand after; every attempt is a ledger entry with its billed seconds;
6. ``promote``        the candidate replaces the champion only if it is at least as good on the holdout.

Runs on the local backend once the project has a budget (``costaware budget set --scope
project=flight-delays --period month --cap-usd 25``; ``make demo`` sets it):
``airflow dags test remote_retrain 2013-02-01``. On SageMaker: an AWS connection ``aws_default`` (every S3
read and write of the run goes through it, its ``endpoint_url`` extra included: moto or MinIO work) and the
params ``backend=sagemaker`` and ``backend_options={"role_arn": ..., "image_uri": ..., "output_s3_uri": ...}``
(with ``data_root`` on S3 and ``remote_instance_type`` an ``ml.*`` type); on AWS Batch ``backend=batch``
and ``backend_options={"spot_queue": ..., "on_demand_queue": ..., "job_definition": ...}`` (the param
``preemption_grace_seconds`` left empty fits ECS's stop timeout there). See docs/remote-training.md.
"""

from __future__ import annotations

import os
from datetime import timedelta
from importlib import resources
from pathlib import Path

import pendulum
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from costaware.core.errors import ConfigurationError
from costaware.operators.promote import ModelPromoteOperator
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.params import check_run_conf, spot_deadline_param, tag_param, usd_param
from costaware.sensors.spend_cap import SpendCapSensor
from costaware.sensors.spot_window import SpotWindowSensor
from costaware.timetables import OffPeakTimetable

TEAM = "ml-platform"
PROJECT = "flight-delays"
REGION = "us-east-1"
#: The AWS connection of the splits, the stores and the SageMaker/Batch jobs (when it does not exist, the
#: AWS SDKs' default chain: environment, instance profile, ...).
AWS_CONN_ID = "aws_default"
FEATURES = ["month", "day_of_week", "sched_dep_hour", "distance", "carrier", "origin", "dest"]
CATEGORICAL = ["month", "day_of_week", "sched_dep_hour", "carrier", "origin", "dest"]


def from_features(name: str) -> str:
    """A template of one path the ``features`` task returned."""
    return "{{ ti.xcom_pull(task_ids='features')['" + name + "'] }}"


RECORDED_SPOT_PRICES = str(resources.files("costaware") / "data" / "spot_history_c5.4xlarge_us-east-1.json")


def data_root() -> str:
    """The ``data_root`` param (a folder or ``s3://`` prefix), else ``$AIRFLOW_HOME/costaware/remote``."""
    from costaware.examples.flights import data_root_param

    default = Path(os.environ.get("AIRFLOW_HOME", Path.home() / "airflow")) / "costaware" / "remote"
    return data_root_param(get_current_context()["params"].get("data_root"), default)


@dag(
    dag_id="remote_retrain",
    schedule=OffPeakTimetable(windows=["22:00-06:00"], days="daily", timezone="America/New_York"),
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["costaware", f"team:{TEAM}", f"project:{PROJECT}"],
    params={
        "team": tag_param(TEAM, title="Team", description="Team charged for this run."),
        "project": tag_param(
            PROJECT, title="Project", description="Project charged; its budget gates training."
        ),
        "train_budget_usd": usd_param(
            "0.05",
            title="Training estimate (USD)",
            description="What the training is expected to cost: reserved against the project's budget "
            "before it starts.",
        ),
        "train_max_usd": usd_param(
            "1.00",
            optional=True,
            title="Training cap (USD)",
            description="Hard cap on what the training's attempts may bill together: an attempt is stopped "
            "(checkpointed) before it would pass it. Empty: no cap.",
        ),
        "backend": Param(
            "local",
            enum=["local", "sagemaker", "batch", "kubernetes"],
            description="Where the training runs: local (a child process of the worker), sagemaker, batch, "
            "kubernetes.",
        ),
        "backend_options": Param(
            {},
            type="object",
            description="Options of the backend (SageMaker: role_arn, image_uri, output_s3_uri; Batch: "
            "spot_queue, on_demand_queue, job_definition; Kubernetes: image, namespace, ...).",
        ),
        "preemption_grace_seconds": Param(
            None,
            type=["null", "number"],
            exclusiveMinimum=0,
            title="Preemption grace (seconds)",
            description="From SIGTERM (a spot notice, a pause, a stop) to SIGKILL, for the training to save "
            "and push its checkpoint. Empty: the backend's, 110 s (inside AWS's 120 s spot notice); on "
            "Batch, backend_options stop_timeout_seconds (ECS's, 30 s unless raised) less 10 s.",
        ),
        "remote_instance_type": Param(
            None,
            type=["null", "string"],
            description="Instance type of the training (an ml.* type on SageMaker); empty: the spot "
            "window's instance type.",
        ),
        # Dollars checked by the trigger form: "cheap" failed only at retrain, after landing and the gate.
        "spot_usd_per_hour": usd_param(
            None,
            title="Spot price (USD/hour)",
            description="Spot price of the training instance (SageMaker ml.* prices are not EC2 prices); "
            "empty: the spot window's.",
        ),
        "on_demand_usd_per_hour": usd_param(
            None,
            title="On-demand price (USD/hour)",
            description="On-demand price of the training instance; empty: the spot window's.",
        ),
        "spot_deadline": spot_deadline_param(),
        "priority": Param(
            "normal",
            enum=["critical", "normal", "best_effort"],
            description="critical: never paused, on-demand while a preemption can still be absorbed; "
            "best_effort: paused first, may wait for spot until the deadline itself.",
        ),
        "pause_on_price": Param(
            False,
            type="boolean",
            description="Pause the spot training through a price rise and resume it from its checkpoint.",
        ),
        "replay_date": Param(None, type=["null", "string"], format="date"),
        "data_root": Param(
            None,
            type=["null", "string"],
            title="Data folder",
            description="An absolute folder (~ allowed) or an s3:// prefix for landed data, models and "
            "checkpoints; empty: $AIRFLOW_HOME/costaware/remote.",
        ),
    },
    doc_md=__doc__,
)
def remote_retrain() -> None:
    @task
    def land_new_data() -> dict[str, str]:
        """Land every day up to the replayed day and the next one (the holdout), as daily Parquet files."""
        from costaware.examples import flights

        context = get_current_context()
        try:  # a misspelt param, before any work
            check_run_conf(context["dag_run"].conf, context["dag"].params)
        except ConfigurationError as e:  # the same conf fails every retry: none
            raise AirflowFailException(str(e)) from e
        day = flights.replay_date(
            context.get("logical_date") or context["dag_run"].run_after, context["params"].get("replay_date")
        )
        landing = Path(os.environ.get("AIRFLOW_HOME", Path.home() / "airflow")) / "costaware" / "flights"
        flights.land_days(landing / "landing", day + timedelta(days=1))
        return {"replay_date": day.isoformat(), "landing": str(landing / "landing")}

    @task
    def features(landed: dict[str, str]) -> dict[str, str]:
        """Features of the days so far (train), the replayed day (new) and the next day (holdout)."""
        from datetime import date

        import pyarrow as pa
        import pyarrow.parquet as pq

        from costaware.adapters.object_store import filesystem, parse_uri
        from costaware.examples import flights
        from costaware.hooks.aws import s3_options

        day = date.fromisoformat(landed["replay_date"])
        root = data_root()
        run = get_current_context()["run_id"].replace(":", "_").replace("+", "_")
        paths = {"models": f"{root}/models", "checkpoints": f"{root}/checkpoints"}
        options = s3_options(AWS_CONN_ID) if root.startswith("s3://") else None
        for split, first, last in (
            ("train", flights.FIRST_DAY, day),
            ("new", day, day),
            ("holdout", day + timedelta(days=1), day + timedelta(days=1)),
        ):
            frame = flights.make_features(flights.load_days(landed["landing"], first, last))
            paths[split] = f"{root}/splits/{run}/{split}.parquet"
            table = pa.Table.from_pandas(frame, preserve_index=False)
            if options is None:
                Path(paths[split]).parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(table, paths[split])
            else:  # through the connection: its keys and endpoint, as the stores read it back
                location = parse_uri(paths[split])
                fs, path = filesystem(location, options)
                try:
                    pq.write_table(table, path, filesystem=fs)
                except OSError as e:
                    if "NO_SUCH_BUCKET" not in str(e):
                        raise  # a passing failure (the network): Airflow's retries apply
                    # pyarrow's traceback named neither the param nor what to do, and no retry can pass.
                    raise AirflowFailException(
                        f"data_root {root!r}: bucket {location.bucket!r} does not exist where the connection "
                        f"{AWS_CONN_ID!r} looks (its endpoint_url, else AWS): create the bucket, or give a "
                        "data_root in one that exists"
                    ) from e
        return paths

    splits = features(land_new_data())
    spend_gate = SpendCapSensor(
        task_id="spend_gate",
        scope="project={{ params.project }}",
        estimated_usd="{{ params.train_budget_usd }}",
        for_task_id="retrain",
        on_exceeded="fail",
        poke_interval=30,
        timeout=6 * 3600,
    )
    spot_window = SpotWindowSensor(
        task_id="spot_window",
        instance_type="c5.4xlarge",
        region=REGION,
        expected_runtime_hours=0.25,
        prices=RECORDED_SPOT_PRICES,
        deadline="{{ params.spot_deadline or '' }}",
        priority="{{ params.priority }}",
        deferrable=True,
        poke_interval=300,
    )
    retrain = RemoteTrainingOperator(
        task_id="retrain",
        data_path=from_features("train"),
        new_data_path=from_features("new"),
        label_column="delayed",
        feature_columns=FEATURES,
        model_store=from_features("models"),
        checkpoint_store=from_features("checkpoints"),
        trainer="sklearn-sgd",
        trainer_params={"epochs": 5, "warm_epochs": 5, "categorical": CATEGORICAL},
        policy="drift",
        policy_params={"max_feature_psi": 0.25, "max_label_shift": 0.30, "max_warm_steps": 14},
        seed=0,
        checkpoint_every_seconds=60,
        backend="{{ params.backend }}",
        backend_options="{{ params.backend_options | tojson }}",
        preemption_grace_seconds="{{ params.preemption_grace_seconds or '' }}",
        spot_task_id="spot_window",
        instance_type="{{ params.remote_instance_type or '' }}",
        spot_usd_per_hour="{{ params.spot_usd_per_hour or '' }}",
        on_demand_usd_per_hour="{{ params.on_demand_usd_per_hour or '' }}",
        pause_on_price="{{ params.pause_on_price }}",
        prices=RECORDED_SPOT_PRICES,
        max_usd="{{ params.train_max_usd or '' }}",
        aws_conn_id=AWS_CONN_ID,
        poll_interval=2,
        retries=2,
        retry_delay=timedelta(seconds=10),
    )
    promote = ModelPromoteOperator(
        task_id="promote",
        model_store=from_features("models"),
        candidate="{{ ti.xcom_pull(task_ids='retrain')['version'] }}",
        holdout_path=from_features("holdout"),
        label_column="delayed",
        metric="roc_auc",
        aws_conn_id=AWS_CONN_ID,
    )
    splits >> spend_gate >> spot_window >> retrain >> promote


remote_retrain()
