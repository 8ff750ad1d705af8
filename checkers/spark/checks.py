"""The invariants (checkers/invariants.py): decided from the facts pass (facts.py) where its sums
are exact or show no suspect, and otherwise by the violating rows, which also give the sample: the
invariant's SQL where the Spark job shares it with DuckDB (`Invariant.spark`), else a DataFrame.

A history that holds costs one pass over its large tables (and the small tables' checks of the
invariants that have them). One that does not is read again for each invariant that fails, to
show its violating rows.

Names are the spec's where the spec has the invariant (spec/rfc/SelectiveReplication.tla).
"""

from __future__ import annotations

import time
from functools import reduce
from typing import Callable

from pyspark.sql import DataFrame, SparkSession, Window, functions as F

from checkers.invariants import DOWN_WAIT_GRACE, INVARIANTS
from checkers.spark import facts
from checkers.spark.facts import KEYS, Facts, bits_of, shift
from checkers.spark.load import INSERT, LAG, LARGE, PART, RETURNED, History, check_large, read_table
from checkers.spark.local_frame import local_frame
from history.schema import PART_NAME

DESCRIPTIONS = {name: inv.meaning for name, inv in INVARIANTS.items()}
TABLE_OF = {code: name for name, code in LARGE.items()}


# --- the violating rows of each invariant (run only when it does not hold) -----------------------
def shared(spark: SparkSession, h: History, name: str, fx: Facts | None = None) -> DataFrame:
    """The violating rows of an invariant the job judges by its SQL (checkers/invariants.py), over
    views of the history: each a frame the job reads anyway, named for the one query."""
    views = Views(spark, h, fx)
    inv = INVARIANTS[name]
    return spark.sql(inv.sql, **{v: views.frame(v) for v in inv.views})


class Views:
    """checkers/invariants.py's views of a history, as frames: the large tables' rows as the facts
    pass reads them (History.large), the small tables' from what load_history collected (inline
    tables: a broadcast of one costs no job), the others read from their files."""

    def __init__(self, spark: SparkSession, h: History, fx: Facts | None = None):
        self.spark, self.h, self.fx = spark, h, fx

    def frame(self, name: str) -> DataFrame:
        return getattr(self, name)() if hasattr(self, name) else read_table(self.spark, self.h.sources[name])

    def _large(self) -> DataFrame:
        return self.h.large(self.spark)

    def final(self) -> DataFrame:
        """(replica, partition_id, row_id): every copy a replica holds at the final snapshot."""
        c = F.col
        return (self._large().filter((c("t") == PART) & (c("step") == self.h.final_step))
                .select(c("who").alias("replica"), *KEYS))

    def held(self) -> DataFrame:
        return self.final().distinct()

    def parts(self) -> DataFrame:
        """(snapshot_step, replica, partition_id) of every part row, at every snapshot."""
        c = F.col
        return self._large().filter(c("t") == PART).select(c("step").alias("snapshot_step"),
                                                           c("who").alias("replica"), "partition_id")

    def query_rows(self) -> DataFrame:
        c = F.col
        return self._large().filter(c("t") == RETURNED).select(c("who").alias("query_id"), *KEYS)

    def queries(self) -> DataFrame:
        """The completed queries (query_id, status): all of `queries` the SQL reads."""
        return local_frame(self.spark, [("query_id", "string"), ("status", "string")],
                           [(q, "complete") for q, _, _ in self.h.done_queries])

    def owners(self) -> DataFrame:
        """(partition_id, replica): the final assignment's owners."""
        return local_frame(self.spark, [("partition_id", "string"), ("replica", "string")],
                           [(p, o) for p, owners, _ in self.h.assignment for o in sorted(set(owners))])

    def dropped(self) -> DataFrame:
        """(partition_id, row_id, dropped_at) of each row a drop removed, from the facts."""
        return self.fx.rows.filter(~self.fx.live()).select(*KEYS, "dropped_at")

    def keepers(self) -> DataFrame:
        return local_frame(self.spark, [("snapshot_step", "bigint"), ("partition_id", "string"),
                                        ("replica", "string")], self.h.keepers)

    def settled_end(self) -> DataFrame:
        return local_frame(self.spark, [("snapshot_step", "bigint")],
                           [(self.h.final_step,)] if self.h.settled_step is not None else [])

    def replica_drops(self) -> DataFrame:
        return self._optional("replica_drops", [("step", "bigint"), ("replica", "string"), ("partition_id", "string")])

    def repairs(self) -> DataFrame:
        return self._optional("repairs", [("step", "bigint"), ("partition_id", "string")])

    def _optional(self, name: str, columns: list[tuple[str, str]]) -> DataFrame:
        """An optional table read from its file, or, absent (an older history), empty."""
        if name in self.h.sources:
            return read_table(self.spark, self.h.sources[name])
        return local_frame(self.spark, columns, [])

    def run(self) -> DataFrame:
        h = self.h
        return local_frame(self.spark, [("replication_factor", "bigint"), ("bugs", "array<string>"),
                                        ("settled_step", "bigint"), ("down_timeout", "bigint")],
                           [(h.replication_factor, list(h.bugs), h.settled_step, h.down_timeout)])


