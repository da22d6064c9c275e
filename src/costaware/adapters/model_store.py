"""Model store: versions with metadata, an atomically switched champion, and safe model formats.

Layout under the store's root (a local folder or ``s3://bucket/prefix``)::

    versions/<version>/model.<ext>       the model, in a format that loads without pickle
    versions/<version>/metadata.json     written last: a version without it is incomplete and never used
    champion.json                        the pointer to the champion, replaced in one write
    decisions/<time>-<id>.json           promotion decisions with both metrics

Nothing here unpickles: scikit-learn models go through skops with an explicit list of trusted types,
XGBoost and LightGBM models through their own formats, and every model file's SHA-256 is checked against
its metadata before it is parsed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from costaware.core.errors import ConfigurationError, CostawareError
from costaware.core.promotion import COMPLETE

log = logging.getLogger(__name__)

#: Types beyond skops' own safe list that the built-in scikit-learn trainers need (reviewed: numpy's dtype,
#: a plain scikit-learn data holder, and a partial of scikit-learn's input validator).
DEFAULT_TRUSTED_TYPES: tuple[str, ...] = (
    "numpy.dtype",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "functools.partial",
    "sklearn.utils.validation.check_array",
)
#: File suffix of each model format. A ``files`` version's model file is the listing of its files
#: (``costaware.adapters.model_files``).
MODEL_SUFFIXES = {"skops": "skops", "xgboost-ubj": "ubj", "lightgbm-txt": "txt", "files": "json"}
STATUSES = (COMPLETE, "interrupted", "failed")


class ModelStoreError(CostawareError):
    """Raised when the model store holds something unusable (a missing, incomplete or tampered version)."""


class VersionNotFoundError(ModelStoreError, ConfigurationError, LookupError):
    """Raised when a model version is not in the store."""


class IncompleteVersionError(ModelStoreError, ConfigurationError):
    """Raised when a version's files are there but its metadata is not: its write never finished."""


class UntrustedModelError(ModelStoreError, ConfigurationError):
    """Raised when a model file does not match its checksum or would load types nobody trusted."""


# -- blobs: local folder or S3 via pyarrow.fs --------------------------------------------------------------


