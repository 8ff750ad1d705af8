"""The task's states and the names the part-move steps share (spec/part_moves/PartMoves.tla's)."""

from __future__ import annotations

SHARDS = ("src", "dst")
STATES = ("TODO", "SYNC_SOURCE", "SYNC_DESTINATION", "DESTINATION_FETCH", "DESTINATION_ATTACH",
          "SOURCE_DROP_PRE_DELAY", "SOURCE_DROP", "SOURCE_DROP_POST_DELAY", "REMOVE_UUID_PIN", "DONE")
ENDED = ("DONE", "CANCELLED")
# The states that issue a log entry, and to which shard.
ENTRY_SHARD = {"SYNC_SOURCE": "src", "SYNC_DESTINATION": "dst", "DESTINATION_FETCH": "dst",
               "DESTINATION_ATTACH": "dst", "SOURCE_DROP": "src"}
KILLABLE = ("SYNC_SOURCE", "SYNC_DESTINATION", "DESTINATION_FETCH", "DESTINATION_ATTACH", "SOURCE_DROP_PRE_DELAY")
VERSIONS = ("current", "v21_8")
FIXES = ("sync_waits_for_queries", "delays_wait_for_queries", "mutations_respect_pins")


def before(a: str, b: str) -> bool:
    """State a comes before state b in the task's order (the spec's Before)."""
    return STATES.index(a) < STATES.index(b)
