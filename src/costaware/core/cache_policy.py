"""Feature-cache eviction policies and the cache's storage cost, as pure functions over entry stats.

Shaped like Optuna's pruners: one small abstract base with ONE abstract method, one strategy per class,
arguments validated in the constructor. ``costaware.adapters.feature_store`` lists the entries, asks a
policy which keys to evict, and deletes them.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from costaware.core.errors import ConfigurationError

#: AWS S3 Standard, first 50 TB/month in us-east-1 (USD per GB-month); see costaware/data/SOURCES.md.
S3_STANDARD_USD_PER_GB_MONTH = Decimal("0.023")
#: Seconds in the average month (365.25 / 12 days), the unit AWS bills storage in.
SECONDS_PER_MONTH = Decimal("2629800")
BYTES_PER_GB = Decimal(10**9)


@dataclass(frozen=True, slots=True)
class EntryStats:
    """What eviction needs to know about one cache entry.

    Attributes:
        key: The entry's cache key.
        bytes: Stored size.
        created_at: When the entry was committed (timezone-aware).
        last_used_at: When it was last written or reused (timezone-aware).
    """

    key: str
    bytes: int
    created_at: datetime
    last_used_at: datetime


def _lru_first(entries: Sequence[EntryStats]) -> list[EntryStats]:
    """Least recently used first; ties by age then key, so the choice is deterministic."""
    return sorted(entries, key=lambda e: (e.last_used_at, e.created_at, e.key))


class EvictionPolicy(abc.ABC):
    """Chooses which cache entries to delete."""

    @abc.abstractmethod
    def select(self, entries: Sequence[EntryStats], now: datetime) -> list[str]:
        """Keys of the entries to evict, least recently used first.

        Args:
            entries: Every committed entry of the cache.
            now: The current time (timezone-aware).
        """


class MaxAgePolicy(EvictionPolicy):
    """Evicts entries created longer than ``max_age`` ago, however often they were reused.

    Args:
        max_age: The oldest an entry may get.
    """

    def __init__(self, max_age: timedelta) -> None:
        if max_age <= timedelta(0):
            raise ConfigurationError(f"max_age must be positive, got {max_age}")
        self.max_age = max_age

    def select(self, entries: Sequence[EntryStats], now: datetime) -> list[str]:
        """Entries older than ``max_age``."""
        return [e.key for e in _lru_first(entries) if now - e.created_at > self.max_age]


class MaxTotalSizePolicy(EvictionPolicy):
    """Evicts least recently used entries until the cache holds at most ``max_bytes``.

    Args:
        max_bytes: The most bytes the cache may hold.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ConfigurationError(f"max_bytes must be zero or more, got {max_bytes}")
        self.max_bytes = max_bytes

    def select(self, entries: Sequence[EntryStats], now: datetime) -> list[str]:
        """The least recently used entries whose removal brings the total to ``max_bytes`` or less."""
        total = sum(e.bytes for e in entries)
        chosen: list[str] = []
        for entry in _lru_first(entries):
            if total <= self.max_bytes:
                break
            chosen.append(entry.key)
            total -= entry.bytes
        return chosen


class LeastRecentlyUsedPolicy(EvictionPolicy):
    """Keeps the ``max_entries`` most recently used entries and evicts the rest.

    Args:
        max_entries: How many entries to keep.
    """

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ConfigurationError(f"max_entries must be zero or more, got {max_entries}")
        self.max_entries = max_entries

    def select(self, entries: Sequence[EntryStats], now: datetime) -> list[str]:
        """All but the ``max_entries`` most recently used entries."""
        ordered = _lru_first(entries)
        return [e.key for e in ordered[: max(len(ordered) - self.max_entries, 0)]]


class CombinedPolicy(EvictionPolicy):
    """Evicts what any of its policies would evict; size limits see the cache after the others evicted.

    Args:
        policies: The policies to apply, in order.
    """

    def __init__(self, policies: Sequence[EvictionPolicy]) -> None:
        if not policies:
            raise ConfigurationError("CombinedPolicy needs at least one policy, got none")
        self.policies = tuple(policies)

    def select(self, entries: Sequence[EntryStats], now: datetime) -> list[str]:
        """What any policy selects, each applied to what the ones before it left."""
        remaining = list(entries)
        chosen: list[str] = []
        for policy in self.policies:
            picked = set(policy.select(remaining, now))
            chosen += [e.key for e in _lru_first(remaining) if e.key in picked]
            remaining = [e for e in remaining if e.key not in picked]
        return chosen


def gb_months(size_bytes: int, start: datetime, end: datetime) -> Decimal:
    """GB-months of storage for ``size_bytes`` held from ``start`` to ``end`` (zero when end <= start)."""
    if size_bytes < 0:
        raise ConfigurationError(f"size must be zero or more bytes, got {size_bytes}")
    seconds = Decimal(str(max((end - start).total_seconds(), 0.0)))
    return (Decimal(size_bytes) / BYTES_PER_GB * seconds / SECONDS_PER_MONTH).quantize(Decimal("0.000001"))


def storage_usd(
    quantity_gb_months: Decimal, usd_per_gb_month: Decimal = S3_STANDARD_USD_PER_GB_MONTH
) -> Decimal:
    """USD for a quantity of GB-months at a price, exact to the micro-dollar."""
    if usd_per_gb_month < 0:
        raise ConfigurationError(
            f"storage price must be zero or more USD per GB-month, got {usd_per_gb_month}"
        )
    return (quantity_gb_months * usd_per_gb_month).quantize(Decimal("0.000001"))
