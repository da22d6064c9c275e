"""Where a job's stores may be: checks of its locations before any job is bought.

A remote backend's job (SageMaker, Batch, Kubernetes) runs on another machine and reaches only ``s3://``; a
``local`` job's folders must be absolute, usable and, on this machine, writable.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from costaware.core.errors import ConfigurationError, StoreUnavailableError
from costaware.core.given import names_nothing, not_given

if TYPE_CHECKING:
    from pathlib import Path

    from costaware.adapters.compute.jobs import JobRequest

#: Backends whose jobs run on another machine, by the name messages give them: their stores must be on S3.
REMOTE_BACKENDS = {"sagemaker": "SageMaker", "batch": "AWS Batch", "kubernetes": "Kubernetes"}


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
    backend_options: Mapping[str, Any] | None = None,
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
        backend_options: The backend's options: a ``local`` job's ``env`` that sets
            ``COSTAWARE_STORE_STALL_SECONDS`` bounds the checks of local folders, as it bounds the job's own.
        **uris: The locations by the argument name a user sets; empty ones are not checked.

    Raises:
        ConfigurationError: the first unusable location, named with its argument and what to do.
        StoreUnavailableError: a local folder's filesystem failed its write check (a full disk, an I/O
            error), or did not answer it for ``COSTAWARE_STORE_STALL_SECONDS``: retried.
    """
    from pathlib import Path
    from urllib.parse import urlparse

    from costaware_runtime.contract import is_uri

    from costaware.adapters.object_store.location import (
        expand_user,
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
        check = partial(
            _check_local_folder, what, text, folder, backend=backend, on_this_machine=on_this_machine
        )
        if on_this_machine:
            # A bad value fails before the disk is asked.
            bound = _stall_seconds(_job_env(backend, backend_options))
            _within_stall_bound(check, what, text, folder, bound)
        else:
            check()  # follows no link and writes nothing: this machine's disk is not asked


def local_job_env(env: object) -> dict[str, str]:
    """The local backend's ``env`` option as its job gets it: each variable's name and value as text.

    The one reading of it, by the backend, ``check_backend_options`` and the start check of a local job's
    folders: a list of pairs, which ``dict()`` took, was passed over by the start check (its stall bound read
    from the worker's environment instead), and a string was a bare ``ValueError``.

    Raises:
        ConfigurationError: ``env`` is neither a mapping nor None, named with what was given.
    """
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise ConfigurationError(
            "backend_options['env'] of the local backend must be a dict of variable name to string value, "
            f"such as {{'PYTHONPATH': '/srv/trainer'}}: got the {type(env).__name__} {env!r}"
        )
    return {str(name): str(value) for name, value in env.items()}


def _job_env(backend: str, backend_options: Mapping[str, Any] | None) -> Mapping[str, str]:
    """The variables a ``local`` task sets for its job over this worker's (its ``backend_options["env"]``).

    Only a local job runs here, and only its folders are checked on this disk.

    Raises:
        ConfigurationError: an ``env`` that is no mapping (:func:`local_job_env`).
    """
    return local_job_env((backend_options or {}).get("env")) if backend == "local" else {}


def _stall_seconds(job_env: Mapping[str, str]) -> float:
    """``COSTAWARE_STORE_STALL_SECONDS`` as a local job gets it (the runtime's default when unset).

    ``job_env``'s where the task sets it there (its ``backend_options["env"]``), else this worker's, which
    the job inherits. Read from the worker's alone, a hung mount held the task for the worker's bound (300 s
    by default) where the task had asked its job for less, and a bad value of the task's bought a job that
    failed with exit 2.

    Raises:
        ConfigurationError: it is not a number of seconds > 0, named with its value and where it is set.
    """
    import os

    from costaware_runtime.contract import STORE_STALL_SECONDS, parse_store_stall_seconds
    from costaware_runtime.errors import ContractError

    set_by_task = STORE_STALL_SECONDS in job_env
    value = job_env[STORE_STALL_SECONDS] if set_by_task else os.environ.get(STORE_STALL_SECONDS, "")
    try:
        return parse_store_stall_seconds(value.strip() or None)
    except ContractError as e:
        where = (
            "the task's backend_options['env'] sets it for its job: fix it there"
            if set_by_task
            else "this worker's environment sets it, which a local job inherits: fix it there"
        )
        raise ConfigurationError(f"{e}; {where}") from e


def _within_stall_bound(check: Callable[[], None], what: str, text: str, folder: Path, bound: float) -> None:
    """``check()`` of the local ``folder``, given up once its filesystem has not answered for the stall bound.

    A hung NFS mount blocks each call in the kernel, where no signal reaches it: unbounded, the Airflow task
    waited there for good. The job's launcher bounds its own checks by the same variable. The check runs in
    a daemon thread, left blocked when given up: it holds nothing, and does not hold the worker's exit.

    Raises:
        StoreUnavailableError: the filesystem did not answer for ``bound`` seconds (retried: it may again).
        ConfigurationError: what ``check`` raised.
    """
    import threading

    from costaware_runtime.contract import STORE_STALL_SECONDS

    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            check()
        except BaseException as e:  # raised again below, on the task's thread
            outcome.append(e)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, name="costaware-store-check", daemon=True)
    thread.start()
    thread.join(bound)
    if outcome:
        if outcome[0] is not None:
            raise outcome[0]
        return
    raise StoreUnavailableError(
        f"{what} {text!r} could not be checked: the filesystem holding {str(folder)!r} has not answered for "
        f"{bound:g} s ({STORE_STALL_SECONDS} sets how long); check that it answers (a hung NFS or other "
        "network mount): remount it, or give a folder on another filesystem; it is checked again when the "
        "task is retried, where it has retries left"
    )


def _check_local_folder(what: str, text: str, folder: Path, *, backend: str, on_this_machine: bool) -> None:
    """The checks of :func:`require_usable_locations` that read the local ``folder`` on this machine's disk.

    Args:
        what: The argument that names the location.
        text: The location as given.
        folder: Its absolute folder (a file's folder, for a file), ``~`` expanded.
        backend: The backend name: only a ``local`` job writes this machine's folders.
        on_this_machine: Whether this machine's disk may be asked (links followed, a write checked).

    Raises:
        ConfigurationError: the folder is the machine's root, a file, or may not be written.
        StoreUnavailableError: its filesystem failed the write check.
    """
    from costaware_runtime.stores import check_writes

    from costaware.adapters.object_store.location import ROOT_WRITES, refuse_machine_root

    # A symbolic link to / writes there too; only this machine's disk says where one leads.
    # model_store='/' was found only inside the bought job, which made its versions' folders directly
    # under /; a checkpoint store there, its jobs' folders.
    a_file = what in FILE_LOCATIONS
    refuse_machine_root(
        what,
        text,
        str(folder),
        follow_links=on_this_machine,
        a_file=a_file,
        writes="it, and the files written beside it, would be written directly in /"
        if a_file
        else ROOT_WRITES,
    )
    if backend != "local" or not on_this_machine:
        return  # require_s3 names what a remote job needs
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
