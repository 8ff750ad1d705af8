---------------------------- MODULE MCAssignment ----------------------------
(* Small-constant wrapper for Assignment: 3 replicas, 2 partitions, RF 2. *)
EXTENDS Assignment, TLC

CONSTANTS r1, r2, r3, p1, p2

MCReplicas == {r1, r2, r3}
MCPartitions == {p1, p2}
ReplicaSymmetry == Permutations(MCReplicas)
=============================================================================
