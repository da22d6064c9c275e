"""The SQLite ledger an earlier release kept under the working folder, before ``~`` and ``$VARS`` expanded.

Earlier releases took ``sqlite:///~/x.db`` as written, ``./~/x.db`` under the working folder, and so the
default ledger of ``AIRFLOW_HOME='~/airflow'`` or ``'$DATA_ROOT/airflow'`` (``./~/airflow/...``). Left
there, it is replaced by a new, empty ledger in the expanded place: spend to date $0, budgets spent again.
Opening it is refused while the expanded file is missing and the old one is there (:func:`refusal`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from costaware.settings import LEDGER_URL_ENV


@dataclass(frozen=True, slots=True)
class EarlierLedger:
    """Where an earlier release opened the ledger that now opens at ``opened``, and from what.

    ``as_written``: the URL's path (``~/x.db``), or ``$AIRFLOW_HOME`` as given for a file under it;
    ``airflow_home``: whether it came from ``$AIRFLOW_HOME``; ``default``: the default ledger (no URL).
    """

    opened: Path
    written: Path
    as_written: str
    airflow_home: bool
    default: bool

    @property
    def relative(self) -> str:
        """The old file relative to the working folder it was made in: ``~/airflow/costaware/ledger.db``."""
        return str(self.written.relative_to(Path.cwd().absolute()))

    def subject(self, what: str, database: str) -> str:
        """How the ledger is named in a message: the default one by its home, else by its URL's path."""
        if self.default:
            return f"the default ledger under $AIRFLOW_HOME {self.as_written!r}"
        return f"{what} {database!r}"

    def taken(self) -> str:
        if self.airflow_home:
            return f"$AIRFLOW_HOME {self.as_written!r} taken as a folder under the working one"
        return "the '~' taken as a folder under the working one"


def earlier_ledger(database: str, opened: Path) -> EarlierLedger | None:
    """The file an earlier release opened for ``database`` (opened now at ``opened``), there or not.

    None where ``~`` or ``$VARS`` played no part, or the two are the same file.
    """
    from costaware.settings import airflow_home_as_written, costaware_home

    opened = opened.absolute()
    if database.startswith("~"):
        written, as_written, from_home, default = Path(database).absolute(), database, False, False
    else:
        homes = airflow_home_as_written()
        if homes is None or not opened.is_relative_to(homes[2]):
            return None
        given, given_as_folder, home = homes
        written = given_as_folder.joinpath(opened.relative_to(home))
        as_written, from_home, default = given, True, opened == costaware_home("ledger.db").absolute()
    if written == opened:
        return None
    return EarlierLedger(opened, written, as_written, from_home, default)


def refusal(what: str, database: str, earlier: EarlierLedger) -> str:
    """Why the ledger is not made anew, and what to do: the old one is under this working folder."""
    if earlier.default:
        return (
            f"{earlier.subject(what, database)} is now {str(earlier.opened)!r}, which does not exist, but "
            f"the one an earlier costaware made ({earlier.taken()}) is at {str(earlier.written)!r}: move it "
            f"there, with any -wal and -shm files beside it, or keep it where it is with "
            f"{LEDGER_URL_ENV}=sqlite:///{earlier.written}; to start an empty ledger instead, rename or "
            "remove it"
        )
    return (
        f"{what} {database!r} is opened at {str(earlier.opened)!r}, which does not exist, but the ledger an "
        f"earlier costaware made for it is at {str(earlier.written)!r} ({earlier.taken()}): move it, with "
        f"any -wal and -shm files beside it, to {str(earlier.opened)!r}, or give its absolute path in the "
        "URL; to start an empty ledger instead, rename or remove it"
    )
