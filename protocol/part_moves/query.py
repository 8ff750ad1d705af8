"""A Distributed SELECT over both shards, one replica of each, with ClickHouse's UUID
deduplication (the spec's QueryStart, QueryReadShard)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from protocol.assignment import GuardFailed
from protocol.part_moves.shard_replica import ShardReplica
from protocol.part_moves.states import SHARDS


@dataclass
class DistributedQuery:
    """One SELECT over both shards: each shard read from one replica in a step of its own.
    `started`: the task's state when it started (None: no move in flight)."""
    query_id: str
    started: str | None
    dedup: bool
    read: dict[str, str] = field(default_factory=dict)               # shard -> replica
    reported: set[str] = field(default_factory=set)
    rows: dict[str, list[dict]] = field(default_factory=dict)        # partition -> rows returned
    routes: dict[str, str] = field(default_factory=dict)             # partition -> the replica read
    resent: bool = False
    status: str = "running"

    @property
    def running(self) -> bool:
        return self.status == "running"

    def read_shard(self, rep: ShardReplica) -> None:
        """QueryReadShard: rep's active parts; with deduplication the UUIDs of those in its local
        pins reported; a UUID another shard reported first re-runs this shard without it, once
        (a second conflict fails the query: DUPLICATED_PART_UUIDS)."""
        if not self.running or rep.shard in self.read:
            raise GuardFailed("QueryReadShard", f"{self.query_id} has read {rep.shard} or ended")
        parts = rep.active()
        uuids = rep.uuids()   # one read of the replica's state for all its parts
        ids = {p: uuids[str(p)] for p in parts}
        reported = {ids[p] for p in parts if ids[p] in rep.pins} if self.dedup else set()
        conflict = reported & self.reported
        if conflict and self.resent:
            self.status = "failed"
            return
        kept = [p for p in parts if ids[p] not in conflict]
        for p in kept:
            self.rows.setdefault(p.partition, []).extend(rep.store.read(p))
            self.routes[p.partition] = rep.name
        self.reported |= reported - conflict
        self.resent = self.resent or bool(conflict)
        self.read[rep.shard] = rep.name
        if len(self.read) == len(SHARDS):
            self.status = "complete"

    def duplicated(self) -> Counter:
        return Counter(r["row_id"] for rows in self.rows.values() for r in rows)
