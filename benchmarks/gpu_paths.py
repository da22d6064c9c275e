"""Check: the GPU paths of a team's own PyTorch training, on a real GPU, under ``costaware-run``.

Make the data once in the project's venv (56 days of 2013 flights up to 28 February, 47,350 rows), then run
it from a clone where CUDA is (``python3`` with torch and NumPy; transformers and accelerate for the Trainer
case; nothing of Airflow: ``runtime/src`` and ``src`` go on the path)::

    .venv/bin/python benchmarks/gpu_paths.py --make-data gpu-data
    python3 benchmarks/gpu_paths.py --data gpu-data [--before OLD_train_delay.py] [--json OUT]

It exits 1 when a case fails (each case says ``"ok"``); a few minutes on an H200, most of it the probe's fit.

What it measures, each case a real job under the launcher with local folders as the stores:

* ``examples/own_training/train_delay.py`` on the GPU and on the CPU at two sizes (the example's small MLP,
  and one wide enough for the GPU to matter): optimizer steps per second, GPU utilization sampled by
  ``nvidia-smi`` while it runs, the holdout RMSE. ``--before`` runs an older copy of the script beside it.
* The spot notice on the GPU: SIGTERM to the launcher mid-run, exit 75, the next attempt resumes from the
  checkpoint (model, optimizer, loss scaler); its RMSE against the uninterrupted run's.
* ``examples/spot_tuning/train_trial.py``: a 3-epoch warm-up, then promoted to 6 epochs from its state.
* Hugging Face's Trainer in bf16 with ``CostawareCallback``: preempted, resumed, finished.
* ``AdaptiveBatchTrainer``'s probe under a memory cap: a real CUDA out-of-memory error bounds the batch;
  the step seconds it measured against the same steps timed with synchronization.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DELAY_SCRIPT = ROOT / "examples" / "own_training" / "train_delay.py"
TRIAL_SCRIPT = ROOT / "examples" / "spot_tuning" / "train_trial.py"
PATHS = os.pathsep.join(str(p) for p in (ROOT / "runtime" / "src", ROOT / "src"))
# The slim runtime and the provider's pure modules from this clone: nothing here needs them installed.
sys.path[:0] = PATHS.split(os.pathsep)
#: The data of the figures in docs/own-training.md: the 56 days up to this one, the next as the holdout.
DATA_DAY, DATA_DAYS = "2013-02-28", 56


class Job:
    """One job's folders (checkpoints, outputs, metrics) across its attempts, as the provider gives them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def env(self, attempt: int, **extra: str) -> dict[str, str]:
        """The variables the provider gives a spot attempt (``contract_environment``), and ``extra``."""
        from costaware_runtime.contract import DEFAULT_GRACE_SECONDS

        from costaware.adapters.compute.job_contract import contract_environment

        base = {k: v for k, v in os.environ.items() if not k.startswith("COSTAWARE_")}
        contract = contract_environment(
            checkpoint_uri=str(self.root / "remote-checkpoints"),
            output_uri=str(self.root / "remote-outputs"),
            result_uri=str(self.root / "result.json"),
            attempt=attempt,
            market="spot",
            grace_seconds=DEFAULT_GRACE_SECONDS,
            work_dir=str(self.root / f"attempt-{attempt}"),
        )
        pythonpath = os.pathsep.join(filter(None, [PATHS, base.get("PYTHONPATH")]))
        return base | contract | {"PYTHONPATH": pythonpath, **extra}

    def run(
        self,
        command: list[str],
        attempt: int = 1,
        *,
        progress: bool = False,
        notice_at_step: int | None = None,
        **extra: str,
    ) -> dict[str, Any]:
        """Run one attempt under ``costaware-run``.

        ``progress``: the script appends each finished step to a file; steps per second and GPU utilization
        are then taken between its first and last step (start-up and evaluation left out).
        ``notice_at_step``: SIGTERM to the launcher once the job has finished that step.
        """
        steps_file = self.root / f"progress-{attempt}"
        if progress or notice_at_step is not None:
            command = [*command, "--progress-file", str(steps_file)]
        launcher = [sys.executable, "-m", "costaware_runtime", "--poll-seconds", "0.2", "--", *command]
        began = time.monotonic()
        first = last = None  # (time, steps) when the first and the newest step were seen
        with GpuSampler() as sampler:
            process = subprocess.Popen(
                launcher, env=self.env(attempt, **extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip
            output: list[str] = []
            reader = threading.Thread(target=lambda: output.extend(process.stdout or []), daemon=True)
            reader.start()
            signalled = False
            deadline = time.monotonic() + 1800
            while process.poll() is None:
                if time.monotonic() > deadline:
                    process.kill()
                    break
                steps = _steps(steps_file)
                now = time.monotonic()
                if steps and first is None:
                    first = (now, steps)
                if steps and (last is None or steps > last[1]):
                    last = (now, steps)
                if notice_at_step is not None and steps >= notice_at_step and not signalled:
                    process.send_signal(signal.SIGTERM)
                    signalled = True
                time.sleep(0.005)
            process.wait()
            reader.join()
        seconds = time.monotonic() - began
        result = json.loads((self.root / "result.json").read_text()) if process.returncode == 0 else {}
        run: dict[str, Any] = {
            "code": process.returncode,
            "seconds": round(seconds, 2),
            "metrics": result.get("metrics", {}),
            "gpu_memory_mib_max": sampler.max("memory"),
            "log_tail": "".join(output)[-1500:],
        }
        if first is not None and last is not None and last[0] > first[0]:
            run["steps_per_second"] = round((last[1] - first[1]) / (last[0] - first[0]), 1)
            run["gpu_util_mean"] = sampler.mean("util", first[0], last[0])
        return run


def _steps(progress: Path) -> int:
    try:
        return len(progress.read_text().split())
    except FileNotFoundError:
        return 0


class GpuSampler:
    """``nvidia-smi`` every 100 ms in the background: GPU utilization (%) and memory used (MiB)."""

    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[float, float]]] = {"util": [], "memory": []}
        self.process: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        if shutil.which("nvidia-smi") is None:
            return self
        self.process = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
             "-lms", "100"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(ValueError):
                util, memory = (float(v) for v in line.split(","))
                now = time.monotonic()
                self.samples["util"].append((now, util))
                self.samples["memory"].append((now, memory))

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait()

    def mean(self, name: str, start: float, end: float) -> float | None:
        values = [value for at, value in self.samples[name] if start <= at <= end]
        return round(statistics.fmean(values), 1) if values else None

    def max(self, name: str) -> float | None:
        values = [value for _, value in self.samples[name]]
        return max(values) if values else None


