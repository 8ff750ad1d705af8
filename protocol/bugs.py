"""The switches that bring back the RFC-as-written behaviours and the broken variants, by the
names the spec's `Bug(...)` uses (spec/FINDINGS.md). A test checks this list against the spec."""

SWITCHES = {
    "blind_write": "allocation writes the assignment without CAS (spec/assignment/Assignment.tla)",
    "allow_short_assignment": "F1: assign fewer owners than replication_factor",
    "filter_with_stale_cache": "F2: the log filter trusts a stale map and skips a new partition's entry for good",
    "clone_from_source_only": "F3: CLONE copies only the source's local parts",
    "insert_without_assignment_check": "F4: the INSERT commit does not check the assignment version",
    "route_to_clone_target": "F5: SELECT may read the CLONE target before SWITCH",
    "source_stops_at_switch": "F6: the source stops replicating at SWITCH while stale maps still read it",
    "cancel_drops_target_at_once": "F7: cancel removes the target and its copy at once",
    "clone_ignores_skipped_entries": "F8: the CLONE target never applies mutations/drops it skipped",
    "clone_reads_skipped_entries_from_log": "F16: F8's first fix, re-reading skipped entries from a log the cleanup trimmed",
    "clone_lost_replica_from_one_peer": "F14: a lost replica clones everything from one source, as cloneReplica does",
    "clone_keeps_only_what_the_source_has": "F15: a lost replica drops local parts its source has not pulled yet",
    "clone_lost_replica_from_any_keeper": "F33: a lost replica clones a partition from any keeper, a CLONE target "
                                          "that has fetched nothing among them",
    "serve_before_map_loaded": "F9: a (re)started replica serves SELECTs before loading its map",
    "switch_without_catchup": "variant: SWITCH without waiting for the target to catch up, nor the source's CLEANUP for an owner to hold its parts (the RFC has neither)",
    "cleanup_without_catchup": "variant: the source's CLEANUP does not wait for an owner to have what it wrote after the catch-up position (F23)",
    "cleanup_no_delay": "variant: CLEANUP without waiting for every map to see the change",
    "filter_skips_global": "variant: the filter skips global entries (ALTER_METADATA)",
    "no_dedup": "variant: no blocks/ deduplication of retried INSERTs",
    "down_leaver_cleanup_ignores_maps": "variant: a CLEANUP done for a down leaver does not wait for every map to see the change",
    "restart_keeps_foreign_parts": "variant: a replica back from down keeps partitions cleaned up on its behalf",
    "cancel_cleanup_trusts_owners": "F32: a cancelled CLONE's target cleans up without waiting for an owner to hold "
                                    "its parts, which after SYSTEM DROP REPLICA of an owner may be the last copies",
    "repair_without_clone": "F20 variant: the repair after DROP REPLICA adds the new owner without CLONE",
    "repair_moves_coordinator": "variant: the repair's SWITCH moves the partition away from its coordinator, as "
                                "PR #102244's phase 1 does (PR-F9); the partition stays one owner short",
    # PR #102244's design as written (spec/pr102244/PR102244.tla and PR102244Whole.tla, FINDINGS PR-F1..PR-F5;
    # --design pr102244).
    # source_stops_at_switch above is the same switch there: the source stops and drops at SWITCH.
    "snapshot_source_parts": "PR-F1: source_parts_snapshot lists only the source's parts",
    "switch_fresh_version": "PR-F3: the SWITCH multi checks versions read just before it, not the CLONE's",
    "second_migration_allowed": "PR-F3: CLONE does not refuse a partition that already has a :cloning entry",
    "complete_without_rescan": "PR-F4: clone_complete looks only at the snapshot; the target never rescans",
    "filter_negative_cache": "PR-F5: (reading filter_cached) the filter trusts a cached 'no assignment' entry",
    "retry_new_block_id": "O7's other reading: a forwarded block's retry after a lost reply carries a new block id",
    # PR #102244's code (spec/pr102244/PR102244Code.tla, FINDINGS PR-F3 against the code).
    "clone_allows_active_migration": "PR-F3 (code): startClone appends target:cloning whatever the list holds",
    "switch_without_target_check": "PR-F3, PR-F7 (code): SWITCH removes the source and strips every target entry "
                                   "from a fresh read; a source already gone means done",
    "snapshot_before_clone_multi": "PR-F6 (code): startClone reads source_parts_snapshot before its multi",
    "read_from_cloning_target": "PR-F10 (code): SELECT routing strips :cloning, so a CLONE target is read",
    "repair_moves_replica": "PR-F9 (code): the rebalancer's phase-1 migration removes its source like any SWITCH",
    "rollback_ignores_state": "PR-F7 (code): a rollback, and the SWITCH multi, act whatever the migration's state "
                              "is now (protocol/pr102244/driver.py)",
    "snapshot_omits_patch_parts": "PR-F8 (code): source_parts_snapshot and clone_complete select parts by partition "
                                  "id, which a patch part's (patch-<hash>-<p>) is not",
}

# Which switches each design's code reads: the RFC's (spec/rfc/SelectiveReplication.tla, Assignment.tla)
# and PR #102244's (spec/pr102244/PR102244.tla, PR102244Whole.tla).
PR102244 = frozenset({"snapshot_source_parts", "source_stops_at_switch", "switch_fresh_version",
                      "second_migration_allowed", "complete_without_rescan", "filter_negative_cache",
                      "retry_new_block_id", "clone_allows_active_migration", "switch_without_target_check",
                      "snapshot_before_clone_multi", "read_from_cloning_target",
                      "repair_moves_replica", "rollback_ignores_state", "snapshot_omits_patch_parts"})
DESIGNS = {"rfc": frozenset(SWITCHES) - (PR102244 - {"source_stops_at_switch"}), "pr102244": PR102244}


class UnknownSwitch(ValueError):
    """A switch name that neither the spec nor the reference knows."""


def check_switches(names, design: str = "rfc") -> frozenset[str]:
    known = DESIGNS[design]
    unknown = sorted(set(names) - known)
    if unknown:
        raise UnknownSwitch(f"unknown switch(es) {unknown} for the {design} design; known: {', '.join(sorted(known))}")
    return frozenset(names)
