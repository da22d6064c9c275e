"""The costaware error tree: one root, a few leaves.

The Airflow layer (``costaware.glue.airflow_errors``) maps them to task outcomes: user or configuration
errors fail the task without retry, transient ones are retried.
"""

from __future__ import annotations

import difflib
import errno
import inspect
import unicodedata
from collections.abc import Callable, Iterable
from os import PathLike
from pathlib import Path
from typing import Any


class CostawareError(Exception):
    """Raised for any costaware failure; the root of every error below."""


class ConfigurationError(CostawareError, ValueError):
    """Raised when an argument or setting has a value that can never work; fix the value and re-run."""


class InvalidBudgetError(ConfigurationError):
    """Raised when a budget cap, period or scope is malformed (negative, NaN, unknown period, ...)."""


class BudgetNotFoundError(ConfigurationError):
    """Raised when a spend gate asks about a scope that has no budget."""


class BudgetExceededError(CostawareError):
    """Raised when reserving an amount would pass a budget's cap."""

    def __init__(
        self,
        message: str,
        *,
        scope: str = "",
        spent_usd: str = "",
        cap_usd: str = "",
        needed_usd: str = "",
        summary: str = "",
        renews: bool = True,
    ) -> None:
        super().__init__(message)
        #: Whether a new period of the budget may make room (False: a ``total`` budget, or a need above
        #: its whole cap): a wait or a skip would last for good.
        self.renews = renews
        self.scope = scope
        self.spent_usd = spent_usd
        self.cap_usd = cap_usd
        self.needed_usd = needed_usd
        #: The same refusal as a few short lines (budget, cap, spent, reserved, need, what to do), for logs.
        self.summary = summary or message


class PriceNotFoundError(ConfigurationError, LookupError):
    """Raised when no price is known for an instance type, region or region pair."""


class InvalidPriceDataError(ConfigurationError):
    """Raised when a price table or price series is malformed (missing columns, bad numbers, bad order)."""


class ResultMissingError(ConfigurationError):
    """Raised when a training job that ended successfully left no result where the worker reads it."""


class CrossRegionEgressError(CostawareError):
    """Raised when data would cross regions without an explicit allowance."""


class LedgerUnavailableError(CostawareError):
    """Raised when the ledger database cannot be reached or written; transient, so the task is retried."""


class LedgerDatabaseMissingError(ConfigurationError):
    """Raised when the ledger's PostgreSQL database does not exist; no retry creates it, so none is made."""


class LedgerNotPermittedError(ConfigurationError):
    """Raised when the ledger's database refuses its user the tables (no CREATE); no retry grants it."""


#: The ledger could not be read or written at all (down, its database missing or closed to its user): no
#: fault of the request, so a caller keeps its work for later rather than treat it as refused.
#: ``except LEDGER_UNREADABLE:``.
LEDGER_UNREADABLE = (LedgerUnavailableError, LedgerDatabaseMissingError, LedgerNotPermittedError)


class ReservationNotFoundError(CostawareError, LookupError):
    """Raised when settling, releasing or replacing a reservation id that the ledger does not hold."""


class CorruptEntryError(CostawareError):
    """Raised when a cache entry's manifest is unreadable or does not match its data; it is recomputed."""


class ComputeBackendError(CostawareError):
    """Raised when a compute backend cannot submit, poll or stop a training job; transient, so retried."""


class JobNotFoundError(ComputeBackendError):
    """Raised when a backend no longer knows a job (a Kubernetes pod deleted and gone)."""


class StopRefused(ComputeBackendError):
    """A backend refused (or did not answer) the stop of a job then not seen to end: it may run on."""


class BillSpooledError(CostawareError):
    """Raised when a job's bill could not be written to the ledger and was kept in the spool instead.

    ``path``: the spool file, written to the ledger by its next entry that succeeds or ``costaware spool
    drain``.
    """

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class StoreUnavailableError(CostawareError):
    """Raised when an object store cannot be read or written for a reason a retry may fix; retried."""


class ResultNotWrittenError(CostawareError):
    """Raised when a training job stored its model version but could not write its result; not retried."""


