"""``SpendCapSensor``: a spend gate that reserves budget for the next task, or waits, skips or fails."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
)

from costaware.core.ledger import Reservation, utcnow

if TYPE_CHECKING:
    from decimal import Decimal

    from costaware.core.budgets import Scope
from costaware.glue import DEFAULT_LEDGER_CONN_ID
from costaware.sensors.spend_gate_arguments import (
    APPROVAL_ARGUMENTS,
    DEFAULT_APPROVAL_TIMEOUT,
    ON_EXCEEDED,
    RecordsArgumentsGiven,
    approval_settings,
    check_same_instances,
    check_written,
)
from costaware.triggers.budget import BudgetAvailableTrigger

# Imported from here by DAGs and tests written before the arguments' checks had a module of their own.
__all__ = [
    "APPROVAL_ARGUMENTS",
    "DEFAULT_APPROVAL_TIMEOUT",
    "ON_EXCEEDED",
    "SpendCapSensor",
    "check_same_instances",
]


class SpendCapSensor(BaseSensorOperator, metaclass=RecordsArgumentsGiven):
    """Passes when the scope's budget has room for ``estimated_usd``, and reserves it for ``for_task_id``.

    See docs/budgets.md.

    The reservation is settled with the actual cost by the costaware listener when that task ends (or
    expires after ``reservation_ttl``). When the budget has too little left, ``on_exceeded`` decides:
    ``wait`` until the cap is raised or the next budget period starts (in the triggerer with
    ``deferrable=True``, so no worker slot is held; when not given, Airflow's ``[operators]
    default_deferrable`` decides, off by default: poke), ``skip`` the run's downstream tasks, ``fail`` with
    a message naming the budget, or
    ``approve``: ask ``approvers`` in the Airflow UI (human-in-the-loop, "Required actions") whether to spend
    past the cap; an approval reserves the overage and is written to the audit trail with the approver's
    name, the time and the amount; a rejection or a timeout fails or skips, as ``on_rejected`` says.

    Args:
        scope: Budget scope as ``key=value`` tags, e.g. ``project=churn``, or a dict of them,
            ``{"project": "churn"}`` (templated).
        estimated_usd: What the next task is expected to cost, in USD (templated).
        estimated_gpu_hours: Its expected GPU-hours, for budgets with a GPU-hour cap (templated).
        for_task_id: Task the money is for; default: this sensor's only downstream task (templated). It
            must be mapped as the sensor is: both unmapped, or both in one mapped task group (each sensor
            instance reserves for the task instance of its own map index); otherwise it is refused.
        on_exceeded: ``wait``, ``skip``, ``fail`` or ``approve`` (ask a person, see ``approvers``).
        reservation_ttl: How long the reservation holds if never settled; a ``SpotWindowSensor`` waiting
            between the gate and its task counts it from its latest start instead.
        ledger_conn_id: Airflow connection of the ledger (falls back to ``COSTAWARE_LEDGER_URL``).
        deferrable: Wait in the triggerer, not a worker slot; default ``[operators] default_deferrable``.
        approvers: With ``on_exceeded="approve"``: the Airflow user ids who may approve, a list (a set is
            read in sorted order; a dict is refused); empty or None: any user allowed to answer the DAG's
            required actions.
        approval_timeout: With ``on_exceeded="approve"``: how long to wait for an answer (then: rejected).
        on_rejected: With ``on_exceeded="approve"``: ``fail`` or ``skip`` after a rejection or timeout.
        instance_type: Instance type the reserved-for task will run on; checked against the price list
            before anything is reserved, so a typo fails here, not after money is held (templated).
        region: Region of that instance, checked with it (templated).
        market: ``spot``, ``on_demand`` or ``local``, checked before reserving (templated).
        **kwargs: Sensor arguments: ``poke_interval``, ``timeout``, ``mode``, ``soft_fail``, ...
    """

    template_fields: Sequence[str] = (
        "scope",
        "estimated_usd",
        "estimated_gpu_hours",
        "for_task_id",
        "instance_type",
        "region",
        "market",
        "ledger_conn_id",
    )
    ui_color = "#fdf2d0"

    def __init__(
        self,
        *,
        scope: str | Mapping[str, str],
        estimated_usd: Any,
        estimated_gpu_hours: Any = "0",
        for_task_id: str | None = None,
        on_exceeded: str = "wait",
        reservation_ttl: timedelta = timedelta(hours=6),
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        approvers: Sequence[str] | None = (),
        approval_timeout: timedelta | None = DEFAULT_APPROVAL_TIMEOUT,
        on_rejected: str = "fail",
        instance_type: str | None = None,
        region: str | None = None,
        market: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(reservation_ttl, timedelta) or reservation_ttl <= timedelta(0):
            raise ValueError(
                f"reservation_ttl={reservation_ttl!r}: give a positive timedelta, e.g. timedelta(hours=6)"
            )
        if on_exceeded not in ON_EXCEEDED:
            raise ValueError(f"on_exceeded={on_exceeded!r}: use one of {', '.join(ON_EXCEEDED)}")
        # Airflow passes the DAG's default_args to every operator that takes them: approval settings meant
        # for an approve gate reach a wait gate beside it, which never reads them and must not refuse them.
        # Those written on the gate itself are refused, whatever default_args hold.
        written = vars(self).get("_costaware_given", frozenset(APPROVAL_ARGUMENTS))
        from_defaults = {name for name in APPROVAL_ARGUMENTS if name not in written}
        self.approvers, self.approval_timeout, self.on_rejected = approval_settings(
            on_exceeded, approvers, approval_timeout, on_rejected, from_defaults
        )
        check_written(scope, estimated_usd, estimated_gpu_hours)
        self.scope = scope
        self.estimated_usd = estimated_usd
        self.estimated_gpu_hours = estimated_gpu_hours
        self.for_task_id = for_task_id
        self.on_exceeded = on_exceeded
        self.reservation_ttl = reservation_ttl
        self.ledger_conn_id = ledger_conn_id
        self.deferrable = deferrable
        self.instance_type = instance_type
        self.region = region
        self.market = market

    def _check_compute(self) -> None:
        """Fail on an instance type, region or market that cannot be priced, before money is reserved."""
        from costaware.core.given import not_given  # the bill's rule: " " and "null" are not given either
        from costaware.core.ledger import Market
        from costaware.try_pricing import stripped  # as the bill reads them: ' m5.large ' is m5.large

        instance_type, region, market = (stripped(v) for v in (self.instance_type, self.region, self.market))
        if not not_given(market):
            Market.parse(str(market))
        if not_given(instance_type):
            return
        from costaware.adapters.price_source import list_price
        from costaware.hooks.ledger import CostLedgerHook
        from costaware.settings import option

        # No region: the one a task naming none is priced in (it was "set region too", hiding a typo).
        region = str(option("worker_region")) if not_given(region) else str(region)
        # The sources the ledger prices with: a type only a refreshed or imported price knows is accepted.
        list_price(CostLedgerHook(self.ledger_conn_id).get_conn(), str(instance_type), region)

    def _scope(self) -> Scope:
        """The rendered ``scope`` read as a ledger scope; a dict as its tags.

        Raises:
            InvalidBudgetError: a blank scope (not read as ``*``), or one that is not ``key=value,...``.
        """
        from costaware.core.budgets import Scope

        given = self.scope
        scope = given if given is None or isinstance(given, Scope | Mapping) else str(given)
        return Scope.given(scope, what="reservation scope")  # as the ledger said it, given the text

    def _scope_text(self) -> str:
        """The scope as the ledger writes it (``project=churn``), also where it was given as a dict.

        ``str()`` of ``{"project": "churn"}`` is no scope: the deferred wait failed on it, and the Cost page
        showed the dict's text.
        """
        return str(self._scope())

    def _target(self) -> str:
        from costaware.core.errors import ConfigurationError

        if self.for_task_id:
            from costaware.glue import check_task_of_dag

            try:
                # Reserved for a task that never runs, the money was held until the reservation expired.
                check_task_of_dag(
                    self, self.for_task_id, argument="for_task_id", otherwise="nothing was reserved"
                )
            except ConfigurationError as e:
                raise AirflowFailException(str(e)) from None
            target = str(self.for_task_id)
        else:
            downstream = sorted(self.downstream_task_ids)
            if len(downstream) != 1:
                raise AirflowFailException(
                    f"SpendCapSensor {self.task_id!r} has {len(downstream)} downstream tasks ({downstream}): "
                    "set for_task_id to the task the budget is reserved for"
                )
            target = downstream[0]
        if self.has_dag():
            try:
                check_same_instances(
                    self.dag.task_dict.get(self.task_id, self), self.dag.task_dict.get(target)
                )
            except ConfigurationError as e:
                raise AirflowFailException(str(e)) from None
        return target

    def _try_reserve(
        self, context: Any, cannot_answer: Mapping[str, str] | None = None
    ) -> dict[str, Any] | None:
        """Reserve and return the XCom payload; None means 'not now' under on_exceeded='wait'.

        ``cannot_answer``: under on_exceeded='approve', the approvers who cannot answer (see
        ``_check_approvers``).
        """
        from decimal import Decimal

        from costaware.core.errors import BudgetExceededError, BudgetNotFoundError, ConfigurationError
        from costaware.core.ledger import reservation_holder
        from costaware.core.money import format_usd_exact, parse_gpu_hours, parse_usd
        from costaware.glue import airflow_errors
        from costaware.hooks.ledger import CostLedgerHook

        ti = context["ti"]
        with airflow_errors():
            ledger = CostLedgerHook(self.ledger_conn_id).get_conn()
            self._audit_overrides(context, ledger)  # first: a run refused below is audited too
            target = self._target()
            self._check_compute()
            self._check_scope_is_tagged(context, target)
            usd = parse_usd(self.estimated_usd, name="estimated_usd")
            if 0 < usd < Decimal("0.000001"):
                # The ledger keeps micro-dollars: it would hold $0.00, and the gate would gate nothing.
                raise ConfigurationError(
                    f"estimated_usd {self.estimated_usd!r} rounds to $0.00 in the ledger, which keeps "
                    "micro-dollars: give at least $0.000001"
                )
            gpu_hours = parse_gpu_hours(self.estimated_gpu_hours, name="estimated_gpu_hours")
            try:
                reservation = ledger.reserve(
                    self._scope(),
                    usd,
                    gpu_hours=gpu_hours,
                    holder=reservation_holder(ti.dag_id, ti.run_id, target, ti.map_index),
                    run_id=ti.run_id,
                    dag_id=ti.dag_id,
                    ttl=self.reservation_ttl,
                    purpose=f"task {target!r}",
                    # The task's open hold (a cleared gate run again) only where it holds what is asked now.
                    replace_unlike=True,
                )
            except BudgetExceededError as e:
                if self.on_exceeded == "approve":
                    self._ask_approval(ledger, context, e, target, usd, gpu_hours, cannot_answer or {})
                self._refused(ledger, context, target, usd, e)
                return None
            except BudgetNotFoundError as e:
                # No budget covers the scope (a typo in the project): refused too, and the Cost page lists
                # it with the others that did not get their money (it showed only a failed try).
                message = f"{e}{self._unseen_ledger_hint()}"
                self._note(ledger, context, target, usd, "refused", "", message)
                raise BudgetNotFoundError(message) from None
            # What is still held: more than the estimate where the task's open hold was grown (max_usd),
            # less than the hold where a try billed part of it already.
            held_usd, _ = ledger.unpaid(reservation.id)
        self._note(ledger, context, target, usd, "reserved", "", "")
        self.log.info(
            "Reserved %s for task %r in %s (reservation %s)%s%s",
            format_usd_exact(held_usd),
            target,
            self._budget_names(ledger, ti, reservation.budgets),
            reservation.id,
            "" if held_usd == usd else f": its open hold, above the {format_usd_exact(usd)} asked",
            ""
            if held_usd == reservation.usd
            else f" ({format_usd_exact(reservation.usd)} held, "
            f"{format_usd_exact(reservation.usd - held_usd)} of it paid already)",
        )
        catch_all_only = all(b.rpartition("/")[0] == "*" for b in reservation.budgets)
        if str(reservation.scope) != "*" and reservation.budgets and catch_all_only:
            # A misspelt scope (project=chrun) passes through the catch-all as if it had a budget.
            self.log.warning(
                "scope %r has no budget of its own: only the catch-all %s holds its money. Check its "
                "spelling (`costaware budget list` lists the budgets), or set one with `costaware budget "
                "set --scope %r ...`",
                str(reservation.scope),
                ", ".join(reservation.budgets),
                str(reservation.scope),
            )
        return _handed_on(reservation, target, held_usd)

    def _unseen_ledger_hint(self) -> str:
        """Where this gate's ledger is one the ``costaware`` command does not read by default, say which.

        The command reads ``AIRFLOW_CONN_COSTAWARE_LEDGER``, else the ``costaware_ledger`` connection in the
        metadata database of its ``AIRFLOW_HOME`` (else ``COSTAWARE_LEDGER_URL``, else the SQLite file): run
        with another home, a budget it set went to another ledger, and "set one with `costaware budget set`"
        sent the user back to the same mistake.
        """
        import os

        from airflow.sdk.exceptions import AirflowNotFoundException

        from costaware.adapters.ledger.engine import safe_url
        from costaware.hooks.ledger import CostLedgerHook

        variable = f"AIRFLOW_CONN_{self.ledger_conn_id.upper()}"
        if self.ledger_conn_id == DEFAULT_LEDGER_CONN_ID and os.environ.get(variable, "").strip():
            return ""
        hook = CostLedgerHook(self.ledger_conn_id)
        try:
            hook.get_connection(self.ledger_conn_id)
        except AirflowNotFoundException:
            return ""  # no such connection: the gate read the fallback, as the command does
        url = safe_url(hook.get_url())
        reads = (
            f"reads only where it sees that connection ({variable}, or the metadata database of this "
            "deployment's AIRFLOW_HOME): elsewhere"
            if self.ledger_conn_id == DEFAULT_LEDGER_CONN_ID
            else "does not read:"
        )
        return (
            f". This gate read the ledger of connection {self.ledger_conn_id!r} ({url}), "
            f"which the `costaware` command {reads} give it --ledger-url with that URL"
        )

    def _check_scope_is_tagged(self, context: Any, target: str) -> None:
        """Refuse a scope the target task's ledger entries will not carry (the budget would not be charged).

        A costaware operator (one with its own ``tags``) records its cost under the run's tags (the DAG's
        ``key:value`` tags, the team/project/owner params) and its own, known here: a scope they lack is
        refused. Any other task's cost is recorded by the cost listener, whose tags a task may add while it
        runs (``costaware.glue.annotate_task(tags=...)``): there a missing tag is only warned about.
        """
        from costaware.core.errors import ConfigurationError
        from costaware.glue import check_scope_is_tagged, is_template, tags_for

        if not self.has_dag():
            return
        tags = tags_for(self.dag, dict(context.get("params") or {}))
        task = self.dag.task_dict.get(target)
        own = getattr(task, "tags", None)
        if isinstance(own, Mapping):
            for key, value in own.items():
                text = str(value)
                if is_template(text):  # a templated tag (RemoteTrainingOperator's): as it will run
                    try:
                        text = str(self.render_template(text, context))
                    except Exception as e:
                        self.log.warning("cannot render tag %s=%r of %r here: %s", key, text, target, e)
                        continue
                tags[str(key)] = text
        self._check_scope_tags_storable(tags, target)
        try:
            check_scope_is_tagged(self.scope, tags, task_id=target, gate=f"spend gate {self.task_id!r}")
        except ConfigurationError as e:
            if isinstance(own, Mapping):
                raise
            self.log.warning("%s, or tag its cost as it runs with costaware.glue.annotate_task(tags=...)", e)

    def _check_scope_tags_storable(self, tags: Mapping[str, str], target: str) -> None:
        """Refuse a scope whose tag the target task's cost carries with a value no ledger entry can hold.

        Such a tag (``project='churn,team=x'``, from a plain run param) is left out of every entry the task
        records, so the budget reserved in would never be charged: warning and reserving lost that cost.
        """
        from costaware.core.budgets import Scope, tag_problem
        from costaware.core.errors import ConfigurationError
        from costaware.glue import TAG_NAMES

        scope = self.scope if isinstance(self.scope, Scope | Mapping) else str(self.scope)
        for key, _ in Scope.parse(scope).tags:
            problem = tag_problem(key, tags[key]) if key in tags else None
            if problem is None:
                continue
            where = (
                f"and declare the param {key!r} with costaware.params.tag_param, so the trigger form refuses "
                "such a value"
                if key in TAG_NAMES
                else f"or fix the DAG's '{key}:...' tag or the operator's tags"
            )
            raise ConfigurationError(
                f"spend gate {self.task_id!r} reserves in scope '{Scope.parse(scope)}' for task {target!r}, "
                f"but {problem}: the ledger would record that task's cost without the tag, and the budget "
                f"would never be charged. Nothing was reserved: trigger the run again with another {key} "
                f"value, {where}"
            )

    def _audit_overrides(self, context: Any, ledger: Any) -> None:
        """Record in the audit trail, once per run, the trigger params that differ from the DAG's defaults.

        Then refuse a conf key that is a misspelt param (``train_budjet_usd``), whose default would be used.
        """
        from costaware.core.run_conf import check_run_conf
        from costaware.glue import audit_run_overrides

        if not self.has_dag():
            return
        ti = context["ti"]
        dag_run = context.get("dag_run")
        changed = audit_run_overrides(ledger, self.dag, dag_run, ti.dag_id, ti.run_id)
        if changed:
            self.log.info("Run params that override the DAG's defaults (audited): %s", changed)
        # Before any money is held: a misspelt param's default (a budget, say) is not what was asked. Any DAG
        # may read conf keys of its own, so only a key that looks like a misspelt param is refused.
        check_run_conf(getattr(dag_run, "conf", None), self.dag.params or {}, own_keys=True)

    def _check_approvers(self) -> dict[str, str]:
        """The ``approvers`` who cannot answer, with why; fails when none of them could.

        An approver who is no user, or whose role may only read, cannot answer: asked at every run, once.

        Raises:
            AirflowFailException: no approver could answer: the run would wait approval_timeout for nothing.
        """
        from costaware.sensors.spend_approval import approvers_who_cannot_answer

        unknown, read_only = approvers_who_cannot_answer(self.approvers)
        problems = []
        if unknown:
            problems.append(
                f"approvers {unknown} are not users of this Airflow (its simple auth manager lists them in "
                "[core] simple_auth_manager_users)"
            )
        if read_only:
            problems.append(
                f"approvers {list(read_only)} have the role {sorted(set(read_only.values()))} in [core] "
                "simple_auth_manager_users, which may only read: answering needs USER or above"
            )
        if problems and len(unknown) + len(read_only) == len(self.approvers):
            # Nobody could answer: the run would wait approval_timeout (12 h by default) for nothing.
            raise AirflowFailException(
                "; ".join(problems)
                + ": fix approvers (or give them a role that may answer); nothing was reserved"
            )
        if problems:
            self.log.warning("%s: the other approvers may answer", "; ".join(problems))
        cannot_answer = {name: "not a user of this Airflow" for name in unknown}
        return cannot_answer | {name: "may only read" for name in read_only}

    def _ask_approval(
        self,
        ledger: Any,
        context: Any,
        error: Any,
        target: str,
        usd: Any,
        gpu_hours: Any,
        cannot_answer: Mapping[str, str],
    ) -> None:
        """Ask the approvers whether to spend past the cap; parks the task (``TaskAwaitingInput``).

        The request lists every budget covering the scope that the amount would pass, not only the first
        the ledger refused on: an approval reserves past all of them. It is assigned to the approvers who
        can answer; those in ``cannot_answer`` (checked by execute) are only named apart in its body.
        """
        from costaware.sensors.spend_approval import approval_body, ask

        passed = self._passed_budgets(context["ti"], usd, gpu_hours) or [self._passed_from(error)]
        names = ", ".join(f"'{b.name}'" for b in passed)
        # Every budget passed, as the request lists them: the Cost page showed the first refusing one only.
        noted, left_out = _noted_budgets([b.name for b in passed])
        message = _approval_message(error, passed, left_out)
        self._note(ledger, context, target, usd, "approval", noted, message)
        self.log.warning("Budget exceeded, asking %s for approval: %s", self.approvers or "any user", error)
        ask(
            context,
            subject=f"Approve spending past budget{'s' if len(passed) > 1 else ''} {names}?",
            body=approval_body(
                budgets=passed,
                needed_usd=usd,
                needed_gpu_hours=gpu_hours,
                task=target,
                approvers=self.approvers,
                cannot_answer=cannot_answer,
            ),
            # Assigned, a name that is no user was offered the request in the UI's lists for nobody.
            approvers=[a for a in self.approvers if a not in cannot_answer],
            timeout=self.approval_timeout,
            method_name="approval_complete",
        )

    @staticmethod
    def _passed_from(error: Any) -> Any:
        from decimal import Decimal

        from costaware.sensors.spend_approval import PassedBudget

        return PassedBudget(error.scope, Decimal(error.spent_usd or 0), Decimal(error.cap_usd or 0))

    def _passed_budgets(self, ti: Any, usd: Any, gpu_hours: Any) -> list[Any]:
        """The budgets the request would pass, with their forecasts; [] when they cannot be read.

        Read without the task's open hold (a gate run again asking more), which the approval's reserve
        replaces: counted as committed, the request showed more spent than there is, and listed budgets
        with room for the amount as passed.
        """
        from costaware.core.ledger import reservation_holder
        from costaware.hooks.ledger import CostLedgerHook
        from costaware.sensors.spend_approval import PassedBudget

        try:
            ledger = CostLedgerHook(self.ledger_conn_id).get_conn()
            budgets = {b.label: b for b in ledger.budgets()}
            holder = reservation_holder(ti.dag_id, ti.run_id, self._target(), ti.map_index)
            replaced = next(
                (r.id for r in ledger.open_reservations(holder_prefix=holder) if r.holder == holder), None
            )
            passed = []
            standing = ledger.usage(self._scope(), run_id=ti.run_id, dag_id=ti.dag_id, without=replaced)
            for u in standing:
                committed = u.spent_usd + u.reserved_usd
                gpu_committed = u.spent_gpu_hours + u.reserved_gpu_hours
                gpu_passed = u.cap_gpu_hours is not None and gpu_committed + gpu_hours > u.cap_gpu_hours
                if committed + usd <= u.cap_usd and not gpu_passed:
                    continue
                passed.append(
                    PassedBudget(
                        u.name,
                        committed,
                        u.cap_usd,
                        forecast_usd=self._forecast(ledger, budgets.get(u.label), replaced),
                        gpu_hours=(gpu_committed, u.cap_gpu_hours)
                        if gpu_passed and u.cap_gpu_hours is not None
                        else None,
                    )
                )
            return passed
        except Exception as e:  # the request still names the budget the ledger refused on
            self.log.info("Could not list the budgets this request passes: %s", e)
            return []

    def _forecast(self, ledger: Any, budget: Any, replaced: str | None) -> Any:
        """The period-end forecast of ``budget`` from this DAG's timetable; None if unknown (per run).

        Without ``replaced``, the task's open hold the approval's reserve replaces: counted, the forecast
        shown to the approver held it twice beside the request's own amount.
        """
        from costaware.core.budgets import Period

        if budget is None or budget.period is Period.RUN:
            return None
        try:
            from costaware.adapters.airflow_schedule import TimetableSchedule
            from costaware.adapters.ledger.governance import budget_outlook

            schedule = TimetableSchedule({self.dag_id: self.dag.timetable} if self.has_dag() else {})
            return budget_outlook(ledger, budget, schedule, without=replaced).forecast.forecast_usd
        except Exception as e:  # the forecast is a help for the approver, not a condition
            self.log.info("No forecast for budget %s: %s", budget.label, e)
            return None

    def approval_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resume after a person answered (or the wait timed out): reserve the overage, or fail/skip."""
        from costaware.adapters.ledger.audit import record_audit
        from costaware.core.ledger import reservation_holder
        from costaware.core.money import format_usd_exact, parse_gpu_hours, parse_usd
        from costaware.glue import airflow_errors
        from costaware.hooks.ledger import CostLedgerHook
        from costaware.sensors.spend_approval import decision

        ti = context["ti"]
        target = self._target()
        holder = reservation_holder(ti.dag_id, ti.run_id, target, ti.map_index)
        with airflow_errors():
            approved, who, details = decision(event or {"error_type": "no answer"})
            usd = parse_usd(self.estimated_usd, name="estimated_usd")
            ledger = CostLedgerHook(self.ledger_conn_id).get_conn()
            if not approved:
                record_audit(
                    ledger,
                    actor=who,
                    action="rejection",
                    target=holder,
                    details={**details, "usd": str(usd), "scope": self._scope_text()},
                )
                # The budgets the request was asked with, as the Cost page lists them: read again when the
                # answer came (hours later), a cap raised meanwhile named other budgets than the request.
                passed, more = _asked_and_more(self._asked_budgets(ledger, ti))
                if not passed:
                    # None noted, or only "and N more" (a first name longer than the column): the budgets
                    # passed now, every one named; counting the noted N beside them counted them twice.
                    gpu_hours = parse_gpu_hours(self.estimated_gpu_hours, name="estimated_gpu_hours")
                    passed, more = [b.name for b in self._passed_budgets(ti, usd, gpu_hours)], 0
                past = (
                    f"the budget{'s' if len(passed) + more > 1 else ''} {', '.join(map(repr, passed))}"
                    + (f" and {more} more" if more else "")
                    if passed
                    else f"the budget of '{self._scope_text()}'"
                )
                # Written as every other amount (format_usd_exact): an estimate of "4" read "spending $4".
                message = (
                    f"spending {format_usd_exact(usd)} past {past} was not approved "
                    f"({who}): nothing "
                    "was reserved; to ask again, clear this task or trigger the run again, or raise the cap "
                    "with `costaware budget set`"
                )
                self._note(ledger, context, target, usd, "rejected", "", f"not approved ({who})")
                if self.on_rejected == "skip":
                    raise AirflowSkipException(message)
                raise AirflowFailException(message)
            reservation = ledger.reserve(
                self._scope(),
                usd,
                gpu_hours=parse_gpu_hours(self.estimated_gpu_hours, name="estimated_gpu_hours"),
                holder=holder,
                run_id=ti.run_id,
                dag_id=ti.dag_id,
                ttl=self.reservation_ttl,
                purpose=f"task {target!r}",
                approved_by=who,
                approval=details,
                replace_unlike=True,
            )
            self._note(ledger, context, target, usd, "approved", "", f"approved by {who}")
        self.log.warning(
            "%s approved %s past the cap of %s (reservation %s)",
            who,
            format_usd_exact(usd),
            self._scope_text(),
            reservation.id,
        )
        return {**_handed_on(reservation, target), "approved_by": who}

    def _asked_budgets(self, ledger: Any, ti: Any) -> list[str]:
        """The budget names noted with this gate's open approval request; [] when they cannot be read."""
        from costaware.adapters.ledger.gate_requests import asked_budgets

        try:
            return asked_budgets(
                ledger, dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id, map_index=int(ti.map_index)
            )
        except Exception as e:  # the budgets passed now stand in
            self.log.info("Could not read the budgets this request was asked with: %s", e)
            return []

    def _budget_names(self, ledger: Any, ti: Any, labels: Any) -> str:
        """``project=churn/month (2026-11)``: the names the Cost page and the CLI use."""
        try:
            in_run = ledger.usage(self._scope(), run_id=ti.run_id, dag_id=ti.dag_id)
            names = [u.name for u in in_run if u.label in set(labels)]
        except Exception:  # only a log line: the labels will do
            names = []
        return ", ".join(names or list(labels))

    def _refused(self, ledger: Any, context: Any, target: str, usd: Any, error: Any) -> None:
        """Budget said no: note it for the Cost page, then skip, fail (no long traceback) or wait."""
        status = {"skip": "skipped", "fail": "refused"}.get(self.on_exceeded, "waiting")
        self._note(ledger, context, target, usd, status, error.scope, str(error))
        if self.on_exceeded == "skip":
            self.log.info("%s", error.summary)
            raise AirflowSkipException(f"skipping: {error}") from None
        if self.on_exceeded == "fail":
            # An expected outcome, not a crash: the summary says it all, the exception stays one line
            # and does not chain the ledger's internals.
            self.log.error("%s", error.summary)
            raise AirflowFailException(
                f"budget '{error.scope}' refused {target!r}: see the summary above"
            ) from None
        self.log.info("Budget has no room yet, waiting:\n%s", error.summary)
        return None

    def _note(
        self, ledger: Any, context: Any, target: str, usd: Any, status: str, budget: str, message: str
    ) -> None:
        """Record a refusal or wait (or the end of a wait) for the Cost page; never fails the gate."""
        from costaware.adapters.ledger.gate_requests import MESSAGE_CHARACTERS, note_gate_request

        ti = context["ti"]
        if len(message) > MESSAGE_CHARACTERS:  # where the row's cut message sends a person for the rest
            self.log.info("The Cost page's row of this gate is cut; its whole message: %s", message)
        try:
            note_gate_request(
                ledger,
                dag_id=ti.dag_id,
                run_id=ti.run_id,
                task_id=ti.task_id,
                map_index=int(ti.map_index),
                for_task_id=target,
                scope=self._scope_text(),
                budget=budget,
                usd=usd,
                status=status,
                message=message,
            )
        except Exception as e:  # the page misses one row; the gate's decision stands
            self.log.warning("could not note the spend gate's %s for the Cost page: %s", status, e)

    def poke(self, context: Any) -> bool | PokeReturnValue:
        result = self._try_reserve(context)
        return PokeReturnValue(is_done=True, xcom_value=result) if result else False

    def execute(self, context: Any) -> Any:
        if self.on_exceeded == "approve":
            # At every run, not only the one that passes its cap: that run is the one it was set up for.
            cannot_answer = self._check_approvers()
            return self._try_reserve(context, cannot_answer)  # reserves, or asks a person (never waits)
        if not self.deferrable:
            return super().execute(context)
        result = self._try_reserve(context)
        if result:
            return result
        self._defer(context)
        return None

    def _defer(self, context: Any, wait_ends: str | None = None) -> None:
        """Wait in the triggerer until the budget has room, at most until ``wait_ends`` (ISO).

        ``wait_ends`` (None: ``timeout`` from now) is carried over each wait: a resume that lost the room to
        another run waited a whole ``timeout`` again, so lost races kept the sensor waiting past it.

        Raises:
            AirflowSensorTimeout: ``wait_ends`` has passed.
        """
        from costaware.core.ledger import reservation_holder
        from costaware.core.money import parse_gpu_hours, parse_usd

        ti = context["ti"]
        now = utcnow()
        ends = (
            datetime.fromisoformat(wait_ends) if wait_ends else now + timedelta(seconds=float(self.timeout))
        )
        if ends <= now:
            raise AirflowSensorTimeout(
                f"budget scope '{self._scope_text()}' had no room left for {self._target()!r} when the "
                f"sensor's timeout of {float(self.timeout):g} s ran out (the room that came was taken by "
                "other runs): raise the cap, lower estimated_usd, or give the sensor a longer timeout"
            )
        self.defer(
            trigger=BudgetAvailableTrigger(
                scope=self._scope_text(),
                # Parsed as the sensor reads them: the trigger's Decimal() could not read "$4.20" or "1,200".
                usd=str(parse_usd(self.estimated_usd, name="estimated_usd")),
                gpu_hours=str(parse_gpu_hours(self.estimated_gpu_hours, name="estimated_gpu_hours")),
                run_id=ti.run_id,
                dag_id=ti.dag_id,
                ledger_conn_id=self.ledger_conn_id,
                poll_interval=float(self.poke_interval),
                # Its task's open hold, which the resume replaces (a gate run again asking more).
                holder=reservation_holder(ti.dag_id, ti.run_id, self._target(), ti.map_index),
            ),
            method_name="execute_complete",
            kwargs={"wait_ends": ends.isoformat()},
            timeout=ends - now,
        )

    def execute_complete(
        self, context: Any, event: dict[str, Any] | None = None, wait_ends: str | None = None
    ) -> Any:
        """Resume after the trigger saw room: reserve now (another run may have taken it; then wait again).

        ``wait_ends``: when the sensor's ``timeout`` runs out, from its first wait (None: a wait deferred
        by an earlier version, which gets a whole ``timeout`` again).
        """
        if not event or event.get("status") != "success":
            raise AirflowException(f"budget wait failed: {(event or {}).get('message', event)}")
        result = self._try_reserve(context)
        if result:
            return result
        self._defer(context, wait_ends)
        return None


