"""Live on-demand prices from the AWS Price List Query API (``pricing`` ``GetProducts``).

The client comes from the Amazon provider's ``AwsBaseHook`` and an Airflow connection (``aws_conn_id``);
parsing the documents is :mod:`costaware.core.price_list`'s job. Price List has endpoints in a few regions
only, so the client is pinned to ``us-east-1`` (any region's prices can be asked for there).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.price_list import (
    SERVICE_CODES,
    ListPrice,
    prices_from_products,
    product_filters,
    service_name,
)

log = logging.getLogger(__name__)

#: Where the Price List Query API answers (it also does in eu-central-1 and ap-south-1).
PRICING_REGION = "us-east-1"
#: The API's largest page.
PAGE_SIZE = 100


def pricing_client(aws_conn_id: str | None, *, region_name: str = PRICING_REGION) -> Any:
    """A boto3 ``pricing`` client built by ``AwsBaseHook`` from an Airflow connection.

    Args:
        aws_conn_id: The connection, e.g. ``aws_default``; None for boto3's default credential chain.
        region_name: A region where the Price List API answers.

    Raises:
        ConfigurationError: the Amazon provider is not installed.
    """
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError as e:  # pragma: no cover - the provider is a dependency
        raise ConfigurationError(
            "live prices need the Amazon provider: pip install apache-airflow-providers-amazon"
        ) from e
    return AwsBaseHook(aws_conn_id=aws_conn_id, client_type="pricing", region_name=region_name).get_conn()


class PriceListFetcher:
    """Fetches on-demand prices for a service and region, one ``GetProducts`` page after another.

    Args:
        client: A boto3 ``pricing`` client (see :func:`pricing_client`).
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.requests = 0  # pages fetched, for logs and tests

    @classmethod
    def from_connection(cls, aws_conn_id: str | None) -> PriceListFetcher:
        """A fetcher whose client comes from the Airflow connection ``aws_conn_id``."""
        return cls(pricing_client(aws_conn_id))

    def fetch(
        self, service: str, region: str, *, instance_type: str | None = None, types: str | None = None
    ) -> list[ListPrice]:
        """The on-demand prices AWS lists for ``service`` in ``region``.

        Args:
            service: ``ec2`` or ``sagemaker``.
            region: Region code.
            instance_type: Ask for this one type only (one or two pages instead of dozens).
            types: Keep the types matching this glob (filtered here: the API matches exact values).

        Raises:
            ConfigurationError: unknown service.
            InvalidPriceDataError: a document is not in the documented shape.
            botocore.exceptions.ClientError: AWS refused the call (credentials, throttling).
        """
        name = service_name(service)
        filters = product_filters(name, region=region, instance_type=instance_type)
        items: list[str] = []
        token: str | None = None
        pages = 0
        while True:
            request: dict[str, Any] = {
                "ServiceCode": SERVICE_CODES[name],
                "Filters": filters,
                "FormatVersion": "aws_v1",
                "MaxResults": PAGE_SIZE,
            }
            if token:
                request["NextToken"] = token
            page = self.client.get_products(**request)
            self.requests += 1
            pages += 1
            items.extend(page.get("PriceList", []))
            token = page.get("NextToken")
            if not token:
                break
        # A price change AWS published ahead of its date is not today's price.
        today = datetime.now(timezone.utc).isoformat()
        prices = prices_from_products(items, service=name, types=types, regions=[region], as_of=today)
        log.info(
            "costaware: %d %s price(s) for %s from %d Price List item(s) in %d page(s)",
            len(prices),
            name,
            region,
            len(items),
            pages,  # this region's (self.requests counts every fetch of this fetcher)
        )
        return prices
