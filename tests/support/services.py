"""Real local servers for tests: PostgreSQL (Debian's binaries) and moto's AWS server on free local ports.

``scripts/ensure_services.sh`` installs PostgreSQL when it is missing; these helpers never skip silently.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The tasks of dags/cost_aware_retrain.py, which several end-to-end tests expect in the ledger.
RETRAIN_TASKS = frozenset(
    {
        "land_new_data",
        "check_locality",
        "quality_gate",
        "build_features",
        "split_features",
        "spend_gate",
        "spot_window",
        "retrain",
        "promote",
    }
)


def ledger_task_ids(
    ledger: Any, dag_id: str, run_id: str, *, expected: frozenset[str], timeout: float = 60
) -> set[str]:
    """The task ids with ledger entries in the run, once they are ``expected`` (or ``timeout`` passed).

    A worker reports a task's success before its listeners run (the Task SDK's ``run`` sends the state,
    ``finalize`` then calls them), so a run can read "success" a moment before its last task's entry is
    written: a real server is read until the entries are all there, not once.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = {r["task_id"] for r in ledger.entries(dag_id=dag_id, run_id=run_id)}
        if found >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


def postgres_bin_dir() -> Path:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    raise RuntimeError(
        "PostgreSQL server binaries not found: run `bash scripts/ensure_services.sh` (make test does)"
    )


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a throw-away PostgreSQL cluster; yields a SQLAlchemy URL to database ``costaware``."""
    bindir = postgres_bin_dir()
    as_root = os.geteuid() == 0
    # initdb refuses to run as root: the cluster belongs to the 'postgres' user Debian's package creates.
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    data = Path(tempfile.mkdtemp(prefix="costaware-pg-"))
    if as_root:
        shutil.chown(data, "postgres", "postgres")
    port = free_port()
    log_file = data / "server.log"
    subprocess.run(
        [
            *prefix,
            str(bindir / "initdb"),
            "-D",
            str(data / "db"),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *prefix,
            str(bindir / "pg_ctl"),
            "-D",
            str(data / "db"),
            "-l",
            str(log_file),
            "-w",
            "-o",
            f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run(
            [
                *prefix,
                str(bindir.parent / "bin" / "createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "postgres",
                "costaware",
            ],
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/costaware"
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data / "db"), "-m", "fast", "stop"],
            capture_output=True,
        )
        shutil.rmtree(data, ignore_errors=True)


@contextmanager
def moto_server() -> Iterator[str]:
    """Start moto's AWS server on 127.0.0.1; yields its endpoint URL.

    The port is free when picked but moto binds it seconds later (its imports, on a loaded machine): another
    xdist worker's moto could take it first. Then this moto failed to bind and exited unseen, the session
    used the other one's server, and got "Connection refused" once that session ended. So the server is
    taken only where its own process listens on the port, else started again on another port.
    """
    exe = Path(sys.executable).with_name("moto_server")
    said = ""
    for _ in range(5):
        port = free_port()
        with tempfile.TemporaryFile() as errors:
            proc = subprocess.Popen(
                [str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=errors
            )
            try:
                if _listens_itself(proc, port, errors.fileno()):
                    yield f"http://127.0.0.1:{port}"
                    return
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            errors.seek(0)
            tail = errors.read().decode(errors="replace").strip().splitlines()[-3:]
        said = f": the last exited with code {proc.returncode} on port {port} ({' | '.join(tail)})"
        if not (_listening_inodes(port) or _accepts_connections(port)):
            break  # nothing else holds the port: moto itself failed, no retry helps
    raise RuntimeError(f"moto's server did not listen on a port of its own{said}")


def _listens_itself(proc: subprocess.Popen[bytes], port: int, log_fd: int, timeout: float = 30.0) -> bool:
    """Whether ``proc`` itself listens on ``port`` within ``timeout``; False where it exits or another did.

    Told by ``/proc``: a listening socket of the port among the process's open files. Where ``/proc`` shows
    no listener on a port that accepts connections (no ``/proc``, as on macOS, or a sandbox hiding
    ``/proc/net/tcp``), moto is asked instead: see :func:`_answers_as_itself` (``log_fd``: its stderr).
    """
    proc_fds = Path(f"/proc/{proc.pid}/fd")
    token = uuid.uuid4().hex
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        sockets = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
        if sockets:
            with contextlib.suppress(OSError):
                if any(str(fd.readlink()) in sockets for fd in proc_fds.iterdir()):
                    return True
        elif _accepts_connections(port) and _answers_as_itself(port, token, log_fd):
            return True
        time.sleep(0.1)
    return False


def _answers_as_itself(port: int, token: str, log_fd: int, timeout: float = 2.0) -> bool:
    """Whether the moto whose stderr is ``log_fd`` answered a request to ``port`` naming ``token``.

    Only moto answers ``/moto-api/``; only the process that served the request logs its line (werkzeug's
    access log, on that process's stderr), so another worker's moto on the port does not pass for this one.
    A listener that never answers costs ``timeout`` and is not this moto.
    """
    import http.client
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/?probe={token}", timeout=timeout) as r:
            if r.status != 200:
                return False
    except (OSError, http.client.HTTPException):  # refused, reset, timed out, an HTTP error or no HTTP at all
        return False
    # Read without moving the file's offset: the server shares it, and writes on at it.
    return token.encode() in os.pread(log_fd, os.fstat(log_fd).st_size, 0)


def _accepts_connections(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _listening_inodes(port: int) -> set[str]:
    """The inodes of the sockets listening on 127.0.0.1's or any address's ``port`` (``/proc/net/tcp``).

    Empty where the tables cannot be read (no ``/proc``, a sandbox hiding them).
    """
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in _read_tcp_table(table).splitlines()[1:]:
                fields = line.split()
                if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # 0A: LISTEN
                    inodes.add(fields[9])
    return inodes


def _read_tcp_table(path: str) -> str:
    return Path(path).read_text()


@contextmanager
def late_first_answer(endpoint: str, path: str, seconds: float, *, times: int = 1) -> Iterator[str]:
    """A proxy to ``endpoint`` (moto's server) that answers the first ``times`` requests to ``path`` late.

    The request itself reaches the server at once: what a client whose read timeout is shorter sees when
    the service took a call and its answer was lost (botocore then sends the call again). Yields its URL.
    """
    import http.server
    import threading
    import urllib.error
    import urllib.request

    delayed: list[str] = []

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            forwarded = urllib.request.Request(
                endpoint + self.path, data=body, method=self.command, headers=headers
            )
            try:
                with urllib.request.urlopen(forwarded, timeout=30) as response:
                    status, data, answer = response.status, response.read(), response.headers
            except urllib.error.HTTPError as e:
                status, data, answer = e.code, e.read(), e.headers
            if self.path == path and len(delayed) < times:
                delayed.append(self.path)
                time.sleep(seconds)
            self.send_response(status)
            for name, value in answer.items():
                if name.lower() not in (
                    "content-length",
                    "transfer-encoding",
                    "connection",
                    "server",
                    "date",
                ):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


BIN = Path(sys.executable).parent


def airflow_env(home: Path, dags_folder: Path, **extra: str) -> dict[str, str]:
    """The environment of an Airflow command run by a test: its own home, DAGs and ledger, examples off."""
    env = os.environ.copy()
    env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "COSTAWARE_LEDGER_URL": f"sqlite:///{home / 'ledger.db'}",
            # `airflow standalone` and friends start their components as `airflow ...` from PATH
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            **extra,
        }
    )
    return env


def run_command(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run a console script of this virtualenv (``airflow``, ``costaware``) with ``env``."""
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]], env=env, capture_output=True, text=True, timeout=timeout
    )


