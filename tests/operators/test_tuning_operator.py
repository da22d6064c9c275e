from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import numpy as np
import optuna
import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from clocks import hold_clock_modules
from sqlalchemy import select

from costaware import Ledger
from costaware.adapters.ledger import schema
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import Kind, LedgerEntry, reservation_holder
from costaware.core.tuning import fall_adjusted_value
from costaware.operators.tuning import (
    BudgetedTuningOperator,
    TuningStudyCreateOperator,
    TuningStudySummarizeOperator,
    budgeted_tuning,
)
from costaware.plugins import listener
from costaware.training.study_arguments import resolve_trial_trainer
from costaware.training.tuning import summarize_study

DAG_ID, RUN_ID = "tune_dag", "manual__1"
SPACE = {"lr": {"type": "float", "low": 0.05, "high": 1.0, "log": True}}


class QuadraticTrainer:
    """Gradient descent on (w - 3)^2 from 0; one unit of resource is one step. Score: minus the distance."""

    def __init__(self, params: dict[str, Any], fail_at: int | None = None) -> None:
        self.lr, self.w, self.steps, self.fail_at = float(params["lr"]), 0.0, 0, fail_at

    def advance(self, resource: int) -> float:
        for _ in range(resource - self.steps):
            if self.fail_at is not None and self.steps >= self.fail_at:
                raise RuntimeError(f"diverged at step {self.steps}")
            self.w -= self.lr * 2 * (self.w - 3)
            self.steps += 1
        return -abs(self.w - 3)


class Interrupted(BaseException):
    """What a worker sees when it is killed mid-trial (SIGTERM, spot notice)."""


class KilledTrainer(QuadraticTrainer):
    def advance(self, resource: int) -> float:
        raise Interrupted


