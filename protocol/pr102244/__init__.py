"""ClickHouse PR #102244's design of selective replication, as spec/pr102244/PR102244.md reads it and
spec/pr102244/PR102244.tla models it, on the reference's base protocol (log entries, parts, queue,
blocks/ deduplication, Keeper layer): `python -m reference run --design pr102244`.

Action names are PR102244.tla's in snake case (WriteInsert -> write_insert, StartClone ->
start_clone, ...); the PR's own words name the rest (`:cloning`, counts, `/migrations/<uuid>`,
`source_parts_snapshot`, `clone_complete`, coordinator). Switches (`bugs`) are the model's
`Bug(...)` names, readings (`readings`) its `Reading(...)` names (PR102244.md, O1-O7).
"""

# The readings the PR's text leaves open that the reference implements (spec/pr102244/PR102244.tla's
# Reading(...) names; PR102244.md's table "Readings left open").
READINGS = {
    "filter_cached": "O1: the log filter decides from the cached assignment (otherwise a Keeper read)",
}
