"""Rows of the system tables a user inspects: system.replicas, system.replication_queue,
system.selective_assignments and a system.selective_migrations table, read from Keeper (and, for
the parts a replica holds, from its PartStore), as ClickHouse reads them."""

from __future__ import annotations

from .assignment import read_assignment, selective_assignments_rows
from .keeper import Keeper, NoNodeError
from .layout import Layout
from .log_entry import LogEntry
from .migration import migrations_rows
from .parts import PartStore


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
