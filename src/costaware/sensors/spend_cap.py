"""``SpendCapSensor``: a spend gate that reserves budget for the next task, or waits, skips or fails."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from costaware.glue import DEFAULT_LEDGER_CONN_ID
from costaware.triggers.budget import BudgetAvailableTrigger

ON_EXCEEDED = ("wait", "skip", "fail")


class SpendCapSensor(BaseSensorOperator):
    """Passes when the scope's budget has room for ``estimated_usd``, and reserves it for ``for_task_id``.

    See docs/budgets.md.

    The reservation is settled with the actual cost by the costaware listener when that task ends (or
    expires after ``reservation_ttl``). When the budget has too little left, ``on_exceeded`` decides:
    ``wait`` until the cap is raised or the next budget period starts (deferred by default, so no worker
    slot is held), ``skip`` the run's downstream tasks, or ``fail`` with a message naming the budget.

    Args:
        scope: Budget scope as ``key=value`` tags, e.g. ``project=churn`` (templated).
        estimated_usd: What the next task is expected to cost, in USD (templated).
        estimated_gpu_hours: Its expected GPU-hours, for budgets with a GPU-hour cap (templated).
        for_task_id: Task the money is for; default: this sensor's only downstream task (templated).
        on_exceeded: ``wait``, ``skip`` or ``fail``.
        reservation_ttl: How long the reservation holds if never settled.
        ledger_conn_id: Airflow connection of the ledger (falls back to ``COSTAWARE_LEDGER_URL``).
        deferrable: Wait in the triggerer, not a worker slot; default ``[operators] default_deferrable``.
        **kwargs: Sensor arguments: ``poke_interval``, ``timeout``, ``mode``, ``soft_fail``, ...
    """

    template_fields: Sequence[str] = ("scope", "estimated_usd", "estimated_gpu_hours", "for_task_id")
    ui_color = "#fdf2d0"

    def __init__(
        self,
        *,
        scope: str,
        estimated_usd: Any,
        estimated_gpu_hours: Any = "0",
        for_task_id: str | None = None,
        on_exceeded: str = "wait",
        reservation_ttl: timedelta = timedelta(hours=6),
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if on_exceeded not in ON_EXCEEDED:
            raise ValueError(f"on_exceeded={on_exceeded!r}: use one of {', '.join(ON_EXCEEDED)}")
        self.scope = scope
        self.estimated_usd = estimated_usd
        self.estimated_gpu_hours = estimated_gpu_hours
        self.for_task_id = for_task_id
        self.on_exceeded = on_exceeded
        self.reservation_ttl = reservation_ttl
        self.ledger_conn_id = ledger_conn_id
        self.deferrable = deferrable

    def _target(self) -> str:
        if self.for_task_id:
            return self.for_task_id
        downstream = sorted(self.downstream_task_ids)
        if len(downstream) != 1:
            raise AirflowFailException(
                f"SpendCapSensor {self.task_id!r} has {len(downstream)} downstream tasks ({downstream}): "
                "set for_task_id to the task the budget is reserved for"
            )
        return downstream[0]

    def _try_reserve(self, context: Any) -> dict[str, Any] | None:
        """Reserve and return the XCom payload; None means 'not now' under on_exceeded='wait'."""
        from costaware.core.errors import BudgetExceededError
        from costaware.core.ledger import reservation_holder
        from costaware.core.money import parse_usd
        from costaware.glue import airflow_errors
        from costaware.hooks.ledger import CostLedgerHook

        ti = context["ti"]
        target = self._target()
        with airflow_errors():
            usd = parse_usd(self.estimated_usd, name="estimated_usd")
            gpu_hours = parse_usd(self.estimated_gpu_hours, name="estimated_gpu_hours")
            ledger = CostLedgerHook(self.ledger_conn_id).get_conn()
            try:
                reservation = ledger.reserve(
                    self.scope,
                    usd,
                    gpu_hours=gpu_hours,
                    holder=reservation_holder(ti.dag_id, ti.run_id, target, ti.map_index),
                    run_id=ti.run_id,
                    ttl=self.reservation_ttl,
                    purpose=f"task {target!r}",
                )
            except BudgetExceededError as e:
                if self.on_exceeded == "skip":
                    raise AirflowSkipException(f"skipping: {e}") from e
                if self.on_exceeded == "fail":
                    raise AirflowFailException(str(e)) from e
                self.log.info("Budget has no room yet, waiting: %s", e)
                return None
        self.log.info(
            "Reserved $%s of %s for task %r (reservation %s)",
            usd,
            reservation.budgets,
            target,
            reservation.id,
        )
        return {
            "reservation_id": reservation.id,
            "usd": str(reservation.usd),
            "scope": str(reservation.scope),
            "budgets": list(reservation.budgets),
            "for_task_id": target,
        }

    def poke(self, context: Any) -> bool | PokeReturnValue:
        result = self._try_reserve(context)
        return PokeReturnValue(is_done=True, xcom_value=result) if result else False

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        result = self._try_reserve(context)
        if result:
            return result
        self._defer(context)
        return None

    def _defer(self, context: Any) -> None:
        self.defer(
            trigger=BudgetAvailableTrigger(
                scope=str(self.scope),
                usd=str(self.estimated_usd),
                gpu_hours=str(self.estimated_gpu_hours),
                run_id=context["ti"].run_id,
                ledger_conn_id=self.ledger_conn_id,
                poll_interval=float(self.poke_interval),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger saw room: reserve now (another run may have taken it; then wait again)."""
        if not event or event.get("status") != "success":
            raise AirflowException(f"budget wait failed: {(event or {}).get('message', event)}")
        result = self._try_reserve(context)
        if result:
            return result
        self._defer(context)
        return None