class Violations(Views):
    """The violating rows of an invariant the facts pass found suspects of (`rows`): by its SQL, or
    by a DataFrame of the facts (methods named for the invariant)."""

    def __init__(self, spark: SparkSession, fx: Facts):
        super().__init__(spark, fx.h, fx)

    def rows(self, name: str) -> DataFrame:
        return shared(self.spark, self.h, name, self.fx) if INVARIANTS[name].spark else getattr(self, name)()

    def returned(self) -> DataFrame:
        """(query_id, partition_id, row_id) of every row a completed query returned."""
        done = local_frame(self.spark, [("query_id", "string")], [(q,) for q, _, _ in self.h.done_queries])
        return (self._large().filter(F.col("t") == RETURNED).select(F.col("who").alias("query_id"), *KEYS)
                .join(F.broadcast(done), "query_id", "left_semi"))

    def replicas_in(self, masks) -> F.Column:
        """The names of the replicas whose bits are set in `masks` (one column per word)."""
        names = self.fx.names

        def word_names(w: int, m):  # a closure, not default arguments: Spark passes a lambda's
            return F.transform(      # second parameter the element's index
                F.filter(F.sequence(F.lit(0), F.lit(facts.WORD - 1)), lambda b: shift("shiftright", m, b).bitwiseAND(1) == 1),
                lambda b: F.element_at(names, b + (w * facts.WORD + 1)))

        per_word = [word_names(w, m) for w, m in zip(self.fx.words, masks)]
        return F.concat(*per_word) if len(per_word) > 1 else per_word[0]

    def OwnersCompleteInv(self) -> DataFrame:
        """(partition_id, replica, row_id): an owner lacking an acknowledged row (replica null when
        the partition has no owner in the final assignment)."""
        fx, c = self.fx, F.col
        acked = fx.with_partitions(fx.rows.filter((c("n_ok") > 0) & fx.live()))
        missing, no_owner = fx.missing(), fx.no_owner()
        lacking = acked.filter(reduce(lambda a, b: a | b, [m != 0 for m in missing], no_owner))
        return lacking.select("partition_id", F.explode(F.when(no_owner, F.array(F.lit(None).cast("string")))
                                                        .otherwise(self.replicas_in(missing))).alias("replica"), "row_id")

    def NoPhantomRowsInv(self) -> DataFrame:
        """(where, who, partition_id, row_id): a row held or returned that no ok or unknown insert wrote."""
        c, h = F.col, self.h
        rows = self._large()
        written = rows.filter((c("t") == INSERT) & c("code").isin(0, 2)).select(*KEYS)
        there = rows.filter(((c("t") == PART) & (c("step") == h.final_step)) | (c("t") == RETURNED))
        return (there.join(written, KEYS, "left_anti")
                .select(F.when(c("t") == PART, "replica").otherwise("query").alias("where"), c("who"), *KEYS).distinct())

    def QueryNoMissingInv(self) -> DataFrame:
        """(query_id, partition_id, row_id): a row acknowledged before a completed query started, in a
        partition it asked for (every partition with acknowledged rows when it asked for all), not
        removed by a drop before it started, that the query did not return and was not excused as
        replication lag (query_lag)."""
        h, fx = self.h, self.fx
        asked = local_frame(self.spark, [("partition_id", "string"), ("query_id", "string"), ("start_step", "bigint")],
                            [(p, q, start) for q, start, requested in h.done_queries if requested is not None
                             for p in sorted(set(requested))])
        whole = local_frame(self.spark, [("query_id", "string"), ("start_step", "bigint")],
                            [(q, start) for q, start, requested in h.done_queries if requested is None])
        acked = fx.rows.filter(F.col("n_ok") > 0).select(*KEYS, "ack_step", "dropped_at")
        owed = (acked.join(F.broadcast(asked), "partition_id").unionByName(acked.crossJoin(F.broadcast(whole)))
                .filter((F.col("ack_step") < F.col("start_step"))
                        # a row a drop removed before the query started is owed to it no more
                        & ~F.coalesce(F.col("dropped_at") < F.col("start_step"), F.lit(False)))
                .select("query_id", *KEYS))
        excused = self._large().filter(F.col("t") == LAG).select(F.col("who").alias("query_id"), *KEYS)
        return (owed.join(self.returned().distinct(), ["query_id", *KEYS], "left_anti")
                .join(excused.distinct(), ["query_id", *KEYS], "left_anti"))


