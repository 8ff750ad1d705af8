"""The aspects of the base protocol held to a real ClickHouse: each a small scenario run on fresh
tables of both systems, the parts of the normalised tree it compares, and, where the two differ
on purpose, the stated reason (an abstraction, or 18.16 against today's release)."""

from __future__ import annotations

from dataclasses import dataclass

from agreement.scenario import (AddColumn, Attach, Cleanup, ClearColumn, Detach, Drop, Insert, Mutate, Optimize,
                                Replace, Settings, Start, Step, Stop, Sync)

A = ("2024-01-15", 21, "a")       # partition 202401-5
B = ("2024-02-01", 3, "b")        # partition 202402-3
C = ("2024-01-15", 21, "c")       # 202401-5 again
D = ("2024-01-16", 5, "d")        # 202401-5, copied in from another table
E = ("2024-03-20", 21, "e")       # 202403-5

# What a comparison may look at, in tree.Tree and the rows each replica returns.
FIELDS = ("log", "log_without_alter", "text", "blocks", "block_numbers", "mutations", "parts", "pointers", "lost",
          "trimmed", "rows")


@dataclass(frozen=True)
class Aspect:
    name: str
    title: str                       # the row's name in the agreement table
    steps: tuple[Step, ...]
    compare: tuple[str, ...] = ("log", "text", "blocks", "block_numbers", "mutations", "parts", "rows")
    settings: Settings = Settings()
    differs: str = ""                # a difference that is deliberate: why
    note: str = ""                   # what to look at, for the table

    def __post_init__(self):
        unknown = set(self.compare) - set(FIELDS)
        if unknown:
            raise ValueError(f"aspect {self.name}: unknown fields {sorted(unknown)}")


def _days(n: int, u: int = 21, tag: str = "l") -> list[Insert]:
    return [Insert(((f"2024-01-{i + 1:02d}", u, f"{tag}{i}"),)) for i in range(n)]


ASPECTS = [
    Aspect("several_partitions", "INSERT into several partitions: one GET_PART per partition, in ClickHouse's text",
           (Insert((A, B)), Sync()), note="the filter must read the partition from the part name"),
    Aspect("retried_insert", "the same block sent again: deduplicated, no block number taken",
           (Insert((A,)), Insert((A,)), Insert((C,)), Sync()), note="the next INSERT takes number 1, not 2"),
    Aspect("identical_insert_new_id", "an identical INSERT under another client id: deduplicated by its data",
           (Insert((A,)), Insert((A,), client_id="another"), Sync()),
           note="ClickHouse's block id hashes the data only"),
    Aspect("dedup_window", "more INSERTs than the dedup window: the oldest id goes, and that block is written again",
           (*[Insert((("2024-01-15", u, f"w{u}"),)) for u in range(5)], Sync(), Cleanup(),
            Insert((("2024-01-15", 0, "w0"),)), Sync(), Cleanup()),
           settings=Settings(dedup_window=3),
           note="ends with a cleanup round on both: ClickHouse's runs by itself, the reference's at the step"),
    Aspect("optimize_final", "OPTIMIZE ... FINAL: one MERGE_PARTS; merged-away parts stay registered (outdated)",
           (Insert((A,)), Insert((C,)), Sync(), Optimize("202401-5"), Sync()),
           note="replicas/*/parts keeps 0_0_0 and 1_1_0 until old_parts_lifetime"),
    Aspect("mutations", "ALTER UPDATE and DELETE: mutations/ with a number per partition, one MUTATE_PART per part",
           (Insert((A, B)), Insert((E,)), Sync(), Mutate("UPDATE x = 'z' WHERE u = 21"), Sync(),
            Mutate("DELETE WHERE u = 3"), Sync()),
           settings=Settings(background_merges=True), note="one part per partition: nothing to merge"),
    Aspect("drop_then_same_block", "DROP PARTITION, then the same block again: blocks/ was cleared, it is written again",
           (Insert((A,)), Sync(), Drop("202401-5"), Sync(), Insert((A,)), Sync())),
    Aspect("add_column", "ADD COLUMN", (Insert((A,)), Sync(), AddColumn("y", "UInt8"), Sync()),
           compare=("log",),
           differs="18.16 changes /columns and writes no log entry; today's release writes an ALTER_METADATA "
                   "entry (`alter` with alter_version), which the reference writes; the RFC's filter keeps it (global)"),
    Aspect("clear_column", "CLEAR COLUMN IN PARTITION: a CLEAR_COLUMN entry over a part range, partition-scoped",
           (Insert((A, B)), Sync(), AddColumn("y", "UInt8"), Sync(), ClearColumn("y", "202402-3"), Sync()),
           compare=("log_without_alter", "blocks", "block_numbers", "parts", "rows"),
           note="the RFC lists CLEAR_COLUMN as global; its range names one partition (today it is a mutation)"),
    Aspect("detach_attach", "DETACH then ATTACH PARTITION: `detach` range, then GET_PARTs under new numbers",
           (Insert((A,)), Insert((C,)), Sync(), Detach("202401-5"), Sync(), Attach("202401-5"), Sync()),
           note="18.16 writes `get` with no block id; today's release writes ATTACH_PART"),
    Aspect("replace_partition", "REPLACE PARTITION FROM another table: REPLACE_RANGE",
           (Insert((A,)), Sync(), Replace("202401-5", (D,)), Sync())),
    Aspect("replica_restart", "a replica stopped and restarted: it pulls what it missed",
           (Insert((A,)), Sync(), Stop("r2"), Insert((C,)), Insert((("2024-01-17", 21, "e"),)), Start("r2"), Sync()),
           compare=("log", "text", "blocks", "block_numbers", "parts", "pointers", "rows")),
    Aspect("log_trimmed_replica_lost", "the log trimmed past a replica that is down: it is marked is_lost",
           (Insert((A,)), Sync(), Stop("r2"), *_days(8), Sync(), Cleanup()),
           compare=("log", "text", "blocks", "block_numbers", "pointers", "lost", "trimmed", "rows"),
           settings=Settings(min_logs_to_keep=2, max_logs_to_keep=4)),
    Aspect("lost_replica_clones", "the lost replica back: it clones a peer and converges",
           (Insert((A,)), Sync(), Stop("r2"), *_days(8), Sync(), Cleanup(), Start("r2"), Sync(), Cleanup()),
           compare=("log", "blocks", "parts", "pointers", "lost", "trimmed", "rows"),
           settings=Settings(min_logs_to_keep=2, max_logs_to_keep=4)),
]

BY_NAME = {a.name: a for a in ASPECTS}
