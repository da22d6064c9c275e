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


def _calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def _options_read_by_the_code() -> set[str]:
    """``[costaware]`` options the source reads: every ``option("name")`` (``costaware.settings.option``)."""
    options: set[str] = set()
    for path in SRC.rglob("*.py"):
        for call in _calls(path):
            if _name(call) == "option" and call.args and isinstance(call.args[0], ast.Constant):
                options.add(str(call.args[0].value))
    return options


def test_every_config_option_is_documented_with_its_default() -> None:
    from costaware.settings import OPTIONS

    read = _options_read_by_the_code()
    assert {"worker_instance_type", "worker_region", "worker_market"} <= read, read
    documented = get_provider_info()["config"]["costaware"]["options"]
    missing = sorted(read - set(documented))
    assert not missing, f"document {missing} in costaware.settings.OPTIONS"
    for name in read:
        option = documented[name]
        assert option["default"] == OPTIONS[name].default
        assert option["description"] and option["example"] not in (None, "")
        assert option["type"] in ("string", "boolean", "integer", "float")
    stale = sorted(set(documented) - read)
    assert not stale, f"{stale} are documented but no code reads them"


def test_only_settings_reads_the_costaware_section_and_variables() -> None:
    """A second reader of ``[costaware]``, ``$AIRFLOW_HOME`` or a provider ``COSTAWARE_*`` variable fails.

    The variables of a training job's contract (``training/``, set by the compute backend) are not settings.
    """
    job_variables = {
        match
        for path in (SRC / "training").rglob("*.py")
        for match in re.findall(r'"(COSTAWARE_\w+)"', path.read_text())
    }
    readers = []
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC).as_posix()
        # settings_home.py is the settings layer's own (the expansion of $AIRFLOW_HOME, split out for size).
        if relative in ("settings.py", "settings_home.py") or relative.startswith("training/"):
            continue
        text = path.read_text()
        for call in _calls(path):
            args = [a.value for a in call.args if isinstance(a, ast.Constant)]
            if _name(call).startswith("get") and args[:1] == ["costaware"]:
                readers.append(f"{relative}: reads [costaware] {args[1:2]}")
        if '"AIRFLOW_HOME"' in text:
            readers.append(f"{relative}: reads AIRFLOW_HOME")
        readers += [
            f"{relative}: reads {name}"
            for name in set(re.findall(r'"(COSTAWARE_\w+)"', text)) - job_variables
        ]
    assert not readers, "read settings through costaware.settings:\n" + "\n".join(readers)


def test_every_provider_variable_is_documented() -> None:
    from costaware import settings

    constants = {value for name, value in vars(settings).items() if name.endswith("_ENV")}
    assert constants == set(settings.ENVIRONMENT)
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    missing = sorted(name for name in settings.ENVIRONMENT if f"`{name}`" not in deployment)
    assert not missing, f"document {missing} in docs/deployment.md"


def test_an_option_read_without_airflow_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from costaware import settings

    real_import = builtins.__import__

    def no_airflow(name: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name.startswith("airflow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_airflow)
    assert settings.option("worker_region") == "us-east-1"
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_REGION", "eu-west-1")
    assert settings.option("worker_region") == "eu-west-1"
    with pytest.raises(KeyError):
        settings.option("no_such_option")


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
    from costaware.adapters.ledger.engine import url_from_connection_fields
    from costaware.core.errors import ConfigurationError

    url = url_from_connection_fields(
        "costaware_ledger", "costaware_ledger", "db", "u", "p", 5432, "led", None
    )
    assert url == "postgresql+psycopg2://u:p@db:5432/led"
    with pytest.raises(ConfigurationError, match=r"has type 'http': the ledger needs a 'costaware_ledger', "):
        url_from_connection_fields("x", "http", "h", None, None, None, None, None)
    # AIRFLOW_CONN_COSTAWARE_LEDGER='costaware_ledger://...' reaches us with no type: say how to write it.
    with pytest.raises(
        ConfigurationError, match=r"has type '': .* write the type costaware-ledger:// or postgres://"
    ):
        url_from_connection_fields("costaware_ledger", "", "h", None, None, None, None, None)
    # `airflow connections add costaware_ledger --conn-type postgres` without the postgres provider stores
    # 'generic': the error named a type the user never gave, and no way to give the one meant.
    with pytest.raises(ConfigurationError, match=r"type 'generic' when that provider is not installed: give"):
        url_from_connection_fields("costaware_ledger", "generic", "db", "u", "p", 5432, "led", None)
    # AIRFLOW_CONN_COSTAWARE_LEDGER=ledger.db (no scheme at all) was told only about '_' it never wrote.
    with pytest.raises(ConfigurationError, match=r"a URL without a scheme, or with costaware_ledger://"):
        url_from_connection_fields("costaware_ledger", "", "ledger.db", None, None, None, None, None)


def test_airflow_s_example_dag_discovery_finds_the_provider_without_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``load_examples`` on (Airflow's default) every bundle load imports ``airflow_provider_costaware``.

    Before that module existed, each ``airflow dags test`` logged "Could not load provider module
    airflow_provider_costaware for example DAG discovery" with a traceback, twice.
    """
    from airflow.dag_processing.bundles import manager
    from airflow.providers_manager import ProvidersManager

    assert "airflow-provider-costaware" in ProvidersManager().providers  # else the check below is empty
    logged: list[tuple[object, ...]] = []
    monkeypatch.setattr(manager.log, "exception", lambda *args, **kwargs: logged.append(args))
    configs: list[object] = []
    manager._add_provider_example_dags_to_bundle(configs)
    assert not [args for args in logged if "airflow_provider_costaware" in args], logged
    assert not any("costaware" in str(c) for c in configs)  # no example DAGs shipped into every deployment
