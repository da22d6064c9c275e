"""The training entrypoint a container or child process runs: ``python -m costaware.training.entrypoint``.

``--spec URI`` names a JSON file (local path, ``file://`` or ``s3://``) with the fields of
:class:`~costaware.training.spec.RetrainJob`: data URIs, trainer and params, model store, checkpoint store
and key, checkpoint interval, plus ``seed`` (merged into the trainer's params) and ``result_uri`` (where the
summary JSON is written for the orchestrator). The training is the same ``run_retrain`` the in-worker
``WarmStartRetrainOperator`` calls: it resumes from the newest checkpoint of its key, checkpoints every
``checkpoint_every_seconds`` and on SIGTERM, and stores the candidate in the model store atomically.

S3 endpoint: a spec may carry ``storage_options.endpoint_url`` (MinIO, moto, a VPC endpoint: the one of the
Airflow AWS connection the spec was written through). The spec itself is read through
``--endpoint-url URL``, else the ``COSTAWARE_S3_ENDPOINT_URL`` environment variable, which every backend sets
in the job's environment when the connection has an endpoint. Once read, the spec's own endpoint applies to
every later read and write of the job (data, checkpoints, model store, result), and it is exported as
``COSTAWARE_S3_ENDPOINT_URL`` so that code given no options (a custom trainer) reaches the same store.
Credentials never travel in a spec: the job gets them from its environment or role.

Every backend runs it under the launcher, as a user command runs (docs/own-training.md):
``costaware-run --no-outputs -- python -m costaware.training.entrypoint --spec URI`` (``--no-sync`` too on
SageMaker). With ``COSTAWARE_CHECKPOINT_DIR`` set (the launcher sets it) the checkpoints go into that
folder in the runtime's commit format instead of the spec's checkpoint store (the launcher restores them
before the job and pushes each one to ``COSTAWARE_CHECKPOINT_URI``), the SIGTERM handler is the runtime's,
and the summary's numbers (rows, steps, seconds, ...) are written to ``COSTAWARE_METRICS_PATH``. The model
version is stored by the training itself, hence ``--no-outputs``; the summary still goes to the spec's
``result_uri``. Without the launcher the job uses the spec's checkpoint store and its own SIGTERM handler,
as the in-worker operator does.

Exit codes: 0 done (summary JSON on stdout), 75 preempted after a checkpoint (``EXIT_PREEMPTED`` of the job
contract: resubmit it), 74 a store (data, checkpoints, model store, result) could not be reached
(``EXIT_SYNC_FAILED``: resubmit it; the launcher passes it on under ``--no-outputs``), 2 bad spec or input
(never retry), 1 anything else, a result that could not be written after the model was stored too (its
write is tried again in the job first; a resubmit would train again and store a second version). The last
stderr line is a one-line reason (the launcher's own lines follow it, prefixed ``costaware-run:``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from costaware_runtime.contract import CHECKPOINT_DIR, CHECKPOINT_URI, EXIT_SYNC_FAILED, METRICS_PATH
from costaware_runtime.metrics import write_metrics
from costaware_runtime.preemption import preemption_requested

from costaware.adapters.checkpoint_store import CheckpointFolder
from costaware.core.errors import (
    ConfigurationError,
    ResultMissingError,
    ResultNotWrittenError,
    StoreUnavailableError,
)
from costaware.training.checkpointing import PREEMPTED_EXIT_CODE, PreemptedError
from costaware.training.spec import RetrainJob

log = logging.getLogger(__name__)

CONFIG_EXIT_CODE = 2
ERROR_EXIT_CODE = 1
#: Spec keys besides the RetrainJob fields.
EXTRA_KEYS = ("seed", "result_uri")
#: The only storage options a spec may carry: credentials come from the environment, never from a file.
SPEC_STORAGE_OPTIONS = ("endpoint_url", "region")
#: Waits before each new try of a failed result write (throttling, a dropped connection): the model is
#: stored by then, and a new attempt would train it again.
RESULT_WRITE_RETRY_SECONDS = (1.0, 3.0, 6.0)
#: The environment variable with the S3 endpoint the spec is read through (``BlobDir`` honours it too).
ENDPOINT_ENV = "COSTAWARE_S3_ENDPOINT_URL"


def _split(uri: str) -> tuple[str, str]:
    text = str(uri).strip()
    folder, _, name = text.rstrip("/").rpartition("/")
    if not name or not folder:
        raise ConfigurationError(
            f"spec URI {uri!r} does not name a file: pass e.g. s3://bucket/jobs/spec.json"
        )
    return folder, name


def spec_storage_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The storage options a spec carries: the endpoint and region of ``options``, never credentials."""
    return {k: v for k, v in options.items() if k in SPEC_STORAGE_OPTIONS and v}


def job_environment(options: Mapping[str, Any]) -> dict[str, str]:
    """What a job's environment needs to read its spec through ``options``: the endpoint, if any."""
    endpoint = options.get("endpoint_url")
    return {ENDPOINT_ENV: str(endpoint)} if endpoint else {}


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"{what} is not JSON: {e}") from e
    if not isinstance(value, dict):
        raise ConfigurationError(f"{what} must hold a JSON object, got {type(value).__name__}")
    return value


