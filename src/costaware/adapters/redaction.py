"""Secrets kept out of what the ledger shows: its notes are on the Cost page and in the JSON API.

Every reader of a DAG sees its entries' notes there, where the task's own log hides its secrets.
"""

from __future__ import annotations

import re

#: A password in a URL (``postgresql://etl:secret@db``), hidden even when nobody registered it as a secret.
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]+:)[^@\s]+@")


def redacted(text: str) -> str:
    """``text`` with the secrets Airflow masks in its logs, and any URL's password, as ``***``.

    A failed try's error, or a remote job's reason for its end, went to the ledger's note as it was, shown
    on the Cost page and by the JSON API to everyone who can read the DAG, where the task's own log hides it.
    """
    try:
        from airflow.sdk._shared.secrets_masker import redact

        text = str(redact(text))
    except Exception:  # an Airflow without the masker (or a masker that fails) hides nothing more here
        pass
    return _URL_PASSWORD.sub(r"\1***@", text)
