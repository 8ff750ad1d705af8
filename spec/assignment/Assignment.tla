------------------------------ MODULE Assignment ------------------------------
(***************************************************************************)
(* Partition assignment on first INSERT (RFC "Partition assignment on      *)
(* INSERT", phase 1b).                                                     *)
(*                                                                         *)
(* Keeper's selective/assignments/{p} is a versioned register: version -1  *)
(* means the znode does not exist. is_active is an ephemeral node that a   *)
(* crash or session expiry removes. An allocation is two steps, as in the  *)
(* RFC: the replica that received the INSERT reads the active replicas and *)
(* their loads and chooses owners, then CAS-creates the znode; if the      *)
(* create finds the node (another allocator won) it adopts the winner's    *)
(* owners. Everything between the two steps may interleave.                *)
(***************************************************************************)
EXTENDS Integers, FiniteSets

CONSTANTS
    Replicas,     \* replica names (model values)
    Partitions,   \* partition ids
    RF,           \* replication_factor from selective/config
    Bugs          \* switches that turn on a known-wrong behaviour, shared with the reference

Bug(name) == name \in Bugs

VARIABLES
    active,       \* replicas whose is_active ephemeral node exists
    asg,          \* p -> [owners |-> SUBSET Replicas, version |-> -1..]: the assignment znode
    alloc,        \* r -> the allocation r is in the middle of
    inv_based_on, \* p -> the znode version the last writer of asg[p] had read (ghost)
    inv_routed    \* set of <<p, owners>> that completed allocations routed rows to (ghost)

vars == <<active, asg, alloc, inv_based_on, inv_routed>>

Absent == -1
Idle == [st |-> "idle", p |-> "none", owners |-> {}, read |-> Absent]

Assigned(p) == asg[p].version # Absent

\* Number of partitions currently assigned to r (the RFC's "count partitions").
Load(r) == Cardinality({p \in Partitions : Assigned(p) /\ r \in asg[p].owners})

\* Sets of k active replicas none of which is more loaded than an active replica left out.
LeastLoaded(k) ==
    {S \in SUBSET active :
        /\ Cardinality(S) = k
        /\ \A x \in S, y \in active \ S : Load(x) <= Load(y)}

Init ==
    /\ active = Replicas
    /\ asg = [p \in Partitions |-> [owners |-> {}, version |-> Absent]]
    /\ alloc = [r \in Replicas |-> Idle]
    /\ inv_based_on = [p \in Partitions |-> Absent - 1]
    /\ inv_routed = {}

-----------------------------------------------------------------------------
(* An INSERT reaches r for a partition with no assignment znode: r lists   *)
(* the active replicas, counts their partitions and picks the RF least     *)
(* loaded. With fewer than RF active replicas the fixed protocol refuses   *)
(* the INSERT (the client retries); the RFC as written ("pick the          *)
(* replication_factor least-loaded") would take all of them.               *)
ReplicaChooseOwners(r, p) ==
    /\ r \in active
    /\ alloc[r].st = "idle"
    /\ ~Assigned(p)
    /\ \/ /\ Cardinality(active) >= RF
          /\ \E S \in LeastLoaded(RF) :
                alloc' = [alloc EXCEPT ![r] = [st |-> "chosen", p |-> p, owners |-> S, read |-> asg[p].version]]
       \/ /\ Bug("allow_short_assignment")
          /\ Cardinality(active) < RF
          /\ alloc' = [alloc EXCEPT ![r] = [st |-> "chosen", p |-> p, owners |-> active, read |-> asg[p].version]]
    /\ UNCHANGED <<active, asg, inv_based_on, inv_routed>>

(* CAS-create succeeds: the znode did not exist (create fails otherwise).  *)
(* With the blind_write bug the replica sets the znode whatever it holds,  *)
(* as a plain write without the expected version would.                    *)
ReplicaCreateAssignment(r) ==
    LET p == alloc[r].p IN
    /\ r \in active
    /\ alloc[r].st = "chosen"
    /\ ~Assigned(p) \/ Bug("blind_write")
    /\ asg' = [asg EXCEPT ![p] = [owners |-> alloc[r].owners, version |-> @.version + 1]]
    /\ inv_based_on' = [inv_based_on EXCEPT ![p] = alloc[r].read]
    /\ alloc' = [alloc EXCEPT ![r] = Idle]
    /\ inv_routed' = inv_routed \cup {<<p, alloc[r].owners>>}
    /\ UNCHANGED active

(* CAS-create fails with ZNODEEXISTS: another allocator won; read its      *)
(* assignment and route the rows to the winner's owners.                   *)
ReplicaAdoptAssignment(r) ==
    LET p == alloc[r].p IN
    /\ r \in active
    /\ alloc[r].st = "chosen"
    /\ Assigned(p)
    /\ ~Bug("blind_write")
    /\ alloc' = [alloc EXCEPT ![r] = Idle]
    /\ inv_routed' = inv_routed \cup {<<p, asg[p].owners>>}
    /\ UNCHANGED <<active, asg, inv_based_on>>

(* Crash or session expiry: the ephemeral is_active node goes, and so does *)
(* the allocation the replica had in memory.                               *)
ReplicaSessionExpire(r) ==
    /\ r \in active
    /\ active' = active \ {r}
    /\ alloc' = [alloc EXCEPT ![r] = Idle]
    /\ UNCHANGED <<asg, inv_based_on, inv_routed>>

ReplicaRestart(r) ==
    /\ r \notin active
    /\ active' = active \cup {r}
    /\ UNCHANGED <<asg, alloc, inv_based_on, inv_routed>>

Next ==
    \/ \E r \in Replicas, p \in Partitions : ReplicaChooseOwners(r, p)
    \/ \E r \in Replicas :
        \/ ReplicaCreateAssignment(r)
        \/ ReplicaAdoptAssignment(r)
        \/ ReplicaSessionExpire(r)
        \/ ReplicaRestart(r)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
\* Every variable holds a value of its intended type.
TypeOKInv ==
    /\ active \subseteq Replicas
    /\ \A p \in Partitions : asg[p].owners \subseteq Replicas /\ asg[p].version \in Nat \cup {Absent}
    /\ \A r \in Replicas : alloc[r].st \in {"idle", "chosen"}

\* An assignment znode is only ever written by a CAS on the version its writer read.
AssignmentChangesOnlyByCASInv ==
    \A p \in Partitions : Assigned(p) => inv_based_on[p] = asg[p].version - 1

\* Every assignment names exactly replication_factor replicas.
ReplicationFactorInv ==
    \A p \in Partitions : Assigned(p) => Cardinality(asg[p].owners) = RF

\* Rows of every finished allocation went to the replicas the assignment names now.
RoutedToOwnersInv ==
    \A pr \in inv_routed : asg[pr[1]].owners = pr[2]

\* Deliberately false: some partition gets assigned (proves allocation is reachable).
NoPartitionEverAssignedFalseInv ==
    \A p \in Partitions : ~Assigned(p)
=============================================================================
