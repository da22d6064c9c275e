"""``costaware alerts set``: a budget's own alert thresholds and notifiers, each notifier checked first.

A notifier the workers would refuse at every alert (a misspelt class or module, kwargs its constructor cannot
take, a template that reads what an alert does not have) is refused here; one whose provider is missing on
this machine only is kept, with a warning.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from typing import Any

from costaware.cli.arguments import open_ledger
from costaware.cli.commands.governance import current_actor

_BY_NAME = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def alerts_set(args: argparse.Namespace) -> int:
    """Set a budget's own alert thresholds and notifiers."""
    from costaware.adapters.ledger.governance import set_alert_rule
    from costaware.core.budgets import Period, Scope
    from costaware.core.errors import ConfigurationError
    from costaware.notifications.budget import (
        RULE_TEMPLATE_NAMES,
        require_notifier_class,
        rule_template_failure,
        sample_rule_context,
        unknown_alert_fields,
    )

    try:
        notifiers = None if args.notifiers is None else json.loads(args.notifiers)
    except json.JSONDecodeError as e:
        raise ConfigurationError(
            f"--notifiers {args.notifiers!r} is not JSON: give e.g. "
            '\'[{"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier", '
            '"kwargs": {"to": "a@b.c"}}]\''
        ) from e
    if notifiers is not None and not isinstance(notifiers, list):
        raise ConfigurationError(f"--notifiers must be a JSON list, got {args.notifiers!r}")
    label = f"{Scope.parse(args.scope)}/{Period.parse(args.period).value}"
    for spec in notifiers or []:
        found = (
            _importable(spec["class"])
            if isinstance(spec, dict) and isinstance(spec.get("class"), str)
            else None
        )
        built = None
        if found is not None:  # what cannot be imported here is warned about below; workers check it again
            require_notifier_class(found, spec["class"])
            _check_kwargs(found, spec)
            built = _built(found, spec)
        elif isinstance(spec, dict) and isinstance(spec.get("class"), str):
            _refuse_a_misspelt_class(spec["class"])
        # Rendered as the workers render it, without the task's context (its conn and var read secrets):
        # the one rule for both, so that what renders there (`{{ conn is defined }}`) is taken here.
        failure = rule_template_failure(spec, sample_rule_context(label), built)
        if failure:
            template, failed_with = failure
            raise ConfigurationError(
                f"notifier {spec['class']!r}: its template {template!r} fails to render ({failed_with}) with "
                f"what a budget's own notifiers see: use only {list(RULE_TEMPLATE_NAMES)} (e.g. "
                "{{ costaware_alert.message }}), or set the notifier in [costaware] alert_notifiers, whose "
                "templates get the task's context"
            )
        for template, field, close in unknown_alert_fields(spec):
            hint = f"did you mean {close!r}? " if close else ""
            raise ConfigurationError(
                f"notifier {spec['class']!r}: its template {template!r} reads costaware_alert.{field}, which "
                f"an alert does not have, and would send it empty: {hint}an alert has "
                f"{', '.join(sample_rule_context(label)['costaware_alert'])}"
            )
    rule = set_alert_rule(
        # A rule needs its budget, so a ledger that does not exist (a mistyped URL) is not made for it.
        open_ledger(args, reading=True),
        label,
        thresholds=args.thresholds,
        notifiers=notifiers,
        actor=current_actor(),
    )
    thresholds = ", ".join(rule.thresholds) if rule.thresholds else "the [costaware] defaults"
    targets = f"{len(rule.notifiers)} notifier(s)" if rule.notifiers else "the [costaware] notifiers"
    print(f"alerts of budget '{label}': {thresholds}; {targets}")
    for spec in notifiers or []:
        why = _not_importable(str(spec["class"]))
        if why:  # the workers may have it where this machine does not: a warning, not a refusal
            print(
                f"costaware: warning: notifier class {spec['class']!r} cannot be imported here ({why}); "
                "an alert fails to send unless the workers can import it",
                file=sys.stderr,
            )
    return 0


def _built(cls: Any, spec: dict[str, Any]) -> Any:
    """The notifier ``spec`` names, built to render its templates; None where its constructor refuses here."""
    try:
        return cls(**(spec.get("kwargs") or {}))
    except Exception:  # e.g. a connection this machine lacks: its strings are rendered without it
        return None


