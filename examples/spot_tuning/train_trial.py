"""One trial of the spot tuning study: a preemptible MLP regression of the arrival delay, knobs as flags.

The script imports only the standard library, NumPy, PyTorch and ``costaware_runtime`` (the slim runtime, no
Airflow). ``dags/spot_tuning.py`` runs it twice per promoted trial, both times under ``costaware-run``:

* the warm-up, ``--epochs 3``: trains from scratch, evaluates the holdout RMSE after each epoch, and leaves
  ``trial.pt`` (model, optimizer, epochs done, the RMSE of each epoch) and ``trial.json`` in its output
  folder, which becomes a model version;
* the promoted run, ``--epochs 15 --resume-from <that version's files>``: loads ``trial.pt`` and trains only
  the epochs it adds (4 to 15), so a promotion pays for 12 epochs, not 15.

By hand: set the folders the launcher (``costaware-run``) would, then run it::

    COSTAWARE_CHECKPOINT_DIR=ckpt COSTAWARE_OUTPUT_DIR=out COSTAWARE_METRICS_PATH=metrics.json \
        python train_trial.py --data /path/with/train.npz/and/holdout.npz --epochs 3 --lr 0.002

Checkpoints go through ``costaware_runtime.torch`` every ``--checkpoint-every`` optimizer steps, every
``--checkpoint-seconds`` (the interval a preemption may lose at most), at the end of each epoch and on the
spot notice. Resuming is exact: the batches of an epoch come from a permutation seeded by (seed, epoch) and
the dropout masks of a step from a generator seeded by (seed, step), so a run preempted any number of times
ends with the weights of one that never was (on the CPU; CUDA kernels may differ in the last bits).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import costaware_runtime as runtime
import numpy as np
import torch
from costaware_runtime import torch as runtime_torch
from costaware_runtime.stores import open_store
from torch import nn

#: What a promoted run continues from, in the warm-up's output folder (and so in its model version).
STATE_FILE = "trial.pt"
SUMMARY_FILE = "trial.json"
#: The hyperparameters that fix the model's shape: a continuation must use the same ones.
SHAPE = ("hidden", "layers")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: data, epochs, hyperparameters, checkpoint intervals, resume folder, seed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder with train.npz and holdout.npz")
    parser.add_argument("--epochs", type=int, default=3, help="epochs in all, those resumed from included")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--hidden", type=int, default=64, help="width of each hidden layer")
    parser.add_argument("--layers", type=int, default=2, help="hidden layers")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--checkpoint-every", type=int, default=200, help="optimizer steps")
    parser.add_argument("--checkpoint-seconds", type=float, default=900.0, help="wall seconds")
    parser.add_argument("--resume-from", help="output folder (or model version files) of an earlier run")
    parser.add_argument("--trial", type=int, default=0, help="the trial's number, copied to the metrics")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step (demos, tests)")
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.layers < 1 or args.hidden < 1:
        parser.error("--epochs, --batch-size, --layers and --hidden must be 1 or more")
    if not 0.0 <= args.dropout < 1.0:
        parser.error(f"--dropout must be in [0, 1), got {args.dropout}")
    return args


def load(folder: Path, split: str) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Features, delays in minutes and the delay scale of one split (``train.npz`` or ``holdout.npz``)."""
    with np.load(folder / f"{split}.npz") as data:
        x = torch.from_numpy(data["x"].astype(np.float32))
        y = torch.from_numpy(data["y"].astype(np.float32))
        scale = {"y_mean": float(data["y_mean"]), "y_std": float(data["y_std"])}
    return x, y, scale


def model_for(features: int, hidden: int, layers: int, dropout: float) -> nn.Module:
    """An MLP: standardized features in, the standardized delay out."""
    parts: list[nn.Module] = []
    width = features
    for _ in range(layers):
        parts += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
        width = hidden
    return nn.Sequential(*parts, nn.Linear(width, 1))


def warm_state(uri: str, args: argparse.Namespace) -> dict[str, Any]:
    """The state a promoted run continues from: ``trial.pt`` of the run at ``uri`` (a folder or s3://)."""
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / STATE_FILE
        open_store(uri).download(STATE_FILE, target)
        state: dict[str, Any] = torch.load(target, map_location="cpu", weights_only=True)
    saved = state["hparams"]
    for name in SHAPE:
        if saved[name] != getattr(args, name):
            raise SystemExit(f"--{name} {getattr(args, name)} differs from the run at {uri} ({saved[name]})")
    if state["epochs"] > args.epochs:
        raise SystemExit(f"--epochs {args.epochs} is fewer than the {state['epochs']} done at {uri}")
    return state


