"""``costaware prices``: look up, refresh and import on-demand prices.

``list`` and ``show`` read the bundled snapshot and the price cache; ``refresh`` fills the cache from the AWS
Price List Query API (an Airflow AWS connection); ``import`` fills it from an offline offer file.

One module per command: :mod:`~costaware.cli.commands.prices_show` (list, show),
:mod:`~costaware.cli.commands.prices_refresh` and :mod:`~costaware.cli.commands.prices_import`; what they
share is in :mod:`~costaware.cli.commands.prices_lookup`. :mod:`costaware.cli.config` names the commands
here, so a test that patches one of them on this module patches the one that runs.
"""

from __future__ import annotations

from costaware.cli.commands.prices_import import (
    _types_hint,
    _warn_of_unknown_types,
    _with_hints,
    import_prices,
)
from costaware.cli.commands.prices_lookup import ORIGINS, _check_region, _prices, _sdk_regions, describe
from costaware.cli.commands.prices_refresh import _check_types_of_service, _connection_exists, refresh_prices
from costaware.cli.commands.prices_show import _discount, _show, _show_cache, list_prices, show_prices

# The private helpers too: code and tests written against the single module import them from here.
__all__ = [
    "ORIGINS",
    "_check_region",
    "_check_types_of_service",
    "_connection_exists",
    "_discount",
    "_prices",
    "_sdk_regions",
    "_show",
    "_show_cache",
    "_types_hint",
    "_warn_of_unknown_types",
    "_with_hints",
    "describe",
    "import_prices",
    "list_prices",
    "refresh_prices",
    "show_prices",
]
