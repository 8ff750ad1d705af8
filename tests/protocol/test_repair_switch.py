"""A repair's outcome (spec RepairOutcomeProp): its SWITCH adds exactly one owner, its target, and
removes no one, so the partition SYSTEM DROP REPLICA left one owner short is back at RF. With
repair_moves_coordinator the SWITCH takes the repair's coordinator for a source, as PR #102244's
phase 1 does (PR-F9): the partition stays one owner short, the coordinator leaving it."""

from __future__ import annotations

import random

import pytest

from protocol.assignment import read_assignment
from protocol.keeper import MemoryEnsemble
from protocol.migration import read_migration
from protocol.repair import short_partitions
from reference.cluster import Cluster
from reference.workload import blocks


def _repair_switched(tmp_path, bugs=frozenset()):
    """A cluster of four replicas whose r1 was lost for good, one repair run to its SWITCH: (cluster,
    partition, owners before the SWITCH, the migration as the SWITCH found it)."""
    c = Cluster(MemoryEnsemble().connect, tmp_path / "data", replicas=("r1", "r2", "r3", "r4"), seed=1, bugs=bugs)
    c.load(blocks(random.Random(1), 12, 3, months=1))
    c.settle()
    c.crash_replica("r1")
    c.drop_replica("r1")
    p, _, dst = c.repair()[0]
    before = read_assignment(c.admin, c.layout, p).owners
    assert len(before) == c.table.replication_factor - 1
    while (mig := read_migration(c.admin, c.layout, p)[0])["state"] == "clone":
        c.background_step()
    assert mig["dst"] == dst
    return c, p, set(before), mig


def test_a_repairs_switch_adds_its_target_and_removes_no_one(tmp_path):
    c, p, before, mig = _repair_switched(tmp_path)
    try:
        a = read_assignment(c.admin, c.layout, p)
        assert set(a.owners) == before | {mig["dst"]} and len(a.owners) == c.table.replication_factor
        assert mig["state"] == "done" and mig["src"] is None and a.leaving is None
        assert p in {x["partition_id"] for x in c.history.tables["repairs"]}   # the history's record of it
    finally:
        c.close()


@pytest.mark.parametrize("bugs", [frozenset({"repair_moves_coordinator"})])
def test_repair_moves_coordinator_leaves_the_partition_one_owner_short(tmp_path, bugs):
    c, p, before, mig = _repair_switched(tmp_path, bugs)
    try:
        a = read_assignment(c.admin, c.layout, p)
        coord = mig["coord"]
        assert coord in before
        assert set(a.owners) == (before - {coord}) | {mig["dst"]}
        assert len(a.owners) == c.table.replication_factor - 1          # the repair repaired nothing
        assert mig["state"] == "switched" and mig["src"] == coord and a.leaving == coord
        c.settle()   # the coordinator's CLEANUP: it leaves, and the partition is short still
        assert p in short_partitions(c.admin, c.layout)
    finally:
        c.close()
