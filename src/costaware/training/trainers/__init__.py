"""The trainer protocol and the built-in trainers (scikit-learn SGD and HGB, XGBoost, LightGBM).

A trainer trains in steps so the runner can checkpoint between them and resume after a preemption:

* ``init_model(data, champion=...)`` — the model to train: a fresh one (full retrain, ``champion`` is
  None) or the champion made ready to continue (warm start);
* ``n_steps(data, warm=...)`` — how many steps this training takes;
* ``fit_step(model, data, step=...)`` — train one step (``step`` counts from 0) and return the model;
* ``save(model) -> bytes`` / ``load(bytes) -> model`` — the model in a format that loads without pickle.
  Checkpoints use them too: resuming is ``load`` of the checkpoint, then the remaining ``fit_step`` calls,
  so ``fit_step`` must depend only on its arguments (seed randomness from ``step``);
* ``predict(model, features) -> scores`` — probability of the positive class, for evaluation;
* optional: ``incompatibility(champion, data) -> str`` — why the champion model cannot be continued on
  ``data`` (empty when it can); a warm start the policy chose becomes its choice with that reason.

Any class with these members (and ``name``, ``model_format`` attributes) plugs in by its path,
``"pkg.mod:Class"``.

The protocol and ``TrainingData`` are in ``base``, the built-in trainers in ``sklearn`` and ``boosters``, the
lookup by name in ``lookup``; every name is importable from here (``costaware.training.trainers:SGDTrainer``).
"""

from __future__ import annotations

from costaware.training.trainers.base import Trainer, TrainingData, categorical_columns
from costaware.training.trainers.boosters import BoosterModel, LightGBMTrainer, XGBoostTrainer, encode_frame
from costaware.training.trainers.lookup import (
    BUILT_IN,
    resolve_trainer,
    same_trainer,
    stored_trainer,
    trainer_path,
)
from costaware.training.trainers.sklearn import MISSING, HistGradientBoostingTrainer, SGDTrainer

__all__ = [
    "BUILT_IN",
    "MISSING",
    "BoosterModel",
    "HistGradientBoostingTrainer",
    "LightGBMTrainer",
    "SGDTrainer",
    "Trainer",
    "TrainingData",
    "XGBoostTrainer",
    "categorical_columns",
    "encode_frame",
    "resolve_trainer",
    "same_trainer",
    "stored_trainer",
    "trainer_path",
]
