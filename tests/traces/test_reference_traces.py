"""Trace validation of the reference (issue 36): a run of `python -m reference run` (the RFC design)
on ZooKeeper is a behaviour of the spec; with a broken switch that changes what it writes into
Keeper, its trace is rejected at the first write the switch made."""

import subprocess
import sys

import pytest

from traces.keeper_trace import read_trace
from traces.reference_run import ReferenceWorkload, record_reference
from traces.validate import validate

pytestmark = [pytest.mark.zookeeper, pytest.mark.tlc, pytest.mark.slow]


def test_a_reference_run_with_broken_forwards_is_a_behaviour_of_the_spec(tmp_path):
    run = record_reference(ReferenceWorkload(fault_rate=0.3, seed=1))
    trace = read_trace(run.txns, run.root, run.replicas)
    kinds = {e.a for e in trace.events}
    assert {"allocate", "map", "insert", "pull", "execute"} <= kinds and "unmapped" not in kinds
    # Some sub-blocks were retried after a broken forward: a block id committed once, sent more.
    v = validate(trace, run.settings, workdir=tmp_path)
    assert v.accepted, v.summary()
    assert v.consumed > 200


def test_no_dedup_writes_a_retried_block_again_and_the_trace_is_rejected_there(tmp_path):
    run = record_reference(ReferenceWorkload(fault_rate=0.3, seed=1, bug="no_dedup"))
    trace = read_trace(run.txns, run.root, run.replicas)
    v = validate(trace, run.settings, workdir=tmp_path)
    assert not v.accepted
    e = v.first_unexplained
    # The block id of that commit was committed before: the spec's dedup refuses the second one.
    assert e.a == "insert" and any(x.a == "insert" and x.i == e.i for x in trace.events[:v.consumed]), v.summary()


def test_the_reference_subcommand_says_which_and_exits_by_the_contract(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "traces", "reference", "--blocks", "6", "--keep", str(tmp_path)],
                        capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0 and "reference: accepted:" in ok.stdout, ok.stdout + ok.stderr
    bad = subprocess.run([sys.executable, "-m", "traces", "reference", "--bug", "no_such_switch"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice: 'no_such_switch'" in bad.stderr and "Traceback" not in bad.stderr
