"""Histories from reference runs, for `make spark-check`: the RFC's table, a cluster that grows
by a replica, a crash and restart during the rebalance, broken connections at INSERT, and
queries and inserts while partitions migrate."""

from __future__ import annotations

import random
from pathlib import Path

SCALES = {  # replicas at start, blocks, rows per block, months
    "small": (5, 30, 10, 2),
    "large": (10, 200, 50, 3),
}


def reference_history(folder: Path, seed: int, scale: str = "small", bugs=frozenset()) -> dict:
    """Run the scenario and write its history to `folder`; returns the in-process oracle's
    verdict and run figures (the Spark job must agree with the oracle)."""
    from reference.cluster import Cluster
    from reference.keeper import MemoryEnsemble
    from reference.oracle import violations
    from reference.workload import blocks

    n, n_blocks, rows, months = SCALES[scale]
    c = Cluster(MemoryEnsemble().connect, folder / "data", replicas=[f"r{i}" for i in range(1, n + 1)],
                seed=seed, fault_rate=0.05, bugs=bugs)
    try:
        rng = random.Random(seed)
        work = blocks(rng, n_blocks, rows, months)
        c.load(work, limit=n_blocks // 2)
        c.settle()
        state = {"steps": 0}

        def during():
            state["steps"] += 1
            if state["steps"] == 10:
                c.crash_replica("r1")
            if state["steps"] == 60:
                c.add_replica("r1")
            if c.rng.random() < 0.2:
                c.query(interleave=2)
            if c.rng.random() < 0.3:
                nxt = next(work, None)
                if nxt:
                    c.insert(nxt[1], nxt[0])

        moves = c.grow_and_rebalance([f"r{n + 1}"], during)
        if "r1" not in c.replicas:
            c.add_replica("r1")
        for block_id, block in work:
            c.insert(block, block_id)
        c.settle()
        for r in sorted(c.replicas):
            c.query(at=r)
        c.write_history(folder / "history")
        return {"oracle_violations": len(violations(c.history, c.table.replication_factor)), "moves": len(moves),
                "rows": len(c.history.tables["inserts"]), "queries": c.queries, "history": str(folder / "history")}
    finally:
        c.close()
