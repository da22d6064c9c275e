"""The compute backend protocol: submit a training job, poll it, stop it, read its logs.

Every job runs under the launcher with the job contract's environment
(``costaware.adapters.compute.job_contract``, docs/own-training.md): a team's own command as
``costaware-run -- <command...>``, the built-in trainers as ``costaware-run --no-outputs -- python -m
costaware.training.entrypoint --spec URI`` (they store their model version themselves). ``submit`` is
idempotent by job name: submitting a name that already exists returns that job, so an Airflow retry never
starts a second job for the same attempt. ``poll`` reports one of five states plus what the backend bills
for the job.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from costaware.adapters.compute import job_contract
from costaware.core.errors import ConfigurationError, StoreUnavailableError, check_keywords, did_you_mean
from costaware.core.given import names_nothing, not_given

#: Backend names and the class that implements each (module path, class name).
BACKENDS: dict[str, tuple[str, str]] = {
    "local": ("costaware.adapters.compute.local", "LocalBackend"),
    "sagemaker": ("costaware.adapters.compute.sagemaker", "SageMakerBackend"),
    "batch": ("costaware.adapters.compute.batch", "BatchBackend"),
    "kubernetes": ("costaware.adapters.compute.kubernetes", "KubernetesBackend"),
}
MARKETS = ("spot", "on_demand")
#: Backends whose jobs run on another machine, by the name messages give them: their stores must be on S3.
REMOTE_BACKENDS = {"sagemaker": "SageMaker", "batch": "AWS Batch", "kubernetes": "Kubernetes"}
_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")
#: An AWS zone name (``us-east-1a``) or a Kubernetes zone label value: both are 1-63 letters, digits and ``-``
#: that start and end with a letter or digit.
_ZONE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
#: An AWS region name in any case (``us-west-2``, ``us-gov-east-1``, ``ap-southeast-4``): a zone list holding
#: one was meant to hold its zones.
_AWS_REGION = re.compile(
    r"^(us|eu|ap|ca|sa|me|af|il|mx|cn)(-gov|-iso[a-z]?)?"
    r"-(north|south|east|west|central|northeast|southeast|northwest|southwest)-\d+$",
    re.IGNORECASE,
)
#: A zone of a region written without the hyphen before the region's number: us-east1a.
_AWS_ZONE_NO_HYPHEN = re.compile(r"^([a-z]{2}(?:-[a-z]+)+)(\d+)([a-z])$")
#: An AWS zone name in any case (``us-east-1a``, a Local Zone ``us-east-1-bos-1a``): AWS spells them in
#: lower case only.
_AWS_ZONE_ANY_CASE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+(-[a-z]+-\d+)?[a-z]$", re.IGNORECASE)


class JobState(str, Enum):
    """Where a job stands. ``interrupted``: stopped by the capacity provider (spot reclaim); resubmit it."""

    PENDING = "pending"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def done(self) -> bool:
        return self in (JobState.INTERRUPTED, JobState.SUCCEEDED, JobState.FAILED)


#: A ``JobStatus.metrics`` key: the seconds of a Batch job's copies (a resent submit's) per instance type they
#: ran on, which the billing prices each at its own type (a compute environment may place a copy on another).
COPY_SECONDS_BY_TYPE = "batch_copy_seconds_by_type"
#: A ``JobStatus.metrics`` key of a Batch job still running: ``{"seconds_by_type": {type: s}, "unstopped":
#: [ids]}``, what its copies may still run after this poll (a stopped one's stop timeout, one whose stop
#: failed its time limit), not billed yet. A poll of the job's end bills it; a bill without one (a kill) adds
#: it with :func:`with_copies_run_out`.
COPY_SECONDS_LEFT = "batch_copy_seconds_left"
#: A ``JobStatus.metrics`` key: true where its billed seconds are priced at the on-demand rate though the
#: job ran on spot (SageMaker managed spot's billable time, which holds the spot saving already).
BILLED_AT_ON_DEMAND = "billed_at_on_demand"
#: A ``JobStatus.metrics`` key of a job billed as gone (its backend no longer lists it) without a poll of its
#: end: the billed seconds it was last seen at, what it surely ran; its ``billable_seconds`` are the most it
#: may have run, time it may never have run included.
SEEN_BILLABLE_SECONDS = "seen_billable_seconds"
#: A ``JobStatus.metrics`` key: true where its ``billable_seconds`` were not read from the backend but worked
#: out from when the job began (a job found by its name whose polls failed): the most it may have run, its
#: queue included, an upper bound to bill, not time it was seen to run (it was seen to run 0 s).
ESTIMATED_SECONDS = "billable_seconds_estimated"
#: A ``JobStatus.metrics`` key of a job not ended yet: when it was asked to stop (epoch seconds), as the
#: backend's own description of the job says (a local job's ``stop`` file, SageMaker's ``Stopping``, a pod's
#: ``deletionTimestamp`` less its grace period); absent where none was asked or the backend does not say
#: (Batch: DescribeJobs gives ``statusReason`` and ``stoppedAt`` once a terminated job has stopped, and
#: ``isTerminated`` no time). A wait re-created by a triggerer restart that cannot read its kept state
#: learns from it that its stop at the cap went out already.
STOP_REQUESTED_AT = "stop_requested_at"


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One attempt of a training job: the built-in entrypoint (``spec_uri``) or a user command.

    Attributes:
        job_name: Unique per attempt, stable across Airflow retries (letters, digits, ``-``; <= 63).
        spec_uri: URI of the training spec the entrypoint reads (empty for a user command).
        market: ``spot`` or ``on_demand``.
        instance_type: What to run on (``ml.*`` for SageMaker, EC2 for Batch and Kubernetes).
        checkpoint_uri: Where checkpoints live: ``COSTAWARE_CHECKPOINT_URI`` of every attempt (SageMaker syncs
            ``CheckpointConfig.S3Uri`` with the checkpoint folder itself).
        model_store: The model store the job writes its version to.
        max_runtime_seconds: Longest the training may run: every backend ends it there (SageMaker's
            ``MaxRuntimeInSeconds``, Batch's ``attemptDurationSeconds``, Kubernetes'
            ``activeDeadlineSeconds``; the ``local`` backend stops it itself, as a stop would).
        max_wait_seconds: Longest to wait for spot capacity plus run (SageMaker managed spot).
        env: Extra environment variables of the training process.
        user_command: The team's own command (run under ``costaware-run``); empty for the built-in trainers.
        image: Container image of the job; empty: the backend's own (``image_uri``, ``image``, the Batch
            job definition's).
        output_uri: Where the launcher uploads the outputs of this attempt (user commands).
        result_uri: Where the launcher writes the result of this attempt (user commands).
        attempt: The attempt number, 1 for the first.
        grace_seconds: SIGTERM to SIGKILL when the job is stopped or preempted (the launcher's).
        availability_zone: The zone to place this attempt in (e.g. ``us-east-1b``), so that a preempted spot
            attempt can move to a zone that still has capacity; empty: the backend's choice. SageMaker
            refuses one (see :func:`require_zone_placement`).
        checkpoint_every_seconds: How often this attempt should checkpoint
            (``COSTAWARE_CHECKPOINT_EVERY_SECONDS``; with ``"auto"``, the interval re-tuned for it); None:
            unset.
        stop_after_seconds: Stop the attempt (SIGTERM, then SIGKILL after the grace period) once it has run
            this long: what is left of the task's ``max_usd``. Every backend gets it as part of
            ``max_runtime_seconds``; the ``local`` backend also keeps it apart, to say which limit stopped
            the job. None: no money cap.
    """

    job_name: str
    spec_uri: str
    market: str
    instance_type: str
    checkpoint_uri: str = ""
    model_store: str = ""
    max_runtime_seconds: int = 86400
    max_wait_seconds: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    user_command: tuple[str, ...] = ()
    image: str = ""
    output_uri: str = ""
    result_uri: str = ""
    attempt: int = 1
    grace_seconds: float = job_contract.DEFAULT_GRACE_SECONDS
    availability_zone: str = ""
    checkpoint_every_seconds: float | None = None
    stop_after_seconds: int | None = None

    def __post_init__(self) -> None:
        if not _JOB_NAME.match(self.job_name):
            raise ConfigurationError(
                f"job name {self.job_name!r} is not valid: 1-63 letters, digits or '-', starting with a "
                "letter or digit"
            )
        if self.availability_zone:
            check_zone(self.availability_zone)
        check_market(self.market)
        if self.user_command:
            job_contract.check_command(list(self.user_command))
            missing = [n for n in ("checkpoint_uri", "output_uri", "result_uri") if not getattr(self, n)]
            if missing:
                raise ConfigurationError(
                    f"job {self.job_name!r} runs a user command but has no {', '.join(missing)}: the "
                    "launcher needs them to resume, upload the outputs and report the result"
                )
        elif not self.spec_uri:
            raise ConfigurationError("spec_uri is empty: write the training spec and pass its URI")
        job_contract.check_grace_seconds(self.grace_seconds)
        if self.max_runtime_seconds < 1:
            raise ConfigurationError(f"max_runtime_seconds must be >= 1, got {self.max_runtime_seconds}")
        if self.attempt < 1:
            raise ConfigurationError(f"attempt must be >= 1, got {self.attempt}")

    @property
    def is_command(self) -> bool:
        """Whether the job is a user command (the job contract) rather than a built-in trainer."""
        return bool(self.user_command)

    def command(self, *, no_sync: bool = False, python: str = "python") -> list[str]:
        """The command the job runs: the launcher around the user's command or the built-in entrypoint.

        Args:
            no_sync: The platform syncs the checkpoint folder itself (SageMaker): the launcher does not.
            python: The interpreter of the built-in entrypoint (the local backend passes its own).
        """
        if self.user_command:
            return job_contract.launcher_command(self.user_command, no_sync=no_sync)
        return job_contract.builtin_command(self.spec_uri, no_sync=no_sync, python=python)

    def environment(self, *, work_dir: str, checkpoint_dir: str | None = None) -> dict[str, str]:
        """The job's environment: ``env`` plus the contract's variables.

        A built-in job gets them but the output and result ones: it stores its model version itself and
        writes its summary to the spec's ``result_uri``.

        Args:
            work_dir: A writable folder on the job's machine for its checkpoint, output and metrics.
            checkpoint_dir: The checkpoint folder where the platform fixes it (default under ``work_dir``).
        """
        contract = job_contract.contract_environment(
            checkpoint_uri=self.checkpoint_uri,
            output_uri=self.output_uri if self.user_command else "",
            result_uri=self.result_uri if self.user_command else "",
            attempt=self.attempt,
            market=self.market,
            grace_seconds=self.grace_seconds,
            work_dir=work_dir,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every_seconds=self.checkpoint_every_seconds,
        )
        return {**dict(self.env), **contract}


