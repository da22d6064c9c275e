"""The job contract under a replayed spot availability trace: the example PyTorch script, preempted by
SIGTERM and SIGKILL at the trace's drops, resumes from its checkpoints and ends at the weights of a run
that was never interrupted (issue 24, item 6)."""

from __future__ import annotations

import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from remote_support import context_for, drive

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "own_training" / "train_delay.py"
torch = pytest.importorskip("torch")  # the dev group installs the CPU build

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def arrays(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from datetime import date

    from costaware.examples import flights

    folder = tmp_path_factory.mktemp("flights")
    flights.land_days(folder / "landing", date(2013, 1, 8))
    return Path(flights.write_delay_arrays(folder / "landing", date(2013, 1, 7), folder / "arrays")["folder"])


def train(
    work: Path, data: Path, trace: list[bool] | None, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    from costaware.adapters.compute.local import LocalBackend
    from costaware.adapters.compute.replay import PreemptionInjector
    from costaware.adapters.model_store import ModelStore
    from costaware.core.ledger import utcnow
    from costaware.operators.remote_training import RemoteTrainingOperator

    work.mkdir(parents=True)
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{work / 'ledger.db'}")
    options = {"root": str(work / "jobs"), "capacity_file": str(work / "capacity")}
    now = utcnow()
    op = RemoteTrainingOperator(
        task_id="train",
        command=[
            sys.executable,
            str(SCRIPT),
            "--data",
            str(data),
            "--epochs",
            "3",
            "--batch-size",
            "1024",
            "--checkpoint-every",
            "4",
            "--step-sleep",
            "0.3",
        ],
        model_store=str(work / "models"),
        checkpoint_store=str(work / "ckpt"),
        backend_options=options,
        spot_decision={
            "market": "spot",
            "usd_per_hour": "0.9",
            "on_demand_usd_per_hour": "3.06",
            "instance_type": "p3.2xlarge",
            "region": "us-west-2",
            "deadline": (now + timedelta(minutes=30)).isoformat(),
            "latest_start": (now + timedelta(minutes=20)).isoformat(),
        },
        preemption_grace_seconds=15,
        max_attempts=20,
        poll_interval=0.1,
    )
    if trace is None:
        result, _ = drive(op, context_for(), timeout=600)
        kills: list[Any] = []
    else:
        injector = PreemptionInjector(
            LocalBackend(**options), trace, tick_seconds=2.0, signals=(signal.SIGTERM, signal.SIGKILL)
        )
        with injector:
            result, _ = drive(op, context_for(), timeout=600)
        kills = injector.preemptions
    store = ModelStore.open(str(work / "models"))
    folder = store.download_files(store.get(result["version"]), work / "model")
    weights = torch.load(Path(folder) / "model.pt", map_location="cpu")
    return {"result": result, "kills": kills, "weights": weights}


def test_a_preempted_script_resumes_and_ends_at_the_weights_of_an_uninterrupted_run(
    tmp_path: Path, arrays: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = train(tmp_path / "plain", arrays, None, monkeypatch)
    # Capacity for 2 ticks (4 s), none for one, twice: a SIGTERM, then a SIGKILL, then capacity to the end.
    # A full run takes 18 steps x 0.3 s plus the start of Python and torch: every attempt is alive at a drop.
    trace = [True, True, False] * 2 + [True] * 40
    replayed = train(tmp_path / "replayed", arrays, trace, monkeypatch)

    causes = [a["cause"] for a in replayed["result"]["attempts"]]
    assert len(replayed["kills"]) >= 2 and {signal.SIGTERM, signal.SIGKILL} <= {
        k.signum for k in replayed["kills"]
    }
    assert causes.count("preemption") == 2 and causes[-1] == "success", causes
    assert plain["weights"].keys() == replayed["weights"].keys()
    for name, tensor in plain["weights"].items():
        assert torch.equal(tensor, replayed["weights"][name]), name
    assert replayed["result"]["metrics"] == plain["result"]["metrics"]
