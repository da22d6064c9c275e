"""``DataLocalityCheckOperator``: stop a run before it drags data across regions without paying for it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from costaware.glue import (
    DEFAULT_AWS_CONN_ID,
    DEFAULT_LEDGER_CONN_ID,
    airflow_errors,
    check_tags,
    run_identity,
    run_tags,
)
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs
from costaware.settings import worker_region

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.adapters.ledger.store import Ledger
    from costaware.adapters.object_store import S3Options
    from costaware.adapters.regions import EgressEstimate
    from costaware.core.ledger import LedgerEntry

POLICIES = ("block", "warn", "allow_within_budget")


def _describe(estimate: EgressEstimate) -> str:
    where = estimate.placement.uri
    if where.startswith("s3://"):
        where = f"bucket '{where[5:].split('/', 1)[0]}' ({where})"
    return (
        f"{where} in {estimate.placement.region} -> compute in {estimate.compute_region}: "
        f"{estimate.placement.bytes:,} bytes at ${estimate.usd_per_gb}/GB = ${estimate.usd}"
    )


def _literal(text: str) -> Any:
    """A list or dict written out as text (a template that rendered one), or a clear error."""
    import ast

    from costaware.core.errors import ConfigurationError

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError) as e:
        raise ConfigurationError(
            f"inputs {text!r} is text that is no list or dict of URIs: give a list of URIs or {{name: URI}}"
        ) from e


def _replicas(replicas: Mapping[str, Any] | None) -> dict[str, dict[str, str]]:
    """``{source URI: {region: replica URI}}`` with the sources' trailing ``/`` dropped, or a clear error."""
    from costaware.core.errors import ConfigurationError

    found: dict[str, dict[str, str]] = {}
    for source, copies in dict(replicas or {}).items():
        if not isinstance(copies, Mapping):
            raise ConfigurationError(
                f"replicas[{source!r}] is {copies!r}: map each source URI to {{region: replica URI}}, e.g. "
                "{'s3://data-eu/flights': {'us-east-1': 's3://data-us/flights'}}"
            )
        found[str(source).rstrip("/")] = {str(region): str(uri) for region, uri in copies.items()}
    return found


