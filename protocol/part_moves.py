"""ClickHouse's part moves between shards (seed 001; ALTER TABLE ... MOVE PART ... TO SHARD) as
spec/part_moves/PartMoves.tla's steps, on Keeper and on parts on disk: two shards, each a
replicated table of its own with its own log, and the orchestrator that moves a part from one to
the other while Distributed SELECTs read one replica of each. spec/part_moves/README.md cites the
ClickHouse files and commits each step follows; the names are the spec's.

What each step does in Keeper, as the orchestrator's code does it:
- `move_part` (MovePart): one multi pins the part's UUID in both shards' `pinned_part_uuids`
  (versions checked) and creates the task `part_moves_shard/task-N` in SYNC_SOURCE.
- `Orchestrator.issue` (Issue): the state's entry appended to its shard's log. Today's
  orchestrator ("current", PR #29043) creates a barrier znode `task-N/log_<STATE>` holding the
  entry's log name in the same multi, and a re-run finds it; 21.8's ("v21_8") keeps which entry
  it waits for in the running thread only (`Orchestrator.crash` loses it, and a re-run issues the
  entry again: F30, F31).
- `Orchestrator.advance` (Advance): once every replica of the shard has processed the entry
  (its `log_pointer` past it), the task's state set with the version read (CAS). The sleeps
  around SOURCE_DROP are steps that wait for nothing (the model's; the fix
  `delays_wait_for_queries` makes them wait for the queries that started before).
- `Orchestrator.kill` and `rollback_step` (Kill, RollbackStep): KILL PART_MOVE_TO_SHARD before
  SOURCE_DROP; the task walks back, an attached part dropped on the destination first.
- `ShardReplica.process` (Process): the replica's next entry. SYNC_PINNED_PART_UUIDS replaces
  its local copy of the pins (kept in memory, as ClickHouse's `pinned_part_uuids` member);
  CLONE_PART_FROM_SHARD fetches the part from a source replica into `detached/`; ATTACH_PART
  attaches the detached copy whose checksum matches under the entry's name (or fetches the part
  from a destination replica that has it; with neither, it stays queued: F30); DROP_RANGE of
  one part removes that part unless another active part covers it (F28); MERGE_PARTS and
  MUTATE_PART make a part with a UUID of its own.
- `assign_merge` (AssignMerge: OPTIMIZE ... FINAL of one part; the merge predicate reads the
  pins from Keeper and refuses a pinned part) and `assign_mutation` (MutateSource: the mutation
  path does not read the pins unless `mutations_respect_pins`).
- `DistributedQuery.read_shard` (QueryReadShard): one replica's active parts with their rows;
  with deduplication it reports the UUIDs of those in its local pins, and a UUID another shard
  reported first makes the initiator re-run this shard without it, once.

Simplified, and said so: a part's UUID is kept on its replica's disk beside it (ClickHouse's
`uuid.txt`) and a merged or mutated part's is derived from its shard and name (ClickHouse
carries it in the entry as `into_uuid`/`to_uuid`); the parts a shard starts with are written
on each of its replicas directly (replicated before the run) and no part is registered in
`replicas/{r}/parts` (fetches read a peer's disk, as the reference's fetches do).
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections import Counter
from dataclasses import dataclass, field, replace

from protocol.assignment import GuardFailed
from protocol.keeper import BadVersionError, Check, Create, Keeper, NodeExistsError, SetData
from protocol.log_entry import (ATTACH_PART, CLONE_PART_FROM_SHARD, DROP_RANGE, MERGE_PARTS, MUTATE_PART,
                                SYNC_PINNED_PART_UUIDS, LogEntry)
from protocol.parts import PartName, PartStore, active_set, rows_checksum

SHARDS = ("src", "dst")
STATES = ("TODO", "SYNC_SOURCE", "SYNC_DESTINATION", "DESTINATION_FETCH", "DESTINATION_ATTACH",
          "SOURCE_DROP_PRE_DELAY", "SOURCE_DROP", "SOURCE_DROP_POST_DELAY", "REMOVE_UUID_PIN", "DONE")
ENDED = ("DONE", "CANCELLED")
# The states that issue a log entry, and to which shard.
ENTRY_SHARD = {"SYNC_SOURCE": "src", "SYNC_DESTINATION": "dst", "DESTINATION_FETCH": "dst",
               "DESTINATION_ATTACH": "dst", "SOURCE_DROP": "src"}
KILLABLE = ("SYNC_SOURCE", "SYNC_DESTINATION", "DESTINATION_FETCH", "DESTINATION_ATTACH", "SOURCE_DROP_PRE_DELAY")
VERSIONS = ("current", "v21_8")
FIXES = ("sync_waits_for_queries", "delays_wait_for_queries", "mutations_respect_pins")
_UUIDS = uuidlib.UUID("6f1c1c52-3b1e-4f5e-9a57-0b1d8f0c2a11")   # the namespace derived UUIDs are made in


def derived_uuid(shard: str, part: PartName) -> str:
    """The UUID of a part a merge or a mutation made on `shard`: the same on every replica."""
    return str(uuidlib.uuid5(_UUIDS, f"{shard}/{part}"))


def before(a: str, b: str) -> bool:
    """State a comes before state b in the task's order (the spec's Before)."""
    return STATES.index(a) < STATES.index(b)


@dataclass(frozen=True)
class Layout:
    """The znodes: one table per shard under `root`, the tasks under the source's."""
    root: str

    def shard(self, s: str) -> str:
        return f"{self.root}/{s}"

    def log(self, s: str) -> str:
        return f"{self.root}/{s}/log"

    def pins(self, s: str) -> str:
        return f"{self.root}/{s}/pinned_part_uuids"

    def log_pointer(self, s: str, r: str) -> str:
        return f"{self.root}/{s}/replicas/{r}/log_pointer"

    def replicas(self, s: str) -> str:
        return f"{self.root}/{s}/replicas"

    def block_numbers(self, s: str) -> str:
        return f"{self.root}/{s}/block_numbers"

    @property
    def tasks(self) -> str:
        return f"{self.root}/src/part_moves_shard"


