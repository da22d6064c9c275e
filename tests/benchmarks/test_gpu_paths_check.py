"""The GPU check's own machinery on the CPU: a spot notice mid-run and the resumed attempt under the launcher.

On a GPU machine the same script measures bf16 training, utilization and the CUDA out-of-memory probe
(``benchmarks/gpu_paths.py``); here it must at least drive the launcher right and find the resume exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("torch")


def test_the_check_preempts_resumes_and_finds_the_resumed_run_equal(tmp_path: Path) -> None:
    from costaware.examples import flights

    flights.land_days(tmp_path / "landing", date(2013, 1, 8))
    data = flights.write_delay_arrays(tmp_path / "landing", date(2013, 1, 7), tmp_path / "arrays")["folder"]
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_paths.py"), "--data", data, "--epochs", "2",
         "--only", "notice", "--notice-step-sleep", "0.05", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
        env=os.environ | {"CUDA_VISIBLE_DEVICES": ""},  # the CPU's arithmetic, bit for bit, on a GPU host too
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (case,) = json.loads(out.read_text())["cases"]
    assert case["ok"] is True
    assert case["first_attempt_code"] == 75, case
    assert case["second_attempt_code"] == 0, case
    total = int(case["resumed_line"].rsplit(" of ", 1)[1].split()[0])
    assert 0 < case["checkpoint_step"] < total
    assert case["resumed_line"].startswith(f"resumed from the checkpoint of step {case['checkpoint_step']} ")
    assert case["rmse_difference"] == 0.0  # on the CPU the resumed run is the uninterrupted one, bit for bit


def test_the_check_refuses_a_data_folder_without_arrays(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_paths.py"), "--data", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert f"--data {tmp_path}: no train.npz there; make it with --make-data FOLDER first" in done.stderr
