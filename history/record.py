"""The history of a run, for the checkers (checkers/): what clients were told and what replicas
held. Written as Parquet (or JSON lines), one file per table in a folder, in the format
history/schema.py states (HISTORY: every table and column, their types and what the readers
require).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from history.journal import SENT, Journal
from history.schema import HISTORY, INSERT_STATUSES, arrow_schema


@dataclass
class History:
    run_id: str = "run"
    tables: dict[str, list[dict]] = field(default_factory=lambda: {t: [] for t in HISTORY})
    # Every row also appended to disk as it is recorded (history/journal.py): set by journal_to.
    journal: Journal | None = None
    # The live runtime's threads record at once (reference/runtime.py): a row is appended whole,
    # to memory and to the journal in the same order. A leaf lock: nothing is taken under it.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def journal_to(self, folder: str | Path) -> None:
        """From now on every row recorded is also appended to `folder` (a journal), flushed. The
        rows recorded before are not: a new run's history is empty, a resumed one read from there."""
        self.journal = Journal(folder)

    def _add(self, table: str, rows: list[dict]) -> None:
        with self._lock:
            self.tables[table] += rows
            if self.journal is not None:
                self.journal.append(table, rows)

    def insert_sent(self, block_id: str, sent: int, subs: dict[str, list[int]], dedup_ids: dict[str, str]) -> None:
        """An INSERT left the client at `sent` (its sub-blocks' row_ids and dedup ids by partition):
        journaled only, so a run killed before the answer records it as `unknown` when it resumes
        (history/journal.py). In memory the answer (`insert`) is the only record."""
        if self.journal is not None:
            with self._lock:
                self.journal.append(SENT, [{"block_id": block_id, "sent_step": sent, "subs": subs,
                                            "dedup_ids": dedup_ids}])

    def insert(self, block_id: str, partition: str, rows: list[dict], status: str, sent: int, ack: int) -> None:
        if status not in INSERT_STATUSES:
            raise ValueError(f"insert status must be one of {INSERT_STATUSES}, not {status!r}")
        self._add("inserts", [{"insert_id": f"{block_id}/{partition}", "block_id": block_id,
                               "partition_id": partition, "row_id": int(r["row_id"]),
                               "status": status, "sent_step": sent, "ack_step": ack} for r in rows])

    def query(self, query_id: str, replica: str, start: int, end: int, routes: dict[str, str],
              rows_by_partition: dict[str, list[dict]], status: str = "complete",
              requested: set[str] | None = None, lag: dict[str, set[int]] | None = None,
              failed_by: str | None = None, pending_at=None) -> None:
        """`requested`: the partitions the query asked for after pruning; None for the whole table.
        `lag`: per partition, the row_ids it is not owed by replication lag (table query_lag).
        `failed_by`: the replica whose crash failed it; `pending_at`: the replicas its partitions
        still to read were routed to when it ended."""
        # The rows that say what it read first, the query's own row last: a kill between them
        # leaves reads of a query that was never answered, which no checker looks at.
        self._add("query_reads", [{"query_id": query_id, "partition_id": p, "read_from": r}
                                  for p, r in sorted(routes.items())])
        self._add("query_rows", [{"query_id": query_id, "partition_id": p, "row_id": int(x["row_id"])}
                                 for p, rows in sorted(rows_by_partition.items()) for x in rows])
        self._add("query_lag", [{"query_id": query_id, "partition_id": p, "row_id": int(r)}
                                for p, ids in sorted((lag or {}).items()) for r in sorted(ids)])
        self._add("queries", [{"query_id": query_id, "replica": replica, "start_step": start,
                               "end_step": end, "status": status,
                               "partitions_requested": None if requested is None else sorted(requested),
                               "failed_by": failed_by,
                               "pending_at": None if pending_at is None else sorted(set(pending_at))}])

    def error(self, step: int, replica: str, action: str, exc: BaseException) -> None:
        self._add("errors", [{"step": step, "replica": replica, "action": action,
                              "error": type(exc).__name__, "message": str(exc)[:300]}])

    def disk_fault(self, step: int, replica: str, action: str, exc: BaseException) -> None:
        """A step or an INSERT try of `replica` the disk failed (read-only, full): the environment's
        fault, not the protocol's, so not an error; tried again later (Cluster._disk_fault)."""
        self._add("disk_faults", [{"step": step, "replica": replica, "action": action,
                                   "error": f"{type(exc).__name__}: {exc}"[:300]}])

    def command(self, step: int, command: str, observed: dict, outcome: str, reason: str | None = None) -> None:
        """An operator command at `step` (REASSIGN, CANCEL), what the harness observed before it
        (reference/commands.observe) and how it ended."""
        self._add("commands", [{"step": step, "command": command, **observed, "outcome": outcome,
                                "reason": reason}])

    def crash(self, step: int, replica: str) -> None:
        """A replica's process killed at `step`."""
        self._add("crashes", [{"step": step, "replica": replica}])

    def replica_dropped(self, step: int, replica: str, owned) -> None:
        """SYSTEM DROP REPLICA of `replica` at `step`; `owned`: the partitions it owned right before."""
        self._add("replica_drops", [{"step": step, "replica": replica, "partition_id": p} for p in sorted(owned)])

    def repair_switched(self, step: int, partition: str, dst: str) -> None:
        """A repair's SWITCH of `partition`, applied at `step`: `dst` added to its owners."""
        self._add("repairs", [{"step": step, "partition_id": partition, "dst": dst}])

    def insert_refused(self, row: dict) -> None:
        """An INSERT try refused, and the write path around it (reference/refusals.row)."""
        self._add("insert_refusals", [row])

    def drop(self, drop_id: str, partition: str, step: int, block_number: int) -> int:
        """A DROP PARTITION issued at `step` whose DROP_RANGE covers the partition's blocks up to
        `block_number`: every row of an ok or unknown insert of the partition recorded so far, and
        not removed by an earlier drop, is removed. The driver runs an INSERT and a DROP as separate
        steps, so each insert recorded before the drop committed (if at all) below its number.
        Returns how many rows it removed."""
        gone = {x["row_id"] for x in self.tables["drops"] if x["partition_id"] == partition}
        removed = [x for x in self.tables["inserts"] if x["partition_id"] == partition
                   and x["status"] in ("ok", "unknown") and x["row_id"] not in gone]
        self._add("drops", [{"drop_id": drop_id, "partition_id": partition, "row_id": x["row_id"],
                             "insert_id": x["insert_id"], "drop_step": step, "block_number": block_number}
                            for x in removed])
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
        self._add("metadata", [{"snapshot_step": step, **m} for m in metadata])
        self._add("queued_mutations", [{"snapshot_step": step, **q} for q in queued])
        self._add("log_mutations", list(log_mutations))
        self._add("migrations", [{"snapshot_step": step, "partition_id": m["partition_id"], "state": m["state"],
                                       "src": m["src"], "dst": m["dst"], "coordinator": m.get("coord"),
                                       "maps_behind": m.get("maps_behind")}
                                 for m in sorted(migrations, key=lambda m: m["partition_id"])])
        parts = []
        for replica, store in sorted(stores.items()):
            for name in store.names():
                try:
                    row_ids = [int(r["row_id"]) for r in store.read(name)]
                except Exception as e:  # noqa: BLE001 - any failure to read it makes the part broken
                    if broken is None:
                        raise
                    broken(replica, name, e)
                    continue
                parts += [{"snapshot_step": step, "replica": replica, "partition_id": name.partition,
                           "part_name": str(name), "row_id": r} for r in row_ids]
        self._add("parts", parts)
        # Last: a snapshot a kill cut short has no assignment rows, and journal.load drops it whole.
        self._add("assignments", [{"snapshot_step": step, "partition_id": a["partition_id"],
                                   "owners": list(a["replicas"]), "clone_target": a["clone_target"],
                                   "leaving_replica": a["leaving_replica"]} for a in assignments])

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
                pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(name)), path)
            out[name] = path
        return out

