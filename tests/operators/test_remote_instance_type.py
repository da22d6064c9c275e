"""``RemoteTrainingOperator`` checks an instance type written out as the DAG is parsed, as its backend names.

A misspelt type ("ml.g5.xlarg", "g5.xlarge ") was refused by SageMaker or Batch only at the submit, after the
spend gate had reserved the money, and the local backend took it without a word.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from remote_support import command_operator_args

from costaware.core.errors import ConfigurationError
from costaware.operators.remote_instance_type import check_written_instance_type
from costaware.operators.remote_training import RemoteTrainingOperator


def operator(tmp: Path, **kwargs: Any) -> RemoteTrainingOperator:
    return RemoteTrainingOperator(**{**command_operator_args(tmp, "ok"), "deferrable": False, **kwargs})


@pytest.mark.parametrize(
    ("instance_type", "backend", "message"),
    [
        ("ml.g5.xlarg", "sagemaker", r"'ml.g5.xlarg' is no AWS instance type .* nearest known: ml.g5.xlarge"),
        ("g5.xlarg", "batch", r"'g5.xlarg' is no AWS instance type \(family.size, e.g. g5.xlarge\); the "),
        ("G5.XLARGE", "kubernetes", r"'G5.XLARGE' is no AWS instance type .* nearest known: g5.xlarge"),
        ("g5.xlarge ", "local", r"instance_type 'g5.xlarge ' has blanks around it, .* write 'g5.xlarge'"),
        (" ml.g5.xlarge", "sagemaker", r"has blanks around it, which no backend's type has: write 'ml.g5"),
        ("g5.xlarge ", "{{ params.backend }}", r"has blanks around it"),
        ("g5.xlarge", "sagemaker", r"'g5.xlarge' is no SageMaker type: .* write 'ml.g5.xlarge'"),
        ("ml.g5.xlarge", "batch", r"is a SageMaker type, but the batch backend runs on EC2 .* 'g5.xlarge'"),
        ("ml.g5.xlarge", "kubernetes", r"the kubernetes backend runs on EC2 instances: write 'g5.xlarge'"),
    ],
)
def test_a_type_the_backend_refuses_fails_the_parse_naming_the_type_meant(
    tmp_path: Path, instance_type: str, backend: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        check_written_instance_type(instance_type, backend)
    with pytest.raises(ConfigurationError, match=message):
        operator(tmp_path, instance_type=instance_type, backend=backend)


@pytest.mark.parametrize(
    ("instance_type", "backend"),
    [
        ("g5.xlarge", "local"),
        ("m5.large", "batch"),
        ("p4d.24xlarge", "kubernetes"),
        ("ml.g5.xlarge", "sagemaker"),
        ("ml.p4d.24xlarge", "sagemaker"),
        ("ml.g5.xlarge", "{{ params.backend }}"),
        # Read when the task runs.
        ("{{ params.instance_type }}", "sagemaker"),
        ("g5.{{ params.size }}", "batch"),
        (None, "sagemaker"),
        ("None", "batch"),
    ],
)
def test_a_listed_or_templated_type_passes_without_a_word(instance_type: Any, backend: str) -> None:
    assert check_written_instance_type(instance_type, backend) is None


@pytest.mark.parametrize(
    ("instance_type", "backend", "nearest"),
    [
        # The shape of an AWS type the bundled list lacks: a newer type, or one only imported prices know.
        ("g5.13xlarge", "batch", "g5.16xlarge, g5.12xlarge"),
        ("ml.g5.13xlarge", "sagemaker", "ml.g5.16xlarge, ml.g5.12xlarge"),
        # The local backend runs on the team's own names too, whatever their shape.
        ("g5.xlarg", "local", "g5.xlarge"),
        ("g5.xlarg", "{{ params.backend }}", "g5.xlarge"),
    ],
)
def test_a_type_the_price_list_lacks_is_warned_of_with_the_nearest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], instance_type: str, backend: str, nearest: str
) -> None:
    warning = check_written_instance_type(instance_type, backend)
    assert warning is not None
    assert f"instance_type {instance_type!r} is not in the bundled EC2 price list" in warning
    assert f"nearest known: {nearest}" in warning and "if it is a typo, correct it" in warning
    if backend == "local":
        capsys.readouterr()
        operator(tmp_path, instance_type=instance_type, backend=backend)
        assert f"RemoteTrainingOperator 'train': {warning}" in capsys.readouterr().out
