"""What every step of a spend gate reads: its scope, its task, the checks before reserving, its Cost rows.

:class:`SpendGateBase` is the base of ``SpendCapSensor`` (``costaware.sensors.spend_cap``), which keeps its
import path; :func:`handed_on` is the gate's XCom.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from costaware.glue import DEFAULT_LEDGER_CONN_ID
from costaware.sensors.spend_gate_arguments import check_same_instances

if TYPE_CHECKING:
    from decimal import Decimal

    from costaware.core.budgets import Scope
    from costaware.core.ledger import Reservation


class SpendGateBase(BaseSensorOperator):
    """The scope, the target task, the checks before reserving and the Cost page notes of a spend gate.

    Its arguments are ``SpendCapSensor``'s, set by its ``__init__`` (see there).

    See docs/budgets.md.
    """

    scope: str | Mapping[str, str]
    estimated_usd: Any
    estimated_gpu_hours: Any
    for_task_id: str | None
    on_exceeded: str
    reservation_ttl: timedelta
    ledger_conn_id: str
    instance_type: str | None
    region: str | None
    market: str | None
    approvers: list[str]
    approval_timeout: timedelta | None
    on_rejected: str

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

    def _budget_names(self, ledger: Any, ti: Any, labels: Any) -> str:
        """``project=churn/month (2026-11)``: the names the Cost page and the CLI use."""
        try:
            in_run = ledger.usage(self._scope(), run_id=ti.run_id, dag_id=ti.dag_id)
            names = [u.name for u in in_run if u.label in set(labels)]
        except Exception:  # only a log line: the labels will do
            names = []
        return ", ".join(names or list(labels))

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


def handed_on(reservation: Reservation, target: str, held_usd: Decimal | None = None) -> dict[str, Any]:
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
