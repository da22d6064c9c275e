"""The SQLite ledger an earlier release kept under the working folder, before ``~`` and ``$VARS`` expanded.

Earlier releases took ``sqlite:///~/x.db`` as written, ``./~/x.db`` under the working folder, and so the
default ledger of ``AIRFLOW_HOME='~/airflow'`` or ``'$DATA_ROOT/airflow'`` (``./~/airflow/...``). Left
there, it is replaced by a new, empty ledger in the expanded place: spend to date $0, budgets spent again.
Only the working folder of the process at hand can be looked in, so each open says what it sees there:

* the expanded file missing, the old one here: refused (:func:`refusal`), as the ledger would be made empty;
* the expanded file missing, no old one here: a warning as the new ledger is made (it may be a first
  install, which must work, or the old ledger is under another folder the earlier processes ran in);
* both there: a warning once per process (each open of each task said it), naming both and the commands
  that end it, as the old one's spend is not counted. Not refused: which of the two holds the spend to date
  only a person can say, and a brand-new install must open.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from pathlib import Path

from costaware.settings import LEDGER_URL_ENV
from costaware.settings_home import same_place

log = logging.getLogger(__name__)

#: The (opened, earlier) ledger pairs this process has warned of: once is enough to act on.
_warned_both: set[tuple[Path, Path]] = set()


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

    def where_kept(self) -> str:
        """Where earlier releases kept it: under whichever working folder, unless written absolute."""
        cwd = Path.cwd().absolute()
        if not self.written.is_relative_to(cwd):  # '/srv/$ENV/airflow': one folder, named literally
            return f"at {self.written} (which does not exist)"
        return (
            f"at '<working folder>/{self.written.relative_to(cwd)}' under whichever folder they ran in "
            f"(not under this one: {self.written} does not exist)"
        )

    def subject(self, what: str, database: str) -> str:
        """How the ledger is named in a message: the default one by its home, else by its URL's path."""
        if self.default:
            return f"the default ledger under $AIRFLOW_HOME {self.as_written!r}"
        return f"{what} {database!r}"

    def taken(self) -> str:
        """How an earlier release read it: a folder under the working one, or one absolute path as written."""
        if self.airflow_home and Path(self.as_written).is_absolute():  # '/srv/$STAGE/airflow'
            return f"$AIRFLOW_HOME {self.as_written!r} taken as written, '$' and all"
        if self.airflow_home:
            return f"$AIRFLOW_HOME {self.as_written!r} taken as a folder under the working one"
        return "the '~' taken as a folder under the working one"


def earlier_ledger(database: str, opened: Path) -> EarlierLedger | None:
    """The file an earlier release opened for ``database`` (opened now at ``opened``), there or not.

    None where ``~`` or ``$VARS`` played no part, the two are the same file (``./~/airflow`` a link to
    ``$HOME/airflow``: the live ledger, not a copy to remove), or the working folder is gone.
    """
    from costaware.settings import airflow_home_as_written, costaware_home

    try:
        Path.cwd()
    except FileNotFoundError:  # a working folder since removed: none to look in, and the ledger must open
        return None
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
    if same_place(written, opened):
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


def warn_on_open(what: str, database: str, earlier: EarlierLedger) -> None:
    """Log what an open cannot check for itself: a ledger made anew, or an old one left beside it."""
    subject = earlier.subject(what, database)
    try:
        made_anew = not earlier.opened.exists()
    except OSError as e:  # a folder of another user: a warning must not stop the ledger opening
        log.debug("costaware: could not look for the ledger at %s: %s", earlier.opened, e)
        return
    if made_anew:
        # The old ledger may be under whichever folder the earlier processes ran in: only this one is seen.
        log.warning(
            "costaware: %s: creating a new, empty ledger at %s. Releases before '~' and $VARS were "
            "expanded kept it %s. If costaware ran there before, stop here and move that ledger.db, "
            "with its -wal and -shm files, to %s before any task runs, or its spend to date is not counted",
            subject,
            earlier.opened,
            earlier.where_kept(),
            earlier.opened,
        )
        return
    if written_there(earlier) and (earlier.opened, earlier.written) not in _warned_both:
        _warned_both.add((earlier.opened, earlier.written))
        old, new = shlex.quote(str(earlier.written)), shlex.quote(str(earlier.opened))
        aside = shlex.quote(f"{earlier.opened}.made-after-upgrade")
        # Each file with its -wal and -shm: the new one's WAL left behind is replayed onto the moved old
        # one by SQLite, and the spend it holds is lost. A loop reports its last command's status, so a failed
        # first move was hidden and the old ledger moved in all the same: each move exits its subshell on
        # failure (set -e would not: it is ignored left of &&).
        each = "(for s in '' -wal -shm; do "
        log.warning(
            "costaware: %s opens %s, but the ledger an earlier costaware kept for it (%s) is still at %s: "
            "its spend and budgets are not read, so what it recorded is not counted against any cap (tasks "
            "may see $0 spent). Said once per process. Stop the workers, then keep one of the two: if it "
            "was copied here already, remove it: `rm -f %s %s-wal %s-shm`; if it holds the spend to date "
            "(the one opened was made anew after the upgrade), put it in its place with its -wal and -shm "
            'files: `%s[ ! -e %s"$s" ] || mv %s"$s" %s"$s" || exit; done) && %s[ ! -e %s"$s" ] || mv %s"$s" '
            '%s"$s" || exit; done)`',
            subject,
            earlier.opened,
            earlier.taken(),
            earlier.written,
            old,
            old,
            old,
            each,
            new,
            new,
            aside,
            each,
            old,
            old,
            new,
        )


def written_there(earlier: EarlierLedger) -> bool:
    """Whether the earlier release's file is there.

    One that cannot be looked at (a './~' folder of another user) counts as not there: the refusal and the
    warning are safeguards and must never stop a ledger opening.
    """
    try:
        return earlier.written.exists()
    except OSError as e:
        log.debug("costaware: could not look for an earlier ledger at %s: %s", earlier.written, e)
        return False
