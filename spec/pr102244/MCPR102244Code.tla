--------------------------- MODULE MCPR102244Code ---------------------------
(* Small constants for the models of PR102244Code (PR #102244's migration protocol as its C++ is). *)
EXTENDS PR102244Code

CONSTANTS r1, r2, r3

MCReplicas == {r1, r2, r3}
OnR1 == {r1}
OnR1R2 == {r1, r2}
NoOwners == {}
DriverR1 == {r1}
DriversR1R2 == {r1, r2}
OneBlock == {1}
TwoBlocks == {1, 2}
NoPatch == {}
PatchIs2 == {2}
OneMigration == {1}
TwoMigrations == {1, 2}
=============================================================================
