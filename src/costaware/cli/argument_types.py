"""The types command-line values are read with: each refuses a bad value naming it and the form to give.

Used by :class:`costaware.cli.arguments.Arg` and the commands that check a range themselves. Imports only
light ``core`` modules, as :mod:`costaware.cli.arguments` does: ``costaware --help`` builds every parser.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from datetime import date, datetime, timezone

from costaware.core.errors import ConfigurationError
from costaware.core.ledger import group_by_name as grouping_of


def refuse_blank(hint: str) -> Callable[[str], str]:
    """An argument type that refuses blank text, told with ``hint``, and keeps any other text as it is.

    Blank text is most often a script's unset variable (``--store "$STORE"``): read as "not given", it
    listed or evicted the default store, or set a budget in the default time zone, without a word.
    """

    def text(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"empty: {hint}")
        return value

    return text


def number_type(kind: type[float] | type[int], default: object = None) -> Callable[[str], float | int]:
    """An argument type reading a ``float`` or ``int`` as Python does, refusing anything else in words.

    argparse names the option before the message: ``argument --max-age-days: 'x' is not a number: ...``.
    """
    whole = kind is int
    example = f"{default:g}" if isinstance(default, int | float) and default else ("20" if whole else "2.5")

    def read(text: str) -> float | int:
        try:
            return kind(text)
        except ValueError:
            what = "a whole number" if whole else "a number"
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {what}: type it in digits, e.g. {example}"
                + (" (a '.' before the decimals, not ',')" if "," in text and not whole else "")
            ) from None

    read.__name__ = kind.__name__  # what argparse's own messages and `--help` call the type
    return read


def midnight_utc(text: str) -> datetime | None:
    """A date alone (``2026-11-01``) as its midnight UTC; None for text of another length (a time).

    Raises:
        ValueError: ten characters that are no ISO date.
    """
    if len(text) != 10:
        return None
    return datetime.combine(date.fromisoformat(text), datetime.min.time(), tzinfo=timezone.utc)


def when(text: str) -> datetime:
    """An ISO date (UTC midnight) or an ISO datetime with an offset."""
    try:
        value = midnight_utc(text) or datetime.fromisoformat(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO date (2026-11-01) or datetime") from e
    if value.tzinfo is None and len(text) == 8 and text.isdigit():
        # 20261201 parses as a datetime without a zone, and "add one" is no answer for a date.
        dashed = f"{text[:4]}-{text[4:6]}-{text[6:]}"
        raise argparse.ArgumentTypeError(f"{text!r} is a date without dashes: write {dashed} (midnight UTC)")
    if value.tzinfo is None:
        # Only a datetime gets the example: "20260201+00:00" is no date either.
        example = f"{text}+00:00" if "T" in text or " " in text else "2026-11-01T00:00+01:00"
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone: add one, e.g. {example}")
    return value


def check_range(
    flag: str, value: float, *, low: float, high: float | None = None, low_included: bool = True
) -> None:
    """Refuse ``value`` below ``low`` (or at it, unless ``low_included``), above ``high``, or not finite.

    Raises:
        ConfigurationError: named with the flag and the value as typed (a timedelta or a slice of it is not).
    """
    above_low = value >= low if low_included else value > low
    if not (math.isfinite(value) and above_low and (high is None or value <= high)):
        least = f"{low:g} or more" if low_included else f"more than {low:g}"
        most = "" if high is None else f" and at most {high:g}"
        # inf or nan is refused for not being a number, not for being under the lower bound.
        number = "" if math.isfinite(value) else "a finite number, "
        raise ConfigurationError(f"{flag} must be {number}{least}{most}, got {value:g}")


def fraction(text: str) -> float:
    """A share as a number (0.25); '25%' was refused as "invalid float value", naming no form to use."""
    try:
        return float(text)
    except ValueError:
        percent = text.strip().removesuffix("%")
        try:
            example = f"{float(percent) / 100:g} for {percent}%"
        except ValueError:
            example = "0.25 for 25%"
        raise argparse.ArgumentTypeError(
            f"{text!r} is no fraction: give one as a number, e.g. {example}"
        ) from None


def lowercase(text: str) -> str:
    """``Month`` -> ``month``: a choice is matched whatever its case."""
    return text.strip().lower()


def group_by_name(text: str) -> str:
    """``--group-by`` as :func:`costaware.core.ledger.group_by_name` reads it; empty is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: give what one row of the report is, e.g. --group-by task")
    return grouping_of(text)
