"""A team's own training command under ``RemoteTrainingOperator``: check the arguments, plan, finish.

The attempts themselves (submit, poll, interruptions, pauses, ledger entries) are the operator's, the same
as for the built-in trainers. What differs is here: the arguments a command takes instead of the built-in
trainer's, and the finish, which reads the launcher's result, stores the job's outputs as a ``files``
version of the model store (metadata last) and records the job's metrics in the run's outcome. See
docs/own-training.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from costaware.adapters.compute import job_contract
from costaware.core.errors import ConfigurationError, ResultMissingError, StoreUnavailableError
from costaware.operators.rendered_values import rendered_as_text

log = logging.getLogger(__name__)

#: The built-in trainer's arguments, which a command job does not take.
#: Beside ``registered.json``: the id of the version a registration began to store, written before it.
REGISTERING_FILE = "registering.json"

TRAINER_ARGUMENTS = (
    "data_path",
    "label_column",
    "feature_columns",
    "new_data_path",
    "label_threshold",
    "trainer",
    "trainer_params",
    "policy",
    "policy_params",
    "seed",
)
#: What the built-in trainers need, in the order a message lists them.
REQUIRED_FOR_TRAINER = ("data_path", "label_column", "feature_columns")


def check_job_kind(owner: str, command: Any, given: Mapping[str, Any]) -> list[str] | None:
    """Exactly one of ``command`` and the built-in trainer's arguments; returns the command (or None).

    Args:
        owner: How messages name the task, e.g. ``RemoteTrainingOperator 'train'``.
        command: The ``command`` argument (None: the built-in trainers).
        given: The trainer arguments by name, None where not given.

    Raises:
        ConfigurationError: both kinds, or neither complete; the message names the arguments.
    """
    passed = [name for name in TRAINER_ARGUMENTS if given.get(name) not in (None, {}, [], "")]
    if command is not None:
        if passed:
            raise ConfigurationError(
                f"{owner} has command= and the built-in trainer's {', '.join(passed)}: a command reads its "
                "own data and settings, so drop those (or drop command= to train with a built-in trainer)"
            )
        return job_contract.check_command(command, owner=f"{owner} command")
    missing = [name for name in REQUIRED_FOR_TRAINER if given.get(name) in (None, [], "")]
    if missing:
        raise ConfigurationError(
            f"{owner} needs either command=[...] (your own training command) or the built-in trainer's "
            f"data_path, label_column and feature_columns; {', '.join(missing)} missing"
        )
    return None


def rendered_command(
    value: Any,
    owner: str,
    written: Sequence[Any] | None = None,
    render_text: Callable[[str], str] | None = None,
) -> list[str]:
    """The command after rendering, each element a string.

    Args:
        value: The command as Airflow rendered it.
        owner: How messages name the task.
        written: The command as the DAG wrote it: messages name an element's template.
        render_text: Renders a template to text (``rendered_values.text_renderer``): an element the DAG
            wrote as a template that ``render_template_as_native_obj`` rendered to a number or bool is
            rendered again as text, as the backend options' env and tags are; ``str()`` of the number
            turned ``'1.10'`` into ``'1.1'``.

    Raises:
        ConfigurationError: as ``job_contract.check_command``.
    """
    if isinstance(value, Sequence) and not isinstance(value, str):
        if render_text is not None and isinstance(written, list | tuple) and len(written) == len(value):
            value = [rendered_as_text(w, v, render_text) for w, v in zip(written, value, strict=True)]
        # A number no template of its own gave (a whole list from a param): a command line is text.
        value = [str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for v in value]
    return job_contract.check_command(value, owner=f"{owner} command", written=written)


def _attempt_key(state: Mapping[str, Any]) -> tuple[str, int, str]:
    """The succeeded attempt's staging folder (relative to the model store), number and job id."""
    last = state["attempts"][-1]
    attempt = int(last["attempt"])
    return job_contract.attempt_folder(state["base_name"], attempt), attempt, str(last["job_id"])


def _read_result(store: Any, folder: str, job_id: str) -> Any:
    """The launcher's result of the attempt staged at ``folder``, as JSON."""
    where = f"{store.uri}/{folder}/{job_contract.RESULT_FILE}"
    try:
        raw = store.blobs.read_bytes(f"{folder}/{job_contract.RESULT_FILE}")
    except FileNotFoundError as e:
        raise ResultMissingError(
            f"training job {job_id!r} exited 0 but its result {where!r} is not there ({e}): costaware-run "
            "writes it on success, so check that the image runs the command under costaware-run with "
            "costaware-runtime[s3] installed, that the job's role may write under the model store, and that "
            "aws_conn_id reaches the job's S3 endpoint and bucket; nothing was registered"
        ) from e
    except OSError as e:
        raise StoreUnavailableError(
            f"cannot read the result {where!r} of training job {job_id!r} ({e}); the task is retried"
        ) from e
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ConfigurationError(
            f"result {where!r} of training job {job_id!r} is not JSON ({e}): nothing was registered"
        ) from e


