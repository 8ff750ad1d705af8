"""A reference run whose Keeper writes are a trace (issue 36): `python -m reference run` of the RFC
design on a ZooKeeper server started here, as a user runs it, its transaction log read back.

The trace abstraction knows the RFC's allocation and map versions, not yet its migrations: the
run makes INSERTs (with --fault-rate, forwards that break and are retried, so the dedup ids and
the forwarding show) into partitions allocated on first INSERT, and no REASSIGN or REBALANCE.
A broken switch that changes what the reference writes (--bug) should make the trace rejected.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from harness.zk_txnlog import read_txnlog
from harness.zookeeper import ZooKeeperServer
from protocol.cleanup_thread import CleanupSettings
from traces.clickhouse_run import RecordedRun

ROOT = "/reference_trace"


class ReferenceRunFailed(RuntimeError):
    """`python -m reference run` gave no run to read (its exit status and last lines say why)."""


@dataclass(frozen=True)
class ReferenceWorkload:
    replicas: int = 3
    blocks: int = 16
    months: int = 2
    buckets: int = 2
    fault_rate: float = 0.3
    seed: int = 1
    bug: str | None = None
    extra: tuple[str, ...] = field(default=())


def record_reference(w: ReferenceWorkload = ReferenceWorkload()) -> RecordedRun:
    names = [f"r{i}" for i in range(1, w.replicas + 1)]
    with ZooKeeperServer() as server, tempfile.TemporaryDirectory(prefix="reference-trace-") as data:
        cmd = [sys.executable, "-m", "reference", "run", "--zk", server.hosts, "--root", ROOT, "--data", data,
               "--replicas", str(w.replicas), "--blocks", str(w.blocks), "--months", str(w.months),
               "--buckets", str(w.buckets), "--fault-rate", str(w.fault_rate), "--seed", str(w.seed),
               "--queries", "0", "--query-rate", "0", *(["--bug", w.bug] if w.bug else []), *w.extra]
        ran = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if ran.returncode not in (0, 1):   # 1: the run's own checks found a violation; its trace is still one
            tail = (ran.stderr or ran.stdout).strip().splitlines()[-1:]
            raise ReferenceRunFailed(f"python -m reference run exited {ran.returncode}: {tail}")
        txns = read_txnlog(server.data_dir, 0, server.last_zxid())
    facts = {"exit": ran.returncode, "bug": w.bug, "fault_rate": w.fault_rate, "blocks": w.blocks}
    return RecordedRun(txns, ROOT, names, CleanupSettings(),
                       "reference (RFC design)", facts)
