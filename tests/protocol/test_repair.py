"""A replica lost for good and the repair back to RF (issue 18; spec/FINDINGS.md F20): SYSTEM DROP
REPLICA takes a dead replica out of every assignment, the repair CLONEs each partition it owned to
another replica and SWITCHes it in without removing anyone. On both Keeper backends; each run's
history is checked by the oracle (no acknowledged row lost or duplicated, every partition back
to RF complete owners)."""

from __future__ import annotations

import random

import pytest

from checkers.oracle import violations
from protocol.assignment import GuardFailed, read_assignment
from protocol.migration import coordinator_cancel, read_migration
from protocol.repair import ReplicaIsActive, drop_replica, short_partitions
from reference.cluster import Cluster
from reference.workload import blocks


def _cluster(connect, tmp_path, seed=1, replicas=("r1", "r2", "r3", "r4"), **kw) -> Cluster:
    c = Cluster(connect, tmp_path / "data", replicas=replicas, seed=seed, **kw)
    c.load(blocks(random.Random(seed), 12, 3, months=1))
    c.settle()
    return c


def _assignments(c: Cluster) -> dict:
    return {p: read_assignment(c.admin, c.layout, p) for p in c.admin.get_children(c.layout.assignments)}


def _owned_by(c: Cluster, r: str) -> list[str]:
    return sorted(p for p, a in _assignments(c).items() if r in a.owners)


def _back_to_rf_and_clean(c) -> None:
    """Settled: no partition short of RF, and the history (a last query and snapshot) holds."""
    c.settle()
    assert short_partitions(c.admin, c.layout) == []
    c.query()
    c.snapshot()
    assert violations(c.history, 2) == []


def test_a_replica_lost_for_good_is_dropped_and_its_partitions_repaired(connect, tmp_path):
    c = _cluster(connect, tmp_path)
    try:
        had = _owned_by(c, "r2")
        assert had
        c.crash_replica("r2")
        left = c.drop_replica("r2")
        assert sorted(left) == had
        assert c.admin.exists(c.layout.replica("r2")) is None          # its subtree is gone
        assert all("r2" not in a.keepers() for a in _assignments(c).values())
        assert sorted(short_partitions(c.admin, c.layout)) == had        # each short by one, until repaired
        moves = c.rebalance()
        c.settle()
        assert sorted(p for p, src, _ in moves if src is None) == had     # one repair per partition it owned
        assert short_partitions(c.admin, c.layout) == []
        for a in _assignments(c).values():
            assert len(a.owners) == 2 and set(a.owners) <= set(c.replicas) and a.leaving is None
        for _ in range(3):
            assert c.query() is not None
        c.snapshot()
        assert violations(c.history, 2) == []
        with pytest.raises(ValueError, match="dropped for good"):
            c.add_replica("r2")
    finally:
        c.close()


def test_drop_replica_refuses_an_active_replica_and_an_unknown_one(connect, tmp_path):
    c = _cluster(connect, tmp_path, replicas=("r1", "r2", "r3"))
    try:
        with pytest.raises(ReplicaIsActive, match="'r2' is active"):
            drop_replica(c.admin, c.layout, "r2")
        with pytest.raises(GuardFailed, match="no replica 'r9'"):
            drop_replica(c.admin, c.layout, "r9")
        with pytest.raises(ValueError, match="is active"):
            c.drop_replica("r1")
        with pytest.raises(ValueError, match="unknown replica 'r9'"):
            c.drop_replica("r9")
        assert all(len(a.owners) == 2 for a in _assignments(c).values())   # nothing changed
    finally:
        c.close()


def test_repair_without_clone_leaves_the_new_owner_without_the_past(connect, tmp_path):
    """The naive repair (spec MCRepair_repair_without_clone): the new owner is left to the log,
    whose entries of the partition below its log_pointer it skipped, so it never gets the rows."""
    c = _cluster(connect, tmp_path, bugs={"repair_without_clone"})
    try:
        c.crash_replica("r2")
        c.drop_replica("r2")
        c.rebalance()
        c.settle()
        assert short_partitions(c.admin, c.layout) == []      # back to RF owners on paper
        for _ in range(4):
            c.query()
        c.snapshot()
        found = violations(c.history, 2)
        assert any(v.startswith("OwnersCompleteInv") for v in found), found
        assert any(v.startswith("ReplicationFactorInv") and "complete on 1" in v for v in found), found
        # the variant loses the past by design, and nothing else: none of its steps raised
        assert not any(v.startswith("NoLogicalErrorsInv") for v in found), found
    finally:
        c.close()


def test_a_move_whose_source_is_dropped_goes_on_as_a_repair(connect, tmp_path):
    """REASSIGN away from an owner that then dies for good: the CLONE in flight loses its source
    and its SWITCH only adds the target (spec MCRepairDuringMigration)."""
    c = _cluster(connect, tmp_path, replicas=("r1", "r2", "r3"))
    try:
        p = next(p for p, a in _assignments(c).items() if set(a.owners) == {"r1", "r2"})
        c.reassign(p, "r3", src="r2")
        c.crash_replica("r2")
        c.drop_replica("r2")
        mig = read_migration(c.admin, c.layout, p)[0]
        assert mig["state"] == "clone" and mig["src"] is None and mig["dst"] == "r3"
        with pytest.raises(GuardFailed, match="repair"):
            coordinator_cancel(c.admin, c.layout, p)
        c.settle()   # a taker-over coordinates it (r2 was the coordinator), the target fetches, SWITCH
        a = read_assignment(c.admin, c.layout, p)
        assert set(a.owners) == {"r1", "r3"} and a.leaving is None
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "done"
        c.rebalance()
        _back_to_rf_and_clean(c)
    finally:
        c.close()


def test_a_clone_into_a_dropped_replica_is_cancelled_and_the_partition_keeps_its_owners(connect, tmp_path):
    c = _cluster(connect, tmp_path, replicas=("r1", "r2", "r3"))
    try:
        p = next(p for p, a in _assignments(c).items() if set(a.owners) == {"r1", "r2"})
        c.reassign(p, "r3", src="r1")
        c.crash_replica("r3")
        c.drop_replica("r3")
        a = read_assignment(c.admin, c.layout, p)
        assert set(a.owners) == {"r1", "r2"} and a.target is None
        assert read_migration(c.admin, c.layout, p)[0]["state"] == "cancelled"
        c.rebalance()   # r3's own partitions are short: repaired onto the one replica left to take them
        _back_to_rf_and_clean(c)
    finally:
        c.close()
