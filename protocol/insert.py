"""INSERT routing (RFC phase 1e), step for step with the spec: ClientSendInsert,
ReplicaAllocate, ReplicaForwardInsert, ReplicaWriteInsert.

A block is split by partition; each sub-block has its own dedup hash, of its partition and its
rows only, as ClickHouse's block id hashes the data: a client retry of the whole block, to any
replica, writes no sub-block twice, and neither does the same rows sent under another id. `faults` lets
tests break a forward before or after the remote write: the client only sees an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from typing import Callable

from protocol.assignment import GuardFailed, replica_allocate
from protocol.keeper import KeeperUnavailableError, SessionExpiredError
from protocol.replica import InsertRejected, Replica
from protocol.table import Table


class InsertOutcomeUnknown(Exception):
    """The connection broke: the sub-block may or may not have been written."""


def sub_block_hash(partition: str, rows: list[dict]) -> str:
    body = repr((partition, rows)).encode()
    return hashlib.sha256(body).hexdigest()[:32]


def replica_forward_insert(receiver: Replica, partition: str, replicas: dict[str, Replica],
                           rng: random.Random) -> Replica:
    """ReplicaForwardInsert: the map says another replica owns the partition; pick one of them."""
    a = receiver.cache.get(partition)
    if a is None or receiver.name in a.owners:
        raise GuardFailed("ReplicaForwardInsert", f"{receiver.name} needs no forward for {partition}")
    # A crashed owner refuses connections; one whose Keeper session expired is read-only
    # (TABLE_IS_READ_ONLY) and would refuse the write: the forward goes to another owner.
    reachable = sorted(o for o in a.owners if o in replicas and not replicas[o].keeper.expired)
    if not reachable:
        raise InsertRejected(f"no owner of {partition} ({', '.join(a.owners)}) is reachable and writable "
                             f"from {receiver.name}")
    return replicas[rng.choice(reachable)]


def _unavailable_before_commit(e: Exception) -> bool:
    """The writer could not reach Keeper, and nothing of the write can have been applied (a commit
    whose outcome is unknown is not: another owner would write the rows a second time)."""
    return isinstance(e, SessionExpiredError) or (isinstance(e, KeeperUnavailableError) and not e.outcome_unknown)


class ReplicaBusy(KeeperUnavailableError):
    """The caller's deadline passed while it waited for a replica busy with another step: the
    client's timeout, answered as a replica without Keeper is (failed, nothing written there), and
    not a refusal the protocol chose (the history records no refusal for it)."""


@contextlib.contextmanager
def _working_at(rep: Replica):
    """`rep`'s lock within the INSERT's deadline (Replica.locked_by_deadline): a replica busy past
    it is answered as one whose Keeper is away, nothing written (the client is told failed; a
    forward tries another owner), as a client's own timeout cuts a wait on a busy server short."""
    with rep.locked_by_deadline() as got:
        if not got:
            raise ReplicaBusy(f"{rep.name} was busy past the INSERT's deadline: nothing written there")
        yield


def route_insert(receiver: Replica, table: Table, rows: list[dict], replicas: dict[str, Replica],
                 rng: random.Random | None = None,
                 faults: Callable[[str, str], None] | None = None, out: dict[str, str] | None = None) -> dict[str, str]:
    """Route one INSERT block arriving at `receiver`; returns partition -> part name or
    "deduplicated" (also filled into `out` as it goes, so a caller sees which sub-blocks were
    committed before an error). Raises InsertRejected or InsertOutcomeUnknown for the client to retry."""
    rng = rng or random.Random(0)
    out = {} if out is None else out
    for partition, sub in sorted(table.split_by_partition(rows).items()):
        # Each replica's part of the work under that replica's lock (Replica.lock), one at a time:
        # the receiver's routing, then the owner's write, as each server serves its share.
        with _working_at(receiver):
            if partition not in receiver.cache:
                receiver.learn(partition, replica_allocate(receiver.keeper, receiver.layout, receiver.name, partition,
                                                           table.replication_factor, receiver.bugs, rng))
            writer = receiver
            if receiver.name not in receiver.cache[partition].owners:
                writer = replica_forward_insert(receiver, partition, replicas, rng)
        if writer is not receiver:
            with _working_at(writer):
                if writer.cache.get(partition) is None:
                    writer.replica_refresh_cache(partition)
        if faults:
            faults("before_write", partition)
        tried = {writer.name}
        while True:
            try:
                with _working_at(writer):
                    if writer.cache.get(partition) is None:
                        writer.replica_refresh_cache(partition)
                    written = writer.replica_write_insert(partition, sub, sub_block_hash(partition, sub))
                break
            except GuardFailed as e:
                with _working_at(writer):
                    writer.replica_refresh_cache(partition)  # its map was stale: it refuses, the client retries
                raise InsertRejected(str(e)) from e
            except (KeeperUnavailableError, SessionExpiredError) as e:
                # The owner is read-only (its session expired, or its Keeper is away): as a
                # Distributed INSERT does, the sub-block goes to another owner the map names,
                # unless the write may have been applied (then the client must be told "unknown").
                with _working_at(receiver):
                    owners = receiver.cache[partition].owners
                others = [o for o in owners
                          if o not in tried and o in replicas and not replicas[o].keeper.expired]
                if not _unavailable_before_commit(e) or not others:
                    raise
                writer = replicas[rng.choice(sorted(others))]
                tried.add(writer.name)
        if faults:
            faults("after_write", partition)
        out[partition] = written  # only once the client has seen it
    return out


def client_send_insert(replicas: dict[str, Replica], table: Table, rows: list[dict],
                       tries: int = 3, rng: random.Random | None = None,
                       faults: Callable[[str, str], None] | None = None) -> str:
    """ClientSendInsert with retries to random replicas: "ok" once a try is acknowledged (a try
    refused by a read-only replica, its Keeper session expired, is retried as any refusal); once
    tries run out, "unknown" if any try was lost after its request went out (its rows may be
    written: a later refusal is about that later try only) or if a try committed some of the
    block's sub-blocks before another was refused (an INSERT is not atomic across partitions:
    the committed parts stay, and the retries deduplicate them), else "failed" (every try
    refused before it committed anything)."""
    rng = rng or random.Random(0)
    outcome = "failed"
    committed: dict[str, str] = {}   # partition -> part, over every try (route_insert's `out`)
    for _ in range(tries):
        receiver = replicas[rng.choice(sorted(replicas))]
        try:
            route_insert(receiver, table, rows, replicas, rng, faults, out=committed)
            return "ok"
        except InsertRejected:
            pass
        except (KeeperUnavailableError, SessionExpiredError) as e:
            # A read-only replica (TABLE_IS_READ_ONLY: its session expired, or its Keeper is away)
            # refused the try, and the client tries another; one whose commit was cut off may have
            # written the rows.
            if not _unavailable_before_commit(e):
                outcome = "unknown"
        except InsertOutcomeUnknown:
            outcome = "unknown"
    return "unknown" if committed else outcome
