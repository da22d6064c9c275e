"""How a remote training's attempts are billed: a ledger entry per ended attempt, and the task's hold settled.

``RemoteTrainingOperator`` bills each attempt as its trigger reports it ended (``RemoteAttemptSteps``).
Where a person kills the waiting task (marks it failed or succeeded, or clears it), no task is left to do
so: the trigger's ``on_kill`` (a deferred wait) or the operator's (a wait in the worker) stops the job and
bills it with the same code (``RemoteTrainingJobTrigger.stop_and_bill``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.adapters.compute.base import BILLED_AT_ON_DEMAND
from costaware.remote_billing_egress import AttemptEgressBilling

if TYPE_CHECKING:
    from costaware.ledger_spool import UnsureBill
    from costaware.training.attempt_duplicates import DuplicateCheck
    from costaware.training.attempts import AttemptState


class AttemptBilling(AttemptEgressBilling):
    """Bills a remote training's ended attempts in the cost ledger of ``ledger_conn_id``.

    A base of ``RemoteAttemptSteps`` (the operator) and of :class:`KilledTrainingBilling` (its trigger).
    """

    def _settle(self, state: AttemptState) -> None:
        """Settle this task's reservation (the spend gate's, or our own) with the attempts' total."""
        from costaware.training.attempt_holds import settle_reservation

        settle_reservation(self.ledger_hook.get_conn(), state)

    def _bill_attempt(
        self,
        state: AttemptState,
        job: Mapping[str, Any],
        cause: str | None,
        *,
        committed_step: int | None = None,
        keyed_by_name: bool = False,
        price_unread_raises: bool = True,
        spool_unwritten: bool = False,
    ) -> AttemptState:
        """Record the running attempt that ended as ``job`` (once: a retry seeing it again adds nothing).

        ``spool_unwritten``: an entry the ledger cannot take is kept in the spool (written when the ledger
        is back) and :class:`~costaware.core.errors.BillSpooledError` raised: a caller that nothing follows
        (a worker's kill) lost it otherwise.

        ``price_unread_raises``: a ledger that cannot be read for the price of another type the job ran on
        raises (the caller bills again later); a caller with no later (a kill) bills at the planned price.

        ``cause``: the entry's cause (None: from the job's state). ``keyed_by_name``: the job's end is not
        known yet (a killed task's job still stopping, billed to the latest it can run): the entry is keyed
        by the job's name alone, so that a cleared task's new try, which sees the real end, finds it and
        bills the job no second time. Returns the state with the attempt in it.
        """
        from costaware.core.errors import BillSpooledError
        from costaware.training.attempt_effects import billed_attempt
        from costaware.training.remote import attempt_key, attempt_uid

        ran_in = str(job.get("availability_zone") or "")
        placement = state.plan.placement
        if state.current is not None and ran_in and ran_in in (*placement.zones, placement.first_zone):
            # Where the backend says the job ran, among the zones the plan prices (a followed job whose zone
            # was not known at its follow); any other label (a node's) says nothing of its price.
            state = replace(state, current=replace(state.current, zone=ran_in))
        # An attempt in a zone of another region pays that region's on-demand price, and its savings are
        # reckoned against it.
        zone = state.current.zone if state.current else ""
        on_demand = self._on_demand_in(state.plan, zone, raise_unavailable=price_unread_raises)
        on_demand = on_demand or Decimal(state.plan.on_demand_usd_per_hour)
        if job["market"] == "spot" and not (job.get("metrics") or {}).get(BILLED_AT_ON_DEMAND):
            rate = self._billed_spot_rate(state, job, price_unread_raises=price_unread_raises)
        else:
            # On-demand, or SageMaker managed spot's billable time, which holds the spot saving already:
            # priced at the spot rate, the saving was taken twice and the ledger under-counted.
            rate = on_demand
        # A ledger that cannot be read now raises (the bill is made again): read as the plan's price, an
        # attempt on a dearer type was billed at a quarter of its cost, and max_usd's money left overstated.
        scale = self._ran_on_scale(state.plan, job, raise_unavailable=price_unread_raises)
        entry, attempt = billed_attempt(
            state,
            job,
            cause,
            rate * scale,
            committed_step=committed_step,
            on_demand_usd_per_hour=on_demand * scale,
        )
        if keyed_by_name:  # spooled too with this key: a new try's bill of the same job finds it
            entry = replace(
                entry,
                entry_uid=attempt_uid(attempt_key(state.plan.identity, str(job["job_id"]), legacy=True)),
            )
        try:
            attempt = self._write_attempt_entry(state, job, entry, attempt, keyed_by_name=keyed_by_name)
        except Exception as e:
            check = self._duplicate_check(state, job, entry, keyed_by_name=keyed_by_name)
            spooled = self._spool(entry, check) if spool_unwritten else None
            if spooled is None:
                raise
            if float(job["billable_seconds"]) > 0:
                # Its egress too: raised before it, it was lost (the drain writes only what it holds).
                egress = self._worked_out_egress(state, job, attempt.attempt)
                if egress is not None:
                    self._spool_move_egress(egress)
            raise BillSpooledError(f"{type(e).__name__}: {e}", spooled) from e
        if float(job["billable_seconds"]) > 0:
            self._bill_move_egress(state, job, attempt.attempt)
        return state.recorded(attempt)

    @staticmethod
    def _duplicate_check(
        state: AttemptState, job: Mapping[str, Any], entry: Any, *, keyed_by_name: bool
    ) -> DuplicateCheck:
        """What tells that ``entry`` (``job``'s bill) was billed already, as the bill and the drain ask."""
        from costaware.training.attempt_duplicates import DuplicateCheck
        from costaware.training.attempt_effects import instances

        plan = state.plan
        return DuplicateCheck.of(
            entry,
            job,
            plan=plan,
            instances=instances(plan),
            keyed_by_name=keyed_by_name,
            run_token=state.current.run_token if state.current else "",
        )

    def _spool(self, entry: Any, check: DuplicateCheck) -> str | None:
        """Keep ``entry``, which the ledger could not take, in the spool: its file (None: not kept either).

        With ``check``: the drain writes it only where no try billed the attempt meanwhile (under another
        key: a cleared task's new try that saw the job end), as the direct bill does.
        """
        import costaware.ledger_spool as ledger_spool

        try:
            # Paid from the task's hold as a retry's entry is: written later, it never closes a hold that a
            # new try of the task may hold by then (the hold lasts to the run's end or its TTL).
            path = ledger_spool.spool_entry(
                ledger_spool.spool_dir(),
                entry,
                self.ledger_conn_id,
                retrying=True,
                duplicate_check=check.to_json(),
            )
        except Exception as e:
            # The last resort, as the cost listener's: the log keeps the whole bill, which drains as it is.
            self.log.error(
                "could not keep the bill (entry %s) in the spool either (%s): save the JSON that ends this "
                "line as %s.json in $AIRFLOW_HOME/costaware/spool and run `costaware spool drain`: %s",
                entry.entry_uid,
                e,
                entry.entry_uid,
                ledger_spool.spool_record(
                    entry, self.ledger_conn_id, retrying=True, duplicate_check=check.to_json()
                ),
            )
            return None
        return str(path)

    def _keep_unsure(
        self, entry: Any, check: DuplicateCheck, row: Mapping[str, Any], ledger: Any = None
    ) -> UnsureBill:
        """Keep ``entry`` in the spool's ``unsure/`` for a person: ``row`` may bill the same run.

        Its figure is held in ``ledger``'s budgets meanwhile (money spent). Returns what was decided (not
        kept: its ERROR holds the bill whole).
        """
        import costaware.ledger_spool as ledger_spool

        return ledger_spool.keep_unsure(entry, self.ledger_conn_id, check.to_json(), dict(row), ledger=ledger)

    def _write_attempt_entry(
        self, state: AttemptState, job: Mapping[str, Any], entry: Any, attempt: Any, *, keyed_by_name: bool
    ) -> Any:
        """Write ``entry`` unless an earlier try billed the same attempt; the attempt with what counts."""
        from costaware.training.attempt_duplicates import billed_already, row_of_unknown_run, stop_bill_keyed
        from costaware.training.attempt_holds import gate_reservation

        ledger = self.ledger_hook.get_conn()
        hold = gate_reservation(ledger, state.plan)  # the spend gate's, or the task's own (budget_scope)
        spooled_entry = entry  # a bill kept for a person is paid from no hold, as the spool keeps it
        if hold is not None:
            # Paid from the task's hold, which stays open until the task ends: the budgets count the rest of
            # the hold only, not the attempt twice (spent and held).
            entry = replace(entry, reservation_id=hold.id)
        check = self._duplicate_check(state, job, entry, keyed_by_name=keyed_by_name)
        stored = billed_already(ledger, check)
        unknown = row_of_unknown_run(ledger, check) if stored is None else None
        if unknown is not None:
            # The drain's rule (ledger_spool): written beside a row of the job's name that gives no end, a
            # run a new try billed under an older note counted twice. Kept for a person, not written; the
            # attempt still counts what it cost against max_usd.
            self._keep_unsure(spooled_entry, check, unknown, ledger)
        elif stored is None:
            ledger.record(stop_bill_keyed(ledger, entry, check)[0])
        else:
            # An earlier try recorded this attempt: the ledger's figure is what it cost, and what counts
            # against max_usd (priced again now, at another zone's or a later price, it could differ).
            attempt = replace(attempt, usd=str(stored))
            self.log.info(
                "attempt %d (job %s) was billed already, $%s: counted again here, not billed again",
                attempt.attempt,
                job["job_id"],
                stored,
            )
        return attempt


