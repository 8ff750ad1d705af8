------------------------- MODULE MCParallelReplicas -------------------------
(* Small-constant definitions for the models of ParallelReplicas: those of          *)
(* MCSelectiveReplication (replicas r1-r3, partitions p1, p2, the witnesses), and    *)
(* the tables this family adds.                                                       *)
EXTENDS ParallelReplicas, MCSelectiveReplication

\* A plain ReplicatedMergeTree table: every replica holds every partition.
P1OnAll == (p1 :> {r1, r2, r3})
OnePRQuery == {"pq1"}

\* The witnesses negated, as invariants: a fixed model must violate them (it reaches the state),
\* or its holding says nothing (tests/spec/test_parallel_replicas.py).
NoPRQueryDone == ~PRQueryDoneWitness
NoPRQueryDoneAfterMigration == ~PRQueryDoneAfterMigrationWitness
=============================================================================
