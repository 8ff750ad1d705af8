--------------------------- MODULE ParallelReplicas ---------------------------
(***************************************************************************)
(* Parallel replicas (seed 004) over the base protocol and selective       *)
(* replication of SelectiveReplication: one SELECT spread over replicas by *)
(* a coordinator, as ClickHouse's code does it, not as the seed's prose    *)
(* says (README.md here cites the files and commits read).                 *)
(*                                                                         *)
(* The replica that receives the query is the initiator and hosts the      *)
(* coordinator. It picks at most MaxParallelReplicas replicas of the       *)
(* cluster, itself always among them (parallel_replicas_local_plan:        *)
(* findLocalReplicaIndexAndUpdatePools), the others at random              *)
(* (getShuffledPools). Each one takes the storage snapshot of its own      *)
(* active parts when its read step is planned and announces them          *)
(* (InitialAllRangesAnnouncement: part infos and mark ranges, nothing      *)
(* version-like). One that cannot be reached is marked unavailable and   *)
(* skipped (markReplicaAsUnavailable). The coordinator hands out segments  *)
(* of the parts of its working set, each once, only to a replica that     *)
(* announced that very part; a replica reads its segments from the        *)
(* snapshot it announced, whose parts stay readable while it holds them    *)
(* even if the table has since dropped them.                               *)
(*                                                                         *)
(* What the working set is, is the constant Coordinator:                   *)
(*  - "snapshot_replica": ClickHouse master's DefaultCoordinator and       *)
(*    InOrderCoordinator. The first announcement is the whole working set  *)
(*    (initializeReadingState sets source_replica_for_parts_snapshot);     *)
(*    later ones only record which replicas see which of its parts         *)
(*    (part_visibility), and parts they alone have are never read. The     *)
(*    newest code pins the initiator as the snapshot replica; that is the  *)
(*    schedule where it announces first, so it is one of the behaviours.  *)
(*  - "union": the coordinator of 2023 (updateReadingState): every         *)
(*    announcement adds its parts, except one that covers or intersects a  *)
(*    part already known, which is skipped; reading ends once every        *)
(*    replica announced or was marked unavailable.                         *)
(*  - "partition_snapshot": the fix this module proposes for a selective   *)
(*    table. A replica announces, with its parts, the partitions it serves *)
(*    by its own map (it owns them: not as a CLONE target, not leaving);   *)
(*    the coordinator takes each partition's parts from the                *)
(*    first announcement that serves it, and fails the query when a        *)
(*    partition its map knows has no such announcement once every replica  *)
(*    announced or was skipped.                                            *)
(*                                                                         *)
(* A plain ReplicatedMergeTree table is the case where every replica owns  *)
(* every partition (RF = the number of replicas, no migration): there the  *)
(* first announcement holds the whole table but for replication lag, which *)
(* is ClickHouse's own guarantee and the baseline.                         *)
(*                                                                         *)
(* R2 and R3 are judged as QueryNoMissingInv and QueryNoDuplicateInv judge *)
(* a routed SELECT: a done query returned every block acknowledged before  *)
(* it started, except blocks a replica it took a partition's parts from    *)
(* was still receiving by replication when it announced (lag), and        *)
(* blocks a DROP PARTITION has removed since; and no block twice.          *)
(***************************************************************************)
EXTENDS SelectiveReplication

CONSTANTS
    PRQueries,            \* parallel-replicas query ids (the routed SELECTs are Queries)
    MaxParallelReplicas,  \* max_parallel_replicas: participants per query, the initiator included
    Coordinator           \* "snapshot_replica", "union" or "partition_snapshot" (above)

VARIABLES
    prq   \* query id -> [st, at, part, announced, skipped, live, ann, snap, from, work, read,
          \*              seen, dup, expected, excused, known, lost]

prVars == <<prq>>
allVars == <<vars, prVars>>

NoParts == [r \in Replicas |-> {}]

PRInit ==
    /\ Init
    /\ prq = [q \in PRQueries |->
                [st |-> "idle", at |-> None, part |-> {}, announced |-> {}, skipped |-> {}, live |-> {},
                 ann |-> NoParts, snap |-> None, from |-> [p \in Partitions |-> None], work |-> {},
                 read |-> {}, seen |-> {}, dup |-> FALSE, expected |-> {}, excused |-> {},
                 known |-> {}, lost |-> {}]]

PRRunning(q) == prq[q].st = "running"

\* The partitions r serves by its own map: those it owns. Not as a CLONE target (a partial copy),
\* nor as the replica leaving a partition: the map cannot tell a switched source (a whole copy)
\* from a cancelled target (a partial one), and the routed SELECT reads neither.
Serves(r) == {p \in Partitions : r \in cache[r][p].owners}

\* The acknowledged blocks expected by q in partitions P that r, a keeper of their partition, was
\* still receiving by replication: missing them from r's snapshot is lag.
LagAt(q, r, P) ==
    {i \in prq[q].expected : InsertPartition[i] \in P /\ r \in Keepers(asg[InsertPartition[i]]) /\ InFlightTo(r, i)}

\* Two parts of a partition that share a block, or one that covers the other (a merge, a mutation):
\* MergeTreePartInfo's "not disjoint".
Overlap(x, y) == x.p = y.p /\ x.b \cap y.b # {}

\* The initiator c starts q: itself and MaxParallelReplicas - 1 other replicas of the cluster (all
\* of them if it has no more), whether up or not: one that is down is marked unavailable when it
\* cannot be reached. (executeQueryWithParallelReplicas resizes the shuffled pools to
\* max_parallel_replicas, capped at the cluster's size.)
\* Blocks of a partition c's map does not know, whose entry c has not pulled, are excused as lag:
\* the routed SELECT's rule (ClientStartQuery), which the coordinator's map can only be as good as.
PRStart(q, c) ==
    /\ prq[q].st = "idle"
    /\ c \in active
    /\ \E S \in SUBSET Replicas :
        /\ c \in S
        /\ Cardinality(S) = IF MaxParallelReplicas < Cardinality(Replicas) THEN MaxParallelReplicas
                            ELSE Cardinality(Replicas)
        /\ prq' = [prq EXCEPT ![q] = [@ EXCEPT !.st = "running", !.at = c, !.part = S, !.expected = LiveAcked,
                     !.known = {p \in Partitions : cache[c][p].version # Absent},
                     !.excused = {i \in LiveAcked : cache[c][InsertPartition[i]].version = Absent /\ ptr[c] < FirstIdx(i)}]]
    /\ UNCHANGED vars

\* r plans its read: its snapshot is its active parts now (all of them: nothing on the read path
\* filters by assignment), and it announces them to the coordinator.
PRAnnounce(q, r) ==
    LET A == NoEmpty(parts[r])
        Q == prq[q]
        first == Q.snap = None
        \* partition_snapshot: the partitions this announcement is the first to serve
        takes == {p \in Serves(r) : Q.from[p] = None}
        work == CASE Coordinator = "snapshot_replica" -> IF first THEN A ELSE Q.work
                  [] Coordinator = "union" -> Q.work \cup {x \in A : \A y \in Q.work : x = y \/ ~Overlap(x, y)}
                  [] Coordinator = "partition_snapshot" -> Q.work \cup {x \in A : x.p \in takes}
        lag == CASE Coordinator = "snapshot_replica" -> IF first THEN LagAt(q, r, Partitions) ELSE {}
                 [] Coordinator = "union" -> LagAt(q, r, Partitions)
                 [] Coordinator = "partition_snapshot" -> LagAt(q, r, takes) IN
    /\ PRRunning(q)
    /\ r \in Q.part \ (Q.announced \cup Q.skipped)
    /\ r \in active
    /\ prq' = [prq EXCEPT ![q] = [@ EXCEPT !.announced = @ \cup {r}, !.live = @ \cup {r}, !.ann[r] = A,
                                           !.snap = IF first THEN r ELSE @, !.work = work,
                                           !.from = [p \in Partitions |-> IF p \in takes THEN r ELSE @[p]],
                                           !.excused = @ \cup lag]]
    /\ UNCHANGED vars

\* A participant that cannot be reached before it announced is skipped (markReplicaAsUnavailable).
PRSkip(q, r) ==
    /\ PRRunning(q)
    /\ r \in prq[q].part \ (prq[q].announced \cup prq[q].skipped)
    /\ r \notin active
    /\ prq' = [prq EXCEPT ![q].skipped = @ \cup {r}]
    /\ UNCHANGED vars

\* A replica that announced part x reads a segment of it from its snapshot. The coordinator hands
\* each segment out once, so a part is read once, by whichever replica that announced it asks.
PRRead(q, x, r) ==
    LET Q == prq[q] IN
    /\ PRRunning(q)
    /\ x \in Q.work \ Q.read
    /\ r \in Q.live /\ x \in Q.ann[r]
    /\ prq' = [prq EXCEPT ![q] = [@ EXCEPT !.read = @ \cup {x}, !.seen = @ \cup x.b,
                                           !.dup = @ \/ Twice(x.b \cup Q.seen) \/ (x.b \cap Q.seen # {})]]
    /\ UNCHANGED vars

\* Every announcement the coordinator waits for is in: the snapshot replica's alone (later ones add
\* nothing), or, in the others, every participant's or its being unavailable.
Announced(q) ==
    IF Coordinator = "snapshot_replica" THEN prq[q].snap # None
    ELSE prq[q].announced \cup prq[q].skipped = prq[q].part

\* partition_snapshot: a partition the coordinator's map knew at the start that no announcement served.
Unserved(q) == {p \in prq[q].known : prq[q].from[p] = None}

\* The working set is read: the initiator merges the answers and the client has its result.
PRFinish(q) ==
    LET Q == prq[q] IN
    /\ PRRunning(q)
    /\ Announced(q)
    /\ Q.work \subseteq Q.read
    /\ Coordinator = "partition_snapshot" => Unserved(q) = {}
    /\ prq' = [prq EXCEPT ![q] = [@ EXCEPT !.st = "done",
                 !.lost = {i \in Q.expected : Live(i) /\ i \notin Ids(Q.seen) /\ i \notin Q.excused}]]
    /\ UNCHANGED vars

