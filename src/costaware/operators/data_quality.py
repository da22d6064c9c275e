"""``DataQualityOperator``: a Great Expectations 1.x suite on a batch; bad data fails before money is spent.

Great Expectations is called directly (its Airflow provider cannot be installed with Airflow 3.3) and
imported inside ``execute`` only: importing it takes seconds, which DAG parsing must never pay.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from costaware.core.errors import ConfigurationError
from costaware.core.ledger import utcnow
from costaware.glue import DEFAULT_AWS_CONN_ID, airflow_errors, run_identity, storage_options
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs
from costaware.operators.batch_quarantine import (
    FolderMarkersLeftError,
    check_quarantine_beside_batch_folder,
    check_quarantine_outside,
    quarantine,
    quarantined_copy,
)
from costaware.operators.templating import is_literal, refuse_root_store
from costaware.settings import default_store
from costaware.training.plan import blank

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Great Expectations logs two hundred "Skipping registering function ..." lines at INFO while it imports
#: (its API-docs registry): noise in every task log, with nothing for the user to do.
_GX_IMPORT_LOGGER = "great_expectations._docs_decorators"

#: What GX 1.x says of an expectation that no data could satisfy: the suite's mistake, not the data's.
SUITE_MISTAKES = ("min_value cannot be greater than max_value",)
#: Result keys worth showing as "seen", in order of preference.
_SEEN_KEYS = (
    "observed_value",
    "unexpected_count",
    "unexpected_percent",
    "partial_unexpected_list",
    "missing_count",
)


class DataQualityError(ConfigurationError):
    """Raised when a batch fails expectations; retrying the same data cannot help, so the task fails."""


SuiteSpec = Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Callable[[], Any]


def _suite_json(suite: SuiteSpec, name: str) -> dict[str, Any] | None:
    """A suite given as JSON (dict, list, JSON text or a .json path) as a dict; None if it is code."""
    if callable(suite):
        return None
    if isinstance(suite, str):
        text = suite.strip()
        if text.endswith(".json") and not text.startswith(("{", "[")):
            try:
                text = Path(text).read_text()
            except OSError as e:
                raise ConfigurationError(f"cannot read the expectation suite file {suite!r}: {e}") from e
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigurationError(f"expectation suite is not valid JSON ({e}): {text[:80]!r}") from e
        return _suite_json(loaded, name)
    if isinstance(suite, Mapping):
        if not isinstance(suite.get("expectations"), list):
            raise ConfigurationError(
                "expectation suite JSON needs an 'expectations' list of {type, kwargs} objects"
            )
        return {"name": suite.get("name") or name, "expectations": list(suite["expectations"])}
    return {"name": name, "expectations": list(suite)}


def _expectation_hint(expectation_type: object, error: Exception) -> str:
    """``; did you mean expect_column_values_to_not_be_null?`` for a misspelt expectation type; else ""."""
    from great_expectations.exceptions.exceptions import ExpectationNotFoundError
    from great_expectations.expectations.registry import list_registered_expectation_implementations

    from costaware.core.prices import closest_names

    if not isinstance(error, ExpectationNotFoundError):
        return ""
    close = closest_names(str(expectation_type), list_registered_expectation_implementations())
    if close:
        return f"; did you mean {', '.join(close)}? Fix its 'type'"
    return (
        "; give the 'type' of a Great Expectations 1.x expectation, e.g. expect_column_values_to_not_be_null"
    )


def build_suite(suite: SuiteSpec, name: str) -> Any:
    """A ``gx.ExpectationSuite`` from a JSON form (see ``DataQualityOperator``) or a callable."""
    gx = _import_great_expectations()
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    spec = _suite_json(suite, name)
    if spec is None:
        built = suite()  # type: ignore[operator]
        if isinstance(built, gx.ExpectationSuite):
            return built
        return gx.ExpectationSuite(name=name, expectations=list(built))
    expectations = []
    for i, item in enumerate(spec["expectations"]):
        if not isinstance(item, Mapping) or "type" not in item:
            raise ConfigurationError(
                f"expectation #{i} must be an object with 'type' and 'kwargs', got {item!r}"
            )
        try:
            config = ExpectationConfiguration(type=item["type"], kwargs=dict(item.get("kwargs") or {}))
            expectations.append(config.to_domain_obj())
        except Exception as e:
            raise ConfigurationError(
                f"expectation #{i} ({item['type']!r}) is not valid: {e}{_expectation_hint(item['type'], e)}"
            ) from e
    if not expectations:
        raise ConfigurationError("expectation suite has no expectations: add at least one")
    return gx.ExpectationSuite(name=spec["name"], expectations=expectations)


#: Expectation arguments that name columns of the batch.
_COLUMN_ARGUMENTS = ("column", "column_A", "column_B", "column_list", "column_set")


def suite_columns(suite: Any) -> set[str]:
    """The columns a ``gx.ExpectationSuite``'s expectations name."""
    names: set[str] = set()
    for expectation in suite.expectations:
        kwargs = expectation.configuration.kwargs
        for argument in _COLUMN_ARGUMENTS:
            value = kwargs.get(argument)
            if isinstance(value, str):
                names.add(value)
            elif isinstance(value, list | tuple | set | frozenset):
                names.update(str(v) for v in value)
    return names


