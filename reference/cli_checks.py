"""Checks of `python -m reference` arguments that span several options (replica names, the
replication factor against the replicas), made before a run starts so that bad input costs
nothing and changes nothing. Single-option ranges are argparse types in harness/cli_args.py."""

from __future__ import annotations

import argparse

from harness.cli_args import BadInput
from protocol.bugs import UnknownSwitch, check_switches
from protocol.keeper.base import parse_auth
from protocol.table import BadPartitionId, check_partition_id


def replica_names(first: int, count: int, width: int = 0) -> list[str]:
    return [f"r{i:0{width}d}" for i in range(first, first + count)]


def switches(names: list[str] | None, design: str = "rfc") -> frozenset[str]:
    try:
        return check_switches(names or [], design)
    except UnknownSwitch as e:
        raise BadInput(f"--bug: {e}") from None


def check_run(a: argparse.Namespace) -> list[tuple[str, str]]:
    """Raise BadInput naming the option; return the parsed --reassign (partition, replica) pairs."""
    if a.placement_chart:
        if a.placement_chart.suffix not in (".png", ".svg"):
            raise BadInput(f"--placement-chart {a.placement_chart}: written as .png or .svg, by the file's suffix")
        if not (a.rebalance or a.reassign) or a.profile != "quiet" or a.design != "rfc":
            raise BadInput("--placement-chart draws the partitions before and after REBALANCE or REASSIGN: "
                           "give --rebalance or --reassign (the RFC design's quiet profile)")
    if a.replication_factor > a.replicas:
        raise BadInput(f"--replication-factor {a.replication_factor} is above the {a.replicas} replicas")
    initial = replica_names(1, a.replicas)
    added = replica_names(a.replicas + 1, a.add_replicas)
    crashed = a.crash or []
    for name in crashed:
        if name not in initial:
            raise BadInput(f"--crash {name}: no such replica; the run starts {', '.join(initial)}")
    twice = sorted({n for n in crashed if crashed.count(n) > 1})
    if twice:
        raise BadInput(f"--crash {twice[0]} given twice")
    lost = getattr(a, "lose", None) or []
    for name in lost:
        if name not in initial:
            raise BadInput(f"--lose {name}: no such replica; the run starts {', '.join(initial)}")
        if name in crashed:
            raise BadInput(f"--lose {name}: also given to --crash; --lose crashes it and drops it for good")
    twice = sorted({n for n in lost if lost.count(n) > 1})
    if twice:
        raise BadInput(f"--lose {twice[0]} given twice")
    # The crashes come right after the inserts, before --add-replicas: someone must stay to serve.
    if len(crashed) + len(lost) == len(initial) and not a.add_replicas:
        raise BadInput(f"--crash and --lose name every replica ({', '.join(initial)}): at least one must keep running")
    for name in a.restart or []:
        if name in lost:
            raise BadInput(f"--restart {name}: it was lost for good (--lose, SYSTEM DROP REPLICA); it cannot come back")
        if name not in crashed:
            raise BadInput(f"--restart {name}: only a replica given to --crash can be restarted"
                           + (f" ({', '.join(crashed)})" if crashed else " (none was)"))
    left = len(initial) - len(lost) + a.add_replicas
    if lost and left < a.replication_factor:
        raise BadInput(f"--lose {', '.join(lost)} leaves {left} replicas, fewer than --replication-factor "
                       f"{a.replication_factor}: the partitions they owned could not be repaired")
    running = [r for r in initial if r not in crashed and r not in lost] + added
    reassigns = []
    for spec in a.reassign or []:
        p, sep, dst = spec.partition(":")
        if not sep or not dst:
            raise BadInput(f"--reassign wants PARTITION:REPLICA, not {spec!r}")
        if dst not in running:
            raise BadInput(f"--reassign {spec}: no running replica {dst}; running at that point: {', '.join(running)}")
        try:
            reassigns.append((check_partition_id(p), dst))
        except BadPartitionId as e:
            raise BadInput(f"--reassign {spec}: {e}") from None
    return reassigns


def check_gantt(a: argparse.Namespace) -> None:
    if a.rf > a.old:
        raise BadInput(f"--rf {a.rf} is above the {a.old} --old replicas")


# Keeper credentials: never on the command line, where every local user reads them in
# /proc/<pid>/cmdline, and never echoed back in an error (issue 38).
ZK_AUTH_ENV = "ZK_AUTH"
ARGV_AUTH = ("--zk-auth: credentials on the command line are readable by every local user (/proc/PID/cmdline); "
             f"put USER:PASSWORD in a file given by --zk-auth-file (mode 600) or in the {ZK_AUTH_ENV} "
             "environment variable")


def zk_credentials(a: argparse.Namespace, environ=None) -> str | None:
    """The digest identity USER:PASSWORD from --zk-auth-file or the ZK_AUTH environment variable
    (the file wins), None for none; BadInput naming where it came from, never the value."""
    import os
    environ = os.environ if environ is None else environ
    if getattr(a, "zk_auth", None) is not None:
        raise BadInput(ARGV_AUTH)
    path = getattr(a, "zk_auth_file", None)
    if path is not None:
        try:
            mode = path.stat().st_mode
            text = path.read_text()
        except OSError as e:
            raise BadInput(f"--zk-auth-file {path}: cannot be read ({e.strerror})") from None
        if mode & 0o077:
            raise BadInput(f"--zk-auth-file {path}: readable or writable by other users (mode {mode & 0o777:o}); "
                           f"chmod 600 {path}")
        lines = text.splitlines()
        where, value = f"--zk-auth-file {path}", lines[0].strip() if lines else ""
    elif environ.get(ZK_AUTH_ENV):
        where, value = f"the {ZK_AUTH_ENV} environment variable", environ[ZK_AUTH_ENV].strip()
    else:
        return None
    try:
        parse_auth(value)
    except ValueError as e:
        raise BadInput(f"{where}: {e}") from None
    return value
