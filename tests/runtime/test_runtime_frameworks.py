"""The framework helpers with the real frameworks: PyTorch, XGBoost, LightGBM, Hugging Face's Trainer.

Each is skipped, with the reason, where its framework is not installed (none is a runtime dependency).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from costaware_runtime import latest_step
from runtime_jobs import MakeJob

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def needs(module: str) -> pytest.MarkDecorator:
    missing = importlib.util.find_spec(module) is None
    return pytest.mark.skipif(missing, reason=f"{module} is not installed (pip install {module})")


@needs("torch")
def test_torch_save_and_load_round_trip(tmp_path: Path) -> None:
    import torch
    from costaware_runtime import torch as ct

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.ones(4, 3)).sum().backward()
        optimizer.step()
    path = ct.save(model, optimizer, step=2, directory=tmp_path, epoch=1, note="warm")
    assert path == tmp_path / "checkpoint-2" / "torch.pt"

    fresh = torch.nn.Linear(3, 1)
    fresh_optimizer = torch.optim.Adam(fresh.parameters(), lr=0.1)
    assert ct.load(fresh, fresh_optimizer, directory=tmp_path) == 2
    assert torch.equal(fresh.weight, model.weight)
    assert torch.equal(
        fresh_optimizer.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )
    state = ct.load_state(directory=tmp_path)
    assert state is not None and state["extra"] == {"epoch": 1, "note": "warm"}
    assert ct.load(torch.nn.Linear(3, 1), directory=tmp_path / "empty") is None


def test_a_checkpoint_another_helper_saved_is_refused_not_read_as_none(tmp_path: Path) -> None:
    # None would mean "no checkpoint": the job would train from step 0 over the restored step 4.
    from costaware_runtime import ContractError, save_bytes
    from costaware_runtime.boosting import latest_model_path

    save_bytes(b"state", step=4, directory=tmp_path)
    with pytest.raises(ContractError, match=r"checkpoint step 4 .* holds 'state.bin', not 'model.json' or "):
        latest_model_path(tmp_path)
    assert latest_model_path(tmp_path / "empty") is None  # no checkpoint at all: start from scratch
    if importlib.util.find_spec("torch") is not None:
        from costaware_runtime import torch as ct

        with pytest.raises(ContractError, match=r"holds 'state.bin', not 'torch.pt': it was saved by"):
            ct.load_state(directory=tmp_path)


@needs("torch")
def test_a_disabled_loss_scaler_in_the_checkpoint_leaves_an_enabled_one_as_it_starts(tmp_path: Path) -> None:
    """bfloat16 (or the CPU) saves a disabled scaler, i.e. {}; resumed on a GPU in float16 the scaler starts
    afresh instead of refusing the empty state."""
    import torch
    from costaware_runtime import torch as ct

    disabled = torch.amp.GradScaler("cpu", enabled=False)
    ct.save(torch.nn.Linear(2, 1), step=3, scaler=disabled, directory=tmp_path)
    enabled = torch.amp.GradScaler("cpu", init_scale=1024.0)
    assert ct.load(torch.nn.Linear(2, 1), scaler=enabled, directory=tmp_path) == 3
    assert enabled.get_scale() == 1024.0


@needs("torch")
@pytest.mark.parametrize(
    ("extra", "kind"),
    [
        (np.float64(0.3), "numpy.float64"),
        (np.random.get_state(), "builtins.tuple"),  # the legacy state, as jobs save it
        ({"losses": [np.float32(1.5)]}, "builtins.dict"),
    ],
)
def test_extra_state_the_safe_loader_would_refuse_is_refused_at_save(
    tmp_path: Path, extra: object, kind: str
) -> None:
    # It saved fine and failed only on resume after a preemption: every retry crashed as a code error.
    import torch
    from costaware_runtime import ContractError
    from costaware_runtime import torch as ct

    with pytest.raises(ContractError, match=rf"extra best= holds a {kind} that torch's weights-only loader"):
        ct.save(torch.nn.Linear(2, 1), step=1, directory=tmp_path, best=extra, epoch=2)
    assert latest_step(tmp_path) is None and not (tmp_path / "checkpoint-1").exists()  # nothing saved
    ct.save(torch.nn.Linear(2, 1), step=1, directory=tmp_path, best=float(np.float64(0.3)), w=torch.ones(2))
    state = ct.load_state(directory=tmp_path)
    assert state is not None and state["extra"]["best"] == 0.3


# Trains with a two-worker DataLoader; on the notice saves with costaware_runtime.torch and exits 75.
TORCH_JOB = """
import torch
from torch.utils.data import DataLoader, TensorDataset
from costaware_runtime import torch as ct

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
start = ct.load(model, optimizer) or 0
(READY.parent / f"start-{cr.attempt()}").write_text(str(start))
data = DataLoader(TensorDataset(torch.randn(100000, 2), torch.randn(100000, 1)), batch_size=8, num_workers=2)
with cr.PreemptionGuard() as guard:
    for step, (x, y) in enumerate(data, start=start + 1):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        if step == start + 20:
            READY.touch()
        if guard.requested:
            ct.save(model, optimizer, step=step)
            guard.exit()
        if step == start + 40 and cr.attempt() == 2:
            break
