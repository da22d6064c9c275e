"""``docs/cli.md`` is what ``scripts/cli_docs.py`` writes from the parser, so it follows every command."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cli_docs", ROOT / "scripts" / "cli_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_is_up_to_date() -> None:
    script = _script()
    written = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert written == script.render(), f"docs/cli.md is stale: regenerate it with {script.COMMAND}"


def test_every_command_is_documented() -> None:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for command in ("budget set", "report", "audit", "alerts set", "alerts list", "runs list", "runs show"):
        assert f"## costaware {command}\n" in text
    assert "`--group-by {dag,task,run,trial,kind,market,cause,outcome,tag:<name>}`" in text
