"""Allocation tags are checked where they enter; what cannot be stored is refused by name (issue 23, D1)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from costaware.core.budgets import Scope, valid_tags
from costaware.core.errors import ConfigurationError, InvalidBudgetError
from costaware.glue import run_tags


@pytest.mark.parametrize(
    ("tags", "kept", "dropped"),
    [
        ({"owner": "Jane Doe"}, {"owner": "Jane Doe"}, []),
        ({"owner": " ana "}, {"owner": "ana"}, []),
        ({"owner": "Doe, Jane", "project": "churn"}, {"project": "churn"}, ["owner"]),
        ({"team": "a=b"}, {}, ["team"]),
        ({"team": "  "}, {}, ["team"]),
        ({"1bad": "x"}, {}, ["1bad"]),
        # PostgreSQL refused these where SQLite took them; spooled, one blocked every later entry.
        ({"project": "p" * 129, "team": "ml"}, {"team": "ml"}, ["project"]),
        ({"project": "a\x00b"}, {}, ["project"]),
        ({"owner": "line\nbreak"}, {}, ["owner"]),
        ({"project": "p" * 128}, {"project": "p" * 128}, []),
    ],
)
def test_valid_tags_split_what_can_be_stored(tags: dict, kept: dict, dropped: list) -> None:  # type: ignore[type-arg]
    got_kept, got_dropped = valid_tags(tags)
    assert got_kept == kept and sorted(got_dropped) == dropped
    if dropped:  # the scope rule and the split agree: one spelling of the rule
        with pytest.raises(InvalidBudgetError):
            Scope.of(tags)
    else:
        assert Scope.of(tags).as_dict() == kept


def test_an_operator_refuses_a_run_tag_it_cannot_store_by_name() -> None:
    operator = SimpleNamespace(dag=SimpleNamespace(tags=["team:ml"]))
    with pytest.raises(ConfigurationError, match=r"tag 'owner' has value 'Doe, Jane'.*Trigger the run again"):
        run_tags(operator, {"params": {"owner": "Doe, Jane"}})
    assert run_tags(operator, {"params": {"owner": "Jane"}}) == {"team": "ml", "owner": "Jane"}


def test_an_operator_s_own_tags_are_checked_when_the_dag_is_parsed() -> None:
    from costaware.operators.data_locality import DataLocalityCheckOperator

    with pytest.raises(
        ValueError, match=r"DataLocalityCheckOperator 'locality': tag 'cost_center' has value 'a,b'"
    ):
        DataLocalityCheckOperator(
            task_id="locality",
            inputs={"x": "/tmp/x"},
            compute_region="us-east-1",
            tags={"cost_center": "a,b"},
        )


def test_tag_param_refuses_a_bad_default_and_states_the_rule() -> None:
    from costaware.params import tag_param

    param = tag_param("ml", title="Team")
    assert "without ',' or '='" in param.description
    with pytest.raises(ValueError, match="'a,b' for 'Team'"):
        tag_param("a,b", title="Team")


def test_tag_param_accepts_no_value_longer_than_a_ledger_tag_holds() -> None:
    # max_length was 200 by default: a 150-character value passed the form, then the run's tag was dropped
    # (a tag holds MAX_TAG_VALUE characters) and its spend gate failed.
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    from costaware.core.budgets import MAX_TAG_VALUE
    from costaware.params import tag_param

    params = ParamsDict({"project": tag_param("churn", title="Project")})
    with pytest.raises(ParamValidationError, match="Invalid input for param project"):
        params["project"] = "p" * (MAX_TAG_VALUE + 1)
    params["project"] = "p" * MAX_TAG_VALUE
    with pytest.raises(ValueError, match=r"max_length=200 for 'Project': give a whole number from 1 to 128"):
        tag_param("churn", title="Project", max_length=200)
    with pytest.raises(ValueError, match=r"'churn' for 'Project' has 5 characters: at most max_length=4"):
        tag_param("churn", title="Project", max_length=4)


@pytest.mark.parametrize("unset", ["null", " null ", "None", "None "])
def test_tag_param_refuses_a_trigger_value_that_reads_as_never_set(unset: str) -> None:
    # The form took "null" and the run's tags then dropped it without a word (run tags {}).
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    from costaware.params import tag_param

    params = ParamsDict({"project": tag_param("churn", title="Project")})
    with pytest.raises(ParamValidationError, match=r"Invalid input for param project") as refused:
        params["project"] = unset  # as a trigger's conf is applied
    assert repr(unset) in str(refused.value)
    params["project"] = "nullable"  # a name that only starts so is a name
    assert params.validate() == {"project": "nullable"}
    assert "not 'None' or 'null'" in tag_param("churn", title="Project").description
    with pytest.raises(ValueError, match=f"{unset!r} for 'Project'"):
        tag_param(unset, title="Project")


@pytest.mark.parametrize(
    ("scope", "meant"),
    [
        ("projct=churn", "project=churn"),  # a key typo
        ("project=chrun,team=ml", "project=churn,team=ml"),  # a value typo, the other tag kept
        ("owner=alice", None),  # nothing close: no guess
    ],
)
def test_a_scope_the_task_is_not_tagged_with_names_the_scope_its_tags_give(
    scope: str, meant: str | None
) -> None:
    # The message told a person to tag the DAG 'projct:churn': the typo, where the scope was mistyped.
    from costaware.glue import check_scope_is_tagged

    tags = {"project": "churn", "team": "ml"}
    with pytest.raises(ConfigurationError) as refused:
        check_scope_is_tagged(scope, tags, task_id="train", gate="spend gate 'gate'")
    message = str(refused.value)
    assert "the budget would never be charged" in message
    if meant is None:
        assert "typo" not in message and "Tag the DAG 'owner:alice'" in message
    else:
        assert f"A typo in the scope? The task's tags give scope '{meant}'. Otherwise, tag the DAG" in message
