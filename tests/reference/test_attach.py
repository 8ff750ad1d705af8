"""A run killed with kill -9 and carried on (`reference run --attach`, issue 38): the table in
Keeper, the parts on disk and the journaled history (history/journal.py) are what the attach
starts from, and one history spans every kill, judged by the oracle, DuckDB and the Spark job.

First what a kill inside a step leaves on a replica's disk, on the in-memory keeper (a part
written and not committed, a registered part gone), then kills of a real `python -m reference
run` process on a real ZooKeeper at each phase of a run: inside an INSERT (which the attach sends
again with its block id, as a client whose connection broke does), in CLONE, after a SWITCH,
after a CLEANUP.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
import subprocess
from collections import Counter
import sys
from pathlib import Path

import pytest

from checkers.oracle import violations
from harness.killed_run import kill_when, kill_while_inserting, start_run
from protocol.keeper import MemoryEnsemble
from protocol.parts import PartName
from reference.cluster import Cluster
from reference.workload import blocks


def _settled(tmp_path) -> Cluster:
    c = Cluster(MemoryEnsemble().connect, tmp_path / "data", replicas=("r1", "r2", "r3"))
    c.load(blocks(random.Random(1), 6, 5, 1))
    c.settle()
    return c


def test_a_part_written_and_never_committed_is_detached_at_start_not_served(tmp_path):
    c = _settled(tmp_path)
    try:
        p = sorted(c.stores["r1"].names())[0].partition
        c.crash_replica("r1")
        # What a kill between the part's write and its commit multi leaves: a part Keeper does not name.
        orphan = c.down["r1"].write(PartName(p, 900, 900, 0), [{"row_id": 10**6}])
        c.add_replica("r1")
        assert orphan not in c.stores["r1"].names()
        assert (tmp_path / "data" / "r1" / "detached" / f"ignored_{orphan}.part").exists()
        assert c.stores["r1"].detached(p) == []   # ATTACH PARTITION does not take it back
        c.end_of_run(queries=2)
        assert violations(c.history, c.table.replication_factor) == []
    finally:
        c.close()


def test_a_registered_part_gone_from_disk_is_fetched_again(tmp_path):
    c = _settled(tmp_path)
    try:
        lost = sorted(c.stores["r2"].names())[0]
        c.crash_replica("r2")
        c.down["r2"].remove(lost)
        c.add_replica("r2")
        assert lost not in c.stores["r2"].names()
        assert [e.new_part_name for _, e in c.replicas["r2"].queue()] == [str(lost)]
        c.settle()
        assert lost in c.stores["r2"].names()
        c.end_of_run(queries=2)
        assert violations(c.history, c.table.replication_factor) == []
    finally:
        c.close()


# --- kill -9 of the whole process, on ZooKeeper -------------------------------------------

@pytest.mark.zookeeper
@pytest.mark.spark
def test_a_run_killed_at_each_phase_and_attached_each_time_ends_with_one_history_that_holds(zk_chroot, tmp_path,
                                                                                            spark):
    blocks_n = 40
    where = ["--zk", zk_chroot, "--root", "/t", "--data", str(tmp_path / "data"), "--history", str(tmp_path / "h")]
    first = [*where, "--blocks", str(blocks_n), "--add-replicas", "1", "--rebalance", "--queries", "2"]
    kills = []
    # Each kill where the run is: inside an INSERT (sent, not answered), a CLONE started, a SWITCH
    # made, a CLEANUP done.
    for i, marker in enumerate(["inserted 16/", "(CLONE)", "SWITCH", "CLEANUP"]):
        out = tmp_path / f"run{i}.out"
        proc = start_run(first if i == 0 else [*where, "--attach"], out)
        if i == 0 and kill_while_inserting(proc, tmp_path / "h" / "journal", out, after=marker) or (
                i > 0 and kill_when(proc, out, marker)):
            kills.append(marker)
        else:
            assert proc.returncode == 0, out.read_text()[-2000:]
    assert len(kills) >= 3, kills   # the later markers come again after an attach: at least three kill
    out = tmp_path / "final.out"
    proc = start_run([*where, "--attach"], out)
    assert proc.wait(timeout=300) == 0, out.read_text()[-3000:]   # the oracle's verdict on the whole history
    text = out.read_text()
    assert "history check: 0 violations" in text and "history resumed from" in text

    import pyarrow.parquet as pq
    inserts = pq.read_table(tmp_path / "h" / "inserts.parquet").to_pylist()
    # The INSERT the first kill cut off was recorded unknown (what its client was told) and sent
    # again with its block id by the attach: answered ok, its rows held once (the checkers below).
    resent = re.search(r"(\d+) sent and not answered are sent again", (tmp_path / "run1.out").read_text())
    assert resent and int(resent[1]) >= 1, "the first kill caught no INSERT in flight (its answer came first)"
    unknown = {r["block_id"] for r in inserts if r["status"] == "unknown"}
    assert len(unknown) == int(resent[1])
    last = {}
    for r in sorted(inserts, key=lambda r: r["ack_step"]):
        last[r["row_id"]] = r["status"]
    assert sorted(last) == list(range(blocks_n * 10)) and set(last.values()) == {"ok"}   # every block, each answered ok
    sendings = Counter(r["row_id"] for r in inserts)   # twice (unknown, then ok) if sent again, else once
    assert all(sendings[r["row_id"]] == (2 if r["block_id"] in unknown else 1) for r in inserts)
    crashes = pq.read_table(tmp_path / "h" / "crashes.parquet").to_pylist()
    assert len({r["step"] for r in crashes}) == len(kills)     # each kill took every replica at once
    duck = subprocess.run([sys.executable, "-m", "checkers.duckdb_check", str(tmp_path / "h")],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert duck.returncode == 0, duck.stdout + duck.stderr
    from pyspark_jobs.spark_check import check_folder   # the third checker, on the same history
    with contextlib.redirect_stdout(io.StringIO()):
        report = check_folder(spark, str(tmp_path / "h"), 3)
    assert [n for n, r in report["invariants"].items() if not r["holds"]] == [] and len(report["invariants"]) > 10
