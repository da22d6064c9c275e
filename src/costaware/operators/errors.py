"""The one place where costaware errors become Airflow task outcomes.

User or configuration errors fail the task without retry (retrying cannot fix a bad value); transient
errors (the ledger is unreachable) are re-raised so Airflow retries them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from airflow.sdk.exceptions import AirflowFailException

from costaware.core.errors import BudgetExceededError, ConfigurationError, CrossRegionEgressError


@contextmanager
def airflow_errors() -> Iterator[None]:
    """Map costaware errors raised inside the block to Airflow exceptions."""
    try:
        yield
    except (ConfigurationError, CrossRegionEgressError, BudgetExceededError) as e:
        raise AirflowFailException(str(e)) from e
