"""Helpers for the runtime's tests: run ``costaware-run`` for real on small job scripts.

These tests never import costaware or airflow themselves: the runtime is a distribution of its own (the
root conftest imports Airflow for the other tests' logging; test_runtime_isolation.py checks the runtime's
imports in a fresh interpreter).
"""

from __future__ import annotations

import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from costaware_runtime import preemption
from costaware_runtime._bounded import GIVEN_UP
from runtime_jobs import PRELUDE, Job, MakeJob


@pytest.fixture
def make_job(tmp_path: Path) -> MakeJob:
    """Write a job script (after :data:`PRELUDE`; ``READY`` is the file to touch once it can be preempted)."""

    def make(body: str) -> Job:
        script = tmp_path / "job.py"
        ready = f"READY = Path({str(tmp_path / 'ready')!r})\n"
        script.write_text(PRELUDE + ready + textwrap.dedent(body))
        return Job(tmp_path, script)

    return make


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    """The runtime installs its SIGTERM handler on first use; put pytest's back, and its state, afterwards."""
    previous = signal.getsignal(signal.SIGTERM)
    # A test elsewhere in this worker may have called preemption_requested(), which keeps its handler.
    preemption._installed = False
    preemption._requested.clear()
    yield
    signal.signal(signal.SIGTERM, previous)
    preemption._installed = False
    preemption._requested.clear()


@pytest.fixture(autouse=True)
def given_up_cleared() -> Iterator[None]:
    """A transfer given up in pytest's process stays in ``GIVEN_UP``: cleared after each test.

    Left there while it runs, a later test's ``exit_preempted()`` in this process would ``os._exit`` the
    whole worker.
    """
    yield
    GIVEN_UP.clear()
