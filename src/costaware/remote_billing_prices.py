"""What a remote attempt is billed at: the on-demand price of the region and type it ran in, the spot mean.

Split out of :mod:`costaware.remote_billing` (its :class:`~costaware.remote_billing.AttemptBilling` is an
:class:`AttemptPricing`): the price look-ups a bill and a stop's cost are worked out with, each reading the
ledger's prices (``ledger_hook``) and saying at WARNING where a price is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any

from costaware.adapters.compute.base import COPY_SECONDS_BY_TYPE
from costaware.core.ledger import utcnow

if TYPE_CHECKING:
    from costaware.hooks.ledger import CostLedgerHook
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan


class AttemptPricing:
    """The prices a remote training's attempts are billed at, read from the ledger of ``ledger_conn_id``."""

    ledger_conn_id: str
    aws_conn_id: str | None

    if TYPE_CHECKING:  # BaseOperator's task logger, or the trigger's

        @property
        def log(self) -> Any: ...

    @cached_property
    def ledger_hook(self) -> CostLedgerHook:
        from costaware.hooks.ledger import CostLedgerHook

        return CostLedgerHook(ledger_conn_id=self.ledger_conn_id)

    def _on_demand_in(
        self, plan: RemotePlan, zone: str, *, raise_unavailable: bool = False, say: bool = True
    ) -> Decimal | None:
        """The on-demand price in ``zone``'s region where it is another than the plan's (None: the plan's).

        ``raise_unavailable``: a ledger that cannot be read raises (the caller asks again later) instead of
        reading as the plan's price, which under-bills a dearer region and sizes max_usd's stop past the cap.
        A price no source has there is the plan region's, with a warning (``say``: a poll that asks each
        time does not log it).
        """
        from costaware.adapters.price_source import list_price
        from costaware.core.errors import LEDGER_UNREADABLE, CostawareError
        from costaware.core.zone_choice import region_of

        region = region_of(zone, plan.region) if zone else plan.region
        if region == plan.region:
            return None
        try:
            return list_price(self.ledger_hook.get_conn(), plan.instance_type, region)
        except CostawareError as e:
            if raise_unavailable and isinstance(e, LEDGER_UNREADABLE):
                raise
            if say:
                self.log.warning(
                    "the on-demand price of %s in %s (zone %s) is unknown (%s): billed at %s's, %s USD/hour; "
                    "import or refresh prices for %s (costaware prices import / refresh)",
                    plan.instance_type,
                    region,
                    zone,
                    e,
                    plan.region,
                    plan.on_demand_usd_per_hour,
                    region,
                )
            return None

    def _ran_on_scale(
        self, plan: RemotePlan, job: Mapping[str, Any], *, raise_unavailable: bool = False, say: bool = True
    ) -> Decimal:
        """The ratio of the on-demand prices of the type ``job`` ran on and the plan's; 1 where the same.

        Batch (a compute environment's choice) and Kubernetes (a node pool's) may run a job on another type
        than the plan's, which priced it: that type's price, as a ratio, so a dearer one is not under-billed.
        A Batch job's billed seconds that hold its copies' (``COPY_SECONDS_BY_TYPE``) get the mean of the
        ratios, weighted by the seconds on each type: each copy is priced at the type it ran on.
        ``raise_unavailable``: a ledger that cannot be read (or whose database is missing) raises instead of
        reading as the plan's price: a bill or a stop worked out at the plan's price under-counts a dearer
        type, so the caller asks again later. ``say``: log the ratio (a poll that asks each time does not).
        """
        own_type = str(job.get("instance_type") or "")
        copies = dict((job.get("metrics") or {}).get(COPY_SECONDS_BY_TYPE) or {})
        total = Decimal(str(job.get("billable_seconds") or 0))

        def scale(instance_type: str) -> Decimal:
            return self._type_scale(plan, job, instance_type, raise_unavailable=raise_unavailable, say=say)

        if not copies or total <= 0 or all(t == own_type for t in copies):
            return scale(own_type)
        copy_seconds = {t: Decimal(str(s)) for t, s in copies.items()}
        own_seconds = max(total - sum(copy_seconds.values()), Decimal(0))
        weighted = own_seconds * scale(own_type) + sum(
            (s * scale(t) for t, s in copy_seconds.items()), Decimal(0)
        )
        return weighted / max(total, own_seconds + sum(copy_seconds.values()))

    def _type_scale(
        self,
        plan: RemotePlan,
        job: Mapping[str, Any],
        instance_type: str,
        *,
        raise_unavailable: bool = False,
        say: bool = True,
    ) -> Decimal:
        """The ratio of the on-demand prices of ``instance_type`` (``job`` ran on it) and the plan's type."""
        from costaware.core.errors import LEDGER_UNREADABLE, CostawareError

        ran_on = instance_type.removeprefix("ml.")
        planned = plan.instance_type.removeprefix("ml.")
        if not ran_on or ran_on == planned:
            return Decimal(1)
        try:
            scale = self._type_price_ratio(plan, ran_on)
        except (CostawareError, ArithmeticError) as e:
            if raise_unavailable and isinstance(e, LEDGER_UNREADABLE):
                raise
            self.log.warning(
                "job %s ran on %s, not the planned %s, whose price is unknown (%s): billed at %s's price",
                job.get("job_id"),
                ran_on,
                planned,
                e,
                planned,
            )
            return Decimal(1)
        if not say:
            return scale
        self.log.warning(
            "job %s ran on %s, not the planned %s: billed at %.3fx its price (their on-demand prices)",
            job.get("job_id"),
            ran_on,
            planned,
            scale,
        )
        return scale

    def _type_price_ratio(self, plan: RemotePlan, instance_type: str) -> Decimal:
        """The on-demand price of ``instance_type`` over the plan's type's, in the plan's region (IO).

        Raises:
            CostawareError: a type no price source has; ArithmeticError: a planned type priced at 0.
        """
        from costaware.adapters.price_source import list_price

        conn = self.ledger_hook.get_conn()
        planned = plan.instance_type.removeprefix("ml.")
        return list_price(conn, instance_type.removeprefix("ml."), plan.region) / list_price(
            conn, planned, plan.region
        )

    def _billed_spot_rate(
        self, state: AttemptState, job: Mapping[str, Any], *, price_unread_raises: bool = True
    ) -> Decimal:
        """The spot USD/hour an attempt is billed at.

        Its starting price or, given ``prices``, the time-weighted mean of the price in force over its run
        (``ended_at`` back by its billed seconds), so that a rise during the run is paid for.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        from costaware.adapters.spot_market import mean_spot_price
        from costaware.core.errors import CostawareError
        from costaware.training.attempt_effects import instances

        started_at = Decimal(str(state.spot_usd_per_hour))
        billing, plan = state.plan.billing, state.plan
        seconds = float(job["billable_seconds"]) / instances(plan)  # the run's length (all instances billed)
        if not billing or seconds <= 0:
            return started_at
        ended = job.get("ended_at")
        end = datetime.fromtimestamp(float(ended), tz=timezone.utc) if ended else utcnow()
        try:
            rate = mean_spot_price(
                prices=billing.prices,
                instance_type=plan.instance_type,
                region=plan.region,
                # An attempt moved to another zone pays that zone's prices.
                availability_zone=(state.current.zone if state.current else "") or billing.availability_zone,
                aws_conn_id=self.aws_conn_id,
                start=end - timedelta(seconds=seconds),
                end=end,
            )
        except (CostawareError, BotoCoreError, ClientError) as e:
            # The attempt still gets its entry: at the price it started on, with the reason in the log.
            self.log.warning("attempt billed at its starting spot price %s USD/hour: %s", started_at, e)
            return started_at
        zone = (state.current.zone if state.current else "") or billing.availability_zone or ""
        on_demand = self._on_demand_in(plan, zone, raise_unavailable=price_unread_raises, say=False)
        on_demand = on_demand or Decimal(plan.on_demand_usd_per_hour)
        if rate > on_demand:
            # AWS interrupts a spot instance whose price passes its maximum, by default the on-demand
            # price: no hour is billed above it (and max_usd bounds a spot attempt at it).
            self.log.warning(
                "mean spot price %s USD/hour over the attempt is above on-demand %s: billed at on-demand",
                rate,
                on_demand,
            )
            rate = on_demand
        if rate != started_at:
            self.log.info(
                "attempt billed at %s USD/hour, the mean spot price over its %.0f s (it started at %s)",
                rate,
                seconds,
                started_at,
            )
        return rate
