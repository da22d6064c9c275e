"""A remote attempt's egress across regions, billed: worked out once, recorded, else spooled or logged.

Split out of :mod:`costaware.remote_billing` (its :class:`~costaware.remote_billing.AttemptBilling` is an
:class:`AttemptEgressBilling`): what the bill of an attempt that ran in a zone of another region adds for the
data and checkpoint it read across. Never raises past the attempt's own bill; the key the entry takes and its
write, direct or drained, are :mod:`costaware.ledger_spool_egress`'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.remote_billing_prices import AttemptPricing

if TYPE_CHECKING:
    from costaware.training.attempts import AttemptState


class AttemptEgressBilling(AttemptPricing):
    """Bills the egress of a remote training's running attempt in the cost ledger of ``ledger_conn_id``."""

    #: Whether this machine's drain of ``ledger_conn_id`` writes to the ledger billed in, so that an entry
    #: it would not take can wait in the spool: not known so for a ledger the caller opened, unless it says
    #: so (``KilledTrainingBilling(spool_reaches_the_ledger=...)``: the listener's, `jobs reconcile`'s).
    _spool_reaches_the_ledger = True

    def _bill_move_egress(self, state: AttemptState, job: Mapping[str, Any], attempt_number: int) -> None:
        """Record the running attempt's egress, else keep it in the spool; never raises.

        The attempt's entry is written by then: an error raised here failed the task with its attempt billed,
        and each retry, finding the attempt billed, failed the same way.
        """
        egress = self._worked_out_egress(state, job, attempt_number)
        if egress is None:
            return
        try:
            self._record_move_egress(state, egress)
        except Exception as e:  # the attempt's own entry is what must not be lost
            from costaware.core.money import format_usd_exact

            unrecorded = f"could not record the egress of attempt {attempt_number}"
            usd = format_usd_exact(egress[0].usd)
            if not self._spool_reaches_the_ledger:
                self._log_egress_to_record_by_hand(egress, f"{unrecorded} ({usd})", e)
                return
            # Spooled on every path, not a kill's alone: the attempt is recorded now, so nothing bills
            # it, nor its egress, again. Drained alone (egress_run), never paid from the task's hold.
            kept = self._spool_move_egress(
                egress, unrecorded=f"{unrecorded} ({usd}: {type(e).__name__}: {e}), nor keep it"
            )
            if kept is not None:  # not lost: said so, where an ERROR read as money gone
                self.log.warning(
                    "%s (%s): kept in the spool %s; the next drain (or `costaware spool drain`) writes it "
                    "(%s: %s)",
                    unrecorded,
                    usd,
                    kept,
                    type(e).__name__,
                    e,
                )

    def _log_egress_to_record_by_hand(
        self, egress: tuple[Any, Any], unrecorded: str, error: Exception
    ) -> None:
        """Log ``egress``, which the ledger given would not take, whole, for a person to record there.

        Spooled, it waited under ``ledger_conn_id``, which this machine's drain reads as its own ledger
        (the hook's fallback, outside a worker): written there, or waiting for good. To be recorded as the
        bill and the drain record it (``egress_keyed``, ``record_egress``): under the run's key alone, it
        was billed a second time beside a row of the same run under the job name's key (written by an
        earlier bill, the write that failed here never having read it).
        """
        from costaware.core.ledger import entry_to_json

        entry, run = egress
        self.log.error(
            "%s in the ledger given (%s: %s): not kept in the spool, whose drain writes to the ledger "
            "connection %r names on this machine, which may be another; record it in the ledger given as the "
            "drain would, data being the JSON that ends this line: from costaware.core.ledger import "
            "entry_from_json; from costaware.ledger_spool_egress import EgressRun, egress_keyed, "
            "record_egress; run = EgressRun.from_json(data['egress_run']); "
            "record_egress(ledger, egress_keyed(ledger, entry_from_json(data['entry']), run), run) (keyed "
            "so that a row of the run already there is not billed twice): %s",
            unrecorded,
            type(error).__name__,
            error,
            self.ledger_conn_id,
            json.dumps({"entry": entry_to_json(entry), "egress_run": run.to_json()}),
        )

    def _worked_out_egress(
        self, state: AttemptState, job: Mapping[str, Any], attempt_number: int
    ) -> tuple[Any, Any] | None:
        """:meth:`_move_egress`, worked out once; None where nothing moved, or where it raised (logged).

        Raised, it left the bill (and the spool) without a figure to write: said with what to bill by hand.
        """
        try:
            return self._move_egress(state, job)
        except Exception:
            from costaware.core.zone_choice import region_of

            plan, current = state.plan, state.current
            zone = current.zone if current else ""
            self.log.exception(
                "could not work out the egress of attempt %d (moved from %s to %s, %s B): it is neither "
                "billed nor kept in the spool (the attempt's own bill goes on without it): record it by hand "
                "(Ledger.record, kind egress, cause zone_move) at the transfer price to %s (the error "
                "follows)",
                attempt_number,
                plan.region,
                zone,
                current.moved_bytes if current else "?",
                region_of(zone, plan.region),
            )
            return None

    def _record_move_egress(self, state: AttemptState, egress: tuple[Any, Any]) -> None:
        """Record ``egress`` (:meth:`_move_egress`'s), the running attempt's: its data and checkpoint.

        At the price the zone choice weighed; for an attempt that ran (one stopped before it started read
        nothing). Keyed by the attempt's job name, or by name and run where the row under the name's key is
        another run's (:func:`~costaware.ledger_spool_egress.egress_uid`), so that a retry following the
        job adds nothing. The egress counts in the budgets as spend; ``max_usd`` caps the attempts' compute
        only.
        """
        from costaware.ledger_spool_egress import egress_keyed, record_egress

        entry, run = egress
        ledger = self.ledger_hook.get_conn()
        entry = egress_keyed(ledger, entry, run)
        if record_egress(ledger, entry, run) and state.current is not None:
            self.log.info(
                "attempt %d: its run in %s read %s GB across regions: $%s of egress",
                state.current.attempt,
                state.current.zone,
                entry.quantity,
                entry.usd,
            )

    def _spool_move_egress(self, egress: tuple[Any, Any], *, unrecorded: str = "") -> str | None:
        """Keep ``egress`` (:meth:`_move_egress`'s) in the spool, the ledger down: its file (None: not kept).

        The drain keys it by the same rule as the direct write, so a run's egress is billed once whichever
        comes first. Not kept either: logged whole, as :meth:`_spool` logs a bill, led by ``unrecorded``
        (what the failed write was) where given.
        """
        import costaware.ledger_spool as ledger_spool
        from costaware.ledger_spool_egress import spool_uid

        entry, run = egress
        entry = replace(entry, entry_uid=spool_uid(run))
        kept_run = run.to_json()
        try:
            path = ledger_spool.spool_entry(
                ledger_spool.spool_dir(), entry, self.ledger_conn_id, retrying=False, egress_run=kept_run
            )
        except Exception as e:
            self.log.error(
                "%s (entry %s) in the spool either (%s: %s): save the JSON that ends this line as %s.json in "
                "$AIRFLOW_HOME/costaware/spool and run `costaware spool drain`: %s",
                unrecorded or "could not keep the egress",
                entry.entry_uid,
                type(e).__name__,
                e,
                entry.entry_uid,
                ledger_spool.spool_record(
                    entry, self.ledger_conn_id, retrying=False, egress_run=run.to_json()
                ),
            )
            return None
        return str(path)

    def _move_egress(self, state: AttemptState, job: Mapping[str, Any]) -> tuple[Any, Any] | None:
        """The running attempt's egress entry (keyed by its job name) and its run; None: nothing across."""
        from costaware.adapters.regions import BYTES_PER_BILLED_GB
        from costaware.core.ledger import Kind, LedgerEntry
        from costaware.core.money import MICRO_USD
        from costaware.core.zone_choice import region_of
        from costaware.ledger_spool_egress import EgressRun
        from costaware.training.attempt_effects import instances
        from costaware.training.remote import job_name

        plan, current = state.plan, state.current
        if current is None or not current.moved_bytes or not current.zone:
            return None
        region = region_of(current.zone, plan.region)
        price = plan.placement.usd_per_gb.get(region)
        if region == plan.region or price is None:
            return None
        gigabytes = Decimal(current.moved_bytes) / BYTES_PER_BILLED_GB
        ident = plan.identity
        name = job_name(plan.base_name, current.attempt)
        run_note = f", run {current.run_token}" if current.run_token else ""
        ended = job.get("ended_at")
        # SageMaker never reuses a name: no start, so an unmarked row under the name is never another run's.
        started_at = (
            None
            if ended is None or plan.backend == "sagemaker"
            else float(ended) - float(job["billable_seconds"]) / instances(plan)
        )
        entry = LedgerEntry(
            dag_id=ident["dag_id"],
            run_id=ident["run_id"],
            task_id=ident["task_id"],
            try_number=int(ident.get("try_number") or 1),
            map_index=int(ident.get("map_index", -1)),
            kind=Kind.EGRESS,
            usd=(gigabytes * Decimal(price)).quantize(MICRO_USD),
            quantity=gigabytes.quantize(MICRO_USD),
            unit="gb",
            unit_price_usd=Decimal(price),
            region=region,
            cause="zone_move",
            price_source="bundled AWS transfer prices",
            note=(
                f"attempt {current.attempt} moved from {plan.region} to {current.zone}{run_note}: its data "
                f"and the checkpoint it restored, if any ({current.moved_bytes} B)"
            ),
            tags=dict(plan.tags),
            entry_uid=f"egress:{name}"[:64],
        )
        return entry, EgressRun(job_name=name, run_token=current.run_token, started_at=started_at)
