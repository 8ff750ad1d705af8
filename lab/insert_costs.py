"""Keeper requests of one INSERT and one SELECT on the reference, counted on the replicas'
sessions: the reference section of `make bench` (lab/bench.py) and the Distributed baseline
(lab/bench_distributed.py) measure with it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def _sessions(c) -> list:
    """The replicas' Keeper sessions: the protocol's requests. Not the administrator's, through
    which the harness reads what it records (history/refusals.observe reads the write path before
    every INSERT try; counted, it made one INSERT 24 requests instead of the protocol's 2)."""
    return [r.keeper for r in c.replicas.values()]


def _ops(c) -> Counter:
    total = Counter()
    for k in _sessions(c):
        total.update(k.ops)
    return total


def _delta(before: Counter, after: Counter) -> dict:
    d = {k: after[k] - before[k] for k in after if after[k] - before[k]}
    requests = sum(v for k, v in d.items() if k != "multi_ops")
    writes = sum(d.get(k, 0) for k in ("create", "set", "delete", "multi"))
    return {"requests": requests, "writes": writes, "entries_in_multi": d.get("multi_ops", 0), "by_kind": d}


def insert_costs(connect, tmp: Path, replicas: int, mode: str) -> dict:
    """Keeper requests for one one-row INSERT into a new and then an existing partition, and the
    cluster-wide requests until every replica has settled (the replication cost)."""
    from protocol.assignment import Assignment
    from protocol.table import Table
    from reference.cluster import Cluster
    from reference.workload import WORKLOAD

    names = [f"r{i}" for i in range(1, replicas + 1)]
    rf = replicas if mode == "plain" else 2
    table = Table(WORKLOAD.name, WORKLOAD.columns, WORKLOAD.partition_by, WORKLOAD.order_by, replication_factor=rf)
    bugs = {"insert_without_assignment_check"} if mode == "plain" else set()
    c = Cluster(connect, tmp / mode, replicas=names, table=table, bugs=bugs, seed=1)
    try:
        if mode == "plain":
            # Plain replication: every replica keeps every partition and nothing is allocated or
            # checked. The assignment exists beforehand only so the reference's filter keeps all.
            c.admin.create(c.layout.assignment("202401-1"), Assignment(tuple(names)).encode())
            for rep in c.replicas.values():
                rep.load_map()
        out = {}
        row = {"date": "2024-01-15", "user_id": 1, "event": "view"}
        for case, block in (("new_partition", "b0"), ("existing_partition", "b1")):
            before = _ops(c)
            status = c.insert([{**row, "row_id": len(out)}], block)
            assert set(status.values()) == {"ok"}, status
            insert = _delta(before, _ops(c))
            before = _ops(c)
            c.settle()
            replication = _delta(before, _ops(c))
            out[case] = {"insert": insert, "until_settled": replication}
        before = _ops(c)
        from protocol.query import select_all
        q = select_all(c.replicas["r1"], c.replicas)
        assert q.done
        out["select"] = _delta(before, _ops(c))
        return out
    finally:
        c.close()
