"""Training data: Parquet files read with a fingerprint, and the features and 0/1 label a trainer takes.

``run_retrain`` reads its data here, promotion's holdout scoring its holdout, the data quality gate its batch.
pandas and pyarrow are imported where used.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from costaware.adapters.blob_dir import BlobDir
from costaware.core.errors import ConfigurationError
from costaware.training.trainers import TrainingData

log = logging.getLogger(__name__)


def read_parquet(
    uri: str,
    columns: Sequence[str] | None,
    storage_options: Mapping[str, Any] | None = None,
    *,
    columns_from: str = "feature_columns/label_column",
    what: str = "data_path",
) -> tuple[Any, str]:
    """Read ``columns`` (None: all) of one Parquet file or every ``*.parquet`` under a folder (local or S3).

    ``columns_from``: the argument(s) the columns came from, for the message when one is missing.
    ``what``: the argument ``uri`` came from (``holdout_path``), named when the location is refused.

    Returns the DataFrame and a fingerprint: SHA-256 over each file's relative name and content.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyarrow import fs

    blobs = BlobDir.from_uri(uri, create=False, what=what, **dict(storage_options or {}))
    info = blobs.fs.get_file_info(blobs.root)
    if info.type == fs.FileType.File:
        paths = [blobs.root]
        base = blobs.root.rsplit("/", 1)[0]
    elif info.type == fs.FileType.Directory:
        selector = fs.FileSelector(blobs.root, recursive=True)
        files = [
            i
            for i in blobs.fs.get_file_info(selector)
            if i.type == fs.FileType.File and not i.base_name.startswith((".", "_"))
        ]
        paths = sorted(i.path for i in files if i.path.endswith(".parquet"))
        others = sorted(i.path for i in files if not i.path.endswith(".parquet"))
        if others:
            # Said, not silent: a day landed as CSV beside Parquet days would be left out of the training.
            log.warning(
                "%d file(s) under %s are not .parquet and are not read: %s; convert them to Parquet",
                len(others),
                uri,
                ", ".join(others[:5]) + (", ..." if len(others) > 5 else ""),
            )
        base = blobs.root
    else:
        raise ConfigurationError(f"data {uri!r} does not exist: check the path (a Parquet file or folder)")
    if not paths:
        raise ConfigurationError(f"no .parquet files under {uri!r}: land the data first or fix the path")
    digest = hashlib.sha256()
    tables = []
    for path in paths:
        with blobs.fs.open_input_stream(path) as stream:
            # Arrow-owned memory, not Python bytes: a BufferReader over bytes leaves Arrow's reader threads
            # holding a Python object, and one released during interpreter shutdown aborts the process
            # (SIGABRT after a clean error exit, seen under load).
            raw = stream.read_buffer()
        digest.update(path[len(base) :].encode() + b"\0" + hashlib.sha256(raw).digest())
        try:
            table = pq.read_table(pa.BufferReader(raw))
        except (pa.ArrowInvalid, OSError) as e:
            what = "is empty (0 bytes)" if not raw.size else f"is not a Parquet file ({e})"
            raise ConfigurationError(
                f"{path} {what}: the data must be Parquet; write it with pandas' DataFrame.to_parquet, "
                "or fix the path"
            ) from e
        if columns is None:
            tables.append(table)
            continue
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            raise ConfigurationError(
                f"columns {missing} are not in {path} (it has {table.column_names}): fix {columns_from}"
            )
        tables.append(table.select(list(columns)))
    frame = pa.concat_tables(tables, promote_options="permissive").to_pandas()
    return frame, digest.hexdigest()


def training_data(
    frame: Any, features: Sequence[str], label: str, label_threshold: float | None
) -> TrainingData:
    """Features and a 0/1 label; rows without a label are dropped (e.g. cancelled flights)."""
    import numpy as np
    import pandas as pd

    if not len(frame):
        raise ConfigurationError("the data has no rows: nothing to train or evaluate on; land a batch first")
    known = frame[frame[label].notna()]
    if len(known) < len(frame):
        log.info("dropped %d rows without a value in label column %r", len(frame) - len(known), label)
    if not len(known):
        raise ConfigurationError(
            f"no rows with a value in label column {label!r}: nothing to train or evaluate on"
        )
    values = known[label]
    if label_threshold is not None:
        y = (pd.to_numeric(values, errors="raise") > float(label_threshold)).astype(int).to_numpy()
    else:
        try:
            seen = set(pd.unique(values.astype(float)))
        except (TypeError, ValueError):
            shown = [str(v) for v in pd.unique(values)[:5]]
            raise ConfigurationError(
                f"label column {label!r} has values {shown}, not 0/1 numbers: give a 0/1 label column "
                "(or a number with label_threshold)"
            ) from None
        if not seen <= {0.0, 1.0}:
            raise ConfigurationError(
                f"label column {label!r} has values {[float(v) for v in sorted(seen)[:5]]}, not 0/1: "
                "set label_threshold or fix the label"
            )
        y = values.astype(float).astype(int).to_numpy()
    return TrainingData(features=known[list(features)].reset_index(drop=True), label=np.asarray(y))
