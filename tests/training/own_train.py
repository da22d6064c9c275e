"""A team's own training script for the job-contract tests: plain Python, no framework.

``python own_train.py MODE [STEPS]``. It reads its folders from the contract's environment, checkpoints each
step with ``costaware_runtime`` (a commit marker the launcher pushes and restores), leaves its model in
``COSTAWARE_OUTPUT_DIR`` and writes its metrics to ``COSTAWARE_METRICS_PATH`` as plain JSON. The "model" is
a number updated step by step from a seed, so a run resumed from a checkpoint ends exactly where an
uninterrupted one does. Each attempt appends what it saw to ``$OWN_TRAIN_LOG`` (JSON lines).

Modes: ``ok``; ``fail`` (exit 1 after two steps); ``preempt-once`` (attempt 1 exits 75 after committing
step 3); ``no-metrics``; ``empty-output``; ``preempt-without-checkpoint`` (exit 75 before any checkpoint);
``wait-for-notice`` (checkpoints, then waits for SIGTERM, saves and exits 75); ``ignore-notice`` (ignores
SIGTERM and sleeps); ``save-on-notice`` (0.2 s a step, a checkpoint only when SIGTERM comes, then exit 75).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import costaware_runtime as cr

SEED = 7


def step_weight(weight: int, step: int) -> int:
    return (weight * 31 + step) % 1_000_003


def main() -> int:
    mode = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    attempt = int(os.environ["COSTAWARE_ATTEMPT"])
    saved = cr.load_bytes()
    start, weight = (saved[0], int(saved[1])) if saved else (0, SEED)
    seen = {"attempt": attempt, "market": os.environ["COSTAWARE_MARKET"], "start": start}
    seen["grace"] = os.environ["COSTAWARE_GRACE_SECONDS"]
    seen["every"] = cr.CheckpointTimer().every_seconds  # COSTAWARE_CHECKPOINT_EVERY_SECONDS, else 300
    with open(os.environ["OWN_TRAIN_LOG"], "a") as log:
        log.write(json.dumps(seen) + "\n")
    if mode == "preempt-without-checkpoint":
        return 75
    if mode == "ignore-notice":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(300)
    if mode == "save-on-notice":  # no timed checkpoints: the notice is the only save
        for step in range(start, steps):
            if cr.preemption_requested():
                cr.save_bytes(str(weight).encode(), step=step)
                cr.exit_preempted()
            weight = step_weight(weight, step)
            time.sleep(0.2)
        mode = "ok"
        start = steps
    for step in range(start, steps):
        weight = step_weight(weight, step)
        cr.save_bytes(str(weight).encode(), step=step + 1)
        if mode == "preempt-once" and attempt == 1 and step + 1 == 3:
            return 75
        if mode == "fail" and step + 1 == 2:
            print("ValueError: the loss went NaN at step 2", file=sys.stderr)
            return 1
    if mode == "wait-for-notice":
        if cr.preemption_requested() is False:
            Path(os.environ["OWN_TRAIN_LOG"] + ".ready").write_text("1")
        while not cr.preemption_requested():
            time.sleep(0.05)
        cr.save_bytes(str(weight).encode(), step=steps)
        cr.exit_preempted()
    output = Path(os.environ["COSTAWARE_OUTPUT_DIR"])
    if mode != "empty-output":
        (output / "model.txt").write_text(str(weight))
        (output / "config").mkdir(exist_ok=True)
        (output / "config" / "steps.json").write_text(json.dumps({"steps": steps}))
    if mode != "no-metrics":
        metrics = {"loss": weight / 1_000_003, "steps": steps}
        Path(os.environ["COSTAWARE_METRICS_PATH"]).write_text(json.dumps(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
