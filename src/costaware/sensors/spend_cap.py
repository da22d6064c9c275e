"""``SpendCapSensor``: a spend gate that reserves budget for the next task, or waits, skips or fails."""

from __future__ import annotations

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
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs
from costaware.sensors.spend_gate_approval import SpendGateApproval
from costaware.sensors.spend_gate_arguments import (
    APPROVAL_ARGUMENTS,
    DEFAULT_APPROVAL_TIMEOUT,
    ON_EXCEEDED,
    RecordsArgumentsGiven,
    approval_settings,
    check_same_instances,
    check_written,
)
from costaware.sensors.spend_gate_base import handed_on
from costaware.triggers.budget import BudgetAvailableTrigger

# Imported from here by DAGs and tests written before the arguments' checks had a module of their own.
__all__ = [
    "APPROVAL_ARGUMENTS",
    "DEFAULT_APPROVAL_TIMEOUT",
    "ON_EXCEEDED",
    "SpendCapSensor",
    "check_same_instances",
]


class SpendCapSensor(WarnsOfDroppedDefaultArgs, SpendGateApproval, metaclass=RecordsArgumentsGiven):
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
        named = getattr(for_task_id, "task_id", None)
        if isinstance(named, str) or isinstance(for_task_id, list | tuple | set | dict | int | float):
            # The operator itself (for_task_id=train) was taken, then refused at run time as "not a task".
            # Text and what renders to it (a template, an XComArg) are taken.
            hint = f"its id, for_task_id={named!r}" if isinstance(named, str) else "the task's id as text"
            raise ValueError(f"SpendCapSensor {self.task_id!r}: for_task_id={for_task_id!r}: give {hint}")
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
