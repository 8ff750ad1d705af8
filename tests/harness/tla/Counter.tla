---------------------------- MODULE Counter ----------------------------
(* Test model for the TLC runner: a counter, a per-replica flag and a log of records. *)
EXTENDS Naturals, Sequences
CONSTANTS Replicas, Max
VARIABLES x, flag, log
Init == x = 0 /\ flag = [r \in Replicas |-> FALSE] /\ log = <<>>
Inc == x < Max /\ x' = x + 1 /\ UNCHANGED <<flag, log>>
Raise(r) ==
    /\ ~flag[r]
    /\ flag' = [flag EXCEPT ![r] = TRUE]
    /\ log' = Append(log, [who |-> r, at |-> x, note |-> "say \"hi\""])
    /\ UNCHANGED x
Done == x = Max /\ UNCHANGED <<x, flag, log>>
Next == Inc \/ (\E r \in Replicas : Raise(r)) \/ Done
NoDoneNext == Inc \/ (\E r \in Replicas : Raise(r))
TypeOKInv == x \in 0..Max
XBelowTwoInv == x < 2
RaisedAtMostOnceInv == \A r \in Replicas : Len(SelectSeq(log, LAMBDA e : e.who = r)) <= 1
BothRaisedFalseInv == ~(\A r \in Replicas : flag[r])
=============================================================================
