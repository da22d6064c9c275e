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


def _command_lines() -> list[tuple[str, int, list[str]]]:
    """Each ``costaware <command> ...`` written in the docs, README, Makefile, scripts, DAGs and examples."""
    import re

    files = [ROOT / "README.md", ROOT / "Makefile", *ROOT.glob("docs/**/*.md")]
    for folder in ("scripts", "dags", "examples"):
        files += [path for path in (ROOT / folder).rglob("*") if path.is_file()]
    written = re.compile(r"(?:^|[`$ \"'(])costaware ([a-z][^`|;&\n\"')]*)")
    return [
        (str(path.relative_to(ROOT)), number, found.group(1).split())
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        for found in written.finditer(line)
    ]


def test_every_option_a_documented_command_line_gives_is_its_command_s_spelt_whole() -> None:
    # The parser matches options whole (an abbreviation is an unknown option): a line copied from the docs
    # with `--gpu` for --gpu-model would fail.
    import argparse

    from costaware.cli import build_parser

    def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        found = [a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(found[0]) if found else {}

    top = build_parser()
    top_options = {o for action in top._actions for o in action.option_strings}
    lines = _command_lines()
    wrong = []
    for where, number, words in lines:
        parser, rest = top, words
        for _ in range(2):  # a command, then a group's action
            if rest and rest[0] in commands(parser):
                parser, rest = commands(parser)[rest[0]], rest[1:]
        if parser is top:
            continue  # prose ("costaware records ..."), not a command line
        options = top_options | {o for action in parser._actions for o in action.option_strings}
        given = {word.strip("[](),.`*").split("=")[0] for word in rest}
        wrong += [f"{where}:{number}: {o}" for o in sorted(given) if o.startswith("--") and o not in options]
    assert len(lines) > 100  # the pattern still finds the command lines
    assert wrong == []
