"""DAG params that costaware reads, declared so the trigger form refuses what the ledger cannot store.

``team``, ``project`` and ``owner`` become ledger tags of every cost a run records (and ``project`` picks
the budget that gates training). A tag value cannot hold ``,`` or ``=``: those separate the parts of a
budget scope such as ``project=churn,team=ml``. Declare them with :func:`tag_param` and Airflow refuses a
trigger with such a value before the run starts, naming the param::

    from costaware.params import tag_param

    @dag(params={"team": tag_param("ml", title="Team"), "owner": tag_param("data-science", title="Owner")})
"""

from __future__ import annotations

from typing import Any

from costaware.core.budgets import TAG_VALUE_PATTERN, TAG_VALUE_RULE

__all__ = ["TAG_VALUE_PATTERN", "tag_param"]


def tag_param(default: str, *, title: str, description: str = "", max_length: int = 200) -> Any:
    """An Airflow ``Param`` for a value that becomes a ledger tag: a string, not blank, no ``,`` or ``=``.

    Args:
        default: The value a scheduled run uses; checked here, so a bad default fails when the DAG parses.
        title: The label of the trigger form's field.
        description: What the tag is for; the rule for its value is appended.
        max_length: The most characters the form accepts.

    Raises:
        ValueError: a default that could not be stored as a tag.
    """
    import re

    from airflow.sdk import Param

    if not re.match(TAG_VALUE_PATTERN, str(default)):
        raise ValueError(f"tag_param default {default!r} for {title!r} must be {TAG_VALUE_RULE}")
    rule = f"A ledger tag: {TAG_VALUE_RULE} (they separate a budget scope's parts)."
    return Param(
        default,
        type="string",
        minLength=1,
        maxLength=max_length,
        pattern=TAG_VALUE_PATTERN,
        title=title,
        description=f"{description} {rule}".strip(),
    )
