"""The znodes of a part move's two shards, and the reads and writes of their logs and pins that
every step shares: one table per shard under the root, the tasks under the source's."""

from __future__ import annotations

import json
from dataclasses import dataclass

from protocol.keeper import Create, Keeper
from protocol.log_entry import LogEntry
from protocol.part_moves.states import SHARDS


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
