"""docker-compose.yaml and Dockerfile checked for structure (no Docker engine runs on the CI machine)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

from costaware.adapters.ledger.engine import url_from_connection_fields

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_SERVICES = (
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-worker",
    "airflow-triggerer",
    "airflow-init",
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yaml").read_text()))


def test_services_of_the_official_topology(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgres", "redis", *AIRFLOW_SERVICES} <= set(services)
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")
    commands = {name: services[name].get("command") for name in AIRFLOW_SERVICES[:-1]}
    assert commands == {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-worker": "celery worker",
        "airflow-triggerer": "triggerer",
    }
    for name in (*AIRFLOW_SERVICES, "postgres", "redis"):
        if name != "airflow-init":
            assert "healthcheck" in services[name], name


def test_airflow_services_build_the_extended_image(compose: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES:
        service = compose["services"][name]
        assert service["build"] == "." and service["image"] == "costaware-airflow:latest", name
        assert "_PIP_ADDITIONAL_REQUIREMENTS" not in service["environment"], name


SECRETS = ("FERNET_KEY", "AIRFLOW_JWT_SECRET", "POSTGRES_PASSWORD", "AIRFLOW_ADMIN_PASSWORD")
_VARIABLE = re.compile(r"\$\{(?P<name>[A-Z_][A-Z0-9_]*)(?:(?P<op>:-|:\?)(?P<arg>[^}$]*))?\}")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}`` (an error when unset or empty).

    A default may hold variables of its own (``${A:-x${B}}``): the innermost are read first.
    """

    def one(match: re.Match[str]) -> str:
        value = env.get(match["name"], "")
        if match["op"] == ":?" and not value:
            raise KeyError(f"required variable {match['name']} is missing a value: {match['arg']}")
        return value or (match["arg"] if match["op"] == ":-" else "")

    text = text.replace("$$", "\0")
    while (done := _VARIABLE.sub(one, text)) != text:
        text = done
    return text.replace("\0", "$")


SECRET_ENV = {
    "FERNET_KEY": "k" * 43 + "=",
    "AIRFLOW_JWT_SECRET": "jwt",
    "POSTGRES_PASSWORD": "pw123",
    "AIRFLOW_ADMIN_PASSWORD": "admin",
}


@pytest.mark.parametrize("secret", SECRETS)
def test_compose_refuses_to_start_without_each_secret(secret: str) -> None:
    raw = (ROOT / "docker-compose.yaml").read_text()
    interpolate(raw, SECRET_ENV)  # all set: fine
    with pytest.raises(KeyError, match=rf"required variable {secret} is missing a value: set {secret}"):
        interpolate(raw, {k: v for k, v in SECRET_ENV.items() if k != secret})


def test_no_secret_has_a_literal_fallback() -> None:
    raw = (ROOT / "docker-compose.yaml").read_text()
    for match in _VARIABLE.finditer(raw):
        if match["name"] in SECRETS or "SECRET" in match["name"] or "PASSWORD" in match["name"]:
            assert match["op"] == ":?" and match["arg"].strip(), match.group(0)
    assert "airflow:airflow@" not in raw and "jwt_secret}" not in raw
    example = (ROOT / ".env.example").read_text()
    for secret in SECRETS:
        assert re.search(rf"^{secret}=$", example, re.M), secret  # listed, and empty


