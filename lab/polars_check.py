"""The row-table invariants counted by Polars: a third engine for `make bench`'s Spark section, to
show what a DataFrame library on one machine does with the same histories (issue 42).

An instrument, not a checker: nothing in the product imports it, and it counts only the invariants
whose cost grows with the history's rows (ROW_INVARIANTS: those over inserts, parts and query_rows).
The others read tables of a few thousand rows at most (migrations, commands, metadata...), absent
from the synthetic histories the bench times; they cost DuckDB milliseconds and would only repeat
checkers/invariants.py's SQL in another dialect. The bench times DuckDB on the same subset too
(checkers.duckdb_check.check's `only`), so the two figures compare like with like.

Why not Polars' SQL: the invariants' SQL is correlated NOT EXISTS throughout, which Polars' SQL
interface does not plan; here each one is an anti-join, as DuckDB plans them. Each count is the
number of rows the invariant's SQL returns (copies included), so it must equal DuckDB's:
tests/lab/test_polars_check.py holds the two to that on injected violations and on reference runs.

    python -m lab.polars_check HISTORY_DIR   (JSON: violations per invariant, seconds, peak MiB)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from checkers.duckdb_check import print_counts
from harness.cli_args import Parser, existing_dir
from history.schema import TABLES

ROW_INVARIANTS = ("OwnersCompleteInv", "NoDuplicateRowsInv", "QueryNoMissingInv", "QueryNoDuplicateInv",
                  "ReplicationFactorInv", "NoForeignPartsInv", "AmbiguousInsertAtomicInv", "NoPhantomRowsInv",
                  "DropsAppliedInv")
# The tables those read; a history lacking an optional one is read as if it were empty.
READ = ("run", "inserts", "drops", "queries", "query_rows", "query_lag", "parts", "assignments", "migrations")


class BadInput(ValueError):
    """The folder is no history: a table missing, or one Polars cannot read."""


def _dtype(kind: str):
    import polars as pl
    return {"long": pl.Int64, "string": pl.String, "strings": pl.List(pl.String)}[kind]


def _table(folder: Path, name: str):
    """A table's columns the checkers read (history/schema.py), an optional column it lacks as
    nulls, an optional table absent as an empty frame."""
    import polars as pl
    table = TABLES[name]
    path = folder / f"{name}.parquet"
    if not path.exists():
        if not table.optional:
            raise BadInput(f"no {name}.parquet")
        return pl.LazyFrame(schema={c.name: _dtype(c.kind) for c in table.columns})
    # Spark writes a folder of part files (with _SUCCESS and .crc beside them); pyarrow one file.
    frame = pl.scan_parquet(str(path / "*.parquet") if path.is_dir() else str(path))
    try:
        have = set(frame.collect_schema().names())
    except (pl.exceptions.PolarsError, OSError) as e:
        raise BadInput(f"{name}.parquet: {str(e).splitlines()[0]}") from e
    missing = [c.name for c in table.columns if c.name not in have and not c.optional]
    if missing:
        raise BadInput(f"{name}.parquet lacks column(s) {', '.join(missing)}")
    return frame.select([pl.col(c.name) if c.name in have else pl.lit(None, _dtype(c.kind)).alias(c.name)
                         for c in table.columns])


def plans(folder: str | Path) -> dict:
    """Per invariant of ROW_INVARIANTS, a lazy frame of its violating rows (the SQL's rows)."""
    import polars as pl
    folder = Path(folder)
    if not folder.is_dir():
        raise BadInput("no such folder")
    t = {name: _table(folder, name) for name in READ}
    c = pl.col

    # checkers/invariants.py VIEWS, as checkers/duckdb_check.py defines them
    live_ok = (t["inserts"].filter(c("status") == "ok").select("partition_id", "row_id")
               .join(t["drops"].select("partition_id", "row_id"), on=["partition_id", "row_id"], how="anti"))
    dropped = t["drops"].group_by("partition_id", "row_id").agg(c("drop_step").max().alias("dropped_at"))
    final = t["parts"].filter(c("snapshot_step") == c("snapshot_step").max())
    asg = t["assignments"].filter(c("snapshot_step") == c("snapshot_step").max())
    # unnest yields no row for a null or empty list, explode a null one: dropped
    owners = asg.select("partition_id", c("owners").alias("replica")).explode("replica").drop_nulls("replica")
    held = final.select("replica", "partition_id", "row_id").unique()
    cloning = (t["assignments"].filter(c("clone_target").is_not_null() & (c("clone_target") != ""))
               .select("snapshot_step", "partition_id", c("clone_target").str.split(",").alias("replica"))
               .explode("replica"))
    assignment_keepers = pl.concat([
        t["assignments"].select("snapshot_step", "partition_id", c("owners").alias("replica")).explode("replica")
        .drop_nulls("replica"),
        t["assignments"].filter(c("leaving_replica").is_not_null())
        .select("snapshot_step", "partition_id", c("leaving_replica").alias("replica")),
        cloning]).unique()
    leavers = (t["migrations"].filter(c("state").is_in(["switched", "cancelling"]))
               .select("snapshot_step", "partition_id",
                       pl.when(c("state") == "switched").then(c("src")).otherwise(c("dst")).alias("replica")))
    keepers = pl.concat([assignment_keepers, leavers]).unique()
    rf = t["run"].select(c("replication_factor").max())
    row = ["partition_id", "row_id"]

    out = {}
    out["OwnersCompleteInv"] = (live_ok.join(owners, on="partition_id", how="left")
                                .join(held, on=["replica", *row], how="anti"))
    out["NoDuplicateRowsInv"] = (final.group_by("replica", *row).agg(pl.len().alias("copies"))
                                 .filter(c("copies") > 1))

    ok = t["inserts"].filter(c("status") == "ok").select(*row, "ack_step")
    done = t["queries"].filter(c("status") == "complete")
    asked = pl.concat([
        done.filter(c("partitions_requested").is_not_null())
        .select("query_id", "start_step", c("partitions_requested").alias("partition_id"))
        .explode("partition_id").drop_nulls("partition_id"),
        done.filter(c("partitions_requested").is_null()).select("query_id", "start_step")
        .join(ok.select("partition_id").unique(), how="cross")])
    first_drop = t["drops"].group_by(*row).agg(c("drop_step").min().alias("first_drop"))
    owed = (asked.join(ok, on="partition_id").filter(c("ack_step") < c("start_step"))
            .join(first_drop, on=row, how="left")
            # NOT EXISTS a drop of the row before the query's start
            .filter(c("first_drop").is_null() | (c("first_drop") >= c("start_step")))
            .select("query_id", *row))
    out["QueryNoMissingInv"] = (owed.join(t["query_rows"], on=["query_id", *row], how="anti")
                                .join(t["query_lag"], on=["query_id", *row], how="anti"))
    out["QueryNoDuplicateInv"] = (t["query_rows"].join(done.select("query_id"), on="query_id")
                                  .group_by("query_id", *row).agg(pl.len().alias("copies"))
                                  .filter(c("copies") > 1))

    incomplete = (live_ok.join(owners, on="partition_id").join(held, on=["replica", *row], how="anti")
                  .select("partition_id", "replica").unique())
    complete = (owners.join(incomplete, on=["partition_id", "replica"], how="anti")
                .group_by("partition_id").agg(pl.len().alias("n")))
    short = (live_ok.select("partition_id").unique().join(complete, on="partition_id", how="left")
             .join(rf, how="cross").filter(c("n").fill_null(0) < c("replication_factor")).select("partition_id"))
    too_many = (asg.join(rf, how="cross").filter(c("owners").list.n_unique() != c("replication_factor"))
                .select("partition_id"))
    out["ReplicationFactorInv"] = pl.concat([short, too_many]).unique()

    out["NoForeignPartsInv"] = (t["parts"].join(keepers, on=["snapshot_step", "partition_id", "replica"], how="anti")
                                .group_by("snapshot_step", "replica", "partition_id").agg(pl.len().alias("rows")))
    out["AmbiguousInsertAtomicInv"] = (
        t["inserts"].filter(c("status") == "unknown").select("insert_id", *row)
        .join(owners, on="partition_id")
        .join(held.with_columns(pl.lit(True).alias("present")), on=["replica", *row], how="left")
        .group_by("insert_id", "partition_id", "replica")
        .agg(c("present").count().alias("present"), pl.len().alias("rows"))
        .filter((c("present") > 0) & (c("present") < c("rows"))))
    written = t["inserts"].filter(c("status").is_in(["ok", "unknown"])).select(*row).unique()
    out["NoPhantomRowsInv"] = pl.concat([held.select(*row), t["query_rows"].select(*row)]).join(written, on=row,
                                                                                              how="anti")
    out["DropsAppliedInv"] = held.join(dropped, on=row)
    return out


def check(folder: str | Path) -> dict:
    """Per invariant of ROW_INVARIANTS, how many rows its SQL would return (0: it holds). One
    collect_all, so the views shared by several invariants are planned once."""
    import polars as pl
    lazy = plans(folder)
    try:
        counts = pl.collect_all([frame.select(pl.len()) for frame in lazy.values()])
    except (pl.exceptions.PolarsError, OSError) as e:   # a file that is no Parquet, a column of another type
        raise BadInput(str(e).splitlines()[0]) from e
    return {name: int(df.item()) for name, df in zip(lazy, counts)}


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m lab.polars_check", description=__doc__.splitlines()[0])
    ap.add_argument("history", metavar="HISTORY_DIR", type=existing_dir)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        counts = check(str(a.history))
    except BadInput as e:
        print(f"{ap.prog}: bad input: {a.history}: {e}", file=sys.stderr)
        return 2
    return print_counts(counts, t0)


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m lab.polars_check", main))
