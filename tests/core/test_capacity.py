from __future__ import annotations

import pytest

from costaware.core.policies.capacity import PRIOR_STAY, CapacityModel, run_state


def test_without_samples_the_prior_holds() -> None:
    model = CapacityModel.fit([])
    assert all(p == pytest.approx(PRIOR_STAY) for state in model.stay for p in state)
    assert model.mean_run_ticks(1) == pytest.approx(PRIOR_STAY / (1 - PRIOR_STAY))


def test_short_fresh_runs_and_long_old_runs_are_told_apart() -> None:
    # Capacity comes back for one tick twice, then holds for 30 ticks; the pattern repeats.
    samples = ([1, 0, 1, 0] + [1] * 30 + [0] * 4) * 20
    model = CapacityModel.fit([bool(x) for x in samples])
    assert model.stay[1][0] < 0.5  # fresh capacity is usually gone at once
    assert model.stay[1][5] > 0.9  # capacity that has held five ticks tends to hold
    assert model.mean_run_ticks(1, age=5) > 2 * model.mean_run_ticks(1, age=0)


def test_transition_rows_are_distributions() -> None:
    model = CapacityModel.fit([True, True, False, True, False, False, True] * 10, max_age=4)
    matrix = model.transition_matrix()
    assert len(matrix) == 8
    for row in matrix:
        assert sum(row) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("samples", "state"),
    [([], (1, 0)), ([True], (1, 0)), ([False, True, True, True], (1, 2)), ([True, False, False], (0, 1))],
)
def test_run_state(samples: list[bool], state: tuple[int, int]) -> None:
    assert run_state(samples) == state
