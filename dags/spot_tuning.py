"""The $100 spot tuning plan: a deep-learning search whose trials run through ``RemoteTrainingOperator``.

The plan: 40 trials at most, each warmed up for 3 epochs on spot with checkpoints every 15 minutes; the bottom
half by holdout RMSE is pruned there; the rest are promoted to 15 epochs, continuing from their warm-up (a
promotion pays only the 12 epochs it adds); a hard stop at $100 or 20 GPU-hours. The trial is
``examples/spot_tuning/train_trial.py``, a plain preemptible PyTorch MLP (``costaware_runtime`` only).

1. ``prepare``      the replayed 2013 day's training and holdout arrays (as ``own_training``);
2. ``spot_window``  spot when the price is good, on-demand when waiting would miss the deadline;
3. ``plan``         samples ``max_trials`` configurations with a seeded RNG, sizes the study so that the
                    warm-ups and the promotions fit the dollar and GPU-hour caps at the trial's price and
                    ``epoch_minutes``, sets the study's ledger budget (``study=<run id>``, period ``total``)
                    and reserves each warm-up in it;
4. ``warmup``       one mapped ``RemoteTrainingOperator`` per trial: checkpointed, a preemption resumes from
                    the newest checkpoint, each billed attempt is a ledger entry tagged ``trial=<n>``;
5. ``select``       ranks the warm-ups, prunes the bottom ``1 - keep_fraction``, and promotes the best only
                    while what the ledger says was spent (dollars, GPU-hours) plus the promotion's cost,
                    estimated from its own warm-up, stays under the caps: each promotion is reserved in the
                    study's budget first, so the caps hold even for promotions running side by side;
6. ``full``         one mapped ``RemoteTrainingOperator`` per promoted trial, ``--resume-from`` its warm-up's
                    model version, to ``full_epochs``;
7. ``best``         the winner, each trial's billed cost from the ledger, and the saving against training
                    every planned trial to ``full_epochs``.

Runs as is: ``airflow dags test spot_tuning 2013-02-01`` (the ``local`` backend; small values for a quick
look: ``-c '{"max_trials": 4, "warmup_epochs": 1, "full_epochs": 3}'``). Then
``costaware report --dag-id spot_tuning --last-run --group-by tag:trial``. See docs/spot-tuning.md.
"""

from __future__ import annotations

import math
import os
import random
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.params import tag_param
from costaware.sensors.spot_window import SpotWindowSensor

TEAM = "ml-platform"
PROJECT = "flight-delays"
REGION = "us-east-1"
SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "spot_tuning" / "train_trial.py"
#: The only recorded spot history bundled (a CPU type): the window's stand-in market when ``prices`` is empty.
STAND_IN_TYPE = "c5.4xlarge"
RECORDED_SPOT_PRICES = str(
    resources.files("costaware") / "data" / f"spot_history_{STAND_IN_TYPE}_{REGION}.json"
)
#: The search space: log-uniform floats, uniform floats, choices.
SPACE: dict[str, tuple[str, Any]] = {
    "lr": ("log", (1e-4, 1e-2)),
    "weight_decay": ("log", (1e-6, 1e-2)),
    "hidden": ("choice", (32, 64, 128, 256)),
    "layers": ("choice", (1, 2, 3)),
    "dropout": ("uniform", (0.0, 0.3)),
    "batch_size": ("choice", (256, 512, 1024)),
}
#: What the ledger billed a trial: in all, then its warm-up's and its promoted run's share.
SPEND_KEYS = tuple(
    f"{stage}{key}" for stage in ("", "warmup_", "full_") for key in ("usd", "hours", "attempts")
)
#: Reservations of the study outlive its longest stage (the ledger's default is 6 hours).
RESERVATION_TTL = timedelta(days=3)


def prepared(name: str) -> str:
    """A template of one value the ``prepare`` task returned."""
    return "{{ ti.xcom_pull(task_ids='prepare')['" + name + "'] }}"


def planned(name: str) -> str:
    """A template of one value the ``plan`` task returned."""
    return "{{ ti.xcom_pull(task_ids='plan', key='" + name + "') }}"


