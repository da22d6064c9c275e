"""Governance in the ledger: forecasts from real timetables, alerts once per period, approvals, the audit."""

from __future__ import annotations

import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import BaseNotifier
from airflow.timetables.trigger import CronTriggerTimetable
from airflow_cfg import airflow_cfg
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from costaware import Ledger
from costaware.adapters.airflow_schedule import TimetableSchedule, count_runs
from costaware.adapters.ledger.audit import audit_log, record_audit
from costaware.adapters.ledger.governance import NoSchedule, alerts_sent, budget_outlook, claim_alert
from costaware.core.errors import BudgetExceededError, ConfigurationError
from costaware.core.ledger import Kind, LedgerEntry, utcnow
from costaware.notifications.budget import check_budget_alerts, rule_context

pytestmark = pytest.mark.usefixtures("clock")

D = Decimal
TAGS = {"project": "churn"}


class ListNotifier(BaseNotifier):
    """A user's own notifier: keeps the rendered subject of every alert it is asked to send."""

    template_fields = ("subject",)

    def __init__(self, sink: list[str], subject: str = "{{ costaware_alert.message }}") -> None:
        super().__init__()
        self.sink, self.subject = sink, subject

    def notify(self, context: Any) -> None:
        self.sink.append(self.subject)


def run_cost(ledger: Ledger, run: int, usd: str = "10") -> None:
    """One finished run of DAG 'retrain': the sensor reserves, the listener settles with the actual cost."""
    holder = f"retrain/run{run}/train/-1"
    reservation = ledger.reserve("project=churn", usd, holder=holder, run_id=f"run{run}")
    entry = LedgerEntry(
        dag_id="retrain",
        run_id=f"run{run}",
        task_id="train",
        kind=Kind.COMPUTE,
        usd=D(usd),
        quantity=D(1),
        tags=TAGS,
        reservation_id=reservation.id,
    )
    ledger.settle(reservation.id, usd, entry=entry)


def test_budget_from_zero_past_its_cap(ledger: Ledger) -> None:
    """Alerts at each threshold exactly once, the forecast crossing the cap before the spend, an approval."""
    ledger.set_budget("project=churn", "month", "100", actor="lead")
    hourly = CronTriggerTimetable("0 * * * *", timezone="UTC")
    schedule = TimetableSchedule({"retrain": hourly})
    sent: list[str] = []
    notifier = ListNotifier(sent)
    forecast_crossed_at = spend_crossed_at = None
    fired: dict[int, list[str]] = {}
    for run in range(1, 11):
        run_cost(ledger, run)
        now = utcnow()
        outlook = budget_outlook(ledger, ledger.budgets()[0], schedule, at=now)
        f = outlook.forecast
        assert f.runs_left == count_runs(hourly, now, outlook.window.end)  # type: ignore[arg-type]
        assert f.forecast_usd == D(10 * run) + 10 * f.runs_left
        assert f.low_usd == f.forecast_usd == f.high_usd  # every run cost the same
        if forecast_crossed_at is None and f.crosses(D(100)):
            forecast_crossed_at = run
        if spend_crossed_at is None and outlook.usage.spent_usd >= 100:
            spend_crossed_at = run
        alerts = check_budget_alerts(ledger, TAGS, notifiers=[notifier], schedule=schedule)
        fired[run] = [a.threshold for a in alerts]
        # a second worker checking right after sends nothing again
        assert check_budget_alerts(ledger, TAGS, notifiers=[notifier], schedule=schedule) == []
    assert forecast_crossed_at == 1 and spend_crossed_at == 10
    assert fired == {1: ["forecast"], 5: ["50%"], 8: ["80%"], 10: ["100%"]} | {
        r: [] for r in (2, 3, 4, 6, 7, 9)
    }
    assert len(sent) == 4 and "above its cap" in sent[0] and "passed 50% of its cap" in sent[1]
    assert "spent $100.00 of $100.00" in sent[3]
    assert [t for _, _, t in alerts_sent(ledger)] == ["forecast", "50%", "80%", "100%"]

    # Run 11 does not fit any more; a person approves the overage.
    with pytest.raises(BudgetExceededError):
        ledger.reserve("project=churn", "10", holder="retrain/run11/train/-1", run_id="run11")
    reservation = ledger.reserve(
        "project=churn",
        "10",
        holder="retrain/run11/train/-1",
        run_id="run11",
        approved_by="ann",
        approval={"responded_at": "2026-11-24T00:31:00+00:00"},
    )
    assert reservation.usd == 10 and ledger.usage("project=churn")[0].left_usd == D(-10)
    (approval,) = audit_log(ledger, action="approval")
    assert approval.actor == "ann" and approval.target == "retrain/run11/train/-1"
    assert approval.details["usd"] == "10" and approval.details["reservation_id"] == reservation.id
    assert approval.details["budgets"] == [
        {"budget": "project=churn/month", "cap_usd": "100.000000", "committed_usd": "100.000000"}
    ]
    actions = [e.action for e in audit_log(ledger)]
    assert actions == ["budget_set"] + ["alert"] * 4 + ["approval"]


