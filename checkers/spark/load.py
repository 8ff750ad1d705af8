"""Read a history into Spark with explicit schemas, and refuse it unless every row is well formed.

Every table is read with the StructType of history/schema.py, so nothing is inferred and an extra
column is never read. Each row gets `bad`, a bit per kind of problem it has (`problems`); the
checker ORs those bits in the same pass that computes its verdicts (facts.py), so good input costs
no extra pass, and refuses the history before it says anything about it. Only when a problem is
found are more jobs run, to name the file and line (locate.py).

The small tables (run, queries, assignments; sized by queries and partitions, not rows) are
collected to the driver, one job each. The large ones (inserts, parts, query_rows) are read as one
frame of narrow rows (`History.large`), by the facts pass and again only to show violating rows.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession, functions as F, types as T

from checkers.spark import locate
from harness.cli_args import BadInput
from history.folder import TableSource, find_tables
from history.schema import KIND_NAMES, TABLES, Table, read_type, spark_schema, sql_type
from history.semantics import keepers_at

log = logging.getLogger(__name__)
CORRUPT = locate.CORRUPT
# `rows.t`: which table a row comes from: the large tables (history/schema.py), each in its role
INSERT, PART, RETURNED, LAG, DROP = 0, 1, 2, 3, 4
_ROLE = {"inserts": INSERT, "parts": PART, "query_rows": RETURNED, "query_lag": LAG, "drops": DROP}
LARGE = dict(sorted(((name, _ROLE[name]) for name, t in TABLES.items() if t.large), key=lambda x: x[1]))
STATUS_CODE = {"ok": 0, "failed": 1, "unknown": 2}
ROWS_PER_PARTITION = 4_000_000  # keeps one task's hash tables a few hundred MB at most


@dataclass
class Problem:
    """A kind of bad row: what to say, and the condition that finds it (Spark SQL over the table's
    columns and CORRUPT)."""
    what: str
    bad: str
    show: str | None = None  # the column whose value the message quotes

    @property
    def column(self) -> Column:
        return F.expr(self.bad)


def _quoted(name: str) -> str:
    return f"`{name}`"


def problems(table: Table) -> list[Problem]:
    # SQL text, not Column objects: building a Column costs a Py4J round trip per call (col, isNull,
    # &, when, ...), about 2,000 a history for these conditions and read_table's casts, a quarter of
    # a small history's check; a SQL string is parsed by the JVM in one (profiled 2026-11-28).
    corrupt = _quoted(CORRUPT)
    out = [Problem("not valid JSON, or a value of the wrong type", f"{corrupt} IS NOT NULL", CORRUPT)]
    for col in table.columns:
        if not col.nullable:
            out.append(Problem(f"no {col.name}", f"{corrupt} IS NULL AND {_quoted(col.name)} IS NULL"))
        if col.kind == "strings":
            out.append(Problem(f"{col.name} holds a null", f"exists({_quoted(col.name)}, x -> x IS NULL)", col.name))
    if table.statuses:
        allowed = ", ".join(f"'{v}'" for v in table.statuses)
        out.append(Problem(f"status is not one of {', '.join(table.statuses)}",
                           f"status IS NOT NULL AND NOT status IN ({allowed})", "status"))
    if table.name == "inserts":
        out.append(Problem("an acknowledged (ok) insert has no ack_step", "status = 'ok' AND ack_step IS NULL"))
    if table.name == "run":
        out.append(Problem("replication_factor is below 1", "replication_factor < 1", "replication_factor"))
    return out


def read_table(spark: SparkSession, src: TableSource) -> DataFrame:
    """The table's columns, typed as history/schema.py says, plus CORRUPT (the raw text of a JSON line
    Spark could not parse or type; always null for Parquet) and `bad`, the bits of `problems`."""
    t = src.table
    if src.fmt == "parquet":
        schema = T.StructType([T.StructField(c, read_type(src.read_types[c]), True) for c in t.names])
        df = spark.read.schema(schema).parquet(str(src.path)).withColumn(CORRUPT, F.lit(None).cast("string"))
    else:
        # PERMISSIVE with the corrupt-record column: a bad line becomes a row we can count and
        # name, instead of being dropped (DROPMALFORMED) or failing with no line (FAILFAST).
        df = (spark.read.schema(spark_schema(t, CORRUPT)).option("mode", "PERMISSIVE")
              .option("columnNameOfCorruptRecord", CORRUPT).json(str(src.path)))
    # One SQL statement (problems() says why): the typed columns, then `bad` over them.
    typed = ", ".join(f"CAST({_quoted(c.name)} AS {sql_type(c.kind)}) AS {_quoted(c.name)}" for c in t.columns)
    bits = " + ".join(f"CASE WHEN {p.bad} THEN {1 << i} ELSE 0 END" for i, p in enumerate(problems(t)))
    return spark.sql(f"SELECT *, {bits} AS bad FROM (SELECT {typed}, {_quoted(CORRUPT)} FROM {{df}})", df=df)


def refuse(spark: SparkSession, src: TableSource, frame: DataFrame, bad_bits: int) -> BadInput:
    """The BadInput naming the first kind of problem found, with its file and line or value."""
    p = next(p for i, p in enumerate(problems(src.table)) if bad_bits >> i & 1)
    if src.fmt == "json":
        hit = locate.json_line(spark, src, p.column)
        if hit:
            file, line, values = hit
            if p.show == CORRUPT:
                return BadInput(f"{file} line {line}: {_why_corrupt(src.table, values[CORRUPT])}")
            quoted = f": {str(values[p.show])[:80]!r}" if p.show else ""
            return BadInput(f"{file} line {line}: {p.what}{quoted}")
        return BadInput(f"{src.path}: {p.what}")
    hit = locate.parquet_row(frame, p.column)
    file, n, values = hit if hit else (str(src.path), 0, {})
    quoted = f", e.g. {values.get(p.show)!r}" if p.show and hit else ""
    return BadInput(f"{file}: {p.what} ({n} rows{quoted})")


def _why_corrupt(table: Table, text: str) -> str:
    """Why Spark could not read a JSON line: not JSON at all, or which column has the wrong type."""
    import json
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        fits = {"long": lambda v: isinstance(v, int) and not isinstance(v, bool), "string": lambda v: isinstance(v, str),
                 "strings": lambda v: isinstance(v, list) and all(isinstance(x, str) or x is None for x in v)}
        for col in table.columns:
            v = obj.get(col.name)
            if v is not None and not fits[col.kind](v):
                return f"column {col.name} is {json.dumps(v)[:40]}, expected {KIND_NAMES[col.kind]}"
        return f"not valid JSON, or a value Spark cannot read as its column's type: {text[:80]!r}"
    return f"not a JSON object: {text[:80]!r}" if obj is not None else f"not valid JSON: {text[:80]!r}"


def _narrow(name: str, df: DataFrame) -> DataFrame:
    """A large table's rows in the common narrow shape: t (which table), partition_id, row_id, who
    (replica or query), code (insert status), step (ack or snapshot), unknown_insert (a hash of the
    insert_id of an insert of unknown outcome: a fixed-width key), bad. A drop's row has its
    drop_step as `step` and no `who`."""
    null_s, null_l = F.lit(None).cast("string"), F.lit(None).cast("long")
    c = F.col
    if name == "inserts":
        code = F.when(c("status") == "ok", 0).when(c("status") == "failed", 1).when(c("status") == "unknown", 2)
        return df.select(F.lit(INSERT).alias("t"), "partition_id", "row_id", null_s.alias("who"),
                         code.cast("byte").alias("code"), c("ack_step").alias("step"),
                         F.when(c("status") == "unknown", F.xxhash64("insert_id")).alias("unknown_insert"), "bad")
    who, step = {"parts": (c("replica"), c("snapshot_step")), "drops": (null_s, c("drop_step"))}.get(
        name, (c("query_id"), null_l))
    return df.select(F.lit(LARGE[name]).alias("t"), "partition_id", "row_id",
                     who.alias("who"), F.lit(None).cast("byte").alias("code"), step.alias("step"),
                     null_l.alias("unknown_insert"), "bad")


def release(df: DataFrame) -> None:
    """Free a local checkpoint's blocks (DataFrame.unpersist only knows the columnar cache)."""
    try:
        df._jdf.logicalPlan().rdd().unpersist(False)
    except Exception:  # not a checkpointed frame: its cache, if any
        df.unpersist()


