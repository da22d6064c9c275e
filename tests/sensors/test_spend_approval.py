"""``SpendCapSensor(on_exceeded="approve")``: the HITL answer turns into a reservation or a failure/skip.

The request itself (``upsert_hitl_detail`` + ``TaskAwaitingInput``) needs a running task supervisor: it is
driven end to end, with a real approval through the REST API, in tests/integration/test_governance.py.
Here ``approval_complete`` gets the events Airflow's HITL sends on resume.
"""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal as D
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from costaware import Ledger
from costaware.adapters.ledger.audit import audit_log
from costaware.core.errors import BudgetExceededError
from costaware.sensors.spend_approval import PassedBudget, approval_body, decision
from costaware.sensors.spend_cap import SpendCapSensor

ANSWERED = datetime(2026, 11, 24, 0, 31, tzinfo=timezone.utc)


@pytest.fixture
def env_ledger(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "10", actor="lead")
    ledger.reserve("project=churn", "8", holder="retrain/earlier/train/-1")
    return ledger


def context() -> dict[str, Any]:
    return {"ti": SimpleNamespace(dag_id="retrain", run_id="manual__1", task_id="spend_gate", map_index=-1)}


def gate(**kwargs: Any) -> SpendCapSensor:
    args: dict[str, Any] = {
        "task_id": "spend_gate",
        "scope": "project=churn",
        "estimated_usd": "4",
        "for_task_id": "train",
        "on_exceeded": "approve",
        "approvers": ["ann"],
    }
    return SpendCapSensor(**{**args, **kwargs})


def event(option: str, user: str | None = "ann", timedout: bool = False) -> dict[str, Any]:
    return {
        "chosen_options": [option],
        "params_input": {},
        "responded_at": ANSWERED,
        "responded_by_user": None if user is None else {"id": user, "name": user},
        "timedout": timedout,
    }


