"""Zone and region names: which a job may be placed in, and which AWS spells so.

An AWS zone is its region and a letter (``us-east-1a``); a Kubernetes zone is any
``topology.kubernetes.io/zone`` label value. The checks here go by a name's shape, not by a list, so a region
newer than the bundled price list is still one; the list is read only to suggest names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from costaware.core.errors import ConfigurationError

#: An AWS zone name (``us-east-1a``) or a Kubernetes zone label value: both are 1-63 letters, digits and ``-``
#: that start and end with a letter or digit.
_ZONE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
#: An AWS region name in any case (``us-west-2``, ``us-gov-east-1``, ``ap-southeast-4``): a zone list holding
#: one was meant to hold its zones.
_AWS_REGION = re.compile(
    r"^(us|eu|ap|ca|sa|me|af|il|mx|cn)(-gov|-iso[a-z]?)?"
    r"-(north|south|east|west|central|northeast|southeast|northwest|southwest)-\d+$",
    re.IGNORECASE,
)
#: A zone of a region written without the hyphen before the region's number: us-east1a.
_AWS_ZONE_NO_HYPHEN = re.compile(r"^([a-z]{2}(?:-[a-z]+)+)(\d+)([a-z])$")
#: An AWS zone name in any case (``us-east-1a``, a Local Zone ``us-east-1-bos-1a``): AWS spells them in
#: lower case only.
_AWS_ZONE_ANY_CASE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+(-[a-z]+-\d+)?[a-z]$", re.IGNORECASE)


def is_aws_region(name: str) -> bool:
    """Whether ``name`` is spelled as an AWS region is (``us-west-2``, ``cn-north-1``, ``us-gov-east-1``).

    By its shape, not a list: a region launched after the bundled price list is still one.
    """
    return name == name.lower() and bool(_AWS_REGION.match(name))


def check_zone(zone: str) -> str:
    """``zone`` if it is a zone name: an AWS zone, or a Kubernetes ``topology.kubernetes.io/zone`` value.

    Raises:
        ConfigurationError: ``zone`` is not 1-63 letters, digits or ``-`` starting and ending with a letter or
            digit, named with its value.
    """
    if not isinstance(zone, str) or not _ZONE.match(zone):
        raise ConfigurationError(
            f"availability zone {zone!r} is not a zone name: give 1-63 letters, digits or '-', starting and "
            "ending with a letter or digit, as AWS (us-east-1a) or topology.kubernetes.io/zone spell it"
        )
    return zone


def placeable_zone(zone: str) -> str:
    """``zone`` where a request may name it (:func:`check_zone`), else "" (a node label of another shape)."""
    try:
        return check_zone(zone) if zone else ""
    except ConfigurationError:
        return ""


def check_aws_zone(zone: str) -> str:
    """``zone`` if it can be an AWS zone name: :func:`check_zone`, and neither a region nor upper case.

    For the backends and replays that place by AWS zone (local, Batch, the spot window); a Kubernetes zone
    label is any :func:`check_zone` name.

    Raises:
        ConfigurationError: as :func:`check_zone`, or an AWS region name, an AWS zone name not in lower
            case, or a known region's zone written without the hyphen before its number (us-east1a); named
            with its value.
    """
    check_zone(zone)
    if _AWS_REGION.match(zone):
        raise ConfigurationError(
            f"availability zone {zone!r} is a region, not a zone: list its zones, e.g. {zone.lower()}a, "
            f"{zone.lower()}b"
        )
    if zone != zone.lower() and _AWS_ZONE_ANY_CASE.match(zone):
        raise ConfigurationError(
            f"availability zone {zone!r}: AWS zone names are lower case, write {zone.lower()!r} (a job "
            "placed by this name would match no zone)"
        )
    from costaware.core.zone_choice import region_of

    region = region_of(zone, "")
    if not region:
        # A known region's zone without the hyphen before its number (us-east1a) is a typo: placed by it, a
        # job would match no zone. Any other name (a replay's zone-a, a GKE-style us-central1-a) is a label.
        typo = _AWS_ZONE_NO_HYPHEN.match(zone)
        if typo is not None:
            from costaware.adapters.price_files import bundled_catalog

            meant = f"{typo.group(1)}-{typo.group(2)}"
            if meant in bundled_catalog().regions:
                raise ConfigurationError(
                    f"availability zone {zone!r} is not an AWS zone name: AWS writes a zone as its region "
                    f"and a letter; did you mean {meant}{typo.group(3)}?"
                )
        return zone
    if not is_aws_region(region):
        # A typo would otherwise fail later as a missing transfer price, naming neither argument nor value.
        raise ConfigurationError(
            f"availability zone {zone!r} is in no AWS region ({region!r} is not one)"
            f"{closest_regions(region, suffix=zone[len(region) :])}"
        )
    return zone


def check_aws_regions(regions: Sequence[str], *, name: str = "allowed_regions") -> None:
    """Each of ``regions`` is spelled as an AWS region is (not a zone), with the closest known names.

    Raises:
        ConfigurationError: a name that is not a region, or is a zone (named with its region).
    """
    from costaware.core.zone_choice import region_of

    for region in regions:
        if is_aws_region(region):
            continue
        if is_aws_region(region_of(region, "")):
            raise ConfigurationError(
                f"{name} {region!r} is a zone: {name} takes regions, e.g. {region_of(region, '')!r} (the "
                "zones to use go in availability_zones)"
            )
        hint = closest_regions(region) or ": list regions such as 'us-east-1'"
        raise ConfigurationError(f"{name} {region!r} is not an AWS region{hint}")


def closest_regions(region: str, suffix: str = "") -> str:
    """A "did you mean" note: the regions of the bundled price list nearest ``region`` (each + suffix).

    By shape, not this list, decides what a region is (a region newer than the list is still one); the list
    is read only to suggest names, when a name is refused.
    """
    import difflib

    from costaware.adapters.price_files import bundled_catalog

    close = difflib.get_close_matches(region, bundled_catalog().regions, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(c + suffix for c in close)}?" if close else ""


def zone_check(backend_name: str) -> Callable[[str], str]:
    """How ``backend_name`` checks a zone name.

    Kubernetes places by node label (any :func:`check_zone` name), the other backends by AWS zone
    (:func:`check_aws_zone`).
    """
    return check_zone if backend_name == "kubernetes" else check_aws_zone