\* The query fails (the client sees an error): a part of the working set that no replica still
\* connected announced ("Some segments were left unread"), or, partition_snapshot, a partition no
\* announcement served.
PRFail(q) ==
    LET Q == prq[q] IN
    /\ PRRunning(q)
    /\ \/ \E x \in Q.work \ Q.read : \A r \in Q.live : x \notin Q.ann[r]
       \/ Coordinator = "partition_snapshot" /\ Announced(q) /\ Unserved(q) # {}
    /\ prq' = [prq EXCEPT ![q].st = "failed"]
    /\ UNCHANGED vars

\* A step of the base protocol. A replica that goes down loses its connections: it reads nothing
\* more for a running query (its snapshot was in its memory), and a query it initiated fails.
Survive(q) ==
    IF PRRunning(q) /\ prq[q].at \notin active' THEN [prq[q] EXCEPT !.st = "failed"]
    ELSE [prq[q] EXCEPT !.live = @ \cap active']

PRNext ==
    \/ Next /\ prq' = [q \in PRQueries |-> Survive(q)]
    \/ \E q \in PRQueries :
        \/ PRFinish(q) \/ PRFail(q)
        \/ \E r \in Replicas : PRStart(q, r) \/ PRAnnounce(q, r) \/ PRSkip(q, r)
                               \/ \E x \in prq[q].work : PRRead(q, x, r)

PRSpec == PRInit /\ [][PRNext]_allVars

-----------------------------------------------------------------------------
PRTypeOKInv ==
    /\ TypeOKInv
    /\ Coordinator \in {"snapshot_replica", "union", "partition_snapshot"}
    /\ \A q \in PRQueries :
        /\ prq[q].st \in {"idle", "running", "done", "failed"}
        /\ prq[q].announced \cup prq[q].skipped \subseteq prq[q].part
        /\ prq[q].live \subseteq prq[q].announced
        /\ prq[q].read \subseteq prq[q].work

\* R2 for a parallel-replicas SELECT: a done query returned every block acknowledged before it
\* started, except the lag its announcements excuse and blocks dropped since.
PRQueryNoMissingInv == \A q \in PRQueries : prq[q].st = "done" => prq[q].lost = {}

\* R3 for a parallel-replicas SELECT: a done query returned no block twice.
PRQueryNoDuplicateInv == \A q \in PRQueries : prq[q].st = "done" => ~prq[q].dup

\* Witnesses (lab/mutation_spec.py's convention): the fixed model must reach them.
PRQueryDoneWitness == \E q \in PRQueries : prq[q].st = "done"
\* A query was answered that the target of a finished migration announced to.
PRQueryDoneAfterMigrationWitness ==
    \E q \in PRQueries : prq[q].st = "done" /\ \E p \in Partitions : mig[p].st = "done" /\ mig[p].dst \in prq[q].announced
=============================================================================
