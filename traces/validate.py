"""Is a recorded run a behaviour of the spec? TLC on spec/rfc/TraceSelectiveReplication.tla (issue 36).

``validate`` writes the trace (traces/keeper_trace.py) as a TLA+ module beside a cfg that
gives the spec's constants from it, runs TLC with one worker, and reads the verdict: accepted
when TraceConsumedInv is violated (a behaviour consumed every event), rejected when TLC ends
without, and then the furthest event any behaviour consumed names the first one no action
explains. TLC 2.15 has no JSON module, hence the generated module.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.tlc.runner import HOLDS, INVARIANT_VIOLATED, run_tlc
from protocol.cleanup_thread import CleanupSettings
from traces.keeper_trace import Event, Trace, tla_module

SPEC_DIR = Path(__file__).resolve().parents[1] / "spec" / "rfc"


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    events: int
    consumed: int                  # events the furthest behaviour consumed
    first_unexplained: Event | None
    distinct_states: int | None
    seconds: float
    detail: str = ""

    def summary(self) -> str:
        if self.accepted:
            return f"accepted: {self.events} events, {self.distinct_states} distinct states, {self.seconds:.1f} s"
        e = self.first_unexplained
        what = f"event {self.consumed + 1} ({e.a} {e.why})" if e else "no event"
        return f"rejected at {what}: {self.consumed} of {self.events} events explained; {self.detail}".rstrip("; ")


CFG = """CONSTANTS
    Replicas <- TrReplicas
    Partitions <- TrPartitions
    RF = {rf}
    InsertPartition <- TrInsertPartition
    InitOwners <- TrInitOwners
    InitBlocks = {{}}
    Queries = {{}}
    MaxTries = {many}
    MaxMerges = {many}
    MaxAlters = {many}
    MaxMutations = {many}
    MaxDrops = {many}
    MaxMigrations = 0
    MaxConcurrentMigrations = 0
    MaxCrashes = {many}
    MaxReplicaDrops = 0
    BlockDuringClone = FALSE
    MinLogsToKeep = {min_logs}
    MaxLogsToKeep = {max_logs}
    DedupWindow = {dedup}
    Domain <- TrDomain
    Capacity <- TrCapacity
    Bugs = {{}}
    Trace <- TrTrace
    MergeWidths <- TrMergeWidths
    CaughtUp <- TraceCaughtUp
    Mergeable <- TraceMergeable
INIT TraceInit
NEXT TraceNext
INVARIANT TraceConsumedInv
CONSTRAINT TraceProgress
"""

_CONSUMED = re.compile(r'<<"trace-consumed", (\d+)>>')


def validate(trace: Trace, settings: CleanupSettings, workdir: str | Path | None = None,
             name: str = "Trace_run", timeout_s: float = 600) -> Verdict:
    """TLC's verdict on the trace under the run's cleanup settings (the spec's MinLogsToKeep,
    MaxLogsToKeep and DedupWindow); ``workdir`` keeps the module, cfg and TLC's log (else a
    temporary folder)."""
    keep = workdir is not None
    folder = Path(workdir) if keep else Path(tempfile.mkdtemp(prefix="trace-"))
    folder.mkdir(parents=True, exist_ok=True)
    module = folder / f"{name}.tla"
    module.write_text(tla_module(trace, name))
    cfg = folder / f"{name}.cfg"
    cfg.write_text(CFG.format(rf=trace.replication_factor or len(trace.replicas), many=len(trace.events) + 1,
                              min_logs=settings.min_logs_to_keep, max_logs=settings.max_logs_to_keep,
                              dedup=settings.dedup_window))
    log = folder / f"{name}.log"
    result = run_tlc(module, cfg, workers=1, check_deadlock=False, timeout_s=timeout_s,
                     jvm_args=[f"-DTLA-Library={SPEC_DIR}"], log_path=log)
    consumed = max((int(m) for m in _CONSUMED.findall(log.read_text())), default=0)
    n = len(trace.events)
    if result.outcome == INVARIANT_VIOLATED and result.violated == "TraceConsumedInv":
        return Verdict(True, n, n, None, result.distinct_states, result.duration_s)
    if result.outcome == HOLDS:
        first = trace.events[consumed] if consumed < n else None
        return Verdict(False, n, consumed, first, result.distinct_states, result.duration_s)
    raise RuntimeError(f"TLC did not give a verdict on {module}: {result.summary()} {result.errors[:3]} (log {log})")
