"""One `airflow standalone` for every integration test module (starting it costs ~30 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_server import AirflowServer, airflow_standalone

from costaware import Ledger

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AirflowServer, Ledger]]:
    home = tmp_path_factory.mktemp("standalone")
    ledger_url = f"sqlite:///{home / 'ledger.db'}"
    ledger = Ledger.from_url(ledger_url)
    here = Path(__file__).parent / "dags"
    dags = [ROOT / "dags" / "cost_aware_retrain.py", here / "budget_wait.py", here / "spot_wait.py"]
    with airflow_standalone(dags, ledger_url, home) as running:
        yield running, ledger
    ledger.dispose()
