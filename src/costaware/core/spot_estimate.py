"""The estimated compute entry a spot window decision writes to the cost ledger (pure)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from costaware.core.ledger import Kind, LedgerEntry
from costaware.core.money import MICRO_USD
from costaware.core.spot_decision import SpotDecision


def decision_entry(
    decision: SpotDecision,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    try_number: int,
    map_index: int,
    instance_type: str,
    region: str,
    tags: Mapping[str, str],
) -> LedgerEntry:
    """The ledger entry of a decision completed for its job (:meth:`SpotDecision.for_job`).

    Its ``entry_uid`` is fixed by the task try, so that writing it again (a resumed sensor) is a no-op.

    Raises:
        ValueError: a decision that was not completed for its job (no price, estimate or runtime).
    """
    usd_per_hour, estimated = decision.usd_per_hour, decision.estimated_usd
    runtime, on_demand = decision.expected_runtime_hours, decision.on_demand_usd_per_hour
    if usd_per_hour is None or estimated is None or runtime is None or on_demand is None:
        raise ValueError(f"the spot decision {decision.to_xcom()} was not completed for its job")
    key = f"spot-window:{dag_id}:{run_id}:{task_id}:{map_index}:{try_number}"
    return LedgerEntry(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        kind=Kind.COMPUTE,
        usd=estimated,
        try_number=try_number,
        map_index=map_index,
        instance_type=instance_type,
        region=region,
        market=decision.market,  # type: ignore[arg-type]  # LedgerEntry parses the text
        quantity=runtime,
        unit="hour",
        unit_price_usd=usd_per_hour,
        on_demand_usd=(on_demand * runtime).quantize(MICRO_USD),
        estimated=True,
        tags=dict(tags),
        price_source=decision.price_source or "",
        note=f"spot window decision: {decision.reason} (prices: {decision.price_detail or '-'})",
        entry_uid=uuid.uuid5(uuid.NAMESPACE_URL, key).hex,
    )
