"""``costaware prices``: look up, refresh and import on-demand prices.

``list`` and ``show`` read the bundled snapshot and the price cache; ``refresh`` fills the cache from the AWS
Price List Query API (an Airflow AWS connection); ``import`` fills it from an offline offer file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from costaware.cli.arguments import check_range, open_ledger
from costaware.cli.output import emit, plain
from costaware.core.errors import (
    ConfigurationError,
    CostawareError,
    InvalidPriceDataError,
    PriceNotFoundError,
)

if TYPE_CHECKING:
    from costaware.adapters.price_source import CachedPrice, OnDemandPrices
    from costaware.core.price_figures import PriceFigure

ORIGINS = {
    "aws-price-list": "the AWS Price List API",
    "offer-file": "an imported offer file",
    "bundled-snapshot": "the bundled snapshot",
}


def _prices(args: argparse.Namespace) -> OnDemandPrices:
    import sys

    from costaware.adapters.price_source import configured_prices
    from costaware.core.errors import LedgerUnavailableError

    try:
        # A look-up makes no ledger: one at a mistyped --ledger-url was made empty and its cache read as such.
        ledger = open_ledger(args, reading=True, read_only=True)
    except LedgerUnavailableError as e:  # the snapshot still answers
        print(f"costaware: warning: price cache unavailable ({e})", file=sys.stderr)
        return configured_prices(aws_conn_id=args.aws_conn_id, cache=False)
    except CostawareError as e:  # no ledger there: no refreshed or imported price to read
        print(f"costaware: warning: price cache not read ({e})", file=sys.stderr)
        return configured_prices(aws_conn_id=args.aws_conn_id, cache=False)
    return configured_prices(ledger, aws_conn_id=args.aws_conn_id)


def _check_region(region: str, *, cached: Any = None, any_aws_region: bool = False) -> None:
    """Refuse a region no source knows, with the closest names.

    A region the snapshot lacks (one launched since, e.g. ``mx-central-1``) is known once the price cache
    holds it (``cached``: an :class:`OnDemandPrices`' cache); ``any_aws_region`` (``refresh``, ``import``):
    also any region the installed AWS SDK lists, the way to get prices for one.
    """
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.prices import _suggest

    known = set(bundled_catalog().regions)
    if any_aws_region:
        known |= _sdk_regions()
    if region in known:
        return
    if cached is not None:
        # An unreachable cache: the snapshot's regions still answer.
        with contextlib.suppress(Exception):
            known |= {row.price.region for row in cached.rows()}
        if region in known:
            return
    raise ConfigurationError(f"unknown region {region!r}{_suggest(region, sorted(known), region=True)}")


def _sdk_regions() -> set[str]:
    """The regions the installed botocore knows (its endpoint data), in every partition."""
    try:
        import boto3

        session = boto3.session.Session()
        return {
            region
            for partition in session.get_available_partitions()
            for region in session.get_available_regions("ec2", partition_name=partition)
        }
    except Exception:  # no SDK data: the snapshot's regions only
        return set()


def describe(figure: PriceFigure, now: datetime, ttl_hours: float) -> str:
    """Where a figure came from and how old it is, e.g. ``from the AWS Price List API, fetched ... ago``."""
    from costaware.core.price_figures import format_age

    text = f"from {ORIGINS.get(figure.origin, figure.origin)}"
    age = figure.age(now)
    if figure.fetched_at is not None and age is not None:
        text += f", fetched {figure.fetched_at:%Y-%m-%d %H:%M} UTC ({format_age(age)} ago)"
    if figure.stale:
        from costaware.core.price_figures import OFFER_FILE

        # An imported figure is for machines without AWS access: a refresh is no advice there.
        again = (
            "import a newer offer file (`costaware prices import FILE`)"
            if figure.origin == OFFER_FILE
            else "run `costaware prices refresh`"
        )
        text += f"; STALE: older than the {ttl_hours:g} h TTL, {again}"
    return text


# -- list -----------------------------------------------------------------------------------------


def list_prices(args: argparse.Namespace) -> int:
    """Print the bundled snapshot's instance types that fit the filters, cheapest first."""
    from costaware.adapters.price_files import bundled_catalog

    check_range("--limit", args.limit, low=1)
    for flag, value in (
        ("--min-vcpus", args.min_vcpus),
        ("--min-memory-gib", args.min_memory_gib),
        ("--min-gpus", args.min_gpus),
    ):
        check_range(flag, value, low=0)
    filters: dict[str, Any] = {
        "min_vcpus": args.min_vcpus,
        "min_memory_gib": Decimal(str(args.min_memory_gib)),
        "min_gpus": Decimal(str(args.min_gpus)),
        "gpu_model": args.gpu_model or None,
        "arch": args.arch,
    }
    catalog = bundled_catalog()
    # [: limit]: checked >= 1 above, as a negative limit sliced rows off the end.
    offers = catalog.instances(region=args.region, **filters)[: args.limit]
    if not offers:
        # An empty table, exit 0, said nothing: --region eu-west-1 --gpu-model L4 read as "no L4 anywhere".
        # us-east-1 first: the bundled list has every type there, other regions a part of them.
        found_in = {o.region for o in catalog.instances(region=None, **filters)} if args.region else set()
        elsewhere = sorted(found_in, key=lambda region: (region != "us-east-1", region))
        print(
            f"costaware: note: no instance type of the bundled list in {args.region} fits these filters; "
            f"some do in {', '.join(elsewhere[:5])}{', ...' if len(elsewhere) > 5 else ''} "
            f"({len(elsewhere)} region(s)): try one of them, or loosen a filter"
            if elsewhere
            else "costaware: note: no instance type of the bundled list fits these filters: loosen one "
            "(--min-vcpus, --min-memory-gib, --min-gpus, --gpu-model, --arch)",
            file=sys.stderr,
        )
    headers = ["instance type", "region", "vCPUs", "memory GiB", "GPUs", "GPU model", "arch", "USD/hour"]
    rows = [
        [
            o.instance_type,
            o.region,
            o.vcpus if o.specs_known else "?",
            o.memory_gib if o.specs_known else "?",
            o.gpus,
            o.gpu_model or "-",
            o.arch or "?",
            plain(o.usd_per_hour),
        ]
        for o in offers
    ]
    # As `prices show` gives them: vCPUs as a number, exact figures as text (memory, a GPU count that may be
    # a share such as 0.125, the price), null for what is not known.
    payload = [
        {
            "instance_type": o.instance_type,
            "region": o.region,
            "vcpus": o.vcpus if o.specs_known else None,
            "memory_gib": str(o.memory_gib) if o.specs_known else None,
            "gpus": str(o.gpus),
            "gpu_model": o.gpu_model or None,
            "arch": o.arch or None,
            "usd_per_hour": plain(o.usd_per_hour),
        }
        for o in offers
    ]
    emit(rows, args.format, headers=headers, payload=payload)
    return 0


# -- show -----------------------------------------------------------------------------------------


def _show(args: argparse.Namespace) -> int:
    from costaware.adapters.price_source import ttl_from_settings
    from costaware.core.ledger import utcnow

    if args.instance_type is None:
        return _show_cache(args)
    prices = _prices(args)
    _check_region(args.region, cached=prices.cache)
    now, ttl_hours = utcnow(), ttl_from_settings().total_seconds() / 3600
    figure = prices.figure(args.instance_type, args.region, args.service)
    catalog = prices.catalog
    # What is shown, as lines for people and as one object for --format json (exact figures as text).
    lines: list[str] = []
    shown: dict[str, Any] = {
        "instance_type": args.instance_type,
        "region": args.region,
        "service": args.service,
        "on_demand_usd_per_hour": plain(figure.usd_per_hour),  # "1E-7" was no number for jq
        "origin": figure.origin,
        "fetched_at": figure.fetched_at.isoformat() if figure.fetched_at else None,
        "stale": figure.stale,
    }
    if args.service == "ec2":
        try:
            offer = catalog.offer(args.instance_type, args.region)
            specs = f"{offer.vcpus} vCPUs, {offer.memory_gib} GiB" if offer.specs_known else "specs unknown"
            gpus = f", {offer.gpus} GPU(s) {offer.gpu_model}".rstrip() if offer.gpus else ""
            arch = f", {offer.arch}" if offer.arch else ""
            lines.append(f"{args.instance_type} in {args.region}: {specs}{gpus}{arch}")
            if offer.specs_known:
                shown |= {"vcpus": offer.vcpus, "memory_gib": str(offer.memory_gib)}
            shown |= {
                "gpus": str(offer.gpus),
                "gpu_model": offer.gpu_model or None,
                "arch": offer.arch or None,
            }
        except PriceNotFoundError:
            lines.append(f"{args.instance_type} in {args.region}:")
    else:
        lines.append(f"{args.instance_type} in {args.region} (SageMaker training):")
    lines.append(f"  on-demand: {plain(figure.usd_per_hour)} USD/h {describe(figure, now, ttl_hours)}")
    discount = _discount(args)
    if discount is not None:
        from costaware.core.discounts import apply_discount

        discounted = apply_discount(figure.usd_per_hour, discount)
        lines.append(
            f"  after the {discount.label} discount ({plain(discount.pct)}%): {plain(discounted)} USD/h"
        )
        shown |= {
            "discount": discount.label,
            "discount_pct": str(discount.pct),
            "discounted_usd_per_hour": str(discounted),
        }
    if args.service == "ec2":
        try:
            advice = catalog.spot_advice(args.instance_type, args.region)
            saving = Decimal(100 - advice.savings_pct) / 100
            estimate = (figure.usd_per_hour * saving).quantize(Decimal("0.000001"))
            lines.append(
                f"  spot (advisor estimate): {plain(estimate)} USD/h, {advice.savings_pct}% saving, "
                f"interruptions {advice.interruption_range} per month"
            )
            shown |= {
                "spot_estimate_usd_per_hour": plain(estimate),
                "spot_savings_pct": advice.savings_pct,
                "spot_interruptions_per_month": advice.interruption_range,
            }
        except CostawareError:
            # Its own message named a region or on-demand price the figure above has: it is the advisor's
            # bundled table that lacks this type there.
            lines.append(
                f"  spot: no estimate (the bundled Spot Instance Advisor data has no {args.instance_type} in "
                f"{args.region})"
            )
    if args.format == "json":
        print(json.dumps(shown, indent=2))
    elif args.format == "csv":
        emit([list(shown.values())], "csv", headers=list(shown))
    else:
        print("\n".join(lines))
    return 0


def _discount(args: argparse.Namespace) -> Any:
    from costaware.adapters.price_source import discounts_from_settings
    from costaware.core.discounts import discount_for

    rules = discounts_from_settings()
    teams = sorted(r.name for r in rules if r.kind == "team")
    if args.team and args.team not in teams:
        # Said, not silent: a mistyped team would otherwise read as "this team pays list price".
        configured = f"teams with one: {', '.join(teams)}" if teams else "no team has one"
        print(
            f"  no discount is configured for team {args.team!r} ({configured}; see [costaware] discounts): "
            "the prices shown are without a team discount",
            file=sys.stdout if args.format == "table" else sys.stderr,  # never inside JSON or CSV
        )
    if not rules:
        return None
    return discount_for(rules, args.instance_type or "", {"team": args.team} if args.team else {})


def _show_cache(args: argparse.Namespace) -> int:
    from costaware.adapters.price_source import PriceCache, ttl_from_settings
    from costaware.core.errors import CostawareError
    from costaware.core.ledger import utcnow
    from costaware.core.price_figures import format_age, is_stale

    try:
        cache = PriceCache(open_ledger(args, reading=True, read_only=True))
    except CostawareError:
        if args.region_given:
            _check_region(args.region_given)  # a typo first: it is the mistake to fix
        raise
    if args.region_given:
        _check_region(args.region_given, cached=cache)  # a typo read "the price cache is empty"
    rows: list[CachedPrice] = cache.rows(
        service=args.service if args.service_given else None, region=args.region_given
    )
    now, ttl = utcnow(), ttl_from_settings()
    if not rows and args.format == "table":
        which = (
            ""
            if not (args.region_given or args.service_given)
            else " has no figure of "
            + " in ".join(
                w for w in (args.service if args.service_given else "", args.region_given or "") if w
            )
        )
        print(
            f"the price cache{which or ' is empty'}: prices come from the bundled snapshot. Fill it with "
            "`costaware prices refresh` (AWS access) or `costaware prices import FILE`."
        )
        return 0
    headers = ["service", "region", "instance type", "USD/hour", "source", "fetched (UTC)", "age", "stale"]
    table = [
        [
            r.price.service,
            r.price.region,
            r.price.instance_type,
            plain(r.price.usd_per_hour),
            r.origin,
            f"{r.fetched_at:%Y-%m-%d %H:%M}",
            format_age(now - r.fetched_at),
            "STALE" if is_stale(r.fetched_at, ttl, now) else "",
        ]
        for r in rows
    ]
    payload = [
        {
            "service": r.price.service,
            "region": r.price.region,
            "instance_type": r.price.instance_type,
            "usd_per_hour": plain(r.price.usd_per_hour),
            "source": r.origin,
            "fetched_at": r.fetched_at.isoformat(),
            "age_seconds": int((now - r.fetched_at).total_seconds()),
            "stale": is_stale(r.fetched_at, ttl, now),
        }
        for r in rows
    ]
    emit(table, args.format, headers=headers, payload=payload)
    stale = sum(1 for p in payload if p["stale"])
    if stale and args.format == "table":
        print(
            f"{stale} figure(s) older than the {ttl.total_seconds() / 3600:g} h TTL: used only when no "
            "fresher source has the type; run `costaware prices refresh`"
        )
    return 0


# -- refresh and import ---------------------------------------------------------------------------


def _connection_exists(conn_id: str) -> bool:
    """Whether Airflow knows the connection ``conn_id`` (one that does not exist falls back silently)."""
    from airflow.providers.common.compat.sdk import AirflowNotFoundException, BaseHook

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return False
    except Exception:  # no metadata database here, say: do not claim it is missing
        return True
    return True


def refresh_prices(args: argparse.Namespace) -> int:
    """Fetch on-demand prices from the AWS Price List API into the price cache; 1 if none matched."""
    from costaware.adapters.aws_pricing import PriceListFetcher
    from costaware.adapters.price_source import PriceCache
    from costaware.core.ledger import utcnow
    from costaware.core.price_figures import LIVE
    from costaware.core.price_list import matches_types, type_patterns
    from costaware.settings import option

    regions = args.region or ["us-east-1"]
    for region in regions:
        _check_region(region, any_aws_region=True)
    _check_types_of_service(args.service, args.types)
    conn_id = args.aws_conn_id or option("price_aws_conn_id") or "aws_default"
    fetcher = PriceListFetcher.from_connection(conn_id)
    cache = PriceCache(open_ledger(args, create_beside_others=args.create_ledger))
    # One plain name is asked of the API itself; a glob or a list is filtered from every type it returns.
    exact = args.types if args.types and not any(c in args.types for c in "*?[,") else None
    fetched = []  # every region first, then the cache: a region that fails writes nothing at all
    for region in regions:
        try:
            prices = fetcher.fetch(args.service, region, instance_type=exact, types=args.types)
        except CostawareError:
            raise
        except Exception as e:  # botocore: credentials, endpoint, throttling
            status = int(getattr(e, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if status >= 500:
                # The endpoint failed, not the credentials (a stand-in server without the pricing API).
                check = "the endpoint failed: try again later, or check the connection's endpoint_url"
            elif _connection_exists(conn_id):
                check = "check the connection's credentials (pricing:GetProducts)"
            else:
                check = (
                    f"connection {conn_id!r} does not exist, so the SDKs' default credentials were tried: "
                    f"create it (`airflow connections add {conn_id} --conn-type aws ...`)"
                )
            # An HTML error page is no message: its first line, shortened.
            said = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            raise CostawareError(
                f"the AWS Price List API refused the request for {region} through connection {conn_id!r}: "
                f"{said}; {check}, or use `costaware prices import FILE` on a machine without AWS access"
            ) from e
        fetched.append((region, prices))
    # A name of a list that matched nothing in every region is a typo ('g5.xlarge,g5.xlarg'): said, nothing
    # cached, as an import does (it went to the API as one name, which matched nothing).
    unmatched = [
        pattern
        for pattern in type_patterns(args.types or "")
        if not any(matches_types(p.instance_type, pattern) for _, prices in fetched for p in prices)
    ]
    if unmatched and len(type_patterns(args.types)) > 1:
        raise ConfigurationError(
            f"--types {_with_hints(unmatched)} matched no {args.service} price in {', '.join(regions)}; "
            "nothing was cached: fix or drop it"
        )
    total = 0
    for region, prices in fetched:
        written = cache.put(prices, origin=LIVE, fetched_at=utcnow())
        total += written
        print(
            f"{region}: {written} {args.service} price(s) cached"
            + (f" matching {args.types}" if args.types else "")
        )
    if total == 0:
        print(f"no prices found: check --types {args.types!r}" if args.types else "no prices found")
        return 1
    return 0


def _check_types_of_service(service: str, types: str | None) -> None:
    """Refuse --types that the service never names, before the Price List API is paged through for them.

    ``--types 'ml.g5.*'`` without ``--service sagemaker`` fetched every EC2 product of the region, kept none,
    and said "no prices found".

    Raises:
        ConfigurationError: a name or glob of the other service (``ml.`` names are SageMaker's only).
    """
    from costaware.core.price_list import type_patterns

    for pattern in type_patterns(types or ""):
        if service == "ec2" and pattern.startswith("ml."):
            raise ConfigurationError(
                f"--types {pattern!r} names a SageMaker type (ml.*), and --service is ec2: add --service "
                "sagemaker"
            )
        if service == "sagemaker" and not pattern.startswith(("ml.", "*", "?", "[")):
            raise ConfigurationError(
                f"--types {pattern!r} is no SageMaker name: SageMaker's instance types are named with 'ml.', "
                f"e.g. 'ml.{pattern}'"
            )


def import_prices(args: argparse.Namespace) -> int:
    """Load an AWS Price List offer file (JSON or CSV) into the price cache."""
    from costaware.adapters.object_store.location import expand_user
    from costaware.adapters.price_source import PriceCache
    from costaware.core.errors import unreadable_file
    from costaware.core.ledger import utcnow
    from costaware.core.price_figures import OFFER_FILE
    from costaware.core.price_list import (
        matches_types,
        prices_from_offer_csv,
        prices_from_offer_json,
        type_patterns,
    )

    # A quoted '~/index.json' reaches us unexpanded: it was looked for in a folder named '~'.
    path = Path(expand_user(args.file, what="offer file", uri=args.file, example="/data/index.json"))
    if args.region:
        _check_region(args.region, any_aws_region=True)
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            head = handle.read(256).lstrip("\ufeff \t\r\n")
            handle.seek(0)
            today = utcnow().isoformat()  # a price change published ahead of its date is not today's
            # A .json file is read as JSON whatever it starts with: its error then says where the JSON
            # breaks (it was read as a CSV without the header, which named the wrong format).
            if head.startswith("{") or path.suffix.lower() == ".json":
                text = handle.read().lstrip("\ufeff")
                prices = prices_from_offer_json(text, region=args.region, types=args.types, as_of=today)
            else:  # streamed: a region's EC2 offer CSV is hundreds of MB
                prices = prices_from_offer_csv(handle, region=args.region, types=args.types, as_of=today)
    except FileNotFoundError as e:
        # The doc's `costaware prices import index.csv`, typed before the file was downloaded.
        raise ConfigurationError(
            f"{unreadable_file('offer file', path, e)}, or download the region's file first "
            "(https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/<region>/index.csv, "
            "AmazonSageMaker for SageMaker)"
        ) from e
    except OSError as e:  # a folder, a file not allowed: said as for every file, with what to do
        raise ConfigurationError(unreadable_file("offer file", path, e)) from e
    except UnicodeDecodeError as e:
        raise InvalidPriceDataError(f"{path}: not a UTF-8 text offer file ({e.reason})") from e
    except InvalidPriceDataError as e:
        raise InvalidPriceDataError(f"{path}: {e}") from e
    if not prices:
        raise InvalidPriceDataError(
            f"{path}: no Linux on-demand instance prices"
            + (f" matching {_with_hints(type_patterns(args.types))}" if args.types else "")
            + " (an AmazonEC2 or AmazonSageMaker offer file is expected); nothing was imported"
        )
    # One misspelt name of a list ('m5.large,c5.xlarg') imported the others and lost that one without a word.
    unmatched = [
        g
        for g in type_patterns(args.types or "")
        if not any(matches_types(p.instance_type, g) for p in prices)
    ]
    if unmatched:
        raise InvalidPriceDataError(
            f"{path}: --types {_with_hints(unmatched)} matched no Linux "
            "on-demand price of the file; nothing was imported: fix or drop it"
        )
    regions = sorted({p.region for p in prices})
    # A region typed into a file's row went into the cache, and from there `prices show` took it as known.
    for region in regions:
        try:
            _check_region(region, any_aws_region=True)
        except ConfigurationError as e:
            raise InvalidPriceDataError(
                f"{path}: {e} (a region code of the file's prices); nothing was imported: fix the code, or "
                "upgrade boto3 for a region launched since (its region list counts too)"
            ) from e
    _warn_of_unknown_types(path, [p.instance_type for p in prices if p.service == "ec2"])
    written = PriceCache(open_ledger(args, create_beside_others=args.create_ledger)).put(
        prices, origin=OFFER_FILE, fetched_at=utcnow()
    )
    services = sorted({p.service for p in prices})
    print(f"imported {written} {'/'.join(services)} price(s) for {', '.join(regions)} from {path.name}")
    return 0


def _with_hints(patterns: list[str]) -> str:
    """``'m5.larg' (did you mean m5.large?), 'c5*'``: each name or glob with the bundled names close to it."""
    return ", ".join(repr(pattern) + _types_hint(pattern) for pattern in patterns)


def _types_hint(types: str) -> str:
    """`` (did you mean m5.large?)`` for a ``--types`` name (no glob) close to a bundled type; else ""."""
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.prices import closest_names

    if any(mark in types for mark in "*?[,") or types.startswith("ml."):
        return ""
    known = bundled_catalog().instance_types
    if types.strip() in known:
        return " (a known type: the file has no price for it)"  # "did you mean m5.large?" for m5.large
    close = closest_names(types.strip(), known)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _warn_of_unknown_types(path: Path, instance_types: list[str]) -> None:
    """Warn of EC2 types the bundled catalog lacks, with the closest it has: a typo in a hand-edited file.

    A warning, not a refusal: an AWS file may carry types newer than the bundled snapshot. A misspelt type
    imported in silence priced nothing, and the tasks on the real type stayed unpriced.
    """
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.prices import closest_names

    known = bundled_catalog().instance_types
    unknown = sorted(set(instance_types) - set(known))
    if not unknown:
        return
    shown = [
        f"{name!r}"
        + (f" (did you mean {', '.join(close)}?)" if (close := closest_names(name, known)) else "")
        for name in unknown[:5]
    ]
    more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
    print(
        f"costaware: warning: {path.name}: {len(unknown)} instance type(s) the bundled catalog does not "
        f"know: {', '.join(shown)}{more}; imported as written (a type newer than the catalog is fine): if "
        "one is misspelt, fix the file and import it again",
        file=sys.stderr,
    )


def show_prices(args: argparse.Namespace) -> int:
    """Print a type's on-demand price with its source and age; without a type, the price cache."""
    args.service_given, args.region_given = args.service is not None, args.region
    args.service = args.service or ("sagemaker" if (args.instance_type or "").startswith("ml.") else "ec2")
    args.region = args.region or "us-east-1"
    return _show(args)
