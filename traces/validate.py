"""Is a recorded run a behaviour of the spec? TLC on spec/rfc/TraceSelectiveReplication.tla (issue 36).

``validate`` writes the trace (traces/keeper_trace.py) as a TLA+ module beside a cfg that
gives the spec's constants from it, runs TLC with one worker to the end of the behaviours that
follow the trace, and reads the verdict from the furthest event any of them consumed (the trace
spec's TraceProgress prints it): accepted when that is the last event, rejected otherwise, and
then the next event is the first one no action explains. (Checking TraceConsumedInv would stop
TLC at acceptance, but it then prints the whole behaviour: 34 MB for 834 events.) The core's
safety invariants are checked on every state on the way (INVARIANTS): one that fails is the
verdict, with the last event consumed before it. TLC 2.15 has no JSON
module, hence the generated module.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.tlc.runner import HOLDS, INVARIANT_VIOLATED, run_tlc
from protocol.cleanup_thread import CleanupSettings
from traces.keeper_trace import Event, Trace, read_trace, tla_module
from traces.pr_keeper_trace import PRTrace, read_pr_trace
from traces.pr_keeper_trace import tla_module as pr_tla_module

if TYPE_CHECKING:
    from traces.clickhouse_run import RecordedRun

SPEC_DIR = Path(__file__).resolve().parents[1] / "spec" / "rfc"
PR_SPEC_DIR = SPEC_DIR.parent / "pr102244"


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    events: int
    consumed: int                  # events the furthest behaviour consumed
    first_unexplained: Event | None
    distinct_states: int | None
    seconds: float
    detail: str = ""
    violated: str | None = None    # a core invariant that failed on a behaviour following the trace

    def summary(self) -> str:
        if self.violated:
            return (f"violates {self.violated} after event {self.consumed} of {self.events} "
                    f"({self.first_unexplained.a} {self.first_unexplained.why}): a behaviour of the spec that "
                    f"follows the trace so far breaks it")
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
    MaxMigrations = {many}
    MaxConcurrentMigrations = {many}
    MaxCrashes = {many}
    MaxReplicaDrops = {many}
    BlockDuringClone = FALSE
    MinLogsToKeep = {min_logs}
    MaxLogsToKeep = {max_logs}
    DedupWindow = {dedup}
    Domain <- TrDomain
    Capacity <- TrCapacity
    Bugs = {{{bugs}}}
    Trace <- TrTrace
    MergeWidths <- TrMergeWidths
    CaughtUp <- TraceCaughtUp
    Mergeable <- TraceMergeable
    MergeSets <- TraceMergeSets
INIT TraceInit
NEXT TraceNext
INVARIANTS
    {invariants}
CONSTRAINT TraceProgress
"""

# The core's safety invariants (MCFull.cfg's), checked on every state of the behaviours that follow
# the trace: an accepted trace is a behaviour in which they hold all along. Those about queries and
# acknowledgements hold vacuously (a trace has neither: Keeper does not show them).
INVARIANTS = ("TypeOKInv", "ReplicationFactorInv", "AckedCommittedInv", "NoAckedBlockLostInv", "OwnersCompleteInv",
              "NoDuplicateRowsInv", "GlobalEntriesAppliedInv", "NoForeignPartsInv", "CleanupSafeInv",
              "MutationsAppliedInv", "DropsAppliedInv", "DomainAntiAffinityInv", "MigrationOutcomeInv")

_CONSUMED = re.compile(r'<<"trace-consumed", (\d+)>>')


def validate(trace: Trace, settings: CleanupSettings, workdir: str | Path | None = None,
             name: str = "Trace_run", timeout_s: float = 600, bugs: frozenset[str] = frozenset()) -> Verdict:
    """TLC's verdict on the trace under the run's cleanup settings (the spec's MinLogsToKeep,
    MaxLogsToKeep and DedupWindow); ``workdir`` keeps the module, cfg and TLC's log (else a
    temporary folder). ``bugs``: against the spec with these broken-variant switches on (a run of
    the reference with the same switches is then a behaviour, until an invariant fails)."""
    keep = workdir is not None
    folder = Path(workdir) if keep else Path(tempfile.mkdtemp(prefix="trace-"))
    folder.mkdir(parents=True, exist_ok=True)
    module = folder / f"{name}.tla"
    module.write_text(tla_module(trace, name))
    cfg = folder / f"{name}.cfg"
    # F17's stated bound: a retry after its hash left the dedup window is written twice, so with a
    # window smaller than the run's INSERTs (the 18.16 workload keeps 8, to make the cleanup thread
    # forget) NoDuplicateRowsInv is the bound, not a property of the run.
    checked = [i for i in INVARIANTS if i != "NoDuplicateRowsInv" or settings.dedup_window >= len(trace.block_ids)]
    cfg.write_text(CFG.format(rf=trace.replication_factor or len(trace.replicas), many=len(trace.events) + 1,
                              min_logs=settings.min_logs_to_keep, max_logs=settings.max_logs_to_keep,
                              dedup=settings.dedup_window, invariants="\n    ".join(checked),
                              bugs=", ".join(f'"{b}"' for b in sorted(bugs))))
    return _verdict(trace.events, module, cfg, SPEC_DIR, timeout_s)


