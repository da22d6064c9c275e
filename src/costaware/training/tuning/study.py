"""A study's lifecycle: create it with its settings and budget, load it, fail stale trials, summarize it.

The study lives in an Optuna RDB storage; costaware keeps its settings in the study's user attributes
and each trial's state in one trial user attribute (:data:`TRIAL_ATTR`).
"""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

import optuna

from costaware.core.errors import ConfigurationError
from costaware.core.ledger import utcnow
from costaware.core.money import format_usd
from costaware.core.tuning import (
    FinishedTrial,
    StudySpec,
    TrialState,
    TrialTiming,
    fall_adjusted_value,
    trial_costs,
)
from costaware.core.tuning.study import check_study_scope
from costaware.training.tuning.optuna_glue import TRIAL_ATTR, make_pruner, make_sampler, open_storage
from costaware.training.tuning.reservations import study_usage

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger

log = logging.getLogger(__name__)

SPEC_ATTR = "costaware_spec"
STARTED_ATTR = "costaware_started_at"
STOP_ATTR = "costaware_stop"


def create_study(
    storage_url: str, ledger: Ledger, spec: StudySpec, *, max_slots: int | None = None
) -> dict[str, Any]:
    """Create (or reopen) the study and set its ledger budget; returns the plan as JSON.

    Reopening a study with the same name keeps its trials: a second DAG run continues it. Its start time is
    this run's: ``max_wall_seconds`` bounds each DAG run (kept from the first run, a nightly study that
    continued found its wall clock spent at once, every night).
    The study's budget is ``max_usd`` (and ``max_gpu_hours``) over scope ``study=<name>`` plus the
    spec's tags, for all time; every trial reserves from it and from any wider budget that covers it.

    Args:
        storage_url: Optuna RDB storage URL of the study.
        ledger: The ledger that holds the study's budget.
        spec: The study's settings.
        max_slots: The most slots the plan may return (Airflow's ``[core] max_map_length``); None: any.

    Raises:
        ConfigurationError: before anything is written: a scope that names the study's own tags, a study
            of this name that asks another question, or more slots than ``max_slots``.
    """
    budget_scope = spec.budget_scope  # a scope no budget can have fails before the study is written
    check_study_scope(spec.scope)
    storage = open_storage(storage_url)
    # The study's trials as they are before anything is written (none for a new study): read once, for the
    # checks below and for the slots.
    try:
        study_id: int | None = storage.get_study_id_from_name(spec.study_name)
    except KeyError:
        study_id = None
    trials = storage.get_all_trials(study_id, deepcopy=False) if study_id is not None else []
    if study_id is not None:
        _check_same_question(storage, study_id, spec)
    started = len(started_trials(trials))
    slots = max(spec.caps.max_trials - started, 0)
    if max_slots is not None and slots > max_slots:
        raise ConfigurationError(
            f"max_trials={spec.caps.max_trials} leaves {slots} trial slots to map (the study has "
            f"{started} trials), more than Airflow maps from one task ([core] max_map_length="
            f"{max_slots}): lower max_trials, or raise max_map_length (on the API server, the DAG "
            "processor and the workers)"
        )
    study = optuna.create_study(
        study_name=spec.study_name,
        storage=storage,
        direction=(
            optuna.study.StudyDirection.MAXIMIZE
            if spec.direction == "maximize"
            else optuna.study.StudyDirection.MINIMIZE
        ),
        load_if_exists=True,
    )
    attrs = study.user_attrs
    study.set_user_attr(STARTED_ATTR, utcnow().isoformat())
    if attrs.get(STOP_ATTR):
        # Each DAG run judges the study again with its caps as they are now: a raised max_usd (or a budget
        # with room again) lets it go on; a study still over a cap stops at its first slot, saying why.
        log.info(
            "study %s had stopped (%s); this run judges it again with its current caps",
            spec.study_name,
            attrs[STOP_ATTR].get("message", attrs[STOP_ATTR].get("reason")),
        )
        study.set_user_attr(STOP_ATTR, None)
    study.set_user_attr(SPEC_ATTR, spec.to_json())
    ledger.set_budget(budget_scope, "total", spec.caps.max_usd, cap_gpu_hours=spec.caps.max_gpu_hours)
    # Numbered on from every trial the study has, failed ones too: a slot's number seeds its sampler.
    first_slot = len(trials)
    log.info(
        "study %s: %d trial slot(s), cap %s, rungs %s (about %.1f of %d per trial with successive halving)",
        spec.study_name,
        slots,
        format_usd(spec.caps.max_usd),
        spec.schedule.rungs,
        spec.schedule.expected_resource_per_trial(),
        spec.schedule.max_resource,
    )
    return {
        "study_name": spec.study_name,
        # Numbered on from the trials already started: a slot's number seeds its sampler, and a study
        # continued by a second DAG run proposed the same parameters again from slot 0.
        "slots": list(range(first_slot, first_slot + slots)),
        "trials_already_started": started,
        "rungs": list(spec.schedule.rungs),
        "max_usd": str(spec.caps.max_usd),
    }