def is_aws_region(name: str) -> bool:
    """Whether ``name`` is spelled as an AWS region is (``us-west-2``, ``cn-north-1``, ``us-gov-east-1``).

    By its shape, not a list: a region launched after the bundled price list is still one.
    """
    return name == name.lower() and bool(_AWS_REGION.match(name))


def check_zone(zone: str) -> str:
    """``zone`` if it is a zone name: an AWS zone, or a Kubernetes ``topology.kubernetes.io/zone`` value.

    Raises:
        ConfigurationError: ``zone`` is not 1-63 letters, digits or ``-`` starting and ending with a letter or
            digit, named with its value.
    """
    if not isinstance(zone, str) or not _ZONE.match(zone):
        raise ConfigurationError(
            f"availability zone {zone!r} is not a zone name: give 1-63 letters, digits or '-', starting and "
            "ending with a letter or digit, as AWS (us-east-1a) or topology.kubernetes.io/zone spell it"
        )
    return zone


def placeable_zone(zone: str) -> str:
    """``zone`` where a request may name it (:func:`check_zone`), else "" (a node label of another shape)."""
    try:
        return check_zone(zone) if zone else ""
    except ConfigurationError:
        return ""


def check_aws_zone(zone: str) -> str:
    """``zone`` if it can be an AWS zone name: :func:`check_zone`, and neither a region nor upper case.

    For the backends and replays that place by AWS zone (local, Batch, the spot window); a Kubernetes zone
    label is any :func:`check_zone` name.

    Raises:
        ConfigurationError: as :func:`check_zone`, or an AWS region name, an AWS zone name not in lower
            case, or a known region's zone written without the hyphen before its number (us-east1a); named
            with its value.
    """
    check_zone(zone)
    if _AWS_REGION.match(zone):
        raise ConfigurationError(
            f"availability zone {zone!r} is a region, not a zone: list its zones, e.g. {zone.lower()}a, "
            f"{zone.lower()}b"
        )
    if zone != zone.lower() and _AWS_ZONE_ANY_CASE.match(zone):
        raise ConfigurationError(
            f"availability zone {zone!r}: AWS zone names are lower case, write {zone.lower()!r} (a job "
            "placed by this name would match no zone)"
        )
    from costaware.core.zone_choice import region_of

    region = region_of(zone, "")
    if not region:
        # A known region's zone without the hyphen before its number (us-east1a) is a typo: placed by it, a
        # job would match no zone. Any other name (a replay's zone-a, a GKE-style us-central1-a) is a label.
        typo = _AWS_ZONE_NO_HYPHEN.match(zone)
        if typo is not None:
            from costaware.adapters.price_files import bundled_catalog

            meant = f"{typo.group(1)}-{typo.group(2)}"
            if meant in bundled_catalog().regions:
                raise ConfigurationError(
                    f"availability zone {zone!r} is not an AWS zone name: AWS writes a zone as its region "
                    f"and a letter; did you mean {meant}{typo.group(3)}?"
                )
        return zone
    if not is_aws_region(region):
        # A typo would otherwise fail later as a missing transfer price, naming neither argument nor value.
        raise ConfigurationError(
            f"availability zone {zone!r} is in no AWS region ({region!r} is not one)"
            f"{closest_regions(region, suffix=zone[len(region) :])}"
        )
    return zone


