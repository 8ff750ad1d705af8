"""SELECT routing on both backends: the R2 findings of spec/FINDINGS.md (F5, F6, F9) reproduced
in the reference, and held when their fixes are on. A SELECT makes no Keeper request."""

import pytest
from cluster_helpers import LAYOUT, P, drain

from protocol.assignment import Assignment, GuardFailed
from protocol.keeper import SessionExpiredError
from protocol.migration import admin_reassign, coordinator_switch, replica_clone_fetch
from protocol.query import client_query_fails, client_start_query, replica_read_partition, select_all, served_by
from protocol.replica import Replica

ROW1 = {"date": "2024-01-15", "user_id": 21, "event": "first"}
ROW2 = {"date": "2024-01-16", "user_id": 37, "event": "second"}


def test_select_reads_each_partition_once_without_touching_keeper(make_cluster):
    _, reps = make_cluster()
    reps["r1"].replica_write_insert(P, [ROW1], "h1")
    drain(reps["r2"])
    before = dict(reps["r3"].keeper.ops)
    q = select_all(reps["r3"], reps)
    assert q.done and q.rows == [ROW1]  # R2 and R3: every row, once
    assert dict(reps["r3"].keeper.ops) == before, "SELECT must not call Keeper"


@pytest.mark.parametrize("bugs, missing", [(frozenset(), False), (frozenset({"route_to_clone_target"}), True)])
def test_clone_target_is_not_read_before_switch(make_cluster, bugs, missing):
    """F5: during CLONE the target is listed; the RFC's format makes it readable."""
    admin, reps = make_cluster(bugs)
    reps["r1"].replica_write_insert(P, [ROW1], "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    reps["r2"].replica_refresh_cache(P)
    q = select_all(reps["r2"], reps, choose=lambda me, c: "r3" if "r3" in c else min(c))
    assert (q.rows == []) == missing


@pytest.mark.parametrize("bugs, missing", [(frozenset(), False), (frozenset({"source_stops_at_switch"}), True)])
def test_stale_map_reads_a_source_that_still_replicates(make_cluster, bugs, missing):
    """F6: after SWITCH r2 -> r3, r3's stale map sends the SELECT to r2."""
    admin, reps = make_cluster(bugs)
    admin_reassign(admin, LAYOUT, P, "r3", src="r2")
    replica_clone_fetch(reps["r3"], P, reps)
    coordinator_switch(admin, LAYOUT, P, "r3", bugs)
    reps["r1"].replica_refresh_cache(P)
    reps["r1"].replica_write_insert(P, [ROW2], "h2")  # after SWITCH, acknowledged
    reps["r2"].replica_refresh_cache(P)  # the source's map timer: it learns the SWITCH
    drain(reps["r2"])  # the source pulls it: keeps it as leaving, or skips it as written
    stale = Assignment(("r1", "r2"), version=0)
    reps["r3"].cache[P] = stale  # r3's map has not refreshed since before the CLONE
    q = select_all(reps["r3"], reps, choose=lambda me, c: "r2" if "r2" in c else min(c))
    assert q.routes[P] == "r2"
    assert (q.rows == []) == missing


@pytest.mark.parametrize("load_map, missing", [(True, False), (False, True)])
def test_restarted_replica_serves_after_loading_its_map(make_cluster, load_map, missing):
    """F9: a restarted replica with an empty map returns no rows unless it loads the map first."""
    _, reps = make_cluster()
    reps["r1"].replica_write_insert(P, [ROW1], "h1")
    drain(reps["r2"])
    restarted = Replica("r1", reps["r1"].keeper, LAYOUT, reps["r1"].store, reps["r1"].peers)
    if load_map:
        restarted.load_map()
    q = select_all(restarted, reps)
    assert (q.rows == []) == missing


def test_partition_pruning_and_step_guards(make_cluster):
    admin, reps = make_cluster()
    admin.create(LAYOUT.assignment("202402-1"), Assignment(("r2", "r3")).encode())
    reps["r1"].load_map()
    q = client_start_query(reps["r1"], partitions={"202402-1"})
    assert q.routes == {"202402-1": "r2"}
    replica_read_partition(q, "202402-1", reps)
    with pytest.raises(GuardFailed, match="not pending"):
        replica_read_partition(q, "202402-1", reps)


@pytest.mark.parametrize("bugs", [frozenset(), frozenset({"cleanup_no_delay"})])
def test_cleanup_waits_for_a_started_query_routed_to_the_source(make_cluster, bugs):
    """The spec's ReplicaCleanup guard ~routedHere, found missing here by the live runtime: a
    query planned to read P on the source r1, then SWITCH and every map refreshed; CLEANUP must
    wait for the read, or the query reads an empty partition (QueryNoMissingInv)."""
    from protocol.migration import replica_cleanup
    admin, reps = make_cluster(bugs)
    reps["r1"].replica_write_insert(P, [ROW1], "h1")
    drain(reps["r2"])
    q = client_start_query(reps["r1"], replicas=reps)  # r1 reads P locally, later
    assert q.routes[P] == "r1" and reps["r1"].pins == {P: 1}
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    coordinator_switch(admin, LAYOUT, P, "r3")
    for rep in reps.values():
        rep.replica_refresh_cache(P)
    if "cleanup_no_delay" in bugs:
        replica_cleanup(reps["r1"], P, bugs)
        assert replica_read_partition(q, P, reps) == []  # an acknowledged row missed
    else:
        with pytest.raises(GuardFailed, match="running queries will read"):
            replica_cleanup(reps["r1"], P, bugs)
        assert replica_read_partition(q, P, reps) == [ROW1]
        assert reps["r1"].pins == {}
        replica_cleanup(reps["r1"], P, bugs)  # now it may


def test_a_failed_query_releases_only_the_pins_it_took(make_cluster):
    """ClientQueryFails: a query that pinned its readers releases its pins; one that took none
    (started without telling the readers) releases none, so the pin of another query still to
    read the partition keeps holding off its CLEANUP."""
    _, reps = make_cluster()
    pinned = client_start_query(reps["r1"], replicas=reps)
    unpinned = client_start_query(reps["r1"])
    assert pinned.routes == unpinned.routes == {P: "r1"} and reps["r1"].pins == {P: 1}
    client_query_fails(unpinned, reps)
    assert reps["r1"].pins == {P: 1} and unpinned.done
    client_query_fails(pinned, reps)
    assert reps["r1"].pins == {} and pinned.done


def test_a_pin_is_held_until_every_query_routed_there_has_read(make_cluster):
    """Two queries route P to r1 and pin it; the first read leaves the second's pin, which alone
    keeps r1's CLEANUP of P waiting (ReplicaCleanup's no-started-query condition)."""
    _, reps = make_cluster()
    first, second = (client_start_query(reps["r1"], replicas=reps) for _ in range(2))
    assert reps["r1"].pins == {P: 2}
    replica_read_partition(first, P, reps)
    assert reps["r1"].pins == {P: 1}
    replica_read_partition(second, P, reps)
    assert reps["r1"].pins == {}


def test_a_read_on_a_reader_restarted_since_the_query_started_releases_nothing(make_cluster):
    """The reader restarted between the query's start and its read: its pins went with the old
    process, so the read finds none to release and reads all the same."""
    _, reps = make_cluster()
    reps["r1"].replica_write_insert(P, [ROW1], "h1")
    q = client_start_query(reps["r1"], replicas=reps)
    restarted = Replica("r1", reps["r1"].keeper, LAYOUT, reps["r1"].store, reps["r1"].peers)
    restarted.load_map()
    reps["r1"] = restarted
    assert replica_read_partition(q, P, reps) == [ROW1] and restarted.pins == {} and q.done


def test_a_query_is_served_by_its_initiator_and_its_readers_until_it_ends(make_cluster):
    """ServedBy (spec ReplicaCrash): the replica a query started at, and each replica a partition
    it has still to read is routed to; a read ends the reader's part, the last one the query's."""
    _, reps = make_cluster()
    remote = client_start_query(reps["r3"], choose=lambda _p, _owners: "r2", replicas=reps)
    assert remote.routes == {P: "r2"}
    assert [r for r in sorted(reps) if served_by(remote, r)] == ["r2", "r3"]
    local = client_start_query(reps["r1"], replicas=reps)
    assert [r for r in sorted(reps) if served_by(local, r)] == ["r1"]
    replica_read_partition(remote, P, reps)
    assert remote.done and not any(served_by(remote, r) for r in reps)


def test_a_replica_whose_session_expired_starts_no_query(make_cluster, connect):
    """F22: ClientStartQuery needs an active replica (the spec's guard): a read-only one, its
    Keeper session expired, refuses the SELECT before it routes or pins anything."""
    _, reps = make_cluster()
    connect.expire(reps["r3"].keeper)
    try:
        reps["r3"].keeper.exists("/")   # ZooKeeper's client hears of the expiry at its next request
    except SessionExpiredError:
        pass
    with pytest.raises(GuardFailed, match=r"^ClientStartQuery: r3 is read-only \(its Keeper session expired\)"):
        client_start_query(reps["r3"], replicas=reps)
    assert all(not rep.pins for rep in reps.values())
    assert client_start_query(reps["r1"], replicas=reps).routes == {P: "r1"}


@pytest.mark.parametrize("bugs, missing", [(frozenset(), False), (frozenset({"route_to_clone_target"}), True)])
def test_a_query_the_clone_target_receives_reads_an_owner(make_cluster, bugs, missing):
    """F5 at the other receiver (issue 37): the SELECT reaches the CLONE target itself, which has
    fetched nothing yet. prefer_local reads locally whenever the receiver is a candidate: the
    fixed routing lists owners only, so the target sends the partition to one; with
    route_to_clone_target it reads its own empty copy."""
    admin, reps = make_cluster(bugs)
    reps["r1"].replica_write_insert(P, [ROW1], "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    reps["r3"].replica_refresh_cache(P)
    assert not reps["r3"].has_rows_of(P)
    q = select_all(reps["r3"], reps)
    assert (q.routes[P] == "r3") == missing
    assert (q.rows == []) == missing
