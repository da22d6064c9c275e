"""Helpers every costaware operator shares; they live in :mod:`costaware.glue` (importable here too)."""

from __future__ import annotations

from costaware.glue import as_bool, default_store, run_identity, run_tags, storage_options

__all__ = ["as_bool", "default_store", "run_identity", "run_tags", "storage_options"]
