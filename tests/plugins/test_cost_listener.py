from __future__ import annotations

import contextlib
import io
import pathlib
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest

from costaware import Ledger
from costaware.plugins import listener as listener_module
from costaware.plugins.listener import CostListener, tags_for


class _PricedTask(SimpleNamespace):
    """An operator whose tries run where its compute arguments say (as WarmStartRetrainOperator's)."""

    cost_compute_from_arguments = True


def fake_ti(task_id: str = "train", try_number: int = 1, **task_attrs: Any) -> SimpleNamespace:
    """The fields Airflow's RuntimeTaskInstance gives a listener; the task carries its DAG's tags."""
    dag = SimpleNamespace(tags=["costaware", "team:ml", "project=churn", "untagged"])
    task = _PricedTask(dag=dag, params={}, **task_attrs)
    params = {"owner": "ana", "project": "churn"}
    return SimpleNamespace(
        dag_id="retrain",
        run_id="run1",
        task_id=task_id,
        map_index=-1,
        try_number=try_number,
        task=task,
        start_date=None,
        end_date=None,
        get_template_context=lambda: {"params": params},
    )


@pytest.fixture
def ledger_env(ledger_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> Ledger:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    monkeypatch.setattr(listener_module, "spool_dir", lambda: tmp_path / "spool")
    return Ledger.from_url(ledger_url)


def test_tags_from_dag_tags_and_params() -> None:
    dag = SimpleNamespace(tags=["team:ml", "project=churn", "plain"])
    assert tags_for(dag, {"project": "fraud", "owner": "ana", "other": "x"}) == {
        "team": "ml",
        "project": "fraud",
        "owner": "ana",
    }
    # A space typed after a name in the trigger form: the same project, not a second one.
    assert tags_for(dag, {"project": "flight-delays ", "owner": "  "}) == {
        "team": "ml",
        "project": "flight-delays",
    }
    # "None" is what a template of an unset param renders: skipped as a blank, so the DAG's own project stays
    assert tags_for(dag, {"project": "None", "owner": "None"}) == {"team": "ml", "project": "churn"}
    # And "null", what | tojson renders of it: it was the project 'null'.
    assert tags_for(dag, {"project": "null", "owner": " null "}) == {"team": "ml", "project": "churn"}


def test_success_is_priced_on_the_declared_instance(ledger_env: Ledger) -> None:
    ti = fake_ti(instance_type="c5.xlarge", region="us-east-1", market="spot")
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    listener.on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    assert (row["task_id"], row["instance_type"], row["market"], row["outcome"]) == (
        "train",
        "c5.xlarge",
        "spot",
        "success",
    )
    assert row["price_source"] == "spot-advisor-estimate"
    assert row["tags"] == {"team": "ml", "project": "churn", "owner": "ana"}
    assert row["on_demand_usd"] >= row["usd"]


def test_failed_try_is_recorded_with_its_cause(ledger_env: Ledger) -> None:
    class Preempted(Exception):
        ledger_cause = "preemption"

    listener = CostListener()
    for try_number, error in ((1, Preempted("spot notice")), (2, ValueError("bad column"))):
        ti = fake_ti(try_number=try_number)
        listener.on_task_instance_running(None, ti)
        listener.on_task_instance_failed(None, ti, error)
    rows = sorted(ledger_env.entries(dag_id="retrain"), key=lambda r: r["try_number"])
    assert [(r["outcome"], r["cause"]) for r in rows] == [("failed", "preemption"), ("failed", "error")]
    assert rows[1]["note"] == "ValueError: bad column"
    assert rows[0]["instance_type"] == "m5.large"  # the worker default


def test_a_long_failure_is_noted_to_its_last_whole_word(ledger_env: Ledger) -> None:
    """A traceback-sized message is clipped on a word with an ellipsis, never mid-number."""
    ti = fake_ti()
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    listener.on_task_instance_failed(None, ti, RuntimeError("row 123456 failed; " * 40))
    (row,) = ledger_env.entries(dag_id="retrain")
    assert len(row["note"]) <= 500 and row["note"].endswith("…")
    assert row["note"].startswith("RuntimeError: row 123456 failed; row")
    assert row["note"][:-1].rstrip(" ,;:").rsplit(" ", 1)[-1] in {"row", "123456", "failed"}


def test_a_failure_s_secrets_are_masked_in_the_ledger_note(ledger_env: Ledger) -> None:
    # The note kept the password the task's own log hides, shown on the Cost page to every DAG reader.
    from airflow.sdk.log import mask_secret

    mask_secret("s3cr3t-token-42")
    ti = fake_ti()
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    error = RuntimeError("cannot connect to postgresql://etl:Tr0ub4dor&3@db:5432/x with s3cr3t-token-42")
    listener.on_task_instance_failed(None, ti, error)
    (row,) = ledger_env.entries(dag_id="retrain")
    assert "Tr0ub4dor" not in row["note"] and "s3cr3t-token-42" not in row["note"]
    assert "postgresql://etl:***@db:5432/x" in row["note"]


def test_listener_settles_the_tasks_reservation(ledger_env: Ledger) -> None:
    ledger_env.set_budget("project=churn", "month", "5")
    reservation = ledger_env.reserve("project=churn", "2", holder="retrain/run1/train/-1")
    ti = fake_ti()
    ti.start_date = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ti.end_date = ti.start_date + timedelta(hours=1)
    CostListener().on_task_instance_success(None, ti)
    (usage,) = ledger_env.usage("project=churn")
    assert (usage.reserved_usd, usage.spent_usd) == (0, Decimal("0.096"))
    (row,) = ledger_env.entries(dag_id="retrain")
    assert row["reservation_id"] == reservation.id


def test_a_try_the_task_will_retry_is_paid_from_its_hold_which_stays_for_the_next_try(
    ledger_env: Ledger,
) -> None:
    # The first failed try settled the hold: the retries ran with none, and another gate could take the
    # money they went on to spend.
    ledger_env.set_budget("project=churn", "month", "5")
    reservation = ledger_env.reserve("project=churn", "2", holder="retrain/run1/train/-1")
    for try_number, state in ((1, "up_for_retry"), (2, "success")):
        ti = fake_ti(try_number=try_number)
        ti.state = state
        ti.start_date = datetime(2026, 1, 1, try_number, tzinfo=timezone.utc)
        ti.end_date = ti.start_date + timedelta(hours=1)
        if state == "up_for_retry":
            CostListener().on_task_instance_failed(None, ti, RuntimeError("flaky"))
            (usage,) = ledger_env.usage("project=churn")
            # Grown back by what the try paid: the retry has the $2 the hold was reserved for.
            assert (usage.reserved_usd, usage.spent_usd) == (Decimal("2"), Decimal("0.096"))
            assert ledger_env.latest_reservation(reservation.holder or "").status == "open"  # type: ignore[union-attr]
        else:
            CostListener().on_task_instance_success(None, ti)
    (usage,) = ledger_env.usage("project=churn")
    assert (usage.reserved_usd, usage.spent_usd) == (0, Decimal("0.192"))
    assert ledger_env.latest_reservation(reservation.holder or "").status == "settled"  # type: ignore[union-attr]
    assert [r["reservation_id"] for r in ledger_env.entries(dag_id="retrain")] == [reservation.id] * 2


def test_a_cost_arriving_after_the_run_end_released_its_reservation_still_settles_it(
    ledger_env: Ledger,
) -> None:
    # The scheduler marks the run successful (and releases what it still holds) as soon as the last task
    # reports success; the worker's listener records that task's cost a moment later.
    ledger_env.set_budget("project=churn", "month", "5")
    reservation = ledger_env.reserve("project=churn", "2", holder="retrain/run1/train/-1")
    CostListener().on_dag_run_success(SimpleNamespace(dag_id="retrain", run_id="run1"), "success")
    assert ledger_env.open_reservations() == []
    ti = fake_ti()
    ti.start_date = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ti.end_date = ti.start_date + timedelta(hours=1)
    CostListener().on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    assert row["reservation_id"] == reservation.id
    (usage,) = ledger_env.usage("project=churn")
    assert (usage.reserved_usd, usage.spent_usd) == (0, Decimal("0.096"))
    assert ledger_env.reservation_to_settle("retrain/run1/train/-1") is None  # settled: nothing left


def test_unpriced_instance_is_recorded_at_zero_with_a_note(ledger_env: Ledger) -> None:
    ti = fake_ti(instance_type="m5.lrage")
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    assert row["usd"] == 0 and row["price_source"] == "unpriced" and "did you mean m5.large" in row["note"]
    # A report says so, not a plain $0.00 (one typo in a worker setting made every try free).
    from costaware.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--ledger-url", str(ledger_env.engine.url), "report", "--dag-id", "retrain"]) == 0
    assert "unpriced: 1 entry could not be priced and count $0" in out.getvalue()


def test_a_misspelt_costaware_compute_key_is_said(
    ledger_env: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    ti = fake_ti()
    ti.task.params = {"costaware_compute": {"instance_type": "c5.xlarge", "markt": "spot"}}
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_success(None, ti)
    assert "costaware_compute keys ['markt'] are not read (use instance_type, region, market" in caplog.text
    caplog.clear()
    ti = fake_ti(task_id="onprem")  # the carbon keys are the utilization listener's: not flagged
    ti.task.params = {"costaware_compute": {"instance_type": "m5.large", "grid_zone": "GB", "power_kw": 0.2}}
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_success(None, ti)
    assert "are not read" not in caplog.text
    rows = {r["task_id"]: r for r in ledger_env.entries(dag_id="retrain")}
    assert (rows["train"]["instance_type"], rows["train"]["market"]) == ("c5.xlarge", "on_demand")  # recorded


def test_unreachable_ledger_spools_and_the_next_entry_drains_it(
    ledger_env: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    good_url = str(ledger_env.engine.url)
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", "postgresql://nobody@127.0.0.1:1/ledger")
    ti = fake_ti(task_id="prep")
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_success(None, ti)
    assert len(list((tmp_path / "spool").glob("*.json"))) == 1
    assert ledger_env.entries(dag_id="retrain") == []

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", good_url)
    ti = fake_ti(task_id="train")
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_success(None, ti)
    assert sorted(r["task_id"] for r in ledger_env.entries(dag_id="retrain")) == ["prep", "train"]
    assert list((tmp_path / "spool").glob("*.json")) == []


@pytest.mark.parametrize(
    ("airflow_home", "why"), [("~nosuchuser/airflow", "'~nosuchuser/airflow'"), ("", "set but empty")]
)
def test_an_entry_neither_the_ledger_nor_the_spool_takes_is_logged_whole_to_be_recorded_by_hand(
    airflow_home: str,
    why: str,
    ledger_env: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    # The ledger down and no spool folder either (an AIRFLOW_HOME under a home nobody has, or empty):
    # spool_dir() raised out of write_entry's fallback, and the try's cost was in no ledger, spool or log.
    import costaware.ledger_spool as ledger_spool
    import costaware.ledger_spool_drain as ledger_spool_drain

    good_url = str(ledger_env.engine.url)
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", "postgresql://nobody@127.0.0.1:1/ledger")
    monkeypatch.setenv("AIRFLOW_HOME", airflow_home)
    monkeypatch.setattr(listener_module, "spool_dir", ledger_spool.spool_dir)
    ti = fake_ti(task_id="prep")
    CostListener().on_task_instance_running(None, ti)
    with caplog.at_level("ERROR", logger=listener_module.log.name):
        CostListener().on_task_instance_success(None, ti)
    (said,) = [r.getMessage() for r in caplog.records if "could not keep it in the spool" in r.getMessage()]
    assert why in said  # why the spool failed
    # The whole entry, as a spool file holds it: saved as one, a drain writes it.
    record = said[said.index("{") :]
    (tmp_path / "by-hand").mkdir()
    (tmp_path / "by-hand" / "prep.json").write_text(record)
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", good_url)
    ledger_spool_drain.drain(tmp_path / "by-hand", lambda conn_id: Ledger.from_url(good_url))
    assert [r["task_id"] for r in ledger_env.entries(dag_id="retrain")] == ["prep"]


def test_an_entry_written_is_not_undone_by_a_spool_folder_that_cannot_be_named(
    ledger_env: Ledger, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The entry written, the drain of what waits asked spool_dir() outside its guard: an AIRFLOW_HOME it
    # refuses raised out of write_entry, and the try's budget alerts and audit after it never ran.
    import costaware.ledger_spool as ledger_spool

    monkeypatch.setenv("AIRFLOW_HOME", "~nosuchuser/airflow")
    monkeypatch.setattr(listener_module, "spool_dir", ledger_spool.spool_dir)
    alerted: list[str] = []
    monkeypatch.setattr(
        "costaware.notifications.budget.alerts_after_spend", lambda ti, *_: alerted.append(ti.task_id)
    )
    ti = fake_ti(task_id="prep")
    CostListener().on_task_instance_running(None, ti)
    with caplog.at_level("ERROR", logger=listener_module.log.name):
        CostListener().on_task_instance_success(None, ti)
    assert [r["task_id"] for r in ledger_env.entries(dag_id="retrain")] == ["prep"]
    assert alerted == ["prep"]
    assert any("'~nosuchuser/airflow'" in r.getMessage() for r in caplog.records)


def test_a_spooled_entry_settles_its_hold_and_a_refused_one_blocks_nothing(
    ledger_env: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    # Drained with a bare record, a spooled entry left its task's hold open beside it: $50 spent and $60
    # held of $100 read -$11 left. One file the ledger refused stopped every later one, for good.
    import json

    from costaware.core.ledger import reservation_holder

    good_url = str(ledger_env.engine.url)
    ledger_env.set_budget("project=churn", "month", "100")
    hold = ledger_env.reserve("project=churn", "60", holder=reservation_holder("retrain", "run1", "prep", -1))
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", "postgresql://nobody@127.0.0.1:1/ledger")
    ti = fake_ti(task_id="prep")
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_success(None, ti)
    (spooled,) = (tmp_path / "spool").glob("*.json")
    written = json.loads(spooled.read_text())
    assert written["ledger_conn_id"] == "costaware_ledger"
    # Beside it: one the ledger refuses (a spool written by hand, malformed), one for another ledger.
    (tmp_path / "spool" / "0-bad.json").write_text(json.dumps({"entry": {"usd": "1"}}))
    other = {**written, "ledger_conn_id": "team_ledger"}
    other["entry"] = {**written["entry"], "entry_uid": "other-ledger-entry"}
    (tmp_path / "spool" / "zz-other.json").write_text(json.dumps(other))

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", good_url)
    ti = fake_ti(task_id="train")
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_success(None, ti)
    assert sorted(r["task_id"] for r in ledger_env.entries(dag_id="retrain")) == ["prep", "train"]
    assert ledger_env.latest_reservation(hold.holder or "").status == "settled"  # type: ignore[union-attr]
    assert [p.name for p in (tmp_path / "spool" / "refused").iterdir()] == ["0-bad.json"]
    assert [p.name for p in (tmp_path / "spool").glob("*.json")] == ["zz-other.json"]  # its own ledger's


def _spool(folder: Any, *task_ids: str, ledger_conn_id: str = "costaware_ledger") -> list[Any]:
    """Spool one entry per task id, as ``write_entry`` does when the ledger is down."""
    import json

    from costaware.core.ledger import Kind, LedgerEntry, entry_to_json

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for task_id in task_ids:
        entry = LedgerEntry(
            dag_id="retrain", run_id="run1", task_id=task_id, kind=Kind.COMPUTE, usd=Decimal("1"),
            tags={"project": "churn"},
        )  # fmt: skip
        path = folder / f"{task_id}-{entry.entry_uid}.json"  # drained in task id order
        path.write_text(json.dumps({"ledger_conn_id": ledger_conn_id, "entry": entry_to_json(entry)}))
        paths.append(path)
    return sorted(paths)


def test_a_spooled_entry_another_process_takes_mid_drain_is_left_to_it(
    ledger_env: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    # Two task processes drained at once: the file the other had just written and removed failed the read,
    # then the move to refused/ raised FileNotFoundError out of the listener, and the try's utilization,
    # alerts and the release of its doomed downstream holds were skipped.
    _, second = _spool(tmp_path / "spool", "a", "b")
    record = listener_module._record_and_settle

    def the_other_process_takes_the_second(ledger: Any, entry: Any, **kwargs: Any) -> bool:
        if entry.task_id == "a":  # this process is writing the first: the other takes the second
            second.rename(tmp_path / "taken")
        return record(ledger, entry, **kwargs)

    monkeypatch.setattr(listener_module, "_record_and_settle", the_other_process_takes_the_second)
    ti = fake_ti(task_id="train")
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_success(None, ti)  # raised FileNotFoundError
    assert sorted(r["task_id"] for r in ledger_env.entries(dag_id="retrain")) == ["a", "train"]
    assert sorted(p.name for p in tmp_path.joinpath("spool").rglob("*")) == []  # nothing set aside
    assert (tmp_path / "taken").exists()  # the other process's to write


DRAIN = """
import sys, time
from pathlib import Path
from costaware import Ledger
from costaware.plugins import listener
listener.spool_dir = lambda: Path(sys.argv[2])
ledger = Ledger.from_url(sys.argv[1])
while time.time() < float(sys.argv[3]):  # both start together
    time.sleep(0.001)
listener._drain_spool(ledger, "costaware_ledger")
"""


def test_two_processes_draining_one_spool_write_each_entry_once(
    ledger_env: Ledger,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    import subprocess
    import sys
    import time

    folder = tmp_path / "spool"
    _spool(folder, *(f"t{i:03}" for i in range(60)))
    start = str(time.time() + 3)
    url = str(ledger_env.engine.url)
    drains = [
        subprocess.Popen([sys.executable, "-c", DRAIN, url, str(folder), start], stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for drain in drains:
        _, err = drain.communicate(timeout=120)
        assert drain.returncode == 0, err.decode()[-2000:]
    assert len(ledger_env.entries(dag_id="retrain")) == 60
    assert list(folder.rglob("*")) == []


def test_an_earlier_spool_that_cannot_be_looked_in_does_not_keep_the_spool_from_its_drain(
    ledger_env: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    # Path.is_dir raises PermissionError on EACCES in Python 3.11: an earlier release's './~/airflow'
    # folder this user may not enter raised out of the spool look-up, and the real spool was not drained.
    import costaware.settings as settings

    folder = tmp_path / "spool"
    _spool(folder, "a")
    monkeypatch.setattr(listener_module, "spool_dir", lambda: folder)
    locked = tmp_path / "cwd" / "~" / "airflow"
    monkeypatch.setattr(settings, "airflow_home_as_written", lambda: ("~/airflow", locked, tmp_path))
    is_dir = pathlib.Path.is_dir

    def refused(self: pathlib.Path) -> bool:
        if self.is_relative_to(locked):
            raise PermissionError(13, "Permission denied", str(self))
        return is_dir(self)

    monkeypatch.setattr(pathlib.Path, "is_dir", refused)
    listener_module._drain_spool(ledger_env, "costaware_ledger")
    assert [r["task_id"] for r in ledger_env.entries(dag_id="retrain")] == ["a"]


def test_a_drain_stopped_by_the_ledger_puts_its_claim_back_and_a_dead_drains_claim_is_reclaimed(
    ledger_env: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    import os
    import time

    from costaware.core.errors import LedgerUnavailableError

    folder = tmp_path / "spool"
    first, second = _spool(folder, "a", "b")

    def down(*args: Any, **kwargs: Any) -> None:
        raise LedgerUnavailableError("the ledger went away")

    monkeypatch.setattr(listener_module, "_record_and_settle", down)
    listener_module._drain_spool(ledger_env, "costaware_ledger")
    assert sorted(folder.iterdir()) == [first, second]  # both wait in the spool, neither claimed
    monkeypatch.undo()
    monkeypatch.setattr(listener_module, "spool_dir", lambda: folder)
    # A drain killed after it claimed (Airflow stops a listener past its overtime) left its claim; a claim
    # of a drain at work now is its own.
    old = int(time.time()) - listener_module.STALE_CLAIM_SECONDS - 60
    first.rename(folder / f"{first.name}.{old}.{os.getpid()}.claimed")
    working = folder / f"{second.name}.{int(time.time())}.{os.getpid()}.claimed"
    second.rename(working)
    listener_module._drain_spool(ledger_env, "costaware_ledger")
    assert [r["task_id"] for r in ledger_env.entries(dag_id="retrain")] == ["a"]
    assert list(folder.iterdir()) == [working]


def test_runtime_falls_back_to_start_and_end_dates(ledger_env: Ledger) -> None:
    ti = fake_ti()
    ti.start_date = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ti.end_date = ti.start_date + timedelta(hours=2)
    CostListener().on_task_instance_success(None, ti)  # no running hook seen in this process
    (row,) = ledger_env.entries(dag_id="retrain")
    assert row["quantity"] == Decimal("2") and row["usd"] == Decimal("0.192")


def test_annotations_from_the_running_task_win(ledger_env: Ledger) -> None:
    ti = fake_ti()
    CostListener().on_task_instance_running(None, ti)
    listener_module.annotate_task(ti, trial="7", market="spot", usd_per_hour="0.03", tags={"study": "s1"})
    CostListener().on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    assert (row["trial"], row["market"], row["price_source"], row["unit_price_usd"]) == (
        "7",
        "spot",
        "given",
        Decimal("0.03"),
    )
    assert row["tags"]["study"] == "s1"
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['colour'\]"):
        listener_module.annotate_task(ti, colour="red")


@pytest.mark.parametrize(
    ("told", "expected"),
    [
        # Each once lost the try's entry (an exception before the ledger write), and left its hold open.
        ({"usd_per_hour": "$0.03"}, ("m5.large", "on_demand", Decimal("0.03"), "")),
        ({"usd_per_hour": "cheap"}, ("m5.large", "on_demand", Decimal("0.096"), "usd_per_hour ignored")),
        ({"market": "preemptible"}, ("m5.large", "on_demand", Decimal("0.096"), "recorded as the worker")),
        ({"instance_type": "x" * 80}, ("m5.large", "on_demand", Decimal("0.096"), "recorded as the worker")),
    ],
)
def test_an_annotation_the_ledger_cannot_take_still_records_the_try(
    ledger_env: Ledger, told: dict[str, str], expected: tuple[Any, ...]
) -> None:
    ti = fake_ti()
    ti.task = SimpleNamespace(dag=ti.task.dag, params={})  # priced on the worker: m5.large on-demand
    CostListener().on_task_instance_running(None, ti)
    listener_module.annotate_task(ti, **told)
    CostListener().on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    instance, market, rate, note = expected
    assert (row["instance_type"], row["market"], row["unit_price_usd"]) == (instance, market, rate)
    assert note in (row["note"] or "")


def test_bad_worker_settings_still_record_the_try_and_name_the_setting(
    ledger_env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_MARKET", "spto")  # every try was lost
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_INSTANCE_TYPE", "m5.larg")
    ti = fake_ti()
    ti.task = SimpleNamespace(dag=ti.task.dag, params={})
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    assert (row["market"], row["price_source"]) == ("on_demand", "unpriced")
    assert "the [costaware] worker_instance_type setting: fix it there" in row["note"]


def test_a_misspelt_worker_region_names_its_own_setting(
    ledger_env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The note said "unknown region 'us-east1' ... (the [costaware] worker_instance_type setting: fix it
    # there)": the setting that was right, not the one to fix.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_REGION", "us-east1")
    ti = fake_ti()
    ti.task = SimpleNamespace(dag=ti.task.dag, params={})
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    assert row["price_source"] == "unpriced"
    assert "unknown region 'us-east1'" in row["note"]
    assert "(the [costaware] worker_region setting: fix it there)" in row["note"]
    assert "worker_instance_type" not in row["note"]


def test_a_rate_declared_for_a_type_no_catalog_knows_is_billed(ledger_env: Ledger) -> None:
    ti = fake_ti(instance_type="p5e.48xlarge-custom", usd_per_hour="98.32")
    ti.start_date = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ti.end_date = ti.start_date + timedelta(minutes=30)
    CostListener().on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    assert (row["usd"], row["price_source"]) == (Decimal("49.16"), "given")


def test_price_cache_and_discount_price_the_entry(  # type: ignore[no-untyped-def]
    ledger_env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from costaware.adapters.price_source import PriceCache
    from costaware.core.ledger import utcnow
    from costaware.core.price_list import ListPrice

    PriceCache(ledger_env).put(
        [ListPrice("ec2", "m5n.2xlarge", "us-east-1", Decimal("0.5"))],
        origin="aws-price-list",
        fetched_at=utcnow(),
    )
    monkeypatch.setenv("AIRFLOW__COSTAWARE__DISCOUNTS", "team:ml=20, family:p4d=30")
    ti = fake_ti(instance_type="m5n.2xlarge", region="us-east-1", market="on_demand")
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    listener.on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    # The DAG is tagged team:ml: 20% off the cached 0.5 USD/h; on_demand_usd keeps the list figure.
    assert row["price_source"] == "aws-price-list-cache+discount:team:ml"
    assert Decimal(row["unit_price_usd"]) == Decimal("0.4")
    assert row["on_demand_usd"] >= row["usd"]


def test_report_shows_discounts_separately(ledger_env: Ledger, ledger_url: str, capsys) -> None:  # type: ignore[no-untyped-def]
    from costaware.cli import main
    from costaware.core.ledger import Kind, LedgerEntry

    for n, source in enumerate(
        ("on-demand-list+discount:team:ml", "on-demand-list", "spot-advisor-estimate")
    ):
        ledger_env.record(
            LedgerEntry(
                dag_id="d",
                run_id="r",
                task_id=f"t{n}",
                kind=Kind.COMPUTE,
                usd=Decimal("0.8"),
                on_demand_usd=Decimal("1.0"),
                price_source=source,
            )
        )
    assert main(["--ledger-url", ledger_url, "report", "--dag-id", "d"]) == 0
    assert "discounts on on-demand prices (part of the savings): team:ml $0.20" in capsys.readouterr().out
    assert main(["--ledger-url", ledger_url, "report", "--format", "json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["discounts"] == {"team:ml": "0.200000"}


def _gate_then_train_dag() -> Any:
    """spend_gate -> spot_window -> train -> promote, and a cleanup task that runs whatever happens."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG("retrain", schedule=None) as dag:
        gate, window = EmptyOperator(task_id="spend_gate"), EmptyOperator(task_id="spot_window")
        train = EmptyOperator(task_id="train")
        promote = EmptyOperator(task_id="promote")
        cleanup = EmptyOperator(task_id="cleanup", trigger_rule="all_done")
        gate >> window >> train >> promote
        window >> cleanup
    return dag


def _ti_of(dag: Any, task_id: str, state: str) -> SimpleNamespace:
    return SimpleNamespace(
        dag_id="retrain",
        run_id="run1",
        task_id=task_id,
        map_index=-1,
        try_number=1,
        task=dag.get_task(task_id),
        state=state,
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        end_date=datetime(2026, 1, 1, 0, 1, tzinfo=timezone.utc),
        get_template_context=lambda: {"params": {}},
    )


def test_a_task_failing_for_good_releases_what_its_downstream_consumer_held(ledger_env: Ledger) -> None:
    # The case: spend_gate reserved for `train`, then spot_window failed on a typo.
    ledger_env.set_budget("project=churn", "month", "5")
    ledger_env.reserve("project=churn", "0.05", holder="retrain/run1/train/-1")
    ledger_env.reserve("project=churn", "1", holder="retrain/run1/cleanup/-1")  # all_done: may still run
    ledger_env.reserve("project=churn", "2", holder="retrain/other-run/train/-1")
    dag = _gate_then_train_dag()

    retrying = _ti_of(dag, "spot_window", "up_for_retry")
    CostListener().on_task_instance_failed(None, retrying, ValueError("flaky"))
    assert len(ledger_env.open_reservations()) == 3  # a retry may still succeed: nothing released

    failed = _ti_of(dag, "spot_window", "failed")
    CostListener().on_task_instance_failed(None, failed, ValueError("unknown instance type 'm5.lrage'"))
    left = sorted(r.holder for r in ledger_env.open_reservations())
    assert left == ["retrain/other-run/train/-1", "retrain/run1/cleanup/-1"]
    (usage,) = ledger_env.usage("project=churn")
    assert usage.reserved_usd == Decimal("3")


def test_a_skip_releases_the_consumers_it_skips(ledger_env: Ledger) -> None:
    ledger_env.set_budget("project=churn", "month", "5")
    ledger_env.reserve("project=churn", "0.05", holder="retrain/run1/train/-1")
    CostListener().on_task_instance_skipped(None, _ti_of(_gate_then_train_dag(), "spot_window", "skipped"))
    assert ledger_env.open_reservations() == []


@pytest.mark.parametrize("hook", ["on_dag_run_failed", "on_dag_run_success"])
def test_run_end_releases_every_reservation_still_open_for_the_run(ledger_env: Ledger, hook: str) -> None:
    ledger_env.set_budget("project=churn", "month", "5")
    ledger_env.reserve("project=churn", "0.05", holder="retrain/run1/train/-1")
    ledger_env.reserve("project=churn", "0.05", holder="retrain/run1/trial/3")
    ledger_env.reserve("project=churn", "2", holder="retrain/run10/train/-1")  # another run, same prefix
    dag_run = SimpleNamespace(dag_id="retrain", run_id="run1")  # what the scheduler / api-server passes
    getattr(CostListener(), hook)(dag_run, "task_failure")
    assert [r.holder for r in ledger_env.open_reservations()] == ["retrain/run10/train/-1"]
    assert ledger_env.usage("project=churn")[0].reserved_usd == Decimal("2")


def test_run_end_leaves_the_holds_of_a_run_whose_id_continues_its_own_after_a_slash(
    ledger_env: Ledger,
) -> None:
    # An allowed_run_id_pattern may allow '/': run 'run1/x' is still running when run 'run1' ends.
    ledger_env.set_budget("project=churn", "month", "50")
    ledger_env.reserve("project=churn", "1", holder="retrain/run1/train/-1")
    ledger_env.reserve("project=churn", "2", holder="retrain/run1/train/-1/egress")
    ledger_env.reserve("project=churn", "4", holder="retrain/run1/x/train/-1")
    ledger_env.reserve("project=churn", "8", holder="retrain/run1/train/train/-1")  # run 'run1/train'
    CostListener().on_dag_run_failed(SimpleNamespace(dag_id="retrain", run_id="run1"), "task_failure")
    left = sorted(r.holder for r in ledger_env.open_reservations())
    assert left == ["retrain/run1/train/train/-1", "retrain/run1/x/train/-1"]
    assert ledger_env.usage("project=churn")[0].reserved_usd == Decimal("12")


@pytest.mark.parametrize("run_id", ["nightly/", "a//b"])
def test_run_end_releases_the_holds_of_a_run_id_with_an_empty_part(ledger_env: Ledger, run_id: str) -> None:
    # read_holder could not read 'retrain/nightly//train/-1' (an empty part): no run's end freed it, and
    # the budget stayed held until its 6 h TTL. A run continuing this one's id after a '/' keeps its holds.
    ledger_env.set_budget("project=churn", "month", "50")
    ledger_env.reserve("project=churn", "1", holder=f"retrain/{run_id}/train/-1")
    ledger_env.reserve("project=churn", "2", holder=f"retrain/{run_id}/train/-1/egress")
    ledger_env.reserve("project=churn", "4", holder=f"retrain/{run_id}/x/train/-1")
    CostListener().on_dag_run_failed(SimpleNamespace(dag_id="retrain", run_id=run_id), "task_failure")
    assert [r.holder for r in ledger_env.open_reservations()] == [f"retrain/{run_id}/x/train/-1"]
    assert ledger_env.usage("project=churn")[0].reserved_usd == Decimal("4")


def test_a_task_failing_releases_only_its_own_runs_doomed_holds(ledger_env: Ledger) -> None:
    ledger_env.set_budget("project=churn", "month", "50")
    ledger_env.reserve("project=churn", "1", holder="retrain/run1/train/-1")
    ledger_env.reserve("project=churn", "4", holder="retrain/run1/train/train/-1")  # run 'run1/train'
    dag = _gate_then_train_dag()
    CostListener().on_task_instance_failed(None, _ti_of(dag, "spot_window", "failed"), ValueError("typo"))
    assert [r.holder for r in ledger_env.open_reservations()] == ["retrain/run1/train/train/-1"]


def _gate_waits(ledger: Ledger, run_id: str, task_id: str = "gate", status: str = "waiting") -> None:
    from costaware.adapters.ledger.gate_requests import note_gate_request

    note_gate_request(
        ledger, dag_id="retrain", run_id=run_id, task_id=task_id, map_index=-1, for_task_id="train",
        scope="project=churn", budget="project=churn/month (2026-11)", usd=Decimal("9"), status=status,
        message="budget 'project=churn/month (2026-11)' has $1.00 left",
    )  # fmt: skip


def _gate_statuses(ledger: Ledger) -> dict[tuple[str, str], str]:
    from costaware.adapters.ledger.gate_requests import gate_requests

    found = gate_requests(ledger, since=datetime(2000, 1, 1, tzinfo=timezone.utc))
    return {(g.run_id, g.task_id): g.status for g in found}


@pytest.mark.parametrize("hook", ["on_task_instance_failed", "on_task_instance_skipped"])
def test_a_spend_gate_that_gave_up_waiting_is_no_longer_waiting(ledger_env: Ledger, hook: str) -> None:
    # Only the gate's own next note changed its row: one whose wait timed out (failed, or skipped with
    # soft_fail) stayed "waiting" on the Cost page for good.
    from costaware.sensors.spend_cap import SpendCapSensor

    _gate_waits(ledger_env, "run1")
    _gate_waits(ledger_env, "run1", task_id="other_gate")
    gate = SpendCapSensor(task_id="gate", scope="project=churn", estimated_usd="9", for_task_id="train")
    ti = fake_ti(task_id="gate")
    ti.task, ti.state = gate, "up_for_retry"  # the next try waits on
    CostListener().on_task_instance_failed(None, ti, RuntimeError("timed out"))
    assert _gate_statuses(ledger_env)[("run1", "gate")] == "waiting"
    ti = fake_ti(task_id="gate", try_number=2)
    ti.task, ti.state = gate, "failed" if hook == "on_task_instance_failed" else "skipped"
    args = (RuntimeError("Sensor has timed out"),) if hook == "on_task_instance_failed" else ()
    getattr(CostListener(), hook)(None, ti, *args)
    assert _gate_statuses(ledger_env) == {("run1", "gate"): "gave_up", ("run1", "other_gate"): "waiting"}


def test_a_task_that_is_no_spend_gate_ends_no_gate_request(
    ledger_env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every skipped branch task of every DAG came here: none may call the ledger for gates it never noted.
    from costaware.plugins import reservation_release

    def no_ledger_call(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("the gate requests of a task that is no spend gate were looked up")

    monkeypatch.setattr(reservation_release, "end_waiting_gates", no_ledger_call)
    ti = fake_ti(task_id="branch_b")
    ti.state = "skipped"
    CostListener().on_task_instance_skipped(None, ti)


@pytest.mark.parametrize("hook", ["on_dag_run_failed", "on_dag_run_success"])
def test_run_end_closes_its_spend_gates_still_waiting(ledger_env: Ledger, hook: str) -> None:
    _gate_waits(ledger_env, "run1")
    _gate_waits(ledger_env, "run1", task_id="approval_gate", status="approval")
    _gate_waits(ledger_env, "run1", task_id="refusing_gate", status="refused")
    _gate_waits(ledger_env, "run10")  # another run
    getattr(CostListener(), hook)(SimpleNamespace(dag_id="retrain", run_id="run1"), "task_failure")
    assert _gate_statuses(ledger_env) == {
        ("run1", "gate"): "run_ended",
        ("run1", "approval_gate"): "run_ended",
        ("run1", "refusing_gate"): "refused",
        ("run10", "gate"): "waiting",
    }


def test_release_never_raises_when_the_ledger_is_down(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", "postgresql://nobody@127.0.0.1:1/ledger")
    dag_run = SimpleNamespace(dag_id="retrain", run_id="run1")
    CostListener().on_dag_run_failed(dag_run, "task_failure")  # logs; the reservation expires at its TTL


def test_a_task_outside_any_dag_releases_nothing_and_does_not_raise(ledger_env: Ledger) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator

    ti = fake_ti()
    ti.task = EmptyOperator(task_id="train")  # no DAG: downstream_list raises RuntimeError
    ti.state = "failed"
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_failed(None, ti, ValueError("x"))
    assert [r["outcome"] for r in ledger_env.entries(dag_id="retrain")] == ["failed"]


# -- every try is recorded, priced on where it ran (issue 23: D1, R2, D6) --------------------------------


def test_a_tag_that_cannot_be_stored_is_left_out_and_the_cost_kept(ledger_env: Ledger, caplog) -> None:  # type: ignore[no-untyped-def]
    ti = fake_ti(instance_type="c5.xlarge")
    ti.get_template_context = lambda: {"params": {"owner": "Doe, Jane", "project": "churn", "team": "a=b"}}
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    listener.on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    assert row["tags"] == {
        "project": "churn"
    }  # the DAG's team:ml is overridden by the bad param, so gone too
    assert "tag 'owner' has value 'Doe, Jane'" in row["note"]
    assert "tag 'team' has value 'a=b'" in row["note"]
    assert "recorded without tag(s)" in caplog.text


def test_run_params_do_not_reprice_a_task(ledger_env: Ledger) -> None:
    """A DAG param meant for the training (``instance_type``, ``market``, ...) leaves ``promote`` alone."""
    ti = fake_ti(task_id="promote")
    ti.task = SimpleNamespace(dag=ti.task.dag, params={})  # an operator that declares no compute
    ti.get_template_context = lambda: {
        "params": {
            "instance_type": "p4d.24xlarge",
            "market": "spot",
            "region": "eu-west-1",
            "usd_per_hour": 9,
        }
    }
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    listener.on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    assert (row["instance_type"], row["market"], row["region"]) == ("m5.large", "on_demand", "us-east-1")
    assert Decimal(row["unit_price_usd"]) != Decimal(9)


def test_a_task_scoped_costaware_compute_param_prices_that_task_only(ledger_env: Ledger) -> None:
    ti = fake_ti(task_id="train_in_worker")
    declared = {"costaware_compute": {"instance_type": "g5.xlarge", "market": "spot", "usd_per_hour": "0.5"}}
    ti.task = SimpleNamespace(dag=ti.task.dag, params=declared)
    # The same key in a run's conf (the template context) is not a pricing override.
    ti.get_template_context = lambda: {"params": {"costaware_compute": {"instance_type": "p4d.24xlarge"}}}
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    listener.on_task_instance_success(None, ti)
    (row,) = ledger_env.entries(dag_id="retrain")
    assert (row["instance_type"], row["market"], Decimal(row["unit_price_usd"])) == (
        "g5.xlarge",
        "spot",
        Decimal("0.5"),
    )


def test_sensors_and_waiting_tasks_are_priced_on_the_worker(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The spend gate and spot window *name* the training instance; they run on the worker."""
    from costaware.operators.warm_start import WarmStartRetrainOperator
    from costaware.sensors.spend_cap import SpendCapSensor
    from costaware.sensors.spot_window import SpotWindowSensor
    from costaware.try_pricing import compute_of

    gate = SpendCapSensor(
        task_id="spend_gate", scope="project=churn", estimated_usd="4", for_task_id="retrain",
        instance_type="c5.4xlarge", region="us-west-2",
    )  # fmt: skip
    window = SpotWindowSensor(
        task_id="spot_window", instance_type="c5.4xlarge", region="us-west-2", expected_runtime_hours=1
    )
    retrain = WarmStartRetrainOperator(
        task_id="retrain", data_path=str(tmp_path), new_data_path=str(tmp_path), label_column="y",
        feature_columns=["x"], model_store=str(tmp_path / "models"), instance_type="c5.4xlarge",
        region="us-west-2", market="spot", usd_per_hour="0.25",
    )  # fmt: skip
    worker = {"instance_type": "m5.large", "region": "us-east-1", "market": "on_demand", "usd_per_hour": None}
    assert compute_of(gate) == worker
    assert compute_of(window) == worker
    assert compute_of(retrain) == {
        "instance_type": "c5.4xlarge",
        "region": "us-west-2",
        "market": "spot",
        "usd_per_hour": Decimal("0.25"),
    }
    # Written as a user would: "$0.25" crashed the listener (Decimal("$0.25")) and the try's entry was lost.
    retrain.usd_per_hour = "$0.25"
    assert compute_of(retrain)["usd_per_hour"] == Decimal("0.25")
    retrain.usd_per_hour = "cheap"  # a rate that is no amount: the try is still priced, from the catalog
    assert compute_of(retrain)["usd_per_hour"] is None


def test_a_run_whose_params_differ_from_the_defaults_is_audited_once_without_a_gate(
    ledger_env: Ledger,
) -> None:
    from costaware.adapters.ledger.audit import audit_log

    dag_run = SimpleNamespace(conf={"owner": "bob", "epochs": 5}, triggering_user_name="ann")
    listener = CostListener()
    for task_id in ("prepare", "train"):
        ti = fake_ti(task_id=task_id)
        ti.task.dag.params = {"owner": "ana", "epochs": 5}
        ti.get_template_context = lambda: {"params": {"owner": "bob"}, "dag_run": dag_run}
        listener.on_task_instance_running(None, ti)
        listener.on_task_instance_success(None, ti)
    (override,) = audit_log(ledger_env, action="override")
    assert (override.actor, override.target) == ("ann", "retrain/run1")
    assert override.details == {"owner": {"default": "ana", "given": "bob"}}


class Job:
    """Stands for ``airflow.jobs.job.Job``, which the scheduler hands ``on_starting`` as it starts."""


def test_a_scheduler_starting_drains_what_its_machine_spooled_and_a_task_process_does_not(
    ledger_env: Ledger,
    ledger_url: str,
    tmp_path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A killed try recorded by the scheduler while the ledger was down waited for the next killed try there.
    from airflow.sdk.execution_time.task_runner import TaskRunnerMarker

    monkeypatch.setenv("AIRFLOW_CONN_TEAM_LEDGER", ledger_url)  # as the workers have it
    _spool(tmp_path / "spool", "a")
    _spool(tmp_path / "spool", "b", ledger_conn_id="team_ledger")  # every ledger's, not one's
    CostListener().on_starting(TaskRunnerMarker())  # a task process drains after its own entry
    assert ledger_env.entries(dag_id="retrain") == []
    CostListener().on_starting(Job())
    assert sorted(r["task_id"] for r in ledger_env.entries(dag_id="retrain")) == ["a", "b"]
    assert list((tmp_path / "spool").rglob("*")) == []
    CostListener().on_starting(Job())  # nothing waits: nothing written twice
    assert len(ledger_env.entries(dag_id="retrain")) == 2


def test_the_api_server_starting_drains_what_its_machine_spooled(
    ledger_env: Ledger,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    # The API server runs no Job, so on_starting never drained there: a killed try it spooled while the
    # ledger was down waited for the next try killed there, or for `costaware spool drain`.
    import threading

    from airflow.api_fastapi.app import lifespan
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from costaware.plugins.ui.app import cost_app

    _spool(tmp_path / "spool", "a", "b")
    server = FastAPI(lifespan=lifespan)  # Airflow's app, with the Cost app mounted as init_plugins does
    server.mount("/costaware", cost_app)
    with TestClient(server):
        for thread in threading.enumerate():
            if thread.name == "costaware-spool-drain":
                thread.join(timeout=30)
        assert sorted(r["task_id"] for r in ledger_env.entries(dag_id="retrain")) == ["a", "b"]
    assert list((tmp_path / "spool").rglob("*")) == []


def test_the_api_server_starts_when_its_spool_cannot_be_drained(
    tmp_path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.api_fastapi.app import lifespan
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from costaware.plugins.ui.app import cost_app

    def unreadable() -> Any:
        raise PermissionError("[Errno 13] Permission denied: 'spool'")

    monkeypatch.setattr(listener_module, "spool_dir", unreadable)
    server = FastAPI(lifespan=lifespan)
    server.mount("/costaware", cost_app)
    with TestClient(server) as client:
        assert client.get("/costaware/api/budgets").status_code == 401  # up, and asking for a login


def test_a_try_is_priced_from_the_price_cache_of_the_ledger_its_task_writes_to(  # type: ignore[no-untyped-def]
    ledger_env: Ledger, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    # The team imported its negotiated price into its own ledger: the try was written there but priced from
    # the default ledger's cache, where it found none: at the bundled list price.
    import json

    from costaware.adapters.price_source import PriceCache
    from costaware.core.ledger import utcnow
    from costaware.core.price_list import ListPrice

    monkeypatch.setenv(
        "AIRFLOW_CONN_TEAM_LEDGER", json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "team.db")})
    )
    team = Ledger.from_url(f"sqlite:///{tmp_path / 'team.db'}")
    PriceCache(team).put(
        [ListPrice("ec2", "m5n.2xlarge", "us-east-1", Decimal("0.1"))],
        origin="aws-price-list",
        fetched_at=utcnow(),
    )
    ti = fake_ti(
        instance_type="m5n.2xlarge", region="us-east-1", market="on_demand", ledger_conn_id="team_ledger"
    )
    ti.task.dag = SimpleNamespace(tags=[])
    ti.start_date = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ti.end_date = ti.start_date + timedelta(hours=1)
    CostListener().on_task_instance_success(None, ti)
    assert ledger_env.entries(dag_id="retrain") == []
    (row,) = team.entries(dag_id="retrain")
    assert (row["price_source"], Decimal(row["usd"])) == ("aws-price-list-cache", Decimal("0.1"))


def test_a_scheduler_without_the_workers_ledger_leaves_their_spooled_entries_waiting(
    tmp_path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The drain opened each ledger through the hook's fallback: a scheduler without the workers' connection
    # or COSTAWARE_LEDGER_URL emptied the spool into a new $AIRFLOW_HOME/costaware/ledger.db no budget reads.
    import logging

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_COSTAWARE_LEDGER", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_TEAM_LEDGER", raising=False)
    spool = tmp_path / "spool"
    monkeypatch.setattr(listener_module, "spool_dir", lambda: spool)
    spooled = _spool(spool, "a") + _spool(spool, "b", ledger_conn_id="team_ledger")
    with caplog.at_level(logging.WARNING, logger=listener_module.__name__):
        CostListener().on_starting(Job())
    embedded = tmp_path / "airflow" / "costaware" / "ledger.db"
    assert not embedded.exists()
    assert sorted(spool.glob("*.json")) == sorted(spooled)  # both wait, none refused
    assert not (spool / "refused").exists()
    logged = caplog.text
    assert f"spooled entries of ledger 'costaware_ledger' still wait (no ledger at {embedded}" in logged
    assert (
        "ledger 'team_ledger' still wait (the connection 'team_ledger' does not exist on this machine"
        in logged
    )


def test_a_ledger_whose_database_is_missing_keeps_its_spooled_entries_waiting(
    postgres_url: str,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    # LedgerDatabaseMissingError is a configuration error, not LedgerUnavailableError: the entries went to
    # spool/refused, out of every later drain, for a database the deployment had yet to create.
    from costaware.ledger_spool_drain import drain

    folder = tmp_path / "spool"
    spooled = _spool(folder, "a", "b")
    not_created = Ledger.from_url(postgres_url.rsplit("/", 1)[0] + "/costaware_not_created", create=False)
    # Written by a plain record (no reservation look-up before it): the write itself meets the missing
    # database.
    result = drain(
        folder, lambda _conn_id: not_created, record=lambda ledger, entry, **_: ledger.record(entry)
    )
    assert (result.written, result.refused, result.waiting) == (0, 0, 2)
    assert sorted(folder.glob("*.json")) == sorted(spooled) and not (folder / "refused").exists()
    assert 'database "costaware_not_created" does not exist' in (result.unavailable or {})["costaware_ledger"]


def test_a_workers_task_process_still_creates_the_embedded_ledger_on_first_use(
    tmp_path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only the scheduler and the API server refuse a ledger they do not see: the demo's worker has no
    # connection, and its first try creates $AIRFLOW_HOME/costaware/ledger.db.
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_COSTAWARE_LEDGER", raising=False)
    monkeypatch.setattr(listener_module, "spool_dir", lambda: tmp_path / "spool")
    ti = fake_ti(instance_type="c5.xlarge", region="us-east-1", market="spot")
    ti.start_date = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ti.end_date = ti.start_date + timedelta(minutes=5)
    CostListener().on_task_instance_success(None, ti)
    embedded = Ledger.from_url(f"sqlite:///{tmp_path / 'airflow' / 'costaware' / 'ledger.db'}")
    assert [r["task_id"] for r in embedded.entries(dag_id="retrain")] == ["train"]
    assert not list((tmp_path / "spool").glob("*.json"))


def test_a_runs_end_on_a_scheduler_without_the_workers_ledger_makes_no_ledger_file(
    tmp_path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Releasing the run's holds opened the hook's fallback: an empty $AIRFLOW_HOME/costaware/ledger.db,
    # which the killed tries and spool drains there then took for the workers' ledger (no longer missing).
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_COSTAWARE_LEDGER", raising=False)
    run = SimpleNamespace(dag_id="retrain", run_id="run1", dag=SimpleNamespace(tasks=[]))
    CostListener().on_dag_run_failed(run, "marked failed")
    CostListener().on_dag_run_success(run, "")
    assert not (tmp_path / "airflow" / "costaware").exists()


def test_a_runs_end_where_its_tasks_ledger_connection_is_missing_releases_nothing_in_another_ledger(
    tmp_path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The scheduler lacked the workers' team_ledger connection: the hook's fallback (COSTAWARE_LEDGER_URL)
    # stood in for it, and the run's holds were released in that database, while team_ledger's stayed open.
    import json
    import logging

    from costaware.plugins import reservation_release

    fallback = Ledger.from_url(f"sqlite:///{tmp_path / 'fallback.db'}")
    fallback.set_budget("project=churn", "month", "5")
    held = fallback.reserve("project=churn", "1", holder="retrain/run1/train/-1")
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{tmp_path / 'fallback.db'}")
    main_conn = {"conn_type": "sqlite", "host": str(tmp_path / "main.db")}
    monkeypatch.setenv("AIRFLOW_CONN_COSTAWARE_LEDGER", json.dumps(main_conn))
    monkeypatch.delenv("AIRFLOW_CONN_TEAM_LEDGER", raising=False)
    main = Ledger.from_url(f"sqlite:///{tmp_path / 'main.db'}")
    main.set_budget("project=churn", "month", "5")
    main.reserve("project=churn", "1", holder="retrain/run1/gate/-1")
    task = SimpleNamespace(task_id="train", ledger_conn_id="team_ledger")
    run = SimpleNamespace(dag_id="retrain", run_id="run1", dag=SimpleNamespace(tasks=[task]))
    with caplog.at_level(logging.ERROR, logger=reservation_release.__name__):
        CostListener().on_dag_run_failed(run, "task_failure")
    assert [r.id for r in fallback.open_reservations()] == [held.id]  # not released in the wrong database
    assert main.open_reservations() == []  # the default ledger, which this machine has, is released
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and all("'team_ledger' does not exist on this machine" in e for e in errors)
    assert "AIRFLOW_CONN_TEAM_LEDGER" in errors[0]


def test_a_runs_end_where_no_ledger_connection_exists_says_the_fallback_released_the_holds(
    tmp_path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # One machine, no ledger connection at all: the task's team_ledger hold went to COSTAWARE_LEDGER_URL, the
    # default connection's fallback too, which released it at the run's end; the error said "left open".
    import logging

    from costaware.plugins import reservation_release

    url = f"sqlite:///{tmp_path / 'fallback.db'}"
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", url)
    monkeypatch.delenv("AIRFLOW_CONN_COSTAWARE_LEDGER", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_TEAM_LEDGER", raising=False)
    fallback = Ledger.from_url(url)
    fallback.set_budget("project=churn", "month", "5")
    fallback.reserve("project=churn", "4", holder="retrain/run1/train/-1")
    task = SimpleNamespace(task_id="train", ledger_conn_id="team_ledger")
    run = SimpleNamespace(dag_id="retrain", run_id="run1", dag=SimpleNamespace(tasks=[task]))
    with caplog.at_level(logging.INFO, logger=reservation_release.__name__):
        CostListener().on_dag_run_success(run, "")
    assert fallback.open_reservations() == []
    said = [r for r in caplog.records if "'team_ledger' does not exist" in r.getMessage()]
    assert said and all(r.levelno == logging.WARNING for r in said)
    holds = next(r.getMessage() for r in said if "the run's holds" in r.getMessage())
    assert "left open" not in holds.split(";")[0]  # not said of the holds it released
    assert f"the run's holds in {url} " in holds and "were released through the ledger connection" in holds
    assert "'costaware_ledger'" in holds and "AIRFLOW_CONN_TEAM_LEDGER" in holds


def test_a_runs_end_where_the_tasks_ledger_connection_is_set_but_unreadable_says_so(
    tmp_path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # AIRFLOW_CONN_TEAM_LEDGER was set but Airflow could not parse it: the error said the connection "does
    # not exist", and its fix was to set the variable already set.
    import logging

    from costaware.plugins import reservation_release

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{tmp_path / 'fallback.db'}")
    monkeypatch.delenv("AIRFLOW_CONN_COSTAWARE_LEDGER", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_TEAM_LEDGER", "{not json")
    task = SimpleNamespace(task_id="train", ledger_conn_id="team_ledger")
    run = SimpleNamespace(dag_id="retrain", run_id="run1", dag=SimpleNamespace(tasks=[task]))
    with caplog.at_level(logging.ERROR, logger=reservation_release.__name__):
        CostListener().on_dag_run_failed(run, "task_failure")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and not any("does not exist" in e for e in errors)
    holds = next(e for e in errors if "the run's holds" in e)
    assert "AIRFLOW_CONN_TEAM_LEDGER is set on this machine but Airflow cannot read it" in holds
    assert "ledger 'team_ledger' are left open" in holds and "fix it here" in holds


def test_a_worker_without_the_tasks_ledger_connection_releases_where_its_tasks_held(
    tmp_path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A task process opens the ledger as its tasks do: the spend gate on a worker without team_ledger held
    # in the fallback, so a failure for good there releases that hold (only a run's end, heard on the
    # scheduler or the API server, refuses a stand-in ledger).
    import json

    fallback = Ledger.from_url(f"sqlite:///{tmp_path / 'fallback.db'}")
    fallback.set_budget("project=churn", "month", "5")
    fallback.reserve("project=churn", "1", holder="retrain/run1/train/-1")
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{tmp_path / 'fallback.db'}")
    main_conn = {"conn_type": "sqlite", "host": str(tmp_path / "main.db")}
    monkeypatch.setenv("AIRFLOW_CONN_COSTAWARE_LEDGER", json.dumps(main_conn))
    monkeypatch.delenv("AIRFLOW_CONN_TEAM_LEDGER", raising=False)
    monkeypatch.setattr(listener_module, "spool_dir", lambda: tmp_path / "spool")
    dag = _gate_then_train_dag()
    dag.get_task("train").ledger_conn_id = "team_ledger"
    CostListener().on_task_instance_failed(None, _ti_of(dag, "spot_window", "failed"), ValueError("typo"))
    assert fallback.open_reservations() == []


def test_a_compute_argument_templated_from_a_param_left_blank_is_read_as_not_given(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``instance_type="{{ params.gpu }}"`` with no ``gpu`` renders "None": not a type called None."""
    from costaware.operators.warm_start import WarmStartRetrainOperator
    from costaware.try_pricing import compute_of

    retrain = WarmStartRetrainOperator(
        task_id="retrain", data_path=str(tmp_path), new_data_path=str(tmp_path), label_column="y",
        feature_columns=["x"], model_store=str(tmp_path / "models"), instance_type="None", region="null",
        market="None",
        params={"costaware_compute": {"instance_type": "c5.4xlarge", "region": "None"}},
    )  # fmt: skip
    assert compute_of(retrain) == {
        "instance_type": "c5.4xlarge",  # the param's, where the argument rendered blank
        "region": "us-east-1",
        "market": "on_demand",
        "usd_per_hour": None,
    }


def test_a_compute_field_with_a_space_around_it_is_read_without_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A space around a value ("g5.xlarge ", from a template or a form) is not part of it.

    "g5.xlarge " was no known type: the try was recorded at $0, unpriced.
    """
    from costaware.operators.warm_start import WarmStartRetrainOperator
    from costaware.try_pricing import compute_of

    retrain = WarmStartRetrainOperator(
        task_id="retrain", data_path=str(tmp_path), new_data_path=str(tmp_path), label_column="y",
        feature_columns=["x"], model_store=str(tmp_path / "models"), instance_type=" ", region=" None ",
        market="spot ",
        params={"costaware_compute": {"instance_type": "g5.xlarge ", "region": " eu-central-1"}},
    )  # fmt: skip
    assert compute_of(retrain) == {
        "instance_type": "g5.xlarge",  # the param's, where the argument is blank
        "region": "eu-central-1",
        "market": "spot",
        "usd_per_hour": None,
    }


@pytest.mark.parametrize("path", ["run end", "billed job's hold"])
def test_a_hold_its_entries_paid_from_is_released_and_said_freeing_only_the_rest(
    ledger_env: Ledger, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    # The run's end (and its reconcile of a job found billed) logged "released $4.00": the whole hold, though
    # $1.50 of it was spent and stays so.
    import logging

    from costaware.core.ledger import LedgerEntry
    from costaware.plugins import reservation_release
    from costaware.plugins.run_end_reconcile import _release_hold_of

    ledger_env.set_budget("project=churn", "month", "10")
    held = ledger_env.reserve("project=churn", "4", holder="retrain/run1/train/-1", run_id="run1")
    ledger_env.record(
        LedgerEntry(
            dag_id="retrain",
            run_id="run1",
            task_id="train",
            kind="compute",
            usd=Decimal("1.50"),
            tags={"project": "churn"},
            reservation_id=held.id,
        )
    )
    with caplog.at_level(logging.INFO, logger=reservation_release.__name__):
        if path == "run end":
            CostListener().on_dag_run_failed(SimpleNamespace(dag_id="retrain", run_id="run1"), "task_failure")
        else:
            wait = SimpleNamespace(
                dag_id="retrain", run_id="run1", task_id="train", task="retrain/run1/train/-1"
            )
            _release_hold_of(wait, "costaware_ledger")
    assert ledger_env.open_reservations() == []
    from costaware.adapters.ledger import reservations

    with ledger_env.reading() as conn:
        closed = reservations.reservation(conn, held.id)
    assert closed.status == "released"
    assert "released $4" not in caplog.text
    assert "freeing $2.50 (the $1.50 its entries paid from it stays spent)" in caplog.text
    (usage,) = ledger_env.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd) == (Decimal("1.50"), 0)


def test_an_entry_still_in_the_spool_at_the_runs_end_finds_the_freed_hold_and_is_said_over_its_cap(
    ledger_env: Ledger, caplog: pytest.LogCaptureFixture, tmp_path: pathlib.Path
) -> None:
    # Settled at the $3 paid so far, the hold took no later entry: the try's last $2, spooled while the
    # ledger was down, was recorded alone after another run took the freed room: $12 on a $10 cap, unsaid.
    import logging

    from costaware.core.ledger import LedgerEntry
    from costaware.ledger_spool import spool_entry
    from costaware.ledger_spool_drain import drain
    from costaware.plugins.reservation_release import release_reservations

    ledger_env.set_budget("project=churn", "month", "10")
    held = ledger_env.reserve("project=churn", "6", holder="retrain/run1/train/-1", run_id="run1")

    def entry(usd: str, **more: Any) -> LedgerEntry:
        return LedgerEntry(
            dag_id="retrain",
            run_id="run1",
            task_id="train",
            kind="compute",
            usd=Decimal(usd),
            tags={"project": "churn"},
            **more,
        )

    ledger_env.record(entry("3", reservation_id=held.id))
    spool_entry(tmp_path / "spool", entry("2"), "costaware_ledger", retrying=False)
    release_reservations("retrain", "run1", None, "the run ended", {"costaware_ledger"})
    ledger_env.reserve("project=churn", "7", holder="retrain/run2/train/-1", run_id="run2")
    with caplog.at_level(logging.ERROR):
        drain(tmp_path / "spool", lambda conn_id: ledger_env)
    late = [e for e in ledger_env.entries() if Decimal(str(e["usd"])) == 2]
    assert late and late[0]["reservation_id"] == held.id  # paid from the hold it belongs to
    assert "$2.00 over its cap" in caplog.text


def test_a_run_end_release_of_a_hold_settled_meanwhile_frees_nothing_and_says_so(
    ledger_env: Ledger, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # release() changes nothing of a hold a settle closed first and returns it as it stands: the run's end
    # listed it as released and logged "released $4.00".
    import logging

    from costaware.plugins import reservation_release
    from costaware.plugins.reservation_release import release_reservations

    ledger_env.set_budget("project=churn", "month", "10")
    ledger_env.reserve("project=churn", "4", holder="retrain/run1/train/-1", run_id="run1")
    release = Ledger.release_hold

    def settled_first(self: Any, reservation_id: str) -> Any:
        self.settle(reservation_id, "1.00", already_recorded=True)  # the task's own settle, late
        return release(self, reservation_id)

    monkeypatch.setattr(Ledger, "release_hold", settled_first)
    with caplog.at_level(logging.INFO, logger=reservation_release.__name__):
        freed = release_reservations("retrain", "run1", None, "the run ended", {"costaware_ledger"})
    assert freed == []
    assert "released $" not in caplog.text
    assert "the hold of retrain/run1/train/-1 was settled meanwhile: nothing freed" in caplog.text


def test_entries_an_earlier_release_spooled_under_an_airflow_home_read_as_written_are_drained(
    ledger_env: Ledger, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    # AIRFLOW_HOME='~/airflow' spooled in './~/airflow/costaware/spool' under the working folder before the
    # home was expanded; after an upgrade no drain looked there, and those tries' costs were never written.
    import costaware.ledger_spool as ledger_spool

    working = tmp_path / "working"
    working.mkdir()
    monkeypatch.chdir(working)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AIRFLOW_HOME", "~/airflow")
    monkeypatch.setattr(listener_module, "spool_dir", ledger_spool.spool_dir)
    _spool(working / "~" / "airflow" / "costaware" / "spool", "left")
    ti = fake_ti(task_id="prep")
    CostListener().on_task_instance_running(None, ti)
    CostListener().on_task_instance_success(None, ti)
    assert sorted(r["task_id"] for r in ledger_env.entries(dag_id="retrain")) == ["left", "prep"]
    assert list((working / "~" / "airflow" / "costaware" / "spool").glob("*.json")) == []
    # A scheduler starting there drains it too.
    _spool(working / "~" / "airflow" / "costaware" / "spool", "killed")
    listener_module.drain_spool_at_start(wait_seconds=30)
    assert "killed" in {r["task_id"] for r in ledger_env.entries(dag_id="retrain")}