@pytest.fixture
def env(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    return Ledger.from_url(ledger_url)


def _ti(task: Any, map_index: int = -1, try_number: int = 1, max_tries: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        dag_id=DAG_ID,
        run_id=RUN_ID,
        task_id=task.task_id,
        map_index=map_index,
        try_number=try_number,
        max_tries=task.retries if max_tries is None else max_tries,  # as Airflow sets it before any clear
        task=task,
        get_template_context=lambda: {"params": {}},
    )


def _plan(**kwargs: Any) -> TuningStudyCreateOperator:
    args: dict[str, Any] = {
        "task_id": "plan",
        "study_name": "s1",
        "search_space": SPACE,
        "min_resource": 2,
        "max_resource": 16,
        "max_usd": "5",
        "max_trials": 6,
        "scope": {"project": "churn"},
        "instance_type": "m5.large",
        "usd_per_hour": "36",
        "fallback_trial_seconds": 5,
        "sampler": "random",
        "seed": 3,
    }
    args.update(kwargs)
    return TuningStudyCreateOperator(**args)


def _run_slot(
    slot: int, trainer: Any = QuadraticTrainer, try_number: int = 1, study_name: str = "s1", **kwargs: Any
) -> dict[str, Any]:
    """Execute one mapped trial task the way a worker does: the cost listener around execute."""
    op = BudgetedTuningOperator(task_id="trial", study_name=study_name, trainer=trainer, slot=slot, **kwargs)
    ti = _ti(op, map_index=slot, try_number=try_number)
    listener.cost_listener.on_task_instance_running(None, ti)
    try:
        result = op.execute({"ti": ti})
    except AirflowSkipException:
        listener.cost_listener.on_task_instance_skipped(None, ti)
        raise
    except BaseException as e:
        listener.cost_listener.on_task_instance_failed(None, ti, e)
        raise
    listener.cost_listener.on_task_instance_success(None, ti)
    return result


def test_plan_trials_and_summary_record_every_trial_in_the_ledger(env: Ledger) -> None:
    # Trials are timed by the wall clock: a generous slack keeps a rung slowed by a busy machine from being
    # cut for money (cutting has tests of its own), so this test sees only pruned and promoted trials.
    plan = _plan(slack_seconds=60)
    slots = plan.execute({"ti": _ti(plan)})
    assert slots == [0, 1, 2, 3, 4, 5]
    (budget,) = [b for b in env.budgets() if str(b.scope) == "project=churn,study=s1"]
    assert (budget.cap_usd, budget.period.value) == (Decimal(5), "total")

    results = [_run_slot(slot) for slot in slots]
    assert [r["number"] for r in results] == list(range(6))
    assert {r["state"] for r in results} == {"promoted", "pruned"}
    for r in results:
        assert r["fidelity"] == (16 if r["state"] == "promoted" else r["rungs"][-1][0])
        assert r["label"] == f"#{r['number']} {r['state']}@{r['fidelity']}"

    rows = {row["trial"]: row for row in env.entries(dag_id=DAG_ID)}
    assert set(rows) == {r["label"] for r in results}  # one compute entry per trial, labelled by the listener
    for r in results:
        row = rows[r["label"]]
        assert row["tags"]["study"] == "s1" and row["tags"]["project"] == "churn"
        assert row["tags"]["trial_state"] == r["state"] and row["tags"]["fidelity"] == str(r["fidelity"])
        assert row["reservation_id"] == r["reservation_id"] and row["unit_price_usd"] == Decimal(36)
        assert row["note"].startswith(f"{r['rungs'][0][0]}:")
    assert env.open_reservations() == []  # the listener settled every trial's reservation
    (trial_report,) = [u for u in env.usage("project=churn,study=s1")]
    assert trial_report.reserved_usd == 0 and trial_report.spent_usd == sum(
        row["usd"] for row in rows.values()
    )

    summary_op = TuningStudySummarizeOperator(task_id="summarize", study_name="s1", trial_task_id="trial")
    summary = summary_op.execute({"ti": _ti(summary_op)})
    assert summary["states"] == {s: sum(r["state"] == s for r in results) for s in ("promoted", "pruned")}
    # Ranked as budgeted_search ranks: the value less its fall from its best rung.
    best = max(
        (r for r in results if r["state"] == "promoted"),
        key=lambda r: fall_adjusted_value([v for _, v in r["rungs"]]) or 0.0,
    )
    assert summary["best"]["number"] == best["number"]
    assert Decimal(summary["spent_usd"]) == trial_report.spent_usd
    promoted = summary["states"]["promoted"]
    assert Decimal(summary["cost_per_successful_trial_usd"]) == (trial_report.spent_usd / promoted).quantize(
        Decimal("0.000001")
    )
    assert summary["stop"] is None
    # max_trials: a seventh slot finds the study full and stops it.
    with pytest.raises(AirflowSkipException, match="6 trials started, max_trials is 6"):
        _run_slot(6)


def test_each_trial_is_logged_once_in_its_task_log(env: Ledger, caplog: pytest.LogCaptureFixture) -> None:
    """run_trial's line (logging) and the operator's (self.log) said each trial twice in the task log."""
    from structlog.testing import capture_logs

    plan = _plan(slack_seconds=60)
    plan.execute({"ti": _ti(plan)})
    with caplog.at_level("INFO"), capture_logs() as operator_events:  # self.log is structlog's: not in caplog
        result = _run_slot(0)
    said = [r.getMessage() for r in caplog.records] + [str(e.get("event")) for e in operator_events]
    lines = [line for line in said if line.startswith(f"trial {result['label']} ")]
    assert len(lines) == 1, lines
    assert result["decision"] in lines[0] and str(result["params"]) in lines[0]


def test_a_project_budget_refusing_first_still_says_the_study_cap_is_max_usd(env: Ledger) -> None:
    env.set_budget("project=churn", "total", "0.01")
    plan = _plan(max_usd="0.04", fallback_trial_seconds=5)  # a trial reserves 5 + 2 s at $36/h = $0.07
    plan.execute({"ti": _ti(plan)})
    with pytest.raises(AirflowSkipException, match=r"stopped \(budget\)") as stopped:
        _run_slot(0)
    said = str(stopped.value)
    assert "'project=churn/total" in said and "'project=churn,study=s1/" in said  # both refusing budgets
    assert "the study's budget is its max_usd ($0.04): raise max_usd, or set fallback_trial_seconds" in said


def test_the_study_stops_cleanly_when_the_next_trial_cannot_be_reserved(
    env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(max_usd="0.04", fallback_trial_seconds=5)  # a trial reserves 5 + 2 s at $36/h = $0.07
    plan.execute({"ti": _ti(plan)})
    with pytest.raises(AirflowSkipException, match=r"stopped \(budget\): budget 'project=churn,study=s1/"):
        _run_slot(0)
    with pytest.raises(AirflowSkipException, match=r"needs an estimated \$0\.07") as stopped:
        _run_slot(1)  # the stop is sticky: later slots do not try again
    # The study's own budget comes from max_usd: that is the setting to change, not `costaware budget set`.
    said = str(stopped.value)
    # The estimate before any trial finished is fallback_trial_seconds (600 s unless set): it was not named.
    assert (
        "the study's budget is its max_usd ($0.04): raise max_usd, or set fallback_trial_seconds (now 5 s: "
        "what one trial at max_resource is assumed to take until one has finished, the estimate's source) "
        "to what a trial takes, and run the DAG again (a run with study_name 's1' goes on with this study)"
    ) in said
    assert "costaware budget set" not in said
    study = optuna.load_study(study_name="s1", storage=env.engine.url.render_as_string(hide_password=False))
    assert study.get_trials() == []  # no trial was asked, nothing reserved
    assert env.open_reservations() == []
    assert study.user_attrs["costaware_stop"]["reason"] == "budget"
    summary_op = TuningStudySummarizeOperator(task_id="summarize", study_name="s1", trial_task_id="trial")
    summary_op.execute({"ti": _ti(summary_op)})
    (line,) = [m for m in capsys.readouterr().out.splitlines() if "study s1: " in m and "; best " in m]
    assert "study s1: no trial ran; best none; spent $0 of $0.04; per trial n/a, " in line
    assert "per successful trial n/a; stop: budget" in line


def test_a_refused_study_named_after_its_run_is_not_promised_to_go_on_in_the_next_run(env: Ledger) -> None:
    # study_name="delays-{{ run_id }}": "a run with the same study_name goes on with this study" was untrue.
    name = f"delays-{RUN_ID}"
    plan = _plan(study_name=name, max_usd="0.04", fallback_trial_seconds=5)
    plan.execute({"ti": _ti(plan)})
    with pytest.raises(AirflowSkipException, match=r"stopped \(budget\)") as stopped:
        _run_slot(0, study_name=name)
    said = str(stopped.value)
    assert "goes on with this study" not in said
    assert (
        f"(the study_name {name!r} holds this run's id, so the next run starts a new study; give a fixed "
        "study_name to go on with one)"
    ) in said


@pytest.mark.parametrize("on_exceeded", ["fail", "skip"])
def test_a_run_with_no_money_for_one_trial_fails_or_skips_as_on_exceeded_says(
    env: Ledger, on_exceeded: str
) -> None:
    # A scheduled study whose project budget is spent: every run turned red, with nothing wrong to fix.
    env.set_budget("project=churn", "month", "1")
    env.record(LedgerEntry("other", "r", "t", Kind.COMPUTE, Decimal("0.95"), tags={"project": "churn"}))
    plan = _plan(max_usd="5", fallback_trial_seconds=10)  # a trial needs about $0.10: next month has room
    plan.execute({"ti": _ti(plan)})
    with pytest.raises(AirflowSkipException, match=r"stopped \(budget\)"):
        _run_slot(0)
    summary_op = TuningStudySummarizeOperator(
        task_id="summarize", study_name="s1", trial_task_id="trial", on_exceeded=on_exceeded
    )
    ti = _ti(summary_op)
    ti.get_task_states = lambda **_: {RUN_ID: {"trial_0": "skipped"}}
    if on_exceeded == "skip":
        with pytest.raises(AirflowSkipException, match=r"no trial of this run could be paid for, skipped"):
            summary_op.execute({"ti": ti})
    else:
        with pytest.raises(AirflowFailException, match=r"on_exceeded='skip' skips such a run instead"):
            summary_op.execute({"ti": ti})


def test_a_trial_more_than_a_budget_s_whole_cap_fails_the_run_even_with_on_exceeded_skip(env: Ledger) -> None:
    # Skipped, it read as "no money this month" where no month would ever pay for one trial.
    plan = _plan(max_usd="0.04", fallback_trial_seconds=60)
    plan.execute({"ti": _ti(plan)})
    with pytest.raises(AirflowSkipException, match=r"stopped \(budget\)"):
        _run_slot(0)
    summary_op = TuningStudySummarizeOperator(
        task_id="summarize", study_name="s1", trial_task_id="trial", on_exceeded="skip"
    )
    ti = _ti(summary_op)
    ti.get_task_states = lambda **_: {RUN_ID: {"trial_0": "skipped"}}
    with pytest.raises(AirflowFailException, match=r"no new period makes room: .* more than the whole cap"):
        summary_op.execute({"ti": ti})


def test_trainer_kwargs_the_trainer_does_not_take_fail_the_slot_before_any_money_is_held(env: Ledger) -> None:
    # A TypeError in every trial, after its reservation, retried 5 minutes apart by Airflow.
    plan = _plan()
    plan.execute({"ti": _ti(plan)})
    # A misspelt key is named, with the one meant ('lable' only said "missing a required argument: 'label'").
    with pytest.raises(
        AirflowFailException,
        match=r"trainer_kwargs 'fail_a' is not an option of trainer QuadraticTrainer.*'fail_at'",
    ):
        _run_slot(0, trainer_kwargs={"fail_a": 2})
    assert env.open_reservations() == []
    url = env.engine.url.render_as_string(hide_password=False)
    assert optuna.load_study(study_name="s1", storage=url).trials == []  # no trial was asked for


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        # Passed on to max_active_tis_per_dagrun: the scheduler started no trial and the run waited forever.
        ({"max_active_trials": 0}, "max_active_trials must be a whole number >= 1 (None: as many as the "
         "workers run), got 0: with fewer than 1 no trial would ever start"),
        ({"max_active_trials": -1}, "max_active_trials must be a whole number >= 1"),
        ({"max_active_trials": "two"}, "max_active_trials must be a whole number >= 1 (None: as many as the "
         "workers run), got 'two': give a whole number"),
        ({"max_active_trials": 1.5}, "got 1.5: give a whole number"),
        ({"trial_retries": -1}, "trial_retries must be a whole number >= 0 (None: no retry), got -1: with "
         "fewer than 0"),
        ({"trial_retries": "x"}, "trial_retries must be a whole number >= 0 (None: no retry), got 'x': "
         "give a whole number"),
        # A whole number below the least, as text: told "give a whole number"; '²' escaped as a ValueError.
        ({"trial_retries": "-1"}, "got '-1': with fewer than 0"),
        ({"trial_retries": "²"}, "got '²': give a whole number"),
    ],
)  # fmt: skip
def test_trial_concurrency_no_trial_could_start_under_is_refused_as_the_dag_is_parsed(
    setting: dict[str, Any], message: str
) -> None:
    from airflow.sdk import DAG

    with DAG("parse_check", schedule=None), pytest.raises(ConfigurationError) as refused:
        budgeted_tuning(
            study_name="s1",
            trainer=QuadraticTrainer,
            search_space=SPACE,
            min_resource=2,
            max_resource=16,
            max_usd="5",
            max_trials=4,
            **setting,
        )
    assert message in str(refused.value)
    if "give a whole number" in message:  # not a number at all: "fewer than 1" would be untrue
        assert "fewer than" not in str(refused.value)


@pytest.mark.parametrize(
    ("setting", "retries", "most_at_once"),
    [
        # Airflow itself takes these (it converts them): they built before the check and must build still.
        ({"trial_retries": None}, 0, None),
        ({"trial_retries": "2"}, 2, None),
        ({"trial_retries": np.int64(2)}, 2, None),
        ({"max_active_trials": "2"}, 1, 2),
        ({"max_active_trials": np.int64(2)}, 1, 2),
        ({"trial_retries": 2.0}, 2, None),  # Airflow's retries take int(2.0)
    ],
)
def test_trial_concurrency_airflow_takes_is_converted_not_refused(
    setting: dict[str, Any], retries: int, most_at_once: int | None
) -> None:
    from airflow.sdk import DAG

    with DAG("parse_ok", schedule=None) as dag:
        budgeted_tuning(
            study_name="s1",
            trainer=QuadraticTrainer,
            search_space=SPACE,
            min_resource=2,
            max_resource=16,
            max_usd="5",
            max_trials=4,
            **setting,
        )
    trial = dag.get_task("tuning.trial")
    assert trial.partial_kwargs["retries"] == retries
    assert type(trial.partial_kwargs["retries"]) is int
    assert trial.partial_kwargs.get("max_active_tis_per_dagrun") == most_at_once


