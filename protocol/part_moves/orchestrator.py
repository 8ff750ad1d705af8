"""PartMovesBetweenShardsOrchestrator: the task's steps (Issue, Advance, Kill, RollbackStep,
OrchestratorCrash), as today's code runs them (a barrier znode per state's entry) or 21.8's (none)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from protocol.assignment import GuardFailed
from protocol.keeper import Check, Create, Keeper, SetData
from protocol.log_entry import ATTACH_PART, CLONE_PART_FROM_SHARD, DROP_PART, SYNC_PINNED_PART_UUIDS, LogEntry
from protocol.part_moves.layout import Layout, append_entry, log_entries, new_block, processed, read_pins
from protocol.part_moves.states import ENTRY_SHARD, FIXES, KILLABLE, SHARDS, STATES, VERSIONS, before
from protocol.part_moves.task import Task, active_task
from protocol.parts import PartName

if TYPE_CHECKING:
    from protocol.part_moves.query import DistributedQuery
    from protocol.part_moves.shard_replica import ShardReplica


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
        found = self._issued(t)
        return None if found is None else found[0]

    def _issued(self, t: Task) -> tuple[int, LogEntry] | None:
        """The state's entry and its index, from one read of the shard's log (or none yet)."""
        s = ENTRY_SHARD.get(t.state, "dst")
        if self.version == "current":
            return self._barrier_entry(self._barrier(t), s)
        index = self.waiting.get((t.path, t.state))
        return None if index is None else (index, dict(log_entries(self.keeper, self.layout, s))[index])

    def _barrier_entry(self, barrier: str, s: str) -> tuple[int, LogEntry] | None:
        if not self.keeper.exists(barrier):
            return None
        entry_id = self.keeper.get(barrier)[0].decode()
        return next((i, e) for i, e in log_entries(self.keeper, self.layout, s) if e.block_id == entry_id)

    def _entry(self, t: Task, source: "ShardReplica") -> tuple[str, LogEntry]:
        s = ENTRY_SHARD[t.state]
        part = PartName.parse(t.part_name)
        if t.state in ("SYNC_SOURCE", "SYNC_DESTINATION"):
            return s, LogEntry(type=SYNC_PINNED_PART_UUIDS, source_replica=source.name)
        if t.state == "DESTINATION_FETCH":
            return s, LogEntry(type=CLONE_PART_FROM_SHARD, new_part_name=t.part_name, source_replica=source.name,
                               source_shard=self.layout.table("src").root)
        if t.state == "DESTINATION_ATTACH":
            # The checksum of the running replica's active part containing the moving part's name
            # (getActiveContainingPart): a mutation of it, if the source mutated it since the clone
            # fetched it, whose checksum no detached copy has (F28). None such: the step throws.
            containing = [x for x in source.active() if x.covers(part)]
            if not containing:
                raise GuardFailed("Issue", f"{source.name} has no active part containing {part}")
            # A new block number on the destination each time: 21.8's re-run makes a second name.
            block = new_block(self.keeper, self.layout, "dst", part.partition)
            name = PartName(part.partition, block, block, 0)
            return s, LogEntry(type=ATTACH_PART, new_part_name=str(name), source_replica=source.name,
                               part_checksum=source.store.checksum(containing[0]))
        return s, LogEntry(type=DROP_PART, new_part_name=t.part_name, source_replica=source.name)

    def issue(self, source: "ShardReplica") -> int:
        """Issue: the state's entry, once per state (current: with its barrier, in one multi)."""
        t = active_task(self.keeper, self.layout)
        if t is None or t.rollback or t.state not in ENTRY_SHARD or self.issued(t) is not None:
            raise GuardFailed("Issue", "no task state waiting for its entry")
        if self.drop_skips_wait(t, source):
            raise GuardFailed("Issue", "21.8's dropPart finds the part gone here and issues nothing")
        s, entry = self._entry(t, source)
        # The entry's id (ClickHouse's log_entry_id, the barrier's path; carried here in block_id,
        # which these entry types do not otherwise use): the task, its state, and the log's length.
        entry_id = f"{t.path.rsplit('/', 1)[1]}_{t.state}_{len(self.keeper.get_children(self.layout.table(s).log))}"
        entry = replace(entry, block_id=entry_id)
        checks = [Check(t.path, t.version)]
        if self.version == "current":
            checks.append(Create(self._barrier(t), entry.block_id.encode()))
        index = append_entry(self.keeper, self.layout, s, entry, checks)
        if self.version == "v21_8":
            self.waiting[(t.path, t.state)] = index
        return index

    def drop_skips_wait(self, t: Task, source: "ShardReplica") -> bool:
        """21.8's SOURCE_DROP re-run: dropPart returns false when `source`, the replica running
        it, no longer has the part committed or has its DROP_PART queued, and the orchestrator
        moves on without waiting (the spec's DropSkipsWait)."""
        if self.version != "v21_8" or t.state != "SOURCE_DROP" or self.issued(t) is not None:
            return False
        drops = [i for i, e in log_entries(self.keeper, self.layout, "src")
                 if e.type == DROP_PART and e.new_part_name == t.part_name]
        return bool(drops) and source.log_pointer() > drops[0]

    def advance(self, source: "ShardReplica", running: list["DistributedQuery"] = ()) -> str:
        """Advance: the task's next state once its entry is processed by every replica of the
        shard (or, with the fixes, once the queries the state waits for have ended)."""
        t = active_task(self.keeper, self.layout)
        if t is None or t.rollback or t.state == "TODO":
            raise GuardFailed("Advance", "no task to advance")
        found = self._issued(t) if t.state in ENTRY_SHARD else None
        if t.state in ENTRY_SHARD and not self.drop_skips_wait(t, source):
            if found is None or not processed(self.keeper, self.layout, ENTRY_SHARD[t.state], found[0]):
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
        changes = {"state": nxt}
        if t.state == "DESTINATION_ATTACH":
            changes["dst_part_name"] = found[1].new_part_name   # with the state, as the code does
        self.keeper.set(t.path, t.value(**changes), t.version)
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
        DROP_PART of the attached part on the destination first, waited for; from TODO, the pins
        removed and CANCELLED."""
        t = active_task(self.keeper, self.layout)
        if t is None or not t.rollback:
            raise GuardFailed("RollbackStep", "no task rolling back")
        attach = self._issued(t) if t.state == "DESTINATION_ATTACH" else None
        if attach is not None:
            barrier = f"{t.path}/log_DESTINATION_ATTACH_rollback"
            dropped = self._barrier_entry(barrier, "dst")
            if dropped is None:
                drop = LogEntry(type=DROP_PART, new_part_name=attach[1].new_part_name,
                                source_replica=source.name,
                                block_id=f"{t.path.rsplit('/', 1)[1]}_rollback_{t.version}")
                append_entry(self.keeper, self.layout, "dst", drop,
                             [Check(t.path, t.version), Create(barrier, drop.block_id.encode())])
                return t.state
            if not processed(self.keeper, self.layout, "dst", dropped[0]):
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
