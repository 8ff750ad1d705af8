"""PR #102244's design on the reference (`--design pr102244`): each finding of spec/FINDINGS.md,
section "PR #102244", driven step by step as its counterexample reads, shows its invariant
broken with the switch on and kept with it off, on both Keeper backends."""

import random

import pytest

from checkers.pr102244_live import no_acked_block_lost, no_duplicate_rows, owners_complete, replication_factor
from protocol.assignment import GuardFailed
from protocol.insert import InsertOutcomeUnknown, sub_block_hash
from protocol.pr102244.assignment import ensure_partition_assignment, read_assignment
from protocol.pr102244.insert import write_insert
from protocol.pr102244.migration import done, read_migrations, signal_complete, start_clone, switch, write_clone_entries
from protocol.query import client_start_query, replica_read_partition
from protocol.table import Table
from reference.pr102244.cluster import PRCluster
from reference.workload import WORKLOAD

P = "202401-5"   # 2024-01-15, user 5


def cluster(connect, tmp_path, rf, bugs=(), readings=()):
    table = Table(WORKLOAD.name, WORKLOAD.columns, WORKLOAD.partition_by, WORKLOAD.order_by, replication_factor=rf)
    c = PRCluster(connect, tmp_path, ("r1", "r2", "r3"), table=table, bugs=frozenset(bugs), readings=readings)
    ensure_partition_assignment(c.admin, c.layout, P, rf)   # InitOwners: the lowest counts, r1 (and r2)
    for rep in c.replicas.values():
        rep.refresh_view(P)
    return c


def write(c, r, row_id, acked):
    """WriteInsert(r, b): a one-row block committed on r (its cache must be current: the CAS check)."""
    rows = [{"date": "2024-01-15", "user_id": 5, "row_id": row_id, "event": "view"}]
    c.replicas[r].replica_write_insert(P, rows, sub_block_hash(P, rows))
    acked[row_id] = P


def settle(c):
    c.settle()
    return c


def only_migration(c):
    (m,) = read_migrations(c.admin, c.layout)
    return m


def drain_queue(rep):
    for node, _ in rep.queue():
        try:
            rep.replica_execute_entry(node)
        except GuardFailed:
            pass


# --- PR-F1: source_parts_snapshot lists only the source's parts -----------------------------

@pytest.mark.parametrize("bugs", [{"snapshot_source_parts", "complete_without_rescan"}, {"complete_without_rescan"}],
                         ids=["as_written", "fixed"])
def test_pr_f1_snapshot_of_the_source_only(connect, tmp_path, bugs):
    c = cluster(connect, tmp_path, 2, bugs)
    acked = {}
    try:
        write(c, "r1", 1, acked)                       # 1. committed on r1, GET_PART in the log
        c.replicas["r3"].pull()                        # 2. r3 skips it; r2 has not fetched it
        assert c.replicas["r3"].queue() == []
        m = start_clone(c.admin, c.layout, P, "r2", "r3", "r1", c.bugs)   # 3. snapshot of r2's parts
        written = write_clone_entries(c.admin, c.layout, m, "r1")
        r3 = c.replicas["r3"]
        r3.pull_whole_log()
        drain_queue(r3)
        signal_complete(r3, m)                         # 4. clone_complete
        switch(c.admin, c.layout, m, "r1", c.bugs)     # 5. assignment r1, r3
        assert read_assignment(c.admin, c.layout, P).owners == ("r1", "r3")
        settle(c)
        broken = owners_complete(c, acked)
        if "snapshot_source_parts" in bugs:
            assert written == 0 and broken == [f"owner r3 of {P} lacks rows [1] and nothing will bring them"]
        else:
            assert written == 1 and broken == []
            assert 1 in {int(x["row_id"]) for n in r3.store.names(P) for x in r3.store.read(n)}
    finally:
        c.close()


# --- PR-F2: SWITCH on clone_complete, and a source that stops and drops at once -------------

@pytest.mark.parametrize("bugs", [{"source_stops_at_switch", "complete_without_rescan"}, {"complete_without_rescan"}],
                         ids=["as_written", "fixed"])