class KilledTrainingBilling(AttemptBilling):
    """:class:`AttemptBilling` outside the task: what the trigger of a killed task bills with."""

    def __init__(
        self,
        *,
        ledger_conn_id: str,
        aws_conn_id: str | None,
        log: Any,
        ledger: Any = None,
        spool_reaches_the_ledger: bool = False,
    ) -> None:
        """Bills in ``ledger`` where given (opened by the caller), else in ``ledger_conn_id``'s.

        ``spool_reaches_the_ledger``: ``ledger`` is the one this machine's drain of ``ledger_conn_id``
        opens (the caller opened it as the drain does), so an egress it would not take waits in the spool
        for that drain, not for a person. Without ``ledger``, it always is.
        """
        self.ledger_conn_id = ledger_conn_id
        self.aws_conn_id = aws_conn_id
        self._log = log
        self._spool_reaches_the_ledger = ledger is None or spool_reaches_the_ledger
        #: What became of the last bill for a person, not written (:meth:`_keep_unsure`), None where none
        #: was. The kill says so: "billed", it read as in the ledger.
        self.unsure_bill: UnsureBill | None = None
        if ledger is not None:
            # A ledger the caller opened (the CLI's --ledger-url): this process's look-up of
            # ``ledger_conn_id`` could lead elsewhere (the hook's fallback file, outside a worker).
            self.__dict__["ledger_hook"] = _OpenedLedger(ledger)

    @property
    def log(self) -> Any:
        return self._log

    def _keep_unsure(
        self, entry: Any, check: DuplicateCheck, row: Mapping[str, Any], ledger: Any = None
    ) -> UnsureBill:
        self.unsure_bill = super()._keep_unsure(entry, check, row, ledger)
        return self.unsure_bill


class _OpenedLedger:
    """What :attr:`AttemptBilling.ledger_hook` is asked for, for a ledger already open."""

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger

    def get_conn(self) -> Any:
        return self._ledger