torch.save(model.state_dict(), cr.output_dir() / "model.pt")
cr.write_metrics({"steps": step})
"""


@needs("torch")
def test_torch_job_with_dataloader_workers_is_preempted_and_resumes(make_job: MakeJob) -> None:
    job = make_job(TORCH_JOB)
    code, stderr = job.preempt(job.start(), timeout=120)
    assert code == 75, stderr
    saved = job.latest()["step"]
    assert isinstance(saved, int) and saved >= 20

    second = job.run(env=job.env(attempt=2))
    assert second.returncode == 0, second.stderr
    assert int((job.root / "start-2").read_text()) == saved
    assert json.loads(job.result.read_text())["metrics"] == {"steps": saved + 40}


def regression_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(200, 4))
    return features, features @ np.array([1.0, -2.0, 0.5, 0.0]) + rng.normal(scale=0.1, size=200)


@needs("xgboost")
def test_xgboost_checkpoints_every_n_rounds_and_resumes(tmp_path: Path, sigterm_restored: None) -> None:
    import xgboost as xgb
    from costaware_runtime.boosting import XGBoostCheckpoint, latest_model_path

    features, target = regression_data()
    data = xgb.DMatrix(features, label=target)
    params = {"max_depth": 2, "eta": 0.3}
    with pytest.raises(ValueError, match="every_rounds=0 is not a number of rounds"):
        XGBoostCheckpoint(every_rounds=0)
    every_three = XGBoostCheckpoint(every_rounds=3, directory=tmp_path)
    xgb.train(params, data, num_boost_round=7, callbacks=[every_three])
    assert latest_step(tmp_path) == 6
    assert latest_model_path(tmp_path) == tmp_path / "checkpoint-6" / "model.json"

    resumed = xgb.train(
        params,
        data,
        num_boost_round=4,
        xgb_model=latest_model_path(tmp_path),
        callbacks=[XGBoostCheckpoint(every_rounds=3, directory=tmp_path)],
    )
    assert resumed.num_boosted_rounds() == 10
    assert latest_step(tmp_path) == 9


@needs("xgboost")
@needs("lightgbm")
def test_boosting_callbacks_save_by_time_with_a_timer(tmp_path: Path, sigterm_restored: None) -> None:
    import lightgbm as lgb
    import xgboost as xgb
    from costaware_runtime import CheckpointTimer
    from costaware_runtime.boosting import LightGBMCheckpoint, XGBoostCheckpoint

    def ticking_timer() -> CheckpointTimer:
        """A timer of 2.5 s on a clock that moves 1 s a round: due at rounds 3 and 6 of 7."""
        ticks = iter(range(100))
        return CheckpointTimer(2.5, clock=lambda: float(next(ticks)))

    with pytest.raises(ValueError, match="None only with timer=CheckpointTimer"):
        XGBoostCheckpoint(every_rounds=None)
    features, target = regression_data()
    by_time = XGBoostCheckpoint(every_rounds=None, directory=tmp_path / "xgb", timer=ticking_timer())
    xgb.train({"max_depth": 2}, xgb.DMatrix(features, label=target), num_boost_round=7, callbacks=[by_time])
    assert latest_step(tmp_path / "xgb") == 6
    assert sorted(p.name for p in (tmp_path / "xgb").glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-6"]
    # Rounds and time together: every 5 rounds, or when the timer says so (rounds 3 and 6).
    both = LightGBMCheckpoint(5, directory=tmp_path / "lgb", keep=5, timer=ticking_timer())
    params = {"objective": "regression", "num_leaves": 4, "verbose": -1}
    lgb.train(params, lgb.Dataset(features, target), 7, callbacks=[both])
    assert sorted(p.name for p in (tmp_path / "lgb").glob("checkpoint-*")) == [
        "checkpoint-3",
        "checkpoint-5",
        "checkpoint-6",
    ]


@needs("lightgbm")
def test_lightgbm_checkpoints_every_n_rounds_and_resumes(tmp_path: Path, sigterm_restored: None) -> None:
    import lightgbm as lgb
    from costaware_runtime.boosting import LightGBMCheckpoint, latest_model_path

    features, target = regression_data()
    params = {"objective": "regression", "num_leaves": 4, "verbose": -1}
    lgb.train(params, lgb.Dataset(features, target), 7, callbacks=[LightGBMCheckpoint(3, directory=tmp_path)])
    assert latest_step(tmp_path) == 6
    path = latest_model_path(tmp_path)
    assert path == tmp_path / "checkpoint-6" / "model.txt"

    resumed = lgb.train(
        params,
        lgb.Dataset(features, target),
        4,
        init_model=str(path),
        callbacks=[LightGBMCheckpoint(3, directory=tmp_path)],
    )
    assert resumed.current_iteration() == 10
    assert latest_step(tmp_path) == 9


@needs("lightgbm")
def test_boosting_callbacks_save_on_rank_0_only(
    tmp_path: Path, sigterm_restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every worker of a distributed training saving into one folder: the slowest set the marker back to its
    # round and pruned the newer round rank 0 had committed.
    import lightgbm as lgb
    from costaware_runtime.boosting import LightGBMCheckpoint

    features, target = regression_data()
    params = {"objective": "regression", "num_leaves": 4, "verbose": -1}
    monkeypatch.setenv("RANK", "0")
    lgb.train(params, lgb.Dataset(features, target), 6, callbacks=[LightGBMCheckpoint(3, directory=tmp_path)])
    monkeypatch.setenv("RANK", "1")  # a worker behind rank 0
    lgb.train(params, lgb.Dataset(features, target), 4, callbacks=[LightGBMCheckpoint(3, directory=tmp_path)])
    assert latest_step(tmp_path) == 6
    assert sorted(path.name for path in tmp_path.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-6"]


BOOSTING_JOB = """
import numpy as np
from costaware_runtime.boosting import LightGBMCheckpoint, XGBoostCheckpoint, latest_model_path

