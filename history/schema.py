"""The columns the checker needs from each history table, as Spark schemas, with the rules a
value must follow. The writer is history/record.py (its SCHEMAS); a history may carry more
columns than these (they are never read), never fewer.

Kept free of pyspark imports at module level so the folder can be checked (layout.py) before a
JVM starts: `spark_schema()` builds the StructType when Spark is there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

INSERT_STATUSES = ("ok", "failed", "unknown")
QUERY_STATUSES = ("complete", "failed")


@dataclass(frozen=True)
class Column:
    name: str
    kind: str              # "long", "string" or "strings" (a list of strings)
    nullable: bool = False  # null allowed (else a null is bad input)
    # A column a history may lack (written before it existed, or by a writer that has no such
    # value, as a real ClickHouse's history): read as null.
    optional: bool = False


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    # Tables of one row per inserted/held/returned row: read into the co-partitioned frame.
    large: bool = False
    must_have_rows: str | None = None   # why an empty table is refused (None: empty is allowed)
    # A table a history may lack (histories written before it existed): read as empty.
    optional: bool = False
    statuses: tuple[str, ...] = field(default_factory=tuple)  # allowed values of `status`

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def required(self) -> list[str]:
        return [c.name for c in self.columns if not c.optional]


TABLES = {t.name: t for t in (
    # settled_step: the step the driver settled the cluster at before the final snapshot; null (or
    # absent, as in older histories) when the run was cut: MigrationsEndProp is judged only then.
    # down_timeout: the steps a migration waits on a down replica before it acts without it; null
    # (or absent: older histories, real ClickHouse's, a timeout in seconds) is infinite, and
    # DownWaitBoundedProp is not judged.
    # bugs: the broken variants the run switched on (protocol/bugs.py); null or absent, none. Read
    # for source_stops_at_switch, the RFC as written, whose SWITCH leaves no leaving replica
    # (MigrationOutcomeInv exempts it, as the spec does).
    Table("run", (Column("replication_factor", "long"), Column("settled_step", "long", nullable=True, optional=True),
                  Column("down_timeout", "long", nullable=True, optional=True),
                  Column("bugs", "strings", nullable=True, optional=True)),
          must_have_rows="no run row: the replication factor is unknown"),
    Table("inserts", (Column("insert_id", "string"), Column("partition_id", "string"), Column("row_id", "long"),
                      Column("status", "string"), Column("ack_step", "long", nullable=True)),
          large=True, statuses=INSERT_STATUSES, must_have_rows="no inserts: nothing to prove"),
    Table("queries", (Column("query_id", "string"), Column("start_step", "long"), Column("status", "string"),
                      Column("partitions_requested", "strings", nullable=True),
                      # the receiver and the answer's step: CrashFailsQueriesInv, with `crashes`
                      Column("replica", "string", nullable=True, optional=True),
                      Column("end_step", "long", nullable=True, optional=True),
                      # the replica whose crash failed the query, and the replicas its unread
                      # partitions were routed to then: a crash fails only a query it served
                      Column("failed_by", "string", nullable=True, optional=True),
                      Column("pending_at", "strings", nullable=True, optional=True)),
          statuses=QUERY_STATUSES),
    Table("query_rows", (Column("query_id", "string"), Column("partition_id", "string"), Column("row_id", "long")),
          large=True),
    # Rows a query is not owed by replication lag (history/lag.py: the spec's InFlightTo, and
    # unpulled entries of partitions the query's map did not know). Optional: a history without it
    # is checked with every read taken as synced (R2 strict), as before the table existed.
    Table("query_lag", (Column("query_id", "string"), Column("partition_id", "string"), Column("row_id", "long")),
          large=True, optional=True),
    # What each DROP PARTITION removed (history/record.py's History.drop): one row per row of an
    # acknowledged or unknown insert below the DROP_RANGE's block number. Such a row is owed to no
    # owner after the drop and to no query that started after it (the spec's LiveAcked), and no
    # replica may hold it at the end (DropsAppliedInv). Optional: a history without it (older runs,
    # drivers that drop nothing) is checked as one in which nothing was dropped.
    Table("drops", (Column("partition_id", "string"), Column("row_id", "long"), Column("drop_step", "long")),
          large=True, optional=True),
    Table("parts", (Column("snapshot_step", "long"), Column("replica", "string"), Column("partition_id", "string"),
                    Column("part_name", "string"), Column("row_id", "long")),
          # Empty is allowed: a run that lost every row ends with replicas holding nothing, and that
          # must be the loss it is (OwnersCompleteInv, exit 1), not "bad input". The final snapshot's
          # step comes from `assignments`, which must have rows, so there is still no vacuous pass.
          large=True),
    # Per snapshot and running replica, ALTER_METADATA applied and queued beside the table's
    # metadata version (GlobalEntriesAppliedInv at the last snapshot). Optional: a history without
    # it (older runs, real ClickHouse's) says nothing about metadata.
    Table("metadata", (Column("snapshot_step", "long"), Column("replica", "string"), Column("metadata_version", "long"),
                       Column("alters_queued", "long"), Column("table_metadata_version", "long"),
                       # each replica's log_pointer at the snapshot: MutationsAppliedInv's MutationsOwed
                       Column("log_pointer", "long", nullable=True, optional=True)),
          optional=True),
    # MutationsAppliedInv's facts (history/record.py): every MUTATE_PART entry of the log once,
    # with its index; per snapshot, each running replica's queued MUTATE_PARTs and GET_PARTs of
    # mutated parts. Optional: histories without mutations, older ones and real ClickHouse's.
    Table("log_mutations", (Column("log_index", "long"), Column("partition_id", "string"),
                            Column("new_part_name", "string")),
          optional=True),
    Table("queued_mutations", (Column("snapshot_step", "long"), Column("replica", "string"),
                               Column("partition_id", "string"), Column("entry_type", "string"),
                               Column("new_part_name", "string")),
          optional=True),
    # Per snapshot, each partition's migration (history/record.py): the state and the replica
    # that leaves (the source after SWITCH, the target after CANCEL) until its CLEANUP. Optional: a
    # history without it (older runs, real ClickHouse's, PR #102244's) names its leavers in
    # `assignments` only. `coordinator` (the CLONE's coordinator) and `maps_behind` (the active
    # replicas whose map has not seen the assignment, which a CLEANUP waits for; null: not
    # recorded) say what a migration waits on (DownWaitBoundedProp); optional, read as null.
    Table("migrations", (Column("snapshot_step", "long"), Column("partition_id", "string"), Column("state", "string"),
                         Column("src", "string", nullable=True), Column("dst", "string"),
                         Column("coordinator", "string", nullable=True, optional=True),
                         Column("maps_behind", "strings", nullable=True, optional=True)),
          optional=True),
    Table("assignments", (Column("snapshot_step", "long"), Column("partition_id", "string"),
                          Column("owners", "strings"), Column("leaving_replica", "string", nullable=True),
                          # The CLONE target at the snapshot: it may hold the partition's rows before
                          # SWITCH (NoForeignPartsInv, as the spec's Keepers and the oracle allow).
                          Column("clone_target", "string", nullable=True, optional=True)),
          must_have_rows="no assignments: the history has no final snapshot of the owners"),
    # Unexpected exceptions a replica's step, a client call or an operator command raised, logged
    # while the run went on (history/record.py). Each row is a NoLogicalErrorsInv violation, as
    # ClickHouse's CI fails on a LOGICAL_ERROR: a command or INSERT that raised simply did not
    # happen, and the other invariants would hold on that history vacuously. Optional: older
    # histories and real ClickHouse's have none.
    Table("errors", (Column("step", "long"), Column("replica", "string"), Column("action", "string"),
                     Column("error", "string"), Column("message", "string", nullable=True)),
          optional=True),
    # Operator commands (REASSIGN, CANCEL), their outcome, and the guard inputs the harness read
    # from Keeper right before each (history/commands.py): CommandsFollowGuardsInv. Optional:
    # older histories and real ClickHouse's record no commands.
    Table("commands", (Column("step", "long"), Column("command", "string"), Column("partition_id", "string"),
                       Column("src", "string", nullable=True), Column("dst", "string", nullable=True),
                       Column("outcome", "string"), Column("reason", "string", nullable=True),
                       Column("owners", "strings", nullable=True), Column("migration_state", "string"),
                       Column("migration_src", "string", nullable=True), Column("src_active", "long"),
                       Column("dst_active", "long"), Column("coordinator_active", "long"), Column("in_flight", "long"),
                       Column("max_in_flight", "long"),
                       # what Keeper held right after the command; older histories have none: the
                       # effect is not judged there
                       *(Column(f"{name}_after", kind, nullable=True, optional=True)
                         for name, kind in (("migration_state", "string"), ("migration_src", "string"),
                                            ("migration_dst", "string"), ("owners", "strings"),
                                            ("target", "string"), ("leaving", "string")))),
          optional=True),
    # Replica crashes (a process killed), at the step each happened: CrashFailsQueriesInv.
    # Optional: older histories record none.
    Table("crashes", (Column("step", "long"), Column("replica", "string")), optional=True),
    # INSERT tries a replica refused, with the write path the harness saw right before and right
    # after each (history/refusals.py): InsertRefusalsFollowGuardsInv. Optional: older
    # histories and real ClickHouse's record none.
    Table("insert_refusals", (Column("step", "long"), Column("block_id", "string"), Column("partition_id", "string"),
                              Column("receiver", "string"), Column("error", "string"),
                              Column("reason", "string", nullable=True),
                              *(Column(f"{name}_{view}", kind, nullable=True) for view in ("before", "after")
                                for name, kind in (("keeper_owners", "strings"), ("keeper_version", "long"),
                                                   ("receiver_writable", "long"), ("receiver_map_version", "long"),
                                                   ("writable_owners", "strings"), ("stale_owners", "strings"))),
                              # older histories have no count of active replicas: their allocation
                              # tries are not judged
                              *(Column(f"active_replicas_{view}", "long", nullable=True, optional=True)
                                for view in ("before", "after"))),
          optional=True),
)}

# A part_name as ClickHouse writes it (protocol/parts.py): groups partition, min block, max block,
# level and mutation (none: unmutated). Spark's and DuckDB's regexp_extract read the same groups.
PART_NAME = r"^(all|-?\d+(?:--?\d+)*)_(\d+)_(\d+)_(\d+)(?:_(\d+))?$"

# DownWaitBoundedProp's grace: the steps a migration may be seen waiting on a down replica beyond
# run.down_timeout (checkers/oracle.py DOWN_WAIT_GRACE, where the figures it is chosen from are;
# tests/checkers/test_checkers_agree.py holds the two equal).
DOWN_WAIT_GRACE = 60

KIND_NAMES = {"long": "an integer", "string": "a string", "strings": "a list of strings"}


def spark_type(kind: str):
    from pyspark.sql import types as T
    return {"long": T.LongType(), "string": T.StringType(), "strings": T.ArrayType(T.StringType())}[kind]


def read_type(name: str):
    """The Spark type of a file column's type name (layout.COMPATIBLE lists the accepted ones)."""
    from pyspark.sql import types as T
    return {"bigint": T.LongType(), "int": T.IntegerType(), "smallint": T.ShortType(), "tinyint": T.ByteType(),
            "string": T.StringType(), "array<string>": T.ArrayType(T.StringType())}[name]


def spark_schema(table: Table, corrupt_column: str | None = None):
    """The StructType a table is read with (JSON lines also get the column Spark puts a line it
    cannot parse into)."""
    from pyspark.sql import types as T
    fields = [T.StructField(c.name, spark_type(c.kind), True) for c in table.columns]
    if corrupt_column:
        fields.append(T.StructField(corrupt_column, T.StringType(), True))
    return T.StructType(fields)
