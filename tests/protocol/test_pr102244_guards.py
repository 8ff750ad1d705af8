"""PR #102244's migration as its code drives it (protocol/pr102244/driver.py), one guard clause per
test (issue 37; tests/README.md's table): each test makes exactly one clause false and sees the
step refused, or do nothing, by it alone; without that clause the step would go through. The
fixed design's guards (FIXED: no switch on), on the in-memory keeper through
conformance/pr_code_system.py as tests/protocol/test_pr102244_driver.py does."""

import pytest

from conformance.pr_code_system import PRCodeSystem
from conformance.pr_system import LAYOUT, P
from protocol.assignment import GuardFailed
from protocol.pr102244.assignment import PRAssignment, read_assignment
from protocol.pr102244.driver import signal_complete
from protocol.pr102244.layout import clone_complete
from protocol.pr102244.migration import read_migration

FIXED = frozenset()


def _system(owners=("r1", "r2"), rf=2, drivers=("r1", "r2")) -> PRCodeSystem:
    """At rf 3 the partition is allocated (ALLOCATED_SHORT) while r3 is down: two owners, short of
    replication_factor, as MCPR102244Code_Repair starts."""
    up = {"r1", "r2"} if rf == 3 else {"r1", "r2", "r3"}
    return PRCodeSystem({"replicas": ("r1", "r2", "r3"), "drivers": drivers,
                         "init_owners": frozenset() if rf == 3 else frozenset(owners),
                         "up_at_first_insert": frozenset(up), "blocks": frozenset({1, 2}),
                         "patch_blocks": frozenset(), "mig_ids": (1, 2), "rf": rf, "max_fails": 1, "max_crashes": 1,
                         "max_queries": 0, "bugs": FIXED, "readings": frozenset(),
                         "invariants": ("ReplicationFactorInv", "RepairAddsInv")}, FIXED)


def _steps(s: PRCodeSystem, steps) -> None:
    for action, args in steps:
        s.step(action, args)


CLONE_TO_R3 = [("WriteInsert", ("r1", 1)), ("ReadSnapshot", ("r1", 1, "r1", "r3")), ("CloneMulti", ("r1",)),
               ("WriteCloneEntries", ("r1",))]
FETCHED = CLONE_TO_R3 + [("Pull", ("r3",)), ("Pull", ("r3",)), ("Fetch", ("r3", 1))]
COMPLETE = FETCHED + [("SignalComplete", (1,))]
SWITCHED = COMPLETE + [("DriveSwitch", ("r1", 1)), ("SwitchMulti", ("r1",))]
# block 2 committed after the CLONE's entries and before the SWITCH (r1's map refreshed first)
SWITCHED_AFTER_A_WRITE = COMPLETE + [("RefreshView", ("r1",)), ("WriteInsert", ("r1", 2)), ("DriveSwitch", ("r1", 1)),
                                     ("SwitchMulti", ("r1",))]
ALLOCATED_SHORT = [("Allocate", ("r1", ("r1", "r2"))), ("WriteInsert", ("r1", 1))]


def _refused_at_the_read(s: PRCodeSystem, driver: str, match: str, decide) -> None:
    """A driver's read (ReadSnapshot, PlanUnderReplicated) refused by `match`: nothing decided."""
    with pytest.raises(GuardFailed, match=match):
        decide(s.drivers[driver])
    assert s.drivers[driver].pending is None


def _state(s: PRCodeSystem, m: str = "1"):
    node = read_migration(s.admin, LAYOUT, m)[0]
    return None if node is None else node["state"]


# --- ReadSnapshot (SYSTEM MIGRATE PARTITION's startClone) --------------------------------------
def test_read_snapshot_refuses_a_migration_id_that_exists():
    s = _system()
    _steps(s, CLONE_TO_R3)
    with pytest.raises(GuardFailed, match="migration 1 exists"):
        s.drivers["r2"].read_snapshot("1", P, "r2", "r3")


def test_read_snapshot_refuses_a_source_that_is_no_owner():
    s = _system(owners=("r1",), rf=1)
    s.step("WriteInsert", ("r1", 1))
    _refused_at_the_read(s, "r1", "source 'r2' is not an owner", lambda d: d.read_snapshot("1", P, "r2", "r3"))