def test_pr_f2_block_lost_at_rf1(connect, tmp_path, bugs):
    c = cluster(connect, tmp_path, 1, bugs)
    acked = {}
    try:
        m = start_clone(c.admin, c.layout, P, "r1", "r2", "r1", c.bugs)   # 1. r1, r2:cloning; empty snapshot
        c.replicas["r1"].refresh_view(P)
        write(c, "r1", 1, acked)                                       # 2. committed on r1, not pulled by r2
        write_clone_entries(c.admin, c.layout, m, "r1")                # 3. nothing to write; clone_complete
        signal_complete(c.replicas["r2"], m)
        switch(c.admin, c.layout, m, "r1", c.bugs)                     # 4. assignment r2
        r1 = c.replicas["r1"]
        r1.refresh_view(P)                                             # 5. r1 not assigned: drops its parts
        if "source_stops_at_switch" in bugs:
            done(c.admin, c.layout, m, "r1", c.bugs)
            r1.drop_unassigned(P)
            settle(c)                                                  # 6. r2 can fetch from no one
            assert no_acked_block_lost(c, acked) == [f"row 1 of {P} is on no replica"]
        else:
            with pytest.raises(GuardFailed, match="pulled the log past the SWITCH"):
                done(c.admin, c.layout, m, "r1", c.bugs)
            with pytest.raises(GuardFailed, match="still keeps"):
                r1.drop_unassigned(P)                                  # leaving: the SWITCH is not DONE
            settle(c)
            assert no_acked_block_lost(c, acked) == [] and owners_complete(c, acked) == []
            assert read_migrations(c.admin, c.layout) == {} and r1.store.names(P) == []   # DONE, then dropped
    finally:
        c.close()


@pytest.mark.parametrize("bugs", [{"source_stops_at_switch", "complete_without_rescan"}, {"complete_without_rescan"}],
                         ids=["as_written", "fixed"])
def test_pr_f2_stale_cache_reads_the_stopped_source(connect, tmp_path, bugs):
    c = cluster(connect, tmp_path, 2, bugs)
    acked = {}
    try:
        m = start_clone(c.admin, c.layout, P, "r1", "r3", "r1", c.bugs)   # 1. r1, r2, r3:cloning
        c.replicas["r2"].refresh_view(P)
        write(c, "r2", 1, acked)                                         # 2. committed on r2
        write_clone_entries(c.admin, c.layout, m, "r1")
        signal_complete(c.replicas["r3"], m)                             # 3. empty snapshot: complete; SWITCH
        switch(c.admin, c.layout, m, "r1", c.bugs)
        r1 = c.replicas["r1"]
        r1.refresh_view(P)
        r1.pull_whole_log()                                              # r1 pulls the block's GET_PART
        drain_queue(r1)
        q = client_start_query(c.replicas["r3"], replicas=c.replicas,    # 4. a cache still says r1, r2
                               choose=lambda at, owners: "r1")
        assert q.routes == {P: "r1"}
        rows = replica_read_partition(q, P, c.replicas)
        if "source_stops_at_switch" in bugs:
            assert rows == []      # QueryNoMissingInv: r1 skipped the GET_PART, the row is missed
        else:
            assert [x["row_id"] for x in rows] == [1]   # leaving: r1 kept replicating p
    finally:
        c.close()


# --- PR-F3: two migrations of one partition, SWITCH on fresh versions -----------------------

@pytest.mark.parametrize("bugs", [{"second_migration_allowed", "switch_fresh_version", "complete_without_rescan"},
                                  {"second_migration_allowed", "complete_without_rescan"}],
                         ids=["as_written", "fixed"])
def test_pr_f3_two_migrations_switch_fresh(connect, tmp_path, bugs):
    c = cluster(connect, tmp_path, 1, bugs)
    try:
        a = start_clone(c.admin, c.layout, P, "r1", "r2", "r1", c.bugs, mig_id="a")   # 1. A: r1 -> r2
        b = start_clone(c.admin, c.layout, P, "r1", "r3", "r1", c.bugs, mig_id="b")   #    B: r1 -> r3
        assert read_assignment(c.admin, c.layout, P).cloning == ("r2", "r3")
        for m, t in ((a, "r2"), (b, "r3")):
            write_clone_entries(c.admin, c.layout, m, "r1")
            signal_complete(c.replicas[t], m)
        if "switch_fresh_version" not in bugs:   # fixed: A's SWITCH checks the version CLONE A left
            with pytest.raises(GuardFailed, match="as CLONE left it"):
                switch(c.admin, c.layout, a, "r1", c.bugs)
        switch(c.admin, c.layout, a if "switch_fresh_version" in bugs else b, "r1", c.bugs)   # 2. one SWITCH
        if "switch_fresh_version" in bugs:
            switch(c.admin, c.layout, b, "r1", c.bugs)  # 3. B's fresh read passes: r1 removed again
            assert read_assignment(c.admin, c.layout, P).owners == ("r2", "r3")
            assert replication_factor(c) == [f"{P} has owners ['r2', 'r3'], replication_factor 1",
                                              "counts/r1 is -1, the assignments list it 0 times"]
        else:
            with pytest.raises(GuardFailed, match="as CLONE left it"):
                switch(c.admin, c.layout, a, "r1", c.bugs)   # the other one must fail
            assert replication_factor(c) == []
    finally:
        c.close()