class StoreNotWritableError(ConfigurationError):
    """Raised when a local store's folder refuses writes (a read-only mount, no permission)."""


class ScoringError(ConfigurationError):
    """Raised when a promotion's scoring command fails, times out or writes no valid metrics."""


def unreadable_file(what: str, path: str | PathLike[str], error: OSError) -> str:
    """``cannot read <what> '<path>': <why>; <what to do>``, with where a relative path was looked for.

    A relative path is read against the current folder, rarely the one its writer had in mind: the
    message names the folder, so "No such file or directory" says where it was not found.
    """
    text = str(path)
    relative = not Path(text).is_absolute()
    where = f" (a relative path, read as {Path(text).absolute()})" if relative else ""
    advice = _unreadable_advice(error, relative)
    return f"cannot read {what} {text!r}{where}: {error.strerror or error}; {advice}"


#: Who writes UTF-16 text: Excel's "Unicode Text", and PowerShell 5's default redirect (``aws ... > f.json``).
UTF16_WRITERS = "Excel's 'Unicode Text' or PowerShell 5's '>'"


def not_utf8_text(
    name: str,
    data: bytes,
    at: int,
    *,
    kind: str,
    save_as: str = "UTF-8 (Excel: 'CSV UTF-8')",
    utf16_writers: str = UTF16_WRITERS,
) -> str:
    """Why file ``name`` is not read, its bytes not UTF-8 from ``at`` on: what it is, and how to save it.

    ``kind``: what the file is read as ("a jobs file"); ``save_as``: the encoding (and format) to save it in.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16's byte-order mark
        what = f"UTF-16 text, as {utf16_writers} saves"
    else:
        line = data[:at].replace(b"\r\n", b"\n").replace(b"\r", b"\n").count(b"\n") + 1  # CR-only too
        what = f"not UTF-8 text (byte 0x{data[at]:02x} on line {line}; Latin-1 or Windows-1252, perhaps)"
    return f"{name} is {what}: {kind} is read as UTF-8; save it as {save_as}"


def _unreadable_advice(error: OSError, relative: bool) -> str:
    """What to do about ``error``: "check the name" was the advice for a folder or a file not allowed too."""
    if error.errno == errno.EISDIR:
        return "that is a folder: give the path of a file in it"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "you may not read it: allow your user to read it (chmod/chown), or copy it where you can"
    if error.errno == errno.ENOTDIR:
        return "a part of the path before the file's name is a file, not a folder: check the path"
    return "check the name, or give the file's full path" if relative else "check the path"


def visible_repr(value: object) -> str:
    r"""``repr(value)``, each combining mark escaped (``'\u0301'``) as ``repr`` escapes control characters.

    A message naming a refused character or key shows it: printed as itself, a combining mark is invisible
    or lands on the quote beside it.
    """
    return "".join(_escaped(c) if unicodedata.category(c).startswith("M") else c for c in repr(value))


def _escaped(character: str) -> str:
    code = ord(character)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` with the known name closest to ``name``, or "" when none is close."""
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_keywords(
    target: Callable[..., Any], given: Iterable[str], *, field: str, of: str, positional: int = 0
) -> None:
    """Refuse a keyword ``target`` does not take, naming it, the closest one and all it takes.

    A typo would otherwise surface as a bare ``__init__() got an unexpected keyword`` where the object is
    built, which for a remote job is inside a started (billed) job. A target that takes ``**kwargs`` takes
    anything, so nothing is refused.

    Args:
        target: The class or function the keywords go to.
        given: The keyword names as written.
        field: The argument that holds them, which the message starts with (``"trainer_params"``).
        of: What they are keywords of, for the message (``"trainer 'sklearn-sgd'"``).
        positional: How many leading parameters the caller passes by position (a feature transform's
            ``inputs``): not keywords it takes.

    Raises:
        ConfigurationError: a keyword ``target`` does not take.
    """
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): the call itself says
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    accepted = [p.name for p in parameters[positional:] if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    for name in given:
        if name not in accepted:
            takes = f"it takes {', '.join(accepted)}" if accepted else "it takes no options"
            raise ConfigurationError(
                f"{field} {name!r} is not an option of {of}{did_you_mean(name, accepted)}; {takes}"
            )
