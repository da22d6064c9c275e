"""``$AIRFLOW_HOME`` as Airflow expands it, and as releases before that expansion read it.

Split from :mod:`costaware.settings`, which re-exports both functions: read them from there.
"""

from __future__ import annotations

import logging
import os
import shlex
from pathlib import Path

log = logging.getLogger(__name__)

#: Rounds of expanding $AIRFLOW_HOME before it counts as never settling (A='$A/x' grows each round).
_MAX_EXPANSIONS = 100
#: Characters an expanding $AIRFLOW_HOME may reach before it counts as never settling: A='$A$A' doubles each
#: round, so 100 rounds were never reached (memory and time ran out first).
_MAX_EXPANDED_LENGTH = 4096
#: The earlier releases' costaware folders this process looked for: it says so once.
_looked_for: set[Path] = set()


def airflow_home() -> Path:
    """``$AIRFLOW_HOME``, else ``~/airflow`` (Airflow's default), expanded as Airflow expands it.

    The same folder Airflow uses, or the spool, the ledger file and the stores part from it: a task spooled
    its ledger entries where no `costaware spool drain` run elsewhere looked. Airflow's ``expand_env_var``
    (mirrored: importing ``airflow.configuration`` loads, even writes, airflow.cfg) expands ``$VARS`` then
    ``~`` until the value stops changing, so ``A='$B/airflow'`` is followed, and an empty HOME makes ``~``
    the root (``/airflow``), as Airflow has it.

    Raises:
        ConfigurationError: a ``~`` is left that names a home nobody has (``~nosuchuser``, HOME unset with
            no passwd entry), where Airflow would use a folder named ``~`` under each working folder;
            variables that never stop expanding (Airflow hangs there), or grow past 4096 characters; or
            an empty ``AIRFLOW_HOME``.
    """
    from costaware.core.errors import ConfigurationError

    given = os.environ.get("AIRFLOW_HOME")
    if given == "":
        # Airflow keeps '' as its home: airflow.cfg is read from each process's working folder and its
        # '{AIRFLOW_HOME}/...' defaults land at the root ('/dags', '/airflow.db'); no one folder to follow.
        raise ConfigurationError(
            "AIRFLOW_HOME is set but empty (often an unset variable a compose or .env file passed on): "
            "Airflow then reads airflow.cfg from each working folder, and costaware has no folder for its "
            "ledger, spool and stores; unset it (Airflow's default '~/airflow') or set it to an absolute "
            "path such as '/opt/airflow', the same for every Airflow process"
        )
    what = f"$AIRFLOW_HOME {given!r}" if given else "AIRFLOW_HOME (unset: Airflow's default '~/airflow')"
    expanded = given or "~/airflow"
    settled = False
    for _ in range(_MAX_EXPANSIONS):
        step = os.path.expanduser(os.path.expandvars(expanded))  # noqa: PTH111
        settled = step == expanded
        if settled or len(step) > _MAX_EXPANDED_LENGTH:
            break
        expanded = step
    if not settled:
        raise ConfigurationError(
            f"{what} never stops expanding (a variable names itself, now {expanded[:80]!r}...): "
            "set AIRFLOW_HOME to an absolute path such as '/opt/airflow'"
        )
    if expanded.startswith("~"):
        user = expanded[1:].split("/")[0]
        whose = (
            f"the home folder of user {user!r}, whom this machine does not know"
            if user
            else "'~', but this process has no home folder (HOME is unset and its user has none)"
        )
        given_as = "" if not given or expanded == given else f" (expanded to {expanded!r})"
        raise ConfigurationError(
            f"{what}{given_as} starts with {whose}: Airflow reads it as a folder of that name under "
            "each working folder; set AIRFLOW_HOME to an absolute path such as '/opt/airflow'"
        )
    return Path(expanded)


def airflow_home_as_written(home: Path | None = None) -> tuple[str, Path, Path] | None:
    """``$AIRFLOW_HOME``, the folder releases before its expansion took it for, and the expanded home.

    Read as written (a ``~`` or ``$VAR`` kept), it was a folder under the working one; both paths absolute.
    None where they are the same folder, the home is refused, or the working folder was removed since
    (none to look in: a long-lived worker's must not fail a drain or a store for it).

    Args:
        home: ``$AIRFLOW_HOME`` as expanded now (:func:`airflow_home`), where the caller has it already.
    """
    from costaware.core.errors import ConfigurationError

    given = os.environ.get("AIRFLOW_HOME")
    if not given or not ("~" in given or "$" in given):
        return None
    if home is None:
        try:
            home = airflow_home()
        except ConfigurationError:
            return None
    try:
        expanded, written = home.absolute(), Path(given).absolute()
    except FileNotFoundError:  # a working folder since removed
        return None
    return None if written == expanded else (given, written, expanded)


def same_place(earlier: Path, current: Path) -> bool:
    """Whether ``earlier`` and ``current`` name one file or folder, through links (there or not yet).

    Compared as text, a './~/airflow' linked to '$HOME/airflow' read as two, and the warnings offered to
    remove or move the live one. A path that cannot be resolved (a link loop) counts as another place.
    """
    if earlier == current:
        return True
    try:
        return earlier.resolve() == current.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a link loop (Python 3.11)
        return False


def warn_of_earlier_costaware_folder(home: Path) -> None:
    """Warn, once per process, of the costaware folder a release before the expansion kept in another place.

    Earlier releases took ``$AIRFLOW_HOME`` ``'~/airflow'`` as written: the feature cache, the model and
    checkpoint stores (and the spool) were kept in ``./~/airflow/costaware/`` under the working folder, and
    after the upgrade they were not found (a cold cache, no champion model), without a word. Nothing is
    moved: which of two copies holds what only a person can say. The ledger has its own warning.

    Args:
        home: ``$AIRFLOW_HOME`` as expanded now (:func:`airflow_home`).
    """
    homes = airflow_home_as_written(home)
    if homes is None:
        return
    given, written, expanded = homes
    earlier = written / "costaware"
    if earlier in _looked_for:
        return
    _looked_for.add(earlier)
    current = expanded / "costaware"
    try:
        # './~/airflow' a link to '$HOME/airflow': one folder, nothing left behind.
        if same_place(earlier, current) or not earlier.is_dir():
            return
        kept = sorted(entry.name for entry in earlier.iterdir() if not entry.name.startswith("ledger.db"))
        in_both = [name for name in kept if (current / name).exists()]
    except OSError as e:  # a folder of another user: a warning must not stop the stores and ledger opening
        log.debug("costaware: could not look in %s for an earlier release's stores: %s", earlier, e)
        return
    if not kept:
        return
    moves = [
        f"mv {shlex.quote(str(earlier / name))} {shlex.quote(str(current / name))}"
        for name in kept
        if name not in in_both
    ]
    steps = [f"`mkdir -p {shlex.quote(str(current))} && {' && '.join(moves)}`"] if moves else []
    if in_both:
        steps.append(f"merge by hand what is in both: {', '.join(in_both)}")
    taken = "as written" if Path(given).is_absolute() else "as a folder under the working one"
    log.warning(
        "costaware: an earlier costaware kept its stores in %s ($AIRFLOW_HOME %r taken %s), and this "
        "release reads %s: its feature caches, models and checkpoints there (%s) are not found, so features "
        "are computed again and no champion model is seen. Nothing is moved for you: stop the workers, then "
        "%s; or point the stores at the old folder (COSTAWARE_FEATURE_CACHE, model_store=, "
        "checkpoint_store=). Said once per process",
        earlier,
        given,
        taken,
        current,
        ", ".join(kept),
        "; ".join(steps),
    )
