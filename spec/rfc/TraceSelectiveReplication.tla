---------------------- MODULE TraceSelectiveReplication ----------------------
(***************************************************************************)
(* Trace validation (issue 36), in the manner of etcd-io/raft's            *)
(* Traceetcdraft.tla: is a recorded run a behaviour of SelectiveReplication? *)
(*                                                                         *)
(* A trace is what a run wrote into Keeper, read from ZooKeeper's          *)
(* transaction log (harness/zk_txnlog.py) and abstracted to one event per  *)
(* spec step by traces/keeper_trace.py, which says which write is          *)
(* which event. TLC explores the behaviours of the core module's actions   *)
(* that consume the trace in order: each event must be taken by the action *)
(* it names, with the outcome the run wrote (the log index an entry got,   *)
(* the part a replica registered). What Keeper does not show (a client     *)
(* sending an INSERT, giving up on one) is taken only where the next event *)
(* needs it, so the search stays near one behaviour.                       *)
(*                                                                         *)
(* The trace is accepted when some behaviour consumes all of it: the      *)
(* furthest event any behaviour reached, printed as it grows              *)
(* (TraceProgress), is then the last, and the run is a behaviour of the    *)
(* spec. When it is not, the next event is the first no action explains:   *)
(* a bug in the system, or a hole in the model. traces/validate.py also   *)
(* checks the core's safety invariants on every state on the way.          *)
(***************************************************************************)
EXTENDS SelectiveReplication, TLC

CONSTANT Trace   \* the events, oldest first (traces/keeper_trace.py's Event)

\* The variables' names must be no name the core module binds in a LET or a quantifier: TLC 2.15
\* evaluated ReplicaCleanupForDownLeaver's `LET l == Leaver(p)` as this `l` (an integer compared with
\* a replica) until the core's was renamed.
VARIABLES
    l,       \* events consumed
    made     \* every part some replica has held: ClickHouse keeps a replaced part (Outdated) on
             \* disk for old_parts_lifetime (480 s) and serves it to a fetch that names it

tvars == <<vars, l, made>>

\* The trace as a definition, which TLC evaluates once: a constant given an operator by `<-` in the
\* cfg (as traces/validate.py gives Trace) is evaluated anew at every reference (tlaplus/tlaplus,
\* SpecProcessor.processConstantDefns: "caching values" for such substitutions is left out on
\* purpose). Each mention of Trace rebuilt the run's every event: 6 ms a time for 938 events, most
\* of trace validation's time.
Events == Trace

TraceInit == Init /\ l = 0 /\ made = UNION {parts[r] : r \in Replicas} /\ TLCSet(1, 0)

\* The entry of r's queue an event names: by its log index, or, for one a clone of a lost
\* replica made up (GET_PART of a part its source has, log index 0), by its part.
Queued(r, e) == {x \in queue[r] : x.k = e.k /\ (e.k # 0 \/ x.part = e.q)}

\* Who may select a merge or a mutation. The core module lets only a replica caught up on the
\* partition select (CaughtUp: nothing of it queued or unpulled), as a stand-in for ClickHouse's
\* selection from its "virtual parts" (the parts its queue will make). 18.16 selects with entries
\* of the partition still in its queue, its own MUTATE_PARTs among them (trace validation's first
\* finding, spec/README.md): a trace overrides CaughtUp with this, and the parts selected must
\* still be on the selector's disk (PartsOf), as in the core's actions.
TraceCaughtUp(r, p) == TRUE

\* The mutations part x has still to go through: those numbered above its version whose data
\* (blocks below the number) it holds.
Pending(x) == {m \in {muts[j] : j \in DOMAIN muts} : x.mv < m /\ \E blk \in x.b : blk[2] < m}
\* 18.16 merges parts that owe the same mutations, whatever their versions (a part a mutation
\* rewrote with parts written after it; the result takes the highest version): trace validation's
\* third finding (spec/README.md). A trace overrides the core's Mergeable with this.
TraceMergeable(S) == \A x, y \in S : Pending(x) = Pending(y)

\* The one set of parts the next event's merge can have taken: the selector's parts inside the
\* merged part (a merge takes a range of active parts, which do not overlap); none for any other
\* event. The core's MergeSets is every subset, which TLC enumerates at each merge event.
TraceMergeSets(r, p) ==
    LET e == Events[l + 1] IN
    IF e.a = "merge" /\ e.r = r /\ e.p = p THEN {{x \in PartsOf(r, p) : x.b \subseteq e.part.b}} ELSE {}

\* --- events -------------------------------------------------------------------

\* An INSERT's commit multi by r (blocks/ hash, log/log-N GET_PART, replicas/r/parts): it is the
\* k-th entry of the log. A deduplicated retry writes nothing and is not an event.
InsertEvent(e) ==
    /\ e.a = "insert"
    /\ ReplicaWriteInsert(e.r, e.i)
    /\ Len(log') = e.k

\* log_pointer of r moved past log index k; take: whether a queue entry was created for it.
PullEvent(e) ==
    /\ e.a = "pull"
    /\ ReplicaPullLog(e.r)
    /\ ptr'[e.r] = e.k
    /\ (\E x \in queue'[e.r] : x.k = e.k) = e.take

\* r executed its queue entry of log index k. With a part (e.part # NoPart) the event is r's
\* registration of that part in replicas/r/parts (the entry's own, or one covering it): it must be
\* on r's disk after the step. Without one the event is the entry's removal from the queue, and
\* the step must have made no part (a DROP_RANGE takes parts away).
ExecuteEvent(e) ==
    /\ e.a = "execute"
    /\ Queued(e.r, e) # {}
    /\ ReplicaExecuteEntry(e.r)
    /\ Queued(e.r, e) \cap queue'[e.r] = {}
    /\ IF e.part # NoPart THEN e.part \in parts'[e.r] ELSE parts'[e.r] \subseteq parts[e.r]

\* r fetched the very part its entry names from a replica that had replaced it already (merged,
\* mutated): 18.16's fetch serves Outdated parts too (findPart in DataPartsExchange), which the
\* core module has not (a replaced part is gone at once), trace validation's second finding
\* (spec/README.md). The part is as good as when it was made: later entries replace it here too.
FetchOutdatedEvent(e) ==
    /\ e.a = "execute"
    /\ e.part # NoPart
    /\ e.part \in made
    /\ \E x \in Queued(e.r, e) :
        /\ x.type \in {"GET", "MERGE", "MUTATE"} /\ x.part = e.part
        /\ e.r \in active
        /\ ~HasNewerCovering(e.r, x.part)
        /\ parts' = [parts EXCEPT ![e.r] = NoEmpty(AddPart(@, Trim(x.part, meta[e.r].dropped[x.p])))]
        /\ queue' = [queue EXCEPT ![e.r] = @ \ {x}]
    /\ UNCHANGED <<active, asg, cache, log, ptr, meta, dedup, muts, trimmed, lost, ins, mig, qry, inv_acked,
                   inv_read_cleaned, aux_counts, gone>>

\* The removal of a queue entry the spec had already taken out with another (a DROP_RANGE's
\* removePartProducingOpsInRange, or the entry whose part was registered before it): nothing.
ExecuteDoneEvent(e) ==
    /\ e.a = "execute"
    /\ e.part = NoPart
    /\ Queued(e.r, e) = {}
    /\ ptr[e.r] >= e.k
    /\ UNCHANGED vars

\* MERGE_PARTS by r into e.part, the k-th log entry.
MergeEvent(e) ==
    /\ e.a = "merge"
    /\ ReplicaSelectMerge(e.r, e.p)
    /\ Len(log') = e.k
    /\ log'[e.k].part = e.part

\* ALTER UPDATE/DELETE: a mutation numbered k, the log index it was created at.
MutationEvent(e) == e.a = "mutation" /\ ClientMutate /\ muts'[Len(muts')] = e.k

\* MUTATE_PART by r of a part of e.p into e.part, the k-th log entry.
MutateEvent(e) ==
    /\ e.a = "mutate"
    /\ ReplicaSelectMutation(e.r, e.p)
    /\ Len(log') = e.k
    /\ log'[e.k].part = e.part

\* ALTER_METADATA, the k-th log entry: global, every replica queues and applies it.
AlterEvent(e) == e.a = "alter" /\ ClientAlterMetadata /\ Len(log') = e.k

\* DROP_RANGE over partition e.p, the k-th log entry.
DropEvent(e) ==
    /\ e.a = "drop"
    /\ ClientDropPartition(e.p)
    /\ Len(log') = e.k

\* The RFC's allocation: r CAS-created partition e.p's assignment with owners e.rs, on the first
\* INSERT into it that r received (e.i: the abstraction names the partition's next commit).
AllocateEvent(e) ==
    /\ e.a = "allocate"
    /\ ReplicaAllocate(e.r, e.i)
    /\ asg'[e.p].owners = e.rs

\* r's map holds version e.k of e.p's assignment: a refresh, or what it held already.
MapEvent(e) ==
    /\ e.a = "map"
    /\ \/ asg[e.p].version = e.k /\ ReplicaRefreshCache(e.r, e.p)
       \/ cache[e.r][e.p].version = e.k /\ UNCHANGED vars

\* --- a migration's steps (selective/migrations/<p> and the assignment, one multi each) ---------

\* REASSIGN (or a REBALANCE's move): a CLONE of e.p from e.r into e.d.
ReassignEvent(e) == e.a = "reassign" /\ AdminReassign(e.p, e.r, e.d)

\* A repair's CLONE of e.p into e.d, coordinated by e.r (an owner), after a DropReplica.
RepairEvent(e) == e.a = "repair" /\ RepairStart(e.p, e.r, e.d)

\* The target e.r marked the CLONE of e.p fetched at catch-up position e.k, having queued GET_PARTs
\* of the parts e.gets and re-queued the log entries e.ks (entries it had queued already it left).
FetchEvent(e) ==
    /\ e.a = "fetch"
    /\ mig[e.p].dst = e.r
    /\ ReplicaCloneFetch(e.p)
    /\ mig'[e.p].pos = e.k
    /\ queue'[e.r] = queue[e.r] \cup {Entry("GET", e.p, x, 0) : x \in e.gets} \cup {log[k] : k \in e.ks}

TakeOverEvent(e) == e.a = "take_over" /\ ReplicaTakeOverMigration(e.p, e.r)

\* SWITCH of e.p: its owners are e.rs after it.
SwitchEvent(e) == e.a = "switch" /\ CoordinatorSwitch(e.p) /\ asg'[e.p].owners = e.rs

CancelEvent(e) == e.a = "cancel" /\ CoordinatorCancel(e.p)

\* CLEANUP of e.p by its leaver e.r, or, while the leaver is down, recorded by e.r for it.
CleanupEvent(e) == e.a = "cleanup" /\ Leaver(e.p) = e.r /\ ReplicaCleanup(e.p)
CleanupDownEvent(e) == e.a = "cleanup_down" /\ ReplicaCleanupForDownLeaver(e.p, e.r)

\* SYSTEM DROP REPLICA e.r.
DropReplicaEvent(e) == e.a = "drop_replica" /\ DropReplica(e.r)

\* r's is_active went (its session closed or expired), or came back (a new session created it).
CrashEvent(e) == e.a = "crash" /\ ReplicaCrash(e.r)
RestartEvent(e) == e.a = "restart" /\ e.r \notin lost /\ ReplicaRestart(e.r)

\* The entries of a queue a clone left: all but those it removed (e.out: 18.16's removes none).
Kept(Q, e) == {x \in Q : <<x.k, IF x.k = 0 THEN x.part ELSE NoPart>> \notin e.out}

\* A lost replica came back and cloned (cloneReplicaIfNeeded): its log_pointer is e.k, its queue
\* gained the log entries e.ks and GET_PARTs of the parts e.gets, and it kept the parts e.kept.
\* This is 18.16's cloneReplica, not the core's CloneLostReplica: one source replica s that is not
\* lost; s's log_pointer read first and written at once, s's queue and parts read in later
\* requests (so the pointer may be older than the queue it copies: "entries can be duplicated,
\* not lost"), and the replica's own queue kept. Its local parts stay where a part s has, has
\* queued or will get from the log covers them, as the core's clone reads it: 18.16 keeps every
\* local part, one of a partition dropped while the replica was down too (ClickHouse issue #6522,
\* fixed in 19.x by PR #6523), and its trace is rejected here.
CloneEvent(e) ==
    /\ e.a = "clone"
    /\ e.r \in lost /\ e.r \notin active /\ e.r \notin gone
    /\ \E s \in Replicas \ (lost \cup gone \cup {e.r}) :
        /\ e.k <= ptr[s]
        /\ parts' = [parts EXCEPT ![e.r] = {x \in @ : \E y \in SourceParts(s, x.p, TRUE) : Covers(y, x)}]
        /\ meta' = [meta EXCEPT ![e.r] = meta[s]]
    /\ parts'[e.r] = e.kept
    /\ e.gets \subseteq made
    /\ ptr' = [ptr EXCEPT ![e.r] = e.k]
    /\ queue' = [queue EXCEPT ![e.r] = Kept(@, e) \cup {log[k] : k \in e.ks} \cup {Entry("GET", x.p, x, 0) : x \in e.gets}]
    /\ active' = active \cup {e.r}
    /\ cache' = [cache EXCEPT ![e.r] = asg]
    /\ lost' = lost \ {e.r}
    /\ UNCHANGED <<asg, log, dedup, muts, trimmed, ins, mig, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* The same event from the fixed protocol (the reference): the core's own ReplicaRestart of a lost
\* replica, CloneLostReplica (a source per partition it keeps, its own queue replaced), with the
\* pointer, queue and parts the run wrote.
FixedCloneEvent(e) ==
    /\ e.a = "clone"
    /\ e.r \in lost
    /\ ReplicaRestart(e.r)
    /\ ptr'[e.r] = e.k
    /\ parts'[e.r] = e.kept
    /\ queue'[e.r] = Kept(queue[e.r], e) \cup {log[k] : k \in e.ks} \cup {Entry("GET", x.p, x, 0) : x \in e.gets}

\* The cleanup thread trimmed the log up to index e.k and marked the replicas e.rs lost. 18.16's
\* clearOldLogs reads every replica's log_pointer and is_lost, then marks and trims in later
\* multis: pointers may have moved on meanwhile (seen: trimmed to 31 where the pointers then
\* allowed 34). Pointers only grow, so what it computed is the core's CleanupClearOldLogs in an
\* earlier state: a trim to any index up to the core's, marking replicas the core would mark.
TrimEvent(e) ==
    /\ e.a = "trim"
    /\ LogKeepers # {}
    /\ trimmed < e.k /\ e.k <= LogTrimUpto
    /\ e.rs \subseteq {r \in Replicas \ (lost \cup gone) : ~LogFresh(r)}
    /\ trimmed' = e.k
    /\ lost' = lost \cup e.rs
    /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, dedup, muts, ins, mig, qry, inv_acked,
                   inv_read_cleaned, aux_counts, gone>>

\* The cleanup thread forgot insert e.i's hash (blocks/).
ForgetEvent(e) == e.a = "forget" /\ CleanupClearOldBlocks(e.i)

Explained(e) ==
    \/ InsertEvent(e) \/ PullEvent(e) \/ ExecuteEvent(e) \/ FetchOutdatedEvent(e) \/ ExecuteDoneEvent(e)
    \/ MergeEvent(e) \/ MutationEvent(e) \/ MutateEvent(e) \/ DropEvent(e) \/ AlterEvent(e)
    \/ CrashEvent(e) \/ RestartEvent(e) \/ CloneEvent(e) \/ FixedCloneEvent(e) \/ TrimEvent(e) \/ ForgetEvent(e)
    \/ AllocateEvent(e) \/ MapEvent(e)
    \/ ReassignEvent(e) \/ RepairEvent(e) \/ FetchEvent(e) \/ TakeOverEvent(e) \/ SwitchEvent(e) \/ CancelEvent(e)
    \/ CleanupEvent(e) \/ CleanupDownEvent(e) \/ DropReplicaEvent(e)

\* --- what Keeper does not show, taken only where the next event needs it ----------

\* Before r commits insert i, the client must have sent it to r, or to a replica that forwarded it
\* to r (a selective table's non-owner): it gives up on an earlier try (an unknown outcome: the
\* retry that follows is what committed), then sends. Before r allocates a partition, an INSERT
\* into it must have reached r.
Unobserved(e) ==
    \/ /\ e.a = "insert"
       /\ ~(ins[e.i].st = "sent" /\ ins[e.i].at = e.r)
       /\ \/ ins[e.i].st \in {"sent", "written"} /\ ClientTimeout(e.i)
          \/ ins[e.i].st = "sent" /\ ReplicaForwardInsert(ins[e.i].at, e.i) /\ ins'[e.i].at = e.r
          \/ ins[e.i].st \in {"idle", "unknown", "failed"} /\ ClientSendInsert(e.i, e.r)
    \/ /\ e.a = "allocate"
       /\ ~(ins[e.i].st = "sent" /\ ins[e.i].at = e.r)
       /\ \/ ins[e.i].st \in {"sent", "written"} /\ ClientTimeout(e.i)
          \/ ClientSendInsert(e.i, e.r)

TraceNext ==
    /\ l < Len(Events)
    /\ \/ Explained(Events[l + 1]) /\ l' = l + 1
       \/ Unobserved(Events[l + 1]) /\ UNCHANGED l
    /\ made' = made \cup UNION {parts'[r] : r \in Replicas}

\* Checked as an invariant, its violation is the acceptance, and TLC prints the behaviour that
\* consumed every event (tens of MB for a long trace: traces/validate.py reads TraceProgress instead).
TraceConsumedInv == l < Len(Events)

\* A state constraint that prints the furthest event consumed each time it grows; with one
\* worker, the last line printed names how far the best behaviour got.
TraceProgress == IF l > TLCGet(1) THEN TLCSet(1, l) /\ PrintT(<<"trace-consumed", l>>) ELSE TRUE
=============================================================================
