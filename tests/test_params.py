"""The trigger form's params refuse what the DAG cannot use, before the run starts, and say the rule."""

from __future__ import annotations

import pytest
from airflow.sdk.definitions.param import ParamValidationError

from costaware.params import seconds_param, usd_param


@pytest.mark.parametrize("given", ["1.50", "0", "999999.999999"])
def test_usd_param_takes_plain_dollars(given: str) -> None:
    assert usd_param("0.05", title="Estimate", description="x.").resolve(given) == given


@pytest.mark.parametrize("given", ["1,50", "$1.50", "-1", "1.", "", "1e3", 1.5])
def test_usd_param_refuses_what_is_not_plain_dollars(given: object) -> None:
    with pytest.raises(ParamValidationError):
        usd_param("0.05", title="Estimate", description="x.").resolve(given)


def test_usd_param_states_its_rule_and_checks_its_default() -> None:
    param = usd_param("1.00", title="Cap", description="Hard cap.", optional=True)
    assert param.description.startswith("Hard cap. US dollars as digits with an optional dot")
    assert param.resolve(None) is None  # optional: empty means no cap
    with pytest.raises(ParamValidationError):
        usd_param("1.00", title="Estimate", description="x.").resolve(None)
    with pytest.raises(ValueError, match=r"'1,00' for 'Cap' must be US dollars"):
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
