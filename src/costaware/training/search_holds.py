"""A budgeted search's money around its rungs: refusals before it starts, a refused rung, a failure's bill.

:func:`costaware.training.search.budgeted_search` runs the search loop; its settlements are
:class:`costaware.training.search_billing.SearchBilling`'s. Here: the refusal of a ``cap_usd`` that cannot pay
one rung, the check of the budgets over its scope before it starts, the advice a refused rung's stop gives,
and what a search that failed bills, gives back and deletes.

The money is ours: a cap that cannot pay the first rung and the search's own bookkeeping is refused, and a
search that another budget over its scope leaves less than that returns before anything is spent. The
bookkeeping's hold in the cost ledger is measured by default (``slack_seconds=None``): once the setup before
the first rung (the study, the budget, the first proposal) has run, the search holds its time x
``safety_factor`` (a cap that cannot pay that and the first rung's reservation is refused then, the setup
billed) and reserves the first rung before the first model is made (a refusal spends only the setup, billed
as ``setup``). Right after each rung's bill, and before the next rung, it grows the hold, from what is left
beside it, to the bookkeeping measured between rungs (the time billed with a rung beyond its training and
making) x ``safety_factor``; where it cannot grow that far, no rung is run that would leave the bookkeeping
unpaid: the search stops as a refused rung stops it, naming the budget with the least left. No measurement
foresees a slow-down: bookkeeping that slows down beyond what was measured is billed past the cap (a given
``slack_seconds`` holds more up front). A given ``slack_seconds`` is held from the start, fixed, and refuses
a cap before anything is spent.
Before every rung the search reserves, from what is left beside that hold, the rung's estimated
cost and the time used since the last settlement (proposals, the model's making), and settles it with what
the rung really used once it ran. A rung that cannot be reserved is not run, so the spend passes the cap
only where a rung ran past its reservation when the budget had no room left beside it (a rung is one call
to the model and is not interrupted: what it used is billed, and a warning says by how much the cap was
passed), or the bookkeeping after the last rung took longer than its hold and the money left (the setup, run
before a measured hold is reserved, is billed as it ran: past the cap only where it alone took more; so is
a first model's making slower than its first rung's reservation).
After a cut the search goes on only while the money left could carry the fastest configuration seen through
every rung (no money on trials that can no longer finish), and none sits idle in a reservation for a whole
trial.
"""

from __future__ import annotations

import logging
import re
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.core.budgets import cap_advice_in
from costaware.core.errors import BudgetExceededError, ConfigurationError
from costaware.core.money import MICRO_USD, format_usd_exact
from costaware.core.tuning import TrialState, trial_label, usd_for_seconds
from costaware.training.search_billing import SearchBilling, tightest_budget

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import BudgetUsage

# Under the search's own name, as before the split: a person's logging filter or level for
# costaware.training.search kept covering what a failed search bills, gives back and deletes.
log = logging.getLogger("costaware.training.search")


def least_cap(
    first_rung_seconds: float, safety_factor: float, slack_seconds: float | None, usd_per_hour: Decimal
) -> tuple[Decimal, str, Decimal]:
    """The least ``cap_usd`` a search can start with: ``(first rung's USD, the hold as said, the least)``.

    The first rung is reserved at first_rung_seconds x safety_factor beside the bookkeeping's hold (which
    pays the setup before it): a cap below both cut the first rung, and the setup and bookkeeping were
    billed past it. Each rounded up as it is reserved, so the first rung fits at exactly this cap.
    """
    first_rung_usd = usd_for_seconds(first_rung_seconds * safety_factor, usd_per_hour)
    # A measured hold is known once the setup ran: checked here at the least it can be (a micro-dollar).
    if slack_seconds is None:
        return (
            first_rung_usd,
            "slack_seconds=None: measured once it starts, at least $0.000001",
            first_rung_usd + MICRO_USD,
        )
    bookkeeping = f"slack_seconds={slack_seconds:g}"
    return first_rung_usd, bookkeeping, first_rung_usd + usd_for_seconds(slack_seconds, usd_per_hour)