Progress = Callable[[str, dict, float], None]


def _sample(df: DataFrame, n: int | None, sample: int) -> tuple[int, list[dict]]:
    if n is None:
        n = df.count()
    return n, ([r.asDict(recursive=True) for r in df.limit(sample).collect()] if n else [])


def totals_of(groups: list[dict]) -> dict:
    t = {"rows": {TABLE_OF[k]: 0 for k in TABLE_OF}, "bad": {TABLE_OF[k]: 0 for k in TABLE_OF}}
    for g in groups:
        for k, name in TABLE_OF.items():
            t["bad"][name] |= g[f"bad{k}"] or 0
        t["rows"]["inserts"] += g["inserts"] or 0
        t["rows"]["parts"] += g["parts"] or 0
        t["rows"]["query_rows"] += g["returned"] or 0
        t["rows"]["query_lag"] += g["lagging"] or 0
        t["rows"]["drops"] += g["dropped"] or 0
    t["acknowledged"] = sum(g["acknowledged"] or 0 for g in groups)
    t["unknown"] = sum(g["unknown"] or 0 for g in groups)
    t["last_parts"] = max((g["last_part"] for g in groups if g["last_part"] is not None), default=-1)
    return t


def logical_errors(h: History, sample: int) -> dict:
    """NoLogicalErrorsInv: every row of the `errors` table is a violation (checkers/oracle.py's
    logical_errors), read with the small tables."""
    return {"holds": not h.errors, "violations": len(h.errors), "sample": h.errors[:sample],
            "description": DESCRIPTIONS["NoLogicalErrorsInv"], "seconds": 0.0}


def by_sql(spark: SparkSession, h: History, name: str, sample: int, judged: bool) -> dict:
    """An invariant the job judges by its SQL alone (checkers/invariants.py), when `judged`: its
    tables are there (no table, no job)."""
    t1 = time.perf_counter()
    n, got = _sample(shared(spark, h, name), None, sample) if judged else (0, [])
    return {"holds": n == 0, "violations": n, "sample": got, "description": DESCRIPTIONS[name],
            "seconds": round(time.perf_counter() - t1, 2)}


