from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from airflow.sdk.exceptions import AirflowFailException
from contexts import task_context

from costaware.core.errors import ConfigurationError
from costaware.operators.data_quality import DataQualityOperator

SUITE = {
    "name": "flights_batch",
    "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "carrier"}},
        {
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "distance", "min_value": 0, "max_value": 5000},
        },
        {
            "type": "expect_column_values_to_be_in_set",
            "kwargs": {"column": "origin", "value_set": ["EWR", "JFK", "LGA"]},
        },
        {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 3}},
    ],
}


def _batch(tmp: Path, **overrides: list[Any]) -> Path:
    frame = pd.DataFrame(
        {
            "carrier": ["UA", "AA", "B6", "DL"],
            "distance": [1400, 1089, 1576, 762],
            "origin": ["EWR", "LGA", "JFK", "JFK"],
            **overrides,
        }
    )
    path = tmp / "landing" / "flights_2013-01-01.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)
    return path


def _context() -> dict[str, Any]:
    return task_context("quality_gate", dag_id="retrain_dag", run_id="scheduled__2013-01-01")


def _run(tmp: Path, suite: Any, **kwargs: Any) -> dict[str, Any]:
    op = DataQualityOperator(
        task_id="quality_gate",
        data_path=str(tmp / "landing"),
        suite=suite,
        results_path=str(tmp / "quality"),
        **kwargs,
    )
    return op.execute(_context())


def _stored(tmp: Path) -> dict[str, Any]:
    files = list((tmp / "quality").rglob("*.json"))
    assert len(files) == 1
    return json.loads(files[0].read_text())


def test_good_batch_passes_and_results_are_stored(tmp_path: Path) -> None:
    _batch(tmp_path)
    result = _run(tmp_path, SUITE)
    assert result["success"] and result["statistics"]["successful_expectations"] == 4
    stored = _stored(tmp_path)
    assert result["results_uri"].endswith("retrain_dag/scheduled__2013-01-01/quality_gate.json")
    assert stored["rows"] == 4 and stored["result"]["success"] is True and stored["failures"] == []


def test_bad_batch_fails_with_a_readable_summary(tmp_path: Path) -> None:
    _batch(
        tmp_path,
        carrier=["UA", None, "B6", "DL"],
        distance=[1400, -5, 1576, 9999],
        origin=["EWR", "LGA", "XXX", "JFK"],
    )
    with pytest.raises(AirflowFailException) as caught:
        _run(tmp_path, json.dumps(SUITE))
    message = str(caught.value)
    assert message.startswith("3 of 4 expectations failed on ")
    assert "(4 rows); results in " in message
    assert (
        "- column 'carrier': expect_column_values_to_not_be_null expected (no arguments); "
        "seen unexpected_count=1, unexpected_percent=25.0, partial_unexpected_list=[null]"
    ) in message
    assert (
        "- column 'distance': expect_column_values_to_be_between expected min_value=0.0, max_value=5000.0; "
        "seen unexpected_count=2, unexpected_percent=50.0, partial_unexpected_list=[-5, 9999]"
    ) in message
    assert "- column 'origin': expect_column_values_to_be_in_set expected value_set=" in message
    assert 'partial_unexpected_list=["XXX"]' in message
    stored = _stored(tmp_path)  # stored with the run even though the task failed
    assert stored["result"]["success"] is False and len(stored["failures"]) == 3


def test_a_refused_batch_is_moved_to_the_quarantine_so_no_later_run_trains_on_it(tmp_path: Path) -> None:
    landed = _batch(tmp_path, distance=[1400, -5, 1576, 762])
    good = tmp_path / "landing" / "flights_2012-12-31.parquet"  # an earlier day, already accepted
    good.write_bytes(landed.read_bytes())
    op = DataQualityOperator(
        task_id="quality_gate",
        data_path=str(landed),
        suite=SUITE,
        results_path=str(tmp_path / "quality"),
        quarantine_path=str(tmp_path / "refused"),
    )
    with pytest.raises(AirflowFailException) as caught:
        op.execute(_context())
    moved = tmp_path / "refused" / "retrain_dag" / "scheduled__2013-01-01" / "quality_gate" / landed.name
    assert f"the batch was moved to {moved}: fix it and move it back" in str(caught.value)
    assert not landed.exists() and good.exists()  # only the refused day leaves the landing folder
    assert len(pd.read_parquet(moved)) == 4  # whole, where the message says


def test_a_batch_that_passes_stays_and_a_failed_move_still_refuses(tmp_path: Path) -> None:
    landed = _batch(tmp_path)
    _run(tmp_path, SUITE, quarantine_path=str(tmp_path / "refused"))
    assert landed.exists() and not (tmp_path / "refused").exists()
    _batch(tmp_path, distance=[1400, -5, 1576, 762])
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the quarantine folder would be")
    with pytest.raises(AirflowFailException, match=r"could not be moved to .*: move it out of the landing"):
        _run(tmp_path, SUITE, quarantine_path=str(blocker))
    assert landed.exists()


