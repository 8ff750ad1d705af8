---------------------------- MODULE MCPR102244 ----------------------------
(* Small constants for the models of PR102244 (ClickHouse PR #102244's migration protocol). *)
EXTENDS PR102244

CONSTANTS r1, r2, r3

MCReplicas == {r1, r2, r3}
\* The small models: one partition, every block in it (no forwarding, no rebalancer).
OnePartition == {"p1"}
AllInP1(b) == "p1"
OnR1 == [p \in OnePartition |-> {r1}]
OnR1R2 == [p \in OnePartition |-> {r1, r2}]
\* The whole design (MCPR102244Whole*): p1 on r1 r2, p2 with no assignment node until its
\* first INSERT; blocks 1 and 2 into p1, block 3 into p2.
TwoPartitions == {"p1", "p2"}
P1OnR1R2P2New == [p \in TwoPartitions |-> IF p = "p1" THEN {r1, r2} ELSE {}]
Blocks12InP1Block3InP2(b) == IF b = 3 THEN "p2" ELSE "p1"
ThreeBlocks == {1, 2, 3}
ThreeMigrations == {1, 2, 3}
NoBlocks == {}
OneBlock == {1}
TwoBlocks == {1, 2}
OneMigration == {1}
TwoMigrations == {1, 2}
=============================================================================