def _check_kwargs(cls: object, spec: dict[str, Any]) -> None:
    """Refuse kwargs the notifier's constructor cannot take: every alert of the budget failed to send.

    Raises:
        ConfigurationError: a required argument is missing or an unknown one is given.
    """
    from costaware.core.errors import ConfigurationError

    kwargs = spec.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigurationError(f"notifier {spec['class']!r}: kwargs must be an object, got {kwargs!r}")
    try:
        inspect.signature(cls).bind(**kwargs)  # type: ignore[arg-type]
    except TypeError as e:  # said with what to write: "kwargs []" alone left the fix to guess
        takes = f" (it takes {', '.join(_kwargs_to_give(cls))})" if isinstance(cls, type) else ""
        raise ConfigurationError(
            f"notifier {spec['class']!r} cannot take kwargs {sorted(kwargs)}: {e}: fix its kwargs{takes}"
        ) from e
    except ValueError:  # no signature to read (a C class): the workers say it when they build it
        return
    # SmtpNotifier's **kwargs go on to BaseNotifier, which takes none of them: `subjet` bound above, and the
    # worker refused the rule at every alert ("unexpected keyword argument 'subjet'").
    if not isinstance(cls, type):  # refused as no notifier class before this
        return
    unknown = _kwargs_no_init_takes(cls, kwargs)
    if not unknown:
        return
    try:
        cls(**kwargs)
    except TypeError as e:
        # Only Python's own refusal names a kwarg nobody takes; a notifier's own check ("priority must be an
        # int") took the name, and its text says what to fix.
        if "unexpected keyword argument" not in str(e):
            raise ConfigurationError(
                f"notifier {spec['class']!r} refuses kwargs {sorted(kwargs)}: {e}: fix its kwargs"
            ) from e
    except Exception:  # it got past the arguments (a connection missing here): they were taken
        return
    else:  # a notifier of its own that keeps its **kwargs: they were taken
        return
    from costaware.core.errors import did_you_mean

    known = _kwargs_to_give(cls)
    hints = [f"{name!r}{did_you_mean(name, known)}" for name in unknown]
    raise ConfigurationError(
        f"notifier {spec['class']!r} takes no kwarg {', '.join(hints)}: fix the name in its kwargs "
        f"(it takes {', '.join(known)})"
    )


def _init_parameter_names(cls: type) -> list[str]:
    """The keyword arguments the constructors along ``cls``'s bases take, as ``**kwargs`` passes them on."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            parameters = list(inspect.signature(init).parameters.values())[1:]  # without self
        except (TypeError, ValueError):
            break
        names += [p.name for p in parameters if p.kind in _BY_NAME and p.name not in names]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            break
    return names


def _kwargs_to_give(cls: type) -> list[str]:
    """The kwargs to name in a rule's spec: ``context`` is the task's, passed in by Airflow, not set here."""
    return [name for name in _init_parameter_names(cls) if name != "context"]


def _kwargs_no_init_takes(cls: type, kwargs: dict[str, Any]) -> list[str]:
    """The kwargs that no constructor along ``cls``'s bases names, where its ``**kwargs`` pass them on."""
    taken = set(_init_parameter_names(cls))
    return sorted(name for name in kwargs if name not in taken)


def _refuse_a_misspelt_class(class_path: str) -> None:
    """Refuse a class its module, importable here, does not have: a typo, not a provider missing here.

    ``SmtpNotifer`` was kept with a warning, and every alert of the budget then failed to send.

    Raises:
        ConfigurationError: the module imports and has no such name.
    """
    from costaware.core.errors import ConfigurationError
    from costaware.notifications.budget import close_class_path

    module_name, _, name = class_path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        _refuse_a_misspelt_module(class_path, e.name or "")
        return  # not installed here: the workers may have it, said as a warning later
    except Exception:  # said as a warning later
        return
    if hasattr(module, name):
        return
    close = close_class_path(module, module_name, name)
    hint = f": did you mean {close}?" if close else ""
    raise ConfigurationError(f"notifier class {class_path!r}: module {module_name!r} has no {name!r}{hint}")


def _refuse_a_misspelt_module(class_path: str, missing: str) -> None:
    """Refuse a module missing from a package installed here that has one of a close name: a typo.

    ``...smtp.notifications.smpt.SmtpNotifier`` was kept with a warning, and every alert of the budget then
    failed to send. A provider missing here (``airflow.providers.slack``) may be on the workers: a warning.

    Raises:
        ConfigurationError: the missing module's package is here and has a module of a close name.
    """
    from costaware.core.errors import ConfigurationError
    from costaware.notifications.budget import close_module_path

    fixed = close_module_path(class_path, missing)
    if fixed:
        package_name, _, last = missing.rpartition(".")
        raise ConfigurationError(
            f"notifier class {class_path!r}: package {package_name!r} has no module {last!r}: did you mean "
            f"{fixed}?"
        )


def _importable(class_path: str) -> object | None:
    """What ``class_path`` names, where it can be imported here (else None)."""
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except Exception:  # said by _not_importable
        return None


def _not_importable(class_path: str) -> str | None:
    """Why ``class_path`` cannot be imported in this environment, or None when it can."""
    module, _, name = class_path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except Exception as e:  # a module that fails to import in any way: said, not raised
        return f"{type(e).__name__}: {e}"
    return None if found is not None else f"module {module!r} has no {name!r}"
