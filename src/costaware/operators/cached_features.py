"""``CachedFeaturesOperator``: build features once; reuse them until the data, code or parameters change."""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import BaseOperator
from airflow.sdk.definitions.mappedoperator import OperatorPartial

from costaware.core.given import blank, names_nothing, not_given
from costaware.glue import (
    DEFAULT_AWS_CONN_ID,
    DEFAULT_LEDGER_CONN_ID,
    airflow_errors,
    check_tags,
    run_identity,
    run_tags,
)
from costaware.operators.base_partial import OnTheClassOnly, WarnsOfDroppedDefaultArgs
from costaware.operators.templating import is_literal, refuse_root_store
from costaware.settings import feature_cache

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    from costaware.adapters.feature_manifest import Computed, Outcome
    from costaware.adapters.object_store import S3Options
    from costaware.core.fingerprint import InputFingerprint


class _LeftOut(enum.Enum):
    """The default of ``store_uri``: told apart from a None a mapped task's element gives ``__init__``."""

    LEFT_OUT = "left out"


def default_store_uri() -> str:
    """``$COSTAWARE_FEATURE_CACHE``, else ``$AIRFLOW_HOME/costaware/features``."""
    return feature_cache()


def _in_a_home(value: object) -> bool:
    """Whether ``value`` is a local path (or ``file:`` URI) under a home folder, ``~`` or ``~user``."""
    text = str(value).strip() if isinstance(value, str) else ""
    return text.removeprefix("file:").startswith("~")


def _asset_uri(value: Any) -> str:
    """An input's URI: Airflow Assets by their ``uri``, strings as they are."""
    uri = getattr(value, "uri", value)
    if not isinstance(uri, str) or not uri:
        raise ValueError(f"input {value!r} is neither a URI string nor an Airflow Asset")
    return uri


def _check_inputs(inputs: Any) -> None:
    """Refuse ``inputs`` that are not ``{name: URI or Asset}`` (a list raised a bare AttributeError)."""
    from costaware.core.errors import ConfigurationError

    if not isinstance(inputs, Mapping) or not inputs:
        raise ConfigurationError(
            f"inputs must be a non-empty {{name: URI or Asset}} (the transform gets them by name), got "
            f"{inputs!r}: e.g. {{'flights': 's3://bucket/flights/'}}"
        )


def _library_names(libraries: Any) -> tuple[str, ...]:
    """``libraries`` as package names; one name given as text was read letter by letter."""
    from costaware.core.errors import ConfigurationError

    if isinstance(libraries, str) or not all(isinstance(name, str) and name for name in libraries):
        raise ConfigurationError(
            f"libraries must be a list of package names, e.g. ['pandas', 'pyarrow'], got {libraries!r}"
        )
    return tuple(libraries)


def _check_installed(versions: Mapping[str, str]) -> None:
    """A listed library that is not installed keys nothing: most likely a misspelt name."""
    from costaware.core.errors import ConfigurationError

    absent = sorted(name for name, version in versions.items() if version == "absent")
    if absent:
        raise ConfigurationError(
            f"libraries {absent} are not installed on this worker, so their versions cannot key the cache: "
            "check the names (pip's distribution names, e.g. 'scikit-learn')"
        )


def fingerprint_inputs(
    inputs: Mapping[str, Any], context: Mapping[str, Any], options: S3Options, mode: str
) -> list[InputFingerprint]:
    """Fingerprint every input: local and S3 data by metadata/content, other Assets by their latest event.

    Raises:
        ConfigurationError: an input cannot be fingerprinted (no data and no Asset event to go by).
    """
    from costaware.adapters.input_data import fingerprint_uri
    from costaware.adapters.object_store.location import s3_spelling
    from costaware.core.errors import ConfigurationError
    from costaware.core.fingerprint import FileStat, fingerprint_input

    out = []
    for name, value in sorted(inputs.items()):
        try:
            uri = _asset_uri(value)
        except ValueError as e:
            raise ConfigurationError(f"input {name!r}: {e}") from e
        if "://" not in uri or uri.startswith(("s3://", "file://")):
            out.append(fingerprint_uri(name, uri, options, mode=mode))
            continue
        # Another kind of Asset (a table, an API): its latest event is what says the data changed.
        events: Any = None
        if not isinstance(value, str):
            try:
                events = (context.get("inlet_events") or {})[value]
            except (LookupError, TypeError):
                events = None
        last = events[-1] if events else None
        if last is None:
            meant = s3_spelling(uri)
            if meant:
                raise ConfigurationError(
                    f"input {name!r} ({uri}) is an S3 location spelt another way: write it {meant!r}"
                )
            raise ConfigurationError(
                f"input {name!r} ({uri}) is neither a local path nor s3://, and the task has no event of "
                "it in inlet_events: add the Asset to the task's inlets, or point the input at its data"
            )
        version = ";".join(f"{attr}={getattr(last, attr, '')}" for attr in ("id", "timestamp", "extra"))
        out.append(fingerprint_input(name, uri, [FileStat("", 0, version)], mode="declared"))
    return out


