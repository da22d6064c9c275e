"""``RemoteTrainingOperator``'s instance type, checked as each backend names types.

At parse where it is written out in the DAG, once rendered where it is a template (before anything is held).

SageMaker names its types ``ml.g5.xlarge``; Batch runs on EC2's ``g5.xlarge``; Kubernetes selects nodes by the
name as written (``node.kubernetes.io/instance-type``: EC2's on EKS, ``n1-standard-8`` on GKE,
``Standard_NC6s_v3`` on AKS, the team's own on-prem); the local backend runs here and only records the name.
A misspelt type ("ml.g5.xlarg", "g5.xlarge ") was refused by SageMaker or Batch at the submit, after the
spend gate had reserved the money, and the local backend took it without a word.
"""

from __future__ import annotations

import re

from costaware.core.errors import ConfigurationError
from costaware.core.given import blank
from costaware.operators.templating import is_literal

# The sizes AWS sells (xlarge, 24xlarge, metal-48xl, ...): a name with another one is no AWS type at all.
_AWS_TYPE = re.compile(
    r"(?:ml\.)?[a-z][a-z0-9-]*\.(?:\d*xlarge|large|medium|small|micro|nano|metal(?:-\d+xl)?)"
)
_EC2_BACKENDS = ("batch", "kubernetes")
# Kubernetes is left out: its node selector takes any cluster's names (GKE's n1-standard-8, AKS's, on-prem).
_AWS_SHAPED_BACKENDS = ("sagemaker", "batch")


#: What a type rendered wrong is told to become, as the spot window sensor tells it: the template is what to
#: correct, and the param or XCom it reads.
TEMPLATE_FIX = "make the template (and the param or XCom it reads) give"


def refuse_blanks_around(name: str, *, subject: str | None = None, fix: str = "write") -> None:
    """Refuse an instance type with blanks around it, which no type has (here and in the spot window sensor).

    Prices and jobs go by the name as written: "g5.xlarge " failed the sensor's run as an unknown type, and
    went to the backend as written. The sensor and this module said so in two wordings: one text serves both.

    Args:
        name: The instance type, written out or rendered.
        subject: How the message names it (default ``instance_type 'name'``).
        fix: How to give the type meant: "write" where it is written out, :data:`TEMPLATE_FIX` where a
            template rendered it.

    Raises:
        ConfigurationError: blanks around ``name``, named with the name to give.
    """
    if name != name.strip():
        raise ConfigurationError(
            f"{subject or f'instance_type {name!r}'} has blanks around it, which no instance type has: "
            f"{fix} {name.strip()!r}"
        )


def check_written_instance_type(
    instance_type: object, backend: object, on_demand_usd_per_hour: object = None
) -> str | None:
    """Refuse an instance type written out that ``backend`` cannot run on; why it may be a typo, or None.

    Refused, with the nearest known types: blanks around the name (on any backend), an ``ml.*`` type (in
    any case) on Batch or Kubernetes, an EC2 type (or a name in the wrong case) on SageMaker, and on
    SageMaker and Batch a name no AWS type has the shape of ("g5.xlarg"). Only warned of: a name of that
    shape the bundled EC2 price list lacks, as the SpotWindowSensor does, since the run prices it from the
    price cache and live prices first (newer AWS types, imported prices); on Kubernetes a name of no AWS
    shape, which other clusters' nodes carry; and any name on the local backend, whose types may be the
    team's own. A template of either argument is checked when the task runs, rendered
    (:func:`check_rendered_instance_type`).

    Args:
        instance_type: ``instance_type`` as written in the DAG.
        backend: ``backend`` as written in the DAG ("local", "sagemaker", "batch", "kubernetes").
        on_demand_usd_per_hour: ``on_demand_usd_per_hour`` as written in the DAG (a template counts as
            given): it stands in for a list price the run would not find.

    Returns:
        The warning to log when the DAG is parsed, or None.

    Raises:
        ConfigurationError: a type the backend refuses, named with the types meant.
    """
    if not is_literal(instance_type) or blank(instance_type) is None:
        return None
    name = str(instance_type)
    backend_name = str(backend or "local") if is_literal(backend) else None
    return _check_instance_type(name, backend_name, on_demand_usd_per_hour)


