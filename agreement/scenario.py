"""The steps a scenario is made of, named after what a user types, and the table they run on. Each
side (agreement/clickhouse_side.py, agreement/reference_side.py) carries out every step."""

from __future__ import annotations

from dataclasses import dataclass

# The RFC's table with a String column: PARTITION BY (toYYYYMM(d), u % 16).
COLUMNS = (("d", "Date"), ("u", "UInt64"), ("x", "String"))
PARTITION_BY = "(toYYYYMM(d), u % 16)"


@dataclass(frozen=True)
class Settings:
    """Per-table MergeTree settings small enough for a test to see their effect."""
    dedup_window: int = 100
    min_logs_to_keep: int = 100
    max_logs_to_keep: int = 1000
    old_parts_lifetime: int = 480
    # No merge in the background: a merge is a step of the scenario (OPTIMIZE ... FINAL ignores
    # the size limit this sets), so both trees have the same log. The limit also stops mutations,
    # so a scenario with mutations keeps one part per partition instead.
    background_merges: bool = False

    def sql(self) -> str:
        return (f"replicated_deduplication_window = {self.dedup_window}, "
                f"min_replicated_logs_to_keep = {self.min_logs_to_keep}, "
                f"max_replicated_logs_to_keep = {self.max_logs_to_keep}, "
                f"old_parts_lifetime = {self.old_parts_lifetime}, "
                "cleanup_delay_period = 1, cleanup_delay_period_random_add = 0"
                + ("" if self.background_merges else ", max_bytes_to_merge_at_max_space_in_pool = 1"))


Row = tuple[str, int, str]   # (d, u, x)


def partition_of(row: Row) -> str:
    """ClickHouse's partition id of an integral tuple key: the values joined by '-'."""
    d, u, _ = row
    return f"{d[:4]}{d[5:7]}-{u % 16}"


def partition_sql(partition: str) -> str:
    """202401-5 -> (202401, 5): how ALTER ... PARTITION names it."""
    return "(" + ", ".join(partition.split("-", 1)) + ")"


@dataclass(frozen=True)
class Insert:
    rows: tuple[Row, ...]
    at: str = "r1"
    client_id: str = "client"   # the reference's block id (a retry sends the same); ClickHouse has none


@dataclass(frozen=True)
class Optimize:
    partition: str
    at: str = "r1"


@dataclass(frozen=True)
class Mutate:
    commands: str             # after ALTER TABLE t: "UPDATE x = 'z' WHERE u = 21", "DELETE WHERE u = 3"


@dataclass(frozen=True)
class Drop:
    partition: str


@dataclass(frozen=True)
class AddColumn:
    name: str
    type: str


@dataclass(frozen=True)
class ClearColumn:
    column: str
    partition: str


@dataclass(frozen=True)
class Detach:
    partition: str


@dataclass(frozen=True)
class Attach:
    partition: str


@dataclass(frozen=True)
class Replace:
    """ALTER TABLE t REPLACE PARTITION p FROM src, src holding these rows."""
    partition: str
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Stop:
    replica: str


@dataclass(frozen=True)
class Start:
    replica: str


@dataclass(frozen=True)
class Cleanup:
    """The cleanup thread's next round (trimming the log, the dedup window, old parts)."""


@dataclass(frozen=True)
class Sync:
    """SYSTEM SYNC REPLICA on every replica that is up, and every mutation done."""


Step = Insert | Optimize | Mutate | Drop | AddColumn | ClearColumn | Detach | Attach | Replace | Stop | Start | Cleanup | Sync
