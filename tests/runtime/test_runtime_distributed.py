"""The framework helpers under torchrun: two CPU ranks (gloo) that must save and stop at the same step.

Each test starts ``torch.distributed.run`` with two processes and a tiny model (no download), so it takes
some 15-25 s of CPU: those are marked slow. A rank deciding alone hung the group (the test's timeout ends it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from costaware_runtime.checkpoints import read_marker

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
]

#: Far above a run's 15-25 s: only a hung group reaches it.
HUNG_SECONDS = 90

# Every rank records what it saw and how it ended in RECORD/<what>-<rank>.json.
PRELUDE = """
import json, os, signal, sys, time
from pathlib import Path
import torch
import costaware_runtime as cr

RANK = int(os.environ["RANK"])
RECORD = Path(os.environ["RECORD"])

def record(what, value):
    (RECORD / f"{what}-{RANK}.json").write_text(json.dumps(value))

record("pid", os.getpid())  # for the test to kill a hung rank

def rank_0_hears_the_notice_at(step, now):
    # torchrun passes the notice to every rank, each hearing it at its own moment: here rank 0 in step 4,
    # the other not at all.
    if RANK == 0 and now == step:
        os.kill(os.getpid(), signal.SIGTERM)
"""

# Rank 0's timer is due at steps 2 and 4, rank 1's at step 3; rank 1 is slow to reach the save of step 2;
# only rank 0 hears the notice, at step 4.
HUGGINGFACE_JOB = """
from transformers import Trainer, TrainerCallback, TrainingArguments
from costaware_runtime.checkpoints import read_marker
from costaware_runtime.huggingface import CostawareCallback

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
    def forward(self, x, y):
        return {"loss": torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), y)}

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 4096
    def __getitem__(self, i):
        x = torch.full((4,), float(i % 7))
        return {"x": x, "y": x.sum()}

steps = [0]  # the timers' clock: one second a step

class Script(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        steps[0] = state.global_step
        rank_0_hears_the_notice_at(4, state.global_step)

class SlowDisk(Trainer):
    def _save_rng_state(self, output_dir):
        if RANK == 1 and self.state.global_step == 2:
            time.sleep(1)  # its rng_state_1.pth comes a second after rank 0 has saved the rest
        super()._save_rng_state(output_dir)

class Saves(TrainerCallback):
    saved = []
    def on_save(self, args, state, control, **kwargs):
        marker = read_marker(args.output_dir)
        self.saved.append([state.global_step, [f.path for f in marker.files] if marker else None])

clock = lambda: float(steps[0])
timer = cr.CheckpointTimer(2 if RANK == 0 else 3, clock=clock)
args = TrainingArguments(output_dir=os.environ["COSTAWARE_CHECKPOINT_DIR"], max_steps=50, save_steps=1000,
    per_device_train_batch_size=4, report_to=[], use_cpu=True, disable_tqdm=True, ddp_backend="gloo")
trainer = SlowDisk(Tiny(), args, train_dataset=Data(),
    callbacks=[Script(), CostawareCallback(timer=timer), Saves()])
try:
    trainer.train()
except SystemExit as e:
    record("end", {"step": trainer.state.global_step, "code": e.code, "saved": Saves.saved})
    raise
"""

# The plain loop: rank 0's timer is due at step 2, rank 1's at step 3; only rank 0 hears the notice, at
# step 4, and is a second slow to save it.
TORCH_JOB = """
import torch.distributed as dist
from costaware_runtime import torch as ct

dist.init_process_group("gloo")
cr.preemption_requested()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
steps = [0]
timer = cr.CheckpointTimer(2 if RANK == 0 else 3, clock=lambda: float(steps[0]))
decisions = []
try:
    for step in range(1, 50):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
        optimizer.step()
        steps[0] = step
        rank_0_hears_the_notice_at(4, step)
        save, stop = ct.checkpoint_decision(timer)
        decisions.append([step, save, stop])
        if save:
            if stop and RANK == 0:
                time.sleep(1)
            ct.save(model, optimizer, step=step)
        if stop:
            ct.exit_preempted()
except SystemExit as e:
    record("end", {"step": step, "code": e.code, "decisions": decisions, "committed": cr.latest_step()})
    raise
"""


# Only rank 0 takes the per-step decision (a callback given to rank 0 alone); rank 1 trains on without it.
ALONE_JOB = """
import datetime
import torch.distributed as dist
from costaware_runtime import ContractError
from costaware_runtime import torch as ct

# The group's own timeout (gloo's default: 30 minutes), scaled to the test's seconds.
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ["GROUP_TIMEOUT"])))
wait = float(os.environ["WAIT"]) if os.environ["WAIT"] else None
if RANK == 0:
    began = time.monotonic()
    try:
        ct.checkpoint_decision(wait_seconds=wait)
    except ContractError as e:
        record("end", {"error": str(e), "seconds": time.monotonic() - began})
        raise
    record("end", {"decided": True})
else:
    # Trains on (here: waits) without it, until the test has seen rank 0 fail.
    for _ in range(600):
        if (RECORD / "end-0.json").exists():
            break
        time.sleep(0.1)
