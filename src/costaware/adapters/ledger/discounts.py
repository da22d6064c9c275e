"""How much of the savings in the ledger came from negotiated discounts, per discount rule.

An on-demand entry priced with a ``[costaware] discounts`` rule has ``price_source``
``<source>+discount:<kind>:<name>``, its undiscounted list figure in ``on_demand_usd`` and the discounted
charge in ``usd``: the difference is the discount.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from sqlalchemy import and_, func, select

from costaware.adapters.ledger import schema
from costaware.core.money import from_micros

if TYPE_CHECKING:
    from costaware.adapters.ledger.engine import LedgerDatabase
    from costaware.adapters.ledger.reports import Filters

MARKER = "+discount:"


def discounts_by_rule(ledger: LedgerDatabase, filters: Filters) -> dict[str, Decimal]:
    """``{"team:ml": Decimal("1.20"), ...}``: discount USD of the recorded entries matching ``filters``."""
    e = schema.entries
    query = (
        select(e.c.price_source, func.sum(e.c.on_demand_usd_micros - e.c.usd_micros))
        .where(
            and_(
                e.c.estimated.is_(False),
                e.c.price_source.contains(MARKER, autoescape=True),
                e.c.on_demand_usd_micros.is_not(None),
                *filters.conditions(),
            )
        )
        .group_by(e.c.price_source)
    )
    totals: dict[str, Decimal] = {}
    with ledger.reading() as conn:
        for source, micros in conn.execute(query):
            rule = str(source).split(MARKER, 1)[1]
            totals[rule] = totals.get(rule, Decimal(0)) + from_micros(int(micros or 0))
    return dict(sorted(totals.items()))
