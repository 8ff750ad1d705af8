"""A replica under Keeper loss, as a ClickHouse replica behaves (issue 15): inserts and queries that
meet an owner whose session expired go to another owner; a query's pins are released however it
ends, so CLEANUP is never held off by a query that failed; a migration whose target or source
stays down ends (cancelled, or cleaned up on the leaver's behalf) and the leaver drops its copy
when it comes back. On both Keeper backends; the history of each is checked by the oracle."""

from __future__ import annotations

import random
import time

import pytest

from checkers.oracle import violations
from protocol.migration import read_migration
from reference.cluster import Cluster
from reference.workload import blocks


def _cluster(connect, tmp_path, seed=1, **kw) -> Cluster:
    c = Cluster(connect, tmp_path / "data", replicas=("r1", "r2", "r3"), seed=seed, **kw)
    c.load(blocks(random.Random(seed), 8, 3, months=1))
    c.settle()
    return c


def _expire(connect, c: Cluster, name: str) -> None:
    rep = c.replicas[name]
    connect.expire(rep.keeper)
    t0 = time.monotonic()
    while not rep.keeper.expired and time.monotonic() - t0 < 20:   # ZooKeeper tells the client by an event
        time.sleep(0.05)
    assert rep.keeper.expired


def _owned_by(c: Cluster, owners: set[str]) -> str:
    return next(p for p in c.admin.get_children(c.layout.assignments)
                if set(c.replicas["r1"].replica_refresh_cache(p).owners) == owners)


def _exact(c: Cluster) -> None:
    c.settle()
    c.snapshot()
    assert violations(c.history, 2) == []


def test_inserts_go_to_another_owner_while_one_is_read_only(connect, tmp_path):
    c = _cluster(connect, tmp_path, seed=2)
    try:
        _expire(connect, c, "r1")
        statuses = [c.insert(rows, b) for b, rows in blocks(random.Random(7), 12, 3, months=1, first_row_id=1000)]
        # Every partition has an owner besides r1 (RF 2 of 3): no sub-block is refused.
        assert {s for st in statuses for s in st.values()} == {"ok"}
        c.reestablish("r1")
        _exact(c)
    finally:
        c.close()


def test_a_query_whose_reader_expires_reads_another_owner_and_leaves_no_pin(connect, tmp_path):
    c = _cluster(connect, tmp_path, seed=3)
    try:
        p = _owned_by(c, {"r1", "r2"})
        expired = []

        def expire_reader():   # between the start of the query (r1 pinned) and its read
            if not expired:
                expired.append("r1")
                _expire(connect, c, "r1")
        q = c.query(at="r3", partitions={p}, between=expire_reader)
        assert q is not None and q.routes[p] == "r2"
        assert [r["read_from"] for r in c.history.tables["query_reads"] if r["partition_id"] == p][-1] == "r2"
        assert all(not rep.pins for rep in c.replicas.values())
    finally:
        c.close()


def test_failed_queries_under_expired_sessions_do_not_hold_off_cleanup(connect, tmp_path):
    """Both owners' sessions expire while queries are routed to them: the queries fail, their pins
    go; once the owners are re-established, a migration off one of them runs its CLEANUP."""
    c = _cluster(connect, tmp_path, seed=4)
    try:
        p = _owned_by(c, {"r1", "r2"})
        for _ in range(3):
            def expire_owners():
                for r in ("r1", "r2"):
                    if not c.replicas[r].keeper.expired:
                        _expire(connect, c, r)
            assert c.query(at="r3", partitions={p}, between=expire_owners) is None
            assert all(not rep.pins for rep in c.replicas.values())
            for r in ("r1", "r2"):
                c.reestablish(r)
        assert [q["status"] for q in c.history.tables["queries"]][-3:] == ["failed"] * 3
        c.reassign(p, "r3", "r1")
        c.settle()
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "done"
        assert c.replicas["r1"].has_rows_of(p) == []
        _exact(c)
    finally:
        c.close()


def test_a_clone_whose_target_stays_down_is_cancelled(connect, tmp_path):
    c = _cluster(connect, tmp_path, seed=5, down_timeout=0)
    try:
        p = _owned_by(c, {"r1", "r2"})
        c.reassign(p, "r3", "r1")
        c.crash_replica("r3")
        c.settle()
        mig = read_migration(c.admin, c.layout, p)[0]
        assert mig["state"] == "cancelled"
        a = c.replicas["r1"].replica_refresh_cache(p)
        assert (set(a.owners), a.target, a.leaving) == ({"r1", "r2"}, None, None)
        c.add_replica("r3")   # back: it drops what it may have fetched of p
        assert c.replicas["r3"].has_rows_of(p) == []
        _exact(c)
    finally:
        c.close()


