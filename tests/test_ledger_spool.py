"""The spool's drain results summed, as ``costaware spool drain`` and the listener add up their folders'."""

from __future__ import annotations

from costaware.ledger_spool import DrainResult, combined


def test_drain_results_sum_field_by_field_and_merge_what_was_unavailable() -> None:
    current = DrainResult(
        written=2, refused=1, waiting=3, billed_already=1, unsure=0, unavailable={"a": "down", "b": "no file"}
    )
    earlier = DrainResult(
        written=5, refused=0, waiting=1, billed_already=2, unsure=4, unavailable={"b": "gone"}
    )
    assert current + earlier == DrainResult(
        written=7,
        refused=1,
        waiting=4,
        billed_already=3,
        unsure=4,
        # A ledger both drains found unavailable: the later folder's reason, as the loops kept it.
        unavailable={"a": "down", "b": "gone"},
    )
    # Operands stay as they were (the CLI reads each folder's result after the sum).
    assert current.written == 2 and current.unavailable == {"a": "down", "b": "no file"}


def test_combined_drains_of_no_folder_or_with_no_unavailable_map_read_as_nothing_done() -> None:
    assert combined([]) == DrainResult(unavailable={})
    assert combined([DrainResult(written=1), DrainResult(unsure=2)]) == DrainResult(
        written=1, unsure=2, unavailable={}
    )