def cap_cannot_pay_one_rung(
    cap_usd: Decimal,
    first_rung_seconds: float,
    safety_factor: float,
    first_rung_usd: Decimal,
    bookkeeping: str,
    least_usd: Decimal,
    usd_per_hour: Decimal,
    *,
    then: str = "",
) -> ConfigurationError:
    """The refusal of a ``cap_usd`` below the first rung's reservation and the bookkeeping's hold.

    Said before the start (a given ``slack_seconds``, or the least a measured hold can be) and again once
    the setup ran (the measured hold): ``bookkeeping`` says how the hold was sized, ``then`` what follows.
    """
    return ConfigurationError(
        f"cap_usd {format_usd_exact(cap_usd)} cannot pay one rung: the first rung's reservation "
        f"(first_rung_seconds={first_rung_seconds:g} x safety_factor={safety_factor:g}: "
        f"{format_usd_exact(first_rung_usd)}) and the search's own bookkeeping ({bookkeeping}) cost "
        f"{format_usd_exact(least_usd)} at usd_per_hour {usd_per_hour}; set cap_usd to at least "
        f"{format_usd_exact(least_usd)} (or lower first_rung_seconds, if the first rung is shorter){then}"
    )


def short_budget(
    ledger: Ledger, budget_scope: Any, run: str, dag_id: str, least_usd: Decimal
) -> BudgetUsage | None:
    """The tightest budget over the search's scope with less than ``least_usd`` left, if one has.

    Read before the search starts (its own budget is not set yet, so only the caller's budgets are read): a
    search that starts runs its setup before its bookkeeping hold can be reserved, and where another budget
    refused that hold, the setup was billed past it. What is read here is a check, as ``cap_usd``'s is.
    """
    from costaware.core.errors import BudgetNotFoundError

    try:
        tightest = tightest_budget(ledger, budget_scope, run, dag_id)  # as SearchBilling.tightest reads it
    except BudgetNotFoundError:
        return None  # no budget over the scope: the search's own is the only one
    return tightest if tightest is not None and tightest.left_usd < least_usd else None


def no_room_to_start(
    too_low: BudgetUsage,
    least_usd: Decimal,
    first_rung_seconds: float,
    safety_factor: float,
    bookkeeping: str,
    hold_measured: bool,
) -> str:
    """The stop of a search that another budget over its scope leaves less than ``least_usd``: no rung run."""
    has = f"{format_usd_exact(too_low.left_usd)} left" if too_low.left_usd > 0 else "nothing left"
    # Measured, the hold is already the least it can be: any slack_seconds holds more.
    smaller_hold = "" if hold_measured else " or slack_seconds"
    return (
        f"no rung was run: budget '{too_low.name}' over the search's scope has {has}, less than the "
        f"{format_usd_exact(least_usd)} the search "
        f"holds before its first rung (the first rung's reservation, first_rung_seconds="
        f"{first_rung_seconds:g} x safety_factor={safety_factor:g}, and its own bookkeeping, "
        f"{bookkeeping}): nothing was spent; raise the cap with `costaware budget "
        f"set`, or give the search a smaller first_rung_seconds{smaller_hold}"
    )


def making_past_reservation(billing: SearchBilling, made: float, reserved: float) -> str:
    """The warning of a first model's making billed past a budget ("": within them all), as it ran.

    ``made``: the seconds its bill settled; ``reserved``: the seconds reserved for its first rung.
    """
    short, passed = billing.past_cap()
    if short <= 0:
        return ""
    return (
        f"the spend passed {passed} by {format_usd_exact(short)}: its first model's making took {made:.2f} s "
        f"against the {reserved:.2f} s reserved for its first rung; a making is not interrupted, so it is "
        "billed as it ran (the rung is reserved anew)"
    )