def keep(df: DataFrame) -> DataFrame:
    """`df`, computed by the first job that needs it and then kept in the executors as row blocks
    (a local checkpoint: cheaper to build than the columnar cache, and it keeps its partitioning)."""
    return df.localCheckpoint(eager=False)


@dataclass
class History:
    """A history whose small tables are read and checked, and whose large ones are ready to read."""
    folder: str
    sources: dict[str, TableSource]
    final_step: int              # the last assignment snapshot
    replication_factor: int
    replicas: list[str]          # every replica an assignment names, sorted: its bit is its index
    assignment: list[tuple]      # (partition_id, owners, leaving_replica) at the final snapshot
    done_queries: list[tuple]    # (query_id, start_step, partitions_requested) of completed queries,
                                 # by start: a query's bit is its index
    queries: int                 # all queries, completed or not
    partitions: int              # Spark partitions of the large tables' shuffle
    kept: list = field(default_factory=list)  # frames to release when done
    cloning: dict = field(default_factory=dict)  # partition_id -> CLONE target at the final snapshot
    # (snapshot_step, partition_id, replica): who may hold the partition at each snapshot, the
    # spec's Keepers and its Leaver (NoForeignPartsInv, judged at every snapshot;
    # history/semantics.py's keepers_at)
    keepers: list = field(default_factory=list)
    # the same without the migrations' Leavers, the spec's Keepers(asg[p]) alone (MutationsAppliedInv);
    # only read when the history has MUTATE_PARTs (table log_mutations)
    assignment_keepers: list = field(default_factory=list)
    metadata: list = field(default_factory=list)  # (replica, applied, queued, table's) at the last metadata snapshot
    settled_step: int | None = None   # run.settled_step: the end is settled (MigrationsEndProp is judged)
    down_timeout: int | None = None   # run.down_timeout in steps; None: infinite (DownWaitBoundedProp not judged)
    bugs: tuple = ()                  # run.bugs: the broken variants switched on (none when absent)
    # the failed queries a crash failed (queries.failed_by): query_id, replica, start_step, end_step,
    # failed_by, pending_at, for CrashFailsQueriesInv's second half
    crash_failed: list = field(default_factory=list)
    # Rows of the optional `errors` table (step, replica, action, error, message), by step: each is
    # a NoLogicalErrorsInv violation. A small table: a racing run stops retrying a step after a few raises.
    errors: list = field(default_factory=list)
    # (snapshot_step, partition_id, owners) at every snapshot, owners counted once each: RepairOutcomeProp
    # needs no job when no replica was dropped (every count must then be replication_factor)
    owner_counts: list = field(default_factory=list)

    def large(self, spark: SparkSession) -> DataFrame:
        """The large tables' rows (see _narrow), read again at each call."""
        frames = [_narrow(name, read_table(spark, self.sources[name])) for name in LARGE if name in self.sources]
        return reduce(DataFrame.unionByName, frames)

    def close(self) -> None:
        for df in self.kept:
            release(df)
        self.kept.clear()