def test_a_source_down_after_takeover_is_cleaned_up_for_and_drops_its_copy_on_restart(connect, tmp_path):
    """The source (the coordinator) crashes in CLONE: another replica takes over and switches,
    the CLEANUP is done on the source's behalf; the source restarts and drops its copy; a
    second restart, with nothing left to drop, is a no-op (idempotent)."""
    c = _cluster(connect, tmp_path, seed=6, down_timeout=0)
    try:
        p = _owned_by(c, {"r1", "r2"})
        c.reassign(p, "r3", "r1")
        c.crash_replica("r1")
        c.settle()
        mig = read_migration(c.admin, c.layout, p)[0]
        assert (mig["state"], mig["ended_by"]) in {("done", "r2"), ("done", "r3")}
        assert set(c.replicas["r2"].replica_refresh_cache(p).owners) == {"r2", "r3"}
        for _ in range(2):
            c.add_replica("r1")
            assert c.replicas["r1"].has_rows_of(p) == []
            assert not [n for n in c.admin.get_children(c.layout.parts("r1")) if n.startswith(p + "_")]
            c.settle()
            c.crash_replica("r1")
        c.add_replica("r1")
        _exact(c)
    finally:
        c.close()


def test_a_leaver_is_cleaned_up_for_after_down_timeout_on_the_clusters_clock(connect, tmp_path):
    """The down-leaver rule counts on the clock the cluster is given (wall clock by default; the
    racing driver's steps, reference/races.py): not before down_timeout, and a leaver that came
    back in between is timed from its new stay down, not from the first."""
    now = [0]
    c = _cluster(connect, tmp_path, seed=6, down_timeout=10, clock=lambda: now[0])
    try:
        p = _owned_by(c, {"r1", "r2"})
        c.reassign(p, "r3", "r1")
        c.crash_replica("r1")
        c.settle()
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "switched"   # taken over; CLEANUP waits
        now[0] = 9
        c.settle()
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "switched"
        c.add_replica("r1")
        c.crash_replica("r1")
        now[0] = 10
        c.settle()
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "switched"   # down since 10, not 0
        now[0] = 20
        c.settle()
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "done"
        c.add_replica("r1")
        assert c.replicas["r1"].has_rows_of(p) == []
        _exact(c)
    finally:
        c.close()


def test_a_read_that_cannot_fetch_a_committed_part_fails_rather_than_miss_a_row(connect, tmp_path):
    """Found by the fault suite (replica_crash x cleanup): an owner writes a part and crashes
    before the other owner fetched it; a query reading the other owner could not sync the
    partition and returned it without the acknowledged row. Now the read goes to another owner,
    and with none that has it the query fails (select_sequential_consistency), until the holder
    is back."""
    c = _cluster(connect, tmp_path, seed=9)
    try:
        p = _owned_by(c, {"r1", "r2"})
        month, bucket = p.split("-")
        rows = [{"date": f"{month[:4]}-{month[4:]}-15", "user_id": int(bucket), "row_id": 90_000, "event": "buy"}]
        assert c.table.split_by_partition(rows).keys() == {p}
        sent = c.tick()
        c.replicas["r1"].replica_write_insert(p, rows, "only-on-r1")
        c.history.insert("only-on-r1", p, rows, "ok", sent, c.tick())
        c.crash_replica("r1")
        assert c.query(at="r2", partitions={p}) is None
        assert c.history.tables["queries"][-1]["status"] == "failed"
        assert all(not rep.pins for rep in c.replicas.values())
        c.add_replica("r1")
        q = c.query(at="r2", partitions={p})
        assert q is not None and 90_000 in {r["row_id"] for r in q.rows}
        _exact(c)
    finally:
        c.close()


def test_a_cleanup_cut_short_after_its_state_was_written_still_drops_the_copy(connect, tmp_path):
    """Found by the fault suite (full outage in CLEANUP): CLEANUP's multi wrote `done`, then Keeper
    went away before the leaver's local drop; CLEANUP does not run again for a done migration, so
    the leaver kept the partition. Its next migrate step drops it (the map says it keeps it no more)."""
    c = _cluster(connect, tmp_path, seed=10)
    try:
        p = _owned_by(c, {"r1", "r2"})
        kept = {n: c.replicas["r1"].store.read(n) for n in c.replicas["r1"].store.names(p)}
        c.reassign(p, "r3", "r1")
        c.settle()
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "done"
        for n, rows in kept.items():   # as if the drop had not run
            c.replicas["r1"].store.write(n, rows)
        assert c.replicas["r1"].has_rows_of(p)
        c.settle()
        assert c.replicas["r1"].has_rows_of(p) == []
        _exact(c)
    finally:
        c.close()


