"""Many trial processes race for one study's USD cap: never passed, no row lost (SQLite and PostgreSQL)."""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from services import database_url
from sqlalchemy import func, select

from costaware import Ledger
from costaware.adapters.ledger import schema
from costaware.core.tuning import RungSchedule, StudySpec, TuningCaps, parse_search_space

PROCESSES = 4
CAP = Decimal("10.00")
USD_PER_HOUR = Decimal(3600)  # $1 a second of the trials' meter: ~10 full and ~25 pruned trials meet the cap


#: What one epoch costs on the trials' meter, in seconds ($1 a second).
EPOCH_SECONDS = 0.02


class EpochClock:
    """The trials' meter in one worker process: it moves only as epochs are trained.

    The race is real (four processes reserve and settle in one ledger at once), but what each trial is
    billed is not the wall clock: on a loaded machine the wall clock made every trial outrun its
    reservation and be cut, so whether any trial got promoted depended on the load.
    """

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CLOCK = EpochClock()  # one per process: each spawned worker imports this module anew


class LogisticTrainer:
    """Logistic regression by full-batch gradient descent; one unit of resource is one epoch."""

    def __init__(self, params: dict[str, Any], seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.x = rng.normal(size=(2000, 20))
        w = rng.normal(size=20)
        self.y = (self.x @ w + rng.normal(scale=2.0, size=2000) > 0).astype(float)
        self.lr, self.l2 = float(params["learning_rate"]), float(params["l2"])
        self.w = np.zeros(20)
        self.epochs = 0

    def advance(self, resource: int) -> float:
        for _ in range(resource - self.epochs):
            p = 1 / (1 + np.exp(-self.x[:1500] @ self.w))
            grad = self.x[:1500].T @ (p - self.y[:1500]) / 1500 + self.l2 * self.w
            self.w -= self.lr * grad
            time.sleep(0.004)  # the trials overlap in time, so their reservations race
            CLOCK.now += EPOCH_SECONDS
        self.epochs = resource
        p = np.clip(1 / (1 + np.exp(-self.x[1500:] @ self.w)), 1e-9, 1 - 1e-9)
        y = self.y[1500:]
        return float(np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))  # higher is better


def _spec(name: str) -> StudySpec:
    return StudySpec(
        study_name=name,
        direction="maximize",
        search_space=parse_search_space(
            {
                "learning_rate": {"type": "float", "low": 0.01, "high": 1.0, "log": True},
                "l2": {"type": "float", "low": 0.0, "high": 0.1},
            }
        ),
        schedule=RungSchedule.geometric(4, 32, 2),
        caps=TuningCaps.create(max_usd=CAP, max_trials=500),
        sampler="random",
        scope={"project": "race"},
        usd_per_hour=USD_PER_HOUR,
        fallback_trial_seconds=2.0,
        slack_seconds=0.5,
    )


def run_slots(url: str, study: str, worker: int) -> list[dict[str, Any]]:
    """One worker: run trials until the study stops; returns what each slot did."""
    import optuna  # noqa: F401  # a worker imports it once; trials are charged for training, not imports

    from costaware.training.tuning import EntryOwner, open_storage, run_trial

    ledger = Ledger.from_url(url)
    open_storage(url)  # once per worker process, like its imports
    out = []
    for n in range(200):
        result = run_trial(
            storage_url=url,
            ledger=ledger,
            study_name=study,
            trainer=LogisticTrainer,
            holder=f"race/{worker}/{n}",
            wait_poll_seconds=0.1,
            slot=worker * 1000 + n,
            settle_as=EntryOwner(dag_id="race", run_id=f"w{worker}", map_index=n),
            meter=CLOCK,
        )
        out.append(result.to_json())
        if not result.ran and not result.goes_on:  # a slot that gave way leaves the study going on
            break
    ledger.dispose()
    return out


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_parallel_trials_never_pass_the_study_cap(backend: str, tmp_path, request) -> None:  # type: ignore[no-untyped-def]
    import optuna

    from costaware.training.tuning import create_study, summarize_study

    url = database_url(backend, tmp_path, request, "tune")
    ledger = Ledger.from_url(url)
    spec = _spec(f"race-{backend}")
    create_study(url, ledger, spec)

    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        results = pool.starmap(run_slots, [(url, spec.study_name, w) for w in range(PROCESSES)])

    slots = [slot for worker in results for slot in worker]
    ran = [s["trial"] for s in slots if s["ran"]]

    # What each worker's slots did, in every failure message: a failure under load must say which rule broke.
    def said(slot: dict[str, Any]) -> str:
        return slot["trial"]["state"] if slot["ran"] else f"stop {slot['stop']} ({slot['reason'][:120]})"

    story = "; ".join(f"worker {w}: {', '.join(map(said, worker))}" for w, worker in enumerate(results))
    assert all(
        not worker[-1]["ran"] and worker[-1]["stop"] == "budget" and not worker[-1]["goes_on"]
        for worker in results
    ), story
    assert len(ran) >= 8, story  # the cap, not a crash, ended the study

    spent = ledger.spent(spec.budget_scope)
    (usage,) = ledger.usage(spec.budget_scope)
    assert spent <= CAP, f"spent {spent} past the cap {CAP}"
    assert usage.reserved_usd == 0 and usage.spent_usd == spent
    assert spent == sum(Decimal(t["settled_usd"]) for t in ran)
    # The last refused reservation really did not fit: what was left could not pay for a trial.
    assert CAP - spent < max(Decimal(t["reserved_usd"]) for t in ran), (spent, story)

    with ledger.engine.connect() as conn:
        reservations = dict(
            conn.execute(
                select(schema.reservations.c.status, func.count()).group_by(schema.reservations.c.status)
            ).all()
        )
        entries = Counter(
            dict(
                conn.execute(
                    select(schema.entries.c.outcome == "skipped", func.count()).group_by(
                        schema.entries.c.outcome == "skipped"
                    )
                ).all()
            )
        )
    # Each slot holds its time once the study is loaded: a trial's reservation replaces that hold (one per
    # trial, every one settled), a slot refused settles it with its skipped entry; none is left open.
    assert set(reservations) == {"settled", "replaced"}, (reservations, story)
    assert reservations["replaced"] == len(ran), (reservations, story)
    assert len(ran) <= reservations["settled"] <= len(slots), (reservations, story)
    assert entries[False] == len(ran), story  # and exactly one ledger entry each: no row lost, none doubled
    # Each slot that ran no trial records the time it took to decide, once (outside Airflow).
    assert entries[True] == len(slots) - len(ran), story

    study = optuna.load_study(study_name=spec.study_name, storage=url)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == len(ran) and sorted(t.number for t in trials) == sorted(t["number"] for t in ran)
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    states = Counter(t["state"] for t in ran)
    assert states["promoted"] >= 1 and states["pruned"] >= 1, story

    summary = summarize_study(url, ledger, spec.study_name)
    assert Decimal(summary["spent_usd"]) == spent
    assert summary["stop"]["reason"] == "budget"
    assert summary["successful_trials"] == states["promoted"]
    per_success = Decimal(summary["cost_per_successful_trial_usd"])
    assert per_success == (spent / states["promoted"]).quantize(Decimal("0.000001"))
    ledger.dispose()
