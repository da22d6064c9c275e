"""Stop and bill the job of a remote training's wait whose task was killed, and settle the task's hold.

See :meth:`KilledJobBilling.stop_and_bill`; the trigger's ``on_kill``, a cancel past its deadline of a task
that ended, `airflow dags test`'s Ctrl-C, the operator's last try and ``costaware jobs reconcile`` use it. The
job's stop, and its bill to the latest it can run where it is not seen to end, are
:mod:`costaware.triggers.remote_kill_stop`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from costaware.triggers.remote_kill_stop import KilledJobStopping

if TYPE_CHECKING:
    from costaware.ledger_spool import UnsureBill

#: How long a kill waits for the stopped job to end before it bills the job to the end of its grace period.
#: Airflow 3.3 stops awaiting ``on_kill`` after about a second (it cancels the trigger again at its next
#: loop): the work runs in a thread, which finishes on its own.
KILL_WAIT_SECONDS = 20.0
#: The states of a task that will not run again: a kill that leaves one settles the task's hold.
ENDED_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
#: The states of a task no person ended: its trigger moved to another triggerer, or its worker is going
#: away (shutdown, ``execution_timeout``); the job runs on for the task, or its retry, to follow.
WAITING_STATES = frozenset({"deferred", "running"})


class KilledJobBilling(KilledJobStopping):
    """The stop and bill of :class:`~costaware.triggers.remote_training.RemoteTrainingJobTrigger`'s job."""

    def _stop_and_bill_if_the_task_ended(self) -> None:
        """A cancel past the wait's deadline: stop and bill the job only where the task ended.

        Airflow calls no ``on_kill`` then: a task marked failed or succeeded after the deadline, before the
        scheduler's timeout check, left its job running, unbilled, with no resume to stop it. The task
        that timed out is on its way to its ``__fail__`` resume (scheduled, queued, running) or its retry,
        which follow the job, and one handed to another triggerer still waits; a state that cannot be read
        is taken as one of these, far the likelier, and the job is named for a person to check. An ended
        task may also be one its last try's resume failed, slower than the triggerer: that resume billed
        the job already, and it is found, not billed again.
        """
        verdict = self._task_verdict(unreadable="unknown")
        if verdict == "unknown" and self.job_id is not None:
            self.log.warning(
                "job %s on %s may run on unbilled if the task was ended: check it and stop it by hand",
                self.job_id,
                self.backend,
            )
            return
        if verdict != "ended":
            self.log.info(
                "the wait for job %s was cancelled past its deadline: the task's resume, or its new try, "
                "follows the job",
                self.job_id,
            )
            return
        self.log.warning(
            "the task ended past its wait's deadline (a person's mark, or its last try's resume), when "
            "Airflow calls no on_kill: stopping job %s and billing it, as for a kill",
            self.job_id,
        )
        self.stop_and_bill(ask_state=False)

    def stop_and_bill(
        self,
        *,
        wait_seconds: float = KILL_WAIT_SECONDS,
        poll_seconds: float = 1.0,
        ask_state: bool = True,
        cause: str = "killed",
        why: str = "its task was killed",
        ledger: Any = None,
        spool_reaches_the_ledger: bool = False,
        bill_refused: bool = False,
    ) -> str | None:
        """Stop the job of a task a person killed, bill what it ran, and settle the task's hold (blocking IO).

        The operator would have billed the attempt when the job ended and settled the hold when the
        training ended; once the task is killed nothing would, and the job would run on, unbilled (a
        clear's new try follows the job by name, but a task marked failed or succeeded has none). The job
        is asked to stop (SIGTERM first: it checkpoints) and billed as it ended; where it has not ended
        within ``wait_seconds``, to the end of its grace period, the latest the backend lets it run. A paused
        training has no job: its hold is settled only. A cleared task's hold is left to its new try.

        With ``ask_state``, Airflow's state of the task says what happened: ended (marked failed or success,
        or its run gone), cleared (it runs again), or still waiting, where no person ended it (a new try
        already follows the job): then the job runs on. Where the state cannot be read (outside Airflow),
        the task is taken as ended.

        ``cause`` and ``why`` say why the job was stopped in its entry (a task failing for good with its job
        still running, no retry left to follow it, uses this too: ``unwatched``). ``ledger``: the ledger to
        bill in, opened by the caller (``costaware jobs reconcile``'s), instead of ``ledger_conn_id``'s;
        ``spool_reaches_the_ledger``: it is the ledger this machine's drain of ``ledger_conn_id`` opens, so an
        egress it would not take waits in the spool (else it is logged for a person).

        Returns None, or why the backend refused the stop of a job then not seen to end: it may run on, so
        nothing is billed (billed to its grace period, it ran on unbilled past it) and the task's hold stays
        held; the error in the log says to stop it by hand, and ``costaware jobs reconcile`` lists it still.
        ``bill_refused``: bill it to its grace period all the same (a wait in the worker, which keeps no wait
        state for a reconcile to find the job by: unbilled, it would never be), and so on any other error
        before the bill (the backend cannot be opened, a poll fails with an error not the backend's).
        Without it, any other error before the bill is raised with the hold held too: the job may run on.
        """
        from costaware.core.errors import BillSpooledError, StopRefused
        from costaware.remote_billing import KilledTrainingBilling
        from costaware.training.attempts import AttemptState

        verdict = self._task_verdict() if ask_state else "ended"
        if verdict == "waiting":
            self.log.info("the task still waits (no person ended it): job %s runs on", self.job_id)
            return None
        refused: str | None = None
        state = AttemptState.from_json(self.state)
        billing = KilledTrainingBilling(
            ledger_conn_id=self.ledger_conn_id,
            aws_conn_id=self.aws_conn_id,
            log=self.log,
            ledger=ledger,
            spool_reaches_the_ledger=spool_reaches_the_ledger,
        )
        try:
            if self.job_id is not None and state.current is not None:
                try:
                    job, ended, own_end = self._stop_job(
                        state,
                        wait_seconds=wait_seconds,
                        poll_seconds=poll_seconds,
                        why=why,
                        bill_refused=bill_refused,
                    )
                except Exception as e:
                    if not bill_refused:
                        raise
                    # Nothing bills a worker's job later (no wait state names it): billed now, as a stop
                    # refused, to the end of its grace period after a last try to stop it.
                    job, ended, own_end = self._stopped_after_error(state, e, why=why), False, False
                if job is not None:
                    # A job that had ended on its own before the kill keeps its own cause, as does a success.
                    own_cause = None if own_end or job["state"] == "succeeded" else cause
                    # Billed now, whatever the ledger says of another type's price: nothing bills it later.
                    state = billing._bill_attempt(
                        state,
                        job,
                        own_cause,
                        keyed_by_name=not ended,
                        price_unread_raises=False,
                        spool_unwritten=bill_refused,  # nothing bills a worker's job later
                    )
                    if billing.unsure_bill is None:
                        self.log.warning(
                            "%s: job %s stopped and billed, %.0f s for $%s",
                            why,
                            self.job_id,
                            float(job["billable_seconds"]),
                            state.attempts[-1].usd,
                        )
                    else:  # not in the ledger: a row of the job may bill this run (the ERROR above)
                        self._say_bill_kept(why, billing.unsure_bill, state.attempts[-1].usd, job)
        except StopRefused as e:
            verdict, refused = "refused", str(e)
            self.log.error(
                "job %s not billed: the stop was refused (%s): stop job %s on %s by hand; the task's budget "
                "hold stays held, and `costaware jobs reconcile` bills the job once it has ended",
                self.job_id,
                refused,
                self.job_id,
                self.backend,
            )
        except KeyboardInterrupt:
            # Given up (a hung backend or ledger, see _interrupts_wait_for_the_bill): the job may train on
            # unbilled, so its money stays held; settled here, it was freed while the job spent it.
            verdict = "given up"
            raise
        except BillSpooledError as e:
            # Billed, the ledger down: written when it is back. The hold is not settled now (the ledger
            # cannot take that either), and the entry, written later, leaves it open for a new try.
            verdict = "failed"
            self.log.error(
                "job %s stopped; its bill could not be written to the ledger (%s): kept in %s and written "
                "when the ledger is back (with the next cost entry that succeeds, or by `costaware spool "
                "drain`); the task's budget hold stays held until its run ends or its TTL passes",
                self.job_id,
                e,
                e.path,
            )
            raise
        except Exception as e:
            # Raised before the bill (open_backend, a poll failing with an error not the backend's, the
            # ledger's write): the job may train on, or ended unbilled. Settled, its money was freed while
            # the job spent it; held, the TTL or `costaware jobs reconcile` frees it once the job is billed.
            verdict = "failed"
            # A wait in the worker keeps no wait state for the reconcile to find the job by.
            follows = (
                "until its run ends or its TTL passes, and nothing bills the job: record what it ran by hand "
                "(a bill the spool could not take either is logged whole above: save it in the spool)"
                if bill_refused
                else "and `costaware jobs reconcile` bills the job once it has ended"
            )
            self.log.error(
                "job %s not billed (%s: %s): check job %s on %s and stop it by hand if it still runs; "
                "the task's budget hold stays held %s",
                self.job_id,
                type(e).__name__,
                e,
                self.job_id,
                self.backend,
                follows,
            )
            raise
        finally:
            if verdict == "given up":
                self.log.warning(
                    "job %s not billed: the task's budget hold stays held until it expires or a new try "
                    "takes it over",
                    self.job_id,
                )
            elif verdict in ("refused", "failed"):
                pass  # the job may run on: its money stays held (said above)
            elif verdict == "cleared":
                # Its new try took over the task's hold (it may have started already) and settles it with
                # all the attempts, this one included, when it ends.
                self.log.info("the task was cleared: its new try keeps the task's budget hold")
            else:
                billing._settle(state)
        return refused

    def _say_bill_kept(self, why: str, kept: UnsureBill, usd: str, job: Mapping[str, Any]) -> None:
        """Say what became of the kill's bill of ``usd``, kept for a person or only logged, as ``kept`` says.

        A file kept by an earlier try stays as it is: where its dollars differ, it is not this bill that
        waits there (this one is in the ERROR above), and the WARNING names the file's.
        """
        from costaware.ledger_spool import Kept

        if kept.kept in (Kept.NOW, Kept.EARLIER):
            where = "kept in spool/unsure"
        elif kept.kept is Kept.EARLIER_AT_ANOTHER_FIGURE:
            where = (
                f"not kept: spool/unsure keeps this job's bill of ${kept.file_usd} from an earlier try, "
                "logged"
            )
        else:
            where = "not written nor kept: logged"
        self.log.warning(
            "%s: job %s stopped; its bill of $%s (%.0f s) %s for a person (see the ERROR above)",
            why,
            self.job_id,
            usd,
            float(job["billable_seconds"]),
            where,
        )

    def _task_verdict(self, *, unreadable: str = "ended") -> str:
        """``ended``, ``cleared`` or ``waiting``: what Airflow says of the killed task now (see above).

        ``unreadable``: the verdict where the state cannot be read (no task instance: outside Airflow);
        ``unknown`` leaves it to the caller to say what follows.
        """
        ti = getattr(self, "task_instance", None)
        if ti is None:
            return unreadable
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            states = RuntimeTaskInstance.get_task_states(
                dag_id=ti.dag_id, map_index=ti.map_index, task_ids=[ti.task_id], run_ids=[ti.run_id]
            )
        except Exception as e:  # for a kill, the hold is settled: the safe side for a task that ended
            taken_as = "" if unreadable == "unknown" else f": taken as {unreadable}"
            self.log.warning("cannot read the killed task's state (%s)%s", e, taken_as)
            return unreadable
        run = states.get(ti.run_id) or {}
        key = ti.task_id if ti.map_index is None or ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
        if key not in run:
            return "ended"  # its run was deleted
        state = run[key]
        value = str(getattr(state, "value", state))
        if value in ENDED_STATES:
            return "ended"
        return "waiting" if value in WAITING_STATES else "cleared"
