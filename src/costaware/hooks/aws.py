"""Turn an Airflow AWS connection into ``S3Options`` (credentials, region, endpoint) for pyarrow and boto3."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from costaware.adapters.object_store import S3Options

log = logging.getLogger(__name__)


def s3_options(aws_conn_id: str | None) -> S3Options:
    """Credentials, region and S3 endpoint of an Airflow AWS connection.

    The connection's ``extra.endpoint_url`` (or ``extra.service_config.s3.endpoint_url``) points pyarrow
    and boto3 at moto or MinIO. With ``aws_conn_id=None``, or a connection id that does not exist (the
    operators default to ``aws_default``), the SDKs' default chain is used (environment, instance profile,
    ...).

    Args:
        aws_conn_id: The Airflow connection id, e.g. ``aws_default``; ``None`` for the default chain.
    """
    from costaware.adapters.object_store import S3Options

    if aws_conn_id is None:
        return S3Options()
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    from airflow.providers.common.compat.sdk import AirflowNotFoundException, BaseHook

    try:
        BaseHook.get_connection(aws_conn_id)
    except AirflowNotFoundException:
        # The default ``aws_default`` was never created: the SDKs' default chain, as the Amazon provider's
        # hooks fall back to, without their warning on every task that reads local files. Another name is
        # one somebody chose, most likely misspelt: said, since the worker's own role (another account,
        # perhaps) then reads and writes the data.
        if aws_conn_id != "aws_default":
            log.warning(
                "AWS connection %r does not exist: the AWS SDK's default credentials are used instead "
                "(create it, or fix the name)",
                aws_conn_id,
            )
        return S3Options()
    hook = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
    found = hook.get_session().get_credentials()  # None when no credentials are configured anywhere
    credentials = found.get_frozen_credentials() if found is not None else None
    config = hook.conn_config
    return S3Options(
        access_key=credentials.access_key if credentials else None,
        secret_key=credentials.secret_key if credentials else None,
        session_token=credentials.token if credentials else None,
        region=hook.conn_region_name,
        endpoint_url=config.get_service_endpoint_url("s3"),
    )
