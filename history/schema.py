"""The history format, stated once: every table of a run's history and every column of it, with
what the checkers require of it. The writer (history/record.py) writes every column, with the
Arrow schema `arrow_schema` derives; the readers (history/folder.py, checkers/spark/load.py,
checkers/duckdb_check.py) read the columns marked `read`, typed by `spark_schema` and
`duckdb_type`, and never more: a history may carry more columns than they read, never fewer than
they require. `python -m history.schema` prints it as a Markdown table.

Time is the driver's logical step counter, so a history is deterministic for a seed and
"acknowledged before the query started" is a comparison of integers. An insert is recorded per
sub-block (one partition of a block): a sub-block is atomic (one part, one Keeper multi), a
multi-partition INSERT is not, in ClickHouse as here.

Kept free of pyspark and pyarrow imports at module level so that a folder can be checked
(history/folder.py) before a JVM starts: the Spark and Arrow types are built when asked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from protocol.parts import _NAME

INSERT_STATUSES = ("ok", "failed", "unknown")
QUERY_STATUSES = ("complete", "failed")

# A column's kind: its Arrow type (the writer's), Spark SQL type and DuckDB type (the readers'),
# and how a message names it.
KINDS = {"long": ("int64", "bigint", "BIGINT", "an integer"),
         "string": ("string", "string", "VARCHAR", "a string"),
         "strings": ("list<string>", "array<string>", "VARCHAR[]", "a list of strings")}
KIND_NAMES = {kind: names[3] for kind, names in KINDS.items()}


@dataclass(frozen=True)
class Column:
    name: str
    kind: str              # "long", "string" or "strings" (a list of strings): KINDS
    nullable: bool = False  # null allowed (else a null is bad input)
    # A column a history may lack (written before it existed, or by a writer that has no such
    # value, as a real ClickHouse's history): read as null.
    optional: bool = False
    read: bool = True       # False: written for people and other tools; no checker reads it
    doc: str = ""


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]   # in the order the writer writes them
    # Tables of one row per inserted/held/returned row: read into the co-partitioned frame.
    large: bool = False
    must_have_rows: str | None = None   # why an empty table is refused (None: empty is allowed)
    # A table a history may lack (histories written before it existed): read as empty.
    optional: bool = False
    statuses: tuple[str, ...] = field(default_factory=tuple)  # allowed values of `status`
    doc: str = ""

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def required(self) -> list[str]:
        return [c.name for c in self.columns if not c.optional]

    def readers(self) -> Table:
        """The table as the checkers read it: the columns marked `read`."""
        return replace(self, columns=tuple(c for c in self.columns if c.read))


def _col(name: str, kind: str, *flags: str, doc: str = "") -> Column:
    """A column; `flags` among "nullable", "optional" (for readers, both) and "unread"."""
    unknown = set(flags) - {"nullable", "optional", "unread"}
    assert not unknown, unknown
    return Column(name, kind, "nullable" in flags or "optional" in flags, "optional" in flags,
                  "unread" not in flags, doc)


# commands: what Keeper held right after a command, the migration and assignment znodes
COMMAND_EFFECT = (("migration_state", "string"), ("migration_src", "string"), ("migration_dst", "string"),
                  ("owners", "strings"), ("target", "string"), ("leaving", "string"))
# insert_refusals: the write path as the harness saw it right before and right after a refused try
REFUSAL_SIDES = ("before", "after")
WRITE_PATH = (("keeper_owners", "strings"), ("keeper_version", "long"), ("receiver_writable", "long"),
              ("receiver_map_version", "long"), ("writable_owners", "strings"), ("stale_owners", "strings"),
              ("active_replicas", "long"))
WRITE_PATH_DOC = {"keeper_version": "null: not assigned", "receiver_map_version": "null: no map entry",
                  "stale_owners": "owners, writable or not, whose map is at another version",
                  "active_replicas": "replicas with is_active; null when a placement is declared"}

HISTORY = {t.name: t for t in (
    Table("run", (
        _col("run_id", "string", "unread"), _col("replication_factor", "long"),
        _col("backend", "string", "unread"),
        _col("bugs", "strings", "optional", doc="the broken variants the run switched on (protocol/bugs.py); null "
             "or absent, none. Read for source_stops_at_switch, the RFC as written, whose SWITCH leaves no "
             "leaving replica (MigrationOutcomeInv exempts it, as the spec does)"),
        _col("seed", "long", "unread"), _col("final_step", "long", "unread"),
        _col("settled_step", "long", "optional", doc="the step the driver settled the cluster at before the "
             "final snapshot (no step enabled: what is in flight then stays so: racing profiles, `reference run`); "
             "null (or absent) when the run was cut wherever it was: MigrationsEndProp is judged only on a "
             "settled end (a migration still in flight then never ends)"),
        _col("down_timeout", "long", "optional", doc="the steps a migration waits on a down replica before it "
             "acts without it (Cluster.down_timeout), when the run's clock is its steps (Cluster.count_steps: "
             "the racing profiles `leaving` and `deserting`); "
             "null (or absent: older histories, real ClickHouse's, a timeout in seconds) is infinite, and "
             "DownWaitBoundedProp is not judged")),
        must_have_rows="no run row: the replication factor is unknown", doc="one row: the run"),
    Table("inserts", (
        _col("insert_id", "string", doc="block_id/partition_id"), _col("block_id", "string", "unread"),
        _col("partition_id", "string"), _col("row_id", "long"), _col("status", "string"),
        _col("sent_step", "long", "unread"), _col("ack_step", "long", "nullable")),
        large=True, statuses=INSERT_STATUSES, must_have_rows="no inserts: nothing to prove",
        doc="one row per row of each sub-block sent, with what its client was told"),
    Table("queries", (
        _col("query_id", "string"),
        _col("replica", "string", "optional", doc="the receiver: CrashFailsQueriesInv, with `crashes`"),
        _col("start_step", "long"),
        _col("end_step", "long", "optional", doc="the answer's step: CrashFailsQueriesInv"),
        _col("status", "string"),
        _col("partitions_requested", "strings", "nullable", doc="after pruning; null: the whole table"),
        _col("failed_by", "string", "optional", doc="the replica whose crash failed the query (the spec's "
             "ReplicaCrash), null for any other end: a crash fails only a query it served"),
        _col("pending_at", "strings", "optional", doc="the replicas its unread partitions were routed to when "
             "it ended (CrashFailsQueriesInv)")),
        statuses=QUERY_STATUSES, doc="one row per SELECT"),
    Table("query_reads", (_col("query_id", "string", "unread"), _col("partition_id", "string", "unread"),
                          _col("read_from", "string", "unread")),
          doc="the replica each query read each partition from"),
    Table("query_rows", (_col("query_id", "string"), _col("partition_id", "string"), _col("row_id", "long")),
          large=True, doc="every row each query returned"),
    Table("query_lag", (_col("query_id", "string"), _col("partition_id", "string"), _col("row_id", "long")),
          large=True, optional=True,
          doc="rows a query is not owed by replication lag (the spec's R2, history/lag.py): of a partition its map "
              "did not know, not pulled by its replica yet; or still in flight to the replica it read the "
              "partition from (the spec's InFlightTo). Empty for a synced query. A history without it is checked "
              "with every read taken as synced (R2 strict), as before the table existed"),
    Table("drops", (
        _col("drop_id", "string", "unread"), _col("partition_id", "string"), _col("row_id", "long"),
        _col("insert_id", "string", "unread"), _col("drop_step", "long"), _col("block_number", "long", "unread")),
        large=True, optional=True,
        doc="what each ALTER TABLE DROP PARTITION removed (History.drop; Cluster.drop_partition, the `dropping` "
            "profile): one row per row of an acknowledged (or unknown) insert committed below the DROP_RANGE's "
            "block number (the driver runs INSERTs and drops as separate steps, so every insert recorded before "
            "the drop is below it), with the step the drop was issued at. "
            "Such a row is owed to no owner after it, and to no query that started after it (the spec's "
            "LiveAcked); a replica still holding it at the end broke DropsAppliedInv (F8, F16). A history without "
            "it is checked as one in which nothing was dropped"),
    Table("parts", (
        _col("snapshot_step", "long"), _col("replica", "string"), _col("partition_id", "string"),
        _col("part_name", "string", doc="as ClickHouse writes it (protocol/parts.py; PART_NAME)"),
        _col("row_id", "long")),
        large=True,
        # Empty is allowed: a run that lost every row ends with replicas holding nothing, and that
        # must be the loss it is (OwnersCompleteInv, exit 1), not "bad input". The final snapshot's
        # step comes from `assignments`, which must have rows, so there is still no vacuous pass.
        doc="every replica's parts, row by row, at each snapshot; the last is the final state"),
    Table("metadata", (
        _col("snapshot_step", "long"), _col("replica", "string"), _col("metadata_version", "long"),
        _col("alters_queued", "long"), _col("table_metadata_version", "long"),
        _col("log_pointer", "long", "optional", doc="the replica's: MutationsAppliedInv's MutationsOwed")),
        optional=True,
        doc="per snapshot, each running replica's applied ALTER_METADATA count (its metadata version, kept across "
            "a restart) and the "
            "ALTERs waiting in its queue, beside the table's version (/columns): at a settled end applied + "
            "queued = the table's, the spec's GlobalEntriesAppliedInv. Its replicas are the snapshot's running "
            "ones (DownWaitBoundedProp)"),
    Table("log_mutations", (_col("log_index", "long"), _col("partition_id", "string"),
                            _col("new_part_name", "string")),
          optional=True,
          doc="each MUTATE_PART entry of the log, with its index, once (read from Keeper at the snapshots): "
              "MutationsAppliedInv's facts (a keeper's "
              "part reflects every MUTATE_PART of its partition below the keeper's log_pointer that overlaps it, "
              "unless one of the partition, or a GET_PART of a part mutated at least as far, is queued)"),
    Table("queued_mutations", (_col("snapshot_step", "long"), _col("replica", "string"),
                               _col("partition_id", "string"),
                               _col("entry_type", "string", doc="MUTATE_PART, or GET_PART of a mutated part"),
                               _col("new_part_name", "string")),
          optional=True,
          doc="per snapshot, each running replica's queued MUTATE_PARTs and GET_PARTs of mutated parts "
              "(MutationsAppliedInv). A CLONE target that skipped a MUTATE_PART (it was no keeper) and was not "
              "given it by the CLONE keeps old data without a pending mutation (F8)"),
    Table("migrations", (
        _col("snapshot_step", "long"), _col("partition_id", "string"),
        _col("state", "string", doc="clone, switched, cancelling, done or cancelled"),
        _col("src", "string", "nullable", doc="null for a repair"), _col("dst", "string"),
        _col("coordinator", "string", "optional", doc="the replica that coordinates it (the znode's coord: the "
             "source, or whoever took it over)"),
        _col("maps_behind", "strings", "optional", doc="for a migration in flight, the active replicas whose "
             "published map has not seen the partition's assignment yet, which a CLEANUP (on a down leaver's "
             "behalf too) waits for; null for one that ended")),
        optional=True,
        doc="per snapshot, each partition's migration as its znode (selective/migrations/{p}) says; a partition "
            "with no row never migrated (the spec's \"none\"). With the assignment, who may hold the partition at "
            "the snapshot (NoForeignPartsInv's Leaver: the source after SWITCH, the target after CANCEL, until its "
            "CLEANUP); with the running replicas of the snapshot (metadata), which migration waits on a down "
            "replica (DownWaitBoundedProp). A history without it (older runs, real ClickHouse's) names its leavers "
            "in `assignments` only; PR #102244's has it empty, its assignment rows naming their keepers"),
    Table("assignments", (
        _col("snapshot_step", "long"), _col("partition_id", "string"), _col("owners", "strings"),
        _col("clone_target", "string", "optional", doc="the CLONE target at the snapshot: it may hold the "
             "partition's rows before SWITCH (NoForeignPartsInv, as the spec's Keepers); PR #102244's history "
             "names its `:cloning` targets comma-separated"),
        _col("leaving_replica", "string", "nullable")),
        must_have_rows="no assignments: the history has no final snapshot of the owners",
        doc="each partition's assignment at each snapshot"),
    Table("errors", (
        _col("step", "long"), _col("replica", "string", doc="whose step or client call raised (\"\" for the "
                                                            "administrator's)"),
        _col("action", "string"), _col("error", "string"), _col("message", "string", "nullable")),
        optional=True,
        doc="unexpected exceptions a replica's step, a client's INSERT or SELECT, or an operator's command raised "
            "(not the protocol's refusals: GuardFailed and the like), logged while the run went on, as a "
            "ClickHouse server logs a failed background task and retries it later (also a read after which its "
            "partition is still pending: cluster.read_done, so a query that would wait for ever fails instead); "
            "a (replica, step kind) is not tried again after 20. The "
            "fixed protocol raises none (tests/reference/test_races.py); every row is a NoLogicalErrorsInv "
            "violation (ClickHouse's LOGICAL_ERROR: its CI fails a run that threw one)"),
    Table("commands", (
        _col("step", "long"),
        _col("command", "string", doc="REASSIGN (Cluster.reassign) or CANCEL (Cluster.cancel)"),
        _col("partition_id", "string"),
        _col("src", "string", "nullable"), _col("dst", "string", "nullable"),
        _col("outcome", "string", doc="accepted; refused (MigrationError or GuardFailed); raised (anything else, "
             "also in `errors`)"), _col("reason", "string", "nullable"),
        _col("owners", "strings", "nullable", doc="null: not assigned"),
        _col("migration_state", "string", doc="\"none\": no migration znode"),
        _col("migration_src", "string", "nullable"), _col("migration_coordinator", "string", "nullable", "unread"),
        _col("src_active", "long", doc="0 or 1"), _col("dst_active", "long", doc="0 or 1"),
        _col("coordinator_active", "long", doc="0 or 1"),
        _col("in_flight", "long"), _col("max_in_flight", "long"),
        # what Keeper held right after the command; older histories have none: the effect is not judged there
        *(_col(f"{name}_after", kind, "optional") for name, kind in COMMAND_EFFECT)),
        optional=True,
        doc="every operator command (REASSIGN, CANCEL) with its outcome and the guard inputs the harness read from "
            "Keeper right before it (history/commands.py): the owners, the partition's migration, whether src, "
            "dst and the coordinator were active, the migrations in flight and the limit; and what it left in "
            "Keeper, read right after it (the `_after` columns; null if that read faulted). A command whose Keeper "
            "request faulted has an unknown fate and is not recorded. CommandsFollowGuardsInv: accepted exactly "
            "when its spec action's guard held, leaving what its action writes; with `migrations`, "
            "CancelHonouredInv"),
    Table("crashes", (_col("step", "long"), _col("replica", "string")), optional=True,
          doc="every replica crash (its process killed: Cluster.crash_replica, also the crash of a replica lost for "
              "good), at the step it happened: no query completed across its receiver's crash "
              "(CrashFailsQueriesInv)"),
    Table("disk_faults", (
        _col("step", "long", "unread"), _col("replica", "string", "unread"), _col("action", "string", "unread"),
        _col("error", "string", "unread")),
        optional=True,
        doc="every step or INSERT try a replica's disk failed (read-only, full: Cluster._disk_fault), at the step "
            "it happened, with the action (a step kind, insert, sync) and the OSError: the environment's fault, "
            "not the protocol's, so not in `errors`; the step is postponed and tried again until the disk works. "
            "No invariant reads it: it says where a run's failed INSERTs and late replication came from, "
            "across any number of faults and restarts (issue 38)"),
    Table("replica_drops", (
        _col("step", "long"), _col("replica", "string"),
        _col("partition_id", "string", doc="a partition the dropped replica owned right before the drop")),
        optional=True,
        doc="every SYSTEM DROP REPLICA (the spec's DropReplica; Cluster.drop_replica, in the profiles that lose a "
            "replica for good): one row per partition the dropped replica owned right before it (read from Keeper "
            "then), at the step it was issued. It does not tick the clock: a snapshot at the same step may precede "
            "or follow it. Each such partition is one owner short until a repair's SWITCH (table repairs) adds "
            "one back (RepairOutcomeProp). A history without it is checked as one in which no replica was dropped"),
    Table("repairs", (
        _col("step", "long"), _col("partition_id", "string"), _col("dst", "string", "unread")),
        optional=True,
        doc="every SWITCH of a repair (a CLONE with no source: Cluster.repair's, or a move whose source SYSTEM DROP "
            "REPLICA removed, carried on as a repair), at the step it was applied: it adds one owner, its target "
            "dst, and removes none (RepairOutcomeProp). A history without it is checked as one in which nothing "
            "was repaired"),
    Table("insert_refusals", (
        _col("step", "long"), _col("block_id", "string"), _col("partition_id", "string"),
        _col("receiver", "string"), _col("error", "string"), _col("reason", "string", "nullable"),
        # older histories have no count of active replicas (null with a placement declared): their
        # allocation tries are not judged
        *(_col(f"{name}_{side}", kind, "optional" if name == "active_replicas" else "nullable",
               doc=WRITE_PATH_DOC.get(name, "")) for side in REFUSAL_SIDES for name, kind in WRITE_PATH)),
        optional=True,
        doc="every INSERT try a replica refused (Cluster.insert; the sub-block it failed on) with what the harness "
            "saw of the write path right before and right after it (history/refusals.py): the assignment's owners "
            "and znode version, whether the receiver was writable and its map's version, the owners that were "
            "writable and those whose map was at another version, and how many replicas were active. Tries that "
            "ended with an unknown outcome are no refusals. InsertRefusalsFollowGuardsInv: refused only when "
            "the spec's write path was closed"),
)}

# The checkers' view: the tables they read, with the columns they read.
TABLES = {name: t.readers() for name, t in HISTORY.items() if any(c.read for c in t.columns)}

# A part_name as ClickHouse writes it (protocol/parts.py's, without its group names): groups
# partition, min block, max block, level and mutation (none: unmutated). Spark's and DuckDB's
# regexp_extract read the same groups. A patch part's hash is matched, not a group: the checkers
# read a patch part (patch-<hash>-<p>_...) under its partition p, as the store does.
PART_NAME = re.sub(r"\(\?P<\w+>", "(", re.sub(r"\(\?P<patch>", "(?:", _NAME.pattern))


def arrow_schema(table: str):
    """The writer's Arrow schema of a table: every column, in order."""
    import pyarrow as pa
    types = {"long": pa.int64(), "string": pa.string(), "strings": pa.list_(pa.string())}
    return pa.schema([(c.name, types[c.kind]) for c in HISTORY[table].columns])


