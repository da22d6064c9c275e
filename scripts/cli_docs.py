"""Write ``docs/cli.md``, the reference of every ``costaware`` command, from the command's own parser.

Run: ``.venv/bin/python scripts/cli_docs.py`` after changing a command (``--check`` only compares).
``tests/cli/test_cli_docs.py`` fails while the file differs from what this script writes.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

from costaware.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "cli.md"
COMMAND = ".venv/bin/python scripts/cli_docs.py"

INTRO = f"""\
# The `costaware` command

<!-- Generated from the parser by scripts/cli_docs.py; do not edit. Regenerate: {COMMAND} -->

Budgets, cost reports, price look-ups, policy replay and the feature cache, from a shell. The ledger is the
one `--ledger-url` names (before the command, or after it on commands that use the ledger; two different ones
are refused), else the `costaware_ledger` connection when `AIRFLOW_CONN_COSTAWARE_LEDGER` gives it (as in the
compose file) or Airflow's metadata database of `$AIRFLOW_HOME` keeps it, else `COSTAWARE_LEDGER_URL`, else
the SQLite file `$AIRFLOW_HOME/costaware/ledger.db` that the Airflow side uses too: the order the workers read
them in; see [the ledger](ledger.md). A metadata database that does not answer within 5 s (unless `[database]
sql_alchemy_connect_args` sets connect arguments of its own, or its URL a `?connect_timeout=`, then used) or
cannot be read is named, its password masked: a command that writes is refused (exit 2), one that only reads
says so and reads the fallback.

Every command that prints rows takes `--format table|json|csv` (default `table`; `cache show`, a manifest,
defaults to `json`): `table` for people, `json` with exact figures under machine keys, `csv` for spreadsheets
(amounts as plain numbers, `1234.50` for `$1,234.50`; shares and utilization, such as `spot_share` and `CPU
util`, as fractions of 1, `0.45` for `45%`, as in `json`). Report rows are grouped by `--group-by` (one of the
choices below, or `tag:<name>`); budgets have a `--period`. A keyword (a `--format`, `--period`, `--group-by`
or other choice, and the `tag:` of `tag:<name>`) is matched whatever its case (`--group-by TASK`); names of
your own (tags, DAG ids, scopes) are matched exactly. Options are written in full: an abbreviation
(`--gpu` for `--gpu-model`) is refused as an unknown option, with the one meant offered.

Exit codes: 0 done; 1 `prices refresh` found no price, or `spool drain` left an entry unwritten; 2 an error:
bad input (an unknown value, a missing argument, a malformed file) or a ledger, store or AWS API that could
not be reached or refused (no credentials), with the reason on stderr (`costaware: error: ...`) and nothing
written; 130 interrupted (Ctrl-C: `costaware: interrupted` on stderr). A `--dag-id` or run id the ledger has
no entry of is an unknown value, exit 2 on every command (`report`, `report --efficiency`, `runs list`, `runs
show`), with the DAGs the ledger has: a typo is never read as "it cost nothing" (a DAG that has not run yet
has no entry either); so is a ledger location that holds none (a SQLite file that does not exist, a database
without costaware's tables): a command that reads makes no ledger there, nor do `prices refresh` and `prices
import` in a database that holds other tables but none of costaware's unless given `--create-ledger` (a ledger
kept in Airflow's metadata database; an empty database is made a ledger, said on stderr). A known DAG or run
that the other filters (`--since`, `--until`, `--scope`) select nothing of is an empty answer, exit 0, and so
is one whose costs only wait (spooled on this machine, or an open hold: one whose holder names no run, a trial
run outside Airflow, is its run's where a per-run budget holds it there), with a note on stderr saying what
waits. A blank value (`--store ""`, most often an unset shell variable) is refused, never read as "not given";
only `alerts set --thresholds ''` means something (the defaults). An option that takes one value given twice
with different values (`--cap-usd 2 --cap-usd 3`) is refused, never read as the last. `budget set` refuses a
tag name or value in quotes (`--scope 'project="churn"'`: the quotes would be part of the tag, which no task
has) and, where no entry or open hold has the scope's tags, says which close tag name or value they have
(`--scope projct=churn`: did you mean 'project'?).

```bash
costaware budget set --scope project=churn --period month --cap-usd 500 --timezone Europe/Berlin
costaware budget show --scope project=churn          # cap, spent, reserved, left and the forecast
costaware report --dag-id cost_aware_retrain --last-run
costaware report --since 2026-11-01 --group-by tag:team --format csv
costaware prices show g5.xlarge --region us-east-1   # on-demand, spot estimate, interruption rate
costaware simulate --prices history.json --jobs jobs.csv --availability trace.json
costaware cache evict --max-age-days 30 --dry-run
costaware runs show --last --dag-id cost_aware_retrain
```
"""


def _leaves(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """``(command words, help, parser)`` of every command that runs, in declaration order."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help or "" for a in action._choices_actions}
        for name, sub in action.choices.items():
            children = list(_leaves(sub, (*words, name)))
            if children:
                yield from children
            else:
                yield (*words, name), helps.get(name, ""), sub


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{names}`"
    if action.metavar is not None:
        value = str(action.metavar)
    elif action.choices is not None:
        value = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        value = action.dest.upper()
    return f"`{names} {value}`"


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    lines = ["| argument | default | what |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        what = formatter._expand_help(action) if action.help else ""
        if action.required:
            default = "required"
        elif action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
            default = ""
        else:
            default = f"`{action.default}`"
        lines.append(f"| {_flag(action)} | {default} | {_cell(what)} |")
    return lines


def render() -> str:
    """The text of ``docs/cli.md``."""
    parser = build_parser()
    # A fixed width: the usage lines must not depend on the terminal the script runs in.
    fixed = functools.partial(argparse.HelpFormatter, width=110, max_help_position=40)
    leaves = list(_leaves(parser))
    out = [INTRO, "## Commands", ""]
    out += [
        f"- [`costaware {' '.join(words)}`](#{'-'.join(['costaware', *words])}): {h}"
        for words, h, _ in leaves
    ]
    out += ["", "Before every command:", "", *_arguments(parser), ""]
    for words, help_text, sub in leaves:
        sub.formatter_class = fixed
        out += [f"## costaware {' '.join(words)}", "", (sub.description or help_text).strip(), ""]
        out += ["```text", sub.format_usage().strip(), "```", "", *_arguments(sub), ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) ``docs/cli.md``; 1 when ``--check`` finds it stale."""
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--check", action="store_true", help="only say whether docs/cli.md is up to date")
    args = cli.parse_args(argv)
    text = render()
    if args.check:
        if TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
