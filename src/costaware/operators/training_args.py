"""The built-in trainers' arguments, once for ``WarmStartRetrainOperator`` and ``RemoteTrainingOperator``.

Airflow renders templates in operator attributes, so the arguments stay attributes of the operator (and show
in its Rendered Template view); :meth:`BuiltInTrainingArguments.training_spec` turns the rendered attributes
into one :class:`~costaware.training.spec.TrainingSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.glue import as_bool
from costaware.operators.templating import (
    as_written,
    is_template,
    keyword_arguments,
    native_rendered,
    refuse_relative_store,
    refuse_root_store,
    refuse_template,
    rendered_keywords,
)
from costaware.settings import default_store
from costaware.training.plan import blank
from costaware.training.spec import (
    DEFAULT_TRAINER,
    TrainingSpec,
    check_checkpoint_interval,
    check_training_arguments,
    parse_label_threshold,
)

#: The templated ones among them.
TRAINING_TEMPLATE_FIELDS = (
    "data_path",
    "new_data_path",
    "model_store",
    "checkpoint_store",
    "trainer_params",
    "force_full",
)


class BuiltInTrainingArguments:
    """A mixin of the retrain operators: the built-in trainer's arguments and their :class:`TrainingSpec`."""

    data_path: str | None
    label_column: str | None
    feature_columns: list[str]
    model_store: str
    new_data_path: str | None
    checkpoint_store: str | None
    trainer: str
    trainer_params: Any  # a dict, or a whole template or XComArg until Airflow renders it
    label_threshold: float | None
    policy: Any
    policy_params: dict[str, Any]
    force_full: bool | str
    checkpoint_every_seconds: float | str | None
    checkpoint_every_steps: int | None
    seed: int | None

    def _keep_training_arguments(
        self,
        *,
        model_store: str,
        data_path: str | None,
        label_column: str | None,
        feature_columns: Sequence[str] | None,
        new_data_path: str | None,
        checkpoint_store: str | None,
        trainer: str | None,
        trainer_params: Mapping[str, Any] | str | None,
        label_threshold: float | None,
        policy: Any,
        policy_params: Mapping[str, Any] | None,
        force_full: bool | str,
        checkpoint_every_seconds: float | str | None,
        checkpoint_every_steps: int | None,
        seed: int | None = None,
        check: bool = True,
        allow_auto_interval: bool = False,
    ) -> None:
        """Keep the arguments; with ``check`` (a built-in training), check what needs no rendering.

        ``allow_auto_interval``: accept ``checkpoint_every_seconds="auto"`` (a remote job's interval).
        """
        # Called after BaseOperator's __init__: a refusal names the task, as the DAG's import error shows it.
        owner = f"{type(self).__name__} {getattr(self, 'task_id', '')!r}"
        try:
            # A whole template or XComArg is kept to render: "'{' is not an option of trainer" before.
            trainer_params = keyword_arguments(trainer_params, "trainer_params")
        except ConfigurationError as e:
            raise ConfigurationError(f"{owner}: {e}") from e
        if isinstance(checkpoint_store, str) and not checkpoint_store.strip():
            raise ConfigurationError(
                f"{owner}: checkpoint_store is {checkpoint_store!r}: give where checkpoints go (an absolute "
                "folder, file:///... or s3://...), or leave it out for $AIRFLOW_HOME/costaware/checkpoints"
            )
        if model_store is None or (isinstance(model_store, str) and not model_store.strip()):
            raise ConfigurationError(
                f"{owner}: model_store is {model_store!r}: give where the model versions go (an absolute "
                "folder, file:///... or s3://...)"
            )
        refuse_relative_store(owner, "model_store", model_store)
        refuse_relative_store(owner, "checkpoint_store", checkpoint_store)
        refuse_root_store(owner, "checkpoint_store", checkpoint_store, on_this_machine=False)
        # Refused before only as the task (for a remote job, the bought job) opened it.
        refuse_root_store(owner, "model_store", model_store, on_this_machine=False)
        # Neither is rendered by Airflow: a template's text would reach the training as it is.
        refuse_template("label_threshold", label_threshold, write="write the number")
        refuse_template("feature_columns", feature_columns, write="write the list of column names")
        if isinstance(feature_columns, str):
            # It was read letter by letter: "columns ['d', 'i', 's', ...] are not in the data".
            raise ConfigurationError(
                f"{owner}: feature_columns must be a list of column names, got the string "
                f"{feature_columns!r}: {_columns_to_write(feature_columns)}"
            )
        parse_label_threshold(label_threshold)  # a typo fails here, not as a traceback in the training
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            # Not templated: "abc" failed the task start with int()'s own words, retried.
            raise ConfigurationError(f"{owner}: seed must be a whole number, got {seed!r}")
        if check and isinstance(trainer, str) and not trainer.strip():
            # Read as "not given": the default trainer trained without a word.
            raise ConfigurationError(
                f"{owner}: trainer is {trainer!r}: name a trainer (e.g. {DEFAULT_TRAINER!r}), or leave it "
                "out for the default"
            )
        if check:
            check_training_arguments(
                label_column=label_column,
                feature_columns=list(feature_columns or []),
                checkpoint_every_seconds=checkpoint_every_seconds,
                checkpoint_every_steps=checkpoint_every_steps,
                allow_auto=allow_auto_interval,
                owner=owner,
            )
            written = trainer_params if isinstance(trainer_params, Mapping) else {}  # else checked rendered
            check_choices(owner, trainer or DEFAULT_TRAINER, written, policy, policy_params)
        elif checkpoint_every_seconds is not None:
            # A command gets the interval as COSTAWARE_CHECKPOINT_EVERY_SECONDS (None: not set, the
            # command's own): a bad one must fail here, not as a job that was already launched with it.
            check_checkpoint_interval(
                checkpoint_every_seconds, None, allow_auto=allow_auto_interval, owner=owner
            )
        self.data_path = data_path
        self.label_column = label_column
        self.feature_columns = list(feature_columns or [])
        self.model_store = model_store
        self.new_data_path = new_data_path
        self.checkpoint_store = checkpoint_store
        self.trainer = trainer or DEFAULT_TRAINER
        self.trainer_params = trainer_params
        # Kept as written to tell, after rendering, which values were templates (see native_rendered).
        self._trainer_params_written = as_written(self.trainer_params)
        self.label_threshold = label_threshold
        self.policy = policy
        self.policy_params = dict(policy_params or {})
        self.force_full = force_full
        self.checkpoint_every_seconds = checkpoint_every_seconds
        self.checkpoint_every_steps = checkpoint_every_steps
        self.seed = seed

    def checkpoint_root(self) -> str:
        """The rendered checkpoint store, no trailing slash (default: under ``$AIRFLOW_HOME/costaware``).

        The default is made absolute: a job runs in a folder of its own, where a relative ``AIRFLOW_HOME``
        would point elsewhere.
        """
        if self.checkpoint_store is not None and not str(self.checkpoint_store).strip():
            # As model_store: an unset variable or param sent the checkpoints to a local default, unsaid.
            raise ConfigurationError(
                "checkpoint_store is '': give where checkpoints go (an absolute folder, file:///... or "
                "s3://...), or leave it out for $AIRFLOW_HOME/costaware/checkpoints"
            )
        if self.checkpoint_store:
            # A template that rendered "/": refused when the DAG was parsed had it been written out.
            refuse_root_store(
                f"task {getattr(self, 'task_id', '')!r}", "checkpoint_store", self.checkpoint_store
            )
            return str(self.checkpoint_store).rstrip("/")
        return str(Path(default_store("checkpoints")).expanduser().absolute())

    def training_spec(self, *, checkpoint_every_seconds: float | None = None) -> TrainingSpec:
        """The rendered arguments as one value (call after Airflow rendered the templates).

        Args:
            checkpoint_every_seconds: The interval that ``"auto"`` was resolved to, instead of the argument.

        Raises:
            ConfigurationError: a rendered value that is empty or wrong; the message names it.
        """
        trainer_params = rendered_keywords(self.trainer_params, "trainer_params")
        if not isinstance(self._trainer_params_written, Mapping):
            # A whole template or XComArg: its names are known only now, before any job is started.
            from costaware.training.trainers.lookup import check_trainer_choice

            check_trainer_choice(self.trainer, trainer_params)
        return TrainingSpec(
            data_path=str(self.data_path or ""),
            label_column=str(self.label_column or ""),
            feature_columns=tuple(self.feature_columns),
            model_store=str(self.model_store or ""),
            checkpoint_store=self.checkpoint_root(),
            new_data_path=blank(self.new_data_path),
            label_threshold=parse_label_threshold(self.label_threshold),
            trainer=self.trainer,
            trainer_params=native_rendered(self._trainer_params_written, trainer_params),
            policy=self.policy,
            policy_params=dict(self.policy_params),
            force_full=as_bool(self.force_full, "force_full"),
            checkpoint_every_seconds=(
                checkpoint_every_seconds
                if checkpoint_every_seconds is not None
                else self.checkpoint_every_seconds  # type: ignore[arg-type]  # "auto" is refused there
            ),
            checkpoint_every_steps=self.checkpoint_every_steps,
            seed=self.seed,
        )


