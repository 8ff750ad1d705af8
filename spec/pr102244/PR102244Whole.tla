--------------------------- MODULE PR102244Whole ---------------------------
(***************************************************************************)
(* ClickHouse PR #102244's whole design (spec/pr102244/PR102244.md M1-M14): the     *)
(* migration protocol of PR102244.tla over several partitions, with what   *)
(* that module folds away: the first INSERT's assignment on the            *)
(* least-loaded replicas by the counts (M2), INSERT forwarding to an       *)
(* assigned replica, its retry of unknown outcome and dedup by block id    *)
(* (M4, O7), the expiring cache (M4: RefreshView at any time is expiry),   *)
(* and the rebalancer's cycles with their per-cycle limit (M13).           *)
(*                                                                         *)
(* Every action and name of PR102244.tla is here, with a partition added   *)
(* where it needs one. A sibling rather than an edit of PR102244.tla: the  *)
(* reference (reference/pr102244/) and the conformance harness             *)
(* (conformance/pr_system.py) compare states with PR102244.tla's variables *)
(* as they are (one assignment node, a three-field `aux`), so that module  *)
(* stays the one-partition model they check against. With one partition,  *)
(* no forwarding and no rebalancer this module has PR102244.tla's state    *)
(* graph: MCPR102244Whole_OnePartition (MCPR102244's constants) must keep  *)
(* MCPR102244's distinct-state count, and the manifest records both.       *)
(*                                                                         *)
(* The whole design is too large for exhaustive search; MCPR102244Whole*   *)
(* simulate it. Behaviour as written is kept behind strings in `Bugs`;     *)
(* readings the PR's text leaves open are strings in `Readings` (O1-O7).   *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets, Sequences, TLC

CONSTANTS
    Replicas,        \* replica names
    RF,              \* replication_factor
    Partitions,      \* partition ids
    PartitionOf(_),  \* the partition of an INSERT block
    InitOwners,      \* Partitions -> SUBSET Replicas at the start; {}: no assignment node yet (M2)
    Blocks,          \* INSERT ids (one block each; the block id `blocks/` deduplicates by)
    MigIds,          \* migration node ids (/migrations/<uuid>)
    MaxFails,        \* bound on FAILED
    MaxCrashes,      \* bound on coordinator crashes
    MaxQueries,      \* bound on SELECTs
    MaxForwards,     \* bound on forwarded sends of INSERT blocks, retries included (0: no forwarding)
    MaxCycles,       \* bound on the rebalancer's cycles
    CycleLimit,      \* the rebalancer's limit of migrations per cycle (M13)
    Bugs,            \* the PR as written, where it is unsafe (and broken variants)
    Readings         \* readings of what the PR's text leaves open

None == "none"

Bug(b) == b \in Bugs
Reading(x) == x \in Readings

VARIABLES
    asg,        \* the assignment nodes: partition -> [owners, cloning]
    aver,       \* their znode versions: partition -> Nat
    counts,     \* per-replica partition counts (Keeper)
    mig,        \* migration nodes: MigIds -> record
    coord,      \* the replica coordinating migrations and running the rebalancer, or None after a crash
    log,        \* the shared log: a sequence of GET_PART entries (block ids)
    ptr,        \* log_pointer per replica
    queue,      \* GET_PARTs queued per replica
    parts,      \* blocks on each replica's disk
    view,       \* each replica's cached assignments: partition -> [owners, cloning, ver]
    committed,  \* blocks committed (their `blocks/` node exists; acknowledged unless the reply was lost)
    aux,        \* bound counters [fails, crashes, queries, forwards, cycles, planned (this cycle)]
    inv_missed, \* a SELECT missed an acknowledged block (R2)
    fwd,        \* forwarded INSERT blocks in flight: [blk, to, retry]
    unknown,    \* blocks whose forwarded send ended without a reply: the sink retries them
    inv_dup     \* a block's rows were committed twice (a retry the dedup did not recognise)

\* The INSERT path's forwarding state, unchanged by everything but forwarding.
ins == <<fwd, unknown, inv_dup>>

vars == <<asg, aver, counts, mig, coord, log, ptr, queue, parts, view, committed, aux, inv_missed, fwd, unknown, inv_dup>>

MigStates == {"idle", "clone", "switch", "done", "failed"}

Init ==
    /\ asg = [p \in Partitions |-> [owners |-> InitOwners[p], cloning |-> {}]]
    /\ aver = [p \in Partitions |-> 0]
    /\ counts = [r \in Replicas |-> Cardinality({p \in Partitions : r \in InitOwners[p]})]
    /\ mig = [m \in MigIds |-> [st |-> "idle", part |-> None, src |-> None, tgt |-> None, snap |-> {},
                                written |-> FALSE, rescanned |-> FALSE, complete |-> FALSE, aver0 |-> 0,
                                logAtSwitch |-> 0]]
    /\ coord = CHOOSE r \in Replicas : TRUE   \* which replica coordinates does not matter here
    /\ log = <<>>
    /\ ptr = [r \in Replicas |-> 0]
    /\ queue = [r \in Replicas |-> {}]
    /\ parts = [r \in Replicas |-> {}]
    /\ view = [r \in Replicas |-> [p \in Partitions |-> [owners |-> InitOwners[p], cloning |-> {}, ver |-> 0]]]
    /\ committed = {}
    /\ aux = [fails |-> 0, crashes |-> 0, queries |-> 0, forwards |-> 0, cycles |-> 0, planned |-> 0]
    /\ inv_missed = FALSE
    /\ fwd = {}
    /\ unknown = {}
    /\ inv_dup = FALSE

-----------------------------------------------------------------------------
(* Helpers *)

\* The blocks of a set as a sequence, in some order (the coordinator's GET_PART entries).
SeqOf(S) == CHOOSE s \in [1..Cardinality(S) -> S] : \A i, j \in 1..Cardinality(S) : i # j => s[i] # s[j]

\* The blocks of S in partition p.
Of(S, p) == {b \in S : PartitionOf(b) = p}

AssignedIn(a) == a.owners \cup a.cloning
Registered(p) == Of(UNION {parts[x] : x \in Replicas}, p)   \* replicas/*/parts in Keeper

\* The assignment as a fresh read of Keeper gives it (what RefreshView caches).
KeeperView(p) == [owners |-> asg[p].owners, cloning |-> asg[p].cloning, ver |-> aver[p]]

\* A migration of p whose SWITCH moved r out, not yet DONE.
SourceInSwitch(r, p) == \E m \in MigIds : mig[m].st = "switch" /\ mig[m].part = p /\ mig[m].src = r

\* Fixed design only: a replica that SWITCH moved out stays a keeper ("leaving") until every
\* cached assignment has dropped it and its migration is DONE (PR102244.md M10, FINDINGS PR-F2).
Leaving(r, p) ==
    /\ ~Bug("source_stops_at_switch")
    /\ r \notin AssignedIn(asg[p])
    /\ \/ SourceInSwitch(r, p)
       \/ \E x \in Replicas : r \in view[x][p].owners

\* The log filter (PR102244.md M5, O1): Keeper's assignment, or the replica's cached one. A cache
\* that holds no assignment of the partition is cold and reads Keeper ([R1]'s "cache cold: read
\* from ZK"), unless it keeps "no assignment" as an entry (`filter_negative_cache`): then a replica
\* that the first INSERT's assignment chose skips the partition's first GET_PART (FINDINGS PR-F5).
FilterAssignment(r, p) ==
    IF Reading("filter_cached") /\ (AssignedIn(view[r][p]) # {} \/ Bug("filter_negative_cache"))
    THEN view[r][p] ELSE asg[p]
Keeps(r, p) == r \in AssignedIn(FilterAssignment(r, p)) \/ Leaving(r, p)

\* b is on its way to r by ordinary replication: queued, or in the log ahead of r's pointer
\* while r keeps the partition, or while Keeper assigns it to r (a cached filter may still
\* catch up before r pulls the entry: only an entry actually skipped is lost to r).
InFlightTo(r, b) ==
    LET p == PartitionOf(b) IN
    /\ \E r2 \in Replicas : b \in parts[r2]   \* a block no replica has is on its way nowhere
    /\ \/ b \in queue[r]
       \/ (Keeps(r, p) \/ r \in AssignedIn(asg[p])) /\ \E i \in (ptr[r] + 1)..Len(log) : log[i] = b

\* The sink has b to send: never committed (first attempt, or a re-route after a version
\* mismatch), or committed with a reply that never came (a retry); and no send of b in flight.
ToSend(b) == (b \notin committed \/ b \in unknown) /\ ~\E f \in fwd : f.blk = b

-----------------------------------------------------------------------------
(* INSERT: a block written on a replica whose cache says it owns the partition; the commit    *)
(* multi checks the assignment node's version against the cache (M4: the PR's CAS check).     *)
(* On a mismatch the sink re-reads (RefreshView) and re-routes: another WriteInsert.          *)
WriteInsert(r, b) ==
    LET p == PartitionOf(b) IN
    /\ b \in Blocks \ committed
    /\ ToSend(b)
    /\ r \in view[r][p].owners
    /\ view[r][p].ver = aver[p]
    /\ parts' = [parts EXCEPT ![r] = @ \cup {b}]
    /\ log' = Append(log, b)
    /\ committed' = committed \cup {b}
    /\ UNCHANGED <<asg, aver, counts, mig, coord, ptr, queue, view, aux, inv_missed, ins>>

\* The replicas the first INSERT's assignment chooses among. The code's allocatePartitions takes the
\* active ones (replicas/*/is_active); these models take no replica down (a coordinator crash loses
\* its progress, not its session), so every replica is active. A trace of a run (TracePR102244.tla)
\* replaces it with the replicas active when the assignment was written.
AllocationCandidates == Replicas

\* The first INSERT into a partition with no assignment node: ensurePartitionAssignment creates
\* it by CAS, choosing the RF least-loaded replicas by the counts, and increments their counts in
\* the same multi (M2; the counts' version check makes two creations serial). The sink caches it.
EnsurePartitionAssignment(r, p) ==
    /\ asg[p].owners = {} /\ asg[p].cloning = {}
    /\ Of(Blocks \ committed, p) # {}
    /\ \E S \in SUBSET AllocationCandidates :
         /\ Cardinality(S) = RF
         /\ \A x \in S, y \in AllocationCandidates \ S : counts[x] <= counts[y]
         /\ asg' = [asg EXCEPT ![p] = [owners |-> S, cloning |-> {}]]
         /\ counts' = [x \in Replicas |-> IF x \in S THEN counts[x] + 1 ELSE counts[x]]
         /\ aver' = [aver EXCEPT ![p] = @ + 1]
         /\ view' = [view EXCEPT ![r][p] = [owners |-> S, cloning |-> {}, ver |-> aver[p] + 1]]
    /\ UNCHANGED <<mig, coord, log, ptr, queue, parts, committed, aux, inv_missed, ins>>

\* A replica whose cache says it is not assigned forwards the block to one assigned replica
\* over the connection pool (M4). A retry of a send whose outcome is unknown reuses the block
\* id (O7), even when it is re-routed to another replica; as written under the other reading
\* (`retry_new_block_id`) it carries a new one.
ForwardBlock(r, b, o) ==
    LET p == PartitionOf(b) IN
    /\ aux.forwards < MaxForwards
    /\ b \in Blocks
    /\ ToSend(b)
    /\ r \notin view[r][p].owners
    /\ o \in view[r][p].owners
    /\ fwd' = fwd \cup {[blk |-> b, to |-> o, retry |-> b \in unknown]}
    /\ aux' = [aux EXCEPT !.forwards = @ + 1]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, queue, parts, view, committed, inv_missed, unknown, inv_dup>>

\* The receiver commits a forwarded block through its own sink: `blocks/` already holds the
\* block id (a retry of a block that was committed): acknowledged, nothing written; otherwise
\* the commit multi with the same version check as WriteInsert. The reply may be lost
\* (`replied` FALSE): the sender cannot know the outcome and retries.
CommitForwarded(f, replied) ==
    LET o == f.to
        b == f.blk
        p == PartitionOf(b)
        dedup == b \in committed /\ ~(f.retry /\ Bug("retry_new_block_id")) IN
    /\ f \in fwd
    /\ \/ /\ dedup
          /\ UNCHANGED <<parts, log, committed, inv_dup>>
       \/ /\ ~dedup
          /\ o \in view[o][p].owners
          /\ view[o][p].ver = aver[p]
          /\ parts' = [parts EXCEPT ![o] = @ \cup {b}]
          /\ log' = Append(log, b)
          /\ committed' = committed \cup {b}
          /\ inv_dup' = (inv_dup \/ b \in committed)
    /\ fwd' = fwd \ {f}
    /\ unknown' = IF replied THEN unknown \ {b} ELSE unknown \cup {b}
    /\ UNCHANGED <<asg, aver, counts, mig, coord, ptr, queue, view, aux, inv_missed>>

\* The receiver's version check fails (its cache is stale, or it is no longer assigned): it
\* answers so, nothing is written, and the sender re-reads and re-routes (M4).
RejectForwarded(f) ==
    LET o == f.to
        p == PartitionOf(f.blk) IN
    /\ f \in fwd
    /\ ~(f.blk \in committed /\ ~(f.retry /\ Bug("retry_new_block_id")))
    /\ ~(o \in view[o][p].owners /\ view[o][p].ver = aver[p])
    /\ fwd' = fwd \ {f}
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, queue, parts, view, committed, aux, inv_missed, unknown, inv_dup>>

\* The cache refreshes (expiry, or a Keeper read when cold).
RefreshView(r) ==
    /\ view[r] # [p \in Partitions |-> KeeperView(p)]
    /\ view' = [view EXCEPT ![r] = [p \in Partitions |-> KeeperView(p)]]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, queue, parts, committed, aux, inv_missed, ins>>

\* pullLogsToQueue: the next entry is queued if this replica keeps its partition, skipped
\* otherwise; log_pointer advances either way.
Pull(r) ==
    /\ ptr[r] < Len(log)
    /\ LET b == log[ptr[r] + 1] IN
         queue' = [queue EXCEPT ![r] = IF Keeps(r, PartitionOf(b)) /\ b \notin parts[r] THEN @ \cup {b} ELSE @]
    /\ ptr' = [ptr EXCEPT ![r] = @ + 1]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, parts, view, committed, aux, inv_missed, ins>>

\* A queued GET_PART fetches the part from a replica that has it.
Fetch(r, b) ==
    /\ b \in queue[r]
    /\ \E x \in Replicas \ {r} : b \in parts[x]
    /\ parts' = [parts EXCEPT ![r] = @ \cup {b}]
    /\ queue' = [queue EXCEPT ![r] = @ \ {b}]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, view, committed, aux, inv_missed, ins>>

\* A replica removes its data of a partition once it is not assigned (M10, O5).
\* As written: when its own cache says so. Fixed: once it is not leaving (every cache has
\* dropped it and its migration is DONE).
DropUnassigned(r, p) ==
    /\ Of(parts[r], p) # {} \/ Of(queue[r], p) # {}
    /\ r \notin AssignedIn(view[r][p])
    /\ ~Bug("source_stops_at_switch") => (r \notin AssignedIn(asg[p]) /\ ~Leaving(r, p))
    /\ parts' = [parts EXCEPT ![r] = @ \ Of(@, p)]
    /\ queue' = [queue EXCEPT ![r] = @ \ Of(@, p)]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, view, committed, aux, inv_missed, ins>>

-----------------------------------------------------------------------------
(* Migration *)

\* CLONE: one multi creates /migrations/<uuid> with source_parts_snapshot and appends
\* target:cloning to the assignment (M7). As written the snapshot is the source's parts; fixed,
\* every part of the partition registered in Keeper by any replica (FINDINGS PR-F1).
\* O4: is a second migration of a partition already in CLONE refused?
CloneMulti(m, p, s, t) ==
    /\ coord # None
    /\ mig[m].st = "idle"
    /\ \A n \in MigIds : n < m => mig[n].st # "idle"            \* ids in order: symmetry of uuids
    /\ s \in asg[p].owners
    /\ t \notin AssignedIn(asg[p])
    /\ ~Bug("second_migration_allowed") => asg[p].cloning = {}
    /\ asg' = [asg EXCEPT ![p].cloning = @ \cup {t}]
    /\ aver' = [aver EXCEPT ![p] = @ + 1]
    /\ mig' = [mig EXCEPT ![m] = [st |-> "clone", part |-> p, src |-> s, tgt |-> t,
                                  snap |-> IF Bug("snapshot_source_parts") THEN Of(parts[s], p) ELSE Registered(p),
                                  written |-> FALSE, rescanned |-> FALSE, complete |-> FALSE, aver0 |-> aver[p] + 1,
                                  logAtSwitch |-> 0]]
    /\ UNCHANGED <<counts, coord, log, ptr, queue, parts, view, committed, inv_missed, ins>>

\* SYSTEM MIGRATE PARTITION: a migration started by hand (M7).
StartClone(m, p, s, t) ==
    /\ CloneMulti(m, p, s, t)
    /\ UNCHANGED aux

\* The rebalancer runs a cycle (M13): its plan is made from the counts, and it starts at most
\* CycleLimit migrations in it. As written, the limit does not count migrations still in
\* flight from earlier cycles, and the counts do not count a CLONE in flight (M2).
RebalanceCycle ==
    /\ coord # None
    /\ aux.cycles < MaxCycles
    /\ aux' = [aux EXCEPT !.cycles = @ + 1, !.planned = 0]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, queue, parts, view, committed, inv_missed, ins>>

\* One move of the current cycle's plan: a partition of a most-loaded replica to a
\* least-loaded one, when that evens the counts (they differ by 2 or more).
PlanMigration(m, p, s, t) ==
    /\ aux.cycles > 0
    /\ aux.planned < CycleLimit
    /\ \A x \in Replicas : counts[t] <= counts[x] /\ counts[x] <= counts[s]
    /\ counts[s] >= counts[t] + 2
    /\ CloneMulti(m, p, s, t)
    /\ aux' = [aux EXCEPT !.planned = @ + 1]

\* The order the coordinator writes a snapshot's GET_PARTs in: any one (the models' states do not
\* depend on it but through the log); a trace replaces it with the order the run wrote.
CloneEntryOrder(S) == SeqOf(S)

\* The coordinator writes a GET_PART entry per snapshot part into the shared log (M8). Written
\* again after a takeover if the coordinator died first (duplicates are no-ops).
WriteCloneEntries(m) ==
    /\ coord # None
    /\ mig[m].st = "clone"
    /\ ~mig[m].written
    /\ log' = log \o CloneEntryOrder(mig[m].snap)
    /\ mig' = [mig EXCEPT ![m].written = TRUE]
    /\ UNCHANGED <<asg, aver, counts, coord, ptr, queue, parts, view, committed, aux, inv_missed, ins>>

\* Fixed design only (FINDINGS PR-F4): once the target's cache shows it :cloning, it queues a
\* fetch of every part of the partition registered by any replica (replicas/*/parts) that it
\* lacks: the parts of GET_PARTs it skipped before it knew it was a target.
Rescan(m) ==
    LET p == mig[m].part
        t == mig[m].tgt IN
    /\ ~Bug("complete_without_rescan")
    /\ mig[m].st = "clone"
    /\ ~mig[m].rescanned
    /\ t \in view[t][p].cloning
    /\ queue' = [queue EXCEPT ![t] = @ \cup (Registered(p) \ parts[t])]
    /\ mig' = [mig EXCEPT ![m].rescanned = TRUE]
    /\ UNCHANGED <<asg, aver, counts, coord, log, ptr, parts, view, committed, aux, inv_missed, ins>>

\* The target creates clone_complete when every snapshot part is on its disk (M8, O2); fixed,
\* also after its rescan, with nothing of the partition left in its queue.
SignalComplete(m) ==
    /\ mig[m].st = "clone"
    /\ mig[m].written
    /\ ~Bug("complete_without_rescan") => mig[m].rescanned /\ Of(queue[mig[m].tgt], mig[m].part) = {}
    /\ ~mig[m].complete
    /\ mig[m].snap \subseteq parts[mig[m].tgt]
    /\ mig' = [mig EXCEPT ![m].complete = TRUE]
    /\ UNCHANGED <<asg, aver, counts, coord, log, ptr, queue, parts, view, committed, aux, inv_missed, ins>>

\* SWITCH: one multi replaces source by target in the assignment and moves the counts, guarded
\* by versions (M9, O3): a fresh read of the assignment (any version passes, the step being
\* atomic) or the version the CLONE multi left.
Switch(m) ==
    LET p == mig[m].part
        s == mig[m].src
        t == mig[m].tgt IN
    /\ coord # None
    /\ mig[m].st = "clone"
    /\ mig[m].complete
    /\ ~Bug("switch_fresh_version") => aver[p] = mig[m].aver0
    /\ asg' = [asg EXCEPT ![p] = [owners |-> (@.owners \ {s}) \cup {t}, cloning |-> @.cloning \ {t}]]
    /\ counts' = [counts EXCEPT ![s] = @ - 1, ![t] = @ + 1]
    /\ aver' = [aver EXCEPT ![p] = @ + 1]
    /\ mig' = [mig EXCEPT ![m].st = "switch", ![m].logAtSwitch = Len(log)]
    /\ UNCHANGED <<coord, log, ptr, queue, parts, view, committed, aux, inv_missed, ins>>

\* DONE removes the migration's subtree (M10). Fixed: only once the target has pulled past the
\* SWITCH and has nothing of the partition queued, so every block committed before SWITCH is on it.
Done(m) ==
    /\ coord # None
    /\ mig[m].st = "switch"
    /\ ~Bug("source_stops_at_switch") =>
           /\ ptr[mig[m].tgt] >= mig[m].logAtSwitch
           /\ Of(queue[mig[m].tgt], mig[m].part) = {}
    /\ mig' = [mig EXCEPT ![m].st = "done"]
    /\ UNCHANGED <<asg, aver, counts, coord, log, ptr, queue, parts, view, committed, aux, inv_missed, ins>>

\* FAILED (timeout or error in CLONE, or a SWITCH multi that failed its version check): the
\* :cloning entry is removed from the assignment and the subtree goes (M11).
Fail(m) ==
    LET p == mig[m].part IN
    /\ coord # None
    /\ mig[m].st = "clone"
    /\ aux.fails < MaxFails
    /\ asg' = [asg EXCEPT ![p].cloning = @ \ {mig[m].tgt}]
    /\ aver' = [aver EXCEPT ![p] = @ + 1]
    /\ mig' = [mig EXCEPT ![m].st = "failed"]
    /\ aux' = [aux EXCEPT !.fails = @ + 1]
    /\ UNCHANGED <<counts, coord, log, ptr, queue, parts, view, committed, inv_missed, ins>>

\* The coordinator dies; its in-memory progress is gone, the migration nodes stay (M12).
CoordinatorCrash ==
    /\ coord # None
    /\ aux.crashes < MaxCrashes
    /\ coord' = None
    /\ aux' = [aux EXCEPT !.crashes = @ + 1]
    /\ UNCHANGED <<asg, aver, counts, mig, log, ptr, queue, parts, view, committed, inv_missed, ins>>

\* Another replica takes over and resumes every migration from its Keeper state.
TakeOver(r) ==
    /\ coord = None
    /\ coord' = r
    /\ UNCHANGED <<asg, aver, counts, mig, log, ptr, queue, parts, view, committed, aux, inv_missed, ins>>

-----------------------------------------------------------------------------
(* SELECT: routed by replica x's cached assignment of p to one of its owners (never a         *)
(* :cloning target, M6), reading that replica's parts at once. R2 allows a miss only of a     *)
(* block the replica read is still receiving by replication.                                  *)
Query(x, p, y) ==
    /\ aux.queries < MaxQueries
    /\ y \in view[x][p].owners
    /\ inv_missed' = (inv_missed \/ \E b \in Of(committed, p) : b \notin parts[y] /\ ~InFlightTo(y, b))
    /\ aux' = [aux EXCEPT !.queries = @ + 1]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, queue, parts, view, committed, ins>>

Next ==
    \/ \E r \in Replicas, b \in Blocks : WriteInsert(r, b)
    \/ \E r \in Replicas, p \in Partitions : EnsurePartitionAssignment(r, p) \/ DropUnassigned(r, p)
    \/ \E r, o \in Replicas, b \in Blocks : ForwardBlock(r, b, o)
    \/ \E f \in fwd : RejectForwarded(f) \/ \E replied \in BOOLEAN : CommitForwarded(f, replied)
    \/ \E r \in Replicas : RefreshView(r) \/ Pull(r) \/ TakeOver(r)
    \/ \E r \in Replicas, b \in Blocks : Fetch(r, b)
    \/ \E m \in MigIds, p \in Partitions, s, t \in Replicas : StartClone(m, p, s, t) \/ PlanMigration(m, p, s, t)
    \/ \E m \in MigIds : WriteCloneEntries(m) \/ Rescan(m) \/ SignalComplete(m) \/ Switch(m) \/ Done(m) \/ Fail(m)
    \/ CoordinatorCrash
    \/ RebalanceCycle
    \/ \E x, y \in Replicas, p \in Partitions : Query(x, p, y)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Invariants, as the base module states them, in the PR's terms *)

TypeOKInv ==
    /\ \A p \in Partitions : asg[p].owners \subseteq Replicas /\ asg[p].cloning \subseteq Replicas /\ aver[p] \in Nat
    /\ counts \in [Replicas -> Int]
    /\ \A m \in MigIds : mig[m].st \in MigStates
    /\ coord \in Replicas \cup {None}
    /\ \A r \in Replicas : ptr[r] \in 0..Len(log) /\ queue[r] \subseteq Blocks /\ parts[r] \subseteq Blocks
    /\ committed \subseteq Blocks
    /\ unknown \subseteq Blocks
    /\ inv_missed \in BOOLEAN /\ inv_dup \in BOOLEAN

\* Every assigned partition has RF replicas, none of them also :cloning, and the counts node
\* agrees with the assignments.
ReplicationFactorInv ==
    /\ \A p \in Partitions :
         /\ asg[p].owners # {} => Cardinality(asg[p].owners) = RF
         /\ asg[p].owners \cap asg[p].cloning = {}
    /\ \A r \in Replicas : counts[r] = Cardinality({p \in Partitions : r \in asg[p].owners})

\* Every acknowledged block is on some replica's disk.
NoAckedBlockLostInv == \A b \in committed : \E r \in Replicas : b \in parts[r]

\* Every owner holds every acknowledged block, or replication is bringing it.
OwnersCompleteInv == \A b \in committed : \A o \in asg[PartitionOf(b)].owners : b \in parts[o] \/ InFlightTo(o, b)

\* R2: no SELECT missed an acknowledged block (other than by replication lag).
QueryNoMissingInv == ~inv_missed

\* An INSERT's rows are committed once, however often its block was retried or re-routed.
NoDuplicateRowsInv == ~inv_dup
=============================================================================
