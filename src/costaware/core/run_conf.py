"""A run's conf checked against its DAG's params: one rule for the example DAGs' first task and the gate.

Airflow merges a conf key that names no param into the run's params and the run goes on with the default of
the param meant: ``-c '{"epoch": 2}'`` trained for the default epochs, and paid for them; a misspelt
``train_budjet_usd`` reserved the default budget.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from costaware.core.budgets import TAG_NAMES
from costaware.core.errors import ConfigurationError


def check_run_conf(conf: Mapping[str, Any] | None, params: Iterable[str], *, own_keys: bool = False) -> None:
    """Refuse a run whose conf names a param the DAG does not declare.

    ``team``, ``project`` and ``owner`` tag the run's costs whether the DAG declares them or not: always
    taken. A key that looks like a misspelt param or tag name (:func:`param_meant`) is refused, naming the
    name meant.

    Args:
        conf: The run's conf (None for a run triggered without one).
        params: The names of the DAG's params (a ``ParamsDict`` iterates them).
        own_keys: The DAG may read conf keys of its own (the spend gate, which cannot know): a key like no
            param is left to it. False (the example DAGs, which read none): every key that names no
            param is refused, with the closest name where one is even loosely close (``deadline``).

    Raises:
        ConfigurationError: naming each refused key, the name it meant where one is close, and all params.
    """
    declared = sorted(str(name) for name in params)
    accepted = [*declared, *(tag for tag in TAG_NAMES if tag not in declared)]
    refused = []
    for key in sorted(str(name) for name in conf or {}):
        if key in accepted:
            continue
        meant = param_meant(key, accepted)
        if meant is None and not own_keys:
            # Refused anyway: a loose likeness is worth saying (deadline for spot_deadline).
            meant = next(iter(difflib.get_close_matches(key.lower(), accepted, n=1, cutoff=0.6)), None)
        if meant is not None:
            refused.append(f"{key!r} (did you mean {meant!r}? {_kept(key, meant, declared)})")
        elif not own_keys:
            refused.append(repr(key))
    if refused:
        own = (
            " (a key of the DAG's own this close to a param's or a tag's name: rename it)" if own_keys else ""
        )
        raise ConfigurationError(
            f"the run's conf names a param this DAG does not have: {'; '.join(refused)}. Its params are "
            f"{', '.join(declared)}: fix the name and trigger the run again{own}"
        )


def _kept(key: str, meant: str, declared: list[str]) -> str:
    """What became of the name ``meant`` that the conf's ``key`` was likely meant for."""
    if meant in declared:
        return f"{meant!r} kept its default"
    return f"{meant!r} tags the run's costs, {key!r} tags nothing"


def param_meant(key: str, params: Iterable[str]) -> str | None:
    """The param a conf key that names none is a typo of (``train_budjet_usd``); None when it is like none.

    Case is ignored (``TRAIN_BUDGET_USD``), two letters swapped are a typo in a name of 4 letters or more
    (``tema``; ``rl`` beside ``lr`` is not). A key like no param or, for a param that is no amount, a
    param's name with a word added (``project_id``, ``projectid`` beside ``project``) or a plural (``teams``
    beside ``team``) is meant as it is. A letter dropped or added at the end
    (``train_budget_us``, ``project_``) or a name cut short (``train_budget``) is a typo, and so is anything
    close to an amount's param (``train_budget_usd_max``): its default would be reserved or capped.
    """
    names = {str(name).lower(): str(name) for name in params}
    lowered = key.lower()
    close = difflib.get_close_matches(lowered, list(names), n=1, cutoff=0.8)
    close += sorted(name for name in names if _two_letters_swapped(lowered, name))
    if not close:
        return None
    param = names[close[0]]
    if param.endswith("_usd") or param.startswith("max_") or "budget" in param or lowered == param.lower():
        return param
    # A word, with or without its underscore (project_id, projectid, as team_id and teamname), not a letter
    # or a bare underscore (project_i, projectx, project_ are typos).
    own = re.fullmatch(re.escape(close[0]) + r"(_?[a-z][a-z0-9]+)+", lowered) is not None
    return None if own or lowered == close[0] + "s" else param


def _two_letters_swapped(key: str, name: str) -> bool:
    """Whether ``key`` is ``name`` with two neighbouring letters swapped (``tema`` for ``team``).

    Not for names under 4 letters: ``rl`` beside ``lr`` is as likely another name as a typo.
    """
    if len(name) < 4:
        return False
    differ = [i for i, (a, b) in enumerate(zip(key, name, strict=False)) if a != b]
    return (
        len(key) == len(name)
        and len(differ) == 2
        and differ[1] == differ[0] + 1
        and (key[differ[0]], key[differ[1]]) == (name[differ[1]], name[differ[0]])
    )