def check_choices(
    owner: str,
    trainer: Any,
    trainer_params: Mapping[str, Any] | None,
    policy: Any,
    policy_params: Mapping[str, Any] | None,
) -> None:
    """Refuse a misspelt trainer or policy, or a parameter they do not take, as the DAG is parsed.

    Neither is a template field, and a parameter's name is written out even where its value is a template,
    so this is the place: for ``RemoteTrainingOperator`` the job would find the typo after it started.
    """
    from costaware.core.retrain_policy import make_policy
    from costaware.training.trainers.lookup import check_trainer_choice

    written = [name for name in trainer_params or {} if not is_template(name)]
    instead = "write its name out (choose among operators with a branch, or template trainer_params instead)"
    try:
        refuse_template("trainer", trainer, write=instead)
        refuse_template("policy", policy, write=instead)
        if isinstance(trainer, str):
            check_trainer_choice(trainer, dict.fromkeys(written))
        make_policy(policy, policy_params)
    except ConfigurationError as e:
        raise ConfigurationError(f"{owner}: {e}") from e


def _columns_to_write(text: str) -> str:
    """What to write for feature_columns given as the string ``text``: its names as a list, where it has any.

    ``""`` or ``"None"`` were told to write ``['']`` / ``['None']``, themselves no columns.
    """
    from costaware.core.given import not_given

    names = [name.strip() for name in text.split(",") if not not_given(name)]
    example = repr(names) if names else "e.g. ['dep_delay', 'distance']"
    return f"write {example}, or leave feature_columns out"