def test_read_snapshot_refuses_a_target_that_owns_the_partition():
    s = _system()
    s.step("WriteInsert", ("r1", 1))
    _refused_at_the_read(s, "r1", "target 'r2' already owns", lambda d: d.read_snapshot("1", P, "r1", "r2"))


# --- PlanUnderReplicated (the rebalancer's phase 1) --------------------------------------------
def test_phase_one_refuses_a_partition_with_its_rf_owners():
    s = _system()
    s.step("WriteInsert", ("r1", 1))
    _refused_at_the_read(s, "r1", "has 2 owners, replication_factor 2",
                         lambda d: d.plan_under_replicated("1", P, "r1", "r3", 2))


def test_phase_one_refuses_a_partition_with_a_migration_in_flight():
    s = _system(rf=3)
    _steps(s, ALLOCATED_SHORT + [("PlanUnderReplicated", ("r1", 1, "r1", "r3")), ("CloneMulti", ("r1",))])
    with pytest.raises(GuardFailed, match="has a migration in flight"):
        s.drivers["r2"].plan_under_replicated("2", P, "r2", "r3", 3)


def test_phase_one_refuses_a_move_from_a_replica_that_is_no_owner():
    s = _system(rf=3)
    _steps(s, ALLOCATED_SHORT)
    _refused_at_the_read(s, "r1", "not a move from an owner", lambda d: d.plan_under_replicated("1", P, "r3", "r3", 3))


# --- CloneMulti ----------------------------------------------------------------------------------
def test_the_clone_multi_refuses_a_partition_another_driver_started_since_the_read():
    """PR-F3's fix at the multi: both drivers read before either wrote; the second multi is refused."""
    s = _system()
    _steps(s, [("WriteInsert", ("r1", 1)), ("ReadSnapshot", ("r1", 1, "r1", "r3"))])
    s.drivers["r2"].read_snapshot("2", P, "r2", "r3")
    s.step("CloneMulti", ("r1",))
    with pytest.raises(GuardFailed, match="has a migration in flight"):
        s.drivers["r2"].clone_multi()
    assert read_assignment(s.admin, LAYOUT, P).cloning == ("r3",) and _state(s, "2") is None


# --- DriveSwitch, DriveRollback ------------------------------------------------------------------
def test_drive_switch_refuses_a_migration_without_clone_complete():
    s = _system()
    _steps(s, FETCHED)
    with pytest.raises(GuardFailed, match="has no clone_complete"):
        s.drivers["r1"].drive_switch("1")
    assert _state(s) == "clone"


def test_drive_switch_refuses_a_migration_already_switched():
    s = _system()
    _steps(s, SWITCHED)
    assert _state(s) == "switched"
    with pytest.raises(GuardFailed, match="migration 1 is switched"):
        s.drivers["r2"].drive_switch("1")
    assert s.drivers["r2"].pending is None


def test_drive_rollback_refuses_a_migration_in_switch():
    s = _system()
    _steps(s, COMPLETE + [("DriveSwitch", ("r1", 1))])
    with pytest.raises(GuardFailed, match="migration 1 is switch"):
        s.drivers["r2"].drive_rollback("1")
    assert s.drivers["r2"].pending is None


# --- SwitchMulti ---------------------------------------------------------------------------------
def test_a_switch_multi_decided_on_a_node_another_driver_has_switched_since_does_nothing():
    """Two drivers read the node in SWITCH; the first applies it. The second's multi finds the
    node no longer in SWITCH and writes nothing (it must not end the migration under DONE's wait)."""
    s = _system()
    _steps(s, COMPLETE + [("DriveSwitch", ("r1", 1)), ("DriveSwitch", ("r2", 1)), ("SwitchMulti", ("r1",))])
    assert _state(s) == "switched"
    out = s.step("SwitchMulti", ("r2",))
    assert out.state is None and _state(s) == "switched"


