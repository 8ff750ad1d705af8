"""reference/pr102244/code_cluster.py: the runtime's PR design driven as the PR's code drives its
migrations (a decision one step, its write the next; the monitor's driver dies with its process;
a CLONE times out on the driver's clock). Random runs: the fixed code holds, the code as it is
loses rows; the Spark job's verdict on such runs is tests/checkers/test_spark_pr102244.py's."""

import random

import pytest

from checkers.oracle import violations
from checkers.pr102244_live import replication_factor
from protocol.keeper import MemoryEnsemble
from protocol.pr102244.assignment import read_assignment
from protocol.pr102244.migration import read_migrations
from reference.__main__ import table_with_buckets
from reference.pr102244.code_cluster import PRCodeCluster
from reference.workload import blocks


def _random_run(tmp_path, seed: int, bugs=frozenset()):
    """Half the blocks, a fourth replica, the rebalancer with the other half and queries during it."""
    c = PRCodeCluster(MemoryEnsemble().connect, tmp_path / f"s{seed}", ["r1", "r2", "r3"],
                      table=table_with_buckets(8, 2), bugs=bugs, seed=seed, per_cycle=3)
    work = list(blocks(random.Random(seed), 30, 3, 2))
    during = iter(work[15:])
    c.load(work[:15])
    c.add_replica("r4")

    def interleave():
        nxt = next(during, None)
        if nxt is not None:
            c.insert(nxt[1], nxt[0])
        if c.rng.random() < 0.3:
            c.query(interleave=2)

    moves = c.rebalance(interleave=interleave)
    for nxt in during:
        c.insert(nxt[1], nxt[0])
    c.end_of_run([], 2, None, "parquet")
    return c, moves


@pytest.mark.parametrize("seed", [0, 1])
def test_the_fixed_code_holds_on_a_random_rebalance(tmp_path, seed):
    c, moves = _random_run(tmp_path, seed)
    try:
        assert moves, "the rebalancer moved nothing: the run tested no migration"
        assert violations(c.history, 2) == [] and replication_factor(c) == []
        assert not read_migrations(c.admin, c.layout)
    finally:
        c.close()


def test_the_code_as_it_is_loses_rows_at_switch(tmp_path):
    """source_stops_at_switch (PR-F2): DONE at the SWITCH, the source's monitor drops at once."""
    found = []
    for seed in range(3):
        c, _ = _random_run(tmp_path, seed, bugs={"source_stops_at_switch"})
        found += violations(c.history, 2)
        c.close()
    assert any(v.startswith("OwnersCompleteInv") for v in found), found


def _cluster(tmp_path, **kw):
    c = PRCodeCluster(MemoryEnsemble().connect, tmp_path / "d", ["r1", "r2", "r3"], table=table_with_buckets(1, 2),
                      seed=0, **kw)
    c.load(blocks(random.Random(0), 2, 2, 1))
    c.settle()
    p = c.admin.get_children(c.layout.assignments)[0]
    a = read_assignment(c.admin, c.layout, p)
    target = next(r for r in ("r1", "r2", "r3") if r not in a.owners)
    return c, p, a, target


def _monitor(c, name: str) -> str | None:
    c.read_in_flight()
    return c._advance_migration(c.replicas[name])


def test_a_decision_is_one_step_its_write_the_next_and_a_crash_loses_it(tmp_path):
    c, p, a, t = _cluster(tmp_path)
    try:
        m = c.reassign(p, t)
        while c._try("pull", c.replicas[t]) or c._try("execute", c.replicas[t]):
            pass
        assert _monitor(c, t).startswith("SignalComplete")
        coord = c.coordinator
        assert _monitor(c, coord) == f"DriveSwitch({m}) by {coord}"
        # decided, not written: the node says SWITCH, the assignment is as CLONE left it
        assert read_migrations(c.admin, c.layout)[m][0]["state"] == "switch"
        assert t in read_assignment(c.admin, c.layout, p).cloning
        c.crash_replica(coord)
        other = next(r for r in sorted(c.replicas))
        assert _monitor(c, other) == f"DriveSwitch({m}) by {other}"   # taken over, SWITCH read again
        assert _monitor(c, other).startswith(f"SwitchMulti({m}) by {other}")
        after = read_assignment(c.admin, c.layout, p)
        assert t in after.owners and not after.cloning
    finally:
        c.close()


def test_a_clone_that_cannot_complete_times_out_on_the_drivers_clock(tmp_path):
    c, p, a, t = _cluster(tmp_path, migration_timeout=30)
    try:
        m = c.reassign(p, t)
        c.crash_replica(t)   # the target never fetches: no clone_complete
        coord, said = c.coordinator, []
        for _ in range(100):
            c.tick()
            said.append(_monitor(c, coord))
            if not read_migrations(c.admin, c.layout):
                break
        assert f"DriveRollback({m}) by {coord}" in said and said[-1] == f"ApplyRollback({m}) by {coord} -> failed"
        after = read_assignment(c.admin, c.layout, p)
        assert sorted(after.owners) == sorted(a.owners) and not after.cloning
        assert said.index(f"DriveRollback({m}) by {coord}") >= 30   # not before the timeout
    finally:
        c.close()
