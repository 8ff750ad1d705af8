"""A replica marked lost while it was down (the cleanup thread trimmed the log past it) clones
when it comes back, on both backends: F14 and F15 of spec/FINDINGS.md, each failing with its
switch as the spec's MCLostReplica variants do, and the fixed clone keeping every owner whole."""

import pytest
from cluster_helpers import LAYOUT, P, build_cluster, drain, restart

from protocol.assignment import Assignment
from protocol.cleanup_thread import CleanupSettings, cleanup_clear_old_logs
from protocol.recovery import is_lost

Q = "202402-1"
TRIM = CleanupSettings(min_logs_to_keep=0, max_logs_to_keep=1)


def row(event, user=21):
    return {"date": "2024-01-15" if user == 21 else "2024-02-01", "user_id": user, "event": event}


@pytest.fixture
def cluster(connect, tmp_path):
    """P on r1 and r2, Q on r2 and r3: r2 keeps both, r1 and r3 one each (MCLostReplica)."""
    admin, reps = build_cluster(connect, tmp_path, load_maps=False)
    admin.create(LAYOUT.assignment(Q), Assignment(("r2", "r3")).encode())
    for rep in reps.values():
        rep.load_map()
    return admin, reps


def lose(connect, admin, reps, name):
    """The replica goes down, the log moves on, the cleanup thread trims it and marks it lost."""
    connect.expire(reps[name].keeper)
    others = [r for r in reps if r != name]
    writer = reps[others[0]]
    for i in range(2):   # more than max_logs_to_keep (1) entries behind
        writer.replica_write_insert(P if writer.name == "r1" else Q, [row(f"after{i}", 21 if writer.name == "r1" else 1)],
                                    f"h-after{i}")
    for r in others:
        drain(reps[r])
    cleanup_clear_old_logs(admin, LAYOUT, TRIM)
    assert admin.get(LAYOUT.is_lost(name))[0] == b"1"


@pytest.mark.parametrize("bugs, whole", [(frozenset(), True), (frozenset({"clone_lost_replica_from_one_peer"}), False)])
def test_lost_replica_gets_back_every_partition_it_keeps(connect, cluster, bugs, whole):
    """F14: cloneReplica mimics one source; under selective replication none has both P and Q."""
    admin, reps = cluster
    reps["r1"].replica_write_insert(P, [row("p")], "hp")
    reps["r3"].replica_write_insert(Q, [row("q", 1)], "hq")
    for rep in reps.values():
        drain(rep)
    assert {n.partition for n in reps["r2"].store.names()} == {P, Q}
    lose(connect, admin, reps, "r2")
    print(restart(connect, reps, "r2", bugs))
    assert not is_lost(reps["r2"])
    for _ in range(2):
        for rep in reps.values():
            drain(rep)
    have = {n.partition for n in reps["r2"].store.names()}
    assert (have == {P, Q}) == whole


@pytest.mark.parametrize("bugs, kept", [(frozenset(), True), (frozenset({"clone_keeps_only_what_the_source_has"}), False)])
def test_lost_replica_keeps_the_only_copy_of_a_part_its_source_has_not_pulled(connect, tmp_path, bugs, kept):
    """F15, as MCLostReplica_clone_keeps_only_what_the_source_has: r1 writes A (acknowledged) and
    goes down before r2 pulls A's GET_PART; r2 writes B and moves the log on without pulling; r1 is
    marked lost and clones P from r2, its only other keeper. ClickHouse's rule keeps a local part
    only if the source has it or has a GET_PART queued: A goes, and it was the only copy."""
    admin, reps = build_cluster(connect, tmp_path)
    reps["r1"].replica_write_insert(P, [row("base")], "h0")
    for rep in reps.values():
        drain(rep)                                          # everyone has pulled entry 0
    reps["r1"].replica_write_insert(P, [row("A")], "hA")    # entry 1, only on r1
    connect.expire(reps["r1"].keeper)
    reps["r2"].replica_write_insert(P, [row("B")], "hB")    # entry 2; r2 pulls nothing
    drain(reps["r3"])
    cleanup_clear_old_logs(admin, LAYOUT, TRIM)             # r2 holds the log at 1; r1 (at 1) is stale
    assert admin.get(LAYOUT.is_lost("r1"))[0] == b"1"
    restart(connect, reps, "r1", bugs)
    for _ in range(2):
        for rep in reps.values():
            drain(rep)
    events = lambda r: sorted(x["event"] for x in reps[r].has_rows_of(P))  # noqa: E731
    assert events("r2") == (["A", "B", "base"] if kept else ["B", "base"])
    assert events("r1") == events("r2")


def test_a_replica_joining_an_existing_table_clones_instead_of_replaying_a_trimmed_log(connect, tmp_path):
    """As ClickHouse's createReplica: a new replica starts lost, so it takes a member's
    log_pointer instead of pulling from 0, which the cleanup thread may have removed."""
    admin, reps = build_cluster(connect, tmp_path)
    reps["r1"].replica_write_insert(P, [row("x")], "h0")
    for rep in reps.values():
        drain(rep)
    cleanup_clear_old_logs(admin, LAYOUT, TRIM)
    assert admin.get_children(LAYOUT.log) == []
    from protocol.parts import PartStore
    from protocol.replica import Replica
    reps["r4"] = Replica("r4", connect(), LAYOUT, PartStore(tmp_path / "r4"), reps["r1"].peers)
    assert restart(connect, reps, "r4").startswith("cloned from")   # it registered as lost
    assert admin.get(LAYOUT.log_pointer("r4"))[0] == b"1" and not is_lost(reps["r4"])
    drain(reps["r4"])   # nothing to pull from 0: it starts where a member is


@pytest.mark.parametrize("bugs, whole", [(frozenset(), True), (frozenset({"clone_lost_replica_from_any_keeper"}), False)])
def test_a_lost_owner_clones_a_partition_from_an_owner_not_from_a_clone_target_that_has_nothing(
        connect, cluster, bugs, whole):
    """F33, as MCLostReplicaMigration_clone_lost_replica_from_any_keeper: r1 (an owner of P) is
    lost; a move of P from r2 to r3 starts before r1 is back. r3, the CLONE target, keeps P and has
    fetched nothing, and it lags least (it pulled the log just before, r2 has its own last entry
    still to pull): cloneReplicaIfNeeded's pick by lag takes it as P's source, and r1 drops its
    parts of P and queues nothing. The fix takes an owner."""
    from protocol.migration import admin_reassign
    admin, reps = cluster
    reps["r1"].replica_write_insert(P, [row("base")], "h0")
    for rep in reps.values():
        drain(rep)
    lose(connect, admin, reps, "r1")
    reps["r2"].replica_write_insert(P, [row("late")], "h-late")   # r2 has not pulled its own entry
    drain(reps["r3"])                                             # r3 skips it: not a keeper of P yet
    admin_reassign(admin, LAYOUT, P, "r3", src="r2")
    restart(connect, reps, "r1", bugs)
    drain(reps["r1"])
    events = sorted(x["event"] for x in reps["r1"].has_rows_of(P))
    assert (events == ["base", "late"]) == whole, events