def create_shards(keeper: Keeper, layout: Layout, replicas: dict[str, list[str]]) -> None:
    """Both tables' znodes and their replicas' log pointers."""
    for s in SHARDS:
        for path in (layout.log(s), layout.replicas(s), layout.block_numbers(s)):
            keeper.create(path, b"", makepath=True)
        keeper.create(layout.pins(s), json.dumps([]).encode())
        for r in replicas[s]:
            keeper.create(layout.log_pointer(s, r), b"0", makepath=True)
    keeper.create(layout.tasks, b"", makepath=True)


def read_pins(keeper: Keeper, layout: Layout, s: str) -> tuple[frozenset[str], int]:
    data, stat = keeper.get(layout.pins(s))
    return frozenset(json.loads(data)), stat.version


def log_entries(keeper: Keeper, layout: Layout, s: str) -> list[tuple[int, LogEntry]]:
    """The shard's log, in order: (index, entry)."""
    out = []
    for name in keeper.get_children(layout.log(s)):
        data, _ = keeper.get(f"{layout.log(s)}/{name}")
        out.append((int(name.split("-")[1]), LogEntry.parse(data, f"{layout.log(s)}/{name}")))
    return out


def append_entry(keeper: Keeper, layout: Layout, s: str, entry: LogEntry, checks=()) -> int:
    """One multi: the checks, then the entry appended; returns its index."""
    results = keeper.multi([*checks, Create(f"{layout.log(s)}/log-", entry.format(), sequential=True)])
    return int(results[-1].rsplit("-", 1)[1])


def processed(keeper: Keeper, layout: Layout, s: str, index: int) -> bool:
    """Every replica of shard s processed log entry `index` (tryWaitForAllReplicasToProcessLogEntry)."""
    return all(int(keeper.get(layout.log_pointer(s, r))[0]) > index
               for r in keeper.get_children(layout.replicas(s)))