def test_a_refused_folder_is_moved_file_by_file_and_a_quarantine_inside_it_is_refused(tmp_path: Path) -> None:
    batch = tmp_path / "landing"
    _batch(tmp_path, distance=[1400, -5, 1576, 762])
    (batch / "part").mkdir()
    (batch / "part" / "more.parquet").write_bytes((batch / "flights_2013-01-01.parquet").read_bytes())
    # Inside the batch: deleting the batch would take the copy with it; nothing moves.
    with pytest.raises(AirflowFailException, match=r"is inside the batch .*: move it out of the landing"):
        _run(tmp_path, SUITE, quarantine_path=str(batch / "refused"))
    assert (batch / "flights_2013-01-01.parquet").exists() and (batch / "part" / "more.parquet").exists()
    with pytest.raises(AirflowFailException, match="the batch was moved to"):
        _run(tmp_path, SUITE, quarantine_path=str(tmp_path / "refused"))
    moved = tmp_path / "refused" / "retrain_dag" / "scheduled__2013-01-01" / "quality_gate" / "landing"
    assert sorted(p.relative_to(moved).as_posix() for p in moved.rglob("*.parquet")) == [
        "flights_2013-01-01.parquet",
        "part/more.parquet",
    ]
    assert not batch.exists()  # its files moved, its folders were left empty and removed


@pytest.mark.parametrize(("value", "unset"), [("None", True), ("null", True), ("refused", False)])
def test_a_quarantine_path_left_blank_is_unset_and_a_relative_one_is_refused(
    tmp_path: Path, value: str, unset: bool
) -> None:
    if unset:  # "{{ params.q }}" with the param left blank: no quarantine, not a folder named "None"
        _batch(tmp_path, distance=[1400, -5, 1576, 762])
        with pytest.raises(AirflowFailException) as caught:
            _run(tmp_path, SUITE, quarantine_path=value)
        assert "moved" not in str(caught.value) and (tmp_path / "landing").exists()
    else:
        with pytest.raises(ConfigurationError, match="'refused' is not an absolute folder or an s3:// URI"):
            DataQualityOperator(task_id="q", data_path="/d", suite=SUITE, quarantine_path=value)


@pytest.mark.parametrize(
    ("name", "example"), [("quarantine_path", "quarantine"), ("results_path", "quality")]
)
def test_a_folder_in_a_home_nobody_has_is_named_not_a_bare_runtime_error(
    tmp_path: Path, name: str, example: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Path.expanduser raised "Could not determine home directory", naming no argument. The DAG parses: the
    # home is the worker's, which the task checks as it starts.
    _batch(tmp_path, distance=[1400, -5, 1576, 762])
    op = DataQualityOperator(
        task_id="q", data_path=str(tmp_path / "landing"), suite=SUITE, **{name: "~nobody9/q"}
    )
    message = (
        f"{name} '~nobody9/q' starts with the home folder of user 'nobody9', whom this machine does not "
        f"know: give an absolute path such as '/data/{example}'"
    )
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        op.execute(_context())
    assert (tmp_path / "landing").exists()
    monkeypatch.delenv("HOME", raising=False)
    with pytest.raises(
        AirflowFailException, match=re.escape("data_path '~nobody9/day2.parquet' starts with")
    ):
        DataQualityOperator(task_id="q", data_path="~nobody9/day2.parquet", suite=SUITE).execute(_context())


@pytest.mark.parametrize("root", ["/", "//", "file:///"])
def test_a_quarantine_at_the_machines_root_is_refused(tmp_path: Path, root: str) -> None:
    # It was accepted: a refused batch was moved into folders made directly under /.
    message = f"DataQualityOperator 'q': quarantine_path {root!r} is the root, /, of the whole machine"
    with pytest.raises(ConfigurationError, match=re.escape(message) + ".*such as '/data/quarantine'"):
        DataQualityOperator(task_id="q", data_path="/d", suite=SUITE, quarantine_path=root)
    _batch(tmp_path, distance=[1400, -5, 1576, 762])
    op = DataQualityOperator(
        task_id="q", data_path=str(tmp_path / "landing"), suite=SUITE, quarantine_path="{{ params.q }}"
    )
    op.quarantine_path = root  # as Airflow renders it
    with pytest.raises(
        AirflowFailException, match=re.escape(f"task 'q': quarantine_path {root!r} is the root")
    ):
        op.execute(_context())
    assert (tmp_path / "landing").exists()  # not moved


def test_a_misspelled_column_is_named_with_great_expectations_own_words(tmp_path: Path) -> None:
    # GX nests the error of a missing column under the metric's key: it read "seen nothing (no result)".
    _batch(tmp_path)
    suite = {"name": "typo", "expectations": [{"type": "expect_column_values_to_not_be_null",
                                               "kwargs": {"column": "carier"}}]}  # fmt: skip
    with pytest.raises(AirflowFailException) as caught:
        _run(tmp_path, suite)
    line = next(line for line in str(caught.value).splitlines() if "column 'carier'" in line)
    assert 'seen error: The column "carier" in BatchData does not exist.' in line, line
    assert line.count("does not exist") == 1, line  # GX raises it once per metric: said once


def test_suite_from_json_file_and_from_code(tmp_path: Path) -> None:
    _batch(tmp_path)
    suite_file = tmp_path / "suite.json"
    suite_file.write_text(
        json.dumps(
            {
                "name": "n",
                "expectations": [
                    {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 10}}
                ],
            }
        )
    )
    with pytest.raises(
        AirflowFailException,
        match=r"- table: expect_table_row_count_to_be_between expected "
        r"min_value=10; seen observed_value=4",
    ):
        _run(tmp_path, str(suite_file))

    def in_code() -> list[Any]:
        import great_expectations as gx

        return [gx.expectations.ExpectColumnToExist(column="carrier")]

    assert _run(tmp_path, in_code, suite_name="coded")["success"]


