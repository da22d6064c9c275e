"""One warm-start-or-full retrain with checkpoints.

The operators call ``run_retrain`` (promotion is ``costaware.training.promotion``);
``python -m costaware.training.runner --config job.json`` runs a retrain outside Airflow (e.g. on a spot
instance) and exits with code 75 after a preemption, so any scheduler can retry it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from costaware.adapters.checkpoint_store import CheckpointStorage, CheckpointStore, is_safe_key
from costaware.adapters.model_store import ModelStore
from costaware.adapters.model_versions import UNRECORDED, ModelVersion, new_version_id
from costaware.core.errors import ConfigurationError, StoreUnavailableError
from costaware.core.given import not_given
from costaware.core.ledger import compute_cost
from costaware.core.money import parse_usd
from costaware.core.retrain_policy import (
    POLICIES,
    DataProfile,
    RetrainContext,
    drift_report,
    make_policy,
    profile_frame,
)
from costaware.training.checkpointing import PREEMPTED_EXIT_CODE, Checkpointer, PreemptedError
from costaware.training.data import read_parquet, training_data
from costaware.training.record import training_record
from costaware.training.spec import (
    RetrainJob,
    check_training_arguments,
    parse_drift_columns,
    parse_label_threshold,
)
from costaware.training.trainers import resolve_trainer, same_trainer, trainer_path

#: ``read_parquet``, ``training_data`` (``training.data``), ``RetrainJob`` (``training.spec``), ``POLICIES``
#: and ``make_policy`` (``core.retrain_policy``) are still importable from here, their older home.
__all__ = ["POLICIES", "main", "make_policy", "promote_candidate", "run_retrain"]

log = logging.getLogger(__name__)

# -- retrain -------------------------------------------------------------------------------------------------


def _label_rule(label: str, threshold: float | None) -> str:
    return f"{label!r} as 0/1" if threshold is None else f"{label!r} > {threshold:g}"


def _incompatibility(
    champion: ModelVersion, trainer: str, features: Sequence[str], label: str, label_threshold: float | None
) -> str:
    if not same_trainer(champion.trainer, trainer):
        return f"it was trained by {champion.trainer!r}, this run uses {trainer!r}"
    if list(champion.features) != list(features):
        return f"its features {list(champion.features)} differ from {list(features)}"
    if champion.label != label:
        return f"its label {champion.label!r} differs from {label!r}"
    if champion.label_threshold == UNRECORDED:
        return (
            f"it was stored without its label threshold (an older costaware), so its label may not be "
            f"this run's {_label_rule(label, label_threshold)}"
        )
    if champion.label_threshold != label_threshold:
        return (
            f"its label {_label_rule(champion.label, champion.label_threshold)} differs from this run's "
            f"{_label_rule(label, label_threshold)}"
        )
    if not champion.reference_profile:
        return "it has no reference data profile"
    return ""


def _refuse_foreign_checkpoint(store: CheckpointStorage, key: str, trainer: str) -> None:
    """Refuse to train over the checkpoints of another trainer (a wrong key or a reused prefix)."""
    newest = store.latest(key, quiet=True)  # the Checkpointer's resume warns of unusable ones, once
    other = str(newest.meta.get("trainer", "")) if newest else ""
    if newest and other and other != trainer:
        raise ConfigurationError(
            f"checkpoint {store.location(key)} after step {newest.step} was written by trainer {other!r}, "
            f"this job uses {trainer!r}: use another checkpoint key or prefix, or delete that checkpoint"
        )


def run_retrain(
    job: RetrainJob,
    *,
    on_checkpointer: Callable[[Checkpointer], None] | None = None,
    checkpoints: CheckpointStorage | None = None,
    preemption_notice: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Choose warm or full, train with checkpoints (resuming one if present), store the new version.

    Args:
        job: What to train.
        on_checkpointer: Called with the ``Checkpointer`` before training (an operator's ``on_kill`` asks it
            to stop).
        checkpoints: Where checkpoints go; default the ``CheckpointStore`` at ``job.checkpoint_store`` (the
            entrypoint passes the launcher's ``CheckpointFolder`` under ``costaware-run``).
        preemption_notice: The ``Checkpointer``'s ``notice`` (under ``costaware-run``: the runtime's flag);
            None: it handles SIGTERM itself.

    Returns a JSON-able summary: version, mode, reason, parent, steps, resumed_from_step, seconds, ...
    Raises ``PreemptedError`` after saving a checkpoint when a preemption notice arrived.
    """
    started, cpu_started = time.perf_counter(), time.process_time()
    if not job.feature_columns:
        raise ConfigurationError("feature_columns is empty: name the columns the model learns from")
    if job.label_column in job.feature_columns:
        raise ConfigurationError(
            f"label column {job.label_column!r} is also a feature: remove it from feature_columns"
        )
    rate = parse_usd(job.usd_per_hour, name="usd_per_hour") if job.usd_per_hour is not None else None
    opts = dict(job.storage_options)
    policy = make_policy(job.policy, job.policy_params)
    trainer = resolve_trainer(job.trainer, job.trainer_params)
    name = trainer_path(trainer)
    features = list(job.feature_columns)
    drift_columns = list(job.drift_columns) if job.drift_columns is not None else features
    unknown = [c for c in drift_columns if c not in features]
    if unknown:
        # Checked here, by the names the user knows: the profile's own message listed an internal column.
        raise ConfigurationError(
            f"drift_columns {unknown} are not feature columns of this training ({', '.join(features)}): "
            "fix the names"
        )
    try:
        store = ModelStore.open(job.model_store, **opts)
    except OSError as e:  # as at the save below: the contract's "a store failed", not a code error
        raise StoreUnavailableError(
            f"cannot open the model store {job.model_store!r} ({e}): check that this job can reach and write "
            "it (its endpoint, credentials, a file where a folder should be)"
        ) from e
    columns = [*features, job.label_column]

    new_frame, new_fingerprint = read_parquet(
        job.new_data_path or job.data_path,
        columns,
        opts,
        what="new_data_path" if job.new_data_path else "data_path",
    )
    new_data = training_data(new_frame, features, job.label_column, job.label_threshold)
    labelled = new_data.features.assign(__label__=new_data.label)
    champion = store.champion()
    threshold = None if job.label_threshold is None else float(job.label_threshold)
    incompatible = _incompatibility(champion, name, features, job.label_column, threshold) if champion else ""
    drift = None
    if champion and not incompatible and champion.reference_profile:
        reference = DataProfile.from_dict(champion.reference_profile)
        current = profile_frame(labelled, drift_columns, label="__label__", reference=reference)
        drift = drift_report(reference, current, columns=drift_columns)
    context = RetrainContext(
        has_champion=champion is not None,
        drift=drift,
        warm_steps_since_full=champion.warm_steps_since_full if champion else 0,
        recent_quality=store.recent_quality(job.quality_window),
        force_full=bool(job.force_full),
        incompatible=incompatible,
    )
    decision = policy.decide(context)
    if decision.warm and champion:
        start_model = trainer.load(store.model_bytes(champion))
        # Whether the model itself survives this batch only its trainer knows (sklearn-hgb forgets the
        # categories a batch lacks): a trainer may say why not, and the policy chooses again knowing it.
        check = getattr(trainer, "incompatibility", None)
        refusal = check(start_model, new_data) if check else ""
        if refusal:
            decision = policy.decide(dataclasses.replace(context, incompatible=refusal))
    log.info("retrain mode: %s; reason: %s", decision.mode.value, decision.reason)

    if decision.warm and champion:
        data, fingerprint, reference_profile = new_data, new_fingerprint, champion.reference_profile
        parent, warm_steps = champion.version, champion.warm_steps_since_full + 1
    else:
        if job.new_data_path and job.new_data_path != job.data_path:
            frame, fingerprint = read_parquet(job.data_path, columns, opts)
            data = training_data(frame, features, job.label_column, job.label_threshold)
        else:
            data, fingerprint = new_data, new_fingerprint
        reference_profile = profile_frame(
            data.features.assign(__label__=data.label), drift_columns, label="__label__"
        ).to_dict()
        start_model, parent, warm_steps = None, None, 0

    plan = {
        "mode": decision.mode.value,
        "parent": parent,
        "data_fingerprint": fingerprint,
        "trainer": name,
        "params": hashlib.sha256(
            json.dumps(dict(job.trainer_params), sort_keys=True, default=str).encode()
        ).hexdigest()[:16],
        # What the model learns from and to predict: the same file read with other columns or another label
        # threshold has the same fingerprint, and a model half-trained on it must not be carried on.
        "features": features,
        "label": job.label_column,
        "label_threshold": job.label_threshold,
    }
    if checkpoints is None:
        checkpoints = CheckpointStore.open(job.checkpoint_store, **opts)
    _refuse_foreign_checkpoint(checkpoints, job.checkpoint_key, name)
    total = trainer.n_steps(data, warm=decision.warm)
    # How to reproduce it, from the trainer that ran: the task that records the outcome may have none.
    record = functools.partial(
        training_record,
        trainer,
        trainer_name=name,
        trainer_params=job.trainer_params,
        steps=total,
        data_fingerprint=fingerprint,
    )
    # One training across its attempts: its run's checkpoint key and its plan, as its checkpoints resume.
    plan_digest = hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()
    attempt_key = f"{job.checkpoint_key}#{plan_digest}"
    try:
        earlier = store.saved_before(attempt_key)
    except OSError as e:  # as at the save below: the contract's "a store failed"
        raise StoreUnavailableError(
            f"cannot read the model store {store.uri!r} ({e}): check that this job can reach it"
        ) from e
    if earlier is not None:
        # An earlier attempt's save failed though its version was complete: not trained or stored again.
        log.info(
            "model version %s was stored by an earlier attempt of this training: reused", earlier.version
        )
        checkpoints.clear(job.checkpoint_key)
        _forget_attempt(store, attempt_key)
        return _summary(
            store, earlier, decision.reason, drift, dict(earlier.metrics), record(), started, cpu_started
        )
    checkpointer = Checkpointer(
        checkpoints,
        job.checkpoint_key,
        every_seconds=job.checkpoint_every_seconds,
        every_steps=job.checkpoint_every_steps,
        meta=plan,
        notice=preemption_notice,
    )
    if on_checkpointer:
        on_checkpointer(checkpointer)
    fit_started = time.perf_counter()
    with checkpointer:
        checkpoint = checkpointer.resume()
        if checkpoint:
            model, first = trainer.load(checkpoint.state), checkpoint.step
        else:
            model, first = trainer.init_model(data, champion=start_model), 0
        for step in range(first, total):
            model = trainer.fit_step(model, data, step=step)
            checkpointer.step_done(step + 1, functools.partial(trainer.save, model), last=step + 1 == total)
    fit_seconds = time.perf_counter() - fit_started
    blob = trainer.save(model)
    seconds = time.perf_counter() - started
    cost = str(compute_cost(seconds, rate)[1]) if rate is not None else None
    metrics = {
        "rows": data.rows,
        "steps": total,
        "resumed_from_step": checkpoint.step if checkpoint else None,
        "checkpoints_saved": checkpointer.saves,
        # What one save cost this run (median wall seconds: serialize and write), None without a save.
        "checkpoint_save_seconds": (
            round(statistics.median(checkpointer.save_seconds), 4) if checkpointer.save_seconds else None
        ),
        "fit_seconds": round(fit_seconds, 4),
        "seconds": round(seconds, 4),
        "cpu_seconds": round(time.process_time() - cpu_started, 4),
    }
    candidate = ModelVersion(
        version=new_version_id(),
        trainer=name,
        model_format=trainer.model_format,
        mode=decision.mode.value,
        parent=parent,
        data_fingerprint=fingerprint,
        features=tuple(features),
        label=job.label_column,
        label_threshold=threshold,
        params=dict(job.trainer_params),
        metrics=metrics,
        cost_usd=cost,
        warm_steps_since_full=warm_steps,
        reference_profile=reference_profile,
        reason=decision.reason,
        run=dict(job.run),
    )
    try:
        stored = store.save(candidate, blob, attempt_key=attempt_key)
    except OSError as e:
        # A store that failed mid-save leaves a version without metadata, which nothing reads; the
        # checkpoints are kept, so the next attempt (a job exits 74) resumes at the last step, not step 0.
        raise StoreUnavailableError(
            f"cannot store the model version in {store.uri!r} ({e}): check that this job can reach and write "
            "the model store (its endpoint, credentials, a file where a folder should be); its checkpoints "
            "are kept for the next attempt"
        ) from e
    checkpointer.finish()
    _forget_attempt(store, attempt_key)
    return _summary(store, stored, decision.reason, drift, metrics, record(), started, cpu_started)


