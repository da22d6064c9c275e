"""Lines of ``airflow.cfg`` read into Airflow's real configuration for one test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def airflow_cfg(section: str, text: str) -> Iterator[None]:
    """``[section]`` with ``text`` as written in airflow.cfg (interpolation and all), removed afterwards."""
    import configparser

    from airflow.sdk import conf

    reader = configparser.RawConfigParser()
    reader.read_string(f"[{section}]\n{text}")
    names = list(reader[section])
    conf.read_string(f"[{section}]\n{text}")
    try:
        yield
    finally:
        for name in names:
            conf.remove_option(section, name)
