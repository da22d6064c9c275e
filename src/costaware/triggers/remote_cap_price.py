"""What a remote training's job may run on a dearer instance type than planned, under ``max_usd``.

Batch (a compute environment's choice) and Kubernetes (a node pool's) may run a job on another type than the
plan's; its stop at the cap was sized at the planned type's price. The limit there is weighed at that
type's price, for a job the wait sees and for a followed one as this try found it.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger as _TriggerBase
else:
    # A mixin of RemoteTrainingJobTrigger (through CapStopping), not a trigger of its own.
    _TriggerBase = object


class OtherTypePricing(_TriggerBase):
    """The dearer type's limit of :class:`~costaware.triggers.remote_cap_stop.CapStopping`."""

    # Set by RemoteTrainingJobTrigger.__init__ (see there).
    job_id: str | None
    state: dict[str, Any]
    ledger_conn_id: str
    aws_conn_id: str | None
    _other_type_limit: tuple[str, int | None] | None

    def _followed_other_type_limit(self, found: Any) -> int | None:
        """What a followed job ``found`` on a dearer type than planned may run there (s); None: not dearer.

        Its ``stop_after_seconds`` was sized at the planned type's price: found on one 4 times dearer and
        never listed to this wait, it was stopped at that limit, billed past ``max_usd``. Kept as the dearer
        type's limit (:attr:`_other_type_limit`), so that its stop records it, as a listed job's does. Raises
        the ledger's unreadable errors (``LEDGER_UNREADABLE``, said) where the price is unknown for now: the
        caller keeps the planned limit meanwhile and asks again soon.
        """
        from costaware.core.errors import LEDGER_UNREADABLE
        from costaware.core.money import format_usd_exact
        from costaware.training.attempts import AttemptState

        job_id = str(self.job_id)
        if not self._runs_on_other_type(found):
            return None
        try:
            weighed = self._limit_on_other_type(found, AttemptState.from_json(self.state))
        except LEDGER_UNREADABLE as e:
            self.log.warning(
                "price of job %s's type %s unknown for now (%s): its stop at the cap falls due as at the "
                "planned type's price until it is read (asked again soon)",
                job_id,
                found.instance_type,
                e,
            )
            raise
        if weighed is None or weighed[0] is None:
            return None
        limit = weighed[0]
        said = self._other_type_limit
        if said is None or said[0] != job_id or said[1] != limit:
            self.log.warning(
                "job %s was found on %s, not the planned %s: at %s/hour there, it is stopped after %d s of "
                "running",
                job_id,
                found.instance_type,
                self.state.get("instance_type"),
                format_usd_exact(weighed[1]),
                self._stopped_after_seconds(limit),
            )
        self._other_type_limit = (job_id, limit)
        return limit

    def _stopped_after_seconds(self, other_type_limit: int) -> int:
        """When a job limited to ``other_type_limit`` there is stopped: the sooner of it and a followed job's.

        A followed job's ``stop_after_seconds`` (what the budgets left when this try found it) may come
        first: said as the dearer type's limit, the log named a stop later than the one sent.
        """
        current = self.state.get("current") or {}
        held = current.get("stop_after_seconds") if current.get("stop_by_poll") else None
        return other_type_limit if held is None else min(int(held), other_type_limit)

    def _runs_on_other_type(self, status: Any) -> bool:
        """Whether ``status``'s job runs on another type than planned, with a cap to weigh it against.

        Asked before the state is parsed (:meth:`_limit_on_other_type`): a state with no plan has no cap.
        """
        planned = str(self.state.get("instance_type") or "").removeprefix("ml.")
        if self.state.get("max_usd") is None or not planned or not status.instance_type:
            return False
        return bool(status.instance_type.removeprefix("ml.") != planned)

    def _limit_on_other_type(self, status: Any, state: Any) -> tuple[int | None, Decimal] | None:
        """What ``status``'s job may run (s) on the type it runs on, at that type's price, and that price.

        ``status``: a job :meth:`_runs_on_other_type` says runs on another type; ``state``: the attempt
        state (``AttemptState``), parsed once by the caller. None where there is no current attempt; the
        limit is None where its type is not dearer (it stays within the cap). Raises the ledger's
        unreadable errors (``LEDGER_UNREADABLE``) where a price is unknown for now.
        """
        from costaware.remote_billing import KilledTrainingBilling
        from costaware.training.attempt_effects import cap_rate, capped_seconds

        plan, current = state.plan, state.current
        if current is None:
            return None
        billing = KilledTrainingBilling(
            ledger_conn_id=self.ledger_conn_id, aws_conn_id=self.aws_conn_id, log=self.log
        )
        scale = billing._ran_on_scale(plan, status.to_dict(), raise_unavailable=True, say=False)
        on_demand = billing._on_demand_in(plan, current.zone, raise_unavailable=True, say=False)
        rate = cap_rate(state, current.market, on_demand) * scale
        return (capped_seconds(state, rate) if scale > 1 else None), rate  # a cheaper type stays within it
