"""Where a task's tries run (:func:`compute_of`) and what they cost (:func:`charge_of`), as they are billed.

The cost listener (``plugins/try_cost.py``) prices every finished try with these; an operator that checks a
price before paying for training (``WarmStartRetrainOperator``) calls the same two, so that the check and
the bill cannot disagree (operators never import ``plugins/``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from costaware.core.errors import CostawareError, PriceNotFoundError
from costaware.core.given import not_given
from costaware.core.money import parse_usd
from costaware.settings import option, worker_market

if TYPE_CHECKING:
    from costaware.core.pricing import ComputeCharge

log = logging.getLogger(__name__)

COMPUTE_FIELDS = ("instance_type", "region", "market", "usd_per_hour")
#: Operator attributes (or ``costaware_compute`` param keys) an on-premises task gives for its emissions,
#: read by the utilization listener (``plugins/utilization.py``).
CARBON_FIELDS = ("power_kw", "grid_zone")


def stripped(value: Any) -> Any:
    """A given value as it is meant: "g5.xlarge " (a space from a template or a form) was no known type."""
    return value.strip() if isinstance(value, str) else value


PRICING_PARAM = "costaware_compute"
"""The task param that says where any operator's tries run, e.g. ``{"instance_type": "g5.xlarge"}``."""


def compute_of(task: Any) -> dict[str, Any]:
    """Where a task's tries run, as the listener prices them.

    In order, each field from the first that gives it:

    1. the operator's own compute arguments, for operators whose work runs where those arguments say
       (a class attribute ``cost_compute_from_arguments = True``: costaware's in-worker training and
       feature operators). Sensors and operators that merely *name* an instance (the spend gate, the
       spot window, a remote job's waiting task) run on the worker and are priced as such;
    2. the task's own ``costaware_compute`` param (a dict of ``instance_type``, ``region``, ``market``,
       ``usd_per_hour``), read from the task's definition, never from a run's conf, so that a trigger
       cannot reprice other tasks;
    3. the ``[costaware] worker_*`` settings (``m5.large`` on-demand in ``us-east-1`` unless set).

    What a running try tells :func:`costaware.glue.annotate_task` wins over all of these.
    """
    declared: dict[str, Any] = {}
    try:
        param = (getattr(task, "params", None) or {}).get(PRICING_PARAM)
    except Exception:  # a task's params are a convenience here; the worker defaults still apply
        param = None
    if isinstance(param, Mapping):
        declared.update({k: stripped(param[k]) for k in COMPUTE_FIELDS if not not_given(param.get(k))})
        known = (*COMPUTE_FIELDS, *CARBON_FIELDS)  # the carbon ones are read by the utilization listener
        unknown = sorted(str(k) for k in param if k not in known)
        if unknown:  # {"markt": "spot"} priced the try on-demand without a word
            log.error(
                "costaware: task %s: %s keys %s are not read (use %s): the try is priced without them",
                getattr(task, "task_id", "?"),
                PRICING_PARAM,
                unknown,
                ", ".join(known),
            )
    if getattr(type(task), "cost_compute_from_arguments", False):
        for name in COMPUTE_FIELDS:
            value = getattr(task, name, None)
            if not not_given(value):
                declared[name] = stripped(value)
    rate = declared.get("usd_per_hour")
    if rate is not None:
        try:
            # As the operators parse it: "$0.192" crashed here with Decimal() and the try's entry was lost.
            rate = parse_usd(rate, name="usd_per_hour")
        except CostawareError as e:
            # The try is still billed, at the catalog price of its instance: never lost for a bad rate.
            log.warning("ignoring the task's usd_per_hour (%s): the try is priced from the catalog", e)
            rate = None
    market = str(declared.get("market") or _worker_market())
    return {
        "instance_type": str(declared.get("instance_type") or option("worker_instance_type")),
        "region": str(declared.get("region") or option("worker_region")),
        "market": market,
        "usd_per_hour": rate,
    }


def _worker_market() -> str:
    """``[costaware] worker_market``; a value that is no market ('spto') is said with each try it prices."""
    market, problems = worker_market(option("worker_market"))
    for problem in problems:
        log.error("costaware: %s", problem)
    return market