def _check_same_question(storage: optuna.storages.BaseStorage, study_id: int, spec: StudySpec) -> None:
    """Refuse to continue the stored study if it asks another question: its direction or search space.

    Its trials would be ranked together with the new ones (Optuna keeps the first direction, the summary
    would take the new one). The caps, rungs and prices may change from run to run. Only the stored
    direction and space are read, as JSON: a stored spec that no longer passes today's checks is no reason.

    Raises:
        ConfigurationError: naming what differs, and what to do.
    """
    raw = storage.get_study_user_attrs(study_id).get(SPEC_ATTR)
    if raw is None:
        return  # not one of ours: load_study says so where it matters
    stored = json.loads(raw) if isinstance(raw, str) else raw
    differs = []
    if stored.get("direction") != spec.direction:
        differs.append(f"direction {stored.get('direction')} (now {spec.direction})")
    # Through JSON both sides: a tuple choice comes back from storage as a list.
    before = json.loads(json.dumps(stored.get("search_space", {})))
    now = json.loads(json.dumps({p.name: p.to_json() for p in spec.search_space}))
    if before != now:
        differs.append(f"search space {before} (now {now})")
    if differs:
        raise ConfigurationError(
            f"study {spec.study_name!r} exists with {' and '.join(differs)}: its trials would be ranked "
            "with these; give a new study_name (e.g. with {{ run_id }} in it), or the study's own settings"
        )


def load_study(
    storage_url: str,
    study_name: str,
    slot: int = 0,
    holder: str = "",
    *,
    attrs: dict[str, Any] | None = None,
) -> tuple[optuna.study.Study, StudySpec]:
    """The study with the sampler and pruner its stored settings name.

    Its sampler is seeded for this slot and holder (:func:`.optuna_glue.make_sampler`). ``attrs``: its user
    attributes as just read (:func:`stopped_before_load`), not read again.

    Raises:
        ConfigurationError: no study of that name in the storage, or it was not created by costaware.
    """
    storage = open_storage(storage_url)
    if attrs is None:
        _, attrs = _study_attrs(storage, study_name)
    spec = spec_of(study_name, attrs)
    study = optuna.load_study(
        study_name=study_name,
        storage=storage,
        sampler=make_sampler(spec, slot, holder),
        pruner=make_pruner(spec),
    )
    return study, spec


