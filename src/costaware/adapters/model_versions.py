"""Model versions: their metadata, ids and statuses, the champion pointer, and what can be wrong with one.

Values only; :class:`costaware.adapters.model_store.ModelStore` reads and writes them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from costaware.core.errors import ConfigurationError, CostawareError
from costaware.core.promotion import COMPLETE

#: File suffix of each model format. A ``files`` version's model file is the listing of its files
#: (``costaware.adapters.model_files``).
MODEL_SUFFIXES = {"skops": "skops", "xgboost-ubj": "ubj", "lightgbm-txt": "txt", "files": "json"}
STATUSES = (COMPLETE, "interrupted", "failed")
#: ``ModelVersion.label_threshold`` of a version stored before versions recorded it: its label may have been
#: any threshold's, so no run's label counts as the same.
UNRECORDED: Literal["unrecorded"] = "unrecorded"


class ModelStoreError(CostawareError):
    """Raised when the model store holds something unusable (a missing, incomplete or tampered version)."""


class ChampionChangedError(ModelStoreError):
    """Raised when the champion changed while a candidate was scored against it; a retry scores again."""


class VersionNotFoundError(ModelStoreError, ConfigurationError, LookupError):
    """Raised when a model version is not in the store."""


class IncompleteVersionError(ModelStoreError, ConfigurationError):
    """Raised when a version's files are there but its metadata is not: its write never finished."""


class UntrustedModelError(ModelStoreError, ConfigurationError):
    """Raised when a model file does not match its checksum or would load types nobody trusted."""


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
        label_threshold: The label was ``label > label_threshold``; None: the column's own 0/1 values;
            ``UNRECORDED`` (read back from a version stored before the threshold was recorded): not known.
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
    label_threshold: float | Literal["unrecorded"] | None = None
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
        # Absent, not None: the version was stored before the threshold was, whatever its label was made of.
        values.setdefault("label_threshold", UNRECORDED)
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Champion:
    """The champion pointer: which version serves, since when, and which served before."""

    version: str
    switched_at: str
    previous: str | None
