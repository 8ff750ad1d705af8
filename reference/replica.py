"""One replica's protocol steps for writes and the filtered log, action for action with
spec/SelectiveReplication.tla (ReplicaRefreshCache, ReplicaWriteInsert, ReplicaSelectMerge,
ReplicaSelectMutation, ReplicaPullLog, ReplicaExecuteEntry), on the base protocol as ClickHouse
writes it: log and queue entries in its text format (reference/log_entry.py), table-wide
mutations with one MUTATE_PART per part (reference/mutations.py), DROP PARTITION clearing the
partition's blocks/ hashes.

The core starts no threads: a driver calls one step at a time, so runs are deterministic. A
step whose guard is false raises GuardFailed and changes nothing. `peers` maps replica names to
their PartStores: it stands in for the interserver HTTP port that fetches go through.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from .assignment import Assignment, GuardFailed, read_assignment
from .keeper import Check, Create, Delete, Keeper, MultiError, NoNodeError, SetData
from .layout import Layout
from .log_entry import (ALTER_METADATA, ATTACH_PART, CLEAR_COLUMN, CLEAR_INDEX, DROP_RANGE, GET_PART, GLOBAL,
                        MERGE_PARTS, MUTATE_PART, PART_PRODUCING, REPLACE_RANGE, LogEntry, drop_range_name)
from .mutations import MutationEntry, desired_version, mutate_rows, owed, row_function
from .parts import PartName, PartStore
from .table import check_partition_id


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
    clock: Callable[[], float] = time.time  # create_time of the entries it writes
    _log_listing: list[str] = field(default_factory=list, repr=False)
    _ptr: tuple[int, int] | None = field(default=None, repr=False)
    _mutations: dict[str, MutationEntry] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # Applied ALTER_METADATA and DROP_RANGE survive a crash (the spec's meta[r]): on disk.
        state = self.store.load_state()
        self.metadata_version = state.get("metadata_version", self.metadata_version)
        self.dropped = {**state.get("dropped", {}), **self.dropped}

    def _save_state(self) -> None:
        self.store.save_state({"metadata_version": self.metadata_version, "dropped": self.dropped})

    def _entry(self, type_: str, **kw) -> LogEntry:
        return LogEntry(type_, source_replica=self.name, create_time=int(self.clock()), **kw)

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

    def mutations(self) -> list[MutationEntry]:
        """mutations/, every one (they are table-wide: no filter), in creation order. A mutation
        znode never changes, so each is read once."""
        names = self.keeper.get_children(self.layout.mutations)
        for n in names:
            if n not in self._mutations:
                self._mutations[n] = MutationEntry.parse(self.keeper.get(f"{self.layout.mutations}/{n}")[0],
                                                         f"{self.layout.mutations}/{n}")
        return [self._mutations[n] for n in names]

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
        block_id = f"{partition}_{block_hash}"   # ClickHouse: <partition>_<hash of the block's data>
        entry = self._entry(GET_PART, new_part_name=str(name), block_id=block_id)
        # blocks/<id> holds the part name: DROP PARTITION reads it to clear the dropped blocks' ids.
        ops = [Create(f"{self.layout.log}/log-", entry.format(), sequential=True),
               Create(f"{self.layout.parts(self.name)}/{name}", b"")]
        if "no_dedup" not in self.bugs:
            ops.insert(0, Create(f"{self.layout.blocks}/{block_id}", str(name).encode()))
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

    # --- ReplicaSelectMerge, ReplicaSelectMutation ------------------------------------------
    def _selectable(self, action: str, partition: str, block_during_clone: bool) -> None:
        """The guard merges and part mutations share: an owner by the map, caught up on the
        partition (its parts are then what the whole log makes of it, as ClickHouse's "virtual
        parts" are), and with BlockDuringClone, not a partition in CLONE."""
        a = self.cache.get(partition)
        if a is None or self.name not in a.owners:
            raise GuardFailed(action, f"{self.name}'s map does not make it an owner of {partition}")
        if not caught_up(self.keeper, self.layout, self.name, partition):
            raise GuardFailed(action, f"{self.name} is not caught up on {partition}")
        if block_during_clone:
            from .migration import read_migration  # migration builds on this module
            mig = read_migration(self.keeper, self.layout, partition)[0]
            if mig and mig.get("state") == "clone":
                raise GuardFailed(action, f"{partition} is in CLONE and merges and mutations are blocked")

    def replica_select_merge(self, partition: str, block_during_clone: bool = False) -> LogEntry:
        """Put MERGE_PARTS of two adjacent parts of an owned partition into the log. Adjacent means
        no block number between them: a gap may be an INSERT still in flight, and a part covering
        the gap would make its later GET_PART look covered (its rows would be lost)."""
        self._selectable("ReplicaSelectMerge", partition, block_during_clone)
        names = self.store.names(partition)
        for x, y in zip(names, names[1:]):
            if y.min_block == x.max_block + 1 and x.mutation == y.mutation:
                result = PartName(partition, x.min_block, y.max_block, max(x.level, y.level) + 1, x.mutation)
                entry = self._entry(MERGE_PARTS, source_parts=(str(x), str(y)), new_part_name=str(result))
                self.keeper.create(f"{self.layout.log}/log-", entry.format(), sequential=True)
                return entry
        raise GuardFailed("ReplicaSelectMerge", f"{self.name} has no two adjacent parts of {partition} to merge")

    def replica_select_mutation(self, partition: str, part: str | None = None,
                                block_during_clone: bool = False) -> LogEntry:
        """MUTATE_PART "mutate <part> to <part>_<m>" for one of this owner's parts whose data a
        mutation in mutations/ is owed, to the last such mutation (`part` picks which, as the
        spec's choice; by default the first)."""
        self._selectable("ReplicaSelectMutation", partition, block_during_clone)
        muts = self.mutations()
        todo = [n for n in self.store.names(partition) if owed(n, muts)]
        if part is not None:
            todo = [n for n in todo if str(n) == part]
        if not todo:
            raise GuardFailed("ReplicaSelectMutation", f"no part of {partition} on {self.name} owes a mutation"
                                                       + (f" ({part})" if part else ""))
        x = todo[0]
        target = PartName(partition, x.min_block, x.max_block, x.level, desired_version(x, muts))
        entry = self._entry(MUTATE_PART, source_parts=(str(x),), new_part_name=str(target))
        self.keeper.create(f"{self.layout.log}/log-", entry.format(), sequential=True)
        return entry

    # --- ReplicaPullLog ------------------------------------------------------------------
    def _log_pointer(self) -> tuple[int, int]:
        # Only this replica writes its log_pointer: after the first read, memory knows it (the
        # SetData below still carries the version, so a second writer would be refused).
        if self._ptr is None:
            data, stat = self.keeper.get(self.layout.log_pointer(self.name))
            self._ptr = (int(data), stat.version)
        return self._ptr

    def keeps(self, entry: LogEntry) -> bool:
        """The RFC's filter: a global entry always; a partition-scoped one (the partition read
        from its part name or range) when the map makes this replica a keeper. An entry of a
        partition the map does not know makes it read the assignment from Keeper first (F2)."""
        if entry.type in GLOBAL:
            return "filter_skips_global" not in self.bugs
        p = entry.partition
        view = self.cache.get(p)
        if view is None and "filter_with_stale_cache" not in self.bugs:
            view = self.replica_refresh_cache(p)
        return view is not None and self.name in view.keepers()

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
        data = self.keeper.get(f"{self.layout.log}/{name}")[0]
        entry = LogEntry.parse(data, f"{self.layout.log}/{name}")
        take = self.keeps(entry)
        ops = [SetData(self.layout.log_pointer(self.name), str(ptr + 1).encode(), ptr_version)]
        if take:  # the queue entry is the log entry's text, as pullLogsToQueue copies it
            ops.append(Create(f"{self.layout.queue(self.name)}/queue-", data, sequential=True))
        try:
            self.keeper.multi(ops)
        except Exception:
            self._ptr = None  # read it again next time
            raise
        self._ptr = (ptr + 1, ptr_version + 1)
        return {"entry": entry, "type": entry.type, "queued": take, "log": name}

    def pull_whole_log(self) -> int:
        """ReplicaPullLog until the log is used up; returns the entries pulled."""
        n = 0
        while True:
            try:
                self.replica_pull_log()
            except GuardFailed:
                return n
            n += 1

    # --- ReplicaExecuteEntry -------------------------------------------------------------
    def queue(self) -> list[tuple[str, LogEntry]]:
        q = self.layout.queue(self.name)
        return [(n, LogEntry.parse(self.keeper.get(f"{q}/{n}")[0], f"{q}/{n}")) for n in self.keeper.get_children(q)]

    def _is_dropped(self, part: PartName) -> bool:
        """A DROP_RANGE this replica executed covers the part's data (spec: a block below the drop)."""
        return part.min_block <= self.dropped.get(part.partition, -1)

    def replica_execute_entry(self, queue_node: str, source: str | None = None) -> str:
        """Execute one queue entry; returns what was done. A GET_PART fetches the part, or a
        part covering it, from a peer that has it (`source` names the peer, as the spec's
        choice of one; by default the first that has one); the queue entry goes only once done."""
        path = f"{self.layout.queue(self.name)}/{queue_node}"
        entry = LogEntry.parse(self.keeper.get(path)[0], path)
        if entry.type == ALTER_METADATA:
            self.metadata_version += 1
            self._save_state()
            self.keeper.delete(path)
            return "applied"
        if entry.type == DROP_RANGE:
            return self._execute_drop_range(path, entry.part)
        if entry.type == REPLACE_RANGE:
            return self._execute_replace_range(path, entry)
        if entry.type in (CLEAR_COLUMN, CLEAR_INDEX):
            return self._execute_clear(path, entry)
        want = entry.part
        if entry.type == MUTATE_PART:
            return self._execute_mutate(path, want, PartName.parse(entry.source_parts[0]), source)
        if entry.type == MERGE_PARTS:
            merged = self._merge_locally(path, want, [PartName.parse(s) for s in entry.source_parts])
            if merged:
                return merged
        if self._is_dropped(want):
            self.keeper.delete(path)  # made obsolete by a DROP_RANGE this replica executed
            return "dropped"
        if any(have.covers(want) for have in self.store.names(want.partition)):
            self.keeper.delete(path)
            return "covered"
        return self._fetch(path, want, source, lambda have: have.covers(want))

    def _fetch(self, path: str, want: PartName, source: str | None, serves) -> str:
        """Fetch a part a peer has that `serves` the entry (covers it; for a mutation, at least as
        new), replacing what it covers here, in one multi with the queue entry's removal."""
        for peer, store in sorted(self.peers.items()):
            if peer == self.name or source is not None and peer != source:
                continue
            for have in store.names(want.partition):
                replaced = [n for n in self.store.names(want.partition) if have.covers(n)]
                # A part at an older mutation than what it would replace here would undo a mutation.
                if serves(have) and all(n.mutation <= have.mutation for n in replaced):
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

    def _execute_mutate(self, path: str, want: PartName, source_part: PartName, source: str | None) -> str:
        """MUTATE_PART: rewrite the source part here with the mutations it owes up to the target's
        number; a replica without it fetches the mutated part (or one covering it) instead."""
        if self._is_dropped(want):
            self.keeper.delete(path)
            return "dropped"
        have = self.store.names(want.partition)
        if any(h.covers(want) and h.mutation >= want.mutation for h in have):
            self.keeper.delete(path)
            return "covered"
        local = [h for h in have if (h.min_block, h.max_block) == (want.min_block, want.max_block)
                 and h.mutation < want.mutation]
        if local:
            x = local[0]
            rows = mutate_rows(self.store.read(x), owed(x, self.mutations(), upto=want.mutation))
            new = self.store.write(PartName(x.partition, x.min_block, x.max_block, x.level, want.mutation), rows)
            self.store.remove(x)
            parts = self.layout.parts(self.name)
            self.keeper.multi([Delete(f"{parts}/{x}"), Create(f"{parts}/{new}", b""), Delete(path)])
            return f"mutated {x} to {new}"
        return self._fetch(path, want, source, lambda h: h.covers(want) and h.mutation >= want.mutation)

    def _drop_range(self, rng: PartName) -> None:
        """The parts in the range go, and so do the queued entries that would make a part in it
        (ClickHouse's removePartProducingOpsInRange): their data is dropped anyway."""
        p = rng.partition
        for n in self.store.names(p):
            if n.max_block <= rng.max_block:
                self.keeper.delete(f"{self.layout.parts(self.name)}/{n}")
                self.store.remove(n)
        for node, e in self.queue():
            if e.type in PART_PRODUCING and e.partition == p and e.part.max_block <= rng.max_block:
                self.keeper.delete(f"{self.layout.queue(self.name)}/{node}")
        self.dropped[p] = max(self.dropped.get(p, -1), rng.max_block)
        self._save_state()

    def _execute_drop_range(self, path: str, rng: PartName) -> str:
        self._drop_range(rng)
        self.keeper.delete(path)
        return "applied"

    def _execute_replace_range(self, path: str, entry: LogEntry) -> str:
        """REPLACE_RANGE: drop its range, then bring its new parts like GET_PARTs (fetched from a
        replica that attached them), queued in place of the entry."""
        self._drop_range(PartName.parse(entry.replace.drop_range_name))
        gets = [LogEntry(GET_PART, new_part_name=n, source_replica=entry.source_replica,
                         create_time=entry.create_time) for n in entry.replace.new_parts]
        q = self.layout.queue(self.name)
        self.keeper.multi([Delete(path), *(Create(f"{q}/queue-", g.format(), sequential=True) for g in gets)])
        return f"replaced: {len(gets)} parts to fetch"

    def _execute_clear(self, path: str, entry: LogEntry) -> str:
        """CLEAR_COLUMN / CLEAR_INDEX (18.16): rewrite the parts in the range without the column,
        under the same names (which is why today's release makes it a mutation)."""
        rng = entry.part
        if entry.type == CLEAR_COLUMN:
            for n in self.store.names(rng.partition):
                if rng.min_block <= n.min_block and n.max_block <= rng.max_block:
                    self.store.rewrite(n, [{k: v for k, v in r.items() if k != entry.column_name}
                                           for r in self.store.read(n)])
        self.keeper.delete(path)
        return "applied"

    def drop_partition_locally(self, partition: str) -> None:
        """CLEANUP on this replica: its parts, their znodes and its queue entries of the partition."""
        for n in self.store.names(partition):
            self.keeper.delete(f"{self.layout.parts(self.name)}/{n}")
            self.store.remove(n)
        for node, entry in self.queue():
            if entry.partition == partition:
                self.keeper.delete(f"{self.layout.queue(self.name)}/{node}")

    def has_rows_of(self, partition: str) -> list[dict]:
        return [r for n in self.store.names(partition) for r in self.store.read(n)]


def caught_up(keeper: Keeper, layout: Layout, r: str, partition: str) -> bool:
    """Nothing of the partition in r's queue, nor in the log beyond r's log_pointer. Read from
    Keeper (the coordinator reads a target's state there: the target itself may be down)."""
    ptr = int(keeper.get(layout.log_pointer(r))[0])
    queue = layout.queue(r)
    for n in _children(keeper, queue):
        try:
            if LogEntry.parse(keeper.get(f"{queue}/{n}")[0]).partition == partition:
                return False
        except NoNodeError:
            continue  # executed between the listing and the read
    log = keeper.get_children(layout.log)
    return all(LogEntry.parse(keeper.get(f"{layout.log}/{n}")[0]).partition != partition for n in log[ptr:])


def _children(keeper: Keeper, path: str) -> list[str]:
    try:
        return keeper.get_children(path)
    except NoNodeError:
        return []


def next_block_number(keeper: Keeper, layout: Layout, partition: str) -> int:
    """A partition's next block number from block_numbers/{p}/ (sequential), as in ClickHouse.
    One Keeper request per INSERT; the parent is created only the first time it is missing."""
    numbers = layout.block_numbers(partition)
    try:
        path = keeper.create(f"{numbers}/block-", sequential=True)
    except NoNodeError:
        keeper.ensure_path(numbers)
        path = keeper.create(f"{numbers}/block-", sequential=True)
    return int(path.rsplit("-", 1)[1])


def client_mutate(keeper: Keeper, layout: Layout, commands: str, source_replica: str = "",
                  clock: Callable[[], float] = time.time) -> MutationEntry:
    """ALTER TABLE ... UPDATE / DELETE: a table-wide mutation in mutations/, with a block number
    taken in every partition that has any (data below it owes the mutation). The MUTATE_PART
    entries come later, one per part, from each partition's merge-selecting owner."""
    row_function(commands)  # refuse what cannot be applied before anything is written
    partitions = _children(keeper, layout.all_block_numbers)
    numbers = tuple(sorted((p, next_block_number(keeper, layout, p)) for p in partitions))
    m = MutationEntry(commands, numbers, source_replica, int(clock()))
    keeper.create(f"{layout.mutations}/", m.format(), sequential=True)
    return m


def client_drop_partition(keeper: Keeper, layout: Layout, partition: str, source_replica: str = "",
                          clock: Callable[[], float] = time.time) -> int:
    """ALTER TABLE ... DROP PARTITION: DROP_RANGE over every block numbered so far, after the
    dropped blocks' ids are cleared from blocks/ (ClickHouse's clearBlocksInPartition), so the
    same INSERT sent again is written again. Returns the last block number dropped."""
    a = read_assignment(keeper, layout, partition)
    if a is None:
        raise GuardFailed("ClientDropPartition", f"partition {partition} is not assigned")
    if keeper.exists(layout.block_numbers(partition)) is None:
        # Nothing was ever numbered in it: ClickHouse writes no entry for an empty partition.
        raise GuardFailed("ClientDropPartition", f"partition {partition} has no data to drop")
    upto = next_block_number(keeper, layout, partition) - 1
    mutation = max((n for m in _mutation_entries(keeper, layout)
                    if (n := m.number_in(partition)) is not None and n <= upto), default=0)
    for node in keeper.get_children(layout.blocks):
        if node.startswith(f"{partition}_"):
            try:
                data = keeper.get(f"{layout.blocks}/{node}")[0]
                if PartName.parse(data.decode()).max_block <= upto:
                    keeper.delete(f"{layout.blocks}/{node}")
            except NoNodeError:
                continue
    entry = LogEntry(DROP_RANGE, new_part_name=drop_range_name(partition, upto, mutation),
                     source_replica=source_replica, create_time=int(clock()))
    keeper.create(f"{layout.log}/log-", entry.format(), sequential=True)
    return upto


def _mutation_entries(keeper: Keeper, layout: Layout) -> list[MutationEntry]:
    return [MutationEntry.parse(keeper.get(f"{layout.mutations}/{n}")[0]) for n in _children(keeper, layout.mutations)]


def client_alter_metadata(keeper: Keeper, layout: Layout, change: str, source_replica: str = "",
                          clock: Callable[[], float] = time.time) -> LogEntry:
    """ALTER TABLE ... ADD/MODIFY COLUMN as today's release does it: /columns changes and an
    ALTER_METADATA entry carrying its new version goes into the log, in one multi. Every replica
    applies it, whatever it owns (the RFC's "always process"). (18.16 had no such entry.)"""
    data, stat = keeper.get(layout.columns)
    columns = data.decode() + change + "\n"
    entry = LogEntry(ALTER_METADATA, alter_version=stat.version + 1, columns_str=columns,
                     source_replica=source_replica, create_time=int(clock()))
    keeper.multi([SetData(layout.columns, columns.encode(), stat.version),
                  Create(f"{layout.log}/log-", entry.format(), sequential=True)])
    return entry
