"""ClickHouse PR #102244's design of selective replication, as spec/pr102244/PR102244.md reads it and
spec/pr102244/PR102244.tla models it, on the reference's base protocol (log entries, parts, queue,
blocks/ deduplication, Keeper layer): `python -m reference run --design pr102244`.

Action names are PR102244.tla's in snake case (WriteInsert -> write_insert, StartClone ->
start_clone, ...); the PR's own words name the rest (`:cloning`, counts, `/migrations/<uuid>`,
`source_parts_snapshot`, `clone_complete`, coordinator). Switches (`bugs`) are the model's
`Bug(...)` names, readings (`readings`) its `Reading(...)` names (PR102244.md, O1-O7).
"""

# PR #102244's code (spec/pr102244/PR102244Code.tla): what it does on every run, in this design's
# switches (no rescan before clone_complete, a SWITCH at freshly read versions: PR102244.md M8, M9),
# and each of the model's Bugs strings this design implements, with the switches that make it.
# rollback_ignores_state acts only where migrations are driven step by step as the code drives
# them (driver.py, reference/pr102244/code_cluster.py: two drivers of one migration); the
# description's one-step migration (migration.py) has no rollback to race. snapshot_omits_patch_parts
# acts on patch parts (protocol/parts.py PartName.patch), which only a lightweight UPDATE writes
# (the reproductions' `UPDATE`; the random runs write none).
CODE_BASE = frozenset({"complete_without_rescan", "switch_fresh_version"})
CODE = {"snapshot_source_parts": {"snapshot_source_parts"}, "source_stops_at_switch": {"source_stops_at_switch"},
        "clone_allows_active_migration": {"clone_allows_active_migration", "second_migration_allowed"},
        "switch_without_target_check": {"switch_without_target_check"},
        "snapshot_before_clone_multi": {"snapshot_before_clone_multi"},
        "read_from_cloning_target": {"read_from_cloning_target"},
        "repair_moves_replica": {"repair_moves_replica"},
        "rollback_ignores_state": {"rollback_ignores_state"},
        "snapshot_omits_patch_parts": {"snapshot_omits_patch_parts"}}


def code_switches(strings=None) -> frozenset[str]:
    """The switches that run the code's behaviour for these model strings (default: all of them)."""
    return CODE_BASE | frozenset(x for s in (CODE if strings is None else strings) for x in CODE[s])


# The readings the PR's text leaves open that the reference implements (spec/pr102244/PR102244.tla's
# Reading(...) names; PR102244.md's table "Readings left open").
READINGS = {
    "filter_cached": "O1: the log filter decides from the cached assignment (otherwise a Keeper read)",
}
