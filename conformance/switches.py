"""Which machine drives which switch of protocol/bugs.py on the spec's invariants alone: the
whole-protocol machine (conformance/machines.py protocol_machine) the ones listed first, and the
machine that does, for the ones it cannot. The switch table (lab/switch_table.py) measures them."""

PROTOCOL_SWITCHES = ["filter_with_stale_cache", "clone_from_source_only",
                     "route_to_clone_target", "source_stops_at_switch", "cancel_drops_target_at_once",
                     "clone_ignores_skipped_entries", "serve_before_map_loaded", "switch_without_catchup",
                     "cleanup_without_catchup", "cleanup_no_delay", "filter_skips_global", "no_dedup",
                     # the lost replica's clone, the trimmed log, the down leaver (windows.py Walk)
                     "clone_lost_replica_from_one_peer", "clone_keeps_only_what_the_source_has",
                     "clone_reads_skipped_entries_from_log", "restart_keeps_foreign_parts",
                     "down_leaver_cleanup_ignores_maps"]
# The repair's switches, driven by the protocol machine built with repair=True (SYSTEM DROP
# REPLICA and RepairStart as steps amid the whole workload: conformance/machines.py): the naive
# repair (F20), the repair that moves away from its coordinator (an action property's), and the
# cancelled target's CLEANUP that trusts the owners (F32, which that machine found).
REPAIR_SWITCHES = ["repair_without_clone", "repair_moves_coordinator", "cancel_cleanup_trusts_owners"]
# The switches no protocol machine drives, each with the ci machine that does: the assignment's
# own (None: Assignment.tla's machine, with no graph to check its steps against).
OTHER_SWITCHES = {"blind_write": None, "allow_short_assignment": None}
# Switches whose fault another guard of the fixed protocol covers, with that guard's switch:
# alone they break no invariant, so no machine can catch them alone, and their findings' models
# turn the covering guard off too. Since F23's fix the source's CLEANUP waits until an owner that
# stays holds every part it has, which keeps the part F4's stale writer commits (spec/FINDINGS.md
# F4; MCMigrationWrites with insert_without_assignment_check alone holds).
COVERED = {"insert_without_assignment_check": "cleanup_without_catchup"}
