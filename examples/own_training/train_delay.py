"""Arrival delay in minutes on the 2013 New York flights: a plain PyTorch regression, made preemptible.

Everything costaware needs from a training script is here and nothing else: load the newest checkpoint
at start, save one now and then (and when the spot notice comes), write the metrics, leave the model in
the output folder. The script imports only the standard library, NumPy, PyTorch and ``costaware_runtime``
(the slim runtime, no Airflow).

By hand, under the launcher (it makes temporary folders for the checkpoints, the output and the metrics
where no ``COSTAWARE_*`` variable names one; run bare, the script refuses: it needs them)::

    costaware-run -- python train_delay.py --data /path/with/train.npz/and/holdout.npz --epochs 4

``--data`` may be an ``s3://`` prefix too (a job on SageMaker, Batch or Kubernetes).

Under costaware (``dags/own_training.py``): ``RemoteTrainingOperator(command=["python", "train_delay.py",
"--data", ...])`` runs it on spot, and the launcher restores and syncs the checkpoint folder.

Resuming is exact: batches are drawn from a permutation seeded by (seed, epoch), so an attempt resumed
from step ``n`` sees the same batches an uninterrupted run sees from step ``n``, and a run preempted any
number of times ends with the same weights as one that never was (on the CPU; CUDA kernels may differ in
the last bits, and an attempt resumed on another GPU model may train in another precision. On one H200 in
bfloat16 the resumed run's holdout RMSE equalled the uninterrupted run's: ``benchmarks/gpu_paths.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import costaware_runtime as runtime
import numpy as np
import torch
from costaware_runtime import torch as runtime_torch
from torch import nn


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: data folder, epochs, batch size, accumulation, checkpoint interval, seed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder with train.npz and holdout.npz")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--accumulate", type=int, default=1, help="batches per optimizer step")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--checkpoint-every", type=int, default=100, help="optimizer steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step (demos, tests)")
    parser.add_argument("--progress-file", help="append each finished step's number here (benchmarks)")
    return parser.parse_args(argv)


def local_data(data: str) -> Path:
    """The folder of ``train.npz`` and ``holdout.npz``; an ``s3://`` prefix is fetched into a local one first.

    (A job on SageMaker, Batch or Kubernetes reads its arrays from S3; the runtime's store takes
    ``COSTAWARE_S3_ENDPOINT_URL`` as the launcher does.)
    """
    if "://" not in data:
        missing = [name for name in ("train.npz", "holdout.npz") if not (Path(data) / name).is_file()]
        if missing:  # not numpy's bare FileNotFoundError, which named neither --data nor what to give
            raise SystemExit(
                f"train_delay.py: --data {data!r} holds no {' or '.join(missing)}: give the folder (or s3:// "
                "prefix) with train.npz and holdout.npz, such as the one dags/own_training.py's prepare wrote"
            )
        return Path(data)
    import tempfile

    from costaware_runtime.stores import open_store

    store, folder = open_store(data), Path(tempfile.mkdtemp(prefix="delay-arrays-"))
    for split in ("train", "holdout"):
        store.download(f"{split}.npz", folder / f"{split}.npz")
    return folder


def load(folder: Path, split: str) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Features, delays in minutes and the delay scale of one split (``train.npz`` or ``holdout.npz``)."""
    with np.load(folder / f"{split}.npz") as data:
        x = torch.from_numpy(data["x"].astype(np.float32))
        y = torch.from_numpy(data["y"].astype(np.float32))
        scale = {"y_mean": float(data["y_mean"]), "y_std": float(data["y_std"])}
    return x, y, scale


