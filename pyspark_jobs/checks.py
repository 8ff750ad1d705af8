"""The invariants, as Spark DataFrame queries over a history (schema: pyspark_jobs/README.md).

Every check is a DataFrame of violating rows; the job counts it and takes a bounded sample, so
nothing proportional to the input reaches the driver. Joins and aggregations are keyed by
partition_id (or carry it), so they shuffle by partition.

Names are the spec's where the spec has the invariant (spec/SelectiveReplication.tla).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

# Columns the checks need; any others in the files are ignored.
REQUIRED = {
    "run": {"replication_factor": "bigint"},
    "inserts": {"insert_id": "string", "partition_id": "string", "row_id": "bigint", "status": "string",
                "ack_step": "bigint"},
    "queries": {"query_id": "string", "start_step": "bigint", "status": "string",
                "partitions_requested": "array<string>"},
    "query_rows": {"query_id": "string", "partition_id": "string", "row_id": "bigint"},
    "parts": {"snapshot_step": "bigint", "replica": "string", "partition_id": "string", "part_name": "string",
              "row_id": "bigint"},
    "assignments": {"snapshot_step": "bigint", "partition_id": "string", "owners": "array<string>",
                    "leaving_replica": "string"},
}

DESCRIPTIONS = {
    "OwnersCompleteInv": "every acknowledged row is in the final state of every owner of its partition",
    "NoDuplicateRowsInv": "no replica holds a row twice in its final state",
    "QueryNoMissingInv": "R2: a completed query returned every row acknowledged before it started, in the partitions it asked for",
    "QueryNoDuplicateInv": "R3: no completed query returned a row twice",
    "ReplicationFactorInv": "every partition with acknowledged rows is complete on at least replication_factor replicas",
    "NoForeignPartsInv": "after CLEANUP no replica keeps rows of a partition it does not own (a leaving replica excepted)",
    "AmbiguousInsertAtomicInv": "an insert of unknown outcome is wholly present or wholly absent on each owner",
    "NoPhantomRowsInv": "no replica and no query holds a row that no ok or unknown insert wrote",
}


class HistoryError(ValueError):
    """A history folder the checker cannot read: a missing table file or a missing column."""


@dataclass
class History:
    run: DataFrame
    inserts: DataFrame
    queries: DataFrame
    query_rows: DataFrame
    parts: DataFrame
    assignments: DataFrame


def _table_path(folder: Path, table: str) -> tuple[str, str]:
    for fmt, ext in (("parquet", "parquet"), ("json", "jsonl"), ("json", "json")):
        p = folder / f"{table}.{ext}"
        if p.exists():
            return str(p), fmt
    raise HistoryError(f"history {folder} has no {table}.parquet or {table}.jsonl")


def load_history(spark: SparkSession, folder: str) -> History:
    """Read the six tables; JSON lines are read with the required schema. Raises HistoryError
    naming every missing file or column."""
    root = Path(folder)
    if not root.is_dir() and "://" not in folder:
        raise HistoryError(f"history folder {folder} does not exist")
    frames, problems = {}, []
    for table, cols in REQUIRED.items():
        try:
            path, fmt = _table_path(root, table)
        except HistoryError as e:
            problems.append(str(e))
            continue
        if fmt == "parquet":
            df = spark.read.parquet(path)
        else:
            df = spark.read.schema(", ".join(f"`{c}` {t}" for c, t in cols.items())).json(path)
        missing = sorted(set(cols) - set(df.columns))
        if missing:
            problems.append(f"{path} lacks column(s) {', '.join(missing)}")
            continue
        frames[table] = df.select(*[F.col(c).cast(t).alias(c) for c, t in cols.items()])
    if problems:
        raise HistoryError("; ".join(problems))
    return History(**frames)


def final_state(h: History) -> tuple[DataFrame, DataFrame]:
    """(rows every replica holds at the last snapshot, (partition_id, replica) owners there)."""
    last_parts = h.parts.agg(F.max("snapshot_step").alias("s"))
    final = h.parts.join(F.broadcast(last_parts), h.parts.snapshot_step == F.col("s")).drop("s")
    last_asg = h.assignments.agg(F.max("snapshot_step").alias("s"))
    asg = h.assignments.join(F.broadcast(last_asg), h.assignments.snapshot_step == F.col("s")).drop("s")
    return final, asg


def violations(h: History, persisted: list | None = None) -> dict[str, DataFrame]:
    """Each invariant's violating rows (empty when it holds). DataFrames persisted for reuse are
    appended to `persisted`, for the caller to unpersist when done."""
    persisted = [] if persisted is None else persisted
    final, asg = final_state(h)
    owners = asg.select("partition_id", F.explode("owners").alias("replica"))
    ok = h.inserts.filter(F.col("status") == "ok").select("partition_id", "row_id", "ack_step", "insert_id")
    written = h.inserts.filter(F.col("status").isin("ok", "unknown")).select("row_id").distinct()
    held = final.select("replica", "partition_id", "row_id")
    # Three checks join against the rows each replica holds: compute them once (spills to disk
    # past memory, so any size works).
    held_once = held.distinct().persist(StorageLevel.MEMORY_AND_DISK)
    persisted.append(held_once)
    rf = h.run.select(F.max("replication_factor").alias("rf"))

    # OwnersCompleteInv: (owner, acknowledged row) pairs with the row absent on that owner; rows of
    # a partition with no assignment at all count too (replica null).
    expected = ok.join(owners, "partition_id", "left")
    missing = expected.join(held_once, ["replica", "partition_id", "row_id"], "left_anti").persist(
        StorageLevel.MEMORY_AND_DISK)  # reused by ReplicationFactorInv
    persisted.append(missing)
    out = {"OwnersCompleteInv": missing.select("partition_id", "replica", "row_id", "insert_id")}

    out["NoDuplicateRowsInv"] = (held.groupBy("replica", "partition_id", "row_id").count()
                                 .filter(F.col("count") > 1))

    # QueryNoMissingInv: expected (query, row) pairs: rows acknowledged before the query started,
    # in the partitions it asked for (all known partitions when partitions_requested is null).
    done = h.queries.filter(F.col("status") == "complete")
    partitions = ok.select("partition_id").distinct()
    asked = (done.filter(F.col("partitions_requested").isNotNull())
             .select("query_id", "start_step", F.explode("partitions_requested").alias("partition_id"))
             .unionByName(done.filter(F.col("partitions_requested").isNull())
                          .select("query_id", "start_step").crossJoin(F.broadcast(partitions))))
    owed = (asked.join(ok, "partition_id").filter(F.col("ack_step") < F.col("start_step"))
            .select("query_id", "partition_id", "row_id"))
    returned = h.query_rows.select("query_id", "partition_id", "row_id")
    out["QueryNoMissingInv"] = owed.join(returned.distinct(), ["query_id", "partition_id", "row_id"], "left_anti")

    out["QueryNoDuplicateInv"] = (returned.join(done.select("query_id"), "query_id")
                                  .groupBy("query_id", "partition_id", "row_id").count().filter(F.col("count") > 1))

    # ReplicationFactorInv: owners with no missing row, per partition with acknowledged rows.
    incomplete = missing.select("partition_id", "replica").distinct()
    complete = owners.join(incomplete, ["partition_id", "replica"], "left_anti").groupBy("partition_id").agg(
        F.count("*").alias("complete_copies"))
    out["ReplicationFactorInv"] = (partitions.join(complete, "partition_id", "left")
                                   .fillna(0, ["complete_copies"]).crossJoin(F.broadcast(rf))
                                   .filter(F.col("complete_copies") < F.col("rf")))

    allowed = owners.unionByName(asg.filter(F.col("leaving_replica").isNotNull())
                                 .select("partition_id", F.col("leaving_replica").alias("replica")))
    out["NoForeignPartsInv"] = (held.groupBy("replica", "partition_id").agg(F.count("*").alias("rows"))
                                .join(allowed, ["replica", "partition_id"], "left_anti"))

    unknown = h.inserts.filter(F.col("status") == "unknown").select("insert_id", "partition_id", "row_id")
    sizes = unknown.groupBy("insert_id").agg(F.count("*").alias("rows"))
    present = (unknown.join(owners, "partition_id").join(held_once, ["replica", "partition_id", "row_id"])
               .groupBy("insert_id", "replica").agg(F.count("*").alias("present")))
    out["AmbiguousInsertAtomicInv"] = present.join(sizes, "insert_id").filter(F.col("present") != F.col("rows"))

    out["NoPhantomRowsInv"] = (held_once.select(F.lit("replica").alias("where"), F.col("replica").alias("who"), "row_id")
                               .unionByName(returned.select(F.lit("query").alias("where"), F.col("query_id").alias("who"),
                                                            "row_id"))
                               .join(written, "row_id", "left_anti"))
    return out


def check(h: History, sample: int = 5) -> dict:
    """Run every invariant: {name: {holds, violations, sample, description}}."""
    report, persisted = {}, []
    for name, df in violations(h, persisted).items():
        df = df.cache()
        n = df.count()
        rows = [r.asDict(recursive=True) for r in df.limit(sample).collect()] if n else []
        df.unpersist()
        report[name] = {"holds": n == 0, "violations": n, "sample": rows, "description": DESCRIPTIONS[name]}
    for df in persisted:
        df.unpersist()
    return report