class BlobDir:
    """A folder of whole-file blobs on the local disk or in an object store, written atomically.

    Local writes go to a temporary file that is renamed over the target; an object store makes an object
    visible only once its upload completes. Either way a reader sees the old blob or the new one, never
    half of one.

    Args:
        filesystem: A ``pyarrow.fs.FileSystem``.
        root: The folder's path on that file system (``bucket/prefix`` for S3).
        uri: How to name the folder to people, e.g. ``s3://bucket/prefix``.
    """

    def __init__(self, filesystem: Any, root: str, uri: str) -> None:
        self.fs = filesystem
        self.root = root.rstrip("/")
        self.uri = uri.rstrip("/")
        self.is_local = type(filesystem).__name__ == "LocalFileSystem"

    @classmethod
    def from_uri(
        cls,
        uri: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        session_token: str | None = None,
        create: bool = True,
    ) -> BlobDir:
        """Open a local folder (created when missing) or an ``s3://bucket/prefix`` location.

        Args:
            uri: A local path, ``file://`` URI or ``s3://`` URI.
            endpoint_url: S3 endpoint (e.g. MinIO or moto); else ``COSTAWARE_S3_ENDPOINT_URL`` or
                ``AWS_ENDPOINT_URL`` from the environment, else AWS.
            region: S3 region; else the environment's.
            access_key: S3 access key; else the default AWS credential chain.
            secret_key: S3 secret key.
            session_token: S3 session token.
            create: Create a missing local folder (off for paths that may name a file).
        """
        from pyarrow import fs

        text = str(uri).strip()
        if not text:
            raise ConfigurationError(
                "store location is empty: pass a local folder or an s3://bucket/prefix URI"
            )
        parsed = urlparse(text)
        if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
            path = Path(parsed.path if parsed.scheme == "file" else text).expanduser().resolve()
            if create:
                path.mkdir(parents=True, exist_ok=True)
            return cls(fs.LocalFileSystem(), str(path), str(path))
        if parsed.scheme == "s3":
            if not parsed.netloc:
                raise ConfigurationError(f"S3 URI {text!r} has no bucket: use s3://bucket/prefix")
            endpoint = (
                endpoint_url
                or os.environ.get("COSTAWARE_S3_ENDPOINT_URL")
                or os.environ.get("AWS_ENDPOINT_URL")
            )
            options: dict[str, Any] = {}
            if endpoint:
                ep = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
                options.update(endpoint_override=ep.netloc, scheme=ep.scheme or "https")
            if region or os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION"):
                options["region"] = (
                    region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                )
            if access_key and secret_key:
                options.update(access_key=access_key, secret_key=secret_key, session_token=session_token)
            root = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
            return cls(fs.S3FileSystem(**options), root, f"s3://{root}")
        try:
            filesystem, root = fs.FileSystem.from_uri(text)
        except Exception as e:
            raise ConfigurationError(
                f"cannot open store location {text!r}: {e}; use a folder or s3:// URI"
            ) from e
        return cls(filesystem, root, text)

    def path(self, name: str = "") -> str:
        return f"{self.root}/{name.strip('/')}" if name else self.root

    def child(self, name: str) -> BlobDir:
        """The sub-folder ``name`` (created lazily by the first write)."""
        return BlobDir(self.fs, self.path(name), f"{self.uri}/{name.strip('/')}")

    def read_bytes(self, name: str) -> bytes:
        """The blob's content; ``FileNotFoundError`` when it does not exist."""
        try:
            with self.fs.open_input_stream(self.path(name)) as stream:
                return bytes(stream.read())
        except FileNotFoundError:
            raise
        except OSError as e:
            if self.exists(name):
                raise
            raise FileNotFoundError(f"{self.uri}/{name}") from e

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write the whole blob atomically (replacing any blob of the same name)."""
        target = self.path(name)
        if self.is_local:
            folder = Path(target).parent
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{Path(target).name}.{uuid.uuid4().hex}.tmp"
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                tmp.replace(target)
            finally:
                tmp.unlink(missing_ok=True)
            return
        with self.fs.open_output_stream(target) as stream:
            stream.write(data)

    def exists(self, name: str) -> bool:
        from pyarrow import fs

        return bool(self.fs.get_file_info(self.path(name)).type != fs.FileType.NotFound)

    def list(self, name: str = "") -> list[str]:
        """Names of the files and folders directly inside ``name``, sorted; [] when it does not exist."""
        from pyarrow import fs

        infos = self.fs.get_file_info(fs.FileSelector(self.path(name), allow_not_found=True, recursive=False))
        return sorted(info.base_name for info in infos if not info.base_name.startswith("."))

    def delete(self, name: str) -> None:
        """Delete a blob or a folder with everything in it; nothing happens when it does not exist."""
        from pyarrow import fs

        info = self.fs.get_file_info(self.path(name))
        if info.type == fs.FileType.Directory:
            self.fs.delete_dir(self.path(name))
        elif info.type != fs.FileType.NotFound:
            self.fs.delete_file(self.path(name))


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


# -- model formats that load without pickle --------------------------------------------------------------


def dump_skops(model: Any) -> bytes:
    """A scikit-learn model as skops bytes."""
    with _quiet():
        import skops.io as sio

        return bytes(sio.dumps(model))


def load_skops(data: bytes, *, trusted_types: Iterable[str] = DEFAULT_TRUSTED_TYPES) -> Any:
    """Load skops bytes, refusing any type that is neither safe by skops' list nor in ``trusted_types``."""
    allowed = set(trusted_types)
    try:
        with _quiet():
            import skops.io as sio

            untrusted = sio.get_untrusted_types(data=data)
    except Exception as e:
        raise UntrustedModelError(f"model file is not a valid skops file ({type(e).__name__}: {e})") from e
    refused = sorted(set(untrusted) - allowed)
    if refused:
        raise UntrustedModelError(
            f"model file would load types nobody trusted: {refused}; if you reviewed where the file came "
            f"from, "
            f"add them to trusted_types"
        )
    with _quiet():
        return sio.loads(data, trusted=sorted(set(untrusted)))


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence warnings while skops scans ``sys.modules`` (on import and when it names functions).

    The scan touches Airflow's deprecated module aliases, and each touch would print a deprecation warning.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def dump_xgboost(booster: Any) -> bytes:
    """An ``xgboost.Booster`` in XGBoost's own UBJSON format."""
    return bytes(booster.save_raw(raw_format="ubj"))


