"""Replication lag, as the spec's R2 excuses it, for a query that reads without syncing.

spec/rfc/SelectiveReplication.tla's QueryNoMissingInv does not count a row as lost when

- at ClientStartQuery, the starting replica's map does not know the row's partition and the
  replica has not pulled the row's first GET_PART yet (`~(ptr[r] < FirstIdx(i))` is false), or
- at ReplicaReadPartition, the row is in flight to the reader (`InFlightTo`): its last GET_PART
  is beyond the reader's log_pointer, or a GET/MERGE/MUTATE entry in the reader's queue brings it,
  and some replica, running or down, still registers a part holding it (`replicas/{r}/parts`):
  a row no replica has any more will never arrive, and is not excused as lag.

The driver records those rows per query (history table `query_lag`), so the history checkers
decide R2 exactly as the spec states it instead of assuming every read was synced.

A row is known by its INSERT's block id (blocks/<id>, carried by its GET_PART); a part's block
range says which GET_PARTs' blocks a MERGE or MUTATE entry brings.
"""

from __future__ import annotations

from protocol.keeper import Keeper, NoNodeError
from protocol.layout import Layout
from protocol.log_entry import GET_PART, MERGE_PARTS, MUTATE_PART, LogEntry, parsed
from protocol.parts import PartName
from protocol.replica import log_number

BRINGS = (GET_PART, MERGE_PARTS, MUTATE_PART)   # the spec's {"GET", "MERGE", "MUTATE"}


def _log(keeper: Keeper, layout: Layout) -> list[tuple[int, LogEntry]]:
    out = []
    for n in sorted(keeper.get_children(layout.log), key=log_number):
        try:
            out.append((log_number(n), parsed(keeper.get(f"{layout.log}/{n}")[0])))
        except NoNodeError:
            continue   # trimmed between the listing and the read: every live replica pulled it
    return out


def _gets(log: list[tuple[int, LogEntry]], partition: str) -> list[tuple[int, int, str]]:
    """(log number, block number, block id) of each GET_PART of the partition, in log order."""
    return [(k, e.part.min_block, e.block_id) for k, e in log
            if e.type == GET_PART and e.partition == partition and e.block_id]


def _numbers(keeper: Keeper, layout: Layout, partition: str, entries) -> dict[int, str]:
    """Block number -> block id of the partition's INSERTs: from GET_PARTs (the log's, and the
    queue's, whose entries may outlive their log entry) and from blocks/<id>, which holds the part
    name (the log is trimmed, blocks/ is kept to the dedup window)."""
    out = {}
    for n in keeper.get_children(layout.blocks):
        if n.startswith(f"{partition}_"):
            try:
                name = keeper.get(f"{layout.blocks}/{n}")[0].decode()
            except NoNodeError:
                continue
            if name:
                out[PartName.parse(name).min_block] = n
    for e in entries:
        if e.type == GET_PART and e.partition == partition and e.block_id:
            out[e.part.min_block] = e.block_id
    return out


def in_flight(keeper: Keeper, layout: Layout, reader: str, partition: str) -> set[str]:
    """The block ids of `partition` still in flight to `reader` (the spec's InFlightTo)."""
    return in_flight_of(keeper, layout, reader, [partition])[partition]


def in_flight_of(keeper: Keeper, layout: Layout, reader: str, partitions) -> dict[str, set[str]]:
    """in_flight for several partitions, the log and the reader's queue read once (a parallel-
    replicas announcement owes the lag of every partition its replica keeps)."""
    log = _log(keeper, layout)
    ptr = int(keeper.get(layout.log_pointer(reader))[0])
    queue = layout.queue(reader)
    entries = []
    for n in keeper.get_children(queue):
        try:
            entries.append(parsed(keeper.get(f"{queue}/{n}")[0]))
        except NoNodeError:
            continue
    registered = _registered(keeper, layout)
    out = {}
    for partition in partitions:
        last: dict[str, int] = {}
        for k, _, block_id in _gets(log, partition):
            last[block_id] = k
        ids = {b for b, k in last.items() if k >= ptr}           # last GET_PART not pulled yet
        queued = [e for e in entries if e.type in BRINGS and e.partition == partition]
        numbers = _numbers(keeper, layout, partition, [e for _, e in log] + queued)
        if queued:
            ids |= {b for number, b in numbers.items() if any(e.part.min_block <= number <= e.part.max_block
                                                               for e in queued)}
        # Only what some replica can still send (the spec's InFlightTo: \E r2 : HasBlock(r2, i)).
        # A block whose number is not known here keeps its excuse: nothing says it is gone.
        number_of = {b: n for n, b in numbers.items()}
        out[partition] = {b for b in ids if b not in number_of
                          or any(x.partition_id == partition and x.min_block <= number_of[b] <= x.max_block
                                 for x in registered)}
    return out


def _registered(keeper: Keeper, layout: Layout) -> list[PartName]:
    """Every part some replica registers in Keeper (replicas/{r}/parts): a replica that is down
    keeps its registrations, one dropped for good (SYSTEM DROP REPLICA) has none."""
    out = []
    for r in keeper.get_children(layout.replicas):
        try:
            names = keeper.get_children(layout.parts(r))
        except NoNodeError:
            continue
        for n in names:
            try:
                out.append(PartName.parse(n))
            except ValueError:
                continue
    return out


def not_pulled(keeper: Keeper, layout: Layout, replica: str, partitions) -> dict[str, set[str]]:
    """Per partition, the block ids whose first GET_PART `replica` has not pulled yet."""
    log = _log(keeper, layout)
    ptr = int(keeper.get(layout.log_pointer(replica))[0])
    out = {}
    for p in partitions:
        first: dict[str, int] = {}
        for k, _, block_id in _gets(log, p):
            first.setdefault(block_id, k)
        out[p] = {b for b, k in first.items() if k >= ptr}
    return out
