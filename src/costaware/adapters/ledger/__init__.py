"""The cost ledger: entries, budgets, reservations, reports and governance in one SQL database.

``Ledger`` (``costaware.Ledger``, in :mod:`.store`) is the front; each concept has its own module:
:mod:`.engine` (URL, SQLite's lock, ``transaction()`` / ``reading()``), :mod:`.schema` (the tables),
:mod:`.migrate` (Alembic revisions under ``migrations/``), :mod:`.queries` (report filters and groupings),
:mod:`.entries`, :mod:`.budgets`, :mod:`.reservations`, :mod:`.reports`, :mod:`.audit`, :mod:`.governance`,
the side tables :mod:`.efficiency`, :mod:`.window_claims`, :mod:`.gate_requests`, :mod:`.discounts`, and
:mod:`.views` (the Cost page's reads).
"""
