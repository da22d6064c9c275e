"""DAG params that costaware reads, declared so the trigger form refuses what the ledger cannot store.

``team``, ``project`` and ``owner`` become ledger tags of every cost a run records (and ``project`` picks
the budget that gates training). A tag value cannot hold ``,`` or ``=``: those separate the parts of a
budget scope such as ``project=churn,team=ml``; nor be ``None`` or ``null``, which read as never set (the
run's tag dropped). Declare them with :func:`tag_param` and Airflow refuses a trigger with such a value
before the run starts, naming the param::

    from costaware.params import tag_param

    @dag(params={"team": tag_param("ml", title="Team"), "owner": tag_param("data-science", title="Owner")})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from costaware.core.budgets import MAX_TAG_VALUE, TAG_VALUE_PATTERN, TAG_VALUE_RULE
from costaware.core.run_conf import check_run_conf  # the example DAGs' first task calls it

__all__ = [
    "TAG_VALUE_PATTERN",
    "bounded_param",
    "check_local_command",
    "check_remote_backend",
    "check_run_conf",
    "spot_tuning_params",
    "tag_param",
    "usd_param",
]


def _tag_value_schema() -> dict[str, Any]:
    r"""``TAG_VALUE_PATTERN`` as one JSON-schema keyword per rule, each refusal naming its own rule.

    Airflow refuses a trigger with jsonschema's message, on the server (a ``Param`` subclass does not run
    there): the one pattern was quoted whole ("'a,b' does not match '^(?!\s*(?:None|null)..."); now it
    reads "'a,b' should not be valid under {'pattern': '[,=]'}". Blank is refused by ``minLength`` and
    ``\S``; a new dict each call, as every param keeps its own schema.
    """
    return {
        "pattern": r"\S",
        "allOf": [{"not": {"pattern": "[,=]"}}, {"not": {"pattern": r"^\s*(None|null)\s*$"}}],
    }


def tag_param(default: str, *, title: str, description: str = "", max_length: int = MAX_TAG_VALUE) -> Any:
    """An Airflow ``Param`` for a ledger tag's value: not blank, ``None`` or ``null``, no ``,`` or ``=``.

    Args:
        default: The value a scheduled run uses; checked here, so a bad default fails when the DAG parses.
        title: The label of the trigger form's field.
        description: What the tag is for; the rule for its value is appended.
        max_length: The most characters the form accepts; at most the ledger's ``MAX_TAG_VALUE`` (128).

    Raises:
        ValueError: a default that could not be stored as a tag, or a ``max_length`` past what a tag holds.
    """
    import re

    from airflow.sdk import Param

    # 200 was the default: a 150-character value passed the form, then the tag was dropped and the gate
    # failed for a run not tagged as its scope.
    if (
        isinstance(max_length, bool)
        or not isinstance(max_length, int)
        or not 1 <= max_length <= MAX_TAG_VALUE
    ):
        raise ValueError(
            f"tag_param max_length={max_length!r} for {title!r}: give a whole number from 1 to "
            f"{MAX_TAG_VALUE}, the most characters a ledger tag's value holds (or leave it out)"
        )
    if not re.match(TAG_VALUE_PATTERN, str(default)):
        raise ValueError(f"tag_param default {default!r} for {title!r} must be {TAG_VALUE_RULE}")
    if len(str(default)) > max_length:
        raise ValueError(
            f"tag_param default {default!r} for {title!r} has {len(str(default))} characters: at most "
            f"max_length={max_length}; shorten it"
        )
    rule = f"A ledger tag: {TAG_VALUE_RULE} (they separate a budget scope's parts)."
    return Param(
        default,
        type="string",
        minLength=1,
        maxLength=max_length,
        title=title,
        description=f"{description} {rule}".strip(),
        **_tag_value_schema(),
    )


def bounded_param(
    default: float,
    *,
    title: str,
    description: str = "",
    low: float = 0,
    high: float = 1_000_000,
    kind: str = "",
) -> Any:
    """An Airflow ``Param`` for a number refused outside (``low``, ``high``) when the run is triggered.

    The bounds are exclusive on purpose: the trigger form clamps a typed value to ``minimum``/``maximum``
    without a word, while Airflow refuses an out-of-range exclusive bound by name.

    Args:
        default: The value a scheduled run uses.
        title: The label of the trigger form's field.
        description: What the value is for.
        low: Values must be above it.
        high: Values must be below it.
        kind: ``integer`` or ``number``; empty: ``integer`` for an ``int`` default, else ``number``.
    """
    from airflow.sdk import Param

    kind = kind or ("integer" if isinstance(default, int) else "number")
    return Param(
        default, type=kind, exclusiveMinimum=low, exclusiveMaximum=high, title=title, description=description
    )


USD_PATTERN = r"^\d{1,6}(\.\d{1,6})?$"
#: Said on the form: Airflow's own refusal of "$0.40" quotes only the pattern.
USD_RULE = (
    "a number of dollars without '$', e.g. 0.40 (digits and an optional dot, no comma, up to 999999.999999)"
)


def usd_param(default: str | None, *, title: str, description: str, optional: bool = False) -> Any:
    """An Airflow ``Param`` for an amount of dollars, a string so that no float rounds a cent away.

    The trigger form refuses what the pattern does not match before the run starts; Airflow's message
    quotes the pattern, so the rule is also written out in the field's description. ``optional`` (or a
    ``None`` default) lets the field be left empty (null, or ``""`` from ``dags trigger -c``: refused by the
    pattern before, though the description said "Empty"), which the DAG reads as no amount.

    Raises:
        ValueError: a default that the pattern refuses, so a bad one fails when the DAG parses.
    """
    import re

    from airflow.sdk import Param

    if default is not None and not re.match(USD_PATTERN, default):
        raise ValueError(f"usd_param default {default!r} for {title!r} must be {USD_RULE}")
    optional = optional or default is None
    return Param(
        default,
        type=["null", "string"] if optional else "string",
        pattern=f"^({USD_PATTERN[1:-1]})?$" if optional else USD_PATTERN,
        title=title,
        description=f"{description} Give {USD_RULE}.",
    )


def seconds_param(default: float, *, title: str, description: str) -> Any:
    """An Airflow ``Param`` for seconds, 0 or more, refused by name below 0 when the run is triggered.

    A top-level ``minimum`` would be clamped by the form without a word (see :func:`bounded_param`), and no
    exclusive bound lets 0 in and keeps every negative out. The form reads only the top level, so the
    minimum sits in an ``allOf``: refused as "-1 is less than the minimum of 0" (``not`` below 0 said "-1
    should not be valid under {'exclusiveMaximum': 0}", JSON schema at the user).
    """
    from airflow.sdk import Param

    return Param(
        default,
        type="number",
        title=title,
        description=f"0 or more: {description}",
        allOf=[{"minimum": 0}],
    )


def spot_deadline_param() -> Any:
    """The trigger form's training deadline, for ``SpotWindowSensor(deadline="{{ params.spot_deadline }}")``.

    Without it a replayed day's run (a 2013 logical date) had a deadline long past: every attempt went
    on-demand, and the form had no field to change that. ``format: date-time`` gives the form its picker;
    jsonschema's refusal of a time without a zone says only "is not a 'date-time'", so the description
    says that a zone is needed.
    """
    from airflow.sdk import Param

    return Param(
        None,
        type=["null", "string"],
        format="date-time",
        title="Training deadline",
        description="When training must be done; until then the spot window may wait for a good price. "
        "Read in the time zone chosen in the Airflow UI's user menu (UTC unless you changed it). From "
        "-c (dags trigger, dags test) give it with a time zone, e.g. '2026-12-02T12:00:00Z' (UTC) or "
        "'2026-12-02T12:00:00+01:00': without one it is refused as \"not a 'date-time'\". Empty: the end "
        "of the run's data interval (long past for a replayed day: on-demand at once).",
    )


def remote_backend_params(what: str = "script") -> dict[str, Any]:
    """The trigger form's fields of where a team's command runs.

    ``backend``, ``image``, ``backend_options`` and ``python`` (this worker's interpreter on the local
    backend, ``python`` in a container); ``what`` names the command in the descriptions (``script``).
    """
    import sys

    from airflow.sdk import Param

    return {
        "backend": Param(
            "local",
            enum=["local", "sagemaker", "batch", "kubernetes"],
            title="Backend",
            description=f"Where the {what} runs: local (a child process of the worker), sagemaker, batch, "
            "kubernetes.",
        ),
        "image": Param(
            None,
            type=["null", "string"],
            title="Training image",
            description="Container image on SageMaker, Batch and Kubernetes (see "
            "runtime/Dockerfile.train.example); not used locally.",
        ),
        "backend_options": Param({}, type="object", title="Backend options"),
        "python": Param(
            sys.executable,
            type="string",
            title="Python",
            description=f"The interpreter that runs the {what}: this Airflow's own on the local backend "
            "(it needs torch); 'python' in a container.",
        ),
    }


def check_local_command(params: Mapping[str, Any], *, script: str = "script") -> None:
    """On the ``local`` backend, refuse a ``script`` or ``python`` param that this worker does not have.

    The form cannot check paths, and a typo failed only in the training task, after the spend gate had
    reserved its money; a DAG calls this in a task ahead of the gate. Other backends run the command in a
    container this worker cannot see.

    Raises:
        ConfigurationError: the script is not a file, or the interpreter is not an executable, here.
    """
    import shutil
    from pathlib import Path

    from costaware.core.errors import ConfigurationError

    if str(params.get("backend") or "local") != "local":
        return
    path = str(params.get(script) or "")
    if not Path(path).is_file():
        raise ConfigurationError(
            f"{script} {path!r} is not a file on this worker: give the full path of the script the local "
            "backend runs"
        )
    python = str(params.get("python") or "")
    if not shutil.which(python):
        raise ConfigurationError(
            f"python {python!r} is not an executable on this worker: give an interpreter's path (the default "
            "is this Airflow's own)"
        )


def check_remote_backend(
    params: Mapping[str, Any],
    *,
    job: str,
    data_root_default: str,
    instance_type: str | None = None,
    instance_type_hint: str | None = None,
) -> None:
    """Refuse a remote backend ``job`` (``"the training"``) could not run on, every problem at once.

    Its options, a local ``data_root`` (``data_root_default`` where the param is empty) that a job on
    another machine cannot reach, SageMaker without an image or on an ``instance_type`` that is not an
    ``ml.*`` type: a DAG calls this ahead of its spend gate, as a typo failed only in the training task,
    after the gate had reserved its money.

    Args:
        params: The run's params (``backend``, ``backend_options``, ``data_root``, ``image``).
        job: What runs, for messages (``"the training"``).
        data_root_default: The ``data_root`` a run with that param empty uses.
        instance_type: The type the job would run on; ``None`` (the default, as before it was checked)
            leaves the type unchecked.
        instance_type_hint: What to give instead of a type SageMaker does not train on; ``None``: give an
            ``ml.*`` type with SageMaker's prices.

    Raises:
        ConfigurationError: naming each problem and what to give.
    """
    from costaware.adapters.compute.base import check_backend_options, open_backend, require_s3
    from costaware.core.errors import ConfigurationError, CostawareError

    backend = str(params.get("backend") or "local")
    options = dict(params.get("backend_options") or {})
    problems: list[str] = []
    try:
        check_backend_options(backend, options)
        open_backend(backend, options)  # what the backend itself checks (Batch's queues); no AWS call
    except CostawareError as e:
        problems.append(str(e))
    try:
        require_s3(backend, data_root=str(params.get("data_root") or data_root_default))
    except CostawareError as e:
        problems.append(str(e))
    if backend == "sagemaker" and not (params.get("image") or options.get("image_uri")):
        problems.append(
            f"SageMaker runs {job} in an image: give the image param, or image_uri in backend_options"
        )
    if backend == "sagemaker" and instance_type is not None and not instance_type.startswith("ml."):
        # Refused only at the submit, after the spend gate (or the study's budget) had reserved.
        hint = instance_type_hint or (
            "give an ml.* instance type as SageMaker names it (ml.g5.xlarge), priced at SageMaker's spot "
            "and on-demand prices, not EC2's"
        )
        problems.append(
            f"SageMaker trains only on ml.* instance types, and {job} would run on {instance_type!r}: {hint}"
        )
    if problems:
        raise ConfigurationError(f"the {backend} backend cannot run {job}: " + "; ".join(problems))


def spot_tuning_params(
    *,
    max_usd: float = 100,
    max_gpu_hours: float = 20,
    max_trials: int = 40,
    warmup_epochs: int = 3,
    full_epochs: int = 15,
    keep_fraction: float = 0.5,
    checkpoint_minutes: float = 15,
    epoch_minutes: float = 4,
    overrun_factor: float = 1.5,
) -> dict[str, Any]:
    """The trigger form's fields of a spot tuning plan (``SpotTuningSettings``), with these defaults.

    ``max_usd``, ``max_gpu_hours``, ``max_trials``, ``warmup_epochs``, ``full_epochs``, ``keep_fraction``,
    ``checkpoint_minutes``, ``epoch_minutes`` and ``overrun_factor``; ``SpotTuningSettings.create`` checks
    what the form cannot (``full_epochs`` above ``warmup_epochs``, ``overrun_factor`` from 1 to 10).
    """
    return {
        "max_usd": bounded_param(
            max_usd,
            kind="number",
            title="Dollar cap (USD)",
            description="Hard stop: every trial is reserved at what it may cost and stopped there.",
        ),
        "max_gpu_hours": bounded_param(
            max_gpu_hours,
            kind="number",
            title="GPU-hour cap",
            description="Hard stop in GPU-hours (billed hours x the instance's GPUs). To leave them "
            "uncapped, give a large number such as 100000: the dollar cap still binds.",
        ),
        "max_trials": bounded_param(max_trials, title="Trials", description="1-1000.", high=1001),
        "warmup_epochs": bounded_param(
            warmup_epochs,
            title="Warm-up epochs",
            description="Every trial trains this many epochs; the prune ranks them there.",
            high=1001,
        ),
        "full_epochs": bounded_param(
            full_epochs,
            title="Full epochs",
            description="A promoted trial's epochs in all (more than the warm-up's).",
            low=1,
            high=10001,
        ),
        "keep_fraction": bounded_param(
            keep_fraction,
            kind="number",
            title="Share promoted",
            description="The top share of warm-ups promoted (above 0, at most 1); 0.5 prunes the bottom "
            "half.",
            high=1.001,  # exclusive, so 1 (promote every warm-up) passes; the plan refuses what is above 1
        ),
        "checkpoint_minutes": bounded_param(
            checkpoint_minutes,
            kind="number",
            title="Checkpoint every (minutes)",
            description="The most work a preemption loses; 15-30 on spot.",
            high=1441,
        ),
        "epoch_minutes": bounded_param(
            epoch_minutes,
            kind="number",
            title="Minutes per epoch (estimate)",
            description="One epoch on the instance type: sizes the study before any trial has run.",
            high=100_000,
        ),
        "overrun_factor": bounded_param(
            overrun_factor,
            kind="number",
            title="Overrun allowed (x estimate)",
            description="A warm-up or promotion is stopped once it costs this many times its estimate "
            "(1-10); that much is reserved for it, so the caps hold however long it runs.",
            high=100,  # the plan refuses what is outside 1-10, saying so; the form only the absurd
        ),
    }
