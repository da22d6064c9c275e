"""Templated trainer arguments reach the trainer as numbers, without ``render_template_as_native_obj``.

``trainer_params={"epochs": "{{ params.epochs }}"}`` renders to ``{"epochs": "2"}`` in a DAG that renders to
text (Airflow's default); the training operators turn such values back into the param's type.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import DAG, Param
from airflow.sdk.exceptions import TaskDeferred
from contexts import task_context
from remote_support import context_for, drive, local_operator_args, m5_decision, write_data

from costaware import Ledger
from costaware.adapters.model_store import ModelStore
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.operators.templating import native_literal, native_rendered
from costaware.operators.tuning import BudgetedTuningOperator, TuningStudyCreateOperator
from costaware.operators.warm_start import WarmStartRetrainOperator

PARAMS = {
    "epochs": Param(2, type="integer"),
    "batch_size": Param(512, type="integer"),
    "alpha": Param(0.001, type="number"),
    "tag": Param("007", type="string"),
}
TEMPLATED = {
    "epochs": "{{ params.epochs }}",
    "batch_size": "{{ params.batch_size }}",
    "alpha": "{{ params.alpha }}",
}


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


def rendered(op: Any, context: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Render ``op``'s templates as the task runner does (the DAG's own, text-rendering Jinja environment)."""
    context = {**context, "params": params}
    op.render_template_fields(context)
    return context


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", 2),
        ("-3", -3),
        ("0.001", 0.001),
        ("1e-3", 0.001),
        ("1E5", 100000.0),
        (".5", 0.5),
        ("True", True),
        ("false", False),
        ("007", "007"),
        ("2026-01-01", "2026-01-01"),
        (" 2", " 2"),
        ("nan", "nan"),
        ("None", "None"),
        ("(1)", "(1)"),
        ("1+2", "1+2"),
        ("1j", "1j"),
        ("s3://b/x", "s3://b/x"),
    ],
)
def test_only_exact_number_and_bool_literals_become_values(text: str, value: Any) -> None:
    converted = native_literal(text)
    assert converted == value and type(converted) is type(value)


def test_only_values_that_were_templates_are_converted() -> None:
    written = {"epochs": "{{ params.epochs }}", "name": "3", "nested": {"k": ["{% if 1 %}4{% endif %}", "5"]}}
    after = {"epochs": "2", "name": "3", "nested": {"k": ["4", "5"]}}
    assert native_rendered(written, after) == {"epochs": 2, "name": "3", "nested": {"k": [4, "5"]}}
    assert native_rendered("{{ params.tp }}", {"epochs": "2"}) == {"epochs": "2"}  # shapes differ: left alone


def test_remote_training_passes_templated_numbers_to_the_trainer(tmp_path: Path, ledger: Any) -> None:
    write_data(tmp_path / "data")
    with DAG("templated_remote", schedule=None, params=PARAMS):
        op = RemoteTrainingOperator(
            **local_operator_args(tmp_path),
            trainer_params=TEMPLATED,
            market="on_demand",
            instance_type="m5.large",
            on_demand_usd_per_hour="0.1",
            poll_interval=0.1,
        )
    context = rendered(op, context_for(), {"epochs": 2, "batch_size": 512, "alpha": 0.001, "tag": "007"})
    assert op.trainer_params["epochs"] == "2"  # what Airflow's text rendering gives
    result, _ = drive(op, context)
    params = ModelStore.open(str(tmp_path / "models")).get(result["version"]).params
    assert {k: params[k] for k in TEMPLATED} == {"epochs": 2, "batch_size": 512, "alpha": 0.001}
    assert type(params["epochs"]) is int and type(params["alpha"]) is float


