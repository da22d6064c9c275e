"""The ``tags`` option of the SageMaker and Batch backends, checked against AWS's limits before any job.

It went through ``dict(tags or {})`` as it came: text was a bare ``ValueError`` once the task had reserved
its money, SageMaker's own list form (``[{'Key': 'team', 'Value': 'ml'}]``) became the one tag
``Key=Value``, and a number, an empty or long key, a 51st tag or a character SageMaker does not take was
refused by botocore or AWS only at the submit. The limits are those of botocore's service models
(``CreateTrainingJob.Tags``, ``SubmitJob.tags``); tests/adapters/test_compute_aws.py compares them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping

from costaware.core.errors import ConfigurationError, visible_repr

#: Tags per training job or Batch job, and the lengths of a key and a value (TagKey 1-128, TagValue 0-256).
MAX_TAGS = 50
MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 256
#: The prefix AWS keeps for its own tag keys, in any case (AWS Batch User Guide, "Tag restrictions";
#: SageMaker's CreateTrainingJob refuses it too). botocore's models do not carry it: no pattern says so.
AWS_PREFIX = "aws:"
#: SageMaker's TagKey and TagValue pattern ``[\p{L}\p{Z}\p{N}_.:/=+\-@]*``: besides these, letters (L),
#: separators such as a space (Z) and numbers (N). Batch's model has no pattern.
SAGEMAKER_TAG_PUNCTUATION = "_.:/=+-@"
#: The Batch backend's own tags: ``costaware:market`` and ``costaware:instance`` on each job (its poll reads
#: them; a tag of the same key was overwritten), ``costaware:copy-of`` on a copy of a submit sent twice.
BATCH_OWN_TAGS = ("costaware:market", "costaware:instance", "costaware:copy-of")


def job_tags(tags: object, backend: str) -> dict[str, str]:
    """``tags`` (backend_options) as a dict of string key to string value that backend ``backend`` takes.

    Raises:
        ConfigurationError: ``tags`` is neither a mapping nor None, has a key or value that is no string,
            a key or value of a length AWS refuses, a key beginning with ``aws:`` (AWS's own, in any case), a
            character SageMaker refuses, a key of costaware's own on Batch, or more tags than fit; named,
            with what to write instead.
    """
    if tags is None:
        return {}
    what = f"backend_options['tags'] of the {backend} backend"
    if not isinstance(tags, Mapping):
        meant = _as_dict(tags)
        example = "" if meant else ", such as {'team': 'ml'}"
        write = f"; write it as {meant!r}" if meant else ""
        raise ConfigurationError(
            f"{what} must be a dict of tag key to string value{example}: got the {type(tags).__name__} "
            f"{tags!r}{write}"
        )
    for key, value in tags.items():
        if not isinstance(key, str):
            raise ConfigurationError(
                f"{what} has the {type(key).__name__} {key!r} as a key: AWS takes only string keys; write it "
                f"as {str(key)!r}"
            )
        if not isinstance(value, str):
            raise ConfigurationError(
                f"{what} gives {key!r} the {type(value).__name__} {value!r}: AWS takes only string values; "
                f"write it as {'' if value is None else str(value)!r}"
            )
        if not key:
            raise ConfigurationError(
                f"{what} has the empty key '' (given {_shown(value)}): AWS takes keys of 1 to "
                f"{MAX_KEY_CHARS} characters; name the tag"
            )
        if len(key) > MAX_KEY_CHARS:
            raise ConfigurationError(
                f"{what} has a key of {len(key)} characters, {_shown(key)}: AWS takes keys of up to "
                f"{MAX_KEY_CHARS}; shorten it"
            )
        if key[: len(AWS_PREFIX)].lower() == AWS_PREFIX:
            plain = key[len(AWS_PREFIX) :].strip()
            instead = f", such as {plain!r}" if plain and not plain.lower().startswith(AWS_PREFIX) else ""
            raise ConfigurationError(
                f"{what} has the key {_shown(key)}: AWS keeps keys that begin with 'aws:' (in any case) for "
                f"its own tags and refuses them; name your tag without it{instead}"
            )
        if len(value) > MAX_VALUE_CHARS:
            raise ConfigurationError(
                f"{what} gives {_shown(key)} a value of {len(value)} characters, {_shown(value)}: AWS takes "
                f"values of up to {MAX_VALUE_CHARS}; shorten it"
            )
        if backend == "sagemaker":
            for text, part in ((key, "has the key"), (value, f"gives {_shown(key)} the value")):
                refused = sorted({c for c in text if not _sagemaker_tag_character(c)})
                if refused:
                    raise ConfigurationError(
                        f"{what} {part} {_shown(text)} with {', '.join(map(visible_repr, refused))}, which "
                        "SageMaker refuses in tags: use letters, digits, spaces and "
                        f"{' '.join(SAGEMAKER_TAG_PUNCTUATION)} only"
                    )
        elif key in BATCH_OWN_TAGS:
            raise ConfigurationError(
                f"{what} has the key {key!r}, a tag costaware sets on each job itself (its poll reads it); "
                "name your tag otherwise"
            )
    most = MAX_TAGS - (len(BATCH_OWN_TAGS) if backend == "batch" else 0)
    if len(tags) > most:
        room = (
            f"a job takes {MAX_TAGS} and keeps {len(BATCH_OWN_TAGS)} for costaware's own, so at most {most}"
            if backend == "batch"
            else f"a training job takes at most {MAX_TAGS}"
        )
        raise ConfigurationError(f"{what} has {len(tags)} tags: {room}; drop {len(tags) - most} of them")
    return dict(tags)


def _sagemaker_tag_character(character: str) -> bool:
    return character in SAGEMAKER_TAG_PUNCTUATION or unicodedata.category(character)[0] in "LZN"


def _as_dict(tags: object) -> dict[object, object] | None:
    """The dict meant by a list of SageMaker's ``{'Key': ..., 'Value': ...}`` or of pairs; else None."""
    if not isinstance(tags, list | tuple) or not tags:
        return None
    try:  # a key no dict can hold (a list) leaves no dict to suggest
        if all(isinstance(tag, Mapping) and set(tag) == {"Key", "Value"} for tag in tags):
            return {tag["Key"]: tag["Value"] for tag in tags}
        if all(isinstance(tag, list | tuple) and len(tag) == 2 for tag in tags):
            return dict(tags)
    except TypeError:
        pass
    return None


def _shown(text: str, most: int = 40) -> str:
    """``text`` quoted (:func:`visible_repr`) and cut to ``most`` characters: a long one stays readable."""
    return visible_repr(text) if len(text) <= most else f"{visible_repr(text[:most])}..."