def sample_trials(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` configurations of :data:`SPACE` drawn with a generator seeded by ``seed``.

    Trial ``n`` gets the same configuration whatever ``count`` is, so a smaller study runs a prefix.
    """
    rng = random.Random(seed)
    trials = []
    for _ in range(count):
        hparams: dict[str, Any] = {}
        for name, (kind, values) in SPACE.items():
            if kind == "log":
                hparams[name] = float(f"{math.exp(rng.uniform(*map(math.log, values))):.3g}")
            elif kind == "uniform":
                hparams[name] = round(rng.uniform(*values), 3)
            else:
                hparams[name] = rng.choice(values)
        trials.append(hparams)
    return trials


def kept_count(trials: int, keep_fraction: float) -> int:
    """How many of ``trials`` warm-ups survive the prune: the top ``keep_fraction``, at least one."""
    return max(1, math.floor(trials * keep_fraction + 1e-9)) if trials else 0


def study_size(
    *,
    max_trials: int,
    keep_fraction: float,
    warmup: tuple[float, float],
    promotion: tuple[float, float],
    max_usd: float,
    max_gpu_hours: float,
) -> int:
    """The most trials (up to ``max_trials``) whose warm-ups and promotions fit both caps.

    Args:
        max_trials: The plan's trial cap.
        keep_fraction: The share of warm-ups promoted.
        warmup: Estimated (USD, GPU-hours) of one warm-up.
        promotion: Estimated (USD, GPU-hours) of the epochs one promotion adds.
        max_usd: The dollar cap.
        max_gpu_hours: The GPU-hour cap.
    """
    for trials in range(max_trials, 0, -1):
        kept = kept_count(trials, keep_fraction)
        usd = trials * warmup[0] + kept * promotion[0]
        gpu_hours = trials * warmup[1] + kept * promotion[1]
        if usd <= max_usd and gpu_hours <= max_gpu_hours:
            return trials
    return 0


def promotions(
    ranked: Sequence[Mapping[str, Any]],
    *,
    keep: int,
    spent: tuple[float, float],
    caps: tuple[float, float],
    added_epochs: int,
    warmup_epochs: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Which of the ``ranked`` warm-ups (best first) are promoted, and which are not, with why.

    A warm-up below the top ``keep`` is pruned. One in the top ``keep`` is promoted while what was spent
    plus the promotions so far plus its own, estimated from its warm-up's billed cost per epoch (startup
    included, so on the high side), stays within both caps; else it is stopped by the cap.

    Args:
        ranked: Warm-ups, best first: ``trial``, ``usd``, ``gpu_hours`` (what its warm-up was billed).
        keep: How many survive the prune.
        spent: What the study has spent so far, (USD, GPU-hours).
        caps: The study's caps, (USD, GPU-hours).
        added_epochs: Epochs a promotion adds.
        warmup_epochs: Epochs of a warm-up.

    Returns:
        The promoted (each with ``est_usd`` and ``est_gpu_hours``) and the others (each with ``reason``).
    """
    promoted: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    usd, gpu_hours = spent
    for rank, trial in enumerate(ranked):
        if rank >= keep:
            left.append({**trial, "reason": f"pruned: rank {rank + 1} of {len(ranked)}, {keep} kept"})
            continue
        per_epoch = added_epochs / warmup_epochs
        est_usd, est_gpu = float(trial["usd"]) * per_epoch, float(trial["gpu_hours"]) * per_epoch
        if usd + est_usd > caps[0] or gpu_hours + est_gpu > caps[1]:
            left.append(
                {
                    **trial,
                    "reason": f"stopped by the cap: ${usd + est_usd:.4f} of ${caps[0]:g}, "
                    f"{gpu_hours + est_gpu:.4f} of {caps[1]:g} GPU-hours with it",
                }
            )
            continue
        usd, gpu_hours = usd + est_usd, gpu_hours + est_gpu
        promoted.append({**trial, "est_usd": est_usd, "est_gpu_hours": est_gpu})
    return promoted, left


def trial_prices(
    catalog: Any,
    instance_type: str,
    watched: Any,
    *,
    spot_given: float | None = None,
    on_demand_given: float | None = None,
) -> tuple[float, float, float]:
    """A trial's spot and on-demand USD/hour and its instance's GPUs.

    The prices given win; then the spot window's decision when it ``watched`` this type; then the bundled
    list (on-demand) and the spot advisor's saving on it (spot). A SageMaker ``ml.*`` type takes its GPUs
    from the EC2 type of the same name, but its prices must be given: they are not EC2's.

    Raises:
        ConfigurationError: an ``ml.*`` type without both prices.
        PriceNotFoundError: the type is not in the bundled list.
    """
    from costaware.core.errors import ConfigurationError

    ec2_type = instance_type.removeprefix("ml.")
    if ec2_type != instance_type and (spot_given is None or on_demand_given is None):
        raise ConfigurationError(
            f"{instance_type} is a SageMaker type, whose prices are not in the bundled EC2 list: give "
            "spot_usd_per_hour and on_demand_usd_per_hour (SageMaker's price page)"
        )
    offer = catalog.offer(ec2_type, REGION)
    on_demand = on_demand_given
    spot = spot_given
    if watched is not None:
        on_demand = on_demand if on_demand is not None else watched.on_demand_usd_per_hour
        if spot is None and watched.market == "spot":
            spot = watched.usd_per_hour
    on_demand = float(on_demand if on_demand is not None else offer.usd_per_hour)
    spot = float(spot if spot is not None else catalog.spot_estimate_usd_per_hour(ec2_type, REGION))
    return spot, on_demand, float(offer.gpus or 0)


def cost_without_prune(
    spend: Mapping[str, Mapping[str, float]], *, trials: int, added_epochs: int, warm: int
) -> float:
    """What every planned trial trained to full epochs would have cost, from what the study was billed.

    Each trial's warm-up as billed (the mean warm-up for one that did not run), plus the added epochs at
    the promoted runs' billed cost per added epoch (the warm-ups' per epoch when none was promoted).
    """
    warmups = [c["warmup_usd"] for c in spend.values() if c["warmup_usd"]]
    if not warmups:
        return 0.0
    fulls = [c["full_usd"] / added_epochs for c in spend.values() if c["full_usd"]]
    per_added = sum(fulls) / len(fulls) if fulls else sum(warmups) / len(warmups) / warm
    return (
        sum(warmups)
        + (trials - len(warmups)) * sum(warmups) / len(warmups)
        + trials * added_epochs * per_added
    )


def version_files(model_store: str, version: str) -> str:
    """Where a ``files`` model version's files are: what a promoted run resumes from."""
    return f"{model_store.rstrip('/')}/versions/{version}/files"


def _results(context: Mapping[str, Any], task_id: str) -> list[Mapping[str, Any]]:
    """The XCom of every instance of the mapped ``task_id`` that succeeded (a failed one left none)."""
    pulled = context["ti"].xcom_pull(task_ids=task_id)
    if isinstance(pulled, Mapping):
        pulled = [pulled]
    return [r for r in pulled or [] if isinstance(r, Mapping) and "metrics" in r]


def _study_spend(study: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Billed USD, hours and GPU-hours per trial and stage, from the ledger's attempt entries of the study."""
    from costaware.hooks.ledger import CostLedgerHook

    context = get_current_context()
    rows = CostLedgerHook().get_conn().entries(dag_id=context["dag"].dag_id, run_id=context["run_id"])
    spend: dict[str, dict[str, float]] = {}
    for row in rows:
        tags = row.get("tags") or {}
        if row["estimated"] or tags.get("study") != study["study"] or "trial" not in tags:
            continue
        if not str(row.get("price_source") or "").startswith("remote:"):
            continue  # the worker's own wait (cause orchestration) is not the trial's compute
        cell = spend.setdefault(tags["trial"], dict.fromkeys(SPEND_KEYS, 0.0))
        stage = "full" if row["task_id"] == "full" else "warmup"
        for key, value in (("usd", float(row["usd"])), ("hours", float(row["quantity"])), ("attempts", 1.0)):
            cell[key] += value
            cell[f"{stage}_{key}"] += value
    return spend


@dag(
    dag_id="spot_tuning",
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
        # Exclusive bounds are checked at trigger time; the form would clamp minimum/maximum silently.
        "max_usd": Param(
            100,
            type="number",
            exclusiveMinimum=0,
            exclusiveMaximum=1_000_000,
            title="Dollar cap (USD)",
            description="Hard stop: the study never starts a trial that would take it past this.",
        ),
        "max_gpu_hours": Param(
            20,
            type="number",
            exclusiveMinimum=0,
            exclusiveMaximum=1_000_000,
            title="GPU-hour cap",
            description="Hard stop in GPU-hours (billed hours x the instance's GPUs).",
        ),
        "max_trials": Param(
            40,
            type="integer",
            exclusiveMinimum=0,
            exclusiveMaximum=1001,
            title="Trials",
            description="1-1000.",
        ),
        "warmup_epochs": Param(
            3,
            type="integer",
            exclusiveMinimum=0,
            exclusiveMaximum=1001,
            title="Warm-up epochs",
            description="Every trial trains this many epochs; the prune ranks them there.",
        ),
        "full_epochs": Param(
            15,
            type="integer",
            exclusiveMinimum=1,
            exclusiveMaximum=10001,
            title="Full epochs",
            description="A promoted trial's epochs in all (more than the warm-up's).",
        ),
        "keep_fraction": Param(
            0.5,
            type="number",
            exclusiveMinimum=0,
            exclusiveMaximum=1,
            title="Share promoted",
            description="The top share of warm-ups promoted; 0.5 prunes the bottom half.",
        ),
        "checkpoint_minutes": Param(
            15,
            type="number",
            exclusiveMinimum=0,
            exclusiveMaximum=1441,
            title="Checkpoint every (minutes)",
            description="The most work a preemption loses; 15-30 on spot.",
        ),
        "epoch_minutes": Param(
            4,
            type="number",
            exclusiveMinimum=0,
            exclusiveMaximum=100_000,
            title="Minutes per epoch (estimate)",
            description="One epoch on the instance type: sizes the study before any trial has run.",
        ),
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
        "seed": Param(13, type="integer", title="Seed", description="Seeds the sampler and the trials."),
        "backend": Param(
            "local",
            enum=["local", "sagemaker", "batch", "kubernetes"],
            title="Backend",
            description="Where the trials run: local (child processes of the worker), sagemaker, batch, "
            "kubernetes.",
        ),
        "image": Param(
            None,
            type=["null", "string"],
            title="Training image",
            description="Container image on SageMaker, Batch and Kubernetes (see "
            "runtime/Dockerfile.train.example); not used locally.",
        ),
        "backend_options": Param({}, type="object", title="Backend options"),
        "python": Param(
            sys.executable,
            type="string",
            title="Python",
            description="The interpreter that runs the trial: this Airflow's own on the local backend "
            "(it needs torch); 'python' in a container.",
        ),
        "script": Param(str(SCRIPT), type="string", title="Trial script"),
        "train_days": Param(
            28,
            type="integer",
            exclusiveMinimum=0,
            exclusiveMaximum=366,
            title="Days of training data",
            description="Days up to the replayed one: 1-365.",
        ),
        "step_sleep": Param(
            0.0,
            type="number",
            exclusiveMinimum=-1,
            title="Seconds per step",
            description="Slows every step down (demos of a preemption); 0 in real use.",
        ),
        "poll_seconds": Param(
            5.0,
            type="number",
            exclusiveMinimum=0,
            exclusiveMaximum=3601,
            title="Poll every (seconds)",
            description="How often a trial's job is looked at.",
        ),
        "replay_date": Param(None, type=["null", "string"], format="date", title="Day of 2013 to replay"),
        "data_root": Param(None, type=["null", "string"], title="Data folder"),
    },
    doc_md=__doc__,
)
def spot_tuning() -> None:
    @task
    def prepare() -> dict[str, str]:
        """Land the days up to the replayed one (and the next, the holdout), then write the arrays."""
        from costaware.examples import flights

        context = get_current_context()
        params = context["params"]
        day = flights.replay_date(
            context.get("logical_date") or context["dag_run"].run_after, params.get("replay_date")
        )
        home = Path(os.environ.get("AIRFLOW_HOME", Path.home() / "airflow")) / "costaware"
        root = str(params.get("data_root") or home / "spot_tuning").rstrip("/")
        landing = home / "flights" / "landing"
        flights.land_days(landing, day + timedelta(days=1))
        run = context["run_id"].replace(":", "_").replace("+", "_")
        arrays = flights.write_delay_arrays(
            landing, day, f"{root}/arrays/{run}", train_days=int(params["train_days"])
        )
        return {**arrays, "models": f"{root}/models", "checkpoints": f"{root}/checkpoints"}

    arrays = prepare()
    spot_window = SpotWindowSensor(
        task_id="spot_window",
        instance_type="{{ params.instance_type if params.prices else '" + STAND_IN_TYPE + "' }}",
        region=REGION,
        expected_runtime_hours="{{ params.warmup_epochs * params.epoch_minutes / 60 }}",
        prices="{{ params.prices or '" + RECORDED_SPOT_PRICES + "' }}",
        deferrable=True,
        poke_interval=300,
    )

    @task
    def plan(data: Any) -> list[dict[str, Any]]:
        """Sample the trials, size the study to the caps, set its budget and reserve every warm-up."""
        from costaware.adapters.price_files import bundled_catalog
        from costaware.core.errors import BudgetExceededError, CostawareError
        from costaware.core.ledger import reservation_holder
        from costaware.hooks.ledger import CostLedgerHook
        from costaware.operators.remote_training_args import parse_decision

        context = get_current_context()
        params, run_id, dag_id = context["params"], context["run_id"], context["dag"].dag_id
        warm, full = int(params["warmup_epochs"]), int(params["full_epochs"])
        if full <= warm:
            raise AirflowFailException(
                f"full_epochs {full} must be more than warmup_epochs {warm}: a promotion adds epochs"
            )
        decision = parse_decision(context["ti"].xcom_pull(task_ids="spot_window"))
        instance_type = str(params["instance_type"])
        try:
            spot, on_demand, gpus = trial_prices(
                bundled_catalog(),
                instance_type,
                decision if params.get("prices") else None,
                spot_given=params.get("spot_usd_per_hour"),
                on_demand_given=params.get("on_demand_usd_per_hour"),
            )
        except CostawareError as e:
            raise AirflowFailException(str(e)) from e
        market = decision.market if decision is not None else "on_demand"
        usd_per_hour = spot if market == "spot" else on_demand
        hours_per_epoch = float(params["epoch_minutes"]) / 60
        warmup_cost = (warm * hours_per_epoch * usd_per_hour, warm * hours_per_epoch * gpus)
        promotion_cost = (
            (full - warm) * hours_per_epoch * usd_per_hour,
            (full - warm) * hours_per_epoch * gpus,
        )
        max_usd, max_gpu_hours = float(params["max_usd"]), float(params["max_gpu_hours"])
        trials = study_size(
            max_trials=int(params["max_trials"]),
            keep_fraction=float(params["keep_fraction"]),
            warmup=warmup_cost,
            promotion=promotion_cost,
            max_usd=max_usd,
            max_gpu_hours=max_gpu_hours,
        )
        if trials == 0:
            one = (warmup_cost[0] + promotion_cost[0], warmup_cost[1] + promotion_cost[1])
            raise AirflowFailException(
                f"one warm-up and its promotion need an estimated ${one[0]:.4f} and {one[1]:.4f} GPU-hours "
                f"on {market} {instance_type}; "
                f"the caps are ${max_usd:g} and {max_gpu_hours:g} GPU-hours: raise a cap or lower the epochs"
            )
        study = run_id
        scope = f"project={params['project']},study={study}"
        ledger = CostLedgerHook().get_conn()
        ledger.set_budget(scope, "total", str(max_usd), cap_gpu_hours=str(max_gpu_hours), actor=dag_id)
        base = [str(params["python"]), str(params["script"]), "--data", data["folder"]]
        configs = sample_trials(int(params["max_trials"]), int(params["seed"]))[:trials]
        kwargs, described = [], []
        for number, hparams in enumerate(configs):
            command = [
                *base,
                "--trial",
                str(number),
                "--seed",
                str(int(params["seed"]) + number),
                "--checkpoint-seconds",
                str(float(params["checkpoint_minutes"]) * 60),
                "--step-sleep",
                str(params["step_sleep"]),
                *[
                    part
                    for name, value in hparams.items()
                    for part in (f"--{name.replace('_', '-')}", str(value))
                ],
            ]
            try:
                ledger.reserve(
                    scope,
                    f"{warmup_cost[0]:.6f}",
                    gpu_hours=f"{warmup_cost[1]:.6f}",
                    holder=reservation_holder(dag_id, run_id, "warmup", number),
                    run_id=run_id,
                    ttl=RESERVATION_TTL,
                    purpose=f"the warm-up of trial {number}",
                )
            except BudgetExceededError as e:  # another budget of the project has less left than the caps
                raise AirflowFailException(f"trial {number} cannot be reserved: {e}") from e
            kwargs.append(
                {
                    "command": [*command, "--epochs", str(warm)],
                    "checkpoint_every_seconds": float(params["checkpoint_minutes"]) * 60,
                    "tags": {"study": study, "trial": str(number), "stage": "warmup"},
                    "poll_interval": float(params["poll_seconds"]),
                }
            )
            described.append({"trial": number, "command": command, "hparams": hparams})
        print(
            f"study {study}: {trials} of {params['max_trials']} trials fit ${max_usd:g} and "
            f"{max_gpu_hours:g} GPU-hours on {market} {instance_type} at ${usd_per_hour:.4f}/hour "
            f"({gpus:g} GPU): "
            f"warm-up ${warmup_cost[0]:.4f} each, promotion ${promotion_cost[0]:.4f} each, "
            f"{kept_count(trials, float(params['keep_fraction']))} promoted"
        )
        # Airflow maps over a task's return value only: the rest goes under keys of its own.
        ti = context["ti"]
        ti.xcom_push(
            "study",
            {
                "study": study,
                "scope": scope,
                "trials": described,
                "market": market,
                "usd_per_hour": usd_per_hour,
                "gpus": gpus,
                "estimate": {"warmup": warmup_cost, "promotion": promotion_cost},
            },
        )
        ti.xcom_push("spot_usd_per_hour", f"{spot:.6f}")
        ti.xcom_push("on_demand_usd_per_hour", f"{on_demand:.6f}")
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
        from costaware.core.errors import BudgetExceededError
        from costaware.core.ledger import reservation_holder
        from costaware.hooks.ledger import CostLedgerHook

        context = get_current_context()
        params, run_id, dag_id = context["params"], context["run_id"], context["dag"].dag_id
        warm, full = int(params["warmup_epochs"]), int(params["full_epochs"])
        study = context["ti"].xcom_pull(task_ids="plan", key="study")
        spend = _study_spend(study)
        gpus = float(study["gpus"])
        done = []
        for result in _results(context, "warmup"):
            metrics = result["metrics"]
            number = int(metrics["trial"])
            billed = spend.get(str(number), {})
            done.append(
                {
                    "trial": number,
                    "val_rmse": float(metrics["val_rmse"]),
                    "version": result["version"],
                    "usd": billed.get("usd", 0.0),
                    "gpu_hours": billed.get("hours", 0.0) * gpus,
                }
            )
        if not done:
            raise AirflowFailException("no warm-up finished: nothing to rank (see the warmup task's logs)")
        ranked = sorted(done, key=lambda t: (t["val_rmse"], t["trial"]))
        spent = (sum(c["usd"] for c in spend.values()), sum(c["hours"] for c in spend.values()) * gpus)
        caps = (float(params["max_usd"]), float(params["max_gpu_hours"]))
        keep = kept_count(len(ranked), float(params["keep_fraction"]))
        promoted, left = promotions(
            ranked, keep=keep, spent=spent, caps=caps, added_epochs=full - warm, warmup_epochs=warm
        )
        ledger = CostLedgerHook().get_conn()
        commands = {t["trial"]: t["command"] for t in study["trials"]}
        kwargs = []
        for index, trial in enumerate(list(promoted)):
            try:  # the ledger's check is atomic: it holds with other runs or promotions spending meanwhile
                ledger.reserve(
                    study["scope"],
                    f"{trial['est_usd']:.6f}",
                    gpu_hours=f"{trial['est_gpu_hours']:.6f}",
                    holder=reservation_holder(dag_id, run_id, "full", index),
                    run_id=run_id,
                    ttl=RESERVATION_TTL,
                    purpose=f"the promotion of trial {trial['trial']}",
                )
            except BudgetExceededError as e:
                stopped = promoted[index:]
                left += [{**t, "reason": f"stopped by the ledger: {e}"} for t in stopped]
                promoted = promoted[:index]
                break
            kwargs.append(
                {
                    "command": [
                        *commands[trial["trial"]],
                        "--epochs",
                        str(full),
                        "--resume-from",
                        version_files(data["models"], trial["version"]),
                    ],
                    "checkpoint_every_seconds": float(params["checkpoint_minutes"]) * 60,
                    "tags": {"study": study["study"], "trial": str(trial["trial"]), "stage": "full"},
                    "poll_interval": float(params["poll_seconds"]),
                }
            )
        print(f"spent so far ${spent[0]:.4f} and {spent[1]:.4f} GPU-hours of ${caps[0]:g} and {caps[1]:g}")
        for trial in ranked:
            verdict = next(
                (f"promoted (est. ${t['est_usd']:.4f})" for t in promoted if t["trial"] == trial["trial"]),
                next((t["reason"] for t in left if t["trial"] == trial["trial"]), ""),
            )
            print(f"trial {trial['trial']:>3}: holdout RMSE {trial['val_rmse']:.3f} min -> {verdict}")
        context["ti"].xcom_push(
            "selection",
            {
                "ranking": ranked,
                "promoted": [t["trial"] for t in promoted],
                "pruned": [{"trial": t["trial"], "reason": t["reason"]} for t in left],
            },
        )
        return kwargs

    selected: Any = select(arrays)
    full_runs = RemoteTrainingOperator.partial(task_id="full", **trial_arguments).expand_kwargs(selected)

    @task(trigger_rule="all_done")
    def best() -> dict[str, Any]:
        """The winner, each trial's billed cost from the ledger, and the saving of the prune."""
        context = get_current_context()
        study = context["ti"].xcom_pull(task_ids="plan", key="study")
        ranking = context["ti"].xcom_pull(task_ids="select", key="selection")["ranking"]
        params = context["params"]
        warm, full = int(params["warmup_epochs"]), int(params["full_epochs"])
        finished = {int(r["metrics"]["trial"]): r for r in _results(context, "full")}
        spend = _study_spend(study)
        candidates = [
            {"trial": n, "val_rmse": float(r["metrics"]["val_rmse"]), "epochs": full, "version": r["version"]}
            for n, r in finished.items()
        ] or [{**t, "epochs": warm} for t in ranking]
        winner = min(candidates, key=lambda t: (t["val_rmse"], t["trial"]))
        spent = sum(c["usd"] for c in spend.values())
        all_full = cost_without_prune(spend, trials=len(study["trials"]), added_epochs=full - warm, warm=warm)
        print(
            f"{'trial':>5} {'warm-up attempts':>16} {'warm-up USD':>12} {'full attempts':>13} {'full USD':>9}"
        )
        for trial in sorted(spend, key=int):
            cell = spend[trial]
            print(
                f"{trial:>5} {cell['warmup_attempts']:>16.0f} {cell['warmup_usd']:>12.6f} "
                f"{cell['full_attempts']:>13.0f} {cell['full_usd']:>9.6f}"
            )
        saving = all_full - spent
        print(
            f"best: trial {winner['trial']}, holdout RMSE {winner['val_rmse']:.3f} min after "
            f"{winner['epochs']} epochs (version {winner['version']}). "
            f"The study cost ${spent:.6f} over {len(spend)} trials "
            f"(${spent / max(len(spend), 1):.6f} per trial); all {len(study['trials'])} to {full} epochs: "
            f"${all_full:.6f}; saved ${saving:.6f} ({(saving / all_full if all_full else 0):.0%})"
        )
        return {
            **winner,
            "study": study["study"],
            "usd": f"{spent:.6f}",
            "usd_per_trial": {n: f"{c['usd']:.6f}" for n, c in spend.items()},
            "usd_all_full": f"{all_full:.6f}",
            "usd_saved": f"{saving:.6f}",
        }

    result = best()
    arrays >> spot_window >> planned_study
    warmup >> selected
    full_runs >> result


spot_tuning()
