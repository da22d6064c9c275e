"""Job scripts and the ``Job`` helper of the runtime's tests (imported by name, from tests/runtime)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Prepended to every job script.
PRELUDE = """\
import json, os, signal, sys, time
from pathlib import Path
import costaware_runtime as cr
"""


@dataclass
class Job:
    """One job script and the folders of its attempts."""

    root: Path
    script: Path

    @property
    def remote(self) -> Path:
        return self.root / "remote-checkpoints"

    @property
    def outputs(self) -> Path:
        return self.root / "remote-outputs"

    @property
    def result(self) -> Path:
        return self.root / "result.json"

    def env(self, attempt: int = 1, **extra: str) -> dict[str, str]:
        """The environment the provider would give attempt ``attempt``: local folders as the stores."""
        base = {key: value for key, value in os.environ.items() if not key.startswith("COSTAWARE_")}
        work = self.root / f"attempt-{attempt}"
        return base | {
            "COSTAWARE_CHECKPOINT_DIR": str(work / "checkpoints"),
            "COSTAWARE_CHECKPOINT_URI": str(self.remote),
            "COSTAWARE_OUTPUT_DIR": str(work / "outputs"),
            "COSTAWARE_OUTPUT_URI": str(self.outputs),
            "COSTAWARE_METRICS_PATH": str(work / "metrics.json"),
            "COSTAWARE_RESULT_PATH": str(self.result),
            "COSTAWARE_ATTEMPT": str(attempt),
            "COSTAWARE_MARKET": "spot",
            **extra,
        }

    def command(self, *options: str) -> list[str]:
        return [sys.executable, "-m", "costaware_runtime", *options, "--", sys.executable, str(self.script)]

    def run(self, *options: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*options), env=env or self.env(), capture_output=True, text=True, timeout=120
        )

    def start(self, *options: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        (self.root / "ready").unlink(missing_ok=True)
        return subprocess.Popen(
            self.command(*options),
            env=env or self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def preempt(
        self,
        launcher: subprocess.Popen[str],
        timeout: float = 60,
        signals: tuple[int, ...] = (signal.SIGTERM,),
    ) -> tuple[int, str]:
        """Wait for the job to touch ``ready``, send ``signals`` to the launcher; its code and stderr."""
        self.wait_ready(launcher, timeout)
        for signum in signals:
            launcher.send_signal(signum)
            time.sleep(0.1)
        _, err = launcher.communicate(timeout=timeout)
        return launcher.returncode, err

    def wait_ready(self, launcher: subprocess.Popen[str], timeout: float = 60) -> None:
        """Wait for the job to touch ``ready``; if it never does, kill the launcher and raise its output."""
        deadline = time.monotonic() + timeout
        while not (self.root / "ready").exists():
            if launcher.poll() is not None or time.monotonic() > deadline:
                launcher.kill()
                out, err = launcher.communicate()
                raise AssertionError(f"the job never got ready:\n{out}\n{err}")
            time.sleep(0.02)

    def latest(self) -> dict[str, object]:
        loaded: dict[str, object] = json.loads((self.remote / "LATEST.json").read_text())
        return loaded

    def pushed(self, step: int) -> Path:
        """The remote folder of ``step`` (each push has one of its own, ``step-<n>-<random>``)."""
        (folder,) = self.remote.glob(f"step-{step}-*")
        return folder


#: A time long past, for a folder some killed attempt left (``backdate``): any sync reads it as stale.
LONG_AGO = 1_000_000_000.0


def backdate(folder: Path, when: float = LONG_AGO) -> None:
    """Set the times of ``folder`` and of everything in it to ``when``, as if last written then."""
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (when, when))


#: Writes a job script and returns its :class:`Job` (the ``make_job`` fixture).
MakeJob = Callable[[str], Job]


# Saves steps up to 5 (stopping with exit 75 after STOP_AT), records what it resumed from, leaves a model.
# With PUSHED_BEFORE_NEXT it waits, after saving that step, until the local-folder store's LATEST.json names
# it: the launcher's watcher pushed it before the next save, as on a machine slow enough for a poll between.
RESUMING_JOB = """
start = cr.latest_step() or 0
saved = cr.load_bytes()
seen = {"attempt": cr.attempt(), "market": cr.market(), "start": start, "state": saved and saved[1].decode()}
seen |= {name: os.environ.get(name) for name in ("COSTAWARE_CHECKPOINT_DIR", "COSTAWARE_OUTPUT_DIR")}
(READY.parent / f"seen-{cr.attempt()}.json").write_text(json.dumps(seen))
for step in range(start, 5):
    cr.save_bytes(f"state after {step + 1}".encode(), step=step + 1)
    if step + 1 == int(os.environ.get("STOP_AT", "0")):
        cr.exit_preempted()
    if step + 1 == int(os.environ.get("PUSHED_BEFORE_NEXT", "0")):
        latest, deadline = Path(os.environ["COSTAWARE_CHECKPOINT_URI"]) / "LATEST.json", time.monotonic() + 60
        while json.loads(latest.read_text())["step"] != step + 1:
            if time.monotonic() > deadline:
                sys.exit(f"step {step + 1} was not pushed within 60 s")
            time.sleep(0.02)
(cr.output_dir() / "model.bin").write_bytes(b"model")
(cr.output_dir() / "sub").mkdir(exist_ok=True)
(cr.output_dir() / "sub" / "config.json").write_text("{}")
cr.write_metrics({"rmse": 3.25, "rows": 100})
"""