_MORE = re.compile(r"and (\d+) more")
_EVERY_BUDGET = "; budgets passed: "


def _noted_budgets(names: Sequence[str], characters: int | None = None) -> tuple[str, int]:
    """The whole names that fit ``characters``, then ``and N more``; and N.

    ``characters``: by default what the gate row's ``budget`` column holds (read from the ledger's schema).
    Cut at the column's length, the last name was a budget that does not exist, read back by the rejection.
    A budget's name always holds a ``/`` (``scope/period``), so ``and N more`` is never one.
    """
    from costaware.adapters.ledger.gate_requests import BUDGET_CHARACTERS

    width = BUDGET_CHARACTERS if characters is None else characters
    joined = ", ".join(names)
    if len(joined) <= width:
        return joined, 0
    kept: list[str] = []
    for name in names:
        more = f", and {len(names) - len(kept) - 1} more"
        if len(", ".join([*kept, name])) + len(more) > width:
            break
        kept.append(name)
    left_out = len(names) - len(kept)
    return ", ".join([*kept, f"and {left_out} more"]), left_out


def _approval_message(error: Any, passed: Sequence[Any], left_out: int) -> str:
    """The gate row's message of an approval request: the refusal's reason, then the budgets passed.

    Only where the ``budget`` column could not hold them all (``left_out``); the reason comes first and the
    list is cut to the message's length with ``and N more``: listed first, many long names cut the reason
    off.
    """
    from costaware.adapters.ledger.gate_requests import MESSAGE_CHARACTERS

    reason = str(error)
    if not left_out:
        return reason
    room = MESSAGE_CHARACTERS - len(reason) - len(_EVERY_BUDGET)
    listed, _ = _noted_budgets([b.name for b in passed], max(room, 0))
    if _MORE.fullmatch(listed):
        return reason  # no name fits beside the reason, which names them: the row cuts it, saying so
    return f"{reason}{_EVERY_BUDGET}{listed}"


def _asked_and_more(noted: Sequence[str]) -> tuple[list[str], int]:
    """The budget names noted with a request (:func:`_noted_budgets`), and how many more it passed."""
    counted = _MORE.fullmatch(noted[-1]) if noted else None
    return (list(noted[:-1]), int(counted.group(1))) if counted else (list(noted), 0)


def _handed_on(reservation: Reservation, target: str, held_usd: Decimal | None = None) -> dict[str, Any]:
    """The gate's return value, its XCom: the reservation it made for ``target``.

    ``held_usd``: what it still holds for ``target`` (None: all of it), less than its amount where an
    earlier try paid part of it.
    """
    return {
        "reservation_id": reservation.id,
        "usd": str(reservation.usd if held_usd is None else held_usd),
        "scope": str(reservation.scope),
        "budgets": list(reservation.budgets),
        "for_task_id": target,
    }
