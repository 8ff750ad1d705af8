--------------------------- MODULE TracePR102244 ---------------------------
(***************************************************************************)
(* Trace validation of PR #102244's design (issue 36): is a recorded run a *)
(* behaviour of PR102244Whole? The RFC design's is                         *)
(* spec/rfc/TraceSelectiveReplication.tla; this is the same method on the  *)
(* PR's module. A run writes its znodes in ZooKeeper; traces/              *)
(* pr_keeper_trace.py reads them from the transaction log as one event per *)
(* step, and TLC explores the behaviours of the module's actions that      *)
(* consume the events in order, each taken by the action it names with the *)
(* outcome the run wrote (the log index an entry got, the owners an        *)
(* assignment was created with, the snapshot a CLONE took). The trace is   *)
(* accepted when some behaviour consumes all of it; otherwise the next     *)
(* event is the first no action explains. traces/validate.py checks the   *)
(* module's safety invariants on every state on the way.                   *)
(*                                                                         *)
(* What the module has and Keeper does not show is left out of the trace:  *)
(* forwarding (a forwarded block is committed by the owner it reached, the *)
(* same multi as a direct INSERT: WriteInsert by that owner), queries, the *)
(* rebalancer's cycles (its moves are CLONE multis: StartClone).           *)
(***************************************************************************)
EXTENDS PR102244Whole, TLC

CONSTANT Trace   \* the events, oldest first (traces/pr_keeper_trace.py's PREvent)

VARIABLE l       \* events consumed

tvars == <<vars, l>>

\* The trace as a definition, which TLC evaluates once: a constant given an operator by `<-` in the
\* cfg (as traces/validate.py gives Trace) is evaluated anew at every reference (tlaplus/tlaplus,
\* SpecProcessor.processConstantDefns: "caching values" for such substitutions is left out on
\* purpose). Each mention of Trace rebuilt the run's every event: 6 ms a time for 938 events, most
\* of trace validation's time.
Events == Trace

TraceInit == Init /\ l = 0 /\ TLCSet(1, 0)

Range(s) == {s[i] : i \in DOMAIN s}

\* The replicas an assignment chose among: those active when it was written (the event's).
TrAllocationCandidates == Events[l + 1].act

\* The order the coordinator wrote a snapshot's GET_PARTs in: the event's.
TrCloneEntryOrder(S) == Events[l + 1].bs

\* --- events -------------------------------------------------------------------

\* An INSERT's commit multi by r: it is the k-th entry of the log.
InsertEvent(e) == e.a = "insert" /\ WriteInsert(e.r, e.b) /\ Len(log') = e.k

\* ensurePartitionAssignment by the replica the INSERT reached, with the owners it wrote.
AllocateEvent(e) == e.a = "allocate" /\ EnsurePartitionAssignment(e.r, e.p) /\ asg'[e.p].owners = e.owners

\* r's cache took Keeper's assignment of p (replicas/r/maps/p). The module's RefreshView refreshes
\* every partition at once; the PR's cache expires entry by entry ([R1]'s TTL per partition), so a
\* trace refreshes one: what r wrote must be what Keeper held.
MapEvent(e) ==
    /\ e.a = "map"
    /\ [owners |-> e.owners, cloning |-> e.cloning, ver |-> e.ver] = KeeperView(e.p)
    /\ view' = [view EXCEPT ![e.r][e.p] = KeeperView(e.p)]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, queue, parts, committed, aux, inv_missed, ins>>

\* r's log_pointer moved past entry k; take: a queue entry was created for it. The filter's
\* decision (Keeps) must be what the run did. The module does not queue an entry whose block r
\* holds; the run queues it and removes it unexecuted (ExecuteDoneEvent).
PullEvent(e) ==
    /\ e.a = "pull"
    /\ log[e.k] = e.b
    /\ Pull(e.r)
    /\ ptr'[e.r] = e.k
    /\ Keeps(e.r, e.p) = e.take

\* r fetched the part of its queued GET_PART.
ExecuteEvent(e) == e.a = "execute" /\ Fetch(e.r, e.b)

\* A queue entry removed with no part: of a block the module never queued there (r holds it).
ExecuteDoneEvent(e) == e.a = "execute_done" /\ e.b \notin queue[e.r] /\ UNCHANGED vars

CloneEvent(e) == e.a = "clone" /\ StartClone(e.m, e.p, e.s, e.t) /\ mig'[e.m].snap = Range(e.bs)

WriteEntriesEvent(e) ==
    /\ e.a = "write_entries"
    /\ Range(e.bs) = mig[e.m].snap /\ Len(e.bs) = Cardinality(mig[e.m].snap)
    /\ WriteCloneEntries(e.m)
    /\ Len(log) + 1 = e.k

\* The target's rescan queued exactly the registered parts it lacked.
RescanEvent(e) ==
    /\ e.a = "rescan"
    /\ Rescan(e.m)
    /\ Range(e.bs) = Registered(mig[e.m].part) \ parts[mig[e.m].tgt]

CompleteEvent(e) == e.a = "complete" /\ SignalComplete(e.m)
SwitchEvent(e) == e.a = "switch" /\ Switch(e.m)
DoneEvent(e) == e.a = "done" /\ Done(e.m)
FailEvent(e) == e.a = "fail" /\ Fail(e.m)

\* A replica took over a migration whose coordinator is down: the module's TakeOver, or, for a
\* further migration of the same dead coordinator, the replica that took over already.
TakeOverEvent(e) == e.a = "take_over" /\ (TakeOver(e.r) \/ (coord = e.r /\ UNCHANGED vars))

\* A replica's session ended: its process is gone, and its cache with it (a restart reloads it:
\* MapEvent). The module takes no replica down but the coordinator, whose crash loses its progress
\* (CoordinatorCrash); a trace does, so the crash is this action of its own. Without the cache
\* gone, Leaving would count a dead replica's cached owners, which route nothing: the fixed
\* design's source asks only running replicas (protocol/pr102244/replica.py published_views), and
\* the first trace with a crash was rejected at the leaver's drop.
NoView == [p \in Partitions |-> [owners |-> {}, cloning |-> {}, ver |-> 0]]
CrashEvent(e) ==
    /\ e.a = "crash"
    /\ view' = [view EXCEPT ![e.r] = NoView]
    /\ \/ coord # None /\ coord' = None /\ aux.crashes < MaxCrashes /\ aux' = [aux EXCEPT !.crashes = @ + 1]
       \/ UNCHANGED <<coord, aux>>
    /\ UNCHANGED <<asg, aver, counts, mig, log, ptr, queue, parts, committed, inv_missed, ins>>

\* r removed its parts of p (and then its queue entries of p): all it had.
DropEvent(e) == e.a = "drop" /\ Of(parts[e.r], e.p) = Range(e.bs) /\ DropUnassigned(e.r, e.p)

Explained(e) ==
    \/ InsertEvent(e) \/ AllocateEvent(e) \/ MapEvent(e) \/ PullEvent(e) \/ ExecuteEvent(e) \/ ExecuteDoneEvent(e)
    \/ CloneEvent(e) \/ WriteEntriesEvent(e) \/ RescanEvent(e) \/ CompleteEvent(e) \/ SwitchEvent(e)
    \/ DoneEvent(e) \/ FailEvent(e) \/ TakeOverEvent(e) \/ CrashEvent(e) \/ DropEvent(e)

TraceNext == l < Len(Events) /\ Explained(Events[l + 1]) /\ l' = l + 1

\* Checked as an invariant, its violation is the acceptance (traces/validate.py reads
\* TraceProgress instead, as for the RFC design's traces).
TraceConsumedInv == l < Len(Events)

\* A state constraint that prints the furthest event consumed each time it grows.
TraceProgress == IF l > TLCGet(1) THEN TLCSet(1, l) /\ PrintT(<<"trace-consumed", l>>) ELSE TRUE
=============================================================================
