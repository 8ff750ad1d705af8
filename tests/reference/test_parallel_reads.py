"""Parallel replicas over the reference (protocol/parallel_replicas.py, reference/parallel_reads.py;
spec/parallel_replicas/, F24 and PR-F11), judged by the oracle on the recorded history as any
query is: ClickHouse master's coordinator answers a selective table with one replica's partitions
(PR-F11), the 2023 union answers short when a partition's owners are all down (F24), and the fix
holds on both, failing the query instead of answering short."""

import random

import pytest

from checkers.oracle import violations
from protocol.assignment import GuardFailed
from protocol.keeper import MemoryEnsemble
from protocol.parallel_replicas import overlap, pr_announce, pr_read, pr_start
from protocol.parts import PartName
from reference.cluster import Cluster
from reference.workload import blocks


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(MemoryEnsemble().connect, tmp_path / "data", replicas=("r1", "r2", "r3"), seed=5)
    for block_id, rows in blocks(random.Random(5), 12, 4, months=1):
        c.insert(rows, block_id)
    c.settle()
    yield c
    c.close()


def _partitions_without(c, name):
    return [p for p, a in sorted(c.replicas[name].cache.items()) if name not in a.owners]


def _missed(c):
    c.snapshot()
    return [v for v in violations(c.history, 2) if "missed row" in v]


def test_masters_coordinator_answers_with_the_first_announcers_partitions(cluster):
    """PR-F11: every replica up, at rest; the answer is the partitions of whoever announced first."""
    assert all(_partitions_without(cluster, r) for r in cluster.replicas)   # RF 2 of 3: each lacks some
    q = cluster.parallel_query(at="r1", coordinator="snapshot_replica")
    first = q.snapshot_replica
    assert set(q.rows) == set(cluster.replicas[first].cache) - set(_partitions_without(cluster, first))
    missed = _missed(cluster)
    assert missed and all(any(f" of {p}," in m for p in _partitions_without(cluster, first)) for m in missed)


@pytest.mark.parametrize("coordinator", ["union", "partition_snapshot"])
def test_every_replica_up_the_union_and_the_fix_answer_the_whole_table(cluster, coordinator):
    for at in ("r1", "r2", "r3"):
        q = cluster.parallel_query(at=at, coordinator=coordinator)
        assert q is not None and q.stuck() is False
    assert _missed(cluster) == []
    assert [v for v in violations(cluster.history, 2) if "QueryNoDuplicate" in v or "times" in v] == []


@pytest.mark.parametrize("coordinator, answered", [("union", True), ("partition_snapshot", False)])
def test_both_owners_down_the_union_answers_short_and_the_fix_fails_the_query(cluster, coordinator, answered):
    """F24 (MCPRSelective_union): the union reads what the one replica up has; the fix fails."""
    cluster.crash_replica("r1")
    cluster.crash_replica("r2")
    q = cluster.parallel_query(at="r3", coordinator=coordinator)
    assert (q is not None) == answered
    assert bool(_missed(cluster)) == answered
    statuses = [x["status"] for x in cluster.history.tables["queries"]]
    assert statuses == ["complete" if answered else "failed"]


def test_the_fix_holds_across_migrations_with_announcements_between_their_steps(cluster):
    """MCPRMigration: queries on two of three replicas, background steps (CLONE, SWITCH, CLEANUP,
    merges) between every announcement and read, while a partition moves and rows arrive."""
    rng = random.Random(11)
    for i, (block_id, rows) in enumerate(blocks(rng, 6, 3, months=1)):
        p = sorted(cluster.replicas["r1"].cache)[i % 3]
        a = cluster.replicas["r1"].cache[p]
        dst = next(r for r in ("r1", "r2", "r3") if r not in a.owners)
        try:
            cluster.reassign(p, dst)
        except Exception:   # noqa: BLE001 - a partition still migrating is refused: the query still runs
            pass
        cluster.insert(rows, f"m{block_id}")
        for at in ("r1", "r2", "r3"):
            cluster.parallel_query(at=at, coordinator="partition_snapshot", max_parallel_replicas=2, interleave=6)
    cluster.settle()
    complete = [x for x in cluster.history.tables["queries"] if x["status"] == "complete"]
    assert len(complete) >= 9
    assert _missed(cluster) == []


def test_a_part_is_read_only_by_a_replica_that_announced_it_and_only_once(cluster):
    rep = cluster.replicas
    q = pr_start(rep["r1"], sorted(rep), 3, "union", random.Random(0))
    pr_announce(q, rep["r1"])
    part = q.unread()[0]
    other = next(r for r in ("r2", "r3") if part not in {n for n in rep[r].store.names()})
    pr_announce(q, rep[other])
    with pytest.raises(GuardFailed):
        pr_read(q, part, other)
    pr_read(q, part, "r1")
    with pytest.raises(GuardFailed):
        pr_read(q, part, "r1")


def test_overlap_is_merge_tree_part_infos_not_disjoint():
    a, merged, b = PartName("202401-5", 1, 1, 0), PartName("202401-5", 1, 2, 1), PartName("202401-5", 2, 2, 0)
    assert overlap(a, merged) and overlap(merged, b) and not overlap(a, b)
    assert overlap(a, PartName("202401-5", 1, 1, 0, 7))   # a mutation of it
    assert not overlap(a, PartName("202401-6", 1, 1, 0))


@pytest.mark.parametrize("coordinator", ["union", "partition_snapshot"])
def test_a_migration_between_two_announcements(cluster, coordinator):
    """F24's window, driven (MCPRMigration_union's trace): the target announces before its CLONE
    fetched, the source after its CLEANUP. The union answers without the partition; the fix
    fails the query (neither announcer owned it when it announced)."""
    from protocol.parallel_replicas import pr_finish

    c = cluster
    p = next(p for p, a in sorted(c.replicas["r1"].cache.items()) if "r1" in a.owners and "r3" not in a.owners)
    want = {int(x["row_id"]) for x in c.replicas["r1"].has_rows_of(p)}
    c.reassign(p, "r3", src="r1")
    q = pr_start(c.replicas["r1"], ["r1", "r3"], 2, coordinator, random.Random(0))
    pr_announce(q, c.replicas["r3"])            # before the CLONE fetched anything
    c.settle()                                    # CLONE, SWITCH, every map, CLEANUP on r1
    assert p not in {n.partition for n in c.replicas["r1"].store.names()}
    pr_announce(q, c.replicas["r1"])            # after its CLEANUP
    for part in q.unread():
        pr_read(q, part, next(r for r in sorted(q.live) if part in q.announced[r].parts))
    if coordinator == "union":
        assert want and not {int(x["row_id"]) for x in pr_finish(q).get(p, [])}
    else:
        assert q.stuck() and p in q.unserved()
        with pytest.raises(GuardFailed, match=p):
            pr_finish(q)


def test_a_query_fails_only_when_it_cannot_be_answered_whole(cluster):
    """PRFail's guard: refused while every part can be read and every partition was served."""
    from protocol.parallel_replicas import pr_fail, pr_lost

    rep = cluster.replicas
    q = pr_start(rep["r1"], sorted(rep), 3, "partition_snapshot", random.Random(0))
    for name in ("r1", "r2", "r3"):
        pr_announce(q, rep[name])
    with pytest.raises(GuardFailed):
        pr_fail(q)
    for name in ("r1", "r2", "r3"):
        pr_lost(q, name)   # every announcer gone: the working set cannot be read
    pr_fail(q)
    assert q.failed
