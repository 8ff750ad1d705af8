"""The live cluster: replica threads interleave steps in an order nobody chose while the test
inserts, queries, crashes a replica and rebalances. Afterwards the history must be exact."""

import random
import time


from checkers.oracle import violations
from reference.cluster import Cluster
from reference.runtime import LiveCluster
from reference.workload import blocks


def wait_for(cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_live_cluster_with_a_crash_and_a_rebalance(connect, tmp_path):
    c = Cluster(connect, tmp_path / "data", replicas=("r1", "r2", "r3", "r4"), seed=5, fault_rate=0.05)
    rng = random.Random(5)
    work = blocks(rng, 24, 5, months=2)
    try:
        with LiveCluster(c) as live:
            for i, (block_id, rows) in enumerate(work):
                live.insert(rows, block_id)
                if i == 6:
                    live.crash("r2")  # whatever r2 was doing (coordinating, fetching) stops here
                if i == 12:
                    live.restart("r2")
                if i % 4 == 3:
                    live.query()
            with live.lock:
                c.add_replica("r5")
            live._start_thread("r5")
            started = live.rebalance_started()
            assert started, "a fifth replica with no partitions must get some"
            for _ in range(3):
                live.query()
            wait_for(lambda: not live.migrations_in_flight() and not live.rebalance_started())
            assert live.steps > 100
        c.settle()  # threads stopped: finish what is queued, deterministically
        c.query(at="r5")
        c.snapshot()
        assert violations(c.history, 2) == []
        assert any(x["replica"] == "r5" for x in c.history.tables["parts"])
    finally:
        c.close()
