"""A replica comes back (spec/SelectiveReplication.tla ReplicaRestart), once its process is up
with a Keeper session and is_active registered (registration.register_replica): what it does
before it serves. Every driver restarts a replica through this one step (reference/cluster.py, the
conformance systems), so a change to ReplicaRestart's behaviour is made here once.

The map is loaded from Keeper before the replica serves (F9; with serve_before_map_loaded it
serves with an empty map that fills in later). Then, as the spec's IF: a replica marked lost while
it was down clones (recovery.replica_clone_if_lost, CloneLostReplica), and one that is not drops
every partition it no longer keeps, a CLEANUP done on its behalf while it was down
(migration.drop_foreign_partitions). With serve_before_map_loaded the reference drops nothing, as
it has no map to drop by (the spec's variant drops by Keeper's assignment: spec/FINDINGS.md F9).
"""

from __future__ import annotations

from protocol.keeper import Create, Delete, NoNodeError
from protocol.log_entry import GET_PART
from protocol.migration import drop_foreign_partitions
from protocol.parts import PartName
from protocol.recovery import replica_clone_if_lost
from protocol.replica import Replica


def replica_check_parts(rep: Replica) -> tuple[list[str], list[str]]:
    """What a replica's disk holds against what Keeper says it holds, at start, before anything
    else, as ClickHouse's StorageReplicatedMergeTree::checkParts (master, 2026) does: a process
    killed between writing a part and committing it (an INSERT, a fetch, a merge, a mutation)
    leaves a part no one knows of, and one killed at the other end of a step a part Keeper names
    that is not there.
    - A part on disk that is not in replicas/{r}/parts ("unexpected") goes to detached/ as
      ignored_<name>: it was never committed, so no client was told it was written; left in the
      table, the INSERT's retry (same block id, not in blocks/) would write its rows twice.
    - A part in replicas/{r}/parts that is not on disk and that no part on disk covers ("missing")
      is fetched again: one multi takes it off replicas/{r}/parts and queues a GET_PART of it, as
      ClickHouse's setBrokenPartsToEnqueueFetchesOnLoading. One that a part on disk covers was
      replaced there and is left to the cleanup thread (replica_clear_old_parts counts it outdated).
    Returns the parts detached and the parts queued to fetch. Called by a driver whose process
    can die inside a step (reference/cluster.py's add_replica, before replica_restart); the
    spec's steps are whole, so a replay finds nothing for it to do."""
    layout, keeper = rep.layout, rep.keeper
    try:
        registered = set(keeper.get_children(layout.parts(rep.name)))
    except NoNodeError:
        registered = set()
    local = rep.store.names()
    unexpected = [n for n in local if str(n) not in registered]
    for n in unexpected:
        rep.store.detach(n, prefix="ignored_")
    kept = [n for n in local if str(n) in registered]
    missing = sorted(str(n) for n in map(PartName.parse, registered) if not any(have.covers(n) for have in kept))
    for name in missing:
        entry = rep._entry(GET_PART, new_part_name=name)
        keeper.multi([Delete(f"{layout.parts(rep.name)}/{name}"),
                      Create(f"{layout.queue(rep.name)}/queue-", entry.format(), sequential=True)])
    return [str(n) for n in unexpected], missing


def replica_restart(rep: Replica, sources: tuple[dict[str, str], str] | None = None) -> tuple[str, list[str]]:
    """Load the map, then clone if lost, else drop the foreign partitions. Returns what the clone
    did ("not lost", or whom it cloned from) and the partitions dropped. `sources` forces one of the
    clone's choices the spec allows (per partition source, log_pointer source), as the replay asks."""
    load = "serve_before_map_loaded" not in rep.bugs
    if load:
        rep.load_map()
    done = replica_clone_if_lost(rep, sources)
    dropped = drop_foreign_partitions(rep) if load and done == "not lost" else []
    return done, dropped