def new_block(keeper: Keeper, layout: Layout, s: str) -> int:
    """A block number of shard s (allocateBlockNumber: a sequential node)."""
    path = keeper.create(f"{layout.block_numbers(s)}/block-", b"", sequential=True)
    return int(path.rsplit("-", 1)[1]) + 1000   # above the parts a shard starts with


# --- the task -----------------------------------------------------------------------------------

@dataclass
class Task:
    path: str
    version: int
    state: str
    rollback: bool
    part_name: str
    part_uuid: str
    dst_part_name: str | None

    def value(self, **changes) -> bytes:
        d = {"state": self.state, "rollback": self.rollback, "part_name": self.part_name,
             "part_uuid": self.part_uuid, "to_shard": "dst", "dst_part_name": self.dst_part_name}
        d.update(changes)
        return json.dumps(d, sort_keys=True).encode()


def read_task(keeper: Keeper, path: str) -> Task:
    data, stat = keeper.get(path)
    d = json.loads(data)
    return Task(path, stat.version, d["state"], d["rollback"], d["part_name"], d["part_uuid"], d["dst_part_name"])


def tasks(keeper: Keeper, layout: Layout) -> list[Task]:
    return [read_task(keeper, f"{layout.tasks}/{n}") for n in keeper.get_children(layout.tasks)]


def active_task(keeper: Keeper, layout: Layout) -> Task | None:
    """The first task not ended: the orchestrator runs one at a time ("technical debt", its code says)."""
    return next((t for t in tasks(keeper, layout) if t.state not in ENDED), None)


def move_part(keeper: Keeper, layout: Layout, source: "ShardReplica", part: PartName) -> str:
    """ALTER TABLE ... MOVE PART 'part' TO SHARD (movePartitionToShard, the spec's MovePart): the
    part must be active on `source` with a UUID and not pinned; one multi pins it on both shards
    and creates the task."""
    if part not in source.active():
        raise GuardFailed("MovePart", f"{part} is not an active part of {source.name}")
    u = source.uuid_of(part)
    ops, seen = [], []
    for s in SHARDS:
        pins, version = read_pins(keeper, layout, s)
        if u in pins:
            raise GuardFailed("MovePart", f"{part}'s UUID is pinned already: a move of it is in flight")
        ops.append(SetData(layout.pins(s), json.dumps(sorted(pins | {u})).encode(), version))
        seen.append(version)
    task = Task("", 0, "SYNC_SOURCE", False, str(part), u, None)
    ops.append(Create(f"{layout.tasks}/task-", task.value(), sequential=True))
    return keeper.multi(ops)[-1]


# --- the orchestrator ---------------------------------------------------------------------------

