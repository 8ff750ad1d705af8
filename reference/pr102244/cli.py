"""`python -m reference run --design pr102244`: the run of reference/__main__.py on PR #102244's
design. The findings are races of INSERTs with CLONE and SWITCH, so half the blocks are loaded
before the migrations and the other half inserted during them (with queries at --query-rate),
from the rebalancer's cycles (`--max-concurrent` per cycle) or `--reassign` requests; then the
system tables, the history check (checkers/oracle.py) and the history, as the RFC run does.
Exit status: 0 the history holds, 1 a violation.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from checkers.oracle import violations
from checkers.pr102244_live import replication_factor
from harness.cli_args import BadInput
from protocol.pr102244 import READINGS
from protocol.pr102244.migration import migrations_rows
from reference.pr102244.cluster import PRCluster
from reference.pr102244.code_cluster import PRCodeCluster
from reference.workload import blocks


def check_readings(names) -> frozenset[str]:
    unknown = sorted(set(names) - set(READINGS))
    if unknown:
        raise BadInput(f"--reading: unknown reading(s) {unknown}; known: {', '.join(sorted(READINGS))}")
    return frozenset(names)


def cmd_run(a: argparse.Namespace, bugs, table, reassigns, connect, backend, data: Path, progress, out,
            print_table) -> int:
    """Called by reference/__main__.py's cmd_run once the arguments are checked (switches of this
    design, --reassign pairs, Keeper reachable) and the data folder chosen."""
    readings = check_readings(a.reading or [])
    if readings and a.as_code:
        raise BadInput("--reading names a reading of the PR's description; --as-code runs its code, which settles it")
    # --as-code: the code's step-by-step migration drivers (code_cluster.py); else the description's one-step one
    cluster = PRCodeCluster if a.as_code else PRCluster
    c = cluster(connect, data, [f"r{i}" for i in range(1, a.replicas + 1)], readings=readings,
                per_cycle=a.max_concurrent, table=table, root=a.root, bugs=bugs, seed=a.seed,
                fault_rate=a.fault_rate, backend=backend, log=progress)
    c.history.run_id = f"pr102244-{backend}-seed{a.seed}"
    try:
        work = list(blocks(random.Random(a.seed), a.blocks, a.rows, a.months))
        before, during_work = work[:len(work) // 2], iter(work[len(work) // 2:])
        statuses = c.load(before)   # not settled: the migrations start while replication still lags
        for r in a.crash or []:
            c.crash_replica(r)
        for k in range(a.add_replicas):
            c.add_replica(f"r{a.replicas + k + 1}")

        def during() -> None:
            """Between migration steps: the next block of the second half, and sometimes a query."""
            nxt = next(during_work, None)
            if nxt is not None:
                for st in c.insert(nxt[1], nxt[0]).values():
                    statuses[st] += 1
            if c.rng.random() < a.query_rate:
                c.query(interleave=2)

        for p, dst in reassigns:
            progress(f"MIGRATE PARTITION {p} TO {dst}: CLONE {c.reassign(p, dst)}")
        if reassigns:
            while c.migrations_in_flight():
                during()
                if not c.background_step():
                    c.settle()
                    break
        if a.rebalance:
            moves = c.rebalance(interleave=during)
            progress(f"rebalancer done: {len(moves)} migrations started")
        for nxt in during_work:   # what the migrations left of the second half
            for st in c.insert(nxt[1], nxt[0]).values():
                statuses[st] += 1
        c.end_of_run(a.restart or [], a.queries, a.history, a.history_format)
        problems = violations(c.history, c.table.replication_factor)
        keeper_problems = replication_factor(c)   # the counts live only in Keeper, not in the history
        tables = {"system.selective_assignments": c.assignment_rows(),
                  "system.selective_migrations": migrations_rows(c.admin, c.layout),
                  "counts": [{"replica": r, "count": n} for r, n in sorted(c.counts().items())]}
        if a.json:
            json.dump({"tables": tables, "inserts": statuses, "queries": c.queries, "steps": c.step,
                       "violations": problems, "keeper_violations": keeper_problems, "data": str(data)},
                      sys.stdout, indent=1, default=str)
            print()
        else:
            for name, rows in tables.items():
                print_table(name, rows, out)
            print(f"\nhistory check: {len(problems)} violations" + "".join(f"\n  {p}" for p in problems[:20]), file=out)
            print(f"Keeper check (ReplicationFactorInv with the counts): {len(keeper_problems)} violations"
                  + "".join(f"\n  {p}" for p in keeper_problems[:20]), file=out)
        return 1 if problems or keeper_problems else 0
    finally:
        c.close()
