"""Names users' containers import from ``launcher``, ``stores`` and ``sync`` outlive their splits."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: The commit before launcher.py and stores.py were split into private modules.
BEFORE_THE_SPLIT = "7fa6441c"
#: The commit before each module was split (sync.py's clear() and step folders went to _step_folders later).
SPLIT_AFTER = {"launcher": BEFORE_THE_SPLIT, "stores": BEFORE_THE_SPLIT, "sync": "0ae04d41"}
REPO = Path(__file__).resolve().parents[2]
PACKAGE = "costaware_runtime"

#: The names a job may import from each module at its SPLIT_AFTER commit, as ``importable_names`` collects
#: them: what the module defined or took from costaware_runtime, private helpers and the standard library's
#: modules left out (those were never the runtime's to offer).
NAMES_BEFORE_THE_SPLIT = {
    "launcher": """
        CheckpointChangedError CheckpointSync ContractError CostawareRuntimeError JobEnvironment LAUNCHED
        Launcher MAX_POLL_SECONDS Marker Notices OutputSummary REAP_SECONDS StoreError TORCHRUN_SHUTDOWN
        __version__ build_parser check_outputs check_writes contract die_with_the_launcher end_job latest_step
        log main open_object open_store read_marker read_metrics retired_marker torchrun_shutdown_seconds
        upload_outputs
    """,
    "stores": """
        CREDENTIAL_RETRY_SECONDS ContractError LocalStore S3Store S3_ENDPOINT_URL S3_INSTALL_HINT Store
        StoreError WriteRefusal check_key check_writes is_uri log names_no_file_path open_object open_store
    """,
    "sync": """
        CHECKPOINT_MARKER CheckpointChangedError CheckpointSync CommittedFile ContractError LATEST_NAME
        LocalStore Marker ORIGIN_NAME POINTER_TRIES STALE_FOLDER_SECONDS STALE_UPLOAD_SECONDS StoreError
        check_key clear log names_no_file_path open_store parse_marker read_marker write_marker
    """,
}


def importable_names(source: str) -> set[str]:
    """The public names a module's own statements bind at its top level, or import from costaware_runtime."""
    names: set[str] = set()
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(statement.name)
        elif isinstance(statement, ast.Assign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            bound = (node for target in targets for node in ast.walk(target))
            names |= {node.id for node in bound if isinstance(node, ast.Name)}
        elif isinstance(statement, ast.ImportFrom) and (statement.module or "").startswith(PACKAGE):
            names |= {alias.asname or alias.name for alias in statement.names}
    return {name for name in names if not name.startswith("_") or name == "__version__"}


@pytest.mark.parametrize("module_name", sorted(NAMES_BEFORE_THE_SPLIT))
def test_every_name_a_module_had_before_the_split_is_still_there(module_name: str) -> None:
    # 'from costaware_runtime.launcher import check_writes' (and stores.S3_ENDPOINT_URL, stores.log, ...)
    # failed with ImportError in a user's container once the names moved to private modules.
    module = importlib.import_module(f"costaware_runtime.{module_name}")
    gone = [name for name in NAMES_BEFORE_THE_SPLIT[module_name].split() if not hasattr(module, name)]
    assert gone == [], f"costaware_runtime.{module_name} lost {gone}"


@pytest.mark.parametrize("module_name", sorted(NAMES_BEFORE_THE_SPLIT))
def test_the_list_holds_every_name_the_module_had_before_the_split(module_name: str) -> None:
    # The list above is the one checked; where this checkout has the history, it is the module's own.
    path = f"runtime/src/costaware_runtime/{module_name}.py"
    commit = SPLIT_AFTER[module_name]
    shown = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:{path}"], capture_output=True, text=True
    )
    if shown.returncode != 0:
        pytest.skip(f"no commit {commit} here (a shallow clone, an sdist): {shown.stderr.strip()}")
    assert sorted(importable_names(shown.stdout)) == NAMES_BEFORE_THE_SPLIT[module_name].split()


@pytest.mark.parametrize("first", ["costaware_runtime._command_line", "costaware_runtime.launcher"])
def test_the_command_line_runs_a_job_whichever_module_is_imported_first(first: str, tmp_path: Path) -> None:
    # The command line is read in _command_line, which launcher.py imports: an import of the Launcher back
    # from launcher.py would be a cycle, failing for whichever module came first.
    job = "['--', sys.executable, '-c', 'raise SystemExit(3)']"
    code = f"import sys, {first}; from costaware_runtime.launcher import main; sys.exit(main({job}))"
    environ = {name: value for name, value in os.environ.items() if not name.startswith("COSTAWARE_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=environ | {"TMPDIR": str(tmp_path)},  # the folders made for the attempt
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert "costaware-run: the job exited 3" in done.stderr
