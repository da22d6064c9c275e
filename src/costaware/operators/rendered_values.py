"""Arguments as a template renders them: mappings, lists of names, zones, a spot window decision.

Each given as written in the DAG, as JSON text, or as the text of a rendered Python literal (a list of names
also as ``"a,b"``); the decision is the ``SpotWindowSensor``'s XCom. Read by ``RemoteTrainingOperator``'s
plan arguments and by the spot window sensor (its zones).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from costaware.adapters.compute.base import check_aws_zone
from costaware.core.errors import ConfigurationError
from costaware.core.given import blank
from costaware.operators.templating import is_template, literal_text

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

    from costaware.core.spot_decision import SpotDecision


def _literal(text: str, *, name: str, what: str) -> Any:
    """JSON text, or the text of a rendered Python literal (a template's ``{{ ... }}`` of a dict or list)."""
    try:
        return literal_text(text)
    except ValueError as e:
        raise ConfigurationError(f"{name} {text[:80]!r} is neither JSON nor {what}") from e


def parse_mapping(value: Any, *, name: str = "spot decision") -> dict[str, Any]:
    """A mapping given as a dict, JSON text, or the text of a rendered Python dict."""
    if blank(value) is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    parsed = _literal(str(value), name=name, what="a dict")
    if not isinstance(parsed, dict):
        raise ConfigurationError(f"{name} must be a mapping, got {type(parsed).__name__}")
    return parsed


#: The option of each backend that holds its job's environment variables.
JOB_ENV_OPTIONS = {"local": "env", "sagemaker": "environment"}

#: The options of each backend that are a dict of names to text: the job's environment, its tags (SageMaker,
#: Batch), its pods' node labels (Kubernetes).
TEXT_DICT_OPTIONS = {
    "local": ("env",),
    "sagemaker": ("environment", "tags"),
    "batch": ("tags",),
    "kubernetes": ("node_selector",),
}


def text_renderer(dag: Any, context: Mapping[str, Any]) -> Callable[[str], str]:
    """Render a template to text as Airflow does without ``render_template_as_native_obj``.

    In the DAG's Jinja environment built for text (its macros, filters, undefined and template search path),
    else Airflow's bare sandbox, as an operator without a DAG renders.
    """
    from airflow.sdk.definitions._internal.templater import SandboxedEnvironment
    from airflow.sdk.definitions.context import render_template_to_string

    # force_sandboxed: the text environment even where the DAG asks for native rendering.
    env = (
        dag.get_template_env(force_sandboxed=True) if dag is not None else SandboxedEnvironment(cache_size=0)
    )
    return lambda template: render_template_to_string(env.from_string(template), cast("Context", context))


def rendered_text_dicts(
    backend: str, written: Any, options: dict[str, Any], render_text: Callable[[str], str]
) -> dict[str, Any]:
    """``options`` (rendered) with the backend's :data:`TEXT_DICT_OPTIONS` read back as a template gave them.

    Without ``render_template_as_native_obj`` a template of a dict param (``"{{ params.job_env }}"``)
    renders to the dict's text, which the backends refuse as no dict: read as :func:`parse_mapping` reads
    whole options. Text that is no dict is left for the backend's check to name. With it, a value the DAG
    wrote as a template string (``{"EPOCHS": "{{ params.epochs }}"}``) may render to a number or bool: its
    template is rendered again as text, as without it (``str()`` of the number would turn ``'1.10'`` into
    ``'1.1'``). A number or bool written out, and None, are left for the check to refuse.

    Args:
        backend: The rendered backend name.
        written: ``backend_options`` as the DAG wrote it.
        options: ``backend_options`` rendered and parsed.
        render_text: Renders a template to text (:func:`text_renderer`).
    """
    if not isinstance(written, Mapping):
        return options
    read = dict(options)
    for name in TEXT_DICT_OPTIONS.get(backend, ()):
        if name in read:
            read[name] = _rendered_text_dict(written.get(name), read[name], render_text)
    return read


def _rendered_text_dict(written: Any, rendered: Any, render_text: Callable[[str], str]) -> Any:
    """One option of :func:`rendered_text_dicts`: read back, or as rendered for the check to name."""
    if isinstance(written, Mapping) and isinstance(rendered, Mapping):
        return {key: rendered_as_text(written.get(key), item, render_text) for key, item in rendered.items()}
    if not is_template(written) or not isinstance(rendered, str):
        return rendered
    try:
        parsed = literal_text(rendered)
    except ValueError:
        return rendered
    return parsed if isinstance(parsed, Mapping) else rendered


def rendered_as_text(written: Any, rendered: Any, render_text: Callable[[str], str]) -> Any:
    """``written`` rendered as text where it is a template string that natively rendered a number or bool.

    Else ``rendered`` as it is. Read by :func:`rendered_text_dicts` and for a command's arguments.
    """
    if is_template(written) and isinstance(rendered, bool | int | float | Decimal):
        return render_text(written)
    return rendered


def parse_names(value: Any, *, name: str) -> tuple[str, ...]:
    """Names given as a list, JSON list text, a rendered Python list, or ``"a,b"``; empty: ()."""
    if blank(value) is None:
        return ()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return parse_names(_literal(text, name=name, what="a list of names"), name=name)
        items: list[Any] = text.split(",")
    elif isinstance(value, Sequence):
        items = list(value)
    elif isinstance(value, set | frozenset):
        items = sorted(str(item) for item in value)  # no order of its own: a stable one
    else:
        raise ConfigurationError(f"{name} must be a list of names, got {type(value).__name__} {value!r}")
    names = tuple(dict.fromkeys(str(item).strip() for item in items))
    if not all(names):
        example = "'us-west-2'" if name == "allowed_regions" else "'us-west-2a'"
        raise ConfigurationError(f"{name} {value!r} has an empty name: list names like {example}")
    return names


def parse_zones(value: Any, *, check: Callable[[str], str] = check_aws_zone) -> tuple[str, ...]:
    """Zone names as :func:`parse_names` reads them, each passed to ``check`` (default: an AWS zone name).

    Raises:
        ConfigurationError: as :func:`parse_names`, or a name ``check`` refuses.
    """
    zones = parse_names(value, name="availability_zones")
    for zone in zones:
        check(zone)
    return zones


def parse_decision(value: Any) -> SpotDecision | None:
    """A spot window decision from XCom (a dict, JSON text or a rendered Python dict), or None."""
    from costaware.core.spot_decision import SpotDecision

    mapping = parse_mapping(value, name="spot decision")
    return SpotDecision.from_xcom(mapping) if mapping else None
