"""The spot tuning plan's IO: a trial's prices, the study's ledger budget, spend and reservations.

The rules are :mod:`costaware.core.tuning.spot_plan`'s; this module feeds them from the bundled price
catalog and the ledger, and reserves what they decide. It needs no Airflow: a task passes the ledger
(``CostLedgerHook().get_conn()``) and its ``dag_id`` and ``run_id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.core.errors import BudgetExceededError, ConfigurationError
from costaware.core.ledger import reservation_holder
from costaware.core.tuning.spot_plan import (
    PromotionDecision,
    SpotPlan,
    SpotTuningSettings,
    StageCost,
    Warmup,
    decide_promotions,
    kept_count,
    plan_study,
    rank,
)
from costaware.core.tuning.spot_spend import TrialSpend, spend_by_trial, study_spent

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.prices import PriceCatalog
    from costaware.core.spot_decision import SpotDecision

#: Reservations of a study outlive its longest stage (the ledger's default is 6 hours).
RESERVATION_TTL = timedelta(days=3)


@dataclass(frozen=True, slots=True)
class TrialPrices:
    """A trial's spot and on-demand USD/hour, and its instance's GPUs."""

    spot_usd_per_hour: Decimal
    on_demand_usd_per_hour: Decimal
    gpus: Decimal

    def usd_per_hour(self, market: str) -> Decimal:
        """The price on ``market`` (``spot`` or ``on_demand``)."""
        return self.spot_usd_per_hour if market == "spot" else self.on_demand_usd_per_hour


def trial_prices(
    catalog: PriceCatalog,
    instance_type: str,
    region: str,
    watched: SpotDecision | None = None,
    *,
    spot_given: object | None = None,
    on_demand_given: object | None = None,
) -> TrialPrices:
    """A trial's prices and GPUs.

    The prices given win; then the spot window's decision when it ``watched`` this type; then the catalog
    (on-demand) and the spot advisor's saving on it (spot). A SageMaker ``ml.*`` type takes its GPUs from the
    EC2 type of the same name, but its prices must be given: they are not EC2's.

    Raises:
        ConfigurationError: an ``ml.*`` type without both prices.
        PriceNotFoundError: the type is not in the catalog.
    """
    ec2_type = instance_type.removeprefix("ml.")
    if ec2_type != instance_type and (spot_given is None or on_demand_given is None):
        raise ConfigurationError(
            f"{instance_type} is a SageMaker type, whose prices are not in the bundled EC2 list: give "
            "spot_usd_per_hour and on_demand_usd_per_hour (SageMaker's price page)"
        )
    offer = catalog.offer(ec2_type, region)
    on_demand, spot = on_demand_given, spot_given
    if watched is not None:
        on_demand = on_demand if on_demand is not None else watched.on_demand_usd_per_hour
        if spot is None and watched.market == "spot":
            spot = watched.usd_per_hour
    on_demand = on_demand if on_demand is not None else offer.usd_per_hour
    spot = spot if spot is not None else catalog.spot_estimate_usd_per_hour(ec2_type, region)
    return TrialPrices(Decimal(str(spot)), Decimal(str(on_demand)), Decimal(str(offer.gpus or 0)))


def version_files(model_store: str, version: str) -> str:
    """Where a ``files`` model version's files are: what a promoted run resumes from."""
    return f"{model_store.rstrip('/')}/versions/{version}/files"


def finished_results(pulled: Any) -> list[Mapping[str, Any]]:
    """The results of a mapped training task that finished (those with ``metrics``) from its pulled XCom."""
    if isinstance(pulled, Mapping):
        pulled = [pulled]
    return [r for r in pulled or [] if isinstance(r, Mapping) and "metrics" in r]


def study_spend(ledger: Ledger, *, dag_id: str, run_id: str, study: str) -> dict[str, TrialSpend]:
    """What the ledger billed each trial of ``study`` in the run, per stage."""
    return spend_by_trial(ledger.entries(dag_id=dag_id, run_id=run_id), study=study)


def open_study(
    ledger: Ledger,
    scope: str,
    settings: SpotTuningSettings,
    prices: TrialPrices,
    *,
    market: str,
    dag_id: str,
    run_id: str,
    on: str = "",
    ttl: timedelta = RESERVATION_TTL,
) -> SpotPlan:
    """Size the study at the ``market``'s price, set its budget and reserve each planned warm-up.

    The budget is ``scope``, period ``total``, with both caps. Warm-up ``n`` is reserved under the holder
    of map index ``n`` of task ``warmup``, so the operator settles it with what its attempts were billed.

    Args:
        ledger: The cost ledger.
        scope: The study's budget scope (``project=<p>,study=<run id>``).
        settings: The plan's settings.
        prices: A trial's prices and GPUs (:func:`trial_prices`).
        market: ``spot`` or ``on_demand``: the price the study is sized at.
        dag_id: The DAG of the run (the budget's audit actor, the reservations' holders).
        run_id: The run.
        on: What a trial runs on, for the error (``"spot g5.xlarge"``).
        ttl: How long the reservations hold.

    Raises:
        ConfigurationError: not even one warm-up and its promotion fit the caps.
        BudgetExceededError: a warm-up could not be reserved (another budget of the scope has less left).
    """
    plan = plan_study(settings, usd_per_hour=prices.usd_per_hour(market), gpus=prices.gpus, on=on)
    ledger.set_budget(
        scope, "total", str(settings.max_usd), cap_gpu_hours=str(settings.max_gpu_hours), actor=dag_id
    )
    for number in range(plan.trials):
        try:
            ledger.reserve(
                scope,
                f"{plan.warmup.usd:.6f}",
                gpu_hours=f"{plan.warmup.gpu_hours:.6f}",
                holder=reservation_holder(dag_id, run_id, "warmup", number),
                run_id=run_id,
                ttl=ttl,
                purpose=f"the warm-up of trial {number}",
            )
        except BudgetExceededError as e:
            raise BudgetExceededError(f"trial {number} cannot be reserved: {e}") from e
    return plan


