from __future__ import annotations

from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag

DAGS = Path(__file__).resolve().parents[2] / "dags"
EXAMPLE_DAGS = ["cost_aware_retrain", "remote_retrain", "budgeted_tuning", "own_training", "spot_tuning"]


def test_example_dags_import_without_errors() -> None:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert "cost_aware_retrain" in bag.dag_ids


def test_retrain_dag_shape() -> None:
    dag = DagBag(dag_folder=str(DAGS)).dags["cost_aware_retrain"]  # parsed only, no metadata DB needed
    assert dag.get_task("spend_gate").downstream_task_ids == {"spot_window"}
    assert dag.get_task("spend_gate").for_task_id == "retrain"
    assert dag.get_task("retrain").upstream_task_ids == {"spot_window"}
    # A day the quality gate refuses costs no feature computation, and nothing downstream of it runs.
    assert dag.get_task("build_features").upstream_task_ids == {"check_locality", "quality_gate"}
    assert type(dag.timetable).__name__ == "OffPeakTimetable"
    assert {"team:ml-platform", "project:flight-delays"} <= set(dag.tags)


def _form_params() -> dict[str, dict]:  # type: ignore[type-arg]
    """The params as the trigger form gets them: from the DAG's serialized form (the api-server's)."""
    from airflow.serialization.serialized_objects import DagSerialization

    dag = DagBag(dag_folder=str(DAGS)).dags["cost_aware_retrain"]
    params = DagSerialization.to_dict(dag)["dag"]["params"]
    return {name: {**p, "schema": p["schema"]["__var"]} for name, p in params}


def _required_in_form(schema: dict) -> bool:  # type: ignore[type-arg]
    # The form's rule (Airflow 3.3 UI): a field is required unless its type allows null.
    kind = schema.get("type")
    return bool(kind) and not (isinstance(kind, list) and "null" in kind)


def test_trigger_form_params_have_titles_types_and_bounds() -> None:
    params = _form_params()
    for name in ("train_budget_usd", "force_full_retrain", "train_instance_type", "spot_deadline"):
        assert params[name]["schema"].get("title"), name
    assert params["replay_date"]["schema"]["title"] == "Day of 2013 to replay"
    assert params["data_root"]["schema"]["title"] == "Data folder"

    budget = params["train_budget_usd"]
    assert budget["schema"]["type"] == "number"  # validated as you type; letters cannot be entered
    low, high = budget["schema"]["exclusiveMinimum"], budget["schema"]["exclusiveMaximum"]
    assert 0 <= low < budget["default"] < high
    assert budget["schema"]["exclusiveMaximum"] >= 999_999  # a big value still reaches the budget's cap check
    for name in ("team", "project", "owner", "priority"):
        assert params[name]["schema"].get("title"), name

    toggle = params["force_full_retrain"]
    assert toggle["default"] is False and not _required_in_form(toggle["schema"])
    assert "boolean" in toggle["schema"]["type"]

    deadline = params["spot_deadline"]
    assert deadline["schema"]["format"] == "date-time"
    text = deadline["description"]
    assert "ISO" not in text and "Pick a date and a time" in text and "time zone" in text and "UTC" in text


def test_the_form_s_values_validate_and_bad_ones_do_not() -> None:
    from airflow.sdk import Param
    from airflow.sdk.exceptions import ParamValidationError

    params = _form_params()
    budget = Param(params["train_budget_usd"]["default"], **params["train_budget_usd"]["schema"])
    assert budget.resolve(500) == 500 and budget.resolve(999_999) == 999_999
    for bad in ("abc", -1, 0, 1_000_000, 2_000_000):
        with pytest.raises(ParamValidationError):
            budget.resolve(bad)
    toggle = Param(False, **params["force_full_retrain"]["schema"])
    assert toggle.resolve(None) is None and toggle.resolve(True) is True


def test_spend_gate_checks_the_instance_type_before_reserving() -> None:
    gate = DagBag(dag_folder=str(DAGS)).dags["cost_aware_retrain"].get_task("spend_gate")
    assert gate.instance_type == "{{ params.train_instance_type }}" and gate.region == "us-east-1"


