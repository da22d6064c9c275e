"""Which budgets a listing or a refusal names: a tuning study's own budgets are counted, not named one by one.

A study sets a budget over its tags plus ``study=<name>`` and keeps it: its spend stays reported by study,
and a later run of the same study finds its cap. Where the study is named after its DAG run (the
budgeted_tuning example), every run leaves one. Named one by one, they grew with every nightly run in
``costaware budget list`` and in every "no budget covers scope" refusal, burying the budgets that mattered.
A ``budgeted_search`` deletes its own budget (``search=<id>``) as it ends; killed (out of memory, a lost
machine), it cannot, and each one left joins them here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from costaware.core.budgets import Budget, Scope

#: The tag of a tuning study's own budget (``project=churn,study=<name>``).
STUDY_TAG = "study"
#: The tag of a ``budgeted_search``'s own budget, and the shape of the id it gives (``uuid4().hex[:8]`` in
#: ``training/search.py``): a team's own ``search=`` budget, of another shape, is listed as any other.
SEARCH_TAG = "search"
SEARCH_ID = re.compile(r"[0-9a-f]{8}")
#: The most budgets one refusal names; the rest are counted, with the command that lists them.
NAMED_BUDGETS = 5
LIST_BUDGETS = "costaware budget list"
LIST_STUDY_BUDGETS = "costaware budget list --studies"


def is_study_budget(budget: Budget) -> bool:
    """Whether ``budget`` is a tuning study's own (a ``study=`` tag) or one a killed search left behind."""
    return any(key == STUDY_TAG for key, _ in budget.scope.tags) or is_search_budget(budget)


def is_search_budget(budget: Budget) -> bool:
    """Whether ``budget`` is a ``budgeted_search``'s own: ``search=<its id>``, for all time."""
    return budget.period.value == "total" and any(
        key == SEARCH_TAG and SEARCH_ID.fullmatch(value) for key, value in budget.scope.tags
    )


def names_a_study(scope: Scope) -> bool:
    """Whether ``scope`` asks about folded budgets: a ``study=`` tag, or a ``search=`` tag shaped as an id.

    A team's own ``search=ranking`` scope asks about its own budget, which is listed, not about the study
    budgets: those stay folded around it.
    """
    return any(
        key == STUDY_TAG or (key == SEARCH_TAG and SEARCH_ID.fullmatch(value)) for key, value in scope.tags
    )


def study_budgets_counted(count: int) -> str:
    """``1 study budget`` or ``12 study budgets``."""
    return f"{count} study budget{'' if count == 1 else 's'}"


def folded_budgets_said(folded: Iterable[Budget]) -> str:
    """What ``costaware budget list``'s table counts instead of listing: ``3 study budgets (...)``."""
    folded = list(folded)
    searches = sum(is_search_budget(b) for b in folded)
    left = f"; {searches} left by a budgeted_search that did not end" if searches else ""
    return f"{study_budgets_counted(len(folded))} (a tuning study's own cap each{left})"


def listing_command(budgets: Iterable[Budget]) -> str:
    """The ``costaware budget list`` command(s) that list ``budgets``, in backquotes, with their verb."""
    kinds = {is_study_budget(b) for b in budgets}
    commands = [LIST_BUDGETS] * (False in kinds) + [LIST_STUDY_BUDGETS] * (True in kinds)
    return " and ".join(f"`{command}`" for command in commands) + (" list" if len(commands) > 1 else " lists")


def budgets_said(
    budgets: Iterable[Budget],
    wanted: Scope | None = None,
    *,
    fold_studies: bool | None = None,
    limit: int = NAMED_BUDGETS,
) -> str:
    """The budgets a refusal about ``wanted`` names: ``'a/month', 'b/day' and 3 more (`...` lists them)``.

    Study budgets are counted, not named (``fold_studies``), unless ``wanted`` names a study itself: then
    they are the ones it may mean. Budgets sharing a tag with ``wanted`` come first, then those sharing a
    tag name, each group with the values closest to those asked first (stable where equally close); past
    ``limit`` the rest are counted with the command that lists them. ``none`` when there is no budget at all.
    """
    budgets = list(budgets)
    if fold_studies is None:
        fold_studies = wanted is None or not names_a_study(wanted)
    named = [b for b in budgets if not (fold_studies and is_study_budget(b))]
    folded = len(budgets) - len(named)
    asked = set(wanted.tags) if wanted is not None else set()
    names = {key for key, _ in asked}
    # Same tag first, then same tag name (a mistyped value), the values closest to those asked first (among
    # many project= budgets, the one a typo meant); stable: the order given where equally close.
    named.sort(
        key=lambda b: (
            not set(b.scope.tags) & asked,
            not {key for key, _ in b.scope.tags} & names,
            -_closeness(dict(wanted.tags) if wanted is not None else {}, dict(b.scope.tags)),
        )
    )
    said = ", ".join(f"'{b.label}'" for b in named[:limit])
    rest = named[limit:]
    if rest:
        said += f" and {len(rest)} more ({listing_command(rest)} them)"
    if not folded:
        return said or "none"
    studies = f"{study_budgets_counted(folded)} (`{LIST_STUDY_BUDGETS}` lists them)"
    return f"{said}; and {studies}" if said else f"none but {studies}"


def _closeness(asked: dict[str, str], theirs: dict[str, str]) -> float:
    """How alike the values of the tag names both scopes have are (0 to 1; 0 where they share none)."""
    shared = sorted(set(asked) & set(theirs))
    if not shared:
        return 0.0
    ours, their = ",".join(asked[k] for k in shared), ",".join(theirs[k] for k in shared)
    return difflib.SequenceMatcher(None, ours, their).ratio()
