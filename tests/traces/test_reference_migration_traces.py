"""Trace validation of the reference's migrations (issue 36): a racing run of `python -m reference
run` on ZooKeeper (profile `cancelling`: REASSIGNs, CANCELs, crashes, SYSTEM DROP REPLICA and the
repairs after it) is a behaviour of the spec, each step of a migration taken by its action; the
same trace with a step moved or given to the wrong replica is rejected at that step."""

from dataclasses import replace

import pytest

from traces.keeper_trace import MIGRATION_STEPS, read_trace
from traces.reference_run import ReferenceWorkload, record_reference
from traces.validate import validate

pytestmark = [pytest.mark.zookeeper, pytest.mark.tlc, pytest.mark.slow]


@pytest.fixture(scope="module")
def run():
    return record_reference(ReferenceWorkload(profile="cancelling", seed=1, fault_rate=0.0))


@pytest.fixture(scope="module")
def trace(run):
    return read_trace(run.txns, run.root, run.replicas)


def test_a_racing_run_with_cancels_drops_and_repairs_is_a_behaviour_of_the_spec(run, trace, tmp_path):
    kinds = {e.a for e in trace.events}
    assert {"reassign", "fetch", "switch", "cancel", "cleanup", "repair", "drop_replica", "crash"} <= kinds, kinds
    assert "unmapped" not in kinds
    v = validate(trace, run.settings, workdir=tmp_path)
    assert v.accepted, v.summary()


def _first(trace, kind: str) -> int:
    return next(n for n, e in enumerate(trace.events) if e.a == kind)


def test_a_switch_before_its_clone_fetched_is_rejected_at_the_switch(run, trace, tmp_path):
    """SWITCH's guard: the CLONE fetched, the target caught up to its position. The trace's first
    SWITCH moved to just before its own migration's fetch: no action explains it there."""
    events = list(trace.events)
    s = _first(trace, "switch")
    f = max(n for n in range(s) if events[n].a == "fetch" and events[n].p == events[s].p)
    events.insert(f, events.pop(s))
    v = validate(replace(trace, events=events[:f + 1]), run.settings, workdir=tmp_path)
    assert not v.accepted and v.consumed == f and v.first_unexplained.a == "switch", v.summary()


def test_a_cleanup_by_a_replica_that_is_not_leaving_is_rejected_there(run, trace, tmp_path):
    """CLEANUP drops the leaver's copy: the same step named for another replica (one that owns the
    partition) is no behaviour of the spec."""
    events = list(trace.events)
    c = _first(trace, "cleanup")
    other = next(r for r in trace.replicas if r != events[c].r)
    events[c] = replace(events[c], r=other)
    v = validate(replace(trace, events=events[:c + 1]), run.settings, workdir=tmp_path)
    assert not v.accepted and v.consumed == c and v.first_unexplained.r == other, v.summary()


def test_every_migration_step_the_abstraction_names_is_in_the_trace_spec():
    """MIGRATION_STEPS (traces/keeper_trace.py) and the trace spec's events: each has its action."""
    from pathlib import Path
    spec = (Path(__file__).resolve().parents[2] / "spec" / "rfc" / "TraceSelectiveReplication.tla").read_text()
    assert all(f'e.a = "{kind}"' in spec for kind in MIGRATION_STEPS)
