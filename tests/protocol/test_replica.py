"""Writes and the filtered log on both backends: the fixed protocol keeps every owner complete,
and the RFC-as-written switches break the same invariants the spec names (spec/FINDINGS.md)."""

import pytest
from cluster_helpers import LAYOUT, P, build_cluster, drain

from protocol.assignment import Assignment, GuardFailed, cas_update
from protocol.keeper import MultiError
from protocol.log_entry import GET_PART, LogEntry
from protocol.replica import InsertRejected, client_alter_metadata

ROWS = [{"date": "2024-01-15", "user_id": 21, "event": "click"}]


@pytest.fixture
def make_cluster(connect, tmp_path):
    """Maps not loaded: which replica's map is fresh is what these tests are about."""
    return lambda bugs=frozenset(): build_cluster(connect, tmp_path, bugs, load_maps=False)


def test_owner_write_reaches_the_other_owner_and_skips_the_non_owner(make_cluster):
    _, reps = make_cluster()
    reps["r1"].load_map()  # r1 has a fresh map; r2 and r3 have never loaded theirs
    assert reps["r1"].replica_write_insert(P, ROWS, "h1") == f"{P}_0_0_0"
    for r in ("r2", "r3"):
        drain(reps[r])
    assert reps["r2"].has_rows_of(P) == ROWS  # an entry of a partition it does not know made r2 read it (F2)
    assert reps["r3"].has_rows_of(P) == []
    assert reps["r3"].queue() == []


def test_filter_with_stale_cache_loses_the_block_for_good(make_cluster):
    """F2, as in MCFilteredLog_filter_with_stale_cache: OwnersCompleteInv broken."""
    _, reps = make_cluster({"filter_with_stale_cache"})
    reps["r1"].load_map()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    drain(reps["r2"])
    reps["r2"].load_map()  # the map catches up later ...
    drain(reps["r2"])
    assert reps["r2"].has_rows_of(P) == []  # ... but the skipped entry is never revisited
    assert reps["r2"].queue() == []


def test_retried_block_is_deduplicated(make_cluster):
    admin, reps = make_cluster()
    reps["r1"].load_map()
    reps["r2"].load_map()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    assert reps["r2"].replica_write_insert(P, ROWS, "h1") == "deduplicated"  # retry to the other owner
    assert len(admin.get_children(LAYOUT.log)) == 1
    for r in ("r1", "r2"):
        drain(reps[r])
        assert reps[r].has_rows_of(P) == ROWS


def test_no_dedup_duplicates_rows(make_cluster):
    """Broken variant no_dedup, as in MCRetry_no_dedup: NoDuplicateRowsInv broken."""
    _, reps = make_cluster({"no_dedup"})
    reps["r1"].load_map()
    reps["r2"].load_map()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    reps["r2"].replica_write_insert(P, ROWS, "h1")
    for r in ("r1", "r2"):
        drain(reps[r])
    assert reps["r1"].has_rows_of(P) == ROWS + ROWS


def test_write_with_a_stale_map_is_rejected_and_leaves_nothing(make_cluster):
    """F4 fix: the commit checks the assignment version; the client retries elsewhere."""
    admin, reps = make_cluster()
    reps["r1"].load_map()
    cas_update(admin, LAYOUT, P, lambda a: Assignment(("r2", "r3"), leaving="r1"))  # a SWITCH r1 -> r3
    with pytest.raises(InsertRejected, match="changed under r1"):
        reps["r1"].replica_write_insert(P, ROWS, "h1")
    assert admin.get_children(LAYOUT.log) == [] and reps["r1"].store.names() == []
    assert reps["r1"].cache[P].owners == ("r2", "r3")  # the map was refreshed by the failure


def test_insert_without_assignment_check_commits_on_a_non_owner(make_cluster):
    """F4 as written: the stale owner commits a part of a partition it no longer owns."""
    admin, reps = make_cluster({"insert_without_assignment_check"})
    reps["r1"].load_map()
    cas_update(admin, LAYOUT, P, lambda a: Assignment(("r2", "r3"), leaving="r1"))
    assert reps["r1"].replica_write_insert(P, ROWS, "h1") == f"{P}_0_0_0"
    assert "r1" not in reps["r2"].replica_refresh_cache(P).owners


