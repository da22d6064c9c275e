"""The test harness's own servers: each session gets a server of its own."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
import services


@pytest.fixture(params=["proc", "no-proc-net-tcp"])
def proc_net_tcp(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``/proc/net/tcp`` as Linux shows it, or unreadable (a sandbox hiding it; no ``/proc`` at all)."""
    if request.param == "no-proc-net-tcp":

        def hidden(path: str) -> str:
            raise PermissionError(13, "Permission denied", path)

        monkeypatch.setattr(services, "_read_tcp_table", hidden)
    return str(request.param)


def answers_moto(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/moto-api/", timeout=10) as answer:
        return bool(answer.status == 200)


def test_a_moto_server_whose_port_another_took_first_is_started_again_on_a_port_of_its_own(
    monkeypatch: pytest.MonkeyPatch, proc_net_tcp: str
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
            assert answers_moto(url)
    finally:
        other[0].close()


def test_without_proc_net_tcp_the_server_is_told_by_its_own_answer_not_another_motos(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A sandbox hiding /proc/net/tcp: the port's owner could not be read, the wait ran its 30 s and the
    # session failed with "did not listen on a port of its own". Without the table, a moto of another
    # worker on the port answers /moto-api/ as this one would: only this one's own log tells them apart.
    def hidden(path: str) -> str:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(services, "_read_tcp_table", hidden)
    started = time.monotonic()
    with services.moto_server() as another_workers:
        assert time.monotonic() - started < 25  # told by its answer, not by the 30 s wait running out
        assert answers_moto(another_workers)
        taken = int(another_workers.rsplit(":", 1)[1])
        picked = services.free_port
        picks: list[int] = []

        def the_other_motos_port_first() -> int:
            picks.append(taken if not picks else picked())
            return picks[-1]

        monkeypatch.setattr(services, "free_port", the_other_motos_port_first)
        with services.moto_server() as own:
            assert int(own.rsplit(":", 1)[1]) != taken and len(picks) == 2
            assert answers_moto(own)
