"""The warm-start benchmark's choice rule and its second data set (movies, shipped inside pydataset)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import warm_start


def test_the_choice_saves_the_most_compute_within_the_loss_margin() -> None:
    results = [
        ({"n": 0}, {"compute_ratio": 2.0, "auc_loss": 0.0}),
        ({"n": 1}, {"compute_ratio": 9.0, "auc_loss": warm_start.CHOOSE_MAX_AUC_LOSS + 0.001}),
        ({"n": 2}, {"compute_ratio": 5.0, "auc_loss": warm_start.CHOOSE_MAX_AUC_LOSS}),
    ]
    assert warm_start.choose(results) == 2


def test_without_a_candidate_within_the_margin_the_smallest_loss_wins() -> None:
    results = [
        ({"n": 0}, {"compute_ratio": 9.0, "auc_loss": 0.02}),
        ({"n": 1}, {"compute_ratio": 2.0, "auc_loss": 0.01}),
    ]
    assert warm_start.choose(results) == 1


def test_movies_are_read_from_the_package_without_unpacking_it_into_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    movies = warm_start.movies_table()

    assert len(movies) == 58_788
    assert set(warm_start.MOVIE_FEATURES) <= set(movies.columns)
    assert not (tmp_path / "home").exists()


def test_movie_batches_hold_the_history_then_one_year_each(tmp_path: Path) -> None:
    batches, split = warm_start.land_movies(tmp_path, quick=True)
    first_last, choose_last, eval_last = warm_start.MOVIE_PERIODS["quick"]

    assert [b.stem for b in batches] == [f"movies_{y}" for y in range(first_last, eval_last + 2)]
    assert batches[split].stem == f"movies_{choose_last + 1}"  # the first evaluate batch
    history = pd.read_parquet(batches[0])
    assert history["year"].max() == first_last
    assert set(pd.read_parquet(batches[1])["year"]) == {first_last + 1}