def _have_rows(h: History, *tables: str) -> bool:
    return all(t in h.sources and h.sources[t].rows for t in tables)


def refusals_off_guard(spark: SparkSession, h: History, sample: int) -> dict:
    """InsertRefusalsFollowGuardsInv (history/semantics.py's write_path_open): a refused try whose
    sub-block's write path was open on both views. No table, no job."""
    t1 = time.perf_counter()
    n, got = 0, []
    if "insert_refusals" in h.sources and h.sources["insert_refusals"].rows:
        c = F.col

        def owners(name: str) -> F.Column:
            return F.coalesce(c(name), F.array().cast("array<string>"))
        v = c("keeper_version_before")
        open_ = (v.isNotNull() & (c("keeper_version_after") == v)
                 & (c("receiver_map_version_before") == v) & (c("receiver_map_version_after") == v)
                 & (F.size(F.array_intersect(owners("writable_owners_before"), owners("stale_owners_before"))) == 0)
                 & (F.size(F.array_intersect(owners("writable_owners_after"), owners("stale_owners_after"))) == 0)
                 & (F.size(F.array_intersect(owners("writable_owners_before"), owners("writable_owners_after"))) > 0))
        # or an unassigned partition's allocation enabled on both views (semantics.allocation_open)
        rf = F.lit(h.replication_factor)
        allocation = (c("keeper_version_before").isNull() & c("keeper_version_after").isNull()
                      & (c("receiver_writable_before") == 1) & (c("receiver_writable_after") == 1)
                      & (c("active_replicas_before") >= rf) & (c("active_replicas_after") >= rf))
        off = (read_table(spark, h.sources["insert_refusals"])
               .filter(F.coalesce(open_, F.lit(False)) | F.coalesce(allocation, F.lit(False)))
               .select("step", "block_id", "partition_id", "receiver", "error", "reason", "keeper_version_before",
                       "writable_owners_after"))
        n, got = _sample(off, None, sample)
    return {"holds": n == 0, "violations": n, "sample": got,
            "description": DESCRIPTIONS["InsertRefusalsFollowGuardsInv"], "seconds": round(time.perf_counter() - t1, 2)}


def _part_fields(name: F.Column, prefix: str) -> list[F.Column]:
    """A part name's partition, min and max block and mutation (0 when none), as columns."""
    def num(i: int) -> F.Column:
        return F.coalesce(F.nullif(F.regexp_extract(name, PART_NAME, i), F.lit("")), F.lit("0")).cast("long")
    return [num(2).alias(f"{prefix}min"), num(3).alias(f"{prefix}max"), num(5).alias(f"{prefix}mut")]


