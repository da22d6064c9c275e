"""Turn an Airflow AWS connection into ``S3Options`` (credentials, region, endpoint) for pyarrow and boto3."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from costaware.adapters.object_store import S3Options


def s3_options(aws_conn_id: str | None) -> S3Options:
    """Credentials, region and S3 endpoint of an Airflow AWS connection.

    The connection's ``extra.endpoint_url`` (or ``extra.service_config.s3.endpoint_url``) points pyarrow
    and boto3 at moto or MinIO. With ``aws_conn_id=None`` the SDKs' default chain is used (environment,
    instance profile, ...).

    Args:
        aws_conn_id: The Airflow connection id, e.g. ``aws_default``; ``None`` for the default chain.
    """
    from costaware.adapters.object_store import S3Options

    if aws_conn_id is None:
        return S3Options()
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    hook = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
    credentials = hook.get_credentials()
    config = hook.conn_config
    return S3Options(
        access_key=credentials.access_key,
        secret_key=credentials.secret_key,
        session_token=credentials.token,
        region=hook.conn_region_name,
        endpoint_url=config.get_service_endpoint_url("s3"),
    )