def test_an_approval_reserves_the_overage_and_is_audited(
    env_ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(BudgetExceededError):  # $8 of $10 reserved: $4 more does not fit
        env_ledger.reserve("project=churn", "4")
    result = gate(scope={"project": "churn"}).approval_complete(context(), event("Approve"))
    # As every amount and scope is written: it read "approved $4 past the cap of {'project': 'churn'}".
    assert "ann approved $4.00 past the cap of project=churn (reservation" in capsys.readouterr().out
    assert result["approved_by"] == "ann" and result["usd"] == "4.000000"
    (usage,) = env_ledger.usage("project=churn")
    assert usage.reserved_usd == 12 and usage.left_usd == -2
    (approval,) = audit_log(env_ledger, action="approval")
    assert (approval.actor, approval.target) == ("ann", "retrain/manual__1/train/-1")
    assert approval.details["usd"] == "4"
    assert approval.details["responded_at"] == ANSWERED.isoformat()
    assert approval.details["reservation_id"] == result["reservation_id"]


@pytest.mark.parametrize(
    ("on_rejected", "answer", "raised", "who"),
    [
        ("fail", event("Reject"), AirflowFailException, "ann"),
        ("skip", event("Reject"), AirflowSkipException, "ann"),
        ("fail", event("Reject", user=None, timedout=True), AirflowFailException, "timeout"),
        ("skip", {"error": "timed out", "error_type": "timeout"}, AirflowSkipException, "timeout"),
    ],
)
def test_a_rejection_or_timeout_fails_or_skips_and_is_audited(
    env_ledger: Ledger, on_rejected: str, answer: dict[str, Any], raised: type[Exception], who: str
) -> None:
    # The error said who, not what to do next: the person reading the failed task was left to guess.
    # The amount as every other one is written ("4" read "spending $4").
    spent = r"spending \$4\.00 past the budget 'project=churn/month \(\d{4}-\d\d\)' was not approved"
    with pytest.raises(raised, match=rf"{spent} \({who}\): nothing was reserved; to ask again, clear"):
        gate(on_rejected=on_rejected).approval_complete(context(), answer)
    assert env_ledger.usage("project=churn")[0].reserved_usd == 8  # nothing more reserved
    (rejection,) = audit_log(env_ledger, action="rejection")
    assert rejection.actor == who and rejection.details["usd"] == "4"


def test_an_answer_outside_the_options_fails_without_reserving(env_ledger: Ledger) -> None:
    with pytest.raises(ValueError, match="approval answer \\['Maybe'\\]"):
        decision(event("Maybe"))
    assert env_ledger.usage("project=churn")[0].reserved_usd == 8


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"on_rejected": "retry"}, "on_rejected='retry': use one of fail, skip"),
        ({"approvers": "ann"}, "approvers='ann': give a list"),
        ({"approvers": ["ann", ""]}, "approvers=\\['ann', ''\\]"),
        ({"on_exceeded": "ask"}, "on_exceeded='ask': use one of wait, skip, fail, approve"),
        ({"on_exceeded": "wait"}, "approvers=\\['ann'\\] are asked only with on_exceeded='approve'"),
        # Accepted and never used: a refusal under "fail" failed the run, not the skip asked for.
        (
            {"on_exceeded": "fail", "approvers": [], "on_rejected": "skip"},
            "on_rejected='skip' applies only with on_exceeded='approve'",
        ),
        # Accepted and never used: the gate waited its sensor timeout.
        (
            {"on_exceeded": "wait", "approvers": [], "approval_timeout": timedelta(hours=1)},
            "approval_timeout=datetime.timedelta\\(seconds=3600\\) applies only with on_exceeded='approve'",
        ),
        (
            {"on_exceeded": "fail", "approvers": [], "approval_timeout": None},
            "approval_timeout=None applies only with on_exceeded='approve' .* not 'fail'",
        ),
        ({"approval_timeout": 4}, "approval_timeout=4: give a positive timedelta"),
        ({"approval_timeout": timedelta(seconds=-5)}, "give a positive timedelta"),
        ({"reservation_ttl": 3600}, "reservation_ttl=3600: give a positive timedelta"),
    ],
)
def test_bad_arguments_fail_at_parse_time(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        gate(**kwargs)


def test_the_default_approval_timeout_written_out_is_no_mistake_with_another_on_exceeded() -> None:
    # Compared by identity, the documented default given explicitly failed the DAG's parse.
    waits = gate(on_exceeded="wait", approvers=[], approval_timeout=timedelta(hours=12))
    assert waits.approval_timeout == timedelta(hours=12)


@pytest.mark.parametrize(
    "shared",
    [
        {"approval_timeout": timedelta(hours=4)},
        {"approval_timeout": None},
        {"approvers": ["ann"], "approval_timeout": timedelta(hours=4), "on_rejected": "skip"},
    ],
)
def test_approval_settings_in_default_args_reach_an_approve_gate_and_pass_a_wait_gate_beside_it(
    shared: dict[str, Any],
) -> None:
    # Airflow gives every operator the DAG's default_args it takes: a wait gate beside an approve gate
    # failed the DAG's parse for settings it was never given.
    from airflow.sdk import DAG

    with DAG("retrain", schedule=None, default_args=shared):
        asks = SpendCapSensor(
            task_id="ask", scope="project=churn", estimated_usd="4", for_task_id="t", on_exceeded="approve"
        )
        waits = SpendCapSensor(task_id="wait", scope="project=churn", estimated_usd="4", for_task_id="t")
    assert asks.approval_timeout == shared["approval_timeout"]
    assert asks.approvers == shared.get("approvers", [])
    assert asks.on_rejected == shared.get("on_rejected", "fail")
    assert waits.on_exceeded == "wait"
    # Given to the wait gate itself, they are still refused.
    with pytest.raises(ValueError, match="applies only with on_exceeded='approve'"):
        SpendCapSensor(
            task_id="wait2",
            scope="project=churn",
            estimated_usd="4",
            for_task_id="t",
            approval_timeout=timedelta(hours=5),
        )


LEADS = ["ann"]
HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("name", "value"), [("approvers", LEADS), ("on_rejected", "skip"), ("approval_timeout", HOUR)]
)
def test_an_approval_setting_written_on_a_wait_gate_is_refused_though_default_args_hold_the_same_object(
    name: str, value: Any
) -> None:
    # Told apart by identity, a module's constant or an interned "skip" written on the wait gate itself
    # was taken as filled in from default_args, and accepted, never read.
    from airflow.sdk import DAG

    with DAG("retrain", schedule=None, default_args={name: value}):
        with pytest.raises(ValueError, match=f"{name}=.* only with on_exceeded='approve'"):
            SpendCapSensor(
                task_id="wait", scope="project=churn", estimated_usd="4", for_task_id="t", **{name: value}
            )
        # Filled in from default_args, it is still accepted.
        waits = SpendCapSensor(task_id="wait2", scope="project=churn", estimated_usd="4", for_task_id="t")
    assert waits.on_exceeded == "wait"


def test_a_mapped_wait_gate_refuses_approval_settings_written_on_it_and_takes_default_args_ones() -> None:
    from airflow.sdk import DAG

    with DAG("retrain", schedule=None, default_args={"approvers": LEADS, "on_rejected": "skip"}):
        shared = SpendCapSensor.partial(task_id="wait", scope="project=churn", for_task_id="t")
        own = SpendCapSensor.partial(task_id="own", scope="project=churn", for_task_id="t", approvers=LEADS)
        mapped = shared.expand(estimated_usd=["1", "2"])
        mapped_own = own.expand(estimated_usd=["1"])
    assert mapped.unmap({"estimated_usd": "1"}).approvers == LEADS  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"approvers=\['ann'\] are asked only with on_exceeded='approve'"):
        mapped_own.unmap({"estimated_usd": "1"})


@pytest.mark.parametrize("approvers", [None, []])
def test_no_approvers_asks_any_user_who_may_answer(approvers: Any) -> None:
    # approvers=None (HITLOperator's assigned_users=None) failed the DAG's parse with "'NoneType' object
    # is not iterable", naming neither the argument nor what to give.
    assert gate(approvers=approvers).approvers == []
    assert gate(on_exceeded="fail", approvers=approvers).approvers == []