def delay_command(script: Path, data: Path, epochs: int, hidden: int, batch: int) -> list[str]:
    return [sys.executable, str(script), "--data", str(data), "--epochs", str(epochs),
            "--hidden", str(hidden), "--batch-size", str(batch), "--checkpoint-every", "1000000"]  # fmt: skip


def steps_of(data: Path, epochs: int, batch: int) -> int:
    import numpy as np

    with np.load(data / "train.npz") as arrays:
        rows = len(arrays["y"])
    return epochs * -(-rows // batch)


def delay_cases(work: Path, data: Path, before: Path | None, epochs: int, gpu: bool) -> list[dict[str, Any]]:
    """train_delay.py at two sizes, on each device, and the older script beside it."""
    sizes = {"small (hidden 64, batch 512)": (64, 512), "wide (hidden 2048, batch 8192)": (2048, 8192)}
    scripts = {"shipped": DELAY_SCRIPT} | ({"before": before} if before else {})
    devices = ["cuda", "cpu"] if gpu else ["cpu"]
    cases = []
    for size, (hidden, batch) in sizes.items():
        steps = steps_of(data, epochs, batch)
        for name, script in scripts.items():
            for device in devices:
                if name == "before" and device == "cpu":
                    continue
                hide = {"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}
                job = Job(work / f"delay-{hidden}-{name}-{device}")
                run = job.run(delay_command(script, data, epochs, hidden, batch), progress=True, **hide)
                case = {"case": f"train_delay {size}, {name} script, {device}", "steps": steps} | run
                cases.append(case | {"ok": run["code"] == 0})
    return cases


def notice_case(work: Path, data: Path, epochs: int, step_sleep: float = 0.0) -> dict[str, Any]:
    """A spot notice mid-run on the GPU, the resumed attempt, and the same run uninterrupted.

    ``step_sleep`` slows each step so that the notice lands mid-run on a fast machine with little data.
    """
    command = [*delay_command(DELAY_SCRIPT, data, epochs, 64, 512), "--step-sleep", str(step_sleep)]
    total = steps_of(data, epochs, 512)
    whole = Job(work / "notice-whole").run(command)
    job = Job(work / "notice")
    first = job.run(command, 1, notice_at_step=total // 3)
    latest = json.loads((job.root / "remote-checkpoints" / "LATEST.json").read_text())
    second = job.run(command, 2)
    difference = None
    if whole["metrics"] and second["metrics"]:
        difference = abs(whole["metrics"]["rmse"] - second["metrics"]["rmse"])
    return {
        "case": "spot notice at a third of the run, resumed (train_delay small, cuda if there)",
        "first_attempt_code": first["code"],
        "checkpoint_step": latest.get("step"),
        "second_attempt_code": second["code"],
        "resumed_line": next((line for line in second["log_tail"].splitlines() if "resumed" in line), None),
        "rmse_uninterrupted": whole["metrics"].get("rmse"),
        "rmse_resumed": second["metrics"].get("rmse"),
        "rmse_difference": difference,
        "ok": first["code"] == 75 and second["code"] == 0 and difference is not None,
        "log_tail": first["log_tail"][-600:] + second["log_tail"][-600:],
    }


def trial_case(work: Path, data: Path) -> dict[str, Any]:
    """The tuning example's warm-up (3 epochs) and its promotion to 6 epochs from the warm-up's state."""
    warm = Job(work / "trial-warm")
    first = warm.run([sys.executable, str(TRIAL_SCRIPT), "--data", str(data), "--epochs", "3"])
    promoted = Job(work / "trial-promoted").run(
        [sys.executable, str(TRIAL_SCRIPT), "--data", str(data), "--epochs", "6",
         "--resume-from", str(warm.root / "remote-outputs")]
    )  # fmt: skip
    return {
        "case": "train_trial warm-up 3 epochs, promoted to 6",
        "codes": [first["code"], promoted["code"]],
        "val_rmse": [first["metrics"].get("val_rmse"), promoted["metrics"].get("val_rmse")],
        "started_epochs": promoted["metrics"].get("started_epochs"),
        "seconds": [first["seconds"], promoted["seconds"]],
        "ok": first["code"] == promoted["code"] == 0 and promoted["metrics"].get("started_epochs") == 3,
        "log_tail": first["log_tail"][-800:] + promoted["log_tail"][-800:],
    }


HF_JOB = """
import os, sys, time, torch
import costaware_runtime as cr
from transformers import Trainer, TrainerCallback, TrainingArguments
from costaware_runtime.huggingface import CostawareCallback, latest_hf_checkpoint

class Wide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1))
    def forward(self, x, y):
        return {"loss": torch.nn.functional.mse_loss(self.net(x).squeeze(-1).float(), y)}

class Data(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(4096, 256, generator=g)
        self.y = self.x[:, :8].sum(1)
    def __len__(self):
        return len(self.y)
    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}

PROGRESS = sys.argv[sys.argv.index("--progress-file") + 1]

class Progress(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        with open(PROGRESS, "a") as f:
            f.write(f"{state.global_step}\\n")
        time.sleep(0.01)

args = TrainingArguments(output_dir=str(cr.checkpoint_dir()), max_steps=int(os.environ["STEPS"]),
    save_steps=50, save_total_limit=2, per_device_train_batch_size=64, bf16=torch.cuda.is_available(),
    report_to=[], disable_tqdm=True, logging_steps=1000)
trainer = Trainer(Wide(), args, train_dataset=Data(), callbacks=[Progress(), CostawareCallback()])
result = trainer.train(resume_from_checkpoint=latest_hf_checkpoint())
print("trained on", next(trainer.model.parameters()).device, "loss", result.training_loss, flush=True)
cr.write_metrics({"global_step": trainer.state.global_step, "loss": result.training_loss})
torch.save(trainer.model.state_dict(), cr.output_dir() / "model.pt")
"""


def huggingface_case(work: Path) -> dict[str, Any]:
    """Hugging Face's Trainer in bf16 with CostawareCallback: preempted at step 120, resumed to 300."""
    job = Job(work / "huggingface")
    script = job.root / "hf_job.py"
    script.write_text(HF_JOB)
    command = [sys.executable, str(script)]
    first = job.run(command, 1, notice_at_step=120, STEPS="300")
    latest_file = job.root / "remote-checkpoints" / "LATEST.json"
    latest = json.loads(latest_file.read_text()) if latest_file.exists() else {}
    second = job.run(command, 2, progress=True, STEPS="300")
    return {
        "case": "Hugging Face Trainer bf16, notice at step 120, resumed to 300",
        "first_attempt_code": first["code"],
        "checkpoint_step": latest.get("step"),
        "second_attempt_code": second["code"],
        "second_attempt_steps": _steps(job.root / "progress-2"),
        "metrics": second["metrics"],
        "ok": first["code"] == 75 and second["code"] == 0 and second["metrics"].get("global_step") == 300,
        "log_tail": first["log_tail"][-800:] + second["log_tail"][-800:],
    }


def probe_case(memory_gib: float) -> dict[str, Any]:
    """AdaptiveBatchTrainer's probe on the GPU with memory capped at ``memory_gib``: a real OOM bounds it."""
    import torch

    from costaware.training.batch_size import AdaptiveBatchTrainer

    fraction = memory_gib * 2**30 / torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(fraction)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 8192), torch.nn.ReLU(),
        torch.nn.Linear(8192, 1),
    ).cuda()  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = torch.randn(1 << 16, 1024, device="cuda")
    targets = inputs[:, :4].sum(1, keepdim=True)
    trainer = AdaptiveBatchTrainer(
        model, optimizer, torch.nn.functional.mse_loss, base_batch_size=256, base_lr=1e-3,
        budget_seconds=600, max_batch_size=1 << 16,
    )  # fmt: skip
    result = trainer.probe(inputs, targets)
    top = result.max_batch_size
    # The largest steps timed as the probe did before it synchronized: the call returns once the kernels
    # are queued, so this is what its step times were, against what they are.
    unsynchronized = {}
    for batch in sorted(b for b, fitted in result.attempts if fitted)[-3:]:
        for _ in range(2):  # the second of two
            torch.cuda.synchronize()
            began = time.perf_counter()
            torch.nn.functional.mse_loss(model(inputs[:batch]), targets[:batch]).backward()
            optimizer.zero_grad(set_to_none=True)
            unsynchronized[batch] = round(time.perf_counter() - began, 5)
            torch.cuda.synchronize()
    report = trainer.fit(inputs, targets, epochs=1.0)
    batches = [c.batch_size for c in report.changes]
    return {
        "case": f"AdaptiveBatchTrainer probe under a {memory_gib:g} GiB cap",
        "max_batch_size": top,
        "attempts": result.attempts,
        "probe_step_seconds": {b: round(s, 5) for b, s in sorted(result.step_seconds.items())},
        "unsynchronized_step_seconds": unsynchronized,
        "fit_steps": report.steps,
        "fit_seconds": round(report.seconds, 1),
        "fit_batch_changes": [(c.step, c.batch_size) for c in report.changes],
        "fit_changes_after_the_start": len(batches) - 1,
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "ok": any(not fitted for _, fitted in result.attempts) and top >= 1,
    }


@contextlib.contextmanager
def workspace(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="gpu-paths-") as folder:
        yield Path(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="folder with train.npz and holdout.npz")
    parser.add_argument(
        "--make-data",
        type=Path,
        help=f"write the arrays of the {DATA_DAYS} days up to {DATA_DAY} here and stop",
    )
    parser.add_argument("--before", type=Path, help="an older train_delay.py to run beside the shipped one")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--probe-gib", type=float, default=4.0, help="memory cap of the probe case")
    parser.add_argument("--notice-step-sleep", type=float, default=0.0, help="seconds a step, notice case")
    cases = ["delay", "notice", "trial", "huggingface", "probe"]
    parser.add_argument("--only", nargs="*", default=cases, choices=cases)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--work", type=Path, help="keep the jobs' folders here")
    args = parser.parse_args(argv)
    if args.make_data:
        return make_data(args.make_data)
    if args.data is None or not (args.data / "train.npz").exists():
        parser.error(f"--data {args.data}: no train.npz there; make it with --make-data FOLDER first")

    import torch

    gpu = torch.cuda.is_available()
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if gpu else "cpu only",
        "native_bf16": gpu and torch.cuda.is_bf16_supported(including_emulation=False),
        "cases": [],
    }
    print(json.dumps({k: v for k, v in report.items() if k != "cases"}), flush=True)
    with workspace(args.work) as work:
        runs = {
            "delay": lambda: delay_cases(work, args.data, args.before, args.epochs, gpu),
            "notice": lambda: [notice_case(work, args.data, args.epochs, args.notice_step_sleep)],
            "trial": lambda: [trial_case(work, args.data)],
            "huggingface": lambda: [huggingface_case(work)],
            "probe": lambda: [probe_case(args.probe_gib)] if gpu else [],
        }
        for name in args.only:
            began = time.monotonic()
            try:
                cases = runs[name]()
            except Exception as e:  # one broken case must not hide the others' figures
                cases = [{"case": name, "error": f"{type(e).__name__}: {e}", "ok": False}]
            for case in cases:
                # A log only where something failed: the cases that pass keep theirs in --json alone.
                shown = {k: v for k, v in case.items() if k != "log_tail" or not case["ok"]}
                print(json.dumps(shown, default=str), flush=True)
            print(f"[{name}: {time.monotonic() - began:.0f} s]", flush=True)
            report["cases"] += cases
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    failed = [case["case"] for case in report["cases"] if not case["ok"]]
    print(f"{len(report['cases']) - len(failed)} of {len(report['cases'])} cases ok", *failed, sep="\n  ")
    return 1 if failed else 0


def make_data(folder: Path) -> int:
    """The arrays of the figures (needs the provider installed: the project's .venv)."""
    from datetime import date, timedelta

    from costaware.examples import flights

    day = date.fromisoformat(DATA_DAY)
    with tempfile.TemporaryDirectory() as landing:  # the days as Parquet files: only the arrays are kept
        flights.land_days(landing, day + timedelta(days=1))
        written = flights.write_delay_arrays(landing, day, folder, train_days=DATA_DAYS)
    print(f"{written['train_rows']} training rows, {written['holdout_rows']} holdout rows in {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
