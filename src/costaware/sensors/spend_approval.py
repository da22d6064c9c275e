"""Approval of budget overages through Airflow's human-in-the-loop (HITL) mechanism.

``SpendCapSensor(on_exceeded="approve")`` asks a person in the Airflow UI (Browse -> Required Actions, or the
task's page) whether to spend past the cap. The request is written with the Task SDK's
``upsert_hitl_detail`` and the task waits in ``awaiting_input`` (``TaskAwaitingInput``), exactly as the
standard provider's ``HITLOperator`` does in Airflow 3.3. Those two names are Task SDK runtime internals: this
module is the only place that uses them, and :func:`require_hitl` checks them when the DAG is parsed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

APPROVE, REJECT = "Approve", "Reject"
ON_REJECTED = ("fail", "skip")


def require_hitl() -> None:
    """Raise at DAG parse time when this Airflow has no human-in-the-loop support.

    Raises:
        ValueError: HITL (Airflow >= 3.3 with the standard provider's HITL operators) is not available.
    """
    try:
        from airflow.providers.standard.operators.hitl import HITLOperator  # noqa: F401
        from airflow.sdk.exceptions import TaskAwaitingInput  # noqa: F401
        from airflow.sdk.execution_time.hitl import upsert_hitl_detail  # noqa: F401
    except ImportError as e:
        raise ValueError(
            "SpendCapSensor(on_exceeded='approve') needs Airflow's human-in-the-loop tasks (Airflow 3.3 with "
            f"apache-airflow-providers-standard >= 1.21), which this installation lacks ({e}); use "
            "on_exceeded='wait', 'skip' or 'fail', or upgrade Airflow"
        ) from e


def approvers_who_cannot_answer(approvers: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The approvers that are no user of this Airflow, and those whose role may only read (with that role).

    Answering a request is a write on the DAG (``USER`` or above): a ``VIEWER`` is refused (403) and, named
    alone, leaves a request nobody may answer until ``approval_timeout``. Only the simple auth manager keeps
    its users in the configuration (``[core] simple_auth_manager_users``, ``name:role`` pairs); with another
    auth manager, or with every user an admin (``simple_auth_manager_all_admins``), nothing can be said
    here: ([], {}).
    """
    users = _simple_auth_users() if approvers else None
    if users is None:
        return [], {}
    roles = {name: role for name, role in users if name}
    unknown = [a for a in approvers if a not in roles]
    return unknown, {a: roles[a] for a in approvers if roles.get(a, "").lower() == "viewer"}


def _simple_auth_users() -> list[tuple[str, str]] | None:
    """The simple auth manager's ``(name, role)`` users; None where they cannot tell who may answer.

    None with another auth manager, or with every user an admin (``simple_auth_manager_all_admins``).
    """
    from airflow.configuration import conf

    if "SimpleAuthManager" not in conf.get("core", "auth_manager", fallback=""):
        return None
    if conf.getboolean("core", "simple_auth_manager_all_admins", fallback=False):
        return None
    pairs = conf.get("core", "simple_auth_manager_users", fallback="").split(",")
    return [(name.strip(), role.strip()) for name, _, role in (p.partition(":") for p in pairs if p.strip())]


@dataclass(frozen=True, slots=True)
class PassedBudget:
    """One budget the request would pass, as the approver reads it.

    ``committed_usd`` is spent plus reserved; ``forecast_usd`` the period-end forecast without the request
    (None: unknown); ``gpu_hours`` (committed, cap) where the GPU-hour cap is the one passed.
    """

    name: str
    committed_usd: Decimal
    cap_usd: Decimal
    forecast_usd: Decimal | None = None
    gpu_hours: tuple[Decimal, Decimal] | None = None


def approval_body(
    *,
    budgets: Sequence[PassedBudget],
    needed_usd: object,
    task: str,
    needed_gpu_hours: object = 0,
    approvers: Sequence[str] = (),
    cannot_answer: Mapping[str, str] | None = None,
) -> str:
    """The text a person reads before approving: one figure a line, the same read raw or rendered.

    Airflow's **Required actions** page renders it as Markdown; ``GET .../hitlDetails`` in the REST API
    returns it as it is. So it uses no markup but paragraphs and a list (``**Budget**`` and backticks were
    noise to a script's reader), and names are escaped only where Markdown would read them as markup.

    Every budget the request would pass is listed: an approval reserves past all of them. Every amount is
    written the same way (:func:`costaware.core.money.format_usd_exact`). A forecast is the period-end spend
    *with this request approved*: the ledger's forecast counts only what is spent or reserved, and the
    pending request is neither yet.

    ``cannot_answer`` maps approvers who cannot answer to why (no user, may only read): they are named apart,
    not under "Who may answer", where they read as people the request waits for.
    """
    from costaware.core.money import format_gpu_hours, format_usd_exact

    need = Decimal(str(needed_usd))
    gpu_need = Decimal(str(needed_gpu_hours or 0))
    blocks = []
    for b in budgets:
        figures = [
            f"- spent and reserved: {format_usd_exact(b.committed_usd)}",
            f"- cap: {format_usd_exact(b.cap_usd)}",
        ]
        if b.gpu_hours is not None:
            committed, cap = b.gpu_hours
            said = f"{format_gpu_hours(committed)} of a {format_gpu_hours(cap)} GPU-hour cap"
            figures.append(f"- GPU-hours spent and reserved: {said}")
        if b.forecast_usd is not None:
            with_request = format_usd_exact(b.forecast_usd + need)
            figures.append(f"- forecast at the end of the period, with this request: {with_request}")
        blocks += [f"Budget {markdown_literal(b.name)}", "\n".join(figures)]
    asked = f"Task {markdown_literal(task)} needs an estimated {format_usd_exact(need)}" + (
        f" and {format_gpu_hours(gpu_need)} GPU-hours" if gpu_need else ""
    )
    cannot_answer = cannot_answer or {}
    answering = [a for a in approvers if a not in cannot_answer]
    who = (
        ", ".join(markdown_literal(a) for a in answering)
        if answering
        else "any user who may edit this DAG's runs"
    )
    apart = ", ".join(f"{markdown_literal(a)} ({why})" for a, why in cannot_answer.items())
    # "all 2 budgets" read as a form letter's slip.
    counted = {1: "", 2: "both "}.get(len(budgets), f"all {len(budgets)} ")
    passes = "the cap" if len(budgets) == 1 else f"the caps of {counted}budgets above"
    # Blank lines between blocks: the UI renders Markdown, where single line breaks run together.
    return "\n\n".join(
        [
            *blocks,
            f"{asked}.",
            f"Who may answer: {who}.",
            *([f"Named as approvers but cannot answer: {apart}."] if apart else []),
            f"Approve to reserve the overage past {passes}; Reject to stop the run.",
        ]
    )


#: What Markdown reads as markup inside a line: escaped. ``_`` only at a word's edge (``train_model`` is
#: no emphasis), ``*`` only where a name holds two (the lone one of the ``*`` scope pairs with nothing).
_MARKUP = re.compile(r"[\\`\[\]<>]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def markdown_literal(name: str) -> str:
    """``name`` as Markdown that renders as ``name``, unchanged where nothing in it is markup."""
    escaped = _MARKUP.sub(lambda m: "\\" + m.group(0), name)
    return escaped.replace("*", "\\*") if name.count("*") > 1 else escaped


def ask(
    context: Mapping[str, Any],
    *,
    subject: str,
    body: str,
    approvers: Sequence[str],
    timeout: timedelta | None,
    method_name: str,
) -> None:
    """Write the approval request and park the task until someone answers (raises ``TaskAwaitingInput``)."""
    from airflow.sdk.exceptions import TaskAwaitingInput
    from airflow.sdk.execution_time.hitl import upsert_hitl_detail

    upsert_hitl_detail(
        ti_id=context["ti"].id,
        options=[APPROVE, REJECT],
        subject=subject,
        body=body,
        defaults=[REJECT],  # a timeout is a rejection
        multiple=False,
        params={},
        assigned_users=[{"id": a, "name": a} for a in approvers],
    )
    raise TaskAwaitingInput(method_name=method_name, timeout=timeout)


def decision(event: Mapping[str, Any]) -> tuple[bool, str, dict[str, Any]]:
    """(approved, who, details) of a HITL event; a timeout without answer is a rejection by ``timeout``.

    Raises:
        ValueError: an event with an option that is neither Approve nor Reject.
    """
    if "error" in event or "error_type" in event:
        return False, "timeout", {"error": str(event.get("error") or event.get("error_type"))}
    chosen = list(event.get("chosen_options") or [])
    if len(chosen) != 1 or chosen[0] not in (APPROVE, REJECT):
        raise ValueError(f"approval answer {chosen!r} is not one of {APPROVE!r}, {REJECT!r}")
    user = event.get("responded_by_user") or {}
    who = str(user.get("name") or user.get("id") or ("timeout" if event.get("timedout") else "unknown"))
    responded = event.get("responded_at")
    details = {
        "chosen": chosen[0],
        "responded_at": responded if isinstance(responded, str | None) else responded.isoformat(),
        "timed_out": bool(event.get("timedout")),
    }
    return chosen[0] == APPROVE and not event.get("timedout"), who, details