def test_a_suite_checking_a_column_left_unread_fails_without_quarantining_the_batch(tmp_path: Path) -> None:
    # Great Expectations said "The column 'distance' in BatchData does not exist": a good batch failed as a
    # data failure, and was moved to the quarantine, for the operator's own columns= setting.
    batch = _batch(tmp_path)
    unread = r"checks column\(s\) \['distance'\], which columns="
    with pytest.raises(AirflowFailException, match=unread) as info:
        _run(tmp_path, SUITE, columns=["carrier", "origin"], quarantine_path=str(tmp_path / "quarantine"))
    assert isinstance(info.value.__cause__, ConfigurationError)
    assert batch.exists() and not (tmp_path / "quarantine").exists() and not (tmp_path / "quality").exists()
    assert _run(tmp_path, SUITE, columns=["carrier", "origin", "distance"])["success"]


def test_a_suite_in_code_survives_airflows_rendering(tmp_path: Path) -> None:
    # Airflow 3 calls a callable in a template field with (context=..., jinja_env=...) as it renders the
    # task: every run of a suite in code failed with "got an unexpected keyword argument 'context'".
    _batch(tmp_path)

    def in_code() -> list[Any]:
        import great_expectations as gx

        return [gx.expectations.ExpectColumnValuesToNotBeNull(column="carrier")]

    op = DataQualityOperator(
        task_id="quality_gate",
        data_path="{{ params.landing }}",
        suite=in_code,
        results_path=str(tmp_path / "quality"),
    )
    context = {**_context(), "params": {"landing": str(tmp_path / "landing")}}
    op.render_template_fields(context)
    result = op.execute(context)
    assert result["success"] and result["statistics"]["evaluated_expectations"] == 1
    assert op.data_path == str(tmp_path / "landing")


@pytest.mark.parametrize(
    ("suite", "message"),
    [
        (
            {"expectations": [{"type": "expect_nonsense", "kwargs": {}}]},
            r"expectation #0 \('expect_nonsense'\) .*; give the 'type' of a Great Expectations 1.x",
        ),
        # A typo said only "... not found": now the close names, as for instance types.
        (
            [{"type": "expect_column_values_to_not_be_nul", "kwargs": {"column": "a"}}],
            r"not found; did you mean expect_column_values_to_not_be_null, .*\? Fix its 'type'",
        ),
        ({"expectations": []}, "has no expectations"),
        ({"name": "x"}, "needs an 'expectations' list"),
        ("{not json", "not valid JSON"),
        ("/missing/suite.json", "cannot read the expectation suite file '/missing/suite.json'"),
        ([{"kwargs": {"column": "a"}}], "expectation #0 must be an object with 'type' and 'kwargs'"),
    ],
)
def test_bad_suite_fails_before_reading_and_stores_nothing(tmp_path: Path, suite: Any, message: str) -> None:
    _batch(tmp_path)
    with pytest.raises(AirflowFailException, match=message):
        _run(tmp_path, suite)
    assert not (tmp_path / "quality").exists()


def test_great_expectations_is_not_imported_at_parse_time() -> None:
    code = (
        "import sys; import costaware.operators.data_quality, costaware.operators.warm_start, "
        "costaware.operators.promote; "
        "print(sorted(m for m in ('great_expectations', 'sklearn', 'pandas', 'skops') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_task_log_gets_no_import_chatter_from_great_expectations() -> None:
    # GX logs ~200 "Skipping registering function ..." lines at INFO as it imports; a task log at INFO (what
    # Airflow runs tasks at) showed them before the quality gate's results. Its own warnings still show.
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout); "
        "import pandas as pd; "
        "from costaware.operators.data_quality import build_suite, validate_frame; "
        "suite = build_suite({'expectations': [{'type': 'expect_column_values_to_not_be_null', "
        "'kwargs': {'column': 'carrier'}}]}, 'chatter'); "
        "print('success:', validate_frame(pd.DataFrame({'carrier': ['UA', None]}), suite)['success']); "
        "docs_log = logging.getLogger('great_expectations._docs_decorators'); "
        "print('level:', logging.getLevelName(docs_log.level))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    log = out.stdout + out.stderr
    assert "success: False" in log  # the suite ran and found the null
    assert "Skipping registering function" not in log
    assert "level: WARNING" in log


def test_a_refused_s3_batch_moves_to_an_s3_quarantine_and_leaves_no_empty_prefix(
    moto_endpoint: str, moto_aws_conn: str, tmp_path: Path
) -> None:
    import uuid

    import boto3

    from costaware.adapters.object_store import S3Options

    client = boto3.client(
        "s3", **S3Options("testing", "testing", None, "us-east-1", moto_endpoint).boto3_kwargs()
    )
    bucket = f"dq-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    bad = _batch(tmp_path, distance=[1400, -5, 1576, 762])
    for key in ("landing/day/part-0.parquet", "landing/day/sub/part-1.parquet", "landing/kept.parquet"):
        client.put_object(Bucket=bucket, Key=key, Body=bad.read_bytes())
    op = DataQualityOperator(
        task_id="quality_gate",
        data_path=f"s3://{bucket}/landing/day",
        suite=SUITE,
        results_path=str(tmp_path / "quality"),
        quarantine_path=f"s3://{bucket}/refused",
        aws_conn_id=moto_aws_conn,
    )
    with pytest.raises(AirflowFailException, match=f"the batch was moved to s3://{bucket}/refused/"):
        op.execute(_context())
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", []))
    assert "landing/kept.parquet" in keys  # beside the batch: untouched
    assert not [k for k in keys if k.startswith("landing/day")]  # no empty marker of the batch is left
    assert [k for k in keys if k.startswith("refused/")] == [
        "refused/retrain_dag/scheduled__2013-01-01/quality_gate/day/part-0.parquet",
        "refused/retrain_dag/scheduled__2013-01-01/quality_gate/day/sub/part-1.parquet",
    ]


