"""Write the MC*.cfg files of PartMoves from one table (as spec/rfc/gen_cfgs.py does, whose
write_or_check it shares). `python spec/part_moves/gen_cfgs.py` rewrites them; `--check` exits 1
when a committed cfg differs from what the table gives (a test runs it)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).parent
RFC = runpy.run_path(str(HERE.parent / "rfc" / "gen_cfgs.py"))   # spec/ is no package

BASE = dict(SourceReplicas="MCSource", Queries="OneQuery", Dedup="TRUE", MaxMerges="1", MaxKills="0", MaxMutations="0",
            MutateFrom='"SOURCE_DROP_PRE_DELAY"', FilterSkipsSync="FALSE",
            Orchestrator='"current"', MaxCrashes="0", MigTarget='"none"', MigSource='"none"',
            MigDesign='"rfc_fixed"', Fixes="{}")
SUBSTITUTED = {"Queries", "SourceReplicas"}
SAFETY = ["TypeOKInv", "NoRowLostInv", "RowsOnOneShardInv", "QueryNoMissingInv", "QueryNoDuplicateInv",
          "MoveNotWedgedInv"]
FIXED = '{"sync_waits_for_queries", "delays_wait_for_queries", "mutations_respect_pins"}'

# name -> (what the model is for, constants that differ from BASE, invariants left out)
MODELS: dict[str, tuple[str, dict, set[str]]] = {
    "MCPartMoves": ("The move with both fixes and query deduplication: R2 and R3 hold across it, no row lost, "
                    "each row on one shard at the end.", dict(Fixes=FIXED), set()),
    "MCPartMovesKill": ("As MCPartMoves with KILL PART_MOVE_TO_SHARD in any state before SOURCE_DROP: the rollback "
                        "holds too.", dict(Fixes=FIXED, MaxKills="1"), set()),
    "MCPartMovesCrash": ("As MCPartMoves with a crash of the orchestrating replica between a state's log entry and "
                         "its CAS, in any state: today's orchestrator finds the entry's barrier and waits on it; "
                         "the move holds.", dict(Fixes=FIXED, MaxCrashes="1"), set()),
    "MCPartMovesCrash_v21_8": (
        "The orchestrator of 21.8 (no barriers), the same crash after ATTACH_PART: the re-run issues a second "
        "ATTACH_PART under a new block number, which no replica can carry out (each one's detached copy went to "
        "the first); the move waits for good with the part pinned.",
        dict(Fixes=FIXED, MaxCrashes="1", Orchestrator='"v21_8"', Queries="NoQueries", MaxMerges="0"), set()),
    "MCPartMovesCrashQuery_v21_8": (
        "The orchestrator of 21.8, the crash after SOURCE_DROP's DROP_RANGE: the re-run's dropPart finds the part "
        "gone on its own replica and does not wait; the pins go while another source replica still has the part, "
        "the destination merges it under a new UUID, and a query reads its rows twice.",
        dict(Fixes=FIXED, MaxCrashes="1", Orchestrator='"v21_8"'), {"MoveNotWedgedInv"}),
    "MCPartMovesSelective": (
        "A selective source shard (seed 000 meeting 001): a migration of the moving part's partition from s2 to "
        "s3, the RFC's CLONE as fixed, at any point of the move: the drops a keeper has still to apply are re-queued "
        "after the fetch, so no copy of the moved part outlives the move.",
        dict(SourceReplicas="MCSource3", Queries="NoQueries", Fixes=FIXED, MigTarget="s3", MigSource="s2",
             MaxMerges="0"), set()),
    "MCPartMovesSelective_pr_code": (
        "The same with PR #102244's CLONE: its GET_PARTs of the source's snapshot go into the shared log after a part "
        "move's exact-part DROP_RANGE; a keeper that dropped the part fetches it back from the lagging source, and "
        "the moved rows stay on both shards for good.",
        dict(SourceReplicas="MCSource3", Queries="NoQueries", Fixes=FIXED, MigTarget="s3", MigSource="s2",
             MigDesign='"pr_code"', MaxMerges="0"), set()),
    "MCPartMovesMutation": ("As MCPartMoves with an ALTER TABLE UPDATE on the source during the pre-drop sleep: the "
                            "fixed move holds.", dict(Fixes=FIXED, MaxMutations="1", MaxMerges="0"), set()),
    "MCPartMovesMutation_mutations_ignore_pins": (
        "The code as it is: the pinned part is mutated under a new UUID, the exact-name DROP_RANGE skips it, and the "
        "row stays on both shards for good.",
        dict(Fixes='{"sync_waits_for_queries", "delays_wait_for_queries"}', MaxMutations="1", MaxMerges="0",
             Queries="NoQueries"), set()),
    "MCPartMovesMutationEarly": (
        "As MCPartMovesMutation with the UPDATE at any point from SYNC_SOURCE on: with mutations_respect_pins the "
        "mutation waits for the move, which holds.",
        dict(Fixes=FIXED, MaxMutations="1", MaxMerges="0", MutateFrom='"SYNC_SOURCE"', Queries="NoQueries"), set()),
    "MCPartMovesMutationEarly_mutations_ignore_pins": (
        "The code as it is, the UPDATE before the attach: CLONE_PART_FROM_SHARD finds no source replica with the part "
        "by its name, or ATTACH_PART carries the mutated part's checksum, which no detached copy has; the move waits "
        "for good.",
        dict(Fixes='{"sync_waits_for_queries", "delays_wait_for_queries"}', MaxMutations="1", MaxMerges="0",
             MutateFrom='"SYNC_SOURCE"', Queries="NoQueries"), set()),
    "MCPartMovesMutationBeforeAttach_mutations_ignore_pins": (
        "The code as it is, the UPDATE after the clone fetched the part and before ATTACH_PART: the entry carries the "
        "checksum of the mutated part (getActiveContainingPart), which no detached copy has; the move waits for good.",
        dict(Fixes='{"sync_waits_for_queries", "delays_wait_for_queries"}', MaxMutations="1", MaxMerges="0",
             MutateFrom='"DESTINATION_ATTACH"', Queries="NoQueries"), set()),
    "MCPartMoves_filter_skips_sync": (
        "Selective replication's filter meeting a part move: one that passes only the entry types the RFC's table lists "
        "skips SYNC_PINNED_PART_UUIDS, no replica's local pins are ever set, and the part is read twice.",
        dict(Fixes=FIXED, FilterSkipsSync="TRUE", MaxMerges="0"), set()),
    "MCPartMoves_no_dedup": ("ClickHouse master (query deduplication removed, PR #99398; off by default before): a "
                             "query reads the part on both shards (issue #34089's duplicated count).",
                             dict(Dedup="FALSE", Fixes=FIXED), set()),
    "MCPartMoves_stale_local_pins": (
        "Deduplication on, the syncs not waiting for queries: a source replica that read before its "
        "SYNC_PINNED_PART_UUIDS reports no UUID, the destination does, the rows are counted twice (PR #50777).",
        dict(Fixes='{"delays_wait_for_queries"}'), set()),
    "MCPartMoves_delays_unbounded": (
        "The sleeps bounding nothing: a query reads the destination before the attach and the source after the drop "
        "and misses the part.", dict(Fixes='{"sync_waits_for_queries"}', MaxMerges="0"), {"QueryNoDuplicateInv"}),
    "MCPartMoves_post_delay_unbounded": (
        "The post-drop sleep bounding nothing: the pins go, the destination merges the part under a new UUID, and a "
        "query that read the source before the drop reads its rows again.",
        dict(Fixes='{"sync_waits_for_queries"}'), {"QueryNoMissingInv"}),
}


def render(name: str) -> str:
    purpose, diff, without = MODELS[name]
    lines = [f"\\* {purpose}", "\\* Generated by spec/part_moves/gen_cfgs.py from its MODELS table; edit there.",
             *RFC["constant_lines"](["    s1 = s1  s2 = s2  s3 = s3  d1 = d1  d2 = d2", "    DestReplicas <- MCDest"],
                                    {**BASE, **diff}, SUBSTITUTED)]
    lines += ["INIT Init", "NEXT Next", "INVARIANTS", *[f"    {i}" for i in SAFETY if i not in without], ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return RFC["write_or_check"]({HERE / f"{name}.cfg": render(name) for name in MODELS}, argv,
                                 "spec/part_moves/gen_cfgs.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
