"""Schema migrations: a ledger written before them upgrades in place, a new one starts at the head revision.

The old ledgers are real files written by the release before the migrations (tests/fixtures/ledger/, with the
script that wrote them): a SQLite file and a pg_dump restored into a fresh database of the test server.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
import threading
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from services import fresh_postgres_database, postgres_bin_dir
from sqlalchemy import Engine, create_engine, func, inspect, select, text
from sqlalchemy.engine import make_url

from costaware import Ledger
from costaware.adapters.ledger import migrate, schema
from costaware.core.errors import ConfigurationError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ledger"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def _fixture_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ledger_fixtures", FIXTURES / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


read_back = _fixture_module().read_back
#: What an entry written before revision 0002 reads back as: emissions unknown, never 0.
NO_EMISSIONS = {"kg_co2e": None, "kwh": None, "carbon_method": "", "carbon_source": ""}


def before_emissions(read: dict[str, Any]) -> dict[str, Any]:
    """``read`` without the emissions fields the last release lacked, after checking they read as unknown."""
    for entry in read["entries"]:
        assert {name: entry.pop(name) for name in NO_EMISSIONS} == NO_EMISSIONS
    for rows in [*read["reports"].values(), read["report_fraud_only"]]:
        for row in rows:
            assert row.pop("kg_co2e") is None
            assert 0 <= row.pop("co2e_unknown") <= row["entries"]
    # The costliest tries are tries now, each its actual entries summed (the last release listed entries, a
    # try's apart): each is checked against the entries read back, which are compared whole.
    of_try: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for e in read["entries"]:
        if not e["estimated"] and e["project"] == "churn":
            key = (e["dag_id"], e["run_id"], e["task_id"], e["map_index"], e["try_number"])
            of_try.setdefault(key, []).append(e)
    costliest = read.pop("costliest")
    assert len(costliest) == min(5, len(of_try))
    assert [Decimal(t["usd"]) for t in costliest] == sorted(
        (sum(Decimal(e["usd"]) for e in entries) for entries in of_try.values()), reverse=True
    )[:5]
    for t in costliest:
        entries = of_try[(t["dag_id"], t["run_id"], t["task_id"], t["map_index"], t["try_number"])]
        assert (Decimal(t["usd"]), t["entries"]) == (sum(Decimal(e["usd"]) for e in entries), len(entries))
        assert set(filter(None, t["note"].split("\n"))) == {e["note"] for e in entries if e["note"]}
    return read


def as_read_now(expected: dict[str, Any]) -> dict[str, Any]:
    """What the last release read back, with a report's empty group value labelled as this release labels it.

    An entry without a cause grouped under "" then; it is "(none)" now, as an entry without the grouped value
    always was (no report of the fixtures has both, so no two rows merge). A measurement carries its entry's
    team now (its discount prices the efficiency advice): read from the same entry row. The summary counts
    the entries that could not be priced now (none of the fixtures'). A run's group is ``<dag>/<run id>`` now
    (two DAGs' runs of one id were one group; the fixtures' run ids are each one DAG's, so no row merges or
    splits), and a trial's ``<dag>/<run id> <label>``. The data itself is unchanged.
    """
    now = copy.deepcopy(expected)
    now["summary"]["unpriced_entries"] = 0
    for rows in [*now["reports"].values(), now["report_fraud_only"]]:
        for row in rows:
            row["group"] = row["group"] or "(none)"
    dag_of_run = {e["run_id"]: e["dag_id"] for e in now["entries"]}
    for row in now["reports"]["run"]:
        row["group"] = f"{dag_of_run[row['group']]}/{row['group']}"
    # A trial's group is ``<dag>/<run id> <label>`` now: every run numbers its trials from #0, and one label
    # added up the trials of several runs. The fixtures' one trial is one run's, so no row merges or splits.
    run_of_trial = {e["trial"]: f"{e['dag_id']}/{e['run_id']}" for e in now["entries"] if e["trial"]}
    for row in now["reports"]["trial"]:
        if row["group"] != "(none)":
            row["group"] = f"{run_of_trial[row['group']]} {row['group']}"
    del now["costliest"]  # entries then, tries now: checked against the entries (see before_emissions)
    teams = {(e["dag_id"], e["run_id"], e["task_id"], e["try_number"]): e["team"] for e in now["entries"]}
    for m in now["measurements"]:
        m["team"] = teams[(m["dag_id"], m["run_id"], m["task_id"], m["try_number"])]
    return now


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def revision(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return [row[0] for row in conn.execute(text(f"SELECT version_num FROM {migrate.VERSION_TABLE}"))]


def schema_version(engine: Engine) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")).scalar()
        )


def schema_differences(engine: Engine) -> list[Any]:
    """What Alembic's autogenerate would change to make the database match ``schema.py``."""
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": migrate.VERSION_TABLE})
        return list(compare_metadata(context, schema.metadata))


def restore(dump: Path, url: str) -> None:
    parsed = make_url(url)
    subprocess.run(
        [
            str(postgres_bin_dir() / "psql"),
            *("-h", str(parsed.host), "-p", str(parsed.port), "-U", "postgres", "-d", str(parsed.database)),
            *("-v", "ON_ERROR_STOP=1", "-q", "-f", str(dump)),
        ],
        check=True,
        capture_output=True,
    )


def test_head_is_the_newest_revision_script() -> None:
    assert migrate.script_head() == migrate.HEAD


def test_a_sqlite_ledger_of_the_last_release_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    shutil.copy(FIXTURES / "ledger-sqlite.db", path)
    old = create_engine(f"sqlite:///{path}")
    assert migrate.VERSION_TABLE not in tables(old)  # written before the migrations
    before = tables(old)
    old.dispose()

    ledger = Ledger.from_url(f"sqlite:///{path}")

    assert before_emissions(read_back(ledger)) == as_read_now(EXPECTED["read_back"]["sqlite"])
    assert revision(ledger.engine) == [migrate.HEAD]
    assert schema_version(ledger.engine) == "1"  # what the last release checks: it still opens this ledger
    assert tables(ledger.engine) == before | {migrate.VERSION_TABLE}
    assert schema_differences(ledger.engine) == []
    ledger.dispose()


@pytest.mark.postgres
def test_a_postgresql_ledger_of_the_last_release_upgrades_in_place(postgres_url: str) -> None:
    url = fresh_postgres_database(postgres_url, prefix="old")
    restore(FIXTURES / "ledger-postgres.sql", url)
    old = create_engine(url)
    assert migrate.VERSION_TABLE not in tables(old)
    before = tables(old)
    old.dispose()

    ledger = Ledger.from_url(url)

    assert before_emissions(read_back(ledger)) == as_read_now(EXPECTED["read_back"]["postgres"])
    assert revision(ledger.engine) == [migrate.HEAD]
    assert schema_version(ledger.engine) == "1"
    assert tables(ledger.engine) == before | {migrate.VERSION_TABLE}
    assert schema_differences(ledger.engine) == []
    with pytest.raises(Exception, match="append-only"), ledger.engine.begin() as conn:  # its trigger survived
        conn.execute(text("DELETE FROM costaware_audit"))
    ledger.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'new.db'}"
    return fresh_postgres_database(request.getfixturevalue("postgres_url"), prefix="new")


