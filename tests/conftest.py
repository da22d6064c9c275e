"""Test set-up: Airflow settings go into the environment before anything imports airflow.

The fixtures every folder shares live here; the helpers tests import by name live in ``tests/support/``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# One Airflow home (and default ledger) per pytest-xdist worker: two workers never share a SQLite file.
TEST_HOME = ROOT / ".airflow-test" / os.environ.get("PYTEST_XDIST_WORKER", "main")
os.environ["AIRFLOW_HOME"] = str(TEST_HOME)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
os.environ["AIRFLOW__CORE__PARALLELISM"] = "4"
os.environ["GX_ANALYTICS_ENABLED"] = "False"
os.environ["COSTAWARE_LEDGER_URL"] = f"sqlite:///{TEST_HOME / 'costaware' / 'ledger.db'}"
for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ.setdefault(key, "testing")

# Airflow sets up its logging handlers on the streams of the moment it is first imported. Imported by a test
# under capsys (the CLI's `prices show` imports it), they wrote to that test's stream after it closed, and a
# later test found "--- Logging error ---" in its stderr. Imported here, they keep the session's streams.
import airflow  # noqa: E402,F401
from clocks import CLOCKS  # noqa: E402  # tests/support/ is on pythonpath (pyproject.toml)
from services import moto_server, postgres_server  # noqa: E402


@pytest.fixture(autouse=True)
def costaware_loggers_on(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test starts with costaware's loggers as the package leaves them: enabled, and propagating.

    A library that configures logging with ``fileConfig`` disables every logger that exists then; a later
    test in the same worker that reads the log (``caplog``) read nothing. When a test leaves them so, they
    are turned on again, and a warning in the run's summary names that test.
    """
    import logging
    import warnings

    yield
    silenced = [
        name
        for name, logger in list(logging.Logger.manager.loggerDict.items())
        if name.startswith("costaware")
        and isinstance(logger, logging.Logger)
        and (logger.disabled or not logger.propagate or logger.level > logging.INFO)
    ]
    for name in silenced:
        logger = logging.getLogger(name)
        logger.disabled, logger.propagate = False, True
        logger.setLevel(logging.NOTSET)
    if silenced:
        warnings.warn(f"{request.node.nodeid} left costaware loggers silenced: {silenced[:5]}", stacklevel=1)


@pytest.fixture(params=CLOCKS, ids=lambda instant: f"clock-{instant[:16]}")
def clock(request: pytest.FixtureRequest) -> Iterator[object]:
    """The wall clock set to each of :data:`CLOCKS` in turn; it ticks on from there (triggers need time).

    Every test whose outcome depends on the hour or the date uses it (``pytestmark =
    pytest.mark.usefixtures("clock")``), so the suite passes at any hour on any day. Only this process's
    clock moves: a test that starts Airflow in a subprocess must not depend on the hour.
    """
    import time_machine

    with time_machine.travel(request.param, tick=True) as traveller:
        yield traveller


@pytest.fixture
def no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A machine with no AWS credentials anywhere boto3 looks (environment, files, instance metadata)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no wait on an instance role that is not there


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture
def ledger(ledger_url: str):  # type: ignore[no-untyped-def]
    from costaware import Ledger

    opened = Ledger.from_url(ledger_url)
    yield opened
    opened.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server for the whole session (never skipped: CI must exercise it)."""
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's AWS server on 127.0.0.1 for the whole session."""
    with moto_server() as url:
        yield url


@pytest.fixture
def ledger_conn(ledger_url: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The connection ``test_ledger`` (SQLite) and the ledger it opens."""
    from costaware import Ledger

    monkeypatch.setenv(
        "AIRFLOW_CONN_TEST_LEDGER", json.dumps({"conn_type": "sqlite", "host": ledger_url[10:]})
    )
    return Ledger.from_url(ledger_url)


@pytest.fixture
def moto_aws_conn(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The AWS connection ``moto_aws``, pointed at the moto server; returns its id."""
    conn = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"region_name": "us-east-1", "endpoint_url": moto_endpoint},
    }
    monkeypatch.setenv("AIRFLOW_CONN_MOTO_AWS", json.dumps(conn))
    return "moto_aws"
