"""What waits in this machine's spools, in words (``costaware.cli.pending.spooled_said``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from costaware.cli.pending import SpooledCount, spooled_said

CURRENT = Path("/home/ml/airflow/costaware/spool")
EARLIER = Path("/srv/~/airflow/costaware/spool")


@pytest.mark.parametrize(
    ("counts", "where"),
    [
        # One folder reads "spool", an earlier release's too ("the spools" read as several).
        ([SpooledCount(CURRENT, 2, 0, earlier=False)], f"the spool {CURRENT}"),
        ([SpooledCount(EARLIER, 2, 0, earlier=True)], f"an earlier release's spool {EARLIER}"),
        (
            [SpooledCount(CURRENT, 1, 0, earlier=False), SpooledCount(EARLIER, 1, 0, earlier=True)],
            f"the spools {CURRENT} (1) and an earlier release's {EARLIER} (1)",
        ),
        # A folder holding only bills kept for a person is not one entries wait in.
        (
            [SpooledCount(CURRENT, 0, 1, earlier=False), SpooledCount(EARLIER, 2, 0, earlier=True)],
            f"an earlier release's spool {EARLIER}",
        ),
    ],
)
def test_the_folders_entries_wait_in_are_named_singular_or_plural_by_their_number(
    counts: list[SpooledCount], where: str
) -> None:
    said = spooled_said(counts, "of it")
    assert f"2 cost entries of it wait in {where} (the ledger could not be written then): " in said
