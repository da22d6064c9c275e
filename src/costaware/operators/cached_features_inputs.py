"""``CachedFeaturesOperator``'s inputs and settings: their checks, the default store, the fingerprints."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from costaware.core.given import blank, names_nothing, not_given
from costaware.operators.templating import is_literal, refuse_root_store
from costaware.settings import feature_cache

if TYPE_CHECKING:
    from costaware.adapters.object_store import S3Options
    from costaware.core.fingerprint import InputFingerprint


class _Settings(Protocol):
    """What :func:`check_settings` reads of a ``CachedFeaturesOperator`` (not imported: a cycle)."""

    @property
    def task_id(self) -> str: ...
    @property
    def transform(self) -> Callable[..., Any]: ...
    @property
    def inputs(self) -> Mapping[str, Any]: ...
    @property
    def transform_params(self) -> Mapping[str, Any]: ...
    @property
    def store_uri(self) -> str | None: ...
    @property
    def store_uri_left_out(self) -> bool: ...
    @property
    def fingerprint_mode(self) -> str: ...
    @property
    def usd_per_hour(self) -> str | None: ...
    @property
    def storage_usd_per_gb_month(self) -> str: ...


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


def check_settings(operator: _Settings, *, rendered: bool) -> None:
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

    mode = operator.fingerprint_mode
    if mode not in MODES:
        raise ConfigurationError(
            f"fingerprint_mode={mode!r} is unknown{did_you_mean(mode, MODES)}: use one of {', '.join(MODES)}"
        )
    parse_usd(operator.storage_usd_per_gb_month, name="storage_usd_per_gb_month")
    if blank(operator.usd_per_hour) is not None and known(operator.usd_per_hour):
        parse_usd(operator.usd_per_hour, name="usd_per_hour")
    rendered_none = rendered and operator.store_uri is None and not operator.store_uri_left_out
    if (operator.store_uri is not None and known(operator.store_uri)) or rendered_none:
        if rendered_none or not_given(operator.store_uri):
            # A param left unset sent the entries to the worker's default cache, where the other
            # workers never find them (a store of the retrain operators is refused the same way).
            raise ConfigurationError(
                f"{names_nothing('store_uri', operator.store_uri)}, or leave store_uri out for the default "
                "cache ($COSTAWARE_FEATURE_CACHE or $AIRFLOW_HOME/costaware/features)"
            )
        parse_uri(str(operator.store_uri), what="store_uri")
        # '/' wrote each entry's folder directly under the machine's root.
        refuse_root_store(
            f"task {operator.task_id!r}",
            "store_uri",
            operator.store_uri,
            example="/srv/ml/features",
            on_this_machine=rendered,
        )
    elif operator.store_uri_left_out and rendered:
        # The worker's default, as the task opens it: $COSTAWARE_FEATURE_CACHE=/ made each entry's folder
        # directly under the machine's root.
        from costaware.settings import FEATURE_CACHE_ENV

        default = (
            f"${FEATURE_CACHE_ENV}"
            if os.environ.get(FEATURE_CACHE_ENV)
            else "$AIRFLOW_HOME/costaware/features"
        )
        refuse_root_store(
            f"task {operator.task_id!r}",
            f"store_uri is left out, so the default cache, {default},",
            default_store_uri(),
            example="/srv/ml/features",
        )
    if isinstance(operator.transform_params, Mapping):
        name = getattr(operator.transform, "__qualname__", operator.transform)
        check_keywords(
            operator.transform, operator.transform_params, field="transform_params", of=f"transform {name!r}",
            positional=1,  # the inputs, passed first
        )  # fmt: skip
    if isinstance(operator.inputs, Mapping):
        for name, value in operator.inputs.items():
            local = isinstance(value, str) and ("://" not in value or value.startswith(("s3://", "file://")))
            if local and known(value):
                parse_uri(value, what=f"input {name!r}")
