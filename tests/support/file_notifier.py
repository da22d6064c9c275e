"""A user's own Airflow notifier for tests: appends each rendered message to a file (any process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.sdk import BaseNotifier


class FileNotifier(BaseNotifier):
    """Appends ``message`` (templated) as one line to ``path``."""

    template_fields = ("message",)

    def __init__(self, path: str, message: str = "{{ costaware_alert.message }}") -> None:
        super().__init__()
        self.path, self.message = path, message

    def notify(self, context: Any) -> None:
        with Path(self.path).open("a") as out:
            out.write(self.message + "\n")


class HeaderFileNotifier(FileNotifier):
    """A notifier that keeps its ``**headers`` itself (none go on to ``BaseNotifier``): any name is taken."""

    def __init__(self, path: str, **headers: str) -> None:
        super().__init__(path)
        self.headers = headers
