"""Alert settings and notifier specs: what ``[costaware] alert_thresholds`` and ``alert_notifiers`` say.

The notifiers a ``{"class": ..., "kwargs": ...}`` list names are built, or refused with what to fix (a
misspelt module or class is suggested its closest name; anything but an Airflow notifier class is never
called).

Split from :mod:`costaware.notifications.budget`, which re-exports every public name.
"""

from __future__ import annotations

import difflib
import importlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from costaware.core.budget_forecast import DEFAULT_THRESHOLDS, every_threshold_refused, parse_thresholds
from costaware.core.errors import ConfigurationError
from costaware.importing import closest_public_name
from costaware.settings import option


def configured_thresholds() -> tuple[str, ...]:
    """``[costaware] alert_thresholds``, else the defaults."""
    raw = option("alert_thresholds")
    if not raw:
        return DEFAULT_THRESHOLDS
    try:
        return parse_thresholds(raw)
    except ConfigurationError as e:
        # Every budget without its own rule reads it: name where the value came from, and every bad item
        # with the good ones set aside (`5,50`: the defaults stood in for the 50% too, unsaid).
        raise ConfigurationError(
            f"[costaware] alert_thresholds ({raw!r}, or AIRFLOW__COSTAWARE__ALERT_THRESHOLDS): "
            f"{every_threshold_refused(raw, refused_whole='the setting') or e}"
        ) from e


def configured_notifiers() -> list[Any]:
    """Notifiers built from ``[costaware] alert_notifiers`` (a JSON list of ``{"class", "kwargs"}``).

    Raises:
        ConfigurationError: the setting is not such a list, or a class cannot be imported.
    """
    raw = option("alert_notifiers")
    return notifiers_from_spec(raw) if raw else []


def notifiers_from_spec(raw: str | Sequence[Mapping[str, Any]]) -> list[Any]:
    """Build notifiers from ``[{"class": "pkg.mod.Notifier", "kwargs": {...}}, ...]`` (JSON or a list)."""
    try:
        specs = json.loads(raw) if isinstance(raw, str) else list(raw)
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"alert_notifiers {raw!r} is not JSON: {e}") from e
    out = []
    for spec in specs:
        if not isinstance(spec, Mapping) or not isinstance(spec.get("class"), str):
            raise ConfigurationError(
                f"alert notifier {spec!r} is not {{'class': '<module.Class>', 'kwargs': {{...}}}}"
            )
        module, _, name = spec["class"].rpartition(".")
        try:
            imported = importlib.import_module(module)
        except (ImportError, ValueError) as e:
            # A module misspelt in a package that is here (smpt for smtp): no provider install would fix it.
            close = close_module_path(spec["class"], e.name if isinstance(e, ModuleNotFoundError) else None)
            fix = f"fix the module path (did you mean {close}?)" if close else "install its provider"
            raise ConfigurationError(
                f"alert notifier class {spec['class']!r} cannot be imported: {e}; {fix}"
            ) from e
        cls = getattr(imported, name, None)
        if cls is None:
            # The module is there: a misspelt class name, which no provider install would fix.
            close = close_class_path(imported, module, name)
            hint = f" (did you mean {close}?)" if close else ""
            raise ConfigurationError(
                f"alert notifier class {spec['class']!r}: module {module!r} has no {name!r}{hint}; "
                "fix the class name"
            )
        require_notifier_class(cls, spec["class"])
        kwargs = dict(spec.get("kwargs") or {})
        try:
            out.append(cls(**kwargs))
        except Exception as e:  # missing or unknown kwargs ("to" for SmtpNotifier): refused by name
            raise ConfigurationError(
                f"alert notifier {spec['class']!r} cannot be made with kwargs {sorted(kwargs)}: {e}"
            ) from e
    return out


def close_class_path(module: object, module_name: str, name: str) -> str | None:
    """The path of the public name in ``module`` closest to a misspelt class ``name``, or None.

    ``notifiers_from_spec`` (the workers) and ``costaware alerts set`` suggest it alike.
    """
    close = closest_public_name(module, name)
    return f"{module_name}.{close}" if close else None


def close_module_path(class_path: str, missing: str | None) -> str | None:
    """``class_path`` with its missing module ``missing`` replaced by the closest one of its package, or None.

    Only where that package is a regular one importable here (``airflow.providers.smtp.notifications``, for
    ``...notifications.smpt``) and the close module imports and has the class: a provider missing under the
    namespace ``airflow.providers``, or a module only a newer provider has, may be installed elsewhere.
    """
    import pkgutil

    package_name, _, last = (missing or "").rpartition(".")
    if not package_name or not class_path.startswith(f"{missing}."):
        return None
    try:
        package = importlib.import_module(package_name)
    except Exception:
        return None
    if getattr(package, "__file__", None) is None or not hasattr(package, "__path__"):  # a namespace
        return None
    close = difflib.get_close_matches(last, [m.name for m in pkgutil.iter_modules(package.__path__)], n=1)
    if not close:
        return None
    # Suggested only where that module has the class: ...notifications.sesv2 (a newer provider, maybe on the
    # workers) is no typo of ...notifications.ses, which has no SesV2Notifier.
    fixed_module, _, name = f"{package_name}.{close[0]}{class_path[len(missing or '') :]}".rpartition(".")
    try:
        module = importlib.import_module(fixed_module)
    except Exception:
        return None
    # The class exactly: a close one (SesNotifier for SesV2Notifier) is more likely another class than a typo.
    return f"{fixed_module}.{name}" if hasattr(module, name) else None


def require_notifier_class(cls: object, class_path: str) -> None:
    """Refuse anything but an Airflow notifier class: a ledger row names it, and workers would call it.

    ``os.system`` with ``{"command": ...}`` was called as a "notifier": whoever can write alert rules could
    run commands on every worker.

    Raises:
        ConfigurationError: ``cls`` is not a subclass of ``airflow.sdk.BaseNotifier``.
    """
    from airflow.sdk import BaseNotifier

    if not (isinstance(cls, type) and issubclass(cls, BaseNotifier)):
        raise ConfigurationError(
            f"alert notifier {class_path!r} is not an Airflow notifier class (a subclass of "
            "airflow.sdk.BaseNotifier, e.g. airflow.providers.slack.notifications.slack.SlackNotifier): not "
            "called"
        )
