"""Trace validation of PR #102244's design (issue 36: a reference trace of each design): a run of
`python -m reference run --design pr102244` on ZooKeeper, a rebalance onto an added replica while
INSERTs go on, is a behaviour of spec/pr102244/PR102244Whole.tla (TracePR102244.tla); the runs of
its broken switches that write differently are rejected at the step they changed, and a recorded
trace edited by hand is rejected at the edit."""

import subprocess
import sys
from dataclasses import replace

import pytest

from traces.pr_keeper_trace import MIGRATION_STEPS, read_pr_trace
from traces.reference_run import ReferenceWorkload, record_reference
from traces.validate import validate_pr, validate_run

pytestmark = [pytest.mark.zookeeper, pytest.mark.tlc, pytest.mark.slow]


@pytest.fixture(scope="module")
def recorded():
    run = record_reference(ReferenceWorkload(seed=1, design="pr102244"))
    return run, read_pr_trace(run.txns, run.root, run.replicas)


def test_a_rebalance_of_the_pr_design_is_a_behaviour_of_its_spec(recorded, tmp_path):
    run, trace = recorded
    kinds = {e.a for e in trace.events}
    assert "unmapped" not in kinds, [e.why for e in trace.events if e.a == "unmapped"][:3]
    assert {"allocate", "map", "insert", "pull", "execute", "drop"} <= kinds
    assert {"clone", "write_entries", "rescan", "complete", "switch", "done"} <= kinds & MIGRATION_STEPS
    v = validate_pr(trace, workdir=tmp_path)
    assert v.accepted, v.summary()
    assert v.consumed == len(trace.events) > 300


def _edited(trace, kind, change, which=lambda e: True):
    n = next(n for n, e in enumerate(trace.events) if e.a == kind and which(e))
    events = list(trace.events)
    events[n] = change(events[n])
    return replace(trace, events=events), n


@pytest.mark.parametrize("kind, change, which", [
    # the filter's decision flipped: a replica that kept an entry said to have skipped it
    ("pull", lambda e: replace(e, take=not e.take), lambda e: e.take),
    # the first INSERT's assignment on replicas that were not the least loaded (one not even active)
    ("allocate", lambda e: replace(e, owners=frozenset({"r3", "r4"})), lambda e: True),
    # a cache said to hold a version Keeper never had
    ("map", lambda e: replace(e, ver=e.ver + 1), lambda e: True),
    # a CLONE whose snapshot left out a registered part (PR-F1's as-written snapshot)
    ("clone", lambda e: replace(e, bs=e.bs[:-1]), lambda e: len(e.bs) > 1),
    # a drop that kept one of the leaver's parts
    ("drop", lambda e: replace(e, bs=e.bs[:-1]), lambda e: len(e.bs) > 1),
])
def test_a_trace_edited_by_hand_is_rejected_at_the_edit(recorded, kind, change, which):
    _run, trace = recorded
    edited, n = _edited(trace, kind, change, which)
    v = validate_pr(edited)
    assert not v.accepted and v.consumed == n, (n, v.summary())


@pytest.mark.parametrize("bug, at", [
    ("complete_without_rescan", "complete"),   # PR-F4: clone_complete before the target has every part
    # the other two in make check's long tests (make test's budget); lab/trace_teeth.json has all seven
    pytest.param("snapshot_source_parts", "clone", marks=pytest.mark.long),    # PR-F1: the source's parts alone
    pytest.param("source_stops_at_switch", "drop", marks=pytest.mark.long),    # PR-F2: drops while caches route
])
def test_a_broken_switch_that_writes_differently_is_rejected_at_its_step(bug, at):
    run = record_reference(ReferenceWorkload(seed=1, design="pr102244", bug=bug))
    trace, v = validate_run(run)
    assert not v.accepted and v.first_unexplained.a == at, v.summary()


@pytest.mark.long
def test_a_replica_down_and_back_is_a_behaviour_too():
    """Its cache goes with its process (TracePR102244.tla CrashEvent): the leaver's drop while it
    is down is then allowed, as the fixed design's source asks only running replicas."""
    run = record_reference(ReferenceWorkload(seed=2, blocks=24, design="pr102244",
                                             extra=("--crash", "r2", "--restart", "r2")))
    trace, v = validate_run(run)
    assert {"crash", "drop"} <= {e.a for e in trace.events}
    assert v.accepted, v.summary()


def test_the_reference_subcommand_takes_the_design_and_refuses_what_it_lacks(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "traces", "reference", "--design", "pr102244", "--blocks", "8",
                         "--keep", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0 and "reference-pr102244: accepted:" in ok.stdout, ok.stdout + ok.stderr
    assert (tmp_path / "reference-pr102244" / "events.txt").is_file()
    for args, says in [(["--design", "pr102244", "--profile", "racing"], "--profile and --steps"),
                       (["--bug", "complete_without_rescan"], "add --design pr102244"),
                       (["--design", "pr102244", "--bug", "no_dedup"], "not a switch of the pr102244 design"),
                       (["--reading", "filter_cached"], "add --design pr102244")]:
        bad = subprocess.run([sys.executable, "-m", "traces", "reference", *args],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and says in bad.stderr and "Traceback" not in bad.stderr, (args, bad.stderr)
