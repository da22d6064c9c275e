"""The attempts of ``RemoteTrainingOperator``: the side effects of each step of the attempt state machine.

:func:`costaware.training.attempts.next_step` decides, purely, what follows a trigger event; this mixin
performs what the step names, in the Airflow worker: stop or submit a job on the compute backend, record
an ended attempt in the cost ledger (at the mean spot price over its run, given ``prices``), settle the
task's reservation, store the model version and clear the checkpoints, or fail the task. The effects that
need no Airflow live in ``costaware.training.attempt_effects``; this module logs them and maps failures to
task outcomes.

The mixin builds on sibling modules: where an attempt runs (``remote_attempt_placement``), a retry's
following of the job an earlier try left (``remote_attempt_following``) and the budget holds its attempts
spend from (``remote_attempt_holds``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from costaware.core.errors import ResultMissingError
from costaware.core.ledger import utcnow
from costaware.operators.remote_attempt_following import (
    EARLIER_JOB_POLL_WAITS_SECONDS as EARLIER_JOB_POLL_WAITS_SECONDS,
)
from costaware.operators.remote_attempt_following import _found_unread as _found_unread
from costaware.operators.remote_attempt_holds import RemoteAttemptHolds

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.adapters.compute.base import ComputeBackend
    from costaware.training.attempts import AttemptState, Event, Fail
    from costaware.training.plan import RemotePlan

# EARLIER_JOB_POLL_WAITS_SECONDS and _found_unread are re-exported: tests import them from here, where they
# were before the following of an earlier try's job moved to remote_attempt_following.


class RemoteAttemptSteps(RemoteAttemptHolds):
    """A mixin of ``RemoteTrainingOperator``: the backend, the ledger, and the side effects of each step."""

    # The state of a submit under way whose job does not exist yet (None: none): a try that fails for good
    # there (a backend refusing its options) settles the hold it made, which no job will bill against.
    _unsubmitted: AttemptState | None = None
    #: The last look-up of a failed submit's job could not tell whether it exists (``_running_job_state``).
    _job_unknown: bool = False

    def _submit(self, state: AttemptState, market: str, market_reason: str = "") -> AttemptState:
        """Submit the next attempt on ``market`` (spot: where the placement says, which may be on-demand).

        ``market_reason``: why on-demand, where a rule chose it (kept on the attempt, in its ledger note).
        """
        from costaware.adapters.compute.base import billed_instances
        from costaware.core.money import format_usd_exact
        from costaware.core.zone_choice import region_of
        from costaware.training.attempt_effects import (
            MIN_CAPPED_SECONDS,
            cap_rate,
            cap_spent_message,
            capped_seconds,
            job_request,
            money_left,
        )
        from costaware.training.remote import job_name

        if self._killed:  # a kill in the worker (on_kill) came while this step ran
            self._settle(state)
            raise AirflowException("the task was killed: no new attempt starts")
        self._unsubmitted = state
        plan = state.plan
        backend = self._backend(plan)
        # A retry follows the job an earlier try submitted under this attempt's name, where it runs.
        earlier = self._earlier_job(
            backend,
            job_name(plan.base_name, state.next_attempt),
            instances=billed_instances(plan.backend_options),
        )
        followed, created_at, followed_token = earlier if earlier is not None else (None, None, "")
        found_at = utcnow()
        following = followed is not None
        zone, moved = "", None
        if followed is not None:
            state, market, zone, market_reason, moved = self._follow(
                state, followed, market, market_reason, run_token=followed_token
            )
            if not followed.market:
                # Unread, and its look-up by name said no market either: billed (gone before the wait reads
                # it) on the one it is followed on, as its attempt is; with none, its bill failed on ''.
                followed = replace(followed, market=market)
        elif market == "spot":
            state, market, zone, market_reason = self._place(state)
        # A ledger that cannot be read raises (the submit is made again), as for a dearer type below.
        rate = cap_rate(state, market, self._on_demand_in(plan, zone, raise_unavailable=True))
        # The backend that put the last attempt on a dearer type than planned likely does so again: sized
        # at the planned price, the attempt got a limit the trigger cut short, or started with too little.
        sized_on, scale = self._dearer_type_ran_on(state) if plan.max_usd is not None else (None, Decimal(1))
        rate *= scale
        allowed = capped_seconds(state, rate)
        # A job an earlier try started (the cap or a price has changed since) is followed and billed rather
        # than left running unrecorded, whatever is left: the wait stops it there (below), at once if nothing.
        if allowed is not None and allowed < MIN_CAPPED_SECONDS and followed is None:
            self._settle(state)
            # SageMaker syncs its checkpoints itself, without the marker: there, none read says nothing.
            newest = self._newest_step(state) if state.attempts and plan.backend != "sagemaker" else None
            raise AirflowFailException(
                cap_spent_message(state, market, rate, newest_step=newest, instance_type=sized_on)
            )
        every = self._retune_interval(state) if market == "spot" and not following else None
        request = job_request(
            state, market, utcnow(), zone=zone, checkpoint_every_seconds=every, stop_after_seconds=allowed
        )
        left = money_left(state)
        # A followed job's backend keeps the limit an earlier try gave it, sized at the cap of then: the
        # budgets may have lowered the cap since. The wait stops it at what is left now, as the dearer
        # type's stop does (a job that has ended is only billed).
        stop_by_poll = following and allowed is not None and not (followed and followed.state.done)
        # The stop the cap sets, where it is the limit the job got (an earlier deadline limit is not it):
        # an attempt that ran into it is recorded as stopped by max_usd, not preempted.
        binding = allowed is not None and request.max_runtime_seconds == allowed
        restored = self._committed_step(state) if market == "spot" else None
        if moved is None:
            moved = self._moved_bytes(state)
        submitted_at = utcnow()
        self._submitting = (state, request.job_name, market, zone, submitted_at.isoformat(), moved)
        job_id = backend.submit(request)
        # The run the name holds after the submit: the followed job's, or a new one where it went between
        # its look-up and the submit (marked with the look-up's token, as before ea48333a, the new run's bills
        # read as the old run's and it went unbilled). The look-up's token only where this read fails.
        run_token = self._run_token(backend, request.job_name) or followed_token
        if followed_token and run_token != followed_token:
            self.log.warning(
                "job %s is another run than the one this try followed (run %s, now run %s): the job it "
                "followed went before the submit, which started a new one; its bills carry the new run's "
                "mark",
                request.job_name,
                followed_token,
                run_token,
            )
            # A new run, not the followed one: its kill bill added the old run's seconds (billed already)
            # and its time limit ran from the old run's creation. Still stopped by the poll at what the cap
            # allows (from this submit: with no followed record; the cap may allow under a minute, which a
            # fresh submit would have refused), and billed for the data and checkpoint it reads across.
            followed, following = None, False
            moved = self._moved_bytes(state)
        # Said once the submit tells whether the job is the followed one: said before it, a new run read as
        # "started by an earlier try ... under the time limit of that try", which this try started.
        if stop_by_poll and following and left is not None:
            self.log.warning(
                "attempt %d was started by an earlier try as %s under the time limit of that try: %s is left "
                "of max_usd now, at %s/hour%s, so it is stopped after %d s of running",
                request.attempt,
                followed.job_id if followed is not None else request.job_name,
                format_usd_exact(left),
                format_usd_exact(rate),
                f" on {sized_on}" if sized_on else "",
                allowed,
            )
        elif allowed is not None and left is not None and not following:
            self.log.info(
                "attempt %d is stopped after %d s at the latest: %s is left of max_usd, at %s/hour%s",
                request.attempt,
                allowed,
                format_usd_exact(left),
                format_usd_exact(rate),
                f" on {sized_on}, the type attempt {state.attempts[-1].attempt} ran on" if sized_on else "",
            )
        submitted = state.submitted(
            job_id=job_id,
            market=market,
            zone=zone,
            restored_step=restored,
            market_reason=market_reason if market == "on_demand" else "",
            stop_after_seconds=allowed if binding or stop_by_poll else None,
            stop_by_poll=stop_by_poll,
            submitted_at=submitted_at.isoformat(),
            moved_bytes=moved,
            # What it ran before this try: a job the wait never sees is billed from it, not from now.
            followed=self._followed_record(
                followed, found_at, created_at=created_at, plan=state.plan, run_token=run_token
            ),
            run_token=run_token,
        )
        self._live, self._submitting = submitted, None  # one step: never neither while the job runs
        self._unsubmitted = None
        self.log.info(
            "attempt %d: %s %s on %s, %s %s%s%s",
            request.attempt,
            "following job" if following else "job",
            # Batch answers with its own id: the name is what the docs and the console's search show.
            job_id if job_id == request.job_name else f"{request.job_name} (id {job_id})",
            plan.backend,
            market,
            plan.instance_type,
            f" in {zone}" if zone else "",
            ", which an earlier try submitted" if following else _log_files_note(backend, job_id),
        )
        if moved and not following and region_of(zone, plan.region) != plan.region:
            self.log.info(
                "attempt %d: once it runs in %s, it reads %d B (its data, and its checkpoint if any) from %s "
                "(billed then as egress)",
                request.attempt,
                zone,
                moved,
                plan.region,
            )
        return submitted

    def _dearer_type_ran_on(self, state: AttemptState) -> tuple[str | None, Decimal]:
        """The type the last attempt ran on and its price over the planned type's, where it is dearer (IO).

        ``(None, 1)`` where it ran on the planned type, a cheaper one (the planned price bounds it), one the
        backend did not say, or one no price source has (warned: the trigger still stops it in time).
        """
        from costaware.core.errors import LEDGER_UNREADABLE, CostawareError

        last = state.attempts[-1] if state.attempts else None
        if last is None:
            return None, Decimal(1)
        ran_on = last.instance_type.removeprefix("ml.")
        if not ran_on or ran_on == state.plan.instance_type.removeprefix("ml."):
            return None, Decimal(1)
        try:
            scale = self._type_price_ratio(state.plan, ran_on)
        except (CostawareError, ArithmeticError) as e:
            if isinstance(e, LEDGER_UNREADABLE):
                raise  # the submit is made again: sized at the planned price, it could outrun max_usd
            self.log.warning(
                "attempt %d ran on %s, not the planned %s, whose price is unknown (%s): the next attempt is "
                "sized at the planned price",
                last.attempt,
                ran_on,
                state.plan.instance_type,
                e,
            )
            return None, Decimal(1)
        return (last.instance_type, scale) if scale > 1 else (None, Decimal(1))

    def _record_attempt(self, state: AttemptState, job: Mapping[str, Any], cause: str) -> AttemptState:
        # Only a preempted spot run is judged by what it kept (the guard, the zone choice, "auto"'s re-tune).
        committed = self._committed_step(state) if cause == "preemption" and job["market"] == "spot" else None
        recorded = self._bill_attempt(state, job, cause, committed_step=committed)
        self._live = None  # its job ended
        return recorded

    def _committed_step(self, state: AttemptState) -> int | None:
        """The step of the newest checkpoint pushed to the training's checkpoint URI (IO; ``Attempt``).

        ``NO_CHECKPOINT`` when none was pushed; None when nothing judges a run by what it kept (no zones, no
        guard, no ``"auto"``) or the marker cannot be read (the run is then judged by its length).
        """
        from costaware.core.checkpoint_interval import is_auto

        plan = state.plan
        judged = plan.placement.zones or plan.placement.guard or is_auto(self.checkpoint_every_seconds)
        return self._newest_step(state, unread="the attempt is judged by its run length") if judged else None

    def _newest_step(self, state: AttemptState, *, unread: str = "not known") -> int | None:
        """The step in the checkpoint URI's ``LATEST.json``; ``NO_CHECKPOINT``: none; None: cannot tell.

        ``unread``: what follows when the marker cannot be read (said in the warning).
        """
        from costaware.adapters.checkpoint_store import recorded_step
        from costaware.training.attempts import NO_CHECKPOINT

        plan = state.plan
        if not plan.checkpoint_uri:
            return None
        try:
            step = recorded_step(plan.checkpoint_uri, **self._storage_options())
        except (OSError, ValueError) as e:
            self.log.warning(
                "cannot read the newest checkpoint at %s (%s): %s", plan.checkpoint_uri, e, unread
            )
            return None
        return NO_CHECKPOINT if step is None else step

    def _step(self, context: Context, state: AttemptState, event: Event) -> Any:
        """Decide the next step (pure) and perform it: the new state to wait on, or the result (XCom)."""
        from costaware.adapters.compute.job_contract import EXIT_PREEMPTED_BEFORE_CHECKPOINT
        from costaware.training.attempts import Fail, Finish, JobEnded, Pause, Resume, Submit, next_step
        from costaware.training.pauses import deadline_work_left, price_watch
        from costaware.training.pauses import latest_resume as resume_by

        now = utcnow()
        latest_resume = None
        if isinstance(event, JobEnded) and state.current and state.current.pausing:
            # Work done only where its runs are known exactly: a bill counting a Batch submit's copies moved
            # the latest resume past the deadline.
            latest_resume = resume_by(state, deadline_work_left(state, ended=event.job))
        step = next_step(state, event, now, max_attempts=self.max_attempts, latest_resume=latest_resume)
        current = state.current
        if step.stop_first and isinstance(event, JobEnded):
            self.log.warning(
                "spot capacity not found by the latest safe start %s: on-demand", state.latest_start
            )
            self._backend(state.plan).stop(str(event.job["job_id"]))
        if step.record_cause is not None and isinstance(event, JobEnded):
            ended, cause = event.job, step.record_cause
            missing = self._missing_result(state, ended) if isinstance(step, Finish) else None
            if missing is not None:
                # The task fails for it: billed as a success, the ledger said the money bought a model.
                ended = {
                    **ended,
                    "state": "failed",
                    "reason": f"{ended.get('reason') or 'succeeded'}; {missing}",
                }
                cause = "code_error"
            state = self._record_attempt(state, ended, cause)
        if isinstance(step, Pause):
            assert current is not None  # a price rise is seen on a running job
            self.log.warning(
                "pausing attempt %s (job %s): %s", current.attempt, step.job["job_id"], step.reason
            )
            self._backend(state.plan).stop(str(step.job["job_id"]))
            return state.pausing(reason=step.reason, job=step.job, seen_at=step.seen_at)
        if isinstance(step, Resume):
            self.log.info("resuming from the newest checkpoint on %s: %s", step.market, step.reason)
            return self._submit(state.resumed_at(step.usd_per_hour), step.market, step.market_reason)
        if isinstance(step, Submit):
            if step.cause_of_previous == "paused":
                self.log.warning("paused with no slack left for a later spot start: resuming on on-demand")
            elif step.cause_of_previous != "capacity_wait" and isinstance(event, JobEnded):
                # Where and on which market the next attempt runs is the placement's to say (the
                # restart-thrash guard may send it to on-demand): the next lines log it.
                self.log.warning(
                    "attempt %s %s (%s): %s",
                    current.attempt if current else "?",
                    # A store the launcher could not reach is retried like a preemption, but is not one;
                    # nor is a stop at what was left of max_usd.
                    {
                        "store_error": "could not reach a store",
                        "max_usd": "was stopped at what was left of max_usd",
                        "killed": "was stopped by the kill of an earlier try",
                        "unwatched": "was stopped by an earlier try that failed for good",
                    }.get(str(step.cause_of_previous), "interrupted"),
                    event.job.get("reason"),
                    "a next attempt resumes from the newest checkpoint if the cap leaves enough for one"
                    if step.cause_of_previous == "max_usd"
                    # The launcher's exit 77: where its own reason is shown (the local backend) it says what
                    # the next attempt starts from; a platform's reason does not.
                    else "this attempt committed no checkpoint"
                    if event.job.get("exit_code") == EXIT_PREEMPTED_BEFORE_CHECKPOINT
                    and str(event.job.get("reason", "")).startswith("costaware-run:")
                    else "the next attempt starts from the newest checkpoint there is, or over"
                    if event.job.get("exit_code") == EXIT_PREEMPTED_BEFORE_CHECKPOINT
                    else "the next attempt resumes from the newest checkpoint",
                )
            return self._submit(state, step.market, step.market_reason)
        if isinstance(step, Finish):
            return self._finish(context, state)
        if isinstance(step, Fail):
            self._fail(state, step)
        watch = price_watch(state, "resume", poll_interval=self.poll_interval)  # WaitForPrice
        self.log.info(
            "paused; %s h of work left, waiting for the spot price to come back until %s at the latest",
            watch["remaining_hours"],
            watch["latest_resume"],
        )
        return state

    def _fail(self, state: AttemptState, step: Fail) -> NoReturn:
        message = step.message
        if step.job_id is not None:
            try:
                self._settle(state)
            except Exception as e:  # the failure must stand: a retry would pay for the failed code again
                self.log.warning("could not settle the task's hold now (%s): it lapses at its time limit", e)
            backend = self._backend(state.plan)
            try:
                logs = backend.logs(step.job_id, tail=5)
                message = f"{message}; last log lines: {logs[-800:]}{_log_files_note(backend, step.job_id)}"
            except Exception as e:  # the failure is what must be said (a throttled describe raised instead)
                message = f"{message}; its log could not be read ({type(e).__name__}: {e})"
        if step.retry:
            raise AirflowException(message)
        raise AirflowFailException(message)

    def _missing_result(self, state: AttemptState, job: Mapping[str, Any]) -> str | None:
        """What a job that succeeded failed to leave (its result), or None where it is there (IO).

        Only a result that is not there counts; one that cannot be read now (or is malformed) is left to
        :meth:`_finish`, which reads it again and says why.
        """
        from costaware.operators.remote_command import command_result_missing
        from costaware.training.entrypoint import read_result

        current = state.current
        job_id = str(job.get("job_id") or "")
        opts = self._storage_options()
        try:
            if not state.command:
                read_result(state.plan.result_uri, job_id=job_id, **opts)
                return None
            if current is None:
                return None
            return command_result_missing(state.to_json(), opts, attempt=current.attempt, job_id=job_id)
        except ResultMissingError:
            return f"succeeded but left no result at {state.plan.result_uri}"
        except Exception:  # read again by _finish, which fails or retries the task with the reason
            return None

    def _finish(self, context: Context, state: AttemptState) -> dict[str, Any]:
        from costaware.operators.run_record import record_retrain_outcome
        from costaware.training.attempt_effects import summary_figures
        from costaware.training.entrypoint import read_result

        self._settle(state)
        ti = context.get("ti")
        if ti is not None and hasattr(ti, "dag_id"):
            from costaware.glue import annotate_task

            annotate_task(
                ti, cause="orchestration", note="worker waited for remote training; billed per attempt"
            )
        opts = self._storage_options()
        try:
            if state.command:
                summary = self._finish_command(context, state, opts)
            else:
                job_id = state.attempts[-1].job_id if state.attempts else ""
                result = read_result(state.plan.result_uri, job_id=job_id, **opts)
        except ResultMissingError as e:
            raise ResultMissingError(f"{e}{ran_nothing(state)}") from e
        if not state.command:
            made, usd = summary_figures(state)
            self.log.info(
                "stored %s model version %s after %d attempt(s), %s USD billed",
                result.get("mode"),
                result.get("version"),
                made,
                usd,
            )
            record_retrain_outcome(
                context=context,
                identity=state.plan.identity,
                result=result,
                ledger_conn_id=self.ledger_conn_id,
                task_log=self.log,
            )
            attempts = [a.to_json() for a in state.attempts]
            summary = {**result, "attempts": attempts, "usd": str(usd), "backend": state.plan.backend}
        self._clear_checkpoints(state.plan, opts)
        return summary

    def _clear_checkpoints(self, plan: RemotePlan, opts: Mapping[str, Any]) -> None:
        """Delete this training's checkpoints once its model version is stored.

        They cost storage and no other run resumes them. A failure to delete only warns: the model is stored.
        """
        from costaware.training.attempt_effects import clear_checkpoints

        try:
            cleared = clear_checkpoints(plan, opts)
        except OSError as e:
            self.log.warning(
                "could not delete the checkpoints at %s (%s): delete them by hand", plan.checkpoint_uri, e
            )
            return
        if cleared:
            self.log.info("deleted the checkpoints at %s: the model version is stored", plan.checkpoint_uri)

    def _finish_command(
        self, context: Context, state: AttemptState, opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Store the command's outputs as a ``files`` version, record its metrics, return them (XCom)."""
        from costaware.operators.remote_command import format_metrics, register_outputs
        from costaware.operators.run_record import command_outcome, write_outcome
        from costaware.training.attempt_effects import summary_figures

        made, usd = summary_figures(state)
        stored = register_outputs(state.to_json(), opts, str(usd))
        self.log.info(
            "stored model version %s (%d files, %d bytes) after %d attempt(s), %s USD billed; metrics: %s",
            stored["version"],
            stored["files"],
            stored["bytes"],
            made,
            usd,
            format_metrics(stored["metrics"]),
        )
        outcome = command_outcome(
            context=context,
            identity=state.plan.identity,
            version=stored["version"],
            metrics=stored["metrics"],
            command=list(state.command or ()),
            image=state.plan.image,
        )
        write_outcome(outcome, self.ledger_conn_id)
        return {
            "version": stored["version"],
            "metrics": stored["metrics"],
            "model_format": "files",
            "files": stored["files"],
            "bytes": stored["bytes"],
            "attempts": [a.to_json() for a in state.attempts],
            "usd": str(usd),
            "backend": state.plan.backend,
        }

    def _trigger(self, state: AttemptState) -> Any:
        """What to wait on: the current job (watching its spot price when asked), or the price of a pause."""
        from costaware.training.pauses import price_watch
        from costaware.triggers.remote_training import RemoteTrainingJobTrigger

        current = state.current
        if current is None:  # paused: wait for a good price to resume
            watch: dict[str, Any] | None = price_watch(state, "resume", poll_interval=self.poll_interval)
        elif state.plan.watch and current.market == "spot" and not current.pausing:
            watch = price_watch(state, "pause", poll_interval=self.poll_interval)
        else:
            watch = None
        latest = state.latest_start
        return RemoteTrainingJobTrigger(
            backend=state.plan.backend,
            backend_options=dict(state.plan.backend_options),
            job_id=current.job_id if current else None,
            state=state.to_json(),
            fallback_at=latest.isoformat() if latest and current and current.market == "spot" else None,
            poll_interval=self.poll_interval,
            price_watch=watch,
            ledger_conn_id=self.ledger_conn_id,
            aws_conn_id=self.aws_conn_id,
        )


def _log_files_note(backend: ComputeBackend, job_id: str) -> str:
    """Where a job's whole output is, for backends that keep it in files here (local); else ""."""
    log_files = getattr(backend, "log_files", None)
    if log_files is None:
        return ""
    out, err = log_files(job_id)
    return f" (the job's whole output: {out}, {err})"


def ran_nothing(state: AttemptState) -> str:
    """Why a job that succeeded after 0 s billed left no result; "" for a job that ran.

    Such a job ran nothing (moto's SageMaker server completes every job at once, without a container):
    the message said only to check the store and the endpoint, which were right.
    """
    last = state.attempts[-1] if state.attempts else None
    if last is None or last.billable_seconds > 0:
        return ""
    return (
        f". The {state.plan.backend} backend reported job {last.job_id!r} succeeded after 0 s billed: it "
        "ran nothing there (a stand-in such as moto's server completes jobs without running a container), "
        "so the store is not the cause; run it on the real service, or on the local backend"
    )