@pytest.mark.parametrize(
    ("approvers", "said"),
    [
        # Its keys were taken silently: the values may have been the user ids.
        ({"ann": "lead"}, "approvers={'ann': 'lead'} is a dict, whose keys or values could be the user ids: "
         "give a list of Airflow user ids, e.g. ['ann']"),
        # Shown as read, a list: not what the DAG file holds.
        (("ann", ""), "approvers=('ann', ''): give a list"),
        ({"", "ann"}, f"approvers={ {'', 'ann'}!r}: give a list"),
        (frozenset({"ann", ""}), f"approvers={frozenset({'ann', ''})!r}: give a list"),
    ],
    # A set's repr follows the process's string hashes: ids of their own, or pytest-xdist's workers collect
    # different test names and refuse to run.
    ids=["dict", "tuple", "set", "frozenset"],
)  # fmt: skip
def test_refused_approvers_are_named_as_given(approvers: Any, said: str) -> None:
    with pytest.raises(ValueError) as refused:
        gate(approvers=approvers)
    assert str(refused.value).startswith(said), str(refused.value)


def test_approvers_given_as_a_set_are_read_in_one_order() -> None:
    # A set's order changes from one process to the next (string hashing is salted): one order every parse.
    assert gate(approvers={"lead", "ann", "bob"}).approvers == ["ann", "bob", "lead"]
    assert gate(approvers=frozenset({"lead", " ann"})).approvers == ["ann", "lead"]


def test_approvers_given_as_a_generator_keep_their_names() -> None:
    # all(...) used a generator (or map) up: approvers ended [], "any user may approve", leads named or not.
    users = ["ann", "lead"]
    assert gate(approvers=(u for u in users)).approvers == ["ann", "lead"]
    assert gate(approvers=map(str.strip, [" ann", "lead "])).approvers == ["ann", "lead"]
    # Named as given, with the names it gave (a generator's repr shows none).
    with pytest.raises(
        ValueError, match=r"^approvers=<generator object .*> \(it gave \['ann', ''\]\): give a list"
    ):
        gate(approvers=(u for u in ["ann", ""]))
    # One map() shared by two gates is empty at the second: [] there let any user approve.
    leads = map(str.strip, [" ann", "lead "])
    assert gate(approvers=leads).approvers == ["ann", "lead"]
    with pytest.raises(ValueError, match=r"gave no names \(a generator or map\(\) is read once"):
        gate(approvers=leads)


def test_approvers_that_are_no_list_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"approvers=5: give a list of Airflow user ids, e\.g\. \['ann'\]"):
        gate(approvers=5)


def test_without_hitl_the_dag_does_not_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "airflow.sdk.execution_time.hitl", None)  # as on Airflow < 3.3
    with pytest.raises(ValueError, match="needs Airflow's human-in-the-loop tasks"):
        gate()
    gate(on_exceeded="fail", approvers=[])  # the other policies do not need it


def test_the_request_shows_budget_spent_cap_need_and_forecast() -> None:
    body = approval_body(
        budgets=[PassedBudget("project=churn/month (2026-11)", D("8.5"), D("10"), forecast_usd=D("31"))],
        needed_usd="4.000125",
        task="t",
        approvers=["ann", "bob"],
    )
    for text in (
        "Budget project=churn/month (2026-11)\n\n",
        "spent and reserved: $8.50\n",
        "cap: $10.00\n",
        "Task t needs an estimated $4.000125.",
        "with this request: $35.000125",  # the pending request is in the forecast
        "Who may answer: ann, bob.",
        "past the cap;",
    ):
        assert text in body
    # Markdown paragraphs: the budget, the figures, the need, who answers and what the buttons do.
    assert body.count("\n\n") == 4 and "\n\n- spent" in body
    assert "any user" in approval_body(budgets=[PassedBudget("b", D(1), D(1))], needed_usd="1", task="t")
    assert gate().approval_timeout == timedelta(hours=12)


def test_the_request_reads_the_same_through_the_api_and_rendered_in_the_ui() -> None:
    # The UI's Required actions page renders the body as Markdown; GET .../hitlDetails returns it raw, where
    # "**Budget** `project=churn/month`" and "**Who may answer:** `ann`" were markup to read around.
    markdown_it = pytest.importorskip("markdown_it")
    body = approval_body(
        budgets=[
            PassedBudget("project=churn/month (2026-11)", D("8.5"), D("10"), forecast_usd=D("31")),
            PassedBudget("*/day (2026-11-30)", D("0"), D("3")),
        ],
        needed_usd="4",
        task="train_model",
        approvers=["ann", "_lead_", "a*b*", "x<y>"],
    )
    assert "**" not in body and "`" not in body
    assert "Budget project=churn/month (2026-11)\n" in body and "Budget */day (2026-11-30)\n" in body
    assert "Task train_model needs" in body  # no escape where Markdown sees no markup
    # What the UI shows, tags stripped, is the raw text less the escapes it needed.
    rendered = html.unescape(re.sub(r"<[^>]+>", "", markdown_it.MarkdownIt().render(body)))
    shown = [line for line in rendered.splitlines() if line]
    assert shown == [line.lstrip("- ").replace("\\", "") for line in body.splitlines() if line]
    assert "Who may answer: ann, _lead_, a*b*, x<y>." in shown