@pytest.mark.parametrize(
    ("refusal", "reason"),
    [
        (
            "raised",
            "An error occurred (AccessDenied) when calling the DeleteObjects operation: Access Denied",
        ),
        ("answered", "s3://{bucket}/landing/day/: Access Denied"),  # DeleteObjects' per-key Errors
    ],
)
def test_a_refused_s3_batch_whose_folder_marker_cannot_be_deleted_is_still_refused_and_says_so(
    moto_endpoint: str,
    moto_aws_conn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    refusal: str,
    reason: str,
) -> None:
    import uuid

    import boto3
    from botocore.exceptions import ClientError

    import costaware.adapters.object_store as object_store
    from costaware.adapters.object_store import S3Options

    client = boto3.client(
        "s3", **S3Options("testing", "testing", None, "us-east-1", moto_endpoint).boto3_kwargs()
    )
    bucket = f"dq-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    client.put_object(
        Bucket=bucket, Key="landing/day/part-0.parquet", Body=_batch(tmp_path, distance=[-5] * 4).read_bytes()
    )
    made = object_store.s3_client

    def refusing_client(*args: Any, **kwargs: Any) -> Any:
        refusing = made(*args, **kwargs)

        def denied(Bucket: str, Delete: dict[str, Any]) -> object:
            if refusal == "raised":
                raise ClientError(
                    {"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "DeleteObjects"
                )
            return {"Errors": [{"Key": o["Key"], "Message": "Access Denied"} for o in Delete["Objects"]]}

        refusing.delete_objects = denied
        return refusing

    monkeypatch.setattr(object_store, "s3_client", refusing_client)
    op = DataQualityOperator(
        task_id="quality_gate",
        data_path=f"s3://{bucket}/landing/day",
        suite=SUITE,
        results_path=str(tmp_path / "quality"),
        quarantine_path=f"s3://{bucket}/refused",
        aws_conn_id=moto_aws_conn,
    )
    # A botocore error, not an OSError: the task failed with it, not with the refusal and the batch's fate.
    with pytest.raises(AirflowFailException) as refused:
        op.execute(_context())
    message = str(refused.value)
    assert "distance" in message
    # The batch is whole in the quarantine: it was said to be "could not be moved" and moved in one breath.
    assert "could not be moved" not in message
    moved = f"s3://{bucket}/refused/retrain_dag/scheduled__2013-01-01/quality_gate/day"
    assert (
        f"; the batch was moved to {moved}: fix it and move it back to retrain on it; the empty folder "
        f"markers under s3://{bucket}/landing/day/ are left ({reason.format(bucket=bucket)}): delete them by "
        "hand (the next run would read them as an empty batch):\n- "
    ) in message
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", []))
    assert "refused/retrain_dag/scheduled__2013-01-01/quality_gate/day/part-0.parquet" in keys
    assert "landing/day/part-0.parquet" not in keys


def _gate(tmp: Path, landed: Path) -> DataQualityOperator:
    return DataQualityOperator(
        task_id="quality_gate",
        data_path=str(landed),
        suite=SUITE,
        results_path=str(tmp / "quality"),
        quarantine_path=str(tmp / "refused"),
    )


def test_a_mistake_in_the_suite_fails_without_quarantining_good_data(tmp_path: Path) -> None:
    landed = _batch(tmp_path)
    gate = _gate(tmp_path, landed)
    wrong = {"type": "expect_column_values_to_be_between", "kwargs": {"column": "distance", "min_value": 10,
             "max_value": 0}}  # fmt: skip
    gate.suite = {"expectations": [*SUITE["expectations"], wrong]}
    with pytest.raises(AirflowFailException) as caught:
        gate.execute(_context())
    message = str(caught.value)
    assert "1 of 5 expectations could not be evaluated" in message
    assert "the suite is wrong, not the data (the batch stays where it is)" in message
    assert "min_value cannot be greater than max_value" in message
    assert landed.exists() and not (tmp_path / "refused").exists()
    # With a real failure beside it, the batch is refused as usual, and both are listed.
    _batch(tmp_path, distance=[1400, -5, 1576, 762])
    with pytest.raises(AirflowFailException, match="2 of 5 expectations failed") as caught:
        gate.execute(_context())
    assert "the batch was moved to" in str(caught.value) and not landed.exists()


def test_a_column_whose_type_changed_upstream_is_a_data_failure_and_quarantined(tmp_path: Path) -> None:
    # GX raises on it ("must either be None or of the same type"): the data's fault, not the suite's.
    landed = _batch(tmp_path, distance=["1400", "abc", "1576", "762"])
    with pytest.raises(AirflowFailException, match="expectations failed on") as caught:
        _gate(tmp_path, landed).execute(_context())
    assert "the batch was moved to" in str(caught.value) and not landed.exists()


def test_a_rerun_after_a_quarantine_says_where_the_batch_went(tmp_path: Path) -> None:
    landed = _batch(tmp_path, distance=[1400, -5, 1576, 762])
    with pytest.raises(AirflowFailException, match="the batch was moved to"):
        _gate(tmp_path, landed).execute(_context())
    moved = tmp_path / "refused" / "retrain_dag" / "scheduled__2013-01-01" / "quality_gate" / landed.name
    with pytest.raises(AirflowFailException, match=f"quarantined it to {moved}: move it back"):
        _gate(tmp_path, landed).execute(_context())


def test_a_quarantine_inside_the_landing_folder_is_refused_before_validating(tmp_path: Path) -> None:
    # Readers of the landing folder walk its sub-folders: the refused day was still trained on.
    landed = _batch(tmp_path, distance=[1400, -5, 1576, 762])
    gate = _gate(tmp_path, landed)
    gate.quarantine_path = str(tmp_path / "landing" / "quarantine")
    with pytest.raises(AirflowFailException, match=r"is inside '.*/landing', the folder the batch landed in"):
        gate.execute(_context())
    assert landed.exists() and not (tmp_path / "quality").exists()


@pytest.mark.parametrize("earlier", ["flights_2012-12-31.parquet", "2012-12-31/part-0.parquet"])
def test_a_quarantine_beside_a_batch_folder_in_the_landing_folder_is_refused(
    tmp_path: Path, earlier: str
) -> None:
    # Refused for a batch file, not for a batch folder: landing/day/ moved to landing/quarantine/ was still
    # trained on by the readers of landing/.
    day = tmp_path / "landing" / "2013-01-01"
    day.mkdir(parents=True)
    landed = _batch(tmp_path, distance=[1400, -5, 1576, 762])
    landed.rename(day / "part-0.parquet")
    (tmp_path / "landing" / earlier).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "landing" / earlier).write_bytes((day / "part-0.parquet").read_bytes())  # an accepted day
    gate = _gate(tmp_path, day)
    gate.quarantine_path = str(tmp_path / "landing" / "quarantine")
    with pytest.raises(AirflowFailException) as caught:
        gate.execute(_context())
    assert (
        f"quarantine_path '{tmp_path}/landing/quarantine' is inside '{tmp_path}/landing', the landing folder "
        f"of the batch folder '{day}' (it holds another batch, '{earlier.split('/')[0]}'): readers of that "
        f"folder walk its sub-folders and would still train on a refused batch; give a folder outside "
        f"'{tmp_path}/landing'"
    ) in str(caught.value)
    assert (day / "part-0.parquet").exists() and not (tmp_path / "landing" / "quarantine").exists()
    assert not (tmp_path / "quality").exists()
    # Outside the landing folder, the same batch is refused and moved as before.
    gate.quarantine_path = str(tmp_path / "refused")
    with pytest.raises(AirflowFailException, match="the batch was moved to"):
        gate.execute(_context())
    assert not day.exists()