def test_budget_changes_are_audited_with_old_and_new_cap(ledger: Ledger) -> None:
    ledger.set_budget("project=churn", "month", "100", actor="lead")
    ledger.set_budget("project=churn", "month", "150", actor="ann")
    first, second = audit_log(ledger, action="budget_set")
    old_new = [(e.actor, e.details["old_cap_usd"], e.details["new_cap_usd"]) for e in (first, second)]
    assert old_new == [("lead", None, "100.000000"), ("ann", "100.000000", "150.000000")]
    assert second.target == "project=churn/month"
    assert audit_log(ledger, since=second.at)[-1] == second


def test_a_refused_budget_leaves_no_audit_entry(ledger: Ledger) -> None:
    with pytest.raises(ConfigurationError, match="-5"):
        ledger.set_budget("project=churn", "month", "-5", actor="lead")
    with pytest.raises(ConfigurationError, match="audit action 'erase'"):
        record_audit(ledger, actor="x", action="erase", target="t")
    with pytest.raises(ConfigurationError, match="empty actor"):
        record_audit(ledger, actor=" ", action="override", target="t")
    assert audit_log(ledger) == []


def test_the_database_refuses_to_change_or_delete_audit_rows(ledger: Ledger) -> None:
    ledger.set_budget("project=churn", "month", "100", actor="lead")
    for statement in ("UPDATE costaware_audit SET actor = 'mallory'", "DELETE FROM costaware_audit"):
        with pytest.raises(DBAPIError, match="append-only"), ledger.engine.begin() as conn:
            conn.execute(text(statement))
    assert [e.actor for e in audit_log(ledger)] == ["lead"]


def test_the_audit_trail_is_append_only_on_postgresql(postgres_url: str) -> None:
    from services import fresh_postgres_database

    ledger = Ledger.from_url(fresh_postgres_database(postgres_url, "audit"))
    ledger.set_budget("project=churn", "month", "100", actor="lead")
    with pytest.raises(DBAPIError, match="append-only"), ledger.engine.begin() as conn:
        conn.execute(text("DELETE FROM costaware_audit"))
    assert len(audit_log(ledger)) == 1
    ledger.dispose()


def test_no_code_path_updates_or_deletes_audit_rows() -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "costaware"
    offenders = [
        path
        for path in src.rglob("*.py")
        for needle in ("audit.update(", "audit.delete(", "alerts_sent.update(", "alerts_sent.delete(")
        if needle in path.read_text()
    ]
    assert offenders == []


def test_many_workers_send_each_alert_once(ledger: Ledger) -> None:
    ledger.set_budget("project=churn", "month", "10", actor="lead")
    run_cost(ledger, 1, "9")
    sent: list[str] = []
    results: list[int] = []
    barrier = threading.Barrier(6)

    def worker() -> None:
        barrier.wait()
        results.append(len(check_budget_alerts(ledger, TAGS, notifiers=[ListNotifier(sent)])))

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 80 % of $10 (50 % is covered by it), sent once, by whichever worker recorded it first
    assert sum(results) == 1 and len(sent) == 1 and "passed 80% of its cap" in sent[0]
    assert sorted(t for _, _, t in alerts_sent(ledger)) == ["50%", "80%"]
    assert not claim_alert(ledger, "project=churn/month", alerts_sent(ledger)[0][1], "50%", details={})


