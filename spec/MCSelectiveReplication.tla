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
NoQueries == {}
OneQuery == {"q1"}
=============================================================================