def test_a_new_ledger_is_created_at_the_head_and_opening_again_changes_nothing(new_url: str) -> None:
    first = Ledger.from_url(new_url)
    assert revision(first.engine) == [migrate.HEAD]
    assert schema_version(first.engine) == "1"
    assert tables(first.engine) == set(schema.metadata.tables) | {migrate.VERSION_TABLE}
    assert schema_differences(first.engine) == []
    first.set_budget("project=churn", "month", "10")
    first.dispose()

    again = Ledger.from_url(new_url)
    again.create_schema()
    assert revision(again.engine) == [migrate.HEAD]
    assert [str(b.scope) for b in again.budgets()] == ["project=churn"]
    with again.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(schema.meta)).scalar_one() == 1
    again.dispose()


@pytest.mark.postgres
def test_many_processes_opening_a_new_ledger_create_it_once(postgres_url: str) -> None:
    url = fresh_postgres_database(postgres_url, prefix="race")
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            Ledger.from_url(url).dispose()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    engine = create_engine(url)
    assert revision(engine) == [migrate.HEAD]
    engine.dispose()


def test_threads_creating_different_ledgers_at_once_each_get_theirs(tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path / f'ledger{i}.db'}" for i in range(4)]  # Alembic's context is per process
    threads = [threading.Thread(target=lambda url=url: Ledger.from_url(url).dispose()) for url in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for url in urls:
        engine = create_engine(url)
        assert revision(engine) == [migrate.HEAD]
        assert set(schema.metadata.tables) <= tables(engine)
        engine.dispose()


def test_airflows_own_version_table_is_left_alone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"  # the ledger in Airflow's metadata database
    airflow = create_engine(url)
    with airflow.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('29ce7909c52b')"))
    Ledger.from_url(url).dispose()
    with airflow.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [
            "29ce7909c52b"
        ]
    assert revision(airflow) == [migrate.HEAD]
    airflow.dispose()


def test_a_ledger_at_an_unknown_revision_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger.from_url(url).dispose()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = 'f00dcafe'"))
    with pytest.raises(
        ConfigurationError,
        match=r"has schema revision 'f00dcafe', newer than this costaware \(revision '0004'\): upgrade",
    ):
        Ledger.from_url(url)
    assert revision(engine) == ["f00dcafe"]
    engine.dispose()


def test_a_revision_the_database_refuses_changes_nothing_and_says_so(tmp_path: Path) -> None:
    # An index made by hand under revision 0003's name: the upgrade failed with "index ... already exists.
    # Check the URL (--ledger-url, ...)", of a ledger it had reached.
    from alembic import command

    from costaware.adapters.ledger.engine import ledger_engine
    from costaware.core.errors import LedgerUnavailableError

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = ledger_engine(url)
    with engine.begin() as conn:
        command.upgrade(migrate._config(conn), "0002")
        conn.execute(
            text(
                "INSERT INTO costaware_entries (entry_uid, incurred_at, dag_id, run_id, task_id, try_number, "
                "map_index, kind, quantity_micros, unit, unit_price_usd, usd_micros, gpu_hours_micros, "
                "estimated, tags, outcome, cause, price_source, note) VALUES ('old', '2026-11-01 10:00:00', "
                "'d', 'r', 't', 1, -1, 'compute', 1000000, 'hour', '0.1', 100000, 0, 0, '{}', 'success', "
                "'', 'snapshot', '')"
            )
        )
        conn.execute(text("CREATE INDEX ix_costaware_entries_reservation ON costaware_entries (dag_id)"))
    with pytest.raises(LedgerUnavailableError) as refused:
        Ledger.from_url(url)
    message = str(refused.value)
    assert "cannot upgrade the cost ledger" in message and "from schema revision 0002 to 0004" in message
    assert "ix_costaware_entries_reservation already exists" in message and "Check the URL" not in message
    assert revision(engine) == ["0002"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT entry_uid FROM costaware_entries")).scalars().all() == ["old"]
        conn.execute(text("DROP INDEX ix_costaware_entries_reservation"))
        conn.commit()
    engine.dispose()
    ledger = Ledger.from_url(url)  # the cause fixed, it opens at the head with its row
    assert revision(ledger.engine) == ["0004"] and [e["entry_uid"] for e in ledger.entries()] == ["old"]
    ledger.dispose()


def test_a_ledger_at_the_baseline_gets_the_emissions_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    from alembic import command

    from costaware.adapters.ledger.engine import ledger_engine
    from costaware.core.ledger import Kind, LedgerEntry

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = ledger_engine(url)
    with engine.begin() as conn:
        command.upgrade(migrate._config(conn), "0001")
    assert revision(engine) == ["0001"]
    assert "kg_co2e_micros" not in {c["name"] for c in inspect(engine).get_columns("costaware_entries")}
    with engine.begin() as conn:  # a row as revision 0001 wrote it: no emissions columns
        conn.execute(
            text(
                "INSERT INTO costaware_entries (entry_uid, incurred_at, dag_id, run_id, task_id, try_number, "
                "map_index, kind, quantity_micros, unit, unit_price_usd, usd_micros, gpu_hours_micros, "
                "estimated, tags, outcome, cause, price_source, note) VALUES ('old', '2026-11-01 10:00:00', "
                "'d', 'r', 't', 1, -1, 'compute', 1000000, 'hour', '0.1', 100000, 0, 0, '{}', 'success', "
                "'', 'snapshot', '')"
            )
        )
    engine.dispose()

    ledger = Ledger.from_url(url)
    assert revision(ledger.engine) == [migrate.HEAD] == ["0004"]
    assert schema_differences(ledger.engine) == []
    [old] = ledger.entries()
    assert (old["entry_uid"], old["usd"]) == ("old", Decimal("0.1"))
    assert {name: old[name] for name in NO_EMISSIONS} == NO_EMISSIONS
    ledger.record(
        LedgerEntry(
            "d",
            "r",
            "t",
            Kind.COMPUTE,
            Decimal("0.2"),
            kg_co2e=Decimal("0.125"),
            kwh=Decimal("0.5"),
            carbon_method="m",
            carbon_source="s",
            entry_uid="new",
        )
    )
    new = next(e for e in ledger.entries() if e["entry_uid"] == "new")
    assert (new["kg_co2e"], new["kwh"], new["carbon_method"], new["carbon_source"]) == (
        Decimal("0.125"),
        Decimal("0.5"),
        "m",
        "s",
    )
    [row] = ledger.report(group_by="dag")
    assert (row.kg_co2e, row.co2e_unknown, row.kg_co2e_text) == (Decimal("0.125"), 1, "0.125+?")
    ledger.dispose()


def test_a_user_who_may_not_create_tables_is_told_the_grant_and_not_retried(postgres_url: str) -> None:
    # PostgreSQL 15 lets only a database's owner create tables in 'public': the ledger's user was refused,
    # retried by Airflow as an outage, and told to look for "a table or index of that name made by hand".
    import uuid

    from costaware.core.errors import LEDGER_UNREADABLE, LedgerUnavailableError

    url = fresh_postgres_database(postgres_url, prefix="noperm")
    user = f"reader_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {user} LOGIN PASSWORD 'reader-pw'"))
        conn.execute(text("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
    admin.dispose()
    as_reader = make_url(url).set(username=user, password="reader-pw").render_as_string(hide_password=False)
    with pytest.raises(ConfigurationError) as refused:
        Ledger.from_url(as_reader)
    message = str(refused.value)
    assert "cannot create the cost ledger's tables at" in message and "permission denied" in message
    assert f"GRANT CREATE ON SCHEMA public TO {user};) or connect as the owner" in message
    assert "reader-pw" not in message
    assert not isinstance(refused.value, LedgerUnavailableError)  # a retry grants nothing
    assert isinstance(refused.value, LEDGER_UNREADABLE)  # a task's cost waits in the spool all the same


def test_a_user_who_does_not_own_the_tables_is_told_to_upgrade_as_their_owner_not_a_grant(
    postgres_url: str,
) -> None:
    # A worker of the next release upgrading tables another role made was told to GRANT CREATE ON SCHEMA
    # public, which does not let it change another role's table ("must be owner of table").
    import uuid

    from alembic import command

    from costaware.adapters.ledger.engine import ledger_engine

    url = fresh_postgres_database(postgres_url, prefix="notowner")
    engine = ledger_engine(url)
    with engine.begin() as conn:
        command.upgrade(migrate._config(conn), "0002")
    user = f"writer_{uuid.uuid4().hex[:8]}"
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"CREATE ROLE {user} LOGIN PASSWORD 'writer-pw'"))
        conn.execute(text(f"GRANT CREATE, USAGE ON SCHEMA public TO {user}"))
        conn.execute(text(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {user}"))
    engine.dispose()
    as_writer = make_url(url).set(username=user, password="writer-pw").render_as_string(hide_password=False)
    with pytest.raises(ConfigurationError) as refused:
        Ledger.from_url(as_writer)
    message = str(refused.value)
    assert "must be owner of table costaware_entries" in message
    assert "from schema revision 0002 to" in message and "open the ledger once as that role" in message
    assert f"ALTER TABLE <table> OWNER TO {user};" in message
    assert "GRANT CREATE ON SCHEMA" not in message and "writer-pw" not in message
    revision_engine = ledger_engine(url)
    assert revision(revision_engine) == ["0002"]  # nothing was changed
    revision_engine.dispose()
