"""The Cost page's HTML: Jinja2 templates (``templates/``) that draw a :class:`~.view.CostPage`.

Autoescape is on: every value is escaped unless it is markup the page itself made (the SVG charts, which
escape their own texts). Values are escaped like :func:`html.escape` does (``'`` as ``&#x27;``), as the
charts do, so one text is spelled the same everywhere on the page. Every dollar figure is written with
:func:`costaware.core.money.format_usd_exact`, as in the CLI's tables.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from functools import cache, wraps
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from costaware.core.budget_listing import LIST_STUDY_BUDGETS
from costaware.core.money import format_usd_exact
from costaware.plugins.ui import charts
from costaware.plugins.ui.view import GATE_OUTCOMES, CostPage


def render_page(page: CostPage) -> str:
    """The whole page: the form, then the report or the box saying what is wrong."""
    return _environment().get_template("cost.html").render(page=page, report=page.report)


@cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("costaware.plugins.ui", "templates"),
        autoescape=select_autoescape(["html"]),
        finalize=_escaped,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        money=lambda usd: format_usd_exact(Decimal(usd)),
        # Counts grouped as the charts' "+ 1,730 more runs" and the money are: "15000 entries" read as 1,500.
        count=lambda value: f"{value:,}",
        fixed=lambda value, digits: f"{value:.{digits}f}",
        percent=lambda value: f"{value:.1%}",
        general=lambda value: f"{value:g}",
        utc=lambda instant: _utc(instant),
        gate_outcome=lambda status: GATE_OUTCOMES.get(status, status),
        bars=lambda rows: [(r.group, r.usd) for r in rows],
    )
    env.globals.update(
        stacked_bars=_svg(charts.stacked_bars),
        horizontal_bars=_svg(charts.horizontal_bars),
        burn_down_line=_svg(charts.burn_down_line),
        cost_vs_metric=_svg(charts.cost_vs_metric),
        list_study_budgets=LIST_STUDY_BUDGETS,
    )
    return env


def _escaped(value: Any) -> Any:
    """A value as ``html.escape`` writes it (markup the page made is kept as it is)."""
    if value is None or hasattr(value, "__html__"):
        return value
    return Markup(html.escape(str(value)))


def _svg(chart: Callable[..., str]) -> Callable[..., Markup]:
    """A chart function for the templates: its SVG is markup (it escapes its own texts)."""

    @wraps(chart)
    def draw(*args: Any, **kwargs: Any) -> Markup:
        return Markup(chart(*args, **kwargs))  # charts.py escapes every text it draws

    return draw


def _utc(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%d %H:%M UTC")
