"""The SageMaker and Batch backends' ``tags`` option: refused before any job where AWS would refuse it.

Against moto's server on 127.0.0.1, which takes tags that AWS refuses (a long key, a 51st tag, a ``#``):
the limits are compared with botocore's service models instead.
"""

from __future__ import annotations

import uuid

import pytest
from remote_support import aws_client, make_batch_queues
from test_compute_aws import ROLE, request

from costaware.adapters.compute import job_tags
from costaware.adapters.compute.base import JobState, check_backend_options, open_backend
from costaware.core.errors import ConfigurationError

SAGEMAKER = {"role_arn": ROLE, "image_uri": "i", "output_s3_uri": "s3://ml/out", "aws_conn_id": "moto_aws"}
REFUSED = "backend_options['tags'] of the {backend} backend "
NO_DICT = "must be a dict of tag key to string value"
MANY = {f"t{n}": "v" for n in range(51)}
KEY_129 = "k" * 129
VALUE_257 = "v" * 257

# Refused by both backends alike: as text, dict() raised a bare ValueError; AWS's list form became the one
# tag Key=Value; the rest reached botocore (ParamValidationError) or AWS (ValidationException) at the submit.
BOTH = [
    ("team=ml", NO_DICT + ", such as {'team': 'ml'}: got the str 'team=ml'"),
    (
        [{"Key": "team", "Value": "ml"}],
        NO_DICT + ": got the list [{'Key': 'team', 'Value': 'ml'}]; write it as {'team': 'ml'}",
    ),
    ([("team", "ml")], NO_DICT + ": got the list [('team', 'ml')]; write it as {'team': 'ml'}"),
    ({"epochs": 5}, "gives 'epochs' the int 5: AWS takes only string values; write it as '5'"),
    ({"owner": None}, "gives 'owner' the NoneType None: AWS takes only string values; write it as ''"),
    ({7: "x"}, "has the int 7 as a key: AWS takes only string keys; write it as '7'"),
    ({"": "ml"}, "has the empty key '' (given 'ml'): AWS takes keys of 1 to 128 characters; name the tag"),
    (
        {"aws:team": "ml"},
        "has the key 'aws:team': AWS keeps keys that begin with 'aws:' (in any case) for its own tags and "
        "refuses them; name your tag without it, such as 'team'",
    ),
    (
        {"AWS:": "ml"},
        "has the key 'AWS:': AWS keeps keys that begin with 'aws:' (in any case) for its own tags and "
        "refuses them; name your tag without it",
    ),
    (
        {KEY_129: "v"},
        f"has a key of 129 characters, {'k' * 40!r}...: AWS takes keys of up to 128; shorten it",
    ),
    (
        {"k": VALUE_257},
        f"gives 'k' a value of 257 characters, {'v' * 40!r}...: AWS takes values of up to 256; shorten it",
    ),
]
SAGEMAKER_ONLY = [
    (
        {"team#1": "ml"},
        "has the key 'team#1' with '#', which SageMaker refuses in tags: use letters, digits, spaces and "
        "_ . : / = + - @ only",
    ),
    (
        {"team": "ml\n"},
        "gives 'team' the value 'ml\\n' with '\\n', which SageMaker refuses in tags: use letters, digits, "
        "spaces and _ . : / = + - @ only",
    ),
    (MANY, "has 51 tags: a training job takes at most 50; drop 1 of them"),
]
BATCH_ONLY = [
    (
        {"costaware:market": "spot"},
        "has the key 'costaware:market', a tag costaware sets on each job itself (its poll reads it); name "
        "your tag otherwise",
    ),
    (
        {f"t{n}": "v" for n in range(48)},
        "has 48 tags: a job takes 50 and keeps 3 for costaware's own, so at most 47; drop 1 of them",
    ),
]


@pytest.mark.parametrize(("tags", "message"), BOTH + SAGEMAKER_ONLY)
def test_sagemaker_tags_aws_refuses_are_refused_before_any_job(aws: str, tags: object, message: str) -> None:
    refused = request(job_name=f"train-0123456789-a1-{uuid.uuid4().hex[:8]}")  # moto's server keeps jobs
    options = {**SAGEMAKER, "tags": tags}
    for where, refuse in {
        "options check": lambda: check_backend_options("sagemaker", options),
        "backend": lambda: open_backend("sagemaker", options).submit(refused),
    }.items():
        with pytest.raises(ConfigurationError) as caught:
            refuse()
        assert str(caught.value) == REFUSED.format(backend="sagemaker") + message, where
    assert open_backend("sagemaker", SAGEMAKER).find(refused.job_name) is None  # nothing was submitted


