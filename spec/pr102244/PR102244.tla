----------------------------- MODULE PR102244 -----------------------------
(***************************************************************************)
(* The migration protocol of ClickHouse PR #102244 ("Add selective         *)
(* replication for ReplicatedMergeTree"), as its sources state it          *)
(* (spec/pr102244/PR102244.md): one partition, its assignment list with a           *)
(* `:cloning` target, per-replica counts, migration nodes                  *)
(* /migrations/<uuid> in CLONE -> SWITCH -> DONE or CLONE -> FAILED,       *)
(* source_parts_snapshot, the coordinator's GET_PART entries for the       *)
(* target, the clone_complete node, the SWITCH multi with its version      *)
(* guard, rollback, coordinator crash and takeover; INSERT commits with a  *)
(* CAS check on the assignment version; the shared log filtered per        *)
(* replica; SELECTs routed by a replica's cached assignment.               *)
(*                                                                         *)
(* Self-contained rather than sharing SelectiveReplication.tla: the PR's   *)
(* assignment is a list with a suffix, not the base module's role record,  *)
(* its migration lives in Keeper nodes the base module does not have, and  *)
(* one partition at block level is all its migration races need.           *)
(*                                                                         *)
(* Behaviour as written is kept behind strings in `Bugs`; readings the     *)
(* PR's text leaves open are strings in `Readings` (PR102244.md, O1-O5).   *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets, Sequences, TLC

CONSTANTS
    Replicas,        \* replica names
    RF,              \* replication_factor
    InitOwners,      \* the partition's replicas at the start
    Blocks,          \* INSERT ids (one block each, all into the one partition)
    MigIds,          \* migration node ids (/migrations/<uuid>)
    MaxFails,        \* bound on FAILED
    MaxCrashes,      \* bound on coordinator crashes
    MaxQueries,      \* bound on SELECTs
    Bugs,            \* the PR as written, where it is unsafe (and broken variants)
    Readings         \* readings of what the PR's text leaves open

None == "none"

Bug(b) == b \in Bugs
Reading(x) == x \in Readings

VARIABLES
    asg,        \* the assignment node: [owners, cloning]
    aver,       \* its znode version
    counts,     \* per-replica partition counts (Keeper)
    mig,        \* migration nodes: MigIds -> record
    coord,      \* the replica coordinating migrations, or None after a crash
    log,        \* the shared log: a sequence of GET_PART entries (block ids)
    ptr,        \* log_pointer per replica
    queue,      \* GET_PARTs queued per replica
    parts,      \* blocks on each replica's disk
    view,       \* each replica's cached assignment [owners, cloning, ver]
    committed,  \* blocks committed (and acknowledged: ack at commit)
    aux,        \* bound counters [fails, crashes, queries]
    inv_missed  \* a SELECT missed an acknowledged block (R2)

vars == <<asg, aver, counts, mig, coord, log, ptr, queue, parts, view, committed, aux, inv_missed>>

MigStates == {"idle", "clone", "switch", "done", "failed"}

Init ==
    /\ asg = [owners |-> InitOwners, cloning |-> {}]
    /\ aver = 0
    /\ counts = [r \in Replicas |-> IF r \in InitOwners THEN 1 ELSE 0]
    /\ mig = [m \in MigIds |-> [st |-> "idle", src |-> None, tgt |-> None, snap |-> {},
                                written |-> FALSE, rescanned |-> FALSE, complete |-> FALSE, aver0 |-> 0,
                                logAtSwitch |-> 0]]
    /\ coord = CHOOSE r \in Replicas : TRUE   \* which replica coordinates does not matter here
    /\ log = <<>>
    /\ ptr = [r \in Replicas |-> 0]
    /\ queue = [r \in Replicas |-> {}]
    /\ parts = [r \in Replicas |-> {}]
    /\ view = [r \in Replicas |-> [owners |-> InitOwners, cloning |-> {}, ver |-> 0]]
    /\ committed = {}
    /\ aux = [fails |-> 0, crashes |-> 0, queries |-> 0]
    /\ inv_missed = FALSE

-----------------------------------------------------------------------------
(* Helpers *)

\* The blocks of a set as a sequence, in some order (the coordinator's GET_PART entries).
SeqOf(S) == CHOOSE s \in [1..Cardinality(S) -> S] : \A i, j \in 1..Cardinality(S) : i # j => s[i] # s[j]

AssignedIn(a) == a.owners \cup a.cloning
Registered == UNION {parts[x] : x \in Replicas}   \* replicas/*/parts in Keeper

\* A migration whose SWITCH moved r out, not yet DONE.
SourceInSwitch(r) == \E m \in MigIds : mig[m].st = "switch" /\ mig[m].src = r

\* Fixed design only: a replica that SWITCH moved out stays a keeper ("leaving") until every
\* cached assignment has dropped it and its migration is DONE (PR102244.md M10, FINDINGS PR-F2).
Leaving(r) ==
    /\ ~Bug("source_stops_at_switch")
    /\ r \notin AssignedIn(asg)
    /\ \/ SourceInSwitch(r)
       \/ \E x \in Replicas : r \in view[x].owners

\* The log filter (PR102244.md M5, O1): Keeper's assignment, or the replica's cached one.
FilterAssignment(r) == IF Reading("filter_cached") THEN view[r] ELSE asg
Keeps(r) == r \in AssignedIn(FilterAssignment(r)) \/ Leaving(r)

\* b is on its way to r by ordinary replication: queued, or in the log ahead of r's pointer
\* while r keeps the partition, or while Keeper assigns it to r (a cached filter may still
\* catch up before r pulls the entry: only an entry actually skipped is lost to r).
InFlightTo(r, b) ==
    /\ \E r2 \in Replicas : b \in parts[r2]   \* a block no replica has is on its way nowhere
    /\ \/ b \in queue[r]
       \/ (Keeps(r) \/ r \in AssignedIn(asg)) /\ \E i \in (ptr[r] + 1)..Len(log) : log[i] = b

-----------------------------------------------------------------------------
(* INSERT: a block written on a replica whose cache says it owns the partition; the commit    *)
(* multi checks the assignment node's version against the cache (M4: the PR's CAS check).     *)
(* On a mismatch the sink re-reads (RefreshView) and re-routes: another WriteInsert.          *)
WriteInsert(r, b) ==
    /\ b \in Blocks \ committed
    /\ r \in view[r].owners
    /\ view[r].ver = aver
    /\ parts' = [parts EXCEPT ![r] = @ \cup {b}]
    /\ log' = Append(log, b)
    /\ committed' = committed \cup {b}
    /\ UNCHANGED <<asg, aver, counts, mig, coord, ptr, queue, view, aux, inv_missed>>

\* The cache refreshes (expiry, or a Keeper read when cold).
RefreshView(r) ==
    /\ view[r] # [owners |-> asg.owners, cloning |-> asg.cloning, ver |-> aver]
    /\ view' = [view EXCEPT ![r] = [owners |-> asg.owners, cloning |-> asg.cloning, ver |-> aver]]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, queue, parts, committed, aux, inv_missed>>

\* pullLogsToQueue: the next entry is queued if this replica keeps the partition, skipped
\* otherwise; log_pointer advances either way.
Pull(r) ==
    /\ ptr[r] < Len(log)
    /\ LET b == log[ptr[r] + 1] IN
         queue' = [queue EXCEPT ![r] = IF Keeps(r) /\ b \notin parts[r] THEN @ \cup {b} ELSE @]
    /\ ptr' = [ptr EXCEPT ![r] = @ + 1]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, parts, view, committed, aux, inv_missed>>

\* A queued GET_PART fetches the part from a replica that has it.
Fetch(r, b) ==
    /\ b \in queue[r]
    /\ \E x \in Replicas \ {r} : b \in parts[x]
    /\ parts' = [parts EXCEPT ![r] = @ \cup {b}]
    /\ queue' = [queue EXCEPT ![r] = @ \ {b}]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, view, committed, aux, inv_missed>>

\* A replica removes its data of the partition once it is not assigned (M10, O5).
\* As written: when its own cache says so. Fixed: once it is not leaving (every cache has
\* dropped it and its migration is DONE).
DropUnassigned(r) ==
    /\ parts[r] # {} \/ queue[r] # {}
    /\ r \notin AssignedIn(view[r])
    /\ ~Bug("source_stops_at_switch") => (r \notin AssignedIn(asg) /\ ~Leaving(r))
    /\ parts' = [parts EXCEPT ![r] = {}]
    /\ queue' = [queue EXCEPT ![r] = {}]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, view, committed, aux, inv_missed>>

-----------------------------------------------------------------------------
(* Migration *)

\* CLONE: one multi creates /migrations/<uuid> with source_parts_snapshot and appends
\* target:cloning to the assignment (M7). As written the snapshot is the source's parts; fixed,
\* every part of the partition registered in Keeper by any replica (FINDINGS PR-F1).
\* O4: is a second migration of a partition already in CLONE refused?
StartClone(m, s, t) ==
    /\ coord # None
    /\ mig[m].st = "idle"
    /\ \A n \in MigIds : n < m => mig[n].st # "idle"            \* ids in order: symmetry of uuids
    /\ s \in asg.owners
    /\ t \notin AssignedIn(asg)
    /\ ~Bug("second_migration_allowed") => asg.cloning = {}
    /\ asg' = [asg EXCEPT !.cloning = @ \cup {t}]
    /\ aver' = aver + 1
    /\ mig' = [mig EXCEPT ![m] = [st |-> "clone", src |-> s, tgt |-> t,
                                  snap |-> IF Bug("snapshot_source_parts") THEN parts[s] ELSE Registered,
                                  written |-> FALSE, rescanned |-> FALSE, complete |-> FALSE, aver0 |-> aver + 1,
                                  logAtSwitch |-> 0]]
    /\ UNCHANGED <<counts, coord, log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* The coordinator writes a GET_PART entry per snapshot part into the shared log (M8). Written
\* again after a takeover if the coordinator died first (duplicates are no-ops).
WriteCloneEntries(m) ==
    /\ coord # None
    /\ mig[m].st = "clone"
    /\ ~mig[m].written
    /\ log' = log \o SeqOf(mig[m].snap)
    /\ mig' = [mig EXCEPT ![m].written = TRUE]
    /\ UNCHANGED <<asg, aver, counts, coord, ptr, queue, parts, view, committed, aux, inv_missed>>

\* Fixed design only (FINDINGS PR-F4): once the target's cache shows it :cloning, it queues a
\* fetch of every part of the partition registered by any replica (replicas/*/parts) that it
\* lacks: the parts of GET_PARTs it skipped before it knew it was a target.
Rescan(m) ==
    /\ ~Bug("complete_without_rescan")
    /\ mig[m].st = "clone"
    /\ ~mig[m].rescanned
    /\ mig[m].tgt \in view[mig[m].tgt].cloning
    /\ queue' = [queue EXCEPT ![mig[m].tgt] = @ \cup (Registered \ parts[mig[m].tgt])]
    /\ mig' = [mig EXCEPT ![m].rescanned = TRUE]
    /\ UNCHANGED <<asg, aver, counts, coord, log, ptr, parts, view, committed, aux, inv_missed>>

\* The target creates clone_complete when every snapshot part is on its disk (M8, O2); fixed,
\* also after its rescan, with nothing of the partition left in its queue.
SignalComplete(m) ==
    /\ mig[m].st = "clone"
    /\ mig[m].written
    /\ ~Bug("complete_without_rescan") => mig[m].rescanned /\ queue[mig[m].tgt] = {}
    /\ ~mig[m].complete
    /\ mig[m].snap \subseteq parts[mig[m].tgt]
    /\ mig' = [mig EXCEPT ![m].complete = TRUE]
    /\ UNCHANGED <<asg, aver, counts, coord, log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* SWITCH: one multi replaces source by target in the assignment and moves the counts, guarded
\* by versions (M9, O3): a fresh read of the assignment (any version passes, the step being
\* atomic) or the version the CLONE multi left.
Switch(m) ==
    /\ coord # None
    /\ mig[m].st = "clone"
    /\ mig[m].complete
    /\ ~Bug("switch_fresh_version") => aver = mig[m].aver0
    /\ LET s == mig[m].src
           t == mig[m].tgt IN
         /\ asg' = [owners |-> (asg.owners \ {s}) \cup {t}, cloning |-> asg.cloning \ {t}]
         /\ counts' = [counts EXCEPT ![s] = @ - 1, ![t] = @ + 1]
    /\ aver' = aver + 1
    /\ mig' = [mig EXCEPT ![m].st = "switch", ![m].logAtSwitch = Len(log)]
    /\ UNCHANGED <<coord, log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* DONE removes the migration's subtree (M10). Fixed: only once the target has pulled past the
\* SWITCH and has nothing queued, so every block committed before SWITCH is on it.
Done(m) ==
    /\ coord # None
    /\ mig[m].st = "switch"
    /\ ~Bug("source_stops_at_switch") =>
           /\ ptr[mig[m].tgt] >= mig[m].logAtSwitch
           /\ queue[mig[m].tgt] = {}
    /\ mig' = [mig EXCEPT ![m].st = "done"]
    /\ UNCHANGED <<asg, aver, counts, coord, log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* FAILED (timeout or error in CLONE, or a SWITCH multi that failed its version check): the
\* :cloning entry is removed from the assignment and the subtree goes (M11).
Fail(m) ==
    /\ coord # None
    /\ mig[m].st = "clone"
    /\ aux.fails < MaxFails
    /\ asg' = [asg EXCEPT !.cloning = @ \ {mig[m].tgt}]
    /\ aver' = aver + 1
    /\ mig' = [mig EXCEPT ![m].st = "failed"]
    /\ aux' = [aux EXCEPT !.fails = @ + 1]
    /\ UNCHANGED <<counts, coord, log, ptr, queue, parts, view, committed, inv_missed>>

\* The coordinator dies; its in-memory progress is gone, the migration nodes stay (M12).
CoordinatorCrash ==
    /\ coord # None
    /\ aux.crashes < MaxCrashes
    /\ coord' = None
    /\ aux' = [aux EXCEPT !.crashes = @ + 1]
    /\ UNCHANGED <<asg, aver, counts, mig, log, ptr, queue, parts, view, committed, inv_missed>>

\* Another replica takes over and resumes every migration from its Keeper state.
TakeOver(r) ==
    /\ coord = None
    /\ coord' = r
    /\ UNCHANGED <<asg, aver, counts, mig, log, ptr, queue, parts, view, committed, aux, inv_missed>>

-----------------------------------------------------------------------------
(* SELECT: routed by replica x's cached assignment to one of its owners (never a :cloning     *)
(* target, M6), reading that replica's parts at once. R2 allows a miss only of a block the    *)
(* replica read is still receiving by replication.                                            *)
Query(x, y) ==
    /\ aux.queries < MaxQueries
    /\ y \in view[x].owners
    /\ inv_missed' = (inv_missed \/ \E b \in committed : b \notin parts[y] /\ ~InFlightTo(y, b))
    /\ aux' = [aux EXCEPT !.queries = @ + 1]
    /\ UNCHANGED <<asg, aver, counts, mig, coord, log, ptr, queue, parts, view, committed>>

Next ==
    \/ \E r \in Replicas, b \in Blocks : WriteInsert(r, b)
    \/ \E r \in Replicas : RefreshView(r) \/ Pull(r) \/ DropUnassigned(r) \/ TakeOver(r)
    \/ \E r \in Replicas, b \in Blocks : Fetch(r, b)
    \/ \E m \in MigIds, s, t \in Replicas : StartClone(m, s, t)
    \/ \E m \in MigIds : WriteCloneEntries(m) \/ Rescan(m) \/ SignalComplete(m) \/ Switch(m) \/ Done(m) \/ Fail(m)
    \/ CoordinatorCrash
    \/ \E x, y \in Replicas : Query(x, y)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Invariants, as the base module states them, in the PR's terms *)

TypeOKInv ==
    /\ asg.owners \subseteq Replicas /\ asg.cloning \subseteq Replicas
    /\ aver \in Nat
    /\ counts \in [Replicas -> Int]
    /\ \A m \in MigIds : mig[m].st \in MigStates
    /\ coord \in Replicas \cup {None}
    /\ \A r \in Replicas : ptr[r] \in 0..Len(log) /\ queue[r] \subseteq Blocks /\ parts[r] \subseteq Blocks
    /\ committed \subseteq Blocks
    /\ inv_missed \in BOOLEAN

\* RF replicas own the partition, none of them also :cloning, and the counts node agrees.
ReplicationFactorInv ==
    /\ Cardinality(asg.owners) = RF
    /\ asg.owners \cap asg.cloning = {}
    /\ \A r \in Replicas : counts[r] = IF r \in asg.owners THEN 1 ELSE 0

\* Every acknowledged block is on some replica's disk.
NoAckedBlockLostInv == \A b \in committed : \E r \in Replicas : b \in parts[r]

\* Every owner holds every acknowledged block, or replication is bringing it.
OwnersCompleteInv == \A b \in committed : \A o \in asg.owners : b \in parts[o] \/ InFlightTo(o, b)

\* R2: no SELECT missed an acknowledged block (other than by replication lag).
QueryNoMissingInv == ~inv_missed
=============================================================================