def test_a_whole_data_set_beside_another_with_its_quarantine_beside_them_is_warned_of_not_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from costaware.operators.batch_quarantine import check_quarantine_beside_batch_folder

    # datasets/churn/ validated whole, quarantine datasets/refused/: refused as soon as datasets/fraud/ held
    # Parquet, though nothing that reads datasets/churn/ reads it; a gate that passed began to fail for good.
    for data_set in ("churn", "fraud"):
        (tmp_path / "datasets" / data_set).mkdir(parents=True)
        (tmp_path / "datasets" / data_set / "part-0.parquet").write_bytes(b"PAR1")
    batch, refused = tmp_path / "datasets" / "churn", tmp_path / "datasets" / "refused"
    with caplog.at_level("WARNING", logger="costaware.operators.batch_quarantine"):
        assert check_quarantine_beside_batch_folder(f"{batch}/", f"{refused}/", {}) is None
    assert f"quarantine_path {refused}/ is inside {tmp_path}/datasets, which also holds fraud" in caplog.text


def test_the_first_dated_batch_of_an_empty_landing_folder_warns_of_a_quarantine_beside_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from costaware.operators.batch_quarantine import check_quarantine_beside_batch_folder

    # Nothing beside landing/2013-01-01/ to tell the layout by: passed in silence, a refused first day moved
    # to landing/quarantine/ was trained on by readers of landing/ once 2013-01-02/ landed. Not refused: a
    # good first batch of another layout would fail.
    (tmp_path / "landing" / "2013-01-01").mkdir(parents=True)
    (tmp_path / "landing" / "2013-01-01" / "part-0.parquet").write_bytes(b"PAR1")
    landing, quarantine = tmp_path / "landing", tmp_path / "landing" / "quarantine"
    with caplog.at_level("WARNING", logger="costaware.operators.batch_quarantine"):
        assert check_quarantine_beside_batch_folder(f"{landing}/2013-01-01", str(quarantine), {}) is None
    assert (
        f"quarantine_path {quarantine} is inside {landing}, which holds no other batch yet to tell "
        f"whether it is a landing folder: if batches land beside 2013-01-01"
    ) in caplog.text
    # A whole data set named otherwise (data/landing/ beside data/refused/) is no series: nothing to say.
    caplog.clear()
    (tmp_path / "data" / "landing").mkdir(parents=True)
    with caplog.at_level("WARNING", logger="costaware.operators.batch_quarantine"):
        check_quarantine_beside_batch_folder(f"{tmp_path}/data/landing", f"{tmp_path}/data/refused", {})
    assert caplog.text == ""


def test_a_dated_batch_whose_quarantine_beside_it_already_holds_a_refused_batch_is_refused(
    tmp_path: Path,
) -> None:
    # Day 1 was refused and moved to landing/quarantine/... (a warning only: nothing beside it yet). Day 2
    # found "no other batch" again and warned only, while readers of landing/ trained on the refused day 1.
    landing = tmp_path / "landing"
    day1 = _batch(tmp_path, distance=[1400, -5, 1576, 762])
    (landing / "2013-01-01").mkdir()
    day1 = day1.rename(landing / "2013-01-01" / "part-0.parquet").parent
    gate = _gate(tmp_path, day1)
    gate.quarantine_path = str(landing / "quarantine")
    with pytest.raises(AirflowFailException, match="the batch was moved to"):
        gate.execute(_context())
    (landing / "2013-01-02").mkdir()
    _batch(tmp_path).rename(landing / "2013-01-02" / "part-0.parquet")  # a good day: it passed
    gate.data_path = str(landing / "2013-01-02")
    moved = "quarantine/retrain_dag/scheduled__2013-01-01/quality_gate/2013-01-01/part-0.parquet"
    with pytest.raises(AirflowFailException) as caught:
        gate.execute(_context())
    assert (
        f"quarantine_path '{landing}/quarantine' is inside '{landing}', the landing folder of the batch "
        f"folder '{landing}/2013-01-02' (it holds another batch, '{moved}', refused and moved into the "
        f"quarantine): readers of that folder walk its sub-folders and would still train on a refused batch; "
        f"move it out, and give a folder outside '{landing}'"
    ) in str(caught.value)
    assert (landing / "2013-01-02" / "part-0.parquet").exists()


