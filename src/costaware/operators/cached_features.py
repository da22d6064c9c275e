"""``CachedFeaturesOperator``: build features once; reuse them until the data, code or parameters change.

The checks of its inputs and settings, and the inputs' fingerprints, are in :mod:`.cached_features_inputs`;
its ``partial(...)`` in :mod:`.cached_features_mapping`; what it records and returns in
:mod:`.cached_features_ledger`.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import BaseOperator
from airflow.sdk.definitions.mappedoperator import OperatorPartial

from costaware.core.given import blank
from costaware.glue import (
    DEFAULT_AWS_CONN_ID,
    DEFAULT_LEDGER_CONN_ID,
    airflow_errors,
    check_tags,
    run_identity,
    run_tags,
)
from costaware.operators.base_partial import OnTheClassOnly, WarnsOfDroppedDefaultArgs
from costaware.operators.cached_features_inputs import (
    _asset_uri,
    _check_inputs,
    _check_installed,
    _library_names,
    check_settings,
    default_store_uri,
    fingerprint_inputs,
)
from costaware.operators.cached_features_ledger import ledger_entry, report
from costaware.operators.cached_features_mapping import _FeaturesPartial
from costaware.operators.templating import is_literal

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.adapters.feature_manifest import Computed
    from costaware.adapters.object_store import S3Options


class _LeftOut(enum.Enum):
    """The default of ``store_uri``: told apart from a None a mapped task's element gives ``__init__``."""

    LEFT_OUT = "left out"


