"""One replica's protocol steps for writes and the filtered log, action for action with
spec/rfc/SelectiveReplication.tla (ReplicaRefreshCache, ReplicaWriteInsert, ReplicaSelectMerge,
ReplicaSelectMutation, ReplicaPullLog, ReplicaExecuteEntry), on the base protocol as ClickHouse
writes it: log and queue entries in its text format (protocol/log_entry.py), table-wide
mutations with one MUTATE_PART per part (protocol/mutations.py), DROP PARTITION clearing the
partition's blocks/ hashes.

The core starts no threads: a driver calls one step at a time, so runs are deterministic. A
step whose guard is false raises GuardFailed and changes nothing. `peers` maps replica names to
their PartStores: it stands in for the interserver HTTP port that fetches go through.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from protocol.assignment import Assignment, GuardFailed, read_assignment
from protocol.keeper import (Check, Create, Delete, Keeper, KeeperError, KeeperUnavailableError, MultiError,
                             NoNodeError, SetData)
from protocol.layout import Layout
from protocol.log_entry import (ALTER_METADATA, CLEAR_COLUMN, CLEAR_INDEX, DROP_PART, DROP_RANGE, GET_PART, GLOBAL,
                                LEGACY_MAX_LEVEL, MERGE_PARTS, MUTATE_PART, PART_PRODUCING, REPLACE_RANGE, LogEntry,
                                ReplaceRange, drop_range_name)
from protocol.mutations import MutationEntry, desired_version, mutate_rows, owed, row_function
from protocol.parts import CommitMayHaveApplied, PartGone, PartName, PartStore, covers_as_new
from protocol.table import check_partition_id


class InsertRejected(Exception):
    """The INSERT failed before it was committed (the client may retry it)."""


# The most log entries one pullLogsToQueue multi moves into the queue (ClickHouse's MAX_MULTI_OPS in
# ReplicatedMergeTreeQueue::pullLogsToQueue: ZooKeeper's 1 MB request limit with a margin).
PULL_BATCH = 100


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
    # The queue entries read so far, by node name: a queue node is never written after it is
    # created and its sequential name is never reused under the same queue (in Keeper; a caller that
    # rewinds Keeper rewinds these too: keeper_reads), so each is read once
    # (ClickHouse keeps the whole queue in memory); the listing still comes from Keeper each time.
    # Without it every execute step read every entry again, and a queue that grew under a steady
    # INSERT stream made each step slower, so it grew faster (issue 38).
    _queue_entries: dict[str, LogEntry] = field(default_factory=dict, repr=False)
    _log_entries: dict[str, LogEntry] = field(default_factory=dict, repr=False)   # beyond log_pointer (caught_up_here)
    _ptr: tuple[int, int] | None = field(default=None, repr=False)
    _mutations: dict[str, MutationEntry] = field(default_factory=dict, repr=False)
    # is_lost, read at the first pull: only a replica that is down is marked lost, so one that
    # runs reads it once, as ClickHouse does at start-up; a clone clears it.
    _lost: bool | None = field(default=None, repr=False)
    # Parts a merge, a mutation or a covering fetch replaced: off the disk and out of reads at once,
    # but registered in replicas/{r}/parts until old_parts_lifetime has passed, as ClickHouse keeps
    # an outdated part (part name -> when it became outdated).
    outdated: dict[str, float] = field(default_factory=dict)
    # The cleanup thread's cache of block ids' (ctime, version) (protocol/cleanup_thread.py).
    block_stats: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Commits Keeper could not confirm or deny (it went away during the commit multi): part ->
    # its block-number lock. Decided by resolve_unknown_commits once Keeper answers.
    unknown_commits: dict[PartName, str] = field(default_factory=dict)
    # The same for the commits of queue entries (a fetch, a merge, a mutation): part -> (the queue
    # entry's path, the parts it replaced here). The part stays on disk meanwhile (the store's
    # CommitMayHaveApplied); resolve_unknown_commits finishes or confirms each.
    unknown_entry_commits: dict[PartName, tuple[str, list[PartName]]] = field(default_factory=dict)
    # What this running replica writes into its is_active (registration.register_replica).
    active_id: bytes = b""
    # Partitions whose map version is in the cache but not yet published (Keeper went away).
    _unpublished: set[str] = field(default_factory=set, repr=False)
    # What ClickHouse's parts and queue mutexes guard: this replica's memory (map, queue cursor,
    # pins, outdated parts) and its disk, against the other threads that act on it at once in the
    # live runtime (its background thread, the INSERTs it writes, the queries it serves). A thread
    # holds at most one replica's lock, or every replica's in name order (reference/runtime.py);
    # the deterministic driver runs on one thread and never waits for it.
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Applied ALTER_METADATA and DROP_RANGE survive a crash (the spec's meta[r]): on disk.
        state = self.store.load_state()
        self.metadata_version = state.get("metadata_version", self.metadata_version)
        self.dropped = {**state.get("dropped", {}), **self.dropped}

    @contextlib.contextmanager
    def locked_by_deadline(self):
        """This replica's lock, waited for no longer than the calling thread's deadline (an INSERT's
        or a SELECT's answer_by, Keeper.deadline; none: as long as it takes). Yields whether it got
        it; the caller decides what a replica busy past the deadline means."""
        deadline = self.keeper.deadline
        got = self.lock.acquire(timeout=-1 if deadline is None else max(0.0, deadline - time.monotonic()))
        try:
            yield got
        finally:
            if got:
                self.lock.release()

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
        if old is None or old.version != a.version or partition in self._unpublished:
            # CLEANUP must know every map has seen a SWITCH (spec ReplicaCleanup): publish it.
            # A publish Keeper did not take (it went away) is tried again at the next refresh,
            # even with no change: otherwise the map would hold the version and never say so,
            # and CLEANUP would wait for it for good (found by the fault suite: full outage in CLONE).
            self._unpublished.add(partition)
            path = self.layout.map_version(self.name, partition)
            try:
                self.keeper.set(path, str(a.version).encode())
            except NoNodeError:
                self.keeper.create(path, str(a.version).encode(), makepath=True)
            self._unpublished.discard(partition)
        return a

    def load_map(self) -> None:
        """Load the whole map at start-up, before serving (spec F9)."""
        self.cache = {}
        for p in self.keeper.get_children(self.layout.assignments):
            self.replica_refresh_cache(p)

    def keeper_reads(self) -> tuple:
        """What this replica keeps of what it read from Keeper, as a copy: the log's listing, its
        log_pointer with the version, the entries read by node name (queue, log beyond the pointer,
        mutations) and is_lost. For a caller that rewinds Keeper (conformance's snapshot and
        restore), which must rewind these with it: there a sequential name is used again by another
        entry, which reads kept by name would not see (MCDropDuringClone's exploration executed a
        DROP_RANGE as the GET_PART cached under its name, and deleted its own queue node), and a
        version comes back with another value."""
        return (list(self._log_listing), self._ptr, dict(self._queue_entries), dict(self._log_entries),
                dict(self._mutations), self._lost)

    def restore_keeper_reads(self, reads: tuple) -> None:
        listing, self._ptr, queue, log, mutations, self._lost = reads
        self._log_listing, self._queue_entries, self._log_entries, self._mutations = (
            list(listing), dict(queue), dict(log), dict(mutations))

    def read_pointer_again(self, lost: bool | None = None) -> None:
        """Forget the log's listing, log_pointer and is_lost (or know is_lost is `lost`): after a
        clone rewrote them, or in a new session, where another writer may have moved them. The
        entries read by name stay: ZooKeeper never gives a sequential name to another entry."""
        self._ptr, self._log_listing, self._lost = None, [], lost

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
    def replica_write_insert(self, partition: str, rows: list[dict], block_hash: str, patch: str = "") -> str:
        """Write a sub-block of an owned partition and commit it; returns the part name, or
        "deduplicated" when blocks/ already has the block's id. As ClickHouse: the block number is
        an ephemeral lock in block_numbers/{p}/, taken with the block id checked first (a duplicate
        takes no number), and released by the commit multi (blocks/<id>, the GET_PART in log/,
        replicas/{r}/parts/<part>). Fixed protocol: both multis also check the assignment's
        version against the map (spec F4), so a stale map takes no number either. `patch`: the
        part is a lightweight UPDATE's patch part (PR #102244's PR-F8), named patch-<patch>-<p>."""
        check_partition_id(partition)
        if self.keeper.expired:
            # As a ClickHouse replica whose session expired (TABLE_IS_READ_ONLY): no write until the
            # session is re-established (Cluster.reestablish), the map reloaded first (F9).
            raise ReplicaReadOnly(f"replica {self.name} is read-only: its Keeper session expired "
                                  f"and is not re-established yet")
        a = self.cache.get(partition)
        if a is None or self.name not in a.owners:
            raise GuardFailed("ReplicaWriteInsert", f"{self.name}'s map does not make it an owner of {partition}")
        block_id = f"{partition}_{block_hash}"   # ClickHouse: <partition>_<hash of the block's data>
        checks = []
        if "insert_without_assignment_check" not in self.bugs:
            checks.append(Check(self.layout.assignment(partition), a.version))
        if "no_dedup" not in self.bugs:  # "check not exists", the way ClickHouse writes it for ZooKeeper
            checks += [Create(f"{self.layout.blocks}/{block_id}", b""), Delete(f"{self.layout.blocks}/{block_id}")]
        try:
            lock, block = lock_block_number(self.keeper, self.layout, partition, checks, self.name)
        except MultiError as e:
            return self._refused(checks[e.index], partition, e)
        name = self.store.write(PartName(partition, block, block, 0, patch=patch), rows)
        entry = self._entry(GET_PART, new_part_name=str(name), block_id=block_id)
        # blocks/<id> holds the part name: DROP PARTITION reads it to clear the dropped blocks' ids.
        ops = [Check(self.layout.assignment(partition), a.version)] if "insert_without_assignment_check" not in self.bugs else []
        if "no_dedup" not in self.bugs:
            ops.append(Create(f"{self.layout.blocks}/{block_id}", str(name).encode()))
        ops += [Create(f"{self.layout.log}/log-", entry.format(), sequential=True),
                Create(f"{self.layout.parts(self.name)}/{name}", b""), Delete(lock)]
        try:
            self.keeper.multi(ops)
        except MultiError as e:
            self.store.remove(name)  # nothing was committed: the local part must go too
            release_lock(self.keeper, lock)  # its number becomes a gap no part will fill
            return self._refused(ops[e.index], partition, e)
        except KeeperError:
            # Keeper went away (retry deadline, or the session expired) and the commit could not be
            # read back: it may be in Keeper or not. The part stays until Keeper can tell
            # (resolve_unknown_commits); the caller sees KeeperUnavailableError/SessionExpiredError.
            self.unknown_commits[name] = lock
            raise
        return str(name)

    def resolve_unknown_commits(self) -> list[str]:
        """Decide the commits Keeper could not confirm, as ClickHouse's part check decides a part
        an INSERT of unknown status left: registered in replicas/{r}/parts, the commit was
        applied (the whole multi is atomic) and the part stays; not registered, it was not, and the
        local part goes with its block-number lock (a number no part fills, as after a failed
        commit). Returns the parts removed."""
        removed = []
        for name, lock in list(self.unknown_commits.items()):
            if self.keeper.exists(f"{self.layout.parts(self.name)}/{name}") is None:
                self.store.remove(name)
                release_lock(self.keeper, lock)
                removed.append(str(name))
            del self.unknown_commits[name]
        # A queue entry's part is kept either way: not registered, the multi did not apply (it is
        # atomic), so its entry is still queued and the part is made already: the multi is done
        # now. The parts it replaced here, gone from the disk, are outdated as after a commit.
        for name, (queue_path, replaced) in list(self.unknown_entry_commits.items()):
            if self.keeper.exists(f"{self.layout.parts(self.name)}/{name}") is None:
                ops = [Create(f"{self.layout.parts(self.name)}/{name}", b"")]
                if self.keeper.exists(queue_path) is not None:
                    ops.append(Delete(queue_path))
                self.keeper.multi(ops)
            self._outdate(replaced)
            del self.unknown_entry_commits[name]
        return removed

    def _refused(self, failed, partition: str, e: MultiError) -> str:
        """The outcome of a lock or commit multi that failed at op `failed`."""
        if isinstance(failed, Create) and failed.path.startswith(self.layout.blocks + "/"):
            return "deduplicated"  # the same block was committed before: acknowledge, write nothing
        if isinstance(failed, Check):
            self.replica_refresh_cache(partition)
            raise InsertRejected(f"assignment of {partition} changed under {self.name}; retry") from e
        raise InsertRejected(f"commit into {partition} failed: {e}") from e

    # --- ReplicaSelectMerge, ReplicaSelectMutation ------------------------------------------
    def _owner(self, action: str, partition: str) -> None:
        a = self.cache.get(partition)
        if a is None or self.name not in a.owners:
            raise GuardFailed(action, f"{self.name}'s map does not make it an owner of {partition}")

    def _selectable(self, action: str, partition: str, block_during_clone: bool) -> None:
        """The guard merges and part mutations share, after the owner check and once there is
        work (both read memory; this reads the queue and the log tail from Keeper, so it comes
        last): caught up on the partition (its parts are then what the whole log makes of it, as
        ClickHouse's "virtual parts" are), and with BlockDuringClone, not a partition in CLONE."""
        if not self.caught_up_here(partition):
            raise GuardFailed(action, f"{self.name} is not caught up on {partition}")
        if block_during_clone:
            if _migration_state(self.keeper, self.layout, partition) == "clone":
                raise GuardFailed(action, f"{partition} is in CLONE and merges and mutations are blocked")

    def replica_select_merge(self, partition: str, block_during_clone: bool = False, final: bool = False) -> LogEntry:
        """Put MERGE_PARTS of two neighbouring parts of an owned partition into the log: the same
        mutation, and no block-number lock held between them. A held lock is an INSERT (or a
        mutation, or a drop) still in flight: a part covering its number would make its GET_PART
        look covered and its rows would be lost. A number whose lock is gone is a freed gap that
        no part will fill, and ClickHouse merges across it. `final` (OPTIMIZE ... FINAL) merges
        every part of the partition at once, when they may all be merged together."""
        self._owner("ReplicaSelectMerge", partition)
        names = self.store.names(partition)
        if len(names) < 2:
            raise GuardFailed("ReplicaSelectMerge", f"{self.name} has fewer than two parts of {partition}")
        self._selectable("ReplicaSelectMerge", partition, block_during_clone)
        held = held_block_numbers(self.keeper, self.layout, partition)
        mergeable = lambda x, y: x.mutation == y.mutation and not any(x.max_block < n < y.min_block for n in held)  # noqa: E731
        pairs = [(x, y) for x, y in zip(names, names[1:]) if mergeable(x, y)]
        if final and len(names) > 1 and len(pairs) == len(names) - 1:
            pairs = [tuple(names)]
        for sources in pairs[:1]:
            result = PartName(partition, sources[0].min_block, sources[-1].max_block,
                              max(s.level for s in sources) + 1, sources[0].mutation)
            entry = self._entry(MERGE_PARTS, source_parts=tuple(map(str, sources)), new_part_name=str(result))
            self.keeper.create(f"{self.layout.log}/log-", entry.format(), sequential=True)
            return entry
        raise GuardFailed("ReplicaSelectMerge", f"{self.name} has no two neighbouring parts of {partition} "
                                                "to merge (or a block-number lock is held between them)")

    def replica_select_mutation(self, partition: str, part: str | None = None,
                                block_during_clone: bool = False) -> LogEntry:
        """MUTATE_PART "mutate <part> to <part>_<m>" for one of this owner's parts whose data a
        mutation in mutations/ is owed, to the last such mutation (`part` picks which, as the
        spec's choice; by default the first)."""
        self._owner("ReplicaSelectMutation", partition)
        muts = self.mutations()
        todo = [n for n in self.store.names(partition) if owed(n, muts)]
        if part is not None:
            todo = [n for n in todo if str(n) == part]
        if not todo:
            raise GuardFailed("ReplicaSelectMutation", f"no part of {partition} on {self.name} owes a mutation"
                                                       + (f" ({part})" if part else ""))
        self._selectable("ReplicaSelectMutation", partition, block_during_clone)
        x = todo[0]
        target = PartName(partition, x.min_block, x.max_block, x.level, desired_version(x, muts))
        entry = self._entry(MUTATE_PART, source_parts=(str(x),), new_part_name=str(target))
        self.keeper.create(f"{self.layout.log}/log-", entry.format(), sequential=True)
        return entry

    def caught_up_here(self, partition: str) -> bool:
        """caught_up (below) for this replica itself, as its merge selection asks it: the same
        reads of the queue's and the log's listings, but each entry read once (queue(),
        _log_entry), not at every selection: a replica behind under a steady INSERT stream would
        otherwise read its whole backlog at each merge selection (issue 38). The log_pointer is
        its own, which only it writes (_log_pointer)."""
        if any(e.partition == partition for _, e in self.queue()):
            return False
        ptr, _ = self._log_pointer()
        for n in list(self._log_entries):   # what it has pulled since is not needed again
            if log_number(n) < ptr:
                del self._log_entries[n]
        return all(self._log_entry(n).partition != partition
                   for n in self.keeper.get_children(self.layout.log) if log_number(n) >= ptr)

    def _log_entry(self, name: str, data: bytes | None = None) -> LogEntry:
        """A log entry by name, read from Keeper once (log entries are never rewritten)."""
        entry = self._log_entries.get(name)
        if entry is None:
            path = f"{self.layout.log}/{name}"
            entry = self._log_entries[name] = LogEntry.parse(self.keeper.get(path)[0] if data is None else data, path)
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

    def _entry_at(self, ptr: int) -> str | None:
        """The first log entry numbered ptr or later; the log is listed again only when the last
        listing is used up."""
        for relist in (False, True):
            if relist:
                self._log_listing = self.keeper.get_children(self.layout.log)
            name = next((n for n in self._log_listing if log_number(n) >= ptr), None)
            if name is not None:
                return name
        return None

    def replica_pull_log(self) -> dict | None:
        """Pull the next log entry: queue it or skip it by the filter; log_pointer (the next
        entry's sequence number, as ClickHouse keeps it) advances either way. Returns the entry and
        whether it was queued, or raises when caught up."""
        return self.replica_pull_logs(1)[0]

    def replica_pull_logs(self, most: int = PULL_BATCH) -> list[dict]:
        """ClickHouse's pullLogsToQueue: ReplicaPullLog for each entry from log_pointer on, as far
        as the log is listed and at most `most`, in one multi (the queue entries and log_pointer
        moved past them), after one batch of reads (Keeper.get_many). It is that many ReplicaPullLog
        steps of this replica in a row with nothing of its own between them (it holds its lock),
        each state between them one the spec allows, none of them seen by anyone: the pulls of a
        replica behind by n entries cost n/most multis instead of n. A gap in the numbers (entries
        trimmed before it pulled them) ends the batch before it; raises GuardFailed as
        replica_pull_log when there is nothing to pull or the first is gone. Returns each entry
        pulled, as replica_pull_log does."""
        if self._lost is None:
            self._lost = self.keeper.get(self.layout.is_lost(self.name))[0] == b"1"
        if self._lost:
            raise GuardFailed("ReplicaPullLog", f"{self.name} is lost and must clone before it pulls the log")
        ptr, ptr_version = self._log_pointer()
        first = self._entry_at(ptr)
        if first is None:
            raise GuardFailed("ReplicaPullLog", f"{self.name} has pulled every log entry (log_pointer {ptr})")
        if log_number(first) != ptr:
            raise GuardFailed("ReplicaPullLog", f"log entries {ptr}..{log_number(first) - 1} were removed before "
                                                f"{self.name} pulled them: it is lost and must clone")
        names: list[str] = []
        for n in self._log_listing:   # sorted: the names are zero-padded sequence numbers
            if log_number(n) < ptr:
                continue
            if log_number(n) != ptr + len(names) or len(names) == most:
                break
            names.append(n)
        paths = [f"{self.layout.log}/{n}" for n in names]
        ops: list = [SetData(self.layout.log_pointer(self.name), str(ptr + len(names)).encode(), ptr_version)]
        out = []
        for n, path, (data, _) in zip(names, paths, self.keeper.get_many(paths)):
            entry = LogEntry.parse(data, path)
            self._log_entries.pop(n, None)
            take = self.keeps(entry)
            if take:
                ops.append(Create(f"{self.layout.queue(self.name)}/queue-", data, sequential=True))
            out.append({"entry": entry, "type": entry.type, "queued": take, "log": n})
        try:
            self.keeper.multi(ops)
        except Exception:
            self._ptr = None  # read it again next time
            raise
        self._ptr = (ptr + len(names), ptr_version + 1)
        return out

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
        """The queue's entries in order. An entry removed between the listing and its read (done
        meanwhile, or cleared by a CLEANUP or a clone run again after a restart) is skipped: every
        caller is a step that must be safe to take again."""
        q = self.layout.queue(self.name)
        listed = self.keeper.get_children(q)
        seen = self._queue_entries
        for n in [n for n in seen if n not in set(listed)]:
            del seen[n]
        out = []
        for n in listed:
            if n not in seen:
                try:
                    seen[n] = LogEntry.parse(self.keeper.get(f"{q}/{n}")[0], f"{q}/{n}")
                except NoNodeError:
                    continue
            out.append((n, seen[n]))
        return out

    def _is_dropped(self, part: PartName) -> bool:
        """A DROP_RANGE this replica executed covers the part's data (spec: a block below the drop)."""
        return part.min_block <= self.dropped.get(part.partition, -1)

    def replica_execute_entry(self, queue_node: str, source: str | None = None) -> str:
        """Execute one queue entry; returns what was done. A GET_PART fetches the part, or a
        part covering it, from a peer that has it (`source` names the peer, as the spec's
        choice of one; by default the first that has one); the queue entry goes only once done."""
        path = f"{self.layout.queue(self.name)}/{queue_node}"
        try:
            data = self.keeper.get(path)[0]
        except NoNodeError:
            # Gone since the caller listed the queue: executing another entry removed it (a
            # DROP_RANGE, or a partition dropped locally). The spec's guard: e \in queue[r].
            raise GuardFailed("ReplicaExecuteEntry", f"{queue_node} is no longer in {self.name}'s queue") from None
        entry = LogEntry.parse(data, path)
        if entry.type == ALTER_METADATA:
            self.metadata_version += 1
            self._save_state()
            self.keeper.delete(path)
            return "applied"
        if entry.type == DROP_RANGE:
            return self._execute_drop_range(path, entry.part, detach=entry.detach)
        if entry.type == DROP_PART:
            return self._execute_drop_part(path, entry.part, detach=entry.detach)
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
        # ClickHouse's MergeTreePartInfo::contains: the block range and a mutation at least as new
        # (a part all_1_1_0 here does not make a GET of all_1_1_0_5 done: spec CoversAsNew).
        if any(covers_as_new(have, want) for have in self.store.names(want.partition)):
            self.keeper.delete(path)
            return "covered"
        return self._fetch(path, want, source, lambda have: covers_as_new(have, want))

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
                    try:
                        got = self.store.fetch_from(store, have, commit=self._commit(path))
                    except PartGone:
                        continue   # the peer replaced it since it listed it (a live runtime's race): next holder
                    self._outdate(replaced)
                    return f"fetched {got} from {peer}"
        raise GuardFailed("ReplicaExecuteEntry", f"no replica has a part covering {want} yet")

    def _merge_locally(self, path: str, want: PartName, sources: list[PartName]) -> str | None:
        """MERGE_PARTS with every source here: merge them (the parts znodes change in one multi).
        Otherwise None, and the entry is done like a GET_PART of the result (ClickHouse fetches it)."""
        have = set(self.store.names(want.partition))
        if not all(s in have for s in sources):
            return None
        got = self.store.merge(sources, commit=self._commit(path))
        self._outdate(sources)
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
            self.store.commit_replacing(new, [x], self._commit(path))
            self._outdate([x])
            return f"mutated {x} to {new}"
        return self._fetch(path, want, source, lambda h: h.covers(want) and h.mutation >= want.mutation)

    def _commit(self, queue_path: str):
        """The multi that registers a part this replica made and removes the queue entry that made
        it, run by the part store between writing the part and removing what it replaces. Keeper
        gone before it answered (not a MultiError, which applied nothing): the part may be
        registered, so the store keeps it (CommitMayHaveApplied) and resolve_unknown_commits
        decides. Taking it off left Keeper listing a part the disk lacked once the multi had
        applied, and a second entry for it (a CLONE's GET beside the log's) failing for ever on
        the registration (the fault suite's full_outage x cleanup)."""
        def commit(got: PartName) -> None:
            replaced = [n for n in self.store.names(got.partition) if n != got and got.covers(n)]
            try:
                self.keeper.multi([Create(f"{self.layout.parts(self.name)}/{got}", b""), Delete(queue_path)])
            except MultiError:
                raise
            except KeeperError as e:
                self.unknown_entry_commits[got] = (queue_path, replaced)
                raise CommitMayHaveApplied(f"the commit of {got} went unanswered") from e
        return commit

    def _outdate(self, names) -> None:
        now = self.clock()
        for n in names:
            self.outdated.setdefault(str(n), now)

    def replica_clear_old_parts(self, lifetime: float) -> list[str]:
        """The cleanup thread's clearOldPartsAndRemoveFromZK: unregister the parts outdated for
        `lifetime` seconds (old_parts_lifetime). A registered part that is not on disk and not
        known as outdated (a restart forgot when) counts as outdated from now."""
        parts = self.layout.parts(self.name)
        on_disk = {str(n) for n in self.store.names()}
        now = self.clock()
        for n in _children(self.keeper, parts):
            if n not in on_disk:
                self.outdated.setdefault(n, now)
        gone = [n for n, since in sorted(self.outdated.items()) if now - since >= lifetime]
        for n in gone:
            try:
                self.keeper.delete(f"{parts}/{n}")
            except NoNodeError:
                pass
            del self.outdated[n]
        return gone

    def _drop_range(self, rng: PartName, detach: bool = False) -> None:
        """The parts in the range go (_drop_parts), and its block numbers are marked dropped: a
        later GET_PART of a block in it is obsolete."""
        self._drop_parts(rng.partition, lambda n: n.max_block <= rng.max_block, detach)
        self.dropped[rng.partition] = max(self.dropped.get(rng.partition, -1), rng.max_block)
        self._save_state()

    def _drop_parts(self, partition: str, dropped: Callable[[PartName], bool], detach: bool = False) -> None:
        """The partition's parts `dropped` picks go, registered outdated ones too, and so do the
        queued entries that would make one (ClickHouse's removePartProducingOpsInRange): their data
        is dropped anyway. `detach`: DETACH, out of the table and kept in detached/."""
        self._unregister_all(lambda n: n.partition == partition and dropped(n))
        for n in self.store.names(partition):
            if dropped(n):
                self.store.detach(n) if detach else self.store.remove(n)
        for node, e in self.queue():
            if e.type in PART_PRODUCING and e.partition == partition and dropped(e.part):
                self.keeper.delete(f"{self.layout.queue(self.name)}/{node}")

    def _execute_drop_range(self, path: str, rng: PartName, detach: bool = False) -> str:
        self._drop_range(rng, detach)
        self.keeper.delete(path)
        return "applied"

    def _execute_drop_part(self, path: str, part: PartName, detach: bool = False) -> str:
        """DROP_PART (26.x's ALTER TABLE DROP PART; part moves' SOURCE_DROP): the parts the named
        part contains go, it among them (MergeTreePartInfo::contains: range, level, mutation). A
        part that contains it instead, a merge or a mutation of it executed here first, stays:
        ClickHouse's "very weak guarantees" for DROP PART. Unlike a DROP_RANGE it marks no block
        number dropped."""
        self._drop_parts(part.partition, lambda n: covers_as_new(part, n) and part.level >= n.level, detach)
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
        """CLEANUP on this replica: its parts, their znodes (outdated ones too) and its queue entries
        of the partition. Idempotent: a CLEANUP cut short by a crash is run again from the start."""
        self.drop_parts_locally(partition)
        for node, entry in self.queue():
            if entry.partition == partition:
                try:
                    self.keeper.delete(f"{self.layout.queue(self.name)}/{node}")
                except NoNodeError:
                    pass

    def drop_parts_locally(self, partition: str) -> None:
        """This replica's parts of the partition and their znodes (outdated ones too); its queue is
        left as it is."""
        self._unregister_all(lambda n: n.partition == partition)
        for n in self.store.names(partition):
            self.store.remove(n)

    def _unregister_all(self, which) -> None:
        """Remove this replica's part znodes (outdated ones included) that `which` picks."""
        parts = self.layout.parts(self.name)
        for name in _children(self.keeper, parts):
            n = PartName.parse(name)
            if which(n):
                try:
                    self.keeper.delete(f"{parts}/{name}")
                except NoNodeError:
                    pass
                self.outdated.pop(name, None)

    def has_rows_of(self, partition: str) -> list[dict]:
        return [r for n in self.store.names(partition) for r in self.store.read(n)]


def queued_of(keeper: Keeper, layout: Layout, r: str, partition: str) -> list[bytes]:
    """The texts of r's queue entries of the partition, read from Keeper (a coordinator reads a
    target's queue there: the target itself may be down)."""
    queue = layout.queue(r)
    out = []
    for n in _children(keeper, queue):
        try:
            text = keeper.get(f"{queue}/{n}")[0]
        except NoNodeError:
            continue  # executed between the listing and the read
        if LogEntry.parse(text).partition == partition:
            out.append(text)
    return out


def caught_up(keeper: Keeper, layout: Layout, r: str, partition: str) -> bool:
    """Nothing of the partition in r's queue, nor in the log beyond r's log_pointer. Read from
    Keeper (the coordinator reads a target's state there: the target itself may be down)."""
    ptr = int(keeper.get(layout.log_pointer(r))[0])
    if queued_of(keeper, layout, r, partition):
        return False
    return all(LogEntry.parse(keeper.get(f"{layout.log}/{n}")[0]).partition != partition
               for n in keeper.get_children(layout.log) if log_number(n) >= ptr)


def caught_up_to(keeper: Keeper, layout: Layout, r: str, partition: str, upto: int) -> bool:
    """The spec's CaughtUpTo(r, p, upto): nothing of the partition numbered below `upto` in r's
    queue, nor in the log between r's log_pointer and `upto`. A queue entry is the text of the log
    entry it was pulled from (pullLogsToQueue copies it), so its number is that log entry's; one a
    CLONE queued, or whose log entry the cleanup thread has trimmed since, counts as below (it is
    waited for: never too early). ClickHouse keeps no more: pullLogsToQueue writes the log entry's
    bytes to queue-N and sets only the in-memory znode_name, load() after a restart the same, and
    the entry's text has no log-number field (ReplicatedMergeTreeQueue.cpp at 000abf0a,
    ReplicatedMergeTreeLogEntry.cpp writeText at 03a6d53), so a replica cannot tell a queued
    entry's log number once that log entry is trimmed either. The spec knows it; conformance
    excuses the wait (explore.REFINEMENTS["CoordinatorSwitch"]). `upto` is a log number as
    log_pointer counts: the log's length when it was fixed (migration.log_head)."""
    ptr = int(keeper.get(layout.log_pointer(r))[0])
    names = keeper.get_children(layout.log)
    if any(ptr <= log_number(n) < upto and LogEntry.parse(keeper.get(f"{layout.log}/{n}")[0]).partition == partition
           for n in names):
        return False
    pending = queued_of(keeper, layout, r, partition)
    if not pending:
        return True
    after = set()
    for n in names:
        if log_number(n) >= upto:
            try:
                after.add(keeper.get(f"{layout.log}/{n}")[0])
            except NoNodeError:
                continue  # trimmed since the listing: its queue copy counts as below
    return all(text in after for text in pending)


class ReplicaReadOnly(KeeperUnavailableError):
    """TABLE_IS_READ_ONLY: the replica refuses a write because its session expired and is not
    re-established yet. A refusal the protocol makes (the history records it), unlike a Keeper
    that did not answer in time, which is the environment's."""


def log_number(name: str) -> int:
    """log-0000000012 -> 12: a log entry's sequence number, what log_pointer counts."""
    return int(name.rsplit("-", 1)[1])


def _migration_state(keeper: Keeper, layout: Layout, partition: str) -> str | None:
    """The state of the partition's migration znode, None when there is none. Read here rather than
    through migration.read_migration: the migration builds on this module, not the other way."""
    try:
        data, _ = keeper.get(layout.migration(partition))
    except NoNodeError:
        return None
    return (json.loads(data) or {}).get("state")


def _children(keeper: Keeper, path: str) -> list[str]:
    try:
        return keeper.get_children(path)
    except NoNodeError:
        return []


def lock_block_number(keeper: Keeper, layout: Layout, partition: str, checks: list | None = None,
                      holder: str = "") -> tuple[str, int]:
    """Take the partition's next block number as ClickHouse's EphemeralLockInZooKeeper does: an
    ephemeral sequential block_numbers/{p}/block-N, in one multi with `checks` (MultiError names
    the check that failed, and then no number is taken). Returns the lock's path and N; the lock is
    released by the multi that commits what the number was for, or by release_lock."""
    numbers = layout.block_numbers(partition)
    ops = [*(checks or []), Create(f"{numbers}/block-", holder.encode(), ephemeral=True, sequential=True)]
    try:
        path = keeper.multi(ops)[-1]
    except MultiError as e:
        if e.index < len(ops) - 1 or not isinstance(e.cause, NoNodeError):
            raise
        keeper.ensure_path(numbers)  # the partition's first number: its folder does not exist yet
        path = keeper.multi(ops)[-1]
    return path, int(path.rsplit("-", 1)[1])


def release_lock(keeper: Keeper, lock: str) -> None:
    try:
        keeper.delete(lock)
    except NoNodeError:
        pass  # the session that held it ended: the ephemeral node went with it


def held_block_numbers(keeper: Keeper, layout: Layout, partition: str) -> list[int]:
    """Numbers whose lock is held now: INSERTs, mutations or drops in flight in the partition."""
    return [int(n.rsplit("-", 1)[1]) for n in _children(keeper, layout.block_numbers(partition))]


def client_mutate(keeper: Keeper, layout: Layout, commands: str, source_replica: str = "",
                  clock: Callable[[], float] = time.time) -> MutationEntry:
    """ALTER TABLE ... UPDATE / DELETE: a table-wide mutation in mutations/, with a block number
    taken in every partition that has any (data below it owes the mutation). The MUTATE_PART
    entries come later, one per part, from each partition's merge-selecting owner."""
    row_function(commands)  # refuse what cannot be applied before anything is written
    locks = [(p, *lock_block_number(keeper, layout, p, holder=source_replica))
             for p in _children(keeper, layout.all_block_numbers)]   # EphemeralLocksInAllPartitions
    m = MutationEntry(commands, tuple(sorted((p, n) for p, _, n in locks)), source_replica, int(clock()))
    keeper.multi([Create(f"{layout.mutations}/", m.format(), sequential=True), *(Delete(path) for _, path, _ in locks)])
    return m


def client_drop_partition(keeper: Keeper, layout: Layout, partition: str, source_replica: str = "",
                          clock: Callable[[], float] = time.time) -> int:
    """ALTER TABLE ... DROP PARTITION: DROP_RANGE over every block numbered so far, after the
    dropped blocks' ids are cleared from blocks/ (ClickHouse's clearBlocksInPartition), so the
    same INSERT sent again is written again. Returns the last block number dropped. A partition
    that never took a block number has nothing to drop: ClickHouse writes no entry."""
    if read_assignment(keeper, layout, partition) is None:
        raise GuardFailed("ClientDropPartition", f"partition {partition} is not assigned")
    if keeper.exists(layout.block_numbers(partition)) is None:
        raise GuardFailed("ClientDropPartition", f"partition {partition} has no data to drop")
    return _range_entry(keeper, layout, partition,
                        lambda rng: LogEntry(DROP_RANGE, new_part_name=rng, source_replica=source_replica,
                                             create_time=int(clock())), source_replica, clear_blocks=True)


def client_drop_part(rep: Replica, part_name: str, clock: Callable[[], float] = time.time) -> LogEntry:
    """ALTER TABLE ... DROP PART on `rep`, as 26.x's dropPartImpl: the part must be active on the
    replica the query reached (NO_SUCH_DATA_PART otherwise: under selective replication a replica
    that does not keep the partition cannot drop its part, the ALTER has to reach an owner); its
    block ids leave blocks/ (getClearBlocksInPartitionOps over its range), and a DROP_PART naming
    it goes into the log. ClickHouse also refuses a part a queued merge will take (the merge
    predicate's virtual parts); here the caller keeps merges out of the way."""
    part = PartName.parse(part_name)
    if part not in rep.store.names(part.partition):
        raise GuardFailed("ClientDropPart", f"{rep.name} has no active part {part_name}")
    _clear_blocks(rep.keeper, rep.layout, part.partition, part.max_block, lowest=part.min_block)
    entry = LogEntry(DROP_PART, new_part_name=part_name, source_replica=rep.name, create_time=int(clock()))
    rep.keeper.create(f"{rep.layout.log}/log-", entry.format(), sequential=True)
    return entry


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


def _range_entry(keeper: Keeper, layout: Layout, partition: str, make, source_replica: str,
                 clear_blocks: bool = False) -> int:
    """A partition-wide entry (DROP_RANGE, DETACH, CLEAR_COLUMN): take a block number, name the
    range of every block below it (at the partition's current mutation version), write the
    entry in one multi with the lock's release. `clear_blocks`: first clear the range's block
    ids from blocks/. Returns the range's last block."""
    if keeper.exists(layout.block_numbers(partition)) is None:
        raise GuardFailed("range entry", f"partition {partition} has no data")
    lock, number = lock_block_number(keeper, layout, partition, holder=source_replica)
    upto = number - 1
    if clear_blocks:
        _clear_blocks(keeper, layout, partition, upto)
    mutation = max((n for m in _mutation_entries(keeper, layout)
                    if (n := m.number_in(partition)) is not None and n <= upto), default=0)
    entry = make(drop_range_name(partition, upto, mutation))
    keeper.multi([Create(f"{layout.log}/log-", entry.format(), sequential=True), Delete(lock)])
    return upto


def client_clear_column(keeper: Keeper, layout: Layout, partition: str, column: str,
                        clock: Callable[[], float] = time.time) -> int:
    """ALTER TABLE ... CLEAR COLUMN c IN PARTITION p as 18.16 writes it: a CLEAR_COLUMN entry over
    the partition's blocks so far, with no source replica. (Today's release makes it a mutation.)"""
    return _range_entry(keeper, layout, partition,
                        lambda rng: LogEntry(CLEAR_COLUMN, new_part_name=rng, column_name=column,
                                             create_time=int(clock())), "")


def client_detach_partition(keeper: Keeper, layout: Layout, partition: str, source_replica: str = "",
                            clock: Callable[[], float] = time.time) -> int:
    """ALTER TABLE ... DETACH PARTITION: a DROP_RANGE marked detach; every keeper moves the parts
    into detached/, and the dropped blocks' ids are cleared as for DROP PARTITION."""
    return _range_entry(keeper, layout, partition,
                        lambda rng: LogEntry(DROP_RANGE, new_part_name=rng, detach=True, source_replica=source_replica,
                                             create_time=int(clock())), source_replica, clear_blocks=True)


def _clear_blocks(keeper: Keeper, layout: Layout, partition: str, upto: int | None = None, lowest: int = 0) -> None:
    """clearBlocksInPartition: the ids of the partition's blocks from `lowest` up to `upto` (all
    by default; one part's range for a DROP PART, getClearBlocksInPartitionOps)."""
    for node in keeper.get_children(layout.blocks):
        if node.startswith(f"{partition}_"):
            try:
                if upto is not None or lowest:   # the id's part, read only where a range is asked
                    held = PartName.parse(keeper.get(f"{layout.blocks}/{node}")[0].decode())
                    if (upto is not None and held.max_block > upto) or held.min_block < lowest:
                        continue
                keeper.delete(f"{layout.blocks}/{node}")
            except NoNodeError:
                continue


def client_attach_partition(rep: Replica, partition: str) -> list[str]:
    """ALTER TABLE ... ATTACH PARTITION on `rep`, as 18.16 writes it: each detached part of the
    partition comes back under a new block number, as a GET_PART with no block id (today's
    release writes ATTACH_PART instead). Returns the parts attached."""
    attached = []
    for old, rows in rep.store.detached(partition):
        lock, number = lock_block_number(rep.keeper, rep.layout, partition, holder=rep.name)
        name = rep.store.write(PartName(partition, number, number, 0), rows)
        entry = rep._entry(GET_PART, new_part_name=str(name))
        rep.keeper.multi([Create(f"{rep.layout.log}/log-", entry.format(), sequential=True),
                          Create(f"{rep.layout.parts(rep.name)}/{name}", b""), Delete(lock)])
        rep.store.drop_detached(old)
        attached.append(str(name))
    return attached


def client_replace_partition(rep: Replica, partition: str, rows: list[dict], from_table: str,
                             source_parts: tuple[str, ...] = ()) -> LogEntry:
    """ALTER TABLE t REPLACE PARTITION p FROM src on `rep`, as 18.16 writes it: a block number whose
    range (up to and including it, at the legacy top level) is dropped, a new block number for the
    part copied from src, written here, and a REPLACE_RANGE entry the other keepers follow (drop,
    then fetch the new part). The range's blocks' ids are cleared."""
    keeper, layout = rep.keeper, rep.layout
    drop_lock, drop_number = lock_block_number(keeper, layout, partition, holder=rep.name)
    part_lock, number = lock_block_number(keeper, layout, partition, holder=rep.name)
    name = rep.store.write(PartName(partition, number, number, 0), rows)
    _clear_blocks(keeper, layout, partition, drop_number)
    rng = str(PartName(partition, 0, drop_number, LEGACY_MAX_LEVEL))
    entry = rep._entry(REPLACE_RANGE, replace=ReplaceRange(rng, "default", from_table, source_parts, (str(name),),
                                                            (rep.store.checksum(name),), 0))
    keeper.multi([Create(f"{layout.log}/log-", entry.format(), sequential=True),
                  Create(f"{layout.parts(rep.name)}/{name}", b""), Delete(drop_lock), Delete(part_lock)])
    return entry
