"""protocol/pr102244/driver.py: the PR's migration as its code drives it, each step a read or a
multi of one driver, on the in-memory keeper (through conformance/pr_code_system.py, which sets
up the table, the replicas and one MigrationDriver per driver replica)."""

import pytest

from conformance.pr_code_system import PRCodeSystem
from conformance.pr_system import LAYOUT, P
from protocol.assignment import GuardFailed
from protocol.pr102244.assignment import read_assignment, read_count
from protocol.pr102244.migration import read_migration

FIXED = frozenset()
# PR-F7's two strings, as in MCPR102244Code_rollback_races_switch
AS_CODE = frozenset({"rollback_ignores_state", "switch_without_target_check"})


def _system(bugs, drivers=("r1", "r2"), owners=("r1", "r2"), rf=2) -> PRCodeSystem:
    return PRCodeSystem({"replicas": ("r1", "r2", "r3"), "drivers": drivers, "init_owners": frozenset(owners),
                         "up_at_first_insert": frozenset({"r1", "r2", "r3"}), "blocks": frozenset({1, 2}),
                         "patch_blocks": frozenset(),
                         "mig_ids": (1,), "rf": rf, "max_fails": 1, "max_crashes": 1, "max_queries": 0,
                         "bugs": bugs, "readings": frozenset(), "invariants": ("ReplicationFactorInv",)}, bugs)


def _clone_to_r3(s: PRCodeSystem) -> None:
    """Block 1 on r1; r1 drives a migration r1 -> r3 to clone_complete."""
    for action, args in [("WriteInsert", ("r1", 1)), ("ReadSnapshot", ("r1", 1, "r1", "r3")), ("CloneMulti", ("r1",)),
                         ("WriteCloneEntries", ("r1",)), ("Pull", ("r3",)), ("Pull", ("r3",)), ("Fetch", ("r3", 1))]:
        s.step(action, args)


@pytest.mark.parametrize("bugs, owners, state", [
    (AS_CODE, {"r2"}, None),          # the code: RF 2 becomes 1 (the node was gone: its state stays FAILED)
    (frozenset({"rollback_ignores_state"}), {"r1", "r2"}, "failed"),   # SWITCH checks r3:cloning
    (FIXED, {"r2", "r3"}, "switched"),                             # rollback leaves SWITCH alone
])
def test_a_rollback_racing_a_switch_of_another_driver(bugs, owners, state):
    """PR-F7: r1 decides a rollback (its clock says timed out), r2 moves the node to SWITCH, r1's
    rollback lands, r2's SWITCH multi lands. As the code is, the rollback removes r3:cloning and the
    node, and the SWITCH removes the source with no target to take its place: one owner at RF 2,
    counts/r3 at 1. Either fix closes it: the SWITCH multi finds r3 no longer :cloning and fails
    the migration, or the rollback (a CAS from CLONE) leaves the node in SWITCH alone."""
    s = _system(bugs)
    _clone_to_r3(s)
    s.step("DriveRollback", ("r1", 1))
    s.step("SignalComplete", (1,))
    s.step("DriveSwitch", ("r2", 1))
    assert read_migration(s.admin, LAYOUT, "1")[0]["state"] == "switch"
    s.step("ApplyRollback", ("r1",))
    out = s.step("SwitchMulti", ("r2",))
    a = read_assignment(s.admin, LAYOUT, P)
    assert out.state == state and set(a.owners) == owners and not a.cloning
    assert bool(s.invariants()["ReplicationFactorInv"]) == (bugs == AS_CODE)
    if bugs == AS_CODE:
        assert read_count(s.admin, LAYOUT, "r3")[0] == 1   # counted, not listed


def test_a_driver_that_dies_loses_its_decision_and_keeper_keeps_the_rest():
    """A driver that dies between the CLONE multi and the GET_PART entries leaves a partially
    initialised migration (node in CLONE, nothing written): what it decided is gone."""
    s = _system(FIXED)
    s.step("WriteInsert", ("r1", 1))
    s.step("ReadSnapshot", ("r1", 1, "r1", "r3"))
    s.step("CloneMulti", ("r1",))
    lost = s.step("DriverCrash", ("r1",))
    assert lost.op == "entries" and s.drivers["r1"].pending is None
    node, _ = read_migration(s.admin, LAYOUT, "1")
    assert node["state"] == "clone" and node["written"] is False
    with pytest.raises(GuardFailed, match="no entries decided"):
        s.step("WriteCloneEntries", ("r1",))


@pytest.mark.parametrize("bugs, refused_at", [(FIXED, None), (frozenset({"snapshot_before_clone_multi"}), "ReadSnapshot")])
def test_an_empty_snapshot_gives_up(bugs, refused_at):
    """startClone gives up on a partition with no parts: as the code is at its read (PR-F6's
    read before the multi), fixed at the multi, which reads the snapshot again; no node either way."""
    s = _system(bugs)
    if refused_at:
        with pytest.raises(GuardFailed, match="gives up"):
            s.step("ReadSnapshot", ("r1", 1, "r1", "r3"))
    else:
        s.step("ReadSnapshot", ("r1", 1, "r1", "r3"))
        assert s.step("CloneMulti", ("r1",)) is None
    assert read_migration(s.admin, LAYOUT, "1")[0] is None and s.drivers["r1"].pending is None
    assert not read_assignment(s.admin, LAYOUT, P).cloning


def test_the_fix_refuses_a_second_migration_of_a_partition():
    """Fixed (not clone_allows_active_migration): a partition with a migration in flight is refused
    at the read, so two SYSTEM MIGRATE PARTITION cannot both start (PR-F3)."""
    s = _system(FIXED, drivers=("r1", "r2"))
    s.step("WriteInsert", ("r1", 1))
    s.step("ReadSnapshot", ("r1", 1, "r1", "r3"))
    s.step("CloneMulti", ("r1",))
    with pytest.raises(GuardFailed, match="in flight"):
        s.drivers["r2"].read_snapshot("2", P, "r2", "r3")


@pytest.mark.parametrize("bugs", [FIXED, frozenset({"read_from_cloning_target"})], ids=["fixed", "the code"])
def test_a_query_the_clone_target_receives(bugs):
    """PR-F10 at the other receiver (issue 37): r3, `:cloning` and with nothing fetched yet,
    receives the SELECT. As the code is, the router strips `:cloning` and r3 reads its own empty
    copy (the block is missed); fixed, r3 is no candidate and the partition goes to an owner."""
    s = PRCodeSystem({**_system(bugs).c, "max_queries": 1}, bugs)
    # r3 pulls the insert's GET_PART before it is assigned (skipped), then the CLONE: until its
    # GET_PARTs are written nothing brings r3 the block (not replication lag).
    for action, args in [("WriteInsert", ("r1", 1)), ("Pull", ("r3",)), ("ReadSnapshot", ("r1", 1, "r1", "r3")),
                         ("CloneMulti", ("r1",)), ("RefreshView", ("r3",))]:   # r3's cache lists it :cloning
        s.step(action, args)
    if "read_from_cloning_target" in bugs:
        assert s.step("Query", ("r3", "r3")) == [] and s.missed
    else:
        with pytest.raises(GuardFailed):
            s.step("Query", ("r3", "r3"))
        assert s.step("Query", ("r3", "r1")) == [1] and not s.missed
