"""Plain SVG charts, rendered on the server: no JavaScript, nothing fetched from a CDN."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from html import escape

PALETTE = ("#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4b5563", "#db2777")
WIDTH, HEIGHT, PAD = 720, 240, 48
LEFT = 84  # room for the y-axis amount


def _money(value: Decimal) -> str:
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.6f}".rstrip("0").rstrip(".")


def stacked_bars(days: Sequence[tuple[date, str, Decimal]], title: str) -> str:
    """Spend per day, one stacked bar per day, one colour per group (legend below)."""
    if not days:
        return f'<p class="empty">{escape(title)}: no spend in this range.</p>'
    dates = sorted({d for d, _, _ in days})
    groups = sorted({g for _, g, _ in days})
    colour = {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(groups)}
    totals = {d: sum((usd for day, _, usd in days if day == d), Decimal(0)) for d in dates}
    top = max(totals.values()) or Decimal(1)
    slot = (WIDTH - LEFT - PAD) / len(dates)
    bar = max(2.0, slot * 0.7)
    parts = [_frame(title, top)]
    for i, d in enumerate(dates):
        x = LEFT + i * slot + (slot - bar) / 2
        y = float(HEIGHT - PAD)
        for day, group, usd in days:
            if day != d or usd <= 0:
                continue
            h = float(usd / top) * (HEIGHT - 2 * PAD)
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{colour[group]}">'
                f"<title>{escape(group)} on {d.isoformat()}: {_money(usd)}</title></rect>"
            )
        if len(dates) <= 14 or i % max(1, len(dates) // 7) == 0:
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{HEIGHT - PAD + 16}" class="tick">'
                f"{d.strftime('%m-%d')}</text>"
            )
    parts.append("</svg>")
    legend = "".join(
        f'<span class="key"><i style="background:{colour[g]}"></i>{escape(g)}</span>' for g in groups
    )
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def horizontal_bars(rows: Sequence[tuple[str, Decimal]], title: str) -> str:
    """One bar per group, longest first."""
    if not rows:
        return f'<p class="empty">{escape(title)}: no spend in this range.</p>'
    rows = sorted(rows, key=lambda r: r[1], reverse=True)[:12]
    top = max(usd for _, usd in rows) or Decimal(1)
    line = 22
    height = PAD + line * len(rows)
    parts = [
        f'<svg role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {height}" class="chart">',
        f'<text x="0" y="16" class="title">{escape(title)}</text>',
    ]
    for i, (name, usd) in enumerate(rows):
        y = 32 + i * line
        w = float(usd / top) * (WIDTH - 260)
        parts.append(f'<text x="0" y="{y + 13}" class="label">{escape(name[:28])}</text>')
        parts.append(
            f'<rect x="180" y="{y}" width="{max(w, 1):.1f}" height="16" fill="{PALETTE[i % len(PALETTE)]}"/>'
        )
        parts.append(f'<text x="{186 + w:.1f}" y="{y + 13}" class="value">{_money(usd)}</text>')
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
    parts = [_frame(title, top)]
    cap_y = HEIGHT - PAD - float(cap / top) * (HEIGHT - 2 * PAD)
    parts.append(f'<line x1="{LEFT}" x2="{WIDTH - PAD}" y1="{cap_y:.1f}" y2="{cap_y:.1f}" class="cap"/>')
    parts.append(
        f'<text x="{WIDTH - PAD}" y="{cap_y - 4:.1f}" class="value" text-anchor="end">'
        f"cap {_money(cap)}</text>"
    )
    slots = len(cumulative) - 1 + (forecast is not None)
    if forecast is not None:
        parts.append(_forecast_marks(cumulative, forecast, top))
    if cumulative:
        step = (WIDTH - LEFT - PAD) / max(1, slots)
        xy = [
            (LEFT + i * step, HEIGHT - PAD - float(v / top) * (HEIGHT - 2 * PAD))
            for i, (_, v) in enumerate(cumulative)
        ]
        parts.append(f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in xy)}" class="spent"/>')
        parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" class="point"/>' for x, y in xy]
        last_day, last = cumulative[-1]
        parts.append(
            f'<text x="{LEFT}" y="{HEIGHT - 8}" class="tick">'
            f"spent {_money(last)} by {last_day.isoformat()}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _forecast_marks(
    cumulative: Sequence[tuple[date, Decimal]], forecast: tuple[Decimal, Decimal, Decimal], top: Decimal
) -> str:
    def y(v: Decimal) -> float:
        return HEIGHT - PAD - float(v / top) * (HEIGHT - 2 * PAD)

    central, low, high = forecast
    end_x = WIDTH - PAD
    start_x = (
        LEFT + (WIDTH - LEFT - PAD) * (len(cumulative) - 1) / max(1, len(cumulative)) if cumulative else LEFT
    )
    start_v = cumulative[-1][1] if cumulative else Decimal(0)
    return (
        f'<line x1="{end_x:.1f}" x2="{end_x:.1f}" y1="{y(low):.1f}" y2="{y(high):.1f}" '
        f'class="forecast-band"/>'
        f'<line x1="{start_x:.1f}" x2="{end_x:.1f}" y1="{y(start_v):.1f}" y2="{y(central):.1f}" '
        f'class="forecast"/>'
        f'<text x="{end_x - 4:.1f}" y="{y(central) + 14:.1f}" class="value" text-anchor="end">'
        f"forecast {_money(central)} ({_money(low)}-{_money(high)})</text>"
    )


def _frame(title: str, top: Decimal) -> str:
    return (
        f'<svg role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" class="chart">'
        f'<text x="0" y="16" class="title">{escape(title)}</text>'
        f'<line x1="{LEFT}" x2="{WIDTH - PAD}" y1="{HEIGHT - PAD}" y2="{HEIGHT - PAD}" class="axis"/>'
        f'<text x="{LEFT - 4}" y="{PAD + 4}" class="tick" text-anchor="end">{_money(top)}</text>'
    )
