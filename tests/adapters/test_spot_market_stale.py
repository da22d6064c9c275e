"""A recorded spot price file read at a decision long after its last record: said, not read as today's."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from costaware.adapters.spot_market import observe_spot

HEADER = "timestamp,region,availability_zone,instance_type,product_description,usd_per_hour\n"
LAST = "2021-05-31T00:00:00+00:00"


def observe(path: Path, now: datetime) -> tuple[Decimal, bool, str]:
    return observe_spot(
        prices=str(path),
        instance_type="p3.2xlarge",
        region="us-east-1",
        availability_zone="us-east-1a",
        aws_conn_id=None,
        ttl_seconds=300,
        products=["Linux/UNIX"],
        on_demand_usd_per_hour=Decimal("3.06"),
        availability=None,
        availability_start=None,
        now=now,
    )


def test_a_price_file_years_old_is_said_to_be_held_not_todays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A 2021 file decided a 2026 start on its last price, as if it were today's market, in silence.
    path = tmp_path / "prices.csv"
    path.write_text(HEADER + f"{LAST},us-east-1,us-east-1a,p3.2xlarge,Linux/UNIX,0.98\n")
    with caplog.at_level("WARNING"):
        price, _, source = observe(path, datetime(2026, 11, 30, 12, tzinfo=timezone.utc))
    assert price == Decimal("0.98")
    assert "(recorded up to 2021-05-31: its last prices are held since, not today's market)" in source
    assert "were recorded up to 2021-05-31" in caplog.text
    _, _, fresh = observe(path, datetime(2021, 6, 2, tzinfo=timezone.utc))  # two days on: nothing to say
    assert "held since" not in fresh


def test_a_zone_whose_price_went_unchanged_in_a_fresh_file_is_not_called_stale(tmp_path: Path) -> None:
    # Prices are recorded as they change: us-east-1a's may be weeks old in a file recorded yesterday.
    path = tmp_path / "prices.csv"
    path.write_text(
        HEADER
        + f"{LAST},us-east-1,us-east-1a,p3.2xlarge,Linux/UNIX,0.98\n"
        + "2021-07-30T00:00:00+00:00,us-east-1,us-east-1b,p3.2xlarge,Linux/UNIX,1.01\n"
    )
    _, _, source = observe(path, datetime(2021, 7, 31, tzinfo=timezone.utc))
    assert "recorded up to" not in source


def test_a_local_file_argument_in_an_unknown_users_home_is_named_not_a_runtime_error() -> None:
    # Path.expanduser raised a bare RuntimeError ('Could not determine home directory.') at DAG parse.
    from costaware.adapters.spot_market import check_local_file
    from costaware.core.errors import ConfigurationError

    unknown = r"^prices_csv '~nosuchuser/p.csv' starts with the home folder of user 'nosuchuser', whom this"
    with pytest.raises(ConfigurationError, match=unknown):
        check_local_file("~nosuchuser/p.csv", "prices_csv", "a CSV of hourly prices")
