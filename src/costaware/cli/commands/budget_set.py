"""``costaware budget set|delete``: create, change or delete a budget, saying what it will not cap."""

from __future__ import annotations

import argparse
import shlex
import sys
from decimal import Decimal
from typing import Any

from costaware.cli.arguments import open_ledger
from costaware.cli.commands.governance import current_actor
from costaware.cli.output import plain
from costaware.core.money import format_usd_exact


def budget_set(args: argparse.Namespace) -> int:
    """Create or change a budget; the change goes into the audit trail under the current user."""
    from costaware.core.budgets import Budget, find_budget, kept_cap, kept_settings

    given = args.cap_gpu_hours
    gpu_given = None if str(given).strip().lower() == "none" else given
    # What is given is checked before the ledger is opened: a mistyped cap made an empty ledger file at a
    # --ledger-url that had none (a mistyped path too), then was refused.
    Budget.create(
        args.scope,
        args.period,
        "0" if args.cap_usd is None else args.cap_usd,
        cap_gpu_hours=gpu_given,
        timezone=args.timezone or "UTC",
    )
    give_cap = "give its cap, e.g. --cap-usd 250"

    # A ledger that does not exist yet has no budget to keep the cap of: refused before the file is made.
    def refuse_without_cap() -> object:
        return kept_cap(None, args.cap_usd, scope=args.scope, period=args.period, give=give_cap)

    ledger = open_ledger(args, before_creating=refuse_without_cap)
    budgets = ledger.budgets()
    existing = {(str(b.scope), b.period) for b in budgets}
    # Changing a budget changes what is given; --cap-gpu-hours none drops the GPU-hour cap.
    current = find_budget(budgets, args.scope, args.period)
    gpu_cap, zone = kept_settings(
        current,
        cap_gpu_hours=gpu_given,
        gpu_given=given is not None,
        timezone=args.timezone,
    )
    cap = kept_cap(current, args.cap_usd, scope=args.scope, period=args.period, give=give_cap)
    budget = ledger.set_budget(
        args.scope, args.period, cap, cap_gpu_hours=gpu_cap, timezone=zone, actor=current_actor()
    )
    hours = None if budget.cap_gpu_hours is None else plain(budget.cap_gpu_hours)
    gpu = f", {hours} GPU-hours" if hours is not None else ""
    kept = []  # what an existing budget kept because it was not given
    if current is not None and args.cap_usd is None:
        kept.append(f"cap {format_usd_exact(budget.cap_usd)}")
    if current is not None and args.cap_gpu_hours is None and hours is not None:
        kept.append(f"GPU-hour cap {hours}")
    if current is not None and args.timezone is None:
        kept.append(f"time zone {budget.timezone}")
    print(
        f"budget '{budget.label}' set: {format_usd_exact(budget.cap_usd)} "
        + ("in total" if budget.period.value == "total" else f"per {budget.period.value}")
        + gpu
        + (f" (kept its {' and '.join(kept)})" if kept else "")
    )
    from costaware.core.windows import inverted_offset_note

    zone_note = inverted_offset_note(budget.timezone) if args.timezone is not None else None
    if zone_note:
        # Etc/GMT+1 is a valid zone, but one hour behind UTC: most who type it mean the other way round.
        print(f"costaware: note: {zone_note}; its periods start at midnight there", file=sys.stderr)
    if budget.cap_usd == 0 and args.cap_usd is not None:
        # "--cap-usd $500" unquoted: the shell reads $5 as a variable (empty) and passes "00".
        print(
            f"costaware: note: a $0 cap refuses every hold of {budget.scope}; if you typed a $ amount, "
            "quote it ('$500') or leave the $ out (500): the shell reads $5 as a variable",
            file=sys.stderr,
        )
    if budget.cap_gpu_hours == 0 and gpu_given is not None:
        _say_zero_gpu_cap(ledger, budget)
    _say_over_cap(ledger, budget)
    _say_close_tags(ledger, budget.scope)
    scope = str(budget.scope)
    same_period = [s for s, period in existing if period == budget.period]
    twins = sorted(s for s in same_period if s != scope and s.casefold() == scope.casefold())
    if (scope, budget.period) not in existing and twins:
        # Tags match exactly, so a scope that differs only in case is a second budget over other runs.
        print(
            f"costaware: note: this is a new budget beside {', '.join(repr(t) for t in twins)} (per "
            f"{budget.period.value}): scopes match tags exactly, so '{scope}' counts only runs tagged that "
            f"way; to change an existing budget, give its scope: "
            + " or ".join(f"--scope {t}" for t in twins),
            file=sys.stderr,
        )
    return 0


