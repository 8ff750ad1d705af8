"""PR #102244's design (spec/pr102244/PR102244.tla, and PR102244Whole.tla's first-INSERT models) held to
the reference's implementation of it (reference/pr102244/): each finding's TLC counterexample
carried to the reference, the same invariant broken there with the switch and not without it."""

import pytest

from conformance.counterexample import FINDINGS, carry_pr, design_of
from conformance.pr_system import PRSystem

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
}


@pytest.mark.parametrize("cfg", sorted(FINDINGS))
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
    for cfg in ["MCPR102244.cfg", "MCPR102244_RF1.cfg", "MCPR102244_TwoMigrations.cfg", *FINDINGS]:
        _, read_constants, system_cls, _ = design_of(cfg)
        c = read_constants(cfg)
        v = system_cls(c).abstract()
        if system_cls is PRSystem:
            assert {o.name for o in v["asg"]["owners"]} == set(c["init_owners"]) and v["aver"] == 0
        else:   # PR102244Whole's first-INSERT models: no assignment node, every cache "no assignment"
            assert v["asg"]["p1"]["owners"] == frozenset() and v["aver"]["p1"] == 0
            assert all(v["view"][r]["p1"]["ver"] == 0 for r in v["view"]) and v["fwd"] == frozenset()
        assert v["log"] == () and not v["committed"]
        assert all(v["counts"][r] == (1 if r.name in c["init_owners"] else 0) for r in v["counts"])


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
