"""Where data lives: a parsed ``/abs/path``, ``file:///abs/path`` or ``s3://bucket/prefix`` URI."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import ParseResult, urlparse

from costaware.core.errors import ConfigurationError
from costaware.core.fingerprint import safe_relative_path

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed data URI.

    Attributes:
        scheme: ``local`` or ``s3``.
        bucket: The S3 bucket (``""`` for local).
        path: The absolute local path, or the S3 key / prefix without a leading ``/``.
    """

    scheme: str
    bucket: str
    path: str

    @property
    def uri(self) -> str:
        """The location as a URI (``s3://bucket/key``) or an absolute path."""
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.path}" if self.path else f"s3://{self.bucket}"
        return self.path

    def child(self, relative: str) -> Location:
        """The location of ``relative`` (checked by ``safe_relative_path``) under this one."""
        rel = safe_relative_path(relative, what="relative path")
        if not rel:
            return self
        joined = f"{self.path.rstrip('/')}/{rel}" if self.path else rel
        return Location(self.scheme, self.bucket, joined)


def refuse_cut_uri(parsed: ParseResult, text: str, what: str) -> None:
    """Refuse an ``s3://`` or ``file://`` URI holding ``#`` or ``?``: its path ends there.

    ``s3://bucket/runs/2026#1/features`` was read as ``runs/2026``: the store, and what it fingerprinted,
    was a parent folder shared with other runs (the job's launcher refuses them in the same words).
    """
    cut = next((mark for mark in "#?" if mark in text), None) if parsed.scheme in ("s3", "file") else None
    if cut:
        raise ConfigurationError(
            f"{what} {text!r} holds {cut!r}, which ends a URI's path: it would name the same place as "
            f"{text.split(cut)[0]!r}; leave '#' and '?' out of the location"
        )


def refuse_file_host(parsed: ParseResult, text: str, what: str) -> None:
    """Refuse a ``file://`` URI naming a host other than ``localhost``: its path is a folder on this machine.

    ``file://data/features`` (two slashes) was read as ``/features``: the store was made under the
    machine's root, where no one looked for it (the job's launcher refuses it in the same words).
    """
    if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
        raise ConfigurationError(
            f"{what} {text!r} names the host {parsed.netloc!r}: a file URI takes three slashes, "
            f"file:///{parsed.netloc}{parsed.path} for an absolute path"
        )


def s3_spelling(uri: str) -> str | None:
    """``uri`` written the one way the S3 readers take (``s3://``), where it is S3 spelt another way.

    ``S3://bucket/x`` or Spark's ``s3a://bucket/x`` was refused as "neither a local path nor s3://" and told
    to declare a region and size (or an Asset event) for it: advice that makes an S3 input go unlisted.
    """
    scheme, sep, rest = str(uri).strip().partition("://")
    if sep and scheme != "s3" and scheme.lower() in ("s3", "s3a", "s3n"):
        return f"s3://{rest}"
    return None


def named_or_expanded(text: str, *, what: str, example: str) -> Path:
    """A command's file argument as a path: a file there as named is that file, else its ``~`` expanded.

    A quoted ``'~/GB.csv'`` reaches a command unexpanded (a folder named ``~`` was looked in), while
    ``~GB_2026.csv`` in the working folder is a file, not user ``GB_2026.csv``'s home. Only a name starting
    with ``~`` is looked at, and a look that fails (a folder this user may not enter) counts as not there:
    reading the path then says what is wrong, where a bare ``exists()`` raised a traceback.
    """
    path = Path(text)
    if not text.startswith("~"):
        return path
    try:
        there = path.exists()
    except OSError:
        there = False
    return path if there else Path(expand_user(text, what=what, uri=text, example=example))