@pytest.mark.parametrize("bugs", [{"second_migration_allowed", "switch_fresh_version"}, {"switch_fresh_version"}],
                         ids=["second_allowed", "second_refused"])
def test_pr_f3_the_other_fix_refuses_a_second_clone(connect, tmp_path, bugs):
    c = cluster(connect, tmp_path, 1, bugs)
    try:
        start_clone(c.admin, c.layout, P, "r1", "r2", "r1", c.bugs)
        if "second_migration_allowed" in bugs:
            start_clone(c.admin, c.layout, P, "r1", "r3", "r1", c.bugs)
            assert len(read_migrations(c.admin, c.layout)) == 2
        else:
            with pytest.raises(GuardFailed, match="already has a :cloning entry"):
                start_clone(c.admin, c.layout, P, "r1", "r3", "r1", c.bugs)
    finally:
        c.close()


# --- PR-F4: (reading filter_cached) the target skips GET_PARTs written after CLONE -----------

@pytest.mark.parametrize("bugs", [{"complete_without_rescan"}, set()], ids=["as_written", "fixed"])
def test_pr_f4_cached_filter_skips_the_targets_entries(connect, tmp_path, bugs):
    c = cluster(connect, tmp_path, 2, bugs, readings={"filter_cached"})
    acked = {}
    try:
        m = start_clone(c.admin, c.layout, P, "r1", "r3", "r1", c.bugs)   # 1. snapshot: all registered (none)
        c.replicas["r1"].refresh_view(P)
        write(c, "r1", 1, acked)                                         # 2. after CLONE
        r3 = c.replicas["r3"]
        r3.pull_whole_log()                                              # its cache predates CLONE: skipped
        assert r3.queue() == []
        write_clone_entries(c.admin, c.layout, m, "r1")
        r3.refresh_view(P)
        if bugs:
            signal_complete(r3, m)                                       # 3. the (empty) snapshot: complete
        else:
            with pytest.raises(GuardFailed, match="not rescanned"):
                signal_complete(r3, m)
        settle(c)                                                        # SWITCH, DONE (fixed: rescan first)
        assert read_assignment(c.admin, c.layout, P).owners == ("r2", "r3")
        broken = owners_complete(c, acked)
        assert broken == ([f"owner r3 of {P} lacks rows [1] and nothing will bring them"] if bugs else [])
    finally:
        c.close()


# --- PR-F5: (reading filter_cached) a cached "no assignment" skips the first GET_PART ------------

def bare_cluster(connect, tmp_path, rf, bugs=(), readings=()):
    """No assignment node yet (PR102244Whole's InitOwners {}): every cache holds the partition as
    unassigned, as a RefreshView before the first INSERT leaves it."""
    table = Table(WORKLOAD.name, WORKLOAD.columns, WORKLOAD.partition_by, WORKLOAD.order_by, replication_factor=rf)
    c = PRCluster(connect, tmp_path, ("r1", "r2", "r3"), table=table, bugs=frozenset(bugs), readings=readings)
    for rep in c.replicas.values():
        assert rep.refresh_view(P) is None and P in rep.absent
    return c


@pytest.mark.parametrize("bugs", [{"filter_negative_cache"}, set()], ids=["as_written", "fixed"])
def test_pr_f5_negative_cache_entry_skips_the_first_get_part(connect, tmp_path, bugs):
    c = bare_cluster(connect, tmp_path, 2, bugs, readings={"filter_cached"})
    acked = {}
    try:
        r1, r2 = c.replicas["r1"], c.replicas["r2"]
        a = ensure_partition_assignment(r1.keeper, c.layout, P, 2)   # 1. the first INSERT on r1: r1, r2
        assert a.owners == ("r1", "r2") and c.counts() == {"r1": 1, "r2": 1, "r3": 0}
        r1.learn(P, a)
        write(c, "r1", 1, acked)                                     # 2. committed on r1, GET_PART in the log
        r2.pull()                                                    # 3. r2's cache: p1 with no assignment
        if bugs:
            assert r2.queue() == [] and P in r2.absent               #    skipped, for good
            settle(c)
            assert owners_complete(c, acked) == [f"owner r2 of {P} lacks rows [1] and nothing will bring them"]
        else:
            assert [e.partition for _, e in r2.queue()] == [P]      #    cold: Keeper read, kept
            settle(c)
            assert owners_complete(c, acked) == [] and no_acked_block_lost(c, acked) == []
    finally:
        c.close()


