"""Keeping a spend gate's hold counting while a sensor between the gate and its task waits.

With ``spend_gate >> spot_window >> retrain`` the gate reserves at the start of the window and the spot
window may wait for spot until its latest start, hours later: a hold of ``reservation_ttl`` from the gate
lapsed meanwhile (reserved at 22:00 for 6 hours, gone at 04:00 while the task started at 05:35), another run
reserved that money, and the task's cost passed the cap when it billed. A sensor that waits keeps the holds
of the tasks it waits for until its latest start plus the gate's ``reservation_ttl``: the wait does not eat
the time the gate gave the task.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any


def keep_gated_holds(sensor: Any, context: Mapping[str, Any], latest_start: datetime) -> list[Any]:
    """Keep the open holds of the run's tasks downstream of ``sensor`` until ``latest_start`` + their TTL.

    The holds are the ones the spend gates upstream of ``sensor`` made (each in its own ledger, for a task
    instance of ``sensor``'s map index, or any where ``sensor`` is not mapped); each counts until
    ``latest_start`` plus that gate's ``reservation_ttl``, never less than it already does. A ledger that
    cannot be reached is only warned about: the wait goes on, and the hold keeps its own time limit. A hold
    that ended already is warned about too, not brought back (its money was free for others meanwhile).

    Returns:
        The reservations that now count longer.
    """
    from costaware.core.errors import LEDGER_UNREADABLE
    from costaware.core.ledger import read_holder
    from costaware.glue import is_template
    from costaware.hooks.ledger import CostLedgerHook
    from costaware.sensors.spend_cap import SpendCapSensor

    ti = context.get("ti")
    if ti is None or not sensor.has_dag():
        return []
    gates = [t for t in sensor.get_flat_relatives(upstream=True) if isinstance(t, SpendCapSensor)]
    if not gates:
        return []
    waited_for = sensor.get_flat_relative_ids(upstream=False)
    map_index = -1 if getattr(ti, "map_index", None) is None else int(ti.map_index)

    def rendered(value: Any) -> str:  # as the gate rendered it, in this run
        return str(sensor.render_template(value, context)) if is_template(str(value)) else str(value)

    # Each gate's task by its own reservation_ttl: by the longest of the ledger's gates, a gate of 1 hour
    # for retrain had its hold kept 48 hours, as another gate's for report.
    until_by_ledger: dict[str, dict[str, tuple[datetime, str]]] = {}  # task: (until, its gate)
    for gate in gates:
        target = _gated_task(gate, rendered)
        if target is None or target not in waited_for:
            continue
        ends = (latest_start + gate.reservation_ttl, gate.task_id)
        of_ledger = until_by_ledger.setdefault(rendered(gate.ledger_conn_id), {})
        of_ledger[target] = max(ends, of_ledger.get(target, ends))  # two gates for one task: the later
    kept = []
    for conn_id, until_by_task in until_by_ledger.items():
        try:
            ledger = CostLedgerHook(conn_id).get_conn()
            held_for: set[str] = set()
            for held in ledger.open_reservations(holder_prefix=f"{ti.dag_id}/{ti.run_id}/"):
                key = read_holder(held.holder)
                if (
                    key is None
                    or key.suffix is not None
                    or (key.dag_id, key.run_id) != (ti.dag_id, ti.run_id)
                    or key.task_id not in until_by_task
                    or (map_index >= 0 and key.map_index != map_index)
                ):
                    continue
                held_for.add(key.task_id)
                until = until_by_task[key.task_id][0]
                if held.expires_at >= until:
                    continue
                longer = ledger.extend(held.id, until)
                if longer.expires_at > held.expires_at:
                    kept.append(longer)
                    sensor.log.info(
                        "kept the budget hold %s of task %r counting until %s (it ended %s): waiting for the "
                        "latest start %s, plus the gate's reservation_ttl",
                        held.id,
                        key.task_id,
                        until.isoformat(),
                        held.expires_at.isoformat(),
                        latest_start.isoformat(),
                    )
            for task_id in sorted(set(until_by_task) - held_for):
                _say_if_lapsed(sensor, ledger, ti, task_id, map_index, gate_id=until_by_task[task_id][1])
        except LEDGER_UNREADABLE as e:
            sensor.log.warning(
                "could not keep the budget holds of the tasks this sensor waits for (ledger %r: %s); they "
                "lapse at their own time limit (the gate's reservation_ttl) if the wait outlasts it",
                conn_id,
                e,
            )
    return kept


def _say_if_lapsed(sensor: Any, ledger: Any, ti: Any, task_id: str, map_index: int, *, gate_id: str) -> None:
    """Warn, once a hold, where the gate's hold of ``task_id`` ended before this sensor could keep it.

    It lapsed without a word: a queue longer than the gate's ``reservation_ttl`` before the first look, and
    the task ran with nothing held while its money went to other runs.
    """
    from costaware.core.ledger import reservation_holder, utcnow
    from costaware.core.money import format_usd_exact

    latest = ledger.latest_reservation(reservation_holder(ti.dag_id, ti.run_id, task_id, map_index))
    if latest is None or not latest.lapsed(utcnow()):
        return
    told: set[str] = getattr(sensor, "_lapsed_holds_told", set())
    if latest.id in told:
        return
    sensor._lapsed_holds_told = told | {latest.id}
    sensor.log.warning(
        "the budget hold %s of task %r ended at %s, before this sensor could keep it counting: nothing is "
        "held for the task now, so another run may take its %s and the task's cost can pass the cap. Clear "
        "the spend gate %r to reserve again, and give it a reservation_ttl that covers the time until this "
        "sensor starts",
        latest.id,
        task_id,
        latest.expires_at.isoformat(),
        format_usd_exact(latest.usd),
        gate_id,
    )


def _gated_task(gate: Any, rendered: Any) -> str | None:
    """The task ``gate`` reserves for (its ``for_task_id``, else its one downstream task); None: unclear.

    Not the gate's own check: a gate that names none passed no hold to keep, and the wait goes on.
    """
    if gate.for_task_id:
        return str(rendered(gate.for_task_id))
    downstream = sorted(gate.downstream_task_ids)
    return downstream[0] if len(downstream) == 1 else None
