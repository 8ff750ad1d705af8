"""An INSERT (and a SELECT) with a deadline answers within it while ZooKeeper stalls (issue 38): its server is
stopped with SIGSTOP, so requests go out and no answer comes, which a killed server (connection
refused at once) never shows. Before, with a 3 s retry deadline per Keeper call, single INSERTs
blocked 15-25 s through such a stall: each of their calls waited out its own deadline, and a
call's retry could buy it a second one.

The answer is failed or unknown, never a wrong ok, and once ZooKeeper is back every replica
holds every acknowledged row (checkers/oracle.py)."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from checkers.oracle import violations
from harness.zookeeper import ZooKeeperServer
from protocol.keeper.zookeeper import ZooKeeperKeeper
from reference.cluster import Cluster
from reference.workload import WORKLOAD, blocks

pytestmark = [pytest.mark.zookeeper, pytest.mark.slow]

RETRY_DEADLINE = 4.0   # each Keeper call's own
DEADLINE = 0.5         # the INSERT's


@pytest.fixture
def stalling_zookeeper():
    with ZooKeeperServer() as server:
        yield server


def test_an_insert_and_a_select_answer_within_their_deadline_while_zookeeper_stalls(stalling_zookeeper, tmp_path):
    server = stalling_zookeeper
    setup = ZooKeeperKeeper(server.hosts)
    setup.ensure_path("/t")
    setup.close()
    c = Cluster(lambda: ZooKeeperKeeper(f"{server.hosts}/t", retry_deadline=RETRY_DEADLINE), tmp_path / "data",
                replicas=("r1", "r2", "r3"), seed=1)
    try:
        stream = blocks(random.Random(1), 8, 4, months=1)
        for block_id, rows in (next(stream) for _ in range(4)):
            assert set(c.insert(rows, block_id).values()) == {"ok"}
        c.settle()
        answers, took = [], []
        os.kill(server.pid, signal.SIGSTOP)
        try:
            for block_id, rows in (next(stream) for _ in range(2)):
                t0 = time.monotonic()
                answers.append(c.insert(rows, block_id, deadline=DEADLINE))
                took.append(time.monotonic() - t0)
            t0 = time.monotonic()
            selected = c.query(at="r1", deadline=DEADLINE)   # its pull at the start meets the stall
            took.append(time.monotonic() - t0)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        # Any one Keeper call would have waited out its 4 s: each stopped at its deadline.
        assert max(took) < RETRY_DEADLINE, took
        assert all(set(a.values()) <= {"failed", "unknown"} for a in answers), answers
        assert selected is None and c.history.tables["queries"][-1]["status"] == "failed"
        for block_id, rows in stream:   # ZooKeeper is back
            c.insert(rows, block_id)
        c.settle()
        c.query()
        c.snapshot()
        assert violations(c.history, WORKLOAD.replication_factor) == []
    finally:
        c.close()
