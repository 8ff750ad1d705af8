"""The invariants the checkers judge a history by, one record each: its name, what it means, the
spec's definition it stands for (spec/rfc/SelectiveReplication.tla), the history tables it reads,
and its violating rows in SQL over named views.

DuckDB (checkers/duckdb_check.py) counts every invariant's rows. The Spark job runs the same SQL
for the invariants marked `spark` (checkers/spark/checks.py): those Spark SQL 3.5 reads as DuckDB
does, with the job's counts, samples and jobs as its DataFrames had them. It decides most
invariants in the one pass over the large tables (checkers/spark/facts.py) and reads their rows
only to count and sample a violation; the others it judges with DataFrames or on the small tables
it collected, and `spark_note` says why. The in-process oracle (checkers/oracle.py) is the
independent implementation, in Python; it shares only the names and meanings here.

The SQL names its views in braces (`{held}`), which each engine defines over the history as VIEWS
says: DuckDB with SQL over the files, the Spark job from the frames it has read (spark.sql gives
each a temporary name for the one query). A shared statement keeps to what both dialects read
alike: array_contains rather than list_contains; no backslash in a string literal (Spark SQL
unescapes it: `\\d` becomes `d`); no array_intersect of a NULL (DuckDB's is [], Spark's NULL); no
cardinality of a NULL (Spark's is -1); every view aliased where a column is qualified (the Spark
view's name is not `{view}`).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

SPEC = "spec/rfc/SelectiveReplication.tla"

# DownWaitBoundedProp's grace: the steps a migration may be seen waiting on a down replica beyond
# run.down_timeout (`down_waits` in checkers/oracle.py: between two snapshots). Beyond the timeout
# the fixed protocol needs a "migrate" step to start the timer (Cluster._down_long) and one to act
# once it expired, both random picks, and for a CLEANUP every active map to see the assignment
# (not counted: maps_behind). Measured by `python -m lab.down_wait` (oracle.down_waits) on the
# fixed protocol, `leaving` (timeout 30) and `deserting` (12), seeds 0-59 at mutation_layers.SMALL
# and teeth.SIZE (240 runs, snapshots 70-330 steps apart): no wait seen longer than the timeout
# itself (the longest: 29 steps on a leaver in `leaving`, 18 on a coordinator). Counted without
# maps_behind, leaver waits reach 356 steps beyond the timeout (seeds 0-29, teeth `deserting`: a
# target's map of one partition not refreshed for hundreds of steps), which no grace told from a
# broken rule. With 60, the limit (90 steps in `leaving`, 72 in `deserting`) is 61 steps above the
# longest wait the fixed protocol showed in either. With the rule broken, seeds 0-29 (0-14 for 16
# and 17) at the small size: CLEANUP on a down leaver's behalf always refused (migration mutant
# x_replica_cleanup_for_down_leaver 13) 21 of 60 runs over 60 (deserting 0, 1, 2: 232, 193, 115
# beyond); refused when cancelling (16, 17) 9 of 30 (deserting 0, 1: 100, 101); no take-over
# (x_replica_take_over_migration 14, 47) 18 and 17 of 60 (leaving 1, 2: 88 and 77, 97 and 74).
# Mutant 8 (`not mig and ...`) writes the fixed protocol's histories step for step: equivalent.
DOWN_WAIT_GRACE = 60
# The constants the SQL names in braces beside its views.
PARAMETERS = {"grace": DOWN_WAIT_GRACE}

# The views the SQL reads: the history's tables (every column the checkers read, an optional one
# absent read as null, an optional table absent read as empty) and these, which each engine
# defines with the meaning given.
VIEWS = {
    "live_ok": "(partition_id, row_id) acknowledged (status ok) and removed by no drop: owed to every owner "
               "(the spec's LiveAcked)",
    # the final snapshot: the last taken (DuckDB's and the oracle's the last of `parts` and
    # `assignments`, the Spark job's the last of `assignments`, which refuses a later parts snapshot
    # unless the run logged errors); not the last with a part: a run may end with every partition dropped
    "final": "(replica, partition_id, row_id) of every part row at the final snapshot, copies included",
    "held": "(replica, partition_id, row_id) a replica holds at the final snapshot, each once",
    "asg": "the assignments rows of the final snapshot",
    "owners": "(partition_id, replica): each owner of each partition of the final assignment",
    "keepers": "(snapshot_step, partition_id, replica): who may keep the partition at each snapshot, the spec's "
               "Keepers(asg[p]) and its Leaver (history/semantics.py keepers_at)",
    "assignment_keepers": "the same without the migrations' Leavers: Keepers(asg[p]) alone",
    "dropped": "(partition_id, row_id, dropped_at): each row a drop removed, with the step of the last drop that "
               "removed it",
    "settled_end": "(snapshot_step): the final snapshot's step when the run ended settled (run.settled_step), "
                   "no row otherwise",
}


@dataclass(frozen=True)
class Invariant:
    name: str
    meaning: str
    tla: str | None            # its definition in SPEC, if the spec has it
    tables: tuple[str, ...]    # the history tables it reads
    sql: str                   # its violating rows, over the views in braces; DuckDB counts them
    spark: bool = False        # the Spark job runs `sql` too, for the violating rows it counts and samples
    spark_note: str = ""       # how the Spark job judges it otherwise, and why

    @property
    def views(self) -> list[str]:
        """The views `sql` reads, each once, in order of first use."""
        return list(dict.fromkeys(f for _, f, _, _ in string.Formatter().parse(self.sql) if f and f not in PARAMETERS))


FACTS = "decided in the one pass over the large tables (checkers/spark/facts.py)"

INVARIANTS = {i.name: i for i in (
    Invariant(
        "OwnersCompleteInv", "every acknowledged row is in the final state of every owner of its partition",
        "OwnersCompleteInv", ("inserts", "drops", "parts", "assignments"),
        """SELECT e.partition_id, e.replica, e.row_id
           FROM (SELECT ok.partition_id, ok.row_id, o.replica FROM {live_ok} ok LEFT JOIN {owners} o
                 ON o.partition_id = ok.partition_id) e
           WHERE NOT EXISTS (SELECT 1 FROM {held} h WHERE h.replica = e.replica AND h.partition_id = e.partition_id
                             AND h.row_id = e.row_id)""",
        spark_note=f"{FACTS}, and its rows read from those facts' owner masks"),
    Invariant(
        "NoDuplicateRowsInv", "no replica holds a row twice in its final state", "NoDuplicateRowsInv", ("parts",),
        """SELECT replica, partition_id, row_id, count(*) AS copies FROM {final}
           GROUP BY replica, partition_id, row_id HAVING count(*) > 1""",
        spark=True),
    Invariant(
        "QueryNoMissingInv", "R2: a completed query returned every row acknowledged before it started, in the "
        "partitions it asked for", "QueryNoMissingInv", ("inserts", "drops", "queries", "query_rows", "query_lag"),
        """WITH ok AS (SELECT partition_id, row_id, ack_step FROM {inserts} WHERE status = 'ok'),
                done AS (SELECT * FROM {queries} WHERE status = 'complete'),
                asked AS (SELECT query_id, start_step, unnest(partitions_requested) AS partition_id FROM done
                          WHERE partitions_requested IS NOT NULL
                          UNION ALL
                          SELECT query_id, start_step, p.partition_id FROM done,
                                 (SELECT DISTINCT partition_id FROM ok) p WHERE partitions_requested IS NULL),
                owed AS (SELECT a.query_id, ok.partition_id, ok.row_id FROM asked a JOIN ok USING (partition_id)
                         WHERE ok.ack_step < a.start_step AND NOT EXISTS (
                             SELECT 1 FROM {drops} d WHERE d.partition_id = ok.partition_id AND d.row_id = ok.row_id
                             AND d.drop_step < a.start_step))
           SELECT o.query_id, o.partition_id, o.row_id FROM owed o WHERE NOT EXISTS (
               SELECT 1 FROM {query_rows} r WHERE r.query_id = o.query_id AND r.partition_id = o.partition_id
               AND r.row_id = o.row_id) AND NOT EXISTS (
               SELECT 1 FROM {query_lag} l WHERE l.query_id = o.query_id AND l.partition_id = o.partition_id
               AND l.row_id = o.row_id)""",
        spark_note=f"{FACTS} (query masks), its rows by DataFrame joins: the SQL unnests in its select list, "
                   "which Spark SQL does not"),
    Invariant(
        "QueryNoDuplicateInv", "R3: no completed query returned a row twice", "QueryNoDuplicateInv",
        ("queries", "query_rows"),
        """SELECT r.query_id, r.partition_id, r.row_id, count(*) AS copies FROM {query_rows} r
           JOIN {queries} q ON q.query_id = r.query_id AND q.status = 'complete'
           GROUP BY r.query_id, r.partition_id, r.row_id HAVING count(*) > 1""",
        spark=True),
    Invariant(
        "ReplicationFactorInv", "every assigned partition has exactly replication_factor owners, and one with "
        "acknowledged rows is complete on all of them", "ReplicationFactorInv",
        ("run", "inserts", "drops", "parts", "assignments"),
        """WITH incomplete AS (SELECT DISTINCT o.partition_id, o.replica FROM {live_ok} ok
                               JOIN {owners} o USING (partition_id)
                               WHERE NOT EXISTS (SELECT 1 FROM {held} h WHERE h.replica = o.replica
                                                 AND h.partition_id = ok.partition_id AND h.row_id = ok.row_id)),
                complete AS (SELECT partition_id, count(*) AS n FROM {owners} o
                             WHERE NOT EXISTS (SELECT 1 FROM incomplete i WHERE i.partition_id = o.partition_id
                                               AND i.replica = o.replica) GROUP BY partition_id)
           SELECT partition_id FROM (SELECT DISTINCT partition_id FROM {live_ok}) p
                                    LEFT JOIN complete c USING (partition_id)
           WHERE coalesce(c.n, 0) < (SELECT max(replication_factor) FROM {run})
           UNION  -- the spec's owners = RF: more owners than RF is a violation too (PR-F3)
           SELECT partition_id FROM {asg}
           WHERE len(list_distinct(owners)) <> (SELECT max(replication_factor) FROM {run})""",
        spark_note=f"{FACTS}: per partition, from the owner masks summed there"),
    Invariant(
        "NoForeignPartsInv", "at every snapshot, no replica keeps rows of a partition it does not own (a CLONE "
        "target, and a leaving replica until its CLEANUP, excepted)", "NoForeignPartsInv", ("parts", "assignments",
                                                                                            "migrations"),
        """SELECT p.snapshot_step, p.replica, p.partition_id, count(*) AS rows FROM {parts} p
           WHERE NOT EXISTS (SELECT 1 FROM {keepers} k WHERE k.snapshot_step = p.snapshot_step
                             AND k.partition_id = p.partition_id AND k.replica = p.replica)
           GROUP BY p.snapshot_step, p.replica, p.partition_id""",
        spark=True),
    Invariant(
        "AmbiguousInsertAtomicInv", "an insert of unknown outcome is wholly present or wholly absent on each owner",
        None, ("inserts", "parts", "assignments"),
        """SELECT u.insert_id, u.partition_id, o.replica, count(h.replica) AS present, count(*) AS rows
           FROM {inserts} u JOIN {owners} o ON o.partition_id = u.partition_id
           LEFT JOIN {held} h ON h.replica = o.replica AND h.partition_id = u.partition_id AND h.row_id = u.row_id
           WHERE u.status = 'unknown'
           GROUP BY u.insert_id, u.partition_id, o.replica HAVING count(h.replica) > 0
           AND count(h.replica) < count(*)""",
        spark=True),
    Invariant(
        "NoPhantomRowsInv", "no replica and no query holds a row that no ok or unknown insert wrote (in that "
        "partition)", None, ("inserts", "parts", "query_rows"),
        """WITH written AS (SELECT DISTINCT partition_id, row_id FROM {inserts} WHERE status IN ('ok', 'unknown'))
           SELECT x.partition_id, x.row_id FROM (SELECT partition_id, row_id FROM {held}
                                                 UNION ALL SELECT partition_id, row_id FROM {query_rows}) x
           WHERE NOT EXISTS (SELECT 1 FROM written w WHERE w.partition_id = x.partition_id
                             AND w.row_id = x.row_id)""",
        spark_note=f"{FACTS}, its rows by a DataFrame join: (where, who, partition_id, row_id) each once, where "
                   "this SQL, as the oracle, counts a phantom row a query returned twice twice"),
    Invariant(
        "GlobalEntriesAppliedInv", "at the end every replica applied or queued every ALTER_METADATA (the table's "
        "metadata version)", "GlobalEntriesAppliedInv", ("metadata",),
        """SELECT replica, metadata_version, alters_queued, table_metadata_version FROM {metadata}
           WHERE snapshot_step = (SELECT max(snapshot_step) FROM {metadata})
           AND metadata_version + alters_queued <> table_metadata_version""",
        spark_note="judged on the metadata rows the job collected with the small tables: no Spark job"),
    Invariant(
        "MigrationsEndProp", "at a settled end every started migration has ended, done or cancelled (the spec's "
        "liveness property on a finite history)", "MigrationsEndProp", ("run", "migrations", "assignments"),
        """SELECT partition_id, state, src, dst FROM {migrations}
           WHERE snapshot_step = (SELECT snapshot_step FROM {settled_end}) AND state NOT IN ('done', 'cancelled')""",
        spark=True),
    Invariant(
        "NoLogicalErrorsInv", "no step, client call or operator command raised an exception no protocol refusal "
        "explains (table errors; ClickHouse's LOGICAL_ERROR, which its CI fails on)", None, ("errors",),
        "SELECT * FROM {errors}",
        spark_note="judged on the errors rows the job collected with the small tables: no Spark job"),
    Invariant(
        "CommandsFollowGuardsInv", "every operator command (REASSIGN, CANCEL) was accepted exactly when its spec "
        "action's guard held on the state observed before it, and left in Keeper what its outcome writes: a CLONE "
        "of src -> dst, a cancelling migration, or, refused, the migration it found (table commands)", None,
        ("commands",),
        # history/semantics.py's reassign_allowed, cancel_allowed and effect_expected
        """SELECT step, command, partition_id, src, dst, outcome, guard_held, reason, migration_state_after,
                  migration_src_after, migration_dst_after, owners_after, target_after, leaving_after
           FROM (SELECT *, coalesce(
                     CASE command
                     WHEN 'REASSIGN' THEN owners IS NOT NULL AND migration_state IN ('none', 'done', 'cancelled')
                                          AND array_contains(owners, src) AND NOT array_contains(owners, dst)
                                          AND src_active = 1 AND dst_active = 1 AND in_flight < max_in_flight
                     WHEN 'CANCEL' THEN migration_state = 'clone' AND migration_src IS NOT NULL
                                        AND coordinator_active = 1
                     END, false) AS guard_held
                 FROM {commands} WHERE outcome IN ('accepted', 'refused')) c
           WHERE (outcome = 'accepted') <> guard_held
              OR (migration_state_after IS NOT NULL AND NOT (owners_after IS NOT DISTINCT FROM owners AND
                  CASE WHEN outcome = 'refused' THEN migration_state_after = migration_state
                                                     AND migration_src_after IS NOT DISTINCT FROM migration_src
                       WHEN command = 'REASSIGN' THEN migration_state_after = 'clone'
                                                      AND migration_src_after IS NOT DISTINCT FROM src
                                                      AND migration_dst_after IS NOT DISTINCT FROM dst
                                                      AND target_after IS NOT DISTINCT FROM dst
                       ELSE migration_state_after = 'cancelling' AND migration_src_after IS NOT DISTINCT FROM migration_src
                            AND migration_dst_after IS NOT DISTINCT FROM dst AND target_after IS NULL
                            AND leaving_after IS NOT DISTINCT FROM dst END))""",
        spark=True),
    Invariant(
        "CancelHonouredInv", "after a CANCEL accepted at a step, every later snapshot of its migration shows it "
        "cancelling or cancelled, until the partition's next accepted REASSIGN or another src -> dst (tables "
        "commands, migrations)", None, ("commands", "migrations"),
        # strictly later snapshots: one at its step may precede it; up to the partition's next accepted
        # REASSIGN (a snapshot at its step may follow it) or another src -> dst (a repair)
        """SELECT m.partition_id, m.snapshot_step, m.state, m.src, m.dst, min(c.step) AS cancel_step
           FROM {migrations} m
           JOIN {commands} c ON c.partition_id = m.partition_id AND c.command = 'CANCEL' AND c.outcome = 'accepted'
                             AND m.snapshot_step > c.step
           WHERE coalesce(m.state, '') NOT IN ('cancelling', 'cancelled')
           AND NOT EXISTS (SELECT 1 FROM {commands} r WHERE r.partition_id = c.partition_id
                           AND r.command = 'REASSIGN' AND r.outcome = 'accepted' AND r.step > c.step
                           AND r.step <= m.snapshot_step)
           AND NOT EXISTS (SELECT 1 FROM {migrations} o WHERE o.partition_id = m.partition_id
                           AND o.snapshot_step > c.step AND o.snapshot_step <= m.snapshot_step
                           AND (o.src IS DISTINCT FROM c.src OR o.dst IS DISTINCT FROM c.dst))
           GROUP BY m.partition_id, m.snapshot_step, m.state, m.src, m.dst""",
        spark=True),
    Invariant(
        "MigrationOutcomeInv", "at every snapshot, a migration's state agrees with its partition's assignment: "
        "switched or done, the source is no owner; clone, cancelling or cancelled, the target is none; the leaving "
        "replica is the source while switched (none under source_stops_at_switch), the target while cancelling, no "
        "one otherwise (tables migrations, assignments, run.bugs)", "MigrationOutcomeInv",
        ("run", "migrations", "assignments"),
        """SELECT m.snapshot_step, m.partition_id, m.state, m.src, m.dst, a.owners, a.leaving_replica
           FROM {migrations} m LEFT JOIN {assignments} a
               ON a.snapshot_step = m.snapshot_step AND a.partition_id = m.partition_id
           WHERE (m.state IN ('switched', 'done') AND m.src IS NOT NULL
                  AND coalesce(array_contains(a.owners, m.src), false))
              OR (m.state IN ('clone', 'cancelling', 'cancelled') AND coalesce(array_contains(a.owners, m.dst), false))
              OR (a.partition_id IS NOT NULL AND a.leaving_replica IS DISTINCT FROM
                  CASE WHEN m.state = 'switched' AND NOT EXISTS (
                           SELECT 1 FROM {run} r WHERE array_contains(r.bugs, 'source_stops_at_switch'))
                       THEN m.src WHEN m.state = 'cancelling' THEN m.dst END)
           ORDER BY m.snapshot_step, m.partition_id""",
        spark=True),
    Invariant(
        "CrashFailsQueriesInv", "no query is answered complete though its receiver crashed while it ran, strictly "
        "between its start and end steps, and none is failed by the crash of a replica that served it neither as "
        "its receiver nor as a reader of a partition it had still to read (tables crashes, queries: failed_by, "
        "pending_at)", None, ("queries", "crashes"),
        """SELECT DISTINCT q.query_id FROM {queries} q JOIN {crashes} c ON c.replica = q.replica
           WHERE q.status = 'complete' AND c.step > q.start_step AND c.step < q.end_step
           UNION ALL
           SELECT q.query_id FROM {queries} q WHERE q.status = 'failed' AND q.failed_by IS NOT NULL
           AND q.failed_by IS DISTINCT FROM q.replica AND NOT coalesce(array_contains(q.pending_at, q.failed_by), false)""",
        spark_note="a DataFrame join for the queries answered across a crash, and the queries failed by a "
                   "stranger's crash from the queries rows the job collected (no job): two kinds of row, each "
                   "sampled with its own columns"),
    Invariant(
        "DownWaitBoundedProp", "no migration is seen waiting on the same down replica (its leaver, once every "
        "active map saw the assignment; a CLONE's coordinator) at consecutive snapshots spanning more than "
        "run.down_timeout + DOWN_WAIT_GRACE steps, unless a switched one's down source may hold the only copy of "
        "a part: a row of the partition acknowledged by the snapshot, not dropped, that no running replica holds "
        "then (F23's cost; the spec's MigrationsEndOrWaitOnOnlyCopyProp) (tables run, migrations, metadata, "
        "inserts, drops, parts)", None,
        ("run", "migrations", "metadata", "inserts", "drops", "parts"),
        """WITH observed AS (SELECT DISTINCT snapshot_step FROM {metadata}),
                m AS (SELECT partition_id, snapshot_step, state, src, dst,
                             CASE WHEN state = 'switched' AND len(maps_behind) = 0 THEN src
                                  WHEN state = 'cancelling' AND len(maps_behind) = 0 THEN dst
                                  WHEN state = 'clone' THEN coordinator END AS who
                      FROM {migrations}),
                w AS (SELECT m.*, coalesce(who IS NOT NULL
                             AND snapshot_step IN (SELECT snapshot_step FROM observed)
                             AND NOT EXISTS (SELECT 1 FROM {metadata} u WHERE u.snapshot_step = m.snapshot_step
                                             AND u.replica = m.who), false) AS waits FROM m),
                l AS (SELECT *, coalesce(lag(waits) OVER o, false) AND waits
                                AND lag(state) OVER o IS NOT DISTINCT FROM state
                                AND lag(src) OVER o IS NOT DISTINCT FROM src AND lag(dst) OVER o IS NOT DISTINCT FROM dst
                                AND lag(who) OVER o IS NOT DISTINCT FROM who AS same
                      FROM w WINDOW o AS (PARTITION BY partition_id ORDER BY snapshot_step)),
                i AS (SELECT *, sum(CASE WHEN same THEN 0 ELSE 1 END) OVER (
                          PARTITION BY partition_id ORDER BY snapshot_step ROWS UNBOUNDED PRECEDING) AS wait FROM l),
                s AS (SELECT *, min(snapshot_step) OVER (PARTITION BY partition_id, wait) AS since FROM i)
           SELECT partition_id, snapshot_step, state, src, dst, who, since FROM s WHERE waits
           AND snapshot_step - since > (SELECT max(down_timeout) FROM {run}) + {grace}
           AND NOT (state = 'switched' AND EXISTS (
               SELECT 1 FROM {inserts} x WHERE x.status = 'ok' AND x.partition_id = s.partition_id
               AND x.ack_step <= s.snapshot_step
               AND NOT EXISTS (SELECT 1 FROM {drops} d WHERE d.partition_id = x.partition_id
                               AND d.row_id = x.row_id AND d.drop_step <= s.snapshot_step)
               AND NOT EXISTS (SELECT 1 FROM {parts} h WHERE h.snapshot_step = s.snapshot_step
                               AND h.partition_id = x.partition_id AND h.row_id = x.row_id)))""",
        spark_note="DataFrame windows: the SQL's IN subquery in a select list and len() are DuckDB's"),
    Invariant(
        "InsertRefusalsFollowGuardsInv", "an INSERT try was refused only when the write path of its sub-block was "
        "closed before or after it: the assignment changed, the receiver's map was not at its version, no owner "
        "stayed writable, or a writable owner's map was stale; for a partition not assigned yet, the receiver was "
        "read-only or fewer than replication_factor replicas were active (table insert_refusals)", None,
        ("run", "insert_refusals"),
        # history/semantics.py's write_path_open and allocation_open
        """SELECT * FROM {insert_refusals} WHERE (keeper_version_before IS NOT NULL
           AND keeper_version_after = keeper_version_before
           AND receiver_map_version_before = keeper_version_before AND receiver_map_version_after = keeper_version_before
           AND len(list_intersect(coalesce(writable_owners_before, []), coalesce(stale_owners_before, []))) = 0
           AND len(list_intersect(coalesce(writable_owners_after, []), coalesce(stale_owners_after, []))) = 0
           AND len(list_intersect(coalesce(writable_owners_before, []), coalesce(writable_owners_after, []))) > 0)
           OR (keeper_version_before IS NULL AND keeper_version_after IS NULL
           AND receiver_writable_before = 1 AND receiver_writable_after = 1
           AND active_replicas_before >= (SELECT max(replication_factor) FROM {run})
           AND active_replicas_after >= (SELECT max(replication_factor) FROM {run}))""",
        spark_note="DataFrame functions: the SQL's list literals and list_intersect are DuckDB's (Spark's "
                   "array_intersect of a NULL is NULL, DuckDB's [])"),
    Invariant(
        "MutationsAppliedInv", "at every snapshot, a keeper's part reflects every MUTATE_PART of its partition "
        "below the keeper's log_pointer that overlaps it, unless a MUTATE_PART of the partition, or a GET_PART of a "
        "part mutated at least as far covering it, is in its queue (tables log_mutations, queued_mutations, "
        "metadata.log_pointer)", "MutationsAppliedInv",
        ("parts", "assignments", "metadata", "log_mutations", "queued_mutations"),
        # part_field(name, group): a part name's field (history/schema.py PART_NAME's group) as a
        # BIGINT, 0 when absent (the mutation); a DuckDB macro, since the pattern's backslashes are
        # no Spark SQL literal
        """WITH x AS (SELECT DISTINCT snapshot_step, replica, partition_id, part_name FROM {parts}
                      WHERE EXISTS (SELECT 1 FROM {log_mutations})),   -- no mutation, no scan of parts
                xp AS (SELECT *, part_field(part_name, 2) AS mn, part_field(part_name, 3) AS mx,
                             part_field(part_name, 5) AS mut FROM x),
                m AS (SELECT partition_id, log_index, part_field(new_part_name, 2) AS m_min,
                             part_field(new_part_name, 3) AS m_max, part_field(new_part_name, 5) AS m_mut
                      FROM {log_mutations}),
                owed AS (SELECT xp.snapshot_step, xp.replica, xp.partition_id, xp.part_name, xp.mn, xp.mx, xp.mut,
                                max(m.m_mut) AS owed
                         FROM xp JOIN {assignment_keepers} USING (snapshot_step, partition_id, replica)
                         JOIN {metadata} md ON md.snapshot_step = xp.snapshot_step AND md.replica = xp.replica
                         JOIN m ON m.partition_id = xp.partition_id AND m.log_index < md.log_pointer
                                   AND m.m_min <= xp.mx AND xp.mn <= m.m_max
                         GROUP BY ALL),
                g AS (SELECT snapshot_step, replica, partition_id, part_field(new_part_name, 2) AS g_min,
                             part_field(new_part_name, 3) AS g_max, part_field(new_part_name, 5) AS g_mut
                      FROM {queued_mutations} WHERE entry_type = 'GET_PART')
           SELECT o.snapshot_step, o.replica, o.part_name, o.owed FROM owed o
           WHERE CASE WHEN o.mut > 0 THEN o.mut ELSE o.mn END < o.owed
           AND NOT EXISTS (SELECT 1 FROM {queued_mutations} q WHERE q.entry_type = 'MUTATE_PART'
                           AND q.snapshot_step = o.snapshot_step AND q.replica = o.replica
                           AND q.partition_id = o.partition_id)
           AND NOT EXISTS (SELECT 1 FROM g WHERE g.snapshot_step = o.snapshot_step AND g.replica = o.replica
                           AND g.partition_id = o.partition_id AND g.g_min <= o.mn AND o.mx <= g.g_max
                           AND g.g_mut >= o.owed)""",
        spark_note="DataFrame joins: the part names' fields are read with a regular expression, whose "
                   "backslashes Spark SQL literals unescape"),
    Invariant(
        "RepairOutcomeProp", "at every snapshot, each assigned partition has replication_factor owners less its "
        "owners SYSTEM DROP REPLICA removed so far and not yet repaired: a drop lowers the count by one per partition "
        "the replica owned, a repair's SWITCH adds one back, nothing else changes it (tables replica_drops, repairs; "
        "a drop at the snapshot's own step may precede or follow it)", "RepairOutcomeProp",
        ("run", "assignments", "replica_drops", "repairs"),
        # the spec's step property summed over the steps up to each snapshot: owners = RF - dropped + repaired
        """WITH a AS (SELECT x.snapshot_step, x.partition_id, cardinality(array_distinct(x.owners)) AS owners
                      FROM {assignments} x),
                d AS (SELECT a.snapshot_step, a.partition_id, count(*) AS dropped,
                             sum(CASE WHEN y.step < a.snapshot_step THEN 1 ELSE 0 END) AS dropped_before
                      FROM a JOIN {replica_drops} y ON y.partition_id = a.partition_id AND y.step <= a.snapshot_step
                      GROUP BY a.snapshot_step, a.partition_id),
                r AS (SELECT a.snapshot_step, a.partition_id, count(*) AS repaired
                      FROM a JOIN {repairs} z ON z.partition_id = a.partition_id AND z.step <= a.snapshot_step
                      GROUP BY a.snapshot_step, a.partition_id),
                e AS (SELECT a.snapshot_step, a.partition_id, a.owners, f.rf, coalesce(d.dropped, 0) AS dropped,
                             coalesce(d.dropped_before, 0) AS dropped_before, coalesce(r.repaired, 0) AS repaired
                      FROM a CROSS JOIN (SELECT max(replication_factor) AS rf FROM {run}) f
                      LEFT JOIN d ON d.snapshot_step = a.snapshot_step AND d.partition_id = a.partition_id
                      LEFT JOIN r ON r.snapshot_step = a.snapshot_step AND r.partition_id = a.partition_id)
           SELECT snapshot_step, partition_id, owners, rf, dropped, repaired FROM e
           WHERE owners < rf - dropped + repaired OR owners > rf - dropped_before + repaired""",
        spark=True),
    Invariant(
        "DropsAppliedInv", "no replica holds, in its final state, a row a DROP PARTITION removed (dropped rows do "
        "not come back)", "DropsAppliedInv", ("drops", "parts"),
        """SELECT h.partition_id, h.row_id, h.replica, d.dropped_at FROM {held} h
           JOIN {dropped} d ON d.partition_id = h.partition_id AND d.row_id = h.row_id""",
        spark=True),
)}
