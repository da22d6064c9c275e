"""Model store: versions with metadata, an atomically switched champion, and safe model formats.

Layout under the store's root (a local folder or ``s3://bucket/prefix``)::

    versions/<version>/model.<ext>       the model, in a format that loads without pickle
    versions/<version>/metadata.json     written last: a version without it is incomplete and never used
    attempts/<key hash>.json             the version a training's save began, found by its next attempt
    champion.json                        the pointer to the champion, replaced in one write
    decisions/<time>-<id>.json           promotion decisions with both metrics

Nothing here unpickles: scikit-learn models go through skops with an explicit list of trusted types,
XGBoost and LightGBM models through their own formats, and every model file's SHA-256 is checked against
its metadata before it is parsed.

The store is :class:`ModelStore`; its parts live beside it: the blob folder (``blob_dir``), the version
values and errors (``model_versions``), the model formats (``model_formats``) and versions that are folders
of files (``model_files``).
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from costaware.adapters import model_files
from costaware.adapters.blob_dir import BlobDir, sha256_hex
from costaware.adapters.model_formats import (
    DEFAULT_TRUSTED_TYPES,
)
from costaware.adapters.model_versions import (
    STATUSES,
    Champion,
    ChampionChangedError,
    IncompleteVersionError,
    ModelVersion,
    UntrustedModelError,
    VersionNotFoundError,
    new_version_id,
)
from costaware.core.errors import ConfigurationError
from costaware.core.promotion import COMPLETE

__all__ = ["ModelStore"]

log = logging.getLogger(__name__)


#: The file a local store's champion switches lock (kept: it holds no data).
CHAMPION_LOCK = ".champion.lock"


class _Unchecked(enum.Enum):
    """``set_champion``'s default: replace whatever the champion is, unchecked."""

    UNCHECKED = "unchecked"


_UNCHECKED = _Unchecked.UNCHECKED


