"""PR #102244's design held to the reference's implementation of it (protocol/pr102244/): each
finding's TLC counterexample carried to the reference, the same invariant broken there with the
switch and not without it; the state-graph replay in both directions.

The code's models (spec/pr102244/PR102244Code.tla, conformance/pr_code_system.py) run here; the
description's (PR102244.tla, PR102244Whole.tla's first INSERT), whose findings PR-F4 and PR-F5
the code retires, run in `make check` (marked long)."""

import pytest

from conformance.counterexample import FINDINGS, carry_pr, design_of
from conformance.pr_code_system import PRCodeSystem
from conformance.pr_system import PRSystem
from harness.tlc.values import ModelValue

pytestmark = pytest.mark.tlc

# The first step of each counterexample that the reference refuses, or leaves the trace at, once
# the finding's switch is off: where the PR's design and the fix part.
WHERE_THE_FIX_PARTS = {
    "MCPR102244_snapshot_source_parts.cfg": "StartClone",        # the snapshot lists every registered part
    "MCPR102244_source_stops_at_switch.cfg": "DropUnassigned",   # the source is leaving: it keeps its parts
    "MCPR102244_source_stops_at_switch_query.cfg": "Query",      # ... and keeps replicating: nothing missed
    "MCPR102244_switch_fresh_version.cfg": "Switch",             # the version CLONE left is checked
    "MCPR102244_filter_cached.cfg": "SignalComplete",            # not before the target's rescan
    # PR-F5: a cached "no assignment" is cold, the filter reads Keeper and keeps the GET_PART
    "MCPR102244Whole_FirstInsert_filter_negative_cache.cfg": "Pull",
    # O7: the retry carries the first send's block id, blocks/ drops it (TLC labels it Next)
    "MCPR102244Whole_FirstInsert_retry_new_block_id.cfg": "Next: CommitForwarded or RejectForwarded",
    # The code's models
    "MCPR102244Code_snapshot_source_parts.cfg": "ReadSnapshot",   # the snapshot lists every registered part
    "MCPR102244Code_snapshot_before_clone_multi.cfg": "CloneMulti",   # read again in the multi
    "MCPR102244Code_snapshot_omits_patch_parts.cfg": "ReadSnapshot",   # patch parts by original partition
    "MCPR102244Code_read_from_cloning_target.cfg": "Query",       # the router reads owners only
    # the source leaves at DONE, not at the multi (PR-F2); the multi checks the target is :cloning
    # (PR-F3, PR-F7); phase 1's SWITCH keeps its source (PR-F9)
    **{f"MCPR102244Code_{x}.cfg": "SwitchMulti" for x in (
        "source_stops_at_switch", "source_stops_at_switch_query", "same_target", "second_migration",
        "rollback_races_switch", "repair_moves_replica")},
}


def _code_first(cfgs):
    return [c if c.startswith("MCPR102244Code") else pytest.param(c, marks=pytest.mark.long) for c in sorted(cfgs)]


@pytest.mark.parametrize("cfg", _code_first(FINDINGS))
def test_pr_counterexample_is_reproduced_on_the_reference(cfg):
    r = carry_pr(cfg)
    assert r.invariant is not None, r.stuck
    assert r.followed and len(r.steps) == r.trace_length, r.stuck
    assert r.violations, f"{r.invariant} holds on the reference after TLC's trace"
    assert r.without_switch_caught, r.without_switch
    assert r.without_switch.startswith("cannot follow") and f"({WHERE_THE_FIX_PARTS[cfg]})" in r.without_switch


def test_initial_state_of_every_pr_model_is_the_references():
    """Init: ensurePartitionAssignment on the lowest counts picks each model's InitOwners, and
    the reference's abstract state is the one TLC starts from (checked field by field in the
    carry; here the constants of every PR model are accepted)."""
    code = ["MCPR102244Code.cfg", "MCPR102244Code_FirstInsert.cfg", "MCPR102244Code_Repair.cfg"]
    for cfg in ["MCPR102244.cfg", "MCPR102244_RF1.cfg", "MCPR102244_TwoMigrations.cfg", *code, *FINDINGS]:
        _, read_constants, system_cls, _ = design_of(cfg)
        c = read_constants(cfg)
        v = system_cls(c).abstract()
        if system_cls is PRCodeSystem:   # no assignment node yet, or InitOwners; nothing decided
            assert {o.name for o in v["asg"]["owners"]} == set(c["init_owners"]) and v["aver"] == 0
            assert all(p["op"] == "none" for p in v["pend"].values()) and set(v["pend"]) == set(
                map(ModelValue, c["drivers"]))
        elif system_cls is PRSystem:
            assert {o.name for o in v["asg"]["owners"]} == set(c["init_owners"]) and v["aver"] == 0
        else:   # PR102244Whole's first-INSERT models: no assignment node, every cache "no assignment"
            assert v["asg"]["p1"]["owners"] == frozenset() and v["aver"]["p1"] == 0
            assert all(v["view"][r]["p1"]["ver"] == 0 for r in v["view"]) and v["fwd"] == frozenset()
        assert v["log"] == () and not v["committed"]
        assert all(v["counts"][r] == (1 if r.name in c["init_owners"] else 0) for r in v["counts"])


