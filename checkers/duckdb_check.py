"""The same invariants as checks.py in DuckDB SQL, single process: what a user might pick instead
of Spark for a history that fits one machine. `make bench` runs both on the same data.

    python -m checkers.duckdb_check HISTORY_DIR   (prints JSON: violations per invariant)
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from history.schema import DOWN_WAIT_GRACE, PART_NAME, TABLES, duckdb_type

# The tables a history must have, then the optional ones (history/schema.py): Parquet files or
# Spark's Parquet folders, both read by the glob.
VIEWS = [name for name, t in TABLES.items() if not t.optional]
OPTIONAL_VIEWS = [name for name, t in TABLES.items() if t.optional]

def _part(column: str, group: int) -> str:
    """A part name's field (history/schema.py PART_NAME's group) as a BIGINT; 0 when absent (the mutation)."""
    return f"coalesce(nullif(regexp_extract({column}, '{PART_NAME}', {group}), '')::BIGINT, 0)"


QUERIES = {
    "OwnersCompleteInv": """
        WITH ok AS (SELECT partition_id, row_id FROM live_ok),
             expected AS (SELECT ok.partition_id, ok.row_id, o.replica FROM ok LEFT JOIN owners o USING (partition_id))
        SELECT count(*) FROM expected e
        WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.replica = e.replica AND h.partition_id = e.partition_id
                          AND h.row_id = e.row_id)""",
    "NoDuplicateRowsInv": """
        SELECT count(*) FROM (SELECT replica, partition_id, row_id FROM final GROUP BY ALL HAVING count(*) > 1)""",
    "QueryNoMissingInv": """
        WITH ok AS (SELECT partition_id, row_id, ack_step FROM inserts WHERE status = 'ok'),
             done AS (SELECT * FROM queries WHERE status = 'complete'),
             asked AS (SELECT query_id, start_step, unnest(partitions_requested) AS partition_id FROM done
                       WHERE partitions_requested IS NOT NULL
                       UNION ALL
                       SELECT query_id, start_step, p.partition_id FROM done,
                              (SELECT DISTINCT partition_id FROM ok) p WHERE partitions_requested IS NULL),
             owed AS (SELECT a.query_id, ok.partition_id, ok.row_id FROM asked a JOIN ok USING (partition_id)
                      WHERE ok.ack_step < a.start_step AND NOT EXISTS (
                          SELECT 1 FROM drops d WHERE d.partition_id = ok.partition_id AND d.row_id = ok.row_id
                          AND d.drop_step < a.start_step))
        SELECT count(*) FROM owed o WHERE NOT EXISTS (
            SELECT 1 FROM query_rows r WHERE r.query_id = o.query_id AND r.partition_id = o.partition_id
            AND r.row_id = o.row_id) AND NOT EXISTS (
            SELECT 1 FROM query_lag l WHERE l.query_id = o.query_id AND l.partition_id = o.partition_id
            AND l.row_id = o.row_id)""",
    "QueryNoDuplicateInv": """
        SELECT count(*) FROM (SELECT r.query_id, partition_id, row_id FROM query_rows r
                              JOIN queries q ON q.query_id = r.query_id AND q.status = 'complete'
                              GROUP BY ALL HAVING count(*) > 1)""",
    "ReplicationFactorInv": """
        WITH ok AS (SELECT partition_id, row_id FROM live_ok),
             incomplete AS (SELECT DISTINCT o.partition_id, o.replica FROM ok JOIN owners o USING (partition_id)
                            WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.replica = o.replica
                                              AND h.partition_id = ok.partition_id AND h.row_id = ok.row_id)),
             complete AS (SELECT partition_id, count(*) AS n FROM owners o
                           WHERE NOT EXISTS (SELECT 1 FROM incomplete i WHERE i.partition_id = o.partition_id
                                             AND i.replica = o.replica) GROUP BY partition_id)
        SELECT count(*) FROM (
            SELECT partition_id FROM (SELECT DISTINCT partition_id FROM ok) p LEFT JOIN complete c USING (partition_id)
            WHERE coalesce(c.n, 0) < (SELECT max(replication_factor) FROM run)
            UNION  -- the spec's owners = RF: more owners than RF is a violation too (PR-F3)
            SELECT partition_id FROM asg
            WHERE len(list_distinct(owners)) <> (SELECT max(replication_factor) FROM run))""",
    # At every snapshot (the oracle's keepers_at): the spec's Keepers and, while a migration is
    # switched or cancelling, its Leaver (the source, the target).
    "NoForeignPartsInv": """
        WITH allowed AS (SELECT snapshot_step, partition_id, replica FROM keepers
                         UNION SELECT snapshot_step, partition_id, CASE state WHEN 'switched' THEN src ELSE dst END
                               FROM migrations WHERE state IN ('switched', 'cancelling'))
        SELECT count(*) FROM (SELECT DISTINCT snapshot_step, replica, partition_id FROM parts) f
        WHERE NOT EXISTS (SELECT 1 FROM allowed a WHERE a.snapshot_step = f.snapshot_step AND a.replica = f.replica
                          AND a.partition_id = f.partition_id)""",
    "AmbiguousInsertAtomicInv": """
        WITH u AS (SELECT insert_id, partition_id, row_id FROM inserts WHERE status = 'unknown'),
             sizes AS (SELECT insert_id, count(*) AS n FROM u GROUP BY insert_id),
             present AS (SELECT u.insert_id, o.replica, count(*) AS n FROM u JOIN owners o USING (partition_id)
                         JOIN held h ON h.replica = o.replica AND h.partition_id = u.partition_id
                         AND h.row_id = u.row_id GROUP BY ALL)
        SELECT count(*) FROM present p JOIN sizes s USING (insert_id) WHERE p.n <> s.n""",
    "NoPhantomRowsInv": """
        WITH written AS (SELECT DISTINCT partition_id, row_id FROM inserts WHERE status IN ('ok', 'unknown'))
        SELECT count(*) FROM (SELECT partition_id, row_id FROM held UNION ALL SELECT partition_id, row_id FROM query_rows) x
        WHERE NOT EXISTS (SELECT 1 FROM written w WHERE w.partition_id = x.partition_id AND w.row_id = x.row_id)""",
    "GlobalEntriesAppliedInv": """
        SELECT count(*) FROM metadata WHERE snapshot_step = (SELECT max(snapshot_step) FROM metadata)
        AND metadata_version + alters_queued <> table_metadata_version""",
    # The spec's MigrationsEndProp on a settled end (run.settled_step; oracle.migrations_not_ended)
    "MigrationsEndProp": """
        SELECT count(*) FROM migrations WHERE (SELECT max(settled_step) FROM settled) IS NOT NULL
        AND snapshot_step = (SELECT max(snapshot_step) FROM assignments)
        AND state NOT IN ('done', 'cancelled')""",
    # checkers/oracle.py's logical_errors: every row of the optional errors table
    "NoLogicalErrorsInv": "SELECT count(*) FROM errors",
    # checkers/oracle.py's commands_off_guard: accepted exactly when the spec action's guard held,
    # and (where Keeper was read after it) left the migration its outcome writes
    "CommandsFollowGuardsInv": """
        SELECT count(*) FROM commands WHERE outcome IN ('accepted', 'refused') AND ((outcome = 'accepted') <> coalesce(
            CASE command
            WHEN 'REASSIGN' THEN owners IS NOT NULL AND migration_state IN ('none', 'done', 'cancelled')
                                 AND list_contains(owners, src) AND NOT list_contains(owners, dst)
                                 AND src_active = 1 AND dst_active = 1 AND in_flight < max_in_flight
            WHEN 'CANCEL' THEN migration_state = 'clone' AND migration_src IS NOT NULL AND coordinator_active = 1
            END, false)
          OR (migration_state_after IS NOT NULL AND NOT (owners_after IS NOT DISTINCT FROM owners AND
            CASE WHEN outcome = 'refused' THEN migration_state_after = migration_state
                                               AND migration_src_after IS NOT DISTINCT FROM migration_src
                 WHEN command = 'REASSIGN' THEN migration_state_after = 'clone'
                                                AND migration_src_after IS NOT DISTINCT FROM src
                                                AND migration_dst_after IS NOT DISTINCT FROM dst
                                                AND target_after IS NOT DISTINCT FROM dst
                 ELSE migration_state_after = 'cancelling' AND migration_src_after IS NOT DISTINCT FROM migration_src
                      AND migration_dst_after IS NOT DISTINCT FROM dst AND target_after IS NULL
                      AND leaving_after IS NOT DISTINCT FROM dst END)))""",
    # checkers/oracle.py's cancels_ignored: after an accepted CANCEL (strictly later snapshots: one
    # at its step may precede it) its migration is cancelling or cancelled, up to the partition's
    # next accepted REASSIGN (a snapshot at its step may follow it) or another src -> dst (a repair)
    "CancelHonouredInv": """
        SELECT count(*) FROM (
            SELECT DISTINCT m.partition_id, m.snapshot_step FROM migrations m
            JOIN commands c ON c.partition_id = m.partition_id AND c.command = 'CANCEL' AND c.outcome = 'accepted'
                           AND m.snapshot_step > c.step
            WHERE coalesce(m.state, '') NOT IN ('cancelling', 'cancelled')
            AND NOT EXISTS (SELECT 1 FROM commands r WHERE r.partition_id = c.partition_id AND r.command = 'REASSIGN'
                            AND r.outcome = 'accepted' AND r.step > c.step AND r.step <= m.snapshot_step)
            AND NOT EXISTS (SELECT 1 FROM migrations o WHERE o.partition_id = m.partition_id
                            AND o.snapshot_step > c.step AND o.snapshot_step <= m.snapshot_step
                            AND (o.src IS DISTINCT FROM c.src OR o.dst IS DISTINCT FROM c.dst)))""",
    # checkers/oracle.py's outcomes_contradicted: a migration snapshot whose state the owners or
    # the leaving replica of its partition at the same snapshot contradict
    "MigrationOutcomeInv": """
        SELECT count(*) FROM migrations m LEFT JOIN assignments a
            ON a.snapshot_step = m.snapshot_step AND a.partition_id = m.partition_id
        WHERE (m.state IN ('switched', 'done') AND m.src IS NOT NULL AND coalesce(list_contains(a.owners, m.src), false))
           OR (m.state IN ('clone', 'cancelling', 'cancelled') AND coalesce(list_contains(a.owners, m.dst), false))
           OR (a.partition_id IS NOT NULL AND a.leaving_replica IS DISTINCT FROM
               CASE WHEN m.state = 'switched' AND NOT EXISTS (SELECT 1 FROM run
                                                              WHERE list_contains(run.bugs, 'source_stops_at_switch'))
                    THEN m.src WHEN m.state = 'cancelling' THEN m.dst END)""",
    # checkers/oracle.py's queries_across_crashes: a complete query whose receiver crashed
    # strictly between its start and end steps, and a query failed by the crash of a replica that
    # served it neither as its receiver nor as a reader of a partition still to read
    "CrashFailsQueriesInv": """
        SELECT (SELECT count(DISTINCT q.query_id) FROM queries q JOIN crashes c ON c.replica = q.replica
                WHERE q.status = 'complete' AND c.step > q.start_step AND c.step < q.end_step)
             + (SELECT count(*) FROM queries q WHERE q.status = 'failed' AND q.failed_by IS NOT NULL
                AND q.failed_by IS DISTINCT FROM q.replica
                AND NOT coalesce(list_contains(q.pending_at, q.failed_by), false))""",
    # checkers/oracle.py's down_waits_too_long: per partition, consecutive migration snapshots
    # waiting on the same down replica (its leaver once no map is behind; a CLONE's coordinator)
    # are one wait, from its first snapshot; a snapshot more than down_timeout + the grace after it
    "DownWaitBoundedProp": f"""
        WITH observed AS (SELECT DISTINCT snapshot_step FROM metadata),
             m AS (SELECT partition_id, snapshot_step, state, src, dst,
                          CASE WHEN state = 'switched' AND len(maps_behind) = 0 THEN src
                               WHEN state = 'cancelling' AND len(maps_behind) = 0 THEN dst
                               WHEN state = 'clone' THEN coordinator END AS who
                   FROM migrations),
             w AS (SELECT m.*, coalesce(who IS NOT NULL
                          AND snapshot_step IN (SELECT snapshot_step FROM observed)
                          AND NOT EXISTS (SELECT 1 FROM metadata u WHERE u.snapshot_step = m.snapshot_step
                                          AND u.replica = m.who), false) AS waits FROM m),
             l AS (SELECT *, coalesce(lag(waits) OVER o, false) AND waits
                             AND lag(state) OVER o IS NOT DISTINCT FROM state
                             AND lag(src) OVER o IS NOT DISTINCT FROM src AND lag(dst) OVER o IS NOT DISTINCT FROM dst
                             AND lag(who) OVER o IS NOT DISTINCT FROM who AS same
                   FROM w WINDOW o AS (PARTITION BY partition_id ORDER BY snapshot_step)),
             i AS (SELECT *, sum(CASE WHEN same THEN 0 ELSE 1 END) OVER (
                       PARTITION BY partition_id ORDER BY snapshot_step ROWS UNBOUNDED PRECEDING) AS wait FROM l),
             s AS (SELECT *, min(snapshot_step) OVER (PARTITION BY partition_id, wait) AS since FROM i)
        SELECT count(*) FROM s WHERE waits
        AND snapshot_step - since > (SELECT max(down_timeout) FROM run) + {DOWN_WAIT_GRACE}""",
    # history/refusals.py's write_path_open: a try refused though, before and after it, the
    # assignment was at one version, the receiver's map at it, and some owner writable, no
    # writable owner's map stale; or the partition was unassigned, the receiver writable and
    # replication_factor replicas active (allocation_open)
    "InsertRefusalsFollowGuardsInv": """
        SELECT count(*) FROM insert_refusals WHERE (keeper_version_before IS NOT NULL
        AND keeper_version_after = keeper_version_before
        AND receiver_map_version_before = keeper_version_before AND receiver_map_version_after = keeper_version_before
        AND len(list_intersect(coalesce(writable_owners_before, []), coalesce(stale_owners_before, []))) = 0
        AND len(list_intersect(coalesce(writable_owners_after, []), coalesce(stale_owners_after, []))) = 0
        AND len(list_intersect(coalesce(writable_owners_before, []), coalesce(writable_owners_after, []))) > 0)
        OR (keeper_version_before IS NULL AND keeper_version_after IS NULL
        AND receiver_writable_before = 1 AND receiver_writable_after = 1
        AND active_replicas_before >= (SELECT max(replication_factor) FROM run)
        AND active_replicas_after >= (SELECT max(replication_factor) FROM run))""",
    # checkers/oracle.py's mutations_not_applied: at every snapshot, a keeper's part older than the
    # MUTATE_PARTs of its partition below the keeper's log_pointer that overlap it, none pending
    "MutationsAppliedInv": f"""
        WITH x AS (SELECT DISTINCT snapshot_step, replica, partition_id, part_name FROM parts
                   WHERE EXISTS (SELECT 1 FROM log_mutations)),   -- no mutation, no scan of parts
             xp AS (SELECT *, {_part('part_name', 2)} AS mn, {_part('part_name', 3)} AS mx,
                          {_part('part_name', 5)} AS mut FROM x),
             m AS (SELECT partition_id, log_index, {_part('new_part_name', 2)} AS m_min,
                          {_part('new_part_name', 3)} AS m_max, {_part('new_part_name', 5)} AS m_mut
                   FROM log_mutations),
             owed AS (SELECT xp.snapshot_step, xp.replica, xp.partition_id, xp.part_name, xp.mn, xp.mx, xp.mut,
                             max(m.m_mut) AS owed
                      FROM xp JOIN keepers USING (snapshot_step, partition_id, replica)
                      JOIN metadata md ON md.snapshot_step = xp.snapshot_step AND md.replica = xp.replica
                      JOIN m ON m.partition_id = xp.partition_id AND m.log_index < md.log_pointer
                                AND m.m_min <= xp.mx AND xp.mn <= m.m_max
                      GROUP BY ALL),
             g AS (SELECT snapshot_step, replica, partition_id, {_part('new_part_name', 2)} AS g_min,
                          {_part('new_part_name', 3)} AS g_max, {_part('new_part_name', 5)} AS g_mut
                   FROM queued_mutations WHERE entry_type = 'GET_PART')
        SELECT count(*) FROM owed o WHERE CASE WHEN o.mut > 0 THEN o.mut ELSE o.mn END < o.owed
        AND NOT EXISTS (SELECT 1 FROM queued_mutations q WHERE q.entry_type = 'MUTATE_PART'
                        AND q.snapshot_step = o.snapshot_step AND q.replica = o.replica AND q.partition_id = o.partition_id)
        AND NOT EXISTS (SELECT 1 FROM g WHERE g.snapshot_step = o.snapshot_step AND g.replica = o.replica
                        AND g.partition_id = o.partition_id AND g.g_min <= o.mn AND o.mx <= g.g_max AND g.g_mut >= o.owed)""",
    "DropsAppliedInv": """
        SELECT count(*) FROM (SELECT DISTINCT h.replica, h.partition_id, h.row_id FROM held h
                              JOIN drops d USING (partition_id, row_id))""",
}




def _view(con, folder: Path, name: str) -> None:
    """A view of a table's file, with the history schema's optional columns it lacks (an older
    history's, real ClickHouse's) as nulls."""
    source = f"read_parquet({_source(folder, name)})"
    have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    missing = "".join(f", NULL::{duckdb_type(c.kind)} AS {c.name}" for c in TABLES[name].columns
                      if c.optional and c.name not in have) if name in TABLES else ""
    con.execute(f"CREATE VIEW {name} AS SELECT *{missing} FROM {source}")


def _optional_view(con, folder: Path, name: str) -> None:
    """A view of an optional table; absent, an empty one with the history schema's columns."""
    if (folder / f"{name}.parquet").exists():
        _view(con, folder, name)
    else:
        columns = ", ".join(f"NULL::{duckdb_type(c.kind)} AS {c.name}" for c in TABLES[name].columns)
        con.execute(f"CREATE VIEW {name} AS SELECT {columns} WHERE false")