def command_result_missing(
    state: Mapping[str, Any], storage_options: Mapping[str, Any], *, attempt: int, job_id: str
) -> str | None:
    """What attempt ``attempt`` (its job exited 0) failed to leave: its launcher's result; None if there.

    A version registered for it before (a retry of the task) counts as its result.

    Raises:
        StoreUnavailableError: the store could not be read (the caller reads it again later).
    """
    from costaware.adapters.model_store import ModelStore

    store = ModelStore.open(str(state["model_store"]), **dict(storage_options))
    folder = job_contract.attempt_folder(state["base_name"], attempt)
    for name in (job_contract.REGISTERED_FILE, job_contract.RESULT_FILE):
        try:
            store.blobs.read_bytes(f"{folder}/{name}")
            return None
        except FileNotFoundError:
            continue
        except OSError as e:
            raise StoreUnavailableError(f"cannot read {store.uri}/{folder}/{name} ({e})") from e
    return f"exited 0 but left no result at {store.uri}/{folder}/{job_contract.RESULT_FILE}"


def register_outputs(
    state: Mapping[str, Any], storage_options: Mapping[str, Any], usd: str
) -> dict[str, Any]:
    """Store the succeeded attempt's outputs as a ``files`` version; returns version, metrics and sizes.

    Idempotent: the attempt's folder gets ``registered.json`` after the version is complete, so a retry of
    the task returns the same version instead of storing a second one; and ``registering.json``, the new
    version's id, before it is stored, so a retry after a try that failed in between reuses that version.

    Raises:
        ConfigurationError: the result is missing or malformed, or the outputs are not a finished upload.
    """
    from costaware.adapters.model_store import ModelStore
    from costaware.adapters.model_versions import VersionNotFoundError

    store = ModelStore.open(str(state["model_store"]), **dict(storage_options))
    folder, attempt, job_id = _attempt_key(state)
    marker = f"{folder}/{job_contract.REGISTERED_FILE}"
    try:
        done = json.loads(store.blobs.read_bytes(marker))
        meta = store.get(str(done["version"]))
        return {**done, "metrics": dict(meta.metrics)}
    except (FileNotFoundError, VersionNotFoundError):
        pass
    output_uri, _ = job_contract.attempt_uris(str(state["model_store"]), state["base_name"], attempt)
    result = job_contract.parse_result(
        _read_result(store, folder, job_id),
        job=job_id,
        where=f"{store.uri}/{folder}/{job_contract.RESULT_FILE}",
        attempt=attempt,
        output_uri=output_uri,
    )
    for warning in result.warnings:
        log.warning("costaware-run in job %s: %s", job_id, warning)
    begun = f"{folder}/{REGISTERING_FILE}"
    stored = _version_begun_before(store, begun)
    if stored is None:
        stored = _store_outputs(store, state, result, usd, begun)
    done = {"version": stored.version, "files": result.files, "bytes": result.bytes}
    store.blobs.write_bytes(marker, json.dumps(done).encode())
    try:  # the version has its own copy now; the staged one only costs storage
        store.blobs.delete(f"{folder}/{job_contract.OUTPUT_FOLDER}")
    except OSError as e:
        log.warning("could not delete the staged outputs %s/%s: %s", store.uri, folder, e)
    return {**done, "metrics": dict(result.metrics)}


def _version_begun_before(store: Any, begun: str) -> Any:
    """The complete version an earlier try of this registration stored, or None (none, or not complete).

    A try that stored the version and failed before its ``registered.json`` (a store that timed out) left
    no marker: its retry stored the outputs again, as a second version.
    """
    from costaware.adapters.model_versions import IncompleteVersionError, VersionNotFoundError

    try:
        version = str(json.loads(store.blobs.read_bytes(begun))["version"])
        found = store.get(version)
    except (FileNotFoundError, VersionNotFoundError, IncompleteVersionError):
        return None
    log.info("model version %s was stored by an earlier try of this registration: reused", version)
    return found


def _store_outputs(store: Any, state: Mapping[str, Any], result: Any, usd: str, begun: str) -> Any:
    """Store the staged outputs as a new ``files`` version, its id written at ``begun`` first."""
    from costaware.adapters.model_versions import ModelVersion, new_version_id

    folder, attempt, job_id = _attempt_key(state)
    identity = dict(state["identity"])
    meta = ModelVersion(
        version=new_version_id(),
        trainer="command",
        model_format="files",
        mode="full",
        parent=None,
        data_fingerprint="",
        features=(),
        label="",
        params={"command": list(state["command"]), "image": state.get("image") or None},
        metrics=dict(result.metrics),
        cost_usd=usd,
        run={**identity, "job_id": job_id, "attempt": attempt, "checkpoint_step": result.checkpoint_step},
    )
    store.blobs.write_bytes(begun, json.dumps({"version": meta.version}).encode())
    return store.save_files(meta, f"{folder}/{job_contract.OUTPUT_FOLDER}")


def format_metrics(metrics: Mapping[str, float]) -> str:
    """``name=value`` pairs for the task log, in name order.

    A name holding ``,``, ``=``, a blank, a quote or an unprintable character is quoted (COCO's
    ``'AP@IoU=0.50'=0.41``), so the line reads one way; such names are legal (the ledger and the model's
    metadata keep metrics as JSON).
    """
    return ", ".join(f"{_metric_name(name)}={value:g}" for name, value in sorted(metrics.items()))


def _metric_name(name: str) -> str:
    plain = name.isprintable() and not any(c in name for c in ",= '\"")
    return name if plain else repr(name)
