"""A spend gate's approval request (``on_exceeded="approve"``): asking the approvers, and the answer.

:class:`SpendGateApproval` is a base of ``SpendCapSensor`` (``costaware.sensors.spend_cap``); the request
itself (Airflow's human-in-the-loop), its body and the reading of the answer are in
``costaware.sensors.spend_approval``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from costaware.sensors.spend_gate_base import SpendGateBase, handed_on


class SpendGateApproval(SpendGateBase):
    """Asks a person whether to spend past the cap, and reserves the overage when approved.

    See docs/governance.md.
    """

    def _check_approvers(self) -> dict[str, str]:
        """The ``approvers`` who cannot answer, with why; fails when none of them could.

        An approver who is no user, or whose role may only read, cannot answer: asked at every run, once.

        Raises:
            AirflowFailException: no approver could answer: the run would wait approval_timeout for nothing.
        """
        from costaware.sensors.spend_approval import approvers_who_cannot_answer

        unknown, read_only = approvers_who_cannot_answer(self.approvers)
        problems = []
        if unknown:
            problems.append(
                f"approvers {unknown} are not users of this Airflow (its simple auth manager lists them in "
                "[core] simple_auth_manager_users)"
            )
        if read_only:
            problems.append(
                f"approvers {list(read_only)} have the role {sorted(set(read_only.values()))} in [core] "
                "simple_auth_manager_users, which may only read: answering needs USER or above"
            )
        if problems and len(unknown) + len(read_only) == len(self.approvers):
            # Nobody could answer: the run would wait approval_timeout (12 h by default) for nothing.
            raise AirflowFailException(
                "; ".join(problems)
                + ": fix approvers (or give them a role that may answer); nothing was reserved"
            )
        if problems:
            self.log.warning("%s: the other approvers may answer", "; ".join(problems))
        cannot_answer = {name: "not a user of this Airflow" for name in unknown}
        return cannot_answer | {name: "may only read" for name in read_only}

    def _ask_approval(
        self,
        ledger: Any,
        context: Any,
        error: Any,
        target: str,
        usd: Any,
        gpu_hours: Any,
        cannot_answer: Mapping[str, str],
    ) -> None:
        """Ask the approvers whether to spend past the cap; parks the task (``TaskAwaitingInput``).

        The request lists every budget covering the scope that the amount would pass, not only the first
        the ledger refused on: an approval reserves past all of them. It is assigned to the approvers who
        can answer; those in ``cannot_answer`` (checked by execute) are only named apart in its body.
        """
        from costaware.sensors.spend_approval import approval_body, ask

        passed = self._passed_budgets(context["ti"], usd, gpu_hours) or [self._passed_from(error)]
        names = ", ".join(f"'{b.name}'" for b in passed)
        # Every budget passed, as the request lists them: the Cost page showed the first refusing one only.
        noted, left_out = _noted_budgets([b.name for b in passed])
        message = _approval_message(error, passed, left_out)
        self._note(ledger, context, target, usd, "approval", noted, message)
        self.log.warning("Budget exceeded, asking %s for approval: %s", self.approvers or "any user", error)
        ask(
            context,
            subject=f"Approve spending past budget{'s' if len(passed) > 1 else ''} {names}?",
            body=approval_body(
                budgets=passed,
                needed_usd=usd,
                needed_gpu_hours=gpu_hours,
                task=target,
                approvers=self.approvers,
                cannot_answer=cannot_answer,
            ),
            # Assigned, a name that is no user was offered the request in the UI's lists for nobody.
            approvers=[a for a in self.approvers if a not in cannot_answer],
            timeout=self.approval_timeout,
            method_name="approval_complete",
        )

    @staticmethod
    def _passed_from(error: Any) -> Any:
        from decimal import Decimal

        from costaware.sensors.spend_approval import PassedBudget

        return PassedBudget(error.scope, Decimal(error.spent_usd or 0), Decimal(error.cap_usd or 0))

    def _passed_budgets(self, ti: Any, usd: Any, gpu_hours: Any) -> list[Any]:
        """The budgets the request would pass, with their forecasts; [] when they cannot be read.

        Read without the task's open hold (a gate run again asking more), which the approval's reserve
        replaces: counted as committed, the request showed more spent than there is, and listed budgets
        with room for the amount as passed.
        """
        from costaware.core.ledger import reservation_holder
        from costaware.hooks.ledger import CostLedgerHook
        from costaware.sensors.spend_approval import PassedBudget

        try:
            ledger = CostLedgerHook(self.ledger_conn_id).get_conn()
            budgets = {b.label: b for b in ledger.budgets()}
            holder = reservation_holder(ti.dag_id, ti.run_id, self._target(), ti.map_index)
            replaced = next((r.id for r in ledger.open_holds_of(holder)), None)
            passed = []
            standing = ledger.usage(self._scope(), run_id=ti.run_id, dag_id=ti.dag_id, without=replaced)
            for u in standing:
                committed = u.spent_usd + u.reserved_usd
                gpu_committed = u.spent_gpu_hours + u.reserved_gpu_hours
                gpu_passed = u.cap_gpu_hours is not None and gpu_committed + gpu_hours > u.cap_gpu_hours
                if committed + usd <= u.cap_usd and not gpu_passed:
                    continue
                passed.append(
                    PassedBudget(
                        u.name,
                        committed,
                        u.cap_usd,
                        forecast_usd=self._forecast(ledger, budgets.get(u.label), replaced),
                        gpu_hours=(gpu_committed, u.cap_gpu_hours)
                        if gpu_passed and u.cap_gpu_hours is not None
                        else None,
                    )
                )
            return passed
        except Exception as e:  # the request still names the budget the ledger refused on
            self.log.info("Could not list the budgets this request passes: %s", e)
            return []

    def _forecast(self, ledger: Any, budget: Any, replaced: str | None) -> Any:
        """The period-end forecast of ``budget`` from this DAG's timetable; None if unknown (per run).

        Without ``replaced``, the task's open hold the approval's reserve replaces: counted, the forecast
        shown to the approver held it twice beside the request's own amount.
        """
        from costaware.core.budgets import Period

        if budget is None or budget.period is Period.RUN:
            return None
        try:
            from costaware.adapters.airflow_schedule import TimetableSchedule
            from costaware.adapters.ledger.governance import budget_outlook

            schedule = TimetableSchedule({self.dag_id: self.dag.timetable} if self.has_dag() else {})
            return budget_outlook(ledger, budget, schedule, without=replaced).forecast.forecast_usd
        except Exception as e:  # the forecast is a help for the approver, not a condition
            self.log.info("No forecast for budget %s: %s", budget.label, e)
            return None

    def approval_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resume after a person answered (or the wait timed out): reserve the overage, or fail/skip."""
        from costaware.adapters.ledger.audit import record_audit
        from costaware.core.ledger import reservation_holder
        from costaware.core.money import format_usd_exact, parse_gpu_hours, parse_usd
        from costaware.glue import airflow_errors
        from costaware.hooks.ledger import CostLedgerHook
        from costaware.sensors.spend_approval import decision

        ti = context["ti"]
        target = self._target()
        holder = reservation_holder(ti.dag_id, ti.run_id, target, ti.map_index)
        with airflow_errors():
            approved, who, details = decision(event or {"error_type": "no answer"})
            usd = parse_usd(self.estimated_usd, name="estimated_usd")
            ledger = CostLedgerHook(self.ledger_conn_id).get_conn()
            if not approved:
                record_audit(
                    ledger,
                    actor=who,
                    action="rejection",
                    target=holder,
                    details={**details, "usd": str(usd), "scope": self._scope_text()},
                )
                # The budgets the request was asked with, as the Cost page lists them: read again when the
                # answer came (hours later), a cap raised meanwhile named other budgets than the request.
                passed, more = _asked_and_more(self._asked_budgets(ledger, ti))
                if not passed:
                    # None noted, or only "and N more" (a first name longer than the column): the budgets
                    # passed now, every one named; counting the noted N beside them counted them twice.
                    gpu_hours = parse_gpu_hours(self.estimated_gpu_hours, name="estimated_gpu_hours")
                    passed, more = [b.name for b in self._passed_budgets(ti, usd, gpu_hours)], 0
                past = (
                    f"the budget{'s' if len(passed) + more > 1 else ''} {', '.join(map(repr, passed))}"
                    + (f" and {more} more" if more else "")
                    if passed
                    else f"the budget of '{self._scope_text()}'"
                )
                # Written as every other amount (format_usd_exact): an estimate of "4" read "spending $4".
                message = (
                    f"spending {format_usd_exact(usd)} past {past} was not approved "
                    f"({who}): nothing "
                    "was reserved; to ask again, clear this task or trigger the run again, or raise the cap "
                    "with `costaware budget set`"
                )
                self._note(ledger, context, target, usd, "rejected", "", f"not approved ({who})")
                if self.on_rejected == "skip":
                    raise AirflowSkipException(message)
                raise AirflowFailException(message)
            reservation = ledger.reserve(
                self._scope(),
                usd,
                gpu_hours=parse_gpu_hours(self.estimated_gpu_hours, name="estimated_gpu_hours"),
                holder=holder,
                run_id=ti.run_id,
                dag_id=ti.dag_id,
                ttl=self.reservation_ttl,
                purpose=f"task {target!r}",
                approved_by=who,
                approval=details,
                replace_unlike=True,
            )
            self._note(ledger, context, target, usd, "approved", "", f"approved by {who}")
        self.log.warning(
            "%s approved %s past the cap of %s (reservation %s)",
            who,
            format_usd_exact(usd),
            self._scope_text(),
            reservation.id,
        )
        return {**handed_on(reservation, target), "approved_by": who}

    def _asked_budgets(self, ledger: Any, ti: Any) -> list[str]:
        """The budget names noted with this gate's open approval request; [] when they cannot be read."""
        from costaware.adapters.ledger.gate_requests import asked_budgets

        try:
            return asked_budgets(
                ledger, dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id, map_index=int(ti.map_index)
            )
        except Exception as e:  # the budgets passed now stand in
            self.log.info("Could not read the budgets this request was asked with: %s", e)
            return []