def check_aws_regions(regions: Sequence[str], *, name: str = "allowed_regions") -> None:
    """Each of ``regions`` is spelled as an AWS region is (not a zone), with the closest known names.

    Raises:
        ConfigurationError: a name that is not a region, or is a zone (named with its region).
    """
    from costaware.core.zone_choice import region_of

    for region in regions:
        if is_aws_region(region):
            continue
        if is_aws_region(region_of(region, "")):
            raise ConfigurationError(
                f"{name} {region!r} is a zone: {name} takes regions, e.g. {region_of(region, '')!r} (the "
                "zones to use go in availability_zones)"
            )
        hint = closest_regions(region) or ": list regions such as 'us-east-1'"
        raise ConfigurationError(f"{name} {region!r} is not an AWS region{hint}")


def closest_regions(region: str, suffix: str = "") -> str:
    """A "did you mean" note: the regions of the bundled price list nearest ``region`` (each + suffix).

    By shape, not this list, decides what a region is (a region newer than the list is still one); the list
    is read only to suggest names, when a name is refused.
    """
    import difflib

    from costaware.adapters.price_files import bundled_catalog

    close = difflib.get_close_matches(region, bundled_catalog().regions, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(c + suffix for c in close)}?" if close else ""


def zone_check(backend_name: str) -> Callable[[str], str]:
    """How ``backend_name`` checks a zone name.

    Kubernetes places by node label (any :func:`check_zone` name), the other backends by AWS zone
    (:func:`check_aws_zone`).
    """
    return check_zone if backend_name == "kubernetes" else check_aws_zone