def reserve_promotions(
    ledger: Ledger,
    scope: str,
    decisions: Sequence[PromotionDecision],
    *,
    dag_id: str,
    run_id: str,
    ttl: timedelta = RESERVATION_TTL,
) -> list[PromotionDecision]:
    """Reserve each promotion in the study's budget, in order; the decisions, with refused ones stopped.

    The ledger's check is atomic, so the caps hold with other runs or promotions spending meanwhile. The
    first refusal stops that promotion and every one after it. Promotion ``i`` (in order) is reserved under
    the holder of map index ``i`` of task ``full``.
    """
    out: list[PromotionDecision] = []
    index = 0
    refused: BudgetExceededError | None = None
    for decision in decisions:
        if not decision.promoted:
            out.append(decision)
            continue
        if refused is None:
            try:
                ledger.reserve(
                    scope,
                    f"{decision.estimate.usd:.6f}",
                    gpu_hours=f"{decision.estimate.gpu_hours:.6f}",
                    holder=reservation_holder(dag_id, run_id, "full", index),
                    run_id=run_id,
                    ttl=ttl,
                    purpose=f"the promotion of trial {decision.trial}",
                )
                index += 1
                out.append(decision)
                continue
            except BudgetExceededError as e:
                refused = e
        out.append(decision.stopped(f"stopped by the ledger: {refused}"))
    return out


def spend_table(spend: Mapping[str, TrialSpend]) -> str:
    """Each trial's warm-up and full attempts and dollars, as a text table."""
    lines = [
        f"{'trial':>5} {'warm-up attempts':>16} {'warm-up USD':>12} {'full attempts':>13} {'full USD':>9}"
    ]
    for trial in sorted(spend, key=int):
        s = spend[trial]
        lines.append(
            f"{trial:>5} {s.warmup_attempts:>16} {s.warmup_usd:>12.6f} "
            f"{s.full_attempts:>13} {s.full_usd:>9.6f}"
        )
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Selection:
    """The warm-ups best first, one decision for each in that order, and what the study had spent."""

    ranked: list[Warmup]
    decisions: list[PromotionDecision]
    spent: StageCost

    @property
    def promoted(self) -> list[Warmup]:
        """The warm-ups promoted (and reserved), best first: map index ``i`` of task ``full`` is the i-th."""
        chosen = {d.trial for d in self.decisions if d.promoted}
        return [w for w in self.ranked if w.trial in chosen]

    def report(self, caps: StageCost) -> str:
        """What was spent, then each warm-up's loss and decision, as log lines."""
        lines = [
            f"spent so far ${self.spent.usd:.4f} and {self.spent.gpu_hours:.4f} GPU-hours "
            f"of ${caps.usd} and {caps.gpu_hours}"
        ]
        for warmup, decision in zip(self.ranked, self.decisions, strict=True):
            lines.append(f"trial {warmup.trial:>3}: holdout loss {warmup.loss:.3f} -> {decision.reason}")
        return "\n".join(lines)

    def to_xcom(self) -> dict[str, Any]:
        """JSON-safe: the ranking (trial, loss, version), the trials promoted, and why the others were not."""
        return {
            "ranking": [{"trial": w.trial, "loss": w.loss, "version": w.version} for w in self.ranked],
            "promoted": [w.trial for w in self.promoted],
            "pruned": [{"trial": d.trial, "reason": d.reason} for d in self.decisions if not d.promoted],
        }


def select_promotions(
    ledger: Ledger,
    results: Any,
    *,
    settings: SpotTuningSettings,
    study: str,
    scope: str,
    gpus: object,
    dag_id: str,
    run_id: str,
    loss_metric: str = "val_rmse",
) -> Selection:
    """Rank the finished warm-ups, prune, and promote (reserving each) while the ledger says the caps allow.

    Args:
        ledger: The cost ledger.
        results: The warm-up task's pulled XCom: results with ``metrics`` (``trial`` and ``loss_metric``)
            and ``version``; those without ``metrics`` did not finish.
        settings: The plan's settings.
        study: The study's ``study`` tag.
        scope: The study's budget scope.
        gpus: A trial's GPUs: GPU-hours are billed hours x GPUs.
        dag_id: The DAG of the run.
        run_id: The run: the study's entries are the run's.
        loss_metric: The metric ranked on, lower is better.

    Raises:
        ValueError: no warm-up finished.
    """
    spend, gpu_count = study_spend(ledger, dag_id=dag_id, run_id=run_id, study=study), Decimal(str(gpus))
    warmups = []
    for result in finished_results(results):
        number = int(result["metrics"]["trial"])
        billed = spend.get(str(number), TrialSpend())
        loss = float(result["metrics"][loss_metric])
        warmups.append(Warmup(number, loss, billed.usd, billed.hours * gpu_count, str(result["version"])))
    if not warmups:
        raise ValueError("no warm-up finished: nothing to rank (see the warmup task's logs)")
    ranked, spent = rank(warmups), study_spent(spend, gpus=gpu_count)
    decisions = decide_promotions(
        ranked,
        keep=kept_count(len(ranked), settings.keep_fraction),
        spent=spent,
        caps=settings.caps,
        added_epochs=settings.added_epochs,
        warmup_epochs=settings.warmup_epochs,
    )
    decisions = reserve_promotions(ledger, scope, decisions, dag_id=dag_id, run_id=run_id)
    return Selection(ranked, decisions, spent)
