"""Which AWS API errors a retry can fix: the one classification the SageMaker and Batch backends share.

A request AWS refuses because of what it says (a bad parameter, a role or queue that does not exist, missing
permissions) fails the same way on every retry: that is a :class:`ConfigurationError`, and the Airflow layer
fails the task without retrying it. Throttling, server errors (5xx) and connection problems pass: they are a
:class:`ComputeBackendError`, retried.
"""

from __future__ import annotations

from costaware.core.errors import ComputeBackendError, ConfigurationError, CostawareError

#: Error codes (or their prefixes) that a retry cannot fix: fix the request or the account, then re-run.
CONFIGURATION_CODES = (
    "ValidationException",
    "ValidationError",
    "AccessDenied",  # AccessDenied, AccessDeniedException
    "ResourceNotFound",  # ResourceNotFound, ResourceNotFoundException
    "ClientException",  # AWS Batch: an unknown job queue or job definition, a bad parameter
    "InvalidParameter",  # InvalidParameterException, InvalidParameterValue, InvalidParameterCombination
    "InvalidRequest",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "UnauthorizedOperation",
    "SignatureDoesNotMatch",
    "MissingParameter",
    "NoSuchEntity",
    "NoSuchBucket",
)
#: Temporary credentials that ran out: renewed ones (an instance or assumed role) come fresh to a retry.
EXPIRED_TOKEN = "ExpiredToken"
#: Error codes (or their prefixes) that a later try may not see: throttling and overload.
TRANSIENT_CODES = (
    "Throttling",  # Throttling, ThrottlingException
    "ThrottledException",
    "TooManyRequests",  # TooManyRequestsException
    "RequestLimitExceeded",
    "RequestThrottled",
    "SlowDown",
    "ProvisionedThroughputExceeded",
    # The rest of botocore's own throttling codes: read as a refusal (any other 4xx), a throttled poll
    # failed the task for good and stopped its paid job.
    "LimitExceededException",
    "BandwidthLimitExceeded",
    "TransactionInProgress",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
    "ServiceUnavailable",
    "InternalFailure",
    "InternalServerError",
    "InternalError",
    "ServerException",  # AWS Batch's 5xx
    "RequestTimeout",
    EXPIRED_TOKEN,  # a session token written into a connection is not renewed: the message says so
    "ResourceLimitExceeded",  # SageMaker: too many jobs running now; frees up as they end
)


def error_code(error: BaseException) -> tuple[str, int | None]:
    """The AWS error code and HTTP status of a botocore ``ClientError`` (``("", None)`` for anything else)."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return "", None
    code = str(response.get("Error", {}).get("Code") or "")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code, int(status) if status is not None else None


def is_configuration_error(error: BaseException) -> bool:
    """Whether retrying the request that raised ``error`` cannot help (pure).

    botocore's ``ParamValidationError`` (the request was refused before it was sent) and the codes in
    :data:`CONFIGURATION_CODES` are; throttling (any 429 too, whatever its code), 5xx and everything without
    an AWS error code are not. Any other 4xx is a refusal of the request as sent, so it counts as
    configuration too.
    """
    if type(error).__name__ == "ParamValidationError":
        return True
    code, status = error_code(error)
    if not code:
        return False
    if code.startswith(TRANSIENT_CODES) or (status is not None and (status >= 500 or status == 429)):
        return False
    return code.startswith(CONFIGURATION_CODES) or (status is not None and 400 <= status < 500)


def describe(error: BaseException) -> str:
    """``Code: message`` of an AWS error, else ``Type: text``, on one line."""
    code, _ = error_code(error)
    if code:
        message = getattr(error, "response", {}).get("Error", {}).get("Message") or ""
        text = f"{code}: {message}" if message else code
    else:
        text = f"{type(error).__name__}: {error}"
    return " ".join(text.split())


def aws_error(error: BaseException, action: str, fix: str) -> CostawareError:
    """The costaware error for an AWS call that failed; raise it ``from error``.

    Args:
        error: What boto3/botocore raised.
        action: What was attempted, naming the values involved, e.g. ``"cannot submit Batch job 'x' to
            job queue 'q'"``.
        fix: What to check when the request itself was refused, e.g. ``"check spot_queue in
            backend_options"``.

    Returns:
        A ``ConfigurationError`` (fails the task, no retry) when a retry cannot help, else a
        ``ComputeBackendError`` (retried).
    """
    if is_configuration_error(error):
        return ConfigurationError(f"{action}: {describe(error)}; {fix}")
    retried = "the task is retried"
    if error_code(error)[0].startswith(EXPIRED_TOKEN):
        # Renewed credentials (an instance role, an assumed role) come fresh to the retry; a session token
        # written into the connection does not, and every retry fails the same way until it is replaced.
        retried += (
            " with fresh credentials where they are renewed (an instance or assumed role); a session token "
            "written into the AWS connection must be replaced, or every retry fails the same way"
        )
    return ComputeBackendError(f"{action}: {describe(error)}; {retried}")