def test_on_exceeded_other_than_fail_or_skip_is_refused_as_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match=r"on_exceeded='wait': use 'fail' .* or 'skip'"):
        TuningStudySummarizeOperator(task_id="s", study_name="s1", trial_task_id="t", on_exceeded="wait")


def test_a_study_stopped_for_its_budget_goes_on_once_a_later_run_raises_max_usd(env: Ledger) -> None:
    plan = _plan(max_usd="0.04", fallback_trial_seconds=60)
    plan.execute({"ti": _ti(plan)})
    with pytest.raises(AirflowSkipException, match=r"stopped \(budget\)"):
        _run_slot(0)
    raised = _plan(max_usd="5", fallback_trial_seconds=60)
    assert raised.execute({"ti": _ti(raised)}) == [0, 1, 2, 3, 4, 5]  # no trial started yet
    assert _run_slot(0)["state"] in ("promoted", "pruned")  # the old stop no longer holds it


def test_a_continued_study_numbers_its_slots_on_and_proposes_new_parameters(env: Ledger) -> None:
    # A slot's number seeds its sampler: numbered from 0 again, the second run proposed the first's.
    first = _plan(max_trials=2, fallback_trial_seconds=60)
    assert first.execute({"ti": _ti(first)}) == [0, 1]
    for slot in (0, 1):
        _run_slot(slot)
    more = _plan(max_trials=4, fallback_trial_seconds=60)
    assert more.execute({"ti": _ti(more)}) == [2, 3]
    for slot in (2, 3):
        _run_slot(slot)
    study = optuna.load_study(study_name="s1", storage=env.engine.url.render_as_string(hide_password=False))
    proposed = [t.params["lr"] for t in sorted(study.get_trials(), key=lambda t: t.number)]
    assert len(proposed) == 4 and len(set(proposed)) == 4


def test_trainer_errors_fail_the_trial_and_are_retried_by_airflow(env: Ledger) -> None:
    # The trial is billed by the wall clock: the 5 s first estimate of the other tests let a heavily loaded
    # machine cut it before step 4 (no error raised). A minute keeps the failure, not the load, under test.
    plan = _plan(fallback_trial_seconds=60)
    plan.execute({"ti": _ti(plan)})
    with pytest.raises(RuntimeError, match="diverged at step 4"):
        _run_slot(0, trainer_kwargs={"fail_at": 4})
    study = optuna.load_study(study_name="s1", storage=env.engine.url.render_as_string(hide_password=False))
    (trial,) = study.get_trials()
    assert trial.state == optuna.trial.TrialState.FAIL
    assert trial.user_attrs["costaware"]["decision"] == "failed: RuntimeError: diverged at step 4"
    (row,) = env.entries(dag_id=DAG_ID)
    assert (row["trial"], row["outcome"], row["tags"]["trial_state"]) == ("#0 failed@4", "failed", "failed")
    assert env.open_reservations() == []


@pytest.mark.parametrize(
    ("trial_states", "message"),
    [
        # A trainer that cannot import fails every trial task before it asks Optuna for a trial: without this
        # the run would end green, the summary saying only "no trial ran".
        # Their worker time is billed to the DAG, not the study: "they spent $0" disagreed with the ledger.
        (
            ["failed", "failed"],
            r"no trial finished and 2 trial task\(s\) failed: .*the study's budget was charged \$0 for "
            r"trials, and the failed tries' worker time is in the ledger under task 'trial' \(`costaware "
            r"report --group-by task`\)",
        ),
        # Every slot skipped by a stop rule before any trial (a budget too small for one): nothing to show.
        (["skipped"], r"no trial ran, and the study has none: no stop rule fired"),
        (["success", "skipped"], None),  # the summary stands (here with nothing that finished)
    ],
)
def test_a_study_whose_trial_tasks_all_failed_fails_its_summary(
    env: Ledger, trial_states: list[str], message: str | None
) -> None:
    plan = _plan()
    plan.execute({"ti": _ti(plan)})
    summary_op = TuningStudySummarizeOperator(task_id="summarize", study_name="s1", trial_task_id="trial")
    ti = _ti(summary_op)
    ti.get_task_states = lambda **_: {RUN_ID: {f"trial_{i}": s for i, s in enumerate(trial_states)}}
    if message:
        with pytest.raises(AirflowFailException, match=message):
            summary_op.execute({"ti": ti})
    else:
        assert summary_op.execute({"ti": ti})["best"] is None


def test_a_run_whose_plan_failed_fails_its_summary_even_when_earlier_runs_left_a_best(env: Ledger) -> None:
    # A study name used again: its earlier runs' summary made a run whose plan failed end green.
    plan = _plan()
    plan.execute({"ti": _ti(plan)})
    _run_slot(0)
    summary_op = TuningStudySummarizeOperator(task_id="summarize", study_name="s1", trial_task_id="trial")
    ti = _ti(summary_op)
    ti.get_task_states = lambda **_: {RUN_ID: {"trial": "upstream_failed"}}
    with pytest.raises(
        AirflowFailException, match="the plan task failed or did not run, so this run ran no trial"
    ):
        summary_op.execute({"ti": ti})


def test_a_run_whose_plan_did_not_run_names_the_task_that_failed_first(env: Ledger) -> None:
    # `plan` only failed for an upstream task's failure (upstream_failed), its log empty: the summary's
    # "see its log" sent people to a task that said nothing.
    from airflow.providers.standard.operators.empty import EmptyOperator

    plan = _plan()
    plan.execute({"ti": _ti(plan)})
    with DAG(DAG_ID, schedule=None) as dag:
        summary_op = TuningStudySummarizeOperator(task_id="summarize", study_name="s1", trial_task_id="trial")
        EmptyOperator(task_id="prepare") >> EmptyOperator(task_id="plan") >> EmptyOperator(task_id="trial")
        dag.get_task("trial") >> summary_op
    ti = _ti(summary_op)
    ti.get_task_states = lambda **_: {RUN_ID: {"trial": "upstream_failed"}}
    ti.get_task_breadcrumbs = lambda **_: [
        {"task_id": "prepare", "map_index": -1, "state": "failed"},
        {"task_id": "plan", "map_index": -1, "state": "upstream_failed"},
    ]
    with pytest.raises(
        AirflowFailException, match=r"ran no trial: see the log of 'prepare', the first to fail"
    ):
        summary_op.execute({"ti": ti})


def test_a_killed_trial_is_resumed_by_its_retry_or_failed_when_its_lease_expires(env: Ledger) -> None:
    plan = _plan()
    plan.execute({"ti": _ti(plan)})
    with pytest.raises(Interrupted):
        _run_slot(0, trainer=KilledTrainer)
    url = env.engine.url.render_as_string(hide_password=False)
    study = optuna.load_study(study_name="s1", storage=url)
    (left,) = study.get_trials()
    assert left.state == optuna.trial.TrialState.RUNNING  # killed, not failed: the retry may resume it

    resumed = _run_slot(0, try_number=2)  # Airflow retries the same task instance (same holder)
    # Its parameters, trained from the first rung as a new trial: the killed try's rungs stay with the old.
    assert resumed["number"] != left.number and resumed["resumed"] is True
    assert resumed["params"] == left.params
    retried = optuna.load_study(study_name="s1", storage=url).trials[left.number]
    assert retried.state == optuna.trial.TrialState.FAIL
    assert retried.user_attrs["costaware"]["decision"].startswith("failed: its task was retried: trial #")

    with pytest.raises(Interrupted):
        _run_slot(1, trainer=KilledTrainer)  # killed, and no retry comes
    orphan = next(t for t in study.get_trials() if t.state == optuna.trial.TrialState.RUNNING)
    past = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    info = {**orphan.user_attrs["costaware"], "lease_until": past}
    study._storage.set_trial_user_attr(orphan._trial_id, "costaware", info)  # its lease ran out
    fresh = _run_slot(2)
    assert fresh["number"] != orphan.number
    after = optuna.load_study(study_name="s1", storage=url).trials[orphan.number]
    assert after.state == optuna.trial.TrialState.FAIL
    assert after.user_attrs["costaware"]["decision"] == "failed: its lease expired (the worker was killed)"


