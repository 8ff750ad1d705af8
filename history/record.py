"""The history of a run, for the PySpark checker (pyspark_jobs/): what clients were told and
what replicas held. Written as Parquet (or JSON lines), one file per table in a folder; the
schema is documented in reference/README.md and checkers/README.md.

Time is the driver's logical step counter, so a history is deterministic for a seed and
"acknowledged before the query started" is a comparison of integers.

An insert is recorded per sub-block (one partition of a block): a sub-block is atomic (one part,
one Keeper multi), a multi-partition INSERT is not, in ClickHouse as here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SCHEMAS = {
    # settled_step: the step the driver settled the cluster at before the final snapshot (no step
    # enabled: what is in flight then stays so), null when the run was cut wherever it was. The
    # checkers judge MigrationsEndProp only on a settled end. down_timeout: the steps a migration
    # waits on a down replica before it acts without it (Cluster.down_timeout), when the run's
    # clock is its steps (reference/races.py); null when it is infinite or counted in another
    # clock: DownWaitBoundedProp is not judged then. Both optional for readers.
    "run": {"run_id": "string", "replication_factor": "int64", "backend": "string", "bugs": "list<string>",
            "seed": "int64", "final_step": "int64", "settled_step": "int64", "down_timeout": "int64"},
    "inserts": {"insert_id": "string", "block_id": "string", "partition_id": "string", "row_id": "int64",
                "status": "string", "sent_step": "int64", "ack_step": "int64"},
    # failed_by: the replica whose crash failed the query (the spec's ReplicaCrash), null for any
    # other end; pending_at: the replicas its unread partitions were routed to when it ended. A
    # crash fails only a query it served: its receiver, or a reader of a partition still to read
    # (CrashFailsQueriesInv). Both optional for readers.
    "queries": {"query_id": "string", "replica": "string", "start_step": "int64", "end_step": "int64",
                "status": "string", "partitions_requested": "list<string>", "failed_by": "string",
                "pending_at": "list<string>"},
    "query_reads": {"query_id": "string", "partition_id": "string", "read_from": "string"},
    "query_rows": {"query_id": "string", "partition_id": "string", "row_id": "int64"},
    # Rows a query is not owed by replication lag (the spec's R2, history/lag.py): of a partition
    # its map did not know, not pulled by its replica yet; or still in flight to the replica it read
    # the partition from. Empty for a synced query.
    "query_lag": {"query_id": "string", "partition_id": "string", "row_id": "int64"},
    # What each ALTER TABLE DROP PARTITION removed: one row per row of an acknowledged (or unknown)
    # insert committed below the DROP_RANGE's block number, with the step the drop was issued at.
    # Such a row is owed to no owner after it, and to no query that started after it; a replica
    # still holding it at the end broke the spec's DropsAppliedInv (F8, F16). Optional for readers.
    "drops": {"drop_id": "string", "partition_id": "string", "row_id": "int64", "insert_id": "string",
              "drop_step": "int64", "block_number": "int64"},
    "parts": {"snapshot_step": "int64", "replica": "string", "partition_id": "string", "part_name": "string",
              "row_id": "int64"},
    # Per snapshot, each running replica's applied ALTER_METADATA count (its metadata version) and
    # the ALTERs waiting in its queue, beside the table's version (/columns): at a settled end
    # (every replica pulled the whole log) applied + queued = the table's, the spec's
    # GlobalEntriesAppliedInv. Optional for readers.
    "metadata": {"snapshot_step": "int64", "replica": "string", "metadata_version": "int64",
                 "alters_queued": "int64", "table_metadata_version": "int64", "log_pointer": "int64"},
    # MutationsAppliedInv's facts (the spec's: a keeper's part reflects every MUTATE_PART of its
    # partition below the keeper's log_pointer that overlaps it, unless a MUTATE_PART of the
    # partition, or a GET_PART of a part mutated at least as far, is in its queue). `log_mutations`:
    # each MUTATE_PART entry of the log, with its index, once; `queued_mutations`: per snapshot, each
    # running replica's queued MUTATE_PARTs and GET_PARTs of mutated parts; the metadata table's
    # log_pointer, each replica's. A CLONE target that skipped a MUTATE_PART (it was no keeper)
    # and was not given it by the CLONE keeps old data without a pending mutation (F8). Optional
    # for readers, log_pointer too.
    "log_mutations": {"log_index": "int64", "partition_id": "string", "new_part_name": "string"},
    "queued_mutations": {"snapshot_step": "int64", "replica": "string", "partition_id": "string",
                         "entry_type": "string", "new_part_name": "string"},
    "assignments": {"snapshot_step": "int64", "partition_id": "string", "owners": "list<string>",
                    "clone_target": "string", "leaving_replica": "string"},
    # Per snapshot, each partition's migration as its znode (selective/migrations/{p}) says: state
    # clone, switched, cancelling, done or cancelled, its source (null for a repair) and target. A
    # partition with no row never migrated (the spec's "none"). With the assignment it is the
    # spec's view of who may hold the partition at the snapshot (NoForeignPartsInv's Leaver: the
    # source after SWITCH, the target after CANCEL, until its CLEANUP). `coordinator`: the
    # replica that coordinates it (the znode's coord: the source, or whoever took it over). With
    # the running replicas of the snapshot (table metadata) it says which migration waits on a
    # down replica (DownWaitBoundedProp). `maps_behind`, for a migration in flight: the active
    # replicas whose published map has not seen the partition's assignment yet, which a CLEANUP
    # (on a down leaver's behalf too) waits for; null for one that ended. Optional for readers,
    # and the coordinator and maps_behind columns too.
    "migrations": {"snapshot_step": "int64", "partition_id": "string", "state": "string", "src": "string",
                   "dst": "string", "coordinator": "string", "maps_behind": "list<string>"},
    # Unexpected exceptions a step raised (not the protocol's refusals: GuardFailed and the like),
    # logged and the run went on, as a ClickHouse server logs a failed background task or queue
    # entry and retries it later, and a client is told its INSERT or SELECT failed. The fixed
    # protocol raises none (tests/reference/test_races.py); a mutant that raises still leaves a
    # history for the checkers to judge. `replica`: the replica whose step or client call raised
    # ("" for the administrator's). Optional for readers; every row is a NoLogicalErrorsInv violation
    # to the checkers (ClickHouse's LOGICAL_ERROR: its CI fails a run that threw one).
    "errors": {"step": "int64", "replica": "string", "action": "string", "error": "string", "message": "string"},
    # Every operator command (REASSIGN, CANCEL) with its outcome (accepted, refused, raised) and
    # the guard inputs the harness read from Keeper right before it (history/commands.py): the
    # owners (null: not assigned), the partition's migration (state "none": no znode), whether
    # src, dst and the coordinator were active, the migrations in flight and the limit. The
    # checkers judge that a command was accepted exactly when its spec action's guard held, and
    # that it left in Keeper what its action writes, read right after it (the `_after` columns:
    # accepted, its action's migration and assignment; refused, those it found) (CommandsFollowGuardsInv).
    # Optional for readers: older histories record no commands, nor the `_after` columns.
    "commands": {"step": "int64", "command": "string", "partition_id": "string", "src": "string", "dst": "string",
                 "outcome": "string", "reason": "string", "owners": "list<string>", "migration_state": "string",
                 "migration_src": "string", "migration_coordinator": "string", "src_active": "int64",
                 "dst_active": "int64", "coordinator_active": "int64", "in_flight": "int64",
                 "max_in_flight": "int64", "migration_state_after": "string", "migration_src_after": "string",
                 "migration_dst_after": "string", "owners_after": "list<string>", "target_after": "string",
                 "leaving_after": "string"},
    # Every replica crash (its process killed: Cluster.crash_replica, also the crash of a replica
    # lost for good), at the step it happened. A crash fails every query the replica served (spec
    # ReplicaCrash: the connections and the pins were in that process); the checkers judge that
    # no query completed across its receiver's crash (CrashFailsQueriesInv). Optional for readers:
    # older histories record no crashes.
    "crashes": {"step": "int64", "replica": "string"},
    # Every INSERT try a replica refused (Cluster.insert; the sub-block it failed on) with what
    # the harness saw of the write path right before and right after it (history/refusals.py):
    # the assignment's owners and znode version, whether the receiver was writable and its map's
    # version, the owners that were writable and those whose map was at another version, and how
    # many replicas were active (null with a placement declared). The
    # checkers judge that a try was refused only when the spec's write path was closed
    # (InsertRefusalsFollowGuardsInv). Optional for readers: older histories record none.
    "insert_refusals": {"step": "int64", "block_id": "string", "partition_id": "string", "receiver": "string",
                        "error": "string", "reason": "string",
                        **{f"{k}_{v}": t for v in ("before", "after") for k, t in (
                            ("keeper_owners", "list<string>"), ("keeper_version", "int64"),
                            ("receiver_writable", "int64"), ("receiver_map_version", "int64"),
                            ("writable_owners", "list<string>"), ("stale_owners", "list<string>"),
                            ("active_replicas", "int64"))}},
}
STATUSES = ("ok", "failed", "unknown")


@dataclass
class History:
    run_id: str = "run"
    tables: dict[str, list[dict]] = field(default_factory=lambda: {t: [] for t in SCHEMAS})

    def insert(self, block_id: str, partition: str, rows: list[dict], status: str, sent: int, ack: int) -> None:
        if status not in STATUSES:
            raise ValueError(f"insert status must be one of {STATUSES}, not {status!r}")
        for r in rows:
            self.tables["inserts"].append({"insert_id": f"{block_id}/{partition}", "block_id": block_id,
                                           "partition_id": partition, "row_id": int(r["row_id"]),
                                           "status": status, "sent_step": sent, "ack_step": ack})

    def query(self, query_id: str, replica: str, start: int, end: int, routes: dict[str, str],
              rows_by_partition: dict[str, list[dict]], status: str = "complete",
              requested: set[str] | None = None, lag: dict[str, set[int]] | None = None,
              failed_by: str | None = None, pending_at=None) -> None:
        """`requested`: the partitions the query asked for after pruning; None for the whole table.
        `lag`: per partition, the row_ids it is not owed by replication lag (table query_lag).
        `failed_by`: the replica whose crash failed it; `pending_at`: the replicas its partitions
        still to read were routed to when it ended."""
        self.tables["queries"].append({"query_id": query_id, "replica": replica, "start_step": start,
                                       "end_step": end, "status": status,
                                       "partitions_requested": None if requested is None else sorted(requested),
                                       "failed_by": failed_by,
                                       "pending_at": None if pending_at is None else sorted(set(pending_at))})
        for p, r in sorted(routes.items()):
            self.tables["query_reads"].append({"query_id": query_id, "partition_id": p, "read_from": r})
        for p, rows in sorted(rows_by_partition.items()):
            self.tables["query_rows"] += [{"query_id": query_id, "partition_id": p, "row_id": int(x["row_id"])}
                                          for x in rows]
        for p, ids in sorted((lag or {}).items()):
            self.tables["query_lag"] += [{"query_id": query_id, "partition_id": p, "row_id": int(r)}
                                         for r in sorted(ids)]

    def error(self, step: int, replica: str, action: str, exc: BaseException) -> None:
        self.tables["errors"].append({"step": step, "replica": replica, "action": action,
                                      "error": type(exc).__name__, "message": str(exc)[:300]})

    def command(self, step: int, command: str, observed: dict, outcome: str, reason: str | None = None) -> None:
        """An operator command at `step` (REASSIGN, CANCEL), what the harness observed before it
        (reference/commands.observe) and how it ended."""
        self.tables["commands"].append({"step": step, "command": command, **observed, "outcome": outcome,
                                        "reason": reason})

    def crash(self, step: int, replica: str) -> None:
        """A replica's process killed at `step`."""
        self.tables["crashes"].append({"step": step, "replica": replica})

    def insert_refused(self, row: dict) -> None:
        """An INSERT try refused, and the write path around it (reference/refusals.row)."""
        self.tables["insert_refusals"].append(row)

    def drop(self, drop_id: str, partition: str, step: int, block_number: int) -> int:
        """A DROP PARTITION issued at `step` whose DROP_RANGE covers the partition's blocks up to
        `block_number`: every row of an ok or unknown insert of the partition recorded so far, and
        not removed by an earlier drop, is removed. The driver runs an INSERT and a DROP as separate
        steps, so each insert recorded before the drop committed (if at all) below its number.
        Returns how many rows it removed."""
        gone = {x["row_id"] for x in self.tables["drops"] if x["partition_id"] == partition}
        removed = [x for x in self.tables["inserts"] if x["partition_id"] == partition
                   and x["status"] in ("ok", "unknown") and x["row_id"] not in gone]
        self.tables["drops"] += [{"drop_id": drop_id, "partition_id": partition, "row_id": x["row_id"],
                                  "insert_id": x["insert_id"], "drop_step": step, "block_number": block_number}
                                 for x in removed]
        return len(removed)

    def snapshot(self, step: int, stores: dict, assignments: list[dict], metadata: list[dict] = (),
                 migrations: list[dict] = (), queued: list[dict] = (), log_mutations: list[dict] = (),
                 broken: Callable[[str, object, Exception], None] | None = None) -> None:
        """Every replica's part inventory, row by row, and the assignment, at `step`; `metadata`:
        per running replica, metadata_version, alters_queued and table_metadata_version;
        `migrations`: per partition with a migration znode, its partition_id, state, src, dst,
        coord (the coordinator; absent: null) and maps_behind (absent: null); `queued`: per running
        replica, its queued MUTATE_PARTs and GET_PARTs of mutated parts; `log_mutations`: the
        MUTATE_PART entries of the log first seen now. `broken(replica, part, error)`: a part that
        cannot be read (ClickHouse's broken part) is left out and reported there; without it, raised."""
        self.tables["metadata"] += [{"snapshot_step": step, **m} for m in metadata]
        self.tables["queued_mutations"] += [{"snapshot_step": step, **q} for q in queued]
        self.tables["log_mutations"] += list(log_mutations)
        self.tables["migrations"] += [{"snapshot_step": step, "partition_id": m["partition_id"], "state": m["state"],
                                       "src": m["src"], "dst": m["dst"], "coordinator": m.get("coord"),
                                       "maps_behind": m.get("maps_behind")}
                                      for m in sorted(migrations, key=lambda m: m["partition_id"])]
        for replica, store in sorted(stores.items()):
            for name in store.names():
                try:
                    row_ids = [int(r["row_id"]) for r in store.read(name)]
                except Exception as e:  # noqa: BLE001 - any failure to read it makes the part broken
                    if broken is None:
                        raise
                    broken(replica, name, e)
                    continue
                self.tables["parts"] += [{"snapshot_step": step, "replica": replica, "partition_id": name.partition,
                                          "part_name": str(name), "row_id": r} for r in row_ids]
        for a in assignments:
            self.tables["assignments"].append({"snapshot_step": step, "partition_id": a["partition_id"],
                                               "owners": list(a["replicas"]), "clone_target": a["clone_target"],
                                               "leaving_replica": a["leaving_replica"]})

    def finish(self, replication_factor: int, backend: str, bugs, seed: int, final_step: int,
               settled_step: int | None = None, down_timeout: int | None = None) -> None:
        self.tables["run"] = [{"run_id": self.run_id, "replication_factor": replication_factor, "backend": backend,
                               "bugs": sorted(bugs), "seed": seed, "final_step": final_step,
                               "settled_step": settled_step, "down_timeout": down_timeout}]

    def write(self, folder: str | Path, fmt: str = "parquet") -> dict[str, Path]:
        """One file per table: `{table}.parquet`, or `{table}.jsonl` with fmt="jsonl"."""
        if fmt not in ("parquet", "jsonl"):
            raise ValueError(f"history format must be parquet or jsonl, not {fmt!r}")
        if not self.tables["run"]:
            raise ValueError("history has no run row: call finish() before write()")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        out = {}
        for name, rows in self.tables.items():
            path = folder / f"{name}.{fmt}"
            if fmt == "jsonl":
                path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            else:
                import pyarrow as pa
                import pyarrow.parquet as pq
                pq.write_table(pa.Table.from_pylist(rows, schema=_arrow_schema(name)), path)
            out[name] = path
        return out


def _arrow_schema(table: str):
    import pyarrow as pa
    types = {"string": pa.string(), "int64": pa.int64(), "list<string>": pa.list_(pa.string())}
    return pa.schema([(c, types[t]) for c, t in SCHEMAS[table].items()])
