"""The znodes of a part move's two shards, and the reads and writes of their logs and pins that
every step shares. Each shard is a replicated table of its own (protocol/layout.py's layout under
`root/<shard>`); the move adds the table's `pinned_part_uuids` and, under the source's, the tasks."""

from __future__ import annotations

import json
from dataclasses import dataclass

from protocol.keeper import Create, Keeper
from protocol.layout import Layout as TableLayout
from protocol.log_entry import BadLogEntry, LogEntry, parsed
from protocol.part_moves.states import SHARDS
from protocol.replica import log_number


@dataclass(frozen=True)
class Layout:
    """One table per shard under `root`; the tasks under the source's."""
    root: str

    def table(self, s: str) -> TableLayout:
        return TableLayout(f"{self.root}/{s}")

    def pins(self, s: str) -> str:
        return f"{self.table(s).root}/pinned_part_uuids"

    @property
    def tasks(self) -> str:
        return f"{self.table('src').root}/part_moves_shard"


def create_shards(keeper: Keeper, layout: Layout, replicas: dict[str, list[str]]) -> None:
    """Both tables' znodes and their replicas' log pointers."""
    for s in SHARDS:
        table = layout.table(s)
        for path in (table.log, table.replicas, table.all_block_numbers):
            keeper.create(path, b"", makepath=True)
        keeper.create(layout.pins(s), json.dumps([]).encode())
        for r in replicas[s]:
            keeper.create(table.log_pointer(r), b"0", makepath=True)
    keeper.create(layout.tasks, b"", makepath=True)


def read_pins(keeper: Keeper, layout: Layout, s: str) -> tuple[frozenset[str], int]:
    data, stat = keeper.get(layout.pins(s))
    return frozenset(json.loads(data)), stat.version


def log_entries(keeper: Keeper, layout: Layout, s: str) -> list[tuple[int, LogEntry]]:
    """The shard's log, in order: (index, entry), each text parsed once (log_entry.parsed)."""
    out = []
    log = layout.table(s).log
    for name in keeper.get_children(log):
        try:
            out.append((log_number(name), parsed(keeper.get(f"{log}/{name}")[0])))
        except BadLogEntry as e:
            raise BadLogEntry(f"{log}/{name}: {e}") from None
    return out


def append_entry(keeper: Keeper, layout: Layout, s: str, entry: LogEntry, checks=()) -> int:
    """One multi: the checks, then the entry appended; returns its index."""
    results = keeper.multi([*checks, Create(f"{layout.table(s).log}/log-", entry.format(), sequential=True)])
    return log_number(results[-1])


def processed(keeper: Keeper, layout: Layout, s: str, index: int) -> bool:
    """Every replica of shard s processed log entry `index` (tryWaitForAllReplicasToProcessLogEntry)."""
    table = layout.table(s)
    return all(int(keeper.get(table.log_pointer(r))[0]) > index for r in keeper.get_children(table.replicas))


def new_block(keeper: Keeper, layout: Layout, s: str, partition: str) -> int:
    """A block number of the partition on shard s (allocateBlockNumber: a sequential node under
    block_numbers/<partition>), above the blocks the shard's parts start with."""
    path = keeper.create(f"{layout.table(s).block_numbers(partition)}/block-", b"", sequential=True, makepath=True)
    return log_number(path) + 1000