def check_rendered_instance_type(
    instance_type: object, written: object, backend: object, on_demand_usd_per_hour: object = None
) -> str | None:
    """Refuse an instance type as rendered that ``backend`` (rendered) cannot run on, as one written out is.

    A template's blanks ("g5.xlarge " from a param) went to the job as written, and a SageMaker name to
    Batch or Kubernetes, where the parse refuses them written out: refused by the backend at the submit,
    after the hold, or (a node selector) never scheduled. Call it before anything is held or written.

    Args:
        instance_type: ``instance_type`` as rendered, given (one not given is the spot decision's:
            :func:`instance_type_rendered_unset`).
        written: ``instance_type`` as written in the DAG: a template is named, and is what to correct.
        backend: ``backend`` as rendered.
        on_demand_usd_per_hour: ``on_demand_usd_per_hour`` as rendered.

    Returns:
        The warning to log, or None.

    Raises:
        ConfigurationError: a type the backend refuses, named with the template and the types meant.
    """
    name = str(instance_type)
    if is_literal(written):  # the backend was the template: the type is corrected where it is written
        return _check_instance_type(name, str(backend or "local"), on_demand_usd_per_hour)
    subject = f"instance_type {name!r} (rendered from {written!r})"
    return _check_instance_type(
        name, str(backend or "local"), on_demand_usd_per_hour, subject=subject, fix=TEMPLATE_FIX
    )


def instance_type_rendered_unset(written: object, rendered: object, backend: object, decided: object) -> str:
    """The warning of a template of ``instance_type`` that rendered no type: the spot decision's is taken.

    As a deadline's, that default was taken without a word; with no decision to take one from, the run
    failed as "no instance type: pass instance_type or a spot decision that has one", which it was.

    Args:
        written: ``instance_type`` as written in the DAG, a template.
        rendered: What it rendered: blank, "None" or "null".
        backend: ``backend`` as rendered: the example type is spelt as it names types.
        decided: The spot decision's instance type, or None.

    Raises:
        ConfigurationError: no spot decision's type to take.
    """
    said = (
        f"instance_type {written!r} rendered {rendered!r}, which gives no type (what a template renders of a "
        "param or XCom that is not set)"
    )
    if blank(decided) is None:
        example = "ml.g5.xlarge" if str(backend) == "sagemaker" else "g5.xlarge"
        raise ConfigurationError(
            f"{said}, and there is no spot decision to take one from: {TEMPLATE_FIX} one, such as {example!r}"
        )
    return (
        f"{said}: the spot decision's {str(decided)!r} is used; give the param a value for a type of this "
        "run's own"
    )


def _check_instance_type(
    name: str,
    backend_name: str | None,
    on_demand_usd_per_hour: object,
    *,
    subject: str | None = None,
    fix: str = "write",
) -> str | None:
    """Refuse ``name`` where ``backend_name`` (None: not known yet) cannot run it; why it may be a typo.

    ``subject`` names it in the messages (None: ``instance_type 'name'``), ``fix`` says how to give the type
    meant: "write" where it is written out, what to make the template give where it was rendered.
    """
    subject = subject or f"instance_type {name!r}"
    refuse_blanks_around(name, subject=subject, fix=fix)
    # SageMaker's prefix in any case ("ML.G5.XLARGE"): Batch refused it for its shape, Kubernetes only warned.
    if backend_name in _EC2_BACKENDS and name[:3].lower() == "ml.":
        raise ConfigurationError(
            f"{subject} is a SageMaker type, but the {backend_name} backend runs on EC2 instances: "
            f"{fix} {_ec2_name_of(name)!r}, or use the sagemaker backend"
        )
    if backend_name == "sagemaker":
        _check_sagemaker_spelling(name, subject, fix)
    sagemaker = name[:3].lower() == "ml."  # in any case, as above
    unlisted = _not_in_price_list(name[3:] if sagemaker else name)
    if unlisted is None:
        return None
    hint = _nearest_hint(unlisted, sagemaker=sagemaker)
    aws_shaped = _AWS_TYPE.fullmatch(name) is not None
    if backend_name in _AWS_SHAPED_BACKENDS and not aws_shaped:
        # The local backend runs on names of the team's own (and at parse a templated one may render local).
        raise ConfigurationError(
            f"{subject} is no AWS instance type (family.size, e.g. "
            f"{'ml.g5.xlarge' if sagemaker else 'g5.xlarge'}){hint}"
        )
    pricing = _pricing_note(on_demand_usd_per_hour)
    if backend_name == "kubernetes" and not aws_shaped:
        near = hint if unlisted else ""  # a GKE or AKS name is near no EC2 one: no list to point to
        return (
            f"{subject} is no AWS instance type (family.size, e.g. g5.xlarge){near}: the "
            "kubernetes backend selects nodes labelled node.kubernetes.io/instance-type with it as written, "
            f"which a GKE, AKS or own cluster's nodes may carry; {pricing}"
        )
    return f"{subject} is not in the bundled EC2 price list{hint}: {pricing}"