def test_remote_training_leaves_other_strings_alone(tmp_path: Path, ledger: Any) -> None:
    with DAG("templated_strings", schedule=None, params=PARAMS):
        op = RemoteTrainingOperator(
            **local_operator_args(tmp_path),
            # A trainer of the team's own (only its image has it) takes parameters the built-in ones do not.
            trainer="my_team.trainers:TabularNet",
            trainer_params={"epochs": "{{ params.epochs }}", "note": "{{ params.tag }}", "literal": "3"},
            market="on_demand",
            instance_type="m5.large",
            on_demand_usd_per_hour="0.1",
        )
    context = rendered(op, context_for(), {"epochs": 2, "batch_size": 512, "alpha": 0.001, "tag": "007"})
    with pytest.raises(TaskDeferred):
        op.execute(context)
    (spec_file,) = (tmp_path / "ckpt" / "_jobs").rglob("spec.json")
    spec = json.loads(spec_file.read_text())
    assert spec["trainer_params"] == {"epochs": 2, "note": "007", "literal": "3"}


def test_warm_start_passes_templated_numbers_to_the_trainer(tmp_path: Path, ledger: Any) -> None:
    data = write_data(tmp_path / "data")
    with DAG("templated_warm_start", schedule=None, params=PARAMS):
        op = WarmStartRetrainOperator(
            task_id="retrain",
            data_path=str(data),
            label_column="y",
            feature_columns=["x1", "x2", "c"],
            model_store=str(tmp_path / "models"),
            checkpoint_store=str(tmp_path / "ckpt"),
            trainer_params=TEMPLATED,
        )
    context = rendered(op, task_context("retrain"), {"epochs": 2, "batch_size": 512, "alpha": 0.001})
    result = op.execute(context)
    params = ModelStore.open(str(tmp_path / "models")).get(result["version"]).params
    assert {k: params[k] for k in TEMPLATED} == {"epochs": 2, "batch_size": 512, "alpha": 0.001}
    assert type(params["batch_size"]) is int


SEEN: list[dict[str, Any]] = []


class RecordingTrainer:
    """Records the keyword arguments it was built with; one unit of resource is one step."""

    def __init__(self, params: dict[str, Any], **kwargs: Any) -> None:
        SEEN.append(kwargs)

    def advance(self, resource: int) -> float:
        return float(resource)


def test_tuning_trial_passes_templated_numbers_to_the_trainer(ledger_url: str) -> None:
    Ledger.from_url(ledger_url)  # the study storage and the ledger's tables
    plan = TuningStudyCreateOperator(
        task_id="plan",
        study_name="templated",
        search_space={"lr": {"type": "float", "low": 0.05, "high": 1.0}},
        min_resource=1,
        max_resource=2,
        max_usd="5",
        max_trials=1,
        instance_type="m5.large",
        usd_per_hour="1",
        fallback_trial_seconds=5,
        sampler="random",
        seed=3,
    )

    def ti(task: Any) -> SimpleNamespace:
        return SimpleNamespace(
            dag_id="tune",
            run_id="manual__1",
            task_id=task.task_id,
            map_index=0,
            try_number=1,
            max_tries=0,
            task=task,
        )

    plan.execute({"ti": ti(plan)})
    with DAG("templated_tuning", schedule=None, params={"cap": Param(4, type="integer")}):
        trial = BudgetedTuningOperator(
            task_id="trial",
            study_name="templated",
            trainer=RecordingTrainer,
            trainer_kwargs={"cap": "{{ params.cap }}", "path": "/data/{{ params.cap }}"},
        )
    SEEN.clear()
    trial.execute(rendered(trial, {"ti": ti(trial)}, {"cap": 4}))
    assert SEEN == [{"cap": 4, "path": "/data/4"}] and type(SEEN[0]["cap"]) is int


# -- a whole dict from one template or an XComArg --------------------------------------------------------


def _warm_start(tmp: Path, trainer_params: Any) -> WarmStartRetrainOperator:
    return WarmStartRetrainOperator(
        task_id="retrain",
        data_path=str(tmp / "data"),
        label_column="y",
        feature_columns=["x1", "x2", "c"],
        model_store=str(tmp / "models"),
        checkpoint_store=str(tmp / "ckpt"),
        trainer_params=trainer_params,
    )


