"""The provider contract: get_provider_info names every operator, sensor, trigger and hook module, the
connection types and every ``[costaware]`` option the code reads, and validates against Airflow's schema."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import re
from pathlib import Path

import airflow
import jsonschema
import pytest
from airflow.sdk import BaseHook, BaseOperator
from airflow.triggers.base import BaseTrigger

import costaware
from costaware.get_provider_info import get_provider_info

SRC = Path(costaware.__file__).parent
KINDS = {"operators": BaseOperator, "sensors": BaseOperator, "triggers": BaseTrigger, "hooks": BaseHook}


def _listed(section: str) -> set[str]:
    return {m for group in get_provider_info().get(section, []) for m in group["python-modules"]}


def _defining_modules(package: str, base: type) -> set[str]:
    """Modules of ``costaware.<package>`` that define (not just import) a subclass of ``base``."""
    found = set()
    pkg = importlib.import_module(f"costaware.{package}")
    for info in pkgutil.walk_packages(pkg.__path__, f"{pkg.__name__}."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == info.name and issubclass(obj, base) and obj is not base:
                found.add(info.name)
    return found


@pytest.mark.parametrize("section", sorted(KINDS))
def test_every_module_that_defines_a_class_is_listed(section: str) -> None:
    defined = _defining_modules(section, KINDS[section])
    assert defined, f"no {section} found: the walk is broken"
    if section == "operators":  # sensors are operators too; they are listed under "sensors"
        defined -= _listed("sensors")
    missing = defined - _listed(section)
    assert not missing, f"add {sorted(missing)} to get_provider_info()[{section!r}]"


@pytest.mark.parametrize("section", sorted(KINDS))
def test_every_listed_module_imports(section: str) -> None:
    for name in _listed(section):
        importlib.import_module(name)


def test_connection_types_name_real_hooks() -> None:
    types = get_provider_info()["connection-types"]
    assert types
    for entry in types:
        module, _, cls = entry["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), cls)
        assert hook.conn_type == entry["connection-type"]
        assert module in _listed("hooks")


def test_provider_info_is_valid_for_airflow() -> None:
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def _options_read_by_the_code() -> dict[str, str]:
    """``[costaware]`` options the source reads, with the default each call gives.

    Two ways to read one: ``setting("name", "default")`` from costaware.glue (any alias ending in
    ``setting``) or ``conf.get*("costaware", "name", fallback=...)``.
    """
    options: dict[str, str] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
            fallback = next((k.value for k in node.keywords if k.arg == "fallback"), None)
            if name.endswith("setting") and len(args) == 2 and isinstance(args[0], str):
                options[args[0]] = str(args[1])
            elif name.startswith("get") and len(args) >= 2 and args[0] == "costaware" and args[1]:
                # A generic accessor passing a variable name is covered at its callers: `_setting("x", ...)`.
                default = fallback.value if isinstance(fallback, ast.Constant) else None
                options[str(args[1])] = str(default)
    return options


def test_every_config_option_is_documented_with_its_default() -> None:
    read = _options_read_by_the_code()
    assert {"worker_instance_type", "worker_region", "worker_market"} <= set(read), read
    documented = get_provider_info()["config"]["costaware"]["options"]
    missing = sorted(set(read) - set(documented))
    assert not missing, f"document {missing} in get_provider_info()['config']['costaware']['options']"
    for name, default in read.items():
        option = documented[name]
        assert option["default"] == default, f"{name}: the code's default is {default!r}"
        assert option["description"] and option["example"] not in (None, "")
        assert option["type"] in ("string", "boolean", "integer", "float")
    stale = sorted(set(documented) - set(read))
    assert not stale, f"{stale} are documented but no code reads them"


ROOT = SRC.parents[1]


@pytest.mark.parametrize("section", ["operators", "sensors", "triggers"])
def test_every_public_class_links_its_docs_page(section: str) -> None:
    missing = []
    for name in _listed(section):
        module = importlib.import_module(name)
        for cls_name, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ != name or cls_name.startswith("_") or not issubclass(obj, KINDS[section]):
                continue
            pages = re.findall(r"See (docs/[\w-]+\.md)", obj.__doc__ or "")
            if not pages:
                missing.append(f"{name}.{cls_name}: no 'See docs/<page>.md' line")
            for page in pages:
                if not (ROOT / page).exists():
                    missing.append(f"{name}.{cls_name}: {page} does not exist")
    assert not missing, "\n".join(missing)


def test_readme_is_a_short_index_that_starts_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text().splitlines()
    assert len(readme) < 250
    assert readme[:3] == ["```bash", readme[1], readme[2]]
    assert readme[1].startswith("make demo") and readme[2].startswith("make test")
    for page in re.findall(r"\]\((docs/[\w-]+\.md)\)", "\n".join(readme)):
        assert (ROOT / page).exists(), page


def test_the_costaware_ledger_connection_type_takes_postgres_fields() -> None:
    from costaware.adapters.ledger_url import url_from_connection_fields
    from costaware.core.errors import ConfigurationError

    url = url_from_connection_fields(
        "costaware_ledger", "costaware_ledger", "db", "u", "p", 5432, "led", None
    )
    assert url == "postgresql+psycopg2://u:p@db:5432/led"
    with pytest.raises(ConfigurationError, match=r"has type 'http': the ledger needs a 'costaware_ledger', "):
        url_from_connection_fields("x", "http", "h", None, None, None, None, None)