@pytest.mark.parametrize(
    "refused_before",
    [
        "retrain_dag/scheduled__2026-11-30/quality_gate/features_v2/part-0.parquet",  # the gate's own move
        "features_v2-20261130T0100/part-0.parquet",  # moved by hand, stamped
    ],
)
def test_a_fixed_batch_folder_refused_once_into_a_quarantine_beside_it_is_warned_of_not_refused(
    tmp_path: Path, refused_before: str, caplog: pytest.LogCaptureFixture
) -> None:
    from costaware.operators.batch_quarantine import check_quarantine_beside_batch_folder

    # churn/features_v2/ (a fixed folder; its '2' is no date) refused once: its own copy in churn/quarantine/
    # is no other batch of a series, yet every later valid batch was refused for good, said to 'hold another
    # batch'. A dated batch's refused sibling there is still refused.
    churn = tmp_path / "churn"
    (churn / "features_v2").mkdir(parents=True)
    (churn / "features_v2" / "part-0.parquet").write_bytes(b"PAR1")
    (churn / "quarantine" / refused_before).parent.mkdir(parents=True)
    (churn / "quarantine" / refused_before).write_bytes(b"PAR1")
    with caplog.at_level("WARNING", logger="costaware.operators.batch_quarantine"):
        assert (
            check_quarantine_beside_batch_folder(f"{churn}/features_v2/", f"{churn}/quarantine/", {}) is None
        )
    assert (
        f"quarantine_path {churn}/quarantine/ is inside {churn}, which holds no other batch yet"
        in caplog.text
    )
    sibling = churn / "quarantine" / "retrain_dag" / "scheduled__2026-11-29" / "quality_gate" / "features_v1"
    sibling.mkdir(parents=True)
    (sibling / "part-0.parquet").write_bytes(b"PAR1")
    with pytest.raises(
        ConfigurationError, match=r"it holds another batch, 'quarantine/.*/features_v1/part-0"
    ):
        check_quarantine_beside_batch_folder(f"{churn}/features_v2/", f"{churn}/quarantine/", {})


