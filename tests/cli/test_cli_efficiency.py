"""``costaware report --efficiency`` and ``costaware runs`` against a real SQLite ledger."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costaware import Ledger
from costaware.adapters.ledger.efficiency import record_outcome, record_utilization
from costaware.cli import main
from costaware.core.efficiency import GIB, Measurement
from costaware.core.ledger import Kind, LedgerEntry
from costaware.core.outcomes import ReproRecord, RunOutcome

T0 = datetime(2026, 11, 1, 3, 0, tzinfo=timezone.utc)


def try_of(ledger: Ledger, task: str, run: int, instance: str, cores: float, peak_gib: float) -> None:
    """One hour-long successful try that kept ``cores`` busy and peaked at ``peak_gib``."""
    rate = {"c5.4xlarge": Decimal("0.68"), "c5.xlarge": Decimal("0.17")}[instance]
    entry = LedgerEntry(
        dag_id="nightly",
        run_id=f"run{run}",
        task_id=task,
        kind=Kind.COMPUTE,
        usd=rate,
        instance_type=instance,
        region="us-east-1",
        market="on_demand",
        quantity=Decimal(1),
        incurred_at=T0 + timedelta(days=run),
    )
    ledger.record(entry)
    vcpus, memory = {"c5.4xlarge": (16, 32), "c5.xlarge": (4, 8)}[instance]
    record_utilization(
        ledger,
        entry.entry_uid,
        Measurement(
            "nightly",
            task,
            entry.run_id,
            1,
            None,
            None,
            None,
            Decimal(0),
            3600.0,
            cores * 3600,
            int(peak_gib * GIB),
            vcpus=vcpus,
            memory_gib=Decimal(memory),
            runs_per_month=30.0,
            measured_at=entry.incurred_at,
        ),
    )


@pytest.fixture
def measured(ledger_url: str) -> Ledger:
    ledger = Ledger.from_url(ledger_url)
    for run in range(3):
        try_of(ledger, "train", run, "c5.4xlarge", cores=1.0, peak_gib=1.5)  # deliberately oversized
        try_of(ledger, "features", run, "c5.xlarge", cores=3.6, peak_gib=6.0)  # uses what it has
    return ledger


def test_efficiency_report_flags_the_oversized_task(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--ledger-url", ledger_url, "report", "--efficiency", "--dag-id", "nightly"]) == 0
    out = capsys.readouterr().out
    lines = {
        line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("train", "features"))
    }
    assert lines["train"][1:4] == ["3", "c5.4xlarge", "3600.00"]
    assert lines["train"][5] == "6.2%"  # 1 busy core of 16
    assert lines["features"][5] == "90.0%"
    assert "idle cost: $1.9635 of $2.55" in out  # 3 x 0.68 x 15/16 + 3 x 0.17 x 0.1
    assert (
        "nightly.train: c5.4xlarge -> c6a.large (2 vCPUs, 4 GiB): saves $0.6035 per run, "
        "$18.105/month at 30 runs/month (from the DAG's schedule)" in out
    )
    assert "nightly.features" not in out.split("right-sizing")[1]  # it is right-sized
    # CSV gave "6.2%": text to a spreadsheet. It is the fraction of 1 that JSON gives.
    import csv
    import io

    assert (
        main(["--ledger-url", ledger_url, "report", "--efficiency", "--dag-id", "nightly", "--format", "csv"])
        == 0
    )
    util = {r["task"]: r["CPU util"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert util == {"train": "0.0625", "features": "0.9"}


def test_efficiency_json_and_options(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--ledger-url", ledger_url, "report", "--efficiency", "--format", "json", "--runs-per-month", "4"]
    assert main(args) == 0
    payload = json.loads(capsys.readouterr().out)
    (advice,) = payload["advice"]
    assert (advice["task_id"], advice["suggested_instance_type"]) == ("train", "c6a.large")
    assert advice["monthly_saving_usd"] == "2.414000" and advice["frequency_basis"] == "given"
    assert main([*args, "--min-saving-usd", "5"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["advice"] == [] and payload["advice_under_min_saving"] == 1
    assert main([*args, "--min-tries", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["advice"] == []


def test_efficiency_says_a_misspelt_dag_and_hidden_savings_as_they_are(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--ledger-url", ledger_url, "report", "--efficiency"]
    # An unknown DAG or run is an error, as everywhere (it was exit 0 with a note: "as if nothing ran").
    assert main([*base, "--dag-id", "nightyl"]) == 2
    assert "the ledger has no entries for DAG 'nightyl': check the name" in capsys.readouterr().err
    assert main([*base, "--dag-id", "nightly", "--run-id", "rnu1"]) == 2
    assert "the ledger has no entries for run 'rnu1' of DAG 'nightly': check the run id" in (
        capsys.readouterr().err
    )
    assert main([*base, "--dag-id", "nightyl", "--format", "json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "did you mean 'nightly'?" in err
    assert main([*base, "--dag-id", "nightly", "--since", "2099-01-01"]) == 0  # not "the listener measures"
    out = capsys.readouterr().out
    assert "(no measured tries match --since 2099-01-01T00:00:00+00:00: widen them" in out  # no "--scope *"
    assert main([*base, "--dag-id", "nightly", "--min-saving-usd", "1000"]) == 0
    out = capsys.readouterr().out  # "no cheaper type fits" before: one fits, and saves under the floor
    assert "right-sizing: 1 cheaper type(s) fit, each saving under $1,000.00/month" in out
    assert "no cheaper type fits" not in out
    # "No cheaper type fits" read as a verdict where no task had enough tries to be sized at all.
    assert main([*base, "--dag-id", "nightly", "--min-tries", "10"]) == 0
    out = capsys.readouterr().out
    assert "right-sizing: no task has 10 measured successful tries yet (the most: 3, nightly.train)" in out
    assert "run it more, or lower --min-tries" in out and "no cheaper type fits" not in out
    # 0 runs a month saved $0 on every suggestion and hid them all: refused, with what to give instead.
    assert main([*base, "--dag-id", "nightly", "--runs-per-month", "0"]) == 2
    err = capsys.readouterr().err
    assert "--runs-per-month must be more than 0, got 0: the monthly saving is per run times runs" in err
    assert "leave it out to use each DAG's schedule" in err
    # A margin given as a percentage: "invalid float value: '25%'", or out of range, with no word of the form.
    with pytest.raises(SystemExit):
        main([*base, "--dag-id", "nightly", "--memory-margin", "25%"])
    assert "'25%' is no fraction: give one as a number, e.g. 0.25 for 25%" in capsys.readouterr().err
    assert main([*base, "--dag-id", "nightly", "--memory-margin", "25"]) == 2
    err = capsys.readouterr().err
    assert "--memory-margin must be 0 or more and at most 10, got 25: a fraction of the measured peak" in err


def test_efficiency_takes_the_reports_scope_and_run(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # They were ignored: another team's scope printed every DAG's tasks and advice.
    def tasks(*extra: str) -> dict[str, int]:
        assert main(["--ledger-url", ledger_url, "report", "--efficiency", "--format", "json", *extra]) == 0
        return {row["task_id"]: row["tries"] for row in json.loads(capsys.readouterr().out)["tasks"]}

    assert tasks() == {"train": 3, "features": 3}
    assert tasks("--scope", "project=nosuch") == {}
    assert tasks("--run-id", "run1") == {"train": 1, "features": 1}
    assert tasks("--dag-id", "nightly", "--last-run") == {"train": 1, "features": 1}
    assert main(["--ledger-url", ledger_url, "report", "--efficiency", "--group-by", "dag"]) == 2
    assert "--group-by dag does not apply to --efficiency" in capsys.readouterr().err


def test_the_advice_prices_types_as_refreshed_prices_say(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # As RightSizeOperator decides: a refreshed price of c6a.large above c5.4xlarge's makes it no saving.
    from costaware.adapters.price_source import PriceCache
    from costaware.core.ledger import utcnow
    from costaware.core.price_list import ListPrice

    PriceCache(measured).put(
        [ListPrice("ec2", "c6a.large", "us-east-1", Decimal("5"))],
        origin="aws-price-list",
        fetched_at=utcnow(),
    )
    args = ["--ledger-url", ledger_url, "report", "--efficiency", "--format", "json"]
    assert main(args) == 0
    (advice,) = json.loads(capsys.readouterr().out)["advice"]
    assert advice["suggested_instance_type"] != "c6a.large"


def test_bad_min_saving_is_refused(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--ledger-url", ledger_url, "report", "--efficiency", "--min-saving-usd", "lots"]) == 2
    assert "--min-saving-usd" in capsys.readouterr().err


def test_runs_show_prints_outcome_cost_and_record(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    record = ReproRecord(
        data_fingerprint="ab" * 32, features_key="k" * 32, trainer="sklearn-sgd", seeds={"seed": 0}
    )
    record_outcome(
        measured, RunOutcome("nightly", "run0", "v0", task_id="train", training_rows=900, iterations=5)
    )
    record_outcome(
        measured, RunOutcome("nightly", "run0", "v0", metric="roc_auc", metric_value=0.70, promoted=True)
    )
    record_outcome(
        measured,
        RunOutcome("nightly", "run1", "v1", task_id="train", training_rows=950, iterations=5, record=record),
    )
    record_outcome(
        measured,
        RunOutcome(
            "nightly", "run1", "v1", metric="roc_auc", metric_value=0.72, champion_metric=0.70, promoted=True
        ),
    )
    assert main(["--ledger-url", ledger_url, "runs", "show", "run1"]) == 0
    out = capsys.readouterr().out
    assert "run run1 of DAG nightly: model v1 (task train)" in out
    assert "roc_auc: 0.7200 (champion 0.7000), gain +0.0200 over the previous champion" in out
    assert "promoted: yes" in out and "trained on 950 rows, 5 epochs" in out
    assert "run total: $0.85" in out  # train 0.68 + features 0.17
    # Where the money went, entry by entry: the oldest first, each with its market and note.
    entries = out.split("entries (oldest first: task, kind, market, USD, cause, note)\n")[1].splitlines()
    assert [line.split()[:4] for line in entries[:2]] == [
        ["train", "compute", "on_demand", "$0.68"],
        ["features", "compute", "on_demand", "$0.17"],
    ]
    assert f"data_fingerprint: {'ab' * 32}" in out and 'seeds: {"seed": 0}' in out
    assert main(["--ledger-url", ledger_url, "runs", "list", "--dag-id", "nightly"]) == 0
    out = capsys.readouterr().out
    assert "2 run(s), 2 promoted: $0.85 per run, $0.85 per promoted model" in out
    assert "$85.00 per unit of roc_auc gained" in out  # $1.70 for a 0.02 gain
    assert main(["--ledger-url", ledger_url, "runs", "show", "--last", "--dag-id", "nightly"]) == 0
    assert "run run1 of DAG nightly: model v1" in capsys.readouterr().out  # the newest run


def test_a_run_with_several_models_is_listed_and_priced_once(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A tuning run records a model version per trial; its cost belongs to the run, not to each model.
    for trial in range(3):
        record_outcome(
            measured,
            RunOutcome("nightly", "run1", f"trial-{trial}", metric="roc_auc", metric_value=0.7 + trial / 100),
        )
    assert main(["--ledger-url", ledger_url, "runs", "list", "--dag-id", "nightly"]) == 0
    out = capsys.readouterr().out
    costs = [line.split()[-1] for line in out.splitlines() if line.startswith("run1 ")]
    assert costs == ["$0.85", "(above)", "(above)"]
    assert "1 run(s), 0 promoted: $0.85 per run" in out
    assert main(["--ledger-url", ledger_url, "runs", "show", "run1"]) == 0
    out = capsys.readouterr().out
    assert (
        out.count("entries (oldest first") == 1 and out.count("(the run's, listed under its first model") == 2
    )
    assert main(["--ledger-url", ledger_url, "runs", "show", "nope"]) == 2
    assert "recent runs with outcomes: run1 (see" in capsys.readouterr().err  # once, not once a model
    # JSON too: each model's item carried the run's whole cost (and entries), so a sum over them was 3x.
    assert main(["--ledger-url", ledger_url, "runs", "list", "--dag-id", "nightly", "--format", "json"]) == 0
    listed = [r for r in json.loads(capsys.readouterr().out)["runs"] if r["run_id"] == "run1"]
    assert [(r["usd"], r.get("usd_listed_under")) for r in listed] == [
        ("0.850000", None),
        (None, "trial-0"),
        (None, "trial-0"),
    ]
    assert main(["--ledger-url", ledger_url, "runs", "show", "run1", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(r["usd"], len(r["entries"])) for r in shown] == [("0.850000", 2), (None, 0), (None, 0)]


def test_runs_that_trained_no_model_are_counted_beside_the_list(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The per-run figures count runs that trained a model: the spend of a failed run was left out unsaid.
    record_outcome(
        measured, RunOutcome("nightly", "run0", "v1", metric="roc_auc", metric_value=0.7, recorded_at=T0)
    )
    assert main(["--ledger-url", ledger_url, "runs", "list", "--dag-id", "nightly"]) == 0
    out = capsys.readouterr().out
    assert "1 run(s), 0 promoted: $0.85 per run" in out
    assert "2 more run(s) of these DAGs since the oldest above trained no model" in out
    assert "cost $1.70, not counted above" in out  # run1 and run2, $0.85 each
    # A run whose task still holds budget is running, not failed: it is said apart.
    measured.set_budget("team=ml", "month", "100")
    # ... but a hold of run 'run2/x' (a run id may hold '/') is not run2's.
    measured.reserve("team=ml", "1", holder="nightly/run2/x/train/-1", run_id="run2/x")
    assert main(["--ledger-url", ledger_url, "runs", "list", "--dag-id", "nightly"]) == 0
    assert "2 more run(s) of these DAGs since the oldest above trained no model" in capsys.readouterr().out
    measured.reserve("team=ml", "1", holder="nightly/run2/train/-1", run_id="run2")
    assert main(["--ledger-url", ledger_url, "runs", "list", "--dag-id", "nightly"]) == 0
    out = capsys.readouterr().out
    assert "1 more run(s) of these DAGs since the oldest above trained no model" in out
    assert "cost $0.85, not counted above" in out
    assert "1 run(s) still running (a task holds budget) have cost $0.85 so far" in out


def test_a_run_whose_id_has_an_empty_part_and_holds_budget_is_running(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # read_holder could not read 'nightly/run3//train/-1': run 'run3/' was counted as ended, not running.
    record_outcome(
        measured, RunOutcome("nightly", "run0", "v1", metric="roc_auc", metric_value=0.7, recorded_at=T0)
    )
    measured.record(
        LedgerEntry(
            dag_id="nightly",
            run_id="run3/",
            task_id="train",
            kind=Kind.COMPUTE,
            usd=Decimal("0.5"),
            instance_type="c5.4xlarge",
            region="us-east-1",
            market="on_demand",
            quantity=Decimal(1),
            incurred_at=T0 + timedelta(days=3),
        )
    )
    measured.set_budget("team=ml", "month", "100")
    measured.reserve("team=ml", "1", holder="nightly/run3//train/-1", run_id="run3/")
    assert main(["--ledger-url", ledger_url, "runs", "list", "--dag-id", "nightly"]) == 0
    out = capsys.readouterr().out
    assert "2 more run(s) of these DAGs since the oldest above trained no model" in out  # run1, run2
    assert "1 run(s) still running (a task holds budget) have cost $0.50 so far" in out


def test_runs_show_of_an_unknown_run_is_an_error(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--ledger-url", ledger_url, "runs", "show", "nope"]) == 2
    assert "no retrain outcome for run 'nope'" in capsys.readouterr().err


def test_runs_show_of_a_run_that_trained_no_model_shows_what_it_cost(
    ledger: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run whose quality gate refused the data still paid for its tries: asking what it cost is no error.
    for task, usd in (("quality_gate", "0.000151"), ("land", "0.0001")):
        ledger.record(
            LedgerEntry(dag_id="nightly", run_id="failed1", task_id=task, kind=Kind.COMPUTE, usd=Decimal(usd))
        )
    assert main(["--ledger-url", ledger_url, "runs", "show", "failed1"]) == 0
    out = capsys.readouterr().out
    assert "run failed1 of DAG nightly: no retrain outcome recorded (a tuning run records none" in out
    assert "run total: $0.000251 (every actual ledger entry of the run)" in out and "quality_gate" in out
    assert main(["--ledger-url", ledger_url, "runs", "show", "failed1", "--format", "json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert shown["outcome"] is None and shown["usd"] == "0.000251" and len(shown["entries"]) == 2


def test_runs_show_last_of_a_dag_with_costs_but_no_outcome_says_so_not_that_the_name_is_wrong(
    ledger: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said "... of DAG 'tune' yet (DAGs in the ledger: d)", which reads as if 'tune' were misspelt.
    for dag_id, run_id in (("tune", "t1"), ("tune", "t2"), ("d", "r1")):
        ledger.record(
            LedgerEntry(dag_id=dag_id, run_id=run_id, task_id="search", kind=Kind.COMPUTE, usd=Decimal(1))
        )
    assert main(["--ledger-url", ledger_url, "runs", "show", "--last", "--dag-id", "tune"]) == 2
    err = capsys.readouterr().err
    assert "DAG 'tune' has cost entries in the ledger but no recorded retrain outcome" in err
    assert "DAGs in the ledger" not in err and "did you mean" not in err
    last = ledger.last_run_id("tune")
    assert f"`costaware runs show {last} --dag-id tune`" in err  # what its newest run cost
    assert main(["--ledger-url", ledger_url, "runs", "show", str(last), "--dag-id", "tune"]) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--last"], "needs --dag-id"),
        (["run1", "--last", "--dag-id", "nightly"], "takes no RUN_ID"),
        (["--last", "--dag-id", "never-ran"], "no entries for DAG 'never-ran': check the name"),
        (["--last", "--dag-id", "nigthly"], "has none); did you mean 'nightly'? (DAGs in the ledger:"),
        ([], "give a RUN_ID"),
    ],
)
def test_runs_show_needs_a_run_id_or_last_with_a_dag(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["--ledger-url", ledger_url, "runs", "show", *args]) == 2
    assert message in capsys.readouterr().err


def test_runs_list_of_a_dag_with_costs_but_no_outcome_does_not_ask_for_another_dag(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A spend gate's DAG has entries, no retrain outcome: it read "did you mean 'nightly'? (DAGs in the
    # ledger: nightly)", a list leaving out the DAG asked about.
    measured.record(
        LedgerEntry(dag_id="gated", run_id="m1", task_id="spend_gate", kind=Kind.COMPUTE, usd=Decimal("0.01"))
    )
    assert main(["--ledger-url", ledger_url, "runs", "list", "--dag-id", "gated"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no retrain outcomes of DAG 'gated' yet: WarmStartRetrainOperator, Remote")
    assert "did you mean" not in out and "DAGs in the ledger" not in out
    assert main(["--ledger-url", ledger_url, "runs", "list", "--dag-id", "gatde"]) == 2
    assert "did you mean 'gated'?" in capsys.readouterr().err  # a typo still gets its hint


def test_runs_list_of_a_misspelt_dag_is_an_error(
    measured: Ledger, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # It gave no runs and exit 0 (with a note), where `runs show --last` gave exit 2: one rule now.
    for fmt in ("table", "csv", "json"):
        assert main(["--ledger-url", ledger_url, "runs", "list", "--dag-id", "nigthly", "--format", fmt]) == 2
        out, err = capsys.readouterr()
        assert out == "" and "error: the ledger has no entries for DAG 'nigthly': check the name" in err
        assert "did you mean 'nightly'?" in err
    assert main(["--ledger-url", ledger_url, "runs", "list", "--dag-id", "nightly", "--format", "csv"]) == 0
    assert capsys.readouterr().err == ""


def test_runs_show_lists_why_an_attempt_ran_on_demand_and_caps_a_long_list(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger.from_url(ledger_url)
    record_outcome(ledger, RunOutcome("tune", "r1", "v1", task_id="train"))
    why = "attempt 3, job t-a3 on local, 12.0 s billed: succeeded; on-demand: restart thrash in us-west-2a"
    for i in range(33):
        ledger.record(
            LedgerEntry(
                dag_id="tune",
                run_id="r1",
                task_id="train",
                kind=Kind.COMPUTE,
                usd=Decimal("0.01"),
                market="on_demand" if i == 0 else "spot",
                quantity=Decimal(1),
                cause="success" if i == 0 else "preemption",
                note=why if i == 0 else "",
                incurred_at=T0 + timedelta(minutes=i),
            )
        )
    assert main(["--ledger-url", ledger_url, "runs", "show", "r1"]) == 0
    out = capsys.readouterr().out
    assert f"train  compute  on_demand  $0.01  success     {why}" in out  # aligned on the longest cause
    assert "... and 3 more: costaware report --dag-id tune --run-id r1 --group-by task" in out
    # JSON gives them all, oldest first, USD as text.
    assert main(["--ledger-url", ledger_url, "runs", "show", "r1", "--format", "json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert len(shown["entries"]) == 33 and shown["entries"][0] == {
        "task_id": "train",
        "kind": "compute",
        "market": "on_demand",
        "usd": "0.010000",  # the stored micro-dollars, exact
        "kg_co2e": None,  # unknown, and why (no estimate was asked for this entry):
        "cause": "success",
        "note": why,
        "carbon_method": "",
        "carbon_source": "",
    }


def test_efficiency_settings_without_efficiency_are_refused(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Accepted in silence, they changed nothing.
    assert main(["--ledger-url", ledger_url, "report", "--runs-per-month", "5", "--min-tries", "1"]) == 2
    assert "--runs-per-month, --min-tries apply only with --efficiency" in capsys.readouterr().err