def _partitions(spark: SparkSession, sources: dict[str, TableSource]) -> int:
    rows = sum(s.rows for s in sources.values() if s.table.large)
    return max(2 * spark.sparkContext.defaultParallelism, math.ceil(rows / ROWS_PER_PARTITION))


def _small(spark: SparkSession, src: TableSource) -> list:
    """Every row of a small table, or BadInput naming its first bad row."""
    t0 = time.perf_counter()
    frame = read_table(spark, src)
    rows = frame.collect()
    bits = 0
    for r in rows:
        bits |= r["bad"]
    log.info("%s: %d rows read and checked in %.2f s", src.path, len(rows), time.perf_counter() - t0)
    if bits:
        raise refuse(spark, src, frame, bits)
    return rows


def load_history(spark: SparkSession, folder: str, partitions: int | None = None) -> History:
    """Find the tables, read and check the small ones; BadInput names the first problem."""
    sources = find_tables(folder)
    run = _small(spark, sources["run"])
    if len(run) != 1:
        raise BadInput(f"{sources['run'].path}: {len(run)} run rows, one expected (one history per folder)")
    assignments = _small(spark, sources["assignments"])
    queries = _small(spark, sources["queries"])
    # empty only when the history shows errors or refused INSERTs (layout.py): no final state then
    final = max((r["snapshot_step"] for r in assignments), default=-1)
    n = partitions or _partitions(spark, sources)
    replicas = {x for r in assignments for x in list(r["owners"]) + [r["leaving_replica"], r["clone_target"]]} - {None}
    assignment = [(r["partition_id"], list(r["owners"]), r["leaving_replica"])
                  for r in assignments if r["snapshot_step"] == final]
    # PR #102244's history names its `:cloning` targets comma-separated.
    cloning = {r["partition_id"]: [x for x in r["clone_target"].split(",") if x]
               for r in assignments if r["snapshot_step"] == final and r["clone_target"]}
    replicas |= {x for targets in cloning.values() for x in targets}
    migrations = _small(spark, sources["migrations"]) if "migrations" in sources else []
    asg_rows = [r.asDict() for r in assignments]
    keepers = _triples(keepers_at(asg_rows, [m.asDict() for m in migrations]))
    mutated = "log_mutations" in sources and sources["log_mutations"].rows
    assignment_keepers = _triples(keepers_at(asg_rows)) if mutated else []
    meta = _small(spark, sources["metadata"]) if "metadata" in sources else []
    last_meta = max((r["snapshot_step"] for r in meta), default=None)
    metadata = [(r["replica"], r["metadata_version"], r["alters_queued"], r["table_metadata_version"])
                for r in meta if r["snapshot_step"] == last_meta]
    errors = sorted(({c: r[c] for c in sources["errors"].table.names} for r in _small(spark, sources["errors"])),
                    key=lambda e: (e["step"], e["replica"], e["action"])) \
        if "errors" in sources and sources["errors"].rows else []   # an empty table (every fixed run's) costs no job
    done = sorted((r["start_step"], r["query_id"], r["partitions_requested"]) for r in queries
                  if r["status"] == "complete")
    return History(folder, sources, final, run[0]["replication_factor"], sorted(replicas), assignment,
                   [(q, start, requested) for start, q, requested in done], len(queries), n, cloning=cloning,
                   metadata=metadata, keepers=keepers, assignment_keepers=assignment_keepers, settled_step=run[0]["settled_step"], errors=errors,
                   down_timeout=run[0]["down_timeout"], bugs=tuple(run[0]["bugs"] or ()),
                   crash_failed=[{k: q[k] for k in ("query_id", "replica", "start_step", "end_step", "failed_by")}
                                 | {"pending_at": list(q["pending_at"] or ())}
                                 for q in queries if q["status"] == "failed" and q["failed_by"] is not None],
                   owner_counts=[(r["snapshot_step"], r["partition_id"], len(set(r["owners"]))) for r in assignments])