def set_monthly_cap(env: dict[str, str], usd: str, scope: str = "project=flight-delays") -> None:
    """``costaware budget set`` of a monthly cap, as the example DAGs' spend gates need one."""
    done = run_command(
        env, "costaware", "budget", "set", "--scope", scope, "--period", "month", "--cap-usd", usd
    )
    assert done.returncode == 0, done.stderr


def migrated_airflow_env(home: Path, dags_folder: Path, **extra: str) -> dict[str, str]:
    """:func:`airflow_env` with the metadata database migrated."""
    env = airflow_env(home, dags_folder, **extra)
    migrate = run_command(env, "airflow", "db", "migrate")
    if migrate.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed: {migrate.stderr[-2000:]}")
    return env


def fresh_postgres_database(base_url: str, prefix: str = "t") -> str:
    """Create an empty database on the test server of ``base_url``; returns its URL."""
    import uuid

    from sqlalchemy import create_engine, text

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return base_url.rsplit("/", 1)[0] + f"/{name}"


def database_url(backend: str, tmp_path: Path, request: Any, name: str) -> str:
    """A fresh SQLite file or PostgreSQL database named after ``name``, for tests over both backends."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / f'{name}.db'}"
    return fresh_postgres_database(request.getfixturevalue("postgres_url"), name)


def stop_process_group(proc: subprocess.Popen[Any], *, grace: float = 30.0) -> None:
    """Stop ``proc`` and its process group (started with ``start_new_session``): SIGTERM, then SIGKILL.

    The leader (``airflow standalone``) stops its own children before it exits; a member that outlives it
    (a scheduler still starting when the SIGTERM came, seen left running with its executor's workers) would
    run on, orphaned, after the tests. Once the leader has exited, or ``grace`` has passed, what is left of
    the group is killed.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
