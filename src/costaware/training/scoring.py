"""Scoring model versions for promotion: on a holdout with costaware's trainers, or with the team's command.

Two ways to put a figure on a version, both run on the Airflow worker and neither needing the framework the
model was trained with:

* ``holdout_scores``: load a version made by a costaware trainer (built in, or a ``Trainer`` class), predict
  the holdout, and compute a built-in metric with ``costaware.core.metrics``;
* ``command_scores``: run the team's scoring command as a subprocess with the version's files and the
  holdout's path in its environment; it writes a JSON object of named numbers to ``COSTAWARE_METRICS_PATH``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costaware.adapters.model_files import FILES_FORMAT
from costaware.adapters.model_store import ModelStore
from costaware.adapters.model_versions import ModelVersion
from costaware.core.errors import ConfigurationError, ScoringError
from costaware.core.metrics import score

log = logging.getLogger(__name__)


# The scoring command's environment. The names follow the training job contract (costaware_runtime).
MODEL_DIR = "COSTAWARE_MODEL_DIR"
HOLDOUT_PATH = "COSTAWARE_HOLDOUT_PATH"
METRICS_PATH = "COSTAWARE_METRICS_PATH"
MODEL_VERSION = "COSTAWARE_MODEL_VERSION"
MODEL_ROLE = "COSTAWARE_MODEL_ROLE"

#: Lines of the command's output quoted in an error.
_TAIL_LINES = 20
_HOW = "write a JSON object of named numbers there, e.g. costaware_runtime.write_metrics({'rmse': 3.2})"


def is_user_code(meta: ModelVersion) -> bool:
    """Whether ``meta``'s model is a folder of files from the team's code, which costaware cannot load."""
    return meta.model_format == FILES_FORMAT


# -- on a holdout, with costaware's trainers -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HoldoutScores:
    """Each version's metric on one holdout, with how many rows it had and its fingerprint."""

    values: Mapping[str, float] = field(default_factory=dict)
    rows: int = 0
    fingerprint: str = ""


