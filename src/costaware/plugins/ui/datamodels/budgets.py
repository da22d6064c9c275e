"""The Cost API's budget bodies: a budget's period with burn-down and forecast, a change, the spend gates."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from costaware.plugins.ui.datamodels.common import Answer, usd_field
from costaware.plugins.ui.filters import PERIOD_PATTERN, SCOPE_PATTERN, tidy_scope

if TYPE_CHECKING:
    from costaware.adapters.ledger.gate_requests import GateRequest
    from costaware.adapters.ledger.views import BudgetView


class BurnDownPoint(Answer):
    """Spend of a budget's period up to the end of one day."""

    day: str
    spent_usd: str = usd_field()


class BudgetStatus(Answer):
    """A budget in its current period: cap, spend, reservations, burn-down and period-end forecast."""

    budget: str = Field(description="The budget's label, e.g. project=churn/month (2026-11).")
    name: str
    period: str
    cap_usd: str = usd_field()
    spent_usd: str = usd_field()
    reserved_usd: str = usd_field()
    left_usd: str = usd_field()
    burn_down: list[BurnDownPoint]
    forecast_usd: str = usd_field()
    forecast_low_usd: str = usd_field()
    forecast_high_usd: str = usd_field()
    runs_left: int = Field(description="Runs the timetables of its DAGs schedule before the period ends.")

    @classmethod
    def of(cls, view: BudgetView) -> BudgetStatus:
        usage, forecast = view.burn_down.usage, view.forecast
        return cls(
            budget=usage.label,
            name=usage.name,
            period=usage.period_key,
            cap_usd=str(usage.cap_usd),
            spent_usd=str(usage.spent_usd),
            reserved_usd=str(usage.reserved_usd),
            left_usd=str(usage.left_usd),
            burn_down=[
                BurnDownPoint(day=d.isoformat(), spent_usd=str(v)) for d, v in view.burn_down.cumulative
            ],
            forecast_usd=str(forecast.forecast_usd),
            forecast_low_usd=str(forecast.low_usd),
            forecast_high_usd=str(forecast.high_usd),
            runs_left=forecast.runs_left,
        )


class Budgets(Answer):
    """The budgets the user may see under the filters."""

    budgets: list[BudgetStatus]