def duckdb_type(kind: str) -> str:
    return KINDS[kind][2]


def sql_type(kind: str) -> str:
    """The Spark SQL name of a kind's type (spark_type's, as text)."""
    return KINDS[kind][1]


def spark_type(kind: str):
    from pyspark.sql import types as T
    return {"long": T.LongType(), "string": T.StringType(), "strings": T.ArrayType(T.StringType())}[kind]


def read_type(name: str):
    """The Spark type of a file column's type name (folder.COMPATIBLE lists the accepted ones)."""
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


def markdown() -> str:
    """The format as a Markdown table: each table, then its columns (type; for the checkers
    required, optional or not read; null allowed) and what each says."""
    lines = ["| table | column | type | checkers | meaning |", "|---|---|---|---|---|"]
    for t in HISTORY.values():
        flags = [w for w, on in (("large", t.large), ("optional", t.optional), ("must have rows", t.must_have_rows))
                 if on]
        statuses = f"; status: {', '.join(t.statuses)}" if t.statuses else ""
        lines.append(f"| `{t.name}` | | | {', '.join(flags)} | {t.doc}{statuses} |")
        for c in t.columns:
            use = "not read" if not c.read else "optional" if c.optional else "required"
            null = ", null allowed" if c.nullable and c.read and not c.optional else ""
            lines.append(f"| | {c.name} | {KINDS[c.kind][1]} | {use}{null} | {c.doc} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from harness.cli_args import HOLDS, Parser, run_main
    ap = Parser(prog="python -m history.schema", description="print the history format as a Markdown table: every "
                "table and column, its type, what the checkers require of it, what it means")
    ap.parse_args(argv)
    return run_main(ap.prog, lambda: print(markdown()) or HOLDS)


if __name__ == "__main__":
    import sys
    sys.exit(main())
