"""The spot tuning plan's IO: a trial's prices, the study's ledger budget, spend and reservations.

The rules are :mod:`costaware.core.tuning.spot_plan`'s; this module feeds them from the bundled price
catalog and the ledger, and reserves what they decide. It needs no Airflow: a task passes the ledger
(``CostLedgerHook().get_conn()``) and its ``dag_id`` and ``run_id``.
"""

from __future__ import annotations

import math
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
    gpu_hours_per_usd,
    kept_count,
    plan_study,
    rank,
)
from costaware.core.tuning.spot_spend import TrialSpend, spend_by_trial, study_spent
from costaware.training.attempt_effects import backend_stop_seconds, least_cap_usd
from costaware.training.plan import DEFAULT_GRACE_SECONDS

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.prices import PriceCatalog
    from costaware.core.spot_decision import SpotDecision

#: Reservations of a study outlive its longest stage (the ledger's default is 6 hours).
RESERVATION_TTL = timedelta(days=3)
#: A stage's cap buys at least this long before its stop notice. A cloud attempt takes minutes to start
#: (SageMaker provisions in 3-5), so a cap sized from very short epochs (a demo) would stop the job before
#: it trained; the operator itself starts none that gets less than ``MIN_CAPPED_SECONDS`` (60) before it.
LEAST_STAGE_SECONDS = 600


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


def _loss(value: Any) -> float:
    # A loss the training wrote as null or text is no ranking either: read as nan, it ranks last and is
    # not promoted (decide_promotions says why) instead of failing the whole selection.
    try:
        return float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        return math.nan