@pytest.mark.parametrize("bugs, applied", [(frozenset(), True), (frozenset({"filter_skips_global"}), False)])
def test_global_entries_reach_every_replica(make_cluster, bugs, applied):
    admin, reps = make_cluster(bugs)
    client_alter_metadata(admin, LAYOUT, "`x` UInt8")
    drain(reps["r3"])  # r3 owns no partition at all
    assert (reps["r3"].metadata_version == 1) == applied


def test_steps_refuse_when_their_guard_is_false(make_cluster):
    admin, reps = make_cluster()
    with pytest.raises(GuardFailed, match="does not make it an owner"):
        reps["r3"].replica_write_insert(P, ROWS, "h1")  # r3's map: not an owner
    with pytest.raises(GuardFailed, match="pulled every log entry"):
        reps["r3"].replica_pull_log()
    admin.create(f"{LAYOUT.queue('r3')}/queue-", LogEntry(GET_PART, new_part_name="202401-5_7_7_0").format(),
                 sequential=True)
    node, _ = reps["r3"].queue()[0]
    with pytest.raises(GuardFailed, match="no replica has a part covering"):
        reps["r3"].replica_execute_entry(node)
    assert len(reps["r3"].queue()) == 1  # still queued, nothing half-done
    # an entry listed, then removed before it ran (another entry's execution took it out): the
    # guard e \in queue[r], not a NoNodeError out of the executor
    admin.delete(f"{LAYOUT.queue('r3')}/{node}")
    with pytest.raises(GuardFailed, match="no longer in r3's queue"):
        reps["r3"].replica_execute_entry(node)


def test_a_write_to_a_known_partition_costs_a_lock_multi_and_a_commit_multi(make_cluster):
    _, reps = make_cluster()
    reps["r1"].load_map()
    reps["r1"].replica_write_insert(P, ROWS, "h1")  # the first write may create block_numbers/{p}
    before = dict(reps["r1"].keeper.ops)
    reps["r1"].replica_write_insert(P, ROWS, "h2")
    spent = {k: v - before.get(k, 0) for k, v in reps["r1"].keeper.ops.items() if v != before.get(k, 0)}
    # The lock: Check, blocks/<id> created and deleted ("not exists"), block_numbers/{p}/block-N.
    # The commit: Check, blocks/<id>, log/, parts/, the lock's removal.
    assert spent == {"multi": 2, "multi_ops": 4 + 5}


def test_drop_partition_removes_its_range_everywhere_and_nothing_else(connect, tmp_path):
    """ALTER TABLE ... DROP PARTITION (issue 18: mutmut found DROP_RANGE checked only through rows
    after a clone). Each owner removes the partition's parts up to the range's last block, from disk
    and from replicas/{r}/parts, and the queued GET_PART of a part in the range (ClickHouse's
    removePartProducingOpsInRange); the other partition stays; the dropped blocks' ids are cleared,
    so the same INSERT sent again is written again, above the range."""
    from protocol.replica import client_drop_partition
    admin, reps = build_cluster(connect, tmp_path, load_maps=False)
    Q = "202402-5"
    admin.create(LAYOUT.assignment(Q), Assignment(("r1", "r2")).encode())
    for rep in reps.values():
        rep.load_map()
    r1, r2 = reps["r1"], reps["r2"]
    other = [{"date": "2024-02-15", "user_id": 21, "event": "view"}]
    r1.replica_write_insert(P, ROWS, "h1")
    r1.replica_write_insert(Q, other, "hq")
    drain(r1)
    drain(r2)
    later = [{"date": "2024-01-16", "user_id": 21, "event": "buy"}]
    assert r1.replica_write_insert(P, later, "h2") == f"{P}_1_1_0"  # the range's last block
    assert client_drop_partition(admin, LAYOUT, P, source_replica="r1") == 1
    drain(r1)   # r1 drops first: r2's GET_PART of P_1_1_0 then has no source and stays queued
    drain(r2)   # until r2's DROP_RANGE removes it
    for rep in (r1, r2):
        assert rep.has_rows_of(P) == [] and rep.has_rows_of(Q) == other
        assert [n for n in admin.get_children(LAYOUT.parts(rep.name)) if n.startswith(P)] == []
        assert f"{Q}_0_0_0" in admin.get_children(LAYOUT.parts(rep.name))
        assert rep.queue() == []
    assert r1.replica_write_insert(P, ROWS, "h1") == f"{P}_3_3_0"   # not "deduplicated"; block 2 was the drop's
    drain(r2)
    assert r2.has_rows_of(P) == ROWS


