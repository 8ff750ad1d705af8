"""Conformance in the test suite (the `ci` profile): the replay covers every edge of
MCAssignment with no mismatch, a broken variant is caught on the reference by the replay and by
the state machine, the whole-protocol machine passes on the fixed reference and catches a
switch, and a recorded failing sequence replays with one command."""

import json
import os
from collections import Counter

import pytest

os.environ.setdefault("CONFORMANCE_PROFILE", "ci")

from conformance.__main__ import replay_file  # noqa: E402
from conformance.machines import assignment_machine, profile, protocol_machine  # noqa: E402
from conformance.replay import replay  # noqa: E402
from conformance.runner import run_machine  # noqa: E402
from conformance.stategraph import dump, graph_cfg  # noqa: E402
from harness.check_models import spec_file  # noqa: E402

pytestmark = pytest.mark.tlc


@pytest.fixture(scope="module")
def graph():
    return dump("MCAssignment.cfg")


def test_a_state_graph_is_dumped_on_every_variable():
    # Under ReductionView TLC keeps one state per view and points every edge whose successor has
    # that view at it: an edge's target would not be what its action makes of its source
    cfg = spec_file("MCMigration.cfg").read_text()
    assert "VIEW ReductionView" in cfg.splitlines() and "SYMMETRY OwnerSymmetry" in cfg.splitlines()
    out = graph_cfg(cfg).splitlines()
    assert not [ln for ln in out if ln.split()[:1] in (["VIEW"], ["SYMMETRY"], ["INVARIANTS"], ["PROPERTIES"])]
    assert "    InitOwners <- P1OnR1R2" in out and "NEXT Next" in out


# make check's conformance stage replays MCAssignment whole with the same assertions, so its long
# tests leave this to it (check-thorough runs it); make test keeps the broken-variant replay
@pytest.mark.long
@pytest.mark.thorough
def test_replay_covers_every_edge_of_mcassignment_with_no_mismatch():
    r = replay("Assignment", "MCAssignment.cfg", progress=None).as_dict()
    assert r["coverage"] == 1.0 and r["edges"] > 30_000
    assert r["mismatch"] is None and r["violation"] is None


def test_replay_of_a_broken_variant_catches_it_on_the_reference():
    r = replay("Assignment", "MCAssignment_allow_short_assignment.cfg", progress=None, stop_at_violation=True).as_dict()
    assert r["mismatch"] is None  # the reference with the switch does what the broken spec does ...
    assert r["violation"]["invariant"] == "ReplicationFactorInv"  # ... and the spec's invariant fails on it


def test_replay_names_the_first_difference_and_writes_a_replayable_file(tmp_path, monkeypatch, capsys):
    """A reference that routes rows to its own choice instead of the winner's is caught at the
    first ReplicaAdoptAssignment, with the variable that differs; the file replays."""
    import protocol.assignment as ra

    def adopt_own_choice(keeper, layout, alloc, bugs=frozenset()):
        alloc.routed_to = alloc.owners  # the bug: ignores the winner
        return ra.read_assignment(keeper, layout, alloc.partition)
    monkeypatch.setattr("conformance.assignment_system.replica_adopt_assignment", adopt_own_choice)
    failure = tmp_path / "failure.json"
    r = replay("Assignment", "MCAssignment.cfg", progress=None, failure_file=failure)
    assert r.mismatch is not None and r.mismatch.variable == "inv_routed"
    assert r.mismatch.steps[-1][0] == "ReplicaAdoptAssignment"
    assert "first differing variable" in r.mismatch.describe()
    monkeypatch.undo()
    assert json.loads(failure.read_text())["steps"]
    assert replay_file(str(failure)) == 0  # with the fix back, the recorded steps run through
    assert "the reference takes every step" in capsys.readouterr().out


@pytest.mark.parametrize("bugs, caught", [(frozenset(), False), (frozenset({"blind_write"}), True)])
def test_assignment_machine_against_the_state_graph(graph, bugs, caught):
    counts = Counter()
    res = run_machine(assignment_machine(bugs, graph, counts), profile(), shrink=False)
    assert res["failed"] == caught
    if not caught:
        assert all(counts[a] > 0 for a in ("ReplicaChooseOwners", "ReplicaCreateAssignment",
                                           "ReplicaAdoptAssignment", "ReplicaSessionExpire", "ReplicaRestart"))


def test_protocol_machine_passes_on_the_fixed_reference():
    counts, refusals = Counter(), Counter()
    res = run_machine(protocol_machine(counts=counts, refusals=refusals), profile(), shrink=False)
    assert not res["failed"], res
    assert counts["ReplicaWriteInsert"] > 0 and counts["ReplicaCleanup"] > 0 and counts["ReplicaExecuteEntry"] > 0


def test_protocol_machine_catches_a_switch():
    """filter_with_stale_cache (F2): an owner skips a new partition's block for good
    (OwnersCompleteInv), found without shrinking."""
    from hypothesis import settings
    res = run_machine(protocol_machine(frozenset({"filter_with_stale_cache"})), settings(profile(), max_examples=300),
                      shrink=False)
    assert res["failed"] and "OwnersCompleteInv" in res["error"], res


@pytest.mark.zookeeper
def test_protocol_machine_on_real_zookeeper(zk_server_hosts):
    """The same machine with every session on a real ZooKeeper server (fewer examples): each
    example in a namespace of its own, removed after."""
    import uuid

    from hypothesis import settings
    from kazoo.client import KazooClient

    from protocol.keeper.zookeeper import ZooKeeperKeeper
    root = KazooClient(hosts=zk_server_hosts, timeout=10)
    root.start(timeout=15)
    made = []

    def namespace():
        path = f"/conformance/{uuid.uuid4().hex[:12]}"
        root.ensure_path(path)
        made.append(path)
        return lambda: ZooKeeperKeeper(f"{zk_server_hosts}{path}")
    counts, refusals = Counter(), Counter()
    try:
        res = run_machine(protocol_machine(counts=counts, refusals=refusals, namespace=namespace),
                          settings(profile(), max_examples=6, stateful_step_count=30), shrink=False)
        assert not res["failed"], res
        assert counts["ReplicaWriteInsert"] > 0 and counts["ReplicaExecuteEntry"] > 0
    finally:
        root.delete("/conformance", recursive=True)
        root.stop()
        root.close()
