"""What a retrain trains: :class:`TrainingSpec` for both retrain operators, :class:`RetrainJob` for the run.

``WarmStartRetrainOperator`` trains it in the worker (:meth:`TrainingSpec.retrain_job` -> ``run_retrain``);
``RemoteTrainingOperator`` writes it as the JSON spec its job reads (:meth:`TrainingSpec.spec_file`), and the
job's ``python -m costaware.training.entrypoint`` turns that back into the same ``RetrainJob``. The arguments
are checked once, here, when the DAG is parsed (:func:`check_training_arguments`) and again after rendering.
No IO and no heavy imports here: the operators import this module when the DAG is parsed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from costaware.core.errors import ConfigurationError
from costaware.core.given import not_given

if TYPE_CHECKING:
    from costaware.core.retrain_policy import RetrainPolicy
    from costaware.training.trainers import Trainer

DEFAULT_TRAINER = "sklearn-sgd"


def check_checkpoint_interval(
    every_seconds: Any,
    every_steps: Any,
    *,
    names: tuple[str, str] = ("checkpoint_every_seconds", "checkpoint_every_steps"),
    prefix: str = "",
    allow_auto: bool = False,
    owner: str = "",
) -> None:
    """A checkpoint interval by time, by steps, or both: the one check of the operators and ``Checkpointer``.

    Args:
        every_seconds: Seconds between saves, or None; with ``allow_auto``, also ``"auto"``.
        every_steps: Steps between saves, or None.
        names: How messages name the two, e.g. the operator's arguments.
        prefix: Put before the first name in messages (``"checkpoint "`` for ``Checkpointer``'s own).
        allow_auto: Accept ``"auto"`` (a remote job's interval from its interruption rate, set later).
        owner: What the messages start with, e.g. ``"WarmStartRetrainOperator 'train'"``; empty: nothing.

    Raises:
        ConfigurationError: a value that is not a positive number of seconds / steps, or neither given.
    """
    from costaware.core.checkpoint_interval import is_auto

    lead = f"{owner}: " if owner else ""
    seconds_name, steps_name = names
    if is_auto(every_seconds):
        if allow_auto:
            return
        raise ConfigurationError(
            f"{lead}{prefix}{seconds_name}={every_seconds!r} sets the interval of a remote job from its spot "
            "interruption rate (RemoteTrainingOperator's built-in training): give a number of seconds here"
        )
    if every_seconds is not None and not (
        isinstance(every_seconds, int | float)
        and not isinstance(every_seconds, bool)
        and math.isfinite(every_seconds)
        and every_seconds > 0
    ):
        hint, number = "", math.nan
        if isinstance(every_seconds, str):
            with contextlib.suppress(ValueError):
                number = float(every_seconds)
        if math.isfinite(number) and number > 0:
            hint = f" (a string: write {number:g}, without quotes)"
        elif isinstance(every_seconds, str) and "{{" in every_seconds:
            hint = " (it is not templated: the interval is part of the DAG; write the number)"
        allowed = "a number > 0, 'auto' or None" if allow_auto else "a number > 0 or None"
        raise ConfigurationError(
            f"{lead}{prefix}{seconds_name} must be {allowed}, got {every_seconds!r}{hint}"
        )
    if every_steps is not None and (
        not isinstance(every_steps, int) or isinstance(every_steps, bool) or every_steps < 1
    ):
        raise ConfigurationError(
            f"{lead}{prefix}{steps_name} must be an integer >= 1 or None, got {every_steps!r}"
        )
    if every_seconds is None and every_steps is None:
        raise ConfigurationError(
            f"{lead}set {prefix}{seconds_name} or {steps_name} (or both): with neither, a preemption "
            "loses the whole training"
        )


def check_training_arguments(
    *,
    label_column: Any,
    feature_columns: Sequence[Any],
    checkpoint_every_seconds: Any,
    checkpoint_every_steps: Any,
    allow_auto: bool = False,
    owner: str = "",
) -> None:
    """What can be checked before templates are rendered (when the DAG is parsed).

    ``allow_auto``: accept ``checkpoint_every_seconds="auto"`` (see :func:`check_checkpoint_interval`);
    ``owner``: what each message starts with (the operator and task, ``"WarmStartRetrainOperator 'train'"``).

    Raises:
        ConfigurationError: no features, the label among them, or a bad checkpoint interval.
    """
    lead = f"{owner}: " if owner else ""
    if not feature_columns:
        raise ConfigurationError(f"{lead}feature_columns is empty: name the columns the model learns from")
    if label_column in feature_columns:
        raise ConfigurationError(
            f"{lead}label column {label_column!r} is also a feature: remove it from feature_columns"
        )
    check_checkpoint_interval(
        checkpoint_every_seconds, checkpoint_every_steps, allow_auto=allow_auto, owner=owner
    )


def parse_label_threshold(value: Any) -> float | None:
    """``label_threshold`` as a number (a job file may give text); None when not given (None, JSON null).

    It is never rendered (a template is refused), so text that reads as not given (blank, ``None``,
    ``null``; :func:`costaware.core.given.not_given`) was written out: a mistake, refused like any other.
    A rule of its own read ``"null"`` as not given and refused ``"None "``.

    Raises:
        ConfigurationError: not a finite number, naming the value.
    """
    if value is None:
        return None
    if not_given(value):
        raise ConfigurationError(
            f"label_threshold must be a number (a label above it counts as 1), got {value!r}: write the "
            "number, or leave label_threshold out (None) to use a 0/1 or boolean label as it is"
        )
    try:
        number = float(str(value).strip()) if not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ConfigurationError(
            f"label_threshold must be a number (a label above it counts as 1), got {value!r}"
        )
    return number


def parse_drift_columns(value: Any) -> list[str] | None:
    """``drift_columns`` as a list of column names; None (not given): every feature is checked.

    Raises:
        ConfigurationError: not a list of column names (5 was a bare "'int' object is not iterable", a
            string was read letter by letter), naming the value and what to give.
    """
    if value is None:
        return None
    names = None if isinstance(value, (str, Mapping)) else _items(value)
    if names is not None and all(isinstance(name, str) and name.strip() for name in names):
        return names
    written = [name.strip() for name in value.split(",") if name.strip()] if isinstance(value, str) else []
    raise ConfigurationError(
        f"drift_columns must be a list of column names (the features checked for drift), got {value!r}: "
        + (f"write {written!r}" if written else "e.g. ['dep_delay', 'distance']")
        + ", or leave drift_columns out to check every feature"
    )


def _items(value: Any) -> list[Any] | None:
    """``value``'s items, or None where it has none (a number)."""
    try:
        return list(value)
    except TypeError:
        return None


@dataclass(frozen=True)
class RetrainJob:
    """Everything one retrain needs; see ``WarmStartRetrainOperator`` for each field's meaning."""

    data_path: str
    label_column: str
    feature_columns: Sequence[str]
    model_store: str
    checkpoint_store: str
    checkpoint_key: str
    trainer: str | Trainer = DEFAULT_TRAINER
    trainer_params: Mapping[str, Any] = field(default_factory=dict)
    new_data_path: str | None = None
    label_threshold: float | None = None
    policy: str | RetrainPolicy | None = None
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    drift_columns: Sequence[str] | None = None
    force_full: bool = False
    checkpoint_every_seconds: float | None = 300.0
    checkpoint_every_steps: int | None = None
    usd_per_hour: str | None = None
    quality_window: int = 10
    run: Mapping[str, Any] = field(default_factory=dict)
    storage_options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TrainingSpec:
    """The built-in training of one retrain, rendered; see ``WarmStartRetrainOperator`` for each field.

    ``policy`` is a policy name, or (in the worker only) a ``RetrainPolicy`` instance.
    """

    data_path: str
    label_column: str
    feature_columns: tuple[str, ...]
    model_store: str
    checkpoint_store: str
    new_data_path: str | None = None
    label_threshold: float | None = None
    trainer: str = DEFAULT_TRAINER
    trainer_params: Mapping[str, Any] = field(default_factory=dict)
    policy: Any = None
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    force_full: bool = False
    checkpoint_every_seconds: float | None = 300.0
    checkpoint_every_steps: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        check_training_arguments(
            label_column=self.label_column,
            feature_columns=self.feature_columns,
            checkpoint_every_seconds=self.checkpoint_every_seconds,
            checkpoint_every_steps=self.checkpoint_every_steps,
        )
        for name in ("data_path", "model_store", "checkpoint_store"):
            if not str(getattr(self, name) or "").strip():
                raise ConfigurationError(f"{name} rendered empty: give a path or URI")

    def _trainer_params(self) -> dict[str, Any]:
        # A seed argument is the trainer's seed unless trainer_params name one themselves.
        params = dict(self.trainer_params)
        return params if self.seed is None else {"seed": int(self.seed), **params}

    def retrain_job(
        self,
        *,
        checkpoint_key: str,
        run: Mapping[str, Any],
        storage_options: Mapping[str, Any],
        usd_per_hour: str | None = None,
        drift_columns: Sequence[str] | None = None,
    ) -> RetrainJob:
        """The ``RetrainJob`` that ``run_retrain`` trains in this process."""
        return RetrainJob(
            data_path=self.data_path,
            new_data_path=self.new_data_path,
            label_column=self.label_column,
            feature_columns=list(self.feature_columns),
            label_threshold=self.label_threshold,
            model_store=self.model_store,
            checkpoint_store=self.checkpoint_store,
            checkpoint_key=checkpoint_key,
            trainer=self.trainer,
            trainer_params=self._trainer_params(),
            policy=self.policy,
            policy_params=dict(self.policy_params),
            drift_columns=drift_columns,
            force_full=self.force_full,
            checkpoint_every_seconds=self.checkpoint_every_seconds,
            checkpoint_every_steps=self.checkpoint_every_steps,
            usd_per_hour=usd_per_hour,
            run=dict(run),
            storage_options=dict(storage_options),
        )

    def spec_file(
        self,
        *,
        checkpoint_key: str,
        run: Mapping[str, Any],
        storage_options: Mapping[str, Any],
        result_uri: str,
    ) -> dict[str, Any]:
        """The JSON spec ``python -m costaware.training.entrypoint --spec URI`` reads (JSON primitives).

        The fields of :meth:`retrain_job`'s ``RetrainJob`` (the seed already in ``trainer_params``) and
        ``result_uri``. ``storage_options`` must hold no credentials (``entrypoint.spec_storage_options``).
        """
        if self.policy is not None and not isinstance(self.policy, str):
            raise ConfigurationError(
                f"policy {self.policy!r} is an object: a remote job gets it by name (drift, always-full, "
                "always-warm) with policy_params"
            )
        # The worker's RetrainJob, field by field: job_from_spec reads back the very job the worker trains.
        job = self.retrain_job(checkpoint_key=checkpoint_key, run=run, storage_options=storage_options)
        return {**{f.name: getattr(job, f.name) for f in fields(job)}, "result_uri": result_uri}
