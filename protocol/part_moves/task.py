"""The move's task znode (`part_moves_shard/task-N`) and ALTER TABLE ... MOVE PART ... TO SHARD,
which creates it (the spec's MovePart)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.assignment import GuardFailed
from protocol.keeper import Create, Keeper, SetData
from protocol.part_moves.layout import Layout, read_pins
from protocol.part_moves.states import ENDED, SHARDS
from protocol.parts import PartName

if TYPE_CHECKING:
    from protocol.part_moves.shard_replica import ShardReplica


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
    ops = []
    for s in SHARDS:
        pins, version = read_pins(keeper, layout, s)
        if u in pins:
            raise GuardFailed("MovePart", f"{part}'s UUID is pinned already: a move of it is in flight")
        ops.append(SetData(layout.pins(s), json.dumps(sorted(pins | {u})).encode(), version))
    task = Task("", 0, "SYNC_SOURCE", False, str(part), u, None)
    ops.append(Create(f"{layout.tasks}/task-", task.value(), sequential=True))
    return keeper.multi(ops)[-1]