def _ec2_name_of(name: str) -> str:
    """``name`` without SageMaker's prefix, in lower case where that is an AWS type ("ML.G5.XLARGE")."""
    rest = name[3:]
    return rest.lower() if _AWS_TYPE.fullmatch(rest.lower()) else rest


def _check_sagemaker_spelling(name: str, subject: str, fix: str) -> None:
    """Refuse a name SageMaker does not spell so (``ml.`` and lower case), with the type meant or the nearest.

    Only ``'ml.' + name`` as advice, "ML.G5.XLARGE" was told to write "ml.ML.G5.XLARGE" and "g5.xlarg"
    "ml.g5.xlarg", both refused at the next parse.
    """
    ec2_name = (name[3:] if name[:3].lower() == "ml." else name).lower()
    meant = f"ml.{ec2_name}"
    if meant == name:
        return
    nearest = _not_in_price_list(ec2_name)
    if nearest is None:
        advice = f"{fix} {meant!r} (priced at SageMaker's prices, not EC2's)"
    elif _AWS_TYPE.fullmatch(meant):
        lacks = f"the bundled EC2 price list lacks it{_nearest_hint(nearest, sagemaker=True)}"
        advice = f"{fix} {meant!r} if that type is meant ({lacks})"
    elif nearest:
        advice = f"{meant!r} would be no instance type either{_nearest_hint(nearest, sagemaker=True)}"
    else:
        advice = (
            f"{meant!r} would be no instance type either (family.size, e.g. ml.g5.xlarge): see "
            "`costaware prices list`"
        )
    raise ConfigurationError(
        f"{subject} is no SageMaker type: SageMaker names its types with 'ml.' in lower case; {advice}"
    )


def _nearest_hint(nearest: list[str], *, sagemaker: bool) -> str:
    """``; the nearest known: ...`` (``ml.``-prefixed for SageMaker), or where to look when none is near."""
    if not nearest:
        return "; see `costaware prices list`"
    return f"; the nearest known: {', '.join(f'ml.{t}' if sagemaker else t for t in nearest)}"


def _pricing_note(on_demand_usd_per_hour: object) -> str:
    """What the run does with a type no price list has, whether ``on_demand_usd_per_hour`` is given or not."""
    if blank(on_demand_usd_per_hour) is not None:
        # No list price is needed, but the spot prices are still read by the name: a typo's are none.
        return (
            "on_demand_usd_per_hour stands in for its list price, but its spot prices are read under that "
            "name (with prices or pause_on_price), and a name no market lists has none: if it is a typo, "
            "correct it"
        )
    return (
        "if it is a typo, correct it; the run prices it from the price cache (`costaware prices refresh` or "
        "`import`), live prices, then that list, and refuses it there if none has it, unless "
        "on_demand_usd_per_hour is given"
    )


def _not_in_price_list(ec2_name: str) -> list[str] | None:
    """None where the bundled price list has ``ec2_name``; else its nearest names there (maybe none)."""
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.prices import closest_names

    known = bundled_catalog().instance_types
    if ec2_name in known:
        return None
    return closest_names(ec2_name, known)
