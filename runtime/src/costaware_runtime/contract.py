"""The job contract: the environment variables, exit codes and file names shared with the provider.

The provider launches every attempt of a job as ``costaware-run [options] -- <command...>`` with the
variables below; ``runtime/README.md`` is the one page a user reads about them.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from costaware_runtime.errors import ContractError

CHECKPOINT_DIR = "COSTAWARE_CHECKPOINT_DIR"
CHECKPOINT_URI = "COSTAWARE_CHECKPOINT_URI"
OUTPUT_DIR = "COSTAWARE_OUTPUT_DIR"
OUTPUT_URI = "COSTAWARE_OUTPUT_URI"
METRICS_PATH = "COSTAWARE_METRICS_PATH"
RESULT_PATH = "COSTAWARE_RESULT_PATH"
RESULT_URI = "COSTAWARE_RESULT_URI"
ATTEMPT = "COSTAWARE_ATTEMPT"
MARKET = "COSTAWARE_MARKET"
GRACE_SECONDS = "COSTAWARE_GRACE_SECONDS"
CHECKPOINT_EVERY_SECONDS = "COSTAWARE_CHECKPOINT_EVERY_SECONDS"
S3_ENDPOINT_URL = "COSTAWARE_S3_ENDPOINT_URL"
STORE_STALL_SECONDS = "COSTAWARE_STORE_STALL_SECONDS"

#: Every variable of the contract, in the order the README documents them.
ALL_VARIABLES = (
    CHECKPOINT_DIR,
    CHECKPOINT_URI,
    OUTPUT_DIR,
    OUTPUT_URI,
    METRICS_PATH,
    RESULT_PATH,
    RESULT_URI,
    ATTEMPT,
    MARKET,
    GRACE_SECONDS,
    CHECKPOINT_EVERY_SECONDS,
    S3_ENDPOINT_URL,
    STORE_STALL_SECONDS,
)

EXIT_OK = 0
#: The job broke the contract (metrics, outputs) or the launcher was misused: a code error, never retried.
EXIT_CONTRACT_ERROR = 2
#: A store could not be read or written (restore, checkpoint push, output upload): retry the attempt.
EXIT_SYNC_FAILED = 74
#: Preempted after a checkpoint: the next attempt resumes from it.
EXIT_PREEMPTED = 75
#: The job exited 75 itself, with no notice, but committed no checkpoint: a code error, never retried.
EXIT_PREEMPTED_WITHOUT_CHECKPOINT = 76
#: Preempted (the notice came) before the job committed any checkpoint: the next attempt starts over.
EXIT_PREEMPTED_BEFORE_CHECKPOINT = 77
#: Codes a job's own exit cannot report: the launcher turns a job's 74, 76 or 77 into 1 (a job under
#: ``--no-outputs``, which reads and writes its own stores, reports its own 74: its store failed).
RESERVED_EXIT_CODES = frozenset(
    {EXIT_SYNC_FAILED, EXIT_PREEMPTED_WITHOUT_CHECKPOINT, EXIT_PREEMPTED_BEFORE_CHECKPOINT}
)

MARKETS = ("spot", "on_demand", "local")
DEFAULT_GRACE_SECONDS = 110.0  # AWS gives 120 s between the spot notice and the stop
#: How long a checkpoint transfer may move no bytes before it is given up: long enough for a store's own
#: retries of one request, short of holding a hung job's machine (billed) for good.
DEFAULT_STORE_STALL_SECONDS = 300.0

#: Written last into an uploaded output folder; a reader trusts only a folder that has it.
MANIFEST_NAME = "_costaware_manifest.json"
#: Written last into the checkpoint folder (and into each remote step); names the committed step.
CHECKPOINT_MARKER = "_costaware_checkpoint.json"
#: Left by ``retire()`` where the marker was: the last checkpoint a finished job committed, then deleted.
RETIRED_MARKER = "_costaware_checkpoint_retired.json"
#: Left in the checkpoint folder by a sync: the location its checkpoints came from or went to.
ORIGIN_NAME = "_costaware_origin.json"
#: Written last into the remote checkpoint prefix; names the step a restore downloads.
LATEST_NAME = "LATEST.json"


@dataclass(frozen=True, slots=True)
class JobEnvironment:
    """The contract's variables of one attempt, parsed and checked.

    Attributes:
        checkpoint_dir: Local folder holding the newest checkpoint, or None when unset.
        checkpoint_uri: Where checkpoints are synced (a local folder, ``file://`` or ``s3://``), or None.
        output_dir: Local folder whose files become the model version, or None when unset.
        output_uri: Where the outputs are uploaded on success, or None.
        metrics_path: The JSON file of metrics the job writes, or None when unset.
        result_uri: Where the launcher writes its result on success (``COSTAWARE_RESULT_PATH`` or
            ``COSTAWARE_RESULT_URI``), or None.
        attempt: The attempt number, 1 for the first.
        market: ``spot``, ``on_demand`` or ``local``.
        grace_seconds: How long the job may take to exit after the preemption notice.
        checkpoint_every_seconds: How often the orchestrator asks the job to checkpoint (its
            ``checkpoint_every_seconds``, the automatic interval for this attempt), or None when unset.
        store_stall_seconds: How long a store transfer (a checkpoint push or restore, the outputs, the
            result) or a folder's write check may go unanswered before the launcher gives it up.
    """

    checkpoint_dir: Path | None
    checkpoint_uri: str | None
    output_dir: Path | None
    output_uri: str | None
    metrics_path: Path | None
    result_uri: str | None
    attempt: int
    market: str
    grace_seconds: float
    checkpoint_every_seconds: float | None = None
    store_stall_seconds: float = DEFAULT_STORE_STALL_SECONDS

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> JobEnvironment:
        """Read the contract from ``environ`` (default: ``os.environ``).

        Raises:
            ContractError: A variable holds a value the contract does not allow.
        """
        env = os.environ if environ is None else environ

        def text(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        def path(name: str) -> Path | None:
            value = text(name)
            return local_path(name, value, env) if value else None

        result_path, result_uri = text(RESULT_PATH), text(RESULT_URI)
        if result_path and result_uri and result_path != result_uri:
            raise ContractError(
                f"{RESULT_PATH}={result_path!r} and {RESULT_URI}={result_uri!r} disagree: set only one"
            )
        return cls(
            checkpoint_dir=path(CHECKPOINT_DIR),
            checkpoint_uri=text(CHECKPOINT_URI),
            output_dir=path(OUTPUT_DIR),
            output_uri=text(OUTPUT_URI),
            metrics_path=path(METRICS_PATH),
            result_uri=result_path or result_uri,
            attempt=parse_attempt(text(ATTEMPT)),
            market=parse_market(text(MARKET)),
            grace_seconds=parse_grace_seconds(text(GRACE_SECONDS)),
            checkpoint_every_seconds=parse_checkpoint_every_seconds(text(CHECKPOINT_EVERY_SECONDS)),
            store_stall_seconds=parse_store_stall_seconds(text(STORE_STALL_SECONDS)),
        )


#: A URI's start: a scheme, then '://'. Only there: /data/a://b is a local path, not a URI.
_URI_START = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(value: str) -> bool:
    """Whether ``value`` starts with a URI scheme and '://' (``s3://b/x``), not a path holding '://'."""
    return bool(_URI_START.match(value))


#: The variable naming the store that each local path variable's files go to (the metrics go into the result).
_STORE_OF = {CHECKPOINT_DIR: CHECKPOINT_URI, OUTPUT_DIR: OUTPUT_URI}


def local_path(name: str, value: str, environ: Mapping[str, str] | None = None) -> Path:
    """The local path that the variable ``name`` (a ``*_DIR`` or ``*_PATH``) holds as ``value``.

    ``environ`` (default: ``os.environ``) is read for the store variables the refusal's advice names.

    Raises:
        ContractError: ``value`` is a URI (``s3://bucket/...``): taken as a path, it was a local folder named
            ``s3:``, and the outputs or checkpoints stayed in it, never uploaded.
    """
    # file:/data/ck (one slash) too, which the stores read as /data/ck: taken as a path, a folder "file:".
    is_file_uri = value[:5].lower() == "file:"
    if not is_uri(value) and not is_file_uri:
        return Path(value)
    env = os.environ if environ is None else environ
    kind = "file" if name == METRICS_PATH else "folder"
    refusal = f"{name}={value!r} is a URI, but {name} is a local {kind} on the job's machine"
    leave = f"leave {name} unset (costaware-run uses a temporary {kind}) or give a local {kind}"
    if is_file_uri:
        # A local path was meant, not a store: setting the store to it would replace a real (s3://) one.
        parsed = urlparse(value)
        if parsed.netloc in ("", "localhost") and parsed.path.strip("/"):
            ends = [at for at in (value.find("?"), value.find("#")) if at >= 0]
            cut = value[min(ends) :] if ends else ""
            if cut:
                # A URI's path ends at '?' or '#': the advice named a path without them, and said nothing.
                whole = parsed.path + cut
                raise ContractError(
                    f"{refusal}: give the path itself, {name}={parsed.path!r} (a URI's path ends at "
                    f"{cut[0]!r}, so {cut!r} is not part of it; where the {kind}'s name holds it, "
                    f"{name}={whole!r})"
                )
            raise ContractError(f"{refusal}: give the path itself, {name}={parsed.path!r}")
        raise ContractError(f"{refusal}: {leave}")
    if name == METRICS_PATH:
        result = [
            f"{variable}={env[variable].strip()!r}"
            for variable in (RESULT_PATH, RESULT_URI)
            if env.get(variable, "").strip()
        ]
        where = result[0] if result else f"{RESULT_PATH} or {RESULT_URI}, where set"
        raise ContractError(
            f"{refusal} (the launcher puts the metrics into the result it writes at {where}): {leave}"
        )
    store = _STORE_OF[name]
    given = env.get(store, "").strip()
    if given:
        # Setting the store to this value would replace the one given (s3:// for a local one, say).
        raise ContractError(
            f"{refusal} ({store} is already set to {given!r}, the store its files go to): {leave}"
        )
    raise ContractError(f"{refusal}: set {store}={value!r} for the store its files go to, and {leave}")


def parse_attempt(value: str | None) -> int:
    """The attempt number in ``value`` (1 when unset).

    Raises:
        ContractError: ``value`` is not a whole number of at least 1.
    """
    if value is None:
        return 1
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ContractError(f"{ATTEMPT}={value!r} is not an attempt number: use 1 for the first, 2, ...")
    return number


def parse_market(value: str | None) -> str:
    """The market in ``value`` (``local`` when unset).

    Raises:
        ContractError: ``value`` is not one of :data:`MARKETS`.
    """
    if value is None:
        return "local"
    if value not in MARKETS:
        raise ContractError(f"{MARKET}={value!r} is not a market: use one of {', '.join(MARKETS)}")
    return value


def parse_grace_seconds(value: str | None, *, flag: str | None = None) -> float:
    """The grace period in ``value`` (:data:`DEFAULT_GRACE_SECONDS` when unset).

    ``flag`` is the option it was given with (``--grace-seconds``); None: the variable
    :data:`GRACE_SECONDS`. The message names the one to fix.

    Raises:
        ContractError: ``value`` is not a finite number of seconds above 0 (0 SIGKILLed the job right after
            the notice, with no chance to save: the operator's ``preemption_grace_seconds`` refuses it too).
    """
    if value is None:
        return DEFAULT_GRACE_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not math.isfinite(seconds) or seconds <= 0:
        given = f"{flag} {value!r}" if flag else f"{GRACE_SECONDS}={value!r}"
        raise ContractError(
            f"{given} is not a grace period, a number of seconds > 0: give the seconds the job may take to "
            "exit after the preemption notice (AWS gives 120 s from notice to stop: 110 leaves a margin)"
        )
    return seconds


def parse_checkpoint_every_seconds(value: str | None) -> float | None:
    """The checkpoint interval in ``value`` (None when unset).

    Raises:
        ContractError: ``value`` is not a finite number of seconds above 0.
    """
    if value is None:
        return None
    seconds = _seconds_above_zero(value)
    if seconds is None:
        raise ContractError(
            f"{CHECKPOINT_EVERY_SECONDS}={value!r} is not a checkpoint interval: give seconds > 0, e.g. 600"
        )
    return seconds


def _seconds_above_zero(value: str) -> float | None:
    """``value`` as a finite number of seconds above 0, or None where it is not one."""
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def parse_store_stall_seconds(value: str | None) -> float:
    """How long a checkpoint transfer may move no bytes, from ``value`` (the default when unset).

    Raises:
        ContractError: ``value`` is not a finite number of seconds above 0 (0 gave up every push at once),
            or is more than ``threading.TIMEOUT_MAX``, the longest a thread may be waited on (taken, each
            transfer's wait crashed with ``OverflowError``).
    """
    if value is None:
        return DEFAULT_STORE_STALL_SECONDS
    seconds = _seconds_above_zero(value)
    what = "give how long a checkpoint push or restore may move nothing before it is given up"
    if seconds is None:
        raise ContractError(
            f"{STORE_STALL_SECONDS}={value!r} is not a number of seconds > 0: {what} "
            f"(default {DEFAULT_STORE_STALL_SECONDS:g})"
        )
    if seconds > threading.TIMEOUT_MAX:
        raise ContractError(
            f"{STORE_STALL_SECONDS}={value!r} is more than the longest wait allowed, "
            f"{threading.TIMEOUT_MAX:.0f} s: {what}, at most that (default {DEFAULT_STORE_STALL_SECONDS:g})"
        )
    return seconds


def checkpoint_every_seconds(default: float | None = None) -> float | None:
    """How often this attempt should checkpoint, in seconds (``COSTAWARE_CHECKPOINT_EVERY_SECONDS``).

    The provider sets it on every attempt from the operator's ``checkpoint_every_seconds``; with ``"auto"``
    it is the interval the interruption rate calls for, re-tuned before each spot attempt from how the
    earlier ones were preempted. ``default`` when unset (a run outside costaware).

    Raises:
        ContractError: The variable is set to something that is not seconds > 0.
    """
    seconds = parse_checkpoint_every_seconds(os.environ.get(CHECKPOINT_EVERY_SECONDS, "").strip() or None)
    return default if seconds is None else seconds


def attempt() -> int:
    """The attempt number of this run of the job (``COSTAWARE_ATTEMPT``; 1 when unset)."""
    return parse_attempt(os.environ.get(ATTEMPT, "").strip() or None)


def market() -> str:
    """Where this attempt runs: ``spot``, ``on_demand`` or ``local`` (``COSTAWARE_MARKET``; default local)."""
    return parse_market(os.environ.get(MARKET, "").strip() or None)


#: The variables that give a process its rank in a multi-process training (torchrun, DeepSpeed and Accelerate
#: set both), the global one first.
RANK_VARIABLES = ("RANK", "LOCAL_RANK")
#: The rank a single-process training may export (Hugging Face's ``local_rank`` default): rank 0.
NOT_DISTRIBUTED_RANK = "-1"


def process_rank() -> int:
    """This process's rank in a multi-process training (``RANK``, else ``LOCAL_RANK``); 0 when neither is set.

    ``-1`` is 0 as well: Hugging Face and older DDP scripts export it for "not distributed", and refusing it
    failed such a job at its first save.

    Raises:
        ContractError: The variable is set to something that is not a whole number >= 0, nor -1.
    """
    for name in RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            if value == NOT_DISTRIBUTED_RANK:
                return 0
            if not (value.isascii() and value.isdigit()):  # isdigit alone takes "²", which int() refuses
                raise ContractError(
                    f"{name}={value!r} is not a process rank: unset it, or set a whole number >= 0 "
                    f"({NOT_DISTRIBUTED_RANK} for a single process)"
                )
            return int(value)
    return 0


def checkpoint_dir() -> Path:
    """The local checkpoint folder (``COSTAWARE_CHECKPOINT_DIR``), created if missing.

    Raises:
        ContractError: The variable is unset, or holds a URI.
    """
    return _required_dir(CHECKPOINT_DIR)


def output_dir() -> Path:
    """The local folder whose files become the model version (``COSTAWARE_OUTPUT_DIR``), created if missing.

    Raises:
        ContractError: The variable is unset, or holds a URI.
    """
    return _required_dir(OUTPUT_DIR)


def _required_dir(name: str) -> Path:
    value = os.environ.get(name, "").strip()
    if not value:
        raise ContractError(f"{name} is not set: run the job under `costaware-run -- <command>`, or set it")
    folder = local_path(name, value)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
