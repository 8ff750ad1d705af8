------------------------ MODULE MCSelectiveReplication ------------------------
(* Small-constant definitions for the models of SelectiveReplication. Each cfg picks   *)
(* its constants from here; SYMMETRY only where no constant names a particular replica. *)
EXTENDS SelectiveReplication, TLC

CONSTANTS r1, r2, r3, p1, p2

MCReplicas == {r1, r2, r3}
ReplicaSymmetry == Permutations(MCReplicas)
\* Models that start with p1 on r1 and r2 are symmetric in r1 and r2 only.
OwnerSymmetry == Permutations({r1, r2})

\* Filtered log: two inserts into a partition allocated on the first INSERT.
OnePartition == {p1}
TwoPartitions == {p1, p2}
TwoInsertsP1 == (1 :> p1 @@ 2 :> p1)
OneInsertP1 == (1 :> p1)
InsertsP1P2 == (1 :> p1 @@ 2 :> p2)
Unassigned1 == (p1 :> {})
Unassigned2 == (p1 :> {} @@ p2 :> {})
\* Migration: p1 already lives on r1 and r2; the CLONE target will be r3.
P1OnR1R2 == (p1 :> {r1, r2})
P1OnR1R2P2OnR1R2 == (p1 :> {r1, r2} @@ p2 :> {r1, r2})
\* Lost replica: r2 keeps both partitions, r1 and r3 one each; inserts 3 and 4 move the log on.
P1OnR1R2P2OnR2R3 == (p1 :> {r1, r2} @@ p2 :> {r2, r3})
LostInserts == (1 :> p1 @@ 2 :> p2 @@ 3 :> p1 @@ 4 :> p2)
\* Full protocol: block 1 of p1 already on r1 and r2; insert 2 into p1, insert 3 into p2 (unassigned).
FullInserts == (1 :> p1 @@ 2 :> p1 @@ 3 :> p2)
FullOwners == (p1 :> {r1, r2} @@ p2 :> {})
\* Placement: without declared domains every replica is its own (protocol/placement.py's
\* domain(r)), capacities equal; TwoZones puts r1 and r3 in az1, r2 alone in az2.
SelfDomains == [r \in MCReplicas |-> r]
UnitCapacity == [r \in MCReplicas |-> 1]
TwoZones == (r1 :> "az1" @@ r2 :> "az2" @@ r3 :> "az1")
R3TwiceTheDisk == (r1 :> 1 @@ r2 :> 1 @@ r3 :> 2)
NoQueries == {}
\* The base protocol of 18.16 (SelectiveReplication's BaseProtocol) and a quorum of RF replicas.
V18_16 == "18.16"
QuorumOfRF == RF
\* p1 on the two replicas that are not the first in the election order: under 18.16 none of its
\* owners is the leader while every replica is up.
P1OffTheLeader == (p1 :> (MCReplicas \ {ElectionOrder[1]}))
OneQuery == {"q1"}

\* The operator's side of SYSTEM DROP REPLICA, for the models that override OperatorDrops with it:
\* a replica is dropped only while every block on its disk has a copy on another replica that
\* stays. Dropping the only copy is the base protocol's bound (MCRepairUnreplicatedInsert, F20), not
\* a repair's doing; with it ruled out, what a model still loses after a drop is the protocol's.
DropKeepsACopy(r) == \A i \in Inserts : HasBlock(r, i) => \E o \in Replicas \ (gone \cup {r}) : HasBlock(o, i)

(***************************************************************************)
(* Witnesses: states the fixed protocol must reach on the models that name *)
(* them (lab/mutation_spec.py's WITNESSES). TLC checks safety, so a    *)
(* spec whose action never fires breaks no invariant: a guard negated into *)
(* "never" passes every model. The mutation run checks ~W as an invariant: *)
(* the unmutated model must violate it (W reached), and a mutant under     *)
(* which TLC finds no W state is killed by the witness. Each is a symmetric *)
(* predicate, so SYMMETRY does not hide a W state.                         *)
(***************************************************************************)
\* CLONE -> SWITCH -> CLEANUP ran to its end.
MigrationDoneWitness == \E p \in Partitions : mig[p].st = "done"
\* CLONE -> CANCEL -> CLEANUP of the target ran to its end.
MigrationCancelledWitness == \E p \in Partitions : mig[p].st = "cancelled"
\* Another replica took a migration over from its crashed coordinator.
TakeOverWitness == \E p \in Partitions : mig[p].st = "clone" /\ mig[p].src # None /\ mig[p].coord # mig[p].src
\* A migration whose leaver is down ended without it (ReplicaCleanupForDownLeaver).
DownLeaverEndedWitness ==
    \E p \in Partitions :
        \/ mig[p].st = "done" /\ mig[p].src \notin active
        \/ mig[p].st = "cancelled" /\ mig[p].dst \notin active
\* A query was answered.
QueryDoneWitness == \E q \in Queries : qry[q].st = "done"
\* A query was answered before any replica ever went down.
QueryDoneWithoutCrashWitness == aux_counts.crashes = 0 /\ \E q \in Queries : qry[q].st = "done"
\* A query failed: a replica it was routed to went down.
QueryFailedWitness == \E q \in Queries : qry[q].st = "failed"
\* An INSERT was acknowledged after a retry.
RetriedInsertAckedWitness == \E i \in Inserts \ InitBlocks : ins[i].st = "acked" /\ ins[i].tries > 1
\* A replica went down and came back (ReplicaRestart), none dropped for good.
RestartedWitness == aux_counts.crashes > 0 /\ gone = {} /\ active = Replicas
\* A replica was dropped for good and every partition is back to RF owners.
RepairedWitness == gone # {} /\ \A p \in Partitions : Assigned(p) => Cardinality(asg[p].owners) = RF
\* A query was answered while a partition was in CLONE.
QueryDuringCloneWitness ==
    \E q \in Queries : qry[q].st = "done" /\ \E p \in Partitions : mig[p].st = "clone"
\* A SWITCH happened while a query routed before it was still running.
QueryAcrossSwitchWitness ==
    \E q \in Queries : Running(q) /\ \E p \in qry[q].pending : mig[p].st = "switched" /\ qry[q].routes[p] = mig[p].src
\* Step witnesses (lab/mutation_spec.py checks [][~W]_vars): steps no state tells apart.
\* A receiver whose map is current and names other owners forwarded an INSERT to one of them
\* (ReplicaForwardInsert; ClientSendInsert moves only an INSERT that was not "sent").
ForwardStepWitness ==
    \E i \in Inserts \ InitBlocks :
        LET r == ins[i].at
            p == InsertPartition[i] IN
        /\ ins[i].st = "sent" /\ ins'[i].st = "sent" /\ ins'[i].at # r
        /\ r \in active /\ cache[r][p] = asg[p] /\ r \notin asg[p].owners
\* The client lost the ack of a write that went through (ClientTimeout after ReplicaWriteInsert).
AckLostStepWitness == \E i \in Inserts \ InitBlocks : ins[i].st = "written" /\ ins'[i].st = "unknown"
\* An INSERT sent during the model was acknowledged.
InsertAckedWitness == \E i \in Inserts \ InitBlocks : ins[i].st = "acked"
\* An INSERT was acknowledged while its partition was in CLONE.
InsertAckedDuringCloneWitness ==
    \E i \in Inserts \ InitBlocks : ins[i].st = "acked" /\ mig[InsertPartition[i]].st = "clone"
\* A MERGE_PARTS was executed: some replica holds a part of two blocks.
MergedWitness == \E r \in Replicas : \E x \in parts[r] : Cardinality(x.b) > 1
\* A MUTATE_PART was executed: some replica holds a mutated part.
MutationAppliedWitness == \E r \in Replicas : \E x \in parts[r] : x.mv > 0
\* A DROP_RANGE was written and every active replica pulled and executed the whole log.
DropExecutedWitness == aux_counts.drops > 0 /\ \A r \in active : ptr[r] = Len(log) /\ queue[r] = {}
\* The cleanup thread removed log entries.
LogTrimmedWitness == trimmed > 0
\* A migration was started (on MCFaultDomainsRebalance, by the rebalancer alone).
MigrationStartedWitness == \E p \in Partitions : mig[p].st # "none"
\* Every partition of the model migrated (the second one after the first, under a limit).
AllMigratedWitness == \A p \in Partitions : mig[p].st = "done"
\* As many migrations in flight as the limit allows.
MigrationLimitReachedWitness == Cardinality(MigrationsInFlight) = MaxConcurrentMigrations

(***************************************************************************)
(* ReductionView: the VIEW of the models gen_cfgs.py's VIEWS names. TLC    *)
(* tells states apart by this tuple instead of all variables. It is sound  *)
(* because two states with the same view satisfy the same invariants and   *)
(* the same guards, and their successors again have equal views: it only   *)
(* leaves out values that nothing reads any more. Per value left out:      *)
(*  - cache[r] of a replica that is down: every action that reads cache[r] *)
(*    requires r \in active, no invariant reads cache, and ReplicaRestart  *)
(*    overwrites the whole map (with asg, or NoAsg under                   *)
(*    serve_before_map_loaded) before r is active again.                   *)
(*  - ins[i].at unless ins[i].st = "sent": only ReplicaAllocate,           *)
(*    ReplicaForwardInsert and ReplicaWriteInsert read it, each with       *)
(*    st = "sent", and ClientSendInsert sets it anew. ins[i].tries once    *)
(*    st = "acked": no action takes an acknowledged insert again.          *)
(*  - qry[q].at: written by ClientStartQuery, read by nothing.             *)
(*  - qry[q].seen: read only by ReplicaReadPartition to set dup. A part's  *)
(*    blocks all belong to inserts of its own partition, and a query reads *)
(*    each partition once, so got \cap seen = {} and a pair of blocks of   *)
(*    one insert across got and seen cannot exist: dup' = dup \/ Twice(got)*)
(*    once Twice(seen) has already set dup.                                *)
(*  - qry[q].routes[p] and the inserts of qry[q].expected of a partition   *)
(*    that is no longer pending: routes and expected are read only for     *)
(*    pending partitions (ReplicaReadPartition, ClientQueryFails,          *)
(*    ReplicaCleanup's routedHere). routes, pending and expected of a query*)
(*    that is not running: read only while it runs (st, dup and lost stay: *)
(*    QueryNoMissingInv and QueryNoDuplicateInv read them).                *)
(*  - mig[p]'s coord, fetched and pos outside "clone": read only in it    *)
(*    (CLONE, SWITCH and its catch-up position, CANCEL, takeover,          *)
(*    CloneWaitsOnDown; SwitchTargetHoldsFetchedProp on a step from it);   *)
(*    StartMigration and RepairStart write them anew. src and dst are kept *)
(*    in every state: Leaver reads them in "switched"/"cancelling", and    *)
(*    MigrationOutcomeInv in "done" and "cancelled" too. Until 2026-11-30  *)
(*    the view kept pos after SWITCH (MCFullOnePartition's states grew by  *)
(*    two thirds with F23's pos) and left src and dst out once a migration *)
(*    ended, where that invariant reads them: two states of one view could *)
(*    then disagree on it, so a variant breaking it only there could have  *)
(*    passed. The first leaves states out, the second adds some back.      *)
(* Kept although derivable: inv_acked (= inserts whose st is "acked"),     *)
(* aux_counts (merges = MERGE entries in log, migrations = migrations      *)
(* started; crashes bounds ReplicaCrash and is not derivable): derivable   *)
(* values cannot split states. Kept as the invariants read them:           *)
(* inv_read_cleaned and everything else.                                   *)
(***************************************************************************)
ActiveCache == [r \in Replicas |-> IF r \in active THEN cache[r] ELSE <<>>]
InsView == [i \in Inserts |->
              CASE ins[i].st = "sent"  -> ins[i]
                [] ins[i].st = "acked" -> [st |-> "acked"]
                [] OTHER               -> [st |-> ins[i].st, tries |-> ins[i].tries]]
QryView == [q \in Queries |->
              IF Running(q)
              THEN [st |-> "running", pending |-> qry[q].pending,
                    routes |-> [p \in qry[q].pending |-> qry[q].routes[p]],
                    expected |-> {i \in qry[q].expected : InsertPartition[i] \in qry[q].pending},
                    dup |-> qry[q].dup, lost |-> qry[q].lost]
              ELSE [st |-> qry[q].st, dup |-> qry[q].dup, lost |-> qry[q].lost]]
MigView == [p \in Partitions |->
              IF mig[p].st = "clone" THEN mig[p] ELSE [st |-> mig[p].st, src |-> mig[p].src, dst |-> mig[p].dst]]
ReductionView ==
    <<active, asg, ActiveCache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, InsView, MigView,
      QryView, inv_acked, inv_read_cleaned, aux_counts, gone>>
=============================================================================