def _say_close_tags(ledger: Any, scope: Any) -> None:
    """Say when no entry or open hold has the scope's tags but some have a close name or value.

    'project=flight delays' beside entries tagged 'flight-delays', or 'projct=churn' beside entries tagged
    'project', was set without a word and capped nothing. Read as ``report`` reads a tag
    (:func:`~costaware.adapters.ledger.views.recent_tags`), and every open hold.
    """
    import difflib

    from costaware.adapters.ledger.views import recent_tags

    wanted = dict(scope.tags)
    tagged = recent_tags(ledger) + [dict(r.scope.tags) for r in ledger.open_reservations()]
    if not wanted or any(all(tags.get(k) == v for k, v in wanted.items()) for tags in tagged):
        return
    names = sorted({name for tags in tagged for name in tags})
    meant: dict[str, str] = {}
    changes = []
    for key, value in wanted.items():
        name = key
        if key not in names:
            # A misspelt tag name: the values of the name meant are the ones to compare.
            by_case = [known for known in names if known.casefold() == key.casefold()]
            name = (by_case or difflib.get_close_matches(key, names, n=1) or [key])[0]
        seen = sorted({tags[name] for tags in tagged if name in tags})
        meant[name] = value if value in seen else (difflib.get_close_matches(value, seen, n=1) or [value])[0]
        changes += [repr(new) for new, old in ((name, key), (meant[name], value)) if new != old]
    if not changes:
        return  # a new project, say: nothing close to suggest
    print(
        f"costaware: note: no entry or open hold of the ledger is tagged {scope}, so this budget caps "
        f"nothing yet; did you mean {' and '.join(changes)}? "
        f"(--scope {shlex.quote(','.join(f'{k}={v}' for k, v in meant.items()))}); scopes match tags exactly",
        file=sys.stderr,
    )


def _say_zero_gpu_cap(ledger: Any, budget: Any) -> None:
    """Say what a 0 GPU-hour cap refuses, as a $0 cap is said.

    Where 0 means "no limit" (as in many tools), every GPU hold was refused unsaid. Once the period has
    GPU-hours spent or held, it is past the cap, and holds needing none are refused too.
    """
    from costaware.core.budgets import Period

    usage = next((u for u in ledger.usage(budget.scope) if u.label == budget.label), None)
    used = Decimal(0) if usage is None else usage.spent_gpu_hours + usage.reserved_gpu_hours
    if budget.period is Period.RUN or usage is None or used <= 0:
        refused = "that needs GPU-hours (those needing none pass)"
    else:
        until = "" if budget.period is Period.TOTAL else " until the period ends"
        refused = (
            f"({usage.name} has {plain(usage.spent_gpu_hours)} GPU-hours spent and "
            f"{plain(usage.reserved_gpu_hours)} held, past it, so holds needing none are refused too{until})"
        )
    print(
        f"costaware: note: a 0 GPU-hour cap refuses every hold of {budget.scope} {refused}; for no GPU-hour "
        "cap give --cap-gpu-hours none",
        file=sys.stderr,
    )


def _say_over_cap(ledger: Any, budget: Any) -> None:
    """Say when a cap is set below what its period has spent and reserved already.

    The cap was taken without a word, and "left" turned negative unseen: the next gate in it was refused.
    """
    from costaware.core.budgets import Period

    if budget.period is Period.RUN:  # each run starts afresh: nothing is committed to a cap yet
        return
    usage = next((u for u in ledger.usage(budget.scope) if u.label == budget.label), None)
    if usage is None or usage.left_usd >= 0:
        return
    until = "" if budget.period is Period.TOTAL else " the period ends or"
    print(
        f"costaware: note: {usage.name} has {format_usd_exact(usage.spent_usd)} spent and "
        f"{format_usd_exact(usage.reserved_usd)} reserved, {format_usd_exact(-usage.left_usd)} over its "
        f"cap {format_usd_exact(usage.cap_usd)}: new holds in it are refused without an approval "
        f"until{until} the cap is raised (`costaware budget holds --scope '{budget.scope}'` lists what is "
        "reserved)",
        file=sys.stderr,
    )


def budget_delete(args: argparse.Namespace) -> int:
    """Delete a budget; audited under the current user. A budget that does not exist is an error."""
    from costaware.core.budgets import Period, Scope
    from costaware.core.errors import BudgetNotFoundError

    ledger = open_ledger(args, reading=True)  # a missing ledger has no budget to delete: not made for it
    deleted = ledger.delete_budget(args.scope, args.period, actor=current_actor())
    if deleted is None:
        from costaware.core.budget_listing import (
            LIST_BUDGETS,
            LIST_STUDY_BUDGETS,
            budgets_said,
            names_a_study,
        )

        scope = Scope.parse(args.scope)
        label = f"{scope}/{Period.parse(args.period).value}"
        # The study budgets each tuning run leaves are counted, not named, unless a study's is to go.
        known = budgets_said(ledger.budgets(), scope)
        listing = LIST_STUDY_BUDGETS if names_a_study(scope) else LIST_BUDGETS
        raise BudgetNotFoundError(
            f"no budget '{label}' to delete (budgets: {known}); give its --scope and --period as "
            f"`{listing}` shows them"
        )
    print(
        f"budget '{deleted.label}' deleted (its cap was {format_usd_exact(deleted.cap_usd)}) with its alert "
        "settings (`alerts set` again after a new `budget set`); the spend it counted and the alerts it sent "
        "stay in the ledger"
    )
    return 0
