"""The budget holds of ``RemoteTrainingOperator``'s attempts: reserve, grow, keep and give up money.

Before an attempt is submitted the task holds what it may spend (``max_usd``, or what the budgets have
room for on a retry); while its job is waited for the holds are kept counting; a failure that ends the
training spends no more.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from airflow.sdk.exceptions import AirflowFailException

from costaware.operators.remote_attempt_following import RemoteAttemptFollowing

if TYPE_CHECKING:
    from costaware.training.attempt_holds import EarlierAttempt
    from costaware.training.attempts import AttemptState

#: The causes of an attempt whose failure fails the task without a retry: a later try is a person's clear
#: (after a fix), which goes on with a new attempt instead of following the failed job to its failure.
FAILED_FOR_GOOD = ("code_error", "store_error")


class RemoteAttemptHolds(RemoteAttemptFollowing):
    """A mixin of ``RemoteTrainingOperator``: the budget holds its attempts spend from."""

    def _keep_holds(self, state: AttemptState, until: datetime) -> None:
        """Keep this task's open reservations counting until ``until`` (the end of the wait for its job).

        A ledger that cannot be reached now does not fail the task: its job runs on, and a failed task
        with no retry left would leave it running unwatched and unbilled. The hold then lapses at its own
        time limit, said in the log.
        """
        from costaware.core.errors import LEDGER_UNREADABLE
        from costaware.training.attempt_holds import open_task_reservations

        try:
            ledger = self.ledger_hook.get_conn()
            for reservation in open_task_reservations(ledger, state.plan):
                ledger.extend(reservation.id, until)
        except LEDGER_UNREADABLE as e:
            self.log.warning(
                "could not keep the task's budget hold for the wait (%s); the job is watched on and billed "
                "when it ends, but the hold lapses at its own time limit (reservation_ttl)",
                e,
            )

    def _reserve(self, state: AttemptState) -> AttemptState:
        """Hold what the attempts may bill in the budgets; returns the state with the cap they allow.

        ``max_usd`` bounds the attempts of every try together. A retry follows its earlier tries' jobs
        again, so their cost counts in its own state once more; what it cannot follow (a run the backend
        lost) is taken off the cap it runs under instead (:meth:`_go_on_after`).
        """
        from costaware.core.money import format_usd_exact
        from costaware.training.attempt_holds import billed_by_earlier_tries

        plan = state.plan
        # Before what earlier tries billed is read: a killed try's bill drained after this read is not in
        # what this try sizes, and grows the hold back; one drained before it grows nothing back.
        self._take_up_holds(state)
        earlier, billed = billed_by_earlier_tries(self.ledger_hook.get_conn(), plan)
        lost = Decimal(0)
        if billed:
            state, lost = self._go_on_after(state, billed, earlier)
            if lost:
                state = replace(state, earlier_usd=str(lost))
        held = self._hold(state, earlier, retry=bool(billed))
        self._take_up_holds(state)  # a hold made just now (the first, or one held again)
        if not lost or plan.max_usd is None or held.plan.max_usd is None:
            return held  # nothing to take off, or no cap to take it off
        allowed = Decimal(held.plan.max_usd)
        cap = max(allowed - lost, Decimal(0))
        # Where the budgets lowered the cap, raising max_usd does nothing: the budget is what to raise.
        by_budgets = allowed != Decimal(plan.max_usd)
        amount = format_usd_exact(allowed)
        limit = f"the {amount} the budgets allow" if by_budgets else f"max_usd {amount}"
        self.log.warning(
            "a retry: earlier tries billed %s for runs it does not follow again, so its attempts may bill "
            "%s, to keep the tries within %s together",
            format_usd_exact(lost),
            format_usd_exact(cap),
            limit,
        )
        note = held.plan.max_usd_note or (
            f"that is what is left of {limit} after the {format_usd_exact(lost)} earlier tries billed for "
            f"runs this try does not follow again; raise {'the budget' if by_budgets else 'max_usd'} and "
            "clear the task"
        )
        return replace(held, plan=replace(held.plan, max_usd=str(cap), max_usd_note=note))

    def _take_up_holds(self, state: AttemptState) -> None:
        """Say in the ledger that this try took the task's open holds up (``Ledger.take_up_holds``).

        A late bill of this try (its kill's, kept in the spool while the ledger was down) then grows the
        hold back no more: this try is over by then, and the next one sizes the hold with the bill read.
        """
        from costaware.training.attempt_holds import task_holder

        plan = state.plan
        try_number = int(plan.identity.get("try_number", 1))
        self.ledger_hook.get_conn().take_up_holds(task_holder(plan), try_number)

    def _go_on_after(
        self, state: AttemptState, billed: list[EarlierAttempt], earlier: Decimal
    ) -> tuple[AttemptState, Decimal]:
        """A retry's state, and what earlier tries billed that it does not follow again (against the cap).

        ``billed``, ``earlier``: the earlier entries and their total (:func:`billed_by_earlier_tries`).

        A retry follows attempt 1, 2, ... by their names, as long as the backend has each. Where it lost
        one, submitting it again would go another way than the earlier try did and run into the later
        attempts' names (the job the failed try left running among them): the retry goes on from the last
        attempt instead, following its job where the backend still has it (a success there finishes the
        training), else from the next, following the job an earlier try left under its name, or submitting
        it (the training resumes from the newest checkpoint either way).
        """
        from costaware.training.attempt_holds import billed_not_followed
        from costaware.training.remote import job_name

        plan = state.plan
        backend = self._backend(plan)
        numbers = [entry.attempt for entry in billed if entry.attempt is not None]
        # The last attempt billed, from the notes (an older note says none: one attempt per entry).
        last = max(numbers) if len(numbers) == len(billed) else max([len(billed), *numbers])
        names = {n: job_name(plan.base_name, n) for n in range(1, last + 1)}
        first, followed = last + 1, Decimal(0)
        if billed[-1].cause in FAILED_FOR_GOOD:
            # The training failed for good (no Airflow retry follows that), so a person cleared the task,
            # most likely after a fix: followed again, the failed job failed this try at once, for ever.
            lost = last
            why = f"attempt {lost}'s job ({names[lost]}) failed ({billed[-1].cause.replace('_', ' ')})"
        else:
            missing = next((n for n, name in names.items() if backend.find(name) is None), None)
            if missing is None:
                return state, billed_not_followed(billed)  # each is still there: followed in order
            lost = missing
            why = f"the {plan.backend} backend no longer has attempt {lost}'s job ({names[lost]})"
            if lost != last:  # the last attempt's job is still there: followed again, it counts in the state
                first = last
                followed = next(entry.usd for entry in reversed(billed) if entry.attempt == last)
        name = job_name(plan.base_name, first)
        # The last attempt's job was found above; only a next one may not exist yet.
        if first > self.max_attempts and first > last and backend.find(name) is None:
            # For good, and no job runs on the hold an earlier try left open (its attempts were billed as
            # they ended, the next was never made): left open, it blocked the budget until reservation_ttl.
            self._settle(state)
            raise AirflowFailException(
                f"a retry: the earlier tries made {last} attempt(s) and {why}, so this retry would start "
                f"attempt {first}, past max_attempts={self.max_attempts}: raise max_attempts and clear the "
                "task; nothing was started"
            )
        self.log.warning(
            "a retry: %s, so this retry does not follow the earlier attempts: it goes on with attempt %d "
            "(%s), and the %d attempt(s) earlier tries billed count against max_usd and max_attempts",
            why,
            first,
            name,
            last,
        )
        return replace(state, first_attempt=first), earlier - followed

    def _spend_no_more(self, state: AttemptState, earlier: Decimal, refused: str) -> AttemptState:
        """A retry whose budgets have no room: ``max_usd`` lowered to what its earlier tries billed.

        A budget already past its cap: nothing can be held, so nothing more may be spent. The retry follows
        the job its failed try left running to its end (under the limit that job was given) and bills it, and
        starts no new one; failing instead left that job running with nobody to watch or bill it.
        """
        from costaware.core.money import format_usd_exact

        gate = "" if self.budget_scope is not None else " (or approve at the gate)"
        self.log.warning(
            "a retry: the budgets have no room (%s): max_usd is lowered to the %s earlier tries billed, so "
            "no new attempt starts; raise the budget%s and clear the task to go on",
            refused,
            format_usd_exact(earlier),
            gate,
        )
        note = (
            f"the budgets have no room for this retry ({refused}): raise the budget{gate} and clear the task"
        )
        return replace(state, plan=replace(state.plan, max_usd=str(earlier), max_usd_note=note))

    def _hold(self, state: AttemptState, earlier: Decimal, *, retry: bool) -> AttemptState:
        """Hold what is left of ``max_usd`` after ``earlier`` (what earlier tries billed) in the budgets.

        A spend gate's reservation (its estimate) grows to that; where the budgets have less room,
        ``max_usd`` is lowered to what they hold, so that no budget is passed. No gate: reserve it (else the
        estimate) in ``budget_scope``. Returns the state with the cap the budgets allow, all tries together.
        """
        from costaware.core.budgets import Scope
        from costaware.core.errors import BudgetExceededError
        from costaware.core.money import format_usd_exact
        from costaware.glue import check_scope_is_tagged
        from costaware.training.attempt_effects import cap_rate, least_cap_usd_said, stop_seconds
        from costaware.training.attempt_holds import gate_reservation, hold_again, hold_cap, reserve_estimate

        plan = state.plan
        ledger = self.ledger_hook.get_conn()
        gate = gate_reservation(ledger, plan)
        if gate is None:
            if self.budget_scope is not None:
                scope = str(Scope.given(self.budget_scope, what="budget_scope"))  # as rendered
                if plan.max_usd is None and plan.estimated_usd is None:
                    if self._retry:
                        # The job an earlier try left (under a spend gate's hold, say) would run on unwatched.
                        return self._spend_no_more(state, earlier, "nothing to hold: no max_usd, no estimate")
                    # Nothing held, and the job started: the budgets never heard of it until it billed.
                    raise AirflowFailException(
                        f"budget_scope={scope!r} holds max_usd (or the spot decision's estimated_usd) in its "
                        "budgets before the job starts, and this task has neither (its decision carries no "
                        "estimate): give max_usd, the most the training may spend; nothing was started"
                    )
                task_id = plan.identity["task_id"]
                check_scope_is_tagged(scope, plan.tags, task_id=task_id, gate="budget_scope")
                try:
                    reserve_estimate(ledger, plan, scope, billed_before=earlier)
                except BudgetExceededError as e:
                    if not self._retry:
                        raise  # nothing runs yet: refused before any job
                    # The job the failed try left running would be watched and billed by nobody.
                    return self._spend_no_more(state, earlier, str(e))
                return state
            if plan.max_usd is not None:
                # A retry: the gate's hold is still open (a failed try the task retries is paid from it),
                # or, expired or released meanwhile, held again from $0.
                gate, refused = hold_again(ledger, plan, billed_before=earlier)
                if refused:
                    return self._spend_no_more(state, earlier, refused)
                retry = retry or gate is not None
                if gate is not None:
                    self.log.info(
                        "a retry: holding max_usd again in %s, where the spend gate reserved", gate.scope
                    )
            elif plan.estimated_usd:
                self._hold_estimate_again(state, earlier)
        if plan.max_usd is None:
            return state
        cap = Decimal(plan.max_usd)
        # What this try's attempts may still bill: the earlier tries' attempts are spent already.
        wanted = max(cap - earlier, Decimal(0))
        if gate is None:
            return state
        # A cleared task's hold is still open, and has paid its earlier tries' attempts: what it covers for
        # the attempts to come is the rest (the budgets count only that as reserved).
        paid = ledger.paid_from([gate.id]).get(gate.id, Decimal(0))
        if gate.usd - paid >= wanted:
            return state
        held = max(hold_cap(ledger, gate, wanted + paid) - paid, Decimal(0))
        budgets = ", ".join(f"'{b}'" for b in gate.budgets)
        # A retry says what its earlier tries billed: the hold is what is left of the cap after them.
        target = f"max_usd {format_usd_exact(cap)}"
        if earlier:
            billed = format_usd_exact(earlier)
            target = f"{format_usd_exact(wanted)}, max_usd less the {billed} earlier tries billed"
        if held >= wanted:
            self.log.info(
                "raised the spend gate's reservation from %s to %s in %s: the budgets hold all the attempts "
                "may bill",
                format_usd_exact(gate.usd),
                target,
                budgets,
            )
            return state
        lowered_cap = earlier + held
        # A retry's hold starts at $0 (hold_again): what the gate reserved then is not what it holds now.
        reserved = (
            "this retry held nothing yet"
            if gate.usd == 0 and retry
            else f"the spend gate reserved {format_usd_exact(gate.usd)} for this task"
        )
        self.log.warning(
            "max_usd %s is lowered to %s: %s and %s had room for no more than %s; raise the budget to give "
            "the task its full cap",
            format_usd_exact(cap),
            format_usd_exact(lowered_cap),
            reserved,
            budgets,
            f"{format_usd_exact(held)} beside the {format_usd_exact(earlier)} earlier tries billed"
            if earlier
            else "that",
        )
        lowered = replace(state, plan=replace(plan, max_usd=str(lowered_cap)))
        rate = cap_rate(lowered, plan.first_market)
        least = least_cap_usd_said(rate, stop_seconds(lowered))
        if held < least and not retry:
            # Said here, naming the budget: the cap's own message would say to raise max_usd. A retry goes
            # on: its first submit follows the job its failed try left running (else it fails for the cap).
            self._settle(lowered)
            raise AirflowFailException(
                f"{budgets} had room for {format_usd_exact(held)} for this task beside the spend gate's "
                f"reservation, less than the {format_usd_exact(least)} an attempt needs at "
                f"{format_usd_exact(rate)}/hour; nothing was started: raise the budget, or run when money is "
                "released"
            )
        return lowered

    def _hold_estimate_again(self, state: AttemptState, earlier: Decimal) -> None:
        """A retry with no ``max_usd`` behind a spend gate: hold the estimate again, less what was billed.

        Where the gate's hold expired or was released (a killed try's run marked, a long retry delay), the
        retry ran with nothing held: budgets shared with other tasks did not see the money it was about to
        spend. (A failed try the task retries leaves the hold open, paid in part: ``reserve`` returns it.)
        Without a cap nothing stops it where the budgets have no room; it says so and runs on.
        """
        from costaware.core.money import format_usd_exact
        from costaware.training.attempt_holds import hold_again, hold_cap

        plan = state.plan
        ledger = self.ledger_hook.get_conn()
        gate, refused = hold_again(ledger, plan, billed_before=earlier)
        if refused:
            self.log.warning(
                "a retry: the budgets have no room to hold its estimate again (%s); it runs on with nothing "
                "held: no max_usd caps it",
                refused,
            )
            return
        if gate is None or plan.estimated_usd is None:
            return
        wanted = max(Decimal(plan.estimated_usd) - earlier, Decimal(0))
        held = hold_cap(ledger, gate, wanted) if gate.usd < wanted else gate.usd
        short = f" (the budgets had room for no more of its {format_usd_exact(wanted)})"
        self.log.info(
            "a retry: holding %s again in %s, the estimate%s%s",
            format_usd_exact(held),
            gate.scope,
            f" less the {format_usd_exact(earlier)} earlier tries billed" if earlier else "",
            "" if held >= wanted else short,
        )