def check_backend(name: object) -> str:
    """``name`` if it is a compute backend's name (a key of :data:`BACKENDS`).

    Raises:
        ConfigurationError: any other value, named, with the known names.
    """
    if not isinstance(name, str) or name not in BACKENDS:
        close = did_you_mean(name.lower(), BACKENDS) if isinstance(name, str) else ""
        raise ConfigurationError(f"unknown compute backend {name!r}{close}: use one of {', '.join(BACKENDS)}")
    return name


def check_market(market: object) -> str:
    """``market`` if it is one of :data:`MARKETS`.

    Raises:
        ConfigurationError: any other value, named, with the known ones.
    """
    if not isinstance(market, str) or market not in MARKETS:
        raise ConfigurationError(f"market {market!r} is not one of {', '.join(MARKETS)}")
    return market


def require_zone_placement(
    backend_name: str, zones: Sequence[str], options: Mapping[str, Any] | None = None
) -> None:
    """Refuse ``zones`` on a backend that cannot place jobs by zone (its class has ``places_zones = False``).

    Called before any job is submitted, so that a spot-across-zones setting fails at once instead of at the
    first preemption. No zones is always fine. A backend class whose options say where each zone's jobs go
    also has ``check_zones(options, zones)``, asked here (Batch: a spot queue per zone).

    Args:
        backend_name: The backend name (``local``, ``sagemaker``, ``batch``, ``kubernetes``).
        zones: The zones attempts may be placed in; each must be a valid zone name.
        options: The backend's options (None: the zones are not checked against them).

    Raises:
        ConfigurationError: an unknown backend, a bad zone name, zones on a backend that cannot place by
            zone (SageMaker), or a zone its options do not place, with what to do.
    """
    if not zones:
        return
    if isinstance(zones, str):
        raise ConfigurationError(f"zones must be a list of zone names, got the string {zones!r}")
    for zone in zones:
        zone_check(backend_name)(zone)
    if not getattr(backend_class(backend_name), "places_zones", False):
        label = REMOTE_BACKENDS.get(backend_name, backend_name)
        raise ConfigurationError(
            f"the {backend_name} backend cannot place a job in zones {', '.join(map(repr, zones))}: {label} "
            "chooses the zone itself and its API takes none; use the batch or kubernetes backend to move "
            "spot attempts across zones, or leave zones unset"
        )
    check_zones = getattr(backend_class(backend_name), "check_zones", None)
    if check_zones is not None and options is not None:
        check_zones(dict(options), tuple(zones))


