"""A run outcome's record carries a team's own job metrics, which are not part of its digest."""

from __future__ import annotations

from costaware.core.outcomes import ReproRecord


def test_job_metrics_ride_along_but_do_not_change_the_digest() -> None:
    plain = ReproRecord(
        data_fingerprint="", trainer="command", trainer_params={"command": ["python", "t.py"]}
    )
    assert "metrics" not in plain.to_json()  # records without metrics keep their shape
    measured = ReproRecord.from_json({**plain.to_json(), "metrics": {"rmse": 3.2, "steps": 6}})
    assert measured.metrics == {"rmse": 3.2, "steps": 6}
    assert ReproRecord.from_json(measured.to_json()) == measured
    assert measured.digest == plain.digest  # the same inputs trained it: what it scored is an output
