--------------------------- MODULE SwitchCatchUp ---------------------------
(***************************************************************************)
(* SWITCH's catch-up under an INSERT stream that never ends (issue 38).     *)
(*                                                                         *)
(* SelectiveReplication's CoordinatorSwitch waits for CaughtUp(dst, p):    *)
(* nothing of p in the target's queue, nor in the log beyond the target's  *)
(* log_pointer. Its models bound the inserts (Inserts is finite), so the   *)
(* stream of every behaviour ends, and MigrationsEndProp holds there. A    *)
(* partition that keeps receiving rows while it migrates is in none of     *)
(* them, and no model of the core module can hold a log that grows for     *)
(* ever. This module keeps of the core module only what CaughtUp reads,    *)
(* counted instead of listed: the entries of p in the log beyond the       *)
(* target's log_pointer and those in its queue, each split by whether it   *)
(* lies before or after a fixed log position. The rest of a migration (the *)
(* coordinator active, the target up, the maps) is taken as holding: none  *)
(* of it changes while the stream goes on, and the core module's models    *)
(* check it.                                                               *)
(*                                                                         *)
(* The entries of p come from INSERTs and merges of p alike (each a log    *)
(* entry the target must pull and execute); a window bounds how many are   *)
(* outstanding at once, the stream's only limit, so the state space is     *)
(* finite while the stream is not: Insert is always enabled again.         *)
(*                                                                         *)
(* CatchUp = "drain" is the guard SelectiveReplication had (CaughtUp).    *)
(* CatchUp = "fixed" is the fix it has now (F23): the CLONE's fetch fixes  *)
(* a log position (the log's length then: mig.pos) and SWITCH waits only   *)
(* for the entries of p up to it (CaughtUpTo). The source's CLEANUP then   *)
(* waits until an owner staying holds every part the source has           *)
(* (LeaverRedundant): a part it wrote after the position may be its alone. *)
(* Here that wait is the target's catch-up to the position SWITCH fixes,   *)
(* which implies it (the target is an owner that stays) and is as finite.  *)
(* Its safety is the core module's to check (MCMigrationWrites and its     *)
(* variant cleanup_without_catchup), this module only its liveness.        *)
(***************************************************************************)
EXTENDS Naturals

CONSTANTS
    Window,     \* the most entries of p outstanding at the target at once (pulled or not)
    CatchUp     \* "drain" (SelectiveReplication's CaughtUp) or "fixed" (catch-up to a fixed position)

VARIABLES
    logBefore,    \* entries of p beyond the target's log_pointer, before the fixed position
    logAfter,     \*   and after it (every one, while no position is fixed)
    queueBefore,  \* entries of p in the target's queue, before the fixed position
    queueAfter,   \*   and after it
    st            \* "clone" (fetched), "switching" (catch-up position fixed), "switched", "done"

vars == <<logBefore, logAfter, queueBefore, queueAfter, st>>

Outstanding == logBefore + logAfter + queueBefore + queueAfter
\* SelectiveReplication's CaughtUp(dst, p), in these counts.
CaughtUp == Outstanding = 0
\* Every entry of p up to the fixed position pulled and executed.
CaughtUpToPosition == logBefore = 0 /\ queueBefore = 0

TypeOKInv ==
    /\ {logBefore, logAfter, queueBefore, queueAfter} \subseteq 0..Window
    /\ Outstanding <= Window
    /\ st \in {"clone", "switching", "switched", "done"}

\* The CLONE's fetch is done, with a backlog of entries of p at the target, pulled or not.
Init ==
    /\ logBefore = 0 /\ queueBefore = 0
    /\ logAfter \in 0..Window /\ queueAfter \in 0..Window /\ logAfter + queueAfter <= Window
    /\ st = "clone"

\* A client's INSERT (or an owner's merge) of p commits a log entry: it lies after any fixed position.
Insert ==
    /\ Outstanding < Window
    /\ logAfter' = logAfter + 1
    /\ UNCHANGED <<logBefore, queueBefore, queueAfter, st>>

\* ReplicaPullLog by the target: the next entry in log order, so those before the position first.
PullLog ==
    \/ /\ logBefore > 0
       /\ logBefore' = logBefore - 1 /\ queueBefore' = queueBefore + 1
       /\ UNCHANGED <<logAfter, queueAfter, st>>
    \/ /\ logBefore = 0 /\ logAfter > 0
       /\ logAfter' = logAfter - 1 /\ queueAfter' = queueAfter + 1
       /\ UNCHANGED <<logBefore, queueBefore, st>>

\* ReplicaExecuteEntry by the target, of an entry before or after the position (the queue is a set).
ExecuteBefore ==
    /\ queueBefore > 0
    /\ queueBefore' = queueBefore - 1
    /\ UNCHANGED <<logBefore, logAfter, queueAfter, st>>
ExecuteAfter ==
    /\ queueAfter > 0
    /\ queueAfter' = queueAfter - 1
    /\ UNCHANGED <<logBefore, logAfter, queueBefore, st>>

\* Fix the log position now: every entry of p committed so far lies before it.
FixPosition(next) ==
    /\ logBefore' = logBefore + logAfter /\ logAfter' = 0
    /\ queueBefore' = queueBefore + queueAfter /\ queueAfter' = 0
    /\ st' = next

\* The fix: the coordinator fixes the catch-up position once the fetch is done.
StartSwitch ==
    /\ CatchUp = "fixed"
    /\ st = "clone"
    /\ FixPosition("switching")

\* CoordinatorSwitch. Fixed: SWITCH fixes the position CLEANUP will wait for.
Switch ==
    IF CatchUp = "drain"
    THEN /\ st = "clone" /\ CaughtUp
         /\ st' = "switched"
         /\ UNCHANGED <<logBefore, logAfter, queueBefore, queueAfter>>
    ELSE /\ st = "switching" /\ CaughtUpToPosition
         /\ FixPosition("switched")

\* ReplicaCleanup of the source (its map condition taken as met). Fixed: the target has executed
\* every entry of p up to SWITCH's position. SelectiveReplication's: nothing more to wait for, the
\* target was caught up at SWITCH.
Cleanup ==
    /\ st = "switched"
    /\ CatchUp = "drain" \/ CaughtUpToPosition
    /\ st' = "done"
    /\ UNCHANGED <<logBefore, logAfter, queueBefore, queueAfter>>

Next == Insert \/ PullLog \/ ExecuteBefore \/ ExecuteAfter \/ StartSwitch \/ Switch \/ Cleanup

\* The target's background work and the migration's steps are fair, SWITCH strongly: taken if it
\* is enabled again and again, not only if it stays enabled. Clients owe nothing: they may insert
\* for ever, or stop.
Fairness ==
    /\ WF_vars(PullLog) /\ WF_vars(ExecuteBefore) /\ WF_vars(ExecuteAfter)
    /\ WF_vars(StartSwitch) /\ SF_vars(Switch) /\ WF_vars(Cleanup)

Spec == Init /\ [][Next]_vars /\ Fairness

\* As SelectiveReplication's MigrationsEndProp, for the one migration here.
MigrationsEndProp == <>(st = "done")
=============================================================================