def require_s3(backend: str, **uris: str | None) -> None:
    """Refuse a store a job of ``backend`` cannot reach: anything but ``s3://`` on a remote backend.

    A SageMaker, Batch or Kubernetes job runs on another machine, so a worker's local folder is not there;
    the ``local`` backend takes any location.

    Args:
        backend: The backend name.
        **uris: The locations by the argument name a user sets, e.g. ``checkpoint_store="s3://ml-team/ckpt"``;
            empty ones are not checked.

    Raises:
        ConfigurationError: a location that is not ``s3://``, named with its value and what to do.
    """
    label = REMOTE_BACKENDS.get(backend)
    if label is None:
        return
    for what, uri in uris.items():
        if uri and not str(uri).strip().startswith("s3://"):
            raise ConfigurationError(
                f"{label} jobs need an s3:// {what}, got {uri!r}: the job runs on another machine, which "
                f"cannot reach it; set {what} to an s3://bucket/prefix that the job's role can read and write"
            )


def expand_home(uri: str, what: str = "location") -> str:
    """``uri`` with a leading ``~`` expanded (a job's launcher expands none); any other location as it is.

    Raises:
        ConfigurationError: a home this machine does not know (see ``expand_user``), named with ``what``.
    """
    from costaware.adapters.object_store.location import expand_user, root_example

    text = str(uri).strip()
    if not text.startswith("~"):
        return text
    # The argument's own example: a checkpoint_store was told of '/srv/ml/store', a folder of no kind.
    return expand_user(text, what=what, uri=text, example=root_example(what))


#: The locations of :func:`require_usable_locations` that name a file, not a folder: their folder is checked.
FILE_LOCATIONS = frozenset({"spec_uri"})


def _check_known_scheme(what: str, text: str, scheme: str) -> None:
    """Refuse a scheme no store can open (``s4://``): the job it started failed at its first read, billed.

    Raises:
        ConfigurationError: named with the argument, the location and the scheme meant.
    """
    import difflib

    from fsspec.registry import known_implementations, registry

    # The stores open locations through pyarrow's file systems too (abfss://, viewfs://), fsspec's otherwise.
    known = {*known_implementations, *registry, "abfs", "abfss", "hdfs", "viewfs", "gs", "gcs"}
    if scheme in known:
        return
    common = sorted({"s3", "file", "gs", "az", "abfs"} & known)
    meant = difflib.get_close_matches(scheme.lower(), common, n=1, cutoff=0.5)
    hint = f"did you mean {meant[0]}://?" if meant else "use s3://bucket/prefix, file:///path or a folder"
    raise ConfigurationError(f"{what} {text!r} has the scheme {scheme!r}, which no store can open: {hint}")


