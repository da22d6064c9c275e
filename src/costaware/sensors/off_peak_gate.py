"""``OffPeakWindowSensor``: the window gate of a data-triggered retrain (one retrain per window occurrence).

A DAG scheduled on an Airflow Asset runs whenever new data lands; this gate, its first task, holds the run
until the off-peak window opens (deferred, no worker slot), lets the first run of each window occurrence
through, and skips or carries over the others (see ``costaware.core.window_gate`` for the rule).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, conf
from airflow.sdk.exceptions import AirflowSkipException

from costaware.core.ledger import utcnow
from costaware.core.window_gate import SKIP, TRAIN, GateDecision, gate_decision
from costaware.core.windows import WindowSchedule
from costaware.glue import DEFAULT_LEDGER_CONN_ID, airflow_errors
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.hooks.ledger import CostLedgerHook


def newest_event_time(context: Context) -> datetime | None:
    """Time of the newest asset event that triggered this run (``None`` when it was not asset-triggered)."""
    events = context.get("triggering_asset_events") or {}
    times = [e.timestamp for batch in events.values() for e in batch if getattr(e, "timestamp", None)]
    return max(times) if times else None


class OffPeakWindowSensor(WarnsOfDroppedDefaultArgs, BaseSensorOperator):
    """Holds a data-triggered run until the window opens; at most one retrain per window occurrence.

    See docs/spot-windows.md.

    Args:
        windows: Allowed windows, ``"HH:MM-HH:MM"`` in local time (one or a list).
        days: Days on which windows open (``"mon-fri"``, ``"daily"``, ...).
        timezone: IANA time zone of the windows.
        ledger_conn_id: Connection of the cost ledger, whose database keeps the per-window claims.
        deferrable: Wait for the window in the triggerer instead of a worker slot.

    Returns (XCom):
        ``{"action": "train", "window_start", "window_end", "reason"}``; a run whose data an earlier retrain
        of the same window already covered is skipped (downstream tasks skip too).
    """

    template_fields: Sequence[str] = ("ledger_conn_id",)
    ui_color = "#e6f0ff"

    def __init__(
        self,
        *,
        windows: str | Sequence[str],
        days: str | Sequence[str] = "daily",
        timezone: str = "UTC",
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.schedule = WindowSchedule.parse(windows, days, timezone)  # bad windows fail at parse time
        self.ledger_conn_id = ledger_conn_id
        self.deferrable = deferrable

    @cached_property
    def ledger_hook(self) -> CostLedgerHook:
        """The cost ledger hook (built on first use, not at parse time)."""
        from costaware.hooks.ledger import CostLedgerHook

        return CostLedgerHook(ledger_conn_id=self.ledger_conn_id)

    def _decide(self, context: Context) -> GateDecision:
        from costaware.adapters.ledger.window_claims import claim_window, window_claim

        now = utcnow()
        newest = newest_event_time(context)
        window = self.schedule.window_at(now)
        claimed_at = None
        if window is not None:
            ti = context.get("ti")
            dag_id = str(getattr(ti, "dag_id", None) or self.dag_id)
            run_id = str(getattr(ti, "run_id", None) or context.get("run_id") or "manual")
            ledger = self.ledger_hook.get_conn()
            held = window_claim(ledger, dag_id, window.start)
            if held is None or held.run_id == run_id:
                # Nobody trained in this occurrence yet (or this run did, and is retried): try to claim it.
                held = claim_window(ledger, dag_id, window.start, run_id, now)
                if held.run_id == run_id:
                    return GateDecision(TRAIN, window.start, window.end, f"first retrain in {window.start}")
            claimed_at = held.claimed_at
        return gate_decision(now=now, schedule=self.schedule, newest_event=newest, claimed_at=claimed_at)

    def _act(self, context: Context, decision: GateDecision) -> dict[str, str] | None:
        self.log.info("window gate: %s: %s", decision.action, decision.reason)
        if decision.action == TRAIN:
            return {
                "action": TRAIN,
                "window_start": decision.window_start.isoformat(),
                "window_end": decision.window_end.isoformat(),
                "reason": decision.reason,
            }
        if decision.action == SKIP:
            raise AirflowSkipException(decision.reason)
        return None

    def execute(self, context: Context) -> Any:
        """Decide; wait for the window in the triggerer when deferrable."""
        if not self.deferrable:
            return super().execute(context)
        with airflow_errors():
            decision = self._decide(context)
        result = self._act(context, decision)
        if result is not None:
            return result
        from airflow.providers.standard.triggers.temporal import DateTimeTrigger

        self.defer(
            trigger=DateTimeTrigger(moment=decision.window_start),
            method_name="execute_complete",
            timeout=decision.window_start - utcnow() + timedelta(hours=1),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """The window opened (or a carried-over run's next one did): decide again."""
        return self.execute(context)

    def poke(self, context: Context) -> Any:
        """One look (non-deferrable mode): train, skip, or keep waiting."""
        from airflow.sdk import PokeReturnValue

        with airflow_errors():
            decision = self._decide(context)
        result = self._act(context, decision)
        return PokeReturnValue(is_done=True, xcom_value=result) if result is not None else False
