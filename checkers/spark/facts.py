"""One pass over the large tables that decides a history that holds: the per-row facts, summed per
partition.

`rows` (facts) aggregates inserts, parts and query rows into one row per (partition_id, row_id):
how many inserts of it were acknowledged or of unknown outcome, its earliest acknowledgement, a
bitmask of the replicas holding it at the final snapshot and how many copies they hold, a bitmask
of the completed queries that returned it and how many times, and the problem bits of its input
rows. Fixed-width aggregates only, so Spark keeps them in its fast hash aggregation; the large
tables are read once and shuffled once, by (partition_id, row_id), on the way.

The same job sums the facts per partition (and per insert of unknown outcome): one row each
reaches the driver. From those sums the checker refuses bad input, and decides OwnersCompleteInv,
ReplicationFactorInv and QueryNoMissingInv exactly; for the others it counts suspect rows (for
NoForeignPartsInv, part rows of any snapshot that no keeper of that snapshot holds), zero on a
history that holds.
`rows` is a plan, not kept: an invariant that does not hold computes it again for its violating rows.

Bits: a replica's is its index in History.replicas, a completed query's its index in
History.done_queries (ordered by start, so "the queries that started after a row was
acknowledged" is every bit from some index up). Masks are split into 63-bit words.
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession, functions as F

from checkers.spark.load import DROP, INSERT, LAG, PART, RETURNED, History
from checkers.spark.local_frame import local_frame

WORD = 63                 # bits per mask word (a signed long, sign bit unused)
MAX_QUERY_WORDS = 4       # more completed queries than 4 x 63: the query invariants join instead
KEYS = ["partition_id", "row_id"]
BAD_KINDS = (INSERT, PART, RETURNED, LAG, DROP)   # the large tables whose rows carry problem bits


def zero() -> Column:
    return F.lit(0).cast("long")


def shift(name: str, value: Column, bits: Column) -> Column:
    # pyspark's shiftleft/shiftright take a constant shift; the SQL functions take a column
    return F.call_function(name, value, bits.cast("int"))


def bit(index: Column, word: int) -> Column:
    """The bit of `index` in mask word `word` (null when it is in another word, or index is null)."""
    return F.when((index / WORD).cast("int") == word, shift("shiftleft", F.lit(1).cast("long"), index % WORD))


def popcount(cols: list[Column]) -> Column:
    return reduce(lambda a, b: a + b, [F.bit_count(c) for c in cols])


def words_of(n: int) -> range:
    return range(max(1, -(-n // WORD)))


def mask(indexes, words: range) -> list[int]:
    m = [0] * len(words)
    for i in indexes:
        m[i // WORD] |= 1 << (i % WORD)
    return m


def bits_of(masks: list[int]) -> list[int]:
    return [w * WORD + b for w, m in enumerate(masks) for b in range(WORD) if (m or 0) >> b & 1]


def count_at_most(x: Column, sorted_values: list[int]) -> Column:
    """How many of `sorted_values` are <= x: a balanced tree of comparisons (log n deep)."""
    if not sorted_values:
        return F.lit(0)
    mid = len(sorted_values) // 2
    return F.when(x < sorted_values[mid], count_at_most(x, sorted_values[:mid])).otherwise(
        count_at_most(x, sorted_values[mid + 1:]) + (mid + 1))


def from_bit(first: Column, word: int) -> Column:
    """Mask word `word` with every bit of index >= `first` set."""
    full = F.lit((1 << WORD) - 1)
    lo = first - word * WORD
    return (F.when(lo <= 0, full).when(lo >= WORD, zero())
            .otherwise(full - (shift("shiftleft", F.lit(1).cast("long"), lo) - 1)))


class Facts:
    def __init__(self, spark: SparkSession, h: History):
        self.h = h
        self.words = words_of(len(h.replicas))
        self.index = {r: i for i, r in enumerate(h.replicas)}
        self.qwords = words_of(len(h.done_queries)) if len(h.done_queries) <= MAX_QUERY_WORDS * WORD else None
        self.names = F.array(*[F.lit(r) for r in h.replicas]) if h.replicas else F.array().cast("array<string>")
        c, t = F.col, F.col("t")

        replicas = local_frame(spark, [("replica", "string"), ("idx", "int")], list(self.index.items()))
        rows = h.large(spark).join(F.broadcast(replicas), (t == PART) & (c("who") == c("replica")), "left")
        # NoForeignPartsInv at every snapshot: a part row whose (snapshot, partition, replica) no
        # keeper triple names is a foreign copy. A broadcast hash join on the rows already read
        # (the triples are snapshots x partitions x keepers, small), so no other pass.
        keepers = local_frame(spark, [("k_step", "bigint"), ("k_partition", "string"), ("k_replica", "string")],
                              h.keepers).withColumn("kept", F.lit(True))
        rows = rows.join(F.broadcast(keepers), (t == PART) & (c("step") == c("k_step"))
                         & (c("partition_id") == c("k_partition")) & (c("who") == c("k_replica")), "left")
        qbits = []
        if self.qwords is not None:
            queries = local_frame(spark, [("query_id", "string"), ("qidx", "int")],
                                  [(q, i) for i, (q, _, _) in enumerate(h.done_queries)])
            rows = rows.join(F.broadcast(queries), t.isin(RETURNED, LAG) & (c("who") == c("query_id")), "left")
            qbits = [F.coalesce(F.bit_or(F.when(t == RETURNED, bit(c("qidx"), w))), zero()).alias(f"ret{w}")
                     for w in self.qwords]
            # the completed queries that were still receiving the row when they read it (query_lag)
            qbits += [F.coalesce(F.bit_or(F.when(t == LAG, bit(c("qidx"), w))), zero()).alias(f"lag{w}")
                      for w in self.qwords]
        final = (t == PART) & (c("step") == self.h.final_step)  # older snapshots are history, not state
        ok, unknown = (t == INSERT) & (c("code") == 0), (t == INSERT) & (c("code") == 2)
        # Shuffled by the key before it is aggregated, so that the one aggregation runs after the
        # shuffle: a partial aggregation before it would merge little (a row's insert, its parts and
        # its query rows are read by different tasks: 3.3M rows in, 2.3M out at 1M inserted rows)
        # and would shuffle ~30 aggregation buffers a row instead of the 11 narrow columns. Measured
        # in one session after a 10k check: 1M 6.5-6.9 s -> 5.7-5.9 s, 10M 35.1-35.6 s -> 25.5-27.8 s.
        rows = rows.repartition(h.partitions, *KEYS)
        self.rows = rows.groupBy(*KEYS).agg(
            F.count(F.when(t == INSERT, 1)).alias("n_inserts"),
            F.count(F.when(ok, 1)).alias("n_ok"),
            F.count(F.when(unknown, 1)).alias("n_unknown"),
            F.max(F.when(unknown, c("unknown_insert"))).alias("unknown_insert"),
            F.min(F.when(ok, c("step"))).alias("ack_step"),
            F.count(F.when(t == PART, 1)).alias("n_parts"),
            F.max(F.when(t == PART, c("step"))).alias("last_part"),
            F.count(F.when(final, 1)).alias("n_held"),
            F.count(F.when(final & c("idx").isNull(), 1)).alias("n_unnamed"),
            F.count(F.when((t == PART) & c("kept").isNull(), 1)).alias("n_foreign"),
            *[F.coalesce(F.bit_or(F.when(final, bit(c("idx"), w))), zero()).alias(f"held{w}") for w in self.words],
            F.count(F.when(t == RETURNED, 1)).alias("n_returned"),
            F.count(F.when((t == RETURNED) & c("qidx").isNotNull(), 1) if qbits else F.lit(None)).alias("n_returned_done"),
            F.count(F.when(t == LAG, 1)).alias("n_lag"),
            F.count(F.when(t == DROP, 1)).alias("n_drop"),
            F.max(F.when(t == DROP, c("step"))).alias("dropped_at"),
            *qbits,
            *[F.coalesce(F.bit_or(F.when(t == k, c("bad"))), F.lit(0)).alias(f"bad{k}") for k in BAD_KINDS])
        # Not kept (localCheckpoint) for the violating rows: keeping one row per (partition, row)
        # cost every check 10-18% of its CPU at 1M rows, and GBs of heap at 10M, while only a
        # history that fails OwnersCompleteInv or QueryNoMissingInv reads `rows` again (one more
        # pass, the same rows: the verdict and its count come from the summary either way).

        # Per partition of the final assignment: owner masks, the owners as (idx, replica), and
        # the completed queries that asked for it. One row each.
        self.own = {}
        qwords = self.qwords or range(0)  # no query masks: the joins decide the query invariants
        whole = [i for i, (_, _, requested) in enumerate(h.done_queries) if requested is None]
        self.whole = mask(whole, qwords) if self.qwords else []
        table = []
        for pid, owners, leaving in h.assignment:
            self.own[pid] = mask([self.index[r] for r in owners], self.words)
            asked = [i for i, (_, _, requested) in enumerate(h.done_queries) if requested is None or pid in requested]
            table.append((pid, *self.own[pid], *(mask(asked, qwords) if self.qwords else []),
                          [{"idx": self.index[r], "replica": r} for r in sorted(set(owners))]))
        self.partitions = local_frame(spark, [("partition_id", "string")]
                                      + [(f"own{w}", "bigint") for w in self.words]
                                      + [(f"asked{w}", "bigint") for w in (self.qwords or [])]
                                      + [("owner_list", "array<struct<idx:int,replica:string>>")], table)

    def with_partitions(self, df: DataFrame) -> DataFrame:
        """`df` with its partition's masks (null for a partition the final assignment lacks)."""
        return df.join(F.broadcast(self.partitions), "partition_id", "left")

    # --- conditions over facts joined with their partition -----------------------------------
    def missing(self) -> list[Column]:
        """Owners lacking the row."""
        return [F.coalesce(F.col(f"own{w}"), zero()).bitwiseAND(F.bitwise_not(F.col(f"held{w}"))) for w in self.words]

    def no_owner(self) -> Column:
        return F.col("own0").isNull() | (popcount([F.col(f"own{w}") for w in self.words]) == 0)

    def doubled(self) -> Column:
        """Some replica may hold the row twice (an unnamed holder's copies cannot be told apart)."""
        named = F.col("n_held") - F.col("n_unnamed")
        return (named > popcount([F.col(f"held{w}") for w in self.words])) | (F.col("n_unnamed") > 1)

    def phantom(self) -> Column:
        return (F.col("n_ok") + F.col("n_unknown") == 0) & (F.col("n_held") + F.col("n_returned") > 0)

    def live(self) -> Column:
        """No DROP PARTITION removed the row."""
        return F.col("dropped_at").isNull()

    def owed_missing(self) -> Column:
        """Completed queries that owed the row (it was acknowledged before they started and not
        dropped before they started, in a partition they asked for, and it was not in flight to
        them: query_lag) and did not return it."""
        starts = [start for _, start, _ in self.h.done_queries]
        after = count_at_most(F.col("ack_step"), starts)
        gone = count_at_most(F.col("dropped_at"), starts)   # queries from this bit on started after the drop

        def owed(w: int) -> Column:
            return F.when(self.live(), from_bit(after, w)).otherwise(
                from_bit(after, w).bitwiseAND(F.bitwise_not(from_bit(gone, w))))
        return popcount([F.coalesce(F.col(f"asked{w}"), F.lit(self.whole[w])).bitwiseAND(owed(w))
                         .bitwiseAND(F.bitwise_not(F.col(f"ret{w}")))
                         .bitwiseAND(F.bitwise_not(F.col(f"lag{w}"))) for w in self.qwords])

    def returned_twice(self) -> Column:
        return F.col("n_returned_done") > popcount([F.col(f"ret{w}") for w in self.qwords])

    def summary(self) -> list[dict]:
        """Builds the facts and sums them per partition and insert of unknown outcome: one job."""
        c = F.col
        # owed to the owners: acknowledged and not removed by a drop (the spec's LiveAcked)
        acked, maybe = (c("n_ok") > 0) & self.live(), c("n_unknown") > 0
        lost = F.when(acked & self.no_owner(), 1).when(acked, popcount(self.missing())).otherwise(0)
        owners_holding = [F.coalesce(c(f"own{w}"), zero()).bitwiseAND(c(f"held{w}")) for w in self.words]
        queries = [] if self.qwords is None else [
            F.sum(F.when(c("n_ok") > 0, self.owed_missing()).otherwise(0)).alias("query_missed"),
            F.count(F.when(self.returned_twice(), 1)).alias("returned_twice")]
        groups = self.with_partitions(self.rows).groupBy("partition_id", "unknown_insert").agg(
            F.sum("n_inserts").alias("inserts"), F.sum("n_ok").alias("acknowledged"),
            F.sum("n_unknown").alias("unknown"), F.sum("n_parts").alias("parts"), F.sum("n_returned").alias("returned"), F.sum("n_lag").alias("lagging"),
            F.max("last_part").alias("last_part"),
            *[F.bit_or(f"bad{k}").alias(f"bad{k}") for k in BAD_KINDS],
            F.count(F.when(acked, 1)).alias("acked_rows"),
            F.sum(lost).alias("lost"),
            *[F.bit_or(F.when(acked, m)).alias(f"miss{w}") for w, m in zip(self.words, self.missing())],
            F.sum("n_drop").alias("dropped"),
            # rows a drop removed that some replica still holds at the end: DropsAppliedInv suspects
            F.count(F.when(~self.live() & (c("n_held") > 0), 1)).alias("drop_held"),
            F.sum("n_foreign").alias("foreign"),   # part rows, at any snapshot, no keeper holds
            F.count(F.when(self.doubled(), 1)).alias("doubled"),
            # an insert of unknown outcome is atomic on an owner when every row of it has the
            # owner's bit, or none has: AND and OR of the rows' masks agree on that bit
            *[F.bit_and(F.when(maybe, m)).alias(f"every{w}") for w, m in zip(self.words, owners_holding)],
            *[F.bit_or(F.when(maybe, m)).alias(f"some{w}") for w, m in zip(self.words, owners_holding)],
            F.count(F.when(self.phantom(), 1)).alias("phantom"),
            *queries)
        return [r.asDict() for r in groups.collect()]