def check_columns_read(suite: Any, columns: Sequence[str] | None) -> None:
    """Refuse a suite that checks a column ``columns`` leaves unread.

    Great Expectations reports such a column as missing from the data: a good batch failed the gate as a
    data failure, and was moved to the quarantine, for the operator's own setting.

    Raises:
        ConfigurationError: the suite names a column that is not in ``columns``.
    """
    if columns is None:
        return
    unread = sorted(suite_columns(suite) - set(columns))
    if unread:
        raise ConfigurationError(
            f"the suite checks column(s) {unread}, which columns={list(columns)!r} leaves unread: the batch "
            "would fail for them however good it is; add them to columns, or leave columns out to read all"
        )


def validate_frame(frame: Any, suite: Any) -> dict[str, Any]:
    """Validate a pandas DataFrame against a suite in an ephemeral (in-memory) GX context; JSON result."""
    gx = _import_great_expectations()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch_definition = (
        context.data_sources.add_pandas(name="costaware")
        .add_dataframe_asset(name="batch")
        .add_batch_definition_whole_dataframe("all_rows")
    )
    result = batch_definition.get_batch(batch_parameters={"dataframe": frame}).validate(suite)
    return dict(result.to_json_dict())


def _import_great_expectations() -> Any:
    """``great_expectations``, imported without its import-time INFO lines (its warnings still show)."""
    gx_docs_log = logging.getLogger(_GX_IMPORT_LOGGER)
    if gx_docs_log.level == logging.NOTSET:  # a level the deployment set itself stays
        gx_docs_log.setLevel(logging.WARNING)
    import great_expectations as gx

    return gx


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _raised(info: Mapping[str, Any]) -> list[str]:
    """The messages of the exceptions an expectation raised.

    GX 1.x gives them flat (``{"raised_exception": true, "exception_message": ...}``) or, for a metric that
    failed (a column that does not exist), nested under one key per metric; both are read.
    """
    found = [info] if "raised_exception" in info else [n for n in info.values() if isinstance(n, Mapping)]
    messages = (
        str(item.get("exception_message")).removeprefix("Error: ")  # said once: the line says "error:"
        for item in found
        if item.get("raised_exception")
    )
    return list(dict.fromkeys(messages))  # several metrics of one missing column raise the same message


