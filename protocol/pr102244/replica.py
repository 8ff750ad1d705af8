"""One replica in the PR's design (PR102244.md M4-M6, M10): the base protocol's replica
(protocol/replica.py: WriteInsert's commit multi with the CAS check on the assignment version,
Pull's log_pointer, Fetch through the queue) with the PR's assignment in its cache, the PR's log
filter, the INSERT path's expiring cache, and DropUnassigned.

The cache (`view` in PR102244.tla) holds PRAssignments. The INSERT path reads it through
`insert_view`, which goes to Keeper when the entry is cold or older than `cache_ttl` steps of
`now` ([R1]); background refreshes (`refresh_view`) are the expiry of the SELECT path's cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from protocol.assignment import GuardFailed
from protocol.keeper import NoNodeError
from protocol.log_entry import GLOBAL, LogEntry
from protocol.pr102244.assignment import PRAssignment, read_assignment
from protocol.replica import Replica, _children


@dataclass
class PRReplica(Replica):
    readings: frozenset[str] = frozenset()
    now: Callable[[], int] = lambda: 0   # the driver's logical clock, for the cache expiry
    cache_ttl: int = 20                  # steps an INSERT-path cache entry lives
    cached_at: dict[str, int] = field(default_factory=dict)
    # Partitions whose last Keeper read found no assignment node: the cache's "no assignment"
    # entries (PR102244Whole.tla's view of a partition with empty owners). Only the as-written
    # filter (`filter_negative_cache`, PR-F5) trusts them; fixed, such an entry is cold.
    absent: set[str] = field(default_factory=set)
    # The code's filter, monitor and SWITCH states (spec/pr102244/PR102244Code.tla, driven by
    # protocol/pr102244/driver.py) instead of the description's (PR102244.tla).
    code: bool = False

    # --- RefreshView -------------------------------------------------------------------------
    def replica_refresh_cache(self, partition: str) -> PRAssignment | None:
        """RefreshView: the cache takes Keeper's assignment (the base driver's refresh step)."""
        a = read_assignment(self.keeper, self.layout, partition)
        if a is None:
            self.cache.pop(partition, None)
            self.absent.add(partition)   # the cache keeps the miss (as the PR's cache may)
            return None
        return self.learn(partition, a)

    refresh_view = replica_refresh_cache

    def learn(self, partition: str, a: PRAssignment) -> PRAssignment:
        """Into the cache; the cached list is published (`replicas/{r}/maps/{p}`, as the base
        publishes its map version) so the fixed design's source knows when no cache still
        routes to it (PR-F2's fix)."""
        old = self.cache.get(partition)
        self.cache[partition] = a
        self.absent.discard(partition)
        self.cached_at[partition] = self.now()
        if old is None or old.version != a.version:
            path = self.layout.map_version(self.name, partition)
            value = f"{a.version} ".encode() + a.encode()
            try:
                self.keeper.set(path, value)
            except NoNodeError:
                self.keeper.create(path, value, makepath=True)
        return a

    def insert_view(self, partition: str) -> PRAssignment | None:
        """The INSERT path's cache: Keeper when cold or expired ("cache cold/expired: read from ZK")."""
        a = self.cache.get(partition)
        if a is None or self.now() - self.cached_at.get(partition, 0) > self.cache_ttl:
            return self.replica_refresh_cache(partition)
        return a

    # --- the log filter (M5, O1) ----------------------------------------------------------
    def keeps(self, entry: LogEntry, refresh: bool = True) -> bool:
        """Keeps: global entries always; a partition's when this replica is in its assignment
        (owner or `:cloning`), read from Keeper, or with the `filter_cached` reading from the
        cache (Keeper when the cache has no assignment of it: cold, [R1]); in the fixed design also
        while leaving. As written (`filter_negative_cache`, PR-F5) a cached "no assignment" is
        trusted: a replica the first INSERT chose skips the partition's first GET_PART.

        The code's (`code`, shouldSkipEntry at cd4d4fe8): the cache first; a "not assigned" there
        is read again from Keeper and written back to the cache (`refresh`; without it the
        Keeper read alone, for a check that must not change the cache); a partition with no
        assignment is kept."""
        if entry.type in GLOBAL:
            return True
        p = entry.partition
        if self.code:
            cached = self.cache.get(p)
            if cached is not None and self.name in cached.keepers():
                return True
            a = self.replica_refresh_cache(p) if refresh else read_assignment(self.keeper, self.layout, p)
            return a is None or not a.keepers() or self.name in a.keepers() or self.leaving(p)
        if "filter_cached" in self.readings:
            a = self.cache.get(p)
            if a is None and not (p in self.absent and "filter_negative_cache" in self.bugs):
                a = self.replica_refresh_cache(p)
        else:
            a = read_assignment(self.keeper, self.layout, p)
        return (a is not None and self.name in a.keepers()) or self.leaving(p)

    pull = Replica.replica_pull_log

    # --- the source after SWITCH (M10, O5) --------------------------------------------------
    def leaving(self, partition: str) -> bool:
        """Leaving (fixed design only, PR-F2): Keeper no longer assigns the partition here, but a
        migration moved this replica out and is not DONE, or some running replica's cache still
        lists it as an owner. As written (`source_stops_at_switch`) there is no such state."""
        if "source_stops_at_switch" in self.bugs:
            return False
        a = read_assignment(self.keeper, self.layout, partition)
        if a is not None and self.name in a.keepers():
            return False
        from protocol.pr102244.migration import read_migrations  # migration builds on this module
        # The description's node is in SWITCH once the multi applied; the code's in `switched`.
        applied = "switched" if self.code else "switch"
        if any(m["partition"] == partition and m["state"] == applied and m["source"] == self.name
               for m, _ in read_migrations(self.keeper, self.layout).values()):
            return True
        return any(self.name in cached.owners for cached in self.published_views(partition))

    def published_views(self, partition: str) -> list[PRAssignment]:
        """The cached assignments of the partition that running replicas published."""
        out = []
        for r in _children(self.keeper, self.layout.replicas):
            if self.keeper.exists(self.layout.is_active(r)) is None:
                continue  # a replica that is down has no cache; it reloads at restart
            try:
                data = self.keeper.get(self.layout.map_version(r, partition))[0]
            except NoNodeError:
                continue
            version, _, text = data.partition(b" ")
            out.append(PRAssignment.decode(text, int(version), self.layout.map_version(r, partition)))
        return out

    # --- DropUnassigned -----------------------------------------------------------------------
    def drop_unassigned(self, partition: str) -> int:
        """DropUnassigned: remove this replica's parts and queue entries of a partition its cache
        says it is not assigned. As written (`source_stops_at_switch`) on that alone; fixed, also
        only when Keeper does not assign it, it is not leaving, and no started query reads it here."""
        if self.code:
            return self._monitor_drop(partition)
        queued = [n for n, e in self.queue() if e.partition == partition]
        if not self.store.names(partition) and not queued:
            raise GuardFailed("DropUnassigned", f"{self.name} has nothing of {partition}")
        a = self.cache.get(partition)
        if a is not None and self.name in a.keepers():
            raise GuardFailed("DropUnassigned", f"{self.name}'s cache assigns it {partition}")
        if "source_stops_at_switch" not in self.bugs:
            k = read_assignment(self.keeper, self.layout, partition)
            if k is not None and self.name in k.keepers() or self.leaving(partition) or self.pins.get(partition):
                raise GuardFailed("DropUnassigned", f"{self.name} still keeps {partition} (assigned, leaving or read)")
        n = len(self.store.names(partition))
        self.drop_partition_locally(partition)
        return n

    def _monitor_drop(self, partition: str) -> int:
        """The code's MigrationMonitor::run (PR102244Code.tla DropUnassigned): at a fresh read, a
        replica the partition is assigned away from drops its parts of it at once
        (clear_without_timeout), caches and queries notwithstanding; its queue is left as it is.
        Fixed (not `source_stops_at_switch`): not while it is leaving."""
        n = len(self.store.names(partition))
        if not n:
            raise GuardFailed("DropUnassigned", f"{self.name} has no parts of {partition}")
        a = read_assignment(self.keeper, self.layout, partition)
        if a is None or not a.keepers() or self.name in a.keepers() or self.leaving(partition):
            raise GuardFailed("DropUnassigned", f"{self.name} still keeps {partition} (unassigned, assigned or leaving)")
        self.drop_parts_locally(partition)
        return n
