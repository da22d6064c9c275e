from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costaware.core.cache_policy import (
    CombinedPolicy,
    EntryStats,
    LeastRecentlyUsedPolicy,
    MaxAgePolicy,
    MaxTotalSizePolicy,
    gb_months,
    storage_usd,
)
from costaware.core.errors import ConfigurationError

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)


def entry(key: str, size: int, created_days_ago: float, used_days_ago: float) -> EntryStats:
    return EntryStats(key, size, NOW - timedelta(days=created_days_ago), NOW - timedelta(days=used_days_ago))


ENTRIES = [
    entry("a", 100, 30, 1),  # old but used yesterday
    entry("b", 300, 5, 5),
    entry("c", 200, 2, 0.5),
    entry("d", 400, 10, 9),  # least recently used
]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (MaxAgePolicy(timedelta(days=7)), ["d", "a"]),
        (MaxAgePolicy(timedelta(days=60)), []),
        (MaxTotalSizePolicy(1000), []),
        (MaxTotalSizePolicy(600), ["d"]),
        (MaxTotalSizePolicy(250), ["d", "b", "a"]),
        (MaxTotalSizePolicy(0), ["d", "b", "a", "c"]),
        (LeastRecentlyUsedPolicy(2), ["d", "b"]),
        (LeastRecentlyUsedPolicy(10), []),
        (CombinedPolicy([MaxAgePolicy(timedelta(days=7)), MaxTotalSizePolicy(250)]), ["d", "a", "b"]),
    ],
)
def test_policies(policy: object, expected: list[str]) -> None:
    assert policy.select(ENTRIES, NOW) == expected  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: MaxAgePolicy(timedelta(0)), "max_age must be positive, got 0:00:00"),
        (lambda: MaxTotalSizePolicy(-1), "max_bytes must be zero or more, got -1"),
        (lambda: LeastRecentlyUsedPolicy(-3), "max_entries must be zero or more, got -3"),
        (lambda: CombinedPolicy([]), "at least one policy"),
    ],
)
def test_bad_arguments(make: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make()  # type: ignore[operator]


def test_storage_cost() -> None:
    month = timedelta(seconds=2629800)
    assert gb_months(10**9, NOW, NOW + month) == Decimal("1.000000")
    assert gb_months(5 * 10**8, NOW, NOW + month / 2) == Decimal("0.250000")
    assert gb_months(10**9, NOW, NOW - month) == 0
    assert storage_usd(Decimal("2")) == Decimal("0.046000")  # S3 Standard, 0.023 USD per GB-month
    assert storage_usd(Decimal("2"), Decimal("0.0125")) == Decimal("0.025000")
    with pytest.raises(ConfigurationError, match="storage price must be zero or more"):
        storage_usd(Decimal(1), Decimal("-1"))
    with pytest.raises(ConfigurationError, match="size must be zero or more bytes, got -5"):
        gb_months(-5, NOW, NOW)
