"""The test harness's own servers: each session gets a server of its own."""

from __future__ import annotations

import socket

import pytest
import services


def test_a_moto_server_whose_port_another_took_first_is_started_again_on_a_port_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another xdist worker's moto bound the port first: this one failed to bind, exited unseen, and the
    # session used the other's server until it stopped ("Connection refused").
    picked = services.free_port
    other: list[socket.socket] = []

    def taken_by_another_first() -> int:
        port = picked()
        if not other:
            listener = socket.socket()
            listener.bind(("127.0.0.1", port))
            listener.listen()
            other.append(listener)
        return port

    monkeypatch.setattr(services, "free_port", taken_by_another_first)
    try:
        with services.moto_server() as url:
            assert int(url.rsplit(":", 1)[1]) != other[0].getsockname()[1]
    finally:
        other[0].close()