def expand_user(path: str, *, what: str, uri: str, example: str = "/data/flights") -> str:
    """``path`` with a leading ``~`` or ``~user`` expanded; a home this machine does not know is refused.

    ``Path.expanduser`` raised a bare RuntimeError there, a traceback. os.path, not Path: Path('~/a//b/')
    dropped the empty segment a caller may refuse.

    Raises:
        ConfigurationError: no home folder for ``~`` (HOME unset, a uid without a passwd entry, as
            OpenShift's random uids; or HOME set empty) or an unknown ``~user``; named with ``what`` and
            ``uri``.
    """
    if path.split("/")[0] == "~" and os.environ.get("HOME") == "":
        # os.path took an empty HOME for the root: '~/features' was the folder /features, under the root.
        raise ConfigurationError(
            f"{what} {uri!r} starts with '~', but HOME is set and empty here: '~' would be the root, /; set "
            f"HOME to the user's home folder, or give an absolute path such as {example!r}"
        )
    expanded = os.path.expanduser(path)  # noqa: PTH111
    if not expanded.startswith("~"):
        return expanded
    user = expanded[1:].split("/")[0]
    if not user:
        raise ConfigurationError(
            f"{what} {uri!r} starts with '~', but this process has no home folder (HOME is unset and its "
            f"user has none): give an absolute path such as {example!r}"
        )
    raise ConfigurationError(
        f"{what} {uri!r} starts with the home folder of user {user!r}, whom this machine does not know: give "
        f"an absolute path such as {example!r} or '~/...' (your own home)"
    )


#: A folder of its own (a file in one, for a file) to give instead of the machine's root, by the argument.
ROOT_EXAMPLES = {
    "model_store": "/srv/ml/models",
    "checkpoint_store": "/srv/ml/checkpoints",
    "spec_uri": "/srv/ml/jobs/spec.json",
}


def root_example(what: str) -> str:
    """The location a refusal of the argument ``what`` offers instead: one of the argument's own kind."""
    return ROOT_EXAMPLES.get(what, "/srv/ml/store")


def machine_root_reach(
    path: str, *, follow_links: bool = True
) -> Literal["as written", "through a link"] | None:
    """How the absolute local ``path`` names the machine's root, ``/``; None where it does not.

    The one test every store refusal asks: a store at the root makes its folders directly under ``/``.
    The root is the one folder that is its own parent, ``//`` included (POSIX keeps it apart).

    Args:
        path: An absolute local path, ``~`` already expanded; a relative one is never the root here.
        follow_links: Also follow symbolic links (``/proc/self/root``, a link to ``/``) on this machine's
            disk; False where the path is used on another machine (a DAG parsed, not yet run).

    Returns:
        ``"as written"`` (``/``, ``//``, ``/.``, ``/tmp/..``), ``"through a link"``, or None.
    """
    # os.path, not Path: Path leaves '/tmp/..' as written, normpath takes its '..' as the path reads.
    if not os.path.isabs(path):  # noqa: PTH117
        return None
    written = os.path.normpath(path)
    if written == os.path.dirname(written):  # noqa: PTH120
        return "as written"
    real = os.path.realpath(path) if follow_links else ""
    if real and real == os.path.dirname(real):  # noqa: PTH120
        return "through a link"
    return None


#: What a store at the root would do there, as a refusal says it unless told more of the store at hand.
ROOT_WRITES = "its files would be written in folders made directly under /"


