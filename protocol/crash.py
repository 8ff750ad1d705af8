"""A replica's process dies (spec/rfc/SelectiveReplication.tla ReplicaCrash): what goes with it.
Every driver crashes a replica through this one step, so a change to ReplicaCrash's behaviour is
made here once (as protocol/restart.py holds ReplicaRestart).

Its Keeper session ends, and is_active with it (active' = active \\ {r}). Its in-memory map and
its pins go with the process; its disk stays (parts, metadata version and DROP_RANGEs executed:
the spec's parts and meta are unchanged). Every running query it served fails (the spec's qry'
with ServedBy): the one it started, and every one with a partition still to read on it, as both
connections break when its process dies; the pins those queries hold on other replicas are
released (ClientQueryFails).
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol.query import Query, client_query_fails, served_by
from protocol.replica import Replica


def fail_served(queries: Iterable[Query], replica: str, replicas: dict[str, Replica]) -> list[Query]:
    """Every query of `queries` that `replica` serves (served_by) fails; its pins on the running
    `replicas` are released. Returns the queries failed, in the order given."""
    failed = [q for q in queries if served_by(q, replica)]
    for q in failed:
        client_query_fails(q, replicas)
    return failed


def replica_crash(rep: Replica, replicas: dict[str, Replica], queries: Iterable[Query] = ()) -> list[Query]:
    """ReplicaCrash of `rep`: out of the running `replicas`, its session closed, its map and pins
    dropped, and every query of `queries` it served failed (fail_served). Returns the queries
    failed, for the client's side of the step (the spec's qry[q].st = "failed")."""
    replicas.pop(rep.name, None)
    rep.keeper.close()
    rep.cache, rep.pins = {}, {}
    return fail_served(queries, rep.name, replicas)
