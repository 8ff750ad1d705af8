---------------------------- MODULE MCPR102244 ----------------------------
(* Small constants for the models of PR102244 (ClickHouse PR #102244's migration protocol). *)
EXTENDS PR102244

CONSTANTS r1, r2, r3

MCReplicas == {r1, r2, r3}
OnR1 == {r1}
OnR1R2 == {r1, r2}
NoBlocks == {}
OneBlock == {1}
TwoBlocks == {1, 2}
OneMigration == {1}
TwoMigrations == {1, 2}
=============================================================================