def test_a_spend_past_several_percentages_sends_the_highest_alone(ledger: Ledger) -> None:
    # One run from $4 to $9.50 of a $10 cap sent "passed 50%" and "passed 80%" together.
    ledger.set_budget("project=churn", "month", "10", actor="lead")
    run_cost(ledger, 1, "4")
    sent: list[str] = []
    assert check_budget_alerts(ledger, TAGS, notifiers=[ListNotifier(sent)]) == []
    run_cost(ledger, 2, "5.5")
    assert [a.threshold for a in check_budget_alerts(ledger, TAGS, notifiers=[ListNotifier(sent)])] == ["80%"]
    assert len(sent) == 1 and "passed 80% of its cap: spent $9.50 of $10.00" in sent[0]
    # The lower one is recorded as covered by it: it does not fire later in the period either.
    assert sorted(t for _, _, t in alerts_sent(ledger)) == ["50%", "80%"]
    covered = {a.details["threshold"]: a.details.get("covered_by") for a in audit_log(ledger, action="alert")}
    assert covered == {"80%": None, "50%": "80%"}
    run_cost(ledger, 3, "0.5")
    alerts = check_budget_alerts(ledger, TAGS, notifiers=[ListNotifier(sent)])
    assert [a.threshold for a in alerts] == ["100%"] and len(sent) == 2


def test_an_alert_no_notifier_delivered_is_sent_again_at_the_next_check(ledger: Ledger) -> None:
    # Claimed before sending, an alert whose mail server was down for a minute was lost for the period.
    class DownNotifier(BaseNotifier):
        def notify(self, context: Any) -> None:
            raise ConnectionRefusedError("smtp.example.com:25")

    ledger.set_budget("project=churn", "month", "10", actor="lead")
    run_cost(ledger, 1, "6")
    assert check_budget_alerts(ledger, TAGS, notifiers=[DownNotifier()]) == []
    assert alerts_sent(ledger) == []  # given back
    sent: list[str] = []
    assert [a.threshold for a in check_budget_alerts(ledger, TAGS, notifiers=[ListNotifier(sent)])] == ["50%"]
    assert len(sent) == 1 and [t for _, _, t in alerts_sent(ledger)] == ["50%"]
    # One notifier of two delivered it: sent, not sent twice.
    run_cost(ledger, 2, "2.5")
    both = [DownNotifier(), ListNotifier(sent)]
    assert [a.threshold for a in check_budget_alerts(ledger, TAGS, notifiers=both)] == ["80%"]
    assert check_budget_alerts(ledger, TAGS, notifiers=both) == []


def test_forecast_without_a_schedule_is_what_is_committed(ledger: Ledger) -> None:
    ledger.set_budget("project=churn", "month", "100", actor="lead")
    run_cost(ledger, 1, "7")
    f = budget_outlook(ledger, ledger.budgets()[0], NoSchedule()).forecast
    assert (f.forecast_usd, f.low_usd, f.high_usd, f.runs_left) == (D(7), D(7), D(7), 0)


def test_an_alert_message_gives_every_figure_to_the_micro_dollar() -> None:
    from costaware.notifications.budget import BudgetAlert

    # A forecast of $12.000009 read "$12.00" beside "spent $0.000009": figures that did not add up.
    alert = BudgetAlert("project=churn/month", "2026-11", "forecast", D("0.000009"), D(10), D("12.000009"))
    assert alert.message == (
        "costaware budget 'project=churn/month' (2026-11) is forecast to end the period at $12.000009, "
        "above its cap: spent $0.000009 of $10.00, forecast $12.000009"
    )


def test_a_credit_above_the_periods_spend_leaves_forecasts_and_alerts_working(ledger: Ledger) -> None:
    # Refused as "committed spend -40 ... must be >= 0": the Cost page, `budget show` and every alert check of
    # the scope failed for the rest of the period.
    ledger.set_budget("project=churn", "month", "100", actor="lead")
    ledger.set_budget("*", "month", "1000", actor="lead")
    run_cost(ledger, 1, "10")
    refund = LedgerEntry("retrain", "run1", "train", Kind.COMPUTE, D(-50), tags=TAGS, note="provider credit")
    ledger.record(refund)
    by_label = {b.label: b for b in ledger.budgets()}
    f = budget_outlook(ledger, by_label["project=churn/month"], NoSchedule()).forecast
    assert (f.committed_usd, f.forecast_usd) == (D(-40), D(-40))
    assert check_budget_alerts(ledger, TAGS, notifiers=[]) == []
    run_cost(ledger, 2, "95")  # $55 net: past 50 % of $100, the credit counted
    assert [a.threshold for a in check_budget_alerts(ledger, TAGS, notifiers=[])] == ["50%"]


