"""SELECT routing (RFC phase 1d), step for step with the spec: ClientStartQuery takes the
replica's in-memory map and picks one replica per partition; ReplicaReadPartition reads one
partition, locally or from the chosen replica. No Keeper request is made on this path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from protocol.assignment import GuardFailed
from protocol.replica import Replica


def prefer_local(replica: str, candidates: set[str]) -> str:
    """The default choice: read locally when this replica may, else the first candidate by name."""
    return replica if replica in candidates else min(candidates)


@dataclass
class Query:
    at: str
    routes: dict[str, str]               # partition -> replica chosen to read it
    pending: set[str]
    rows: list[dict] = field(default_factory=list)
    pinned: bool = False

    @property
    def done(self) -> bool:
        return not self.pending


def client_start_query(replica: Replica, partitions: set[str] | None = None,
                       choose: Callable[[str, set[str]], str] = prefer_local,
                       replicas: dict[str, Replica] | None = None) -> Query:
    """Route every partition the replica's map knows (or those asked, after pruning) to one
    replica its map lists as an owner; route_to_clone_target also lists the CLONE target (F5).
    With `replicas`, each chosen replica is told at once (its pin on the partition holds off
    CLEANUP until the read), as a distributed query sends its subqueries at the start.
    Refused on a replica whose Keeper session expired (the spec's guard that r is active; F22): a
    CLEANUP waits only for the maps of active replicas, so a read-only one's map may still route
    to a source that has dropped the partition."""
    if replica.keeper.expired:
        raise GuardFailed("ClientStartQuery", f"{replica.name} is read-only (its Keeper session expired): its map "
                                              f"may name a replica a CLEANUP has emptied since")
    routes = {}
    for p, a in sorted(replica.cache.items()):
        if partitions is not None and p not in partitions:
            continue
        candidates = set(a.owners)
        if "route_to_clone_target" in replica.bugs and a.target:
            candidates.add(a.target)
        if "read_from_cloning_target" in replica.bugs:
            candidates |= set(a.cloning)   # PR #102244's router strips :cloning before it chooses (PR-F10)
        routes[p] = choose(replica.name, candidates)
    if replicas is not None:
        for p, r in routes.items():
            if r in replicas:
                replicas[r].pins[p] = replicas[r].pins.get(p, 0) + 1
    return Query(replica.name, routes, set(routes), pinned=replicas is not None)


def replica_read_partition(query: Query, partition: str, replicas: dict[str, Replica]) -> list[dict]:
    """Read one partition from the replica it was routed to (ReadFromRemote when not local)."""
    if partition not in query.pending:
        raise GuardFailed("ReplicaReadPartition", f"{partition} is not pending in the query")
    reader = replicas[query.routes[partition]]
    rows = reader.has_rows_of(partition)
    query.rows.extend(rows)
    query.pending.discard(partition)
    if query.pinned:
        unpin(reader, partition)
    return rows


def unpin(reader: Replica, partition: str) -> None:
    left = reader.pins.get(partition, 0) - 1
    if left > 0:
        reader.pins[partition] = left
    else:
        reader.pins.pop(partition, None)


def served_by(query: Query, replica: str) -> bool:
    """The spec's ServedBy: the query started at `replica` or has a partition still to read there.
    Both connections break when that replica's process dies, so the query fails with it (spec
    ReplicaCrash): its pins were in that process's memory."""
    return not query.done and (query.at == replica or any(query.routes[p] == replica for p in query.pending))


def client_query_fails(query: Query, replicas: dict[str, Replica]) -> None:
    """ClientQueryFails: a chosen replica is gone; the other subqueries are cancelled."""
    for p in sorted(query.pending):
        if query.pinned and query.routes[p] in replicas:
            unpin(replicas[query.routes[p]], p)
    query.pending.clear()


def select_all(replica: Replica, replicas: dict[str, Replica], **kw) -> Query:
    q = client_start_query(replica, replicas=replicas, **kw)
    for p in sorted(q.pending):
        replica_read_partition(q, p, replicas)
    return q
