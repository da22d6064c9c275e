"""Where costaware errors become Airflow task outcomes: :func:`costaware.glue.airflow_errors`."""

from __future__ import annotations

from costaware.glue import airflow_errors

__all__ = ["airflow_errors"]
