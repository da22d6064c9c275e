"""Plain SVG charts, rendered on the server: no JavaScript, nothing fetched from a CDN.

Amounts are written with :func:`costaware.core.money.format_usd_exact`, like every dollar figure on the page
and in the CLI's tables. Labels and amounts use a monospace font (``.label``, ``.value``, ``.tick`` in the
page's style), so their width is known here and the margins are sized to fit them: nothing is clipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from html import escape
from typing import Any

from costaware.core.money import format_usd_exact as money

#: 20 colours that stay apart from each other (Tableau's 10 and their light tints, two darker hues),
#: none of them grey: grey is the "other" group's.
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#dbdb8d",
    "#9edae5",
    "#637939",
)
OTHER_COLOUR = "#9ca3af"
WIDTH, HEIGHT, PAD = 720, 240, 48
LEFT = 84  # the narrowest room for the y-axis amount; wider amounts get more (axis_left)
#: Width of one character of the charts' 11px monospace text (0.6 em, plus a margin for wider fonts).
CHAR_PX = 6.8
#: The height of one line of chart text, baseline to baseline: labels closer than this overlap.
LINE_PX = 14
#: Longest bar label in characters: longer names are shortened (keeping what tells them apart).
MAX_LABEL_CHARS = 44


def text_px(text: str) -> float:
    """How wide ``text`` is drawn in the charts' monospace font."""
    return len(text) * CHAR_PX


#: A title's width per character (13 px bold, as the page's CSS sets it): wider than a tick label's.
TITLE_CHAR_PX = 7.8


def title_text(title: str) -> str:
    """A chart's title; one too long for the chart is drawn narrower to fit, never cut at its right edge.

    A budget's title carries its scope and figures to the micro-dollar: with three tags it ran past the edge.
    """
    fit = (
        f' textLength="{WIDTH}" lengthAdjust="spacingAndGlyphs"' if len(title) * TITLE_CHAR_PX > WIDTH else ""
    )
    return f'<text x="0" y="16" class="title"{fit}>{escape(title)}</text>'


def axis_left(top_label: str) -> float:
    """Where a chart's plot starts: right of its y-axis amount, which is drawn right-aligned before it."""
    return max(float(LEFT), text_px(top_label) + 8)