def test_the_request_lists_every_budget_it_would_pass(env_ledger: Ledger) -> None:
    # An approval reserves past every covering budget; the request once showed the first one only.
    env_ledger.set_budget("*", "day", "3")  # $4 passes it alone
    env_ledger.set_budget("project=churn", "total", "100")  # has room: not listed
    env_ledger.set_budget("project=churn,study=s1", "total", "50", cap_gpu_hours="1")  # narrower
    passed = gate()._passed_budgets(
        SimpleNamespace(run_id="manual__1", dag_id="retrain", map_index=-1), D(4), D(0)
    )
    names = [b.name.split(" (")[0] for b in passed]
    assert names == ["project=churn/month", "*/day"]
    assert [(b.committed_usd, b.cap_usd) for b in passed] == [(D(8), D(10)), (D(0), D(3))]
    body = approval_body(budgets=passed, needed_usd=D(4), task="train")
    assert body.count("\n\nBudget ") == 1 and body.startswith("Budget ")
    assert "Budget */day (" in body and "past the caps of both budgets above;" in body
    three = approval_body(budgets=[*passed, passed[0]], needed_usd=D(4), task="train")
    assert "past the caps of all 3 budgets above;" in three


def test_the_request_weighs_the_budgets_without_the_tasks_hold_the_approval_replaces(
    env_ledger: Ledger,
) -> None:
    # The gate, run again for $4 while its task holds $1, is refused and asks: an approval replaces that hold.
    # The request counted it as committed too: it showed $9 of $10 where $8 is, and listed a catch-all with
    # room for the $4 ($0 committed of $4.50) as a budget the approval would pass.
    env_ledger.set_budget("*", "day", "4.5")
    own = env_ledger.reserve("project=churn", "1", holder="retrain/manual__1/train/-1")
    ti = SimpleNamespace(run_id="manual__1", dag_id="retrain", map_index=-1)

    def passed() -> list[tuple[str, D, D, D | None]]:
        return [
            (b.name.split(" (")[0], b.committed_usd, b.cap_usd, b.forecast_usd)
            for b in gate()._passed_budgets(ti, D(4), D(0))
        ]

    # The period-end forecast too: it counted the $1 hold ($9) beside the request's $4 that replaces it.
    assert passed() == [("project=churn/month", D(8), D(10), D(8))]
    env_ledger.release(own.id)
    assert passed() == [("project=churn/month", D(8), D(10), D(8))]  # as the approval's reserve weighs them


def test_a_gpu_hour_cap_passed_is_shown_in_gpu_hours(env_ledger: Ledger) -> None:
    env_ledger.set_budget("team=ml", "month", "100", cap_gpu_hours="1")
    (passed,) = gate(scope="team=ml")._passed_budgets(
        SimpleNamespace(run_id="manual__1", dag_id="retrain", map_index=-1), D(4), D(10)
    )
    assert passed.gpu_hours == (D(0), D(1))
    body = approval_body(budgets=[passed], needed_usd=D(4), needed_gpu_hours=D(10), task="train")
    assert (
        "GPU-hours spent and reserved: 0 of a 1 GPU-hour cap" in body
    )  # not the ledger's 0.000000 of 1.000000
    assert "needs an estimated $4.00 and 10 GPU-hours" in body


def test_trigger_params_that_override_the_defaults_are_audited_once(env_ledger: Ledger) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, Param

    with DAG(
        "retrain",
        schedule=None,
        params={"train_budget_usd": Param(2.0), "team": Param("ml")},
        tags=["project:churn"],
    ):
        spend_gate = SpendCapSensor(
            task_id="spend_gate", scope="project=churn", estimated_usd="1", for_task_id="train", timeout=5
        )
        EmptyOperator(task_id="train")
    ctx = {
        **context(),
        "dag_run": SimpleNamespace(conf={"train_budget_usd": 9.0, "team": "ml"}, triggering_user_name="ann"),
    }
    assert spend_gate.poke(ctx)
    assert spend_gate.poke(ctx)  # a retried gate does not record the run twice
    (override,) = audit_log(env_ledger, action="override")
    assert (override.actor, override.target) == ("ann", "retrain/manual__1")
    assert override.details == {"train_budget_usd": {"default": 2.0, "given": 9.0}}


def test_a_misspelt_param_in_the_run_s_conf_fails_the_gate_before_it_reserves(env_ledger: Ledger) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, Param

    with DAG("retrain", schedule=None, params={"train_budget_usd": Param(2.0), "team": Param("ml")}):
        spend_gate = SpendCapSensor(
            task_id="spend_gate", scope="project=churn", estimated_usd="1", for_task_id="train", timeout=5
        )
        EmptyOperator(task_id="train")
    # Airflow ran it: train_budget_usd kept its default, and the gate reserved that, not the $9 asked.
    typo = {"train_budjet_usd": 9.0, "my_own_key": "x"}
    ctx = {**context(), "dag_run": SimpleNamespace(conf=typo, triggering_user_name="ann")}
    with pytest.raises(
        AirflowFailException,
        match=r"'train_budjet_usd' \(did you mean 'train_budget_usd'\? 'train_budget_usd' kept its default\)",
    ) as refused:
        spend_gate.poke(ctx)
    assert "my_own_key" not in str(refused.value)  # a key like no param is the DAG's own business
    assert [r.holder for r in env_ledger.open_reservations()] == ["retrain/earlier/train/-1"]
    # A param's name with a word added, or a plural, is a key of the DAG's own (a GCP project_id, teams).
    meant = {"train_budget_usd": 9.0, "my_own_key": "x", "teams": ["a", "b"], "team_name": "ml"}
    ctx["dag_run"] = SimpleNamespace(conf=meant, triggering_user_name="ann")
    assert spend_gate.poke(ctx)