def test_alter_metadata_writes_columns_and_an_entry_of_the_same_version(make_cluster):
    # /columns and the ALTER_METADATA entry change in one multi: the entry carries the version the
    # columns znode has after it, the columns text as written there, and who ran the ALTER; two in
    # a row give versions 1 and 2, which every replica ends at.
    admin, reps = make_cluster()
    before = admin.get(LAYOUT.columns)[0].decode()
    first = client_alter_metadata(admin, LAYOUT, "`x` UInt8", source_replica="r1", clock=lambda: 1700000000)
    second = client_alter_metadata(admin, LAYOUT, "`y` UInt8", source_replica="r2", clock=lambda: 1700000001)
    data, stat = admin.get(LAYOUT.columns)
    assert data.decode() == before + "`x` UInt8\n`y` UInt8\n" == second.columns_str and stat.version == 2
    assert (first.alter_version, second.alter_version) == (1, 2) and first.columns_str == before + "`x` UInt8\n"
    assert (first.source_replica, second.source_replica, second.create_time) == ("r1", "r2", 1700000001)
    logged = [LogEntry.parse(admin.get(f"{LAYOUT.log}/{n}")[0]) for n in sorted(admin.get_children(LAYOUT.log))]
    assert [e.format() for e in logged] == [first.format(), second.format()]
    for rep in reps.values():
        drain(rep)
        assert rep.metadata_version == 2


def test_pull_log_says_what_it_pulled_and_reads_its_pointer_once(make_cluster):
    # log_pointer is read from Keeper at the first pull only: later pulls cost the entry's read and
    # the multi that moves the pointer (and queues the entry), no read of the pointer.
    admin, reps = make_cluster()
    r1, r2 = reps["r1"], reps["r2"]
    r1.load_map()
    r2.load_map()
    for h in ("h1", "h2"):
        r1.replica_write_insert(P, ROWS, h)
    first = r2.replica_pull_log()
    assert first == {"entry": LogEntry.parse(admin.get(f"{LAYOUT.log}/log-0000000000")[0]), "type": GET_PART,
                     "queued": True, "log": "log-0000000000"}
    before = dict(r2.keeper.ops)
    assert r2.replica_pull_log()["log"] == "log-0000000001"
    spent = {k: v - before.get(k, 0) for k, v in r2.keeper.ops.items() if v != before.get(k, 0)}
    assert spent == {"get": 1, "multi": 1, "multi_ops": 2}
    assert admin.get(LAYOUT.log_pointer("r2"))[0] == b"2"


def test_pull_log_moves_the_pointer_only_from_the_version_it_read(make_cluster):
    # Only the replica writes its log_pointer; a pointer changed under it (a second process of the
    # same replica) makes the pull fail, and the next pull reads the pointer again.
    admin, reps = make_cluster()
    r1, r2 = reps["r1"], reps["r2"]
    r1.load_map()
    for h in ("h1", "h2", "h3"):
        r1.replica_write_insert(P, ROWS, h)
    r2.replica_pull_log()
    admin.set(LAYOUT.log_pointer("r2"), b"2")      # the other process pulled entry 1 meanwhile
    with pytest.raises(MultiError):
        r2.replica_pull_log()
    assert admin.get(LAYOUT.log_pointer("r2"))[0] == b"2" and len(r2.queue()) == 1
    assert r2.replica_pull_log()["log"] == "log-0000000002"   # from the pointer read again


