"""Rows of the system tables a user inspects: system.replicas, system.replication_queue,
system.selective_assignments and a system.selective_migrations table, read from Keeper (and, for
the parts a replica holds, from its PartStore), as ClickHouse reads them."""

from __future__ import annotations

from protocol.assignment import read_assignment, selective_assignments_rows
from protocol.keeper import Keeper, NoNodeError
from protocol.layout import Layout
from protocol.log_entry import LogEntry
from protocol.migration import migrations_rows
from protocol.parts import PartStore


def replicas_rows(keeper: Keeper, layout: Layout, stores: dict[str, PartStore] | None = None) -> list[dict]:
    """system.replicas, one row per replica of the table, with what selective mode adds: the
    partitions the assignment gives it and the partitions it has parts of."""
    log_max_index = len(keeper.get_children(layout.log))
    assignments = {p: read_assignment(keeper, layout, p) for p in keeper.get_children(layout.assignments)}
    rows = []
    for r in keeper.get_children(layout.replicas):
        ptr = int(keeper.get(layout.log_pointer(r))[0])
        row = {"replica_name": r, "is_active": keeper.exists(layout.is_active(r)) is not None,
               "log_pointer": ptr, "log_max_index": log_max_index,
               "queue_size": len(keeper.get_children(layout.queue(r))),
               "parts": len(keeper.get_children(layout.parts(r))),
               "assigned_partitions": sorted(p for p, a in assignments.items() if r in a.owners)}
        if stores and r in stores:
            row["partitions_on_disk"] = sorted({n.partition for n in stores[r].names()})
        rows.append(row)
    return rows


def replication_queue_rows(keeper: Keeper, layout: Layout) -> list[dict]:
    """system.replication_queue: every replica's pending entries, in queue order."""
    rows = []
    for r in keeper.get_children(layout.replicas):
        q = layout.queue(r)
        for node in keeper.get_children(q):
            try:
                entry = LogEntry.parse(keeper.get(f"{q}/{node}")[0], f"{q}/{node}")
            except NoNodeError:
                continue  # executed between the listing and the read
            rows.append({"replica_name": r, "node_name": node, "type": entry.type,
                         "partition_id": entry.partition, "new_part_name": entry.new_part_name or None,
                         "source_replica": entry.source_replica})
    return rows


def all_tables(keeper: Keeper, layout: Layout, stores: dict[str, PartStore] | None = None) -> dict[str, list[dict]]:
    return {"system.replicas": replicas_rows(keeper, layout, stores),
            "system.replication_queue": replication_queue_rows(keeper, layout),
            "system.selective_assignments": selective_assignments_rows(keeper, layout),
            "system.selective_migrations": migrations_rows(keeper, layout)}


# ---- the rows as ClickHouse's own formats, so they pipe into clickhouse-local

FORMATS = ("text", "json", "tsv", "jsoneachrow")
ONE_TABLE_FORMATS = ("tsv", "jsoneachrow")   # a stream of rows of one table, as ClickHouse reads it


def _tsv_scalar(v) -> str:
    if v is None:
        return "\\N"
    if isinstance(v, bool):
        return "1" if v else "0"   # UInt8, as ClickHouse's own system tables (is_readonly, is_lost)
    text = str(v)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def _tsv_cell(v) -> str:
    """A value as ClickHouse writes it in TabSeparated: NULL as \\N, an array as ['a','b']."""
    if isinstance(v, (list, tuple)):
        items = (("'" + str(x).replace("\\", "\\\\").replace("'", "\\'") + "'") if isinstance(x, str)
                 else _tsv_scalar(x) for x in v)
        return _tsv_scalar("[" + ",".join(items) + "]")
    return _tsv_scalar(v)


# The columns of each table, for the header of an empty one (rows name their own otherwise).
COLUMNS = {"system.replicas": ["replica_name", "is_active", "log_pointer", "log_max_index", "queue_size", "parts",
                               "assigned_partitions"],
           "system.replication_queue": ["replica_name", "node_name", "type", "partition_id", "new_part_name",
                                        "source_replica"],
           "system.selective_assignments": ["partition_id", "replicas", "clone_target", "leaving_replica", "version"],
           "system.selective_migrations": ["partition_id", "state", "src", "dst", "coord", "fetched"]}


def columns_of(rows: list[dict], table: str | None = None) -> list[str]:
    """Every column any row has, in the order they first appear; a table's own when it has no rows."""
    cols: dict[str, None] = {}
    for r in rows:
        cols.update(dict.fromkeys(r))
    return list(cols) or COLUMNS.get(table, [])


def to_tsv(rows: list[dict], table: str | None = None) -> str:
    """TSVWithNames: a header line of column names, then one line per row (a column a row lacks is NULL)."""
    cols = columns_of(rows, table)
    lines = ["\t".join(cols)] + ["\t".join(_tsv_cell(r.get(c)) for c in cols) for r in rows]
    return "\n".join(lines) + "\n" if cols else ""


def to_json_each_row(rows: list[dict]) -> str:
    """JSONEachRow: one JSON object per line; a flag as 0/1 (UInt8), as ClickHouse writes its own."""
    import json
    return "".join(json.dumps({k: int(v) if isinstance(v, bool) else v for k, v in r.items()}, default=str,
                              separators=(",", ":")) + "\n" for r in rows)
