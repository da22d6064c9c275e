"""What the tasks of a budget-capped study take from their rendered arguments (no Airflow).

:class:`StudyArguments` holds ``TuningStudyCreateOperator``'s arguments as Airflow rendered them (numbers and
mappings may arrive as text) and turns them into the study's :class:`~costaware.core.tuning.StudySpec`, with
the compute's price and GPUs from the bundled catalog when not given; :func:`resolve_trial_trainer` gives a
trial task its training function (not a built-in ``Trainer`` class, which ``training.trainers`` resolves).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.core.errors import ConfigurationError

if TYPE_CHECKING:
    from costaware.core.ledger import Market
    from costaware.core.tuning import RungSchedule, StudySpec, TuningCaps

#: The trials' compute when ``TuningStudyCreateOperator`` is given none (or a template of an unset param).
DEFAULT_INSTANCE_TYPE = "m5.large"
DEFAULT_REGION = "us-east-1"
DEFAULT_MARKET = "on_demand"


@dataclass(frozen=True, slots=True)
class StudyArguments:
    """The rendered arguments of ``TuningStudyCreateOperator`` (see there for each one)."""

    study_name: Any
    search_space: Any
    min_resource: Any
    max_resource: Any
    reduction_factor: Any
    max_rungs: int | None
    max_usd: Any
    max_trials: Any
    max_gpu_hours: Any
    max_wall_seconds: Any
    plateau_trials: Any
    plateau_min_delta: Any
    direction: str
    pruner: str
    sampler: str
    seed: Any
    scope: Any
    instance_type: str
    region: str
    market: str
    usd_per_hour: Any
    fallback_trial_seconds: Any
    safety_factor: Any
    slack_seconds: Any

    @classmethod
    def of(cls, holder: Any) -> StudyArguments:
        """The arguments kept as attributes of the same names on ``holder`` (the operator)."""
        return cls(**{f.name: getattr(holder, f.name) for f in fields(cls)})

    def check_written(self, written_out: Callable[[Any], bool]) -> None:
        """Check, when the DAG is parsed, each group of settings that ``written_out`` says has no template.

        The search space, the rungs, the caps, the scope and the compute (instance type, region, market,
        price) are checked as :meth:`spec` would check them.

        Raises:
            ConfigurationError: a value that is wrong; the message names it.
        """
        from costaware.core.tuning import parse_search_space
        from costaware.core.tuning.caps import positive_number

        def written(*values: Any) -> bool:
            return all(written_out(value) for value in values)

        if written(self.search_space):
            parse_search_space(parse_mapping(self.search_space, "search_space"))
        if written(self.min_resource, self.max_resource, self.reduction_factor):
            self._schedule()
        if written(*self._cap_arguments().values()):
            self._caps()
        # Written out, they were refused only when the plan task ran.
        if written(self.fallback_trial_seconds):
            positive_number(self.fallback_trial_seconds, "fallback_trial_seconds")
        if written(self.safety_factor) and positive_number(self.safety_factor, "safety_factor") < 1:
            raise ConfigurationError(
                f"safety_factor must be >= 1 (estimates are multiplied by it before reserving), got "
                f"{self.safety_factor!r}"
            )
        if written(self.instance_type, self.region, self.market, self.usd_per_hour):
            # A misspelt market or instance type ('spto', 'm5.larg') failed the plan only after the tasks
            # before it had run.
            self._compute()
        if written(self.scope):
            from costaware.core.budgets import Scope
            from costaware.core.tuning.study import check_study_scope

            tags = {str(k): str(v) for k, v in parse_mapping(self.scope, "scope").items()}
            # A value with a comma or '=' cannot be a budget scope, nor may a key be the study's own tag:
            # said now, not after the study exists.
            Scope.of(tags)
            check_study_scope(tags)

    def _schedule(self) -> RungSchedule:
        """The rungs from ``min_resource``, ``max_resource``, ``reduction_factor`` and ``max_rungs``."""
        from costaware.core.tuning import RungSchedule

        return RungSchedule.geometric(
            parse_int(self.min_resource, "min_resource"),
            parse_int(self.max_resource, "max_resource"),
            parse_int(self.reduction_factor, "reduction_factor"),
            self.max_rungs,
        )

    def _cap_arguments(self) -> dict[str, Any]:
        return {
            "max_usd": self.max_usd,
            "max_trials": self.max_trials,
            "max_gpu_hours": self.max_gpu_hours,
            "max_wall_seconds": self.max_wall_seconds,
            "plateau_trials": self.plateau_trials,
            "plateau_min_delta": self.plateau_min_delta,
        }

    def _caps(self) -> TuningCaps:
        """The study's stop rules (``TuningCaps.create`` checks each)."""
        from costaware.core.tuning import TuningCaps

        return TuningCaps.create(**self._cap_arguments())

    def spec(self) -> StudySpec:
        """The study's settings; the price and GPUs of the compute from the catalog when not given.

        Raises:
            ConfigurationError: a value that is missing or wrong; the message names it.
        """
        from costaware.core.tuning import StudySpec, parse_search_space
        from costaware.core.tuning.caps import positive_number

        instance_type, region, market, rate, gpus = self._compute()
        return StudySpec(
            study_name=str(self.study_name),
            direction=self.direction,
            search_space=parse_search_space(parse_mapping(self.search_space, "search_space")),
            schedule=self._schedule(),
            caps=self._caps(),
            pruner=self.pruner,
            sampler=self.sampler,
            seed=parse_int(self.seed, "seed"),
            scope={str(k): str(v) for k, v in parse_mapping(self.scope, "scope").items()},
            instance_type=instance_type,
            region=region,
            market=market.value,
            usd_per_hour=rate,
            gpus=gpus,
            fallback_trial_seconds=positive_number(self.fallback_trial_seconds, "fallback_trial_seconds"),
            safety_factor=positive_number(self.safety_factor, "safety_factor"),
            slack_seconds=positive_number(self.slack_seconds, "slack_seconds", allow_zero=True),
        )

    def _compute(self) -> tuple[str, str, Market, Decimal, Decimal]:
        """The trials' instance type, region, market, USD per hour (the catalog's unless given) and GPUs.

        Each not given (a template of an unset param renders "None", or "null" through | tojson, maybe with
        spaces) is its default, as usd_per_hour is the catalog's price: "None" failed the plan as "unknown
        market 'None'".
        """
        from costaware.adapters.price_files import bundled_catalog
        from costaware.core.given import blank
        from costaware.core.ledger import Market
        from costaware.core.money import parse_usd

        catalog = bundled_catalog()
        instance_type = str(blank(self.instance_type) or DEFAULT_INSTANCE_TYPE)
        region = str(blank(self.region) or DEFAULT_REGION)
        market = Market.parse(blank(self.market) or DEFAULT_MARKET)
        if blank(self.usd_per_hour) is None:
            rate = (
                catalog.spot_estimate_usd_per_hour(instance_type, region)
                if market is Market.SPOT
                else catalog.on_demand_usd_per_hour(instance_type, region)
            )
        else:
            rate = parse_usd(self.usd_per_hour, name="usd_per_hour")
        gpus = catalog.offer(instance_type, region).gpus if market is not Market.LOCAL else Decimal(0)
        return instance_type, region, market, rate, gpus