@pytest.mark.parametrize(("tags", "message"), BOTH + BATCH_ONLY)
def test_batch_tags_aws_refuses_are_refused_before_any_job(aws: str, tags: object, message: str) -> None:
    queues = make_batch_queues(aws)
    options = {**queues, "aws_conn_id": "moto_aws", "tags": tags}
    for where, refuse in {
        "options check": lambda: check_backend_options("batch", options),
        "backend": lambda: open_backend("batch", options).submit(request(instance_type="m5.large")),
    }.items():
        with pytest.raises(ConfigurationError) as caught:
            refuse()
        assert str(caught.value) == REFUSED.format(backend="batch") + message, where
    named = [{"name": "JOB_NAME", "values": [request().job_name]}]
    jobs = aws_client("batch", aws).list_jobs(jobQueue=queues["spot_queue"], filters=named)
    assert jobs["jobSummaryList"] == []  # nothing was submitted


def test_as_many_tags_as_fit_reach_the_jobs(aws: str) -> None:
    # The most each takes, of the longest key and value, with the characters SageMaker's pattern allows.
    wide = {f"{n:02d} Équipe_.:/=+-@{'k' * 111}": "½ v" * 85 + "v" for n in range(50)}
    assert {len(k) for k in wide} == {128} and {len(v) for v in wide.values()} == {256}
    backend = open_backend("sagemaker", {**SAGEMAKER, "tags": wide})
    spot = request(job_name="train-0123456789-a1-alltags")
    backend.submit(spot)
    client = aws_client("sagemaker", aws)
    arn = client.describe_training_job(TrainingJobName=spot.job_name)["TrainingJobArn"]
    assert {t["Key"]: t["Value"] for t in client.list_tags(ResourceArn=arn)["Tags"]} == wide

    queues = make_batch_queues(aws)
    most = dict(list(wide.items())[:47])
    job_id = open_backend("batch", {**queues, "aws_conn_id": "moto_aws", "tags": most}).submit(
        request(instance_type="m5.large")
    )
    (submitted,) = aws_client("batch", aws).describe_jobs(jobs=[job_id])["jobs"]
    assert submitted["tags"] == {**most, "costaware:market": "spot", "costaware:instance": "m5.large"}


def test_the_limits_are_those_of_botocores_service_models() -> None:
    import botocore.session

    session = botocore.session.get_session()
    sagemaker = session.get_service_model("sagemaker").operation_model("CreateTrainingJob").input_shape
    batch = session.get_service_model("batch").operation_model("SubmitJob").input_shape
    tag_list, tag_map = sagemaker.members["Tags"], batch.members["tags"]
    key, value = tag_list.member.members["Key"], tag_list.member.members["Value"]  # type: ignore[attr-defined]
    for shape in (tag_list, tag_map):
        assert shape.metadata["max"] == job_tags.MAX_TAGS
    for shape in (key, tag_map.key):  # type: ignore[attr-defined]
        assert (shape.metadata["min"], shape.metadata["max"]) == (1, job_tags.MAX_KEY_CHARS)
    for shape in (value, tag_map.value):  # type: ignore[attr-defined]
        assert (shape.metadata.get("min", 0), shape.metadata["max"]) == (0, job_tags.MAX_VALUE_CHARS)
    pattern = r"([\p{L}\p{Z}\p{N}_.:/=+\-@]*)"
    assert key.metadata["pattern"] == value.metadata["pattern"] == pattern
    assert pattern.replace("\\", "") == f"([p{{L}}p{{Z}}p{{N}}{job_tags.SAGEMAKER_TAG_PUNCTUATION}]*)"
    assert "pattern" not in tag_map.key.metadata  # type: ignore[attr-defined]  # Batch checks no characters


def test_batch_own_tags_are_those_the_backend_sets() -> None:
    from costaware.adapters.compute import batch

    body = batch.submit_job_request(
        request(instance_type="m5.large"), spot_queue="s", on_demand_queue="o", job_definition="d"
    )
    assert (*body["tags"], batch.COPY_OF_TAG) == job_tags.BATCH_OWN_TAGS
    assert job_tags.job_tags({"costaware:team": "ml"}, "batch") == {"costaware:team": "ml"}  # not one of them


# An older release took both through dict(): the list form became the one tag Key=Value, pairs a dict.
OLDER_TAGS = [[{"Key": "team", "Value": "ml"}], [("team", "ml")]]


