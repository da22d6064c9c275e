"""The $100 spot tuning plan: a deep-learning search whose trials run through ``RemoteTrainingOperator``.

The plan: 40 trials at most, each warmed up for 3 epochs on spot with checkpoints every 15 minutes; the bottom
half by holdout RMSE is pruned there; the rest are promoted to 15 epochs, continuing from their warm-up (a
promotion pays only the 12 epochs it adds); a hard stop at $100 or 20 GPU-hours. The stop is hard because
every stage is capped: a warm-up or promotion is stopped (``max_usd``) once it costs ``overrun_factor`` (1.5)
times its estimate, and that much is reserved in the study's budget before it starts. The trial is
``examples/spot_tuning/train_trial.py``, a plain preemptible PyTorch MLP (``costaware_runtime`` only).

1. ``prepare``      checks the settings and the instance type (a typo fails here, before the study's
                    budget is set or any trial starts), then the replayed 2013 day's training and holdout
                    arrays (as ``own_training``);
2. ``spot_window``  spot when the price is good, on-demand when waiting would miss the deadline;
3. ``plan``         samples ``max_trials`` configurations with a seeded RNG, sizes the study so that the
                    warm-ups and the promotions fit the dollar and GPU-hour caps at the trial's price and
                    ``epoch_minutes``, sets the study's ledger budget (``study=<run id>``, period ``total``)
                    and reserves each warm-up's cap in it;
4. ``warmup``       one mapped ``RemoteTrainingOperator`` per trial: checkpointed, a preemption resumes from
                    the newest checkpoint, each billed attempt is a ledger entry tagged ``trial=<n>``,
                    stopped at its cap;
5. ``select``       ranks the warm-ups, prunes the bottom ``1 - keep_fraction``, and promotes the best only
                    while what the ledger says was spent (dollars, GPU-hours) plus the promotion's cap,
                    from its own warm-up's bill, stays under the caps: each promotion's cap is reserved in
                    the study's budget first, so the caps hold even for promotions running side by side;
6. ``full``         one mapped ``RemoteTrainingOperator`` per promoted trial, ``--resume-from`` its warm-up's
                    model version, to ``full_epochs``;
7. ``best``         the winner, each trial's billed cost from the ledger, and the saving against training
                    every planned trial to ``full_epochs``.

The rules (sampling, sizing, the prune, promotions within the caps, the saving) are
``costaware.core.tuning.spot_plan``'s; prices, the study's budget, spend and reservations
``costaware.training.spot_tuning``'s; the form's plan fields ``costaware.params.spot_tuning_params``.

Runs as is: ``airflow dags test spot_tuning 2013-02-01`` (the ``local`` backend; small values for a quick
look: ``-c '{"max_trials": 4, "warmup_epochs": 1, "full_epochs": 3}'``). Then
``costaware report --dag-id spot_tuning --last-run --group-by trial``. See docs/spot-tuning.md.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.params import (
    bounded_param,
    check_local_command,
    check_remote_backend,
    check_run_conf,
    remote_backend_params,
    seconds_param,
    spot_deadline_param,
    spot_tuning_params,
    tag_param,
)
from costaware.sensors.spot_window import SpotWindowSensor

DAG_ID = "spot_tuning"
TEAM = "ml-platform"
PROJECT = "flight-delays"
REGION = "us-east-1"
SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "spot_tuning" / "train_trial.py"
#: The only recorded spot history bundled (a CPU type): the window's stand-in market when ``prices`` is empty.
STAND_IN_TYPE = "c5.4xlarge"
RECORDED_SPOT_PRICES = str(
    resources.files("costaware") / "data" / f"spot_history_{STAND_IN_TYPE}_{REGION}.json"
)
#: The search space of the trial script's flags: log-uniform floats, uniform floats, choices.
SPACE: dict[str, tuple[str, Any]] = {
    "lr": ("log", (1e-4, 1e-2)),
    "weight_decay": ("log", (1e-6, 1e-2)),
    "hidden": ("choice", (32, 64, 128, 256)),
    "layers": ("choice", (1, 2, 3)),
    "dropout": ("uniform", (0.0, 0.3)),
    "batch_size": ("choice", (256, 512, 1024)),
}


def prepared(name: str) -> str:
    """A template of one value the ``prepare`` task returned."""
    return "{{ ti.xcom_pull(task_ids='prepare')['" + name + "'] }}"


def upstream_result(ti: Any, task_id: str, key: str) -> Any:
    """What ``task_id`` pushed under ``key``; a task that runs "all_done" fails when that task did not finish.

    ``select`` and ``best`` run whatever their trials did, but without the study (``plan`` refused the
    settings, the caps, the instance type) or the selection there is nothing to rank. They fail, without a
    retry, pointing at the task that failed first where the missing task did not run (``plan`` only failed
    for ``prepare``'s failure, say, and its log says nothing), at its own log where it ran and failed
    (``select`` after a failed warm-up trial, which is normal): a skip here would end the run "successful"
    (Airflow judges a run by its last tasks), and a scheduled study that never ran must alert.
    """
    from costaware.glue import first_failed_tasks

    value = ti.xcom_pull(task_ids=task_id, key=key)
    if value is None:
        first = first_failed_tasks(ti, missed=task_id)  # none where task_id ran and failed on its own
        why = (
            f"it did not run, as {', '.join(map(repr, first))} failed first: that log says why"
            if first and task_id not in first
            else "its log says why"
        )
        raise AirflowFailException(
            f"{task_id!r} did not finish: nothing to rank, so this run fails with it ({why})"
        )
    return value


def pick_winner(finished: list[dict[str, Any]], ranking: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The best trial (of the promoted ones, else of the warm-ups) and how it was ranked ("" if plainly).

    As ``budgeted_search`` ranks: a promoted trial whose holdout RMSE rose past its own warm-up's is past its
    best, so the rise counts against it (``fall_adjusted_value``); otherwise the lowest RMSE wins.
    """
    from costaware.core.tuning import fall_adjusted_value

    warmed = {t["trial"]: t["loss"] for t in ranking}

    def score(t: dict[str, Any]) -> float:
        curve = [warmed[t["trial"]], t["loss"]] if finished and t["trial"] in warmed else [t["loss"]]
        ranked = fall_adjusted_value(curve, "minimize")
        return float(t["loss"] if ranked is None else ranked)

    winner = min(finished or ranking, key=lambda t: (score(t), t["trial"]))
    if score(winner) == winner["loss"]:
        return winner, ""
    before = warmed[winner["trial"]]
    return winner, f" (ranked by {score(winner):.3f}: its RMSE rose from {before:.3f} after the warm-up)"


def planned(name: str) -> str:
    """A template of one value the ``plan`` task returned."""
    return "{{ ti.xcom_pull(task_ids='plan', key='" + name + "') }}"


def settings(params: Any) -> Any:
    """The plan's settings from the run's params (a ``ConfigurationError`` names a bad one)."""
    from costaware.core.tuning.spot_plan import SpotTuningSettings

    names = ("max_usd", "max_gpu_hours", "max_trials", "warmup_epochs", "full_epochs", "keep_fraction")
    return SpotTuningSettings.create(
        **{n: params[n] for n in names},
        epoch_minutes=params["epoch_minutes"],
        overrun_factor=params["overrun_factor"],
    )


def settings_and_prices(params: Any, watched: Any = None) -> tuple[Any, Any]:
    """The plan's settings, then a trial's prices (``trial_prices``).

    The prices given win, then the spot window's decision when it ``watched`` this type, then the bundled
    list. A ``ConfigurationError`` or ``PriceNotFoundError`` names a bad value.
    """
    from costaware.adapters.price_files import bundled_catalog
    from costaware.training.spot_tuning import trial_prices

    config = settings(params)
    prices = trial_prices(
        bundled_catalog(),
        str(params["instance_type"]),
        REGION,
        watched,
        spot_given=params.get("spot_usd_per_hour"),
        on_demand_given=params.get("on_demand_usd_per_hour"),
    )
    return config, prices


def check_params(params: Any) -> None:
    """Refuse bad settings, an unknown instance type and several instances a trial before anything runs.

    ``plan`` reads them again with the spot window's prices (and checks the caps against them); checked
    first here, a typo fails the run before data lands or the window records its estimate in the ledger.
    """
    from costaware.core.errors import CostawareError

    count = (params.get("backend_options") or {}).get("instance_count", 1)
    if _number(count) != 1:  # "1" from a form, or 1.0, is one instance too
        raise AirflowFailException(
            f"backend_options instance_count={count!r}: this plan prices and caps one instance a trial; "
            "leave instance_count out (a trial of several instances needs a plan priced for them)"
        )
    try:
        settings_and_prices(params)
    except CostawareError as e:
        raise AirflowFailException(str(e)) from e
    check_backend(params)


def check_backend(params: Any) -> None:
    """Refuse a remote backend the trials could not run on, every problem at once, before the study is set.

    They failed each warm-up after ``plan`` had set the study's budget and reserved, one per run.
    """
    from costaware.core.errors import ConfigurationError

    try:
        check_remote_backend(
            params,
            job="the trials",
            data_root_default="$AIRFLOW_HOME/costaware/spot_tuning",
            instance_type=str(params.get("instance_type") or ""),
            instance_type_hint="give instance_type as SageMaker names it (ml.g5.xlarge) with its "
            "spot_usd_per_hour and on_demand_usd_per_hour (SageMaker's prices, not EC2's)",
        )
    except ConfigurationError as e:
        raise AirflowFailException(str(e)) from e


def trial_backend(params: Any) -> dict[str, Any]:
    """Where the trials run (``backend``, ``backend_options``): how long before its cap a stage is stopped."""
    return {
        "backend": str(params.get("backend") or "local"),
        "backend_options": dict(params.get("backend_options") or {}),
    }


def trial_kwargs(
    params: Any, study: str, trial: int, stage: str, command: list[str], max_usd: Any
) -> dict[str, Any]:
    """One mapped ``RemoteTrainingOperator``'s arguments that are not templated.

    ``max_usd``: the stage's cap, what the study reserved for it: the task stops its attempts there.
    """
    return {
        "command": command,
        "max_usd": f"{max_usd:.6f}",
        "checkpoint_every_seconds": float(params["checkpoint_minutes"]) * 60,
        "tags": {"study": study, "trial": str(trial), "stage": stage},
        "poll_interval": float(params["poll_seconds"]),
    }


@dag(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["costaware", "tuning", f"team:{TEAM}", f"project:{PROJECT}"],
    params={
        "team": tag_param(TEAM, title="Team", description="Team charged for this run."),
        "project": tag_param(
            PROJECT, title="Project", description="Project charged; its budgets cap the study too."
        ),
        **spot_tuning_params(),  # caps, trials, epochs, share promoted, checkpoint and epoch minutes
        "instance_type": Param(
            "g5.xlarge",
            type="string",
            minLength=1,
            title="Instance type",
            description="What each trial runs on (its price and GPUs come from the bundled price list).",
        ),
        "prices": Param(
            None,
            type=["null", "string"],
            title="Spot prices",
            description="'live' (EC2) or a recorded price file of the instance type for the spot window. "
            f"Empty: the bundled recorded {STAND_IN_TYPE} history stands in for the window's timing and the "
            "trials pay the instance type's advisor spot estimate or its on-demand price.",
        ),
        "spot_deadline": spot_deadline_param(),
        "spot_usd_per_hour": Param(
            None,
            type=["null", "number"],
            exclusiveMinimum=0,
            title="Spot price (USD/hour)",
            description="A trial's spot price; empty: the window's, else the advisor's estimate. Required "
            "for a SageMaker ml.* type.",
        ),
        "on_demand_usd_per_hour": Param(
            None,
            type=["null", "number"],
            exclusiveMinimum=0,
            title="On-demand price (USD/hour)",
            description="A trial's on-demand price; empty: the bundled list. Required for a SageMaker "
            "ml.* type.",
        ),
        "seed": bounded_param(
            13,
            title="Seed",
            description="Seeds the sampler and the trials (0 to 2**32 - 1).",
            low=-1,
            high=2**32,
        ),
        **remote_backend_params("trial"),
        "script": Param(str(SCRIPT), type="string", title="Trial script"),
        "train_days": bounded_param(
            28, title="Days of training data", description="Days up to the replayed one: 1-365.", high=366
        ),
        "step_sleep": seconds_param(
            0.0,
            title="Seconds per step",
            description="slows every step down (demos of a preemption); 0 in real use.",
        ),
        "poll_seconds": bounded_param(
            5.0, title="Poll every (seconds)", description="How often a trial's job is looked at.", high=3601
        ),
        "replay_date": Param(None, type=["null", "string"], format="date", title="Day of 2013 to replay"),
        "data_root": Param(
            None,
            type=["null", "string"],
            title="Data folder",
            description="An absolute folder (~ allowed) or an s3:// prefix for the arrays, models and "
            "checkpoints; empty: $AIRFLOW_HOME/costaware/spot_tuning.",
        ),
    },
    doc_md=__doc__,
)
def spot_tuning() -> None:
    @task
    def prepare() -> dict[str, str]:
        """Land the days up to the replayed one (and the next, the holdout), then write the arrays."""
        from costaware.core.errors import ConfigurationError
        from costaware.examples import flights

        context = get_current_context()
        try:  # a misspelt param, before data lands or the window records its estimate
            check_run_conf(context["dag_run"].conf, context["dag"].params)
        except ConfigurationError as e:
            raise AirflowFailException(str(e)) from e
        check_params(context["params"])
        return flights.replay_arrays(context, "spot_tuning", train_days=int(context["params"]["train_days"]))

    arrays = prepare()
    spot_window = SpotWindowSensor(
        task_id="spot_window",
        instance_type="{{ params.instance_type if params.prices else '" + STAND_IN_TYPE + "' }}",
        region=REGION,
        expected_runtime_hours="{{ params.warmup_epochs * params.epoch_minutes / 60 }}",
        prices="{{ params.prices or '" + RECORDED_SPOT_PRICES + "' }}",
        deadline="{{ params.spot_deadline or '' }}",  # empty: the end of the run's data interval
        deferrable=True,
        poke_interval=300,
    )

    @task
    def plan(data: Any) -> list[dict[str, Any]]:
        """Sample the trials, size the study to the caps, set its budget and reserve every warm-up."""
        from costaware.core.errors import CostawareError
        from costaware.core.tuning.spot_plan import sample_trials
        from costaware.hooks.ledger import CostLedgerHook
        from costaware.operators.remote_training_args import parse_decision
        from costaware.training.spot_tuning import open_study

        context = get_current_context()
        ti, params, run_id = context["ti"], context["params"], context["run_id"]
        decision = parse_decision(ti.xcom_pull(task_ids="spot_window"))
        market = decision.market if decision is not None else "on_demand"
        instance_type, scope = str(params["instance_type"]), f"project={params['project']},study={run_id}"
        try:  # a bad param, a price not found, caps too small for one trial: a retry cannot help
            check_local_command(params)  # before any trial's money is reserved
            config, prices = settings_and_prices(params, decision if params.get("prices") else None)
            ledger, on = CostLedgerHook().get_conn(), f"{market} {instance_type}"
            study = open_study(
                ledger,
                scope,
                config,
                prices,
                market=market,
                dag_id=DAG_ID,
                run_id=run_id,
                on=on,
                **trial_backend(params),  # its stop delay sets a stage's least cap
            )
        except CostawareError as e:
            raise AirflowFailException(str(e)) from e
        seed, kwargs, described = int(params["seed"]), [], []
        for number, hparams in enumerate(sample_trials(SPACE, config.max_trials, seed)[: study.trials]):
            flags = {"trial": number, "seed": seed + number, "step_sleep": params["step_sleep"]}
            flags |= {"checkpoint_seconds": float(params["checkpoint_minutes"]) * 60, **hparams}
            command = [str(params["python"]), str(params["script"]), "--data", data["folder"]]
            command += [
                part for name, value in flags.items() for part in (f"--{name.replace('_', '-')}", str(value))
            ]
            warmup_command = [*command, "--epochs", str(config.warmup_epochs)]
            kwargs.append(
                trial_kwargs(params, run_id, number, "warmup", warmup_command, study.warmup_cap.usd)
            )
            described.append({"trial": number, "command": command, "hparams": hparams})
        usd_per_hour = prices.usd_per_hour(market)
        print(
            f"study {run_id}: {study.describe(config)}; {on} at ${usd_per_hour:.4f}/hour, {prices.gpus} GPU"
        )
        if not params.get("prices") and instance_type != STAND_IN_TYPE:
            # The window priced its decision (and its ledger estimate) on the stand-in's history: say so,
            # or a reader of the run sees two prices and cannot tell which the trials pay.
            print(
                f"the spot window watched the recorded {STAND_IN_TYPE} history for its timing only: its "
                f"price is not {instance_type}'s; the trials pay the price above (give prices for the type's "
                "own)"
            )
        # Airflow maps over a task's return value only: the rest goes under keys of its own.
        ti.xcom_push(
            "study",
            {
                "study": run_id,
                "scope": scope,
                "trials": described,
                "market": market,
                "gpus": f"{prices.gpus}",
            },
        )
        ti.xcom_push("spot_usd_per_hour", f"{prices.spot_usd_per_hour:.6f}")
        ti.xcom_push("on_demand_usd_per_hour", f"{prices.on_demand_usd_per_hour:.6f}")
        return kwargs

    planned_study: Any = plan(arrays)
    trial_arguments: dict[str, Any] = {
        "model_store": prepared("models"),
        "checkpoint_store": prepared("checkpoints"),
        "image": "{{ params.image or '' }}",
        "backend": "{{ params.backend }}",
        "backend_options": "{{ params.backend_options | tojson }}",
        "spot_task_id": "spot_window",
        "instance_type": "{{ params.instance_type }}",
        "region": REGION,
        "spot_usd_per_hour": planned("spot_usd_per_hour"),
        "on_demand_usd_per_hour": planned("on_demand_usd_per_hour"),
        "aws_conn_id": None,
        "retries": 2,
        "retry_delay": timedelta(seconds=10),
    }
    warmup = RemoteTrainingOperator.partial(task_id="warmup", **trial_arguments).expand_kwargs(planned_study)

    @task(trigger_rule="all_done")
    def select(data: Any) -> list[dict[str, Any]]:
        """Prune the bottom of the warm-ups; promote the best while the ledger says the caps allow it."""
        from costaware.hooks.ledger import CostLedgerHook
        from costaware.training.spot_tuning import TrialPrices, select_promotions, version_files

        context = get_current_context()
        ti, params, run_id = context["ti"], context["params"], context["run_id"]
        study = upstream_result(ti, "plan", "study")
        config = settings(params)
        prices = TrialPrices(
            Decimal(ti.xcom_pull(task_ids="plan", key="spot_usd_per_hour")),
            Decimal(ti.xcom_pull(task_ids="plan", key="on_demand_usd_per_hour")),
            Decimal(study["gpus"]),
        )
        try:
            selection = select_promotions(
                CostLedgerHook().get_conn(),
                ti.xcom_pull(task_ids="warmup"),
                settings=config,
                study=study["study"],
                scope=study["scope"],
                prices=prices,
                market=study["market"],
                dag_id=DAG_ID,
                run_id=run_id,
                **trial_backend(params),
            )
        except ValueError as e:  # no warm-up finished
            raise AirflowFailException(str(e)) from e
        print(selection.report(config.caps))
        ti.xcom_push("selection", selection.to_xcom())
        commands, models = {t["trial"]: t["command"] for t in study["trials"]}, data["models"]
        runs = []
        for t, decision in selection.promoted:
            resume = ["--epochs", str(config.full_epochs), "--resume-from", version_files(models, t.version)]
            command = [*commands[t.trial], *resume]
            runs.append(trial_kwargs(params, study["study"], t.trial, "full", command, decision.cap.usd))
        return runs

    selected: Any = select(arrays)
    full_runs = RemoteTrainingOperator.partial(task_id="full", **trial_arguments).expand_kwargs(selected)

    @task(trigger_rule="all_done")
    def best() -> dict[str, Any]:
        """The winner, each trial's billed cost from the ledger, and the saving of the prune."""
        from costaware.core.tuning.spot_spend import study_cost
        from costaware.hooks.ledger import CostLedgerHook
        from costaware.training.spot_tuning import finished_results, spend_table, study_spend

        context = get_current_context()
        ti, run_id = context["ti"], context["run_id"]
        study = upstream_result(ti, "plan", "study")
        ranking = upstream_result(ti, "select", "selection")["ranking"]
        config = settings(context["params"])
        spend = study_spend(CostLedgerHook().get_conn(), dag_id=DAG_ID, run_id=run_id, study=study["study"])
        finished = [
            {
                "trial": int(r["metrics"]["trial"]),
                "loss": float(r["metrics"]["val_rmse"]),
                "version": r["version"],
            }
            for r in finished_results(ti.xcom_pull(task_ids="full"))
        ]
        winner, rose = pick_winner(finished, ranking)
        epochs = config.full_epochs if finished else config.warmup_epochs
        cost = study_cost(spend, planned_trials=len(study["trials"]), settings=config)
        print(spend_table(spend))
        print(
            f"best: trial {winner['trial']}, holdout RMSE {winner['loss']:.3f} min after {epochs} epochs"
            f"{rose} (version {winner['version']}). {cost.summary()}"
        )
        return {
            **winner,
            "epochs": epochs,
            "study": study["study"],
            "usd": f"{cost.usd:.6f}",
            "usd_per_trial": {n: f"{s.usd:.6f}" for n, s in spend.items()},
            "usd_all_full": f"{cost.usd_all_full:.6f}",
            "usd_saved": f"{cost.usd_saved:.6f}",
        }

    result = best()
    arrays >> spot_window >> planned_study
    warmup >> selected
    full_runs >> result


def _number(value: object) -> float | None:
    """``value`` as a number (a form gives text), or None."""
    try:
        return float(str(value).strip())
    except ValueError:
        return None


spot_tuning()
