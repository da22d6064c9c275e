"""How every ``costaware`` command prints rows: an aligned text table, CSV or JSON.

Tables are drawn by ``tabulate`` (Airflow's own CLI uses it too). Cells arrive formatted for people
(``$1,234.50``); JSON gets the exact figures the command passes as ``payload``.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

#: The ``--format`` choices of every command that prints rows.
FORMATS = ("table", "json", "csv")

_AMOUNT = re.compile(r"^-?\$[\d,]+\.(\d+)$")
#: A dollar amount as people read it (``$1,234.50``, ``-$0.17``): CSV gets the number alone.
_CSV_AMOUNT = re.compile(r"^(-?)\$([\d,]+(?:\.\d+)?)$")


def csv_cell(value: Any) -> Any:
    """``value`` for a CSV cell: a dollar amount as a plain number (``1234.50``), which spreadsheets sum."""
    if isinstance(value, str):
        if value == "-":  # the tables' "none" mark: an empty cell (it came out as the text "'-")
            return ""
        found = _CSV_AMOUNT.match(value)
        if found:
            return found.group(1) + found.group(2).replace(",", "")
        if value[:1] in _FORMULA_STARTS and not _is_number(value):
            # A tag value from a run's params ("=HYPERLINK(...)", "+1+cmd|calc") is text in a spreadsheet,
            # never a formula it runs.
            return "'" + value
    return value


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def plain(value: Decimal) -> str:
    """A number without trailing zeros or an exponent: ``0.476`` for ``0.4760000000``; ``2`` for ``2.000``."""
    return format(value.normalize(), "f")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, labels: int = 1) -> str:
    """The rows as a plain text table: the first ``labels`` columns left-aligned, the rest right-aligned.

    A column of dollar amounts that mixes cents and micro-dollars ($0.17, $0.170002) has its decimal
    points lined up.
    """
    from tabulate import tabulate

    cells = [[str(c) for c in row] for row in rows]
    for i in range(labels, len(headers)):
        column = [row[i] for row in cells]
        found = [_AMOUNT.match(c) for c in column]
        if column and all(f or c == "-" for f, c in zip(found, column, strict=True)):
            places = max((len(f.group(1)) for f in found if f), default=0)
            for row, f in zip(cells, found, strict=True):
                row[i] += " " * (places - len(f.group(1)) if f else 0)
    text = tabulate(
        cells,
        headers=[str(h) for h in headers],
        tablefmt="simple",
        disable_numparse=True,
        preserve_whitespace=True,
        colalign=["left" if i < labels else "right" for i in range(len(headers))],
    )
    return "\n".join(line.rstrip() for line in text.splitlines())


def emit(
    rows: Sequence[Sequence[Any]],
    fmt: str,
    *,
    headers: Sequence[str],
    payload: Any = None,
    labels: int = 1,
) -> None:
    """Print rows in the format ``--format`` asked for.

    Args:
        rows: The cells, one sequence per row, formatted for people.
        fmt: ``table``, ``json`` or ``csv``.
        headers: The column names of the table and the CSV header.
        payload: What ``json`` prints (exact figures under machine keys); default: each row as an object
            keyed by ``headers``.
        labels: How many leading columns hold names (left-aligned in the table).
    """
    if fmt == "json":
        if payload is None:
            payload = [dict(zip(headers, row, strict=True)) for row in rows]
        print(json.dumps(payload, indent=2, default=str))
    elif fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(headers)
        writer.writerows([csv_cell(cell) for cell in row] for row in rows)
        print(out.getvalue(), end="")
    else:
        print(render_table(headers, rows, labels=labels))


def emit_summary(summary: Mapping[str, Any], fmt: str, sentence: str) -> None:
    """Print a command's one-line result: ``sentence`` for people, else one JSON object or one CSV row."""
    if fmt == "json":
        print(json.dumps(summary, default=str))
    elif fmt == "csv":
        emit([list(summary.values())], "csv", headers=list(summary))
    else:
        print(sentence)