def load_xgboost(data: bytes) -> Any:
    """An ``xgboost.Booster`` from UBJSON bytes."""
    xgb = require("xgboost", "xgboost")
    booster = xgb.Booster()
    booster.load_model(bytearray(data))
    return booster


def dump_lightgbm(booster: Any) -> bytes:
    """A ``lightgbm.Booster`` in LightGBM's text format."""
    return str(booster.model_to_string()).encode()


def load_lightgbm(data: bytes) -> Any:
    """A ``lightgbm.Booster`` from LightGBM's text format."""
    lgb = require("lightgbm", "lightgbm")
    return lgb.Booster(model_str=data.decode())


def require(module: str, package: str) -> Any:
    """Import an optional SDK, or fail with how to install it (the costaware extra that brings it)."""
    import importlib

    from costaware.extras import EXTRAS, install_hint

    try:
        return importlib.import_module(module)
    except ImportError as e:
        extra = next((name for name, modules in EXTRAS.items() if module in modules), None)
        how = install_hint(extra) if extra else f"pip install {package}"
        raise ConfigurationError(
            f"{module} is not installed: `{how}` on the workers to use this trainer"
        ) from e


# -- versions ------------------------------------------------------------------------------------------------


def new_version_id(now: datetime | None = None) -> str:
    """A version id that sorts by creation time: ``v20260301T020304123456-1a2b3c``."""
    now = now or datetime.now(timezone.utc)
    return f"v{now.strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class ModelVersion:
    """Metadata of one stored model.

    Attributes:
        version: Id, sortable by creation time.
        trainer: Trainer name (built-in) or ``module:Class`` of the trainer class (older versions: dotted).
        model_format: How the model file is encoded (``skops``, ``xgboost-ubj``, ``lightgbm-txt``, ...).
        mode: ``warm`` (continued from ``parent``) or ``full``.
        parent: The version it continued from (None for a full retrain).
        data_fingerprint: SHA-256 over the training files' names and contents.
        features: Feature columns, in order.
        label: Label column.
        status: ``complete``, ``interrupted`` or ``failed``; only complete versions can become champion.
        params: Trainer parameters.
        metrics: Training facts and metrics (rows, seconds, steps, ...).
        cost_usd: Training cost as a decimal string, when known.
        warm_steps_since_full: Warm retrains in this lineage since its last full retrain.
        reference_profile: Profile (JSON) of the data of the lineage's last full retrain, for drift checks.
        reason: Why the policy chose the mode.
        run: Where it was trained (dag_id, run_id, task_id, try_number).
        created_at: ISO time in UTC.
        model_sha256: SHA-256 of the model file, checked before every load.
    """

    version: str
    trainer: str
    model_format: str
    mode: str
    parent: str | None
    data_fingerprint: str
    features: tuple[str, ...]
    label: str
    status: str = COMPLETE
    params: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)
    cost_usd: str | None = None
    warm_steps_since_full: int = 0
    reference_profile: Mapping[str, Any] | None = None
    reason: str = ""
    run: Mapping[str, Any] = field(default_factory=dict)
    created_at: str = ""
    model_sha256: str = ""

    @property
    def model_file(self) -> str:
        return f"model.{MODEL_SUFFIXES.get(self.model_format, 'bin')}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["features"] = list(self.features)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelVersion:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["features"] = tuple(values.get("features", ()))
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Champion:
    """The champion pointer: which version serves, since when, and which served before."""

    version: str
    switched_at: str
    previous: str | None


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
        """Open the store at a local folder or ``s3://`` URI (options go to ``BlobDir.from_uri``)."""
        return cls(BlobDir.from_uri(uri, **storage_options), trusted_types=trusted_types)

    @property
    def uri(self) -> str:
        return self.blobs.uri

    def save(self, meta: ModelVersion, model: bytes) -> ModelVersion:
        """Write a new version: the model file first, the metadata (with the model's checksum) last."""
        if meta.status not in STATUSES:
            raise ConfigurationError(f"status {meta.status!r} is not one of {', '.join(STATUSES)}")
        if not meta.version or "/" in meta.version or meta.version.startswith("."):
            raise ConfigurationError(f"version id {meta.version!r} is not a plain name: use new_version_id()")
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
        self.blobs.write_bytes(f"{folder}/{stored.model_file}", model)
        self.blobs.write_bytes(f"{folder}/metadata.json", _json(stored.to_dict()))
        log.info(
            "saved model version %s (%s, %s) to %s", stored.version, stored.mode, stored.status, self.uri
        )
        return stored

    def save_files(self, meta: ModelVersion, staging: str) -> ModelVersion:
        """Write a new version whose model is the folder of files staged at ``staging`` (inside this store).

        ``model_format`` becomes ``files``; the metadata is written after every file (see
        :func:`costaware.adapters.model_files.save_files_version`).
        """
        from costaware.adapters.model_files import save_files_version

        return save_files_version(self, meta, staging)

    def version_files(self, meta: ModelVersion) -> list[dict[str, Any]]:
        """The files of a ``files`` version: ``path``, ``bytes`` and ``sha256`` each."""
        from costaware.adapters.model_files import version_files

        return version_files(self, meta)

    def download_files(self, meta: ModelVersion, destination: Path) -> Path:
        """Copy the files of a ``files`` version into ``destination``, each checked against its SHA-256."""
        from costaware.adapters.model_files import download_files

        return download_files(self, meta, destination)

    def get(self, version: str) -> ModelVersion:
        """Metadata of ``version``."""
        folder = f"versions/{version}"
        try:
            raw = self.blobs.read_bytes(f"{folder}/metadata.json")
        except FileNotFoundError:
            if version and self.blobs.list(folder):
                raise IncompleteVersionError(
                    f"version {version!r} in {self.uri} has no metadata: its write did not finish; "
                    "it is never used"
                ) from None
            raise VersionNotFoundError(
                f"model version {version!r} is not in {self.uri}: pick one of {self.version_ids()[-5:]}"
            ) from None
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

    def set_champion(self, version: str) -> Champion:
        """Make ``version`` the champion in one atomic write; only complete versions qualify."""
        meta = self.get(version)
        if meta.status != COMPLETE:
            raise ConfigurationError(
                f"version {version!r} has status {meta.status!r}: only complete versions can become champion"
            )
        current = self.champion_pointer()
        pointer = Champion(
            version=version,
            switched_at=datetime.now(timezone.utc).isoformat(),
            previous=current.version if current else None,
        )
        self.blobs.write_bytes("champion.json", _json(asdict(pointer)))
        log.info("champion of %s is now %s (was %s)", self.uri, version, pointer.previous)
        return pointer

    def record_decision(self, decision: Mapping[str, Any]) -> str:
        """Store one promotion decision (JSON-able); returns its name."""
        name = f"{new_version_id()[1:]}.json"
        self.blobs.write_bytes(f"decisions/{name}", _json(dict(decision)))
        return name

    def decisions(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Recorded decisions, oldest first (the last ``limit`` ones)."""
        names = self.blobs.list("decisions")
        if limit is not None:
            names = names[-limit:] if limit > 0 else []
        return [json.loads(self.blobs.read_bytes(f"decisions/{n}")) for n in names]

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


def _json(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, indent=2, sort_keys=True, default=str).encode()
