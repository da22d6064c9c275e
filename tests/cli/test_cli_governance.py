"""``costaware budget show`` forecasts and ``costaware audit`` against a real SQLite ledger."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from airflow.timetables.trigger import CronTriggerTimetable
from airflow_cfg import airflow_cfg

from costaware import Ledger
from costaware.adapters.airflow_schedule import TimetableSchedule
from costaware.adapters.ledger.governance import alert_rules
from costaware.cli import main
from costaware.cli.commands.governance import forecast_rows
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import Kind, LedgerEntry
from costaware.notifications.budget import notifiers_from_spec

pytestmark = pytest.mark.usefixtures("clock")

SMTP = "airflow.providers.smtp.notifications.smtp.SmtpNotifier"


def spend(ledger: Ledger, run: str, usd: str) -> None:
    ledger.record(
        LedgerEntry(
            dag_id="retrain",
            run_id=run,
            task_id="train",
            kind=Kind.COMPUTE,
            usd=Decimal(usd),
            tags={"project": "churn"},
        )
    )


def test_budget_show_json_has_the_forecast_fields(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger.from_url(ledger_url)
    assert main(["--ledger-url", ledger_url, "budget", "set", "--scope", "project=churn", "--period", "month",
                 "--cap-usd", "100"]) == 0  # fmt: skip
    spend(ledger, "r1", "4")
    spend(ledger, "r2", "6")
    capsys.readouterr()
    args = ["--ledger-url", ledger_url, "budget", "show", "--scope", "project=churn", "--no-schedule"]
    assert main([*args, "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["forecast_usd"], row["forecast_low_usd"], row["forecast_high_usd"]) == ("10.000000",) * 3
    assert row["forecast_above_cap"] is False and row["runs_left"] == 0
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "$10.00 ($10.00-$10.00)" in out and "! the forecast passes" not in out
    # Past the cap: the row's "!" is explained under the table.
    spend(ledger, "r3", "95")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert " !" in out and "! the forecast passes the cap by the period's end" in out


def test_forecast_rows_count_the_timetable_runs(ledger_url: str) -> None:
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "day", "100")
    spend(ledger, "r1", "4")
    spend(ledger, "r2", "6")
    six_hourly = TimetableSchedule({"retrain": CronTriggerTimetable("0 */6 * * *", timezone="UTC")})
    (row,) = forecast_rows(ledger, ledger.usage("project=churn"), schedule=six_hourly)
    runs = row["runs_left"]
    assert 1 <= runs <= 4  # the 6-hourly runs still to come today
    assert Decimal(row["forecast_usd"]) == 10 + 5 * runs
    low, high = Decimal(row["forecast_low_usd"]), Decimal(row["forecast_high_usd"])
    assert (low, high) == (10 + 4 * runs, 10 + 6 * runs)


def test_audit_lists_who_did_what(ledger_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100", actor="lead")
    ledger.set_budget("project=churn", "month", "120", actor="ann")
    capsys.readouterr()
    assert main(["--ledger-url", ledger_url, "audit", "--format", "json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [(e["actor"], e["action"], e["details"]["new_cap_usd"]) for e in entries] == [
        ("lead", "budget_set", "100.000000"),
        ("ann", "budget_set", "120.000000"),
    ]
    assert main(["--ledger-url", ledger_url, "audit", "--since", "2999-01-01"]) == 0
    assert "no audit entries since 2999-01-01" in capsys.readouterr().out
    assert main(["--ledger-url", ledger_url, "audit", "--action", "budget_set"]) == 0
    out = capsys.readouterr().out
    assert "ann" in out and "budget_set" in out and "project=churn/month" in out
    # Left-aligned: the details column was padded to the widest row's 400 characters.
    header = out.splitlines()[0]
    rows = [line for line in out.splitlines() if "budget_set" in line]
    assert rows and all(line.index("{") == header.index("details") for line in rows)


def test_cli_budget_set_records_the_user(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "carol")
    monkeypatch.setenv("LOGNAME", "carol")
    assert main(["--ledger-url", ledger_url, "budget", "set", "--scope", "team=ml", "--period", "day",
                 "--cap-usd", "5"]) == 0  # fmt: skip
    from costaware.adapters.ledger.audit import audit_log

    (entry,) = audit_log(Ledger.from_url(ledger_url))
    assert entry.actor == "carol" and entry.details["old_cap_usd"] is None


def test_audit_rejects_a_bad_since(ledger_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--ledger-url", ledger_url, "audit", "--since", "yesterday"])
    assert "'yesterday' is not an ISO date" in capsys.readouterr().err
    # A compact date was told to add a time zone ("e.g. 2026-11-01T00:00+01:00"), as if it were a time.
    with pytest.raises(SystemExit):
        main(["--ledger-url", ledger_url, "audit", "--since", "20261201"])
    assert "'20261201' is a date without dashes: write 2026-12-01 (midnight UTC)" in capsys.readouterr().err


def test_alerts_set_and_list(ledger_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    spec = '[{"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier", "kwargs": {"to": "a@b.c"}}]'
    base = ["--ledger-url", ledger_url, "alerts"]
    assert main([*base, "set", "--scope", "project=churn", "--period", "month", "--thresholds", "80,forecast",
                 "--notifiers", spec]) == 0  # fmt: skip
    assert "80%, forecast; 1 notifier(s)" in capsys.readouterr().out
    assert main([*base, "list"]) == 0  # text columns, left-aligned under their headers as the docs show
    header, _, line = capsys.readouterr().out.splitlines()[:3]
    assert header.startswith("budget               thresholds    notifiers     sent")
    assert line.startswith("project=churn/month  80%,forecast  SmtpNotifier  -")
    assert main([*base, "list", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    smtp_class = "airflow.providers.smtp.notifications.smtp.SmtpNotifier"
    assert row == {
        "budget": "project=churn/month",
        "thresholds": ["80%", "forecast"],
        "refused_thresholds": [],
        "notifiers": [smtp_class],
        "sent": [],
        "covered": {},
        "per_run": False,
    }
    # Back to the [costaware] defaults: said as such, not a blank cell that reads as "no alerts".
    assert main([*base, "set", "--scope", "project=churn", "--period", "month", "--thresholds", ""]) == 0
    capsys.readouterr()
    assert main([*base, "list"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("project=churn")]
    assert line.split()[1:3] == ["(defaults)", "SmtpNotifier"]
    assert main([*base, "list", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["thresholds"] is None


def test_alerts_list_says_when_the_defaults_stand_in_for_a_bad_setting(
    ledger_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # "(defaults)" read as the configured ones while every worker refused them.
    Ledger.from_url(ledger_url).set_budget("project=churn", "month", "100")
    assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    assert "warning" not in capsys.readouterr().err
    monkeypatch.setenv("AIRFLOW__COSTAWARE__ALERT_THRESHOLDS", "50,bogus")
    monkeypatch.setenv("AIRFLOW__COSTAWARE__ALERT_NOTIFIERS", "[{")
    assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    err = capsys.readouterr().err
    assert (
        "warning: [costaware] alert_thresholds ('50,bogus'" in err
        and "workers use 50%,80%,100%,forecast" in err
    )
    assert "warning: [costaware] alert_notifiers is refused" in err


def test_alerts_list_warns_of_a_configured_notifier_reading_a_field_an_alert_lacks(
    ledger_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rendered with the task's context (StrictUndefined), it failed every send; nothing said so before one.
    Ledger.from_url(ledger_url).set_budget("project=churn", "month", "100")
    spec = [{"class": SMTP, "kwargs": {"to": "a@b", "subject": "{{ costaware_alert.mesage }}"}}]
    monkeypatch.setenv("AIRFLOW__COSTAWARE__ALERT_NOTIFIERS", json.dumps(spec))
    assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    assert (
        f"warning: [costaware] alert_notifiers: notifier '{SMTP}': its template "
        "'{{ costaware_alert.mesage }}' reads costaware_alert.mesage, which an alert does not have (did you "
        "mean 'message'?): this notifier fails to send every alert (where another notifier delivers it, the "
        "alert counts as sent and this one misses it; where none does, it is given back unsent and tried "
        "again at each check)"
    ) in capsys.readouterr().err
    spec[0]["kwargs"]["subject"] = "{{ costaware_alert.message }}"
    monkeypatch.setenv("AIRFLOW__COSTAWARE__ALERT_NOTIFIERS", json.dumps(spec))
    assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_alerts_list_takes_guarded_reads_and_checks_a_notifier_missing_here(
    ledger_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A guarded read renders under the DAG's StrictUndefined, yet was warned of (the `is defined` one
    # twice); a class this machine lacks (Slack, on the workers) skipped the field check and was said to be
    # "refused (...; install its provider)", as though the workers refused it.
    Ledger.from_url(ledger_url).set_budget("project=churn", "month", "100")
    guarded = {
        "to": "a@b",
        "subject": "{{ costaware_alert.team | default('ml') }}",
        "html_content": "{% if costaware_alert.owner is defined %}{{ costaware_alert.owner }}{% endif %}",
    }
    slack = "airflow.providers.slack.notifications.slack.SlackNotifier"
    spec = [
        {"class": SMTP, "kwargs": guarded},
        {"class": slack, "kwargs": {"text": "{{ costaware_alert.mesage }} {{ costaware_alert.mesage }}"}},
    ]
    monkeypatch.setenv("AIRFLOW__COSTAWARE__ALERT_NOTIFIERS", json.dumps(spec))
    assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        f"costaware: warning: [costaware] alert_notifiers: notifier class '{slack}' cannot be imported here "
        "(ModuleNotFoundError: No module named 'airflow.providers.slack'); an alert fails to send unless the "
        "workers can import it",
        f"costaware: warning: [costaware] alert_notifiers: notifier '{slack}': its template "
        "'{{ costaware_alert.mesage }} {{ costaware_alert.mesage }}' reads costaware_alert.mesage, which an "
        "alert does not have (did you mean 'message'?): this notifier fails to send every alert (where "
        "another notifier delivers it, the alert counts as sent and this one misses it; where none does, it "
        "is given back unsent and tried again at each check)",
    ]
    # A misspelt module of a package installed here is still refused, as the workers refuse it.
    typo = [{"class": SMTP.replace(".smtp.SmtpNotifier", ".smpt.SmtpNotifier"), "kwargs": {"to": "a@b"}}]
    monkeypatch.setenv("AIRFLOW__COSTAWARE__ALERT_NOTIFIERS", json.dumps(typo))
    assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    assert "warning: [costaware] alert_notifiers is refused (" in capsys.readouterr().err


def test_alerts_list_warns_of_a_percent_airflow_cfg_cannot_read(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `alert_thresholds = 50%,80%` in airflow.cfg (as governance.md showed it) is an interpolation error
    # there: `alerts list` ended in configparser's traceback after its table.
    Ledger.from_url(ledger_url).set_budget("project=churn", "month", "100")
    with airflow_cfg("costaware", "alert_thresholds = 50%,80%,100%,forecast\n"):
        assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    err = capsys.readouterr().err
    assert "warning: [costaware] alert_thresholds in airflow.cfg cannot be read" in err
    assert "write each '%' as '%%' there" in err and "workers use 50%,80%,100%,forecast" in err


def test_a_configured_threshold_setting_refused_names_each_bad_item_and_the_good_ones_set_aside(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `5,50`: the first bad item alone was named, and the defaults stood in for the 50% too, unsaid.
    Ledger.from_url(ledger_url).set_budget("project=churn", "month", "100")
    with airflow_cfg("costaware", "alert_thresholds = 5,50,abc,forecast\n"):
        assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    err = capsys.readouterr().err
    assert "alert threshold '5' is ambiguous: write '5%' for 5 percent of the cap" in err
    assert "; alert threshold 'abc' is neither a percentage of the cap" in err
    assert "(the setting is refused whole: its 50%,forecast are not used either)" in err
    assert err.rstrip().endswith("the workers use 50%,80%,100%,forecast")


def test_alerts_set_names_each_bad_threshold_and_the_good_ones_set_aside(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--thresholds 5,abc,50` named the '5' alone: fixed, the 'abc' was refused next time, and nothing said
    # the 50% went unset with them.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    assert main([*args, "--thresholds", "5,abc,50"]) == 2
    err = capsys.readouterr().err
    assert "alert thresholds '5,abc,50': alert threshold '5' is ambiguous: write '5%'" in err
    assert "; alert threshold 'abc' is neither a percentage of the cap" in err
    assert "(the list is refused whole: its 50% is not used either)" in err
    assert alert_rules(ledger) == {}
    # One bad item alone is said as before, without the list around it.
    assert main([*args, "--thresholds", "abc"]) == 2
    assert "error: alert threshold 'abc' is neither" in capsys.readouterr().err


def test_a_doubled_percent_in_airflow_cfg_is_read_as_one(ledger_url: str) -> None:
    from costaware.notifications.budget import configured_thresholds

    with airflow_cfg("costaware", "alert_thresholds = 80%%,forecast\n"):
        assert configured_thresholds() == ("80%", "forecast")


def test_alerts_list_says_a_per_run_budget_has_no_alerts(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # It read "(defaults)", as if the default alerts were sent for it; none ever is.
    Ledger.from_url(ledger_url).set_budget("project=churn", "run", "5")
    assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("project=churn")]
    assert "(defaults)" not in line and "per run: its cap stops the run, no alerts" in line
    assert main(["--ledger-url", ledger_url, "alerts", "list", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["per_run"] is True and row["thresholds"] is None


def test_alerts_set_refuses_what_is_not_an_airflow_notifier_and_run_budgets(
    ledger_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # os.system with {"command": ...} was stored, and a worker ran the command when the alert fired.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    ledger.set_budget("project=churn", "run", "5")
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn"]
    marker = tmp_path / "ran"
    spec = json.dumps([{"class": "os.system", "kwargs": {"command": f"touch {marker}"}}])
    assert main([*args, "--period", "month", "--notifiers", spec]) == 2
    assert "alert notifier 'os.system' is not an Airflow notifier class" in capsys.readouterr().err
    assert alert_rules(ledger) == {}
    # A rule written past the CLI (an older release, the database by hand) is refused by the worker too.
    with pytest.raises(ConfigurationError, match=r"'os\.system' is not an Airflow notifier class"):
        notifiers_from_spec(spec)
    assert not marker.exists()
    assert main([*args, "--period", "run", "--thresholds", "80%"]) == 2
    assert "is per run: alerts are checked for day, month and total budgets only" in capsys.readouterr().err


def test_alerts_set_refuses_a_class_its_module_lacks(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The module imports, the name does not exist: a typo, kept with a warning before; no alert ever sent.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    typo = json.dumps(
        [{"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifer", "kwargs": {"to": "a@b"}}]
    )
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    assert main([*args, "--notifiers", typo]) == 2
    assert "has no 'SmtpNotifer': did you mean airflow.providers.smtp.notifications.smtp.SmtpNotifier?" in (
        capsys.readouterr().err
    )
    assert alert_rules(ledger) == {}


def test_alerts_set_refuses_a_kwarg_the_notifier_passes_on_and_its_base_refuses(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # SmtpNotifier takes **kwargs and hands them to BaseNotifier, which takes none: `subjet` was stored, and
    # the worker refused the rule at every alert ("unexpected keyword argument 'subjet'"): none was sent.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    typo = json.dumps([{"class": SMTP, "kwargs": {"to": "a@b", "subjet": "{{ costaware_alert.message }}"}}])
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    assert main([*args, "--notifiers", typo]) == 2
    err = capsys.readouterr().err
    assert f"notifier '{SMTP}' takes no kwarg 'subjet' (did you mean 'subject'?): fix the name" in err
    assert alert_rules(ledger) == {}
    # What the base takes (context) and what a notifier keeps from its own **kwargs are taken.
    taken = [{"class": SMTP, "kwargs": {"to": "a@b", "context": {}}}]
    assert main([*args, "--notifiers", json.dumps(taken)]) == 0
    own = [{"class": "file_notifier.HeaderFileNotifier", "kwargs": {"path": "/dev/null", "x_team": "ml"}}]
    assert main([*args, "--notifiers", json.dumps(own)]) == 0
    assert alert_rules(ledger)["project=churn/month"].notifiers == own


def test_alerts_set_passes_on_a_kwargs_notifiers_own_type_error(
    ledger_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A **kwargs notifier's own check ("priority must be an int") was reported as "takes no kwarg
    # 'priority'", and its list of kwargs named `context`, which Airflow passes in.
    (tmp_path / "checked_notifier.py").write_text(
        "from airflow.sdk import BaseNotifier\n"
        "class PriorityNotifier(BaseNotifier):\n"
        "    def __init__(self, text, **kwargs):\n"
        "        if not isinstance(kwargs.get('priority', 0), int):\n"
        "            raise TypeError('priority must be an int')\n"
        "        super().__init__()\n"
        "        self.text = text\n"
        "    def notify(self, context):\n"
        "        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    Ledger.from_url(ledger_url).set_budget("project=churn", "month", "100")
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    spec = [{"class": "checked_notifier.PriorityNotifier", "kwargs": {"text": "x", "priority": "high"}}]
    assert main([*args, "--notifiers", json.dumps(spec)]) == 2
    err = capsys.readouterr().err
    assert (
        "notifier 'checked_notifier.PriorityNotifier' refuses kwargs ['priority', 'text']: priority must be "
        "an int: fix its kwargs"
    ) in err
    assert "takes no kwarg" not in err
    # Python's own refusal is still named, with the close name, and without `context` in what it takes.
    typo = [{"class": SMTP, "kwargs": {"to": "a@b", "subjet": "x"}}]
    assert main([*args, "--notifiers", json.dumps(typo)]) == 2
    err = capsys.readouterr().err
    assert "takes no kwarg 'subjet' (did you mean 'subject'?): fix the name in its kwargs (it takes to, " in (
        err
    )
    assert "context" not in err


def test_alerts_set_refuses_a_misspelt_module_of_a_package_installed_here(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 'smpt' for 'smtp' was kept with "cannot be imported here" as a warning: the workers could not import it
    # either, and every alert of the budget failed to send.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    typo = SMTP.replace(".smtp.SmtpNotifier", ".smpt.SmtpNotifier")
    assert main([*args, "--notifiers", json.dumps([{"class": typo, "kwargs": {"to": "a@b"}}])]) == 2
    assert (
        f"notifier class '{typo}': package 'airflow.providers.smtp.notifications' has no module 'smpt': did "
        f"you mean {SMTP}?"
    ) in capsys.readouterr().err
    assert alert_rules(ledger) == {}
    # A provider missing here (under the namespace airflow.providers) may be on the workers: a warning.
    pager = [{"class": "airflow.providers.pagerduty.notifications.pagerduty.PagerdutyNotifier", "kwargs": {}}]
    assert main([*args, "--notifiers", json.dumps(pager)]) == 0
    assert "cannot be imported here (ModuleNotFoundError" in capsys.readouterr().err
    assert alert_rules(ledger)["project=churn/month"].notifiers == pager
    # A rule or [costaware] alert_notifiers written past the CLI: the workers say the same, not "install its
    # provider", which would not fix it.
    with pytest.raises(ConfigurationError) as refused:
        notifiers_from_spec([{"class": typo, "kwargs": {"to": "a@b"}}])
    assert str(refused.value).endswith(f"; fix the module path (did you mean {SMTP}?)")
    with pytest.raises(ConfigurationError, match=r"; install its provider$"):
        notifiers_from_spec(pager)


def test_alerts_set_keeps_a_module_a_newer_provider_may_have_where_the_close_one_lacks_the_class(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # ...notifications.sesv2 (a newer amazon provider, maybe on the workers) was refused "did you mean
    # ...notifications.ses.SesV2Notifier?", though ses has no SesV2Notifier: a suggestion that cannot import.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    newer = [{"class": "airflow.providers.amazon.aws.notifications.sesv2.SesV2Notifier", "kwargs": {}}]
    assert main([*args, "--notifiers", json.dumps(newer)]) == 0
    err = capsys.readouterr().err
    assert "cannot be imported here (ModuleNotFoundError" in err
    assert "did you mean" not in err
    assert alert_rules(ledger)["project=churn/month"].notifiers == newer
    # The workers (where it is not installed either) say to install its provider, not the bad suggestion.
    with pytest.raises(ConfigurationError, match=r"; install its provider$"):
        notifiers_from_spec(newer)
    # A close module with a class of a close name only is no sure typo either: kept with the warning.
    two_typos = [{"class": "airflow.providers.smtp.notifications.smpt.SmtpNotifer", "kwargs": {"to": "a@b"}}]
    assert main([*args, "--notifiers", json.dumps(two_typos)]) == 0
    assert "did you mean" not in capsys.readouterr().err


def test_alerts_set_refuses_templates_a_budgets_own_notifier_cannot_render(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # {{ ti.task_id }} was stored; each alert then failed "'ti' is undefined", was given back unsent and
    # failed again at every check of the period.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    unseen = {"to": "a@b", "subject": "{{ ti.task_id }}", "html_content": ["{{ var.value.x }} {{ ds }}"]}
    spec = json.dumps([{"class": SMTP, "kwargs": unseen}])
    assert main([*args, "--notifiers", spec]) == 2
    err = capsys.readouterr().err
    assert (
        "its template '{{ ti.task_id }}' fails to render (UndefinedError: 'ti' is undefined) with what a "
        "budget's own notifiers see"
    ) in err
    assert "'costaware_alert', 'dag_id', 'run_id', 'task_id', 'ds', 'ts'" in err
    assert alert_rules(ledger) == {}
    seen = {"to": "a@b", "subject": "{{ costaware_alert.message }} {{ dag_id }}/{{ run_id }} {{ range(1) }}"}
    assert main([*args, "--notifiers", json.dumps([{"class": SMTP, "kwargs": seen}])]) == 0


@pytest.mark.parametrize("cls", [SMTP, "no.such.Notifier"])  # built here, or only its kwargs read
def test_alerts_set_refuses_a_field_an_alert_does_not_have(
    ledger_url: str, capsys: pytest.CaptureFixture[str], cls: str
) -> None:
    # Rendered without a DAG, {{ costaware_alert.mesage }} is empty, not an error: it was stored, and every
    # alert of the budget went out with an empty subject.
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    for template, field, hint in [
        ("{{ costaware_alert.mesage }}", "mesage", "did you mean 'message'? "),
        ("spent {{ costaware_alert['spent'] }}", "spent", "did you mean 'spent_usd'? "),
    ]:
        spec = [{"class": cls, "kwargs": {"to": "a@b", "subject": template}}]
        assert main([*args, "--notifiers", json.dumps(spec)]) == 2
        assert (
            f"its template {template!r} reads costaware_alert.{field}, which an alert does not have, and "
            f"would send it empty: {hint}an alert has budget, period, threshold, spent_usd, cap_usd, "
            "forecast_usd, message"
        ) in capsys.readouterr().err
        assert alert_rules(ledger) == {}
    fields = "{% for k, v in costaware_alert.items() %}{{ k }}{% endfor %}{{ costaware_alert['cap_usd'] }}"
    spec = [{"class": cls, "kwargs": {"to": "a@b", "subject": fields}}]
    assert main([*args, "--notifiers", json.dumps(spec)]) == 0
    assert alert_rules(ledger)["project=churn/month"].notifiers == spec


def test_alerts_set_takes_guarded_templates_that_render(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Any name outside what a rule's notifiers see was refused, even guarded ones that render on the workers.
    from costaware.adapters.ledger.governance import alert_rules

    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    guarded = {
        "to": "a@b",
        "subject": "{% if ti is defined %}{{ ti.task_id }}{% endif %}{{ conn is defined }}",
    }
    spec = [{"class": SMTP, "kwargs": guarded}]
    assert main([*args, "--notifiers", json.dumps(spec)]) == 0
    assert alert_rules(ledger)["project=churn/month"].notifiers == spec
    assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_alerts_list_warns_of_a_stored_rule_whose_templates_cannot_render(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Stored before `alerts set` checked templates: the workers refuse it, and the list showed it as fine.
    from costaware.adapters.ledger.governance import set_alert_rule

    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    spec = [{"class": SMTP, "kwargs": {"to": "a@b", "subject": "{{ ti.task_id }}"}}]
    set_alert_rule(ledger, "project=churn/month", thresholds=None, notifiers=spec, actor="lead")
    assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    err = capsys.readouterr().err
    assert (
        f"warning: the alert rule of budget 'project=churn/month' has notifier '{SMTP}' with template "
        "'{{ ti.task_id }}', which fails to render (UndefinedError: 'ti' is undefined)"
    ) in err
    assert "costaware alerts set --scope project=churn --period month --notifiers '[...]'" in err
    fixed = json.dumps([{"class": SMTP, "kwargs": {"to": "a@b", "subject": "{{ task_id }}"}}])
    args = ["alerts", "set", "--scope", "project=churn", "--period", "month", "--notifiers", fixed]
    assert main(["--ledger-url", ledger_url, *args]) == 0
    assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_alerts_set_changes_what_it_is_given_and_keeps_the_rest(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before, setting the notifiers reset the thresholds to the defaults (and the reverse).
    Ledger.from_url(ledger_url).set_budget("project=churn", "month", "100")
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    smtp = '[{"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier", "kwargs": {"to": "a@b.c"}}]'
    assert main([*args, "--thresholds", "50,80"]) == 0
    assert main([*args, "--notifiers", smtp]) == 0
    assert "alerts of budget 'project=churn/month': 50%, 80%; 1 notifier(s)" in capsys.readouterr().out
    assert main([*args, "--thresholds", "90"]) == 0
    assert "90%; 1 notifier(s)" in capsys.readouterr().out
    # A class this machine cannot import is kept (the workers may have it) with a warning naming it.
    assert main([*args, "--notifiers", '[{"class": "no.such.Notifier"}]']) == 0
    out = capsys.readouterr()
    assert "90%; 1 notifier(s)" in out.out
    assert (
        "warning: notifier class 'no.such.Notifier' cannot be imported here (ModuleNotFoundError" in out.err
    )
    assert main([*args, "--thresholds", "", "--notifiers", "[]"]) == 0  # back to the [costaware] ones
    assert "the [costaware] defaults; the [costaware] notifiers" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--notifiers", "{not json"], "--notifiers '{not json' is not JSON"),
        (["--notifiers", '{"class": "a.B"}'], "--notifiers must be a JSON list"),
        (["--thresholds", "lots"], "alert threshold 'lots'"),
        ([], "nothing to set for budget 'project=churn/month': give thresholds, notifiers or both"),
        (  # stored, it failed every alert of the budget when the worker built it
            ["--notifiers", f'[{{"class": "{SMTP}", "kwargs": {{"subject": "x"}}}}]'],
            f"notifier '{SMTP}' cannot take kwargs ['subject']: missing a required argument: 'to': fix its "
            "kwargs (it takes to, from_email, subject, ",
        ),
    ],
)
def test_alerts_set_refuses_bad_input(
    ledger_url: str, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    Ledger.from_url(ledger_url).set_budget("project=churn", "month", "100")
    args = ["--ledger-url", ledger_url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    assert main([*args, *extra]) == 2
    assert message in capsys.readouterr().err
    from costaware.adapters.ledger.governance import alert_rules

    assert alert_rules(Ledger.from_url(ledger_url)) == {}


def test_alerts_set_on_a_ledger_that_does_not_exist_makes_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A mistyped --ledger-url: it made an empty ledger there, then said its budget did not exist.
    typo = tmp_path / "ledgr.db"
    args = [
        "--ledger-url",
        f"sqlite:///{typo}",
        "alerts",
        "set",
        "--scope",
        "project=churn",
        "--period",
        "month",
    ]
    assert main([*args, "--thresholds", "50%"]) == 2
    assert f"no ledger at {typo}: check --ledger-url" in capsys.readouterr().err
    assert not typo.exists()


def test_a_bad_configured_threshold_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every budget without its own rule reads it; the error named only the threshold.
    from costaware.notifications.budget import configured_thresholds

    monkeypatch.setenv("AIRFLOW__COSTAWARE__ALERT_THRESHOLDS", "80,abc%")
    with pytest.raises(ConfigurationError, match=r"\[costaware\] alert_thresholds \('80,abc%', or AIRFLOW__"):
        configured_thresholds()


def test_a_stored_notifier_that_cannot_be_built_is_refused_by_name() -> None:
    # A TypeError here escaped the worker's fallback: no alert of the budget was sent, none audited.
    with pytest.raises(ConfigurationError, match=r"notifier '.*SmtpNotifier' cannot be made with kwargs"):
        notifiers_from_spec(json.dumps([{"class": SMTP, "kwargs": {"subject": "x"}}]))


def test_a_configured_notifier_with_a_misspelt_class_says_so_not_install_its_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # [costaware] alert_notifiers with SmtpNotifer: "cannot be imported ...; install its provider", though
    # the provider was installed; the workers' log and `alerts list` said the same.
    from costaware.notifications.budget import configured_notifiers

    misspelt = SMTP.replace("SmtpNotifier", "SmtpNotifer")
    monkeypatch.setenv("AIRFLOW__COSTAWARE__ALERT_NOTIFIERS", json.dumps([{"class": misspelt, "kwargs": {}}]))
    with pytest.raises(ConfigurationError) as refused:
        configured_notifiers()
    assert "has no 'SmtpNotifer' (did you mean " + SMTP + "?); fix the class name" in str(refused.value)
    assert "install its provider" not in str(refused.value)
    monkeypatch.setenv("AIRFLOW__COSTAWARE__ALERT_NOTIFIERS", '[{"class": "no.such.Notifier"}]')
    with pytest.raises(
        ConfigurationError, match=r"'no\.such\.Notifier' cannot be imported.*install its provider"
    ):
        configured_notifiers()


def test_alerts_list_shows_a_percentage_covered_by_a_higher_one_as_not_sent(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # One spend from 0 to 90 % sends "passed 80%" alone; alerts list read "80%@..., 50%@..." as both sent.
    from costaware.notifications.budget import check_budget_alerts

    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "10")
    spend(ledger, "r1", "9")
    sent = check_budget_alerts(ledger, "project=churn", thresholds="50%,80%", notifiers=[])
    assert [a.threshold for a in sent] == ["80%"]
    period = sent[0].period_key
    assert main(["--ledger-url", ledger_url, "alerts", "list"]) == 0
    assert f"80%@{period}, 50%@{period} (covered by 80%)" in capsys.readouterr().out
    assert main(["--ledger-url", ledger_url, "alerts", "list", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["sent"] == [f"80%@{period}"] and row["covered"] == {f"50%@{period}": "80%"}


@pytest.mark.parametrize(
    ("template", "warned"),
    [
        ("{% if costaware_alert.owner is defined %}{{ costaware_alert.owner }}{% endif %}", False),
        # A test anywhere hid every read of the field: these fail under StrictUndefined.
        ("{% if costaware_alert.owner is defined %}x{% endif %} by {{ costaware_alert.owner }}", True),
        ("{% if costaware_alert.owner is undefined %}{{ costaware_alert.owner }}{% endif %}", True),
        ("{% if params.owner is defined %}{{ costaware_alert.owner }}{% endif %}", True),
        ("{% if costaware_alert.owner is defined %}x{% else %}{{ costaware_alert.owner }}{% endif %}", True),
    ],
)
def test_only_a_read_inside_its_own_is_defined_block_counts_as_guarded(template: str, warned: bool) -> None:
    from costaware.notifications.budget import unknown_alert_fields

    found = unknown_alert_fields({"class": SMTP, "kwargs": {"subject": template}}, skip_guarded=True)
    assert [field for _, field, _ in found] == (["owner"] if warned else [])


MANY_THRESHOLDS = ",".join(f"{percent}.25%" for percent in range(1, 50))


@pytest.mark.parametrize(
    ("thresholds", "said"),
    [
        # Set, then every check of the budget failed on PostgreSQL: the threshold is stored per alert sent
        # in 16 characters, and its alerts were lost.
        ("10.00000000000001%", "alert threshold '10.00000000000001%' has 14 decimal places: at most 2"),
        # Refused by PostgreSQL, in an error blamed on the ledger's URL.
        (
            MANY_THRESHOLDS,
            f"are {len(MANY_THRESHOLDS)} characters as stored ({MANY_THRESHOLDS!r}): at most 256; give fewer",
        ),
    ],
)
def test_alerts_set_refuses_thresholds_postgresql_cannot_store_naming_them(
    postgres_url: str, capsys: pytest.CaptureFixture[str], thresholds: str, said: str
) -> None:
    from services import fresh_postgres_database

    url = fresh_postgres_database(postgres_url, "thresholds")
    Ledger.from_url(url).set_budget("project=churn", "month", "100")
    args = ["--ledger-url", url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    assert main([*args, "--thresholds", thresholds]) == 2
    err = capsys.readouterr().err
    assert said in err, err
    assert alert_rules(Ledger.from_url(url)) == {}


def test_thresholds_with_two_decimals_alert_on_postgresql(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from services import fresh_postgres_database

    from costaware.notifications.budget import check_budget_alerts

    url = fresh_postgres_database(postgres_url, "thresholds")
    ledger = Ledger.from_url(url)
    ledger.set_budget("project=churn", "month", "100")
    args = ["--ledger-url", url, "alerts", "set", "--scope", "project=churn", "--period", "month"]
    assert main([*args, "--thresholds", "10.25%,999.99%"]) == 0
    spend(ledger, "r1", "11")
    (alert,) = check_budget_alerts(ledger, {"project": "churn"}, notifiers=[])
    assert alert.threshold == "10.25%"


def test_alerts_list_flags_a_stored_threshold_the_checks_leave_out(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Stored before the 2-decimal limit and left out of every check, it was listed as if it worked.
    from sqlalchemy import text

    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    base = ["--ledger-url", ledger_url, "alerts"]
    assert main([*base, "set", "--scope", "project=churn", "--period", "month", "--thresholds", "50%"]) == 0
    with ledger.engine.begin() as conn:
        conn.execute(text("UPDATE costaware_alert_rules SET thresholds = '10.00000000000001%,50%'"))
    capsys.readouterr()
    assert main([*base, "list"]) == 0
    assert "50% (refused, not checked: 10.00000000000001%)" in capsys.readouterr().out
    assert main([*base, "list", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["thresholds"], row["refused_thresholds"]) == (["50%"], ["10.00000000000001%"])
