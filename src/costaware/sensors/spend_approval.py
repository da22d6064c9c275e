"""Approval of budget overages through Airflow's human-in-the-loop (HITL) mechanism.

``SpendCapSensor(on_exceeded="approve")`` asks a person in the Airflow UI (Browse -> Required Actions, or the
task's page) whether to spend past the cap. The request is written with the Task SDK's
``upsert_hitl_detail`` and the task waits in ``awaiting_input`` (``TaskAwaitingInput``), exactly as the
standard provider's ``HITLOperator`` does in Airflow 3.3. Those two names are Task SDK runtime internals: this
module is the only place that uses them, and :func:`require_hitl` checks them when the DAG is parsed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
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


def approval_body(
    *,
    budget: str,
    spent_usd: object,
    cap_usd: object,
    needed_usd: object,
    forecast_usd: object | None,
    task: str,
    approvers: Sequence[str] = (),
) -> str:
    """The text a person reads before approving, as Markdown with one figure a line.

    Every amount is written the same way (:func:`costaware.core.money.format_usd_exact`). The forecast is
    the period-end spend *with this request approved*: the ledger's forecast counts only what is spent or
    reserved, and the pending request is neither yet.
    """
    from decimal import Decimal

    from costaware.core.money import format_usd_exact

    def usd(value: object) -> str:
        return format_usd_exact(Decimal(str(value)))

    figures = [
        f"- spent and reserved: {usd(spent_usd)}",
        f"- cap: {usd(cap_usd)}",
        f"- task `{task}` needs an estimated {usd(needed_usd)}",
    ]
    if forecast_usd is not None:
        with_request = Decimal(str(forecast_usd)) + Decimal(str(needed_usd))
        figures.append(f"- forecast at the end of the period, with this request: {usd(with_request)}")
    who = ", ".join(f"`{a}`" for a in approvers) if approvers else "any user who may edit this DAG's runs"
    # Blank lines between blocks: the UI renders Markdown, where single line breaks run together.
    return "\n\n".join(
        [
            f"**Budget** `{budget}`",
            "\n".join(figures),
            f"**Who may answer:** {who}.",
            "Approve to reserve the overage past the cap; Reject to stop the run.",
        ]
    )


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
