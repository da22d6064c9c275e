"""One budget alert: a threshold crossed by a budget in a period, and the message it sends.

Split from :mod:`costaware.notifications.budget`, which re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from costaware.core.budget_forecast import FORECAST
from costaware.core.money import format_usd_exact


@dataclass(frozen=True, slots=True)
class BudgetAlert:
    """One threshold crossed by one budget in one period."""

    budget: str
    period_key: str
    threshold: str
    spent_usd: Decimal
    cap_usd: Decimal
    forecast_usd: Decimal

    @property
    def message(self) -> str:
        # Every digit to the micro-dollar, as on the Cost page: a forecast of $12.000009 read "$12.00" next
        # to "spent $0.000009", figures that no longer added up.
        if self.threshold == FORECAST:
            what = f"is forecast to end the period at {format_usd_exact(self.forecast_usd)}, above its cap"
        else:
            what = f"passed {self.threshold} of its cap"
        return (
            f"costaware budget '{self.budget}' ({self.period_key}) {what}: spent "
            f"{format_usd_exact(self.spent_usd)} of {format_usd_exact(self.cap_usd)}, "
            f"forecast {format_usd_exact(self.forecast_usd)}"
        )

    def as_dict(self) -> dict[str, str]:
        return {
            "budget": self.budget,
            "period": self.period_key,
            "threshold": self.threshold,
            "spent_usd": str(self.spent_usd),
            "cap_usd": str(self.cap_usd),
            "forecast_usd": str(self.forecast_usd),
            "message": self.message,
        }