def test_a_budget_rule_picks_its_own_thresholds_and_notifier(ledger: Ledger, tmp_path: Path) -> None:
    from costaware.adapters.ledger.governance import set_alert_rule

    ledger.set_budget("project=churn", "month", "10", actor="lead")
    ledger.set_budget("*", "month", "1000", actor="lead")
    out = tmp_path / "alerts.txt"
    set_alert_rule(
        ledger,
        "project=churn/month",
        thresholds="90%",
        notifiers=[{"class": "file_notifier.FileNotifier", "kwargs": {"path": str(out)}}],
        actor="lead",
    )
    run_cost(ledger, 1, "6")
    assert check_budget_alerts(ledger, TAGS, notifiers=[]) == []  # 60 %: below its only threshold
    run_cost(ledger, 2, "3")
    (alert,) = check_budget_alerts(ledger, TAGS, notifiers=[])
    assert (alert.budget, alert.threshold) == ("project=churn/month", "90%")
    assert out.read_text().splitlines() == [alert.message]
    assert [e.action for e in audit_log(ledger)][-2:] == ["alert_rule", "alert"]
    # The audit says who is told (two SMTP rules read the same before), secrets masked.
    rule = next(e for e in audit_log(ledger) if e.action == "alert_rule")
    assert rule.details["notifiers"] == [
        {"class": "file_notifier.FileNotifier", "kwargs": {"path": str(out)}}
    ]
    set_alert_rule(
        ledger,
        "project=churn/month",
        thresholds=None,
        notifiers=[
            {"class": "x.SlackNotifier", "kwargs": {"channel": "#ml", "webhook_url": "https://h/s3cret"}}
        ],
        actor="lead",
    )
    last = audit_log(ledger, action="alert_rule")[-1]
    assert last.details["notifiers"] == [
        {"class": "x.SlackNotifier", "kwargs": {"channel": "#ml", "webhook_url": "***"}}
    ]


def test_the_audit_masks_secrets_by_any_common_name_nested_and_in_urls() -> None:
    # The trail is append-only: passwd, smtp_pass, auth, bearer and a DSN's password stayed in it in clear.
    from costaware.adapters.ledger.governance import audited_notifier

    kwargs = {
        "to": "lead@example.com",
        "passwd": "p1",
        "smtp_pass": "p2",
        "auth": ("user", "p3"),
        "bearer": "p4",
        "dsn": "postgresql://u:p5@h/db",
        "endpoint": "https://bot:p6@chat.example.com/hook",
        "options": {"api_token": "p7", "retries": 3},
    }
    shown = audited_notifier({"class": "x.Notifier", "kwargs": kwargs})["kwargs"]
    assert not any(f"p{i}" in str(shown) for i in range(1, 8)), shown
    assert shown["to"] == "lead@example.com" and shown["options"] == {"api_token": "***", "retries": 3}
    assert shown["endpoint"] == "https://bot:***@chat.example.com/hook"


@pytest.mark.parametrize(
    ("budget", "thresholds", "notifiers", "match"),
    [
        ("project=nope/month", None, None, "no budget 'project=nope/month'"),
        ("project=churn/month", "ninety", None, "alert threshold 'ninety'"),
        ("project=churn/month", None, [{"kwargs": {}}], "is not {'class'"),
        ("project=churn/month", None, [{"class": "a.B", "kwargs": [1]}], "kwargs of alert notifier 'a.B'"),
    ],
)
def test_bad_alert_rules_are_refused(
    ledger: Ledger, budget: str, thresholds: str | None, notifiers: Any, match: str
) -> None:
    from costaware.adapters.ledger.governance import alert_rules, set_alert_rule

    ledger.set_budget("project=churn", "month", "10", actor="lead")
    with pytest.raises(ConfigurationError, match=match):
        set_alert_rule(ledger, budget, thresholds=thresholds, notifiers=notifiers, actor="lead")
    assert alert_rules(ledger) == {} and [e.action for e in audit_log(ledger)] == ["budget_set"]