@pytest.mark.parametrize("template", ["{{ params.tp }}", "{{ params.tp | tojson }}"])
def test_a_whole_template_of_trainer_params_reaches_the_trainer(
    tmp_path: Path, ledger: Any, template: str
) -> None:
    # It failed the DAG file: "trainer_params '{' is not an option of trainer 'sklearn-sgd'".
    write_data(tmp_path / "data")
    with DAG("whole_template", schedule=None, params={"tp": Param({"epochs": 2, "alpha": 0.001})}):
        op = _warm_start(tmp_path, template)
    result = op.execute(rendered(op, task_context("retrain"), {"tp": {"epochs": 2, "alpha": 0.001}}))
    params = ModelStore.open(str(tmp_path / "models")).get(result["version"]).params
    assert params["epochs"] == 2 and params["alpha"] == 0.001


def test_trainer_params_from_an_xcom_arg_reach_the_trainer(tmp_path: Path, ledger: Any) -> None:
    # It failed the DAG file: "TypeError: 'XComArg' object is not iterable".
    from airflow.sdk import task

    write_data(tmp_path / "data")
    with DAG("from_xcom", schedule=None):

        @task
        def choose() -> dict[str, Any]:
            return {"epochs": 2}

        op = _warm_start(tmp_path, choose())
    assert op.upstream_task_ids == {"choose"}  # Airflow saw the XCom: the task waits for it
    context = {**task_context("retrain"), "ti": context_for(choose={"epochs": 2})["ti"]}
    op.render_template_fields(context)
    result = op.execute(context)
    assert ModelStore.open(str(tmp_path / "models")).get(result["version"]).params["epochs"] == 2


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[2, 3]", r"trainer_params must be a dict of keyword arguments, got str '\[2, 3\]'"),
        ("{'epochz': 2}", r"trainer_params 'epochz' is not an option of trainer 'sklearn-sgd'"),
        ("{1: 2}", r"trainer_params must name each argument with a string, got the keys 1"),
    ],
)
def test_a_whole_template_rendering_no_trainer_params_fails_before_training(
    tmp_path: Path, ledger: Any, value: str, message: str
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    write_data(tmp_path / "data")
    with DAG("whole_template_bad", schedule=None):
        op = _warm_start(tmp_path, "{{ params.tp }}")
    with pytest.raises(AirflowFailException, match=message):
        op.execute(rendered(op, task_context("retrain"), {"tp": value}))
    assert not (tmp_path / "models").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (5, r"trainer_params must be a dict of keyword arguments, got int 5"),
        ("epochs=2", r"trainer_params must be a dict of keyword arguments, got str 'epochs=2'"),
        ('{"epochz": 2}', r"trainer_params 'epochz' is not an option"),  # text written out: read now
    ],
)
def test_trainer_params_that_are_no_dict_fail_when_the_dag_is_parsed(
    tmp_path: Path, value: Any, message: str
) -> None:
    from costaware.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=f"WarmStartRetrainOperator 'retrain': {message}"):
        _warm_start(tmp_path, value)


def test_a_remote_job_gets_the_dict_a_whole_template_rendered(tmp_path: Path, ledger: Any) -> None:
    with DAG("whole_template_remote", schedule=None):
        op = RemoteTrainingOperator(
            **local_operator_args(tmp_path),
            trainer_params="{{ params.tp }}",
            market="on_demand",
            instance_type="m5.large",
            on_demand_usd_per_hour="0.1",
        )
    with pytest.raises(TaskDeferred):
        op.execute(rendered(op, context_for(), {"tp": {"epochs": 2, "alpha": 0.001}}))
    (spec_file,) = (tmp_path / "ckpt" / "_jobs").rglob("spec.json")
    assert json.loads(spec_file.read_text())["trainer_params"] == {"epochs": 2, "alpha": 0.001}


