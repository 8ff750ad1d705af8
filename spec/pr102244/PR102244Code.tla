--------------------------- MODULE PR102244Code ---------------------------
(***************************************************************************)
(* ClickHouse PR #102244's migration protocol as its C++ is, read at the   *)
(* commits the file index stores (spec/pr102244/PR102244.md, "Sources"):   *)
(* src/Storages/MergeTree/SelectiveReplication/MigrationCoordinator.cpp,   *)
(* MigrationMonitor.cpp (cd4d4fe8), KeeperAssignment.cpp (f070806f).       *)
(* PR102244.tla is the same protocol as the PR's description states it;    *)
(* where the two differ this module follows the code, and each difference  *)
(* is named in PR102244.md.                                                *)
(*                                                                         *)
(* One partition at block level, as in PR102244.tla, with what the code    *)
(* adds to it:                                                             *)
(*  - every migration step is one Keeper operation (or one multi) of some  *)
(*    driver: the coordinator's monitor, any replica running SYSTEM SYNC   *)
(*    SELECTIVE MIGRATIONS, a replica taking over an orphaned migration    *)
(*    (driveMigrations, waitForMigrationsComplete,                         *)
(*    recoverOrphanedMigrations). A driver acts on what it read before:    *)
(*    `pend` holds that, and a driver that dies loses it;                  *)
(*  - startClone reads source_parts_snapshot before its multi, and gives   *)
(*    up on an empty one; its GET_PART entries follow in other multis;     *)
(*  - SWITCH is two steps (updateState to SWITCH; then a multi of the      *)
(*    assignment and the counts, both at freshly read versions), and a     *)
(*    source already absent from the assignment goes straight to DONE;     *)
(*  - rollback (timeout in CLONE, a failed SWITCH multi, a partially       *)
(*    initialised migration found on takeover) removes `target:cloning`    *)
(*    whatever the migration's state is now;                               *)
(*  - the log filter (shouldSkipEntry) reads the cache and re-reads Keeper *)
(*    whenever the cache says "not assigned"; a partition with no          *)
(*    assignment is never skipped;                                         *)
(*  - the monitor drops a replica's parts of a partition Keeper assigns    *)
(*    elsewhere, at a fresh read, at once (clear_without_timeout);         *)
(*  - patch parts (lightweight updates) are named in a partition of their  *)
(*    own; the filter and the monitor map them back, the snapshot does not;*)
(*  - the first INSERT creates the assignment (InitOwners = {}).           *)
(*                                                                         *)
(* `Bugs` holds the code's behaviour where it is unsafe: a model with a    *)
(* string in `Bugs` runs the code there, and without it the smallest fix.  *)
(* The default configuration of the code is therefore every string in      *)
(* `CodeBugs`; `Readings` holds what the stored code does not settle       *)
(* (the SQL command's own checks, which live in files not stored) and the  *)
(* description's readings that the code retires.                           *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets, Sequences, TLC

CONSTANTS
    Replicas,        \* replica names
    Drivers,         \* replicas that drive migrations (coordinator, SYSTEM SYNC, takeover)
    RF,              \* replication_factor
    InitOwners,      \* the partition's replicas at the start; {}: no assignment node yet
    UpAtFirstInsert, \* the replicas active when the first INSERT creates the assignment
    Blocks,          \* INSERT ids: one part each
    PatchBlocks,     \* those of Blocks that are patch parts (lightweight UPDATEs)
    MigIds,          \* migration node ids (/selective/migrations/<uuid>)
    MaxFails,        \* bound on rollbacks
    MaxCrashes,      \* bound on drivers dying mid-operation
    MaxQueries,      \* bound on SELECTs
    Bugs,            \* the code's unsafe behaviour, each removable (see CodeBugs)
    Readings         \* what the stored code does not settle, and the description's readings

\* The code at cd4d4fe8/f070806f, in full.
CodeBugs == {"snapshot_source_parts", "snapshot_before_clone_multi", "snapshot_omits_patch_parts",
             "source_stops_at_switch", "clone_allows_active_migration", "switch_without_target_check",
             "rollback_ignores_state", "repair_moves_replica", "read_from_cloning_target"}

None == "none"
NoPend == [op |-> "none", m |-> 0, s |-> None, t |-> None, snap |-> {}, add |-> FALSE]

Bug(b) == b \in Bugs
Reading(x) == x \in Readings

VARIABLES
    asg,        \* /selective/assignments/<p>: [owners, cloning] (plain names, and names with :cloning)
    aver,       \* its znode version
    counts,     \* /selective/counts
    mig,        \* /selective/migrations/<id>: MigIds -> record (st "idle": no node yet)
    pend,       \* per driver, the step it decided on from its last read (NoPend: none)
    log,        \* the shared log: a sequence of GET_PART entries (block ids)
    ptr,        \* log_pointer per replica
    queue,      \* GET_PARTs queued per replica
    parts,      \* parts on each replica's disk (replicas/<r>/parts)
    view,       \* each replica's cached assignment entry [owners, cloning, ver]
    committed,  \* blocks committed (and acknowledged)
    aux,        \* bound counters [fails, crashes, queries]
    inv_missed  \* a SELECT missed an acknowledged block (R2)

vars == <<asg, aver, counts, mig, pend, log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* "switched" exists only in the fixed protocol: the SWITCH multi applied, DONE waiting for the
\* target to catch up (PR-F2's fix). "done" and "failed" nodes are removed at once by the code
\* (rollback, cleanupTerminatedMigrations); the model keeps the state to say how it ended.
MigStates == {"idle", "clone", "switch", "switched", "done", "failed"}
Active(m) == mig[m].st \in {"clone", "switch", "switched"}

Init ==
    /\ asg = [owners |-> InitOwners, cloning |-> {}]
    /\ aver = 0
    /\ counts = [r \in Replicas |-> IF r \in InitOwners THEN 1 ELSE 0]
    /\ mig = [m \in MigIds |-> [st |-> "idle", src |-> None, tgt |-> None, snap |-> {},
                                written |-> FALSE, complete |-> FALSE, logAtSwitch |-> 0, add |-> FALSE]]
    /\ pend = [d \in Drivers |-> NoPend]
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

SeqOf(S) == CHOOSE s \in [1..Cardinality(S) -> S] : \A i, j \in 1..Cardinality(S) : i # j => s[i] # s[j]

\* isReplicaAssigned strips :cloning: a cloning target counts as assigned (filter, monitor).
AssignedIn(a) == a.owners \cup a.cloning
Fresh == [owners |-> asg.owners, cloning |-> asg.cloning, ver |-> aver]
Registered == UNION {parts[x] : x \in Replicas}     \* replicas/*/parts
Allocated == asg.owners \cup asg.cloning # {}       \* readAllAssignmentsFromZK skips empty lists

\* Fixed protocol only (PR-F2): a source the SWITCH moved out keeps the partition until its
\* migration is DONE and no cache still routes to it.
Leaving(r) ==
    /\ ~Bug("source_stops_at_switch")
    /\ r \notin AssignedIn(asg)
    /\ \/ \E m \in MigIds : mig[m].st = "switched" /\ mig[m].src = r
       \/ \E x \in Replicas : r \in view[x].owners

\* shouldSkipEntry: the cache first; "not assigned" is checked again in Keeper; a partition with
\* no assignment is not skipped. Reading "filter_cached" is the description's (PR-F4, PR-F5).
KeepsByCache(r) == r \in AssignedIn(view[r])
Keeps(r) ==
    \/ KeepsByCache(r)
    \/ ~Reading("filter_cached") /\ (r \in AssignedIn(asg) \/ ~Allocated)
    \/ Reading("filter_cached") /\ AssignedIn(view[r]) = {}
    \/ Leaving(r)

InFlightTo(r, b) ==
    /\ \E r2 \in Replicas : b \in parts[r2]   \* a block no replica has is on its way nowhere
    /\ \/ b \in queue[r]
       \/ (Keeps(r) \/ r \in AssignedIn(asg)) /\ \E i \in (ptr[r] + 1)..Len(log) : log[i] = b

\* readActivePartsForPartition(source): the source's parts whose partition id is p's; a patch
\* part's id is its own (patch-<hash>-<p>), so it is not among them. Fixed: every part of p
\* registered by any replica, patch parts included.
Snapshot(s) ==
    LET base == IF Bug("snapshot_source_parts") THEN parts[s] ELSE Registered
    IN IF Bug("snapshot_omits_patch_parts") THEN base \ PatchBlocks ELSE base

-----------------------------------------------------------------------------
(* The write path *)

\* The first INSERT into p creates its assignment: a create of the node and a set of the counts
\* in one multi (allocateSinglePartition) over the replicas active then; with fewer of them than
\* replication_factor it degrades to as many as there are (a log line says so). The others come
\* up right after.
Allocate(r) ==
    /\ ~Allocated
    /\ aver = 0
    /\ r \in UpAtFirstInsert
    /\ \E S \in SUBSET UpAtFirstInsert :
         /\ Cardinality(S) = IF RF < Cardinality(UpAtFirstInsert) THEN RF ELSE Cardinality(UpAtFirstInsert)
         /\ asg' = [owners |-> S, cloning |-> {}]
         /\ counts' = [x \in Replicas |-> IF x \in S THEN 1 ELSE 0]
    /\ aver' = 1
    /\ view' = [view EXCEPT ![r] = [owners |-> asg'.owners, cloning |-> {}, ver |-> 1]]
    /\ UNCHANGED <<mig, pend, log, ptr, queue, parts, committed, aux, inv_missed>>

\* A block (or a patch part) committed on a replica whose cache says it owns p, with the commit
\* multi checking the assignment version it cached; a mismatch re-reads (RefreshView) and
\* re-routes (forwarding is folded into "some owner writes it").
WriteInsert(r, b) ==
    /\ b \in Blocks \ committed
    /\ r \in view[r].owners
    /\ view[r].ver = aver
    /\ parts' = [parts EXCEPT ![r] = @ \cup {b}]
    /\ log' = Append(log, b)
    /\ committed' = committed \cup {b}
    /\ UNCHANGED <<asg, aver, counts, mig, pend, ptr, queue, view, aux, inv_missed>>

\* The cache entry is replaced by Keeper's (a forced read, the full refresh, a miss).
RefreshView(r) ==
    /\ view[r] # Fresh
    /\ view' = [view EXCEPT ![r] = Fresh]
    /\ UNCHANGED <<asg, aver, counts, mig, pend, log, ptr, queue, parts, committed, aux, inv_missed>>

\* pullLogsToQueue with shouldSkipEntry; a negative cache answer is re-read from Keeper and the
\* fresh entry written back to the cache (getAssignments with force_refresh).
Pull(r) ==
    /\ ptr[r] < Len(log)
    /\ LET b == log[ptr[r] + 1] IN
         queue' = [queue EXCEPT ![r] = IF Keeps(r) /\ b \notin parts[r] THEN @ \cup {b} ELSE @]
    /\ ptr' = [ptr EXCEPT ![r] = @ + 1]
    /\ view' = IF ~KeepsByCache(r) /\ ~Reading("filter_cached") THEN [view EXCEPT ![r] = Fresh] ELSE view
    /\ UNCHANGED <<asg, aver, counts, mig, pend, log, parts, committed, aux, inv_missed>>

Fetch(r, b) ==
    /\ b \in queue[r]
    /\ \E x \in Replicas \ {r} : b \in parts[x]
    /\ parts' = [parts EXCEPT ![r] = @ \cup {b}]
    /\ queue' = [queue EXCEPT ![r] = @ \ {b}]
    /\ UNCHANGED <<asg, aver, counts, mig, pend, log, ptr, view, committed, aux, inv_missed>>

\* MigrationMonitor::run: at a fresh read of every assignment, a replica that p is assigned
\* away from (a non-empty list without it) drops its parts of p, patch parts included, at once.
\* The queue is left as it is. Fixed: not while it is leaving.
DropUnassigned(r) ==
    /\ parts[r] # {}
    /\ Allocated
    /\ r \notin AssignedIn(asg)
    /\ ~Leaving(r)
    /\ parts' = [parts EXCEPT ![r] = {}]
    /\ UNCHANGED <<asg, aver, counts, mig, pend, log, ptr, queue, view, committed, aux, inv_missed>>

-----------------------------------------------------------------------------
(* Migration: startClone *)

\* startClone, step 1: the snapshot is read (fixed: after the multi, in CloneMulti); an empty
\* one gives up. The rebalancer would not plan a partition with a migration in CLONE or SWITCH
\* (getActiveMigrationPartitions); startClone itself does not check (O4), nor does the CLONE
\* multi. Fixed: refused while p has a migration in flight.
ReadSnapshot(d, m, s, t) ==
    /\ pend[d] = NoPend
    /\ mig[m].st = "idle"
    /\ \A e \in Drivers : pend[e].m # m
    /\ \A n \in MigIds : n < m => (mig[n].st # "idle" \/ \E e \in Drivers : pend[e].m = n)   \* uuids: symmetry
    /\ s \in asg.owners
    /\ t \notin asg.owners
    \* SYSTEM MIGRATE PARTITION names only the target; two of them racing both pass any check
    \* made before startClone's CAS, which appends target:cloning whatever the list holds.
    /\ ~Bug("clone_allows_active_migration") => t \notin asg.cloning /\ ~\E n \in MigIds : Active(n)
    /\ Bug("snapshot_before_clone_multi") => Snapshot(s) # {}
    /\ pend' = [pend EXCEPT ![d] = [op |-> "clone", m |-> m, s |-> s, t |-> t, snap |-> Snapshot(s), add |-> FALSE]]
    /\ UNCHANGED <<asg, aver, counts, mig, log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* The rebalancer's phase 1 (computeRebalancePlan, under its lock, every replica up now): a
\* partition with fewer owners than replication_factor gets a migration from its most loaded
\* owner to an unassigned replica, started by startClone like any other. Meant to add a replica;
\* as the code is, its SWITCH removes the source like every SWITCH (`repair_moves_replica`).
PlanUnderReplicated(d, m, s, t) ==
    /\ pend[d] = NoPend
    /\ Allocated
    /\ Cardinality(asg.owners) < RF
    /\ mig[m].st = "idle"
    /\ \A e \in Drivers : pend[e].m # m
    /\ \A n \in MigIds : n < m => (mig[n].st # "idle" \/ \E e \in Drivers : pend[e].m = n)
    /\ ~\E n \in MigIds : Active(n)                     \* getActiveMigrationPartitions
    /\ s \in asg.owners
    /\ t \notin AssignedIn(asg)
    /\ Bug("snapshot_before_clone_multi") => Snapshot(s) # {}
    /\ pend' = [pend EXCEPT ![d] = [op |-> "clone", m |-> m, s |-> s, t |-> t, snap |-> Snapshot(s), add |-> TRUE]]
    /\ UNCHANGED <<asg, aver, counts, mig, log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* startClone, step 2: one multi creates the migration node (state CLONE, the snapshot) and sets
\* the assignment, read just before, with target:cloning appended (CAS retried on its version).
CloneMulti(d) ==
    /\ pend[d].op = "clone"
    /\ LET m == pend[d].m
           s == pend[d].s
           t == pend[d].t
           snap == IF Bug("snapshot_before_clone_multi") THEN pend[d].snap ELSE Snapshot(s) IN
       \/ /\ snap = {}                                    \* fixed: read here, empty gives up
          /\ pend' = [pend EXCEPT ![d] = NoPend]
          /\ UNCHANGED <<asg, aver, mig>>
       \/ /\ snap # {}
          /\ ~Bug("clone_allows_active_migration") => ~\E n \in MigIds : Active(n)
          /\ asg' = [asg EXCEPT !.cloning = @ \cup {t}]
          /\ aver' = aver + 1
          /\ mig' = [mig EXCEPT ![m] = [st |-> "clone", src |-> s, tgt |-> t, snap |-> snap,
                                        written |-> FALSE, complete |-> FALSE, logAtSwitch |-> 0,
                                        add |-> pend[d].add]]
          /\ pend' = [pend EXCEPT ![d] = [op |-> "entries", m |-> m, s |-> s, t |-> t, snap |-> snap, add |-> FALSE]]
    /\ UNCHANGED <<counts, log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* startClone, step 3: a GET_PART entry per snapshot part, in separate multis after the node
\* exists. A driver that dies before leaves a partially initialised migration.
WriteCloneEntries(d) ==
    /\ pend[d].op = "entries"
    /\ log' = log \o SeqOf(pend[d].snap)
    /\ mig' = [mig EXCEPT ![pend[d].m].written = TRUE]
    /\ pend' = [pend EXCEPT ![d] = NoPend]
    /\ UNCHANGED <<asg, aver, counts, ptr, queue, parts, view, committed, aux, inv_missed>>

\* checkAndSignalCloneComplete, run by the target: every snapshot part is covered by a part in
\* its own replicas/<t>/parts. Nothing about its queue or the log.
SignalComplete(m) ==
    /\ mig[m].st = "clone"
    /\ ~mig[m].complete
    /\ mig[m].snap \subseteq parts[mig[m].tgt]
    /\ mig' = [mig EXCEPT ![m].complete = TRUE]
    /\ UNCHANGED <<asg, aver, counts, pend, log, ptr, queue, parts, view, committed, aux, inv_missed>>

-----------------------------------------------------------------------------
(* Migration: driveStateMachine *)

\* A driver reads the node in CLONE and finds clone_complete: updateState to SWITCH (a CAS on the
\* node), then goes on to the SWITCH multi. Or it reads SWITCH (a driver died between the two).
DriveSwitch(d, m) ==
    /\ pend[d] = NoPend
    /\ \/ mig[m].st = "clone" /\ mig[m].complete /\ mig' = [mig EXCEPT ![m].st = "switch"]
       \/ mig[m].st = "switch" /\ UNCHANGED mig
    /\ pend' = [pend EXCEPT ![d] = [NoPend EXCEPT !.op = "switch", !.m = m]]
    /\ UNCHANGED <<asg, aver, counts, log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* A driver reads the node in CLONE and decides to roll back: migration_timeout_seconds passed
\* (each replica's clock against created_at), or on takeover it is partially initialised.
DriveRollback(d, m) ==
    /\ pend[d] = NoPend
    /\ mig[m].st = "clone"
    /\ aux.fails < MaxFails
    /\ pend' = [pend EXCEPT ![d] = [NoPend EXCEPT !.op = "rollback", !.m = m]]
    /\ aux' = [aux EXCEPT !.fails = @ + 1]
    /\ UNCHANGED <<asg, aver, counts, mig, log, ptr, queue, parts, view, committed, inv_missed>>

\* The SWITCH multi, from the driver's earlier read of the node: the assignment is read afresh;
\* the source removed, the target's :cloning stripped (if it is there), the counts moved (source
\* -1, target +1), each at the version just read. A source already absent means "applied before":
\* DONE, leaving the assignment as it is. Then clone_complete and the node go.
\* Fixed: the multi also checks the node is still in SWITCH; it applies only with the source and
\* target:cloning both present; a target already plain with the source gone is "applied before";
\* anything else fails the migration (its :cloning removed). DONE then waits (PR-F2's fix).
SwitchMulti(d) ==
    /\ pend[d].op = "switch"
    /\ LET m == pend[d].m
           s == mig[m].src
           t == mig[m].tgt
           adds == mig[m].add /\ ~Bug("repair_moves_replica")     \* fixed: phase 1 keeps its source
           apply == [owners |-> (IF adds THEN asg.owners ELSE asg.owners \ {s}) \cup ({t} \cap AssignedIn(asg)),
                     cloning |-> asg.cloning \ {s, t}]
           moved == IF adds THEN [counts EXCEPT ![t] = @ + 1]
                    ELSE [counts EXCEPT ![s] = IF @ > 0 THEN @ - 1 ELSE 0, ![t] = @ + 1]
           after == IF Bug("source_stops_at_switch") THEN "done" ELSE "switched" IN
       IF Bug("rollback_ignores_state") \/ mig[m].st = "switch"
       THEN IF Bug("switch_without_target_check")
            THEN IF s \in AssignedIn(asg)
                 THEN /\ asg' = apply /\ aver' = aver + 1 /\ counts' = moved
                      /\ mig' = [mig EXCEPT ![m].st = IF @ \in {"switch", "clone"} THEN after ELSE @,
                                            ![m].logAtSwitch = Len(log)]
                 ELSE /\ mig' = [mig EXCEPT ![m].st = IF @ \in {"switch", "clone"} THEN "done" ELSE @]
                      /\ UNCHANGED <<asg, aver, counts>>
            ELSE CASE s \in asg.owners /\ t \in asg.cloning ->
                        /\ asg' = apply /\ aver' = aver + 1 /\ counts' = moved
                        /\ mig' = [mig EXCEPT ![m].st = after, ![m].logAtSwitch = Len(log)]
                   [] s \notin AssignedIn(asg) /\ t \in asg.owners ->
                        /\ mig' = [mig EXCEPT ![m].st = "done"]
                        /\ UNCHANGED <<asg, aver, counts>>
                   [] OTHER ->
                        /\ asg' = [asg EXCEPT !.cloning = @ \ {t}] /\ aver' = aver + 1
                        /\ mig' = [mig EXCEPT ![m].st = "failed"]
                        /\ UNCHANGED counts
       ELSE UNCHANGED <<asg, aver, counts, mig>>
    /\ pend' = [pend EXCEPT ![d] = NoPend]
    /\ UNCHANGED <<log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* rollback: reads the node whatever its state, removes every target:cloning from the
\* assignment (a CAS at a fresh version), sets FAILED and removes the subtree. A node already
\* gone: nothing to undo. Fixed: the first step is a CAS of the node from CLONE to FAILED; a node
\* no longer in CLONE is left alone.
ApplyRollback(d) ==
    /\ pend[d].op = "rollback"
    /\ LET m == pend[d].m
           t == mig[m].tgt IN
       IF mig[m].st = "clone" \/ (Bug("rollback_ignores_state") /\ mig[m].st \in {"switch", "switched"})
       THEN /\ asg' = [asg EXCEPT !.cloning = @ \ {t}]
            /\ aver' = aver + 1
            /\ mig' = [mig EXCEPT ![m].st = "failed"]
       ELSE UNCHANGED <<asg, aver, mig>>
    /\ pend' = [pend EXCEPT ![d] = NoPend]
    /\ UNCHANGED <<counts, log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* Fixed protocol only: DONE once the target has pulled the log past the SWITCH and has nothing
\* queued (PR-F2's fix).
Done(m) ==
    /\ mig[m].st = "switched"
    /\ ptr[mig[m].tgt] >= mig[m].logAtSwitch
    /\ queue[mig[m].tgt] = {}
    /\ mig' = [mig EXCEPT ![m].st = "done"]
    /\ UNCHANGED <<asg, aver, counts, pend, log, ptr, queue, parts, view, committed, aux, inv_missed>>

\* A driver's process dies: what it had read and decided is gone; Keeper keeps the rest.
DriverCrash(d) ==
    /\ pend[d] # NoPend
    /\ aux.crashes < MaxCrashes
    /\ pend' = [pend EXCEPT ![d] = NoPend]
    /\ aux' = [aux EXCEPT !.crashes = @ + 1]
    /\ UNCHANGED <<asg, aver, counts, mig, log, ptr, queue, parts, view, committed, inv_missed>>

-----------------------------------------------------------------------------
(* SELECT (Router.cpp readWithSelectiveRouting): routed by replica x's cached assignment. The  *)
(* code strips :cloning before it decides: x reads locally when the cache lists it, :cloning *)
(* included, and otherwise picks hash(partition) mod n over the stripped names, so a CLONE    *)
(* target is read (`read_from_cloning_target`). Fixed: owners only (`y` any of them: the     *)
(* code's fixed pick is one of these).                                                      *)
Query(x, y) ==
    /\ aux.queries < MaxQueries
    /\ y \in IF Bug("read_from_cloning_target") THEN AssignedIn(view[x]) ELSE view[x].owners
    /\ inv_missed' = (inv_missed \/ \E b \in committed : b \notin parts[y] /\ ~InFlightTo(y, b))
    /\ aux' = [aux EXCEPT !.queries = @ + 1]
    /\ UNCHANGED <<asg, aver, counts, mig, pend, log, ptr, queue, parts, view, committed>>

Next ==
    \/ \E r \in Replicas : Allocate(r) \/ RefreshView(r) \/ Pull(r) \/ DropUnassigned(r)
    \/ \E r \in Replicas, b \in Blocks : WriteInsert(r, b) \/ Fetch(r, b)
    \/ \E d \in Drivers, m \in MigIds, s, t \in Replicas : ReadSnapshot(d, m, s, t) \/ PlanUnderReplicated(d, m, s, t)
    \/ \E d \in Drivers : CloneMulti(d) \/ WriteCloneEntries(d) \/ SwitchMulti(d) \/ ApplyRollback(d)
                          \/ DriverCrash(d)
    \/ \E d \in Drivers, m \in MigIds : DriveSwitch(d, m) \/ DriveRollback(d, m)
    \/ \E m \in MigIds : SignalComplete(m) \/ Done(m)
    \/ \E x, y \in Replicas : Query(x, y)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Invariants: PR102244.tla's, and one the code's states need *)

TypeOKInv ==
    /\ asg.owners \subseteq Replicas /\ asg.cloning \subseteq Replicas
    /\ aver \in Nat
    /\ counts \in [Replicas -> Int]
    /\ \A m \in MigIds : mig[m].st \in MigStates
    /\ \A r \in Replicas : ptr[r] \in 0..Len(log) /\ queue[r] \subseteq Blocks /\ parts[r] \subseteq Blocks
    /\ committed \subseteq Blocks
    /\ inv_missed \in BOOLEAN

\* Once p has an assignment: RF replicas own it, none of them also :cloning, and the counts
\* node agrees.
ReplicationFactorInv ==
    (aver > 0 \/ InitOwners # {}) =>
        /\ Cardinality(asg.owners) = RF
        /\ asg.owners \cap asg.cloning = {}
        /\ \A r \in Replicas : counts[r] = IF r \in asg.owners THEN 1 ELSE 0

\* A :cloning entry belongs to a migration in flight: otherwise its replica replicates the
\* partition for ever, is never read, and counts as a copy in the rebalancer's load.
CloningHasMigrationInv ==
    \A t \in asg.cloning : \E m \in MigIds : mig[m].tgt = t /\ mig[m].st \in {"clone", "switch"}

\* A migration the rebalancer planned to repair under-replication (phase 1) ends with one owner
\* more: its source and its target both own the partition. Otherwise a partition allocated while
\* a replica was down stays below replication_factor for good, and phase 1 plans it again.
RepairAddsInv ==
    \A m \in MigIds : mig[m].add /\ mig[m].st \in {"switched", "done"} =>
        {mig[m].src, mig[m].tgt} \subseteq asg.owners

NoAckedBlockLostInv == \A b \in committed : \E r \in Replicas : b \in parts[r]

OwnersCompleteInv == \A b \in committed : \A o \in asg.owners : b \in parts[o] \/ InFlightTo(o, b)

QueryNoMissingInv == ~inv_missed
=============================================================================