def _verdict(events: list, module: Path, cfg: Path, library: Path, timeout_s: float) -> Verdict:
    """TLC on a trace's module and cfg (one worker), and what it found: the furthest event
    consumed (TraceProgress), or an invariant that failed on a behaviour following the trace."""
    log = module.with_suffix(".log")
    result = run_tlc(module, cfg, workers=1, check_deadlock=False, timeout_s=timeout_s,
                     jvm_args=[f"-DTLA-Library={library}"], log_path=log)
    consumed = max((int(m) for m in _CONSUMED.findall(log.read_text())), default=0)
    n = len(events)
    if result.outcome == INVARIANT_VIOLATED and result.trace:
        at = int(result.trace[-1].state.get("l", 0))   # the events consumed in the violating state
        return Verdict(False, n, at, events[at - 1] if at else None, result.distinct_states,
                       result.duration_s, violated=result.violated)
    if result.outcome == HOLDS:
        if consumed == n:
            return Verdict(True, n, n, None, result.distinct_states, result.duration_s)
        first = events[consumed] if consumed < n else None
        return Verdict(False, n, consumed, first, result.distinct_states, result.duration_s)
    raise RuntimeError(f"TLC did not give a verdict on {module}: {result.summary()} {result.errors[:3]} (log {log})")


def _strings(xs) -> str:
    return ", ".join(f'"{x}"' for x in sorted(xs))


PR_CFG = """CONSTANTS
    Replicas <- TrReplicas
    RF = {rf}
    Partitions <- TrPartitions
    PartitionOf <- TrPartitionOf
    InitOwners <- TrInitOwners
    Blocks <- TrBlocks
    MigIds <- TrMigIds
    MaxFails = {many}
    MaxCrashes = {many}
    MaxQueries = 0
    MaxForwards = 0
    MaxCycles = 0
    CycleLimit = 0
    Bugs = {{{bugs}}}
    Readings = {{{readings}}}
    Trace <- TrTrace
    AllocationCandidates <- TrAllocationCandidates
    CloneEntryOrder <- TrCloneEntryOrder
INIT TraceInit
NEXT TraceNext
INVARIANTS
    {invariants}
CONSTRAINT TraceProgress
"""

# PR102244Whole's safety invariants but R2's (a trace has no queries: Keeper does not show them).
PR_INVARIANTS = ("TypeOKInv", "ReplicationFactorInv", "NoAckedBlockLostInv", "OwnersCompleteInv", "NoDuplicateRowsInv")


def validate_pr(trace: PRTrace, workdir: str | Path | None = None, name: str = "Trace_pr_run",
                timeout_s: float = 600, bugs: frozenset[str] = frozenset(),
                readings: frozenset[str] = frozenset()) -> Verdict:
    """TLC's verdict on a trace of PR #102244's design (traces/pr_keeper_trace.py) against
    spec/pr102244/TracePR102244.tla, with the run's readings of the PR's text and, to find the
    state a broken variant's run reaches, its switches."""
    folder = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="trace-pr-"))
    folder.mkdir(parents=True, exist_ok=True)
    module = folder / f"{name}.tla"
    module.write_text(pr_tla_module(trace, name))
    cfg = folder / f"{name}.cfg"
    cfg.write_text(PR_CFG.format(rf=trace.replication_factor, many=len(trace.events) + 1, bugs=_strings(bugs),
                                 readings=_strings(readings), invariants="\n    ".join(PR_INVARIANTS)))
    return _verdict(trace.events, module, cfg, PR_SPEC_DIR, timeout_s)


def validate_run(run: RecordedRun, workdir: str | Path | None = None) -> tuple[Trace | PRTrace, Verdict]:
    """A recorded run (real ClickHouse's or the reference's, of either design): its trace, read
    from the run's transaction log, and TLC's verdict on it under the settings the run used."""
    if run.facts.get("design") == "pr102244":
        trace = read_pr_trace(run.txns, run.root, run.replicas)
        return trace, validate_pr(trace, workdir=workdir, readings=frozenset(run.facts.get("readings", ())))
    trace = read_trace(run.txns, run.root, run.replicas)
    return trace, validate(trace, run.settings, workdir=workdir)
