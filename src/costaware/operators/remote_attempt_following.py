"""A retry of ``RemoteTrainingOperator`` following the job an earlier try (or a failed submit) left running.

The job is found by its attempt's name; where no poll can read it, it is followed as its backend's record
says, billed the most it can have run (:func:`_found_unread`).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from costaware.core.ledger import utcnow
from costaware.operators.remote_attempt_placement import RemoteAttemptPlacement

if TYPE_CHECKING:
    from costaware.adapters.compute.base import ComputeBackend, FoundJob, JobStatus
    from costaware.training.attempts import AttemptState

#: The waits between the polls of an earlier try's job found by its name, where one fails (throttling, a
#: listing that lags): what it ran under that try is in its status only. Unread, the job was followed as
#: waiting with 0 s run, and a wait that never saw it billed it from the re-attach: the earlier run unbilled.
EARLIER_JOB_POLL_WAITS_SECONDS = (2.0, 5.0, 10.0)


class RemoteAttemptFollowing(RemoteAttemptPlacement):
    """A mixin of ``RemoteTrainingOperator``: follow the job an earlier try or a failed submit left."""

    def _running_job_state(self) -> AttemptState | None:
        """The newest state whose job may be running: ``_live``, or a job a failed submit left (IO).

        A submit that failed on its way out (an ``execution_timeout`` inside the backend's call) may have
        had its job taken: it is looked up by the attempt's name.
        """
        self._job_unknown = False
        if self._live is not None or self._submitting is None:
            return self._live
        state, name, market, zone, submitted_at, moved = self._submitting
        try:
            found = self._backend(state.plan).find(name)
        except Exception as e:  # best effort: the task's own failure is what it reports
            self.log.warning("cannot tell whether job %s was submitted: %s", name, e)
            self._job_unknown = True  # None here is not "no job": its hold must not be given back
            return None
        if found is None:
            return None
        return state.submitted(
            job_id=found.job_id,
            market=market,
            zone=zone,
            submitted_at=submitted_at,
            moved_bytes=moved,
            run_token=found.run_token,
        )

    def _run_token(self, backend: ComputeBackend, name: str) -> str:
        """The backend's mark of the run ``name`` holds now (just submitted, or followed), "" where none (IO).

        Only where the backend reuses a name (:data:`~costaware.training.remote.NAME_REUSING_BACKENDS`):
        the bills of this run carry it, so that a bill of an earlier run under the name, written after
        this submit, is not read as this run's. A look-up that fails leaves it unknown: the bills are then
        told apart as before, by their times.
        """
        from costaware.training.remote import NAME_REUSING_BACKENDS

        if getattr(backend, "name", "") not in NAME_REUSING_BACKENDS:
            return ""
        try:
            found = backend.find(name)
        except Exception as e:  # the job runs; only what tells its bills from another run's is unknown
            self.log.warning(
                "cannot read which run of job %s this is (%s): its bills carry no mark of it", name, e
            )
            return ""
        return found.run_token if found is not None else ""

    def _follow(
        self, state: AttemptState, job: JobStatus, market: str, market_reason: str, *, run_token: str = ""
    ) -> tuple[AttemptState, str, str, str, int]:
        """The attempt a retry follows in ``job`` (an earlier try's): its state, market, zone, reason, bytes.

        The job's own market and zone, where the backend says (placing it again could name others and bill
        it there), at that zone's spot price where the plan prices its zones. Watched from here: a failure
        before its submit returns stops it where this is the last try, its bill marked ``run_token`` (the
        run :meth:`_earlier_job` found).
        """
        from costaware.adapters.compute.base import placeable_zone

        plan = state.plan
        if job.market not in ("", market):
            market = job.market
            market_reason = "the market an earlier try chose for this job" if market == "on_demand" else ""
        reported = placeable_zone(job.availability_zone)
        zone = reported or (plan.placement.first_zone if market == "spot" else "")
        if market == "spot" and zone in plan.placement.zones:
            price = self._zone_market(state)[0].get(zone)
            state = state.resumed_at(str(price)) if price is not None else state
        moved = self._moved_bytes(state, following=True)
        reason = market_reason if market == "on_demand" else ""
        self._live = state.submitted(
            job_id=job.job_id,
            market=market,
            zone=zone,
            market_reason=reason,
            moved_bytes=moved,
            run_token=run_token,
        )
        return state, market, zone, market_reason, moved

    def _followed_record(
        self,
        followed: JobStatus | None,
        found_at: datetime,
        *,
        created_at: float | None,
        plan: Any,
        run_token: str = "",
    ) -> dict[str, Any] | None:
        """What a followed job's attempt keeps of it (``Current.followed``): its status, and its submit.

        Its submit (``created_at``: the backend's creation time, where :meth:`_earlier_job` found it) is
        where the time limit the earlier try gave it runs from: a stop that fails bills it to there. Found
        asked to stop already, with an earlier try's stop entry of it in the ledger, the cause of that entry
        (:meth:`_earlier_try_stop`), which its end is recorded by.
        """
        if followed is None:
            return None
        record: dict[str, Any] = {"job": followed.to_dict(), "seen_at": found_at.isoformat()}
        if created_at is not None:
            record["created_at"] = datetime.fromtimestamp(created_at, timezone.utc).isoformat()
        earlier_stop = self._earlier_try_stop(followed, plan, run_token=run_token)
        if earlier_stop is not None:
            from costaware.training.attempts import EARLIER_STOP_KEY

            record[EARLIER_STOP_KEY] = earlier_stop
        return record

    def _earlier_try_stop(self, followed: JobStatus, plan: Any, *, run_token: str = "") -> str | None:
        """The cause (``killed``, ``unwatched``) of an earlier try's stop of ``followed``, else None.

        A job a kill stopped ended by the kill, as the kill's ledger entry says: a new try that found it
        ended (exit 75 after saving on the notice) recorded it as a preemption, and one whose stop at the
        cap fell due as ``killed``. Only a job its backend says was asked to stop (``STOP_REQUESTED_AT``)
        is looked up; a ledger that cannot be read says nothing (None: its end's own cause).
        """
        from costaware.adapters.compute.base import STOP_REQUESTED_AT
        from costaware.triggers.remote_job_status import earlier_stop_cause

        if followed.metrics.get(STOP_REQUESTED_AT) is None:
            return None
        return earlier_stop_cause(
            self.ledger_hook,
            plan.identity,
            str(followed.job_id),
            ended_at=followed.ended_at,
            log=self.log,
            otherwise="by its own cause",
            run_token=run_token,
        )

    def _earlier_job(
        self, backend: ComputeBackend, name: str, *, instances: int = 1
    ) -> tuple[JobStatus, float | None, str] | None:
        """The job an earlier try of this task submitted as ``name``, as the backend sees it now (IO).

        With its creation time (epoch seconds, None where the backend does not say) and the backend's mark of
        its run (``FoundJob.run_token``: kept for where the read after the submit fails, which left the
        followed run's bills unmarked, and a bill of another run of the name could be read as its). None on a
        first try (nothing to follow), and where the backend has no such job. A job found that cannot be read
        now says no zone: it is taken on the market its look-up says (else the one asked for), in the plan's
        first zone, as waiting with the time since its start (or creation) billed, where its backend's listing
        says when that was: a wait that never reads it bills what it ran under the earlier try.
        """
        from costaware.core.errors import ConfigurationError

        if not self._retry:
            return None
        found = backend.find(name)
        if found is None:
            return None
        if found.status is not None:  # the look-up read it as a poll would (SageMaker): not asked again
            return found.status, found.created_at, found.run_token
        job_id = found.job_id
        import time

        for wait in (*EARLIER_JOB_POLL_WAITS_SECONDS, None):
            try:
                return backend.poll(job_id), found.created_at, found.run_token
            except Exception as e:  # best effort: the wait polls it again, and fails there if it must
                if wait is not None and not isinstance(e, ConfigurationError):  # that fails the same way
                    self.log.warning(
                        "job %s of an earlier try cannot be read now (%s): read again in %g s",
                        job_id,
                        e,
                        wait,
                    )
                    time.sleep(wait)
                    continue
                since = found.running_since
                # The look-up's market is the one it is billed on (_found_unread); only the zone is unknown.
                unknown = (
                    f"zone unknown; billed on {found.market}, as its look-up says"
                    if found.market
                    else "market and zone unknown"
                )
                if found.ended_at is not None:
                    self.log.warning(
                        "job %s of an earlier try cannot be read now (%s): %s; it %s at "
                        "%s, as the look-up by name says: billed from its %s to then",
                        job_id,
                        e,
                        unknown,
                        found.end_state.value if found.end_state is not None else "ended",
                        datetime.fromtimestamp(found.ended_at, timezone.utc).isoformat(timespec="seconds"),
                        "start" if found.started_at is not None else "creation",
                    )
                elif since is None:
                    self.log.warning(
                        "job %s of an earlier try cannot be read now (%s): %s, and what "
                        "it ran under that try is billed only once the wait reads it; if the task ends "
                        "before then, check the job's run time on the %s backend against its ledger entry",
                        job_id,
                        e,
                        unknown,
                        backend.name,
                    )
                else:
                    self.log.warning(
                        "job %s of an earlier try cannot be read now (%s): %s; if the "
                        "wait never reads it, it is billed from its %s at %s",
                        job_id,
                        e,
                        unknown,
                        "start" if found.started_at is not None else "creation",
                        datetime.fromtimestamp(since, timezone.utc).isoformat(timespec="seconds"),
                    )
                break  # the last read, or a configuration error that fails the same way each time
        return _found_unread(found, now=utcnow(), instances=instances), found.created_at, found.run_token


def _found_unread(found: FoundJob, *, now: datetime, instances: int) -> JobStatus:
    """The status a retry follows ``found`` (an earlier try's job) with where no poll could read it (pure).

    Billed from its start (else its creation) to its end where it ended (the name is the same on every try
    and clear: a job that ended days ago billed up to now was billed those days), else up to ``now``: the
    most it can have run on its ``instances``, its queue included, so an estimate, not time seen to run.
    An ended job keeps its backend's end: its ledger entry is keyed by it, so a job an earlier try billed
    is counted at that try's figure, not billed again.
    """
    from costaware.adapters.compute.base import ESTIMATED_SECONDS, JobState, JobStatus

    since = found.running_since
    ended = found.ended_at is not None and found.end_state is not None
    # Its start to its end is what it ran; to now, or from its creation, it is the most it may have run.
    estimated = not ended or found.started_at is None
    until = found.ended_at if ended and found.ended_at is not None else now.timestamp()
    ran = 0.0 if since is None else max(0.0, until - since) * instances
    return JobStatus(
        job_id=found.job_id,
        state=found.end_state if ended and found.end_state is not None else JobState.PENDING,
        billable_seconds=ran,
        reason="ended before this try found it; its polls failed" if ended else "",
        ended_at=found.ended_at if ended else None,
        metrics={ESTIMATED_SECONDS: True} if estimated else {},
        market=found.market,  # as its backend's record says: the market the earlier try submitted it on
    )
