"""The plan of a remote training: what every attempt needs, fixed when the task starts.

``RemoteTrainingOperator`` renders its arguments, reads the spot window's decision and calls
:func:`make_plan`; the :class:`RemotePlan` it returns travels inside the
:class:`~costaware.training.attempts.AttemptState` between the operator and its trigger, as JSON
(``costaware.training.pauses`` turns it into what a pause needs). No Airflow and no IO here.

The plan's values are in ``remote_plan``, making it from the arguments in ``arguments``; every name is
importable from here.
"""

from __future__ import annotations

from costaware.core.given import blank
from costaware.training.plan.arguments import (
    AWS_BACKENDS,
    PlanArguments,
    Start,
    billing_plan,
    job_seconds_left,
    make_plan,
    positive_hours,
    wait_limit,
    watch_plan,
)
from costaware.training.plan.remote_plan import (
    DEFAULT_GRACE_SECONDS,
    Billing,
    Placement,
    PriceWatch,
    RemotePlan,
)

__all__ = [
    "AWS_BACKENDS",
    "DEFAULT_GRACE_SECONDS",
    "Billing",
    "Placement",
    "PlanArguments",
    "PriceWatch",
    "RemotePlan",
    "Start",
    "billing_plan",
    "blank",
    "job_seconds_left",
    "make_plan",
    "positive_hours",
    "wait_limit",
    "watch_plan",
]