def _triples(keepers: dict) -> list[tuple]:
    """(snapshot_step, partition_id, replica), each once, of history/semantics.py's keepers_at."""
    return sorted((step, p, r) for (step, p), who in keepers.items() for r in who)


@contextmanager
def plan_settings(spark: SparkSession, partitions: int):
    """The settings the checker's plan needs, for the time of one check; a caller's session gets its
    own back afterwards."""
    sql = {
        # the shuffles' partitions, sized by the input (the session default fits no input in particular)
        "spark.sql.shuffle.partitions": str(partitions),
        # adaptive execution submits every shuffle of a query as a job of its own (three for a
        # global count), and the plan has nothing for it to adapt
        "spark.sql.adaptive.enabled": "false",
    }
    # a Parquet page whose checksum (written by Spark, and by pyarrow when asked) does not match is
    # an unreadable file, not data: without this, a flipped bit is read as a value
    hadoop = {"parquet.page.verify-checksum.enabled": "true"}
    hconf = spark.sparkContext._jsc.hadoopConfiguration()
    old_sql = {k: spark.conf.get(k, None) for k in sql}
    old_hadoop = {k: hconf.get(k) for k in hadoop}
    for k, v in sql.items():
        spark.conf.set(k, v)
    for k, v in hadoop.items():
        hconf.set(k, v)
    try:
        yield
    finally:
        for k, v in old_sql.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
        for k, v in old_hadoop.items():
            hconf.unset(k) if v is None else hconf.set(k, v)


def check_large(spark: SparkSession, h: History, totals: dict) -> None:
    """Refuse the large tables on what the facts pass found: a bad row (named by file and line), an
    empty table, nothing acknowledged, a parts snapshot after the last assignment snapshot (unless
    the run logged errors)."""
    for name in LARGE:
        if totals["bad"].get(name):
            raise refuse(spark, h.sources[name], read_table(spark, h.sources[name]), totals["bad"][name])
    for name in ("inserts",):   # parts may be empty: replicas that hold nothing (history/schema.py)
        if totals["rows"][name] == 0:  # a Spark folder whose footers said otherwise
            raise BadInput(f"{h.sources[name].path}: {h.sources[name].table.must_have_rows}")
    # Nothing acknowledged leaves no row to prove, unless the servers logged a LOGICAL_ERROR or
    # refused INSERTs: then that is what the history shows (every INSERT raised, or was refused,
    # InsertRefusalsFollowGuardsInv judges whether it might be), not bad input.
    refused = "insert_refusals" in h.sources and h.sources["insert_refusals"].rows
    if totals["acknowledged"] == 0 and not h.errors and not refused:
        raise BadInput(f"{h.sources['inserts'].path}: no insert was acknowledged (status ok): nothing to prove")
    # A run that logged errors may have left its later snapshots with no assignment row (a step that
    # corrupted the znodes: Cluster.assignment_rows logs each and leaves it out): judged on its last
    # snapshot with assignments, its errors NoLogicalErrorsInv's violations. Without errors the
    # tables do not fit together.
    if totals["last_parts"] > h.final_step and not h.errors:
        raise BadInput(f"{h.sources['parts'].path}: a snapshot at step {totals['last_parts']}, after the last "
                       f"assignment snapshot in {h.sources['assignments'].path} (step {h.final_step})")
