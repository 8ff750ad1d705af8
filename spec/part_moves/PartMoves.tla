------------------------------ MODULE PartMoves ------------------------------
(***************************************************************************)
(* ClickHouse's part moves between shards (seed 001; ALTER TABLE ... MOVE  *)
(* PART ... TO SHARD), as its code does them (README.md here cites the     *)
(* files and commits read): two shards, each a ReplicatedMergeTree table  *)
(* of its own with its own log, and a part that moves from the source      *)
(* shard to the destination while a query reads one replica of each.     *)
(*                                                                         *)
(* movePartitionToShard pins the part's UUID in both shards' Keeper       *)
(* pinned_part_uuids (merges of a pinned part are refused: the merge       *)
(* predicate reads the pins from Keeper) and creates the task in          *)
(* SYNC_SOURCE. The orchestrator (PartMovesBetweenShardsOrchestrator)      *)
(* then issues a log entry per state and waits for every replica of that   *)
(* shard to process it:                                                    *)
(*   SYNC_SOURCE, SYNC_DESTINATION: SYNC_PINNED_PART_UUIDS, each replica's *)
(*     local copy of the pins taken from Keeper;                           *)
(*   DESTINATION_FETCH: CLONE_PART_FROM_SHARD, the part fetched into       *)
(*     detached/ (not visible);                                            *)
(*   DESTINATION_ATTACH: ATTACH_PART, the part active on the destination   *)
(*     under a new name and the same UUID;                                 *)
(*   SOURCE_DROP_PRE_DELAY, SOURCE_DROP_POST_DELAY: a sleep of             *)
(*     part_moves_between_shards_delay_seconds (30 s); this model has no   *)
(*     clock, so a sleep is a step that waits for nothing;                 *)
(*   SOURCE_DROP: DROP_RANGE of the part on the source;                    *)
(*   REMOVE_UUID_PIN: both Keeper pin sets emptied (no log entry).         *)
(* KILL PART_MOVE_TO_SHARD before SOURCE_DROP sets rollback: the task goes *)
(* back state by state (an attached part dropped on the destination) to    *)
(* CANCELLED.                                                              *)
(*                                                                         *)
(* A query (a Distributed SELECT) reads each shard from one of its         *)
(* replicas, in steps of their own, so its two snapshots straddle the move *)
(* as a slow or skewed query's do. With query deduplication              *)
(* (allow_experimental_query_deduplication, Dedup) a replica reports the *)
(* UUIDs of the parts it read that are in its *local* pin set; a UUID      *)
(* reported by a second shard makes the initiator re-run that shard's     *)
(* query without it, once (a second conflict fails the query). Off, the   *)
(* rows of a part active on both shards are read twice: ClickHouse master  *)
(* removed the setting (PR #99398), and it was off by default before.     *)
(*                                                                         *)
(* Orchestrator: "current" (since PR #29043, 2021: each state's entry is *)
(* created in one multi with a barrier znode, log_<STATE>, that a re-run  *)
(* finds and waits on) or "v21_8" (the orchestrator of ClickHouse 21.8,   *)
(* b3248892: the entry's multi checks only the task's version, which it   *)
(* does not bump, so a re-run after a crash between the entry and the     *)
(* state's CAS issues the entry again; no KILL). A crash of the           *)
(* orchestrating replica (its session, so its lock_holder, gone; another  *)
(* leader takes the task over) loses what it kept in memory only.         *)
(*                                                                         *)
(* Fixes (none in ClickHouse): "sync_waits_for_queries" (PR #50777, not    *)
(* merged: the move does not pass SYNC_DESTINATION while a query that      *)
(* started before both syncs runs), "delays_wait_for_queries" (SOURCE_DROP *)
(* waits for the queries that started before the attach, REMOVE_UUID_PIN   *)
(* for those that started before the drop: what the two sleeps are for),  *)
(* "mutations_respect_pins" (a pinned part is not mutated, as it is not     *)
(* merged: otherwise the mutated part, under a new UUID, survives the      *)
(* exact-name DROP_RANGE, which skips a part whose mutated version covers  *)
(* it: grabActivePartsToRemoveForDropRange).                               *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    SourceReplicas, DestReplicas,   \* the replicas of the source and of the destination shard
    Queries,
    Dedup,        \* allow_experimental_query_deduplication
    MaxMerges,    \* merges on the destination (after the pins go, the moved part may merge)
    MaxKills,     \* KILL PART_MOVE_TO_SHARD
    MaxMutations, \* ALTER TABLE UPDATE on the source shard while the part is pinned
    MutateFrom,   \* the first state of the task in which that UPDATE may come (through SOURCE_DROP)
    FilterSkipsSync, \* a selective replica's log filter that passes only the types the RFC's table
                     \* lists skips SYNC_PINNED_PART_UUIDS (it names no partition, and is not listed)
    Orchestrator, \* "current" (barrier znodes) or "v21_8" (none: a re-run re-issues its entry)
    MaxCrashes,   \* crashes of the orchestrating replica
    MigTarget,    \* a selective source shard: the replica a migration of the moving part's partition
                  \* clones it into (not a keeper before), or None (a plain shard)
    MigSource,    \* the owner the migration copies from (PR #102244's snapshot source)
    MigDesign,    \* how the CLONE copies: "rfc_fixed" (every part registered by a keeper, and the
                  \* DROP_RANGEs a keeper has still to apply re-queued after them: F3, F8, F16) or
                  \* "pr_code" (the source's active parts, as GET_PARTs in the shared log: PR-F1)
    Fixes

Shards == {"src", "dst"}
Replicas == SourceReplicas \cup DestReplicas
ShardOf(r) == IF r \in SourceReplicas THEN "src" ELSE "dst"
ReplicasOf(s) == IF s = "src" THEN SourceReplicas ELSE DestReplicas
Fix(name) == name \in Fixes
None == "none"

\* Parts: the rows they hold, their UUID, and a name that tells the copies apart.
Moving == [rows |-> {1}, uuid |-> "u1", name |-> "src_1"]       \* the part that moves, on the source
Other == [rows |-> {2}, uuid |-> "u2", name |-> "dst_2"]        \* a part already on the destination
Attached == [rows |-> {1}, uuid |-> "u1", name |-> "dst_1"]     \* the moving part attached on the destination
Merged == [rows |-> {1, 2}, uuid |-> "u3", name |-> "dst_1_2"]  \* a destination merge of the two
Mutated == [rows |-> {1}, uuid |-> "u4", name |-> "src_1_m"]    \* a mutation of the moving part: a new UUID
\* What a re-issued ATTACH_PART names (v21_8): the part under a second block number allocated on
\* the destination, the same UUID and checksum.
Reattached == [rows |-> {1}, uuid |-> "u1", name |-> "dst_1_b"]
AllRows == {1, 2}

\* The task's states in the code's order (the enum's, CANCELLED apart).
States == <<"TODO", "SYNC_SOURCE", "SYNC_DESTINATION", "DESTINATION_FETCH", "DESTINATION_ATTACH",
            "SOURCE_DROP_PRE_DELAY", "SOURCE_DROP", "SOURCE_DROP_POST_DELAY", "REMOVE_UUID_PIN", "DONE">>
Idx(s) == CHOOSE i \in 1..Len(States) : States[i] = s
Before(a, b) == Idx(a) < Idx(b)

VARIABLES
    st,        \* the task's state ("none" before MOVE PART, "CANCELLED" after a rollback)
    rollback,  \* KILL PART_MOVE_TO_SHARD was accepted
    issued,    \* the log index of the entry the current state issued and waits for (0: none yet)
    pinK,      \* shard -> pinned_part_uuids in Keeper
    pinL,      \* replica -> its local copy (synced by SYNC_PINNED_PART_UUIDS)
    log,       \* shard -> its replication log: [type, part]
    ptr,       \* replica -> entries of its shard's log it has processed
    parts,     \* replica -> its active parts
    detached,  \* replica -> parts in its detached/ folder
    merges,    \* merges done (bound)
    kills,     \* kills accepted (bound)
    mutations, \* mutations written (bound)
    crashes,   \* crashes of the orchestrating replica (bound)
    mig,       \* the selective migration of the moving part's partition: "none", "clone", "done"
    migQueue,  \* the CLONE's own queue on MigTarget (rfc_fixed): <<[type, part]>>
    qry        \* query -> [st, started (the task's state then), read: shard -> replica or None, seen, dup, resent]

vars == <<st, rollback, issued, pinK, pinL, log, ptr, parts, detached, merges, kills, mutations, crashes, mig, migQueue, qry>>

Init ==
    /\ st = None
    /\ rollback = FALSE
    /\ issued = 0
    /\ pinK = [s \in Shards |-> {}]
    /\ pinL = [r \in Replicas |-> {}]
    /\ log = [s \in Shards |-> <<>>]
    /\ ptr = [r \in Replicas |-> 0]
    /\ parts = [r \in Replicas |-> IF r = MigTarget THEN {} ELSE IF r \in SourceReplicas THEN {Moving} ELSE {Other}]
    /\ detached = [r \in Replicas |-> {}]
    /\ merges = 0
    /\ kills = 0
    /\ mutations = 0
    /\ crashes = 0
    /\ mig = "none"
    /\ migQueue = <<>>
    /\ qry = [q \in Queries |-> [st |-> "idle", started |-> None, read |-> [s \in Shards |-> None],
                                 reported |-> {}, seen |-> {}, dup |-> FALSE, resent |-> FALSE]]

\* The shard whose replicas the state's entry goes to, and the entry.
EntryOf(s) ==
    CASE s = "SYNC_SOURCE" -> <<"src", [type |-> "SYNC", part |-> None]>>
      [] s = "SYNC_DESTINATION" -> <<"dst", [type |-> "SYNC", part |-> None]>>
      [] s = "DESTINATION_FETCH" -> <<"dst", [type |-> "CLONE", part |-> Moving]>>
      [] s = "DESTINATION_ATTACH" -> <<"dst", [type |-> "ATTACH", part |-> Attached]>>
      [] s = "SOURCE_DROP" -> <<"src", [type |-> "DROP", part |-> Moving]>>
Issues(s) == s \in {"SYNC_SOURCE", "SYNC_DESTINATION", "DESTINATION_FETCH", "DESTINATION_ATTACH", "SOURCE_DROP"}
Processed(s) == \A r \in ReplicasOf(s) : ptr[r] >= issued

\* Running queries that started while the task was before state `s` (or before the task).
StartedBefore(s) == {q \in Queries : qry[q].st = "running" /\ (qry[q].started = None \/ Before(qry[q].started, s))}

After(s) == States[Idx(s) + 1]

-----------------------------------------------------------------------------
(* The move *)

\* ALTER TABLE ... MOVE PART ... TO SHARD: one multi pins the UUID on both shards and creates the task.
MovePart ==
    /\ st = None
    /\ \E r \in SourceReplicas : Moving \in parts[r]
    /\ pinK' = [s \in Shards |-> pinK[s] \cup {Moving.uuid}]
    /\ st' = "SYNC_SOURCE"
    /\ UNCHANGED <<rollback, issued, pinL, log, ptr, parts, detached, merges, kills, mutations, crashes, mig, migQueue, qry>>

\* v21_8's SOURCE_DROP calls dropPart, which returns false when the replica running it no longer
\* has the part committed (or a DROP_RANGE of it is already queued there), and the orchestrator
\* then moves on without waiting. A re-run after a crash does so once its replica has processed the
\* first run's DROP_RANGE, whether the other source replicas have or not.
DropSkipsWait ==
    /\ Orchestrator = "v21_8" /\ st = "SOURCE_DROP" /\ issued = 0
    /\ \E k \in 1..Len(log.src) : log.src[k].type = "DROP" /\ \E r \in SourceReplicas : ptr[r] >= k

\* An ATTACH_PART of the moving part is in the destination's log, not dropped since.
AttachIssued == \E k \in 1..Len(log.dst) : log.dst[k].type = "ATTACH"
                                       /\ ~\E j \in k..Len(log.dst) : log.dst[j].type = "DROP"

\* ATTACH_PART carries the checksum of the part the orchestrating replica has active containing the
\* moving part's name (getActiveContainingPart): the part itself, or a mutation of it (its UUID
\* names its data here). None such on any source replica: the step throws and is retried.
ContainingSum(o) == IF Moving \in parts[o] THEN {Moving.uuid} ELSE IF Mutated \in parts[o] THEN {Mutated.uuid} ELSE {}
AttachSums == UNION {ContainingSum(o) : o \in SourceReplicas}

\* The orchestrator issues its state's log entry. "current": with its barrier, so once (issued
\* is the barrier, kept in Keeper). "v21_8": after a crash, again; a second ATTACH_PART allocates
\* a second block number on the destination.
Issue ==
    LET e0 == EntryOf(st) IN
    /\ ~rollback /\ Issues(st) /\ issued = 0
    /\ ~DropSkipsWait
    /\ \E sum \in (IF e0[2].type = "ATTACH" THEN AttachSums ELSE {None}) :
        LET e == IF e0[2].type = "ATTACH"
                 THEN <<"dst", [type |-> "ATTACH", part |-> IF AttachIssued THEN Reattached ELSE Attached, sum |-> sum]>>
                 ELSE e0 IN
        /\ log' = [log EXCEPT ![e[1]] = Append(@, e[2])]
        /\ issued' = Len(log[e[1]]) + 1
    /\ UNCHANGED <<st, rollback, pinK, pinL, ptr, parts, detached, merges, kills, mutations, crashes, mig, migQueue, qry>>

\* Every replica of the shard processed the entry (tryWaitForAllReplicasToProcessLogEntry): the
\* next state. A state without an entry (the delays) moves on at once: the model has no clock.
Advance ==
    /\ ~rollback
    /\ st \in {States[i] : i \in 2..Len(States) - 1}
    /\ IF Issues(st) THEN (issued > 0 /\ Processed(EntryOf(st)[1])) \/ DropSkipsWait ELSE TRUE
    /\ st = "SYNC_DESTINATION" /\ Fix("sync_waits_for_queries") => StartedBefore("DESTINATION_FETCH") = {}
    /\ st = "SOURCE_DROP_PRE_DELAY" /\ Fix("delays_wait_for_queries") => StartedBefore("SOURCE_DROP_PRE_DELAY") = {}
    /\ st = "SOURCE_DROP_POST_DELAY" /\ Fix("delays_wait_for_queries") => StartedBefore("SOURCE_DROP_POST_DELAY") = {}
    /\ st' = After(st)
    /\ issued' = 0
    /\ pinK' = IF st = "REMOVE_UUID_PIN" THEN [s \in Shards |-> pinK[s] \ {Moving.uuid}] ELSE pinK
    /\ UNCHANGED <<rollback, pinL, log, ptr, parts, detached, merges, kills, mutations, crashes, mig, migQueue, qry>>

\* KILL PART_MOVE_TO_SHARD: refused from SOURCE_DROP on ("too late to rollback"). v21_8 has none.
Kill ==
    /\ Orchestrator = "current"
    /\ kills < MaxKills
    /\ st \in {"SYNC_SOURCE", "SYNC_DESTINATION", "DESTINATION_FETCH", "DESTINATION_ATTACH", "SOURCE_DROP_PRE_DELAY"}
    /\ ~rollback
    /\ rollback' = TRUE
    /\ kills' = kills + 1
    /\ UNCHANGED <<st, issued, pinK, pinL, log, ptr, parts, detached, merges, mutations, crashes, mig, migQueue, qry>>

\* A rollback goes back a state per step. Back from DESTINATION_ATTACH whose ATTACH_PART was issued,
\* a DROP_RANGE of the attached part on the destination first, waited for; from TODO the pins go.
RollbackStep ==
    /\ rollback
    /\ st \notin {"CANCELLED", "DONE"}
    /\ IF st = "DESTINATION_ATTACH" /\ AttachIssued
       THEN /\ log' = [log EXCEPT !.dst = Append(@, [type |-> "DROP", part |-> Attached])]
            /\ issued' = Len(log.dst) + 1
            /\ UNCHANGED <<st, pinK>>
       ELSE /\ st = "DESTINATION_ATTACH" => issued = 0 \/ Processed("dst")
            /\ st' = IF st = "TODO" THEN "CANCELLED" ELSE States[Idx(st) - 1]
            /\ issued' = 0
            /\ pinK' = IF st = "TODO" THEN [s \in Shards |-> pinK[s] \ {Moving.uuid}] ELSE pinK
            /\ UNCHANGED log
    /\ UNCHANGED <<rollback, pinL, ptr, parts, detached, merges, kills, mutations, crashes, mig, migQueue, qry>>

\* The orchestrating replica crashes (or loses its session, and with it lock_holder) after its
\* state's entry went out and before the state's CAS; another leader takes the task over.
\* "current" keeps the entry's barrier in Keeper, and the re-run waits on it; "v21_8" kept it in
\* the crashed thread only.
OrchestratorCrash ==
    /\ crashes < MaxCrashes
    /\ Issues(st) /\ issued > 0 /\ ~rollback
    /\ crashes' = crashes + 1
    /\ issued' = IF Orchestrator = "current" THEN issued ELSE 0
    /\ UNCHANGED <<st, rollback, pinK, pinL, log, ptr, parts, detached, merges, kills, mutations, mig, migQueue, qry>>

-----------------------------------------------------------------------------
(* The replicas *)

\* A replica can carry out ATTACH_PART e: from a detached copy whose checksum is the entry's
\* (attachPartHelperFoundValidPart) or by fetching e's part from a destination replica that has it.
CanAttach(r, e) == (\E x \in detached[r] : x.uuid = e.sum) \/ \E r2 \in DestReplicas : e.part \in parts[r2]

\* A selective source shard's replica keeps the moving part's partition (its log filter passes the
\* partition's entries): the owners always, MigTarget once the migration's CLONE started.
Keeps(r) == r # MigTarget \/ mig # "none"
\* Some replica of the shard has part x active (a fetch can find it).
Fetchable(s, x) == \E r2 \in ReplicasOf(s) : x \in parts[r2]

\* A replica processes the next entry of its shard's log. An ATTACH_PART it cannot carry out stays
\* at the head of its queue (retried, "No active replica has part"). A replica that does not keep the
\* partition skips its entries (the sync names no partition: every replica processes it). A GET_PART
\* (a selective migration's, pr_code) of a part the replica lacks is fetched from a replica that has
\* it: a single-part DROP_RANGE leaves no mark that would refuse it (DROP PART is not added to the
\* virtual parts: ReplicatedMergeTreeLogEntry.cpp's getVirtualPartNames, "very weak guarantees for
\* DROP PART"); a part no replica has any more is given up (the part check thread finds it on none).
Process(r) ==
    LET s == ShardOf(r)
        e == log[s][ptr[r] + 1]
        skip == ~Keeps(r) /\ e.type \in {"DROP", "MUTATE", "GET"} IN
    /\ ptr[r] < Len(log[s])
    /\ e.type = "ATTACH" => CanAttach(r, e)
    \* CLONE_PART_FROM_SHARD fetches the part by its exact name from a source replica.
    /\ e.type = "CLONE" => Fetchable("src", e.part)
    /\ ptr' = [ptr EXCEPT ![r] = @ + 1]
    /\ CASE skip -> UNCHANGED <<parts, pinL, detached>>
         [] e.type = "GET" -> /\ parts' = [parts EXCEPT ![r] = IF Fetchable(s, e.part) THEN @ \cup {e.part} ELSE @]
                              /\ UNCHANGED <<pinL, detached>>
         [] e.type = "SYNC" -> /\ pinL' = IF FilterSkipsSync THEN pinL ELSE [pinL EXCEPT ![r] = pinK[s]]
                               /\ UNCHANGED <<parts, detached>>
         [] e.type = "CLONE" -> /\ detached' = [detached EXCEPT ![r] = @ \cup {e.part}]
                                /\ UNCHANGED <<parts, pinL>>
         [] e.type = "ATTACH" -> /\ parts' = [parts EXCEPT ![r] = @ \cup {e.part}]
                                 /\ detached' = [detached EXCEPT ![r] = @ \ {Moving}]
                                 /\ UNCHANGED pinL
         \* DROP_RANGE of the exact part (a single-part drop): a part that merged or mutated it stays
         \* ("Skipping drop range for part ... because covering part ... already exists").
         [] e.type = "DROP" -> /\ parts' = [parts EXCEPT ![r] = @ \ {e.part}]
                               /\ UNCHANGED <<pinL, detached>>
         [] e.type = "MERGE" -> /\ parts' = [parts EXCEPT ![r] = IF {Attached, Other} \subseteq @
                                                                THEN (@ \ {Attached, Other}) \cup {Merged} ELSE @]
                                /\ UNCHANGED <<pinL, detached>>
         [] e.type = "MUTATE" -> /\ parts' = [parts EXCEPT ![r] = IF Moving \in @ THEN (@ \ {Moving}) \cup {Mutated} ELSE @]
                                 /\ UNCHANGED <<pinL, detached>>
    \* Executing a DROP_RANGE removes the queued work it covers (removePartProducingOpsInRange): on the
    \* target, the CLONE's fetch of the dropped part.
    /\ migQueue' = IF r = MigTarget /\ ~skip /\ e.type = "DROP"
                   THEN SelectSeq(migQueue, LAMBDA q : ~(q.type = "GET" /\ q.part = e.part)) ELSE migQueue
    /\ UNCHANGED <<st, rollback, issued, pinK, log, merges, kills, mutations, crashes, mig, qry>>

\* A destination replica assigns the merge of the attached part with the other: the merge
\* predicate reads the pins from Keeper and refuses a pinned part.
AssignMerge(r) ==
    /\ r \in DestReplicas
    /\ merges < MaxMerges
    /\ {Attached, Other} \subseteq parts[r]
    /\ Attached.uuid \notin pinK.dst
    /\ log' = [log EXCEPT !.dst = Append(@, [type |-> "MERGE", part |-> Merged])]
    /\ merges' = merges + 1
    /\ UNCHANGED <<st, rollback, issued, pinK, pinL, ptr, parts, detached, kills, mutations, crashes, mig, migQueue, qry>>

\* ALTER TABLE UPDATE on the source shard while the part is pinned, from MutateFrom until it is
\* dropped (SOURCE_DROP_PRE_DELAY: attached on the destination, not yet dropped; SYNC_SOURCE:
\* before the clone fetched it, too): the source's MUTATE_PART of the moving part. The mutation
\* path does not read the pins (only merges do: getExpectedMutationVersion checks the quorum
\* part alone), and the mutated part gets the entry's new UUID. With mutations_respect_pins it is
\* held back while the part is pinned, as a merge is.
MutateSource(r) ==
    /\ r \in SourceReplicas
    /\ mutations < MaxMutations
    /\ st \in {States[i] : i \in Idx(MutateFrom)..Idx("SOURCE_DROP")}
    /\ Moving \in parts[r]
    /\ Fix("mutations_respect_pins") => Moving.uuid \notin pinK.src
    /\ log' = [log EXCEPT !.src = Append(@, [type |-> "MUTATE", part |-> Mutated])]
    /\ mutations' = mutations + 1
    /\ UNCHANGED <<st, rollback, issued, pinK, pinL, ptr, parts, detached, merges, kills, crashes, mig, migQueue, qry>>

-----------------------------------------------------------------------------
(* A selective source shard (seed 000 meeting seed 001): a migration of the moving part's
   partition from MigSource to MigTarget, at any point of the move. *)

\* One GET_PART per part of the moving data in `xs` (the moving part, or its mutation).
Gets(xs) == (IF Moving \in xs THEN <<[type |-> "GET", part |-> Moving]>> ELSE <<>>)
            \o (IF Mutated \in xs THEN <<[type |-> "GET", part |-> Mutated]>> ELSE <<>>)

\* The CLONE starts. rfc_fixed (the reference's replica_clone_fetch): a fetch of every part a
\* keeper registers, then the DROP_RANGEs of the partition a keeper has still to apply (in the log
\* above the slowest keeper's pointer), re-queued on the target after the fetches. pr_code
\* (startClone, write_clone_entries): the source's active parts, one GET_PART each in the shared
\* log, which every keeper of the partition processes.
MigCloneStart ==
    LET owners == SourceReplicas \ {MigTarget}
        registered == {x \in {Moving, Mutated} : \E r \in owners : x \in parts[r]}
        pendingDrops == {k \in 1..Len(log.src) : log.src[k].type = "DROP" /\ \E r \in owners : ptr[r] < k
                                                                        /\ ptr[MigTarget] >= k} IN
    /\ MigTarget # None /\ mig = "none"
    /\ mig' = "clone"
    /\ IF MigDesign = "rfc_fixed"
       THEN /\ migQueue' = Gets(registered) \o (IF pendingDrops # {} THEN <<[type |-> "DROP", part |-> Moving]>> ELSE <<>>)
            /\ UNCHANGED log
       ELSE /\ log' = [log EXCEPT !.src = @ \o Gets(parts[MigSource])]
            /\ UNCHANGED migQueue
    /\ UNCHANGED <<st, rollback, issued, pinK, pinL, ptr, parts, detached, merges, kills, mutations, crashes, qry>>

\* The target carries out the CLONE's own queue (rfc_fixed): a fetch from a replica that has the
\* part (none having it any more: given up, as Process's GET_PART), then the re-queued drops.
MigFetch ==
    LET e == Head(migQueue) IN
    /\ migQueue # <<>>
    /\ IF e.type = "GET"
       THEN parts' = [parts EXCEPT ![MigTarget] = IF Fetchable("src", e.part) THEN @ \cup {e.part} ELSE @]
       ELSE parts' = [parts EXCEPT ![MigTarget] = @ \ {e.part}]
    /\ migQueue' = Tail(migQueue)
    /\ mig' = IF Len(migQueue) = 1 THEN "done" ELSE mig
    /\ UNCHANGED <<st, rollback, issued, pinK, pinL, log, ptr, detached, merges, kills, mutations, crashes, qry>>

-----------------------------------------------------------------------------
(* A Distributed SELECT: one replica of each shard, each shard in a step of its own. *)

QueryStart(q) ==
    /\ qry[q].st = "idle"
    /\ qry' = [qry EXCEPT ![q].st = "running", ![q].started = st]
    /\ UNCHANGED <<st, rollback, issued, pinK, pinL, log, ptr, parts, detached, merges, kills, mutations, crashes, mig, migQueue>>

\* Replica r of shard s answers: its parts now, and (Dedup) the UUIDs among them in its local pin
\* set. A UUID another shard reported first: the initiator re-runs this shard's query without it,
\* once; a second conflict fails the query (DUPLICATED_PART_UUIDS).
QueryReadShard(q, s, r) ==
    LET Q == qry[q]
        read == parts[r]
        reported == IF Dedup THEN {x.uuid : x \in {y \in read : y.uuid \in pinL[r]}} ELSE {}
        conflict == reported \cap Q.reported
        kept == {x \in read : x.uuid \notin conflict}
        rows == UNION {x.rows : x \in kept}
        twice == (rows \cap Q.seen # {}) \/ \E x, y \in kept : x # y /\ x.rows \cap y.rows # {} IN
    /\ Q.st = "running"
    /\ Q.read[s] = None
    /\ r \in ReplicasOf(s)
    /\ IF conflict # {} /\ Q.resent
       THEN qry' = [qry EXCEPT ![q].st = "failed"]
       ELSE qry' = [qry EXCEPT ![q].read[s] = r, ![q].reported = @ \cup (reported \ conflict),
                               ![q].seen = @ \cup rows, ![q].dup = @ \/ twice,
                               ![q].resent = @ \/ conflict # {},
                               ![q].st = IF Q.read[IF s = "src" THEN "dst" ELSE "src"] # None THEN "done" ELSE @]
    /\ UNCHANGED <<st, rollback, issued, pinK, pinL, log, ptr, parts, detached, merges, kills, mutations, crashes, mig, migQueue>>

-----------------------------------------------------------------------------
Next ==
    \/ MovePart \/ Issue \/ Advance \/ Kill \/ RollbackStep \/ OrchestratorCrash
    \/ MigCloneStart \/ MigFetch
    \/ \E r \in Replicas : Process(r) \/ AssignMerge(r) \/ MutateSource(r)
    \/ \E q \in Queries : QueryStart(q) \/ \E s \in Shards, r \in Replicas : QueryReadShard(q, s, r)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
TypeOKInv ==
    /\ Orchestrator \in {"current", "v21_8"}
    /\ MigDesign \in {"rfc_fixed", "pr_code"}
    /\ MutateFrom \in {States[i] : i \in 1..Len(States)}
    /\ MigTarget # None => MigTarget \in SourceReplicas /\ MigSource \in SourceReplicas \ {MigTarget}
    /\ mig \in {"none", "clone", "done"}
    /\ Orchestrator = "v21_8" => MaxKills = 0
    /\ st \in {None, "CANCELLED"} \cup {States[i] : i \in 1..Len(States)}
    /\ \A q \in Queries : qry[q].st \in {"idle", "running", "done", "failed"}

\* R2: a done query returned every row (all are there before it starts).
QueryNoMissingInv == \A q \in Queries : qry[q].st = "done" => qry[q].seen = AllRows

\* R3: a done query returned no row twice.
QueryNoDuplicateInv == \A q \in Queries : qry[q].st = "done" => ~qry[q].dup

\* The move ended, every replica processed its shard's log and a migration its own queue.
Ended == st \in {"DONE", "CANCELLED"} /\ \A r \in Replicas : ptr[r] = Len(log[ShardOf(r)])
         /\ migQueue = <<>>

\* No row is lost: some replica of some shard holds each row in an active part.
NoRowLostInv == \A row \in AllRows : \E r \in Replicas : \E x \in parts[r] : row \in x.rows

\* Once the task ended, every replica processed its log and a migration its queue, each row is on
\* exactly one shard.
RowsOnOneShardInv ==
    Ended =>
        \A row \in AllRows : Cardinality({s \in Shards : \E r \in ReplicasOf(s) : \E x \in parts[r] : row \in x.rows}) = 1

\* The move is never wedged: until it ended and every replica processed its shard's log, some step
\* can still be taken (TLC's deadlock check, as a named invariant beside the others: a move stuck
\* waiting on an entry no replica can carry out keeps its part pinned, and so unmerged, for good).
MoveNotWedgedInv == Ended \/ ENABLED Next

\* Witnesses: the fixed model must reach them.
MoveDoneWitness == st = "DONE" /\ \A r \in Replicas : ptr[r] = Len(log[ShardOf(r)])
QueryDoneDuringMoveWitness == \E q \in Queries : qry[q].st = "done" /\ qry[q].started = "SYNC_SOURCE"
\* The migration's CLONE starts while the drop is under way, and (rfc_fixed) re-queues a drop.
MigrationDuringDropWitness == mig # "none" /\ st \in {"SOURCE_DROP", "SOURCE_DROP_POST_DELAY"}
RequeuedDropWitness == \E k \in 1..Len(migQueue) : migQueue[k].type = "DROP"
NoMigrationDuringDrop == ~MigrationDuringDropWitness
NoRequeuedDrop == ~RequeuedDropWitness
NoMoveDone == ~MoveDoneWitness
NoQueryDoneDuringMove == ~QueryDoneDuringMoveWitness
=============================================================================
