"""The PR's INSERT path (PR102244.md M4): the sink splits the block by partition; for each, the
INSERT-path cache (Keeper when cold or expired) or `ensurePartitionAssignment`; an assigned
replica writes locally (the base WriteInsert: the commit multi checks the assignment version,
the PR's CAS check), any other forwards the sub-block to an owner. On a CAS mismatch the sink
re-reads the assignment and re-routes. A forwarded send whose reply is lost (the connection
breaks after the owner wrote) has an unknown outcome: the sink sends it again, re-routed. The
retry keeps the sub-block's hash, so `blocks/` dedups it across re-routes (O7, assumed); as
written under the other reading (`retry_new_block_id`) it carries a new block id, and an owner
that committed the first send commits the rows again (PR102244Whole.tla's NoDuplicateRowsInv).
"""

from __future__ import annotations

import hashlib
import random
from typing import Callable

from protocol.assignment import GuardFailed
from protocol.insert import InsertOutcomeUnknown, replica_forward_insert, sub_block_hash
from protocol.pr102244.assignment import ensure_partition_assignment
from protocol.pr102244.replica import PRReplica
from protocol.replica import InsertRejected
from protocol.table import Table

REROUTES = 3   # sends (CAS mismatches re-routed, lost replies retried) before the sink gives up


def block_id_of_send(partition: str, rows: list[dict], retry: int, bugs=frozenset()) -> str:
    """The block id a send carries: the sub-block's hash, whatever the retry (O7); as written
    under `retry_new_block_id` a retry of a send whose outcome is unknown carries a new one."""
    h = sub_block_hash(partition, rows)
    if retry and "retry_new_block_id" in bugs:
        return hashlib.sha256(f"{h}/retry-{retry}".encode()).hexdigest()[:32]
    return h


def write_insert(receiver: PRReplica, table: Table, partition: str, rows: list[dict],
                 replicas: dict[str, PRReplica], rng: random.Random,
                 faults: Callable[[str, str], None] | None = None, patch: str = "") -> str:
    """One sub-block: route it by the INSERT-path cache and commit it on an owner; returns the
    part name or "deduplicated". `patch`: a lightweight UPDATE's patch part (its hash)."""
    retry = 0   # sends of this sub-block whose outcome is unknown (their replies were lost)
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
            written = writer.replica_write_insert(partition, rows,
                                                  block_id_of_send(partition, rows, retry, receiver.bugs), patch=patch)
        except (InsertRejected, GuardFailed):
            # "assignment changed mid-insert": both caches re-read, the block re-routed
            receiver.replica_refresh_cache(partition)
            writer.replica_refresh_cache(partition)
            if attempt == REROUTES - 1:
                raise
            continue
        if faults:
            try:
                faults("after_write", partition)
            except InsertOutcomeUnknown:
                if writer is receiver or attempt == REROUTES - 1:
                    raise   # the client's own connection: the client retries (the base protocol)
                retry += 1   # the forwarded send's reply was lost: the sink sends it again
                receiver.replica_refresh_cache(partition)
                continue
        return written
    raise InsertRejected(f"{partition}: no owner took the block")


def route_insert(receiver: PRReplica, table: Table, rows: list[dict], replicas: dict[str, PRReplica],
                 rng: random.Random | None = None, faults: Callable[[str, str], None] | None = None,
                 out: dict[str, str] | None = None, patch: str = "") -> dict[str, str]:
    """The sink: every sub-block of the block, as the base route_insert reports them. `patch`:
    the block is a lightweight UPDATE's, each sub-block a patch part of its partition."""
    rng = rng or random.Random(0)
    out = {} if out is None else out
    for partition, sub in sorted(table.split_by_partition(rows).items()):
        written = write_insert(receiver, table, partition, sub, replicas, rng, faults, patch)
        out[partition] = written
    return out