def read_spec(uri: str, **storage_options: Any) -> dict[str, Any]:
    """The spec at ``uri`` (local path or ``s3://``); ``ConfigurationError`` when missing or malformed.

    Args:
        uri: Where the spec is.
        **storage_options: ``BlobDir.from_uri`` options (endpoint, region, credentials); none: the
            ``COSTAWARE_S3_ENDPOINT_URL`` endpoint and the default credential chain.
    """
    from costaware.adapters.blob_dir import BlobDir

    folder, name = _split(uri)
    try:
        raw = BlobDir.from_uri(
            folder, create=False, what="training spec's folder", **storage_options
        ).read_bytes(name)
    except FileNotFoundError as e:
        raise ConfigurationError(f"training spec {uri!r} does not exist ({e}): write the spec first") from e
    except OSError as e:
        # An endpoint that cannot be reached is no bad spec: "write the spec first" sent people the wrong way.
        if "://" not in uri or uri.startswith("file://"):
            raise ConfigurationError(f"training spec {uri!r} cannot be read ({e})") from e
        endpoint = storage_options.get("endpoint_url")
        raise StoreUnavailableError(
            f"cannot read the training spec {uri!r} ({e}): check that the store is reachable from here"
            + (f" through the endpoint {endpoint!r}" if endpoint else "")
            + f" (--endpoint-url, ${ENDPOINT_ENV}) and the credentials"
        ) from e
    return _json_object(raw, f"training spec {uri!r}")


def read_result(uri: str, *, job_id: str = "", **storage_options: Any) -> dict[str, Any]:
    """The summary a finished job wrote to its ``result_uri``, read through ``storage_options``.

    Raises:
        ResultMissingError: no result there (the job and the reader see different stores).
        ConfigurationError: not a JSON object.
        StoreUnavailableError: the store could not be read for another reason (network, throttling); a
            retry reads it again.
    """
    from costaware.adapters.blob_dir import BlobDir

    folder, name = _split(uri)
    job = f"training job {job_id!r}" if job_id else "the training job"
    try:
        raw = BlobDir.from_uri(folder, create=False, what="result's folder", **storage_options).read_bytes(
            name
        )
    except FileNotFoundError as e:
        raise ResultMissingError(
            f"{job} ended successfully but its result {uri!r} is not there ({e}): the job and the worker "
            "must see the same store; check that aws_conn_id reaches the job's S3 endpoint and bucket and "
            "that the job's role may write under the checkpoint store"
        ) from e
    except OSError as e:
        raise StoreUnavailableError(
            f"cannot read the result {uri!r} of {job} ({e}); the task is retried and reads it again"
        ) from e
    return _json_object(raw, f"result {uri!r} of {job}")


def write_spec(
    uri: str, spec: Mapping[str, Any], *, what: str = "training spec", **storage_options: Any
) -> str:
    """Write ``spec`` as JSON to ``uri`` atomically; returns the URI.

    ``what``: the file written (``result``), named when its folder is refused.
    """
    from costaware.adapters.blob_dir import BlobDir

    folder, name = _split(uri)
    BlobDir.from_uri(folder, what=f"{what}'s folder", **storage_options).write_bytes(
        name, json.dumps(dict(spec), indent=1).encode()
    )
    return uri


def job_from_spec(spec: Mapping[str, Any]) -> RetrainJob:
    """A ``RetrainJob`` from a spec; unknown keys and secret storage options are refused by name."""
    known = {f.name for f in fields(RetrainJob)}
    unknown = sorted(set(spec) - known - set(EXTRA_KEYS))
    if unknown:
        raise ConfigurationError(
            f"training spec has unknown keys {unknown}: use RetrainJob fields, 'seed' or 'result_uri'"
        )
    values = {k: v for k, v in spec.items() if k in known}
    opts = dict(values.get("storage_options") or {})
    secret = sorted(set(opts) - set(SPEC_STORAGE_OPTIONS))
    if secret:
        raise ConfigurationError(
            f"training spec storage_options {secret} are not allowed: a spec holds only "
            f"{', '.join(SPEC_STORAGE_OPTIONS)}; give credentials through the environment or the job's role"
        )
    seed = spec.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigurationError(
                f"training spec seed must be a whole number, got {seed!r}: write it as a JSON integer"
            )
        values["trainer_params"] = {"seed": seed, **dict(values.get("trainer_params") or {})}
    try:
        return RetrainJob(**values)
    except TypeError as e:
        raise ConfigurationError(f"training spec is incomplete: {e}") from e


def launched_checkpoints(environ: Mapping[str, str] | None = None) -> CheckpointFolder | None:
    """The launcher's checkpoint folder when the job runs under ``costaware-run``, else None.

    Under the launcher means ``COSTAWARE_CHECKPOINT_DIR`` is set: the launcher sets it for its job.
    """
    env = os.environ if environ is None else environ
    folder = env.get(CHECKPOINT_DIR, "").strip()
    return CheckpointFolder(folder, remote=env.get(CHECKPOINT_URI, "").strip()) if folder else None


