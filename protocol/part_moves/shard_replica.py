"""A replica of either shard: the entries a part move puts in its log carried out on its disk
(the spec's Process), and the merges and mutations a shard assigns (AssignMerge, MutateSource)."""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass

from protocol.assignment import GuardFailed
from protocol.keeper import Keeper
from protocol.log_entry import (ATTACH_PART, CLONE_PART_FROM_SHARD, DROP_PART, MERGE_PARTS, MUTATE_PART,
                                SYNC_PINNED_PART_UUIDS, LogEntry)
from protocol.part_moves.layout import Layout, append_entry, log_entries, new_block, read_pins
from protocol.parts import PartName, PartStore, active_set, rows_checksum

_UUIDS = uuidlib.UUID("6f1c1c52-3b1e-4f5e-9a57-0b1d8f0c2a11")   # the namespace derived UUIDs are made in


def derived_uuid(shard: str, part: PartName) -> str:
    """The UUID of a part a merge or a mutation made on `shard`: the same on every replica."""
    return str(uuidlib.uuid5(_UUIDS, f"{shard}/{part}"))


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

    def _set_uuids(self, **changes: str | None) -> None:
        """part name -> its UUID (None: the part is gone), in one write of the replica's state."""
        state = self.store.load_state()
        ids = state.setdefault("part_uuids", {})
        for name, u in changes.items():
            if u is None:
                ids.pop(name, None)
            else:
                ids[name] = u
        self.store.save_state(state)

    def write_part(self, part: PartName, rows: list[dict], u: str) -> None:
        """A part the shard starts with (written on each of its replicas: replicated before the run)."""
        self.store.write(part, rows)
        self._set_uuids(**{str(part): u})

    def active(self) -> list[PartName]:
        return active_set(self.store.names())

    def log_pointer(self) -> int:
        return int(self.keeper.get(self.layout.table(self.shard).log_pointer(self.name))[0])

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
        elif e.type == DROP_PART:
            self._drop_part(PartName.parse(e.new_part_name))
        elif e.type == MERGE_PARTS:
            self._merge_single(PartName.parse(e.source_parts[0]), PartName.parse(e.new_part_name))
        elif e.type == MUTATE_PART:
            self._mutate(PartName.parse(e.source_parts[0]), PartName.parse(e.new_part_name))
        else:
            raise CannotExecute(f"{self.name}: no part-move handling for {e.type}")
        self.keeper.set(self.layout.table(self.shard).log_pointer(self.name), str(index + 1).encode())
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
            if rows_checksum(rows) == e.part_checksum:
                self.store.write(want, rows)
                self._set_uuids(**{str(want): detached_uuids.get(str(name))})
                self.store.drop_detached(name)
                return
        holders = [p for p in peers.values() if p.shard == self.shard and want in p.active()]
        if not holders:
            raise CannotExecute(f"{self.name}: no detached copy of {e.new_part_name} and no active replica has it")
        self.store.fetch_from(holders[0].store, want)
        self._set_uuids(**{str(want): holders[0].uuid_of(want)})

    def _drop_part(self, part: PartName) -> None:
        """DROP_PART: that part removed, unless an active part covers it (a mutation
        of it: "Skipping drop range for part ... because covering part ... already exists")."""
        if part in self.active():
            self.store.remove(part)
            self._set_uuids(**{str(part): None})

    def _merge_single(self, part: PartName, new: PartName) -> None:
        """OPTIMIZE ... FINAL of one part: its rows as a part one level up (PartStore.merge takes
        two or more), under a UUID of its own."""
        if part not in self.active():
            return   # dropped or merged already
        self.store.write(new, self.store.read(part))
        self.store.remove(part)
        self._set_uuids(**{str(part): None, str(new): derived_uuid(self.shard, new)})

    def _mutate(self, part: PartName, new: PartName) -> None:
        """MUTATE_PART (the UPDATE the race runs: value + 1), under a UUID of its own."""
        if part not in self.active():
            return
        self.store.mutate(part, new.mutation, lambda r: {**r, "value": r.get("value", 0) + 1})
        self._set_uuids(**{str(part): None, str(new): derived_uuid(self.shard, new)})


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
    version = new_block(keeper, layout, rep.shard, part.partition)
    new = PartName(part.partition, part.min_block, part.max_block, part.level, version)
    entry = LogEntry(type=MUTATE_PART, source_parts=(str(part),), new_part_name=str(new), source_replica=rep.name)
    append_entry(keeper, layout, rep.shard, entry)
    return entry