def test_a_pull_batch_is_the_pulls_one_by_one_in_one_multi(make_cluster, connect):
    # pullLogsToQueue: the entries from log_pointer on, kept or skipped by the same filter, in one
    # multi; the queue and the pointer end as the single pulls leave them. r2 owns P and pulls
    # one by one; r3 owns nothing of P and pulls the same log in batches of two and then one.
    admin, reps = make_cluster()
    r1, r2, r3 = reps["r1"], reps["r2"], reps["r3"]
    for r in (r1, r2, r3):
        r.load_map()
    for h in ("h1", "h2", "h3"):
        r1.replica_write_insert(P, ROWS, h)
    client_alter_metadata(admin, LAYOUT, "`x` UInt8", source_replica="r1")   # a global entry
    singles = [r2.replica_pull_log() for _ in range(4)]
    before = dict(r3.keeper.ops)
    batch = r3.replica_pull_logs(2)
    spent = {k: v - before.get(k, 0) for k, v in r3.keeper.ops.items() if v != before.get(k, 0)}
    assert spent.get("multi") == 1 and admin.get(LAYOUT.log_pointer("r3"))[0] == b"2"
    batch += r3.replica_pull_logs(100)
    assert [(e["log"], e["type"]) for e in batch] == [(e["log"], e["type"]) for e in singles]
    assert [e["queued"] for e in singles] == [True, True, True, True]
    assert [e["queued"] for e in batch] == [False, False, False, True]   # r3 keeps only the global entry
    assert admin.get(LAYOUT.log_pointer("r2"))[0] == admin.get(LAYOUT.log_pointer("r3"))[0] == b"4"
    assert [e.format() for _, e in r3.queue()] == [e.format() for _, e in r2.queue()][3:]
    with pytest.raises(GuardFailed, match="has pulled every log entry"):
        r3.replica_pull_logs(100)


def test_a_pull_batch_stops_before_entries_trimmed_under_it(make_cluster):
    # The numbers must follow one another: a gap (entries the cleanup thread removed) ends the
    # batch before it, and the next pull finds the replica lost, as a single pull would.
    admin, reps = make_cluster()
    r1 = reps["r1"]
    r1.load_map()
    for h in ("h1", "h2", "h3", "h4"):
        r1.replica_write_insert(P, ROWS, h)
    admin.delete(f"{LAYOUT.log}/log-0000000002")
    assert [e["log"] for e in reps["r2"].replica_pull_logs(100)] == ["log-0000000000", "log-0000000001"]
    with pytest.raises(GuardFailed, match="were removed before r2 pulled them"):
        reps["r2"].replica_pull_logs(100)


def test_the_queue_is_listed_each_time_and_each_entry_read_once(make_cluster):
    # A queue node is never rewritten: queue() lists the queue from Keeper every time (an entry
    # done or cleared by someone else is gone from it) and reads only the entries it has not seen.
    admin, reps = make_cluster()
    r1, r2 = reps["r1"], reps["r2"]
    r1.load_map()
    for h in ("h1", "h2", "h3"):
        r1.replica_write_insert(P, ROWS, h)
    r2.pull_whole_log()
    first = r2.queue()
    before = dict(r2.keeper.ops)
    assert r2.queue() == first
    spent = {k: v - before.get(k, 0) for k, v in r2.keeper.ops.items() if v != before.get(k, 0)}
    assert spent == {"get_children": 1}
    admin.delete(f"{LAYOUT.queue('r2')}/{first[0][0]}")   # executed or cleared elsewhere
    assert r2.queue() == first[1:]


