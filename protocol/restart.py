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

from protocol.migration import drop_foreign_partitions
from protocol.recovery import replica_clone_if_lost
from protocol.replica import Replica


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