def test_environment_celery_postgres_ledger(compose: dict[str, Any]) -> None:
    raw = (ROOT / "docker-compose.yaml").read_text()
    compose = dict(yaml.safe_load(interpolate(raw, SECRET_ENV)))
    env = compose["services"]["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
    assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
    assert int(re.sub(r"\$\{[A-Z_]+:-(\d+)\}", r"\1", str(env["AIRFLOW__CORE__PARALLELISM"]))) <= 8
    ledger = env["AIRFLOW_CONN_COSTAWARE_LEDGER"]
    scheme, rest = ledger.split("://", 1)
    login, host_part = rest.split("@", 1)
    user, password = login.split(":", 1)
    host_port, database = host_part.split("/", 1)
    host, port = host_port.split(":")
    url = url_from_connection_fields(
        "costaware_ledger", scheme, host, user, password, int(port), database, None
    )
    assert url == "postgresql+psycopg2://airflow:pw123@postgres:5432/costaware"
    # A ledger of your own in .env is the one every container uses (it was written out, and .env ignored).
    own = "postgres://ml:secret@ledger.internal:5432/costs"
    mine = dict(yaml.safe_load(interpolate(raw, {**SECRET_ENV, "AIRFLOW_CONN_COSTAWARE_LEDGER": own})))
    assert mine["services"]["airflow-scheduler"]["environment"]["AIRFLOW_CONN_COSTAWARE_LEDGER"] == own
    assert env["AIRFLOW_CONFIG"] == "/opt/airflow/config/airflow.cfg"  # a [costaware] section there applies
    # One region for pricing and for the locality guard (which reads the variable, not the option).
    assert env["COSTAWARE_WORKER_REGION"] == env["AIRFLOW__COSTAWARE__WORKER_REGION"] == "us-east-1"
    init_sql = (ROOT / "docker" / "postgres-init.sql").read_text()
    assert "CREATE DATABASE costaware" in init_sql
    mounts = compose["services"]["postgres"]["volumes"]
    assert any(m.startswith("./docker/postgres-init.sql:/docker-entrypoint-initdb.d/") for m in mounts)


def test_dags_logs_config_plugins_are_mounted(compose: dict[str, Any]) -> None:
    volumes = compose["services"]["airflow-worker"]["volumes"]
    for folder in ("dags", "logs", "config", "plugins"):
        assert f"${{AIRFLOW_PROJ_DIR:-.}}/{folder}:/opt/airflow/{folder}" in volumes
    # airflow-init writes config/airflow.cfg where the services read it, and owns the shared stores.
    assert compose["services"]["airflow-init"]["volumes"] == [
        "${AIRFLOW_PROJ_DIR:-.}:/sources",
        "${AIRFLOW_PROJ_DIR:-.}/config:/opt/airflow/config",
        "costaware-data:/opt/airflow/costaware",
    ]
    assert (ROOT / "dags" / "cost_aware_retrain.py").exists()


def test_every_airflow_container_shares_the_stores(compose: dict[str, Any]) -> None:
    # A task on one worker read landed data, features or a local job folder that another container wrote.
    assert "costaware-data" in compose["volumes"]
    for name in ("airflow-worker", "airflow-triggerer", "airflow-scheduler", "airflow-apiserver"):
        assert "costaware-data:/opt/airflow/costaware" in compose["services"][name]["volumes"], name


def test_plugins_folder_says_what_belongs_there() -> None:
    readme = (ROOT / "plugins" / "README.md").read_text()
    assert "twice" in readme and "pip install" in readme
    assert not list((ROOT / "plugins").rglob("*.py")), "costaware must not be copied into plugins/"


def test_workers_and_triggerer_wait_for_their_dependencies(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["airflow-worker"]["depends_on"]["airflow-apiserver"]["condition"] == "service_healthy"
    assert services["airflow-worker"]["deploy"]["replicas"] == "${AIRFLOW_WORKERS:-2}"
    for name in AIRFLOW_SERVICES[:-1]:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_dockerfile_extends_the_pinned_airflow_image() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^FROM apache/airflow:(\d+\.\d+\.\d+)", dockerfile, re.M)
    assert base, dockerfile
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    airflow_pin = next(d for d in pyproject["project"]["dependencies"] if d.startswith("apache-airflow>="))
    low = re.search(r">=(\d+\.\d+)\.\d+", airflow_pin)
    assert low and base.group(1).startswith(low.group(1))
    assert '"apache-airflow==${AIRFLOW_VERSION}"' in dockerfile  # pip must not change Airflow's version
    # the executor's extra, and the extras the example DAGs in ./dags import at parse time
    assert '"/opt/costaware-src[celery,tuning,examples]"' in dockerfile
    assert "COPY --chown=airflow:0 runtime /opt/costaware-src/runtime" in dockerfile  # a dependency


def test_documented_cli_calls_go_through_bash() -> None:
    # The official image's /entrypoint hands any command but bash/python to `airflow`: `airflow-cli
    # costaware budget set` ran `airflow costaware ...`, which Airflow refuses.
    doc = (ROOT / "docs" / "deployment.md").read_text()
    calls = re.findall(r"docker compose run airflow-cli (\S+)", doc)
    assert calls and all(first in ("bash", "python", "airflow") for first in calls), calls