def mutations_applied(spark: SparkSession, h: History, sample: int) -> dict:
    """MutationsAppliedInv (checkers/oracle.py's mutations_not_applied), at every snapshot: a part
    a keeper (the assignment's: owners, CLONE target, leaving replica) holds whose data version
    (mutation, else min block) is below the highest mutation of the MUTATE_PARTs of log_mutations
    in its partition below the keeper's log_pointer that overlap it, with no MUTATE_PART of the
    partition queued and no queued GET_PART covering it mutated at least as far. One violation
    per (snapshot, replica, part). No MUTATE_PART in the log, no job."""
    t1 = time.perf_counter()
    n, got = 0, []
    if "log_mutations" in h.sources and h.sources["log_mutations"].rows and "metadata" in h.sources:
        c = F.col
        muts = read_table(spark, h.sources["log_mutations"]).select(
            c("partition_id"), c("log_index"), *_part_fields(c("new_part_name"), "m_"))
        ptr = (read_table(spark, h.sources["metadata"]).filter(c("log_pointer").isNotNull())
               .select("snapshot_step", "replica", "log_pointer"))
        keepers = local_frame(spark, [("snapshot_step", "long"), ("partition_id", "string"), ("replica", "string")],
                              h.assignment_keepers)
        parts = (read_table(spark, h.sources["parts"])
                 .select("snapshot_step", "replica", "partition_id", "part_name").distinct()
                 .select("*", *_part_fields(c("part_name"), "")))
        owed = (parts.join(keepers, ["snapshot_step", "partition_id", "replica"], "left_semi")
                .join(ptr, ["snapshot_step", "replica"])
                .join(muts, "partition_id")
                .filter((c("log_index") < c("log_pointer")) & (c("m_min") <= c("max")) & (c("min") <= c("m_max")))
                .groupBy("snapshot_step", "replica", "partition_id", "part_name", "min", "max", "mut", "log_pointer")
                .agg(F.max("m_mut").alias("owed"))
                .filter(F.when(c("mut") > 0, c("mut")).otherwise(c("min")) < c("owed")))
        queued = read_table(spark, h.sources["queued_mutations"]) if "queued_mutations" in h.sources else None
        if queued is not None:
            pending = queued.filter(c("entry_type") == "MUTATE_PART").select("snapshot_step", "replica", "partition_id")
            gets = (queued.filter(c("entry_type") == "GET_PART")
                    .select("snapshot_step", "replica", "partition_id", *_part_fields(c("new_part_name"), "g_")))
            covered = (owed.join(gets, ["snapshot_step", "replica", "partition_id"])
                       .filter((c("g_min") <= c("min")) & (c("max") <= c("g_max")) & (c("g_mut") >= c("owed")))
                       .select("snapshot_step", "replica", "part_name"))
            owed = (owed.join(pending, ["snapshot_step", "replica", "partition_id"], "left_anti")
                    .join(covered, ["snapshot_step", "replica", "part_name"], "left_anti"))
        off = owed.select("snapshot_step", "replica", "part_name", "owed", "log_pointer").orderBy("snapshot_step", "replica")
        n, got = _sample(off, None, sample)
    return {"holds": n == 0, "violations": n, "sample": got, "description": DESCRIPTIONS["MutationsAppliedInv"],
            "seconds": round(time.perf_counter() - t1, 2)}


def crash_fails_queries(spark: SparkSession, h: History, sample: int) -> dict:
    """CrashFailsQueriesInv (checkers/oracle.py's queries_across_crashes): a query answered
    complete though its receiver crashed strictly between its start and end steps, or failed by
    the crash of a replica (failed_by) that was neither its receiver nor among pending_at, the
    readers of its unread partitions (spec ReplicaCrash fails exactly the queries the replica
    served). One violation per query. No crashes table, no job."""
    t1 = time.perf_counter()
    n, got = 0, []
    if all(t in h.sources and h.sources[t].rows for t in ("crashes", "queries")):
        c = F.col
        crashes = read_table(spark, h.sources["crashes"]).select("replica", c("step").alias("crash_step"))
        complete = (read_table(spark, h.sources["queries"]).filter(c("status") == "complete")
                    .select("query_id", "replica", "start_step", "end_step"))
        off = (complete.join(crashes, "replica")
               .filter((c("crash_step") > c("start_step")) & (c("crash_step") < c("end_step")))
               .groupBy("query_id", "replica", "start_step", "end_step").agg(F.min("crash_step").alias("crash_step"))
               .orderBy("query_id"))
        n, got = _sample(off, None, sample)
    # The other half on the queries rows load_history collected (a small table): no job
    unserved = [q for q in h.crash_failed if q["failed_by"] != q["replica"] and q["failed_by"] not in (q["pending_at"] or ())]
    n, got = n + len(unserved), (got + unserved)[:sample]
    return {"holds": n == 0, "violations": n, "sample": got, "description": DESCRIPTIONS["CrashFailsQueriesInv"],
            "seconds": round(time.perf_counter() - t1, 2)}