def test_a_clone_waiting_on_a_part_only_a_down_replica_has_is_cancelled(connect, tmp_path):
    """Found by TLC (MCLivenessCrashNoRestart): r1 writes a block of p and goes down before r2
    fetched it; a CLONE of p from r2 to r3 queues the GET_PART, whose only source is r1, and would
    wait for ever if r1 stayed down. After down_timeout its coordinator cancels it; when r1 comes
    back nothing was lost."""
    c = _cluster(connect, tmp_path, seed=9, down_timeout=0)
    try:
        p = _owned_by(c, {"r1", "r2"})
        month, bucket = p.split("-")
        rows = [{"date": f"{month[:4]}-{month[4:]}-15", "user_id": int(bucket), "row_id": 90_001, "event": "buy"}]
        sent = c.tick()
        c.replicas["r1"].replica_write_insert(p, rows, "only-on-r1")
        c.history.insert("only-on-r1", p, rows, "ok", sent, c.tick())
        c.crash_replica("r1")
        c.reassign(p, "r3", "r2")
        c.settle()
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "cancelled"
        a = c.replicas["r2"].replica_refresh_cache(p)
        assert (set(a.owners), a.target, a.leaving) == ({"r1", "r2"}, None, None)
        c.add_replica("r1")
        _exact(c)
        assert 90_001 in {r["row_id"] for r in c.replicas["r2"].has_rows_of(p)}
    finally:
        c.close()


def test_a_coordinator_reads_the_queue_of_a_clone_target_whose_session_expired(connect, tmp_path):
    """Found by the `expiring` racing profile (size 150/30, seed 7): with a replica down, the
    down-timeout rule reads a fetched CLONE's target queue (CloneWaitsOnDown). It read it in the
    target's own session, so a coordinator's migrate step raised SessionExpiredError when the
    target was read-only, and the run stopped; the coordinator reads it in its own session. The
    read-only target takes no step until its session is re-established."""
    c = _cluster(connect, tmp_path, seed=5)
    try:
        p = _owned_by(c, {"r1", "r2"})
        c.reassign(p, "r3", "r1")
        c.read_in_flight()
        assert c._try("migrate", c.replicas["r3"]).startswith("ReplicaCloneFetch")
        c.crash_replica("r2")
        _expire(connect, c, "r3")
        c.read_in_flight()
        assert c._try("migrate", c.replicas["r3"]) is None   # read-only: its tasks wait
        c._try("migrate", c.replicas["r1"])   # the coordinator's step: it raised SessionExpiredError
        c.reestablish("r3")
        c.add_replica("r2")
        _exact(c)
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "done"
    finally:
        c.close()


@pytest.mark.parametrize("bugs, kept", [(frozenset(), False), (frozenset({"restart_keeps_foreign_parts"}), True)])
def test_restart_keeps_foreign_parts_is_the_leaver_keeping_what_was_cleaned_up_for_it(connect, tmp_path, bugs, kept):
    """The broken variant of the down-leaver rule: the source, down while its CLEANUP was done on
    its behalf, comes back and keeps the partition (spec NoForeignPartsInv); fixed, it drops it."""
    c = _cluster(connect, tmp_path, seed=6, down_timeout=0, bugs=bugs)
    try:
        p = _owned_by(c, {"r1", "r2"})
        c.reassign(p, "r3", "r1")
        c.crash_replica("r1")
        c.settle()
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "done"
        c.add_replica("r1")
        c.settle()
        assert bool(c.replicas["r1"].has_rows_of(p)) is kept
    finally:
        c.close()


def test_a_commit_keeper_could_not_confirm_is_undone_once_keeper_says_it_did_not_happen(connect, tmp_path):
    """The session expires while the part is written (between the block-number lock and the
    commit multi, where the entry's create_time is read): the commit's outcome is unknown to the
    writer. Once a new session can tell, the part that is not in replicas/{r}/parts goes, and its
    number stays a gap; the client retries the block, which is written again (not deduplicated)."""
    from cluster_helpers import LAYOUT, P, build_cluster

    from protocol.keeper import KeeperError
    admin, reps = build_cluster(connect, tmp_path)
    r1 = reps["r1"]
    expired = []

    def clock():   # the session goes at the first read, once
        if not expired:
            expired.append(connect.expire(r1.keeper))
        return 1_700_000_000
    r1.clock = clock
    rows = [{"date": "2024-01-15", "user_id": 21, "event": "click"}]
    with pytest.raises(KeeperError):
        r1.replica_write_insert(P, rows, "h1")
    assert [str(n) for n in r1.unknown_commits] == [f"{P}_0_0_0"] and r1.store.names(P) != []
    r1.keeper = connect()                          # re-established: Keeper answers again
    assert r1.resolve_unknown_commits() == [f"{P}_0_0_0"]
    assert r1.unknown_commits == {} and r1.store.names(P) == [] and admin.get_children(LAYOUT.log) == []
    assert admin.get_children(LAYOUT.block_numbers(P)) == []
    assert r1.resolve_unknown_commits() == []
    assert r1.replica_write_insert(P, rows, "h1") == f"{P}_1_1_0"


