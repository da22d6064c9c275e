"""The zone of a remote training's next spot attempt, from its state (``core.zone_choice`` on the attempts).

Pure: what the market looks like now (prices, capacity, what a move costs) comes in from the operator,
which reads it; the attempts' preempted runs per zone come from the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from costaware.core.zone_choice import DEFAULT_GUARD_WINDOW, PreemptedRun, ZoneChoice, ZoneView, choose_zone
from costaware.training.attempts import Attempt, AttemptState, remaining_hours

#: The work assumed left when the plan knows no expected runtime: it weighs churn against a move, and it is
#: the length of the prior's run in each zone's mean run (``core.zone_choice``): give a runtime where known.
UNKNOWN_RUNTIME_HOURS = Decimal(1)


def allowed_zones(state: AttemptState) -> tuple[str, ...]:
    """The zones the next attempt may go to: the plan's list, or the one zone of the decision ("")."""
    placement = state.plan.placement
    return placement.zones or (placement.first_zone,)


def last_zone(state: AttemptState) -> str | None:
    """The zone of the latest spot attempt (the first zone before any), or None when none is known."""
    for attempt in reversed(state.attempts):
        if attempt.market == "spot":
            return attempt.zone
    return state.plan.placement.first_zone or None


def preempted_runs(state: AttemptState) -> dict[str, tuple[PreemptedRun, ...]]:
    """``zone -> its preempted spot attempts``, oldest first.

    Each with how long it ran (:meth:`AttemptState.ran_seconds`: its exact runs where known, else its bill),
    whether it kept work (``Attempt.kept_work``) and whether it saved on its notice (unknown: it did not).
    """
    runs: dict[str, list[PreemptedRun]] = {}
    for attempt in state.attempts:
        if attempt.market == "spot" and attempt.cause == "preemption":
            runs.setdefault(attempt.zone, []).append(_preempted_run(state, attempt))
    return {zone: tuple(zone_runs) for zone, zone_runs in runs.items()}


def _preempted_run(state: AttemptState, attempt: Attempt) -> PreemptedRun:
    return PreemptedRun(
        seconds=state.ran_seconds(attempt),  # how long it ran, not its instance-seconds or its bill
        kept_work=attempt.kept_work(),
        saved_on_notice=attempt.saved_on_notice() is True,
    )


def next_zone(
    state: AttemptState,
    *,
    prices: Mapping[str, Decimal],
    capacity: Mapping[str, bool | None],
    move_usd: Mapping[str, Decimal],
) -> ZoneChoice:
    """Where the next spot attempt goes (or on-demand: zone None), by ``core.zone_choice.choose_zone``.

    Args:
        state: The training's state, the ended attempt recorded.
        prices: ``zone -> spot USD/hour`` now; a zone without one is priced at the state's spot price.
        capacity: ``zone -> capacity now`` (missing or None: unknown).
        move_usd: ``zone -> egress USD`` of running there (missing: 0, the same region).
    """
    plan, placement = state.plan, state.plan.placement
    runtime = Decimal(placement.runtime_hours) if placement.runtime_hours else UNKNOWN_RUNTIME_HOURS
    remaining = remaining_hours(
        state,
        runtime_hours=runtime,
        restart_overhead_minutes=placement.restart_overhead_seconds / 60,
        checkpoint_every_seconds=plan.checkpoint_every_seconds,
    )
    fallback = Decimal(state.spot_usd_per_hour or plan.on_demand_usd_per_hour)
    runs = preempted_runs(state)
    views = [
        ZoneView(
            zone=zone,
            spot_usd_per_hour=float(prices.get(zone, fallback)),
            has_capacity=capacity.get(zone),
            preempted_runs=runs.get(zone, ()),
            move_usd=float(move_usd.get(zone, Decimal(0))),
        )
        for zone in allowed_zones(state)
    ]
    return choose_zone(
        views,
        current=last_zone(state),
        remaining_seconds=float(remaining) * 3600,
        restart_overhead_seconds=placement.restart_overhead_seconds,
        checkpoint_every_seconds=plan.checkpoint_every_seconds,
        guard_window=DEFAULT_GUARD_WINDOW if placement.guard else None,
    )