_MORE = re.compile(r"and (\d+) more")
_EVERY_BUDGET = "; budgets passed: "


def _noted_budgets(names: Sequence[str], characters: int | None = None) -> tuple[str, int]:
    """The whole names that fit ``characters``, then ``and N more``; and N.

    ``characters``: by default what the gate row's ``budget`` column holds (read from the ledger's schema).
    Cut at the column's length, the last name was a budget that does not exist, read back by the rejection.
    A budget's name always holds a ``/`` (``scope/period``), so ``and N more`` is never one.
    """
    from costaware.adapters.ledger.gate_requests import BUDGET_CHARACTERS

    width = BUDGET_CHARACTERS if characters is None else characters
    joined = ", ".join(names)
    if len(joined) <= width:
        return joined, 0
    kept: list[str] = []
    for name in names:
        more = f", and {len(names) - len(kept) - 1} more"
        if len(", ".join([*kept, name])) + len(more) > width:
            break
        kept.append(name)
    left_out = len(names) - len(kept)
    return ", ".join([*kept, f"and {left_out} more"]), left_out


def _approval_message(error: Any, passed: Sequence[Any], left_out: int) -> str:
    """The gate row's message of an approval request: the refusal's reason, then the budgets passed.

    Only where the ``budget`` column could not hold them all (``left_out``); the reason comes first and the
    list is cut to the message's length with ``and N more``: listed first, many long names cut the reason
    off.
    """
    from costaware.adapters.ledger.gate_requests import MESSAGE_CHARACTERS

    reason = str(error)
    if not left_out:
        return reason
    room = MESSAGE_CHARACTERS - len(reason) - len(_EVERY_BUDGET)
    listed, _ = _noted_budgets([b.name for b in passed], max(room, 0))
    if _MORE.fullmatch(listed):
        return reason  # no name fits beside the reason, which names them: the row cuts it, saying so
    return f"{reason}{_EVERY_BUDGET}{listed}"


def _asked_and_more(noted: Sequence[str]) -> tuple[list[str], int]:
    """The budget names noted with a request (:func:`_noted_budgets`), and how many more it passed."""
    counted = _MORE.fullmatch(noted[-1]) if noted else None
    return (list(noted[:-1]), int(counted.group(1))) if counted else (list(noted), 0)
