"""Write the MC*.cfg files of SelectiveReplication from one table, so that models differ
only where the table says. `python spec/rfc/gen_cfgs.py` rewrites them; `--check` exits 1 when a
committed cfg differs from what the table gives (a test runs it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).parent
BASE = dict(Partitions="OnePartition", RF="2", InsertPartition="OneInsertP1", InitOwners="Unassigned1", InitBlocks="{}",
            Queries="NoQueries", MaxTries="1", MaxMerges="0", MaxAlters="0", MaxMutations="0", MaxDrops="0", MaxMigrations="0",
            MaxConcurrentMigrations="1", MaxCrashes="0", MaxReplicaDrops="0", BlockDuringClone="FALSE", MinLogsToKeep="100",
            MaxLogsToKeep="100", DedupWindow="100", Domain="SelfDomains", Capacity="UnitCapacity", Bugs="")
# defined in MCSelectiveReplication
# defined in SelectiveReplication with a default, replaced only where a model says so (`<-`):
# OperatorDrops, the base protocol's version (BaseProtocol) and insert_quorum (InsertQuorum)
SUBSTITUTED = {"Partitions", "InsertPartition", "InitOwners", "Queries", "Domain", "Capacity", "OperatorDrops",
               "BaseProtocol", "InsertQuorum"}
SAFETY = ["TypeOKInv", "ReplicationFactorInv", "AckedCommittedInv", "NoAckedBlockLostInv", "OwnersCompleteInv",
          "NoDuplicateRowsInv", "GlobalEntriesAppliedInv", "NoForeignPartsInv", "QueryNoMissingInv", "QueryNoDuplicateInv",
          "CleanupSafeInv", "MigrationLimitInv", "MutationsAppliedInv",
          "DropsAppliedInv", "DomainAntiAffinityInv", "MigrationOutcomeInv"]
# Action properties every safety model checks: no pointer, and no trimming, moves backwards, and
# a lost replica moves its pointer only by cloning (it pulls no entry the cleanup thread removed).
ACTION_PROPERTIES = ["LogPointerMonotonicProp", "TrimmedMonotonicProp", "LostReplicaClonesProp",
                     "SwitchTargetHoldsFetchedProp"]
# And every model that may drop a replica for good (MaxReplicaDrops > 0): how many owners a
# partition has, RF less its dropped owners not yet repaired (RepairOutcomeProp: a step property,
# since no variable says which partitions a dropped replica owned). Elsewhere no replica is ever
# dropped and ReplicationFactorInv already says owners = RF.
REPAIR_PROPERTIES = ["RepairOutcomeProp"]


def drops_replicas(consts: dict) -> bool:
    return consts.get("MaxReplicaDrops", "0") != "0"
# Models TLC tells states apart in by MCSelectiveReplication's ReductionView (its comment argues
# why that is sound): the full model, whose state space is the largest, and the three fixed models
# that took most of make check's check-spec (MCMigration 371,102 distinct states without it,
# 63,305 with it; BENCHMARKS.md "fewer states"). Broken variants keep every variable unless their
# state space needs the view: a finding shown without it rests on no argument.
# Models that leave invariants out, so that TLC, which stops at the first violation, reaches a later
# one: MCDropRetryQuery leaves out NoDuplicateRowsInv (MCDropRetry's, 2 steps shorter) to show that
# a query observes the duplicate (QueryNoDuplicateInv).
# The variants with switch_without_catchup leave out SwitchTargetHoldsFetchedProp (the SWITCH step
# finding the target short, one step before the loss) to show the loss itself: NoAckedBlockLostInv.
WITHOUT = {"MCDropRetryQuery": {"NoDuplicateRowsInv"},
           "MCMigration_switch_without_catchup": {"SwitchTargetHoldsFetchedProp"},
           "MCFullOnePartition_switch_without_catchup": {"SwitchTargetHoldsFetchedProp"}}
VIEWS = {name: "ReductionView" for name in ("MCFull", "MCFull_serve_before_map_loaded", "MCFullOnePartition",
                                            "MCFullOnePartition_insert_without_assignment_check",
                                            "MCFullOnePartition_switch_without_catchup",
                                            "MCMigration", "MCMigrationCrash", "MCRepairCancel")}

# name -> (what the model is for, constants that differ from BASE, symmetry: True for all
# replicas, False for the migration models, whose initial owners r1, r2 are symmetric only
# between themselves)
FILTERED_LOG = dict(InsertPartition="TwoInsertsP1", MaxMerges="1")
RETRY = dict(MaxTries="2")
GLOBAL = dict(MaxAlters="1")
MIGRATION = dict(InitOwners="P1OnR1R2", MaxMigrations="1", Queries="OneQuery")
MIGRATION_WRITES = dict(InitOwners="P1OnR1R2", MaxMigrations="1")  # no query: data-placement races only
CRASH = dict(MIGRATION_WRITES, MaxCrashes="1")
# Two parts of p1 already on r1 and r2, a merge and a migration; no new inserts.
MERGE_DURING_CLONE = dict(MIGRATION_WRITES, InsertPartition="TwoInsertsP1", InitBlocks="{1, 2}", MaxMerges="1")
# p1 and p2 with one block each on r1 and r2, both moving to r3 at once.
# One part of p1 on r1 and r2, a mutation and a migration to r3.
MUTATION_DURING_CLONE = dict(MIGRATION_WRITES, InsertPartition="OneInsertP1", InitBlocks="{1}", MaxMutations="1")
DROP_DURING_CLONE = dict(MUTATION_DURING_CLONE, MaxMutations="0", MaxDrops="1")
# Two inserts and a DROP PARTITION racing them, no migration.
DROP = dict(InsertPartition="TwoInsertsP1", InitOwners="P1OnR1R2", MaxDrops="1")
PARALLEL = dict(Partitions="TwoPartitions", InitOwners="P1OnR1R2P2OnR1R2", MaxMigrations="2",
                MaxConcurrentMigrations="2", InsertPartition="InsertsP1P2", InitBlocks="{1, 2}")

MODELS: dict[str, tuple[str, dict, bool]] = {
    "MCFilteredLog": ("Filtered log, fixed: allocation on first INSERT, stale maps, two inserts, a merge.",
                      FILTERED_LOG, True),
    "MCFilteredLog_filter_with_stale_cache": (
        "RFC as written: pullLogsToQueue filters with the cached map even when the entry is newer.",
        dict(Bugs='"filter_with_stale_cache"'), True),
    "MCRetry": ("A retried INSERT whose first outcome the client could not know, fixed.", RETRY, True),
    "MCRetry_no_dedup": ("Broken variant no_dedup: the retried block is written again.",
                         dict(RETRY, Bugs='"no_dedup"'), True),
    "MCGlobalEntries": ("ALTER_METADATA beside partition-scoped entries, fixed.", GLOBAL, True),
    "MCGlobalEntries_filter_skips_global": (
        "Broken variant filter_skips_global: the filter treats global entries as partition-scoped.",
        dict(GLOBAL, Bugs='"filter_skips_global"'), True),
    "MCMigration": ("CLONE -> SWITCH -> CLEANUP of p1 from r1 or r2 to r3 with a concurrent query and insert, fixed.",
                    MIGRATION, False),
    "MCMigration_switch_without_catchup": ("Broken variant: SWITCH without waiting for the target to catch up.",
                                           dict(MIGRATION, Bugs='"switch_without_catchup"'), False),
    "MCMigration_cleanup_no_delay": ("Broken variant: CLEANUP right after SWITCH.",
                                     dict(MIGRATION, Bugs='"cleanup_no_delay"'), False),
    "MCMigration_route_to_clone_target": (
        "RFC as written: the CLONE target is listed as an owner, so a SELECT may read it before SWITCH.",
        dict(MIGRATION, Bugs='"route_to_clone_target"'), False),
    "MCMigration_source_stops_at_switch": (
        "RFC as written: SWITCH drops the source, which stops replicating while stale maps still route SELECTs to it.",
        dict(MIGRATION, Bugs='"source_stops_at_switch"'), False),
    "MCMigration_cancel_drops_target_at_once": (
        "Naive rollback: CANCEL drops the target's copy at once, while its stale map still keeps the partition.",
        dict(MIGRATION, Bugs='"cancel_drops_target_at_once"'), False),
    "MCMigrationWrites": ("An insert racing a migration: stale maps of writer, source and target, fixed.",
                          MIGRATION_WRITES, False),
    "MCMigrationWrites_cleanup_without_catchup": (
        "Broken variant (F23's fix half left out): SWITCH catches up to the position the fetch fixed, CLEANUP does not "
        "wait for an owner to have what the source wrote after it.",
        dict(MIGRATION_WRITES, Bugs='"cleanup_without_catchup"'), False),
    "MCMigrationWrites_clone_from_source_only": (
        "RFC as written: CLONE fetches only the source's parts; parts the source has not fetched yet are missed.",
        dict(MIGRATION_WRITES, Bugs='"clone_from_source_only"'), False),
    "MCMigrationWrites_insert_without_assignment_check": (
        "RFC as written: a replica writes locally when its map says it owns the partition, even after SWITCH, and "
        "CLEANUP does not wait for an owner to have it (the RFC has neither check; F23's wait alone keeps the block).",
        dict(MIGRATION_WRITES, Bugs='"insert_without_assignment_check", "cleanup_without_catchup"'), False),
    "MCMigrationCrash": ("A replica crash anywhere in a migration, the coordinator's included, and takeover, fixed.",
                         CRASH, False),
    "MCMergeDuringClone": ("Merges of the partition in CLONE applied on source and target alike (RFC open question).",
                           MERGE_DURING_CLONE, False),
    "MCMergeBlockedDuringClone": ("Merges of the partition blocked while it is in CLONE (RFC open question).",
                                  dict(MERGE_DURING_CLONE, BlockDuringClone="TRUE"), False),
    "MCMutationDuringClone": ("A mutation of the partition in CLONE applied on source and target alike, fixed.",
                              MUTATION_DURING_CLONE, False),
    "MCMutationBlockedDuringClone": ("Mutations of the partition blocked while it is in CLONE, fixed.",
                                     dict(MUTATION_DURING_CLONE, BlockDuringClone="TRUE"), False),
    "MCMutationDuringClone_clone_ignores_skipped_entries": (
        "RFC as written: the target never revisits the mutations it skipped before it became a keeper.",
        dict(MUTATION_DURING_CLONE, Bugs='"clone_ignores_skipped_entries"'), False),
    "MCMutationBlockedDuringClone_clone_ignores_skipped_entries": (
        "RFC as written, with mutations blocked during CLONE: blocking does not help.",
        dict(MUTATION_DURING_CLONE, BlockDuringClone="TRUE", Bugs='"clone_ignores_skipped_entries"'), False),
    "MCDrop": ("DROP PARTITION racing two inserts: dropped rows stay dropped, later rows stay, fixed.", DROP, False),
    "MCDropDuringClone": ("A DROP_RANGE of the partition in CLONE, fixed.", DROP_DURING_CLONE, False),
    "MCDropDuringClone_clone_ignores_skipped_entries": (
        "RFC as written: a DROP_RANGE the target skipped before CLONE never reaches it; dropped rows come back.",
        dict(DROP_DURING_CLONE, Bugs='"clone_ignores_skipped_entries"'), False),
    "MCParallelMigration": ("Two partitions migrating at once from the same sources to the same target, limit 2.",
                            PARALLEL, False),
}

# Two partitions to move and room for one migration at a time: MaxConcurrentMigrations binds
# (in MCParallelMigration it never does), so a StartMigration that ignored it breaks MigrationLimitInv.
MODELS["MCMigrationLimit"] = (
    "Two partitions to move from r1, r2 to r3, one migration at a time: the second waits for the first.",
    dict(PARALLEL, MaxConcurrentMigrations="1"), False)
# The cleanup thread trims the log as soon as every replica not lost has pulled an entry.
TRIMMED = dict(MinLogsToKeep="0")
MODELS["MCMutationTrimmedLog"] = (
    "F8 with the log trimmed: the target re-queues what keepers have still to apply, from their queues, fixed.",
    dict(MUTATION_DURING_CLONE, **TRIMMED), False)
MODELS["MCMutationTrimmedLog_clone_reads_skipped_entries_from_log"] = (
    "F8's first fix: the target re-reads the skipped entries from the log, which the cleanup thread trimmed.",
    dict(MUTATION_DURING_CLONE, **TRIMMED, Bugs='"clone_reads_skipped_entries_from_log"'), False)
MODELS["MCDropTrimmedLog"] = ("As MCMutationTrimmedLog, for a DROP_RANGE, fixed.", dict(DROP_DURING_CLONE, **TRIMMED), False)
MODELS["MCDropTrimmedLog_clone_reads_skipped_entries_from_log"] = (
    "F8's first fix for a DROP_RANGE the cleanup thread trimmed: dropped rows come back.",
    dict(DROP_DURING_CLONE, **TRIMMED, Bugs='"clone_reads_skipped_entries_from_log"'), False)
# p1 on r1, r2 and p2 on r2, r3, one block each; r2 goes down, an INSERT into p1 moves the log on,
# the cleanup thread trims it and marks r2 lost; r2 comes back and clones.
LOST = dict(Partitions="TwoPartitions", InitOwners="P1OnR1R2P2OnR2R3", InsertPartition="LostInserts",
            InitBlocks="{1, 2}", MaxCrashes="1", MinLogsToKeep="0", MaxLogsToKeep="1")
MODELS["MCLostReplica"] = ("A replica lost while down clones each partition it keeps from one of its keepers, fixed.",
                           LOST, None)
MODELS["MCLostReplica_clone_keeps_only_what_the_source_has"] = (
    "A source per partition, but a local part is kept only if the source has it or a GET_PART for it queued.",
    dict(LOST, Bugs='"clone_keeps_only_what_the_source_has"'), None)
MODELS["MCLostReplica_clone_lost_replica_from_one_peer"] = (
    "ClickHouse's cloneReplica as is: one source, which does not hold every partition the lost replica keeps.",
    dict(LOST, Bugs='"clone_lost_replica_from_one_peer"'), None)
# A replica lost while a CLONE of a partition it owns is in flight (F33): p1 on r1 and r2, r1 down
# while an INSERT moves the log on and the cleanup thread (keeping no entry) marks it lost, a REASSIGN
# from r2 to r3, r1 back. The fixed clone takes p1 from an owner; the variant may take it from the
# CLONE target, which holds nothing yet.
LOST_MIGRATION = dict(InitOwners="P1OnR1R2", InsertPartition="TwoInsertsP1", InitBlocks="{1}", MaxCrashes="1",
                      MinLogsToKeep="0", MaxLogsToKeep="0", MaxMigrations="1", Queries="NoQueries")
MODELS["MCLostReplicaMigration"] = (
    "A replica lost while a CLONE of a partition it owns is in flight clones the partition from an owner, fixed.",
    LOST_MIGRATION, False)
MODELS["MCLostReplicaMigration_clone_lost_replica_from_any_keeper"] = (
    "F33: the lost replica may clone a partition from any keeper, a CLONE target that has fetched nothing among them: "
    "it drops its own parts and queues nothing.",
    dict(LOST_MIGRATION, Bugs='"clone_lost_replica_from_any_keeper"'), False)
# A retry after blocks/ has forgotten the first try's hash: the base protocol's bound on dedup.
MODELS["MCRetryBeyondDedupWindow"] = ("A retried INSERT whose hash the dedup window dropped is written twice.",
                                      dict(RETRY, DedupWindow="0"), True)

# Placement beyond the RFC (protocol/placement.py): r1 and r3 share fault domain az1, r2 is
# alone in az2. No SYMMETRY: the domains tell r2 from r1 and r3, the initial owners r1 from r3.
# REBALANCE: p1 and p2 on r1 and r2 (load 2, 2, 0): a move to r3 may leave r1, never r2.
FAULT_DOMAINS_REBALANCE = dict(PARALLEL, MaxMigrations="1", MaxConcurrentMigrations="1", Domain="TwoZones")
# Allocation: p1 on r1 and r2, the first INSERT into p2 allocates it: to r3, the least filled (r3
# has twice the disk: fills are partitions per unit of capacity), and r2, the only replica of az2.
FAULT_DOMAINS_ALLOCATION = dict(Partitions="TwoPartitions", InitOwners="FullOwners",
                                InsertPartition="InsertsP1P2", InitBlocks="{1}", Domain="TwoZones",
                                Capacity="R3TwiceTheDisk")
MODELS["MCFaultDomainsRebalance"] = (
    "REBALANCE and REASSIGN never put two owners of a partition in one fault domain.", FAULT_DOMAINS_REBALANCE, None)
MODELS["MCFaultDomainsRebalance_ignore_fault_domains"] = (
    "Broken variant: REBALANCE counts every replica as its own domain and moves p from r2 to r3, next to r1.",
    dict(FAULT_DOMAINS_REBALANCE, Bugs='"ignore_fault_domains"'), None)
MODELS["MCFaultDomainsAllocation"] = (
    "Allocation on first INSERT picks the least filled replicas per capacity in distinct fault domains.",
    FAULT_DOMAINS_ALLOCATION, None)
MODELS["MCFaultDomainsAllocation_ignore_fault_domains"] = (
    "Broken variant: allocation counts every replica as its own domain and picks r1 and r3, both in az1.",
    dict(FAULT_DOMAINS_ALLOCATION, Bugs='"ignore_fault_domains"'), None)

# p1 with one block on r1 and r2, a crash and restart, and a query.
RESTART = dict(InitOwners="P1OnR1R2", InitBlocks="{1}", Queries="OneQuery", MaxCrashes="1")
MODELS["MCRestartQuery"] = ("A replica crashes and restarts while a query may start on it, fixed.", RESTART, False)
# A query over two partitions (each read in its own step), one block each on r1 and r2, and a
# crash: the only small model where a query has a partition left to read after another, so a
# read of a partition twice (R3) or a routing that skips one (R2) has a place to show.
MODELS["MCQueryTwoPartitions"] = (
    "A query over two partitions, read one after the other, racing a crash and restart, fixed.",
    dict(RESTART, Partitions="TwoPartitions", InitOwners="P1OnR1R2P2OnR1R2", InsertPartition="InsertsP1P2",
         InitBlocks="{1, 2}"), False)
# RESTART with a migration: its leaver (source after SWITCH, target after CANCEL) may crash and
# stay down; an active replica ends the migration for it and it drops the partition on restart.
DOWN_LEAVER = dict(RESTART, MaxMigrations="1")
MODELS["MCDownLeaver"] = (
    "A migration whose leaver is down ends without it; the leaver drops the partition when it comes back, fixed.",
    DOWN_LEAVER, False)
MODELS["MCDownLeaver_down_leaver_cleanup_ignores_maps"] = (
    "Broken variant: the end is recorded while a stale map still routes SELECTs to the leaver, which drops on restart.",
    dict(DOWN_LEAVER, Bugs='"down_leaver_cleanup_ignores_maps"'), False)
MODELS["MCDownLeaver_restart_keeps_foreign_parts"] = (
    "Broken variant: the leaver comes back and keeps the partition it no longer keeps.",
    dict(DOWN_LEAVER, Bugs='"restart_keeps_foreign_parts"'), False)
MODELS["MCRestartQuery_serve_before_map_loaded"] = (
    "RFC as written: a restarted replica serves SELECTs before its asynchronous map has loaded.",
    dict(RESTART, Bugs='"serve_before_map_loaded"'), False)

# The full protocol at once: too big to exhaust on 2 cores, so `large` (see models.json).
FULL = dict(Partitions="TwoPartitions", InsertPartition="FullInserts", InitOwners="FullOwners", InitBlocks="{1}",
            Queries="OneQuery", MaxTries="2", MaxMerges="1", MaxMigrations="1", MaxCrashes="1")
MODELS["MCFull"] = ("Full protocol: 3 replicas, 2 partitions, RF 2, an allocation, a retried insert, a merge, "
                    "a migration, a concurrent query and a crash, fixed.", FULL, False)
MODELS["MCFull_serve_before_map_loaded"] = (
    "F9 in the full protocol: a bounded simulation must find it too.", dict(FULL, Bugs='"serve_before_map_loaded"'), False)
# MCFull without its query, retry and crash, on one partition allocated by the first of two
# inserts (allocation, forwarding, a merge and a migration racing the inserts and every stale
# map): exhausted in about 22 min on 2 cores (10.9M distinct states, depth 34; models.json), its
# broken variants in under a minute each. No replica is special at the start, so SYMMETRY over
# all three holds.
FULL_ONE_PARTITION = dict(InsertPartition="TwoInsertsP1", MaxMerges="1", MaxMigrations="1")
MODELS["MCFullOnePartition"] = (
    "The full model on one partition (allocation, forwarding, stale maps, a merge, a migration or its cancel, "
    "two inserts racing them), fixed, exhaustively.", FULL_ONE_PARTITION, True)
MODELS["MCFullOnePartition_insert_without_assignment_check"] = (
    "F4 in the full model on one partition, exhaustively (with cleanup_without_catchup: the RFC has neither check).",
    dict(FULL_ONE_PARTITION, Bugs='"insert_without_assignment_check", "cleanup_without_catchup"'), True)
MODELS["MCFullOnePartition_switch_without_catchup"] = (
    "Broken variant switch_without_catchup in the full model on one partition, exhaustively.",
    dict(FULL_ONE_PARTITION, Bugs='"switch_without_catchup"'), True)

# Permanent loss and repair (issue 18; beyond the RFC, FINDINGS F20): p1 with one block on r1
# and r2; a replica crashes and an operator drops it for good (SYSTEM DROP REPLICA); the repair
# CLONEs p1 to the third replica and SWITCHes it in, with a query racing all of it. No INSERT:
# an acknowledged block on one replica only is lost with it for good (the base protocol's bound
# without insert_quorum), which MCRepairUnreplicatedInsert shows.
REPAIR = dict(InitOwners="P1OnR1R2", InitBlocks="{1}", Queries="OneQuery", MaxCrashes="1", MaxReplicaDrops="1")
MODELS["MCRepair"] = ("A replica lost for good: SYSTEM DROP REPLICA, then a repair CLONE -> SWITCH back to RF, fixed.",
                      REPAIR, False)
MODELS["MCRepair_repair_without_clone"] = (
    "Naive repair: the new replica is added to the owners without CLONE and left to the log, which skipped its past.",
    dict(REPAIR, Bugs='"repair_without_clone"'), False)
# A repair whose SWITCH takes its coordinator for a source to move away from (PR-F9's mechanism,
# PR #102244's phase 1): the partition stays one owner short with every other safety property
# holding (the same model without RepairOutcomeProp holds).
MODELS["MCRepair_repair_moves_coordinator"] = (
    "Broken variant: the repair's SWITCH moves the partition away from its coordinator, so it stays one owner short; "
    "every other invariant and property of MCRepair holds, RepairOutcomeProp does not.",
    dict(REPAIR, Bugs='"repair_moves_coordinator"'), False)
# A move in flight whose source dies for good: REASSIGN p1 from r1 or r2 to r3, a crash, a drop.
MODELS["MCRepairDuringMigration"] = (
    "REASSIGN away from an owner that is then dropped for good: the move goes on as a repair, fixed.",
    dict(REPAIR, MaxMigrations="1", Queries="NoQueries"), False)
MODELS["MCRepairUnreplicatedInsert"] = (
    "The base protocol's bound: an INSERT acknowledged on one replica, lost with it for good before any other fetched it.",
    dict(REPAIR, InsertPartition="TwoInsertsP1", Queries="NoQueries"), False)
# A CLONE cancelled, then an owner it copied from dropped for good before the other owner fetched
# the block (F32): the cancelled target's copy is the last one, and its CLEANUP must wait for an
# owner to hold it, as a switched source's does (F23). One INSERT through the protocol, a move
# and its CANCEL, a crash and a drop that leaves a copy somewhere (OperatorDrops: the bound left out).
REPAIR_CANCEL = dict(REPAIR, InitBlocks="{}", Queries="NoQueries", MaxMigrations="1", OperatorDrops="DropKeepsACopy")
MODELS["MCRepairCancel"] = (
    "A cancelled CLONE's target holds the last copy of a block after an owner is dropped for good: its CLEANUP "
    "waits for the staying owner to fetch it, fixed.", REPAIR_CANCEL, False)
MODELS["MCRepairCancel_cancel_cleanup_trusts_owners"] = (
    "F32: the cancelled target's CLEANUP trusts the owners to hold what it copied; after a drop it deletes the "
    "last copy of an acknowledged block.", dict(REPAIR_CANCEL, Bugs='"cancel_cleanup_trusts_owners"'), False)

# What insert_quorum = RF closes (FINDINGS, "What insert_quorum closes"; issue 36): the ack waits
# until RF replicas hold the block. Under it a loss of an acknowledged block at the write or in the
# replication right after it cannot happen (F15, the F20 bound, F4); F2's stale filter leaves the
# INSERT unanswered instead of acknowledged on one owner. A loss after both owners held the block
# is not closed: F14 still breaks OwnersCompleteInv.
QUORUM = dict(InsertQuorum="QuorumOfRF")
MODELS["MCFilteredLogQuorum_filter_with_stale_cache"] = (
    "F2 under insert_quorum = RF: the owner whose stale map skipped the GET_PART never fetches it, so the INSERT "
    "is never acknowledged (its client sees a timeout, UNKNOWN_STATUS_OF_INSERT) rather than acknowledged short.",
    dict(QUORUM, Bugs='"filter_with_stale_cache"'), True)
MODELS["MCMigrationWritesQuorum_insert_without_assignment_check"] = (
    "F4 under insert_quorum = RF: the stale-map write is acknowledged only once RF replicas hold it, so CLEANUP "
    "deleting the writer's copy loses nothing acknowledged.",
    dict(MIGRATION_WRITES, **QUORUM, Bugs='"insert_without_assignment_check", "cleanup_without_catchup"'), False)
MODELS["MCRepairUnreplicatedInsertQuorum"] = (
    "The F20 bound under insert_quorum = RF: no INSERT is acknowledged on one replica only, so a drop for good "
    "loses nothing acknowledged.",
    dict(REPAIR, **QUORUM, InsertPartition="TwoInsertsP1", Queries="NoQueries"), False)
MODELS["MCLostReplicaQuorum_clone_keeps_only_what_the_source_has"] = (
    "F15 under insert_quorum = RF: an acknowledged block is on its source too, so the lost replica keeps no only copy.",
    dict(LOST, **QUORUM, Bugs='"clone_keeps_only_what_the_source_has"'), None)
MODELS["MCLostReplicaQuorum_clone_lost_replica_from_one_peer"] = (
    "F14 under insert_quorum = RF: not closed; the clone from one peer drops blocks both owners held at the ack.",
    dict(LOST, **QUORUM, Bugs='"clone_lost_replica_from_one_peer"'), None)

# A retried INSERT meeting a DROP PARTITION (FINDINGS F21): the base protocol's bound on a lagging
# replica. The DROP_RANGE clears p1's block ids (as ClickHouse does), so a retry of an insert
# written before it is not deduplicated and is written again above the drop range; a replica that
# has still to execute the DROP_RANGE holds both copies. No switch on.
MODELS["MCDropRetry"] = (
    "The base protocol's bound: a retry after a DROP PARTITION cleared its block id is written again; a lagging replica holds both copies.",
    dict(DROP, MaxTries="2"), False)
MODELS["MCDropRetryQuery"] = (
    "As MCDropRetry, with a query and without NoDuplicateRowsInv: a SELECT on the lagging replica reads the insert's rows twice.",
    dict(DROP, MaxTries="2", Queries="OneQuery"), False)

# Liveness models: no SYMMETRY (unsound with liveness), the fair spec, and temporal properties.
LIVENESS = dict(MIGRATION_WRITES)
OFF_LEADER = dict(InitOwners="P1OffTheLeader", InsertPartition="OneInsertP1", InitBlocks="{1}", MaxMutations="1")
LIVE_MODELS: dict[str, tuple[str, dict, str, list[str]]] = {
    "MCLiveness": ("Every migration ends and every owner gets every acked block, under fairness.",
                   LIVENESS, "LiveSpec", ["MigrationsEndProp", "OwnersEventuallyCompleteProp"]),
    "MCLivenessCrash": ("As MCLiveness, with a replica crash anywhere (the coordinator's included) and its restart.",
                        dict(LIVENESS, MaxCrashes="1"), "LiveSpec", ["MigrationsEndProp", "OwnersEventuallyCompleteProp"]),
    "MCLivenessCrashNoRestart": (
        "As MCLivenessCrash, but the crashed replica may stay down for good: every migration still ends, by the down "
        "timeouts, or waits for a switched source down for good with the only copy of a part (F23).",
        dict(LIVENESS, MaxCrashes="1"), "LiveSpecWithoutRestart", ["MigrationsEndOrWaitOnOnlyCopyProp"]),
    "MCLivenessCrashNoRestart_only_copy": (
        "F23's cost: a switched source that stays down with the only copy of a part it wrote after the catch-up "
        "position holds its migration open for good (ended by SYSTEM DROP REPLICA only).",
        dict(LIVENESS, MaxCrashes="1"), "LiveSpecWithoutRestart", ["MigrationsEndProp"]),
    "MCLivenessRepair": ("Every partition a permanent loss left short of RF is repaired, under fairness of the repair.",
                         dict(REPAIR, MaxMigrations="1", Queries="NoQueries"), "LiveRepairSpec",
                         ["RepairedEventuallyProp", "MigrationsEndProp", "OwnersEventuallyCompleteProp"]),
    # Replication lag ends for the entries the safety invariants excuse while pending (issue 18's
    # audit, spec/README.md): a MUTATE and a DROP_RANGE racing a CLONE, an ALTER_METADATA.
    "MCLivenessMutation": ("A mutation racing a CLONE is executed by every keeper: every replica catches up, under fairness.",
                           MUTATION_DURING_CLONE, "LiveSpec", ["ReplicasCatchUpProp"]),
    "MCLivenessDrop": ("A DROP_RANGE racing a CLONE is executed by every keeper: every replica catches up, under fairness.",
                       DROP_DURING_CLONE, "LiveSpec", ["ReplicasCatchUpProp"]),
    "MCLivenessGlobal": ("Every replica pulls and applies an ALTER_METADATA, whatever it owns, under fairness.",
                         GLOBAL, "LiveSpec", ["ReplicasCatchUpProp"]),
    # The query's own liveness (issue 18: ClientQueryFails's guard mutants broke no property): a
    # query routed to a replica that stays down must fail rather than wait, and one whose replicas
    # stay up must be answered. Without restart fairness, so a crash may last for ever.
    "MCLivenessQuery": ("A query over two partitions ends, answered unless a replica serving it goes down; a crashed "
                        "replica may stay down for good.",
                        dict(RESTART, Partitions="TwoPartitions", InitOwners="P1OnR1R2P2OnR1R2",
                             InsertPartition="InsertsP1P2", InitBlocks="{1, 2}"),
                        "LiveSpecWithoutRestart", ["QueriesEndProp", "QueryAnsweredProp"]),
    # Who selects merges and mutations (FINDINGS F34): p1's owners are not 18.16's leader. Under
    # 26.x every replica is a leader and the mutation ends; under 18.16 the leader holds no part of
    # p1 and selects nothing for it, and the mutation never ends.
    "MCLivenessMutationOffLeader": (
        "A mutation of a partition the first-elected replica does not keep ends, under fairness of the "
        "merge-selecting task: 26.x, every replica a leader.",
        OFF_LEADER, "LiveSelectionSpec", ["MutationsDoneProp"]),
    "MCLivenessMutationOffLeader_v18_16": (
        "F34: under 18.16 only the leader selects merges and mutations, of the parts it holds; a partition it does "
        "not keep is never mutated (or merged).",
        dict(OFF_LEADER, BaseProtocol="V18_16"), "LiveSelectionSpec", ["MutationsDoneProp"]),
    "MCLiveness_no_map_refresh": (
        "Without a map refresh timer CLEANUP may wait for a stale map forever: a migration need not end.",
        LIVENESS, "LiveSpecWithoutRefresh", ["MigrationsEndProp"]),
}


def render(name: str) -> str:
    if name in LIVE_MODELS:
        purpose, diff, spec, props = LIVE_MODELS[name]
        return "\n".join([f"\\* {purpose}", "\\* Generated by spec/rfc/gen_cfgs.py from its LIVE_MODELS table; edit there.",
                          *_constants({**BASE, **diff}), f"SPECIFICATION {spec}",
                          "PROPERTIES", *[f"    {p}" for p in props],
                          *[f"    {p}" for p in REPAIR_PROPERTIES if drops_replicas({**BASE, **diff})], ""])
    purpose, diff, symmetry = MODELS[name]
    consts = {**BASE, **diff}
    lines = [f"\\* {purpose}", "\\* Generated by spec/rfc/gen_cfgs.py from its MODELS table; edit there.",
             *_constants(consts)]
    if symmetry is not None:  # None: the initial owners leave no two replicas alike
        lines.append(f"SYMMETRY {'ReplicaSymmetry' if symmetry else 'OwnerSymmetry'}")
    if name in VIEWS:
        lines.append(f"VIEW {VIEWS[name]}")
    lines += ["INIT Init", "NEXT Next", "INVARIANTS", *[f"    {inv}" for inv in SAFETY if inv not in WITHOUT.get(name, ())],
              "PROPERTIES", *[f"    {p}" for p in ACTION_PROPERTIES if p not in WITHOUT.get(name, ())],
              *[f"    {p}" for p in REPAIR_PROPERTIES if drops_replicas(consts) and p not in WITHOUT.get(name, ())], ""]
    return "\n".join(lines)


RFC_DECLARED = ["    r1 = r1  r2 = r2  r3 = r3  p1 = p1  p2 = p2", "    Replicas <- MCReplicas"]


def _constants(consts: dict) -> list[str]:
    return constant_lines(RFC_DECLARED, consts, SUBSTITUTED)


def constant_lines(declared: list[str], consts: dict, substituted) -> list[str]:
    """A cfg's CONSTANTS section: the model values and substitutions every model of a family
    declares, then each constant set (`=`) or, if named in `substituted`, replaced by an MC
    definition (`<-`); `Bugs` is a set of the names given. The families' generators share it."""
    lines = ["CONSTANTS", *declared]
    for k, v in consts.items():
        if k == "Bugs":
            lines.append(f"    Bugs = {{{v}}}")
        else:
            lines.append(f"    {k} {'<-' if k in substituted else '='} {v}")
    return lines


class _Args(argparse.ArgumentParser):
    """The generators run from anywhere as `python spec/.../gen_cfgs.py`, with the standard library
    only (the project's harness.cli_args is not on their path): argparse, refusing in one line."""

    def error(self, message):
        self.exit(2, f"{self.prog}: bad input: {message} (--help for usage)\n")


def write_or_check(cfgs: dict[Path, str], argv: list[str], script: str) -> int:
    """Write each cfg, or with --check exit 1 naming those that differ from their text (the
    families' generators share it: spec/parallel_replicas/gen_cfgs.py)."""
    ap = _Args(prog=f"python {script}", description="write the family's cfgs from their table, or check them")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each cfg that differs")
    check = ap.parse_args(argv).check
    stale = []
    for path, text in cfgs.items():
        if check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date (run python {script}): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    return write_or_check({HERE / f"{name}.cfg": render(name) for name in [*MODELS, *LIVE_MODELS]}, argv,
                          "spec/rfc/gen_cfgs.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
