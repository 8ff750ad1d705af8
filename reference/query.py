"""SELECT routing (RFC phase 1d), step for step with the spec: ClientStartQuery takes the
replica's in-memory map and picks one replica per partition; ReplicaReadPartition reads one
partition, locally or from the chosen replica. No Keeper request is made on this path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .assignment import GuardFailed
from .replica import Replica


def prefer_local(replica: str, candidates: set[str]) -> str:
    """The default choice: read locally when this replica may, else the first candidate by name."""
    return replica if replica in candidates else min(candidates)


@dataclass
class Query:
    at: str
    routes: dict[str, str]               # partition -> replica chosen to read it
    pending: set[str]
    rows: list[dict] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return not self.pending


def client_start_query(replica: Replica, partitions: set[str] | None = None,
                       choose: Callable[[str, set[str]], str] = prefer_local) -> Query:
    """Route every partition the replica's map knows (or those asked, after pruning) to one
    replica its map lists as an owner; route_to_clone_target also lists the CLONE target (F5)."""
    routes = {}
    for p, a in sorted(replica.cache.items()):
        if partitions is not None and p not in partitions:
            continue
        candidates = set(a.owners)
        if "route_to_clone_target" in replica.bugs and a.target:
            candidates.add(a.target)
        routes[p] = choose(replica.name, candidates)
    return Query(replica.name, routes, set(routes))


def replica_read_partition(query: Query, partition: str, replicas: dict[str, Replica]) -> list[dict]:
    """Read one partition from the replica it was routed to (ReadFromRemote when not local)."""
    if partition not in query.pending:
        raise GuardFailed("ReplicaReadPartition", f"{partition} is not pending in the query")
    rows = replicas[query.routes[partition]].has_rows_of(partition)
    query.rows.extend(rows)
    query.pending.discard(partition)
    return rows


def select_all(replica: Replica, replicas: dict[str, Replica], **kw) -> Query:
    q = client_start_query(replica, **kw)
    for p in sorted(q.pending):
        replica_read_partition(q, p, replicas)
    return q