@pytest.mark.parametrize(
    ("key", "refused"),
    [
        ("train_budget", True),  # cut short: the budget kept its default
        ("train_budget_us", True),
        ("train_budget_usdd", True),
        ("train_budget_usds", True),  # no plural beside an amount
        ("project_id", False),  # a word added: the DAG's own key
        ("projectid", False),  # with or without its underscore, as team_id and teamname
        ("projectx", True),
        ("teams", False),
        ("projet", True),
        ("project_", True),  # an underscore or one letter is no word
        ("project_i", True),
        ("train_budget_usd_", True),
        ("train_budget_usd_d", True),
        ("train_budget_usd_max", True),  # nothing close to an amount is left alone
    ],
)
def test_which_conf_keys_close_to_a_param_are_taken_for_typos(key: str, refused: bool) -> None:
    from costaware.core.errors import ConfigurationError
    from costaware.core.run_conf import check_run_conf

    params = ["train_budget_usd", "project", "team"]
    if refused:
        with pytest.raises(ConfigurationError, match=rf"'{key}' \(did you mean"):
            check_run_conf({key: 1}, params, own_keys=True)
    else:
        check_run_conf({key: 1}, params, own_keys=True)  # the gate leaves a key of the DAG's own alone
        with pytest.raises(ConfigurationError, match=rf"'{key}' \(did you mean '(project|team)'"):
            check_run_conf({key: 1}, params)  # an example DAG, which reads none, refuses it, naming the like


def test_a_two_letter_key_reversing_a_two_letter_param_is_no_swap_typo() -> None:
    from costaware.core.errors import ConfigurationError
    from costaware.core.run_conf import check_run_conf

    # 'rl' beside 'lr' was refused as two letters swapped: as likely another name of the DAG's own.
    check_run_conf({"rl": 1}, ["lr", "l2", "epochs"], own_keys=True)
    with pytest.raises(ConfigurationError, match=r"'mdoel' \(did you mean 'model'"):
        check_run_conf({"mdoel": 1}, ["lr", "model"], own_keys=True)  # 4 letters or more: still a typo