def require_usable_locations(
    backend: str,
    *,
    on_this_machine: bool = True,
    launcher_reads: Collection[str] = (),
    **uris: str | None,
) -> None:
    """Refuse, before any job is bought, a store location no job of ``backend`` could use.

    A local path must be absolute once ``~`` is expanded (a relative one would resolve against whatever
    folder the worker, or the job, runs in), a ``file://`` URI must name no host, and an ``s3://`` URI a
    bucket. The locations the job's launcher reads and writes (``launcher_reads``: the checkpoint store, a
    command's model store) must be one of those three kinds; others go through the provider's stores,
    which also open what pyarrow opens (``gs://``, ``hdfs://``, ...). On the ``local`` backend the job runs
    on this machine, so a local folder's nearest existing parent must be a folder this process may write.
    Without this, a job that cannot write its outputs fails only after it trained, and is billed for it.

    Args:
        backend: The backend name.
        on_this_machine: Check local folders on this machine's disk (False when a DAG is parsed: the
            worker that runs the task may be another machine, with another home: ``~...`` is not checked).
        launcher_reads: The names among ``uris`` that ``costaware-run`` itself reads or writes.
        **uris: The locations by the argument name a user sets; empty ones are not checked.

    Raises:
        ConfigurationError: the first unusable location, named with its argument and what to do.
        StoreUnavailableError: a local folder's filesystem failed its write check (a full disk, an I/O
            error): retried.
    """
    from pathlib import Path
    from urllib.parse import urlparse

    from costaware_runtime.contract import is_uri
    from costaware_runtime.stores import check_writes

    from costaware.adapters.object_store.location import (
        expand_user,
        machine_root_reach,
        refuse_cut_uri,
        refuse_file_host,
        root_example,
    )

    for what, uri in uris.items():
        if not uri:
            continue
        text = str(uri).strip()
        if not_given(uri):
            # A template that rendered nothing ({{ params.nope }}, "null" through | tojson, a blank param)
            # read as a relative path named "None", "null" or "".
            raise ConfigurationError(names_nothing(what, uri))
        parsed = urlparse(text)
        # The job's launcher cuts the URI there: runs/job#1 and runs/job#2 would share one checkpoint
        # prefix and prune each other's steps.
        refuse_cut_uri(parsed, text, what)
        if parsed.scheme == "s3":
            if not parsed.netloc:
                raise ConfigurationError(f"{what} {text!r} names no bucket: use s3://bucket/prefix")
            continue
        # A scheme at the start makes a URI: /data/a://b is a local folder, which the launcher takes as one.
        if is_uri(text) and parsed.scheme != "file":
            if what in launcher_reads:
                raise ConfigurationError(
                    f"{what} {text!r} is not a location a training job can use: give a local folder (an "
                    "absolute path), file:///path or s3://bucket/prefix"
                )
            _check_known_scheme(what, text, parsed.scheme)
            continue  # the provider's stores open it, or say why not
        refuse_file_host(parsed, text, what)
        local = parsed.path if parsed.scheme == "file" else text
        if local.startswith("~") and not on_this_machine:
            # Expanded by the worker, to its home: the DAG processor's (HOME=/, or none at all) refused
            # '~' or '~/models' that the worker takes. Checked there, at the task's start.
            continue
        # Path.expanduser raised a bare RuntimeError for a home nobody has (HOME unset, OpenShift's uids).
        path = Path(expand_user(local, what=what, uri=text, example=root_example(what)))
        if not path.is_absolute():
            raise ConfigurationError(
                f"{what} {text!r} is a relative path: it would resolve against the folder the worker "
                f"or the job happens to run in; give an absolute path such as {str(Path.cwd() / path)!r}"
            )
        # A file's folder: spec_uri='{{ params.dir }}/spec.json' rendered '/spec.json' wrote the spec, and
        # the job's result.json beside it, directly in /.
        folder = path.parent if what in FILE_LOCATIONS else path
        # A symbolic link to / writes there too; only this machine's disk says where one leads.
        reach = machine_root_reach(str(folder), follow_links=on_this_machine)
        if reach is not None:
            # model_store='/' was found only inside the bought job, which made its versions' folders
            # directly under /; a checkpoint store there, its jobs' folders.
            example = root_example(what)
            link = (
                f" ({str(folder)!r} is a symbolic link that leads there)" if reach == "through a link" else ""
            )
            if what in FILE_LOCATIONS:
                raise ConfigurationError(
                    f"{what} {text!r} is a file in the root, /, of the whole machine{link}: it, and the "
                    f"files written beside it, would be written directly in /; give a file in a folder of "
                    f"its own such as {example!r} or an s3:// URI"
                )
            raise ConfigurationError(
                f"{what} {text!r} is the root, /, of the whole machine{link}: its files would be written in "
                f"folders made directly under /; give a folder of its own such as {example!r} or an s3:// URI"
            )
        if backend != "local" or not on_this_machine:
            continue  # require_s3 names what a remote job needs
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        if not existing.is_dir():
            raise ConfigurationError(
                f"{what} {text!r} cannot be created: {str(existing)!r} is a file, not a folder; give a "
                "folder path"
            )
        # A real write, not os.access: root passes that on a read-only mount or sysfs, where the job
        # then failed at its first save, after it trained.
        refusal = check_writes(existing)
        if refusal is not None:
            left = refusal.left_note("its")
            if not refusal.refused:
                # A full disk, an I/O error, a stale NFS handle: the filesystem failed, as a retry may not
                # (the job's launcher reads it so too, exit 74); no permission to change.
                raise StoreUnavailableError(
                    f"{what} {text!r} could not be checked: this worker could not {refusal.step} a file in "
                    f"{str(existing)!r} ({refusal.error}){left}; check that filesystem (its free space, its "
                    "mount): it is checked again when the task is retried, where it has retries left"
                ) from refusal.error
            # Only a rename answered ENOSYS is a Mountpoint for S3's: a create or a delete answered so is not.
            mountpoint = (
                " (a Mountpoint for S3 renames no file: give the bucket's s3:// URI)"
                if refusal.step == "rename"
                else ""
            )
            advice = (
                f"give a folder on a filesystem that does{mountpoint}"
                if refusal.unsupported
                else "give a folder it may write, or change the folder's permissions"
            )
            raise ConfigurationError(
                f"{what} {text!r} cannot be written: this worker may not {refusal.step} a file in "
                f"{str(existing)!r} ({refusal.error.strerror or refusal.error}), which a store needs{left}; "
                f"{advice}"
            )