@torch.no_grad()
def holdout_rmse(model: nn.Module, x: torch.Tensor, y: torch.Tensor, scale: dict[str, float]) -> float:
    """RMSE of the delay in minutes on the holdout."""
    model.eval()
    predicted = model(x).squeeze(1).float().cpu() * scale["y_std"] + scale["y_mean"]
    model.train()
    return float(torch.sqrt(torch.mean((predicted - y) ** 2)))


def main(argv: list[str] | None = None) -> int:
    """Train from the newest checkpoint (or the run continued) to the last epoch; write metrics and state."""
    args = arguments(argv)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x, y, scale = load(Path(args.data), "train")
    x_hold, y_hold, _ = load(Path(args.data), "holdout")
    # The arrays are small: on the device once, so that a step copies nothing from the host.
    x, x_hold, target = x.to(device), x_hold.to(device), ((y - scale["y_mean"]) / scale["y_std"]).to(device)
    model = model_for(x.shape[1], args.hidden, args.layers, args.dropout).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps_per_epoch = math.ceil(len(x) / args.batch_size)
    total = args.epochs * steps_per_epoch

    # This run's own checkpoint first (a resumed attempt), else the run it continues, else from scratch.
    state = runtime_torch.load_state(map_location=device)
    history: list[float] = []
    started_epochs = 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
        history = [float(v) for v in state["extra"]["history"]]
        started_epochs = int(state["extra"]["started_epochs"])
        print(
            f"resumed from the checkpoint of step {step} of {total} (attempt {runtime.attempt()})", flush=True
        )
    elif args.resume_from:
        warm = warm_state(args.resume_from, args)
        model.load_state_dict(warm["model"])
        optimizer.load_state_dict(warm["optimizer"])
        started_epochs = int(warm["epochs"])
        history = [float(v) for v in warm["history"]]
        step = started_epochs * steps_per_epoch
        print(f"continuing {args.resume_from} after its {started_epochs} epoch(s)", flush=True)
    else:
        step = 0

    def checkpoint() -> None:
        runtime_torch.save(model, optimizer, step=step, history=history, started_epochs=started_epochs)

    model.train()
    saved_at = time.monotonic()
    order_epoch, order = -1, torch.empty(0)
    while step < total:
        epoch, within = divmod(step, steps_per_epoch)
        if epoch != order_epoch:  # once an epoch: the permutation is the host's work, and its copy a sync
            order_epoch = epoch
            order = torch.from_numpy(np.random.default_rng([args.seed, epoch]).permutation(len(x))).to(device)
        rows = order[within * args.batch_size : (within + 1) * args.batch_size]
        torch.manual_seed(args.seed * 1_000_003 + step)  # this step's dropout masks, the same on a resume
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x[rows]).squeeze(1), target[rows])
        loss.backward()
        optimizer.step()
        step += 1
        if args.step_sleep:
            time.sleep(args.step_sleep)
        epoch_done = step % steps_per_epoch == 0
        if epoch_done:
            history.append(holdout_rmse(model, x_hold, y_hold, scale))
            print(f"epoch {step // steps_per_epoch}: holdout RMSE {history[-1]:.3f} min", flush=True)
        due = time.monotonic() - saved_at >= args.checkpoint_seconds or step % args.checkpoint_every == 0
        if epoch_done or due or runtime.preemption_requested():
            checkpoint()
            saved_at = time.monotonic()
        if runtime.preemption_requested():
            print(f"spot notice: saved step {step} of {total}, exiting for the next attempt", flush=True)
            runtime.exit_preempted()

    hparams = {name: getattr(args, name) for name in ("lr", "weight_decay", "hidden", "layers", "dropout")}
    hparams["batch_size"] = args.batch_size
    metrics = {
        "val_rmse": history[-1],
        "best_val_rmse": min(history),
        "epochs": args.epochs,
        "started_epochs": started_epochs,
        "trial": args.trial,
    }
    runtime.write_metrics(metrics)
    out = Path(runtime.output_dir())
    state_out = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epochs": args.epochs,
        "history": history,
        "hparams": hparams,
    }
    torch.save(state_out, out / STATE_FILE)
    summary = {"trial": args.trial, "features": int(x.shape[1]), **hparams, **scale, "history": history}
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    print(
        f"trial {args.trial}: {args.epochs} epochs ({started_epochs} resumed); {json.dumps(metrics)}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