def _only_copies_down(spark: SparkSession, h: History, switched: list[dict]) -> set[tuple[str, int]]:
    """(partition_id, snapshot_step) of the switched overdue waits at which a row of the partition
    acknowledged by the snapshot's step and not dropped by then is held by no running replica
    (checkers/oracle.py only_copies_down): the down source may hold its only copy."""
    if not switched or not all(t in h.sources and h.sources[t].rows for t in ("inserts", "parts")):
        return set()
    c = F.col
    asked = local_frame(spark, [("partition_id", "string"), ("snapshot_step", "long")],
                        sorted({(r["partition_id"], r["snapshot_step"]) for r in switched}))
    steps = sorted({r["snapshot_step"] for r in switched})
    owed = (read_table(spark, h.sources["inserts"]).filter(c("status") == "ok")
            .select("partition_id", "row_id", "ack_step")
            .join(F.broadcast(asked), "partition_id").filter(c("ack_step") <= c("snapshot_step")))
    if "drops" in h.sources and h.sources["drops"].rows:
        drops = read_table(spark, h.sources["drops"]).select("partition_id", "row_id", "drop_step")
        owed = owed.join(drops, (owed.partition_id == drops.partition_id) & (owed.row_id == drops.row_id)
                         & (drops.drop_step <= owed.snapshot_step), "left_anti")
    held = (read_table(spark, h.sources["parts"]).filter(c("snapshot_step").isin(steps))
            .select("snapshot_step", "partition_id", "row_id"))
    alone = owed.join(held, ["snapshot_step", "partition_id", "row_id"], "left_anti")
    return {(r["partition_id"], r["snapshot_step"]) for r in alone.select("partition_id", "snapshot_step").distinct().collect()}