class ModelStore:
    """Versions of models with metadata, a champion pointer and promotion decisions.

    Args:
        blobs: Where the store lives.
        trusted_types: Extra types skops may load, beyond skops' safe list and ``DEFAULT_TRUSTED_TYPES``.
    """

    def __init__(self, blobs: BlobDir, *, trusted_types: Sequence[str] = ()) -> None:
        self.blobs = blobs
        self.trusted_types = (*DEFAULT_TRUSTED_TYPES, *trusted_types)

    @classmethod
    def open(cls, uri: str, *, trusted_types: Sequence[str] = (), **storage_options: Any) -> ModelStore:
        """Open the store at a local folder or ``s3://`` URI (options go to ``BlobDir.from_uri``).

        A bad ``uri`` is refused as the ``model_store`` argument, which every caller passes here.
        """
        return cls(
            BlobDir.from_uri(uri, what="model_store", example="/srv/ml/models", **storage_options),
            trusted_types=trusted_types,
        )

    @property
    def uri(self) -> str:
        return self.blobs.uri

    def save(self, meta: ModelVersion, model: bytes, *, attempt_key: str | None = None) -> ModelVersion:
        """Write a new version: the model file first, the metadata (with the model's checksum) last.

        ``attempt_key`` names one training across its attempts: the version's id is noted under it before
        anything else, so that a next attempt finds the version a failed save left (:meth:`saved_before`).
        """
        if meta.status not in STATUSES:
            raise ConfigurationError(f"status {meta.status!r} is not one of {', '.join(STATUSES)}")
        _check_version_id(meta.version, "use new_version_id()")
        folder = f"versions/{meta.version}"
        if self.blobs.exists(folder):
            raise ConfigurationError(
                f"version {meta.version!r} already exists in {self.uri}: versions are immutable"
            )
        stored = replace(
            meta,
            model_sha256=sha256_hex(model),
            created_at=meta.created_at or datetime.now(timezone.utc).isoformat(),
        )
        if attempt_key is not None:
            noted = {"attempt_key": attempt_key, "version": stored.version}
            self.blobs.write_bytes(_attempt_marker(attempt_key), _json(noted))
        self.blobs.write_bytes(f"{folder}/{stored.model_file}", model)
        model_files.write_metadata(self.blobs, folder, _json(stored.to_dict()))
        log.info(
            "saved model version %s (%s, %s) to %s", stored.version, stored.mode, stored.status, self.uri
        )
        return stored

    def saved_before(self, attempt_key: str) -> ModelVersion | None:
        """The complete version an earlier attempt's save under ``attempt_key`` stored; else None.

        A save whose metadata write landed but reported an error, and whose read-back failed too, failed
        though its version was complete: the next attempt stored the model a second time. A version whose
        save stopped before its metadata is incomplete: None, and it is never used.
        """
        try:
            noted = json.loads(self.blobs.read_bytes(_attempt_marker(attempt_key)))
            if noted["attempt_key"] != attempt_key:  # another key of the same hash: not this training's
                return None
            return self.get(str(noted["version"]))
        except (FileNotFoundError, VersionNotFoundError, IncompleteVersionError):
            return None

    def forget_attempt(self, attempt_key: str) -> None:
        """Drop the note of ``attempt_key``'s save (its training is done): a later run trains anew."""
        self.blobs.delete(_attempt_marker(attempt_key))

    def save_files(self, meta: ModelVersion, staging: str) -> ModelVersion:
        """Write a new version whose model is the folder of files staged at ``staging`` (inside this store).

        ``model_format`` becomes ``files``; the metadata is written after every file (see
        :func:`costaware.adapters.model_files.save_files_version`).
        """
        return model_files.save_files_version(self, meta, staging)

    def version_files(self, meta: ModelVersion) -> list[dict[str, Any]]:
        """The files of a ``files`` version: ``path``, ``bytes`` and ``sha256`` each."""
        return model_files.version_files(self, meta)

    def download_files(self, meta: ModelVersion, destination: Path) -> Path:
        """Copy the files of a ``files`` version into ``destination``, each checked against its SHA-256."""
        return model_files.download_files(self, meta, destination)

    def get(self, version: str) -> ModelVersion:
        """Metadata of ``version``."""
        # Checked here too: "../../x" read metadata from outside the store, and set_champion (which reads
        # through get) wrote it into champion.json.
        _check_version_id(version, "give a version id as `costaware runs list` or the store lists it")
        folder = f"versions/{version}"
        try:
            raw = self.blobs.read_bytes(f"{folder}/metadata.json")
        except FileNotFoundError:
            if version and self.blobs.list(folder):
                raise IncompleteVersionError(
                    f"version {version!r} in {self.uri} has no metadata: its write did not finish; "
                    "it is never used"
                ) from None
            known = self.version_ids()
            # "pick one of []" read as if the version were the problem: a store with no version at all is
            # most often a mistyped location.
            pick = (
                f"pick one of {known[-5:]}"
                if known
                else "the store has no version at all: check the model_store location (a typo?)"
            )
            raise VersionNotFoundError(f"model version {version!r} is not in {self.uri}: {pick}") from None
        return ModelVersion.from_dict(json.loads(raw))

    def version_ids(self) -> list[str]:
        """Ids of all versions (complete or not), oldest first."""
        return self.blobs.list("versions")

    def versions(self) -> list[ModelVersion]:
        """Metadata of every complete version, oldest first."""
        found = []
        for version in self.version_ids():
            try:
                found.append(self.get(version))
            except IncompleteVersionError:
                continue
        return found

    def model_bytes(self, meta: ModelVersion) -> bytes:
        """The model file of ``meta``, after checking it against the checksum in the metadata."""
        data = self.blobs.read_bytes(f"versions/{meta.version}/{meta.model_file}")
        digest = sha256_hex(data)
        if digest != meta.model_sha256:
            raise UntrustedModelError(
                f"model file of version {meta.version!r} in {self.uri} has SHA-256 {digest[:12]}..., "
                f"its metadata "
                f"says {meta.model_sha256[:12]}...: the file was changed after it was saved; it is not loaded"
            )
        return data

    def champion_pointer(self) -> Champion | None:
        try:
            data = json.loads(self.blobs.read_bytes("champion.json"))
        except FileNotFoundError:
            return None
        return Champion(
            version=data["version"], switched_at=data["switched_at"], previous=data.get("previous")
        )

    def champion(self) -> ModelVersion | None:
        """Metadata of the champion, or None when nothing was promoted yet."""
        pointer = self.champion_pointer()
        return self.get(pointer.version) if pointer else None

    def set_champion(
        self,
        version: str,
        *,
        replacing: str | _Unchecked | None = _UNCHECKED,
        before_switch: Callable[[], object] | None = None,
    ) -> Champion:
        """Make ``version`` the champion in one atomic write; only complete versions qualify.

        Args:
            version: The new champion.
            replacing: The champion ``version`` was judged against (None: there was none). When the store's
                champion is another by now (a promotion that ran beside this one switched it), nothing is
                written. Left out, whatever the champion is gets replaced (a person's rollback).
            before_switch: Called once the check passed, just before the pointer is written (under the
                lock on a local store): the promotion keeps its decision there, so a refused switch leaves
                no decision that says it promoted.

        Raises:
            ChampionChangedError: ``replacing`` is no longer the champion.
        """
        meta = self.get(version)
        if meta.status != COMPLETE:
            raise ConfigurationError(
                f"version {version!r} has status {meta.status!r}: only complete versions can become champion"
            )
        with self._champion_lock():
            current = self.champion_pointer()
            if not isinstance(replacing, _Unchecked):
                self._check_champion(replacing, current)
            if before_switch is not None:
                before_switch()
            pointer = Champion(
                version=version,
                switched_at=datetime.now(timezone.utc).isoformat(),
                previous=current.version if current else None,
            )
            self.blobs.write_bytes("champion.json", _json(asdict(pointer)))
        log.info("champion of %s is now %s (was %s)", self.uri, version, pointer.previous)
        return pointer

    def _check_champion(self, expected: str | None, current: Champion | None) -> None:
        """Raise ``ChampionChangedError`` unless ``current`` is still ``expected`` (None: none yet)."""
        now = current.version if current else None
        if now != expected:
            raise ChampionChangedError(
                f"the champion of {self.uri} changed from {expected!r} to {now!r} while the candidate was "
                f"judged against {expected!r} (a promotion ran beside this one): nothing was switched; a "
                f"retry of the task judges it against {now!r}"
            )

    @contextmanager
    def _champion_lock(self) -> Iterator[None]:
        """On a local store, one champion switch at a time across processes.

        An object store has no lock: its check and its write are a moment apart.
        """
        if not self.blobs.is_local:
            yield
            return
        try:
            import fcntl
        except ImportError:  # Windows: no flock; the check and the write are a moment apart, as on S3
            yield
            return
        import os

        Path(self.blobs.root).mkdir(parents=True, exist_ok=True)
        # A file opened for writing: an NFS mount emulates flock with POSIX locks, which need one.
        lock = os.open(Path(self.blobs.root) / CHAMPION_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)  # closing the descriptor releases the lock

    def record_decision(self, decision: Mapping[str, Any]) -> str:
        """Store one promotion decision (JSON-able); returns its name."""
        name = f"{new_version_id()[1:]}.json"
        # A metric that is not defined (NaN) is null: a bare NaN is no JSON, and strict readers refused it.
        self.blobs.write_bytes(f"decisions/{name}", _json(_finite(dict(decision))))
        return name

    def decisions(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Recorded decisions, oldest first (the last ``limit`` ones)."""
        names = self.blobs.list("decisions")
        if limit is not None:
            names = names[-limit:] if limit > 0 else []
        return [json.loads(self.blobs.read_bytes(f"decisions/{n}")) for n in names]

    def promotion_of(self, version: str) -> dict[str, Any] | None:
        """The newest recorded decision that promoted ``version``, with its ``decision_file``; else None."""
        for name in reversed(self.blobs.list("decisions")):
            decision = json.loads(self.blobs.read_bytes(f"decisions/{name}"))
            if decision.get("promote") and decision.get("candidate") == version:
                return {**decision, "decision_file": name}
        return None

    def recent_quality(self, limit: int = 10) -> tuple[float, ...]:
        """The production model's holdout metric at each recent decision, oldest first, higher is better.

        After a promotion that is the candidate's metric, otherwise the champion's. Only the decisions made
        on the newest decision's metric count (a drop is measured in one unit), and a lower-is-better
        metric (``log_loss``, ``rmse``, ...) is negated, so that a rise of the error reads as a drop.
        """
        from costaware.core.errors import ConfigurationError
        from costaware.core.promotion import metric_direction

        decisions = self.decisions(limit)
        if not decisions:
            return ()
        metric = decisions[-1].get("metric")
        values = []
        for d in decisions:
            if d.get("metric") != metric:
                continue
            value = d.get("candidate_metric") if d.get("promote") else d.get("champion_metric")
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            try:
                higher = metric is None or metric_direction(str(metric), d.get("higher_is_better"))
            except ConfigurationError:  # a decision of an older version on a name no longer known
                higher = True
            values.append(float(value) if higher else -float(value))
        return tuple(values)


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float, at any depth, as None."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, indent=2, sort_keys=True, default=str).encode()


def _attempt_marker(attempt_key: str) -> str:
    """Where the version a save under ``attempt_key`` began is noted (any key: hashed to a plain name)."""
    return f"attempts/{sha256_hex(attempt_key.encode())[:40]}.json"


def _check_version_id(version: str, advice: str) -> None:
    """Refuse a version id that is not one plain folder name (no slash or backslash, no leading dot)."""
    plain = isinstance(version, str) and bool(version) and not version.startswith(".")
    if not plain or any(c in version for c in "/\\\x00"):
        raise ConfigurationError(f"version id {version!r} is not a plain name: {advice}")