def failure_lines(result: Mapping[str, Any]) -> list[str]:
    """One readable line per failed expectation: which column, what was expected, what was seen."""
    lines = []
    for item in result.get("results", []):
        if item.get("success"):
            continue
        config = item.get("expectation_config") or {}
        kwargs = {
            k: v for k, v in (config.get("kwargs") or {}).items() if k not in ("batch_id", "result_format")
        }
        column = kwargs.pop("column", None)
        where = f"column {column!r}" if column is not None else "table"
        expected = ", ".join(f"{k}={_short(v)}" for k, v in kwargs.items()) or "(no arguments)"
        details = item.get("result") or {}
        seen = [f"{k}={_short(details[k])}" for k in _SEEN_KEYS if k in details]
        seen.extend(f"error: {message}" for message in _raised(item.get("exception_info") or {}))
        lines.append(
            f"{where}: {config.get('type')} expected {expected}; "
            f"seen {', '.join(seen) or 'nothing (no result)'}"
        )
    return lines


def suite_errors(result: Mapping[str, Any]) -> list[str]:
    """The failed expectations whose error is a mistake of the suite itself (:data:`SUITE_MISTAKES`).

    ``min_value`` above ``max_value``: the data was not judged, so a batch is not refused for it. Every
    other error stays a data failure: a column the data lacks, or one whose type changed upstream
    (strings where numbers were), raises too, and that batch must not stay where the next run reads it.
    """
    broken = []
    for item in result.get("results", []):
        raised = _raised(item.get("exception_info") or {})
        if not item.get("success") and raised and all(any(m in r for m in SUITE_MISTAKES) for r in raised):
            broken.append(item)
    return failure_lines({"results": broken})


def task_key(facts: Mapping[str, Any]) -> str:
    """``<dag_id>/<run_id>/<task_id>``, and ``/<map_index>`` for a mapped task: one folder per gate.

    Two gates of one run (a train and a holdout batch both named ``day.parquet``), or the mapped copies of
    one, each get their own quarantine folder and results file.
    """
    from costaware.adapters.checkpoint_store import checkpoint_key

    mapped = [facts["map_index"]] if int(facts.get("map_index", -1)) >= 0 else []
    return checkpoint_key(facts["dag_id"], facts["run_id"], facts["task_id"], *mapped)


def _local_path(text: str, name: str, example: str, *, on_this_machine: bool) -> str | None:
    """``text`` with ``~`` expanded; None for ``~...`` when the DAG is parsed (the worker's home counts).

    ``Path.expanduser`` raised a bare RuntimeError for a home nobody has (``~nosuchuser/q``, HOME unset).

    Raises:
        ConfigurationError: a home this machine does not know, named with ``name``.
    """
    from costaware.adapters.object_store.location import expand_user

    if not text.startswith("~"):
        return text
    return expand_user(text, what=name, uri=text, example=example) if on_this_machine else None


def _folder_location(
    value: Any,
    name: str = "quarantine_path",
    example: str = "quarantine",
    *,
    owner: str,
    on_this_machine: bool = True,
) -> str:
    """A folder argument (``quarantine_path``, ``results_path``) as given; "" when unset.

    Unset: None, or a template that rendered empty, ``None`` or ``null``. ``on_this_machine``: False when
    the DAG is parsed, where ``~`` is left to the worker.

    Raises:
        ConfigurationError: a relative path: it would land on whichever worker ran the task; the machine's
            root (a refused batch was moved into folders made under /); a home this machine does not know.
    """
    text = str(value or "").strip()
    if blank(text) is None:
        return ""
    if "://" not in text:
        local = _local_path(text, name, f"/data/{example}", on_this_machine=on_this_machine)
        if local is not None and not Path(local).is_absolute():
            raise ConfigurationError(
                f"{name} {text!r} is not an absolute folder or an s3:// URI: a relative path lands "
                f"wherever the worker runs; give e.g. '/data/{example}' or 's3://bucket/{example}'"
            )
    refuse_root_store(owner, name, text, example=f"/data/{example}", on_this_machine=on_this_machine)
    return text


def _check_data_path(value: Any, *, on_this_machine: bool = True) -> None:
    """Refuse a relative ``data_path``: it was read from whichever folder the worker happened to run in."""
    text = str(value or "").strip()
    if not text or "://" in text:  # empty: said when read
        return
    local = _local_path(text, "data_path", "/data/landing/day2.parquet", on_this_machine=on_this_machine)
    if local is not None and not Path(local).is_absolute():
        raise ConfigurationError(
            f"data_path {text!r} is not an absolute path or an s3:// URI: a relative path is read from the "
            "folder the worker runs in; give e.g. '/data/landing/day2.parquet' or 's3://bucket/landing/'"
        )