@pytest.mark.parametrize("dag_id", EXAMPLE_DAGS)
def test_no_number_field_is_clamped_silently_by_the_form(dag_id: str) -> None:
    """The form's number field clamps a typed value to ``minimum``/``maximum`` on blur, without a word.

    Exclusive bounds are not given to the field: Airflow checks them when the run is triggered and refuses
    an out-of-range value by name (``test_trigger_form_params_are_validated`` in tests/integration).
    """
    for name, param in DagBag(dag_folder=str(DAGS)).dags[dag_id].params.items():
        schema = param.schema if hasattr(param, "schema") else {}
        assert "minimum" not in schema and "maximum" not in schema, (dag_id, name)


@pytest.mark.parametrize("dag_id", EXAMPLE_DAGS)
def test_a_dollar_param_says_how_to_write_an_amount_the_form_refuses_with_a_bare_regex(dag_id: str) -> None:
    # '$0.40' typed in spot_max_usd_per_hour was refused as "'$0.40' does not match '^\\d{1,4}...'" (Airflow's
    # own message), and nothing on the form said the '$' was the problem.
    from airflow.sdk.exceptions import ParamValidationError

    params = DagBag(dag_folder=str(DAGS)).dags[dag_id].params
    for name in params:
        param = params.get_param(name)
        if not param.schema.get("pattern") or param.resolve("0.40", suppress_exception=True) != "0.40":
            continue
        try:
            param.resolve("$0.40")
        except ParamValidationError:
            assert "a number of dollars without '$', e.g. 0.40" in (param.description or ""), (dag_id, name)


@pytest.mark.parametrize("dag_id", EXAMPLE_DAGS)
def test_tag_params_refuse_what_the_ledger_cannot_store(dag_id: str) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    params = DagBag(dag_folder=str(DAGS)).dags[dag_id].params
    names = [n for n in ("team", "project", "owner") if n in params]
    assert names
    for name in names:
        param = params.get_param(name)
        assert param.schema.get("title"), name
        assert param.resolve("Jane Doe") == "Jane Doe"
        for bad in ("Doe, Jane", "a=b", "", "   "):
            with pytest.raises(ParamValidationError):
                param.resolve(bad)


def test_every_example_dag_s_first_task_refuses_a_misspelt_conf_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # budgeted_tuning took -c '{"max_trial": 3}' without a word and ran the default 8 trials.
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    from costaware.core.budgets import TAG_NAMES
    from costaware.core.errors import ConfigurationError
    from costaware.params import check_run_conf

    bag = DagBag(dag_folder=str(DAGS))
    assert sorted(bag.dag_ids) == sorted(EXAMPLE_DAGS)  # a new example DAG is checked here too
    for dag_id, dag in bag.dags.items():
        untagged = [name for name in dag.params if name not in TAG_NAMES]
        for name in untagged:  # a letter dropped at the end of any param is refused, naming that param
            with pytest.raises(ConfigurationError, match=rf"'{name[:-1]}' \(did you mean '{name}'\?"):
                check_run_conf({name[:-1]: 1}, dag.params)
        (first,) = dag.roots  # the one task before any data is landed or money reserved
        typo = untagged[0][:-1]
        conf = {typo: 1, "team": "ml", "project": "churn", "owner": "jane"}  # the tags are always taken
        context = {"params": {}, "dag_run": SimpleNamespace(conf=conf), "dag": dag}
        monkeypatch.setitem(first.python_callable.__globals__, "get_current_context", lambda c=context: c)
        with pytest.raises(AirflowFailException) as refused:
            first.python_callable()
        message = str(refused.value)
        assert f"{typo!r} (did you mean {untagged[0]!r}? {untagged[0]!r} kept its default)" in message, dag_id
        assert "'team'" not in message and "'owner'" not in message, dag_id
        assert "fix the name and trigger the run again" in message, dag_id