def stage_floor_usd(
    prices: TrialPrices,
    market: str,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    *,
    backend: str | None = None,
    backend_options: Mapping[str, Any] | None = None,
) -> Decimal:
    """The least a trial's stage may be capped at, in dollars.

    ``LEAST_STAGE_SECONDS`` and the time from the stop notice to the job's end at the ``market``'s price,
    and never less than what an on-demand attempt needs before the operator starts it (``least_cap_usd``):
    a spot trial may fall back to on-demand. The notice comes that long before the cap: the grace period, or
    the ``backend``'s own kill delay where it is longer (SageMaker's 120 s, a Kubernetes command's grace
    + 10 s: :func:`~costaware.training.attempt_effects.backend_stop_seconds`); sized with the grace alone,
    a cap there bought 50 s, less than the minute the operator starts an attempt for, and no trial ran.
    ``backend`` None (not known when the plan is sized): the longest of any backend. Only a plan with very
    short epochs (a demo) has caps this low.
    """
    stop = backend_stop_seconds(backend, grace_seconds, backend_options)
    at_price = Decimal(repr(LEAST_STAGE_SECONDS + stop)) * prices.usd_per_hour(market) / 3600
    return max(at_price, least_cap_usd(prices.on_demand_usd_per_hour, stop))


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
    backend: str | None = None,
    backend_options: Mapping[str, Any] | None = None,
) -> SpotPlan:
    """Size the study at the ``market``'s price, set its budget and reserve each planned warm-up at its cap.

    The budget is ``scope``, period ``total``, with both caps. Warm-up ``n`` is reserved under the holder
    of map index ``n`` of task ``warmup``, so the operator settles it with what its attempts were billed;
    it is reserved at ``plan.warmup_cap``, the ``max_usd`` its task is stopped at, so that no warm-up can
    take the study past its caps however long it runs.

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
        backend: The trials' compute backend, and ``backend_options`` its options: a stage's least cap
            (:func:`stage_floor_usd`); None: the longest stop of any backend.
        backend_options: See ``backend``.

    Raises:
        ConfigurationError: not even one warm-up and its promotion fit the caps.
        BudgetExceededError: a warm-up could not be reserved (another budget of the scope has less left).
    """
    price = prices.usd_per_hour(market)
    floor_usd = stage_floor_usd(prices, market, backend=backend, backend_options=backend_options)
    plan = plan_study(settings, usd_per_hour=price, gpus=prices.gpus, on=on, floor_usd=floor_usd)
    ledger.set_budget(
        scope, "total", str(settings.max_usd), cap_gpu_hours=str(settings.max_gpu_hours), actor=dag_id
    )
    for number in range(plan.trials):
        try:
            ledger.reserve(
                scope,
                f"{plan.warmup_cap.usd:.6f}",
                gpu_hours=f"{plan.warmup_cap.gpu_hours:.6f}",
                holder=reservation_holder(dag_id, run_id, "warmup", number),
                run_id=run_id,
                dag_id=dag_id,
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
    """Reserve each promotion's cap in the study's budget, in order; the decisions, refused ones stopped.

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
                    f"{decision.cap.usd:.6f}",
                    gpu_hours=f"{decision.cap.gpu_hours:.6f}",
                    holder=reservation_holder(dag_id, run_id, "full", index),
                    run_id=run_id,
                    dag_id=dag_id,
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
    """The warm-ups best first, one decision for each in that order, and what the study had spent.

    ``capped``: the trials with an attempt stopped at its cap whose warm-up did not finish (none ranked).
    """

    ranked: list[Warmup]
    decisions: list[PromotionDecision]
    spent: StageCost
    capped: tuple[int, ...] = ()

    @property
    def promoted(self) -> list[tuple[Warmup, PromotionDecision]]:
        """The warm-ups promoted (and reserved) with their decisions, best first.

        Map index ``i`` of task ``full`` is the i-th.
        """
        return [(w, d) for w, d in zip(self.ranked, self.decisions, strict=True) if d.promoted]

    def report(self, caps: StageCost) -> str:
        """What was spent, then each warm-up's loss and decision, as log lines."""
        lines = [
            f"spent so far ${self.spent.usd:.4f} and {self.spent.gpu_hours:.4f} GPU-hours "
            f"of ${caps.usd} and {caps.gpu_hours}"
        ]
        for warmup, decision in zip(self.ranked, self.decisions, strict=True):
            lines.append(f"trial {warmup.trial:>3}: holdout loss {warmup.loss:.3f} -> {decision.reason}")
        lines += [
            f"trial {n:>3}: an attempt was stopped at its cap; its warm-up did not finish"
            for n in self.capped
        ]
        return "\n".join(lines)

    def to_xcom(self) -> dict[str, Any]:
        """JSON-safe: the ranking (trial, loss, version), the trials promoted, and why the others were not."""
        return {
            "ranking": [{"trial": w.trial, "loss": w.loss, "version": w.version} for w in self.ranked],
            "promoted": [w.trial for w, _ in self.promoted],
            "pruned": [{"trial": d.trial, "reason": d.reason} for d in self.decisions if not d.promoted],
            "capped": list(self.capped),
        }


def capped_trials(rows: Sequence[Mapping[str, Any]], *, study: str, task_id: str) -> tuple[int, ...]:
    """The trials of ``study`` with an attempt of ``task_id`` that its cap stopped (cause ``max_usd``)."""
    return tuple(
        sorted(
            {
                int(row["tags"]["trial"])
                for row in rows
                if row["task_id"] == task_id
                and row.get("cause") == "max_usd"
                and (row.get("tags") or {}).get("study") == study
                and "trial" in row["tags"]
            }
        )
    )


def select_promotions(
    ledger: Ledger,
    results: Any,
    *,
    settings: SpotTuningSettings,
    study: str,
    scope: str,
    prices: TrialPrices,
    market: str,
    dag_id: str,
    run_id: str,
    loss_metric: str = "val_rmse",
    backend: str | None = None,
    backend_options: Mapping[str, Any] | None = None,
) -> Selection:
    """Rank the finished warm-ups, prune, and promote (reserving each at its cap) while the caps allow.

    Args:
        ledger: The cost ledger.
        results: The warm-up task's pulled XCom: results with ``metrics`` (``trial`` and ``loss_metric``)
            and ``version``; those without ``metrics`` did not finish.
        settings: The plan's settings.
        study: The study's ``study`` tag.
        scope: The study's budget scope.
        prices: A trial's prices and GPUs (GPU-hours are billed hours x GPUs).
        market: The market the study was sized at (``plan``'s): a promotion's cap is at least
            :func:`stage_floor_usd`, and its GPU-hours are what it buys at that market's price.
        dag_id: The DAG of the run.
        run_id: The run: the study's entries are the run's.
        loss_metric: The metric ranked on, lower is better.
        backend: The trials' compute backend, and ``backend_options`` its options, as ``open_study`` had
            them: a promotion's least cap.
        backend_options: See ``backend``.

    Raises:
        ValueError: no warm-up finished.
    """
    rows = ledger.entries(dag_id=dag_id, run_id=run_id)
    spend, gpu_count = spend_by_trial(rows, study=study), prices.gpus
    warmups = []
    for result in finished_results(results):
        number = int(result["metrics"]["trial"])
        billed = spend.get(str(number), TrialSpend())
        loss = _loss(result["metrics"][loss_metric])
        warmups.append(Warmup(number, loss, billed.usd, billed.hours * gpu_count, str(result["version"])))
    finished = {w.trial for w in warmups}
    capped = tuple(t for t in capped_trials(rows, study=study, task_id="warmup") if t not in finished)
    if not warmups:
        why = "no warm-up finished: nothing to rank (see the warmup task's logs)"
        if capped:
            were = "was" if len(capped) == 1 else "were"
            why += (
                f"; {len(capped)} {were} stopped at the cap of overrun_factor {settings.overrun_factor:g} "
                f"times the estimate of {settings.warmup_epochs} epoch(s) at epoch_minutes "
                f"{settings.epoch_minutes:g}: an epoch takes longer than epoch_minutes says, so raise "
                "epoch_minutes (or overrun_factor, where spot trials fell back to on-demand, which costs "
                "more an hour)"
            )
        raise ValueError(why)
    ranked, spent = rank(warmups), study_spent(spend, gpus=gpu_count)
    decisions = decide_promotions(
        ranked,
        keep=kept_count(len(ranked), settings.keep_fraction),
        spent=spent,
        settings=settings,
        floor_usd=stage_floor_usd(prices, market, backend=backend, backend_options=backend_options),
        gpu_hours_per_usd=gpu_hours_per_usd(prices.gpus, prices.usd_per_hour(market)),
    )
    decisions = reserve_promotions(ledger, scope, decisions, dag_id=dag_id, run_id=run_id)
    return Selection(ranked, decisions, spent, capped)