def resolve_trial_trainer(trainer: Callable[..., Any] | str) -> Callable[..., Any]:
    """The trainer callable itself, or imported from ``"package.module:function"``.

    The dotted form ``"package.module.function"`` still works, with a ``DeprecationWarning``.

    Raises:
        ConfigurationError: the string names no importable callable.
    """
    from costaware.importing import import_object

    if callable(trainer):
        return trainer
    found = import_object(str(trainer), what="trainer")
    if not callable(found):
        raise ConfigurationError(f"trainer {trainer!r} is not callable")
    return found  # type: ignore[no-any-return]


def parse_mapping(value: Any, name: str) -> Mapping[str, Any]:
    """A mapping, or the rendered text of a JSON object.

    Raises:
        ConfigurationError: anything else, naming ``name``.
    """
    if isinstance(value, str):  # a rendered template of a JSON object
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigurationError(
                f"{name} must be a mapping or a JSON object, got {value!r}{_as_mapping_hint(value, name)}"
            ) from e
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{name} must be a mapping, got {value!r}")
    return value


def _as_mapping_hint(text: str, name: str) -> str:
    """What to write instead of ``text``: a scope's ``key=value,...`` as its dict; else the forms taken.

    A spend gate's scope is written ``"project=churn"``; the same words here were refused with no way out.
    Only a scope is written so: ``search_space='lr=0.1'`` was told ``search_space={'lr': '0.1'}``, which is
    no search space either.
    """
    parts = [part.partition("=") for part in text.split(",")]
    pairs = [(key.strip(), val.strip()) for key, sep, val in parts if sep]
    if name != "scope" or len(pairs) != len(parts) or not all(key and val for key, val in pairs):
        return ": give a dict, or a template that renders a JSON object"
    values: dict[str, list[str]] = {}
    for key, val in pairs:
        values.setdefault(key, []).append(val)
    twice = {key: vals for key, vals in values.items() if len(vals) > 1}
    if twice:  # the dict would keep the last one without a word
        key, vals = next(iter(twice.items()))
        return (
            f": it gives {key!r} more than once ({', '.join(map(repr, vals))}), and a scope holds one value "
            "per tag name; write it as a dict with the one meant"
        )
    return f": write it as a dict, {name}={dict(pairs)!r}"


def parse_int(value: Any, name: str) -> int:
    """A whole number, or its rendered text.

    Raises:
        ConfigurationError: anything else, naming ``name``.
    """
    try:
        return int(str(value).strip())
    except ValueError as e:
        raise ConfigurationError(f"{name} must be a whole number, got {value!r}") from e