class CachedFeaturesOperator(WarnsOfDroppedDefaultArgs, BaseOperator):
    """Build features with a transform, or reuse the stored result when nothing it depends on changed.

    See docs/data-path.md.

    The cache key is a fingerprint of: every input (size, mtime / ETag, or content), the transform's
    source and the sources of the project modules it uses (or ``version``), its parameters, and the
    versions of pandas and pyarrow. On a hit the stored Parquet's URI is returned at once and the avoided
    cost is written to the ledger; on a miss the transform runs, its result is committed atomically, and its
    cost is written to the ledger. Two runs asking for the same key at once compute it once.

    The transform is a plain function ``transform(inputs, **transform_params) -> pandas.DataFrame`` where
    ``inputs`` maps each input name to a ``pandas.DataFrame`` (read with pyarrow from Parquet or CSV), or
    to its URI string when ``pass_paths=True``. It may also return a ``pyarrow.Table``.

    Returns (XCom): ``{"uri", "key", "hit", "rows", "bytes", "created_at", "producer", "cost_usd",
    "avoided_usd"}``; money as strings.

    Args:
        transform: The feature transform (see above).
        inputs: Input name to a local path, ``s3://`` URI or Airflow Asset (templated).
        transform_params: Keyword arguments of the transform; part of the key (templated).
        store_uri: Where entries live: an absolute folder or ``s3://bucket/prefix`` (templated; one
            written out or rendered empty, ``None`` or ``null`` names no store and is refused, as
            ``model_store`` is; so is a ``None`` element of ``.expand(store_uri=...)``, or ``store_uri=None``
            in an element of ``.expand_kwargs([...])``: of a list written out when the DAG is parsed, as
            ``None`` in ``.partial(...)`` is, of an XComArg as the task runs);
            left out (or ``None`` written out in a task of its own, or given by ``default_args``, mapped
            copies too), ``$COSTAWARE_FEATURE_CACHE`` or ``$AIRFLOW_HOME/costaware/features``.
        version: Key the code by this string instead of by its source (templated; one rendered empty,
            ``None`` or ``null`` is not given).
        pass_paths: Hand the transform URIs instead of DataFrames (for transforms that read lazily).
        fingerprint_mode: ``auto`` (metadata; content where metadata cannot be trusted), ``metadata``
            or ``content``.
        libraries: Libraries whose versions are part of the key.
        aws_conn_id: Airflow AWS connection for S3 inputs and an S3 store (default ``aws_default``; when that
            connection does not exist, or with ``None``, the SDKs' default credential chain).
        ledger_conn_id: Airflow connection of the cost ledger.
        instance_type: Instance type the transform runs on (templated; one rendered empty, ``None`` or
            ``null`` is not given). A miss is priced as the cost listener bills the try: on this, else the
            task's ``costaware_compute`` param's, else ``[costaware] worker_instance_type``.
        region: Region of that instance (templated; one rendered empty, ``None`` or ``null`` is not given);
            default the param's, else ``[costaware] worker_region``.
        usd_per_hour: Price of the worker per hour, when it is not a catalog instance (templated; one
            rendered empty, ``None`` or ``null`` is not given); default the param's, else the price of the
            instance type.
        tags: Allocation tags (team, project, owner) of the ledger entries.
        wait_timeout_seconds: How long to wait for another run computing the same key.
        bill_storage: Record the cache's storage cost (kind ``storage``) up to the current hour.
        storage_usd_per_gb_month: Storage price; default S3 Standard.
    """

    # The cost listener prices this task's tries on its instance_type/region/market/usd_per_hour.
    cost_compute_from_arguments = True

    template_fields: Sequence[str] = (
        "inputs",
        "transform_params",
        "store_uri",
        "version",
        "instance_type",
        "region",
        "usd_per_hour",
        "ledger_conn_id",
    )
    template_fields_renderers = {"inputs": "json", "transform_params": "json"}
    ui_color = "#e3f2fd"

    def __init__(
        self,
        *,
        transform: Callable[..., Any],
        inputs: Mapping[str, Any],
        transform_params: Mapping[str, Any] | None = None,
        store_uri: str | Literal[_LeftOut.LEFT_OUT] | None = _LeftOut.LEFT_OUT,
        version: str | None = None,
        pass_paths: bool = False,
        fingerprint_mode: str = "auto",
        libraries: Sequence[str] = ("pandas", "pyarrow"),
        aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        instance_type: str | None = None,
        region: str | None = None,
        usd_per_hour: str | None = None,
        tags: Mapping[str, str] | None = None,
        wait_timeout_seconds: float = 7200,
        bill_storage: bool = True,
        storage_usd_per_gb_month: str = "0.023",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not callable(transform):
            from costaware.core.errors import ConfigurationError

            # A dotted path ("features.build") failed only as the task ran, as "'str' object is not callable".
            raise ConfigurationError(
                f"transform must be a function (inputs, **transform_params) -> DataFrame, got "
                f"{type(transform).__name__} {transform!r}: import it in the DAG file and pass it"
            )
        self.transform = transform
        if isinstance(inputs, Mapping) or is_literal(inputs):  # an XComArg or a template: once rendered
            _check_inputs(inputs)
        self.inputs = inputs
        self.transform_params = transform_params or {}
        # A template or XComArg rendered to None (render_template_as_native_obj, a param left unset) is not
        # store_uri left out: kept to tell them apart once rendered. Nor is the None a mapped task's element
        # gives (.expand(store_uri=...)): Airflow builds each mapped copy with it through __init__, where
        # it went to the worker's default cache. None written out in the DAG, or given by default_args,
        # reads as left out (in .partial() it is refused when parsed, see partial).
        self._store_uri_left_out = store_uri is _LeftOut.LEFT_OUT or (
            store_uri is None and not self._none_from_a_mapped_element()
        )
        self.store_uri: str | None = None if store_uri is _LeftOut.LEFT_OUT else store_uri
        self.version = version
        self.pass_paths = pass_paths
        self.fingerprint_mode = fingerprint_mode
        self.libraries = _library_names(libraries)
        self.aws_conn_id = aws_conn_id
        self.ledger_conn_id = ledger_conn_id
        self.instance_type = instance_type
        self.region = region
        self.usd_per_hour = usd_per_hour
        self.tags = check_tags(tags or {}, owner=f"{type(self).__name__} {self.task_id!r}")
        from costaware.core.tuning.caps import positive_number

        # "2h" failed the run with a bare TypeError, a negative wait gave up on another writer at once.
        self.wait_timeout_seconds = positive_number(
            wait_timeout_seconds, "wait_timeout_seconds", unit="seconds"
        )
        self.bill_storage = bill_storage
        self.storage_usd_per_gb_month = storage_usd_per_gb_month
        check_settings(self, rendered=False)

    @property
    def store_uri_left_out(self) -> bool:
        """Whether ``store_uri`` was left out (the default cache), not given None by a template or element."""
        return self._store_uri_left_out

    @classmethod
    def _partial_refusing_no_store(cls, **kwargs: Any) -> OperatorPartial:
        """Airflow's ``partial``, refusing ``store_uri=None`` written out when the DAG is parsed.

        Each mapped copy is built with the ``partial`` arguments, so the None reached ``__init__`` as an
        element's does, and each copy was refused only as it ran. Its ``expand`` refuses a ``None`` in a
        literal ``store_uri`` list (see :class:`_FeaturesPartial`).

        Raises:
            ConfigurationError: ``store_uri=None``, with what to write instead.
        """
        if "store_uri" in kwargs and kwargs["store_uri"] is None:
            from costaware.core.errors import ConfigurationError

            raise ConfigurationError(
                f"task {kwargs.get('task_id')!r}: store_uri=None in {cls.__name__}.partial(...) names no "
                "store: leave store_uri out of .partial() for the default cache ($COSTAWARE_FEATURE_CACHE or "
                "$AIRFLOW_HOME/costaware/features), or give a location"
            )
        partial = super().partial(**kwargs)  # warns of arguments Airflow drops (WarnsOfDroppedDefaultArgs)
        # Recast, not rebuilt: a second OperatorPartial would validate the arguments again, and the one
        # left unexpanded warn "was never mapped" when collected.
        partial.__class__ = _FeaturesPartial
        return partial

    partial = OnTheClassOnly("_partial_refusing_no_store")

    def _a_mapped_copy(self) -> bool:
        """Whether Airflow built this task as one copy of a mapped task (``.partial(...).expand(...)``).

        Through public API: the DAG keeps the ``MappedOperator`` under the task's id and does not take the
        copies ``MappedOperator.unmap`` builds, so a copy is not its DAG's task of its id. (No public flag
        says it: the SDK passes ``_airflow_from_mapped`` into ``__init__`` as the private
        ``_BaseOperator__from_mapped``.) A task outside any DAG is no mapped copy.
        """
        return self.has_dag() and self.dag.task_dict.get(self.task_id) is not self

    def _none_from_a_mapped_element(self) -> bool:
        """Whether this task's ``store_uri=None`` is an element of its mapped task's, not left out.

        A mapped copy is built with its element and also with the DAG's (and task group's) default_args,
        where ``store_uri=None`` reads as left out in a task of its own: a copy of a task that maps no
        store_uri refused it as each copy ran.
        """
        if not self._a_mapped_copy():
            return False
        mapped = self.dag.task_dict.get(self.task_id)
        expanded = getattr(getattr(mapped, "expand_input", None), "value", None)
        if isinstance(expanded, Mapping):  # .expand(...): the arguments it maps are known when parsed
            return "store_uri" in expanded
        # .expand_kwargs(...): which arguments an element gives is known only as it runs. Where the
        # default_args give store_uri=None, an element's None cannot be told from theirs: both are left out.
        defaults = dict(self.dag.default_args or {})
        defaults.update(getattr(self.task_group, "default_args", None) or {})
        return defaults.get("store_uri", _LeftOut.LEFT_OUT) is not None

    def _billed_rate(self, compute: Mapping[str, Any], tags: Mapping[str, str]) -> Decimal:
        """The rate per hour of ``compute`` (where this try runs: ``compute_of``), as the listener bills it.

        Asked before the look-up, so that a miss is priced before the cache or its transform is touched; a
        refusal then fails only a miss: a hit pays nothing here (its avoided cost is the cache entry's), so a
        worker type nobody can price does not stop a task that reuses its features (it is warned).

        A miss is priced at the bill's rate (:mod:`costaware.try_pricing`), so the cache's cost, and a later
        hit's avoided cost, are what the try cost: with no ``instance_type`` or ``region``, the worker's
        (``[costaware] worker_*``). A reading of its own recorded such a miss at $0 while the bill priced
        the try on the worker's m5.large, and refused a type without ``region=`` that the bill priced.

        Raises:
            ConfigurationError: the compute cannot be priced (an unknown type, a ``costaware_compute``
                param's market that is no market), before the transform runs; the bill would record the
                try at $0.
        """
        from costaware.core.errors import ConfigurationError
        from costaware.core.ledger import Market
        from costaware.try_pricing import PRICING_PARAM, charge_of, unpriced

        try:
            return charge_of(compute, tags, self.ledger_conn_id, seconds=3600).usd_per_hour
        except ConfigurationError as e:
            if str(compute["market"]).strip().lower() == Market.LOCAL.value:
                # The team's own hardware with no rate of its own: the bill records the try at $0 (unpriced).
                self.log.warning("misses are recorded at $0, as the try is billed: %s", e)
                return Decimal(0)
            raise unpriced(
                e,
                compute,
                task_id=self.task_id,
                source=f"; from its instance_type, region, usd_per_hour, its {PRICING_PARAM} param, else the "
                "[costaware] worker_* settings",
                so="neither its bill nor the cache's cost would be right",
            ) from e

    def _compute(self, options: S3Options, price: Callable[[], Decimal]) -> Callable[[], Computed]:
        import pandas as pd
        import pyarrow as pa

        from costaware.adapters.feature_manifest import Computed, to_parquet
        from costaware.adapters.input_data import read_frame
        from costaware.core.errors import ConfigurationError
        from costaware.core.ledger import compute_cost

        def run() -> Computed:
            usd_per_hour = price()  # refuses a compute the bill cannot price, before the transform runs
            started = time.monotonic()
            loaded = {
                name: _asset_uri(value) if self.pass_paths else read_frame(_asset_uri(value), options)
                for name, value in self.inputs.items()
            }
            result = self.transform(loaded, **self.transform_params)
            if not isinstance(result, (pd.DataFrame, pa.Table)):
                raise ConfigurationError(
                    f"transform {getattr(self.transform, '__qualname__', self.transform)!r} returned "
                    f"{type(result).__name__}: it must return a pandas.DataFrame or a pyarrow.Table"
                )
            parquet, schema, rows = to_parquet(result)
            seconds = time.monotonic() - started
            return Computed(parquet, schema, rows, seconds, compute_cost(seconds, usd_per_hour)[1])

        return run

    def execute(self, context: Context) -> dict[str, Any]:
        """Fingerprint, then reuse or compute the features; record the cost in the ledger."""
        from datetime import timedelta

        from costaware.adapters.feature_manifest import Manifest
        from costaware.adapters.feature_store import FeatureStore
        from costaware.core.fingerprint import cache_key, canonical_params, code_fingerprint, library_versions
        from costaware.hooks.aws import s3_options
        from costaware.hooks.ledger import CostLedgerHook

        who = {**run_identity(context, self.task_id), "tags": run_tags(self, context, self.tags)}
        with airflow_errors():
            _check_inputs(self.inputs)
            check_settings(self, rendered=True)
            options = s3_options(self.aws_conn_id)
            fingerprints = fingerprint_inputs(self.inputs, context, options, self.fingerprint_mode)
            # "None": a template of a param left blank. Kept as a version, it keyed every later edit of the
            # transform as the same code, and the stale features were reused; keyed by the source instead.
            version = blank(self.version)
            if version is None and self.version is not None:
                self.log.info("version rendered %r: the code is keyed by its source", self.version)
            code = code_fingerprint(self.transform, version=version)
            libraries = library_versions(self.libraries)
            _check_installed(libraries)
            key = cache_key(fingerprints, code, self.transform_params, libraries)
            # One naming nothing ("None") was refused by check_settings: only one left out is the default.
            store = FeatureStore(
                default_store_uri() if self.store_uri is None else self.store_uri, s3=options
            )
            template = Manifest(
                key=key,
                data_path="",
                data_hash="",
                schema=[],
                rows=0,
                bytes=0,
                created_at="",
                producer={k: who[k] for k in ("dag_id", "run_id", "task_id")},
                inputs=[f.to_dict() for f in fingerprints],
                code_parts=list(code.parts),
                params=canonical_params(self.transform_params),
                libraries=libraries,
            )
            from costaware.try_pricing import compute_of

            compute = compute_of(self)
            from costaware.core.errors import ConfigurationError

            rate: Decimal | None = None  # a miss's rate, priced before the cache or its transform is touched
            unpriced: Exception | None = None
            try:
                rate = self._billed_rate(compute, who["tags"])
            except ConfigurationError as e:
                if store.lookup(key) is None:
                    raise
                # A hit pays nothing here (its avoided cost is the entry's): warned, not failed.
                self.log.warning("the features are reused; this task's own compute is unpriced: %s", e)
                unpriced = e

            def miss_rate() -> Decimal:
                if rate is None:  # the entry went (evicted) between the look-up and the read: a miss
                    raise unpriced or ConfigurationError("the miss has no rate")
                return rate

            outcome = store.get_or_compute(
                key,
                self._compute(options, miss_rate),
                template,
                wait_timeout=timedelta(seconds=self.wait_timeout_seconds),
            )
            ledger = CostLedgerHook(self.ledger_conn_id).get_conn()
            entry = ledger_entry(outcome, who, compute, rate, self.log)
            if outcome.hit:
                ledger.record(entry)  # the avoided cost, as an estimate
            # A miss's compute is this try's runtime, which the cost listener prices like any task's;
            # recording it here too would count it twice. The listener's entry carries the note and tags.
            from costaware.glue import annotate_task

            annotate_task(context["ti"], note=entry.note, tags=self.tags)
            if self.bill_storage:
                from costaware.core.money import parse_usd

                price = parse_usd(self.storage_usd_per_gb_month, name="storage_usd_per_gb_month")
                store.bill_storage(ledger.record, usd_per_gb_month=price, tags=self.tags)
        return report(outcome)
