"""Loads price tables from files: the snapshot bundled in ``costaware/data`` or a user's own CSVs."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from costaware.core.errors import InvalidPriceDataError, not_utf8_text, unreadable_file
from costaware.core.prices import PriceCatalog

ONDEMAND_FILE = "aws_ondemand_prices.csv"
SPOT_ADVISOR_FILE = "aws_spot_advisor.csv"
TRANSFER_FILE = "aws_transfer_costs.csv"


@functools.cache
def bundled_catalog() -> PriceCatalog:
    """The catalog of the bundled AWS snapshot, parsed once per process (see ``data/SOURCES.md``)."""
    data = resources.files("costaware") / "data"
    return PriceCatalog.from_csv_text(
        (data / ONDEMAND_FILE).read_text(encoding="utf-8"),
        (data / SPOT_ADVISOR_FILE).read_text(encoding="utf-8"),
        (data / TRANSFER_FILE).read_text(encoding="utf-8"),
    )


def catalog_from_files(
    ondemand: str | Path, spot_advisor: str | Path | None = None, transfer: str | Path | None = None
) -> PriceCatalog:
    """A catalog from the user's own CSV files, in the bundled files' columns.

    Raises:
        InvalidPriceDataError: a file is missing or malformed; the message names the file.
    """

    def read(path: str | Path | None) -> str | None:
        if path is None:
            return None
        return read_recorded_file(path, "price file")

    text = read(ondemand)
    assert text is not None  # ondemand is required by the signature
    try:
        return PriceCatalog.from_csv_text(text, read(spot_advisor), read(transfer))
    except InvalidPriceDataError as e:
        raise InvalidPriceDataError(f"{ondemand}: {e}") from e


def read_recorded_file(path: str | Path, what: str, *, save_as: str = "UTF-8 (Excel: 'CSV UTF-8')") -> str:
    """The text of a recorded file (``what``: "price file"), read as UTF-8 as ``Path.read_text`` reads it.

    Raises:
        InvalidPriceDataError: the file cannot be read (where it was looked for), or is not UTF-8 (what it is
            and how to save it: UTF-16 or Windows-1252 text was a UnicodeDecodeError traceback).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InvalidPriceDataError(unreadable_file(what, path, e)) from e
    try:
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        raise InvalidPriceDataError(
            not_utf8_text(Path(path).name, data, e.start, kind=f"a {what}", save_as=save_as)
        ) from e
