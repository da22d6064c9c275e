"""A ledger entry refuses, by field name, an amount no ledger column can hold or no cost can have."""

from __future__ import annotations

from decimal import Decimal

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.ledger import Kind, LedgerEntry


def _entry(**changed: object) -> LedgerEntry:
    values: dict[str, object] = {"dag_id": "d", "run_id": "r", "task_id": "train", "kind": Kind.COMPUTE}
    values["usd"] = Decimal("1.5")
    return LedgerEntry(**{**values, **changed})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "quantity",
            Decimal("NaN"),
            r"quantity must be a finite number >= 0 of at most .*, got Decimal\('NaN'\)",
        ),
        ("quantity", Decimal(-1), r"quantity must be a finite number >= 0 .*got Decimal\('-1'\)"),
        ("gpu_hours", Decimal("-0.5"), r"gpu_hours must be a finite number >= 0 .*got Decimal\('-0\.5'\)"),
        ("on_demand_usd", Decimal("Infinity"), r"on_demand_usd must be a finite number of at most"),
        ("unit_price_usd", Decimal("-2"), r"unit_price_usd must be a finite number >= 0"),
        ("kwh", float("nan"), r"kwh must be a finite number >= 0 .*got nan"),
        ("kg_co2e", Decimal("1e30"), r"kg_co2e must be a finite number >= 0 of at most 9,223,372,036,854"),
    ],
)
def test_a_bad_amount_is_refused_naming_its_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=r"ledger entry d/train: " + message):
        _entry(**{field: value})


def test_good_amounts_and_a_credit_are_taken() -> None:
    credit = _entry(usd=Decimal("-3"), on_demand_usd=Decimal("-4"), quantity=Decimal(2), kwh=None)
    assert (credit.usd, credit.on_demand_usd, credit.quantity) == (Decimal(-3), Decimal(-4), Decimal(2))
    assert _entry(gpu_hours=Decimal(0), kg_co2e=Decimal("0.25")).kg_co2e == Decimal("0.25")


def test_amounts_given_as_text_or_floats_are_kept_as_decimals_and_recorded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # reserve and set_budget take "4.20"; an entry took usd="3.95" too, then failed the write with
    # "'str' object has no attribute 'is_finite'" and recorded nothing.
    from costaware import Ledger

    entry = _entry(usd="3.95", on_demand_usd=7.9, quantity="1.5", gpu_hours=1, tags={"project": "churn"})
    assert (entry.usd, entry.on_demand_usd, entry.quantity, entry.gpu_hours) == (
        Decimal("3.95"),
        Decimal("7.9"),
        Decimal("1.5"),
        Decimal(1),
    )
    assert all(type(v) is Decimal for v in (entry.usd, entry.on_demand_usd, entry.quantity, entry.gpu_hours))
    ledger = Ledger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.set_budget("project=churn", "month", "500")
    ledger.record(entry)
    assert ledger.spent("project=churn") == Decimal("3.95")
    (row,) = ledger.report(group_by="tag:project")
    assert (row.usd, row.on_demand_usd, row.savings_usd) == (Decimal("3.95"), Decimal("7.9"), Decimal("3.95"))


def test_a_holder_key_is_slotted_as_the_other_value_classes_are() -> None:
    import dataclasses

    from costaware.core.ledger import read_holder

    key = read_holder("d/r/x/train/-1")
    assert key is not None and (key.dag_id, key.run_id, key.task_id, key.map_index) == (
        "d",
        "r/x",
        "train",
        -1,
    )
    assert not hasattr(key, "__dict__")  # one per open hold read: no dict each
    with pytest.raises(dataclasses.FrozenInstanceError):
        key.run_id = "r"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("holder", "read"),
    [
        ("d/nightly//train/-1", ("d", "nightly/", "train", -1, None)),
        ("d/a//b/train/3/egress", ("d", "a//b", "train", 3, "egress")),
        ("d//x/train/-1", ("d", "/x", "train", -1, None)),
        ("d//train/-1", None),  # no run id at all
        ("/r/train/-1", None),  # no DAG id
        ("d/r//-1", None),  # no task id
    ],
)
def test_a_holder_whose_run_id_has_an_empty_part_is_read(
    holder: str, read: tuple[object, ...] | None
) -> None:
    # A custom allowed_run_id_pattern allows 'nightly/': its holders read as no holder, so `budget release`
    # checked no task state (released a hold whose task still ran) and "what waits" missed the hold.
    from costaware.core.ledger import read_holder

    key = read_holder(holder)
    got = None if key is None else (key.dag_id, key.run_id, key.task_id, key.map_index, key.suffix)
    assert got == read
