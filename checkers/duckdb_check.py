"""The invariants (checkers/invariants.py: each one's violating rows in SQL) counted by DuckDB,
single process: what a user might pick instead of Spark for a history that fits one machine.
`make bench` runs both on the same data.

    python -m checkers.duckdb_check HISTORY_DIR [--only INVARIANT ...]   (prints JSON: violations per invariant)
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from checkers.invariants import INVARIANTS, PARAMETERS, Invariant
from harness.cli_args import Parser, existing_dir
from history.schema import PART_NAME, TABLES, duckdb_type


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


def check(folder: str | Path, threads: int = 2, only: tuple[str, ...] | None = None) -> dict:
    """Per invariant (or those named in `only`), how many rows its SQL finds (0: it holds)."""
    import duckdb
    folder = Path(folder)
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    # The tables a history must have, then the optional ones, absent from older histories (and
    # real ClickHouse's): query_lag (R2 is then strict), drops (nothing was dropped), metadata,
    # migrations (the assignments' leaving_replica names every leaver), errors (nothing raised),
    # commands and insert_refusals (none recorded), ...
    for name, table in TABLES.items():
        if not table.optional:
            _view(con, folder, name)
    for name, table in TABLES.items():
        if table.optional:
            _optional_view(con, folder, name)
    # The views of checkers/invariants.py VIEWS, over those.
    con.execute("CREATE VIEW live_ok AS SELECT partition_id, row_id FROM inserts i WHERE status = 'ok' AND NOT EXISTS "
                "(SELECT 1 FROM drops d WHERE d.partition_id = i.partition_id AND d.row_id = i.row_id)")
    con.execute("CREATE VIEW dropped AS SELECT partition_id, row_id, max(drop_step) AS dropped_at FROM drops "
                "GROUP BY partition_id, row_id")
    # The last snapshot taken, with parts or none (every partition dropped): as the oracle's and the Spark job's
    con.execute("CREATE VIEW final AS SELECT * FROM parts WHERE snapshot_step = (SELECT max(s) FROM "
                "(SELECT snapshot_step AS s FROM parts UNION ALL SELECT snapshot_step FROM assignments))")
    con.execute("CREATE VIEW asg AS SELECT * FROM assignments "
                "WHERE snapshot_step = (SELECT max(snapshot_step) FROM assignments)")
    con.execute("CREATE VIEW owners AS SELECT partition_id, unnest(owners) AS replica FROM asg")
    # clone_target is optional (history/schema.py): a CLONE target may hold rows before SWITCH;
    # the PR #102244 design names its `:cloning` targets comma-separated. Every snapshot's.
    has_target = "clone_target" in {r[0] for r in con.execute("DESCRIBE asg").fetchall()}
    con.execute("CREATE VIEW cloning AS SELECT snapshot_step, partition_id, "
                "unnest(string_split(clone_target, ',')) AS replica "
                "FROM assignments WHERE clone_target IS NOT NULL AND clone_target <> ''" if has_target else
                "CREATE VIEW cloning AS SELECT NULL::BIGINT AS snapshot_step, NULL::VARCHAR AS partition_id, "
                "NULL::VARCHAR AS replica WHERE false")
    # The spec's Keepers(asg[p]) at every snapshot: owners, the leaving replica, CLONE targets; and
    # with them the Leaver of a switched or cancelling migration (the source, the target)
    con.execute("CREATE VIEW assignment_keepers AS SELECT snapshot_step, partition_id, unnest(owners) AS replica "
                "FROM assignments UNION SELECT snapshot_step, partition_id, leaving_replica FROM assignments "
                "WHERE leaving_replica IS NOT NULL UNION SELECT snapshot_step, partition_id, replica FROM cloning")
    con.execute("CREATE VIEW keepers AS SELECT * FROM assignment_keepers UNION SELECT snapshot_step, partition_id, "
                "CASE state WHEN 'switched' THEN src ELSE dst END FROM migrations "
                "WHERE state IN ('switched', 'cancelling')")
    # run.settled_step is optional (older histories): absent, the end is not settled
    has_settled = "settled_step" in {r[0] for r in con.execute("DESCRIBE run").fetchall()}
    con.execute("CREATE VIEW settled_end AS SELECT max(snapshot_step) AS snapshot_step FROM assignments "
                "WHERE (SELECT max(settled_step) FROM run) IS NOT NULL" if has_settled else
                "CREATE VIEW settled_end AS SELECT NULL::BIGINT AS snapshot_step WHERE false")
    con.execute("CREATE TABLE held AS SELECT DISTINCT replica, partition_id, row_id FROM final")
    # a part name's field (PART_NAME's group) as a BIGINT; 0 when absent (the mutation)
    con.execute(f"CREATE MACRO part_field(name, i) AS "
                f"coalesce(nullif(regexp_extract(name, '{PART_NAME}', i), '')::BIGINT, 0)")
    return {name: con.execute(f"SELECT count(*) FROM (\n{sql(inv)}\n)").fetchone()[0] for name, inv in INVARIANTS.items()
            if only is None or name in only}


def sql(inv: Invariant) -> str:
    """An invariant's SQL, its views named as here."""
    return inv.sql.format(**{v: v for v in inv.views}, **PARAMETERS)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m checkers.duckdb_check",
                                 description="Count each invariant's violating rows in a history (JSON on stdout).")
    ap.add_argument("history", metavar="HISTORY_DIR", type=existing_dir)
    ap.add_argument("--only", action="append", metavar="INVARIANT", choices=sorted(INVARIANTS),
                    help="count this invariant only (repeatable; default: every one)")
    a = ap.parse_args(argv)   # usage errors exit 2
    t0 = time.perf_counter()
    import duckdb
    try:
        counts = check(a.history, only=tuple(a.only) if a.only else None)
    except (duckdb.IOException, duckdb.BinderException) as e:   # a table missing, or a column
        print(f"{ap.prog}: bad input: {a.history}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    return print_counts(counts, t0)


def print_counts(counts: dict, t0: float) -> int:
    """A single-process checker's report on stdout (violations per invariant, seconds since t0, the
    process's peak memory) and its exit code: 0 when every count is 0, else 1."""
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"violations": counts, "seconds": round(time.perf_counter() - t0, 2),
                      "peak_rss_mib": round(peak_kib / 1024)}))
    return 0 if not any(counts.values()) else 1

if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m checkers.duckdb_check", main))