def test_a_replica_whose_log_entries_were_trimmed_must_clone(make_cluster):
    admin, reps = make_cluster()
    r1 = reps["r1"]
    r1.load_map()
    for h in ("h1", "h2", "h3"):
        r1.replica_write_insert(P, ROWS, h)
    for n in ("log-0000000000", "log-0000000001"):   # as the cleanup thread trims a log r2 lags on
        admin.delete(f"{LAYOUT.log}/{n}")
    with pytest.raises(GuardFailed) as lost:
        reps["r2"].replica_pull_log()
    assert str(lost.value) == ("ReplicaPullLog: log entries 0..1 were removed before r2 pulled them: "
                               "it is lost and must clone")
    assert admin.get(LAYOUT.log_pointer("r2"))[0] == b"0" and reps["r2"].queue() == []


def test_a_commit_refused_after_the_lock_leaves_no_part_and_frees_the_number(make_cluster):
    # Between the block-number lock and the commit (where the entry's create_time is read) the
    # assignment changes: the commit's Check fails, the local part goes, the lock is released (a
    # gap no part will fill), the map is refreshed and the client told to retry elsewhere.
    admin, reps = make_cluster()
    r1 = reps["r1"]
    r1.load_map()
    r1.clock = lambda: (cas_update(admin, LAYOUT, P, lambda a: Assignment(("r2", "r3"), leaving="r1")), 0)[1]
    with pytest.raises(InsertRejected, match=f"assignment of {P} changed under r1; retry"):
        r1.replica_write_insert(P, ROWS, "h1")
    assert r1.store.names() == [] and admin.get_children(LAYOUT.block_numbers(P)) == []
    assert admin.get_children(LAYOUT.log) == [] and admin.get_children(LAYOUT.blocks) == []
    assert r1.cache[P].owners == ("r2", "r3")


def test_a_block_committed_by_another_owner_meanwhile_is_acknowledged_as_deduplicated(make_cluster):
    # The retry of the same block reached r2 and committed while r1 held its lock: r1's commit
    # fails on blocks/<id>, so r1 writes nothing and acknowledges.
    admin, reps = make_cluster()
    r1, r2 = reps["r1"], reps["r2"]
    r1.load_map()
    r2.load_map()
    r1.clock = lambda: (r2.replica_write_insert(P, ROWS, "h1"), 0)[1]
    assert r1.replica_write_insert(P, ROWS, "h1") == "deduplicated"
    assert r1.store.names() == [] and admin.get_children(LAYOUT.block_numbers(P)) == []
    [entry] = [LogEntry.parse(admin.get(f"{LAYOUT.log}/{n}")[0]) for n in admin.get_children(LAYOUT.log)]
    assert (entry.new_part_name, entry.block_id, entry.source_replica) == (f"{P}_1_1_0", f"{P}_h1", "r2")
    assert admin.get(f"{LAYOUT.blocks}/{P}_h1")[0] == f"{P}_1_1_0".encode()


def test_applied_alters_and_drops_survive_a_restart_on_the_same_disk(make_cluster):
    from protocol.replica import Replica, client_drop_partition
    admin, reps = make_cluster()
    r1, r2 = reps["r1"], reps["r2"]
    r1.load_map()
    r1.replica_write_insert(P, ROWS, "h1")
    client_alter_metadata(admin, LAYOUT, "`x` UInt8")
    client_drop_partition(admin, LAYOUT, P)
    r2.pull_whole_log()
    assert [r2.replica_execute_entry(n) for n, _ in r2.queue()] == [f"fetched {P}_0_0_0 from r1", "applied", "applied"]
    assert (r2.metadata_version, r2.dropped) == (1, {P: 0})
    again = Replica("r2", r2.keeper, LAYOUT, r2.store, r2.peers)   # the process restarted
    assert (again.metadata_version, again.dropped) == (1, {P: 0})


