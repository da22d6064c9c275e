"""Money is ``Decimal`` USD; stores keep whole micro-dollars (1e-6 USD) so sums are exact on any database."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from costaware.core.errors import ConfigurationError

MICROS_PER_USD = 1_000_000
#: The ledger's resolution: it stores whole micro-dollars (and micro-units of every other quantity).
MICRO_USD = Decimal("0.000001")
#: The most a ledger column holds: 2**63 - 1 micro-dollars (a signed 64-bit integer), about 9.2 trillion USD.
MAX_USD = Decimal(2**63 - 1) / MICROS_PER_USD
#: A comma may only group thousands: "1,200.50"; "25,5" (a decimal comma) or "1,2,3" is refused.
_THOUSANDS = re.compile(r"^[1-9]\d{0,2}(,\d{3})+(\.\d*)?$")


def parse_usd(value: object, *, name: str = "amount", allow_negative: bool = False) -> Decimal:
    """Turn user input into a finite USD ``Decimal``.

    Args:
        value: A ``Decimal``, ``int``, ``float`` or string such as ``"4.20"`` or ``"$4.20"``.
        name: What the value is, for the error message.
        allow_negative: Whether amounts below zero are accepted (refunds, credits).

    Raises:
        ConfigurationError: The value is not a number, is NaN or infinite, or is negative when not allowed.
    """
    if isinstance(value, bool):
        raise ConfigurationError(f"{name} must be a number of USD, got the boolean {value!r}")
    try:
        if isinstance(value, Decimal):
            amount = value
        elif isinstance(value, int):
            amount = Decimal(value)
        elif isinstance(value, float):
            amount = Decimal(repr(value))
        elif isinstance(value, str):
            text = value.strip()
            sign = text[0] if text[:1] in ("+", "-") else ""
            text = text.removeprefix(sign).strip().removeprefix("$").strip()
            # "0,125" or "25,5" is a decimal comma: read as thousands it would be 125 or 255.
            if "," in text and not _THOUSANDS.match(text):
                raise ConfigurationError(
                    f"{name} {value!r} is not a number of USD: a comma may only group thousands (1,200.50); "
                    "write a decimal point, e.g. '25.5'"
                )
            amount = Decimal(sign + text.replace(",", ""))
        else:
            raise ConfigurationError(f"{name} must be a number of USD, got {type(value).__name__} {value!r}")
    except InvalidOperation as e:
        raise ConfigurationError(f"{name} must be a number of USD such as '4.20', got {value!r}") from e
    if not amount.is_finite():
        raise ConfigurationError(f"{name} must be a finite number of USD, got {value!r}")
    if amount < 0 and not allow_negative:
        raise ConfigurationError(f"{name} must be zero or more USD, got {value!r}")
    if abs(amount) > MAX_USD:
        raise ConfigurationError(
            f"{name} {value!r} is more than the ledger can store (at most {int(MAX_USD):,})"
        )
    return amount


def parse_gpu_hours(value: object, *, name: str) -> Decimal:
    """GPU-hours from user input: a finite number >= 0, read as amounts are (a comma only groups thousands).

    Raises:
        ConfigurationError: not a number of GPU-hours (``"$4"`` included: hours, not USD), or below zero;
            the message names ``name`` and says GPU-hours (it said USD).
    """
    try:
        hours = Decimal("NaN") if "$" in str(value) else parse_usd(value, name=name)
    except ConfigurationError:
        hours = Decimal("NaN")
    if not hours.is_finite() or not 0 <= hours <= MAX_USD:
        raise ConfigurationError(
            f"{name} must be a number of GPU-hours >= 0 and at most {int(MAX_USD):,} (what the ledger "
            f"stores), got {value!r}"
        )
    return hours


def to_micros(amount: Decimal) -> int:
    """USD to whole micro-dollars, rounding half to even (banker's rounding, no drift over many rows).

    Raises:
        ConfigurationError: an amount that is not finite or more than :data:`MAX_USD` (no ledger column
            could hold it).
    """
    if not amount.is_finite() or abs(amount) > MAX_USD:
        raise ConfigurationError(
            f"{amount} cannot be stored: the ledger holds at most {int(MAX_USD):,} (in millionths)"
        )
    return int(amount.quantize(MICRO_USD, rounding=ROUND_HALF_EVEN) * MICROS_PER_USD)


def from_micros(micros: int | None) -> Decimal:
    """Whole micro-dollars back to USD; ``None`` (an empty SQL sum) is zero."""
    return (Decimal(micros or 0) / MICROS_PER_USD).quantize(MICRO_USD)


def format_usd_exact(amount: Decimal) -> str:
    """``$24.998345``: every digit down to the micro-dollar, at least cents (``$25.00``, ``$0.001655``).

    For figures read side by side (a budget's cap, spent, reserved and left), where rounding one of them
    to cents would contradict the others.
    """
    exponent = amount.quantize(MICRO_USD).normalize().as_tuple().exponent
    places = min(6, max(2, -exponent if isinstance(exponent, int) else 2))
    return format_usd(amount, places=places)


def format_gpu_hours(hours: Decimal) -> str:
    """GPU-hours as a person writes them: ``1``, ``0.5``, not the ledger's ``1.000000`` (micro-GPU-hours)."""
    return format(hours.normalize(), "f")


def format_usd(amount: Decimal, *, places: int | None = None) -> str:
    """``$1,234.56`` for amounts of a cent or more, six places below that so small task costs stay visible."""
    if places is None:
        places = 2 if amount == 0 or abs(amount) >= Decimal("0.01") else 6
    sign = "-" if amount < 0 else ""
    return f"{sign}${abs(amount):,.{places}f}"