def test_a_read_only_replica_refuses_a_select_its_stale_map_would_route_to_an_emptied_source(connect, tmp_path):
    """F22, found by the `expiring` profile once sessions also expired right after a commit: r4's
    session expires while its map says P is on r1 and r2; P moves r1 -> r3 and r1 runs its CLEANUP,
    which waits for the maps of active replicas only. r4's map still routes P to r1, which holds
    nothing of it now, so a SELECT there would miss every row. Fixed as the spec has it
    (ClientStartQuery: the replica is active): the read-only replica refuses the SELECT, which is
    recorded as failed with no error, and once re-established (its map reloaded) it reads P whole."""
    c = Cluster(connect, tmp_path / "data", replicas=("r1", "r2", "r3", "r4"), seed=1)
    try:
        c.load(blocks(random.Random(1), 8, 3, months=1))
        c.settle()
        p = next(p for p in c.admin.get_children(c.layout.assignments)
                 if {"r1", "r2"} <= set(c.replicas["r4"].replica_refresh_cache(p).owners))
        _expire(connect, c, "r4")
        c.reassign(p, "r3", src="r1")
        c.settle()
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "done"
        assert "r1" in c.replicas["r4"].cache[p].owners                     # r4's map: still r1
        assert not [n for n in c.replicas["r1"].store.names() if n.partition == p]   # r1: emptied
        failed = len(c.history.tables["queries"])
        assert c.query(at="r4", partitions={p}, sync=False) is None
        assert [q["status"] for q in c.history.tables["queries"][failed:]] == ["failed"]
        assert c.history.tables["errors"] == []
        c.reestablish("r4")
        q = c.query(at="r4", partitions={p}, sync=False)
        assert q is not None and q.routes[p] in {"r2", "r3"} and q.rows
        _exact(c)
    finally:
        c.close()


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
def test_a_fetch_whose_commit_went_unanswered_keeps_its_part_until_keeper_decides(connect, tmp_path, applied):
    """The multi that registers a fetched part and removes its GET_PART from the queue goes out
    and no answer comes back (Keeper away): the part stays on the disk, not taken off as after a
    MultiError, and once Keeper answers resolve_unknown_commits decides. Applied: it is
    registered and the entry gone, and a second GET of the same part (a CLONE's beside the
    log's) is covered, where a part taken off left that entry failing on the registration for
    ever (the fault suite's full_outage x cleanup, 2026-11-29). Not applied: the registration
    and the entry's removal are done then."""
    from cluster_helpers import LAYOUT, P, build_cluster

    from protocol.keeper import Create, KeeperUnavailableError
    from protocol.replica import GET_PART
    admin, reps = build_cluster(connect, tmp_path)
    r1, r2 = reps["r1"], reps["r2"]
    name = r1.replica_write_insert(P, [{"date": "2024-01-15", "user_id": 21, "event": "click"}], "h1")
    r2.pull_whole_log()
    (node, entry), = r2.queue()
    assert entry.type == GET_PART and str(entry.part) == name
    second = admin.create(f"{LAYOUT.queue('r2')}/queue-", entry.format(), sequential=True)
    real = r2.keeper.multi

    def unanswered(ops):
        if isinstance(ops[0], Create) and ops[0].path.startswith(LAYOUT.parts("r2") + "/"):
            r2.keeper.multi = real   # once
            if applied:
                real(ops)
            raise KeeperUnavailableError("injected: no answer to the commit", outcome_unknown=True)
        return real(ops)
    r2.keeper.multi = unanswered
    with pytest.raises(KeeperUnavailableError):
        r2.replica_execute_entry(node)
    assert [str(n) for n in r2.store.names(P)] == [name] and [str(n) for n in r2.unknown_entry_commits] == [name]
    registered = lambda: admin.get_children(LAYOUT.parts("r2"))   # noqa: E731
    queued = lambda: sorted(admin.get_children(LAYOUT.queue("r2")))   # noqa: E731
    assert (registered(), queued()) == (([name], [second.rsplit("/", 1)[1]]) if applied
                                        else ([], sorted([node, second.rsplit("/", 1)[1]])))
    assert r2.resolve_unknown_commits() == [] and r2.unknown_entry_commits == {}
    assert registered() == [name] and [str(n) for n in r2.store.names(P)] == [name]
    assert queued() == [second.rsplit("/", 1)[1]]
    assert r2.replica_execute_entry(second.rsplit("/", 1)[1]) == "covered"
    assert queued() == [] and registered() == [name]