def test_a_map_refresh_publishes_its_version_only_when_it_changed(make_cluster):
    admin, reps = make_cluster()
    r1 = reps["r1"]
    assert r1.replica_refresh_cache(P).version == 0
    assert admin.get(LAYOUT.map_version("r1", P))[0] == b"0"
    before = dict(r1.keeper.ops)
    r1.replica_refresh_cache(P)
    assert r1.keeper.ops.get("set", 0) == before.get("set", 0)   # unchanged: nothing written
    cas_update(admin, LAYOUT, P, lambda a: Assignment(("r1", "r3")))
    assert r1.replica_refresh_cache(P).version == 1 and admin.get(LAYOUT.map_version("r1", P))[0] == b"1"
    assert r1.replica_refresh_cache("202409-5") is None and "202409-5" not in r1.cache   # not assigned


def test_pull_whole_log_counts_what_it_pulled(make_cluster):
    _, reps = make_cluster()
    reps["r1"].load_map()
    for h in ("h1", "h2", "h3"):
        reps["r1"].replica_write_insert(P, ROWS, h)
    assert reps["r3"].pull_whole_log() == 3 and reps["r3"].pull_whole_log() == 0


def test_an_alter_racing_another_is_refused_and_writes_nothing(make_cluster):
    # /columns is set at the version read: another ALTER between the read and the multi (where the
    # entry's create_time is read) makes this one fail, with no entry in the log.
    admin, reps = make_cluster()
    plain = client_alter_metadata(admin, LAYOUT, "`w` UInt8")
    assert plain.source_replica == ""          # an ALTER from a session that is no replica
    racing = lambda: (admin.set(LAYOUT.columns, admin.get(LAYOUT.columns)[0] + b"`y` UInt8\n"), 0)[1]  # noqa: E731
    with pytest.raises(MultiError):
        client_alter_metadata(admin, LAYOUT, "`x` UInt8", clock=racing)
    assert len(admin.get_children(LAYOUT.log)) == 1 and b"`x`" not in admin.get(LAYOUT.columns)[0]


def test_cleanup_drops_the_partitions_parts_znodes_and_queue_entries_and_nothing_else(make_cluster):
    admin, reps = make_cluster()
    Q = "202402-5"
    admin.create(LAYOUT.assignment(Q), Assignment(("r1", "r2")).encode())
    r1, r2 = reps["r1"], reps["r2"]
    for rep in (r1, r2):
        rep.load_map()
    r1.replica_write_insert(P, ROWS, "h1")
    r1.replica_write_insert(P, ROWS + ROWS, "h2")
    drain(r1)
    r1.replica_select_merge(P)
    drain(r1)
    assert sorted(r1.outdated) == [f"{P}_0_0_0", f"{P}_1_1_0"]
    r1.replica_write_insert(Q, [{"date": "2024-02-15", "user_id": 21, "event": "view"}], "hq")
    r1.replica_write_insert(P, ROWS, "h3")
    r1.pull_whole_log()                             # Q's and P's GET_PARTs queued, not executed
    r1.drop_partition_locally(P)
    assert r1.store.names(P) == [] and r1.outdated == {}
    assert [n for n in admin.get_children(LAYOUT.parts("r1")) if n.startswith(P)] == []
    assert [e.partition for _, e in r1.queue()] == [Q]


def test_a_replica_given_back_its_keeper_reads_reads_is_lost_anew(make_cluster):
    # Conformance rewinds Keeper and the replica's reads of it together (keeper_reads): is_lost,
    # read once at the first pull, must rewind too, or a replica whose later branch marked it lost
    # refuses to pull on every branch after it.
    admin, reps = make_cluster()
    for rep in reps.values():
        rep.load_map()
    r1 = reps["r1"]
    before = r1.keeper_reads()
    admin.set(LAYOUT.is_lost("r1"), b"1")   # a branch where the cleanup thread marked it lost
    with pytest.raises(GuardFailed, match="is lost"):
        r1.replica_pull_logs()
    admin.set(LAYOUT.is_lost("r1"), b"0")   # Keeper back where the reads were taken
    r1.restore_keeper_reads(before)
    reps["r2"].replica_write_insert(P, ROWS, "h1")
    drain(r1)
    assert r1.has_rows_of(P) == ROWS