def holdout_scores(
    store: ModelStore,
    versions: Mapping[str, ModelVersion],
    *,
    metric: str,
    holdout_path: str,
    label_column: str,
    label_threshold: float | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> HoldoutScores:
    """Predict the holdout with each version (by role: candidate, champion) and compute ``metric``.

    Rows without a label are dropped (a cancelled flight has no delay). With ``label_threshold`` the label
    is ``label > label_threshold`` (binary metrics only).

    Raises:
        ConfigurationError: A version is a ``files`` version, the holdout is missing or lacks a column, or
            the label does not fit the metric.
    """
    import pandas as pd

    from costaware.training.data import read_parquet
    from costaware.training.trainers import resolve_trainer, stored_trainer

    for role, meta in versions.items():
        if is_user_code(meta):
            raise ConfigurationError(
                f"{role} {meta.version!r} is a {FILES_FORMAT!r} version (a folder of files from your own "
                "training code), which costaware does not load to score a holdout: pass candidate_metrics "
                "(the job's metrics, e.g. \"{{ ti.xcom_pull(task_ids='train')['metrics'] }}\") or "
                "scoring_command (your scoring script)"
            )
    columns = sorted({*(c for meta in versions.values() for c in meta.features), label_column})
    frame, fingerprint = read_parquet(holdout_path, columns, storage_options, what="holdout_path")
    known = frame[frame[label_column].notna()].reset_index(drop=True)
    if len(known) < len(frame):
        log.info("dropped %d holdout rows without a value in %r", len(frame) - len(known), label_column)
    if not len(known):
        raise ConfigurationError(
            f"holdout {holdout_path!r} has no rows with a value in label column {label_column!r}: "
            "nothing to score on"
        )
    label = known[label_column].to_numpy()
    if label_threshold is not None:
        try:
            label = (pd.to_numeric(known[label_column]) > float(label_threshold)).astype(int).to_numpy()
        except (TypeError, ValueError) as e:
            raise ConfigurationError(
                f"label_threshold needs a numeric label column, {label_column!r} is not ({e})"
            ) from e
    values = {}
    for role, meta in versions.items():
        trainer = resolve_trainer(stored_trainer(meta.trainer), meta.params)
        predictions = trainer.predict(trainer.load(store.model_bytes(meta)), known[list(meta.features)])
        values[role] = score(metric, label, predictions, label_name=f"label column {label_column!r}")
        log.info("%s %s: %s %s on %d holdout rows", role, meta.version, metric, values[role], len(known))
    return HoldoutScores(values, len(known), fingerprint)


# -- with the team's scoring command -------------------------------------------------------------------------


def command_scores(
    store: ModelStore,
    meta: ModelVersion,
    *,
    role: str,
    command: Sequence[str],
    holdout_path: str,
    timeout_seconds: float,
    workdir: Path,
) -> dict[str, float]:
    """Run ``command`` on one version and return the metrics it wrote.

    The command's environment is the worker's, plus ``COSTAWARE_MODEL_DIR`` (a local copy of a ``files``
    version's folder; for other versions the path of the local copy of its model file),
    ``COSTAWARE_HOLDOUT_PATH``, ``COSTAWARE_METRICS_PATH``, ``COSTAWARE_MODEL_VERSION`` and
    ``COSTAWARE_MODEL_ROLE`` (``candidate`` or ``champion``).

    Raises:
        ScoringError: The command cannot start, exits non-zero, times out, or writes no valid metrics file.
    """
    folder = workdir / role
    folder.mkdir(parents=True)
    model = local_model(store, meta, folder / "model")
    metrics_path = folder / "metrics.json"
    env = {
        MODEL_DIR: str(model),
        HOLDOUT_PATH: holdout_path,
        METRICS_PATH: str(metrics_path),
        MODEL_VERSION: meta.version,
        MODEL_ROLE: role,
    }
    who = f"{role} {meta.version!r}"
    run_command(command, env=env, timeout_seconds=timeout_seconds, who=who, cwd=folder)
    return read_scores(metrics_path, who)


def local_model(store: ModelStore, meta: ModelVersion, target: Path) -> Path:
    """A local copy of ``meta``'s model: its folder for a ``files`` version, else its model file.

    Raises:
        UntrustedModelError: A file does not match the checksum stored with the version.
    """
    target.mkdir(parents=True)
    if is_user_code(meta):
        return store.download_files(meta, target)
    path = target / meta.model_file
    path.write_bytes(store.model_bytes(meta))
    return path


def run_command(
    command: Sequence[str], *, env: Mapping[str, str], timeout_seconds: float, who: str, cwd: Path
) -> None:
    """Run ``command`` with ``env`` added, its output in the log; kill its whole process group on timeout.

    Raises:
        ScoringError: It cannot start, exits non-zero, or runs past ``timeout_seconds``.
    """
    argv = list(command)
    log.info("scoring %s: %s", who, argv)
    try:
        # its own session, so a timeout (or this task being killed) stops the children it started too
        proc = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as e:
        raise ScoringError(
            f"scoring command {argv!r} cannot be started ({e}): check the program's name and that it is "
            "installed on the Airflow worker"
        ) from e
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    reader = threading.Thread(target=_pump, args=(proc, tail), daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise ScoringError(
            f"scoring command {argv!r} ran past scoring_timeout_seconds={timeout_seconds:g} scoring {who} "
            "and was stopped; nothing was promoted: raise the timeout or make the scoring faster"
        ) from None
    except BaseException:  # the task itself is stopped: leave no scorer running
        _kill(proc)
        raise
    finally:
        reader.join(timeout=5)
    if code != 0:
        output = "\n".join(tail) or "(no output)"
        raise ScoringError(
            f"scoring command {argv!r} exited with code {code} scoring {who}; nothing was promoted. Fix the "
            f"command; its last lines:\n{output}"
        )


def _pump(proc: subprocess.Popen[bytes], tail: collections.deque[str]) -> None:
    if proc.stdout is None:  # never: Popen was given stdout=PIPE
        return
    for raw in proc.stdout:
        line = raw.decode("utf-8", errors="replace").rstrip()
        tail.append(line)
        log.info("scorer: %s", line)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def read_scores(path: Path, who: str) -> dict[str, float]:
    """The metrics the scoring command wrote for ``who``: a JSON object of named numbers.

    Raises:
        ScoringError: The file is missing, not JSON, not an object, or holds a value that is not a number.
    """
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScoringError(
            f"the scoring command exited 0 but wrote no metrics file for {who} at {METRICS_PATH}={path}: "
            f"{_HOW}"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ScoringError(f"cannot read the scoring command's metrics file {path} for {who}: {e}") from e
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise ScoringError(
            f"the scoring command's metrics file for {who} is not JSON ({e}); it holds {raw[:80]!r}: {_HOW}"
        ) from e
    if not isinstance(data, dict):
        raise ScoringError(
            f"the scoring command's metrics file for {who} holds a {type(data).__name__}, not a JSON object: "
            f"{_HOW}"
        )
    for name, value in data.items():
        # bool is an int subclass, and True as a metric is a bug in the script
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ScoringError(
                f"the scoring command's metrics file for {who}: {name!r} is {value!r}, not a number: {_HOW}"
            )
    return {str(name): float(value) for name, value in data.items()}