def test_budgeted_tuning_takes_trainer_kwargs_from_a_whole_template(ledger_url: str) -> None:
    # budgeted_tuning(trainer_kwargs="{{ params.kw }}") failed the DAG file: "dictionary update sequence".
    from costaware.operators.tuning import budgeted_tuning

    Ledger.from_url(ledger_url)
    with DAG("tuning_whole_template", schedule=None):
        group = budgeted_tuning(
            study_name="whole",
            trainer=RecordingTrainer,
            trainer_kwargs="{{ params.kw }}",
            search_space={"lr": {"type": "float", "low": 0.05, "high": 1.0}},
            min_resource=1,
            max_resource=2,
            max_usd="5",
            max_trials=1,
            instance_type="m5.large",
            usd_per_hour="1",
            fallback_trial_seconds=5,
        )
    plan = next(t for t in group.children.values() if t.task_id == "tuning.plan")
    ident = {"dag_id": "tune", "run_id": "manual__1", "map_index": 0, "try_number": 1, "max_tries": 0}
    plan.execute({"ti": SimpleNamespace(task_id="tuning.plan", task=plan, **ident)})
    trial = BudgetedTuningOperator(
        task_id="trial", study_name="whole", trainer=RecordingTrainer, trainer_kwargs="{{ params.kw }}"
    )
    SEEN.clear()
    context = {"ti": SimpleNamespace(task_id="trial", task=trial, **ident)}
    trial.execute(rendered(trial, context, {"kw": {"cap": 4, "path": "/data/4"}}))
    assert SEEN == [{"cap": 4, "path": "/data/4"}]


@pytest.mark.parametrize(
    ("backend", "options", "grace", "seconds"),
    [
        ("local", {}, 45, 45.0),
        ("local", {}, None, 110.0),
        # Batch: what ECS leaves before its SIGKILL, less the launcher's push; 110 s was cut at each submit.
        ("batch", {"spot_queue": "s", "on_demand_queue": "o", "job_definition": "d"}, None, 20.0),
        (
            "batch",
            {"spot_queue": "s", "on_demand_queue": "o", "job_definition": "d", "stop_timeout_seconds": 120},
            None,
            110.0,
        ),
    ],
)
def test_a_templated_grace_period_is_read_rendered_and_blank_is_the_backends(
    tmp_path: Path, backend: str, options: dict[str, Any], grace: Any, seconds: float
) -> None:
    from costaware.adapters.compute.batch import cut_grace

    with DAG("templated_grace", schedule=None, params={"grace": Param(None, type=["null", "number"])}):
        op = RemoteTrainingOperator(
            **{**local_operator_args(tmp_path), "backend_options": "{{ params.options | tojson }}"},
            backend="{{ params.backend }}",
            preemption_grace_seconds="{{ params.grace or '' }}",
            market="on_demand",
            instance_type="m5.large",
            on_demand_usd_per_hour="0.1",
        )
    rendered(op, context_for(), {"grace": grace, "backend": backend, "options": options})
    assert op._plan_arguments(context_for()).grace_seconds == seconds
    if backend == "batch":  # nothing for the submit to cut, nor to warn of
        assert cut_grace(seconds, float(options.get("stop_timeout_seconds", 30))) is None


UNSET_RENDERINGS = [
    ("{{ params.v }}", " "),  # a blank trigger-form field
    ("{{ params.v }} ", None),  # "None "
    ("{{ params.v | tojson }}", None),  # "null"
]


def _rendered_unset(tmp_path: Path, template: str, value: Any, **templated: Any) -> RemoteTrainingOperator:
    with DAG("templated_unset", schedule=None, params={"v": Param(None, type=["null", "string"])}):
        op = RemoteTrainingOperator(
            **local_operator_args(tmp_path),
            **{name: template for name in templated},
            market="on_demand",
            instance_type="m5.large",
            on_demand_usd_per_hour="0.1",
        )
    rendered(op, context_for(), {"v": value})
    assert all(getattr(op, name).strip() in ("", "None", "null") for name in templated)  # rendered
    return op