def short_labels(names: Sequence[str], max_chars: int = MAX_LABEL_CHARS) -> list[str]:
    """Labels of at most ``max_chars`` characters that still tell ``names`` apart.

    A shorter name is kept whole. A longer one keeps its start and the part from where it first differs
    from the other names, with ``…`` for what is left out: run ids share long prefixes
    (``manual__2026-11-23T18:00:00.``), and a label cut at a fixed length would make two runs look alike.
    """
    out = []
    for i, name in enumerate(names):
        if len(name) <= max_chars:
            out.append(name)
            continue
        differs = max((_common_prefix(name, other) for j, other in enumerate(names) if j != i), default=0)
        if differs < max_chars - 1:  # the start alone tells it apart
            out.append(name[: max_chars - 1] + "…")
            continue
        head = max_chars // 4
        window = max_chars - head - 1
        if len(name) - window <= differs:  # the end of the name holds the difference
            out.append(name[:head] + "…" + name[len(name) - window :])
        else:
            start = max(head, differs - window // 2)
            out.append(name[:head] + "…" + name[start : start + window - 1] + "…")
    if len(set(out)) < len(out):  # two shortened names still alike: show them whole
        out = [name if out.count(label) > 1 else label for name, label in zip(names, out, strict=True)]
    return out


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def stacked_bars(days: Sequence[tuple[date, str, Decimal]], title: str, *, other: str | None = None) -> str:
    """Spend per day, one stacked bar per day, one colour per group (legend below), costliest at the bottom.

    A bar stacks what was spent; a group whose day is negative (a credit or refund larger than its spend)
    is not drawn and is named in a note below the chart.

    Args:
        days: ``(day, group, usd)`` points; at most ``len(PALETTE)`` groups besides ``other`` get their own
            colour (fold the rest first: ``ledger.reports.fold_daily``).
        title: The chart's title.
        other: The group that totals the groups left out, drawn grey and listed last.
    """
    if not days:
        return f'<p class="empty">{escape(title)}: no spend in this range.</p>'
    dates = sorted({d for d, _, _ in days})
    totals: dict[str, Decimal] = {}
    for _, group, usd in days:
        totals[group] = totals.get(group, Decimal(0)) + usd
    groups = sorted((g for g in totals if g != other), key=lambda g: (-totals[g], g))
    colour = {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(groups)}
    if other is not None and other in totals:
        groups.append(other)
        colour[other] = OTHER_COLOUR
    rank = {g: i for i, g in enumerate(groups)}
    # Scaled to the tallest stack of spend: a day's net total (credits taken off) made a bar taller than the
    # chart, and a day whose credits passed its spend a negative height.
    per_day = {d: sum((usd for day, _, usd in days if day == d and usd > 0), Decimal(0)) for d in dates}
    top = max(per_day.values()) or Decimal(1)
    frame, left = _frame(title, top)
    slot = (WIDTH - left - PAD) / len(dates)
    bar = max(2.0, slot * 0.7)
    parts = [frame]
    for i, d in enumerate(dates):
        x = left + i * slot + (slot - bar) / 2
        y = float(HEIGHT - PAD)
        for _, group, usd in sorted((p for p in days if p[0] == d), key=lambda p: rank[p[1]]):
            if usd <= 0:
                continue
            h = float(usd / top) * (HEIGHT - 2 * PAD)
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{colour[group]}">'
                f"<title>{escape(group)} on {d.isoformat()}: {money(usd)}</title></rect>"
            )
        if len(dates) <= 14 or i % max(1, len(dates) // 7) == 0:
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{HEIGHT - PAD + 16}" class="tick" text-anchor="middle">'
                f"{d.strftime('%m-%d')}</text>"
            )
    parts.append("</svg>")
    legend = "".join(
        f'<span class="key"><i style="background:{colour[g]}"></i>{escape(g)}</span>' for g in groups
    )
    return "".join(parts) + f'<div class="legend">{legend}</div>' + _credits_note(days)


#: Credits a chart's note names one by one; the rest are counted.
MAX_CREDITS_NAMED = 5


def _credits_note(days: Sequence[tuple[date, str, Decimal]]) -> str:
    """The note under a stacked bar chart naming the negative amounts it does not draw ("" when none)."""
    credits = sorted((p for p in days if p[2] < 0), key=lambda p: (p[2], p[0], p[1]))
    if not credits:
        return ""
    named = [f"{money(usd)} ({escape(group)} on {day.isoformat()})" for day, group, usd in credits]
    if len(named) > MAX_CREDITS_NAMED:
        named = [*named[:MAX_CREDITS_NAMED], f"and {len(named) - MAX_CREDITS_NAMED:,} more"]
    total = money(sum((usd for _, _, usd in credits), Decimal(0)))
    return (
        f'<p class="note">Credits and refunds are not drawn (the bars show spend), {total} in all: '
        f"{', '.join(named)}.</p>"
    )


