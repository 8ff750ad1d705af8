"""What a driver records of a run, the history side of reference/cluster.py's Cluster (a mixin):
the logical clock every event is stamped with, what clients sent and were told (INSERTs and
queries, with the rows the spec excuses as replication lag), operators' commands with what
Keeper held around them, each migration's timeline (gantt.py), the replicas dropped for good and the
repairs' SWITCHes, the snapshots of every replica's
parts, metadata and queued mutations, the assignments and migrations, and the history's files
(history/record.py). What it reads of Keeper it reads through the administrator's session (or
another replica's), not through the protocol's own code (the code under test), and it draws
nothing from the driver's random generator.

The class it is mixed into provides `admin`, `layout`, `table`, `replicas`, `stores`, `log`,
`backend`, `bugs`, `seed`, `down_timeout` and `steps_clock`; `_init_record` sets the record's own
state (Cluster.__init__ calls it before any replica starts).
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from pathlib import Path

from history import commands, journal, refusals
from history.lag import in_flight_of, not_pulled
from history.record import History
from protocol.assignment import GuardFailed, selective_assignments_rows
from protocol.insert import sub_block_hash
from protocol.keeper import Keeper, KeeperUnavailableError, NoNodeError, SessionExpiredError
from protocol.log_entry import ALTER_METADATA, GET_PART, MUTATE_PART, BadLogEntry, LogEntry
from protocol.migration import IN_FLIGHT, MigrationError, migrations_rows

# Exceptions a step may raise that are not a failure of the step's code: Keeper away or a session
# expired. Their callers cope with them (a retry, a read moved to another owner, a new session).
KEEPER_FAULTS = (KeeperUnavailableError, SessionExpiredError)


class Recorder:
    def _init_record(self, run_id: str) -> None:
        """The record, empty, and the clock at 0."""
        # Per migration, the steps of its CLONE start, fetch, SWITCH and CLEANUP (for gantt.py).
        self.timeline: list[dict] = []
        self.step = 0  # the logical clock of the history
        # The clock and the query counter move under a leaf lock: the live runtime's threads tick
        # at once, and two events must never share a step (the checkers order events by it).
        self._clock_lock = threading.Lock()
        self.history = History(run_id=run_id)
        self.queries = 0
        self.block_rows: dict[str, list[int]] = {}  # block id -> its row_ids (for query_lag)
        self._bad_entries: set[str] = set()   # queue entries _queue_seen could not parse (logged once each)
        self._log_seen: set[str] = set()   # log entries log_mutation_rows has read

    def tick(self) -> int:
        """The clock moves one step (a step taken, an event recorded); the new step."""
        with self._clock_lock:
            self.step += 1
            return self.step

    def failed(self, replica: str, action: str, e: Exception) -> None:
        """An unexpected exception of `replica`'s `action` ("" for the administrator's): logged in
        the history (table errors) and the run goes on, as a server logs a failed task."""
        self.history.error(self.step, replica, action, e)
        self.log(f"{replica or 'admin'} {action} raised {type(e).__name__}: {e}")

    def write_path(self, receiver: str, partition: str) -> dict | None:
        """What InsertRefusalsFollowGuardsInv judges a refused try by: the partition's write path
        from `receiver`, read now (history/refusals.py); None records nothing."""
        return refusals.observe(self.admin, self.layout, self.replicas, receiver, partition)

    def insert_refused(self, block_id: str, partition: str, receiver: str, why: Exception | None, before: dict,
                       after: dict) -> None:
        """A try of an INSERT refused at `partition`, with its write path read right before and after
        the try (write_path): what InsertRefusalsFollowGuardsInv judges (history/refusals.py)."""
        self.history.insert_refused(refusals.row(self.step, block_id, partition, receiver, why, before, after))

    def insert_sent(self, rows: list[dict], block_id: str = "") -> tuple[int, dict[str, list[dict]]]:
        """A client's INSERT leaves: its step, and its sub-blocks by partition, each one's row_ids
        noted under its dedup id (the ids a replica's queue names: query_lag reads them). A
        journaled history (`reference run --history`) records it at once, so a kill before the
        answer leaves it `unknown` (history/journal.py)."""
        sent = self.tick()
        subs = self.table.split_by_partition(rows)
        row_ids = {p: [int(r["row_id"]) for r in sub] for p, sub in subs.items()}
        dedup_ids = {}
        for p, sub in subs.items():
            try:
                dedup_ids[p] = f"{p}_{sub_block_hash(p, sub)}"
                self.block_rows[dedup_ids[p]] = row_ids[p]
            except Exception as e:  # noqa: BLE001 - a broken dedup hash (a mutant's): logged, the INSERT goes on
                self.failed("", "insert", e)
        self.history.insert_sent(block_id, sent, row_ids, dedup_ids)
        return sent, subs

    def resume_record(self, folder: str | Path) -> list[str]:
        """Carry on the history a killed run journaled in `folder` (history/journal.py): its rows,
        its INSERTs sent and never answered recorded `unknown` now (what their client was told:
        the connection broke), the clock after all of them. Returns the unanswered INSERTs' block
        ids, in the order they were sent (a client sends them again: reference run --attach)."""
        r = journal.load(folder, list(self.history.tables))
        self.history.tables = r.tables
        self.step = r.step
        self.queries = max((int(q["query_id"][1:]) for q in r.tables["queries"] if q["query_id"][1:].isdigit()),
                           default=0)
        for s in r.sent:
            for p, ids in s["subs"].items():
                if p in s.get("dedup_ids", {}):
                    self.block_rows[s["dedup_ids"][p]] = ids
        self._log_seen = {f"log-{m['log_index']:010d}" for m in r.tables["log_mutations"]}
        self.history.journal_to(folder)   # appends from here; what was loaded is already there
        for s in r.unanswered:
            ack = self.tick()
            for p, ids in sorted(s["subs"].items()):
                self.history.insert(s["block_id"], p, [{"row_id": i} for i in ids], "unknown", s["sent_step"], ack)
        return [s["block_id"] for s in sorted(r.unanswered, key=lambda s: s["sent_step"])]

    def insert_answered(self, block_id: str, subs: dict[str, list[dict]], status: dict[str, str], sent: int) -> None:
        """The client has its answer: each sub-block recorded with what the client was told of it
        (ok, failed, unknown), for the checkers. Shared by every way a client sends (Cluster.insert,
        races.py's client_send_insert)."""
        ack = self.tick()
        for p, sub in subs.items():
            self.history.insert(block_id, p, sub, status[p], sent, ack)

    def query_answered(self, at: str, start: int, routes: dict, got: dict, status: str, partitions=None,
                       lag: dict[str, set[int]] | None = None, failed_by: str | None = None,
                       pending_at=None) -> None:
        """The client has its answer: the query recorded with its reads, rows and lag, for the
        checkers (and, failed by a crash, whose and where its unread partitions were routed).
        Shared by every way a client reads (Cluster.query, races.py's select_all and open queries)."""
        with self._clock_lock:
            self.queries += 1
            query_id = f"q{self.queries}"
        self.history.query(query_id, at, start, self.tick(), routes, got, status, partitions, lag,
                           failed_by, pending_at)

    def unpulled_lag(self, at: str, routes: dict[str, str], partitions: set[str] | None) -> dict[str, set[int]]:
        """An unsynced query's lag of the partitions its map did not know (so did not route): the
        rows of their INSERTs `at` has not pulled yet (history/lag.py)."""
        unknown = [p for p in self.admin.get_children(self.layout.assignments)
                   if p not in routes and (partitions is None or p in partitions)]
        return {p: self._rows_of(ids) for p, ids in not_pulled(self.admin, self.layout, at, unknown).items()}

    def in_flight_lag(self, reader: str, partition: str) -> set[int]:
        """An unsynced read's lag: the partition's rows still on their way to `reader` (history/lag.py)."""
        return self.in_flight_lags(reader, [partition])[partition]

    def in_flight_lags(self, reader: str, partitions) -> dict[str, set[int]]:
        """in_flight_lag of several partitions, Keeper's log and `reader`'s queue read once."""
        return {p: self._rows_of(ids) for p, ids in in_flight_of(self.admin, self.layout, reader, partitions).items()}

    def _rows_of(self, block_ids) -> set[int]:
        return {r for b in block_ids for r in self.block_rows.get(b, ())}

    @contextmanager
    def _command(self, command: str, seen: dict):
        """Records the command's outcome: accepted, refused (the protocol's refusal: MigrationError,
        GuardFailed) or raised (anything else, also logged in `errors` by the caller), with what
        Keeper holds right after it. A Keeper fault leaves the command's fate unknown (its multi
        may have been applied): not recorded."""
        try:
            yield
        except KEEPER_FAULTS:
            raise
        except (MigrationError, GuardFailed) as e:
            self._record_command(command, seen, commands.REFUSED, str(e)[:300])
            raise
        except Exception as e:
            self._record_command(command, seen, commands.RAISED, f"{type(e).__name__}: {str(e)[:280]}")
            raise
        self._record_command(command, seen, commands.ACCEPTED)

    def _record_command(self, command: str, seen: dict, outcome: str, reason: str | None = None) -> None:
        """The command's history row: what was seen before it, its outcome, and what Keeper holds
        right after it (commands.observe_after; nothing known, the effect not judged, if Keeper faults)."""
        try:
            after = commands.observe_after(self.admin, self.layout, seen["partition_id"])
        except KEEPER_FAULTS:
            after = dict.fromkeys(commands.AFTER)
        self.history.command(self.step, command, {**seen, **after}, outcome, reason)

    def _started(self, partition: str, src: str | None, dst: str) -> None:
        """A migration started: a move of src -> dst, or a repair (src None: Cluster.repair)."""
        self.timeline.append({"partition": partition, "src": src, "dst": dst, "clone": self.step,
                              "fetch": None, "switch": None, "cleanup": None, "repair": src is None})

    def _mark(self, partition: str, step: str) -> None:
        """Record `step` (fetch, switch, cleanup) of the partition's latest migration, at the next tick.
        A repair's SWITCH goes into the history too (table repairs): it adds an owner back. What
        makes it a repair is what the driver started (or SYSTEM DROP REPLICA turned into one), not
        what the SWITCH wrote: a SWITCH that removes a source all the same is the fault to be seen
        (RepairOutcomeProp)."""
        for m in reversed(self.timeline):
            if m["partition"] == partition:
                if m[step] is None:
                    m[step] = self.step + 1
                    if step == "switch" and m.get("repair"):
                        self.history.repair_switched(m[step], partition, m["dst"])
                return

    def drop_replica(self, name: str) -> list[str]:
        """SYSTEM DROP REPLICA 'name' (the nemesis's, reference/nemesis.py: the next of Cluster's
        bases) and its history: the partitions `name` owned right before it, read from Keeper through
        the administrator's session (table replica_drops; each is one owner short until a repair),
        and the migrations in CLONE out of it, which the drop carries on as repairs (their SWITCH
        then only adds the target: table repairs, through _mark). Recorded once the drop succeeded,
        at the current step (it does not tick the clock, as a crash does not)."""
        owned = [a["partition_id"] for a in self.assignment_rows() if name in a["replicas"]]
        carried = {m["partition_id"] for m in migrations_rows(self.admin, self.layout)
                   if m.get("state") == "clone" and m.get("src") == name}
        left = super().drop_replica(name)
        self.history.replica_dropped(self.step, name, owned)
        for p in carried:
            m = next((m for m in reversed(self.timeline) if m["partition"] == p), None)
            if m is not None and m["src"] == name:
                m["repair"] = True
        return left

    def assignment_rows(self) -> list[dict]:
        """system.selective_assignments (History.snapshot). An assignment znode a broken step left
        corrupt (a mutant's CANCEL after SWITCH names an owner as leaving) is logged and left out:
        no replica can read an owner from it, so the checkers see the partition with none, rather
        than the snapshot raising and the run leaving no history."""
        return selective_assignments_rows(self.admin, self.layout,
                                          corrupt=lambda p, e: self.failed("", "read assignment", e))

    def snapshot(self, tick: bool = True) -> None:
        """Every running replica's parts, the assignments, metadata and migrations, at the next step
        (or, tick=False, at the current one: an observation that leaves the clock, and so a run's
        course, as it was; the caller takes no two at one step)."""
        queues = {name: self._queue_seen(name) for name in sorted(self.replicas)}
        self.history.snapshot(self.tick() if tick else self.step, self.stores, self.assignment_rows(),
                              self.metadata_rows(queues), self.migration_rows(), self.queued_mutation_rows(queues),
                              self.log_mutation_rows(),
                              broken=lambda replica, name, e: self.failed(replica, f"read part {name}", e))

    def queued_mutation_rows(self, queues: dict[str, list[LogEntry]]) -> list[dict]:
        """Per running replica, the MUTATE_PARTs in its queue and the GET_PARTs of mutated parts
        (what the spec's MutationsAppliedInv excuses an owed mutation by: MutationPending,
        MutatedPartQueued): History.snapshot's `queued`."""
        return [{"replica": name, "partition_id": e.partition, "entry_type": e.type, "new_part_name": e.new_part_name}
                for name, queue in sorted(queues.items()) for e in queue
                if e.type == MUTATE_PART or (e.type == GET_PART and e.part.mutation)]

    def log_mutation_rows(self) -> list[dict]:
        """The MUTATE_PART entries of the log not seen at an earlier snapshot, with their log index
        (what MutationsAppliedInv's MutationsOwed ranges over, below each replica's log_pointer).
        Each entry is read once; one the cleanup thread trimmed before any snapshot saw it is
        missed, which can only hide a violation, never make one."""
        out = []
        for n in sorted(self.admin.get_children(self.layout.log)):
            if n in self._log_seen:
                continue
            try:
                e = LogEntry.parse(self.admin.get(f"{self.layout.log}/{n}")[0], f"{self.layout.log}/{n}")
            except NoNodeError:
                continue   # trimmed between the listing and the read
            except BadLogEntry:
                self._log_seen.add(n)
                continue   # the replica that pulls it logs it (NoLogicalErrorsInv)
            self._log_seen.add(n)
            if e.type == MUTATE_PART:
                # log-0000000012 -> 12, parsed here: replica.log_number is code under test (mutmut)
                out.append({"log_index": int(n.rsplit("-", 1)[1]), "partition_id": e.partition,
                            "new_part_name": e.new_part_name})
        return out

    def migration_rows(self) -> list[dict]:
        """Every partition's migration znode (system.selective_migrations), and for one in flight
        the active replicas whose published map has not seen its assignment (maps_behind: a CLEANUP
        waits for them): History.snapshot."""
        try:
            # A znode without a state or target (a broken step wrote it) is written as its text,
            # "None": a migration that has not ended, in every checker's eyes.
            # partition_id read for every row (a row without one is a broken table, logged below)
            return [{**m, "partition_id": m["partition_id"], "state": str(m.get("state")), "src": m.get("src"),
                     "dst": str(m.get("dst")),
                     "coord": None if m.get("coord") is None else str(m["coord"]),
                     "maps_behind": self._maps_behind(m["partition_id"]) if m.get("state") in IN_FLIGHT else None}
                    for m in migrations_rows(self.admin, self.layout)]
        except KEEPER_FAULTS:
            raise
        except Exception as e:  # noqa: BLE001 - a broken system table (a mutant's): logged, the snapshot goes on
            self.failed("", "read migrations", e)
            return []

    def _maps_behind(self, partition: str) -> list[str]:
        """The active replicas whose published map of `partition` (map_version) is older than its
        assignment: what a CLEANUP, its leaver's or one on a down leaver's behalf, waits for.
        Read from Keeper here, as the snapshot's observation, not by the protocol's own code."""
        stat = self.admin.exists(self.layout.assignment(partition))
        if stat is None:
            return []
        behind = []
        for r in sorted(self.admin.get_children(self.layout.replicas)):
            if self.admin.exists(self.layout.is_active(r)) is None:
                continue
            try:
                seen = int(self.admin.get(self.layout.map_version(r, partition))[0])
            except NoNodeError:
                seen = -1   # never published a map of it
            if seen < stat.version:
                behind.append(r)
        return behind

    def metadata_rows(self, queues: dict[str, list[LogEntry]]) -> list[dict]:
        """Each running replica's ALTER_METADATA state beside the table's, and its log_pointer
        (History.snapshot); `queues`: each replica's queue (_queue_seen), read once per snapshot."""
        table_version = self.admin.exists(self.layout.columns).version

        def pointer(name: str) -> int | None:
            try:
                return int(self.admin.get(self.layout.log_pointer(name))[0])
            except NoNodeError:
                return None
        return [{"replica": name, "metadata_version": rep.metadata_version,
                 "alters_queued": sum(e.type == ALTER_METADATA for e in queues[name]),
                 "table_metadata_version": table_version, "log_pointer": pointer(name)}
                for name, rep in sorted(self.replicas.items())]

    def _queue_seen(self, name: str, keeper: Keeper | None = None) -> list[LogEntry]:
        """A replica's queue as another session reads it from Keeper (what Replica.queue reads, in
        `keeper`, the administrator's by default): the replica's own session may have expired."""
        keeper = keeper or self.admin
        q = self.layout.queue(name)
        out = []
        for n in keeper.get_children(q):
            try:
                out.append(LogEntry.parse(keeper.get(f"{q}/{n}")[0], f"{q}/{n}"))
            except NoNodeError:
                continue
            except BadLogEntry as e:
                # A replica cannot execute an entry it cannot parse (ClickHouse logs the exception
                # and the entry stays): logged once, so the run goes on to a history the checkers
                # refuse (NoLogicalErrorsInv) instead of the observer dying with it.
                if f"{q}/{n}" not in self._bad_entries:
                    self._bad_entries.add(f"{q}/{n}")
                    self.failed(name, "queue entry", e)
        return out

    def write_history(self, folder: str | Path, fmt: str = "parquet", settled: bool = False) -> dict[str, Path]:
        """The final snapshot and the history's files. `settled`: the caller settled the cluster
        just before (no background step was enabled; queries since change no migration), so
        the history's end is one MigrationsEndProp is judged on (run.settled_step)."""
        settled_step = self.step if settled else None
        self.snapshot()
        timeout = int(self.down_timeout) if self.steps_clock and math.isfinite(self.down_timeout) else None
        self.history.finish(self.table.replication_factor, self.backend, self.bugs, self.seed, self.step,
                            settled_step, timeout)
        return self.history.write(folder, fmt)
