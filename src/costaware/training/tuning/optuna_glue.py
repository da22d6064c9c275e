"""The Optuna side of tuning: the study storage, the sampler, the pruners and the search space.

Optuna is imported here at module level; this module needs the ``tuning`` extra.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Sequence
from typing import Any

from costaware.extras import require

require("tuning", needed_by=__name__)

import optuna  # noqa: E402  # after the check, so a missing extra names the pip line
from optuna.distributions import (  # noqa: E402
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from costaware.core.errors import ConfigurationError  # noqa: E402
from costaware.core.tuning import StudySpec, TrialState, promotable  # noqa: E402

#: The trial user attribute where the rung pruner writes its last decision and why.
PRUNING_ATTR = "costaware_pruning"
#: The trial user attribute where costaware keeps a trial's state (the pruner reads whether it was cut).
TRIAL_ATTR = "costaware"

_STORAGES: dict[str, optuna.storages.RDBStorage] = {}
_STORAGES_LOCK = threading.Lock()


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """An Optuna RDB storage at ``url``, opened once per process (SQLite waits for the write lock)."""
    key = url
    with _STORAGES_LOCK:
        if key in _STORAGES:
            return _STORAGES[key]
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 60}
    elif url.startswith("postgres"):
        if url.startswith(("postgres://", "postgresql://")):
            url = "postgresql+psycopg2://" + url.split("://", 1)[1]
        kwargs["connect_args"] = {"connect_timeout": 10}
    storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    with _STORAGES_LOCK:
        return _STORAGES.setdefault(key, storage)


def make_sampler(spec: StudySpec, slot: int, holder: str = "") -> optuna.samplers.BaseSampler:
    """The study's sampler, seeded per slot and holder, so parallel slots do not propose the same parameters.

    Two DAG runs that plan the same study at once number their slots alike, but their task instances
    (``holder``) differ. The same study, slot and holder give the same seed (a retry's).
    """
    seed = (spec.seed * 1_000_003 + slot) & 0xFFFF_FFFF  # numpy takes 0 <= seed < 2**32
    if holder:
        digest = hashlib.sha256(f"{spec.seed}/{slot}/{holder}".encode()).digest()
        seed = int.from_bytes(digest[:4], "big")
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def make_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """Successive halving at the study's rungs, Optuna's Hyperband over them, or no pruning."""
    if spec.pruner == "hyperband":
        return hyperband_pruner(spec.schedule.rungs, spec.schedule.reduction_factor)
    if spec.pruner == "none":
        return optuna.pruners.NopPruner()
    return RungSuccessiveHalvingPruner(spec.schedule.rungs, spec.schedule.reduction_factor, spec.direction)


def hyperband_pruner(rungs: Sequence[int], reduction_factor: int) -> optuna.pruners.HyperbandPruner:
    """Optuna's Hyperband over ``rungs``, with one bracket per rung where the ladder allows it.

    Optuna makes ``floor(log_eta(max / min_resource)) + 1`` brackets; bracket ``s`` first decides at
    ``min_resource * eta**s``. A ladder whose last step is shorter than ``eta`` (12/36/100 with ``eta`` 3)
    would give ``min_resource=12`` two brackets, both pruning at 36, and lose the bracket that Hyperband
    (Li et al., 2018) keeps for plain random search at full fidelity: the hedge for when short training
    ranks configurations wrongly (a high learning rate leads at 12 and 36 boosting rounds and loses at 100).
    ``min_resource`` is therefore the last rung over ``eta**(len(rungs) - 1)`` when that is below the first
    rung (11 here: decisions at 12 and 36 in the first bracket, at 36 in the second, none in the third),
    else the first rung, so every rung stays a decision point. Where the last rung is below
    ``eta**(len(rungs) - 1)`` (1/3/9/15 epochs at ``eta`` 3) no integer ``min_resource`` gives that
    bracket; :func:`costaware.training.search.budgeted_search` deals its own brackets for that reason.

    Raises:
        ConfigurationError: no rungs, or a reduction factor below 2.
    """
    if not rungs:
        raise ConfigurationError("hyperband_pruner needs at least one rung, got none")
    if reduction_factor < 2:
        raise ConfigurationError(f"reduction_factor must be >= 2, got {reduction_factor}")
    top = int(rungs[-1])
    min_resource = max(1, min(int(rungs[0]), top // reduction_factor ** (len(rungs) - 1)))
    return optuna.pruners.HyperbandPruner(
        min_resource=min_resource, max_resource=top, reduction_factor=reduction_factor
    )


class RungSuccessiveHalvingPruner(optuna.pruners.BasePruner):
    """Asynchronous successive halving at given rungs: the top ``1/eta`` at each rung move up.

    A decision to prune, and its reason, goes into the trial's user attribute :data:`PRUNING_ATTR`, where
    the trial runner reads it (:func:`pruning_note`): the pruner keeps no state between calls.

    Args:
        rungs: The study's rungs; the last one ends the trial, so nothing is pruned there.
        reduction_factor: Keep the top ``1/reduction_factor`` of the results at each rung (>= 2).
        direction: ``maximize`` or ``minimize``.

    Raises:
        ConfigurationError: no rungs, a reduction factor below 2 or an unknown direction.
    """

    def __init__(self, rungs: tuple[int, ...], reduction_factor: int, direction: str) -> None:
        if not rungs:
            raise ConfigurationError("RungSuccessiveHalvingPruner needs at least one rung, got none")
        if reduction_factor < 2:
            raise ConfigurationError(f"reduction_factor must be >= 2, got {reduction_factor}")
        if direction not in ("maximize", "minimize"):
            raise ConfigurationError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
        self.rungs = rungs[:-1]
        self.reduction_factor = reduction_factor
        self.direction = direction

    def prune(self, study: optuna.study.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step not in self.rungs:
            return False
        value = trial.intermediate_values[step]
        competing, stopped = _rung_results(study, step, exclude=trial.number)
        keep = promotable(value, competing, self.reduction_factor, self.direction, stopped=stopped)
        held_none = (
            f" ({len(stopped)} of them cut before the next rung for money or time, holding no place)"
            if stopped
            else ""
        )
        note = (
            f"{'promoted' if keep else 'pruned'} at {step}: {value:.4f} is "
            f"{'' if keep else 'not '}in the top 1/{self.reduction_factor} of "
            f"{len(competing) + len(stopped) + 1} result(s) at this rung{held_none}"
        )
        if not keep:  # one write, only for the decision that ends the trial (a rung costs no extra write)
            study._storage.set_trial_user_attr(trial._trial_id, PRUNING_ATTR, note)
        return not keep


def _rung_results(study: optuna.study.Study, step: int, *, exclude: int) -> tuple[list[float], list[float]]:
    """The results at rung ``step`` of every other trial that reached it (finished or still running).

    Split in two: of the trials that went on from it or may still go on, and of those cut right after it
    (for money or the study's wall clock), which cannot go on and so hold no place in its top fraction.
    """
    states = (
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.PRUNED,
        optuna.trial.TrialState.RUNNING,
    )
    going: list[float] = []
    stopped: list[float] = []
    for t in study.get_trials(deepcopy=False, states=states):
        if t.number == exclude or step not in t.intermediate_values:
            continue
        # Cut before the rung after this one: its last report is this rung's. Cut later, it went on from here.
        cut_here = (
            t.state == optuna.trial.TrialState.PRUNED
            and dict(t.user_attrs.get(TRIAL_ATTR) or {}).get("state") == TrialState.CUT.value
            and t.last_step == step
        )
        (stopped if cut_here else going).append(t.intermediate_values[step])
    return going, stopped


#: Where Optuna's own successive halving (each of Hyperband's brackets) records a trial's value at a rung it
#: passed, as a trial system attribute ``completed_rung_<n>``: the results later trials compete with there.
OPTUNA_RUNG_PREFIX = "completed_rung_"


def optuna_rung_records(study: optuna.study.Study, trial: optuna.trial.Trial) -> frozenset[str]:
    """The rungs Optuna's own successive halving recorded ``trial`` at (its ``completed_rung_<n>`` keys)."""
    attrs = study._storage.get_trial_system_attrs(trial._trial_id)
    return frozenset(key for key in attrs if key.startswith(OPTUNA_RUNG_PREFIX))


def give_up_rung_places(study: optuna.study.Study, trial: optuna.trial.Trial, rungs: Sequence[str]) -> None:
    """A running trial cut right after the rungs Optuna recorded it at (``rungs``) holds no place in them.

    Optuna's successive halving promotes a trial that is in the top ``1/eta`` of the values recorded at its
    rung, the cut one's among them: a trial cut for money with the best value there kept the next best from
    going on, as :class:`RungSuccessiveHalvingPruner` did before it told cut trials apart. Recorded as the
    worst value, the cut result still counts among the rung's results, but holds none of its places (the
    trial's reported values, which the summary reads, are left as they are).
    """
    worst = -math.inf if study.direction == optuna.study.StudyDirection.MAXIMIZE else math.inf
    for key in rungs:
        study._storage.set_trial_system_attr(trial._trial_id, key, worst)


def pruning_note(study: optuna.study.Study, trial: optuna.trial.Trial) -> str:
    """Why the pruner last decided as it did for ``trial`` (empty when it said nothing)."""
    return str(study._storage.get_trial_user_attrs(trial._trial_id).get(PRUNING_ATTR, ""))


def distributions(spec: StudySpec) -> dict[str, BaseDistribution]:
    """The study's search space as Optuna distributions (for ``study.ask``)."""
    out: dict[str, BaseDistribution] = {}
    for p in spec.search_space:
        if p.kind == "categorical":
            out[p.name] = CategoricalDistribution(list(p.choices))
        elif p.kind == "int":
            assert p.low is not None and p.high is not None
            out[p.name] = IntDistribution(int(p.low), int(p.high), log=p.log, step=int(p.step or 1))
        else:
            assert p.low is not None and p.high is not None
            out[p.name] = FloatDistribution(p.low, p.high, log=p.log, step=p.step)
    return out