class DataLocalityCheckOperator(WarnsOfDroppedDefaultArgs, BaseOperator):
    """Check that the data lives where the compute runs; estimate, gate and record cross-region egress.

    See docs/data-path.md.

    For each input it finds the region (S3: the bucket's region from HeadBucket/GetBucketLocation; local
    paths: ``worker_region``; other URIs: ``declared_regions``) and the bytes (listing metadata only), and
    prices the transfer to ``compute_region`` with the bundled transfer prices. Then, by ``policy``:

    * ``block`` (default): any cross-region input fails the run, before any transfer, with
      ``CrossRegionEgressError`` naming the bucket, both regions, the bytes and the USD.
    * ``warn``: logs the estimate and records it as egress spend.
    * ``allow_within_budget``: reserves the estimate from the ledger budget covering ``budget_scope``
      (failing when the budget cannot cover it) and records it as egress spend against that reservation.

    An input with a same-region replica in ``replicas`` is switched to the replica (said in the log and
    in the result) and its egress recorded as avoided. Every estimate goes to the ledger as kind
    ``egress``: actual when data will move, estimated (avoided) when nothing moves.

    Returns (XCom, one key per item with ``multiple_outputs``): ``{"compute_region", "policy",
    "egress_usd", "uris": {name: URI to read}, "inputs": [...]}``; money as strings.

    Args:
        inputs: Input URIs or Airflow Assets, as a list or as ``{name: URI}`` (templated).
        compute_region: Where the compute runs, e.g. ``{{ ti.xcom_pull('choose_compute')['region'] }}``
            (templated).
        policy: ``block``, ``warn`` or ``allow_within_budget``.
        budget_scope: Budget scope to reserve from with ``allow_within_budget``, e.g. ``project=churn``
            (templated); default: the scope of ``tags``.
        worker_region: Region of local paths (templated); default ``$COSTAWARE_WORKER_REGION``.
        declared_regions: Regions by URI prefix, for other URIs or to override a lookup.
        declared_bytes: Sizes by URI, for inputs that cannot be listed.
        replicas: Same-data copies by source URI and region, e.g.
            ``{"s3://data-eu/flights": {"us-east-1": "s3://data-us/flights"}}``.
        aws_conn_id: Airflow AWS connection for S3 look-ups (default ``aws_default``; when that connection
            does not exist, or with ``None``, the SDKs' default credential chain).
        ledger_conn_id: Airflow connection of the cost ledger.
        tags: Allocation tags (team, project, owner) of the ledger entries.
    """

    template_fields: Sequence[str] = (
        "inputs",
        "compute_region",
        "budget_scope",
        "worker_region",
        "ledger_conn_id",
    )
    ui_color = "#fff3e0"

    def __init__(
        self,
        *,
        inputs: Sequence[Any] | Mapping[str, Any],
        compute_region: str,
        policy: str = "block",
        budget_scope: str | None = None,
        worker_region: str | None = None,
        declared_regions: Mapping[str, str] | None = None,
        declared_bytes: Mapping[str, int] | None = None,
        replicas: Mapping[str, Mapping[str, str]] | None = None,
        aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        tags: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("multiple_outputs", True)
        super().__init__(**kwargs)
        if policy not in POLICIES:
            from costaware.core.errors import ConfigurationError

            raise ConfigurationError(f"policy {policy!r} is unknown: use one of {', '.join(POLICIES)}")
        self.inputs = inputs
        self.compute_region = compute_region
        self.policy = policy
        self.budget_scope = budget_scope
        self.worker_region = worker_region
        self.declared_regions = dict(declared_regions or {})
        self.declared_bytes = dict(declared_bytes or {})
        self.replicas = _replicas(replicas)
        self.aws_conn_id = aws_conn_id
        self.ledger_conn_id = ledger_conn_id
        self.tags = check_tags(tags or {}, owner=f"{type(self).__name__} {self.task_id!r}")

    def _named_inputs(self) -> dict[str, str]:
        """``{name: URI}`` of the rendered ``inputs``; a list's inputs are named by position."""
        from costaware.core.errors import ConfigurationError

        inputs = self.inputs
        if isinstance(inputs, str):
            # One URI, or a template's list rendered as text: read letter by letter, "/" became an input
            # and the check walked the worker's whole disk.
            inputs = _literal(inputs) if inputs.strip()[:1] in ("[", "{") else [inputs]
        if not isinstance(inputs, (Mapping, Sequence)) or isinstance(inputs, (str, bytes)):
            raise ConfigurationError(
                f"inputs must be a list of URIs or {{name: URI}}, got {type(inputs).__name__} {inputs!r}"
            )
        items = inputs.items() if isinstance(inputs, Mapping) else enumerate(inputs)
        named = {str(name): str(getattr(value, "uri", value)).strip() for name, value in items}
        empty = [name for name, uri in named.items() if not uri]
        if not named or empty:
            raise ConfigurationError(
                f"inputs {self.inputs!r} name no data"
                + (f" (empty: {empty})" if empty else "")
                + ": give the URIs or paths the run reads"
            )
        return named

    def _estimates(self, options: S3Options) -> list[tuple[str, EgressEstimate, EgressEstimate | None]]:
        """(name, estimate of the input, estimate of its same-region replica or None) per input."""
        from costaware.adapters.price_files import bundled_catalog
        from costaware.adapters.regions import estimate_egress, locate
        from costaware.core.errors import ConfigurationError

        if not isinstance(self.compute_region, str) or not self.compute_region.strip():
            raise ConfigurationError(
                f"compute_region is {self.compute_region!r}: name the AWS region the compute runs in, e.g. "
                "us-east-1"
            )
        catalog = bundled_catalog()
        worker = self.worker_region or worker_region()
        found = []
        for name, uri in self._named_inputs().items():
            where = locate(
                uri,
                worker_region=worker,
                declared=self.declared_regions,
                declared_bytes=self.declared_bytes,
                options=options,
            )
            estimate = estimate_egress(where, self.compute_region, catalog.transfer_usd_per_gb)
            replica_uri = self.replicas.get(uri.rstrip("/"), {}).get(self.compute_region)
            replica = None
            if estimate.cross_region and replica_uri:
                replica_at = locate(
                    replica_uri,
                    worker_region=worker,
                    declared=self.declared_regions,
                    declared_bytes=self.declared_bytes,
                    options=options,
                )
                if replica_at.region != self.compute_region:
                    raise ConfigurationError(
                        f"replica {replica_uri} of {uri} is configured for {self.compute_region} but lives "
                        f"in {replica_at.region}: fix replicas="
                    )
                replica = estimate_egress(replica_at, self.compute_region, catalog.transfer_usd_per_gb)
            found.append((name, estimate, replica))
        return found

    def _entry(
        self,
        who: dict[str, Any],
        estimate: EgressEstimate,
        *,
        actual: bool,
        outcome: str,
        note: str,
        position: int,
        reservation_id: str | None = None,
    ) -> LedgerEntry:
        import dataclasses
        import hashlib

        from costaware.core.ledger import Kind, LedgerEntry

        entry = LedgerEntry(
            dag_id=who["dag_id"],
            run_id=who["run_id"],
            task_id=who["task_id"],
            try_number=who["try_number"],
            map_index=who["map_index"],
            kind=Kind.EGRESS,
            usd=estimate.usd,
            quantity=(Decimal(estimate.placement.bytes) / Decimal(2**30)).quantize(Decimal("0.000001")),
            unit="gb",
            unit_price_usd=estimate.usd_per_gb,
            region=estimate.compute_region,
            estimated=not actual,
            outcome=outcome,
            cause="data_locality",
            price_source="bundled AWS transfer prices",
            note=f"{note}: {_describe(estimate)}",
            tags=who["tags"],
            reservation_id=reservation_id,
        )
        if reservation_id is None:
            # One entry per task instance, outcome and input: a retry (or a clear) of the task recorded its
            # estimates again, a "warned" transfer twice as spend. Its position among the inputs too: two
            # inputs of the same URI are two transfers.
            parts = (who["dag_id"], who["run_id"], who["task_id"], who["map_index"], outcome, position)
            key = "\x00".join(["egress", *map(str, parts), estimate.placement.uri]).encode()
        else:
            # One entry per input and hold: a retry after a failed settle gets the same open hold back and
            # recorded the transfer a second time. A cleared run holds anew, and records its transfer anew.
            key = f"egress\x00{reservation_id}\x00{position}\x00{estimate.placement.uri}".encode()
        return dataclasses.replace(entry, entry_uid="egress-" + hashlib.sha256(key).hexdigest()[:40])

    def execute(self, context: Context) -> dict[str, Any]:
        """Locate every input, price its egress, apply the policy and record the estimates."""
        from costaware.hooks.aws import s3_options
        from costaware.hooks.ledger import CostLedgerHook

        who = {**run_identity(context, self.task_id), "tags": run_tags(self, context, self.tags)}
        ti = context.get("ti")
        if self.tags and ti is not None and hasattr(ti, "dag_id"):
            from costaware.glue import annotate_task

            annotate_task(ti, tags=dict(self.tags))  # this try's own entry counts where its estimates do
        with airflow_errors():
            found = self._estimates(s3_options(self.aws_conn_id))
            ledger = CostLedgerHook(self.ledger_conn_id).get_conn()
            self._gate(ledger, who, found)
        return self._report(found)

    def _gate(
        self,
        ledger: Ledger,
        who: dict[str, Any],
        found: list[tuple[str, EgressEstimate, EgressEstimate | None]],
    ) -> None:
        """Apply the policy; records every estimate in the ledger, then raises when the run must stop."""
        from costaware.core.errors import BudgetExceededError, CrossRegionEgressError

        # Each input's place among them: the entries' uid (the same on a retry).
        moving = [(i, e) for i, (_, e, replica) in enumerate(found) if e.cross_region and replica is None]
        for i, (_, estimate, replica) in enumerate(found):
            if replica is not None:
                self.log.info(
                    "using the same-region replica %s instead of %s",
                    replica.placement.uri,
                    estimate.placement.uri,
                )
                ledger.record(
                    self._entry(
                        who,
                        estimate,
                        actual=False,
                        outcome="avoided",
                        note=f"replica {replica.placement.uri} used",
                        position=i,
                    )
                )
            elif not estimate.cross_region:
                ledger.record(
                    self._entry(
                        who, estimate, actual=False, outcome="same_region", note="no transfer", position=i
                    )
                )
        if not moving:
            return
        total = sum((e.usd for _, e in moving), Decimal(0))
        what = "; ".join(_describe(e) for _, e in moving)
        if self.policy == "block":
            self._record_moving(
                ledger, who, moving, actual=False, outcome="blocked", note="avoided egress, run blocked"
            )
            raise CrossRegionEgressError(
                f"cross-region egress blocked: {what}. Run the compute in {moving[0][1].placement.region}, "
                f"configure a replica in {self.compute_region} (replicas=), or set "
                f"policy='allow_within_budget' to pay ${total} from a budget"
            )
        if self.policy == "warn":
            self.log.warning("cross-region egress of an estimated $%s: %s", total, what)
            self._record_moving(
                ledger, who, moving, actual=True, outcome="warned", note="cross-region egress allowed"
            )
            return
        from costaware.core.ledger import reservation_holder

        # The task's holder with the suffix that core.ledger.read_holder knows as a data-locality hold.
        task_holder = reservation_holder(who["dag_id"], who["run_id"], who["task_id"], who["map_index"])
        holder = f"{task_holder}/egress"
        if self.budget_scope is not None:  # given (a template may render it empty): refused, not "*"
            from costaware.core.budgets import Scope

            scope = str(Scope.given(self.budget_scope, what="budget_scope"))
        else:
            scope = ",".join(f"{k}={v}" for k, v in sorted(self.tags.items())) or "*"
        try:
            reservation = ledger.reserve(
                scope,
                total,
                holder=holder,
                run_id=who["run_id"],
                dag_id=who["dag_id"],
                purpose=f"cross-region egress ({what})",
            )
        except BudgetExceededError:
            self._record_moving(
                ledger, who, moving, actual=False, outcome="blocked", note="avoided egress, over budget"
            )
            raise
        # The position among the moving inputs, as the hold's entries had it before (the same uids).
        for position, (_, e) in enumerate(moving):
            note = f"egress paid from budget '{scope}'"
            ledger.record(
                self._entry(
                    who,
                    e,
                    actual=True,
                    outcome="allowed",
                    note=note,
                    reservation_id=reservation.id,
                    position=position,
                )
            )
        ledger.settle(reservation.id, total)
        self.log.info(
            "reserved and recorded $%s of cross-region egress from budget '%s': %s", total, scope, what
        )

    def _record_moving(
        self,
        ledger: Ledger,
        who: dict[str, Any],
        moving: list[tuple[int, EgressEstimate]],
        *,
        actual: bool,
        outcome: str,
        note: str,
    ) -> None:
        """Record each cross-region input's estimate with one outcome, at its place among all the inputs."""
        for position, estimate in moving:
            ledger.record(
                self._entry(who, estimate, actual=actual, outcome=outcome, note=note, position=position)
            )

    def _report(self, found: list[tuple[str, EgressEstimate, EgressEstimate | None]]) -> dict[str, Any]:
        rows: list[dict[str, Any]] = []
        total = Decimal(0)
        for name, estimate, replica in found:
            use = replica.placement.uri if replica else estimate.placement.uri
            total += Decimal("0.000000") if replica else estimate.usd
            rows.append(
                {
                    "name": name,
                    "uri": estimate.placement.uri,
                    "use_uri": use,
                    "region": estimate.placement.region,
                    "bytes": estimate.placement.bytes,
                    "how": estimate.placement.how,
                    "usd_per_gb": str(estimate.usd_per_gb),
                    "egress_usd": str(Decimal("0.000000") if replica else estimate.usd),
                    "replica": replica is not None,
                }
            )
        return {
            "compute_region": self.compute_region,
            "policy": self.policy,
            "egress_usd": str(total),
            "uris": {r["name"]: r["use_uri"] for r in rows},
            "inputs": rows,
        }