def _summary(
    store: ModelStore,
    stored: ModelVersion,
    reason: str,
    drift: Any,
    metrics: dict[str, Any],
    record: dict[str, Any],
    started: float,
    cpu_started: float,
) -> dict[str, Any]:
    """What ``run_retrain`` returns of the version ``stored`` (``metrics``: the training's facts)."""
    return {
        "version": stored.version,
        "mode": stored.mode,
        "reason": reason,
        "parent": stored.parent,
        "model_store": store.uri,
        "drift": drift.to_dict() if drift else None,
        "cost_usd": stored.cost_usd,
        **metrics,
        "record": record,
        "seconds": round(time.perf_counter() - started, 4),
        "cpu_seconds": round(time.process_time() - cpu_started, 4),
    }


def _forget_attempt(store: ModelStore, attempt_key: str) -> None:
    """Drop the note of a stored training's save: one left behind makes a rerun of it reuse the version."""
    try:
        store.forget_attempt(attempt_key)
    except OSError as e:
        log.warning("could not delete the note of the stored version's save in %s: %s", store.uri, e)


# -- promote -------------------------------------------------------------------------------------------------


def promote_candidate(**kwargs: Any) -> dict[str, Any]:
    """Kept for callers of this older path: see ``costaware.training.promotion.promote_candidate``."""
    from costaware.training.promotion import promote_candidate as promote

    return promote(**kwargs)