"""


def run_on_two_ranks(tmp_path: Path, body: str, **variables: str) -> tuple[list[dict[str, object]], str]:
    """Run ``body`` under torchrun with two CPU ranks; each rank's ``end`` record, and torchrun's output."""
    script = tmp_path / "job.py"
    script.write_text(PRELUDE + body)
    records = tmp_path / "records"
    records.mkdir()
    env = os.environ | {"COSTAWARE_CHECKPOINT_DIR": str(tmp_path / "checkpoints"), "RECORD": str(records)}
    env |= variables
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    log = tmp_path / "torchrun.log"
    with log.open("w") as out:
        group = subprocess.Popen(
            [*command, str(script)], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            group.wait(timeout=HUNG_SECONDS)
        except subprocess.TimeoutExpired:
            # torchrun starts each worker in a session of its own: the group's SIGKILL does not reach them.
            os.killpg(group.pid, signal.SIGKILL)
            for pid_file in records.glob("pid-*.json"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(json.loads(pid_file.read_text()), signal.SIGKILL)
            group.wait()
            tail = log.read_text()[-3000:]
            pytest.fail(f"the ranks hung for {HUNG_SECONDS} s (one stopped or saved alone):\n{tail}")
    ends = [records / f"end-{rank}.json" for rank in (0, 1)]
    return [json.loads(end.read_text()) if end.exists() else {} for end in ends], log.read_text()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_trainer_ranks_save_and_stop_together_and_commit_every_ranks_files(tmp_path: Path) -> None:
    ends, output = run_on_two_ranks(tmp_path, HUGGINGFACE_JOB)
    tail = output[-3000:]
    # Both saved at step 2 (rank 0's timer), rank 1's step 3 timer did not save, both stopped at step 4.
    assert [end.get("step") for end in ends] == [4, 4], tail
    assert [end.get("code") for end in ends] == [75, 75], tail
    rng_states = ["checkpoint-2/rng_state_0.pth", "checkpoint-2/rng_state_1.pth"]
    step_2 = ends[0]["saved"][0]  # type: ignore[index]
    assert step_2[0] == 2 and set(rng_states) <= set(step_2[1]), step_2  # rank 1's late file too
    assert [saved[0] for saved in ends[1]["saved"]] == [2]  # type: ignore[union-attr]
    marker = read_marker(tmp_path / "checkpoints")
    assert marker is not None and marker.step == 4
    committed = {file.path for file in marker.files}
    assert {"checkpoint-4/rng_state_0.pth", "checkpoint-4/rng_state_1.pth"} <= committed


@pytest.mark.slow
def test_torch_loop_ranks_agree_and_exit_once_rank_0_has_committed(tmp_path: Path) -> None:
    ends, output = run_on_two_ranks(tmp_path, TORCH_JOB)
    tail = output[-3000:]
    expected = [[1, False, False], [2, True, False], [3, False, False], [4, True, True]]
    assert [end.get("decisions") for end in ends] == [expected, expected], tail
    assert [end.get("code") for end in ends] == [75, 75], tail
    # Rank 1 left only after rank 0's slow save of step 4 was committed.
    assert [end.get("committed") for end in ends] == [4, 4], tail
    marker = read_marker(tmp_path / "checkpoints")
    assert marker is not None and [file.path for file in marker.files] == ["checkpoint-4/torch.pt"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("wait", "group_timeout", "within"),
    [("3", "600", (3.0, 20.0)), ("", "4", (4.0, 20.0))],
    ids=["wait_seconds", "the group's timeout"],
)
def test_a_rank_that_never_joins_the_decision_fails_the_others_with_a_clear_error(
    tmp_path: Path, wait: str, group_timeout: str, within: tuple[float, float]
) -> None:
    # Rank 0 waited in the decision's all-reduce for a rank that never came, silent until the group's
    # timeout (30 minutes on gloo), then failed with "Timed out waiting 1800000ms for recv".
    ends, output = run_on_two_ranks(tmp_path, ALONE_JOB, WAIT=wait, GROUP_TIMEOUT=group_timeout)
    error, seconds = str(ends[0].get("error")), float(ends[0].get("seconds", -1))  # type: ignore[arg-type]
    assert "rank 0 of 2 waited" in error and "for the other ranks to agree on when to save and stop" in error
    assert "call it on every rank at the same point of every step" in error, output[-3000:]
    assert within[0] - 0.5 <= seconds <= within[1], output[-3000:]


def test_a_wait_that_is_not_seconds_is_refused() -> None:
    from costaware_runtime import ContractError
    from costaware_runtime import torch as ct

    for bad in (0, -1.0, float("nan"), "30", True):
        with pytest.raises(ContractError, match=rf"wait_seconds={bad!r} is not a wait: pass seconds > 0"):
            ct.checkpoint_decision(wait_seconds=bad)  # type: ignore[arg-type]


def test_a_single_process_never_touches_torch_distributed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigterm_restored: None
) -> None:
    # A job without torchrun pays no collective, and needs no process group.
    import torch
    from costaware_runtime import CheckpointTimer
    from costaware_runtime import torch as ct

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("torch.distributed called in a single process")

    for name in ("all_reduce", "barrier", "get_world_size", "get_rank"):
        monkeypatch.setattr(torch.distributed, name, refuse)
    ticks = iter(range(10))
    timer = CheckpointTimer(1.5, clock=lambda: float(next(ticks)))
    assert [tuple(ct.checkpoint_decision(timer)) for _ in range(3)] == [
        (False, False),
        (True, False),
        (False, False),
    ]
    assert ct.save(torch.nn.Linear(2, 1), step=1, directory=tmp_path) is not None
