"""Stops at the cap of a job a remote training's wait sees listed (running, or waiting to start).

A job an earlier try submitted is stopped at what is left of ``max_usd`` now, one on a dearer type than
planned at what ``max_usd`` buys there, and one stopped already yet still seen running past its grace
period is stopped again. The stop itself, its retries and its keeping are :mod:`remote_cap_stop`'s.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from costaware.triggers.remote_cap_stop import CapStopping

#: How far a backend's clock may run behind this wait's: a stop its backend says was asked this much
#: before the stop at the cap is still taken as that stop (SageMaker's times are its own).
STOP_CLOCK_SKEW_SECONDS = 30.0


# A mixin of RemoteTrainingJobTrigger (through CapStoppedGoneBilling), not a trigger of its own.
class ListedCapStopping(CapStopping):
    """The stops at the cap of a listed job, of ``RemoteTrainingJobTrigger``."""

    def _stop_again_past_grace(self, status: Any) -> None:
        """Stop again a job this wait stopped at the cap that is still seen running past its grace period.

        The stop may not have reached it (a same-named job resubmitted by a new try, a stop its backend
        lost): never stopped again, it ran on past ``max_usd``. Sent once per grace period, and no more
        than every second poll where polls come further apart (a grace period shorter than
        ``poll_interval`` re-sent it at each poll), logged; the job is billed on from what the polls see,
        and its end is still recorded as stopped by ``max_usd``. Not sent where its backend says the job
        was asked to stop since the stop at the cap (SageMaker's ``Stopping``, listed running while it
        uploads its checkpoint, often past the grace period): the stop reached it. A stop recorded with no
        SIGTERM sent (``_cap_stop_unsent``: a pod gone at its 404, listed since) is sent at once: no grace
        period ran from it.
        """
        from costaware.adapters.compute.base import JobState, open_backend
        from costaware.training.attempt_effects import stop_seconds
        from costaware.training.attempts import AttemptState
        from costaware.triggers.remote_job_status import stop_requested_at

        job_id = str(status.job_id or self.job_id)
        last_stop, now = self._cap_stop_again_at or self._cap_stopped_at, self._polled_at
        if self._stopped_for_cap != job_id or status.state != JobState.RUNNING:
            return
        if last_stop is None or now is None or not self.state.get("backend") or not self.state.get("current"):
            return  # no plan to size the grace period by
        asked_at = stop_requested_at(status)
        first_stop = self._cap_stopped_at or last_stop
        if asked_at is not None and asked_at >= first_stop - timedelta(seconds=STOP_CLOCK_SKEW_SECONDS):
            return  # its backend holds a stop asked since ours: it is stopping
        grace = stop_seconds(AttemptState.from_json(self.state))
        # 1.5 polls: the second poll after the stop, also where polls come late by their own time.
        again_after = max(grace, 1.5 * self.poll_interval)
        unsent = self._cap_stop_unsent
        if (now - last_stop).total_seconds() <= again_after and not unsent:
            return
        if self._polled_after_cancel("stopped again"):
            return
        self._cap_stop_again_at, self._cap_stop_unsent = now, False
        self._keep_cap_stop_again(now)
        if unsent:
            self.log.warning(
                "job %s, gone when its stop at what was left of max_usd was recorded at %s (nothing was sent "
                "to it), is seen running again: stopping it now",
                job_id,
                (self._cap_stopped_at or last_stop).isoformat(),
            )
        else:
            self.log.warning(
                "job %s, stopped at what was left of max_usd at %s, is still seen running %.0f s after it, "
                "past its grace period (%.0f s): stopping it again (billed on meanwhile)",
                job_id,
                (self._cap_stopped_at or last_stop).isoformat(),
                (now - (self._cap_stopped_at or last_stop)).total_seconds(),
                grace,
            )
        try:
            open_backend(self.backend, self.backend_options).stop(job_id)
        except Exception as e:
            self.log.warning("stopping job %s again failed (%s): asked again after a grace period", job_id, e)

    def _stop_followed_job_at_cap(self, status: Any) -> None:
        """Stop a job an earlier try submitted once it has run what is left of ``max_usd`` now.

        Its backend holds the time limit that try gave it, sized at the cap of then: the budgets may have
        lowered the cap since (a retry holds only what they have room for). The operator worked out what is
        left when it followed the job (``stop_after_seconds``, ``stop_by_poll``); the job is stopped there
        (SIGTERM: it checkpoints), and it ends recorded as stopped by ``max_usd``. Where what is left buys
        less than ``MIN_CAPPED_SECONDS`` (the budgets had no room for the retry), it is stopped at once in
        any state: one still waiting for capacity would otherwise boot and run into its grace period first.
        """
        from costaware.adapters.compute.base import JobState, billed_instances
        from costaware.training.attempt_effects import MIN_CAPPED_SECONDS

        current = self.state.get("current") or {}
        limit = current.get("stop_after_seconds")
        job_id = str(status.job_id or self.job_id)
        if not current.get("stop_by_poll") or limit is None or self._stopped_for_cap == job_id:
            return
        no_room = float(limit) < MIN_CAPPED_SECONDS
        ran = float(status.billable_seconds) / billed_instances(self.backend_options)
        if not no_room:
            if status.state != JobState.RUNNING:
                return  # waiting to start: it runs (and is billed) nothing yet
            if ran < float(limit):
                self._cap_stop_due_after(float(limit) - ran)
                return
        # A followed job, or a new run its retry started where the followed one went before the submit.
        whose = ", which an earlier try submitted," if current.get("followed") else ""
        if no_room and status.state != JobState.RUNNING:
            self.log.warning(
                "job %s%s is %s and what is left of max_usd buys no run: stopping it before it starts",
                job_id,
                whose,
                status.state.value,
            )
        else:
            self.log.warning(
                "job %s%s has run %.0f s, what is left of max_usd now buys: "
                "stopping it (it checkpoints in its grace period)",
                job_id,
                whose,
                ran,
            )
        # Stopped short of its limit (nothing left to run on): its end is recorded as stopped by max_usd,
        # not as a preemption that a new attempt would follow.
        self._send_cap_stop(
            job_id,
            stop_after_seconds=int(ran) if ran < float(limit) else None,
        )

    def _stop_at_last_read_limit(self, job_id: str, status: Any, plan: Any) -> bool:
        """Weigh ``status`` against the dearer type's limit last read for ``job_id``: True where stopped now.

        A price that cannot be read now keeps that limit's due point (the time it may run on there).
        """
        other = self._other_type_limit
        if other is None or other[0] != job_id or other[1] is None:
            return False
        return self._stop_at_type_limit(
            job_id, status, other[1], plan, price=" at its price last read (unreadable now)"
        )

    def _stop_at_type_limit(self, job_id: str, status: Any, limit: int, plan: Any, *, price: str) -> bool:
        """Weigh ``status`` against ``limit``, what ``max_usd`` buys on its type: True where stopped now.

        Short of it, the stop falls due after what is left. ``price`` says how that type's price was read,
        for the log.
        """
        from costaware.training.attempt_effects import instances

        ran = float(status.billable_seconds) / instances(plan)
        if ran < limit:
            self._cap_stop_due_after(limit - ran)
            return False
        self.log.warning(
            "job %s on %s has run %.0f s, what max_usd buys there%s: stopping it (it checkpoints in its "
            "grace period)",
            job_id,
            status.instance_type,
            ran,
            price,
        )
        # Its end is then recorded as stopped by max_usd (the stop it ran into), not as a preemption.
        self._send_cap_stop(job_id, stop_after_seconds=limit)
        return True

    def _stop_within_cap_on_other_type(self, status: Any) -> None:
        """Stop a job that runs on a dearer type than planned once it has run what ``max_usd`` buys there.

        Batch (a compute environment's choice) and Kubernetes (a node pool's) may run a job on another type
        than the plan's. Its stop was sized at the planned type's price, and it is billed at the type it ran
        on: on one 4 times dearer, it billed 4 times what was left of ``max_usd``. The time it may run is
        worked out again at that type's price (its grace period before the cap, as at the submit), and the
        job is stopped there (SIGTERM: it checkpoints); it ends recorded as stopped by ``max_usd``.
        """
        from costaware.core.errors import LEDGER_UNREADABLE
        from costaware.core.money import format_usd_exact
        from costaware.training.attempt_effects import money_left
        from costaware.training.attempts import AttemptState

        job_id = str(status.job_id or self.job_id)
        if self._stopped_for_cap == job_id or not self._runs_on_other_type(status):
            return
        state = AttemptState.from_json(self.state)  # once per poll, for the limit, its log and its stop
        # Worked out at each poll: a Batch job's billed seconds hold its copies', each priced at its type, so
        # the ratio moves as the job runs on (kept from the first poll, a copy on the planned type let the
        # job run 1.6 times what max_usd buys).
        try:
            weighed = self._limit_on_other_type(status, state)
        except LEDGER_UNREADABLE as e:
            # Read as the plan's price, the job would never be stopped, and its bill (the ledger back by
            # then) would come at the dearer price, past max_usd: asked again at the next poll.
            # The limit last read stays due meanwhile: rebuilt from this poll without it, a job not listed
            # at the next one ran on at the dearer price up to the planned type's limit (1,200 s, not 610 s).
            if self._stop_at_last_read_limit(job_id, status, state.plan):
                return
            self._retry_cap_stop(stop_due=False)
            self.log.warning(
                "price of %s unknown for now (%s): asked again in %g s", job_id, e, self.next_poll_in()
            )
            return
        if weighed is None:
            return
        limit, rate = weighed
        plan = state.plan
        said = self._other_type_limit
        self._other_type_limit = (job_id, limit)
        moved = said is None or said[0] != job_id or abs((said[1] or 0) - (limit or 0)) >= 60
        if limit is not None and moved:  # said once, and again where the copies moved it a minute
            self.log.warning(
                "job %s runs on %s, not the planned %s: %s is left of max_usd at %s/hour there, so it is "
                "stopped after %d s of running",
                job_id,
                status.instance_type,
                plan.instance_type,
                format_usd_exact(money_left(state) or Decimal(0)),
                format_usd_exact(rate),
                self._stopped_after_seconds(limit),
            )
        if limit is None:
            return
        if not self._stop_at_type_limit(job_id, status, limit, plan, price=""):
            self._cap_stop_retries = self._price_read_retries = 0  # its price is known again
