"""Trace validation of real ClickHouse 18.16 (issue 36): what three replicas wrote into Keeper under
a random workload with a kill -9 and a lost replica is a behaviour of the spec, and the same trace
edited by hand in three ways is not, each rejected at the edit."""

from dataclasses import replace

import pytest

from traces.clickhouse_run import Workload, record
from traces.keeper_trace import read_trace
from traces.validate import validate

pytestmark = [pytest.mark.clickhouse, pytest.mark.zookeeper, pytest.mark.tlc, pytest.mark.slow]


@pytest.fixture(scope="module")
def zk_log(tmp_path_factory):
    """Where the module's run leaves a copy of its ZooKeeper transaction log."""
    return tmp_path_factory.mktemp("zk")


@pytest.fixture(scope="module")
def run(clickhouse_command, zk_log):
    return record(Workload(seed=2, inserts=24), keep_log=zk_log)


def _rel(run, path):
    return path[len(run.root) + 1:].split("/") if path and path.startswith(run.root + "/") else []


def _edit(run, zxid, ops):
    return [replace(t, ops=tuple(ops)) if t.zxid == zxid else t for t in run.txns]


def test_the_run_did_what_the_trace_is_meant_to_hold(run):
    f = run.facts
    assert f["lost"] is not None and len(f["killed"]) == 2
    assert f["merges"] >= 1 and f["mutations"] >= 1 and f["drops"] >= 1 and f["retries"] >= 1
    kinds = {e.a for e in read_trace(run.txns, run.root, run.replicas).events}
    assert {"insert", "pull", "execute", "merge", "mutation", "mutate", "drop", "trim", "forget",
            "crash", "clone"} <= kinds


def test_a_real_1816_trace_is_a_behaviour_of_the_spec(run, tmp_path):
    trace = read_trace(run.txns, run.root, run.replicas)
    assert not [e for e in trace.events if e.a == "unmapped"]
    v = validate(trace, run.settings, workdir=tmp_path)
    assert v.accepted, v.summary()
    assert v.consumed == len(trace.events) > 150


def test_a_fetch_of_a_part_nobody_made_is_rejected_there(run, tmp_path):
    # A replica's registration of a fetched part P_n_n_0, renamed to P_n_(n+1)_1: a merge of it and
    # the partition's next block, committed before, that nobody selected.
    trace = read_trace(run.txns, run.root, run.replicas)
    committed = {}   # part name -> index of its INSERT event
    target = None
    for n, e in enumerate(trace.events):
        if e.a == "insert":
            committed[e.why.rsplit("-> ", 1)[1]] = n
        if e.a == "execute" and e.part is not None and len(e.part[1]) == 1:
            name = e.why.split(" registered ", 1)[1].split(" ")[0]
            p, lo, hi, level = name.split("_")[:4]
            if lo == hi and level == "0" and f"{p}_{int(hi) + 1}_{int(hi) + 1}_0" in committed:
                target = (e, name, f"{p}_{lo}_{int(hi) + 1}_1")
                break
    assert target, "the run has no fetch of a part whose partition's next block was committed before it"
    e, name, bigger = target
    txn = next(t for t in run.txns if t.zxid == e.zxid)
    ops = [replace(op, path=op.path.replace(name, bigger)) if op.path and name in op.path else op for op in txn.ops]
    edited = read_trace(_edit(run, txn.zxid, ops), run.root, run.replicas)
    v = validate(edited, run.settings, workdir=tmp_path)
    assert not v.accepted
    assert v.first_unexplained.zxid == txn.zxid, v.summary()


