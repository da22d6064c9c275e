"""The one reading of "not given" (``costaware.core.given``): what a template of an unset param renders."""

from __future__ import annotations

from decimal import Decimal

import jinja2
import pytest

from costaware.core.given import blank, not_given


@pytest.mark.parametrize(
    ("value", "unset"),
    [
        (None, True),
        ("", True),
        (" ", True),
        ("None", True),  # {{ params.rate }} of an unset param
        ("null", True),  # {{ params.rate | tojson }}
        (" None\n", True),  # a template with a space around it
        ("none", False),  # no template renders None so: the value's own check names it
        ("NULL", False),
        ("None-such", False),
        ("0", False),
        (0, False),
        (Decimal(0), False),
        (False, False),
        ({}, False),
    ],
)
def test_not_given_is_what_a_template_of_an_unset_param_renders(value: object, unset: bool) -> None:
    assert not_given(value) is unset
    assert blank(value) is (None if unset else value)  # a given value comes back as given, unstripped


@pytest.mark.parametrize("template", ["{{ x }}", "{{ x | tojson }}", " {{ x }} ", "{{ x if x else '' }}"])
def test_every_rendering_of_an_unset_param_is_not_given(template: str) -> None:
    rendered = jinja2.Environment().from_string(template).render(x=None)
    assert not_given(rendered), rendered