# As the bill reads them (core.given, stripped): " " and "None " failed the task as no number of seconds
# and as no prices file.
@pytest.mark.parametrize(("template", "value"), UNSET_RENDERINGS)
def test_a_grace_period_rendered_from_an_unset_param_is_the_backends(
    tmp_path: Path, template: str, value: Any
) -> None:
    op = _rendered_unset(tmp_path, template, value, preemption_grace_seconds=True)
    assert op._plan_arguments(context_for()).grace_seconds == 110.0  # the local backend's default


@pytest.mark.parametrize(("template", "value"), UNSET_RENDERINGS)
def test_prices_rendered_from_an_unset_param_are_not_given(tmp_path: Path, template: str, value: Any) -> None:
    op = _rendered_unset(tmp_path, template, value, prices=True)
    assert op._plan_arguments(context_for()).prices is None


def test_a_templated_grace_period_that_renders_no_number_is_named(tmp_path: Path) -> None:
    from costaware.core.errors import ConfigurationError

    with DAG("templated_grace_bad", schedule=None, params={"grace": Param("soon", type="string")}):
        op = RemoteTrainingOperator(
            **local_operator_args(tmp_path),
            preemption_grace_seconds="{{ params.grace }}",
            market="on_demand",
            instance_type="m5.large",
            on_demand_usd_per_hour="0.1",
        )
    rendered(op, context_for(), {"grace": "soon"})
    with pytest.raises(
        ConfigurationError, match="preemption_grace_seconds must be a number of seconds > 0, got 'soon'"
    ):
        op._plan_arguments(context_for())


@pytest.mark.parametrize("deadline", [" ", "None", "null"])
def test_a_deadline_template_that_renders_not_given_is_warned(
    tmp_path: Path, ledger: Any, deadline: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # "{{ params.deadline }}" left unset meant no deadline of the run's own, said at most at INFO.
    write_data(tmp_path / "data")
    with DAG("templated_deadline", schedule=None, params={"deadline": Param(None, type=["null", "string"])}):
        op = RemoteTrainingOperator(
            **local_operator_args(tmp_path),
            deadline="{{ params.deadline }}",
            market="on_demand",
            instance_type="m5.large",
            on_demand_usd_per_hour="0.1",
            poll_interval=0.1,
        )
    drive(op, rendered(op, context_for(), {"deadline": deadline}))
    [line] = [line for line in capsys.readouterr().out.splitlines() if "which is not given" in line]
    assert (
        "warning" in line
        and (
            f"deadline '{{{{ params.deadline }}}}' rendered {deadline!r}, which is not given (blank, None or "
            "null): there is none; give the param a value for a deadline of this run's own"
        )
        in line
    )


#: What a templated instance type is told to become, as the spot window sensor tells it.
TEMPLATE_FIX = "make the template (and the param or XCom it reads) give"


def _templated_type(tmp_path: Path, ledger: Any, **arguments: Any) -> RemoteTrainingOperator:
    """A local training whose instance type is a template, holding $5 of ``team=ml`` before its job."""
    write_data(tmp_path / "data")
    ledger.set_budget("team=ml", "month", "10")
    with DAG("templated_type", schedule=None):
        return RemoteTrainingOperator(
            **{
                **local_operator_args(tmp_path),
                "instance_type": "{{ params.instance_type }}",
                "market": "on_demand",
                "on_demand_usd_per_hour": "0.1",
                "max_usd": "5",
                "budget_scope": "team=ml",
                "tags": {"team": "ml"},
                "poll_interval": 0.1,
                **arguments,
            }
        )


@pytest.mark.parametrize(
    ("params", "arguments", "message"),
    [
        (
            {"instance_type": "g5.xlarge "},
            {},
            "instance_type 'g5.xlarge ' (rendered from '{{ params.instance_type }}') has blanks around it, "
            f"which no instance type has: {TEMPLATE_FIX} 'g5.xlarge'",
        ),
        (
            {"instance_type": "\tm5.large"},
            {},
            f"has blanks around it, which no instance type has: {TEMPLATE_FIX} 'm5.large'",
        ),
        # Checked against the backend as rendered, as a type and backend written out are at the parse.
        (
            {"instance_type": "ml.g5.xlarge", "backend": "kubernetes"},
            {"backend": "{{ params.backend }}", "backend_options": {"image": "costaware:1"}},
            "instance_type 'ml.g5.xlarge' (rendered from '{{ params.instance_type }}') is a SageMaker type, "
            f"but the kubernetes backend runs on EC2 instances: {TEMPLATE_FIX} 'g5.xlarge', or use the",
        ),
        (
            {"instance_type": "g5.xlarge", "backend": "sagemaker"},
            {"backend": "{{ params.backend }}", "backend_options": {}},
            f"is no SageMaker type: SageMaker names its types with 'ml.' in lower case; {TEMPLATE_FIX} "
            "'ml.g5.xlarge' (priced at SageMaker's prices, not EC2's)",
        ),
        # A type written out, its backend a template: the type is what to correct, as written.
        (
            {"backend": "batch"},
            {"instance_type": "ml.g5.xlarge", "backend": "{{ params.backend }}", "backend_options": {}},
            "instance_type 'ml.g5.xlarge' is a SageMaker type, but the batch backend runs on EC2 instances: "
            "write 'g5.xlarge', or use the sagemaker backend",
        ),
    ],
)
def test_an_instance_type_rendered_that_the_backend_refuses_fails_before_anything_is_held(
    tmp_path: Path, ledger: Any, params: dict[str, Any], arguments: dict[str, Any], message: str
) -> None:
    # "g5.xlarge " went to the job as written (a backend refuses it at the submit, after the hold), and a
    # SageMaker name to Batch or Kubernetes, which the parse refuses written out.
    from airflow.sdk.exceptions import AirflowFailException

    op = _templated_type(tmp_path, ledger, **arguments)
    with pytest.raises(AirflowFailException) as failed:
        drive(op, rendered(op, context_for(), params))
    assert message in str(failed.value), str(failed.value)
    assert ledger.open_reservations() == [] and ledger.entries() == []
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "jobs").exists()  # no spec, no job