rng = np.random.default_rng(0)
features = rng.normal(size=(2000, 8))
target = features.sum(axis=1)
done = cr.latest_step() or 0
(READY.parent / f"start-{cr.attempt()}").write_text(str(done))

def slow(env=None, *args):
    if (cr.latest_step() or 0) >= done + 5:
        READY.touch()
    time.sleep(0.01)
    return False

if os.environ["LIBRARY"] == "xgboost":
    import xgboost as xgb
    class Slow(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            return slow()
    booster = xgb.train({"max_depth": 2}, xgb.DMatrix(features, label=target), num_boost_round=3000 - done,
                        xgb_model=latest_model_path(), callbacks=[XGBoostCheckpoint(every_rounds=5), Slow()])
    rounds = booster.num_boosted_rounds()
else:
    import lightgbm as lgb
    booster = lgb.train({"objective": "regression", "verbose": -1}, lgb.Dataset(features, target),
                        3000 - done, init_model=latest_model_path(), callbacks=[LightGBMCheckpoint(5), slow])
    rounds = booster.current_iteration()
booster.save_model(str(cr.output_dir() / "model"))
cr.write_metrics({"rounds": rounds})
"""


@pytest.mark.parametrize("library", [pytest.param("xgboost", marks=needs("xgboost")), "lightgbm"])
def test_boosting_job_is_preempted_after_saving(make_job: MakeJob, library: str) -> None:
    if library == "lightgbm" and importlib.util.find_spec("lightgbm") is None:
        pytest.skip("lightgbm is not installed (pip install lightgbm)")
    job = make_job(BOOSTING_JOB)
    code, stderr = job.preempt(job.start(env=job.env(LIBRARY=library)), timeout=120)
    assert code == 75, stderr
    saved = job.latest()["step"]
    assert isinstance(saved, int) and saved >= 5
    start = job.start(env=job.env(attempt=2, LIBRARY=library))
    code, stderr = job.preempt(start, timeout=120)
    assert code == 75, stderr
    assert int((job.root / "start-2").read_text()) == saved


HUGGINGFACE_JOB = """
import torch
from transformers import Trainer, TrainerCallback, TrainingArguments
from costaware_runtime.huggingface import CostawareCallback, latest_hf_checkpoint

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
    def forward(self, x, y):
        return {"loss": torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), y)}

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        x = torch.full((4,), float(i % 7))
        return {"x": x, "y": x.sum()}

