"""Model outcomes next to their cost: what each retrain run produced, and what a better model cost.

A run outcome holds the model version a retrain produced, its holdout metric and the champion's, whether
it was promoted, how much it trained on (rows, epochs or boosting rounds), and the run's reproducibility
record (data fingerprint, code version, trainer parameters and seeds). The ledger adds the run's cost.
Pure: storage is in ``costaware.adapters.ledger.efficiency``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.money import MICRO_USD
from costaware.core.promotion import higher_is_better

#: A gain below this share of the figures compared is float noise, not a gain: it gets no per-unit figure
#: (a gain of 5.6e-17 from 0.1 + 0.2 against 0.3 read as $9e16 per unit).
_GAIN_REL_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class ReproRecord:
    """What it takes to retrain the same model: the data, the code, the parameters and the seeds.

    Args:
        data_fingerprint: SHA-256 over the training data files the trainer read.
        features_key: The feature cache's key of the features (input data, transform code, parameters).
        package_version: Version of ``airflow-provider-costaware`` that trained.
        dag_file_sha256: SHA-256 of the DAG file (empty when unknown).
        trainer: Trainer name or class path.
        trainer_params: The trainer's parameters as given.
        seeds: Every seed the trainer uses, by name.
        mode: ``warm`` or ``full``.
        parent: Version a warm start continued from (None for a full retrain).
        libraries: Versions of the libraries that shape the model.
        metrics: The metrics a team's own training command reported (``costaware runs show`` lists them
            with the record). What the run produced, not how: not part of :attr:`digest`.
    """

    data_fingerprint: str
    features_key: str = ""
    package_version: str = ""
    dag_file_sha256: str = ""
    trainer: str = ""
    trainer_params: Mapping[str, Any] = field(default_factory=dict)
    seeds: Mapping[str, int] = field(default_factory=dict)
    mode: str = ""
    parent: str | None = None
    libraries: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = self._inputs()
        if self.metrics:  # records of the built-in trainers keep the shape (and digest) they always had
            out["metrics"] = dict(self.metrics)
        return out

    def _inputs(self) -> dict[str, Any]:
        return {
            "data_fingerprint": self.data_fingerprint,
            "features_key": self.features_key,
            "package_version": self.package_version,
            "dag_file_sha256": self.dag_file_sha256,
            "trainer": self.trainer,
            "trainer_params": json.loads(json.dumps(dict(self.trainer_params), sort_keys=True, default=str)),
            "seeds": dict(self.seeds),
            "mode": self.mode,
            "parent": self.parent,
            "libraries": dict(self.libraries),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReproRecord:
        known = {name: data[name] for name in cls.__slots__ if name in data}
        return cls(**known)

    @property
    def digest(self) -> str:
        """SHA-256 of the record: two runs with the same digest trained the same way on the same data."""
        return hashlib.sha256(json.dumps(self._inputs(), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What one retrain run produced, and (from the ledger) what the run cost.

    Args:
        dag_id: The run's DAG.
        run_id: The run.
        model_version: Version the retrain stored.
        task_id: The retrain task.
        metric: Holdout metric name (empty until a promotion step scored it).
        metric_value: The candidate's holdout metric.
        champion_metric: The previous champion's metric on the same holdout (None: there was none).
        promoted: Whether the candidate replaced the champion (None: not judged yet).
        training_rows: Rows trained on.
        iterations: Epochs (SGD) or boosting rounds the training ran.
        iteration_unit: ``epochs`` or ``rounds``.
        record: The reproducibility record.
        recorded_at: When the retrain finished.
        usd: The run's actual cost from the ledger (None: not looked up).
    """

    dag_id: str
    run_id: str
    model_version: str
    task_id: str = ""
    metric: str = ""
    metric_value: float | None = None
    champion_metric: float | None = None
    promoted: bool | None = None
    training_rows: int = 0
    iterations: int = 0
    iteration_unit: str = "epochs"
    record: ReproRecord | None = None
    recorded_at: datetime | None = None
    usd: Decimal | None = None

    @property
    def gain(self) -> float | None:
        """How much better than the champion the candidate scored (positive: better), in metric units."""
        if not self.metric or self.metric_value is None or self.champion_metric is None:
            return None
        if math.isnan(self.metric_value) or math.isnan(self.champion_metric):
            return None
        try:
            better_high = higher_is_better(self.metric)
        except ConfigurationError:  # a team's own metric: the ledger keeps its name, not its direction
            return None
        delta = self.metric_value - self.champion_metric
        return delta if better_high else -delta

    @property
    def counted_gain(self) -> float | None:
        """The gain when it is one: above float noise (0.1 + 0.2 against 0.3) relative to the figures."""
        gain = self.gain
        if gain is None or self.metric_value is None or self.champion_metric is None:
            return None
        noise = _GAIN_REL_EPS * max(abs(self.metric_value), abs(self.champion_metric))
        return gain if gain > noise else None

    @property
    def usd_per_unit_gain(self) -> Decimal | None:
        """USD this run paid per unit of metric gained over the previous champion (promoted runs only)."""
        gain = self.counted_gain
        if not self.promoted or self.usd is None or gain is None:
            return None
        return _usd_per_unit(self.usd, gain)

    def to_json(self) -> dict[str, Any]:
        """The outcome as JSON primitives (money as strings), as the CLI and the Cost page's API give it."""
        return {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "model_version": self.model_version,
            "task_id": self.task_id,
            "metric": self.metric,
            "metric_value": self.metric_value,
            "champion_metric": self.champion_metric,
            "gain": self.gain,
            "promoted": self.promoted,
            "training_rows": self.training_rows,
            "iterations": self.iterations,
            "iteration_unit": self.iteration_unit,
            "usd": None if self.usd is None else str(self.usd),
            "usd_per_unit_gain": None if self.usd_per_unit_gain is None else str(self.usd_per_unit_gain),
            "recorded_at": self.recorded_at.isoformat() if self.recorded_at else None,
            "record": self.record.to_json() if self.record else None,
            "record_digest": self.record.digest if self.record else None,
        }


