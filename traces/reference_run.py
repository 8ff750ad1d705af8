"""A reference run whose Keeper writes are a trace (issue 36): `python -m reference run` of the RFC
design on a ZooKeeper server started here, as a user runs it, its transaction log read back.

The quiet profile makes INSERTs (with --fault-rate, forwards that break and are retried, so the
dedup ids and the forwarding show) into partitions allocated on first INSERT; a racing profile
(reference/profiles.py) adds migrations, cancels, crashes and take-overs, SYSTEM DROP REPLICA and
repairs, drops and mutations, each a step the trace abstraction maps. A broken switch that
changes what the reference writes (--bug) should make the trace rejected (lab/trace_teeth.py).

PR #102244's design (`design="pr102244"`) runs `python -m reference run --design pr102244`: half
the blocks, a replica added, the rebalancer moving partitions onto it (CLONE, its GET_PARTs, the
target's rescan, SWITCH, DONE) while the other half is inserted, and the leavers dropping what they
no longer keep. Its trace is read by traces/pr_keeper_trace.py.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from harness.zk_txnlog import read_txnlog
from harness.zookeeper import ZooKeeperServer
from protocol.cleanup_thread import CleanupSettings
from reference.profiles import profile_of
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
    profile: str = "quiet"          # or a racing profile of reference/profiles.py: migrations, crashes, drops
    steps: int | None = None        # a racing profile's loop turns (None: the profile's)
    extra: tuple[str, ...] = field(default=())
    design: str = "rfc"             # or "pr102244": PR #102244's design
    readings: tuple[str, ...] = ()  # the PR design's readings of its text (--reading)


def record_reference(w: ReferenceWorkload = ReferenceWorkload()) -> RecordedRun:
    names = [f"r{i}" for i in range(1, w.replicas + 1)]
    with ZooKeeperServer() as server, tempfile.TemporaryDirectory(prefix="reference-trace-") as data:
        cmd = [sys.executable, "-m", "reference", "run", "--zk", server.hosts, "--root", ROOT, "--data", data,
               "--replicas", str(w.replicas), "--blocks", str(w.blocks), "--months", str(w.months),
               "--buckets", str(w.buckets), "--fault-rate", str(w.fault_rate), "--seed", str(w.seed),
               "--queries", "0", "--query-rate", "0", *(["--bug", w.bug] if w.bug else []), *w.extra]
        if w.design == "pr102244":
            cmd += ["--design", "pr102244", "--add-replicas", "1", "--rebalance",
                    *(x for r in w.readings for x in ("--reading", r))]
        else:
            cmd += ["--profile", w.profile, *(["--steps", str(w.steps)] if w.steps else [])]
        ran = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if ran.returncode not in (0, 1):   # 1: the run's own checks found a violation; its trace is still one
            tail = (ran.stderr or ran.stdout).strip().splitlines()[-1:]
            raise ReferenceRunFailed(f"python -m reference run exited {ran.returncode}: {tail}")
        txns = read_txnlog(server.data_dir, 0, server.last_zxid())
    facts = {"exit": ran.returncode, "bug": w.bug, "fault_rate": w.fault_rate, "blocks": w.blocks,
             "design": w.design, "readings": list(w.readings)}
    if w.design == "pr102244":
        names.append(f"r{w.replicas + 1}")   # the replica the run adds
        return RecordedRun(txns, ROOT, names, CleanupSettings(), "reference (PR #102244's design)", facts)
    # The cleanup thread's settings the run trimmed and forgot by: a racing profile's own (a short
    # log, to make replicas lost), else the Cluster's defaults.
    settings = CleanupSettings() if w.profile == "quiet" else profile_of(w.profile).cleanup
    return RecordedRun(txns, ROOT, names, settings, "reference (RFC design)", facts)