def test_a_switch_multi_whose_source_left_but_whose_target_is_no_owner_fails_the_migration():
    """"Applied before" needs both halves: the source gone AND the target an owner. Here some
    other writer took the source out and left the target :cloning: nothing was applied, so the
    migration FAILS and the :cloning entry goes."""
    s = _system()
    _steps(s, COMPLETE + [("DriveSwitch", ("r1", 1))])
    a = read_assignment(s.admin, LAYOUT, P)
    s.admin.set(LAYOUT.assignment(P), PRAssignment(("r2",), a.cloning).encode(), a.version)
    out = s.step("SwitchMulti", ("r1",))
    a = read_assignment(s.admin, LAYOUT, P)
    assert out.state == "failed" and a.owners == ("r2",) and not a.cloning and _state(s) is None


def test_a_phase_one_repair_keeps_its_source_as_an_owner():
    """PR-F9's fix: a migration planned to repair under-replication adds its target."""
    s = _system(rf=3)
    _steps(s, ALLOCATED_SHORT + [("PlanUnderReplicated", ("r1", 1, "r1", "r3")), ("CloneMulti", ("r1",)),
               ("WriteCloneEntries", ("r1",)), ("Pull", ("r3",)), ("Pull", ("r3",)), ("Fetch", ("r3", 1)),
               ("SignalComplete", (1,)), ("DriveSwitch", ("r1", 1)), ("SwitchMulti", ("r1",))])
    assert sorted(read_assignment(s.admin, LAYOUT, P).owners) == ["r1", "r2", "r3"]
    assert not s.invariants()["RepairAddsInv"]


# --- SignalComplete (checkAndSignalCloneComplete, on the target) --------------------------------
def test_signal_complete_is_the_targets_alone():
    """r2, an owner that has every snapshot part, is not the migration's target."""
    s = _system()
    _steps(s, FETCHED + [("Pull", ("r2",)), ("Fetch", ("r2", 1))])
    with pytest.raises(GuardFailed, match="r2 is not the target of migration 1"):
        signal_complete(s.reps["r2"], "1")
    assert s.admin.exists(clone_complete(LAYOUT, "1")) is None


def test_signal_complete_refuses_a_migration_in_switch():
    s = _system()
    _steps(s, COMPLETE + [("DriveSwitch", ("r1", 1))])
    s.admin.delete(clone_complete(LAYOUT, "1"))   # so that only the state refuses it
    with pytest.raises(GuardFailed, match="not the target of migration 1 in CLONE"):
        signal_complete(s.reps["r3"], "1")


def test_signal_complete_is_refused_once_complete():
    s = _system()
    _steps(s, COMPLETE)
    with pytest.raises(GuardFailed, match="complete already"):
        signal_complete(s.reps["r3"], "1")


def test_signal_complete_waits_for_every_snapshot_part():
    s = _system()
    _steps(s, CLONE_TO_R3)
    with pytest.raises(GuardFailed, match="r3 lacks snapshot parts"):
        signal_complete(s.reps["r3"], "1")


# --- Done (PR-F2's fix) --------------------------------------------------------------------------
def test_done_refuses_a_migration_that_has_not_switched():
    s = _system()
    _steps(s, COMPLETE)
    with pytest.raises(GuardFailed, match="migration 1 is not switched"):
        s.step("Done", (1,))
    assert _state(s) == "clone"


def test_done_waits_for_the_target_to_pull_the_log_past_the_switch():
    """A block committed before the SWITCH (block 2, after the CLONE's entries): the target has
    not pulled its GET_PART, so DONE waits."""
    s = _system()
    _steps(s, SWITCHED_AFTER_A_WRITE)
    with pytest.raises(GuardFailed, match="has not pulled the log past the SWITCH"):
        s.step("Done", (1,))
    assert _state(s) == "switched"


def test_done_waits_for_the_target_to_fetch_what_it_pulled():
    s = _system()
    _steps(s, SWITCHED_AFTER_A_WRITE + [("RefreshView", ("r3",)), ("Pull", ("r3",))])
    with pytest.raises(GuardFailed, match="still has .* queued"):
        s.step("Done", (1,))
    s.step("Fetch", ("r3", 2))
    s.step("Done", (1,))
    assert _state(s) is None