def require_ec2_instance_type(request: JobRequest, backend: str) -> None:
    """Refuse a SageMaker ``ml.*`` instance type on a backend that runs on EC2 instances (Batch, Kubernetes).

    No node has such a type: a pod held to it waited unscheduled until the task's time limit (a day), a
    Batch job ran on whatever its compute environment chose, and either was priced at SageMaker's rates.

    Raises:
        ConfigurationError: an ``ml.*`` type, named with the EC2 type meant.
    """
    if backend in ("batch", "kubernetes") and request.instance_type.startswith("ml."):
        raise ConfigurationError(
            f"instance type {request.instance_type!r} is a SageMaker type, but {REMOTE_BACKENDS[backend]} "
            f"runs on EC2 instances: give {request.instance_type.removeprefix('ml.')!r}, or use the "
            "sagemaker backend"
        )


def require_object_store(request: JobRequest, backend: str) -> None:
    """:func:`require_s3` over the spec, checkpoint, model store and staging locations of a request."""
    require_s3(
        backend,
        spec_uri=request.spec_uri,
        checkpoint_store=request.checkpoint_uri,
        model_store=request.model_store or request.output_uri,
        result_uri=request.result_uri,
    )


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What ``poll`` saw: state, billed seconds so far, market and instance type, a one-line reason.

    ``metrics`` is free for backend-specific figures (utilization, restarts, ...), e.g. for the listener.
    ``ended_at`` is when the job stopped (epoch seconds), where the backend says; ``None`` while it runs.
    ``availability_zone`` is where the job was placed, where the backend knows it (else empty).
    """

    job_id: str
    state: JobState
    billable_seconds: float = 0.0
    market: str = ""
    instance_type: str = ""
    reason: str = ""
    exit_code: int | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    ended_at: float | None = None
    availability_zone: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON primitives (for trigger events and XCom)."""
        out = asdict(self)
        out["state"] = self.state.value
        out["metrics"] = dict(self.metrics)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobStatus:
        """The status from :meth:`to_dict`; a key it lacks (an older trigger state's) takes its default."""
        values = dict(data)
        values["state"] = JobState(values["state"])
        return cls(**values)


@dataclass(frozen=True, slots=True)
class FoundJob:
    """A job ``find`` found under its name: its id and, where the backend reports them, when it began.

    ``started_at``: when it started running, ``created_at``: when the backend took it (epoch seconds; None
    where the backend does not say). A retry that cannot poll the job it follows bills it from them, not
    from the retry's re-attach: what it ran under the earlier try is never lost. ``ended_at`` and
    ``end_state``: when and how it ended, where it has (both or neither): billed up to its end, not up to
    now (the name is the same on every try and clear, so the job found may have ended days before).
    ``market``: the market it was submitted on, as its backend's record of it says (``""``: unknown): a job
    that cannot be read then is billed on it, not on the one the retry would choose now. ``status``: what a
    ``poll`` now would say, where the look-up read all a poll reads (SageMaker's one DescribeTrainingJob):
    the retry follows the job from it instead of asking again (None: poll it).
    """

    job_id: str
    started_at: float | None = None
    created_at: float | None = None
    ended_at: float | None = None
    end_state: JobState | None = None
    market: str = ""
    status: JobStatus | None = None

    @property
    def running_since(self) -> float | None:
        """The earliest it can have started running: its start, else its creation (never less than it ran)."""
        return self.started_at if self.started_at is not None else self.created_at


def with_copies_run_out(status: JobStatus) -> JobStatus:
    """``status`` billed with what its copies may still run (``COPY_SECONDS_LEFT``), where it holds that.

    For a job billed as ended without a poll of its end (a kill): nothing looks at its copies again, and a
    copy whose stop failed runs to its time limit (pure).
    """
    from dataclasses import replace

    left = status.metrics.get(COPY_SECONDS_LEFT)
    if not left:
        return status
    seconds_by_type = {str(t): float(s) for t, s in dict(left.get("seconds_by_type") or {}).items()}
    seconds = sum(seconds_by_type.values())
    by_type = dict(status.metrics.get(COPY_SECONDS_BY_TYPE) or {})
    for instance_type, more in seconds_by_type.items():
        by_type[instance_type] = float(by_type.get(instance_type, 0.0)) + more
    metrics = {k: v for k, v in status.metrics.items() if k != COPY_SECONDS_LEFT}
    metrics[COPY_SECONDS_BY_TYPE] = by_type
    metrics["batch_copy_seconds"] = float(metrics.get("batch_copy_seconds") or 0.0) + seconds
    unstopped = list(left.get("unstopped") or [])
    said = f"; its copies billed {seconds:g} s more, to their stop"
    if unstopped:
        said += f" ({', '.join(unstopped)} could not be stopped: billed to its time limit)"
    return replace(
        status,
        billable_seconds=status.billable_seconds + seconds,
        reason=status.reason + said,
        metrics=metrics,
    )


