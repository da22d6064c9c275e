"""``costaware prices list`` and ``show``: the bundled snapshot's types, a type's price, the price cache."""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.cli.arguments import check_range, open_ledger
from costaware.cli.commands.prices_lookup import _check_region, _prices, describe
from costaware.cli.output import emit, plain
from costaware.core.errors import CostawareError, PriceNotFoundError

if TYPE_CHECKING:
    from costaware.adapters.price_source import CachedPrice


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


def show_prices(args: argparse.Namespace) -> int:
    """Print a type's on-demand price with its source and age; without a type, the price cache."""
    args.service_given, args.region_given = args.service is not None, args.region
    args.service = args.service or ("sagemaker" if (args.instance_type or "").startswith("ml.") else "ec2")
    args.region = args.region or "us-east-1"
    return _show(args)