def horizontal_bars(
    rows: Sequence[tuple[str, Decimal]], title: str, *, limit: int = 12, noun: str = "groups"
) -> str:
    """One bar per group, longest first; past ``limit`` groups, one line totals the rest.

    Each label is the group's name, shortened only past ``MAX_LABEL_CHARS`` (the whole name is the bar's
    tooltip); the label column is as wide as the longest label.
    """
    if not rows:
        return f'<p class="empty">{escape(title)}: no spend in this range.</p>'
    ordered = sorted(rows, key=lambda r: r[1], reverse=True)
    shown, rest = ordered[:limit], ordered[limit:]
    labels = short_labels([name for name, _ in shown])
    amounts = [money(usd) for _, usd in shown]
    label_w = max(text_px(label) for label in labels) + 8
    value_w = max(text_px(a) for a in amounts) + 8
    top = max(usd for _, usd in shown) or Decimal(1)
    line = 22
    height = PAD + line * (len(shown) + bool(rest))
    span = max(40.0, WIDTH - label_w - value_w)
    parts = [
        f'<svg role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {height}" class="chart">',
        title_text(title),
    ]
    for i, ((name, usd), label, amount) in enumerate(zip(shown, labels, amounts, strict=True)):
        y = 32 + i * line
        w = float(usd / top) * span if usd > 0 else 0.0
        parts.append(f'<text x="0" y="{y + 13}" class="label">{escape(label)}</text>')
        parts.append(
            f'<rect x="{label_w:.1f}" y="{y}" width="{max(w, 1):.1f}" height="16" '
            f'fill="{PALETTE[i % len(PALETTE)]}"><title>{escape(name)}: {amount}</title></rect>'
        )
        parts.append(f'<text x="{label_w + w + 6:.1f}" y="{y + 13}" class="value">{amount}</text>')
    if rest:
        y = 32 + len(shown) * line
        total = money(sum((usd for _, usd in rest), Decimal(0)))
        parts.append(
            f'<text x="0" y="{y + 13}" class="label">+ {len(rest):,} more {escape(noun)}: {total}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def burn_down_line(
    cumulative: Sequence[tuple[date, Decimal]],
    cap: Decimal,
    title: str,
    forecast: tuple[Decimal, Decimal, Decimal] | None = None,
) -> str:
    """Running spend of a budget period against its cap (dashed line).

    With ``forecast`` (central, low, high at the period end) the last slot on the right is the period end:
    a dotted line runs from the spend so far to the forecast, with its low-high interval as a bar.
    """
    top = max([cap, *[v for _, v in cumulative], *(forecast or ())]) or Decimal(1)
    frame, left = _frame(title, top)
    parts = [frame]
    cap_y = HEIGHT - PAD - float(cap / top) * (HEIGHT - 2 * PAD)
    parts.append(f'<line x1="{left:.1f}" x2="{WIDTH - PAD}" y1="{cap_y:.1f}" y2="{cap_y:.1f}" class="cap"/>')
    parts.append(
        f'<text x="{WIDTH - PAD}" y="{cap_y - 4:.1f}" class="value" text-anchor="end">cap {money(cap)}</text>'
    )
    slots = len(cumulative) - 1 + (forecast is not None)
    if forecast is not None:
        parts.append(_forecast_marks(cumulative, forecast, top, left, cap_label_y=cap_y - 4))
    if cumulative:
        step = (WIDTH - left - PAD) / max(1, slots)
        xy = [
            (left + i * step, HEIGHT - PAD - float(v / top) * (HEIGHT - 2 * PAD))
            for i, (_, v) in enumerate(cumulative)
        ]
        parts.append(f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in xy)}" class="spent"/>')
        parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" class="point"/>' for x, y in xy]
        last_day, last = cumulative[-1]
        parts.append(
            f'<text x="{left:.1f}" y="{HEIGHT - 8}" class="tick">'
            f"spent {money(last)} by {last_day.isoformat()}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _forecast_marks(
    cumulative: Sequence[tuple[date, Decimal]],
    forecast: tuple[Decimal, Decimal, Decimal],
    top: Decimal,
    left: float,
    cap_label_y: float,
) -> str:
    def y(v: Decimal) -> float:
        return HEIGHT - PAD - float(v / top) * (HEIGHT - 2 * PAD)

    central, low, high = forecast
    end_x = WIDTH - PAD
    start_x = (
        left + (WIDTH - left - PAD) * (len(cumulative) - 1) / max(1, len(cumulative)) if cumulative else left
    )
    start_v = cumulative[-1][1] if cumulative else Decimal(0)
    # Under the end, the label of a rising line was struck through by the line coming up from the left:
    # above the end for a rise (one line higher where the cap's label is), under it for a fall.
    label_y = y(central) + 14
    if central > start_v:
        label_y = y(central) - 6
        if abs(label_y - cap_label_y) < LINE_PX:
            label_y = min(label_y, cap_label_y) - LINE_PX
    return (
        f'<line x1="{end_x:.1f}" x2="{end_x:.1f}" y1="{y(low):.1f}" y2="{y(high):.1f}" '
        f'class="forecast-band"/>'
        f'<line x1="{start_x:.1f}" x2="{end_x:.1f}" y1="{y(start_v):.1f}" y2="{y(central):.1f}" '
        f'class="forecast"/>'
        f'<text x="{end_x - 4:.1f}" y="{label_y:.1f}" class="value" text-anchor="end">'
        f"forecast {money(central)} ({money(low)}-{money(high)})</text>"
    )