def test_a_retry_after_the_tasks_retry_delay_is_paid_from_the_hold_its_failed_try_left(
    env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hold lasted 2 x the estimate (at least 60 s), Airflow's retry came 5 minutes later: the hold had
    # expired, and the retry reserved the whole estimate again (stopping the study where the budget had
    # room only for what was left of it).
    from costaware.core.ledger import utcnow
    from costaware.training.tuning import reservations as trial_reservations
    from costaware.training.tuning import study as study_module
    from costaware.training.tuning import trial as trial_module
    from costaware.training.tuning import trial_reservation, trial_steps

    plan = _plan(fallback_trial_seconds=60)
    plan.execute({"ti": _ti(plan)})
    delay = timedelta(minutes=5)  # Airflow's default retry_delay
    first_try = BudgetedTuningOperator(
        task_id="trial", study_name="s1", trainer=QuadraticTrainer, trainer_kwargs={"fail_at": 4},
        retries=1, retry_delay=delay,
    )  # fmt: skip
    ti = _ti(first_try, map_index=0)
    ti.state = "up_for_retry"  # as Airflow sets it before the listener hears of the failure
    listener.cost_listener.on_task_instance_running(None, ti)
    with pytest.raises(RuntimeError, match="diverged at step 4"):
        first_try.execute({"ti": ti})
    listener.cost_listener.on_task_instance_failed(None, ti, RuntimeError("diverged at step 4"))
    (held,) = env.open_reservations()  # left open for the retry, paid in part

    retried_at = utcnow() + delay + timedelta(seconds=1)
    # Every module of the trial that reads the clock (trial_steps' wall-clock cap, trial_reservation's stop
    # record: split out of trial.py, they read the real clock); patched strictly, a module that no longer
    # imports utcnow fails here rather than leaving its read unfrozen.
    clocks = (*hold_clock_modules(), trial_reservations, study_module, trial_module, trial_steps)
    for module in (*clocks, trial_reservation):
        monkeypatch.setattr(module, "utcnow", lambda: retried_at)
    retry = BudgetedTuningOperator(
        task_id="trial", study_name="s1", trainer=QuadraticTrainer, retries=1, retry_delay=delay
    )
    listener.cost_listener.on_task_instance_running(None, _ti(retry, map_index=0, try_number=2))
    retry.execute({"ti": _ti(retry, map_index=0, try_number=2)})
    (kept,) = env.open_reservations()  # still open at the retry's start, until the listener settles it
    assert kept.id == held.id
    assert kept.expires_at >= retried_at + timedelta(seconds=60)  # the retry's own lease, from now
    listener.cost_listener.on_task_instance_success(None, _ti(retry, map_index=0, try_number=2))
    assert {row["reservation_id"] for row in env.entries(dag_id=DAG_ID)} == {held.id}


def test_a_trials_hold_is_kept_for_as_long_as_airflow_waits_to_retry_its_task() -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator

    from costaware.operators.tuning import MAX_KEEP_FOR_RETRY_SECONDS, retry_wait_seconds

    def task(**kwargs: Any) -> Any:
        return EmptyOperator(task_id="trial", **kwargs)

    assert retry_wait_seconds(task(), 1, 0) == 0  # no retries: nothing waits for the hold
    five_minutes = task(retries=2)  # Airflow's default retry_delay
    assert [retry_wait_seconds(five_minutes, n, 2) for n in (1, 2, 3)] == [300, 300, 0]
    assert retry_wait_seconds(task(retries=1, retry_delay=45), 1, 1) == 45  # seconds, as Airflow takes them
    # Exponential backoff waits up to twice delay x multiplier ** (try - 1), at most max_retry_delay.
    backoff = task(retries=3, retry_delay=timedelta(seconds=60), retry_exponential_backoff=2.0)
    assert [retry_wait_seconds(backoff, n, 3) for n in (1, 2, 3)] == [120, 240, 480]
    capped = task(retries=3, retry_delay=60, retry_exponential_backoff=2.0, max_retry_delay=200)
    assert retry_wait_seconds(capped, 3, 3) == 200
    # A dead trial's hold never blocks the study's budget for hours: a later retry reserves anew.
    assert (
        retry_wait_seconds(task(retries=1, retry_delay=timedelta(hours=6)), 1, 1)
        == MAX_KEEP_FOR_RETRY_SECONDS
    )


def test_a_cleared_trials_try_with_a_retry_left_keeps_its_hold_for_the_retry_delay(env: Ledger) -> None:
    # After tries 1 and 2 of a task with retries=1 failed, a clear sets the task instance's max_tries to
    # 2 + 1 = 3: try 3 has a retry left (Airflow retries it), but its hold was kept as if it had none
    # (try 3 > retries), expired at 60 s, and the retry reserved the whole estimate anew.
    from costaware.operators.tuning import retry_wait_seconds

    plan = _plan()
    plan.execute({"ti": _ti(plan)})
    cleared = BudgetedTuningOperator(task_id="trial", study_name="s1", trainer=QuadraticTrainer, retries=1)
    cleared.execute({"ti": _ti(cleared, map_index=0, try_number=3, max_tries=3)})
    (held,) = env.open_reservations()  # the listener would settle it; here it is as the try left it
    assert held.expires_at - held.created_at >= timedelta(seconds=60 + 300)  # lease + the 5 min delay
    # Try 4 is the last: nothing is kept for it.
    assert [retry_wait_seconds(cleared, n, 3) for n in (3, 4)] == [300, 0]


def test_summary_fails_trials_of_this_run_left_running(env: Ledger) -> None:
    plan = _plan()
    plan.execute({"ti": _ti(plan)})
    with pytest.raises(Interrupted):
        _run_slot(3, trainer=KilledTrainer)
    summary_op = TuningStudySummarizeOperator(task_id="summarize", study_name="s1", trial_task_id="trial")
    # No trial has a value: nothing to promote, so the run fails (it ended green before).
    with pytest.raises(AirflowFailException, match="1 trial\\(s\\) ran and none was trained in full"):
        summary_op.execute({"ti": _ti(summary_op)})
    summary = summarize_study(env.engine.url.render_as_string(hide_password=False), env, "s1")
    assert summary["states"] == {"failed": 1} and summary["best"] is None
    url = env.engine.url.render_as_string(hide_password=False)
    assert not optuna.load_study(study_name="s1", storage=url).get_trials(
        states=(optuna.trial.TrialState.RUNNING,)
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"search_space": {"lr": {"type": "float", "low": 1, "high": 0}}}, r"'lr' has an empty range"),
        ({"max_usd": "0"}, r"max_usd must be more than \$0, got '0'"),
        ({"max_usd": "-5"}, r"max_usd must be more than \$0, got '-5'"),
        # Stored as $0 by the ledger: the plan wrote the study, then failed setting its budget.
        ({"max_usd": "0.0000005"}, r"max_usd '0.0000005' is below the ledger's smallest amount, \$0.000001"),
        ({"max_trials": "many"}, "max_trials must be a whole number >= 1, got 'many'"),
        (
            {"min_resource": 20},
            "need 1 <= min_resource <= max_resource, got min_resource=20, max_resource=16",
        ),
        ({"instance_type": "m5.lrage", "usd_per_hour": None}, "unknown instance type 'm5.lrage'"),
        ({"scope": "project"}, "scope must be a mapping or a JSON object"),
        ({"fallback_trial_seconds": "ten"}, "fallback_trial_seconds must be a number > 0, got 'ten'"),
        ({"seed": "abc"}, "seed must be a whole number, got 'abc'"),
        # The study was written, and then its budget refused: nothing is written now.
        ({"scope": {"project": "flight delays, q1"}}, "has value 'flight delays, q1': it must be"),
        # A trial's own tag took its entries out of the budget's scope: the cap never bound.
        ({"scope": {"project": "p", "trial_state": "x"}}, "scope names 'trial_state', which the study's own"),
        # Airflow failed the plan's XCom of 1,100 slots after the study and its budget were made.
        ({"max_trials": "1100"}, r"max_trials=1100 leaves 1100 trial slots to map .*max_map_length=1024"),
    ],
)
def test_bad_study_settings_fail_without_writing(env: Ledger, kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    # As a template renders them: set on the operator after the DAG was parsed (written out, they fail
    # at parse: below).
    plan = _plan()
    for name, value in kwargs.items():
        setattr(plan, name, value)
    with pytest.raises(AirflowFailException, match=message):
        plan.execute({"ti": _ti(plan)})
    assert env.budgets() == []
    url = env.engine.url.render_as_string(hide_password=False)
    assert optuna.get_all_study_names(storage=url) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pruner": "median"}, "pruner must be one of successive_halving, hyperband, none, got 'median'"),
        ({"pruner": "hyperbnd"}, "pruner must be one of successive_halving, hyperband, none, got 'hyperbnd'"),
        ({"sampler": "TPE"}, "sampler must be one of tpe, random, got 'TPE'"),
        ({"direction": "max"}, "direction must be one of maximize, minimize, got 'max'"),
        ({"search_space": {"lr": {"type": "float", "low": 1, "high": 0}}}, r"'lr' has an empty range"),
        ({"max_usd": "-5"}, r"max_usd must be more than \$0, got '-5'"),
        ({"max_trials": "many"}, "max_trials must be a whole number >= 1, got 'many'"),
        ({"min_resource": 20}, "need 1 <= min_resource <= max_resource"),
        ({"scope": "project"}, "scope must be a mapping or a JSON object"),
        ({"scope": {"project": "flight delays, q1"}}, "has value 'flight delays, q1': it must be"),
        ({"scope": {"study": "mine"}}, "scope names 'study', which the study's own ledger entries use"),
        # A spend gate's way of writing a scope was refused with no word of the form that is taken.
        (
            {"scope": "project=churn, team=ml"},
            r"write it as a dict, scope=\{'project': 'churn', 'team': 'ml'\}",
        ),
        ({"scope": "project"}, "got 'project': give a dict, or a template that renders a JSON object"),
        # Only a scope is written key=value: the search space was told a dict of strings, refused in turn.
        (
            {"search_space": "lr=0.1"},
            r"got 'lr=0\.1': give a dict, or a template that renders a JSON object$",
        ),
        # The dict given as the hint kept the last value of the two without a word.
        (
            {"scope": "project=a, project=b"},
            r"it gives 'project' more than once \('a', 'b'\), and a scope holds one value per tag name; "
            "write it as a dict with the one meant$",
        ),
        # Both were refused only when the plan task ran.
        ({"safety_factor": 0.5}, r"safety_factor must be >= 1 \(estimates are multiplied by it"),
        ({"fallback_trial_seconds": -5}, "fallback_trial_seconds must be"),
        # The compute was refused only by the plan task, after the tasks before it had run.
        ({"market": "spto"}, "unknown market 'spto': use one of spot, on_demand, local"),
        ({"instance_type": "m5.larg"}, r"unknown instance type 'm5.larg'; did you mean m5.large"),
        ({"region": "us-east1", "usd_per_hour": None}, r"unknown region 'us-east1'; did you mean us-east-1"),
        ({"usd_per_hour": "abc"}, "usd_per_hour must be a number of USD such as '4.20', got 'abc'"),
    ],
)
def test_settings_that_are_not_templated_fail_when_the_dag_is_parsed(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _plan(**kwargs)


def test_a_templated_compute_is_checked_by_the_plan_not_at_parse() -> None:
    plan = _plan(instance_type="{{ ti.xcom_pull(task_ids='right_size')['instance_type'] }}")
    assert plan.instance_type.startswith("{{")


@pytest.mark.parametrize(
    ("trainer", "message"),
    [
        ("boosting", r"trainer must be 'package\.module:name', got 'boosting'"),
        # Passed the form check and failed only where a trial ran.
        ("pkg.mod:fn ", r"trainer must be 'package\.module:name', got 'pkg\.mod:fn '"),
        ("pkg/mod.py:fn", r"trainer must be 'package\.module:name', got 'pkg/mod\.py:fn'"),
        (42, r"trainer must be a callable or 'package\.module:name', got 42"),
    ],
)
def test_a_trainer_that_can_never_import_fails_when_the_dag_is_parsed(trainer: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        BudgetedTuningOperator(task_id="trial", study_name="s1", trainer=trainer)
    # The task group maps the trials with partial(), which builds no operator at parse: it checks too.
    with DAG("parse_check", schedule=None), pytest.raises(ConfigurationError, match=message):
        budgeted_tuning(
            study_name="s1",
            trainer=trainer,
            search_space=SPACE,
            min_resource=2,
            max_resource=16,
            max_usd="5",
            max_trials=4,
        )


def test_trials_of_a_missing_study_fail_with_a_hint(env: Ledger) -> None:
    with pytest.raises(
        AirflowFailException,
        match=r"no tuning study named 's1' in the study storage: the plan task \(TuningStudyCreateOperator\) "
        "creates it, so it has not run or it failed",
    ):
        _run_slot(0)


def test_trainers_resolve_from_module_attr_paths() -> None:
    from costaware.training.tuning import boosting_trainer

    assert resolve_trial_trainer("costaware.training.tuning:boosting_trainer") is boosting_trainer
    assert resolve_trial_trainer(QuadraticTrainer) is QuadraticTrainer
    with pytest.warns(DeprecationWarning, match=r"write 'costaware\.training\.tuning:boosting_trainer'"):
        assert resolve_trial_trainer("costaware.training.tuning.boosting_trainer") is boosting_trainer
    with pytest.raises(ConfigurationError, match=r"trainer must be 'package\.module:name', got 'boosting'"):
        resolve_trial_trainer("boosting")
    with pytest.raises(ConfigurationError, match=r"cannot import trainer 'costaware\.nothing:f'"):
        resolve_trial_trainer("costaware.nothing:f")


def test_task_group_wires_plan_trials_and_summary() -> None:
    from airflow.sdk import DAG

    with DAG("g", schedule=None):
        group = budgeted_tuning(
            group_id="tune",
            study_name="s",
            trainer=QuadraticTrainer,
            search_space=SPACE,
            min_resource=1,
            max_resource=4,
            max_usd="1",
            max_trials=3,
            max_active_trials=2,
        )
    tasks = {t.task_id: t for t in group.children.values()}
    assert set(tasks) == {"tune.plan", "tune.trial", "tune.summarize"}
    assert tasks["tune.trial"].upstream_task_ids == {"tune.plan"}
    assert tasks["tune.summarize"].upstream_task_ids == {"tune.trial"}
    assert tasks["tune.summarize"].trigger_rule == "all_done"
    assert tasks["tune.summarize"].trial_task_id == "tune.trial"


@pytest.mark.parametrize("prefix_group_id", [True, False])
def test_a_study_group_inside_another_group_summarizes_its_own_trials(prefix_group_id: bool) -> None:
    # Nested in TaskGroup("ml"), the summary looked for "tuning.trial": it found none of the trials of
    # "ml.tuning.trial", failed none left running, and a run whose every trial failed ended green.
    from airflow.sdk import DAG, TaskGroup

    with DAG("g", schedule=None), TaskGroup("ml", prefix_group_id=prefix_group_id):
        group = budgeted_tuning(
            study_name="s",
            trainer=QuadraticTrainer,
            search_space=SPACE,
            min_resource=1,
            max_resource=4,
            max_usd="1",
            max_trials=3,
        )
    tasks = {t.task_id.rpartition(".")[2]: t for t in group.children.values()}
    trial_id = tasks["trial"].task_id
    assert trial_id == ("ml.tuning.trial" if prefix_group_id else "tuning.trial")
    assert tasks["summarize"].trial_task_id == trial_id


def test_a_nested_study_groups_summary_fails_its_trials_left_running(env: Ledger) -> None:
    from airflow.sdk import DAG, TaskGroup

    with DAG("g", schedule=None), TaskGroup("ml"):
        group = budgeted_tuning(
            study_name="s1",
            trainer=QuadraticTrainer,
            search_space=SPACE,
            min_resource=2,
            max_resource=16,
            max_usd="5",
            max_trials=6,
        )
    summary_op = next(t for t in group.children.values() if t.task_id.endswith(".summarize"))
    plan = _plan()
    plan.execute({"ti": _ti(plan)})
    killed = BudgetedTuningOperator(task_id="ml.tuning.trial", study_name="s1", trainer=KilledTrainer, slot=0)
    with pytest.raises(Interrupted):
        killed.execute({"ti": _ti(killed, map_index=0)})
    with pytest.raises(AirflowFailException, match="1 trial\\(s\\) ran and none was trained in full"):
        summary_op.execute({"ti": _ti(summary_op)})
    url = env.engine.url.render_as_string(hide_password=False)
    (trial,) = optuna.load_study(study_name="s1", storage=url).get_trials()
    assert trial.state == optuna.trial.TrialState.FAIL  # left RUNNING before: its holder was not matched


def test_hyperband_and_no_pruning_run_the_same_way(env: Ledger) -> None:
    for pruner, name in (("hyperband", "hb"), ("none", "np")):
        # Slack for the bookkeeping: without it a trial's reservation buys ~1.5 s of training, and one slow
        # storage write on a loaded machine cut a trial the "none" arm expects trained in full.
        plan = _plan(study_name=name, pruner=pruner, max_trials=4, slack_seconds=60)
        plan.execute({"ti": _ti(plan)})
        results = [_run_slot(slot, study_name=name) for slot in range(4)]
        assert all(r["fidelity"] == 16 for r in results if r["state"] == "promoted")
        if pruner == "none":
            assert {r["state"] for r in results} == {"promoted"}  # every trial trains in full
    assert env.open_reservations() == []


@pytest.mark.parametrize(
    ("stop", "best", "states", "expected"),
    [
        ({"message": "budget: $1.00 of $1.00 spent"}, None, {"pruned": 2}, "budget: $1.00 of $1.00 spent"),
        (None, None, {"failed": 4}, "no trial finished (4 of 4 trials ran, none with a value)"),
        (None, {"number": 0}, {"complete": 4}, "max_trials reached (4 trials ran, max_trials 4)"),
        (None, {"number": 0}, {"complete": 2}, "no stop rule fired"),
        # Failed trials do not count against max_trials: two slots are left.
        (None, {"number": 0}, {"complete": 2, "failed": 2}, "no stop rule fired"),
    ],
)
def test_the_summary_line_says_why_the_study_stopped(
    stop: Any, best: Any, states: dict[str, int], expected: str
) -> None:
    # A study whose every trial failed once read "max_trials reached", as if it had finished its search.
    summary = {"stop": stop, "best": best, "max_trials": 4, "states": states}
    assert TuningStudySummarizeOperator._stop_text(summary, sum(states.values())) == expected


def test_a_gpu_hour_cap_on_an_instance_without_gpus_is_warned_about(
    env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(max_gpu_hours="5")  # m5.large: no GPU, so the cap never binds
    capsys.readouterr()
    plan.execute({"ti": _ti(plan)})
    out = capsys.readouterr()
    assert "max_gpu_hours=5.0 binds nothing: m5.large has no GPU" in " ".join((out.out + out.err).split())


def test_the_time_the_try_spent_before_the_trial_is_in_its_reservation(env: Ledger) -> None:
    # A slow study store or a slow task start: the try began 30 s before execute reached the trial, the
    # listener bills the whole try, and the reservation held only the trial's 5 + 2 s, so a study with room
    # for one reservation ($0.07 of $0.08) spent $0.37.
    plan = _plan(max_usd="0.08", fallback_trial_seconds=5)
    plan.execute({"ti": _ti(plan)})
    op = BudgetedTuningOperator(task_id="trial", study_name="s1", trainer=QuadraticTrainer, slot=0)
    ti = _ti(op, map_index=0)
    ti.start_date = datetime.now(timezone.utc) - timedelta(seconds=30)
    listener.cost_listener.on_task_instance_running(None, ti)
    listener._STARTS[listener._key(ti)] -= 30  # the listener's own measure of the try, begun as Airflow's
    with pytest.raises(AirflowSkipException, match=r"stopped \(budget\)"):
        op.execute({"ti": ti})
    listener.cost_listener.on_task_instance_skipped(None, ti)
    assert env.open_reservations() == []
    study = optuna.load_study(study_name="s1", storage=env.engine.url.render_as_string(hide_password=False))
    assert study.get_trials() == []  # no trial was started on money the study did not have


def test_a_run_whose_study_was_never_made_names_the_task_that_failed_first(env: Ledger) -> None:
    # A study named after its run ('s-manual__1'), its plan upstream_failed after prepare failed: the summary
    # said only "no tuning study named ... the plan task has not run or it failed (its log says why)", and
    # the plan's log is empty.
    from airflow.providers.standard.operators.empty import EmptyOperator

    with DAG(DAG_ID, schedule=None) as dag:
        summary_op = TuningStudySummarizeOperator(
            task_id="summarize", study_name="s-manual__1", trial_task_id="trial"
        )
        EmptyOperator(task_id="prepare") >> EmptyOperator(task_id="plan") >> EmptyOperator(task_id="trial")
        dag.get_task("trial") >> summary_op
    ti = _ti(summary_op)
    ti.get_task_states = lambda **_: {RUN_ID: {"trial": "upstream_failed"}}
    ti.get_task_breadcrumbs = lambda **_: [
        {"task_id": "prepare", "map_index": -1, "state": "failed"},
        {"task_id": "plan", "map_index": -1, "state": "upstream_failed"},
    ]
    with pytest.raises(AirflowFailException) as failed:
        summary_op.execute({"ti": ti})
    said = str(failed.value)
    assert "study s-manual__1: the plan task failed or did not run, so this run made no study" in said
    assert "see the log of 'prepare', the first to fail" in said
    assert "has not run or it failed" not in said


def _slot_in_tagged_dag(slot: int = 0, **kwargs: Any) -> tuple[BudgetedTuningOperator, SimpleNamespace]:
    """A trial task of a DAG tagged ``project:churn``: a refused slot's try is billed to those tags."""
    with DAG(DAG_ID, schedule=None, tags=["project:churn"]):
        op = BudgetedTuningOperator(
            task_id="trial", study_name="s1", trainer=QuadraticTrainer, slot=slot, **kwargs
        )
    return op, _ti(op, map_index=slot)


def _slow_study_store(monkeypatch: pytest.MonkeyPatch, ti: Any, seconds: float) -> None:
    """Loading the study takes ``seconds`` more of the try, as a far study store does (no sleep)."""
    import costaware.training.tuning as tuning

    real = tuning.load_study

    def slow(*args: Any, **kwargs: Any) -> Any:
        listener._STARTS[listener._key(ti)] -= seconds  # the listener's measure of the try grows by it
        return real(*args, **kwargs)

    monkeypatch.setattr(tuning, "load_study", slow)


def _spent_and_holds(env: Ledger, label: str) -> tuple[Decimal, Decimal]:
    (usage,) = [u for u in env.usage("project=churn") if u.label == label]
    return usage.spent_usd, usage.reserved_usd


def test_a_refused_slots_slow_study_load_is_held_before_it_runs(
    env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slot's 600 s of loading the study, at the worker's $0.096/h, is $0.016: before any reservation.
    # Refused by the study's budget ($0.07 for a trial of $0.04), the try was billed to the DAG's tags,
    # and the project's budget of $0.02 (spent $0.01) was charged it with nothing held: $0.026 of $0.02.
    env.set_budget("project=churn", "total", "0.02")
    env.record(
        LedgerEntry(
            dag_id="other",
            run_id="r",
            task_id="t",
            kind=Kind.STORAGE,
            usd=Decimal("0.01"),
            tags={"project": "churn"},
        )
    )
    plan = _plan(max_usd="0.04", fallback_trial_seconds=5)
    plan.execute({"ti": _ti(plan)})
    op, ti = _slot_in_tagged_dag(study_load_seconds=600)
    listener.cost_listener.on_task_instance_running(None, ti)
    _slow_study_store(monkeypatch, ti, 600)
    with pytest.raises(AirflowSkipException) as skipped:
        op.execute({"ti": ti})
    listener.cost_listener.on_task_instance_skipped(None, ti)
    spent, held = _spent_and_holds(env, "project=churn/total")
    assert spent <= Decimal("0.02") and held == 0
    said = str(skipped.value)
    assert "slot 0 runs no trial, its time before the trial's reservation cannot be held: budget " in said
    assert "'project=churn/total (total)' has $0.01 left" in said and "study_load_seconds=600" in said
    assert said.endswith(
        "needs an estimated $0.016: raise the cap with `costaware budget set`, or lower study_load_seconds "
        "if the study loads faster"
    )


def test_a_refused_slots_study_load_is_paid_from_the_hold_taken_before_it(
    env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.set_budget("project=churn", "total", "0.05")
    plan = _plan(max_usd="0.04", fallback_trial_seconds=5)  # a trial needs $0.07: refused by the study
    plan.execute({"ti": _ti(plan)})
    op, ti = _slot_in_tagged_dag(study_load_seconds=600)
    listener.cost_listener.on_task_instance_running(None, ti)
    _slow_study_store(monkeypatch, ti, 600)
    with pytest.raises(AirflowSkipException, match=r"stopped \(budget\)"):
        op.execute({"ti": ti})
    listener.cost_listener.on_task_instance_skipped(None, ti)
    assert env.open_reservations() == []
    (entry,) = [e for e in env.entries() if e["task_id"] == "trial"]
    usd = Decimal(str(entry["usd"]))
    assert usd >= Decimal("0.016") and entry["reservation_id"] is not None  # paid from the slot's hold
    spent, held = _spent_and_holds(env, "project=churn/total")
    assert spent == usd <= Decimal("0.05") and held == 0


def _wait_on_a_fake_clock(monkeypatch: pytest.MonkeyPatch, ti: Any) -> list[float]:
    """A slot's wait for money moves the ledger's clock and the listener's measure of the try (no sleep).

    The slot's clock in its wait runs in real time too, as the listener's measure of the try does: frozen at
    the fake waits, it left out the real seconds of the wait's polls, which the bill counts (on a loaded
    machine they passed the 30 s margin and the try was billed past its hold).
    """
    from costaware.training.tuning import reservations as trial_reservations

    waited = [0.0]
    real_monotonic = time.monotonic
    base = datetime.now(timezone.utc)

    def utcnow() -> datetime:
        return base + timedelta(seconds=waited[0])

    def sleep(seconds: float) -> None:
        waited[0] += seconds
        listener._STARTS[listener._key(ti)] -= seconds

    for module in (*hold_clock_modules(), trial_reservations):
        monkeypatch.setattr(module, "utcnow", utcnow)
    clock = SimpleNamespace(monotonic=lambda: real_monotonic() + waited[0], sleep=sleep)
    monkeypatch.setattr(trial_reservations, "time", clock)
    return waited


def test_a_slots_wait_for_money_is_held_at_the_workers_price_and_stops_where_its_budget_ends(
    env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another trial holds $0.47 of the study's $0.5 (kept 3 h for its retry): slot 0 waits for it. Its hold,
    # 60 s of the worker's $0.096/h, was only extended: the try was billed an hour's wait, $0.0976, on the
    # project's budget of $0.52 where the other trial's $0.47 was held.
    env.set_budget("project=churn", "total", "0.52")
    plan = _plan(max_usd="0.5", fallback_trial_seconds=1)  # a trial needs $0.035
    plan.execute({"ti": _ti(plan)})
    other = env.reserve("project=churn,study=s1", Decimal("0.47"), holder="other/r/trial/1")
    op, ti = _slot_in_tagged_dag(study_load_seconds=60)
    listener.cost_listener.on_task_instance_running(None, ti)
    waited = _wait_on_a_fake_clock(monkeypatch, ti)
    env.extend(other.id, datetime.now(timezone.utc) + timedelta(hours=3))

    with pytest.raises(AirflowSkipException) as skipped:
        op.execute({"ti": ti})
    listener.cost_listener.on_task_instance_skipped(None, ti)

    assert waited[0] > 600  # far past the 60 s its hold was first taken for
    (entry,) = [e for e in env.entries() if e["task_id"] == "trial"]
    hold = env.latest_reservation(reservation_holder(DAG_ID, RUN_ID, "trial", 0))
    assert hold is not None and entry["reservation_id"] == hold.id
    assert Decimal(str(entry["usd"])) <= hold.usd  # the whole wait paid from its hold
    spent, held = _spent_and_holds(env, "project=churn/total")
    assert spent + held <= Decimal("0.52")
    said = str(skipped.value)
    assert "slot 0 stops waiting for the study's money" in said and "'project=churn/total'" in said
    assert "at $0.096000/h" in said and "raise that budget's cap with `costaware budget set`" in said


def test_a_slot_that_stops_waiting_names_only_the_budget_that_is_short_and_that_it_never_renews(
    env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slot's hold is in team=ml ($5, set first) and project=churn ($0.52, the other trial's $0.47 in it).
    # The refusal named both, gave the hold's size as the room of each, and its scope was team=ml/total, the
    # budget with plenty of room; it said a new period might make room in these total budgets.
    from costaware.training.tuning.study import STOP_ATTR

    env.set_budget("team=ml", "total", "5")
    env.set_budget("project=churn", "total", "0.52")
    plan = _plan(max_usd="0.5", fallback_trial_seconds=1)
    plan.execute({"ti": _ti(plan)})
    other = env.reserve("project=churn,study=s1,team=ml", Decimal("0.47"), holder="other/r/trial/1")
    with DAG(DAG_ID, schedule=None, tags=["project:churn", "team:ml"]):
        op = BudgetedTuningOperator(
            task_id="trial", study_name="s1", trainer=QuadraticTrainer, slot=0, study_load_seconds=60
        )
    ti = _ti(op, map_index=0)
    listener.cost_listener.on_task_instance_running(None, ti)
    _wait_on_a_fake_clock(monkeypatch, ti)
    env.extend(other.id, datetime.now(timezone.utc) + timedelta(hours=3))

    with pytest.raises(AirflowSkipException) as skipped:
        op.execute({"ti": ti})

    said = str(skipped.value)
    assert "budget 'project=churn/total' has $0.05 of room (cap $0.52, spent $0.00" in said
    assert "team=ml" not in said and "raise that budget's cap with `costaware budget set`" in said
    study = optuna.load_study(study_name="s1", storage=env.engine.url.render_as_string(hide_password=False))
    stop = study.user_attrs[STOP_ATTR]
    assert stop["reason"] == "budget" and stop["renews"] is False  # a total budget: no new period comes


def test_a_slot_of_a_dag_tagged_with_the_studys_tags_that_stops_waiting_is_told_to_raise_max_usd(
    env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wait is held in the study's own budget, which the plan sets from max_usd each run: it was told to
    # set fallback_trial_seconds (the trial's estimate, not what found no room).
    plan = _plan(max_usd="0.5", fallback_trial_seconds=1)
    plan.execute({"ti": _ti(plan)})
    other = env.reserve("project=churn,study=s1", Decimal("0.47"), holder="other/r/trial/1")
    with DAG(DAG_ID, schedule=None, tags=["project:churn", "study:s1"]):
        op = BudgetedTuningOperator(
            task_id="trial", study_name="s1", trainer=QuadraticTrainer, slot=0, study_load_seconds=60
        )
    ti = _ti(op, map_index=0)
    listener.cost_listener.on_task_instance_running(None, ti)
    _wait_on_a_fake_clock(monkeypatch, ti)
    env.extend(other.id, datetime.now(timezone.utc) + timedelta(hours=3))

    with pytest.raises(AirflowSkipException) as skipped:
        op.execute({"ti": ti})

    said = str(skipped.value)
    assert "slot 0 stops waiting for the study's money" in said
    assert "budget 'project=churn,study=s1/total' has $0.03 of room" in said
    assert "the study's budget is its max_usd ($0.50): raise max_usd and run the DAG again" in said
    assert "fallback_trial_seconds" not in said and "costaware budget set" not in said


def test_a_slot_whose_hold_expired_during_a_slow_study_load_holds_its_wait_again(
    env: Ledger, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The hold counted 600 s (study_load_seconds=5); the study took 700 s to load. Expired, it was neither
    # extended nor grown: the slot stopped the study saying the budgets had room for its $0.000133 "only"
    # (they had $0.025) and its try was billed with no hold.
    env.set_budget("project=churn", "total", "0.495")
    plan = _plan(max_usd="0.5", fallback_trial_seconds=1, usd_per_hour="0.36")  # the trial waits for $0.07
    plan.execute({"ti": _ti(plan)})
    other = env.reserve("project=churn,study=s1", Decimal("0.47"), holder="other/r/trial/1")
    op, ti = _slot_in_tagged_dag(study_load_seconds=5)
    listener.cost_listener.on_task_instance_running(None, ti)
    waited = _wait_on_a_fake_clock(monkeypatch, ti)
    env.extend(other.id, datetime.now(timezone.utc) + timedelta(hours=3))
    import costaware.training.tuning as tuning

    real_load = tuning.load_study

    def load_for_700_seconds(*args: Any, **kwargs: Any) -> Any:
        waited[0] += 700  # the ledger's clock and the listener's measure of the try both move
        listener._STARTS[listener._key(ti)] -= 700
        return real_load(*args, **kwargs)

    monkeypatch.setattr(tuning, "load_study", load_for_700_seconds)
    import costaware.operators.tuning_trial as operator_module  # BudgetedTuningOperator's module

    real_so_far = operator_module.seconds_since_try_began  # the try's clock, read after the load too
    monkeypatch.setattr(operator_module, "seconds_since_try_began", lambda ti: real_so_far(ti) + waited[0])

    with pytest.raises(AirflowSkipException) as skipped:
        op.execute({"ti": ti})
    listener.cost_listener.on_task_instance_skipped(None, ti)

    assert "expired" in caplog.text and "study_load_seconds" in caplog.text
    hold = env.latest_reservation(reservation_holder(DAG_ID, RUN_ID, "trial", 0))
    (entry,) = [e for e in env.entries() if e["task_id"] == "trial"]
    assert hold is not None and entry["reservation_id"] == hold.id  # billed from the hold taken again
    assert Decimal(str(entry["usd"])) <= hold.usd
    spent, held = _spent_and_holds(env, "project=churn/total")
    assert spent + held <= Decimal("0.495")
    # It waited while the budget had room; it stopped only where it had none, not at the expired $0.000133.
    assert waited[0] > 700 and "$0.000133" not in str(skipped.value)


def test_a_slots_hold_that_a_budget_set_since_keeps_from_growing_is_held_again_not_called_short(
    env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A $10 budget over '*' set while the study loaded holds nothing of the slot's hold, so the ledger would
    # not grow it: the slot stopped the study saying project=churn had room for the hold's size only.
    env.set_budget("project=churn", "total", "0.495")
    plan = _plan(max_usd="0.5", fallback_trial_seconds=600, usd_per_hour="0.36")  # the trial waits for $0.06
    plan.execute({"ti": _ti(plan)})
    other = env.reserve("project=churn,study=s1", Decimal("0.47"), holder="other/r/trial/1")
    op, ti = _slot_in_tagged_dag(study_load_seconds=5)
    listener.cost_listener.on_task_instance_running(None, ti)
    _wait_on_a_fake_clock(monkeypatch, ti)
    env.extend(other.id, datetime.now(timezone.utc) + timedelta(hours=3))
    import costaware.training.tuning as tuning

    real_load = tuning.load_study

    def load_beside_a_new_budget(*args: Any, **kwargs: Any) -> Any:
        env.set_budget("*", "total", "10")
        return real_load(*args, **kwargs)

    monkeypatch.setattr(tuning, "load_study", load_beside_a_new_budget)

    with pytest.raises(AirflowSkipException) as skipped:
        op.execute({"ti": ti})
    listener.cost_listener.on_task_instance_skipped(None, ti)

    said = str(skipped.value)
    assert "budget 'project=churn/total' has $0.025 of room" in said  # stopped where it had none left
    (entry,) = [e for e in env.entries() if e["task_id"] == "trial"]
    r = schema.reservations
    with env.reading() as conn:
        holds = dict(conn.execute(select(r.c.id, r.c.status).where(r.c.holder.like(f"{DAG_ID}/%"))).all())
    assert holds[entry["reservation_id"]] == "settled"  # the hold taken again, in '*' too, paid the bill
    assert sorted(holds.values()) == ["replaced", "settled"]
    (usage,) = [u for u in env.usage("project=churn") if u.label == "*/total"]
    assert usage.spent_usd == Decimal(str(entry["usd"]))  # the new budget counts the bill it held


def test_a_granted_trial_takes_the_place_of_the_slots_hold(env: Ledger) -> None:
    env.set_budget("project=churn", "total", "1")
    plan = _plan(max_usd="0.5", fallback_trial_seconds=5)
    plan.execute({"ti": _ti(plan)})
    op, ti = _slot_in_tagged_dag(study_load_seconds=60)
    listener.cost_listener.on_task_instance_running(None, ti)
    op.execute({"ti": ti})
    listener.cost_listener.on_task_instance_success(None, ti)
    assert env.open_reservations() == []
    (entry,) = [e for e in env.entries() if e["task_id"] == "trial"]
    reservation = env.latest_reservation(reservation_holder(DAG_ID, RUN_ID, "trial", 0))
    assert reservation is not None and reservation.status == "settled"
    assert entry["reservation_id"] == reservation.id and "study" in dict(reservation.scope.tags)
    r = schema.reservations
    with env.reading() as conn:
        taken = [tuple(row) for row in conn.execute(select(r.c.scope, r.c.status).order_by(r.c.created_at))]
    assert taken == [("project=churn", "replaced"), (str(reservation.scope), "settled")]  # replaced by it


@pytest.mark.parametrize("seconds", [-1, float("nan"), "60", True, None, 86400.5, 1e12, 1e13, 1e300])
def test_a_study_load_bound_that_is_no_seconds_is_refused_as_the_dag_is_parsed(seconds: Any) -> None:
    # 1e12 s failed each trial task as it ran ("would end after the year 9999"), 1e13 with an OverflowError.
    said = r"study_load_seconds must be a number of seconds from 0 to 86400 \(a day\), got " + re.escape(
        f"{seconds!r}:"
    )
    with pytest.raises(ConfigurationError, match=said):
        BudgetedTuningOperator(
            task_id="trial", study_name="s1", trainer=QuadraticTrainer, study_load_seconds=seconds
        )
    with pytest.raises(ConfigurationError, match="study_load_seconds must be"):
        budgeted_tuning(study_name="s1", trainer=QuadraticTrainer, study_load_seconds=seconds)


def test_the_study_load_bound_is_importable_where_it_was_before_the_arguments_were_split_off() -> None:
    from costaware.operators import tuning, tuning_args

    # Importable from costaware.operators.tuning beside MAX_KEEP_FOR_RETRY_SECONDS, as before tuning_args.
    assert tuning.MAX_STUDY_LOAD_SECONDS == tuning_args.MAX_STUDY_LOAD_SECONDS == 86400


def test_a_trial_task_loads_its_study_once_before_its_trials_reservation(
    env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # study_load_seconds holds one load of the study, but run_trial loaded it again before the reservation:
    # from a far store the slot's time before its reservation ran past its hold by a whole load.
    import costaware.training.tuning.study as study_module
    import costaware.training.tuning.trial as trial_module

    calls: list[str] = []
    real_open, real_reserve = study_module.open_storage, trial_module.reserve_trial_cost

    def counted_open(*args: Any, **kwargs: Any) -> Any:
        calls.append("load")
        return real_open(*args, **kwargs)

    def counted_reserve(*args: Any, **kwargs: Any) -> Any:
        calls.append("reserve")
        return real_reserve(*args, **kwargs)

    monkeypatch.setattr(study_module, "open_storage", counted_open)
    monkeypatch.setattr(trial_module, "reserve_trial_cost", counted_reserve)
    env.set_budget("project=churn", "total", "1")
    plan = _plan(max_usd="0.5", fallback_trial_seconds=5)
    plan.execute({"ti": _ti(plan)})
    calls.clear()
    op, ti = _slot_in_tagged_dag(study_load_seconds=60)
    listener.cost_listener.on_task_instance_running(None, ti)

    trial = op.execute({"ti": ti})

    assert calls[: calls.index("reserve") + 1] == ["load", "reserve"]
    assert trial["state"] in ("promoted", "pruned")


def test_a_study_load_bound_of_a_day_is_taken() -> None:
    op = BudgetedTuningOperator(
        task_id="trial", study_name="s1", trainer=QuadraticTrainer, study_load_seconds=86400
    )
    assert op.study_load_seconds == 86400.0


def test_a_trial_holds_its_cost_in_budgets_over_the_dags_tags_its_bill_counts_in(env: Ledger) -> None:
    # The trial's bill carries the DAG's tags (team:ml) beside the study's; held over the study's scope only,
    # the team's budget of $0.05 was charged the trial's $0.2 (at $1 a second) with nothing held in it.
    env.set_budget("team=ml", "total", "0.05")
    plan = _plan(max_usd="100", usd_per_hour="3600", fallback_trial_seconds=5)  # a trial reserves $7
    plan.execute({"ti": _ti(plan)})
    with DAG(DAG_ID, schedule=None, tags=["team:ml"]):
        op = BudgetedTuningOperator(task_id="trial", study_name="s1", trainer=QuadraticTrainer, slot=0)
    ti = _ti(op, map_index=0)
    listener.cost_listener.on_task_instance_running(None, ti)
    with pytest.raises(AirflowSkipException, match=r"stopped \(budget\): budget 'team=ml/total \(total\)'"):
        op.execute({"ti": ti})
    listener.cost_listener.on_task_instance_skipped(None, ti)
    (usage,) = env.usage("team=ml")
    assert usage.spent_usd <= usage.cap_usd and usage.reserved_usd == 0
    assert env.open_reservations() == []
