"""Free 127.0.0.1 ports for the servers the harness starts (ZooKeeper, ClickHouse, Spark), and
whether one is free again once a server has stopped."""

from __future__ import annotations

import contextlib
import socket


def free_ports(n: int) -> list[int]:
    """n distinct free 127.0.0.1 ports. Each stays bound until all are picked: picked one at a time,
    a port just released can come back for the next one (a fresh clone's fault suite, 2026-12-01:
    a 3-member ensemble got the same port twice, and ZooKeeper refused the config, "Client and
    election port must be different")."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def free_port() -> int:
    return free_ports(1)[0]


def port_is_free(port: int) -> bool:
    """True when nothing listens on the port (TIME_WAIT leftovers do not count, as for a JVM)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