@pytest.mark.long
def test_state_graph_replay_of_mcpr102244_agrees_edge_for_edge():
    """MCPR102244 (fixed) to depth 4, both directions: every step the reference takes from a
    spec state is an edge, every edge a step of the reference, the invariants hold on it."""
    from conformance.explore import explore_pr
    r = explore_pr("MCPR102244.cfg", depth=4, progress=None).as_dict()
    assert r["failure"] is None, r["failure"]
    assert r["violation"] is None, r["violation"]
    assert r["expanded"] > 100 and r["covered"] == r["edges_checkable"] == r["edges"]
    # every action a migration needs was replayed
    assert {"WriteInsert", "StartClone", "WriteCloneEntries", "Pull", "RefreshView", "Query"} <= set(r["by_action"])


@pytest.mark.long
def test_state_graph_replay_catches_the_snapshot_of_the_source_only(tmp_path):
    """The reference as written (snapshot_source_parts) against the fixed model's graph: its
    StartClone is not a step of the fixed spec (the snapshot differs), found by the replay."""
    from conformance.explore import explore_pr
    f = tmp_path / "failure.json"
    r = explore_pr("MCPR102244.cfg", bugs=frozenset({"snapshot_source_parts", "complete_without_rescan"}), depth=3,
                   progress=None, failure_file=f).as_dict()
    assert r["failure"]["kind"] == "reference-only step" and r["failure"]["action"] == "StartClone"
    assert r["failure"]["variable"] == "mig"
    assert f.exists()


def test_state_graph_replay_of_the_code_agrees_edge_for_edge():
    """MCPR102244Code (every fix; a rollback and a driver's crash) to depth 6, both directions: each
    step the drivers and replicas take from a spec state is an edge to an equal state, each edge
    a step of theirs; the invariants hold on every state reached."""
    from conformance.explore import explore_pr
    r = explore_pr("MCPR102244Code.cfg", depth=6, progress=None).as_dict()
    assert r["failure"] is None and r["violation"] is None, r
    assert r["covered"] == r["edges_checkable"] == r["edges"] and r["expanded"] > 400
    assert {"ReadSnapshot", "CloneMulti", "WriteCloneEntries", "DriveRollback", "ApplyRollback",
            "DriverCrash"} <= set(r["by_action"])


@pytest.mark.long
def test_state_graph_replay_of_the_code_repair_whole():
    """The rebalancer's repair (MCPR102244Code_Repair: the first INSERT with one replica up, then
    phase 1) whole, both directions (about a minute)."""
    from conformance.explore import explore_pr
    r = explore_pr("MCPR102244Code_Repair.cfg", progress=None).as_dict()
    assert r["failure"] is None and r["violation"] is None, r
    assert r["expanded"] == r["states"] and r["covered"] == r["edges"]   # whole: every state, every edge
    assert {"Allocate", "PlanUnderReplicated", "DriveSwitch", "SwitchMulti", "Done"} <= set(r["by_action"])


@pytest.mark.parametrize("switch, kind, action, variable", [
    # PR-F1: the snapshot is the source's parts
    ("snapshot_source_parts", "reference-only step", "ReadSnapshot", "pend"),
    # PR-F6: startClone gives up on an empty snapshot at its read, where the fix reads in the multi
    ("snapshot_before_clone_multi", "spec-only step", "ReadSnapshot", "pend"),
])
def test_state_graph_replay_catches_the_code_as_it_is(switch, kind, action, variable):
    """The reference with one of the code's switches, against the fixed code's graph: the step
    where they part is found, named, with the variable that shows it."""
    from conformance.explore import explore_pr
    r = explore_pr("MCPR102244Code.cfg", bugs=frozenset({switch}), depth=7, progress=None).as_dict()
    f = r["failure"]
    assert (f["kind"], f["action"], f["variable"]) == (kind, action, variable), f


def test_state_graph_replay_of_a_patch_part_agrees_and_catches_its_omission():
    """MCPR102244Code_Patch (block 2 a lightweight UPDATE's patch part) to depth 6: the fixed code
    agrees edge for edge; the code as it is (snapshot_omits_patch_parts, PR-F8) parts from it at
    ReadSnapshot: its snapshot leaves the patch part out, a decision the fixed spec has no edge to."""
    from conformance.explore import explore_pr
    r = explore_pr("MCPR102244Code_Patch.cfg", depth=6, progress=None).as_dict()
    assert r["failure"] is None and r["violation"] is None, r
    assert r["covered"] == r["edges_checkable"] == r["edges"] and "ReadSnapshot" in r["by_action"]
    r = explore_pr("MCPR102244Code_Patch.cfg", bugs=frozenset({"snapshot_omits_patch_parts"}), depth=6,
                   progress=None).as_dict()
    f = r["failure"]
    assert (f["kind"], f["action"], f["variable"]) == ("reference-only step", "ReadSnapshot", "pend"), f