@pytest.mark.parametrize(
    ("template", "value"),
    [
        ("{{ params.instance_type }}", ""),
        ("{{ params.instance_type }}", " "),  # a blank trigger-form field
        ("{{ params.instance_type }}", None),  # "None"
        ("{{ params.instance_type | tojson }}", None),  # "null"
    ],
)
def test_an_instance_type_rendered_not_given_without_a_spot_decision_is_refused_naming_the_template(
    tmp_path: Path, ledger: Any, template: str, value: Any
) -> None:
    # It failed as "no instance type: pass instance_type or a spot decision that has one", which it was.
    from airflow.sdk.exceptions import AirflowFailException

    op = _templated_type(tmp_path, ledger, instance_type=template)
    with pytest.raises(AirflowFailException) as failed:
        drive(op, rendered(op, context_for(), {"instance_type": value}))
    said = str(failed.value)
    assert f"instance_type {template!r} rendered {op.job_instance_type!r}, which gives no type" in said, said
    assert f"and there is no spot decision to take one from: {TEMPLATE_FIX} one, such as 'g5.xlarge'" in said
    assert ledger.open_reservations() == [] and ledger.entries() == []


def test_an_instance_type_rendered_not_given_takes_the_spot_decisions_with_a_warning(
    tmp_path: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its documented default, as a deadline's: taken without a word before.
    op = _templated_type(tmp_path, ledger, spot_decision=m5_decision("on_demand"), market=None)
    capsys.readouterr()
    drive(op, rendered(op, context_for(), {"instance_type": None}))
    assert [e["instance_type"] for e in ledger.entries() if e["task_id"] == "train"] == ["m5.large"]
    [line] = [line for line in capsys.readouterr().out.splitlines() if "which gives no type" in line]
    assert (
        "warning" in line
        and (
            "instance_type '{{ params.instance_type }}' rendered 'None', which gives no type (what a "
            "template renders of a param or XCom that is not set): the spot decision's 'm5.large' is used; "
            "give the param a value for a type of this run's own"
        )
        in line
    )
