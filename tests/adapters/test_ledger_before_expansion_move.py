"""The shell command the earlier-release ledger warning suggests, run as a person would run it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from costaware.adapters.ledger.before_expansion import EarlierLedger, warn_on_open


def test_the_command_to_put_the_old_ledger_in_place_stops_at_the_first_failed_move(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Each loop reported its last command's status: a -wal that could not be set aside was hidden, the
    # old ledger was moved in beside the new one's WAL anyway (SQLite replays it onto the old one), and the
    # command said it succeeded.
    old, new = (
        tmp_path / "working" / "~" / "airflow" / "ledger.db",
        tmp_path / "home" / "airflow" / "ledger.db",
    )
    old.parent.mkdir(parents=True)
    new.parent.mkdir(parents=True)
    for path, text in {
        old: "old",
        Path(f"{old}-wal"): "old wal",
        new: "new",
        Path(f"{new}-shm"): "new shm",
    }.items():
        path.write_text(text)
    Path(f"{new}-wal").mkdir()  # a folder cannot be moved over the file below: that move fails
    Path(f"{new}.made-after-upgrade-wal").write_text("in the way")
    with caplog.at_level("WARNING", logger="costaware.adapters.ledger.before_expansion"):
        warn_on_open("the ledger", "~/airflow/ledger.db", EarlierLedger(new, old, "~/airflow", True, False))
    (said,) = [r.getMessage() for r in caplog.records if r.name.endswith("before_expansion")]
    command = said.split("put it in its place with its -wal and -shm files: `")[1].split("`")[0]
    ran = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
    assert ran.returncode != 0, ran
    # Stopped at that move: the -shm after it and the old ledger are where they were.
    assert Path(f"{new}-shm").read_text() == "new shm"
    assert old.read_text() == "old" and Path(f"{old}-wal").read_text() == "old wal"