def test_a_budgets_own_notifiers_see_the_alert_and_names_only_and_a_refused_rule_falls_back(
    ledger: Ledger, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A rule comes from a ledger row: its templates could read `conn`/`var` secrets from the task's context.
    from types import SimpleNamespace

    from costaware.adapters.ledger.governance import set_alert_rule

    ledger.set_budget("project=churn", "month", "10", actor="lead")
    ledger.set_budget("*", "month", "10", actor="lead")
    out = tmp_path / "sent.txt"
    message = "{{ costaware_alert.threshold }}|{{ dag_id }}|{{ conn is defined }}|{{ var is defined }}"
    notifier = [{"class": "file_notifier.FileNotifier", "kwargs": {"path": str(out), "message": message}}]
    set_alert_rule(ledger, "project=churn/month", thresholds="50%", notifiers=notifier, actor="lead")
    # A rule stored before notifiers were checked (or written by hand): refused, and the defaults send it.
    with ledger.engine.begin() as conn:
        conn.execute(
            text("INSERT INTO costaware_alert_rules (budget, thresholds, notifiers, updated_at) VALUES "
                 "('*/month', '50%', '[{\"class\": \"os.system\", \"kwargs\": {\"command\": \"true\"}}]', "
                 "CURRENT_TIMESTAMP)")
        )  # fmt: skip
    run_cost(ledger, 1, "6")
    sent: list[str] = []
    context = {
        "conn": "SECRET",
        "var": "SECRET",
        "ti": SimpleNamespace(dag_id="retrain", run_id="r", task_id="t"),
    }
    alerts = check_budget_alerts(ledger, TAGS, context=context, notifiers=[ListNotifier(sent, "{{ conn }}")])
    assert sorted(a.budget for a in alerts) == ["*/month", "project=churn/month"]
    assert out.read_text() == "50%|retrain|False|False\n"
    assert set(rule_context({**context, "costaware_alert": {}})) == {
        "costaware_alert",
        "dag_id",
        "run_id",
        "task_id",
    }
    assert sent == ["SECRET"]  # the [costaware] notifiers (the deployment's config) get the whole context
    assert "the alert notifiers of budget */month are refused" in caplog.text


def test_a_stored_rule_whose_templates_cannot_render_is_refused_by_name_and_the_defaults_send_it(
    ledger: Ledger, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A rule stored before `alerts set` checked templates failed every alert of its budget on the worker with
    # only "'ti' is undefined": given back unsent, failed again at every check of the period.
    from types import SimpleNamespace

    from costaware.adapters.ledger.governance import set_alert_rule

    ledger.set_budget("project=churn", "month", "10", actor="lead")
    out = tmp_path / "sent.txt"
    message = "{{ ti.task_id }}: {{ costaware_alert.message }}"
    notifier = [{"class": "file_notifier.FileNotifier", "kwargs": {"path": str(out), "message": message}}]
    set_alert_rule(ledger, "project=churn/month", thresholds="50%", notifiers=notifier, actor="lead")
    run_cost(ledger, 1, "6")
    sent: list[str] = []
    context = {"ti": SimpleNamespace(dag_id="retrain", run_id="r", task_id="t")}
    (alert,) = check_budget_alerts(ledger, TAGS, context=context, notifiers=[ListNotifier(sent)])
    assert sent == [alert.message] and not out.exists()  # the [costaware] notifiers sent it
    assert (
        "the alert rule of budget 'project=churn/month' has notifier 'file_notifier.FileNotifier' with "
        "template '{{ ti.task_id }}: {{ costaware_alert.message }}', which fails to render (UndefinedError: "
        "'ti' is undefined): a budget's own notifiers see only ['costaware_alert', 'dag_id', 'run_id', "
        "'task_id', 'ds', 'ts']"
    ) in caplog.text
    assert "costaware alerts set --scope project=churn --period month --notifiers '[...]'" in caplog.text
    assert "notifier FileNotifier failed" not in caplog.text  # refused by name, never tried and failed


def test_a_check_that_lost_the_claim_does_not_render_a_refused_rule_again(
    ledger: Ledger, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # With [costaware] notifiers to fall back on, the rule's templates are tried only once the alert is
    # claimed: tried before it (as where nothing else would send it), every worker that lost the claim
    # rendered the rule and logged its refusal for an alert another worker sent.
    from types import SimpleNamespace

    from costaware.adapters.ledger.governance import set_alert_rule

    ledger.set_budget("project=churn", "month", "10", actor="lead")
    message = "{{ ti.task_id }}: {{ costaware_alert.message }}"
    notifier = [
        {"class": "file_notifier.FileNotifier", "kwargs": {"path": str(tmp_path / "o"), "message": message}}
    ]
    set_alert_rule(ledger, "project=churn/month", thresholds="50%", notifiers=notifier, actor="lead")
    run_cost(ledger, 1, "6")
    context = {"ti": SimpleNamespace(dag_id="retrain", run_id="r", task_id="t")}
    assert len(check_budget_alerts(ledger, TAGS, context=context, notifiers=[ListNotifier([])])) == 1
    caplog.clear()
    assert check_budget_alerts(ledger, TAGS, context=context, notifiers=[ListNotifier([])]) == []
    assert "are refused" not in caplog.text


def test_a_stored_rule_renders_what_its_notifier_renders_and_only_a_failing_template_is_refused(
    ledger: Ledger, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Every name outside rule_context was refused, guarded ones that render too, and kwargs the notifier never
    # renders (not in its template_fields): rules that worked went to the [costaware] notifiers.
    from types import SimpleNamespace

    from costaware.adapters.ledger.governance import set_alert_rule

    ledger.set_budget("project=churn", "month", "10", actor="lead")
    out = tmp_path / "{{ ti.task_id }}.txt"  # not a template field of FileNotifier: never rendered
    message = "{% if ti is defined %}{{ ti.task_id }}{% endif %}{{ costaware_alert.threshold }}|{{ ti }}"
    notifier = [{"class": "file_notifier.FileNotifier", "kwargs": {"path": str(out), "message": message}}]
    set_alert_rule(ledger, "project=churn/month", thresholds="50%", notifiers=notifier, actor="lead")
    run_cost(ledger, 1, "6")
    sent: list[str] = []
    context = {"ti": SimpleNamespace(dag_id="retrain", run_id="r", task_id="t")}
    assert len(check_budget_alerts(ledger, TAGS, context=context, notifiers=[ListNotifier(sent)])) == 1
    assert out.read_text() == "50%|\n" and sent == []
    assert "refused" not in caplog.text


def test_a_refused_rule_without_configured_notifiers_keeps_its_alert_unsent_until_it_is_fixed(
    ledger: Ledger, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Refused with no [costaware] notifiers, the alert was claimed and recorded as sent, delivered nowhere:
    # fixing the rule never sent it.
    from costaware.adapters.ledger.governance import set_alert_rule

    ledger.set_budget("*", "month", "10", actor="lead")
    out = tmp_path / "sent.txt"
    bad = [
        {"class": "file_notifier.FileNotifier", "kwargs": {"path": str(out), "message": "{{ ti.task_id }}"}}
    ]
    set_alert_rule(ledger, "*/month", thresholds="50%", notifiers=bad, actor="lead")
    run_cost(ledger, 1, "6")
    assert check_budget_alerts(ledger, TAGS, context={}, notifiers=[]) == []
    assert alerts_sent(ledger) == [] and not out.exists()
    assert "no [costaware] alert_notifiers are set: its alerts are kept unsent" in caplog.text
    assert "costaware alerts set --scope '*' --period month" in caplog.text  # quoted: a shell globs *
    good = [{"class": "file_notifier.FileNotifier", "kwargs": {"path": str(out)}}]
    set_alert_rule(ledger, "*/month", thresholds="50%", notifiers=good, actor="lead")
    (alert,) = check_budget_alerts(ledger, TAGS, context={}, notifiers=[])
    assert out.read_text() == f"{alert.message}\n"
    assert [t for _, _, t in alerts_sent(ledger)] == ["50%"]


def test_a_refused_rule_without_configured_notifiers_is_said_and_audited_once_and_sent_once_fixed(
    ledger: Ledger, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Every check (each task end in scope) claimed it again, logged it as refused, audited two lines and gave
    # the claim back: 10 checks, 21 audit lines and 10 errors; the lower threshold was claimed as covered.
    from costaware.adapters.ledger.governance import set_alert_rule

    ledger.set_budget("*", "month", "10", actor="lead")
    out = tmp_path / "sent.txt"
    bad = [
        {"class": "file_notifier.FileNotifier", "kwargs": {"path": str(out), "message": "{{ ti.task_id }}"}}
    ]
    set_alert_rule(ledger, "*/month", thresholds="50%,80%", notifiers=bad, actor="lead")
    run_cost(ledger, 1, "9")
    for _ in range(10):
        assert check_budget_alerts(ledger, TAGS, context={}, notifiers=[]) == []
    alert_lines = [e for e in audit_log(ledger) if e.action == "alert"]
    assert [(e.details["threshold"], e.details["unsent"]) for e in alert_lines] == [
        ("80%", "its alert rule is refused")
    ]
    assert caplog.text.count("are refused") == 1 and caplog.text.count("passed 80%") == 1
    assert alerts_sent(ledger) == [] and not out.exists()
    good = [{"class": "file_notifier.FileNotifier", "kwargs": {"path": str(out)}}]
    set_alert_rule(ledger, "*/month", thresholds="50%,80%", notifiers=good, actor="lead")
    (alert,) = check_budget_alerts(ledger, TAGS, context={}, notifiers=[])
    assert alert.threshold == "80%" and out.read_text() == f"{alert.message}\n"
    assert check_budget_alerts(ledger, TAGS, context={}, notifiers=[]) == []
    assert sorted(t for _, _, t in alerts_sent(ledger)) == ["50%", "80%"]


def test_a_bad_configured_alert_setting_silences_no_budget(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # One typo in [costaware] alert_thresholds or alert_notifiers stopped every budget's alerts.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__ALERT_THRESHOLDS", "50,bogus")
    monkeypatch.setenv("AIRFLOW__COSTAWARE__ALERT_NOTIFIERS", '[{"class": "x.Y"')
    ledger.set_budget("project=churn", "month", "10", actor="lead")
    run_cost(ledger, 1, "6")
    alerts = check_budget_alerts(ledger, TAGS)
    assert [a.threshold for a in alerts] == ["50%"]  # the built-in thresholds stood in
    assert (
        "[costaware] alert_thresholds ('50,bogus'" in caplog.text
        and "defaults 50%,80%,100%,forecast" in caplog.text
    )
    assert "[costaware] alert_notifiers is refused" in caplog.text


def test_a_percent_airflow_cfg_cannot_read_silences_no_budget(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # configparser's InterpolationSyntaxError for `alert_thresholds = 50%,80%` escaped the check after
    # every try: no budget's alert was sent, those with rules of their own neither.
    ledger.set_budget("project=churn", "month", "10", actor="lead")
    run_cost(ledger, 1, "6")
    with airflow_cfg("costaware", "alert_thresholds = 50%,80%\n"):
        alerts = check_budget_alerts(ledger, TAGS, notifiers=[])
    assert [a.threshold for a in alerts] == ["50%"]  # the built-in thresholds stood in
    assert "alert_thresholds in airflow.cfg cannot be read" in caplog.text and "'%%'" in caplog.text


def test_thresholds_a_caller_passes_are_its_own_and_a_bad_one_raises(ledger: Ledger) -> None:
    ledger.set_budget("project=churn", "month", "10", actor="lead")
    with pytest.raises(ConfigurationError, match="'1' is ambiguous"):
        check_budget_alerts(ledger, TAGS, thresholds="1", notifiers=[])


def test_the_alerts_after_a_try_count_a_bounded_number_of_runs(
    ledger: Ledger, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # They run in the task process, last: a per-minute DAG's month counted to 10,000 runs per budget kept
    # the listener past [core] task_success_overtime, and Airflow killed it before any alert went out.
    from types import SimpleNamespace

    from costaware.adapters.airflow_schedule import TASK_MAX_RUNS
    from costaware.notifications.budget import alerts_after_spend

    class Counting:
        asked = 0
        inner = CronTriggerTimetable("* * * * *", timezone="UTC")

        def next_dagrun_info(self, **kwargs: Any) -> Any:
            self.asked += 1
            return self.inner.next_dagrun_info(**kwargs)

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    for scope in ("project=churn", "team=ml", "*"):
        ledger.set_budget(scope, "month", "1000")
    ledger.set_budget("project=churn", "day", "100")
    run_cost(ledger, 1)
    timetable = Counting()
    ti = SimpleNamespace(
        dag_id="retrain",
        task=SimpleNamespace(dag=SimpleNamespace(timetable=timetable), log=None),
        get_template_context=dict,
    )
    alerts_after_spend(ti, TAGS)
    # One count per window (the day's, the month's), each stopped at the task's bound.
    assert 0 < timetable.asked <= 2 * TASK_MAX_RUNS


def test_the_alerts_after_a_try_of_an_operator_in_no_dag_are_checked(
    ledger: Ledger, ledger_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An operator run outside any DAG raises RuntimeError for its .dag, which getattr's default does not
    # catch: the whole check of the try's budgets was skipped with "budget alerts ... not checked".
    from types import SimpleNamespace

    from airflow.providers.standard.operators.empty import EmptyOperator

    from costaware.notifications.budget import alerts_after_spend

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger.set_budget("project=churn", "month", "10")
    run_cost(ledger, 1, "6")
    task = EmptyOperator(task_id="train")
    with pytest.raises(RuntimeError):
        task.dag  # noqa: B018  the operator is in no DAG: what the check must survive
    ti = SimpleNamespace(dag_id="adhoc", task_id="train", task=task, get_template_context=dict)
    alerts_after_spend(ti, TAGS)
    assert "not checked" not in caplog.text
    assert [threshold for _, _, threshold in alerts_sent(ledger, "project=churn/month")] == ["50%"]


def test_a_running_search_holds_money_as_a_search_not_as_a_dag_named_search(ledger: Ledger) -> None:
    # holding_dags read a budgeted_search's holds (search/<id>/<trial>/<rung>, search/<id>/tail) as DAG
    # 'search': the Cost page's DAG list and a budget's involved DAGs named a DAG that does not exist.
    from costaware.adapters.ledger.governance import holding_dags

    ledger.set_budget("project=churn", "month", "100")
    ledger.reserve("project=churn", "5", holder="search/s1/3/0")
    ledger.reserve("project=churn", "5", holder="search/s2/tail")
    ledger.reserve("project=churn", "5", holder="churn/manual__1/train/-1")
    ledger.reserve("project=churn", "5", holder="churn/manual__1/copy/-1/egress")
    assert holding_dags(ledger) == {"search s1", "search s2", "churn"}


def test_a_stored_threshold_refused_today_is_left_out_and_said_and_the_rules_others_work_on_postgresql(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Stored before the 2-decimal limit: its claim did not fit alerts_sent.threshold (16 characters), so
    # every alert check of the budget failed on PostgreSQL, with an error blaming the ledger's URL.
    from services import fresh_postgres_database

    from costaware.adapters.ledger.governance import alert_rules, set_alert_rule

    ledger = Ledger.from_url(fresh_postgres_database(postgres_url, "old_rule"))
    ledger.set_budget("project=churn", "month", "10", actor="lead")
    set_alert_rule(ledger, "project=churn/month", thresholds="50%", notifiers=None, actor="lead")
    with ledger.engine.begin() as conn:  # as an earlier version stored it
        conn.execute(text("UPDATE costaware_alert_rules SET thresholds = '10.00000000000001%,50%,80.123%'"))
    run_cost(ledger, 1, "6")
    assert [a.threshold for a in check_budget_alerts(ledger, TAGS, notifiers=[])] == ["50%"]
    assert alert_rules(ledger)["project=churn/month"].refused_thresholds == ("10.00000000000001%", "80.123%")
    assert (
        "alert threshold '10.00000000000001%' of budget project=churn/month is left out" in caplog.text
        and "costaware alerts set --scope project=churn --period month --thresholds '50%'" in caplog.text
        and "'80.123%' has 3 decimal places" in caplog.text
    )
    ledger.dispose()


def test_a_stored_threshold_refused_today_is_warned_of_once_not_at_every_check(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Each alert check reads the budget's rule again: the same warning filled the log at every check.
    from costaware.adapters.ledger.governance import set_alert_rule

    ledger.set_budget("project=churn", "month", "10", actor="lead")
    set_alert_rule(ledger, "project=churn/month", thresholds="50%", notifiers=None, actor="lead")
    with ledger.engine.begin() as conn:  # as an earlier version stored it
        conn.execute(text("UPDATE costaware_alert_rules SET thresholds = '10.00000000000001%,50%'"))
    run_cost(ledger, 1, "6")
    for _ in range(3):
        check_budget_alerts(ledger, TAGS, notifiers=[])
    assert caplog.text.count("alert threshold '10.00000000000001%' of budget project=churn/month") == 1
    with ledger.engine.begin() as conn:  # another value stored wrong is said again
        conn.execute(text("UPDATE costaware_alert_rules SET thresholds = '10.00000000000001%,60%'"))
    check_budget_alerts(ledger, TAGS, notifiers=[])
    assert caplog.text.count("alert threshold '10.00000000000001%' of budget project=churn/month") == 2
    assert "--thresholds '60%'" in caplog.text
