"""One replica's protocol steps for writes and the filtered log, action for action with
spec/SelectiveReplication.tla (ReplicaRefreshCache, ReplicaWriteInsert, ReplicaSelectMerge,
ReplicaPullLog, ReplicaExecuteEntry for GET_PART, MERGE_PARTS, MUTATE_PART, DROP_RANGE and
ALTER_METADATA).

The core starts no threads: a driver calls one step at a time, so runs are deterministic. A
step whose guard is false raises GuardFailed and changes nothing. `peers` maps replica names to
their PartStores: it stands in for the interserver HTTP port that fetches go through.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .assignment import Assignment, GuardFailed, read_assignment
from .keeper import Check, Create, Delete, Keeper, MultiError, NoNodeError, SetData
from .layout import Layout
from .parts import PartName, PartStore
from .table import check_partition_id

GLOBAL_TYPES = {"ALTER_METADATA", "CLEAR_COLUMN", "CLEAR_INDEX"}  # the RFC's "always process"


class InsertRejected(Exception):
    """The INSERT failed before it was committed (the client may retry it)."""


@dataclass
class Replica:
    name: str
    keeper: Keeper
    layout: Layout
    store: PartStore
    peers: dict[str, PartStore]
    bugs: frozenset[str] = frozenset()
    cache: dict[str, Assignment] = field(default_factory=dict)  # the in-memory assignment map
    metadata_version: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # partition -> highest DROP_RANGE executed
    # Partitions that started queries will read here: a remote subquery holds its parts, so
    # CLEANUP must wait for it (spec ReplicaCleanup's ~routedHere). In memory, as in ClickHouse.
    pins: dict[str, int] = field(default_factory=dict)
    _log_listing: list[str] = field(default_factory=list, repr=False)
    _ptr: tuple[int, int] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Applied ALTER_METADATA and DROP_RANGE survive a crash (the spec's meta[r]): on disk.
        state = self.store.load_state()
        self.metadata_version = state.get("metadata_version", self.metadata_version)
        self.dropped = {**state.get("dropped", {}), **self.dropped}

    def _save_state(self) -> None:
        self.store.save_state({"metadata_version": self.metadata_version, "dropped": self.dropped})

    # --- ReplicaRefreshCache -------------------------------------------------------------
    def replica_refresh_cache(self, partition: str) -> Assignment | None:
        a = read_assignment(self.keeper, self.layout, partition)
        if a is None:
            self.cache.pop(partition, None)
            return None
        return self.learn(partition, a)

    def learn(self, partition: str, a: Assignment) -> Assignment:
        """Put an assignment read from Keeper into the map (a refresh, or an allocation's result)
        and publish the version when it changed."""
        old = self.cache.get(partition)
        self.cache[partition] = a
        if old is None or old.version != a.version:
            # CLEANUP must know every map has seen a SWITCH (spec ReplicaCleanup): publish it.
            path = self.layout.map_version(self.name, partition)
            try:
                self.keeper.set(path, str(a.version).encode())
            except NoNodeError:
                self.keeper.create(path, str(a.version).encode(), makepath=True)
        return a

    def load_map(self) -> None:
        """Load the whole map at start-up, before serving (spec F9)."""
        self.cache = {}
        for p in self.keeper.get_children(self.layout.assignments):
            self.replica_refresh_cache(p)

    # --- ReplicaWriteInsert --------------------------------------------------------------
    def replica_write_insert(self, partition: str, rows: list[dict], block_hash: str) -> str:
        """Write a sub-block of an owned partition and commit it in one multi; returns the part
        name, or "deduplicated" when blocks/ already has the hash. Fixed protocol: the multi
        also checks the assignment's version against the map (spec F4)."""
        check_partition_id(partition)
        a = self.cache.get(partition)
        if a is None or self.name not in a.owners:
            raise GuardFailed("ReplicaWriteInsert", f"{self.name}'s map does not make it an owner of {partition}")
        # Block numbers come from a per-partition sequential node, as block_numbers/ does in ClickHouse.
        block = next_block_number(self.keeper, self.layout, partition)
        name = self.store.write(PartName(partition, block, block, 0), rows)
        entry = {"type": "GET_PART", "partition": partition, "part": str(name), "source": self.name,
                 "assignment_version": a.version}
        ops = [Create(f"{self.layout.log}/log-", json.dumps(entry).encode(), sequential=True),
               Create(f"{self.layout.parts(self.name)}/{name}", b"")]
        if "no_dedup" not in self.bugs:
            ops.insert(0, Create(f"{self.layout.blocks}/{partition}_{block_hash}", b""))
        if "insert_without_assignment_check" not in self.bugs:
            ops.insert(0, Check(self.layout.assignment(partition), a.version))
        try:
            self.keeper.multi(ops)
        except MultiError as e:
            self.store.remove(name)  # nothing was committed: the local part must go too
            failed = ops[e.index]
            if isinstance(failed, Create) and failed.path.startswith(self.layout.blocks + "/"):
                return "deduplicated"  # the same block was committed before: acknowledge, write nothing
            if isinstance(failed, Check):
                self.replica_refresh_cache(partition)
                raise InsertRejected(f"assignment of {partition} changed under {self.name}; retry") from e
            raise InsertRejected(f"commit of {name} failed: {e}") from e
        return str(name)

    # --- ReplicaSelectMerge ---------------------------------------------------------------
    def replica_select_merge(self, partition: str, block_during_clone: bool = False) -> dict:
        """Put MERGE_PARTS of two adjacent parts of an owned partition into the log. Adjacent means
        no block number between them: a gap may be an INSERT still in flight, and a part covering
        the gap would make its later GET_PART look covered (its rows would be lost)."""
        a = self.cache.get(partition)
        if a is None or self.name not in a.owners:
            raise GuardFailed("ReplicaSelectMerge", f"{self.name}'s map does not make it an owner of {partition}")
        if block_during_clone:
            mig = self.keeper.exists(self.layout.migration(partition)) and json.loads(
                self.keeper.get(self.layout.migration(partition))[0])
            if mig and mig.get("state") == "clone":
                raise GuardFailed("ReplicaSelectMerge", f"{partition} is in CLONE and merges are blocked")
        names = self.store.names(partition)
        for x, y in zip(names, names[1:]):
            if y.min_block == x.max_block + 1 and x.mutation == y.mutation:
                result = PartName(partition, x.min_block, y.max_block, max(x.level, y.level) + 1, x.mutation)
                entry = {"type": "MERGE_PARTS", "partition": partition, "sources": [str(x), str(y)],
                         "part": str(result), "assignment_version": a.version}
                self.keeper.create(f"{self.layout.log}/log-", json.dumps(entry).encode(), sequential=True)
                return entry
        raise GuardFailed("ReplicaSelectMerge", f"{self.name} has no two adjacent parts of {partition} to merge")

    # --- ReplicaPullLog ------------------------------------------------------------------
    def _log_pointer(self) -> tuple[int, int]:
        # Only this replica writes its log_pointer: after the first read, memory knows it (the
        # SetData below still carries the version, so a second writer would be refused).
        if self._ptr is None:
            data, stat = self.keeper.get(self.layout.log_pointer(self.name))
            self._ptr = (int(data), stat.version)
        return self._ptr

    def replica_pull_log(self) -> dict | None:
        """Pull the next log entry: queue it or skip it by the filter; log_pointer advances
        either way. Returns the entry and whether it was queued, or raises when caught up."""
        ptr, ptr_version = self._log_pointer()
        entries = self._log_listing
        if ptr >= len(entries):  # list the log again only when the last listing is used up
            entries = self._log_listing = self.keeper.get_children(self.layout.log)
        if ptr >= len(entries):
            raise GuardFailed("ReplicaPullLog", f"{self.name} has pulled all {len(entries)} log entries")
        name = entries[ptr]
        entry = json.loads(self.keeper.get(f"{self.layout.log}/{name}")[0])
        if entry["type"] in GLOBAL_TYPES:
            take = "filter_skips_global" not in self.bugs
        else:
            p = entry["partition"]
            view = self.cache.get(p)
            cached_version = view.version if view else -1
            if cached_version < entry["assignment_version"] and "filter_with_stale_cache" not in self.bugs:
                view = self.replica_refresh_cache(p)  # entry is newer than the map: ask Keeper (F2)
            take = view is not None and self.name in view.keepers()
        ops = [SetData(self.layout.log_pointer(self.name), str(ptr + 1).encode(), ptr_version)]
        if take:
            # The queue entry names its log entry (ClickHouse's LogEntry::znode_name): MUTATE_PART
            # and DROP_RANGE wait for the fetches that come before them in the log.
            queued = {**entry, "log": name}
            ops.append(Create(f"{self.layout.queue(self.name)}/queue-", json.dumps(queued).encode(), sequential=True))
        try:
            self.keeper.multi(ops)
        except Exception:
            self._ptr = None  # read it again next time
            raise
        self._ptr = (ptr + 1, ptr_version + 1)
        return {**entry, "queued": take}

    def pull_whole_log(self) -> int:
        """ReplicaPullLog until the log is used up; returns the entries pulled."""
        n = 0
        while True:
            try:
                self.replica_pull_log()
            except GuardFailed:
                return n
            n += 1

    # --- ReplicaExecuteEntry (GET_PART, ALTER_METADATA) ----------------------------------
    def queue(self) -> list[tuple[str, dict]]:
        q = self.layout.queue(self.name)
        return [(n, json.loads(self.keeper.get(f"{q}/{n}")[0])) for n in self.keeper.get_children(q)]

    def replica_execute_entry(self, queue_node: str, source: str | None = None) -> str:
        """Execute one queue entry; returns what was done. A GET_PART fetches the part, or a
        part covering it, from a peer that has it (`source` names the peer, as the spec's
        choice of one; by default the first that has one); the queue entry goes only once done."""
        path = f"{self.layout.queue(self.name)}/{queue_node}"
        entry = json.loads(self.keeper.get(path)[0])
        if entry["type"] in GLOBAL_TYPES:
            self.metadata_version += 1
            self._save_state()
            self.keeper.delete(path)
            return "applied"
        if entry["type"] in ("MUTATE_PART", "DROP_RANGE"):
            return self._execute_range_entry(queue_node, path, entry)
        want = PartName.parse(entry["part"])
        if entry["type"] == "MERGE_PARTS":
            merged = self._merge_locally(path, want, [PartName.parse(s) for s in entry["sources"]])
            if merged:
                return merged
        if want.max_block <= self.dropped.get(want.partition, -1):
            self.keeper.delete(path)  # made obsolete by a DROP_RANGE this replica executed
            return "dropped"
        if any(have.covers(want) for have in self.store.names(want.partition)):
            self.keeper.delete(path)
            return "covered"
        for peer, store in sorted(self.peers.items()):
            if peer == self.name or source is not None and peer != source:
                continue
            for have in store.names(want.partition):
                replaced = [n for n in self.store.names(want.partition) if have.covers(n)]
                # A part at an older mutation than what it would replace here would undo a mutation.
                if have.covers(want) and all(n.mutation <= have.mutation for n in replaced):
                    got = self.store.fetch_from(store, have)
                    parts = self.layout.parts(self.name)
                    self.keeper.multi([*(Delete(f"{parts}/{n}") for n in replaced),
                                       Create(f"{parts}/{got}", b""), Delete(path)])
                    return f"fetched {got} from {peer}"
        raise GuardFailed("ReplicaExecuteEntry", f"no replica has a part covering {want} yet")

    def _merge_locally(self, path: str, want: PartName, sources: list[PartName]) -> str | None:
        """MERGE_PARTS with every source here: merge them (the parts znodes change in one multi).
        Otherwise None, and the entry is done like a GET_PART of the result (ClickHouse fetches it)."""
        have = set(self.store.names(want.partition))
        if not all(s in have for s in sources):
            return None
        got = self.store.merge(sources)
        parts = self.layout.parts(self.name)
        self.keeper.multi([*(Delete(f"{parts}/{s}") for s in sources), Create(f"{parts}/{got}", b""), Delete(path)])
        return f"merged {got}"

    def _execute_range_entry(self, queue_node: str, path: str, entry: dict) -> str:
        """MUTATE_PART / DROP_RANGE over the partition's parts, after every fetch or merge (and,
        for a drop, mutation) of the partition queued here from an earlier log entry, or by a CLONE."""
        p = entry["partition"]
        # Earlier in the log, that is: a CLONE's fetches (no log entry) come before every entry
        # (the parts they copy predate the mutations and drops re-queued with them).
        waits_for = ("GET_PART", "MERGE_PARTS") + (("MUTATE_PART",) if entry["type"] == "DROP_RANGE" else ())
        earlier = [n for n, e in self.queue()
                   if e.get("partition") == p and e["type"] in waits_for and e.get("log", "") < entry.get("log", "~")]
        if earlier:
            raise GuardFailed("ReplicaExecuteEntry", f"{entry['type']} waits for earlier fetches {earlier}")
        for name in self.store.names(p):
            if entry["type"] == "DROP_RANGE" and name.max_block <= entry["max_block"]:
                self.keeper.delete(f"{self.layout.parts(self.name)}/{name}")
                self.store.remove(name)
            elif entry["type"] == "MUTATE_PART" and name.mutation < entry["mutation"] and name.min_block < entry["block"]:
                new = self.store.mutate(name, entry["mutation"], lambda r: {**r, **entry["set"]})
                self.keeper.multi([Delete(f"{self.layout.parts(self.name)}/{name}"),
                                   Create(f"{self.layout.parts(self.name)}/{new}", b"")])
        if entry["type"] == "DROP_RANGE":
            self.dropped[p] = max(self.dropped.get(p, -1), entry["max_block"])
            self._save_state()
        self.keeper.delete(path)
        return "applied"

    def drop_partition_locally(self, partition: str) -> None:
        """CLEANUP on this replica: its parts, their znodes and its queue entries of the partition."""
        for n in self.store.names(partition):
            self.keeper.delete(f"{self.layout.parts(self.name)}/{n}")
            self.store.remove(n)
        for node, entry in self.queue():
            if entry.get("partition") == partition:
                self.keeper.delete(f"{self.layout.queue(self.name)}/{node}")

    def has_rows_of(self, partition: str) -> list[dict]:
        return [r for n in self.store.names(partition) for r in self.store.read(n)]



def next_block_number(keeper: Keeper, layout: Layout, partition: str) -> int:
    """A partition's next block number from block_numbers/{p}/ (sequential), as in ClickHouse.
    One Keeper request per INSERT; the parent is created only the first time it is missing."""
    numbers = f"{layout.root}/block_numbers/{partition}"
    try:
        path = keeper.create(f"{numbers}/block-", sequential=True)
    except NoNodeError:
        keeper.ensure_path(numbers)
        path = keeper.create(f"{numbers}/block-", sequential=True)
    return int(path.rsplit("-", 1)[1])


def client_mutate_partition(keeper: Keeper, layout: Layout, partition: str, mutation: int, set_values: dict) -> None:
    """ALTER TABLE ... UPDATE on one partition: a MUTATE_PART entry every keeper applies."""
    a = read_assignment(keeper, layout, partition)
    if a is None:
        raise GuardFailed("ClientMutatePartition", f"partition {partition} is not assigned")
    # The mutation takes a block number, as in ClickHouse: it applies to parts with data from
    # before it (a lower block), and parts inserted after it are born mutated.
    block = next_block_number(keeper, layout, partition)
    entry = {"type": "MUTATE_PART", "partition": partition, "mutation": mutation, "set": set_values,
             "block": block, "assignment_version": a.version}
    keeper.create(f"{layout.log}/log-", json.dumps(entry).encode(), sequential=True)


def client_drop_partition(keeper: Keeper, layout: Layout, partition: str) -> int:
    """ALTER TABLE ... DROP PARTITION: DROP_RANGE over every block numbered so far."""
    a = read_assignment(keeper, layout, partition)
    if a is None:
        raise GuardFailed("ClientDropPartition", f"partition {partition} is not assigned")
    upto = next_block_number(keeper, layout, partition) - 1
    entry = {"type": "DROP_RANGE", "partition": partition, "max_block": upto, "assignment_version": a.version}
    keeper.create(f"{layout.log}/log-", json.dumps(entry).encode(), sequential=True)
    return upto


def client_alter_metadata(keeper: Keeper, layout: Layout, change: str) -> None:
    """ALTER TABLE ... MODIFY/ADD COLUMN: a global ALTER_METADATA entry every replica applies,
    whatever it owns (the RFC's "always process")."""
    entry = {"type": "ALTER_METADATA", "change": change}
    keeper.create(f"{layout.log}/log-", json.dumps(entry).encode(), sequential=True)