def _frame(title: str, top: Decimal) -> tuple[str, float]:
    """The chart's opening: title, x axis and the y-axis amount; and where the plot starts (x)."""
    label = money(top)
    left = axis_left(label)
    return (
        f'<svg role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" class="chart">'
        + title_text(title)
        + f'<line x1="{left:.1f}" x2="{WIDTH - PAD}" y1="{HEIGHT - PAD}" y2="{HEIGHT - PAD}" class="axis"/>'
        f'<text x="{left - 4:.1f}" y="{PAD + 4}" class="tick" text-anchor="end">{label}</text>'
    ), left


def cost_vs_metric(runs: Sequence[Any]) -> str:
    """One bar per retrain run (its cost) and a line of its holdout metric; promoted runs are marked."""
    scored = [r for r in runs if r.usd is not None][-30:]
    if not scored:
        return '<p class="empty">No retrain outcomes yet: the retrain and promote operators record them.</p>'
    metric = next((r.metric for r in scored if r.metric), "metric")
    values = [r.metric_value for r in scored if r.metric_value is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    span = (high - low) or 1.0
    top = max(r.usd for r in scored) or Decimal(1)
    left = axis_left(money(top))
    slot = (WIDTH - left - PAD) / len(scored)
    bar = max(2.0, slot * 0.6)
    inner = HEIGHT - 2 * PAD
    title = f"Cost per run (bars) and holdout {metric} (line); filled points were promoted"
    parts = [
        f'<svg role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" class="chart">',
        title_text(title),
        f'<line x1="{left:.1f}" x2="{WIDTH - PAD}" y1="{HEIGHT - PAD}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<text x="{left - 4:.1f}" y="{PAD + 4}" class="tick" text-anchor="end">{escape(money(top))}</text>',
        # The metric's scale sits right of the plot, right-aligned so a wide value is not cut off.
        f'<text x="{WIDTH}" y="{PAD + 4}" class="tick" text-anchor="end">{high:.4f}</text>',
        f'<text x="{WIDTH}" y="{HEIGHT - PAD}" class="tick" text-anchor="end">{low:.4f}</text>',
    ]
    points = []
    for i, run in enumerate(scored):
        x = left + i * slot + (slot - bar) / 2
        h = float((run.usd or 0) / top) * inner
        label = f"{run.run_id}: {money(run.usd or Decimal(0))}"
        if run.metric_value is not None:
            label += f", {metric} {run.metric_value:.4f}" + (" (promoted)" if run.promoted else "")
            y = HEIGHT - PAD - (run.metric_value - low) / span * inner * 0.9 - inner * 0.05
            points.append((x + bar / 2, y, bool(run.promoted)))
        parts.append(
            f'<rect x="{x:.1f}" y="{HEIGHT - PAD - h:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="#93c5fd">'
            f"<title>{escape(label)}</title></rect>"
        )
    if points:
        parts.append(
            f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)}" class="spent"/>'
        )
        parts += [
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{"#2563eb" if promoted else "#ffffff"}" '
            'stroke="#2563eb"/>'
            for x, y, promoted in points
        ]
    parts.append("</svg>")
    return "".join(parts)