class BudgetChange(BaseModel):
    """A budget to create or change from the UI."""

    # A misspelt field ("cap_gpu_hourz") was dropped and the change answered 200 without it.
    model_config = ConfigDict(extra="forbid")

    scope: str = Field(
        pattern=SCOPE_PATTERN,
        max_length=512,  # the ledger's column
        description="Tags the budget covers, e.g. project=churn (at most 512 characters).",
    )
    period: str = Field(pattern=PERIOD_PATTERN)
    cap_usd: str | None = Field(
        default=None,
        description='The cap in USD, e.g. 250, "250.50", "$1,000"; left out: the budget\'s own (a new '
        "budget needs it).",
    )
    # Left out: the budget's own (a cap raise kept neither before: a GPU budget lost its GPU-hour cap).
    cap_gpu_hours: str | None = Field(
        default=None,
        description="GPU-hour cap; left out: the budget's own (none for a new one); null: no GPU-hour cap.",
    )
    timezone: str | None = Field(
        default=None,
        max_length=64,
        description="Where days and months start; left out: the budget's own, else UTC.",
    )

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, body: Any) -> Any:
        """Refuse a field the change does not take by name, with the one meant ("cap_gpu_hour").

        ``extra="forbid"`` alone answered "Extra inputs are not permitted", naming no field it takes.
        """
        from costaware.core.errors import did_you_mean

        if not isinstance(body, dict):
            return body
        fields = list(cls.model_fields)
        for name in body:
            if name not in fields:
                raise ValueError(
                    f"{name!r} is not a field of a budget change{did_you_mean(name, fields)}; "
                    f"the fields are {', '.join(fields)}"
                )
        return body

    @field_validator("scope", mode="before")
    @classmethod
    def _scope(cls, value: Any) -> Any:
        """The scope as the CLI reads it (``project = churn``: ``project=churn``), else a named error.

        The pattern alone refused ``project = churn`` and ``project churn`` with the regex as the only
        explanation.
        """
        from costaware.core.budgets import Scope, quoted_scope_refusal
        from costaware.core.errors import InvalidBudgetError

        if not isinstance(value, str):
            return value  # pydantic's own "Input should be a valid string"
        # Taken as typed, the quotes were part of the tag: a budget over a value no task has.
        refusal = quoted_scope_refusal(value, lambda bare: f"give {bare!r}")
        if refusal is not None:
            raise ValueError(refusal)
        scope = tidy_scope(value)
        # Always, not only where the pattern fails: 'project=null' matches it, and its refusal (a tag never
        # set) came from the cap's check, filed under cap_usd.
        try:
            Scope.given(scope)  # its message says which part is wrong
        except InvalidBudgetError as e:
            raise ValueError(str(e)) from e
        if not re.fullmatch(SCOPE_PATTERN, scope):
            raise ValueError(
                f"scope {value!r} is not tags such as project=churn or project=churn,team=ml (a tag name "
                "starts with a letter, up to 64 letters, digits, '_', '.', '-'; a value up to 128 "
                "characters, no ',' or '='), or * for all spend"
            )
        return scope

    @field_validator("period", mode="before")
    @classmethod
    def _period(cls, value: Any) -> Any:
        """A period the ledger knows, else an error naming the value and the choices."""
        from costaware.core.budgets import Period
        from costaware.core.errors import InvalidBudgetError

        if not isinstance(value, str):
            return value
        try:
            return Period.parse(value.strip()).value
        except InvalidBudgetError as e:
            raise ValueError(str(e)) from e

    @field_validator("cap_usd", "cap_gpu_hours", mode="before")
    @classmethod
    def _amount(cls, value: Any, info: Any) -> Any:
        """An amount as the CLI reads it (250, "$250", "1,000"), else an error naming the value and the field.

        A bare regex refused the JSON number 150 and "$150" with its pattern as the only explanation.
        """
        from costaware.core.errors import ConfigurationError
        from costaware.core.money import parse_gpu_hours, parse_usd

        if value is None:
            return None  # cap_usd: the budget's own; cap_gpu_hours: no GPU-hour cap
        try:
            if info.field_name == "cap_gpu_hours":
                amount = parse_gpu_hours(value, name=info.field_name)
            else:
                amount = parse_usd(value, name=info.field_name)
        except ConfigurationError as e:
            raise ValueError(str(e)) from e
        if amount >= 10**12:
            raise ValueError(f"{info.field_name} {value!r} is too large: at most 999999999999.999999")
        return format(amount, "f")  # as typed: str() wrote 0.0000001 as 1E-7 in messages

    @field_validator("cap_usd", "cap_gpu_hours", "timezone", mode="after")
    @classmethod
    def _as_a_budget_takes_it(cls, value: Any, info: Any) -> Any:
        """The field as ``Budget.create`` checks it (a cap below a micro-dollar, an unknown time zone).

        Checked as the ledger's write, its error came without the field's name (``unknown time zone
        'Mars/X'``, where every other bad field is ``timezone: ...``).
        """
        from costaware.core.budgets import Budget
        from costaware.core.errors import CostawareError

        if value is None:
            return value  # left out: the budget's own
        if info.field_name == "timezone" and not value.strip():
            # A client's unset variable, as the CLI's --timezone '' is refused: it kept the budget's own.
            raise ValueError(
                "empty: give an IANA name such as 'Europe/Berlin', or leave timezone out for the budget's "
                "own (UTC for a new one)"
            )
        given: dict[str, Any] = {"cap_usd": "0", "cap_gpu_hours": None, "timezone": "UTC"}
        given[info.field_name] = value
        try:
            Budget.create(
                # The scope and period as read, where they were readable: the message names the budget.
                info.data.get("scope", "*"),
                info.data.get("period", "month"),
                given["cap_usd"],
                cap_gpu_hours=given["cap_gpu_hours"],
                timezone=given["timezone"],
            )
        except CostawareError as e:
            raise ValueError(str(e)) from e
        return value


class BudgetSet(Answer):
    """The budget as set, and who set it (the audit trail has the old and the new cap)."""

    budget: str
    cap_usd: str = usd_field()
    set_by: str


class Gate(Answer):
    """A spend gate that did not get its money at once: what it asked, of which budget, when."""

    requested_at: str
    updated_at: str
    dag_id: str
    run_id: str
    task_id: str
    for_task_id: str
    scope: str
    budget: str
    usd: str = usd_field()
    status: str = Field(
        description="refused, skipped, waiting, reserved, approval, approved, rejected, gave_up (the gate's "
        "task ended while it waited) or run_ended (its run ended while it waited)."
    )
    message: str

    @classmethod
    def of(cls, g: GateRequest) -> Gate:
        return cls(
            requested_at=g.requested_at.isoformat(),
            updated_at=g.updated_at.isoformat(),
            dag_id=g.dag_id,
            run_id=g.run_id,
            task_id=g.task_id,
            for_task_id=g.for_task_id,
            scope=g.scope,
            budget=g.budget,
            usd=str(g.usd),
            status=g.status,
            message=g.message,
        )


class Gates(Answer):
    """Spend gates refused, skipped, waiting or asking for approval, newest first."""

    gates: list[Gate]
