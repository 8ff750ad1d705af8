"""Where a bad row is: the file and line of a JSON line, the file and value of a Parquet row. Only
run once a check of the input has failed, so its extra jobs cost nothing on good input.

Spark's JSON reader keeps no line numbers. A line's number is rebuilt from the text reader: the
rows of one file block are contiguous in one task, so `monotonically_increasing_id` minus the
block's smallest id is the line's index in its block, and the lines of the file's earlier blocks
come before it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession, functions as F

from history.folder import TableSource
from history.schema import spark_schema

CORRUPT = "_corrupt_record"


def _plain(path: str) -> str:
    return path.removeprefix("file://").removeprefix("file:")


def json_line(spark: SparkSession, src: TableSource, bad: Column) -> tuple[str, int, dict] | None:
    """(file, 1-based line, parsed values) of the first line of a JSON-lines table where `bad`
    holds; `bad` is written over the table's column names and CORRUPT."""
    text = (spark.read.text(str(src.path))
            .select(F.input_file_name().alias("_file"), F.input_file_block_start().alias("_block"),
                    F.monotonically_increasing_id().alias("_id"), "value"))
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    parsed = (text.filter(F.trim("value") != "")
              .withColumn("_row", F.from_json("value", spark_schema(src.table, CORRUPT), options))
              .select("_file", "_block", "_id", "value", "_row.*"))
    hit = parsed.filter(bad).orderBy("_file", "_block", "_id").limit(1).collect()
    if not hit:
        return None
    h = hit[0]
    blocks = (text.filter(F.col("_file") == h["_file"]).groupBy("_block")
              .agg(F.count("*").alias("n"), F.min("_id").alias("first")).collect())
    before = sum(b["n"] for b in blocks if b["_block"] < h["_block"])
    first = next(b["first"] for b in blocks if b["_block"] == h["_block"])
    values = {c: h[c] for c in src.table.names}
    values[CORRUPT] = h[CORRUPT]
    return _plain(h["_file"]), before + (h["_id"] - first) + 1, values


def parquet_row(frame: DataFrame, bad: Column) -> tuple[str, int, dict] | None:
    """(file, rows where `bad` holds, the first such row's values) of a Parquet table."""
    hits = frame.filter(bad).withColumn("_file", F.input_file_name())
    first = hits.limit(1).collect()
    if not first:
        return None
    row = first[0].asDict()
    return _plain(row.pop("_file")), hits.count(), row