# --- O7's other reading (retry_new_block_id): a forwarded block retried under a new block id ----

@pytest.mark.parametrize("bugs", [{"retry_new_block_id"}, set()], ids=["as_written", "fixed"])
def test_retry_of_a_forwarded_block_with_a_new_block_id_duplicates_it(connect, tmp_path, bugs):
    c = cluster(connect, tmp_path, 2, bugs)   # p on r1, r2; r3 forwards
    try:
        lost = []

        def lose_the_first_reply(where, partition):   # the owner wrote; its answer never reaches r3
            if where == "after_write" and not lost:
                lost.append(partition)
                raise InsertOutcomeUnknown(f"connection broken {where} of {partition}")

        rows = [{"date": "2024-01-15", "user_id": 5, "row_id": 1, "event": "view"}]
        written = write_insert(c.replicas["r3"], c.table, P, rows, c.replicas, random.Random(0),
                               lose_the_first_reply)          # 1. forwarded, committed, reply lost; 2. retried
        assert lost == [P]
        settle(c)
        if bugs:
            assert written != "deduplicated"                  # the retry's new id: committed again
            assert no_duplicate_rows(c) == [f"{r} holds row 1 of {P} 2 times" for r in ("r1", "r2")]
        else:
            assert written == "deduplicated"                  # the same id: blocks/ knew it
            assert no_duplicate_rows(c) == [] and owners_complete(c, {1: P}) == []
    finally:
        c.close()


def test_a_client_insert_into_an_assigned_partition_goes_through_the_sink(connect, tmp_path):
    """Cluster.insert on the PR's design, into a partition already assigned (its znode the PR's
    format, not the RFC's JSON): the rows land on both owners and nothing is recorded in
    insert_refusals, whose write path (history/refusals.py) is the RFC design's. The CLI's
    `--design pr102244` runs died here when the base Cluster read the PR's znode as JSON."""
    c = cluster(connect, tmp_path, 2)
    try:
        rows = [{"date": "2024-01-15", "user_id": 5, "row_id": i, "event": "view"} for i in (1, 2)]
        assert c.insert(rows, "block-1") == {P: "ok"}
        settle(c)
        assert all({r["row_id"] for r in c.replicas[o].has_rows_of(P)} == {1, 2} for o in ("r1", "r2"))
        assert c.history.tables["insert_refusals"] == []
    finally:
        c.close()


def test_a_rebalance_whose_clones_wait_on_a_down_replica_ends_and_retries_nothing_it_timed_out(tmp_path):
    """A replica goes down before the others fetched its last parts: a CLONE of its partitions
    from a surviving owner cannot complete, and times out. The rebalancer plans other moves and
    then stops, naming the ones that timed out, instead of planning the same CLONE first every
    cycle for ever (`reference run --design pr102244 --crash r2 --restart r2 --rebalance
    --add-replicas 1` hit 'rebalance did not finish in 1000 rounds'); with the replica back,
    nothing acknowledged is lost."""
    from checkers.oracle import violations
    from protocol.keeper import MemoryEnsemble
    from reference.workload import blocks

    # In memory only: the timeouts are counted in coordinator polls, and a whole rebalance of
    # them takes minutes on ZooKeeper through the same code.
    connect = MemoryEnsemble().connect

    table = Table(WORKLOAD.name, WORKLOAD.columns, WORKLOAD.partition_by, WORKLOAD.order_by, replication_factor=2)
    said = []
    c = PRCluster(connect, tmp_path, ("r1", "r2", "r3"), table=table, clone_timeout=5, log=said.append, seed=0)
    try:
        c.load(list(blocks(random.Random(0), 12, 10, 1)))   # not settled: r2's last parts only on r2
        c.crash_replica("r2")
        c.add_replica("r4")
        moves = c.rebalance()
        timed_out = [line for line in said if "CLONE timed out" in line]
        stop = [line for line in said if line.startswith("rebalancer: stops")]
        assert timed_out and len(stop) == 1, said[-5:]
        failed = {line.split(" of ")[1].split(":")[0] for line in timed_out}
        # each partition timed out once at most: none was planned again in this rebalance
        assert len(failed) == len(timed_out) and all(p in stop[0] for p in failed)
        assert len(moves) > len(failed)   # and the others moved
        assert violations_of(c, violations) == []
    finally:
        c.close()


def violations_of(c, violations):
    c.add_replica("r2")
    c.settle()
    c.snapshot()
    return violations(c.history, c.table.replication_factor)