def test_a_run_the_gate_refuses_is_audited_too(env_ledger: Ledger) -> None:
    """Overrides are audited before anything is checked: a typo in the form still leaves its trace."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, Param

    with DAG("retrain", schedule=None, params={"train_instance_type": Param("c5.xlarge")}):
        spend_gate = SpendCapSensor(
            task_id="spend_gate", scope="project=churn", estimated_usd="1", for_task_id="train", timeout=5,
            instance_type="{{ params.train_instance_type }}", region="us-east-1",
        )  # fmt: skip
        EmptyOperator(task_id="train")
    spend_gate.instance_type = "m5.lrage"  # as rendered from the trigger's conf
    ctx = {
        **context(),
        "dag_run": SimpleNamespace(conf={"train_instance_type": "m5.lrage"}, triggering_user_name="bob"),
    }
    with pytest.raises(AirflowFailException, match=r"m5\.lrage"):
        spend_gate.poke(ctx)
    (override,) = audit_log(env_ledger, action="override")
    assert (override.actor, override.details) == (
        "bob",
        {"train_instance_type": {"default": "c5.xlarge", "given": "m5.lrage"}},
    )


def test_approvers_the_simple_auth_manager_does_not_know_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from costaware.sensors.spend_approval import approvers_who_cannot_answer

    # A misspelled approver left a request nobody could answer, for the 12 h of approval_timeout.
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin, ann:user, vic:Viewer")
    assert approvers_who_cannot_answer(["ann", "nosuchuser", "vic"]) == (["nosuchuser"], {"vic": "Viewer"})
    assert approvers_who_cannot_answer([]) == ([], {})
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    assert approvers_who_cannot_answer(["nosuchuser"]) == ([], {})  # every login is an admin: nothing to say


def test_a_request_no_approver_could_answer_fails_at_once(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user")
    with pytest.raises(AirflowFailException, match=r"approvers \['nosuchuser'\] are not users of"):
        gate(approvers=["nosuchuser"], deferrable=False).execute(context())
    assert env_ledger.usage("project=churn")[0].reserved_usd == 8  # nothing reserved for it


def test_approvers_nobody_could_be_are_said_at_a_run_within_the_cap_too(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checked only when a run passed its cap: the run that needed an approval was the one that failed.
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user")
    with pytest.raises(AirflowFailException, match=r"approvers \['nosuchuser'\] are not users of"):
        gate(approvers=["nosuchuser"], estimated_usd="0.5", deferrable=False).execute(context())
    assert gate(estimated_usd="0.5", deferrable=False).execute(context())["usd"] == "0.500000"


def test_a_request_only_read_only_approvers_could_see_fails_at_once(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A VIEWER gets 403 on the answer (a write on the DAG): named alone, the request waited its timeout.
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user,vic:VIEWER")
    with pytest.raises(AirflowFailException, match=r"approvers \['vic'\] have the role \['VIEWER'\].*USER"):
        gate(approvers=["vic"], deferrable=False).execute(context())
    with pytest.raises(
        AirflowFailException, match=r"\['nosuchuser'\] are not users.*\['vic'\] have the role"
    ):
        gate(approvers=["nosuchuser", "vic"], deferrable=False).execute(context())
    assert env_ledger.usage("project=churn")[0].reserved_usd == 8  # nothing reserved for them
    assert gate(approvers=["ann", "vic"], estimated_usd="0.5", deferrable=False).execute(context())


@pytest.mark.parametrize(
    ("key", "meant", "kept"),
    [
        # A mistyped tag dropped the tag, so the tagged budget was never charged.
        ("projct", "project", "'project' tags the run's costs, 'projct' tags nothing"),
        ("tema", "team", "'team' tags the run's costs, 'tema' tags nothing"),  # two letters swapped
        ("TRAIN_BUDGET_USD", "train_budget_usd", "'train_budget_usd' kept its default"),
        ("Epochs", "epochs", "'epochs' kept its default"),
    ],
)
def test_the_gate_refuses_a_mistyped_tag_a_swap_and_a_name_in_other_case(
    key: str, meant: str, kept: str
) -> None:
    from costaware.core.errors import ConfigurationError
    from costaware.core.run_conf import check_run_conf

    params = ["train_budget_usd", "max_usd", "epochs", "spot_deadline"]
    for own_keys in (True, False):
        with pytest.raises(ConfigurationError) as refused:
            check_run_conf({key: "x"}, params, own_keys=own_keys)
        assert f"{key!r} (did you mean {meant!r}? {kept})" in str(refused.value)


def test_a_key_refused_anyway_names_a_loosely_close_param() -> None:
    from costaware.core.errors import ConfigurationError
    from costaware.core.run_conf import check_run_conf

    params = ["train_budget_usd", "max_usd", "epochs", "spot_deadline"]
    check_run_conf({"deadline": "x"}, params, own_keys=True)  # the gate: maybe the DAG's own key
    with pytest.raises(ConfigurationError) as refused:
        check_run_conf({"deadline": "x", "zzz": 1}, params)  # an example DAG reads none: refused
    message = str(refused.value)
    assert "'deadline' (did you mean 'spot_deadline'? 'spot_deadline' kept its default)" in message
    assert "'zzz'. Its params" in message


def test_a_tag_in_the_conf_is_no_typo_of_a_param_beside_it() -> None:
    # owner in the conf tags the run's costs, declared or not: the gate took it for a typo of 'owners'.
    from costaware.core.run_conf import check_run_conf

    check_run_conf({"owner": "jane", "team": "ml"}, ["owners", "teams"], own_keys=True)


def test_the_request_names_as_who_may_answer_only_approvers_who_can(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # '_lead_' (no user) and 'vic' (a VIEWER) were listed under "Who may answer", and the log warned twice.
    import costaware.sensors.spend_approval as spend_approval

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user,vic:viewer")
    asked: dict[str, Any] = {}

    def ask(context: Any, **request: Any) -> None:
        asked.update(request)
        raise RuntimeError("parked")

    monkeypatch.setattr(spend_approval, "ask", ask)
    with pytest.raises(RuntimeError, match="parked"):
        gate(approvers=["ann", "_lead_", "vic"], deferrable=False).execute(context())
    lines = asked["body"].split("\n\n")
    assert "Who may answer: ann." in lines, asked["body"]
    assert (
        "Named as approvers but cannot answer: \\_lead\\_ (not a user of this Airflow), "
        "vic (may only read)." in lines
    ), asked["body"]
    assert capsys.readouterr().out.count("are not users of this Airflow") == 1


def test_approvers_who_cannot_answer_render_as_given_in_the_ui() -> None:
    markdown_it = pytest.importorskip("markdown_it")
    body = approval_body(
        budgets=[PassedBudget("b", D(1), D(1))],
        needed_usd="1",
        task="t",
        approvers=["ann", "_lead_", "x<y>"],
        cannot_answer={"_lead_": "not a user of this Airflow", "x<y>": "not a user of this Airflow"},
    )
    rendered = html.unescape(re.sub(r"<[^>]+>", "", markdown_it.MarkdownIt().render(body)))
    assert "Who may answer: ann." in rendered
    assert (
        "cannot answer: _lead_ (not a user of this Airflow), x<y> (not a user of this Airflow)." in rendered
    )


def test_a_gate_passing_two_budgets_names_both_on_the_cost_page_and_in_the_rejection(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Cost page's gate list showed the month budget only, the rejection "the budget of 'project=churn'".
    import costaware.sensors.spend_approval as spend_approval
    from costaware.adapters.ledger.gate_requests import gate_requests

    env_ledger.set_budget("*", "day", "3")  # $4 passes it too
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user")

    def ask(context: Any, **request: Any) -> None:
        raise RuntimeError("parked")

    monkeypatch.setattr(spend_approval, "ask", ask)
    with pytest.raises(RuntimeError, match="parked"):
        gate(deferrable=False).execute(context())
    (noted,) = gate_requests(env_ledger, since=datetime.now(timezone.utc) - timedelta(hours=1))
    names = noted.budget.split(", ")
    assert [name.split(" (")[0] for name in names] == ["project=churn/month", "*/day"], noted.budget
    with pytest.raises(AirflowFailException) as rejected:
        gate().approval_complete(context(), event("Reject"))
    assert f"past the budgets {names[0]!r}, {names[1]!r} was not approved (ann)" in str(rejected.value)


def test_a_rejection_names_the_budgets_the_request_was_asked_with(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rejection read the passed budgets again when the answer came: a month cap raised meanwhile left
    # "past the budget '*/day (...)'", where the request and the Cost page named the month budget too.
    import costaware.sensors.spend_approval as spend_approval
    from costaware.adapters.ledger.gate_requests import gate_requests

    env_ledger.set_budget("*", "day", "3")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user")

    def ask(context: Any, **request: Any) -> None:
        raise RuntimeError("parked")

    monkeypatch.setattr(spend_approval, "ask", ask)
    with pytest.raises(RuntimeError, match="parked"):
        gate(deferrable=False).execute(context())
    (noted,) = gate_requests(env_ledger, since=datetime(2000, 1, 1, tzinfo=timezone.utc))  # any time
    names = noted.budget.split(", ")
    env_ledger.set_budget("project=churn", "month", "100", actor="lead")  # raised while it waited
    with pytest.raises(AirflowFailException) as rejected:
        gate().approval_complete(context(), event("Reject"))
    assert f"past the budgets {names[0]!r}, {names[1]!r} was not approved (ann)" in str(rejected.value)


def test_the_request_is_assigned_only_to_approvers_who_can_answer_asked_once(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # '_lead_' (no user) and 'vic' (a VIEWER) were assigned the request too, and the auth manager's users
    # were read twice per execute (once to check, once to word the request).
    from airflow.sdk.exceptions import TaskAwaitingInput
    from airflow.sdk.execution_time import hitl

    import costaware.sensors.spend_approval as spend_approval

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user,vic:viewer")
    written: dict[str, Any] = {}  # what the task supervisor would store as the HITL request
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **detail: written.update(detail))
    reads: list[object] = []
    read_users = spend_approval._simple_auth_users

    def counted() -> Any:
        reads.append(None)
        return read_users()

    monkeypatch.setattr(spend_approval, "_simple_auth_users", counted)
    ti = SimpleNamespace(**vars(context()["ti"]), id="0193a1b2-0000-7000-8000-000000000001")
    with pytest.raises(TaskAwaitingInput):
        gate(approvers=["ann", "_lead_", "vic"], deferrable=False).execute({"ti": ti})
    assert written["assigned_users"] == [{"id": "ann", "name": "ann"}]
    assert "\\_lead\\_ (not a user of this Airflow), vic (may only read)" in written["body"]
    assert len(reads) == 1  # once per execute, for the check and the request alike


def test_budget_names_past_the_gate_row_s_column_are_kept_whole_and_counted(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The row's budget column holds 600 characters: four long budget names were cut mid-name there, and
    # the rejection, which reads them back, named a budget that does not exist ('...team=mmm/mo').
    import costaware.sensors.spend_approval as spend_approval
    from costaware.adapters.ledger.gate_requests import gate_requests

    tags = {"project": "p" * 120, "team": "m" * 120, "owner": "o" * 120}  # a tag value's longest: 128
    scope = ",".join(f"{k}={v}" for k, v in tags.items())
    for budget_scope in (
        *(f"{k}={v}" for k, v in tags.items()),
        f"project={tags['project']},team={tags['team']}",
    ):
        env_ledger.set_budget(budget_scope, "month", "3")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user")

    def ask(context: Any, **request: Any) -> None:
        raise RuntimeError("parked")

    monkeypatch.setattr(spend_approval, "ask", ask)
    with pytest.raises(RuntimeError, match="parked"):
        gate(scope=scope, deferrable=False).execute(context())
    (noted,) = gate_requests(env_ledger, since=datetime(2000, 1, 1, tzinfo=timezone.utc))
    labels = {b.label for b in env_ledger.budgets() if b.cap_usd == 3}
    *kept, more = noted.budget.split(", ")
    assert len(noted.budget) <= 600 and kept, noted.budget
    assert {name.split(" (")[0] for name in kept} <= labels  # whole names only
    assert more == f"and {4 - len(kept)} more"
    # Nothing lost: the row's message lists every budget passed.
    assert all(label in noted.message for label in labels), noted.message
    with pytest.raises(AirflowFailException) as rejected:
        gate(scope=scope).approval_complete(context(), event("Reject"))
    said = str(rejected.value)
    assert f"past the budgets {', '.join(map(repr, kept))} and {4 - len(kept)} more was not approved" in said


def test_the_gate_row_s_message_says_why_first_and_fits_its_budget_list(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The message began "budgets passed: <all>; <why>": long names filled its 2,000 characters and the
    # refusal's reason was cut off.
    import costaware.sensors.spend_approval as spend_approval
    from costaware.adapters.ledger.gate_requests import MESSAGE_CHARACTERS, gate_requests

    tags = [f"{name}={name[0] * 80}" for name in ("project", "team")]
    scopes = [tags[0], tags[1], ",".join(tags)]
    for scope in scopes:
        for period in ("day", "month", "total"):
            env_ledger.set_budget(scope, period, "3")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user")

    def ask(context: Any, **request: Any) -> None:
        raise RuntimeError("parked")

    monkeypatch.setattr(spend_approval, "ask", ask)
    with pytest.raises(RuntimeError, match="parked"):
        gate(scope=",".join(tags), deferrable=False).execute(context())
    (noted,) = gate_requests(env_ledger, since=datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert len(noted.message) <= MESSAGE_CHARACTERS
    reason, _, listed = noted.message.partition("; budgets passed: ")
    # The reason whole, and what to do, first.
    assert reason.startswith("budget '") and "needs an estimated $4.00" in reason, noted.message
    assert reason.endswith("too: raise those caps as well"), reason
    *names, more = listed.split(", ")
    labels = {b.label for b in env_ledger.budgets() if b.cap_usd == 3}
    assert names and {name.split(" (")[0] for name in names} <= labels  # whole names only
    assert more == f"and {len(labels) - len(names)} more", listed


@pytest.mark.parametrize("on_exceeded", ["approve", "fail"])
def test_a_gate_row_message_cut_to_its_length_says_so_and_where_it_is_whole(
    on_exceeded: str, env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A refusal naming every budget it would pass ran past the row's 2,000 characters and was cut mid-name,
    # with nothing on the Cost page to say that more was said, or where.
    import costaware.sensors.spend_approval as spend_approval
    from costaware.adapters.ledger.gate_requests import MESSAGE_CHARACTERS, gate_requests

    tags = [f"{name}={name[0] * 120}" for name in ("project", "team", "owner")]
    for scope in (*tags, ",".join(tags[:2]), ",".join(tags)):
        for period in ("day", "month", "total"):
            env_ledger.set_budget(scope, period, "3")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user")

    def ask(context: Any, **request: Any) -> None:
        raise RuntimeError("parked")

    monkeypatch.setattr(spend_approval, "ask", ask)
    with pytest.raises((RuntimeError, AirflowFailException)):
        asked = {} if on_exceeded == "approve" else {"approvers": []}
        gate(scope=",".join(tags), deferrable=False, on_exceeded=on_exceeded, **asked).execute(context())
    (noted,) = gate_requests(env_ledger, since=datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert len(noted.message) == MESSAGE_CHARACTERS
    kept, _, said = noted.message.rpartition(" … ")
    assert said == "[cut here: the gate task's log holds the whole message]", noted.message
    assert kept in capsys.readouterr().out  # the task's log has the message the row keeps the start of
    assert "would pass" in kept


def test_a_rejection_counts_a_budget_too_long_for_the_gate_row_once(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first name longer than the row's budget column was noted as "and 1 more" alone; the rejection
    # named the budget, read again, and "and 1 more" beside it: one budget counted twice.
    import costaware.sensors.spend_approval as spend_approval
    from costaware.adapters.ledger.gate_requests import BUDGET_CHARACTERS, gate_requests

    scope = ",".join(f"{name}={name[0] * 120}" for name in ("project", "team", "owner"))
    env_ledger.set_budget(scope, "run", "3")
    ti = SimpleNamespace(dag_id="retrain", run_id="manual__" + "1" * 200, task_id="spend_gate", map_index=-1)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user")

    def ask(context: Any, **request: Any) -> None:
        raise RuntimeError("parked")

    monkeypatch.setattr(spend_approval, "ask", ask)
    with pytest.raises(RuntimeError, match="parked"):
        gate(scope=scope, deferrable=False).execute({"ti": ti})
    (noted,) = gate_requests(env_ledger, since=datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert noted.budget == "and 1 more"  # the name alone is longer than the column
    (usage,) = [u for u in env_ledger.usage(scope, run_id=ti.run_id, dag_id="retrain") if u.cap_usd == 3]
    assert len(usage.name) > BUDGET_CHARACTERS
    with pytest.raises(AirflowFailException) as rejected:
        gate(scope=scope).approval_complete({"ti": ti}, event("Reject"))
    said = str(rejected.value)
    assert f"past the budget {usage.name!r} was not approved (ann)" in said, said
    assert "more" not in said


def test_approvers_are_read_without_blanks_around_them_and_once_each(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "ann, lead".split(",") gave " lead": the request was assigned to a user id no auth manager has.
    from airflow.sdk.exceptions import TaskAwaitingInput
    from airflow.sdk.execution_time import hitl

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ann:user,lead:op")
    written: dict[str, Any] = {}  # what the task supervisor would store as the HITL request
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **detail: written.update(detail))
    sensor = gate(approvers=["ann", " lead", " ann"])  # as "ann, lead, ann".split(",") gives them
    assert sensor.approvers == ["ann", "lead"]
    ti = SimpleNamespace(**vars(context()["ti"]), id="0193a1b2-0000-7000-8000-000000000002")
    with pytest.raises(TaskAwaitingInput):
        sensor.execute({"ti": ti})
    assert written["assigned_users"] == [{"id": "ann", "name": "ann"}, {"id": "lead", "name": "lead"}]
    assert "Who may answer: ann, lead." in written["body"].split("\n\n")
