"""The PR's INSERT path (PR102244.md M4): the sink splits the block by partition; for each, the
INSERT-path cache (Keeper when cold or expired) or `ensurePartitionAssignment`; an assigned
replica writes locally (the base WriteInsert: the commit multi checks the assignment version,
the PR's CAS check), any other forwards the sub-block to an owner. On a CAS mismatch the sink
re-reads the assignment and re-routes; a retry keeps the sub-block's hash, so `blocks/` dedups
it across re-routes (O7, assumed).
"""

from __future__ import annotations

import random
from typing import Callable

from ..assignment import GuardFailed
from ..insert import replica_forward_insert, sub_block_hash
from ..replica import InsertRejected
from ..table import Table
from .assignment import ensure_partition_assignment
from .replica import PRReplica

REROUTES = 3   # CAS mismatches the sink re-routes before it gives up (the client may retry)


def write_insert(receiver: PRReplica, table: Table, partition: str, rows: list[dict],
                 replicas: dict[str, PRReplica], rng: random.Random,
                 faults: Callable[[str, str], None] | None = None) -> str:
    """One sub-block: route it by the INSERT-path cache and commit it on an owner; returns the
    part name or "deduplicated"."""
    for attempt in range(REROUTES):
        if receiver.insert_view(partition) is None:
            receiver.learn(partition, ensure_partition_assignment(receiver.keeper, receiver.layout, partition,
                                                                  table.replication_factor))
        writer = receiver
        if receiver.name not in receiver.cache[partition].owners:
            writer = replica_forward_insert(receiver, partition, replicas, rng)  # an owner, never :cloning
            writer.insert_view(partition)
        if faults:
            faults("before_write", partition)
        try:
            written = writer.replica_write_insert(partition, rows, sub_block_hash(partition, rows))
        except (InsertRejected, GuardFailed):
            # "assignment changed mid-insert": both caches re-read, the block re-routed
            receiver.replica_refresh_cache(partition)
            writer.replica_refresh_cache(partition)
            if attempt == REROUTES - 1:
                raise
            continue
        if faults:
            faults("after_write", partition)
        return written
    raise InsertRejected(f"{partition}: no owner took the block")


def route_insert(receiver: PRReplica, table: Table, rows: list[dict], replicas: dict[str, PRReplica],
                 rng: random.Random | None = None, faults: Callable[[str, str], None] | None = None,
                 out: dict[str, str] | None = None) -> dict[str, str]:
    """The sink: every sub-block of the block, as the base route_insert reports them."""
    rng = rng or random.Random(0)
    out = {} if out is None else out
    for partition, sub in sorted(table.split_by_partition(rows).items()):
        written = write_insert(receiver, table, partition, sub, replicas, rng, faults)
        out[partition] = written
    return out
