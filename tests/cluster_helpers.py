"""A small cluster of reference replicas for tests, and driving them until they are idle."""

from protocol.assignment import Assignment, GuardFailed
from protocol.layout import Layout
from protocol.parts import PartStore
from protocol.registration import create_table_znodes, declare_replicas, register_replica
from protocol.replica import Replica

LAYOUT = Layout("/clickhouse/tables/01/events")
P = "202401-5"


def build_cluster(connect, folder, bugs=frozenset(), replicas=("r1", "r2", "r3"), owners=("r1", "r2"),
                  load_maps=True):
    """(admin session, {name: Replica}) on fresh sessions, P assigned to `owners` (None: unassigned),
    every replica's map loaded unless load_maps is False."""
    admin = connect()
    create_table_znodes(admin, LAYOUT, 2)
    stores = {r: PartStore(folder / r) for r in replicas}
    reps = {}
    declare_replicas(admin, LAYOUT, replicas)   # created with the table: nothing to clone
    for r in replicas:
        k = connect()
        register_replica(k, LAYOUT, r)
        reps[r] = Replica(r, k, LAYOUT, stores[r], stores, frozenset(bugs))
    if owners:
        admin.create(LAYOUT.assignment(P), Assignment(tuple(owners)).encode())
    if load_maps:
        for rep in reps.values():
            rep.load_map()
    return admin, reps


def restart(connect, reps, name, bugs=frozenset(), sources=None):
    """The replica comes back on a new session: registers, loads its map, clones if it was
    marked lost while down (what Cluster.add_replica does)."""
    from protocol.recovery import replica_clone_if_lost
    old = reps[name]
    rep = Replica(name, connect(), LAYOUT, old.store, old.peers, frozenset(bugs))
    register_replica(rep.keeper, LAYOUT, name)
    rep.load_map()
    done = replica_clone_if_lost(rep, sources)
    reps[name] = rep
    return done


def drain(rep):
    """Pull the whole log, then run every queue entry that can run (others stay queued)."""
    rep.pull_whole_log()
    for node, _ in rep.queue():
        try:
            rep.replica_execute_entry(node)
        except GuardFailed:
            pass