def whole_number(value: object, name: str, *, low: int, high: int) -> int:
    """A backend option that is a whole number from ``low`` to ``high`` (templated options arrive as text).

    Raises:
        ConfigurationError: anything else, naming the option and its value (it was a bare TypeError or
            ValueError at the first submit).
    """
    from decimal import Decimal, InvalidOperation

    try:
        exact = Decimal(str(value).strip()) if not isinstance(value, bool) else None
    except InvalidOperation:
        exact = None
    # 30, "30", 30.0 and "30.0" alike (a template renders 1.0 for one instance); 30.5 is no whole number.
    number = (
        int(exact) if exact is not None and exact.is_finite() and exact == exact.to_integral_value() else None
    )
    if number is None or not low <= number <= high:
        raise ConfigurationError(
            f"backend option {name} must be a whole number from {low} to {high}, got {value!r}"
        )
    return number


def billed_instances(options: Mapping[str, Any]) -> int:
    """How many instances one job bills, from its backend's options (SageMaker's ``instance_count``; else 1).

    A job's ``billable_seconds`` count all of them (instance-seconds): time added to them from the outside
    (a stopped job's grace period) is multiplied by this.
    """
    return whole_number(options.get("instance_count") or 1, "instance_count", low=1, high=1000)


@runtime_checkable
class ComputeBackend(Protocol):
    """Where training jobs run; see the module docstring for the contract.

    Each backend class also sets ``places_zones``: whether it honours ``JobRequest.availability_zone``
    (:func:`require_zone_placement` reads it), and may have a static ``check_zones(options, zones)`` that
    refuses zones its options do not place.
    """

    name: str

    def submit(self, request: JobRequest) -> str:
        """Start the job (or find the one already started under this name); returns its id."""
        ...

    def find(self, job_name: str) -> FoundJob | None:
        """The job already submitted under ``job_name`` (an earlier try's), with when it began, or None."""
        ...

    def poll(self, job_id: str) -> JobStatus:
        """The job's state, billed seconds so far, market and instance type."""
        ...

    def stop(self, job_id: str) -> None:
        """Ask the job to stop (SIGTERM first, so it checkpoints)."""
        ...

    def logs(self, job_id: str, tail: int = 20) -> str:
        """The last ``tail`` lines of the job's log (or the backend's status messages)."""
        ...


def backend_class(name: str) -> type:
    """The class of backend ``name`` (its module imported now).

    Raises:
        ConfigurationError: an unknown backend name.
    """
    module, cls = BACKENDS[check_backend(name)]
    found: type = getattr(importlib.import_module(module), cls)
    return found


def open_backend(name: str, options: Mapping[str, Any] | None = None) -> ComputeBackend:
    """The backend ``name`` (``local``, ``sagemaker``, ``batch``, ``kubernetes``) built with ``options``."""
    given = dict(options or {})
    check_backend_options(name, given)
    try:
        backend: ComputeBackend = backend_class(name)(**given)
    except TypeError as e:
        raise ConfigurationError(f"compute backend {name!r} does not take these options: {e}") from e
    return backend


def check_backend_options(name: str, options: Mapping[str, Any]) -> None:
    """Refuse an option backend ``name`` does not take, naming it, the closest option and all of them.

    Raises:
        ConfigurationError: an unknown option (a typo would otherwise be a bare ``__init__`` TypeError), or
            a required one left out.
    """
    import inspect

    cls = backend_class(name)
    check_keywords(cls, options, field="backend_options", of=f"the {name} backend")
    parameters = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    # A required option left out read as a Python signature error ("__init__() missing 1 required ...").
    required = [
        n
        for n, p in parameters.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    missing = [n for n in required if n not in options]
    if missing:
        raise ConfigurationError(
            f"the {name} backend needs backend_options {', '.join(repr(n) for n in missing)} (see "
            "docs/remote-training.md)"
        )