class DataQualityOperator(WarnsOfDroppedDefaultArgs, BaseOperator):
    """Validates a batch with a Great Expectations suite before any training is paid for.

    See docs/data-path.md.

    The suite is JSON (a dict ``{"name": ..., "expectations": [{"type": ..., "kwargs": {...}}, ...]}``, just
    the list of expectations, JSON text, or a ``.json`` file path) or code (a callable that returns a
    ``gx.ExpectationSuite`` or a list of GX expectations; import GX inside it). The result is stored as JSON
    under ``results_path``; when any expectation fails the task fails (no retry) with one line per failure:
    the column, what was expected and what was seen.

    Returns (XCom) ``{"success", "statistics", "results_uri", "failures"}``.

    Args:
        data_path: Parquet file or folder to validate (local or ``s3://``) (templated).
        suite: The expectation suite (JSON forms or a callable; see above) (templated when a string).
        suite_name: Name of the suite when the JSON gives none.
        results_path: Folder or ``s3://`` URI for results; one file per run, task and map index
            (templated; default ``$AIRFLOW_HOME/costaware/quality``).
        columns: Only read these columns (default: all); every column the suite checks must be among them.
        quarantine_path: Folder or ``s3://`` URI a refused batch is moved to, under
            ``<dag_id>/<run_id>/<task_id>/`` (``.../<map_index>/`` when mapped); a file already there is
            never overwritten (templated). Without it the batch stays where it landed, and a later run that
            reads the whole landing folder trains on it.
        aws_conn_id: Airflow AWS connection for ``s3://`` locations (default ``aws_default``; when that
            connection does not exist, or with ``None``, the SDKs' default credential chain).
        **kwargs: ``BaseOperator`` arguments.
    """

    template_fields: Sequence[str] = ("data_path", "suite", "results_path", "quarantine_path")
    template_ext: Sequence[str] = ()
    ui_color = "#eaf6e6"

    def __init__(
        self,
        *,
        data_path: str,
        suite: SuiteSpec,
        suite_name: str = "costaware_suite",
        results_path: str | None = None,
        columns: Sequence[str] | None = None,
        quarantine_path: str | None = None,
        aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        owner = f"{type(self).__name__} {self.task_id!r}"
        if is_literal(data_path):
            _check_data_path(data_path, on_this_machine=False)
        if is_literal(quarantine_path):
            # A relative path fails when the DAG is parsed.
            _folder_location(quarantine_path, owner=owner, on_this_machine=False)
        if is_literal(results_path):
            # It was accepted and written to.
            _folder_location(results_path, "results_path", "quality", owner=owner, on_this_machine=False)
        self.quarantine_path = quarantine_path
        self.data_path = data_path
        # Airflow 3 calls a callable it finds in a template field with (context=..., jinja_env=...) as it
        # renders the task: a suite in code failed every run with "got an unexpected keyword argument
        # 'context'". It is kept out of the templated field and called in execute.
        self.suite_code: Callable[[], Any] | None = suite if callable(suite) else None
        self.suite: SuiteSpec | None = None if callable(suite) else suite
        self.suite_name = suite_name
        self.results_path = results_path
        self.columns = None if columns is None else list(columns)
        self.aws_conn_id = aws_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from costaware.adapters.blob_dir import BlobDir

        os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
        facts = run_identity(context, self.task_id)
        with airflow_errors():
            _check_data_path(self.data_path)
            options = storage_options(self.aws_conn_id)
            spec = self.suite_code if self.suite_code is not None else self.suite
            suite = build_suite(spec if spec is not None else [], self.suite_name)
            where = _folder_location(self.quarantine_path, owner=f"task {self.task_id!r}")
            if where:
                check_quarantine_outside(str(self.data_path), where)
                check_quarantine_beside_batch_folder(str(self.data_path), where, options)
            frame, fingerprint = self._read(where, facts, options)  # a misspelt column is named here
            check_columns_read(suite, self.columns)
            result = validate_frame(frame, suite)
            failures = failure_lines(result)
            broken = suite_errors(result)
            name = f"{task_key(facts)}.json"
            record = {
                "data_path": self.data_path,
                "data_fingerprint": fingerprint,
                "rows": len(frame),
                "validated_at": utcnow().isoformat(),  # the project's clock: a test can set it
                "run": facts,
                "failures": failures,
                "result": result,
            }
            results_at = _folder_location(
                self.results_path, "results_path", "quality", owner=f"task {self.task_id!r}"
            )
            results = BlobDir.from_uri(results_at or default_store("quality"), what="results_path", **options)
            results.write_bytes(name, json.dumps(record, indent=2, default=str).encode())
            uri = f"{results.uri}/{name}"
            stats = result.get("statistics", {})
            if broken and len(broken) == len(failures):
                # Only the suite's own mistakes failed: the data was not judged, so it is not quarantined.
                raise ConfigurationError(
                    f"{len(broken)} of {stats.get('evaluated_expectations', '?')} expectations could not be "
                    f"evaluated on {self.data_path}: the suite is wrong, not the data (the batch stays where "
                    f"it is); results in {uri}; fix the suite and rerun:\n"
                    + "\n".join(f"- {x}" for x in broken)
                )
            if failures:
                raise DataQualityError(
                    f"{len(failures)} of {stats.get('evaluated_expectations', '?')} expectations failed on "
                    f"{self.data_path} ({len(frame)} rows); results in {uri}"
                    f"{self._quarantined(facts, options)}:\n" + "\n".join(f"- {x}" for x in failures)
                )
        self.log.info(
            "all %s expectations passed on %s (%d rows)",
            stats.get("evaluated_expectations"),
            self.data_path,
            len(frame),
        )
        return {"success": True, "statistics": stats, "results_uri": uri, "failures": []}

    def _read(self, where: str, facts: Mapping[str, Any], options: Mapping[str, Any]) -> tuple[Any, str]:
        """The batch and its fingerprint; a batch an earlier try quarantined is said to be there."""
        from costaware.training.data import read_parquet

        if not str(self.data_path or "").strip():  # "store location is empty" named no argument
            raise ConfigurationError("data_path is empty: give the Parquet file or folder of the new batch")
        try:
            return read_parquet(self.data_path, self.columns, options, columns_from="columns")
        except ConfigurationError as e:
            moved = quarantined_copy(str(self.data_path), where, task_key(facts), options) if where else None
            if moved is None:
                raise
            raise ConfigurationError(
                f"{e}; an earlier try of this run quarantined it to {moved}: move it back to validate it "
                "again"
            ) from e

    def _quarantined(self, facts: Mapping[str, Any], options: Mapping[str, Any]) -> str:
        """Move the refused batch to ``quarantine_path``; what the failure message adds about it."""
        where = _folder_location(self.quarantine_path, owner=f"task {self.task_id!r}")
        if not where:
            return ""
        try:
            moved = quarantine(self.data_path, where, task_key(facts), options)
        except FolderMarkersLeftError as e:
            self.log.warning(
                "moved the refused batch %s to %s, but %s", self.data_path, e.moved_to, e.cleanup
            )
            return (
                f"; the batch was moved to {e.moved_to}: fix it and move it back to retrain on it; "
                f"{e.cleanup}"
            )
        except (OSError, ConfigurationError) as e:
            # The refusal stands either way; the batch is where it was, or also in the quarantine.
            self.log.error("could not move %s to %s: %s", self.data_path, where, e)
            return f"; it could not be moved to {where} ({e}): move it out of the landing folder by hand"
        self.log.warning("moved the refused batch %s to %s", self.data_path, moved)
        return f"; the batch was moved to {moved}: fix it and move it back to retrain on it"
