"""The spec's actions, listed once: name, parameters (with the constant each ranges over in
Next), and the reference step that implements it. tests/conformance/test_transitions.py checks
this list against the TLA+ modules (same names, same arity, every action of Next listed) and
against the reference (every step exists, named as the action in snake_case where it is a
function of its own).

The Hypothesis state machines (conformance/machines.py) are generated from this list.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Transition:
    module: str                 # the TLA+ module (spec/<family>/{module}.tla)
    name: str                   # the action's name in the module
    params: tuple[str, ...]     # the constant each parameter ranges over in Next, in order
    reference: str              # "module:attribute" of the reference step
    note: str = ""              # when the step has another name, why

    @property
    def snake(self) -> str:
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.name).lower()

    def resolve(self):
        mod, _, attr = self.reference.partition(":")
        obj = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


R, P, I, Q, PQ = "Replicas", "Partitions", "Inserts", "Queries", "PRQueries"

TRANSITIONS = [
    # spec/assignment/Assignment.tla: the allocation race in detail.
    Transition("Assignment", "ReplicaChooseOwners", (R, P), "protocol.assignment:replica_choose_owners"),
    Transition("Assignment", "ReplicaCreateAssignment", (R,), "protocol.assignment:replica_create_assignment"),
    Transition("Assignment", "ReplicaAdoptAssignment", (R,), "protocol.assignment:replica_adopt_assignment"),
    Transition("Assignment", "ReplicaSessionExpire", (R,), "protocol.keeper.memory:MemoryEnsemble.expire",
               "Keeper's session expiry; the replica's in-memory allocation goes with it"),
    Transition("Assignment", "ReplicaRestart", (R,), "protocol.registration:register_replica",
               "a new session registers is_active again"),
    # spec/rfc/SelectiveReplication.tla: the whole protocol.
    Transition("SelectiveReplication", "ReplicaPullLog", (R,), "protocol.replica:Replica.replica_pull_log"),
    Transition("SelectiveReplication", "ReplicaExecuteEntry", (R,), "protocol.replica:Replica.replica_execute_entry"),
    Transition("SelectiveReplication", "ReplicaCrash", (R,), "protocol.crash:replica_crash"),
    Transition("SelectiveReplication", "ReplicaRestart", (R,), "protocol.restart:replica_restart"),
    Transition("SelectiveReplication", "ReplicaRefreshCache", (R, P), "protocol.replica:Replica.replica_refresh_cache"),
    Transition("SelectiveReplication", "ReplicaSelectMerge", (R, P), "protocol.replica:Replica.replica_select_merge"),
    Transition("SelectiveReplication", "ReplicaSelectMutation", (R, P),
               "protocol.replica:Replica.replica_select_mutation"),
    Transition("SelectiveReplication", "ClientSendInsert", (I, R), "protocol.insert:client_send_insert"),
    Transition("SelectiveReplication", "ReplicaAllocate", (R, I), "protocol.assignment:replica_allocate"),
    Transition("SelectiveReplication", "ReplicaForwardInsert", (R, I), "protocol.insert:replica_forward_insert"),
    Transition("SelectiveReplication", "ReplicaWriteInsert", (R, I), "protocol.replica:Replica.replica_write_insert"),
    Transition("SelectiveReplication", "ClientStartQuery", (Q, R), "protocol.query:client_start_query"),
    Transition("SelectiveReplication", "ClientReceiveAck", (I,), "protocol.insert:client_send_insert",
               "its answer 'ok'"),
    Transition("SelectiveReplication", "ClientTimeout", (I,), "protocol.insert:client_send_insert",
               "its answer 'unknown' (a try lost after its request went out: InsertOutcomeUnknown)"),
    Transition("SelectiveReplication", "ClientQueryFails", (Q,), "protocol.query:client_query_fails"),
    Transition("SelectiveReplication", "ReplicaReadPartition", (Q, P), "protocol.query:replica_read_partition"),
    Transition("SelectiveReplication", "ClientAlterMetadata", (), "protocol.replica:client_alter_metadata"),
    Transition("SelectiveReplication", "ClientMutate", (), "protocol.replica:client_mutate"),
    Transition("SelectiveReplication", "ClientDropPartition", (P,), "protocol.replica:client_drop_partition"),
    Transition("SelectiveReplication", "ReplicaCloneFetch", (P,), "protocol.migration:replica_clone_fetch"),
    Transition("SelectiveReplication", "CoordinatorSwitch", (P,), "protocol.migration:coordinator_switch"),
    Transition("SelectiveReplication", "ReplicaCleanup", (P,), "protocol.migration:replica_cleanup"),
    Transition("SelectiveReplication", "CoordinatorCancel", (P,), "protocol.migration:coordinator_cancel"),
    Transition("SelectiveReplication", "ReplicaTakeOverMigration", (P, R),
               "protocol.migration:replica_take_over_migration"),
    Transition("SelectiveReplication", "ReplicaCleanupForDownLeaver", (P, R),
               "protocol.migration:replica_cleanup_for_down_leaver",
               "after Cluster.down_timeout; the leaver drops the partition on restart (drop_foreign_partitions)"),
    Transition("SelectiveReplication", "AdminReassign", (P, R, R), "protocol.migration:admin_reassign"),
    Transition("SelectiveReplication", "AdminRebalance", (P, R, R), "protocol.rebalance:system_rebalance",
               "one planned move of SYSTEM REBALANCE"),
    Transition("SelectiveReplication", "RepairStart", (P, R, R), "protocol.repair:repair_start"),
    Transition("SelectiveReplication", "DropReplica", (R,), "protocol.repair:drop_replica",
               "ClickHouse's SYSTEM DROP REPLICA; Cluster.drop_replica also removes the replica's disk"),
    Transition("SelectiveReplication", "CleanupClearOldLogs", (), "protocol.cleanup_thread:cleanup_clear_old_logs"),
    Transition("SelectiveReplication", "CleanupClearOldBlocks", (I,), "protocol.cleanup_thread:cleanup_clear_old_blocks",
               "the spec lets any id beyond the window go; ClickHouse removes the oldest ones"),
    # spec/parallel_replicas/ParallelReplicas.tla: a SELECT with parallel replicas (its PR prefix is
    # the reference's pr_; a part of the working set, PRRead's second parameter, is no constant).
    Transition("ParallelReplicas", "PRStart", (PQ, R), "protocol.parallel_replicas:pr_start", "pr_"),
    Transition("ParallelReplicas", "PRAnnounce", (PQ, R), "protocol.parallel_replicas:pr_announce", "pr_"),
    Transition("ParallelReplicas", "PRSkip", (PQ, R), "protocol.parallel_replicas:pr_skip", "pr_"),
    Transition("ParallelReplicas", "PRRead", (PQ, "work", R), "protocol.parallel_replicas:pr_read", "pr_"),
    Transition("ParallelReplicas", "PRFinish", (PQ,), "protocol.parallel_replicas:pr_finish", "pr_"),
    Transition("ParallelReplicas", "PRFail", (PQ,), "protocol.parallel_replicas:pr_fail", "pr_"),
    # spec/part_moves/PartMoves.tla: ClickHouse's part moves between shards (protocol/part_moves/;
    # the orchestrator's steps are its methods, the replicas' and the query's theirs).
    Transition("PartMoves", "MovePart", (), "protocol.part_moves:move_part"),
    Transition("PartMoves", "Issue", (), "protocol.part_moves:Orchestrator.issue"),
    Transition("PartMoves", "Advance", (), "protocol.part_moves:Orchestrator.advance"),
    Transition("PartMoves", "Kill", (), "protocol.part_moves:Orchestrator.kill"),
    Transition("PartMoves", "RollbackStep", (), "protocol.part_moves:Orchestrator.rollback_step"),
    Transition("PartMoves", "OrchestratorCrash", (), "protocol.part_moves:Orchestrator.crash",
               "a method of the orchestrator: what its crash loses is its own"),
    Transition("PartMoves", "Process", (R,), "protocol.part_moves:ShardReplica.process"),
    Transition("PartMoves", "MigCloneStart", (), "protocol.migration:replica_clone_fetch",
               "a selective source shard's CLONE: the RFC's as fixed (rfc_fixed); pr_code is "
               "protocol.pr102244.migration's start_clone and write_clone_entries"),
    Transition("PartMoves", "MigFetch", (), "protocol.replica:Replica.replica_execute_entry",
               "the target carrying out a fetch (or a re-queued drop) the CLONE queued"),
    Transition("PartMoves", "AssignMerge", (R,), "protocol.part_moves:assign_merge"),
    Transition("PartMoves", "MutateSource", (R,), "protocol.part_moves:assign_mutation",
               "the source's MUTATE_PART assigned, as assign_merge assigns a merge"),
    Transition("PartMoves", "QueryStart", (Q,), "protocol.part_moves:DistributedQuery",
               "a query starts by being made, with the task's state then"),
    Transition("PartMoves", "QueryReadShard", (Q, "Shards", R), "protocol.part_moves:DistributedQuery.read_shard",
               "the query's own method"),
]


def of_module(module: str) -> list[Transition]:
    return [t for t in TRANSITIONS if t.module == module]
