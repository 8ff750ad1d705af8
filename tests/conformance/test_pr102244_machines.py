"""The Hypothesis state machine over PR #102244's design (conformance/machines.py pr_machine):
random rule sequences under the constants of a model of spec/pr102244/PR102244Code.tla (the PR's
code, driven step by step by protocol/pr102244/driver.py), or of the description's PR102244.tla
and PR102244Whole.tla's first INSERT, the spec's invariants checked on the reference after every
step. The fixed design holds; a finding's switch is caught. No TLC run: the machine needs only the
model's constants. The description's cases beyond one are in `make check` (marked long)."""

import pytest


def _walks(examples: int):
    from hypothesis import settings

    from conformance.machines import profile
    # No example database: a failure an earlier local run saved must not stand in for finding it.
    return settings(profile(), max_examples=examples, stateful_step_count=30, database=None, derandomize=True)


LONG = pytest.mark.long


@pytest.mark.parametrize("cfg, actions", [
    # MCPR102244Code's point is the rollback and the driver's crash; its walks reach a SWITCH in some
    # processes and not in others (something of a make-test worker steers them: conformance/README.md),
    # so the SWITCH path is asserted by _Repair's and _Patch's walks, and by the replay.
    ("MCPR102244Code.cfg", {"WriteInsert", "ReadSnapshot", "CloneMulti", "DriveRollback", "ApplyRollback",
                            "DriverCrash", "SignalComplete"}),
    ("MCPR102244Code_Repair.cfg", {"Allocate", "PlanUnderReplicated", "SwitchMulti", "Done"}),
    ("MCPR102244Code_Patch.cfg", {"WriteInsert", "ReadSnapshot", "SignalComplete", "SwitchMulti", "Done"}),
    ("MCPR102244.cfg", {"WriteInsert", "StartClone", "WriteCloneEntries", "SignalComplete", "Switch", "Done"}),
    pytest.param("MCPR102244_FilterCached.cfg", {"WriteInsert", "StartClone", "Rescan", "Pull", "Fetch"}, marks=LONG),
    pytest.param("MCPR102244Whole_FirstInsert.cfg", {"EnsurePartitionAssignment", "ForwardBlock", "CommitForwarded",
                                                     "Pull"}, marks=LONG),
])
def test_pr_machine_holds_on_the_fixed_design(cfg, actions):
    """Random rule sequences over the fixed PR design (the model's constants and its switches):
    every invariant of the spec holds on the reference after every step."""
    from collections import Counter

    from conformance.runner import run_machine
    from conformance.machines import pr_machine
    counts = Counter()
    r = run_machine(pr_machine(cfg, counts=counts), _walks(30), shrink=False)
    assert not r["failed"], r
    assert all(counts[a] > 0 for a in actions), (sorted(a for a in actions if not counts[a]), counts)


@pytest.mark.parametrize("cfg, invariant", [
    # the code as it is, RF 1: a block lost, or an owner that will never get it (by the walk)
    ("MCPR102244Code_as_is.cfg", ("NoAckedBlockLostInv", "OwnersCompleteInv")),
    ("MCPR102244Code_repair_moves_replica.cfg", "RepairAddsInv"),              # PR-F9
    ("MCPR102244Code_second_migration.cfg", "CloningHasMigrationInv"),         # PR-F3 against the code
    ("MCPR102244Code_snapshot_omits_patch_parts.cfg", "NoAckedBlockLostInv"),  # PR-F8: a patch part
    # PR-F10: a query in the window. Found in 5-8 s by a fresh process under every PYTHONHASHSEED
    # tried (0-9), but not in 300 walks by a make-test worker that ran other files first: in make check.
    pytest.param("MCPR102244Code_read_from_cloning_target.cfg", "QueryNoMissingInv", marks=LONG),
    ("MCPR102244Code_source_stops_at_switch_query.cfg", "QueryNoMissingInv"),  # PR-F2: the stale read
    pytest.param("MCPR102244Code_rollback_races_switch.cfg", "ReplicationFactorInv", marks=LONG),       # PR-F7
    pytest.param("MCPR102244_switch_fresh_version.cfg", "ReplicationFactorInv", marks=LONG),            # PR-F3
    pytest.param("MCPR102244Whole_FirstInsert_filter_negative_cache.cfg", "OwnersCompleteInv", marks=LONG),  # PR-F5
    pytest.param("MCPR102244Whole_FirstInsert_retry_new_block_id.cfg", "NoDuplicateRowsInv", marks=LONG),   # O7
])
def test_pr_machine_catches_a_switch(cfg, invariant):
    """The same machine with a finding's switch on (the failing model's constants) breaks the
    finding's invariant on the reference, found without shrinking."""
    from conformance.runner import run_machine
    from conformance.machines import pr_machine
    # Up to 300 walks, stopping at the first that fails: derandomized walks still differ from one
    # process to another (the set orders of str hashing pick among enabled instances), so a switch
    # found at walk 40 in one process took more than 60 in a fresh clone's make test.
    r = run_machine(pr_machine(cfg), _walks(300), shrink=False)
    assert r["failed"] and any(i in r["error"] for i in ((invariant,) if isinstance(invariant, str) else invariant)), r