def _counting_listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The folders listed through ``BlobDir`` from now on (the real file system lists them)."""
    from pyarrow import fs

    from costaware.adapters.blob_dir import BlobDir

    listed: list[str] = []

    class Counting:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def get_file_info(self, what: Any) -> Any:
            if isinstance(what, fs.FileSelector):
                listed.append(what.base_dir)
            return self._inner.get_file_info(what)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    from_uri = BlobDir.from_uri.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, uri: str, **options: Any) -> BlobDir:
        blobs = from_uri(cls, uri, **options)
        blobs.fs = Counting(blobs.fs)
        return blobs

    monkeypatch.setattr(BlobDir, "from_uri", classmethod(counted))
    return listed


def test_a_fixed_batch_refused_in_many_runs_costs_the_quarantine_check_a_few_listings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from costaware.operators.batch_quarantine import check_quarantine_beside_batch_folder

    # Walked folder by folder, churn/features_v2/ refused in 60 runs cost 2 listings a run (<run>/, <task>/):
    # 122 for one check, at every run of the gate; listed whole it is one (a page per 1,000 files on S3).
    churn = tmp_path / "churn"
    (churn / "features_v2").mkdir(parents=True)
    (churn / "features_v2" / "part-0.parquet").write_bytes(b"PAR1")
    for day in range(60):
        own = churn / "quarantine" / "retrain_dag" / f"scheduled__2026-{1 + day // 28:02d}-{1 + day % 28:02d}"
        (own / "quality_gate" / "features_v2").mkdir(parents=True)
        (own / "quality_gate" / "features_v2" / "part-0.parquet").write_bytes(b"PAR1")
    listed = _counting_listings(monkeypatch)
    assert check_quarantine_beside_batch_folder(f"{churn}/features_v2/", f"{churn}/quarantine/", {}) is None
    assert len([folder for folder in listed if "/quarantine" in folder]) <= 6
    # A refused batch of its series after them all is still found, the first in walking order.
    for day in ("2026-12-30", "2026-12-31"):
        sibling = churn / "quarantine" / "retrain_dag" / f"scheduled__{day}" / "quality_gate" / "features_v1"
        sibling.mkdir(parents=True)
        (sibling / "part-1.parquet").write_bytes(b"PAR1")
        (sibling / "part-0.parquet").write_bytes(b"PAR1")
    first = "quarantine/retrain_dag/scheduled__2026-12-30/quality_gate/features_v1/part-0.parquet"
    with pytest.raises(ConfigurationError, match=f"it holds another batch, '{first}'"):
        check_quarantine_beside_batch_folder(f"{churn}/features_v2/", f"{churn}/quarantine/", {})


def test_a_dated_series_beside_an_undated_file_is_still_refused(tmp_path: Path) -> None:
    from costaware.operators.batch_quarantine import check_quarantine_beside_batch_folder

    # reference.parquet was looked at first (a file answers without a listing): warned only, and the
    # refused 2013-01-02/ was moved into landing/quarantine/, where readers of landing/ train on it.
    landing = tmp_path / "landing"
    for day in ("2013-01-01", "2013-01-02"):
        (landing / day).mkdir(parents=True)
        (landing / day / "part-0.parquet").write_bytes(b"PAR1")
    (landing / "reference.parquet").write_bytes(b"PAR1")
    with pytest.raises(ConfigurationError, match=r"it holds another batch, '2013-01-01'"):
        check_quarantine_beside_batch_folder(f"{landing}/2013-01-02", f"{landing}/quarantine", {})


def test_a_batch_that_is_a_whole_bucket_has_no_landing_folder_to_check() -> None:
    from costaware.operators.batch_quarantine import check_quarantine_beside_batch_folder

    # Its parent read as "s3:/", opened as a bucketless S3 URI: the gate failed before validating.
    assert check_quarantine_beside_batch_folder("s3://landing-bucket/", "s3://refused/q", {}) is None


def test_a_landing_folder_that_cannot_be_listed_skips_the_check_said_and_the_gate_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from costaware.adapters.blob_dir import BlobDir
    from costaware.operators.batch_quarantine import check_quarantine_beside_batch_folder

    # A credential that reads the batch but may not list its parent: the check's OSError failed every batch
    # of a gate that ran before the check came.
    def denied(cls: Any, uri: str, **kwargs: Any) -> Any:
        raise PermissionError(f"AWS Error ACCESS_DENIED during ListObjectsV2 of {uri}")

    monkeypatch.setattr(BlobDir, "from_uri", classmethod(denied))
    landing = tmp_path / "landing"
    with caplog.at_level("WARNING", logger="costaware.operators.batch_quarantine"):
        assert check_quarantine_beside_batch_folder(f"{landing}/day", f"{landing}/quarantine", {}) is None
    assert f"could not list {landing} to check that quarantine_path {landing}/quarantine" in caplog.text
    assert "ACCESS_DENIED" in caplog.text


def test_a_relative_results_path_is_refused_at_parse_time() -> None:
    # Accepted, and the results were written under whatever folder the worker ran in.
    with pytest.raises(ConfigurationError, match="results_path 'qres' is not an absolute folder or an s3://"):
        DataQualityOperator(task_id="q", data_path="/d", suite=SUITE, results_path="qres")
    # A relative batch was read from the folder the worker ran in (the CLI's, the scheduler's...).
    with pytest.raises(
        ConfigurationError, match=r"data_path 'data/landing/day2\.parquet' is not an absolute path"
    ):
        DataQualityOperator(task_id="q", data_path="data/landing/day2.parquet", suite=SUITE)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"columns": ["carier"]}, r"columns \['carier'\] are not in .*: fix columns$"),  # not feature_columns
        ({"data_path": " "}, "data_path is empty: give the Parquet file or folder"),
    ],
)
def test_bad_arguments_are_named_as_this_operator_names_them(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    _batch(tmp_path)
    args = {"task_id": "quality_gate", "data_path": str(tmp_path / "landing"), "suite": SUITE, **kwargs}
    with pytest.raises(AirflowFailException, match=message):
        DataQualityOperator(results_path=str(tmp_path / "quality"), **args).execute(_context())
    assert not (tmp_path / "quality").exists()


def _refused_day(folder: Path, distance: list[int]) -> Path:
    path = folder / "day.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame({"carrier": ["UA"] * 4, "distance": distance, "origin": ["EWR"] * 4})
    frame.to_parquet(path, index=False)
    return path


def test_two_gates_of_one_run_refusing_same_named_batches_keep_both(tmp_path: Path) -> None:
    # Both went to refused/<dag>/<run>/day.parquet: the second copy overwrote the first, both sources were
    # deleted, and the train batch was gone.
    train = _refused_day(tmp_path / "landing" / "train", [1400, -5, 1576, 762])
    holdout = _refused_day(tmp_path / "landing" / "holdout", [-1, -2, -3, -4])
    uris = {}
    for task_id, landed in (("check_train", train), ("check_holdout", holdout)):
        gate = _gate(tmp_path, landed)
        gate.task_id = task_id
        with pytest.raises(AirflowFailException, match="the batch was moved to"):
            gate.execute(task_context(task_id, dag_id="d", run_id="r1"))
        uris[task_id] = json.loads((tmp_path / "quality" / "d" / "r1" / f"{task_id}.json").read_text())
    assert not train.exists() and not holdout.exists()
    refused = tmp_path / "refused" / "d" / "r1"
    assert pd.read_parquet(refused / "check_train" / "day.parquet")["distance"].tolist() == [
        1400,
        -5,
        1576,
        762,
    ]
    assert pd.read_parquet(refused / "check_holdout" / "day.parquet")["distance"].tolist() == [-1, -2, -3, -4]
    assert uris["check_train"]["data_path"] == str(train)  # each gate's results kept apart
    assert uris["check_holdout"]["data_path"] == str(holdout)


def test_a_mapped_gate_keeps_each_refused_batch_and_each_result(tmp_path: Path) -> None:
    days = [_refused_day(tmp_path / "landing" / f"site{i}", [i, -5, 1576, 762]) for i in range(2)]
    for index, landed in enumerate(days):
        with pytest.raises(AirflowFailException, match="the batch was moved to"):
            _gate(tmp_path, landed).execute(
                task_context("quality_gate", dag_id="d", run_id="r1", map_index=index)
            )
    base = ("d", "r1", "quality_gate")
    for index in range(2):
        moved = tmp_path.joinpath("refused", *base, str(index), "day.parquet")
        assert pd.read_parquet(moved)["distance"].tolist()[0] == index
        result = json.loads(tmp_path.joinpath("quality", *base, f"{index}.json").read_text())
        assert result["data_path"] == str(days[index]) and result["run"]["map_index"] == index


def test_a_different_file_already_in_the_quarantine_is_never_overwritten(tmp_path: Path) -> None:
    landed = _refused_day(tmp_path / "landing", [1400, -5, 1576, 762])
    taken = tmp_path / "refused" / "d" / "r1" / "quality_gate" / "day.parquet"
    taken.parent.mkdir(parents=True)
    taken.write_bytes(b"an earlier refused batch")
    with pytest.raises(AirflowFailException, match=r"already holds another file .*: nothing was moved"):
        _gate(tmp_path, landed).execute(task_context("quality_gate", dag_id="d", run_id="r1"))
    assert taken.read_bytes() == b"an earlier refused batch" and landed.exists()  # both kept


def test_an_earlier_tries_identical_copy_counts_as_the_copy(tmp_path: Path) -> None:
    # A try killed between copying and deleting left the copy and the source: the retry completes the move.
    landed = _refused_day(tmp_path / "landing", [1400, -5, 1576, 762])
    copy = tmp_path / "refused" / "d" / "r1" / "quality_gate" / "day.parquet"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(landed.read_bytes())
    with pytest.raises(AirflowFailException, match=f"the batch was moved to {copy}"):
        _gate(tmp_path, landed).execute(task_context("quality_gate", dag_id="d", run_id="r1", try_number=2))
    assert not landed.exists() and len(pd.read_parquet(copy)) == 4


def test_the_results_say_when_on_the_projects_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # It read datetime.now() itself: a test (or a replay) that sets the project's clock was not followed.
    from datetime import datetime, timezone

    from costaware.operators import data_quality

    at = datetime(2013, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    monkeypatch.setattr(data_quality, "utcnow", lambda: at)
    _batch(tmp_path)
    _run(tmp_path, SUITE)
    assert _stored(tmp_path)["validated_at"] == "2013-01-02T03:04:05+00:00"


def test_a_file_that_lands_in_an_s3_batch_folder_while_it_is_moved_stays(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uuid

    import boto3
    from pyarrow import fs

    from costaware.adapters.blob_dir import BlobDir
    from costaware.adapters.object_store import S3Options
    from costaware.operators.batch_quarantine import quarantine

    options = S3Options("testing", "testing", None, "us-east-1", moto_endpoint)
    client = boto3.client("s3", **options.boto3_kwargs())
    bucket = f"dq-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    for key in ("landing/day/part-0.parquet", "landing/day/sub/part-1.parquet"):
        client.put_object(Bucket=bucket, Key=key, Body=b"PAR1 refused")
    landed: list[str] = []

    class LandsAfterTheMove(fs.FileSystemHandler):  # type: ignore[misc]
        """The real S3 filesystem; the upstream writer's file lands as the emptied batch is looked at."""

        def __init__(self, real: Any) -> None:
            self.real, self.deleted = real, False

        def get_file_info_selector(self, selector: Any) -> Any:
            infos = self.real.get_file_info(selector)
            if self.deleted and selector.base_dir == f"{bucket}/landing/day" and not landed:
                client.put_object(Bucket=bucket, Key="landing/day/part-2.parquet", Body=b"PAR1 new")
                landed.append("landing/day/part-2.parquet")
            return infos

        def delete_file(self, path: str) -> None:
            self.real.delete_file(path)
            self.deleted = True

        # The rest as the real filesystem does it.
        def get_type_name(self) -> str:
            return "s3"

        def equals(self, other: Any) -> bool:
            return other is self

        def get_file_info(self, paths: Any) -> Any:
            return self.real.get_file_info(paths)

        def create_dir(self, path: str, recursive: bool) -> None:
            self.real.create_dir(path, recursive=recursive)

        def delete_dir(self, path: str) -> None:
            self.real.delete_dir(path)

        def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
            self.real.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

        def delete_root_dir_contents(self) -> None:
            raise AssertionError("not used")

        def move(self, src: str, dest: str) -> None:
            self.real.move(src, dest)

        def copy_file(self, src: str, dest: str) -> None:
            self.real.copy_file(src, dest)

        def open_input_stream(self, path: str) -> Any:
            return self.real.open_input_stream(path)

        def open_input_file(self, path: str) -> Any:
            return self.real.open_input_file(path)

        def open_output_stream(self, path: str, metadata: Any) -> Any:
            return self.real.open_output_stream(path, metadata=metadata)

        def open_append_stream(self, path: str, metadata: Any) -> Any:
            return self.real.open_append_stream(path, metadata=metadata)

        def normalize_path(self, path: str) -> str:
            return str(self.real.normalize_path(path))

    opened = BlobDir.from_uri.__func__  # type: ignore[attr-defined]

    def from_uri(cls: type[BlobDir], uri: str, **kwargs: Any) -> BlobDir:
        found = opened(cls, uri, **kwargs)
        return BlobDir(fs.PyFileSystem(LandsAfterTheMove(found.fs)), found.root, found.uri)

    monkeypatch.setattr(BlobDir, "from_uri", classmethod(from_uri))

    quarantine(f"s3://{bucket}/landing/day", f"s3://{bucket}/refused", "run-1", dataclasses.asdict(options))

    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", []))
    assert landed  # the file did land between the check and the clean-up
    # It was deleted with the whole prefix, unread and uncopied: neither in the landing folder nor moved.
    assert [k for k in keys if k.startswith("landing/")] == ["landing/day/part-2.parquet"]
    assert [k for k in keys if k.startswith("refused/")] == [
        "refused/run-1/day/part-0.parquet",
        "refused/run-1/day/sub/part-1.parquet",
    ]