def down_wait_bounded(spark: SparkSession, h: History, sample: int) -> dict:
    """DownWaitBoundedProp (checkers/oracle.py's down_waits_too_long): per partition, its
    migration snapshots in step order; one waits on a down replica when its Leaver (switched:
    src, cancelling: dst; only once maps_behind is an empty list) or, in CLONE, its coordinator
    is not among the snapshot's running replicas (metadata rows; a snapshot with none shows no
    one down). A run of consecutive waiting snapshots with the same state, src, dst and replica
    is one wait, from its first snapshot; each snapshot more than down_timeout + DOWN_WAIT_GRACE
    steps after it is a violation, unless a switched one's down source may hold the only copy of a
    part (_only_copies_down, F23's cost). Not judged without run.down_timeout, migrations or metadata."""
    t1 = time.perf_counter()
    n, got = 0, []
    if h.down_timeout is not None and all(t in h.sources and h.sources[t].rows for t in ("migrations", "metadata")):
        c = F.col
        limit = h.down_timeout + DOWN_WAIT_GRACE
        running = read_table(spark, h.sources["metadata"]).select("snapshot_step", c("replica").alias("who")).distinct()
        observed = running.select("snapshot_step").distinct().withColumn("observed", F.lit(True))
        maps_seen = c("maps_behind").isNotNull() & (F.size("maps_behind") == 0)
        who = (F.when((c("state") == "switched") & maps_seen, c("src"))
               .when((c("state") == "cancelling") & maps_seen, c("dst"))
               .when(c("state") == "clone", c("coordinator")))
        rows = (read_table(spark, h.sources["migrations"])
                .select("partition_id", "snapshot_step", "state", "src", "dst", who.alias("who"))
                .join(F.broadcast(observed), "snapshot_step", "left")
                .join(F.broadcast(running.withColumn("up", F.lit(True))), ["snapshot_step", "who"], "left")
                .withColumn("waits", c("who").isNotNull() & c("observed").isNotNull() & c("up").isNull()))
        order = Window.partitionBy("partition_id").orderBy("snapshot_step")

        def prev(x: str):
            return F.lag(x).over(order)
        same = reduce(lambda a, b: a & b, [prev(x).eqNullSafe(c(x)) for x in ("state", "src", "dst", "who")],
                      F.coalesce(prev("waits"), F.lit(False)) & c("waits"))
        waits = (rows.withColumn("wait", F.sum(F.when(same, 0).otherwise(1)).over(
                     order.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
                 .withColumn("since", F.min("snapshot_step").over(Window.partitionBy("partition_id", "wait")))
                 .filter(c("waits") & (c("snapshot_step") - c("since") > limit))
                 .select("partition_id", "snapshot_step", "state", "src", "dst", "who", "since"))
        # Overdue waits are few (snapshots x partitions at most): collected, and the switched ones
        # whose down source may hold an only copy (F23's cost) excused on the few snapshots they name.
        overdue = [r.asDict() for r in waits.orderBy("partition_id", "snapshot_step").collect()]
        excused = _only_copies_down(spark, h, [r for r in overdue if r["state"] == "switched"])
        kept = [r for r in overdue if (r["partition_id"], r["snapshot_step"]) not in excused]
        n, got = len(kept), kept[:sample]
    return {"holds": n == 0, "violations": n, "sample": got, "description": DESCRIPTIONS["DownWaitBoundedProp"],
            "seconds": round(time.perf_counter() - t1, 2)}


def check(spark: SparkSession, h: History, sample: int = 5, progress: Progress | None = None) -> tuple[dict, dict]:
    """(report, counts): every invariant as {holds, violations, sample, description, seconds}, and
    the input's row counts. `progress` is called after the pass and as each invariant is decided."""
    t0 = time.perf_counter()
    fx = Facts(spark, h)
    groups = fx.summary()
    totals = totals_of(groups)
    check_large(spark, h, totals)  # nothing is said about a history until all of it is known good
    counts = {"inserted_rows": totals["rows"]["inserts"], "acknowledged_rows": totals["acknowledged"],
              "unknown_rows": totals["unknown"], "part_rows": totals["rows"]["parts"],
              "dropped_rows": totals["rows"]["drops"],
              "returned_rows": totals["rows"]["query_rows"], "queries": h.queries,
              "complete_queries": len(h.done_queries), "partitions": len({g["partition_id"] for g in groups})}
    if progress:
        progress("one pass over the large tables", {"counts": counts}, time.perf_counter() - t0)

    report, rows = {}, Violations(spark, fx)

    def decide(name: str, n: int | None):
        """n: the violation count when the pass gave it exactly, None to count the rows."""
        t1 = time.perf_counter()
        n, got = (0, []) if n == 0 else _sample(rows.rows(name), n, sample)
        record(name, {"holds": n == 0, "violations": n, "sample": got, "description": DESCRIPTIONS[name],
                      "seconds": round(time.perf_counter() - t1, 2)})

    def record(name: str, result: dict) -> None:
        report[name] = result
        if progress:
            progress(name, result, result["seconds"])

    s = lambda key: sum(g.get(key) or 0 for g in groups)  # noqa: E731
    decide("OwnersCompleteInv", s("lost"))
    decide("NoDuplicateRowsInv", None if s("doubled") else 0)

    # ReplicationFactorInv: per partition, owners missing none of its acknowledged rows.
    t1 = time.perf_counter()
    per_partition: dict[str, dict] = {}
    for g in groups:
        p = per_partition.setdefault(g["partition_id"], {"acked": 0, "miss": [0] * len(fx.words)})
        p["acked"] += g["acked_rows"] or 0
        for w in fx.words:
            p["miss"][w] |= g[f"miss{w}"] or 0
    # The spec's `Cardinality(asg[p].owners) = RF`: a partition with more owners than RF (PR-F3)
    # breaks it as one with fewer does; a CLONE target or a leaving replica is not an owner.
    short = []
    n_owners = {pid: len(set(owners)) for pid, owners, _ in h.assignment}
    for pid in sorted(set(per_partition) | set(n_owners)):
        p = per_partition.get(pid, {"acked": 0, "miss": [0] * len(fx.words)})
        own = fx.own.get(pid, [0] * len(fx.words))
        complete = sum(bin(o & ~m).count("1") for o, m in zip(own, p["miss"]))
        owners = n_owners.get(pid, 0)
        if (p["acked"] and complete < h.replication_factor) or (pid in n_owners and owners != h.replication_factor):
            short.append({"partition_id": pid, "owners": owners, "complete_copies": complete,
                          "rf": h.replication_factor})
    record("ReplicationFactorInv", {"holds": not short, "violations": len(short), "sample": short[:sample],
                                    "description": DESCRIPTIONS["ReplicationFactorInv"],
                                    "seconds": round(time.perf_counter() - t1, 2)})

    # NoForeignPartsInv at every snapshot: the pass counted the part rows no keeper of their
    # snapshot holds; the (snapshot, replica, partition) triples are counted only when there are some.
    decide("NoForeignPartsInv", None if s("foreign") else 0)

    # AmbiguousInsertAtomicInv: owners on which some, not all, rows of an insert are present.
    partial = sum(len(bits_of([(g[f"some{w}"] or 0) & ~(g[f"every{w}"] or 0) for w in fx.words]))
                  for g in groups if g["unknown_insert"] is not None)
    decide("AmbiguousInsertAtomicInv", None if partial else 0)  # an insert-id hash shared by two inserts over-counts
    decide("NoPhantomRowsInv", None if s("phantom") else 0)
    decide("DropsAppliedInv", None if s("drop_held") else 0)

    # GlobalEntriesAppliedInv: one row per replica, read with the small tables
    behind = [{"replica": r, "metadata_version": v, "alters_queued": q, "table_metadata_version": want}
              for r, v, q, want in h.metadata if v + q != want]
    record("GlobalEntriesAppliedInv", {"holds": not behind, "violations": len(behind), "sample": behind[:sample],
                                       "description": DESCRIPTIONS["GlobalEntriesAppliedInv"], "seconds": 0.0})
    # MigrationsEndProp, a liveness property, is judged on a finite history's settled end only
    # (run.settled_step): a migration still in flight then will never end
    record("MigrationsEndProp", by_sql(spark, h, "MigrationsEndProp", sample,
                                       h.settled_step is not None and "migrations" in h.sources))
    record("NoLogicalErrorsInv", logical_errors(h, sample))
    record("CommandsFollowGuardsInv", by_sql(spark, h, "CommandsFollowGuardsInv", sample, _have_rows(h, "commands")))
    record("CancelHonouredInv", by_sql(spark, h, "CancelHonouredInv", sample, _have_rows(h, "commands", "migrations")))
    record("MigrationOutcomeInv", by_sql(spark, h, "MigrationOutcomeInv", sample,
                                         _have_rows(h, "assignments", "migrations")))
    record("CrashFailsQueriesInv", crash_fails_queries(spark, h, sample))
    # RepairOutcomeProp at every snapshot: with no replica dropped and nothing repaired, every owner
    # count the small tables gave must be RF (no job); otherwise, or to count and sample, its SQL
    off_rf = any(n != h.replication_factor for _, _, n in h.owner_counts)
    record("RepairOutcomeProp", by_sql(spark, h, "RepairOutcomeProp", sample,
                                       off_rf or _have_rows(h, "replica_drops") or _have_rows(h, "repairs")))
    record("DownWaitBoundedProp", down_wait_bounded(spark, h, sample))
    record("InsertRefusalsFollowGuardsInv", refusals_off_guard(spark, h, sample))
    record("MutationsAppliedInv", mutations_applied(spark, h, sample))
    if fx.qwords is None:  # too many queries for masks: the joins decide
        decide("QueryNoDuplicateInv", None)
        decide("QueryNoMissingInv", None)
    else:
        decide("QueryNoDuplicateInv", None if s("returned_twice") else 0)
        decide("QueryNoMissingInv", s("query_missed"))
    return report, counts

