"""Recorded spot price files for tests: four weeks of hourly prices with one cheap hour a day."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

HEADER = "timestamp,region,availability_zone,instance_type,product_description,usd_per_hour\n"


def now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def write_history(path: Path, *, current: str, cheap_hour_utc: int = 3, weeks: int = 4) -> None:
    """Hourly records for ``weeks`` weeks: 1.00 USD/h, 0.50 at ``cheap_hour_utc``; ``current`` since 1 min."""
    start = now().replace(minute=0, second=0) - timedelta(weeks=weeks)
    lines = [HEADER]
    t = start
    while t < now() - timedelta(minutes=1):
        price = "0.50" if t.hour == cheap_hour_utc else "1.00"
        lines.append(f"{t.isoformat()},us-east-1,us-east-1a,p3.2xlarge,Linux/UNIX,{price}\n")
        t += timedelta(hours=1)
    lines.append(
        f"{(now() - timedelta(minutes=1)).isoformat()},us-east-1,us-east-1a,p3.2xlarge,Linux/UNIX,{current}\n"
    )
    # Rows the sensor must ignore: another product, another type.
    lines.append(f"{now().isoformat()},us-east-1,us-east-1a,p3.2xlarge,Windows,0.01\n")
    path.write_text("".join(lines))


def append(path: Path, price: str) -> None:
    """A new price record at this moment (the price changed)."""
    with path.open("a") as f:
        f.write(f"{now().isoformat()},us-east-1,us-east-1a,p3.2xlarge,Linux/UNIX,{price}\n")