class Ready(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= 12:
            READY.touch()
        time.sleep(0.02)

# "best": a save after every step's evaluation only when its eval_loss is a new best ("greater" is better
# here, so only the first step's is), as for a team that keeps its best model only.
saving = (dict(save_strategy="best", eval_strategy="steps", eval_steps=1, metric_for_best_model="loss",
    greater_is_better=True, label_names=["y"]) if os.environ.get("SAVE") == "best" else dict(save_steps=10))
args = TrainingArguments(output_dir=str(cr.checkpoint_dir()), max_steps=int(os.environ["STEPS"]),
    save_total_limit=2, per_device_train_batch_size=4, report_to=[], use_cpu=True, disable_tqdm=True,
    **saving)
trainer = Trainer(Tiny(), args, train_dataset=Data(), eval_dataset=Data(),
    callbacks=[Ready(), CostawareCallback()])
resume = latest_hf_checkpoint()
(READY.parent / f"resume-{cr.attempt()}").write_text(str(resume))
trainer.train(resume_from_checkpoint=resume)
torch.save(trainer.model.state_dict(), cr.output_dir() / "model.pt")
cr.write_metrics({"global_step": trainer.state.global_step})
"""


@needs("transformers")
def test_huggingface_trainer_is_preempted_and_resumes(make_job: MakeJob) -> None:
    job = make_job(HUGGINGFACE_JOB)
    code, stderr = job.preempt(job.start(env=job.env(STEPS="1000")), timeout=300)
    assert code == 75, stderr
    saved = job.latest()["step"]
    assert isinstance(saved, int) and saved >= 12
    assert (job.pushed(saved) / f"checkpoint-{saved}" / "trainer_state.json").exists()

    second = job.run(env=job.env(attempt=2, STEPS=str(saved + 15)))
    assert second.returncode == 0, second.stderr
    assert (job.root / "resume-2").read_text().endswith(f"checkpoint-{saved}")
    assert json.loads(job.result.read_text())["metrics"] == {"global_step": saved + 15}


@needs("transformers")
def test_a_trainer_that_skips_the_save_the_notice_asked_for_still_exits_75(make_job: MakeJob) -> None:
    # save_strategy="best" keeps a step's save only for a new best: stopped on the notice without it,
    # trainer.train() returned, the job went on, and a model trained 13 steps of 1000 was uploaded (exit 0).
    job = make_job(HUGGINGFACE_JOB)
    code, stderr = job.preempt(job.start(env=job.env(STEPS="1000", SAVE="best")), timeout=300)
    assert code == 75, stderr
    assert "preempted (job exit 75) after checkpoint step 1" in stderr  # the first step's, the only best
    assert job.latest()["step"] == 1
    assert not job.outputs.exists() and not job.result.exists()


@needs("transformers")
def test_huggingface_callback_insists_on_the_checkpoint_folder(make_job: MakeJob) -> None:
    job = make_job("""
from transformers import TrainerControl, TrainerState, TrainingArguments
from costaware_runtime.huggingface import CostawareCallback
args = TrainingArguments(output_dir=str(READY.parent / "elsewhere"), report_to=[], use_cpu=True)
CostawareCallback().on_train_begin(args, TrainerState(), TrainerControl())
""")
    done = job.run()
    assert done.returncode == 1
    assert "TrainingArguments.output_dir is" in done.stderr
    assert "pass output_dir=str(costaware_runtime.checkpoint_dir())" in done.stderr


@needs("transformers")
def test_huggingface_callback_asks_for_a_save_when_the_timer_says_so(sigterm_restored: None) -> None:
    from costaware_runtime import CheckpointTimer
    from costaware_runtime.huggingface import CostawareCallback
    from transformers import TrainerControl, TrainerState, TrainingArguments

    ticks = iter(range(100))
    callback = CostawareCallback(timer=CheckpointTimer(2.5, clock=lambda: float(next(ticks))))
    args = TrainingArguments(output_dir="unused", report_to=[], use_cpu=True)
    asked = []
    for _ in range(7):  # the clock moves 1 s a step: due at steps 3 and 6
        control = TrainerControl()
        callback.on_step_end(args, TrainerState(), control)
        asked.append(control.should_save and not control.should_training_stop)
    assert asked == [False, False, True, False, False, True, False]


def test_the_torch_helpers_say_how_to_install_pytorch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The runtime does not depend on PyTorch: an image without it gets the install line, as XGBoost's does.
    from costaware_runtime import torch as runtime_torch

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(ImportError, match=r"costaware_runtime.torch needs PyTorch: pip install torch"):
        runtime_torch.load_state(directory=tmp_path)
