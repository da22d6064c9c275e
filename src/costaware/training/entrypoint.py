"""The training entrypoint a container or child process runs: ``python -m costaware.training.entrypoint``.

``--spec URI`` names a JSON file (local path, ``file://`` or ``s3://``) with the fields of
:class:`~costaware.training.runner.RetrainJob`: data URIs, trainer and params, model store, checkpoint store
and key, checkpoint interval, plus ``seed`` (merged into the trainer's params) and ``result_uri`` (where the
summary JSON is written for the orchestrator). The training is the same ``run_retrain`` the in-worker
``WarmStartRetrainOperator`` calls: it resumes from the newest checkpoint of its key, checkpoints every
``checkpoint_every_seconds`` and on SIGTERM, and stores the candidate in the model store atomically.

Exit codes: 0 done (summary JSON on stdout), 75 preempted after a checkpoint (resubmit it), 2 bad spec or
input (never retry), 1 anything else. The last stderr line is a one-line reason.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.training.checkpointing import PREEMPTED_EXIT_CODE, PreemptedError

log = logging.getLogger(__name__)

CONFIG_EXIT_CODE = 2
ERROR_EXIT_CODE = 1
#: Spec keys besides the RetrainJob fields.
EXTRA_KEYS = ("seed", "result_uri")
#: The only storage options a spec may carry: credentials come from the environment, never from a file.
SPEC_STORAGE_OPTIONS = ("endpoint_url", "region")


def _split(uri: str) -> tuple[str, str]:
    text = str(uri).strip()
    folder, _, name = text.rstrip("/").rpartition("/")
    if not name or not folder:
        raise ConfigurationError(
            f"spec URI {uri!r} does not name a file: pass e.g. s3://bucket/jobs/spec.json"
        )
    return folder, name


def read_spec(uri: str) -> dict[str, Any]:
    """The spec at ``uri`` (local path or ``s3://``); ``ConfigurationError`` when missing or malformed."""
    from costaware.adapters.model_store import BlobDir

    folder, name = _split(uri)
    try:
        raw = BlobDir.from_uri(folder, create=False).read_bytes(name)
    except (FileNotFoundError, OSError) as e:
        raise ConfigurationError(
            f"training spec {uri!r} does not exist or cannot be read ({e}): write the spec first"
        ) from e
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"training spec {uri!r} is not JSON: {e}") from e
    if not isinstance(spec, dict):
        raise ConfigurationError(f"training spec {uri!r} must hold a JSON object, got {type(spec).__name__}")
    return spec


def write_spec(uri: str, spec: Mapping[str, Any], **storage_options: Any) -> str:
    """Write ``spec`` as JSON to ``uri`` atomically; returns the URI."""
    from costaware.adapters.model_store import BlobDir

    folder, name = _split(uri)
    BlobDir.from_uri(folder, **storage_options).write_bytes(name, json.dumps(dict(spec), indent=1).encode())
    return uri


def job_from_spec(spec: Mapping[str, Any]) -> Any:
    """A ``RetrainJob`` from a spec; unknown keys and secret storage options are refused by name."""
    from costaware.training.runner import RetrainJob

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
    if spec.get("seed") is not None:
        values["trainer_params"] = {"seed": int(spec["seed"]), **dict(values.get("trainer_params") or {})}
    try:
        return RetrainJob(**values)
    except TypeError as e:
        raise ConfigurationError(f"training spec is incomplete: {e}") from e


def run_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Run the retrain a spec describes (the one code path of every backend) and publish its summary."""
    from costaware.training.runner import run_retrain

    result = run_retrain(job_from_spec(spec))
    if spec.get("result_uri"):
        write_spec(str(spec["result_uri"]), result, **dict(spec.get("storage_options") or {}))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m costaware.training.entrypoint --spec URI``: one retrain; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m costaware.training.entrypoint", description=__doc__)
    parser.add_argument("--spec", required=True, help="URI of the JSON training spec (local path or s3://)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    try:
        result = run_spec(read_spec(args.spec))
    except PreemptedError as e:
        print(f"preempted: {e}", file=sys.stderr, flush=True)
        return PREEMPTED_EXIT_CODE
    except ConfigurationError as e:
        print(f"bad training spec or input: {e}", file=sys.stderr, flush=True)
        return CONFIG_EXIT_CODE
    except Exception as e:  # the one-line reason is the contract with every backend
        log.exception("training failed")
        print(f"training failed: {type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr, flush=True)
        return ERROR_EXIT_CODE
    print(json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
