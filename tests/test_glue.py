"""``glue.parse_decimal``: one parser for the numbers operators and sensors take, its messages per caller."""

from __future__ import annotations

from decimal import Decimal

import pytest

from costaware.core.errors import ConfigurationError
from costaware.glue import parse_decimal


@pytest.mark.parametrize(
    ("value", "kwargs", "said"),
    [
        ("lots", {}, "memory_gib must be a number, got 'lots'"),
        ("inf", {}, "memory_gib must be a finite number, got 'inf'"),
        ("inf", {"unit": "GiB"}, "memory_gib must be a finite number of GiB, got 'inf'"),
        (-1, {"non_negative": True}, "memory_gib must be a number >= 0, got -1"),
        (0, {"positive": True, "unit": "GiB"}, "memory_gib must be a number of GiB > 0, got 0"),
        ("nan", {"positive": True}, "memory_gib must be a number > 0, got 'nan'"),
        # A template is only said to be one where the argument is read when the DAG is parsed.
        ("{{ params.m }}", {}, "memory_gib must be a number, got '{{ params.m }}'"),
        (
            "{{ params.m }}",
            {"unit": "GiB", "read_at_parse": True},
            "memory_gib must be a number of GiB, got '{{ params.m }}' (it is not templated: it is read when "
            "the DAG is parsed; write the number)",
        ),
        # A Jinja comment is a template too (Airflow renders it away): it was named as a bad number only.
        (
            "{# minutes #}5",
            {"read_at_parse": True},
            "memory_gib must be a number, got '{# minutes #}5' (it is not templated: it is read when the DAG "
            "is parsed; write the number)",
        ),
    ],
)
def test_a_bad_number_is_named_with_its_unit_and_range(value: object, kwargs: dict, said: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_decimal(value, name="memory_gib", **kwargs)
    assert str(raised.value) == said


@pytest.mark.parametrize(
    ("value", "number"), [(" 2.5 ", Decimal("2.5")), (0, Decimal(0)), ("1e3", Decimal(1000))]
)
def test_a_number_is_read_as_written(value: object, number: Decimal) -> None:
    assert parse_decimal(value, name="memory_gib", non_negative=True, unit="GiB") == number


@pytest.mark.parametrize(
    ("value", "template"),
    [("{{ x }}", True), ("{% if a %}b{% endif %}", True), ("{# c #}b", True), ("plain", False), (5, False)],
)
def test_glue_and_the_operators_tell_a_template_alike(value: object, template: bool) -> None:
    from costaware.glue import is_template
    from costaware.operators import templating

    # Two copies disagreed on a Jinja comment: an operator checked "{# c #}b" as written when the DAG was
    # parsed, though Airflow renders it to "b".
    assert is_template(value) is templating.is_template(value) is template
    assert templating.is_literal(value) is not template
