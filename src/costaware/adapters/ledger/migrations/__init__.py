"""Alembic revisions of the cost ledger (``env.py`` runs them; see ``costaware.adapters.ledger.migrate``)."""