def model_for(features: int, hidden: int) -> nn.Module:
    """A small MLP: standardized features in, the standardized delay out."""
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 1))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Train from the newest checkpoint to the last step, then write metrics and the model."""
    args = arguments(argv)
    # First: the first call installs the runtime's SIGTERM handler, so that a spot notice during the
    # start-up (imports, data, CUDA) is kept for the first step rather than killing the process.
    runtime.preemption_requested()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = local_data(args.data)
    x, y, scale = load(data, "train")
    # The arrays are small: on the device once, so that a step copies nothing from the host.
    x, target = x.to(device), ((y - scale["y_mean"]) / scale["y_std"]).to(device)
    model = model_for(x.shape[1], args.hidden).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # Mixed precision where CUDA is: bfloat16 where the GPU has it (no loss scaling needed), else float16
    # with a loss scaler. One GPU is enough.
    amp = device.type == "cuda"
    # (including_emulation=False: a V100 or T4 would emulate bfloat16, slowly; float16 is native there.)
    native_bf16 = amp and torch.cuda.is_bf16_supported(including_emulation=False)
    amp_dtype = torch.bfloat16 if native_bf16 else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=amp and amp_dtype == torch.float16)

    batches_per_epoch = math.ceil(len(x) / args.batch_size)
    steps_per_epoch = math.ceil(batches_per_epoch / args.accumulate)
    total = args.epochs * steps_per_epoch
    step = runtime_torch.load(model, optimizer, scaler=scaler, map_location=device) or 0
    if step:
        print(
            f"resumed from the checkpoint of step {step} of {total} (attempt {runtime.attempt()})", flush=True
        )

    # Also save whenever the provider's interval has passed (COSTAWARE_CHECKPOINT_EVERY_SECONDS: the
    # operator's checkpoint_every_seconds, with "auto" the one the interruption rate calls for).
    timer = runtime.CheckpointTimer()
    model.train()
    order_epoch, order = -1, torch.empty(0)
    while step < total:
        epoch, within = divmod(step, steps_per_epoch)
        if epoch != order_epoch:  # once an epoch: the permutation is the host's work, and its copy a sync
            order_epoch = epoch
            order = torch.from_numpy(np.random.default_rng([args.seed, epoch]).permutation(len(x))).to(device)
        optimizer.zero_grad(set_to_none=True)
        for part in range(args.accumulate):
            batch = within * args.accumulate + part
            if batch >= batches_per_epoch:
                break
            rows = order[batch * args.batch_size : (batch + 1) * args.batch_size]
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
                loss = nn.functional.mse_loss(model(x[rows]).squeeze(1).float(), target[rows])
            scaler.scale(loss / args.accumulate).backward()
        scaler.step(optimizer)
        scaler.update()
        step += 1
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if args.progress_file:
            with open(args.progress_file, "a") as progress:
                progress.write(f"{step}\n")
        # A checkpoint falls between optimizer steps, never inside an accumulation: nothing half-summed.
        due = step % args.checkpoint_every == 0 or timer.due()
        if due or step == total or runtime.preemption_requested():
            runtime_torch.save(model, optimizer, step=step, scaler=scaler)
        if runtime.preemption_requested():
            print(f"spot notice: saved step {step} of {total}, exiting for the next attempt", flush=True)
            runtime.exit_preempted()

    metrics = evaluate(model, data, scale, device)
    runtime.write_metrics(metrics)
    out = Path(runtime.output_dir())
    torch.save(model.state_dict(), out / "model.pt")
    (out / "model.json").write_text(json.dumps({"features": int(x.shape[1]), "hidden": args.hidden, **scale}))
    print(f"trained {total} steps; holdout {json.dumps(metrics)}", flush=True)
    return 0


@torch.no_grad()
def evaluate(
    model: nn.Module, folder: Path, scale: dict[str, float], device: torch.device
) -> dict[str, float]:
    """RMSE, MAE and R² of the delay in minutes on the holdout."""
    x, y, _ = load(folder, "holdout")
    model.eval()
    predicted = model(x.to(device)).squeeze(1).float().cpu() * scale["y_std"] + scale["y_mean"]
    error = predicted - y
    rmse = float(torch.sqrt(torch.mean(error**2)))
    mae = float(torch.mean(error.abs()))
    r2 = 1.0 - float(torch.sum(error**2)) / float(torch.sum((y - y.mean()) ** 2))
    return {"rmse": rmse, "mae": mae, "r2": r2, "holdout_rows": float(len(y))}


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