# -- command line --------------------------------------------------------------------------------------------


def job_from_file(path: str) -> RetrainJob:
    """The ``RetrainJob`` of a JSON job file, every mistake named (a missing file was a traceback, exit 1).

    Raises:
        ConfigurationError: a file that cannot be read, is not a JSON object, lacks a required field or
            names one ``RetrainJob`` does not have; ``force_full`` that is no boolean; ``feature_columns``
            given as one string (read letter by letter before).
    """
    import difflib
    from pathlib import Path

    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigurationError(
            f"cannot read the job file {path!r} ({e.strerror or e}): give a JSON file of RetrainJob fields"
        ) from e
    try:
        given = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"job file {path!r} is not JSON: {e}") from e
    if not isinstance(given, dict):
        raise ConfigurationError(f"job file {path!r} must hold a JSON object of RetrainJob fields")
    fields = {f.name: f for f in dataclasses.fields(RetrainJob)}
    for name in given:
        if name not in fields:
            meant = difflib.get_close_matches(name, list(fields), n=1)
            hint = f"did you mean {meant[0]!r}?" if meant else f"the fields are {', '.join(fields)}"
            raise ConfigurationError(f"job file {path!r}: {name!r} is no RetrainJob field ({hint})")
    missing = [
        name
        for name, f in fields.items()
        if name not in given and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigurationError(
            f"job file {path!r} lacks {', '.join(missing)}: give them (docs/retraining.md, 'Outside Airflow')"
        )
    flag = given.get("force_full", False)
    if isinstance(flag, str):  # "false" was true: a full retrain where a warm start was asked for
        if flag.strip().lower() not in ("true", "false"):
            raise ConfigurationError(f"job file {path!r}: force_full must be true or false, got {flag!r}")
        given["force_full"] = flag.strip().lower() == "true"
    try:  # "15m" was a ValueError traceback (exit 1) once the data was read, not this exit 2
        given["label_threshold"] = parse_label_threshold(given.get("label_threshold"))
    except ConfigurationError as e:
        raise ConfigurationError(f"job file {path!r}: {e}") from e
    if isinstance(given["feature_columns"], str):
        names = [n.strip() for n in given["feature_columns"].split(",") if not not_given(n)]
        example = json.dumps(names) if names else 'e.g. ["dep_delay", "distance"]'
        raise ConfigurationError(
            f"job file {path!r}: feature_columns must be a list of column names, got the string "
            f"{given['feature_columns']!r}: write {example}, or leave feature_columns out"
        )
    columns = given["feature_columns"]
    if not isinstance(columns, list) or not all(isinstance(c, str) and c for c in columns):
        # 5 was "argument of type 'int' is not iterable", naming neither the file nor the field.
        raise ConfigurationError(
            f"job file {path!r}: feature_columns must be a list of column names, such as "
            f'["dep_delay", "distance"], got {columns!r}'
        )
    try:  # 5 was {"error": "'int' object is not iterable"}, naming neither the file nor the field
        given["drift_columns"] = parse_drift_columns(given.get("drift_columns"))
    except ConfigurationError as e:
        raise ConfigurationError(f"job file {path!r}: {e}") from e
    for name in ("trainer_params", "policy_params", "storage_options", "run"):
        if not isinstance(given.get(name, {}), dict):  # "anon=true" was a ValueError traceback, exit 1
            raise ConfigurationError(
                f"job file {path!r}: {name} must be a JSON object of names and values, such as "
                f'{{"anon": true}}, got {given[name]!r}'
            )
    if not is_safe_key(given["checkpoint_key"]):
        # The checkpoint store refused it only once the data had been read.
        raise ConfigurationError(
            f"job file {path!r}: checkpoint_key {given['checkpoint_key']!r} is not a safe relative path: "
            "give parts of letters, digits, '.', '_', '=' or '-' joined by '/', such as "
            "\"dag/retrain/run-1\" (no '..', '.' or empty part)"
        )
    try:  # a bad interval or the label among the features failed only once the data was read
        check_training_arguments(
            label_column=given["label_column"],
            feature_columns=given["feature_columns"],
            checkpoint_every_seconds=given.get(
                "checkpoint_every_seconds", fields["checkpoint_every_seconds"].default
            ),
            checkpoint_every_steps=given.get(
                "checkpoint_every_steps", fields["checkpoint_every_steps"].default
            ),
        )
    except ConfigurationError as e:
        raise ConfigurationError(f"job file {path!r}: {e}") from e
    return RetrainJob(**given)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m costaware.training.runner --config job.json``: one retrain; exit 75 when preempted."""
    parser = argparse.ArgumentParser(
        prog="python -m costaware.training.runner", description=main.__doc__, allow_abbrev=False
    )
    parser.add_argument("--config", required=True, help="JSON file with the RetrainJob fields")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    try:
        result = run_retrain(job_from_file(args.config))
    except PreemptedError as e:
        print(
            json.dumps(
                {
                    "preempted": True,
                    "step": e.step,
                    "notice_to_save_seconds": e.notice_to_save_seconds,
                    "message": str(e),
                }
            ),
            flush=True,
        )
        return PREEMPTED_EXIT_CODE
    except (ConfigurationError, TypeError) as e:
        print(json.dumps({"error": str(e)}), flush=True)
        return 2
    print(json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