def _source(folder: Path, table: str) -> str:
    p = folder / f"{table}.parquet"
    return f"'{p}/*.parquet'" if p.is_dir() else f"'{p}'"


def check(folder: str | Path, threads: int = 2) -> dict:
    import duckdb
    folder = Path(folder)
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    for t in VIEWS:
        _view(con, folder, t)
    # The optional tables, absent from older histories (and real ClickHouse's): query_lag (R2 is
    # then strict), drops (nothing was dropped), metadata, migrations (the assignments'
    # leaving_replica names every leaver), errors (nothing raised), commands and insert_refusals
    # (none recorded).
    for name in OPTIONAL_VIEWS:
        _optional_view(con, folder, name)
    # acknowledged rows no drop removed: owed to every owner (the spec's LiveAcked)
    con.execute("CREATE VIEW live_ok AS SELECT partition_id, row_id FROM inserts i WHERE status = 'ok' AND NOT EXISTS "
                "(SELECT 1 FROM drops d WHERE d.partition_id = i.partition_id AND d.row_id = i.row_id)")
    con.execute("CREATE VIEW final AS SELECT * FROM parts WHERE snapshot_step = (SELECT max(snapshot_step) FROM parts)")
    con.execute("CREATE VIEW asg AS SELECT * FROM assignments "
                "WHERE snapshot_step = (SELECT max(snapshot_step) FROM assignments)")
    con.execute("CREATE VIEW owners AS SELECT partition_id, unnest(owners) AS replica FROM asg")
    # clone_target is optional (history/schema.py): a CLONE target may hold rows before SWITCH; the
    # PR #102244 design names its `:cloning` targets comma-separated. Every snapshot's.
    has_target = "clone_target" in {r[0] for r in con.execute("DESCRIBE asg").fetchall()}
    con.execute("CREATE VIEW cloning AS SELECT snapshot_step, partition_id, "
                "unnest(string_split(clone_target, ',')) AS replica "
                "FROM assignments WHERE clone_target IS NOT NULL AND clone_target <> ''" if has_target else
                "CREATE VIEW cloning AS SELECT NULL::BIGINT AS snapshot_step, NULL::VARCHAR AS partition_id, "
                "NULL::VARCHAR AS replica WHERE false")
    # The spec's Keepers(asg[p]) at every snapshot: owners, the leaving replica, CLONE targets
    con.execute("CREATE VIEW keepers AS SELECT snapshot_step, partition_id, unnest(owners) AS replica FROM assignments "
                "UNION SELECT snapshot_step, partition_id, leaving_replica FROM assignments WHERE leaving_replica IS NOT NULL "
                "UNION SELECT snapshot_step, partition_id, replica FROM cloning")
    # run.settled_step is optional (older histories): absent, the end is not settled
    has_settled = "settled_step" in {r[0] for r in con.execute("DESCRIBE run").fetchall()}
    con.execute("CREATE VIEW settled AS SELECT settled_step FROM run" if has_settled else
                "CREATE VIEW settled AS SELECT NULL::BIGINT AS settled_step WHERE false")
    con.execute("CREATE TABLE held AS SELECT DISTINCT replica, partition_id, row_id FROM final")
    return {name: con.execute(sql).fetchone()[0] for name, sql in QUERIES.items()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m checkers.duckdb_check HISTORY_DIR", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    import duckdb
    try:
        counts = check(argv[0])
    except (duckdb.IOException, duckdb.BinderException) as e:   # a table missing, or a column
        print(f"duckdb_check: bad input: {argv[0]}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"violations": counts, "seconds": round(time.perf_counter() - t0, 2),
                      "peak_rss_mib": round(peak_kib / 1024)}))
    return 0 if not any(counts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