def refuse_machine_root(
    what: str,
    given: object,
    path: str,
    *,
    follow_links: bool = True,
    example: str | None = None,
    writes: str = ROOT_WRITES,
    a_file: bool = False,
    home: str = "",
    instead: str = "or an s3:// URI",
) -> None:
    """Refuse a local store whose folder ``path`` is the machine's root, ``/`` (:func:`machine_root_reach`).

    The one wording of the refusal every store, the cache CLI and the examples give (six texts drifted).

    Args:
        what: The argument, with whoever owns it (``task 'train': model_store``), as the message names it.
        given: The value as the user wrote or rendered it.
        path: The folder to test: the absolute local path, ``~`` expanded (a file's folder, for a file).
        follow_links: Also follow symbolic links on this machine's disk (see :func:`machine_root_reach`).
        example: A location of its own to give instead; by default that of ``what`` (:func:`root_example`).
        writes: What the store would make directly under ``/``.
        a_file: ``given`` names a file in ``path`` (a spec), not a folder.
        home: Said after "the whole machine", e.g. how ``~`` expanded here.
        instead: The other kind of location to offer, after the example (``""``: none).

    Raises:
        ConfigurationError: ``path`` names the root, as written or through a link; naming ``given`` and
            what to give instead.
    """
    reach = machine_root_reach(path, follow_links=follow_links)
    if reach is None:
        return
    link = f" ({path!r} is a symbolic link that leads there)" if reach == "through a link" else ""
    in_root, of_its_own = (
        ("a file in the root", "a file in a folder of its own")
        if a_file
        else ("the root", "a folder of its own")
    )
    offer = f" {instead}" if instead else ""
    raise ConfigurationError(
        f"{what} {given!r} is {in_root}, /, of the whole machine{home}{link}: {writes}; give {of_its_own} "
        f"such as {example or root_example(what)!r}{offer}"
    )


def parse_uri(uri: str, *, what: str = "URI") -> Location:
    """Parse ``/abs/path`` (``~`` is the home folder), ``file:///abs/path`` or ``s3://bucket/prefix``.

    Raises:
        ConfigurationError: a relative local path, a path with ``..`` segments, a malformed bucket name,
            or a scheme other than file and s3.
    """
    text = str(uri).strip()
    parsed = urlparse(text)
    refuse_cut_uri(parsed, text, what)
    if parsed.scheme == "s3":
        bucket = parsed.netloc
        if not _BUCKET.match(bucket):
            # 's3:/bucket/prefix' (one slash) was told only that bucket '' is no bucket name.
            # So was 's3:///bucket/prefix' (three slashes).
            two_slashes = text.startswith("s3://") and not text.startswith("s3:///")
            slashes = "" if two_slashes else ": write it as s3://<bucket>/<prefix>, with two slashes"
            raise ConfigurationError(
                f"{what} {uri!r} names bucket {bucket!r}, which is not a valid S3 bucket name "
                f"(3-63 characters: lower-case letters, digits, '.', '-'){slashes}"
            )
        key = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
        plain = "write the key without '.', '..' or empty segments, e.g. 's3://bucket/team/features'"
        return Location("s3", bucket, safe_relative_path(key, what=f"key of {what} {uri!r}", advice=plain))
    if parsed.scheme in ("", "file"):
        refuse_file_host(parsed, str(uri), what)
        path = parsed.path if parsed.scheme == "file" else text
        if path.startswith("~"):
            # '~/features' quoted in .env reaches here unexpanded and was refused as a relative path; the
            # stores (BlobDir, model_store=) expand it to the worker's home, and so does this.
            path = expand_user(path, what=what, uri=uri)
        if not path.startswith("/"):
            raise ConfigurationError(
                f"{what} {uri!r} is a relative path: workers run in changing folders, so give an absolute "
                "path such as '/data/flights' or an s3:// URI"
            )
        segments = path[1:].rstrip("/").split("/")
        if path != "/" and (any(s in ("", ".", "..") for s in segments) or "\\" in path or "\x00" in path):
            # "/data/../data/x" was told to use a relative path, which is refused just above.
            raise ConfigurationError(
                f"{what} {uri!r} has an empty, '.' or '..' segment, a backslash or a NUL byte: write the "
                "absolute path without them, e.g. '/data/flights'"
            )
        return Location("local", "", path.rstrip("/") or "/")
    raise ConfigurationError(
        f"{what} {uri!r} has scheme {parsed.scheme!r}: use an absolute local path or s3://bucket/prefix"
    )
