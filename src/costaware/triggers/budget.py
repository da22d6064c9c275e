"""``BudgetAvailableTrigger``: waits in the triggerer until a budget has room for an amount."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from costaware.glue import DEFAULT_LEDGER_CONN_ID


class BudgetAvailableTrigger(BaseTrigger):
    """Fires once every budget covering ``scope`` has ``usd`` (and ``gpu_hours``) left.

    See docs/budgets.md.

    That happens when the cap is raised, money is released, or a new budget period starts. It only
    checks: the sensor reserves when it resumes, so a trigger that fires twice cannot reserve twice.

    Args:
        scope: Tag filter, e.g. ``project=churn``.
        usd: Amount needed, as a string (money crosses trigger boundaries as strings).
        gpu_hours: GPU-hours needed, as a string.
        run_id: The DAG run, for budgets with period ``run``.
        dag_id: The DAG of that run (None: a trigger serialized before it was kept; any DAG's run).
        ledger_conn_id: Airflow connection of the ledger.
        poll_interval: Seconds between checks.
        holder: The holder key of the task's open hold that the sensor replaces when it resumes (a gate
            run again asking more, or in another scope): what it holds unpaid counts as room in the
            budgets it is in. None: no hold is replaced.
    """

    def __init__(
        self,
        scope: str,
        usd: str,
        gpu_hours: str = "0",
        run_id: str | None = None,
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        poll_interval: float = 60.0,
        dag_id: str | None = None,
        holder: str | None = None,
    ) -> None:
        super().__init__()
        self.scope = scope
        self.usd = usd
        self.gpu_hours = gpu_hours
        self.run_id = run_id
        self.dag_id = dag_id
        self.ledger_conn_id = ledger_conn_id
        self.poll_interval = poll_interval
        self.holder = holder

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "scope": self.scope,
                "usd": self.usd,
                "gpu_hours": self.gpu_hours,
                "run_id": self.run_id,
                "dag_id": self.dag_id,
                "ledger_conn_id": self.ledger_conn_id,
                "poll_interval": self.poll_interval,
                "holder": self.holder,
            },
        )

    def _shortfall(self) -> str | None:
        """None when there is room, else which budget is short (blocking IO: run it in a thread).

        Room as the sensor's ``reserve`` weighs it when it resumes: the task's open hold (``holder``) kept
        where it holds the amount in this scope, else each budget read without that hold, which the
        reserve replaces.
        """
        from costaware.core.money import format_gpu_hours, format_usd_exact
        from costaware.hooks.ledger import CostLedgerHook

        ledger = CostLedgerHook(self.ledger_conn_id).get_conn()
        need, gpu = Decimal(self.usd), Decimal(self.gpu_hours)
        # The hold of ``holder`` the sensor's reserve keeps, or replaces, as the reserve picks it (weighed
        # apart, this waited on one hold while the reserve kept or replaced another). Counted as taken, a
        # gate asking $6 where its own $4 hold and $5 of room were enough waited until its timeout.
        held = ledger.held_for(self.holder, self.scope, need, gpu) if self.holder else None
        if held is not None and held.as_asked:
            # Returned as it stands: a hold grown since the wait began (a ``max_usd`` task's) is kept,
            # whatever room the budgets have without it.
            return None
        without = held.hold.id if held is not None and held.hold is not None else None
        for usage in ledger.usage(self.scope, run_id=self.run_id, dag_id=self.dag_id, without=without):
            if usage.left_usd < need:
                left = f"{format_usd_exact(usage.left_usd)} left"
                if usage.left_usd < 0:  # a cap lowered below what is held: "-$3.00 left" read as a typo
                    # Worded as check_cap's refusal of the same budget says it.
                    left = f"nothing left (it is {format_usd_exact(-usage.left_usd)} over its cap)"
                whole = (
                    " (more than its whole cap: only a higher cap makes room)" if need > usage.cap_usd else ""
                )
                return f"budget '{usage.name}' has {left}, need {format_usd_exact(need)}{whole}"
            left_gpu, cap_gpu = usage.left_gpu_hours, usage.cap_gpu_hours  # both None without a cap
            if left_gpu is not None and cap_gpu is not None and left_gpu < gpu:
                has = f"{format_gpu_hours(left_gpu)} GPU-hours left"
                if left_gpu < 0:
                    over = f"it is {format_gpu_hours(-left_gpu)} GPU-hours over its cap"
                    has = f"no GPU-hours left of {format_gpu_hours(cap_gpu)} ({over})"
                return f"budget '{usage.name}' has {has}, need {format_gpu_hours(gpu)}"
        return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from costaware.core.errors import ConfigurationError
        from costaware.triggers import MAX_POLL_ERRORS

        last, errors = "", 0
        while True:
            try:
                shortfall = await asyncio.to_thread(self._shortfall)
            except Exception as e:
                errors += 1
                # A wait of days for next month's budget failed its run at one ledger blip.
                if isinstance(e, ConfigurationError) or errors >= MAX_POLL_ERRORS:
                    yield TriggerEvent({"status": "error", "message": f"{type(e).__name__}: {e}"})
                    return
                self.log.warning(
                    "reading the budgets failed (%s: %s), %d time(s) in a row: reading again in %g s",
                    type(e).__name__,
                    e,
                    errors,
                    self.poll_interval,
                )
                await asyncio.sleep(self.poll_interval)
                continue
            errors = 0
            if shortfall is None:
                yield TriggerEvent({"status": "success", "message": f"budget for '{self.scope}' has room"})
                return
            if shortfall != last:
                self.log.info("waiting for budget: %s", shortfall)
                last = shortfall
            await asyncio.sleep(self.poll_interval)