def rung_past_reservation(
    billing: SearchBilling,
    rung: int,
    number: int,
    billed: float,
    reserved: float,
    trained: float,
    estimate: float,
) -> str:
    """The warning of a rung billed past its reservation and a budget ("": within them all), as it ran.

    Counted with the bookkeeping's hold: money the rung took from it passes the cap when the search ends,
    unless the tail is shorter than the hold.
    """
    short, passed = billing.past_cap()
    if short <= 0:
        return ""
    over = short - billing.held_usd
    spend = (
        f"passed {passed} by {format_usd_exact(over)}"
        if over > 0
        else f"took {format_usd_exact(short)} of the money held for its bookkeeping"
    )
    return (
        f"the spend {spend}: rung {rung} of trial {number} was billed {billed:.2f} s against the "
        f"{reserved:.2f} s reserved for it (its training took {trained:.2f} s, estimated at "
        f"{estimate:.2f} s); a rung is not interrupted, so it is billed as it ran"
    )


def own_budget_advice(refused: BudgetExceededError, budget_scope: Any, cap_usd: Decimal) -> str:
    """The refusal's message; where the search's own budget refused, it says to raise ``cap_usd``.

    That budget is set from ``cap_usd`` and deleted when the search ends: `costaware budget set`, which the
    ledger's message names, cannot raise it. What it has reserved is the search's own bookkeeping hold, not
    a killed run's hold for `costaware budget release` to give back.
    """
    message = str(refused)
    if not refused.scope.startswith(f"{budget_scope}/"):
        return message
    message = re.sub(
        r"; the (\S+) reserved is held by open holds: .*$",
        r"; the \1 reserved is held for the search's own bookkeeping (slack_seconds)",
        message,
    )
    return message.replace(
        cap_advice_in(message),
        f"the search's budget is its cap_usd ({format_usd_exact(cap_usd)}): raise cap_usd",
    )


def bill_what_ran(
    billing: SearchBilling,
    running: tuple[str, int, int] | None,
    error: BaseException,
    *,
    label: str = "tail",
    what: str = "bookkeeping after the last rung",
) -> None:
    """Bill the time a search used up to its failure: on its running rung's reservation, then the rest.

    The running rung's trial ended there: it is billed as failed (``#3 failed@9``), as a diverged one is;
    a bare rung label (``#3@9``) read as a trial the budget cut.
    """
    try:
        if running is not None:
            reservation_id, number, rung = running
            billing.bill(
                reservation_id,
                trial_label(number, TrialState.FAILED, rung),
                f"the rung failed: {type(error).__name__}: {error}",
                outcome="failed",
            )
    except Exception:
        log.exception("search %s: the rung that failed could not be billed", billing.run)
    # Settled whatever became of the rung's bill: skipped, the bookkeeping hold counted against the project's
    # budgets for hours (its time limit), and the time since was billed nowhere.
    try:
        billing.settle_tail("", label=label, what=what)
    except Exception:
        log.exception("search %s: its bookkeeping after it failed could not be billed", billing.run)


def release_rung(ledger: Ledger, running: tuple[str, int, int] | None) -> None:
    """Give back a rung's reservation that ran nothing (its model's making failed)."""
    if running is None:
        return
    try:
        ledger.release(running[0])
    except Exception:  # it expires at its time limit; the failure itself is what is raised
        log.exception("rung %d of trial %d: its reservation could not be given back", running[2], running[1])


def delete_search_budget(ledger: Ledger, budget_scope: Any, run: str) -> None:
    """Delete the search's own budget: its cap served one call (the spend stays, tagged search=<id>).

    Kept, one budget a call piled up, and every reserve and budget check of the ledger reads them all.
    """
    try:
        ledger.delete_budget(budget_scope, "total", actor=f"budgeted_search {run}")
    except Exception as e:  # a rung still held (its settle failed): the budget stays, as said
        log.warning("search %s: its budget %s/total stays: %s", run, budget_scope, e)