@pytest.mark.parametrize("tags", OLDER_TAGS)
def test_a_sagemaker_job_an_older_release_submitted_with_tags_it_took_can_still_be_polled_and_stopped(
    aws: str, monkeypatch: pytest.MonkeyPatch, tags: object
) -> None:
    # The triggers build a running job's backend from its options as written to poll, stop or find it:
    # refused there, such a job ran on unstopped and unbilled. Only a new submit of them is refused.
    from botocore.stub import Stubber

    running = request(job_name=f"train-0123456789-a1-{uuid.uuid4().hex[:8]}")
    open_backend("sagemaker", SAGEMAKER).submit(running)  # as the older release submitted it
    backend = open_backend("sagemaker", {**SAGEMAKER, "tags": tags})
    assert backend.poll(running.job_name).state is JobState.SUCCEEDED
    found = backend.find(running.job_name)
    assert found is not None and found.job_id == running.job_name
    refused = request(job_name=f"train-0123456789-a1-{uuid.uuid4().hex[:8]}")
    with pytest.raises(ConfigurationError) as caught:
        backend.submit(refused)
    assert str(caught.value).startswith(REFUSED.format(backend="sagemaker") + NO_DICT + ": got the list")
    assert backend.find(refused.job_name) is None  # nothing was submitted
    with pytest.raises(ConfigurationError):
        check_backend_options("sagemaker", {**SAGEMAKER, "tags": tags})  # the task's start, before money
    client = backend.client  # type: ignore[attr-defined]
    monkeypatch.setattr(type(backend), "client", property(lambda self: client))
    with Stubber(client) as stub:  # moto's server has no StopTrainingJob
        stub.add_response("stop_training_job", {}, {"TrainingJobName": running.job_name})
        backend.stop(running.job_name)
        stub.assert_no_pending_responses()


@pytest.mark.parametrize("tags", OLDER_TAGS)
def test_a_batch_job_an_older_release_submitted_with_tags_it_took_can_still_be_polled_and_stopped(
    aws: str, tags: object
) -> None:
    queues = make_batch_queues(aws)
    running = request(job_name=f"train-0123456789-a1-{uuid.uuid4().hex[:8]}", instance_type="m5.large")
    job_id = open_backend("batch", {**queues, "aws_conn_id": "moto_aws"}).submit(running)
    backend = open_backend("batch", {**queues, "aws_conn_id": "moto_aws", "tags": tags})
    assert backend.poll(job_id).state is JobState.SUCCEEDED  # moto's batch_simple runs it at once
    found = backend.find(running.job_name)
    assert found is not None and found.job_id == job_id
    backend.stop(job_id)  # reaches TerminateJob
    refused = request(job_name=f"train-0123456789-a1-{uuid.uuid4().hex[:8]}", instance_type="m5.large")
    with pytest.raises(ConfigurationError) as caught:
        backend.submit(refused)
    assert str(caught.value).startswith(REFUSED.format(backend="batch") + NO_DICT + ": got the list")
    assert backend.find(refused.job_name) is None  # nothing was submitted
    with pytest.raises(ConfigurationError):
        check_backend_options("batch", {**queues, "aws_conn_id": "moto_aws", "tags": tags})


@pytest.mark.parametrize("backend", ["sagemaker", "batch"])
@pytest.mark.parametrize("tags", [[[["a"], "b"]], [{"Key": ["a"], "Value": "b"}]])
def test_a_list_whose_key_no_dict_can_hold_is_refused_without_a_dict_to_write(
    backend: str, tags: object
) -> None:
    # Building the "write it as" suggestion raised a bare TypeError (unhashable type: 'list').
    with pytest.raises(ConfigurationError) as caught:
        job_tags.job_tags(tags, backend)
    assert str(caught.value) == (
        f"backend_options['tags'] of the {backend} backend must be a dict of tag key to string value, such "
        f"as {{'team': 'ml'}}: got the list {tags!r}"
    )


def test_an_invisible_character_sagemaker_refuses_is_shown_escaped() -> None:
    # A combining mark printed as itself shows nothing (or an accent on the quote) where it is named.
    with pytest.raises(ConfigurationError) as caught:
        job_tags.job_tags({"cafe\u0301": "x"}, "sagemaker")
    assert str(caught.value).startswith(
        "backend_options['tags'] of the sagemaker backend has the key 'cafe\\u0301' with '\\u0301', which "
    )