class _FeaturesPartial(OperatorPartial):
    """Airflow's ``partial(...)`` of ``CachedFeaturesOperator``, refusing a ``None`` store when it expands.

    A literal ``.expand(store_uri=[..., None])`` or ``.expand_kwargs([..., {"store_uri": None}])`` built its
    copies at parse and refused that one only as it ran; an XComArg's elements are known only then, so they
    are still checked as each copy runs.
    """

    __slots__ = ()  # the layout of OperatorPartial, so that partial() can hand Airflow's own as this class

    def _refuse_no_store(self, where: str, what_to_leave_out: str) -> None:
        from costaware.core.errors import ConfigurationError

        raise ConfigurationError(
            f"task {self.kwargs.get('task_id')!r}: {where}, which "
            f"names no store for that copy: give each element a location, or leave store_uri out of "
            f"{what_to_leave_out} for the default cache ($COSTAWARE_FEATURE_CACHE or "
            "$AIRFLOW_HOME/costaware/features)"
        )

    def expand(self, **mapped_kwargs: Any) -> MappedOperator:
        stores = mapped_kwargs.get("store_uri")
        if isinstance(stores, Sequence) and not isinstance(stores, str):
            for index, store in enumerate(stores):
                if store is None:
                    self._refuse_no_store(
                        f"store_uri[{index}] is None in {self.operator_class.__name__}.partial(...)"
                        ".expand(store_uri=[...])",
                        ".expand()",
                    )
        return super().expand(**mapped_kwargs)

    def expand_kwargs(self, kwargs: Any, *, strict: bool = True) -> MappedOperator:
        if isinstance(kwargs, Sequence) and not isinstance(kwargs, str):
            for index, element in enumerate(kwargs):
                # A Mapping written out; an XComArg element (or list) is known only as its copy runs.
                if isinstance(element, Mapping) and "store_uri" in element and element["store_uri"] is None:
                    self._refuse_no_store(
                        f"store_uri is None in element {index} of {self.operator_class.__name__}"
                        ".partial(...).expand_kwargs([...])",
                        "that element",
                    )
        return super().expand_kwargs(kwargs, strict=strict)


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
        self._check_settings(rendered=False)

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

    def _check_settings(self, *, rendered: bool) -> None:
        """Refuse a bad setting before any input is read or the transform runs.

        Some were checked only after the transform had run and its entry was stored: paid for, then failed.
        Called when the DAG is parsed (values written out) and again once the templates are rendered.
        """
        from costaware.adapters.input_data import MODES
        from costaware.adapters.object_store.location import parse_uri
        from costaware.core.errors import ConfigurationError, check_keywords, did_you_mean
        from costaware.core.money import parse_usd

        def known(value: object) -> bool:
            # '~...' is the worker's home: the DAG processor's may be '/' or none (a whole DAG file failed).
            return rendered or (is_literal(value) and not _in_a_home(value))

        mode = self.fingerprint_mode
        if mode not in MODES:
            raise ConfigurationError(
                f"fingerprint_mode={mode!r} is unknown{did_you_mean(mode, MODES)}: use one of "
                f"{', '.join(MODES)}"
            )
        parse_usd(self.storage_usd_per_gb_month, name="storage_usd_per_gb_month")
        if blank(self.usd_per_hour) is not None and known(self.usd_per_hour):
            parse_usd(self.usd_per_hour, name="usd_per_hour")
        rendered_none = rendered and self.store_uri is None and not self._store_uri_left_out
        if (self.store_uri is not None and known(self.store_uri)) or rendered_none:
            if rendered_none or not_given(self.store_uri):
                # A param left unset sent the entries to the worker's default cache, where the other
                # workers never find them (a store of the retrain operators is refused the same way).
                raise ConfigurationError(
                    f"{names_nothing('store_uri', self.store_uri)}, or leave store_uri out for the default "
                    "cache ($COSTAWARE_FEATURE_CACHE or $AIRFLOW_HOME/costaware/features)"
                )
            parse_uri(str(self.store_uri), what="store_uri")
            # '/' wrote each entry's folder directly under the machine's root.
            refuse_root_store(
                f"task {self.task_id!r}",
                "store_uri",
                self.store_uri,
                example="/srv/ml/features",
                on_this_machine=rendered,
            )
        elif self._store_uri_left_out and rendered:
            # The worker's default, as the task opens it: $COSTAWARE_FEATURE_CACHE=/ made each entry's folder
            # directly under the machine's root.
            from costaware.settings import FEATURE_CACHE_ENV

            default = (
                f"${FEATURE_CACHE_ENV}"
                if os.environ.get(FEATURE_CACHE_ENV)
                else "$AIRFLOW_HOME/costaware/features"
            )
            refuse_root_store(
                f"task {self.task_id!r}",
                f"store_uri is left out, so the default cache, {default},",
                default_store_uri(),
                example="/srv/ml/features",
            )
        if isinstance(self.transform_params, Mapping):
            name = getattr(self.transform, "__qualname__", self.transform)
            check_keywords(
                self.transform, self.transform_params, field="transform_params", of=f"transform {name!r}",
                positional=1,  # the inputs, passed first
            )  # fmt: skip
        if isinstance(self.inputs, Mapping):
            for name, value in self.inputs.items():
                local = isinstance(value, str) and (
                    "://" not in value or value.startswith(("s3://", "file://"))
                )
                if local and known(value):
                    parse_uri(value, what=f"input {name!r}")

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
            self._check_settings(rendered=True)
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
            # One naming nothing ("None") was refused by _check_settings: only one left out is the default.
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
            entry = self._ledger_entry(outcome, who, compute, rate)
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
        return self._report(outcome)

    def _ledger_entry(
        self, outcome: Outcome, who: dict[str, Any], compute: Mapping[str, Any], rate: Decimal | None
    ) -> Any:
        """The avoided-cost entry of a hit; for a miss, the entry whose note the listener's entry takes."""
        import hashlib

        from costaware.core.ledger import SECONDS_PER_HOUR, Kind, LedgerEntry
        from costaware.core.money import format_usd_exact

        manifest = outcome.entry.manifest
        hours = (Decimal(str(manifest.compute_seconds)) / SECONDS_PER_HOUR).quantize(Decimal("0.000001"))
        common = {
            "dag_id": who["dag_id"],
            "run_id": who["run_id"],
            "task_id": who["task_id"],
            "try_number": who["try_number"],
            "map_index": who["map_index"],
            "kind": Kind.COMPUTE,
            "usd": Decimal(manifest.cost_usd),
            "quantity": hours,
            "unit": "hour",
            # Where the try is billed (compute_of): a hit's avoided cost is a miss of this task's, priced so.
            "instance_type": compute["instance_type"],
            "region": compute["region"],
            "market": compute["market"],
            "tags": who["tags"],
        }
        if outcome.hit:
            self.log.info(
                "reused features computed by %s on %s (key %s, %d rows): avoided %s",
                manifest.producer_label,
                manifest.created.date().isoformat(),
                manifest.key,
                manifest.rows,
                format_usd_exact(Decimal(manifest.cost_usd)),
            )
            # One avoided cost per task instance and key: a retry (a storage bill that failed after the
            # hit, say) recorded the estimate again, and the savings report counted it twice.
            parts = (who["dag_id"], who["run_id"], who["task_id"], who["map_index"], manifest.key)
            key = "\x00".join(["cache_hit", *map(str, parts)]).encode()
            return LedgerEntry(
                **common,
                estimated=True,
                outcome="cache_hit",
                cause="feature_cache",
                note=f"avoided: reused features {manifest.key} computed by {manifest.producer_label} "
                f"on {manifest.created_at}",
                entry_uid="cache-hit-" + hashlib.sha256(key).hexdigest()[:40],
            )
        self.log.info(
            "computed features in %.1f s (%d rows, %d bytes) and stored them as %s",
            manifest.compute_seconds,
            manifest.rows,
            manifest.bytes,
            outcome.entry.uri,
        )
        return LedgerEntry(
            **common,
            unit_price_usd=rate if rate is not None else Decimal(0),
            estimated=False,
            outcome="cache_miss",
            cause="feature_cache",
            # The key, not the path: notes are on the Cost page, which names no path on the server (the
            # task log and `costaware cache show KEY` give where it is).
            note=f"computed features {manifest.key} (costaware cache show {manifest.key})",
        )

    @staticmethod
    def _report(outcome: Outcome) -> dict[str, Any]:
        manifest = outcome.entry.manifest
        return {
            "uri": outcome.entry.uri,
            "key": manifest.key,
            "hit": outcome.hit,
            "rows": manifest.rows,
            "bytes": manifest.bytes,
            "created_at": manifest.created_at,
            "producer": manifest.producer_label,
            "cost_usd": "0" if outcome.hit else manifest.cost_usd,
            "avoided_usd": manifest.cost_usd if outcome.hit else "0",
        }
