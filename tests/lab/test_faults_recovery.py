"""What the fault suite counts as recovered, and the end state it reads (lab/faults.py), on the
in-memory keeper: a replica whose session expired is behind until it has a new one and has
pulled the log, and the cell's end re-establishes it before the final settle, as its restarting
thread would (found by the stall rows: a session whose expiry the client learnt only as the
runtime stopped was passed over by the settle, and its missing rows read as lost)."""

from __future__ import annotations

import random

from checkers.oracle import violations
from lab.faults import _behind, _caught_up, _reestablish_expired
from protocol.keeper import MemoryEnsemble
from reference.cluster import Cluster
from reference.workload import WORKLOAD, blocks


def test_an_expired_replica_is_behind_until_re_established_and_its_rows_then_arrive(tmp_path):
    ensemble = MemoryEnsemble()
    c = Cluster(ensemble.connect, tmp_path / "data", replicas=("r1", "r2", "r3"), seed=5)
    try:
        work = blocks(random.Random(5), 12, 3, months=1)
        for block_id, rows in (next(work) for _ in range(4)):
            c.insert(rows, block_id)
        c.settle()
        head: list[int] = []
        assert _caught_up(lambda: c.admin, c, head) and head and _behind(c.admin, c, head[0]) == {}
        ensemble.expire(c.replicas["r2"].keeper.session_id)
        for block_id, rows in work:   # acknowledged by the other owners while r2 is away
            c.insert(rows, block_id)
        c.settle()                     # passes r2 over: read-only while expired
        later: list[int] = []
        assert not _caught_up(lambda: c.admin, c, later) and _behind(c.admin, c, later[0]) == {"r2": "session expired"}
        _reestablish_expired(c)
        assert not c.replicas["r2"].keeper.expired
        assert set(_behind(c.admin, c, later[0])) == {"r2"}    # active again, the log not pulled yet
        c.settle()
        assert _caught_up(lambda: c.admin, c, later)
        c.query()
        c.snapshot()
        assert violations(c.history, WORKLOAD.replication_factor) == []
    finally:
        c.close()
