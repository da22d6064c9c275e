"""``SpendCapSensor``: a spend gate that reserves budget for the next task, or waits, skips or fails."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import PokeReturnValue, conf
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
)

from costaware.core.ledger import utcnow
from costaware.glue import DEFAULT_LEDGER_CONN_ID
from costaware.sensors.spend_gate_arguments import (
    APPROVAL_ARGUMENTS,
    DEFAULT_APPROVAL_TIMEOUT,
    ON_EXCEEDED,
    RecordsArgumentsGiven,
    approval_settings,
    check_same_instances,
    check_written,
)
from costaware.sensors.spend_gate_base import SpendGateBase, handed_on
from costaware.triggers.budget import BudgetAvailableTrigger

# Imported from here by DAGs and tests written before the arguments' checks had a module of their own.
__all__ = [
    "APPROVAL_ARGUMENTS",
    "DEFAULT_APPROVAL_TIMEOUT",
    "ON_EXCEEDED",
    "SpendCapSensor",
    "check_same_instances",
]


class SpendCapSensor(SpendGateBase, metaclass=RecordsArgumentsGiven):
    """Passes when the scope's budget has room for ``estimated_usd``, and reserves it for ``for_task_id``.

    See docs/budgets.md.

    The reservation is settled with the actual cost by the costaware listener when that task ends (or
    expires after ``reservation_ttl``). When the budget has too little left, ``on_exceeded`` decides:
    ``wait`` until the cap is raised or the next budget period starts (in the triggerer with
    ``deferrable=True``, so no worker slot is held; when not given, Airflow's ``[operators]
    default_deferrable`` decides, off by default: poke), ``skip`` the run's downstream tasks, ``fail`` with
    a message naming the budget, or
    ``approve``: ask ``approvers`` in the Airflow UI (human-in-the-loop, "Required actions") whether to spend
    past the cap; an approval reserves the overage and is written to the audit trail with the approver's
    name, the time and the amount; a rejection or a timeout fails or skips, as ``on_rejected`` says.

    Args:
        scope: Budget scope as ``key=value`` tags, e.g. ``project=churn``, or a dict of them,
            ``{"project": "churn"}`` (templated).
        estimated_usd: What the next task is expected to cost, in USD (templated).
        estimated_gpu_hours: Its expected GPU-hours, for budgets with a GPU-hour cap (templated).
        for_task_id: Task the money is for; default: this sensor's only downstream task (templated). It
            must be mapped as the sensor is: both unmapped, or both in one mapped task group (each sensor
            instance reserves for the task instance of its own map index); otherwise it is refused.
        on_exceeded: ``wait``, ``skip``, ``fail`` or ``approve`` (ask a person, see ``approvers``).
        reservation_ttl: How long the reservation holds if never settled; a ``SpotWindowSensor`` waiting
            between the gate and its task counts it from its latest start instead.
        ledger_conn_id: Airflow connection of the ledger (falls back to ``COSTAWARE_LEDGER_URL``).
        deferrable: Wait in the triggerer, not a worker slot; default ``[operators] default_deferrable``.
        approvers: With ``on_exceeded="approve"``: the Airflow user ids who may approve, a list (a set is
            read in sorted order; a dict is refused); empty or None: any user allowed to answer the DAG's
            required actions.
        approval_timeout: With ``on_exceeded="approve"``: how long to wait for an answer (then: rejected).
        on_rejected: With ``on_exceeded="approve"``: ``fail`` or ``skip`` after a rejection or timeout.
        instance_type: Instance type the reserved-for task will run on; checked against the price list
            before anything is reserved, so a typo fails here, not after money is held (templated).
        region: Region of that instance, checked with it (templated).
        market: ``spot``, ``on_demand`` or ``local``, checked before reserving (templated).
        **kwargs: Sensor arguments: ``poke_interval``, ``timeout``, ``mode``, ``soft_fail``, ...
    """

    template_fields: Sequence[str] = (
        "scope",
        "estimated_usd",
        "estimated_gpu_hours",
        "for_task_id",
        "instance_type",
        "region",
        "market",
        "ledger_conn_id",
    )
    ui_color = "#fdf2d0"

    def __init__(
        self,
        *,
        scope: str | Mapping[str, str],
        estimated_usd: Any,
        estimated_gpu_hours: Any = "0",
        for_task_id: str | None = None,
        on_exceeded: str = "wait",
        reservation_ttl: timedelta = timedelta(hours=6),
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        approvers: Sequence[str] | None = (),
        approval_timeout: timedelta | None = DEFAULT_APPROVAL_TIMEOUT,
        on_rejected: str = "fail",
        instance_type: str | None = None,
        region: str | None = None,
        market: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(reservation_ttl, timedelta) or reservation_ttl <= timedelta(0):
            raise ValueError(
                f"reservation_ttl={reservation_ttl!r}: give a positive timedelta, e.g. timedelta(hours=6)"
            )
        if on_exceeded not in ON_EXCEEDED:
            raise ValueError(f"on_exceeded={on_exceeded!r}: use one of {', '.join(ON_EXCEEDED)}")
        # Airflow passes the DAG's default_args to every operator that takes them: approval settings meant
        # for an approve gate reach a wait gate beside it, which never reads them and must not refuse them.
        # Those written on the gate itself are refused, whatever default_args hold.
        written = vars(self).get("_costaware_given", frozenset(APPROVAL_ARGUMENTS))
        from_defaults = {name for name in APPROVAL_ARGUMENTS if name not in written}
        self.approvers, self.approval_timeout, self.on_rejected = approval_settings(
            on_exceeded, approvers, approval_timeout, on_rejected, from_defaults
        )
        check_written(scope, estimated_usd, estimated_gpu_hours)
        self.scope = scope
        self.estimated_usd = estimated_usd
        self.estimated_gpu_hours = estimated_gpu_hours
        self.for_task_id = for_task_id
        self.on_exceeded = on_exceeded
        self.reservation_ttl = reservation_ttl
        self.ledger_conn_id = ledger_conn_id
        self.deferrable = deferrable
        self.instance_type = instance_type
        self.region = region
        self.market = market

    def _try_reserve(
        self, context: Any, cannot_answer: Mapping[str, str] | None = None
    ) -> dict[str, Any] | None:
        """Reserve and return the XCom payload; None means 'not now' under on_exceeded='wait'.

        ``cannot_answer``: under on_exceeded='approve', the approvers who cannot answer (see
        ``_check_approvers``).
        """
        from decimal import Decimal

        from costaware.core.errors import BudgetExceededError, BudgetNotFoundError, ConfigurationError
        from costaware.core.ledger import reservation_holder
        from costaware.core.money import format_usd_exact, parse_gpu_hours, parse_usd
        from costaware.glue import airflow_errors
        from costaware.hooks.ledger import CostLedgerHook

        ti = context["ti"]
        with airflow_errors():
            ledger = CostLedgerHook(self.ledger_conn_id).get_conn()
            self._audit_overrides(context, ledger)  # first: a run refused below is audited too
            target = self._target()
            self._check_compute()
            self._check_scope_is_tagged(context, target)
            usd = parse_usd(self.estimated_usd, name="estimated_usd")
            if 0 < usd < Decimal("0.000001"):
                # The ledger keeps micro-dollars: it would hold $0.00, and the gate would gate nothing.
                raise ConfigurationError(
                    f"estimated_usd {self.estimated_usd!r} rounds to $0.00 in the ledger, which keeps "
                    "micro-dollars: give at least $0.000001"
                )
            gpu_hours = parse_gpu_hours(self.estimated_gpu_hours, name="estimated_gpu_hours")
            try:
                reservation = ledger.reserve(
                    self._scope(),
                    usd,
                    gpu_hours=gpu_hours,
                    holder=reservation_holder(ti.dag_id, ti.run_id, target, ti.map_index),
                    run_id=ti.run_id,
                    dag_id=ti.dag_id,
                    ttl=self.reservation_ttl,
                    purpose=f"task {target!r}",
                    # The task's open hold (a cleared gate run again) only where it holds what is asked now.
                    replace_unlike=True,
                )
            except BudgetExceededError as e:
                if self.on_exceeded == "approve":
                    self._ask_approval(ledger, context, e, target, usd, gpu_hours, cannot_answer or {})
                self._refused(ledger, context, target, usd, e)
                return None
            except BudgetNotFoundError as e:
                # No budget covers the scope (a typo in the project): refused too, and the Cost page lists
                # it with the others that did not get their money (it showed only a failed try).
                message = f"{e}{self._unseen_ledger_hint()}"
                self._note(ledger, context, target, usd, "refused", "", message)
                raise BudgetNotFoundError(message) from None
            # What is still held: more than the estimate where the task's open hold was grown (max_usd),
            # less than the hold where a try billed part of it already.
            held_usd, _ = ledger.unpaid(reservation.id)
        self._note(ledger, context, target, usd, "reserved", "", "")
        self.log.info(
            "Reserved %s for task %r in %s (reservation %s)%s%s",
            format_usd_exact(held_usd),
            target,
            self._budget_names(ledger, ti, reservation.budgets),
            reservation.id,
            "" if held_usd == usd else f": its open hold, above the {format_usd_exact(usd)} asked",
            ""
            if held_usd == reservation.usd
            else f" ({format_usd_exact(reservation.usd)} held, "
            f"{format_usd_exact(reservation.usd - held_usd)} of it paid already)",
        )
        catch_all_only = all(b.rpartition("/")[0] == "*" for b in reservation.budgets)
        if str(reservation.scope) != "*" and reservation.budgets and catch_all_only:
            # A misspelt scope (project=chrun) passes through the catch-all as if it had a budget.
            self.log.warning(
                "scope %r has no budget of its own: only the catch-all %s holds its money. Check its "
                "spelling (`costaware budget list` lists the budgets), or set one with `costaware budget "
                "set --scope %r ...`",
                str(reservation.scope),
                ", ".join(reservation.budgets),
                str(reservation.scope),
            )
        return handed_on(reservation, target, held_usd)

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
            replaced = next(
                (r.id for r in ledger.open_reservations(holder_prefix=holder) if r.holder == holder), None
            )
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

    def _refused(self, ledger: Any, context: Any, target: str, usd: Any, error: Any) -> None:
        """Budget said no: note it for the Cost page, then skip, fail (no long traceback) or wait."""
        status = {"skip": "skipped", "fail": "refused"}.get(self.on_exceeded, "waiting")
        self._note(ledger, context, target, usd, status, error.scope, str(error))
        if self.on_exceeded == "skip":
            self.log.info("%s", error.summary)
            raise AirflowSkipException(f"skipping: {error}") from None
        if self.on_exceeded == "fail":
            # An expected outcome, not a crash: the summary says it all, the exception stays one line
            # and does not chain the ledger's internals.
            self.log.error("%s", error.summary)
            raise AirflowFailException(
                f"budget '{error.scope}' refused {target!r}: see the summary above"
            ) from None
        self.log.info("Budget has no room yet, waiting:\n%s", error.summary)
        return None

    def poke(self, context: Any) -> bool | PokeReturnValue:
        result = self._try_reserve(context)
        return PokeReturnValue(is_done=True, xcom_value=result) if result else False

    def execute(self, context: Any) -> Any:
        if self.on_exceeded == "approve":
            # At every run, not only the one that passes its cap: that run is the one it was set up for.
            cannot_answer = self._check_approvers()
            return self._try_reserve(context, cannot_answer)  # reserves, or asks a person (never waits)
        if not self.deferrable:
            return super().execute(context)
        result = self._try_reserve(context)
        if result:
            return result
        self._defer(context)
        return None

    def _defer(self, context: Any, wait_ends: str | None = None) -> None:
        """Wait in the triggerer until the budget has room, at most until ``wait_ends`` (ISO).

        ``wait_ends`` (None: ``timeout`` from now) is carried over each wait: a resume that lost the room to
        another run waited a whole ``timeout`` again, so lost races kept the sensor waiting past it.

        Raises:
            AirflowSensorTimeout: ``wait_ends`` has passed.
        """
        from costaware.core.ledger import reservation_holder
        from costaware.core.money import parse_gpu_hours, parse_usd

        ti = context["ti"]
        now = utcnow()
        ends = (
            datetime.fromisoformat(wait_ends) if wait_ends else now + timedelta(seconds=float(self.timeout))
        )
        if ends <= now:
            raise AirflowSensorTimeout(
                f"budget scope '{self._scope_text()}' had no room left for {self._target()!r} when the "
                f"sensor's timeout of {float(self.timeout):g} s ran out (the room that came was taken by "
                "other runs): raise the cap, lower estimated_usd, or give the sensor a longer timeout"
            )
        self.defer(
            trigger=BudgetAvailableTrigger(
                scope=self._scope_text(),
                # Parsed as the sensor reads them: the trigger's Decimal() could not read "$4.20" or "1,200".
                usd=str(parse_usd(self.estimated_usd, name="estimated_usd")),
                gpu_hours=str(parse_gpu_hours(self.estimated_gpu_hours, name="estimated_gpu_hours")),
                run_id=ti.run_id,
                dag_id=ti.dag_id,
                ledger_conn_id=self.ledger_conn_id,
                poll_interval=float(self.poke_interval),
                # Its task's open hold, which the resume replaces (a gate run again asking more).
                holder=reservation_holder(ti.dag_id, ti.run_id, self._target(), ti.map_index),
            ),
            method_name="execute_complete",
            kwargs={"wait_ends": ends.isoformat()},
            timeout=ends - now,
        )

    def execute_complete(
        self, context: Any, event: dict[str, Any] | None = None, wait_ends: str | None = None
    ) -> Any:
        """Resume after the trigger saw room: reserve now (another run may have taken it; then wait again).

        ``wait_ends``: when the sensor's ``timeout`` runs out, from its first wait (None: a wait deferred
        by an earlier version, which gets a whole ``timeout`` again).
        """
        if not event or event.get("status") != "success":
            raise AirflowException(f"budget wait failed: {(event or {}).get('message', event)}")
        result = self._try_reserve(context)
        if result:
            return result
        self._defer(context, wait_ends)
        return None


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
