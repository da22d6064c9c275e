"""``billed_instances`` of a job an older costaware submitted with an ``instance_count`` it took."""

from __future__ import annotations

import logging

import pytest

from costaware.adapters.compute.base import billed_instances
from costaware.core.errors import ConfigurationError


@pytest.mark.parametrize(("written", "ran"), [(1.5, 1), (2.9, 2), (True, 1), (1001, 1001)])
def test_an_older_releases_instance_count_bills_the_instances_its_job_ran_with(
    written: object, ran: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Up to ea3be43c SageMaker's submit sent InstanceCount=int(instance_count), with no upper bound: 1.5
    # ran 1 instance, True one. The bill of such a job (its trigger, a kill, a reconcile) raised
    # ConfigurationError: unbilled.
    with caplog.at_level(logging.WARNING):
        assert billed_instances({"instance_count": written}) == ran
    assert f"instance_count {written!r}" in caplog.text and f"billed as {ran}" in caplog.text


@pytest.mark.parametrize("written", [0.5, "1.5", "two", -3])
def test_an_instance_count_no_release_could_have_submitted_is_still_refused(written: object) -> None:
    # int() refused the text "1.5" and "two", and botocore refuses an InstanceCount under 1 before any
    # request (0.5 was sent as 0): no job ran with them.
    with pytest.raises(
        ConfigurationError, match=f"instance_count must be a whole number from 1 to 1000, got {written!r}"
    ):
        billed_instances({"instance_count": written})