@dataclass
class Orchestrator:
    """PartMovesBetweenShardsOrchestrator on the source shard's leader. `version`: "current" or
    "v21_8"; `fixes`: the spec's Fixes it applies; `waiting`: v21_8's memory of the entry it
    issued for the task's state (a crash loses it)."""
    keeper: Keeper
    layout: Layout
    version: str = "current"
    fixes: frozenset[str] = frozenset(FIXES)
    waiting: dict[tuple[str, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.version not in VERSIONS:
            raise ValueError(f"orchestrator version must be one of {VERSIONS}, not {self.version!r}")
        unknown = set(self.fixes) - set(FIXES)
        if unknown:
            raise ValueError(f"unknown part-move fixes {sorted(unknown)}: known are {list(FIXES)}")

    def _barrier(self, t: Task) -> str:
        return f"{t.path}/log_{t.state}"

    def issued(self, t: Task) -> int | None:
        """The log index of the entry the task's state issued, as this orchestrator knows it:
        today's from the barrier (the entry's id, matched in the log as ClickHouse matches
        log_entry_id), 21.8's from its memory."""
        if self.version == "current":
            return self._barrier_index(self._barrier(t), ENTRY_SHARD.get(t.state, "dst"))
        return self.waiting.get((t.path, t.state))

    def _barrier_index(self, barrier: str, s: str) -> int | None:
        if not self.keeper.exists(barrier):
            return None
        entry_id = self.keeper.get(barrier)[0].decode()
        return next(i for i, e in log_entries(self.keeper, self.layout, s) if e.block_id == entry_id)

    def _entry(self, t: Task, source: "ShardReplica") -> tuple[str, LogEntry]:
        s = ENTRY_SHARD[t.state]
        part = PartName.parse(t.part_name)
        if t.state in ("SYNC_SOURCE", "SYNC_DESTINATION"):
            return s, LogEntry(type=SYNC_PINNED_PART_UUIDS, source_replica=source.name)
        if t.state == "DESTINATION_FETCH":
            return s, LogEntry(type=CLONE_PART_FROM_SHARD, new_part_name=t.part_name, source_replica=source.name,
                               source_shard=self.layout.shard("src"))
        if t.state == "DESTINATION_ATTACH":
            # A new block number on the destination each time: 21.8's re-run makes a second name.
            block = new_block(self.keeper, self.layout, "dst")
            name = PartName(part.partition, block, block, 0)
            return s, LogEntry(type=ATTACH_PART, new_part_name=str(name), source_replica=source.name,
                               part_checksum=source.store.checksum(part) if part in source.active() else "")
        return s, LogEntry(type=DROP_RANGE, new_part_name=t.part_name, source_replica=source.name)

    def issue(self, source: "ShardReplica") -> int:
        """Issue: the state's entry, once per state (current: with its barrier, in one multi)."""
        t = active_task(self.keeper, self.layout)
        if t is None or t.rollback or t.state not in ENTRY_SHARD or self.issued(t) is not None:
            raise GuardFailed("Issue", "no task state waiting for its entry")
        if self.drop_skips_wait(t, source):
            raise GuardFailed("Issue", "21.8's dropPart finds the part gone here and issues nothing")
        s, entry = self._entry(t, source)
        # The entry's id (ClickHouse's log_entry_id, the barrier's path; carried here in block_id,
        # which these entry types do not otherwise use): the task, its state, and the attempt.
        entry = replace(entry, block_id=f"{t.path.rsplit('/', 1)[1]}_{t.state}_{len(self.waiting)}_{t.version}")
        checks = [Check(t.path, t.version)]
        if self.version == "current":
            checks.append(Create(self._barrier(t), entry.block_id.encode()))
        index = append_entry(self.keeper, self.layout, s, entry, checks)
        if self.version == "v21_8":
            self.waiting[(t.path, t.state)] = index
        if t.state == "DESTINATION_ATTACH":
            # The task records the attached part's name (dst_part_name), for the rollback's drop.
            self.keeper.set(t.path, t.value(dst_part_name=entry.new_part_name), t.version)
        return index

    def drop_skips_wait(self, t: Task, source: "ShardReplica") -> bool:
        """21.8's SOURCE_DROP re-run: dropPart returns false when `source`, the replica running
        it, no longer has the part committed or has its DROP_RANGE queued, and the orchestrator
        moves on without waiting (the spec's DropSkipsWait)."""
        if self.version != "v21_8" or t.state != "SOURCE_DROP" or self.issued(t) is not None:
            return False
        drops = [i for i, e in log_entries(self.keeper, self.layout, "src")
                 if e.type == DROP_RANGE and e.new_part_name == t.part_name]
        return bool(drops) and source.log_pointer() > drops[0]

    def advance(self, source: "ShardReplica", running: list["DistributedQuery"] = ()) -> str:
        """Advance: the task's next state once its entry is processed by every replica of the
        shard (or, with the fixes, once the queries the state waits for have ended)."""
        t = active_task(self.keeper, self.layout)
        if t is None or t.rollback or t.state == "TODO":
            raise GuardFailed("Advance", "no task to advance")
        if t.state in ENTRY_SHARD and not self.drop_skips_wait(t, source):
            index = self.issued(t)
            if index is None or not processed(self.keeper, self.layout, ENTRY_SHARD[t.state], index):
                raise GuardFailed("Advance", f"{t.state}'s entry is not processed by every replica yet")
        waits = {"SYNC_DESTINATION": ("sync_waits_for_queries", "DESTINATION_FETCH"),
                 "SOURCE_DROP_PRE_DELAY": ("delays_wait_for_queries", "SOURCE_DROP_PRE_DELAY"),
                 "SOURCE_DROP_POST_DELAY": ("delays_wait_for_queries", "SOURCE_DROP_POST_DELAY")}
        if t.state in waits and waits[t.state][0] in self.fixes:
            if any(q.running and (q.started is None or before(q.started, waits[t.state][1])) for q in running):
                raise GuardFailed("Advance", f"{t.state} waits for the queries that started before it")
        nxt = STATES[STATES.index(t.state) + 1]
        if t.state == "REMOVE_UUID_PIN":
            self._remove_pins(t)
        self.keeper.set(t.path, t.value(state=nxt), t.version)
        return nxt

    def _remove_pins(self, t: Task) -> None:
        ops = []
        for s in SHARDS:
            pins, version = read_pins(self.keeper, self.layout, s)
            ops.append(SetData(self.layout.pins(s), json.dumps(sorted(pins - {t.part_uuid})).encode(), version))
        self.keeper.multi(ops)

    def kill(self) -> None:
        """KILL PART_MOVE_TO_SHARD: refused from SOURCE_DROP on, and by 21.8 (no rollback there)."""
        t = active_task(self.keeper, self.layout)
        if self.version != "current" or t is None or t.rollback or t.state not in KILLABLE:
            raise GuardFailed("Kill", "no task that may still be rolled back")
        self.keeper.set(t.path, t.value(rollback=True), t.version)

    def rollback_step(self, source: "ShardReplica") -> str:
        """RollbackStep: one state back; from DESTINATION_ATTACH whose ATTACH_PART went out, a
        DROP_RANGE of the attached part on the destination first, waited for; from TODO, the pins
        removed and CANCELLED."""
        t = active_task(self.keeper, self.layout)
        if t is None or not t.rollback:
            raise GuardFailed("RollbackStep", "no task rolling back")
        if t.state == "DESTINATION_ATTACH" and self.issued(t) is not None:
            barrier = f"{t.path}/log_DESTINATION_ATTACH_rollback"
            index = self._barrier_index(barrier, "dst")
            if index is None:
                drop = LogEntry(type=DROP_RANGE, new_part_name=t.dst_part_name, source_replica=source.name,
                                block_id=f"{t.path.rsplit('/', 1)[1]}_rollback_{t.version}")
                append_entry(self.keeper, self.layout, "dst", drop,
                             [Check(t.path, t.version), Create(barrier, drop.block_id.encode())])
                return t.state
            if not processed(self.keeper, self.layout, "dst", index):
                raise GuardFailed("RollbackStep", "the attached part's drop is not processed everywhere yet")
        if t.state == "TODO":
            self._remove_pins(t)
        prev = "CANCELLED" if t.state == "TODO" else STATES[STATES.index(t.state) - 1]
        self.keeper.set(t.path, t.value(state=prev), t.version)
        return prev

    def crash(self) -> None:
        """The orchestrating replica crashed (or lost its session, with lock_holder); another
        leader takes the task over from Keeper: 21.8 forgets the entry it waited for."""
        self.waiting.clear()


# --- the replicas -------------------------------------------------------------------------------

class CannotExecute(Exception):
    """The replica's next entry cannot be carried out now (ClickHouse retries it, postponed)."""


@dataclass
class ShardReplica:
    name: str
    shard: str
    keeper: Keeper
    layout: Layout
    store: PartStore
    pins: frozenset[str] = frozenset()   # its local copy of pinned_part_uuids: memory only

    def uuids(self) -> dict[str, str]:
        return self.store.load_state().get("part_uuids", {})

    def uuid_of(self, part: PartName) -> str:
        return self.uuids()[str(part)]

    def _set_uuid(self, part: PartName, u: str | None) -> None:
        state = self.store.load_state()
        ids = state.setdefault("part_uuids", {})
        if u is None:
            ids.pop(str(part), None)
        else:
            ids[str(part)] = u
        self.store.save_state(state)

    def write_part(self, part: PartName, rows: list[dict], u: str) -> None:
        """A part the shard starts with (written on each of its replicas: replicated before the run)."""
        self.store.write(part, rows)
        self._set_uuid(part, u)

    def active(self) -> list[PartName]:
        return active_set(self.store.names())

    def log_pointer(self) -> int:
        return int(self.keeper.get(self.layout.log_pointer(self.shard, self.name))[0])

    def pending(self) -> list[tuple[int, LogEntry]]:
        ptr = self.log_pointer()
        return [(i, e) for i, e in log_entries(self.keeper, self.layout, self.shard) if i >= ptr]

    def process(self, peers: dict[str, "ShardReplica"]) -> LogEntry:
        """Process: carry out the next entry of its shard's log and move its log_pointer past it."""
        todo = self.pending()
        if not todo:
            raise GuardFailed("Process", f"{self.name} has processed its shard's whole log")
        index, e = todo[0]
        if e.type == SYNC_PINNED_PART_UUIDS:
            self.pins = read_pins(self.keeper, self.layout, self.shard)[0]
        elif e.type == CLONE_PART_FROM_SHARD:
            self._clone(e, peers)
        elif e.type == ATTACH_PART:
            self._attach(e, peers)
        elif e.type == DROP_RANGE:
            self._drop_part(PartName.parse(e.new_part_name))
        elif e.type == MERGE_PARTS:
            self._merge_single(PartName.parse(e.source_parts[0]), PartName.parse(e.new_part_name))
        elif e.type == MUTATE_PART:
            self._mutate(PartName.parse(e.source_parts[0]), PartName.parse(e.new_part_name))
        else:
            raise CannotExecute(f"{self.name}: no part-move handling for {e.type}")
        self.keeper.set(self.layout.log_pointer(self.shard, self.name), str(index + 1).encode())
        return e

    def _clone(self, e: LogEntry, peers) -> None:
        part = PartName.parse(e.new_part_name)
        sources = [p for p in peers.values() if p.shard == "src" and part in p.active()]
        if not sources:
            raise CannotExecute(f"{self.name}: no source replica has {part} to clone")
        src = sources[0]
        # Into detached/, overwriting a copy there (executeClonePartFromShard; PR #114094).
        self.store.drop_detached(part)
        self.store.write(part, src.store.read(part))
        self.store.detach(part)
        state = self.store.load_state()
        state.setdefault("detached_uuids", {})[str(part)] = src.uuid_of(part)
        self.store.save_state(state)

    def _attach(self, e: LogEntry, peers) -> None:
        want = PartName.parse(e.new_part_name)
        if want in self.active():
            return
        state = self.store.load_state()
        detached_uuids = state.get("detached_uuids", {})
        for name, rows in self.store.detached(want.partition):
            if not e.part_checksum or rows_checksum(rows) == e.part_checksum:
                self.store.write(want, rows)
                self._set_uuid(want, detached_uuids.get(str(name)))
                self.store.drop_detached(name)
                return
        holders = [p for p in peers.values() if p.shard == self.shard and want in p.active()]
        if not holders:
            raise CannotExecute(f"{self.name}: no detached copy of {e.new_part_name} and no active replica has it")
        self.store.fetch_from(holders[0].store, want)
        self._set_uuid(want, holders[0].uuid_of(want))

    def _drop_part(self, part: PartName) -> None:
        """DROP_RANGE of one part: that part removed, unless an active part covers it (a mutation
        of it: "Skipping drop range for part ... because covering part ... already exists")."""
        active = self.active()
        if part in active:
            self.store.remove(part)
            self._set_uuid(part, None)

    def _merge_single(self, part: PartName, new: PartName) -> None:
        if part not in self.active():
            return   # dropped or merged already
        rows = self.store.read(part)
        self.store.write(new, rows)
        self._set_uuid(new, derived_uuid(self.shard, new))
        self.store.remove(part)
        self._set_uuid(part, None)

    def _mutate(self, part: PartName, new: PartName) -> None:
        if part not in self.active():
            return
        rows = [{**r, "value": r.get("value", 0) + 1} for r in self.store.read(part)]
        self.store.write(new, rows)
        self._set_uuid(new, derived_uuid(self.shard, new))
        self.store.remove(part)
        self._set_uuid(part, None)


def assign_merge(keeper: Keeper, layout: Layout, rep: ShardReplica, part: PartName) -> LogEntry:
    """AssignMerge: OPTIMIZE ... FINAL of one part of rep's shard (canMergeSinglePart), refused
    for a part whose UUID is pinned in Keeper (the merge predicate reads the pins after pulling)."""
    if part not in rep.active():
        raise GuardFailed("AssignMerge", f"{part} is not active on {rep.name}")
    if rep.uuid_of(part) in read_pins(keeper, layout, rep.shard)[0]:
        raise GuardFailed("AssignMerge", f"{part} is pinned: a move of it is in flight")
    new = PartName(part.partition, part.min_block, part.max_block, part.level + 1, part.mutation)
    entry = LogEntry(type=MERGE_PARTS, source_parts=(str(part),), new_part_name=str(new), source_replica=rep.name)
    append_entry(keeper, layout, rep.shard, entry)
    return entry


def assign_mutation(keeper: Keeper, layout: Layout, rep: ShardReplica, part: PartName,
                    respect_pins: bool) -> LogEntry:
    """MutateSource: ALTER TABLE UPDATE's MUTATE_PART of one part. The mutation path reads no pins
    (F28) unless `respect_pins` (the fix mutations_respect_pins)."""
    if part not in rep.active():
        raise GuardFailed("MutateSource", f"{part} is not active on {rep.name}")
    if respect_pins and rep.uuid_of(part) in read_pins(keeper, layout, rep.shard)[0]:
        raise GuardFailed("MutateSource", f"{part} is pinned: the mutation waits for the move")
    version = new_block(keeper, layout, rep.shard)
    new = PartName(part.partition, part.min_block, part.max_block, part.level, version)
    entry = LogEntry(type=MUTATE_PART, source_parts=(str(part),), new_part_name=str(new), source_replica=rep.name)
    append_entry(keeper, layout, rep.shard, entry)
    return entry


# --- a Distributed SELECT -----------------------------------------------------------------------

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
        ids = {p: rep.uuid_of(p) for p in parts}
        reported = {ids[p] for p in parts if ids[p] in rep.pins} if self.dedup else set()
        conflict = reported & self.reported
        if conflict and self.resent:
            self.status = "failed"
            return
        kept = [p for p in parts if ids[p] not in conflict]
        for p in kept:
            self.rows.setdefault(p.partition, []).extend(rep.store.read(p))
        self.reported |= reported - conflict
        self.resent = self.resent or bool(conflict)
        self.read[rep.shard] = rep.name
        if len(self.read) == len(SHARDS):
            self.status = "complete"

    def duplicated(self) -> Counter:
        return Counter(r["row_id"] for rows in self.rows.values() for r in rows)


__all__ = ["SHARDS", "STATES", "VERSIONS", "FIXES", "Layout", "Task", "Orchestrator", "ShardReplica",
           "DistributedQuery", "CannotExecute", "create_shards", "move_part", "assign_merge", "assign_mutation",
           "active_task", "tasks", "read_pins", "log_entries", "processed", "derived_uuid", "BadVersionError",
           "NodeExistsError"]
