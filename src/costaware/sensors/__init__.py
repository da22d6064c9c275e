"""costaware sensors. Import them from their modules, e.g. ``from costaware.sensors.spend_cap import ...``.

``from costaware.sensors import SpendCapSensor`` also works; the module is loaded on first access.
"""

from __future__ import annotations

from typing import Any

_LAZY = {"SpendCapSensor": "costaware.sensors.spend_cap", "SpotWindowSensor": "costaware.sensors.spot_window"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'costaware.sensors' has no attribute {name!r}")
