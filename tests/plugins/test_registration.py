"""The installed package registers itself with Airflow: provider info and plugin (listener, timetables)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

AIRFLOW = str(Path(sys.executable).with_name("airflow"))


def _airflow_json(*args: str) -> list[dict[str, object]]:
    out = subprocess.run(
        [AIRFLOW, *args, "-o", "json"], capture_output=True, text=True, env=os.environ.copy()
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # Log lines may come first; the JSON document is the last line that starts a list.
    document = next(line for line in reversed(out.stdout.splitlines()) if line.startswith("["))
    return list(json.loads(document))


def test_airflow_plugins_lists_the_cost_listener() -> None:
    plugins = {p["name"]: p for p in _airflow_json("plugins")}
    costaware = plugins["costaware"]
    assert costaware["listeners"] == ["costaware.plugins.listener.CostListener"]
    assert "airflow-provider-costaware" in str(costaware["source"])
    assert costaware["timetables"] == ["costaware.timetables.off_peak.OffPeakTimetable"]


def test_airflow_providers_lists_the_package() -> None:
    providers = {p["package_name"]: p for p in _airflow_json("providers", "list")}
    assert "airflow-provider-costaware" in providers


def test_airflow_config_knows_the_costaware_options() -> None:
    out = subprocess.run(
        [AIRFLOW, "config", "get-value", "costaware", "worker_market"],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "on_demand"