@dataclass(frozen=True, slots=True)
class OutcomeSummary:
    """Cost of the runs against what they produced."""

    runs: int
    promoted: int
    usd: Decimal
    per_run_usd: Decimal | None
    per_promoted_usd: Decimal | None
    usd_per_unit_gain: Decimal | None
    metric: str

    def to_json(self) -> dict[str, Any]:
        def text(value: Decimal | None) -> str | None:
            return None if value is None else str(value)

        return {
            "runs": self.runs,
            "promoted": self.promoted,
            "usd": str(self.usd),
            "per_run_usd": text(self.per_run_usd),
            "per_promoted_usd": text(self.per_promoted_usd),
            "usd_per_unit_gain": text(self.usd_per_unit_gain),
            "metric": self.metric,
        }


def summarize(outcomes: Sequence[RunOutcome]) -> OutcomeSummary:
    """Cost per run, per promoted model, and per unit of metric gained over the previous champions.

    A run is one (DAG, run id), however many model versions it recorded; ``promoted`` counts models.

    The cost per unit gained divides everything the runs cost (those not promoted included: they bought the
    gain too) by the sum of the gains of the promoted runs.

    Raises:
        ConfigurationError: outcomes scored with different metrics (their gains do not add up).
    """
    metrics = {o.metric for o in outcomes if o.metric}
    if len(metrics) > 1:
        raise ConfigurationError(
            f"outcomes use several metrics {sorted(metrics)}: summarize one DAG at a time"
        )
    # One run can record several model versions (a tuning run's trials), each carrying the run's whole
    # cost: the run is counted, and its cost added, once.
    run_usd: dict[tuple[str, str], Decimal | None] = {}
    for o in outcomes:
        if run_usd.get((o.dag_id, o.run_id)) is None:
            run_usd[(o.dag_id, o.run_id)] = o.usd
    priced = [usd for usd in run_usd.values() if usd is not None]
    usd = sum(priced, Decimal(0))
    promoted = [o for o in outcomes if o.promoted]
    gained = [o for o in promoted if o.usd is not None and o.counted_gain is not None]
    total_gain = sum(o.counted_gain or 0.0 for o in gained)
    return OutcomeSummary(
        runs=len(run_usd),
        promoted=len(promoted),
        usd=usd,
        per_run_usd=(usd / len(priced)).quantize(MICRO_USD) if priced else None,
        per_promoted_usd=(usd / len(promoted)).quantize(MICRO_USD) if promoted and priced else None,
        usd_per_unit_gain=_usd_per_unit(usd, total_gain) if gained else None,
        metric=next(iter(metrics), ""),
    )


def _usd_per_unit(usd: Decimal, gain: float) -> Decimal | None:
    try:
        return (usd / Decimal(str(gain))).quantize(MICRO_USD)
    except InvalidOperation:  # past Decimal's 28 digits (a gain of 1e-27): no figure that says anything
        return None