def summary_metrics(result: Mapping[str, Any]) -> dict[str, float | int]:
    """The named finite numbers of a retrain's summary (rows, steps, seconds, ...): the job's metrics."""
    return {
        name: value
        for name, value in result.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }


def write_result(
    uri: str,
    result: Mapping[str, Any],
    storage_options: Mapping[str, Any],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Write a stored model's summary to ``uri``, tried again after each of ``RESULT_WRITE_RETRY_SECONDS``.

    The model version is stored and its checkpoints cleared by then: a new attempt would train again from
    step 0 and store a second version, so a passing store error is waited out here, and a lasting one fails
    the attempt for good, naming the version.

    Raises:
        ResultNotWrittenError: every try failed; the message names the stored version and what to check.
    """
    for wait in (*RESULT_WRITE_RETRY_SECONDS, None):
        try:
            write_spec(uri, result, what="result", **storage_options)
            return
        except OSError as e:
            if wait is None:
                tries = len(RESULT_WRITE_RETRY_SECONDS) + 1
                raise ResultNotWrittenError(
                    f"model version {result.get('version')!r} was stored in {result.get('model_store')!r} "
                    f"but its result {uri!r} could not be written ({tries} tries: {e}); not retried, as a "
                    "new attempt would train again and store a second version: check that the job (its "
                    "role or service account on a cloud backend) can create and write that folder, then "
                    "promote the version by hand (ModelPromoteOperator candidate) or delete it before "
                    "clearing the task"
                ) from e
            log.warning("cannot write the result %r (%s): trying again in %.0f s", uri, e, wait)
            sleep(wait)


def run_spec(
    spec: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Run the retrain a spec describes (the one code path of every backend) and publish its summary.

    Args:
        spec: The training spec.
        environ: The job's environment (default ``os.environ``): under ``costaware-run`` the checkpoints go
            to its folder, the runtime's flag is the preemption notice and the metrics file is written.
        sleep: Waits between tries of the result's write.
    """
    from costaware.training.runner import run_retrain

    env = os.environ if environ is None else environ
    folder = launched_checkpoints(env)
    result = run_retrain(
        job_from_spec(spec),
        checkpoints=folder,
        preemption_notice=preemption_requested if folder is not None else None,
    )
    if spec.get("result_uri"):
        write_result(str(spec["result_uri"]), result, dict(spec.get("storage_options") or {}), sleep=sleep)
    metrics_path = env.get(METRICS_PATH, "").strip()
    if metrics_path:
        write_metrics(summary_metrics(result), metrics_path)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m costaware.training.entrypoint --spec URI``: one retrain; see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m costaware.training.entrypoint", description=__doc__, allow_abbrev=False
    )
    parser.add_argument("--spec", required=True, help="URI of the JSON training spec (local path or s3://)")
    parser.add_argument(
        "--endpoint-url",
        default=os.environ.get(ENDPOINT_ENV) or None,
        help=f"S3 endpoint to read the spec through (default ${ENDPOINT_ENV}); the spec's own applies after",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    if launched_checkpoints() is not None:
        # The runtime's SIGTERM handler, before the data is read: a notice from now on ends in a checkpoint.
        preemption_requested()
    try:
        spec = read_spec(args.spec, endpoint_url=args.endpoint_url)
        endpoint = dict(spec.get("storage_options") or {}).get("endpoint_url")
        if endpoint:  # every read after the spec's goes where the spec says, options or not
            os.environ[ENDPOINT_ENV] = str(endpoint)
        result = run_spec(spec)
    except PreemptedError as e:
        print(f"preempted: {e}", file=sys.stderr, flush=True)
        return PREEMPTED_EXIT_CODE
    except ConfigurationError as e:
        print(f"bad training spec or input: {e}", file=sys.stderr, flush=True)
        return CONFIG_EXIT_CODE
    except ResultNotWrittenError as e:
        log.exception("the result cannot be written")
        print(f"result not written: {e}".replace("\n", " "), file=sys.stderr, flush=True)
        # Exit 1, a failure never retried: 74 submitted it again, which trained again from step 0 (the
        # checkpoints are cleared once the model is stored) and stored a second version.
        return ERROR_EXIT_CODE
    except StoreUnavailableError as e:
        log.exception("a store is unavailable")
        print(f"store unavailable: {e}".replace("\n", " "), file=sys.stderr, flush=True)
        # The contract's "a store failed": the launcher (--no-outputs) passes it on and the attempt is
        # submitted again; exit 1 read as a code error, and a transient outage failed the task for good.
        return EXIT_SYNC_FAILED
    except Exception as e:  # the one-line reason is the contract with every backend
        log.exception("training failed")
        print(f"training failed: {type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr, flush=True)
        return ERROR_EXIT_CODE
    print(json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
