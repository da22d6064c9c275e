"""``RemoteTrainingOperator`` checks an instance type written out as the DAG is parsed, as its backend names.

A misspelt type ("ml.g5.xlarg", "g5.xlarge ") was refused by SageMaker or Batch only at the submit, after the
spend gate had reserved the money, and the local backend took it without a word.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
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
        ("G5.XLARGE", "batch", r"'G5.XLARGE' is no AWS instance type .* nearest known: g5.xlarge"),
        ("n1-standard-8 ", "kubernetes", r"has blanks around it, which no instance type has: write 'n1-"),
        ("g5.xlarge ", "local", r"instance_type 'g5.xlarge ' has blanks around it, .* write 'g5.xlarge'"),
        (" ml.g5.xlarge", "sagemaker", r"has blanks around it, which no instance type has: write 'ml.g5"),
        ("g5.xlarge ", "{{ params.backend }}", r"has blanks around it"),
        ("g5.xlarge", "sagemaker", r"'g5.xlarge' is no SageMaker type: .* write 'ml.g5.xlarge' \(priced"),
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


@pytest.mark.parametrize(
    ("instance_type", "advice"),
    [
        # Only 'ml.' + the name, the advice was refused at the next parse ('ml.g5.xlarg', 'ml.ML.G5.XLARGE').
        ("ML.G5.XLARGE", "write 'ml.g5.xlarge' (priced at SageMaker's prices, not EC2's)"),
        ("ml.G5.xlarge", "write 'ml.g5.xlarge' (priced at SageMaker's prices, not EC2's)"),
        ("G5.xlarge", "write 'ml.g5.xlarge' (priced at SageMaker's prices, not EC2's)"),
        (
            "g5.xlarg",
            "'ml.g5.xlarg' would be no instance type either; the nearest known: ml.g5.xlarge, ml.g5g.xlarge, "
            "ml.g5.8xlarge",
        ),
        ("gpu-large", "'ml.gpu-large' would be no instance type either; the nearest known: ml.x8g.large, "),
        (
            "qqqqqqqq",
            "'ml.qqqqqqqq' would be no instance type either (family.size, e.g. ml.g5.xlarge): see `costaware "
            "prices list`",
        ),
        # Of AWS's shape, but not in the bundled list: maybe a newer type.
        (
            "g5.13xlarge",
            "write 'ml.g5.13xlarge' if that type is meant (the bundled EC2 price list lacks it; the nearest "
            "known: ml.g5.16xlarge, ml.g5.12xlarge",
        ),
    ],
)
def test_a_type_not_spelt_as_sagemaker_spells_them_is_refused_with_the_type_meant_or_the_nearest(
    tmp_path: Path, instance_type: str, advice: str
) -> None:
    said = (
        f"instance_type {instance_type!r} is no SageMaker type: SageMaker names its types with 'ml.' in lower"
    )
    for check in (
        lambda: check_written_instance_type(instance_type, "sagemaker"),
        lambda: operator(tmp_path, instance_type=instance_type, backend="sagemaker"),
    ):
        with pytest.raises(ConfigurationError) as e:
            check()
        assert str(e.value).startswith(said) and advice in str(e.value), str(e.value)
        assert f"write 'ml.{instance_type}' (priced" not in str(e.value)  # the old advice, refused next


KUBERNETES_OPTIONS = {"image": "costaware:1"}


@pytest.mark.parametrize("instance_type", ["n1-standard-8", "Standard_NC6s_v3", "a2-highgpu-1g", "G5.XLARGE"])
def test_a_kubernetes_type_of_no_aws_shape_is_only_warned_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], instance_type: str
) -> None:
    # The node selector takes the name as written, and GKE, AKS and own clusters name their nodes so: such a
    # name, refused as no AWS type, failed the parse of the whole DAG file (through default_args too).
    warning = check_written_instance_type(instance_type, "kubernetes", "3.67")
    assert warning is not None
    assert warning.startswith(f"instance_type {instance_type!r} is no AWS instance type (family.size, e.g. ")
    assert "selects nodes labelled node.kubernetes.io/instance-type with it as written" in warning
    # A GKE or AKS name is near no EC2 type: no list to point to; an EC2 one in capitals is.
    near = "; the nearest known: g5.xlarge" if instance_type == "G5.XLARGE" else "g5.xlarge):"
    assert near in warning
    capsys.readouterr()
    default_args = {"instance_type": instance_type, "backend": "kubernetes", "on_demand_usd_per_hour": "3.67"}
    with DAG("gke_retrain", schedule=None, default_args=default_args):
        op = operator(tmp_path, backend_options=KUBERNETES_OPTIONS)
    assert op.job_instance_type == instance_type
    assert f"RemoteTrainingOperator 'train': {warning}" in capsys.readouterr().out
    # Blanks and SageMaker's names stay refused there, as the backend refuses them at the submit.
    with pytest.raises(
        ConfigurationError, match="is a SageMaker type, but the kubernetes backend runs on EC2"
    ):
        check_written_instance_type(f"ml.{instance_type}", "kubernetes", "3.67")
    with pytest.raises(ConfigurationError, match="has blanks around it"):
        check_written_instance_type(f" {instance_type}", "kubernetes", "3.67")


@pytest.mark.parametrize("backend", ["batch", "kubernetes", "sagemaker"])
@pytest.mark.parametrize("on_demand", ["60", "{{ params.on_demand_usd_per_hour }}"])
def test_a_type_the_price_list_lacks_with_its_on_demand_price_given_is_warned_of_its_spot_prices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str, on_demand: str
) -> None:
    # The given price stands in for the list's: "refuses it there if none has it, unless
    # on_demand_usd_per_hour is given" said the run would refuse a type whose price was given.
    instance_type = "ml.p7.48xlarge" if backend == "sagemaker" else "p7.48xlarge"
    warning = check_written_instance_type(instance_type, backend, on_demand)
    assert warning is not None
    assert f"instance_type {instance_type!r} is not in the bundled EC2 price list" in warning
    assert (
        "on_demand_usd_per_hour stands in for its list price, but its spot prices are read under" in warning
    )
    assert "if it is a typo, correct it" in warning and "unless on_demand_usd_per_hour" not in warning
    options = KUBERNETES_OPTIONS if backend == "kubernetes" else {}
    capsys.readouterr()
    priced = {"on_demand_usd_per_hour": on_demand, "backend_options": options}
    operator(tmp_path, instance_type=instance_type, backend=backend, **priced)
    assert f"RemoteTrainingOperator 'train': {warning}" in capsys.readouterr().out
    # Without it, the run may need the list: said so.
    unpriced = check_written_instance_type(instance_type, backend, None)
    assert unpriced is not None and "unless on_demand_usd_per_hour is given" in unpriced
    assert "stands in for its list price" not in unpriced


@pytest.mark.parametrize("backend", ["batch", "kubernetes"])
@pytest.mark.parametrize("instance_type", ["ML.G5.XLARGE", "Ml.g5.xlarge", "mL.G5.xlarge"])
def test_sagemakers_prefix_in_any_case_is_refused_on_ec2_backends_with_the_ec2_name(
    tmp_path: Path, instance_type: str, backend: str
) -> None:
    # Compared in lower case only: Kubernetes warned of 'ML.G5.XLARGE' as another cluster's name, and Batch
    # refused it as no AWS type, not told to drop the prefix.
    message = (
        f"instance_type {instance_type!r} is a SageMaker type, but the {backend} backend runs on EC2 "
        "instances: write 'g5.xlarge', or use the sagemaker backend"
    )
    with pytest.raises(ConfigurationError) as refused:
        check_written_instance_type(instance_type, backend, "1.0")
    assert str(refused.value) == message
    options = KUBERNETES_OPTIONS if backend == "kubernetes" else {}
    with pytest.raises(ConfigurationError) as refused:
        operator(tmp_path, instance_type=instance_type, backend=backend, backend_options=options)
    assert str(refused.value) == message


def test_sagemakers_prefix_in_capitals_on_the_local_backend_is_pointed_at_sagemaker_types() -> None:
    # The prefix was matched in lower case only here: 'ML.G5.XLARGE' was offered m5.xlarge, g5.xlarge, ...
    said = check_written_instance_type("ML.G5.XLARGE", "local")
    assert said is not None and "the nearest known: ml.g5.xlarge" in said, said
