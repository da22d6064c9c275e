"""``RightSizeOperator``: the cheapest (instance type, market) that fits the job and meets its deadline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from costaware.core.errors import ConfigurationError
from costaware.core.given import not_given
from costaware.glue import DEFAULT_LEDGER_CONN_ID, airflow_errors, check_task_of_dag, parse_decimal, tags_for
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.hooks.ledger import CostLedgerHook

#: How many of the DAG's newest ledger entries are read for recorded runtimes.
HISTORY_LIMIT = 5000


class RightSizeOperator(WarnsOfDroppedDefaultArgs, BaseOperator):
    """Picks the instance type and market with the least expected cost for a job, from the price catalog.

    See docs/tuning.md.

    Expected cost is price x predicted runtime (+ the expected rework after spot interruptions). Candidates
    with less memory than ``memory_gib`` or an expected runtime past ``deadline_hours`` are rejected.
    Predicted runtime comes from this DAG's recorded runs of ``for_task_id`` in the ledger (same type: their
    median; other types: scaled by the throughput profile); before the first run, from ``fallback_hours``.
    Prices: the bundled snapshot (every EC2 type) with the price cache's fresh figures in its place
    (``costaware prices refresh``; see docs/prices.md).

    Returns (XCom) the choice: ``instance_type``, ``market``, ``region``, ``usd_per_hour``,
    ``expected_hours``, ``expected_usd``, ``runtime_basis``, ``reason``, ``runners_up`` (each with its
    costs) and ``rejected`` (each with why). Money is a string.

    Args:
        for_task_id: The task whose compute is being sized; its recorded runs predict the runtime (templated).
        memory_gib: Memory the job needs (templated).
        deadline_hours: Hours from now by which the job must finish; None for no deadline (templated).
        region: Region to run in (templated).
        fallback_hours: Runtime assumed before the task has a recorded run (templated).
        reference_type: Instance type ``fallback_hours`` was measured on (None: same on every type); a type
            the price catalog does not list is refused when the DAG is parsed.
        instance_types: Only consider these types (default: every type in the region).
        markets: Markets to consider: ``on_demand`` and/or ``spot``.
        min_gpus: GPUs the job needs; by count alone, NVIDIA GPUs (the price list also counts Inferentia,
            Trainium and Radeon chips, which a GPU training cannot use), of either architecture unless
            ``arch`` says (g5g's T4G runs on Graviton).
        gpu_model: GPU model the job needs (None: any NVIDIA one), in full or without its maker (``"T4"``
            for ``"NVIDIA T4"``); an accelerator by name (``"AWS Trainium"``) is taken when asked for.
        min_vcpus: vCPUs the job needs, a whole number (templated).
        arch: Processor architecture the job's image runs on: ``x86_64`` or ``arm64`` (None: any).
        throughput: Measured relative speeds by instance type; given, only the types listed are considered
            (without it, every type's speed comes from its vCPUs or GPUs, see below).
        throughput_basis: ``vcpus`` (CPU-bound job) or ``gpus``.
        throughput_exponent: How well the job scales with the basis (1.0: linearly, 0.0: not at all).
        checkpoint_minutes: How often the job checkpoints (for the cost of spot interruptions).
        history_dag_id: DAG whose runs are read (default: this DAG).
        sizing: ``declared`` (default): size for ``memory_gib`` and ``min_vcpus``; ``measured``: size for
            the peak memory and busy cores the cost listener measured in ``for_task_id``'s successful tries
            (plus ``memory_margin``), once it has ``min_measured_tries`` of them; declared until then.
        memory_margin: Headroom over the measured peak memory (0.25 = 25 %), and over the busy cores.
        min_measured_tries: Measured tries needed before ``sizing="measured"`` uses them.
        ledger_conn_id: Airflow connection of the cost ledger.
        **kwargs: ``BaseOperator`` arguments.
    """

    template_fields: Sequence[str] = (
        "for_task_id",
        "memory_gib",
        "min_vcpus",
        "deadline_hours",
        "region",
        "fallback_hours",
        "ledger_conn_id",
    )
    ui_color = "#e3f1fb"

    def __init__(
        self,
        *,
        for_task_id: str,
        memory_gib: float | str,
        deadline_hours: float | str | None = None,
        region: str = "us-east-1",
        fallback_hours: float | str | None = None,
        reference_type: str | None = None,
        instance_types: Sequence[str] | None = None,
        markets: Sequence[str] = ("on_demand", "spot"),
        min_gpus: float = 0,
        gpu_model: str | None = None,
        min_vcpus: int = 0,
        arch: str | None = None,
        throughput: Mapping[str, float] | None = None,
        throughput_basis: str = "vcpus",
        throughput_exponent: float = 0.8,
        checkpoint_minutes: float | None = None,
        history_dag_id: str | None = None,
        sizing: str = "declared",
        memory_margin: float = 0.25,
        min_measured_tries: int = 3,
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if sizing not in ("declared", "measured"):
            raise ValueError(f"sizing must be 'declared' or 'measured', got {sizing!r}")
        self.sizing = sizing
        self.memory_margin = memory_margin
        # Checked by its own name: the efficiency code's message named it min_tries.
        if (
            isinstance(min_measured_tries, bool)
            or not isinstance(min_measured_tries, int)
            or min_measured_tries < 1
        ):
            raise ConfigurationError(
                f"min_measured_tries must be a whole number of 1 or more, got {min_measured_tries!r}"
            )
        self.min_measured_tries = min_measured_tries
        self.for_task_id = for_task_id
        self.memory_gib = memory_gib
        self.deadline_hours = deadline_hours
        self.region = region
        self.fallback_hours = fallback_hours
        if reference_type is not None:
            _check_reference_type(reference_type)
        self.reference_type = reference_type
        self.instance_types = list(instance_types) if instance_types is not None else None
        self.markets = tuple(markets)
        self.min_gpus = min_gpus
        self.gpu_model = gpu_model
        self.min_vcpus = min_vcpus
        self.arch = arch
        self.throughput = dict(throughput or {})
        self.throughput_basis = throughput_basis
        self.throughput_exponent = throughput_exponent
        self.checkpoint_minutes = checkpoint_minutes
        self.history_dag_id = history_dag_id
        self.ledger_conn_id = ledger_conn_id

    @cached_property
    def hook(self) -> CostLedgerHook:
        from costaware.hooks.ledger import CostLedgerHook

        return CostLedgerHook(self.ledger_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        from costaware.adapters.price_source import current_catalog, discounts_from_settings
        from costaware.core.rightsize import (
            RightSizeJob,
            ThroughputProfile,
            observations_from_entries,
            right_size,
        )

        dag_id = self.history_dag_id or context["ti"].dag_id
        with airflow_errors():
            if not self.history_dag_id:  # "retrian" found no runs and was sized on fallback_hours alone
                check_task_of_dag(
                    self, self.for_task_id, argument="for_task_id", otherwise="no runs of it can size the job"
                )
            memory_gib, min_vcpus, sizing, tries = self._needs(dag_id)
            measured = str(sizing).startswith("measured")
            arch = self.arch or (self._measured_arch(tries) if measured else None)
            job = RightSizeJob(
                memory_gib=memory_gib,
                deadline_hours=_optional_float(self.deadline_hours, "deadline_hours"),
                min_gpus=parse_decimal(self.min_gpus, name="min_gpus"),
                gpu_model=self.gpu_model,
                min_vcpus=min_vcpus,
                fallback_hours=_optional_float(self.fallback_hours, "fallback_hours"),
                reference_type=self.reference_type,
                markets=tuple(self.markets),  # type: ignore[arg-type]  # parsed to Market by the job
                checkpoint_minutes=self.checkpoint_minutes,
                arch=arch,
            )
            profile = ThroughputProfile(self.throughput, self.throughput_basis, self.throughput_exponent)
            runs = observations_from_entries(
                self.hook.get_conn().entries(dag_id=dag_id, limit=HISTORY_LIMIT), self.for_task_id
            )
            catalog = current_catalog(self.hook.get_conn())  # the snapshot, updated by fresh cached prices
            decision = right_size(
                catalog,
                job,
                region=self.region,
                observations=runs,
                profile=profile,
                instance_types=self.instance_types,
                # On-demand candidates at the prices the ledger will bill: a family's savings plan can
                # make its on-demand type cheaper than spot elsewhere.
                discounts=discounts_from_settings(),
                team=tags_for(self.dag if self.has_dag() else None, dict(context.get("params") or {})).get(
                    "team"
                ),
            )
        self.log.info(
            "right-size for %s.%s (sized %s): %s", dag_id, self.for_task_id, sizing, decision.reason
        )
        if arch is None:
            self._warn_if_arm64(catalog, decision.choice.instance_type, decision.choice.region)
        for candidate in decision.runners_up:
            self.log.info(
                "  runner-up %s %s: $%s (%.2f h)",
                candidate.instance_type,
                candidate.market.value,
                candidate.expected_usd,
                candidate.expected_hours,
            )
        return {**decision.to_json(), "sizing": sizing}

    def _warn_if_arm64(self, catalog: Any, instance_type: str, region: str) -> None:
        """Say so when no ``arch`` was given and the choice is arm64: an x86_64 image does not start there."""
        from costaware.core.errors import PriceNotFoundError

        try:
            chosen_arch = catalog.offer(instance_type, region).arch
        except PriceNotFoundError:
            return
        if chosen_arch == "arm64":
            self.log.warning(
                "%s is arm64 (Graviton): the job's image and wheels must be built for arm64; pass "
                "arch='x86_64' to choose among x86_64 types only",
                instance_type,
            )

    def _measured_arch(self, tries: Sequence[Any]) -> str | None:
        """Sized on measured ``tries`` with no ``arch``: the architecture of the type the task last ran on.

        As the efficiency report keeps it: a task measured on x86_64 may not run on arm64 (its image, its
        wheels), and the cheapest fit was often a Graviton type.
        """
        from costaware.adapters.price_files import bundled_catalog
        from costaware.core.efficiency.measurement import recency
        from costaware.core.errors import PriceNotFoundError

        newest = max(tries, key=recency, default=None)
        if newest is None or not newest.instance_type or not newest.region:
            return None
        catalog = bundled_catalog()
        try:
            arch = catalog.offer(newest.instance_type, newest.region).arch or None
        except PriceNotFoundError:
            return None
        listed = list(self.instance_types or [])
        if arch and listed:
            # Types listed, none of this architecture (a move to Graviton, say): the list decides.
            archs = set()
            for name in listed:
                try:
                    archs.add(catalog.offer(name, newest.region).arch)
                except PriceNotFoundError:
                    continue
            if arch not in archs:
                return None
        if arch:
            self.log.info(
                "arch %s: the architecture of %s, which %s was measured on (pass arch= to choose another)",
                arch,
                newest.instance_type,
                self.for_task_id,
            )
        return arch

    def _needs(self, dag_id: str) -> tuple[Any, int, str, list[Any]]:
        """Memory and vCPUs to size for, how they were sized, and the measured tries (none when declared).

        Declared, or measured in the task's tries with ``sizing="measured"``.
        """
        declared = parse_decimal(self.memory_gib, name="memory_gib"), _whole_vcpus(self.min_vcpus)
        if self.sizing == "declared":
            return (*declared, "declared", [])
        from costaware.adapters.ledger.efficiency import measurements
        from costaware.core.efficiency import sized_needs

        tries = measurements(self.hook.get_conn(), dag_id=dag_id, task_id=self.for_task_id)
        memory_gib, vcpus, sizing = sized_needs(
            *declared,
            tries,
            min_tries=self.min_measured_tries,
            memory_margin=self.memory_margin,
            cpu_margin=self.memory_margin,
        )
        return memory_gib, vcpus, sizing, list(tries)


def _whole_vcpus(value: object) -> int:
    """``min_vcpus`` as a whole number >= 0 (2.5 was cut to 2, below the need; -3 was taken).

    Raises:
        ConfigurationError: anything else, named.
    """
    number = 0 if not_given(value) else parse_decimal(value, name="min_vcpus")
    if number < 0 or number != int(number):
        raise ConfigurationError(f"min_vcpus must be a whole number of vCPUs >= 0, got {value!r}")
    return int(number)


def _optional_float(value: object, name: str) -> float | None:
    """``value`` as a number, or None where not given (a template of an unset param: "None", "null")."""
    if not_given(value):
        return None
    return float(parse_decimal(value, name=name))


def _check_reference_type(reference_type: str) -> None:
    """Refuse a type the catalog does not list when the DAG is parsed.

    Checked only when no run is recorded, "m5.2xlarg" passed unnoticed until the first run sized on it.
    """
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.errors import PriceNotFoundError

    try:
        bundled_catalog().check_instance_type(reference_type)
    except PriceNotFoundError as e:
        raise ConfigurationError(
            f"reference_type {reference_type!r} is not in the price catalog ({e}): give the instance type "
            "fallback_hours was measured on, or leave reference_type unset (same runtime on every type)"
        ) from e