def charge_of(
    compute: Mapping[str, Any],
    tags: Mapping[str, str],
    ledger_conn_id: str,
    *,
    seconds: float,
    in_task_process: bool = True,
) -> ComputeCharge:
    """What ``seconds`` on ``compute`` (a :func:`compute_of` dict) cost, as the try's ledger entry says.

    Raises:
        CostawareError: the compute cannot be priced (the listener then records the try at $0, unpriced);
            the message names the value and what to do.
    """
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.pricing import price_compute

    listed = _list_price(compute, tags, ledger_conn_id, in_task_process=in_task_process)
    try:
        return price_compute(bundled_catalog(), seconds=seconds, **compute, **listed)
    except PriceNotFoundError as e:
        if "on_demand_usd_per_hour" not in listed or str(compute["market"]).strip().lower() != "spot":
            raise
        # The price cache has its on-demand price (imported or refreshed), but a spot try is priced at the
        # catalog's typical saving, which the bundled catalog has for no such type.
        raise PriceNotFoundError(
            f"{compute['instance_type']!r} in {compute['region']!r} has an on-demand price "
            f"({listed['on_demand_source']}), but a spot try is priced at the bundled catalog's typical spot "
            "saving, which it has not for that type: give usd_per_hour (the spot rate), or run it on_demand"
        ) from e


def unpriced(
    error: CostawareError, compute: Mapping[str, Any], *, task_id: str, so: str, source: str = ""
) -> CostawareError:
    """The refusal of a task whose ``compute`` :func:`charge_of` could not price (``error``), one wording.

    A :class:`PriceNotFoundError` stays one; anything else is a configuration error. ``so``: what would go
    wrong were the task run anyway ("its cost would be recorded at $0"); ``source``: where the compute came
    from, after its market ("; from its instance_type, ...").
    """
    from costaware.core.errors import ConfigurationError

    kind = PriceNotFoundError if isinstance(error, PriceNotFoundError) else ConfigurationError
    return kind(
        f"task {task_id!r} on {compute['instance_type']!r} in {compute['region']!r} ({compute['market']}"
        f"{source}) cannot be priced, so {so}: {error}"
    )


def _list_price(
    compute: Mapping[str, Any], tags: Mapping[str, str], ledger_conn_id: str, *, in_task_process: bool = True
) -> dict[str, Any]:
    """On-demand figure (price cache -> live -> snapshot) and discount, as ``price_compute`` arguments.

    The price cache is the one in the ledger the task writes to (``ledger_conn_id``), where a team imported
    its prices (``costaware prices import``), not the default ledger's. Outside the task's process that
    ledger is opened only where the machine sees it: the hook's fallback created an empty SQLite file, which
    the killed try's own entry then went to instead of the spool.
    """
    from costaware.adapters.price_source import configured_prices, discounts_from_settings
    from costaware.core.discounts import discount_for
    from costaware.hooks.ledger import CostLedgerHook

    if compute["market"] == "local" or compute["usd_per_hour"] is not None:
        return {}
    instance_type = str(compute["instance_type"])
    extra: dict[str, Any] = {}
    try:
        extra["discount"] = discount_for(discounts_from_settings(), instance_type, tags)
    except Exception as e:  # a bad setting must not lose the entry: priced without the discount
        log.error("costaware: [costaware] discounts ignored: %s", e)
    try:
        if in_task_process:
            ledger = CostLedgerHook(ledger_conn_id=ledger_conn_id).get_conn()
        else:
            from costaware.ledger_spool import workers_ledger

            ledger = workers_ledger(ledger_conn_id)
        prices = configured_prices(ledger)
        service = "sagemaker" if instance_type.startswith("ml.") else "ec2"
        figure = prices.figure(instance_type, str(compute["region"]), service)
    except Exception as e:  # no figure anywhere, or the cache is unreachable: the snapshot's rules apply
        log.warning("costaware: on-demand price of %s from the price sources: %s", instance_type, e)
        return extra
    return {**extra, "on_demand_usd_per_hour": figure.usd_per_hour, "on_demand_source": figure.price_source}