def test_a_log_pointer_moving_backwards_is_rejected_there(run, tmp_path):
    pulls = [t for t in run.txns if any(op.type == "setData" and _rel(run, op.path)[2:] == ["log_pointer"]
                                        and int(op.data) >= 3 for op in t.ops)]
    txn = pulls[len(pulls) // 2]
    op = next(op for op in txn.ops if op.type == "setData" and _rel(run, op.path)[2:] == ["log_pointer"])
    back = replace(txn, zxid=txn.zxid + 0, ops=(replace(op, data=str(int(op.data) - 2).encode()),))
    at = run.txns.index(txn)
    # The same replica writes its pointer back by two right after: in the log's zxid order.
    txns = run.txns[:at + 1] + [replace(back, zxid=txn.zxid)] + run.txns[at + 1:]
    edited = read_trace(txns, run.root, run.replicas)
    v = validate(edited, run.settings, workdir=tmp_path)
    assert not v.accepted
    assert v.first_unexplained.a == "pull" and "backwards" in v.first_unexplained.why, v.summary()


def test_1816s_clone_keeping_a_partition_dropped_while_it_was_lost_is_rejected_at_the_clone(clickhouse_command,
                                                                                            tmp_path):
    # ClickHouse issue #6522 (fixed in 19.x by PR #6523): a lost replica's cloneReplica kept its
    # local parts the source no longer had, so a partition dropped while it was down came back on it.
    lost = record(Workload(seed=2, inserts=24, kill=False, drop_while_lost=True))
    assert lost.facts["lost"] and lost.facts["drops"] == 1
    trace = read_trace(lost.txns, lost.root, lost.replicas)
    v = validate(trace, lost.settings, workdir=tmp_path)
    assert not v.accepted
    assert v.first_unexplained.a == "clone" and v.first_unexplained.r == lost.facts["lost"], v.summary()


def test_a_log_entry_an_owner_skips_is_rejected_there(run, tmp_path):
    # A pull that queued one entry, its queue entry taken out: the replica moved its pointer past
    # an entry of a partition it keeps without queueing it.
    trace = read_trace(run.txns, run.root, run.replicas)
    pull = next(e for e in trace.events[len(trace.events) // 3:] if e.a == "pull" and e.take
                and sum(1 for x in trace.events if x.zxid == e.zxid) == 1)
    txn = next(t for t in run.txns if t.zxid == pull.zxid)
    ops = [op for op in txn.ops if not (op.type == "create" and _rel(run, op.path)[2:3] == ["queue"])]
    edited = read_trace(_edit(run, txn.zxid, ops), run.root, run.replicas)
    v = validate(edited, run.settings, workdir=tmp_path)
    assert not v.accepted
    assert v.first_unexplained.zxid == txn.zxid and v.first_unexplained.a == "pull", v.summary()


def test_the_command_line_validates_a_recorded_log_and_refuses_what_it_cannot_read(run, zk_log, tmp_path):
    import subprocess
    import sys

    from traces.clickhouse_run import CHROOT, TABLE_PATH

    s = run.settings
    cmd = [sys.executable, "-m", "traces", "validate", str(zk_log), "--replicas", "r1,r2,r3",
           "--min-logs-to-keep", str(s.min_logs_to_keep), "--max-logs-to-keep", str(s.max_logs_to_keep),
           "--dedup-window", str(s.dedup_window), "--keep", str(tmp_path / "out")]
    ok = subprocess.run(cmd + ["--root", CHROOT + TABLE_PATH], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("trace: accepted:") and (tmp_path / "out" / "trace" / "events.txt").is_file()
    wrong = subprocess.run(cmd + ["--root", "/nothing/here"], capture_output=True, text=True, timeout=300)
    assert wrong.returncode == 2 and wrong.stderr.strip() == \
        "python -m traces: bad input: the transaction log holds no write under /nothing/here"
    missing = subprocess.run(cmd[:4] + [str(tmp_path / "absent")] + cmd[5:] + ["--root", "/x"],
                             capture_output=True, text=True, timeout=300)
    # refused while the arguments are parsed (issue 41): the folder is not there
    assert missing.returncode == 2 and "argument data_dir: no such folder" in missing.stderr
    assert "Traceback" not in wrong.stderr + missing.stderr


def test_a_rejected_run_keeps_its_transaction_log_and_the_command_that_replays_it(clickhouse_command, tmp_path):
    # --drop-while-lost: 18.16's clone keeps the dropped parts (T8), rejected on every run
    import shlex
    import subprocess
    import sys

    keep = tmp_path / "keep"
    r = subprocess.run([sys.executable, "-m", "traces", "clickhouse", "--drop-while-lost", "--keep", str(keep)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(x for x in r.stdout.splitlines() if "kept its transaction log: " in x)
    replay = shlex.split(line.split("kept its transaction log: ", 1)[1])
    assert (keep / "clickhouse-seed2" / "zookeeper" / "version-2").is_dir()
    again = subprocess.run([sys.executable, *replay[1:]], capture_output=True, text=True, timeout=300)
    verdict = next(x for x in r.stdout.splitlines() if x.startswith("clickhouse-seed2: "))
    assert again.returncode == 1 and again.stdout.strip() == "trace: " + verdict.split(": ", 1)[1], again.stdout
