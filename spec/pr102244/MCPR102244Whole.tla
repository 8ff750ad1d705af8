-------------------------- MODULE MCPR102244Whole --------------------------
(* Small constants for the models of PR102244Whole (ClickHouse PR #102244's whole design). *)
EXTENDS PR102244Whole

CONSTANTS r1, r2, r3

MCReplicas == {r1, r2, r3}
OneBlock == {1}
TwoBlocks == {1, 2}
ThreeBlocks == {1, 2, 3}
NoMigrations == {}
OneMigration == {1}
ThreeMigrations == {1, 2, 3}

\* One partition, every block in it: PR102244.tla's models.
OnePartition == {"p1"}
AllInP1(b) == "p1"
OnR1R2 == [p \in OnePartition |-> {r1, r2}]
P1New == [p \in OnePartition |-> {}]   \* no assignment node until the first INSERT

\* The whole design: p1 on r1 r2, p2 with no assignment node until its first INSERT;
\* blocks 1 and 2 into p1, block 3 into p2.
TwoPartitions == {"p1", "p2"}
P1OnR1R2P2New == [p \in TwoPartitions |-> IF p = "p1" THEN {r1, r2} ELSE {}]
Blocks12InP1Block3InP2(b) == IF b = 3 THEN "p2" ELSE "p1"
=============================================================================
