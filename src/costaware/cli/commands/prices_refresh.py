"""``costaware prices refresh``: fill the price cache from the AWS Price List Query API."""

from __future__ import annotations

import argparse

from costaware.cli.arguments import open_ledger
from costaware.cli.commands.prices_import import _with_hints
from costaware.cli.commands.prices_lookup import _check_region
from costaware.core.errors import ConfigurationError, CostawareError


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