def stopped_before_load(
    storage_url: str, study_name: str, holder: str
) -> tuple[StudySpec, dict[str, Any]] | dict[str, Any]:
    """The study's settings and recorded stop, or (not stopped for ``holder``) its user attributes.

    The attributes go to :func:`load_study` (``attrs``), which then does not read them again. Read before
    the study and its trials are loaded: a slot that finds the study stopped outside Airflow records the
    time it took to decide, and a driver calling slots after the stop paid a whole load (every trial read,
    the stale ones failed) with each call, past the study's cap. A trial of ``holder`` still running is
    resumed by its retry, stopped or not: the study is loaded.

    Raises:
        ConfigurationError: as :func:`load_study`.
    """
    storage = open_storage(storage_url)
    study_id, attrs = _study_attrs(storage, study_name)
    stopped = attrs.get(STOP_ATTR)
    if not stopped:
        return attrs
    running = storage.get_all_trials(study_id, deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    if _runs_a_trial_of(running, holder):
        return attrs
    return spec_of(study_name, attrs), dict(stopped)


def stop_of_loaded(study: optuna.study.Study, holder: str) -> dict[str, Any] | None:
    """The recorded stop of a loaded study; None: not stopped, or stopped but resumed by ``holder``.

    As :func:`stopped_before_load` for a study the caller loaded: a slot given it looks for the stop before
    it holds its time (held first, a hold was written and settled for a study that was over).
    """
    stopped = study.user_attrs.get(STOP_ATTR)
    if not stopped:
        return None
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    return None if _runs_a_trial_of(running, holder) else dict(stopped)


def _runs_a_trial_of(running: list[optuna.trial.FrozenTrial], holder: str) -> bool:
    """Whether a trial among ``running`` is ``holder``'s (an earlier try's, which its retry resumes)."""
    return any(dict(t.user_attrs.get(TRIAL_ATTR) or {}).get("holder") == holder for t in running)


def _study_attrs(storage: optuna.storages.BaseStorage, study_name: str) -> tuple[int, dict[str, Any]]:
    """The study's id and user attributes.

    Raises:
        ConfigurationError: no study of that name in the storage.
    """
    try:
        study_id = storage.get_study_id_from_name(study_name)
    except KeyError as e:
        raise ConfigurationError(
            f"no tuning study named {study_name!r} in the study storage: the plan task "
            "(TuningStudyCreateOperator) creates it, so it has not run or it failed (its log says why)"
        ) from e
    return study_id, storage.get_study_user_attrs(study_id)


def spec_of(study_name: str, attrs: dict[str, Any]) -> StudySpec:
    """The study's settings from its user attributes (as :func:`stopped_before_load` read them).

    Raises:
        ConfigurationError: it was not created by costaware.
    """
    raw = attrs.get(SPEC_ATTR)
    if raw is None:
        raise ConfigurationError(
            f"study {study_name!r} has no costaware settings: create it with create_study"
        )
    return StudySpec.from_json(raw)


def started_trials(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """Trials that count against ``max_trials``: complete, pruned or still running."""
    states = (
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.PRUNED,
        optuna.trial.TrialState.RUNNING,
    )
    return [t for t in trials if t.state in states]


def finished_trials(trials: list[optuna.trial.FrozenTrial]) -> list[FinishedTrial]:
    """Finished trials in the order they finished, as the stop rules see them."""
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    done = [t for t in trials if t.state in states]
    done.sort(key=lambda t: (t.datetime_complete or utcnow(), t.number))
    return [
        FinishedTrial(TrialState(trial_info(t).get("state", "pruned")), t.value)
        if t.state == optuna.trial.TrialState.PRUNED
        else FinishedTrial(TrialState.PROMOTED, t.value)
        for t in done
    ]


def trial_timings(trials: list[optuna.trial.FrozenTrial]) -> list[TrialTiming]:
    """How long each started trial trained, for the next trial's cost estimate."""
    out = []
    for t in started_trials(trials):
        info = trial_info(t)
        if "train_seconds" in info:
            out.append(
                TrialTiming(
                    int(info["fidelity"]),
                    float(info["train_seconds"]),
                    float(info.get("overhead_seconds", 0.0)),
                    info.get("marginal_seconds_per_unit"),
                )
            )
    return out


def fail_stale_trials(
    study: optuna.study.Study,
    *,
    now: datetime | None = None,
    holder_prefix: str | None = None,
    trials: list[optuna.trial.FrozenTrial] | None = None,
) -> list[int]:
    """Mark failed the ``RUNNING`` trials whose lease expired (or held by ``holder_prefix`` and a map index).

    Returns the numbers of the trials failed here. Safe against another process doing the same.
    """
    now = now or utcnow()
    failed = []
    if trials is None:
        trials = study.get_trials(deepcopy=False)
    for trial in [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]:
        info = trial_info(trial)
        lease = info.get("lease_until")
        expired = lease is not None and datetime.fromisoformat(lease) <= now
        holder = str(info.get("holder", ""))
        # Only a map index may follow the prefix: a run id may hold '/', and the prefix of run 'r''s trial
        # task also begins the holders of run 'r/<trial task>', whose trials are still running.
        held = (
            holder_prefix is not None
            and holder.startswith(holder_prefix)
            and "/" not in holder[len(holder_prefix) :]
        )
        if not (expired or held):
            continue
        reason = "its lease expired (the worker was killed)" if expired else "its task ended without telling"
        try:
            info.update(state=TrialState.FAILED.value, decision=f"failed: {reason}")
            study._storage.set_trial_user_attr(trial._trial_id, TRIAL_ATTR, info)
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        except RuntimeError:  # another process finished it between our read and write
            continue
        log.warning("trial %d of study %s marked failed: %s", trial.number, study.study_name, reason)
        failed.append(trial.number)
    return failed


def trial_info(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """What costaware keeps on a trial (one user attribute: one write per update)."""
    return dict(trial.user_attrs.get(TRIAL_ATTR) or {})


def finish_failed(study: optuna.study.Study, trial: Any, reason: str, fidelity: int = 0) -> None:
    """Mark ``trial`` failed with ``reason`` (safe when another process finished it first)."""
    storage, trial_id = study._storage, trial._trial_id
    info = trial_info(storage.get_trial(trial_id))
    info.update(state=TrialState.FAILED.value, decision=f"failed: {reason}", fidelity=fidelity)
    storage.set_trial_user_attr(trial_id, TRIAL_ATTR, info)
    study.tell(trial.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)


def summarize_study(
    storage_url: str, ledger: Ledger, study_name: str, *, holder_prefix: str | None = None
) -> dict[str, Any]:
    """Close the study's loose ends and describe it: best trial, trials by state, stop reason, costs.

    Trials still ``RUNNING`` whose lease expired, or held by ``holder_prefix`` (this DAG run's slots, all
    finished by the time the summary runs), are marked failed first: none is left running.
    """
    study, spec = load_study(storage_url, study_name)
    failed_now = fail_stale_trials(study, holder_prefix=holder_prefix)
    trials = study.get_trials(deepcopy=False)
    rows = []
    for t in trials:
        info = trial_info(t)
        state = info.get("state") or (
            "failed" if t.state == optuna.trial.TrialState.FAIL else t.state.name.lower()
        )
        rows.append(
            {
                "number": t.number,
                "state": state,
                "fidelity": info.get("fidelity", t.last_step or 0),
                "value": t.value if t.value is not None else _last_value(t),
                "decision": info.get("decision", ""),
                "params": t.params,
            }
        )
    best = _best_trial(trials, spec.direction)
    report = ledger.report(group_by="trial", scope=spec.budget_scope)
    per_label = [(r.group, r.usd) for r in report if r.group != "(none)"]
    costs = trial_costs([(_state_of_label(label), usd) for label, usd in per_label])
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    stopped = study.user_attrs.get(STOP_ATTR)
    usage = study_usage(ledger, spec)
    return {
        "study_name": study_name,
        "best": best,
        "trials": sorted(rows, key=lambda r: r["number"]),
        "states": counts,
        "failed_now": failed_now,
        "stop": stopped,
        "spent_usd": str(costs.total_usd),
        "cap_usd": str(spec.caps.max_usd),
        "max_trials": spec.caps.max_trials,
        "reserved_usd": None if usage is None else str(usage.reserved_usd),
        "cost_per_trial_usd": None if costs.per_trial_usd is None else str(costs.per_trial_usd),
        "cost_per_successful_trial_usd": None
        if costs.per_successful_trial_usd is None
        else str(costs.per_successful_trial_usd),
        "successful_trials": costs.successful,
        "cost_by_trial": [{"trial": label, "usd": str(usd)} for label, usd in per_label],
    }


def _best_trial(trials: list[optuna.trial.FrozenTrial], direction: str) -> dict[str, Any] | None:
    """The completed trial that ranks first by its value less its fall from its best rung, or None.

    Trials rank as ``budgeted_search`` ranks them (:func:`~costaware.core.tuning.fall_adjusted_value`);
    ``value`` stays the winner's value at full fidelity, ``score`` is what it was ranked by.
    """
    scored = []
    for t in trials:
        if t.state != optuna.trial.TrialState.COMPLETE or t.value is None:
            continue
        # A slot reports every rung, the last at full fidelity, before it tells that value.
        rungs = [float(t.intermediate_values[step]) for step in sorted(t.intermediate_values)]
        score = fall_adjusted_value(rungs or [t.value], direction)
        if score is not None and not math.isnan(score):
            scored.append((score, t))
    if not scored:
        return None
    pick = max if direction == "maximize" else min
    score, chosen = pick(scored, key=lambda pair: pair[0])
    return {"number": chosen.number, "value": chosen.value, "score": score, "params": chosen.params}


def _last_value(trial: optuna.trial.FrozenTrial) -> float | None:
    step = trial.last_step
    return None if step is None else float(trial.intermediate_values[step])


def _state_of_label(label: str) -> TrialState:
    word = label.rpartition(" ")[2].partition("@")[0]
    try:
        return TrialState(word)
    except ValueError:
        return TrialState.FAILED
