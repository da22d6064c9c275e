"""`[core] hostname_callable` for the Celery test: each worker reports the name the test gave it."""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    return os.environ.get("COSTAWARE_WORKER_NAME") or socket.getfqdn()
