"""A deterministic driver: a cluster of reference replicas on one Keeper, composed from the
protocol's steps. It decides which step runs next (from a seeded RNG, or "until idle"), records
the history, and is what the command line, the end-to-end tests and the benchmarks drive.

Driver policies that are not protocol: a query first pulls the log on the replica it starts
at, and syncs the replica it reads each partition from (SYSTEM SYNC REPLICA for that partition;
what select_sequential_consistency gives), so a missed acknowledged row is a protocol bug, not
replication lag; a query with sync=False does neither and records the rows the spec excuses as
lag instead (history/lag.py, reference/races.py's racing profiles); faults are injected at INSERT
forwarding with `fault_rate`.
"""

from __future__ import annotations

import math
import random
import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from history import commands, refusals
from history.lag import in_flight, not_pulled
from history.record import History
from protocol.assignment import Assignment, GuardFailed, NotEnoughActiveReplicas, selective_assignments_rows
from protocol.cleanup_thread import CleanupSettings, cleanup_clear_old_blocks, cleanup_clear_old_logs
from protocol.insert import InsertOutcomeUnknown, route_insert, sub_block_hash
from protocol.keeper import Keeper, KeeperError, KeeperUnavailableError, NoNodeError, SessionExpiredError
from protocol.layout import Layout
from protocol.log_entry import ALTER_METADATA, GET_PART, MUTATE_PART, BadLogEntry, LogEntry
from protocol.migration import (IN_FLIGHT, MigrationError, admin_reassign, coordinator_cancel, coordinator_switch,
                                drop_foreign_partitions, migrations_in_flight, migrations_rows, read_migration,
                                replica_cleanup, replica_cleanup_for_down_leaver, replica_clone_fetch,
                                replica_take_over_migration)
from protocol.parts import PartStore, covers_as_new
from protocol.query import client_query_fails, client_start_query, prefer_local, replica_read_partition, unpin
from protocol.rebalance import system_rebalance
from protocol.recovery import replica_clone_if_lost
from protocol.registration import create_table_znodes, register_replica
from protocol.repair import drop_replica, system_repair
from protocol.replica import InsertRejected, Replica, client_alter_metadata, client_drop_partition, client_mutate
from protocol.restart import replica_restart
from protocol.scheduler import Schedule
from protocol.table import Table
from reference.workload import WORKLOAD

# Exceptions a step may raise that are not a failure of the step's code: Keeper away or a session
# expired. Their callers cope with them (a retry, a read moved to another owner, a new session).
KEEPER_FAULTS = (KeeperUnavailableError, SessionExpiredError)

# A (replica, step kind) whose step raised this many times is not tried again in the run. A
# ClickHouse server retries a failing task with back-off for ever; a run needs an end, and a step
# that raises every time would otherwise keep a settle or the wind-down going for ever.
MAX_STEP_ERRORS = 20
STEP_KINDS = ("refresh", "pull", "execute", "merge", "migrate", "cleanup")   # what Cluster._try runs


def read_done(q, partition: str) -> None:
    """ReplicaReadPartition's effect, checked by the harness after each read: the partition is no
    longer pending (spec: pending' = pending \\ {p}). A subquery answered yet still awaited would
    leave the query waiting for ever (a hang in the run, nothing in the history); raised instead,
    it is logged as the server's error and the query fails (NoLogicalErrorsInv)."""
    if partition in q.pending:
        raise RuntimeError(f"the query at {q.at} read {partition}, which is still pending")


class ReplicaNotInSync(Exception):
    """A replica cannot sync a partition before a read (a part it must fetch has no running holder)."""


class Cluster:
    # What a random background step and a settle round may run; a design built on this driver
    # (reference/pr102244/cluster.py) names its own steps.
    BACKGROUND_KINDS = ("refresh", "pull", "execute", "migrate", "merge", "cleanup")
    SETTLE_KINDS = ("refresh", "pull", "execute", "migrate")
    route_insert = staticmethod(route_insert)

    def __init__(self, connect: Callable[[], Keeper], data_dir: str | Path, replicas=("r1", "r2", "r3"),
                 table: Table = WORKLOAD, root: str = "/clickhouse/tables/01/events", bugs=frozenset(),
                 seed: int = 0, fault_rate: float = 0.0, max_concurrent: int = 4, backend: str = "memory",
                 log: Callable[[str], None] | None = None, schedule: Schedule | None = None,
                 cleanup: CleanupSettings = CleanupSettings(), down_timeout: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.connect, self.data_dir, self.table = connect, Path(data_dir), table
        self.layout, self.bugs, self.seed = Layout(root), frozenset(bugs), seed
        self.rng, self.fault_rate, self.max_concurrent, self.backend = random.Random(seed), fault_rate, max_concurrent, backend
        self.log = log or (lambda msg: None)
        self.cleanup = cleanup   # the cleanup thread's settings (log trimming, dedup window, old parts)
        # How long a migration waits for a replica it needs that is down before it ends without it:
        # a CLONE whose target is down is cancelled, a CLEANUP whose leaver is down is done on its
        # behalf (migration.replica_cleanup_for_down_leaver). In `clock`'s unit: seconds of wall
        # clock by default, as a real replica counts; a driver whose runs last seconds counts its
        # own steps instead (reference/races.py), so the rule acts within a run, at the same step
        # of the same seed whatever the machine's load.
        self.down_timeout, self.clock = down_timeout, clock
        self.settle_budget: int | None = None   # steps one settle may take (None: no bound; races.py sets one)
        self._down_since: dict[tuple[str, str], float] = {}
        # down_timeout is a number of the history's steps (count_steps): the history records it
        # (run.down_timeout) and the checkers judge DownWaitBoundedProp against it.
        self.steps_clock = False
        # What SYSTEM REBALANCE starts: by default the landed rule, max_concurrent per table.
        self.schedule = schedule or Schedule.table_limit(max_concurrent)
        # Per migration, the steps of its CLONE start, fetch, SWITCH and CLEANUP (for gantt.py).
        self.timeline: list[dict] = []
        self.step = 0  # the logical clock of the history
        self.history = History(run_id=f"{backend}-seed{seed}")
        self.admin = connect()
        create_table_znodes(self.admin, self.layout, table.replication_factor)
        self.stores: dict[str, PartStore] = {}  # the peers a fetch can reach: live replicas only
        self.replicas: dict[str, Replica] = {}
        self.down: dict[str, PartStore] = {}
        self.gone: set[str] = set()   # removed for good by SYSTEM DROP REPLICA (drop_replica)
        self.queries = 0
        self.block_rows: dict[str, list[int]] = {}  # block id -> its row_ids (for query_lag)
        self._in_flight: list[str] = []  # migrations in flight, read once per step or round
        self.step_errors: dict[tuple[str, str], int] = {}   # (replica, kind) -> its steps that raised
        self._bad_entries: set[str] = set()   # queue entries _queue_seen could not parse (logged once each)
        self._log_seen: set[str] = set()   # log entries log_mutation_rows has read
        for r in replicas:
            self.add_replica(r)

    # --- membership ---------------------------------------------------------------------
    def add_replica(self, name: str) -> Replica:
        """A replica joins (or restarts): its process up and registered, then ReplicaRestart
        (protocol/restart.py): its map loaded before it serves (F9), a clone if it was lost."""
        if name in self.replicas:
            raise ValueError(f"replica {name!r} is already running")
        if name in self.gone:
            raise ValueError(f"replica {name!r} was dropped for good (SYSTEM DROP REPLICA); a new one needs a new name")
        store = self.down.pop(name, None) or PartStore(self.data_dir / name)
        keeper = self.connect()
        active_id = uuid.uuid4().hex.encode()
        register_replica(keeper, self.layout, name, active_id)
        self.stores[name] = store
        # Back up: a later stay down is timed from its own start, not from this one's.
        for key in [k for k in self._down_since if k[1] == name]:
            del self._down_since[key]
        rep = Replica(name, keeper, self.layout, store, self.stores, self.bugs, active_id=active_id)
        try:
            done, dropped = replica_restart(rep)   # marked lost while down, or new: clone before pulling
        except KEEPER_FAULTS:
            raise
        except Exception as e:  # noqa: BLE001 - a start-up task that fails is logged; the server starts
            self.failed(name, "restart", e)
        else:
            if done != "not lost":
                self.log(f"replica {name} was lost: {done}")
            self._dropped(rep, dropped)
        self.replicas[name] = rep
        self.log(f"replica {name} up")
        return rep

    def reestablish(self, name: str) -> Replica:
        """A replica whose Keeper session expired comes back as ClickHouse's restarting thread
        brings it back: a new session, its ephemeral is_active created again, its map reloaded
        before it serves again (F9: the map may have changed while it was away), is_lost read
        again (it may have been marked lost meanwhile) and a clone if so. Until this succeeds its
        old, expired session refuses every write. Raises KeeperUnavailableError while Keeper is
        away (the caller tries again later); nothing changes then."""
        rep = self.replicas[name]
        old = rep.keeper
        new = self.connect()
        try:
            register_replica(new, self.layout, name, rep.active_id)
            rep.keeper = new
            rep.load_map()
            self._drop_foreign(rep)
            rep._lost, rep._ptr, rep._log_listing = None, None, []   # read again in the new session
            done = replica_clone_if_lost(rep)
            if done != "not lost":
                self.log(f"replica {name} was lost: {done}")
        except BaseException:
            rep.keeper = old   # still expired: read-only, tried again later
            try:
                new.close()
            except Exception:
                pass
            raise
        try:
            old.close()
        except Exception:
            pass
        self.log(f"replica {name} has a new Keeper session")
        return rep

    def failed(self, replica: str, action: str, e: Exception) -> None:
        """An unexpected exception of `replica`'s `action` ("" for the administrator's): logged in
        the history (table errors) and the run goes on, as a server logs a failed task."""
        self.history.error(self.step, replica, action, e)
        self.log(f"{replica or 'admin'} {action} raised {type(e).__name__}: {e}")

    def _drop_foreign(self, rep: Replica) -> None:
        self._dropped(rep, drop_foreign_partitions(rep))

    def _dropped(self, rep: Replica, dropped: list[str]) -> None:
        if dropped:
            self.log(f"replica {rep.name} dropped {', '.join(dropped)}: cleaned up on its behalf while it was down")

    def _down_long(self, partition: str, who: str) -> bool:
        """`who`, needed by the partition's migration, has been seen down for down_timeout."""
        now = self.clock()
        since = self._down_since.setdefault((partition, who), now)
        return now - since >= self.down_timeout

    def count_steps(self) -> None:
        """Time is the history's logical clock (self.step) from now on, down_timeout a number of
        steps (reference/races.py): the history records it, so the checkers can judge how long a
        migration waited on a down replica (DownWaitBoundedProp)."""
        self.clock = lambda: self.step
        self.steps_clock = True

    def _timeout(self) -> str:
        return f"{self.down_timeout:g} " + ("s" if self.clock is time.monotonic else "ticks of its clock")

    def _clone_waits_on_down(self, partition: str, mig: dict, keeper: Keeper) -> bool:
        """A CLONE to cancel: its target has been down for down_timeout, or its target has waited
        that long on a GET_PART of the partition that no active replica can serve while some
        replica is down (the only copy may be there: without a restart the CLONE would wait for
        ever; TLC found it, spec CloneWaitsOnDown). The target's queue is read in `keeper`, the
        session of the replica taking the step: the target's own may have expired."""
        if mig["dst"] not in self.replicas:
            return self._down_long(partition, mig["dst"])
        if mig["fetched"] and self.down and any(
                e.type == GET_PART and e.part.partition == partition
                and not any(covers_as_new(have, e.part) for store in self.stores.values()
                            for have in store.names(partition))
                for e in self._queue_seen(mig["dst"], keeper)):
            return self._down_long(partition, "catch-up")
        self._down_since.pop((partition, "catch-up"), None)
        return False

    def reconnect_admin(self) -> None:
        """The administrator's session expired: open another (it holds no ephemeral node)."""
        old, self.admin = self.admin, self.connect()
        try:
            old.close()
        except Exception:
            pass

    def crash_replica(self, name: str) -> None:
        """ReplicaCrash: the session goes (is_active with it), the map is lost, the disk stays."""
        if name not in self.replicas:
            raise ValueError(f"unknown or stopped replica {name!r}; running: {sorted(self.replicas)}")
        rep = self.replicas.pop(name)
        self.down[name] = self.stores.pop(name)
        rep.keeper.close()
        self.history.crash(self.step, name)
        self.log(f"replica {name} down")

    def drop_replica(self, name: str) -> list[str]:
        """SYSTEM DROP REPLICA 'name' for a replica that is down for good (spec DropReplica, F20): its
        Keeper subtree goes and it leaves every assignment (repair.drop_replica), and its disk is
        gone with the machine. Refuses a running replica and an unknown name (ValueError). Returns
        the partitions it was taken out of, each now short of RF until a repair (`repair`)."""
        if name in self.replicas:
            raise ValueError(f"replica {name!r} is active: SYSTEM DROP REPLICA removes only a replica that is down")
        if name not in self.down:
            known = sorted(set(self.replicas) | set(self.down))
            raise ValueError(f"unknown replica {name!r}; replicas: {', '.join(known)}")
        left = drop_replica(self.admin, self.layout, name)
        store = self.down.pop(name)
        shutil.rmtree(store.folder, ignore_errors=True)
        self.gone.add(name)
        self.log(f"DROP REPLICA {name}: out of {len(left)} partitions, now short of RF")
        return left

    def repair(self) -> list:
        """Start the repairs the concurrency limit allows (repair.system_repair, as SYSTEM REBALANCE
        does first); returns them as (partition, None, dst)."""
        started = system_repair(self.admin, self.layout, self.max_concurrent)
        for p, _, dst in started:
            self.log(f"REPAIR {p}: CLONE to {dst}")
            self._started(p, None, dst)
        return started

    # --- INSERT -------------------------------------------------------------------------
    def _faults(self, where: str, partition: str) -> None:
        if self.fault_rate and self.rng.random() < self.fault_rate:
            raise InsertOutcomeUnknown(f"connection broken {where} of {partition}")

    def insert(self, rows: list[dict], block_id: str, tries: int = 3, at: str | None = None) -> dict[str, str]:
        """ClientSendInsert with retries to random replicas (the first to `at` if given); returns
        partition -> ok/failed/unknown and records each sub-block in the history."""
        sent, subs = self.insert_sent(rows)
        status = {p: "failed" for p in subs}
        for attempt in range(tries):
            receiver = self.replicas[at if at and not attempt else self.rng.choice(self.serving())]
            done: dict[str, str] = {}
            before = {p: self.write_path(receiver.name, p) for p in subs}
            why: Exception | None = None
            try:
                self.route_insert(receiver, self.table, rows, self.replicas, self.rng, self._faults, out=done)
                error = None
            except InsertOutcomeUnknown:
                error = "unknown"
            except (InsertRejected, NotEnoughActiveReplicas, GuardFailed) as e:
                error, why = "failed", e
            except KeeperUnavailableError as e:
                # Keeper away (or the replica read-only): refused, unless a commit went out and could
                # not be read back, which is the "unknown" of a lost answer
                error, why = ("unknown" if e.outcome_unknown else "failed"), e
            except SessionExpiredError as e:
                error, why = "failed", e   # its session expired before it wrote: a read-only replica
            except KeeperError as e:
                self.failed(receiver.name, "insert", e)   # as below; not a Keeper fault (a NoNode, a version)
                error = "unknown"
            except Exception as e:  # noqa: BLE001 - the server's exception reaches the client
                # The client is told its INSERT raised; whether a sub-block was committed first it
                # cannot tell, so it is the "unknown" of a lost answer (a block id retry settles it).
                self.failed(receiver.name, "insert", e)
                error = "unknown"
            for p in done:
                status[p] = "ok"
            pending = sorted(p for p in subs if p not in done)
            if error == "failed" and pending:   # refused at pending[0]: route_insert goes in partition order
                after = self.write_path(receiver.name, pending[0])
                if before[pending[0]] is not None and after is not None:
                    self.history.insert_refused(refusals.row(self.step, block_id, pending[0], receiver.name,
                                                             why, before[pending[0]], after))
            if error == "unknown" and pending:
                status[pending[0]] = "unknown"  # that sub-block may have been written; the rest were not tried
            if not error:
                break
            try:
                self.background_step()  # time passes before the retry (maps may refresh)
            except KeeperError:
                pass   # that replica's Keeper is away: its own thread copes with it
        self.insert_answered(block_id, subs, status, sent)
        return status

    def write_path(self, receiver: str, partition: str) -> dict | None:
        """What InsertRefusalsFollowGuardsInv judges a refused try by: the partition's write path
        from `receiver`, read now (history/refusals.py); None records nothing."""
        return refusals.observe(self.admin, self.layout, self.replicas, receiver, partition)

    def insert_sent(self, rows: list[dict]) -> tuple[int, dict[str, list[dict]]]:
        """A client's INSERT leaves: its step, and its sub-blocks by partition, each one's row_ids
        noted under its dedup id (the ids a replica's queue names: query_lag reads them)."""
        sent = self.tick()
        subs = self.table.split_by_partition(rows)
        for p, sub in subs.items():
            try:
                self.block_rows[f"{p}_{sub_block_hash(p, sub)}"] = [int(r["row_id"]) for r in sub]
            except Exception as e:  # noqa: BLE001 - a broken dedup hash (a mutant's): logged, the INSERT goes on
                self.failed("", "insert", e)
        return sent, subs

    def insert_answered(self, block_id: str, subs: dict[str, list[dict]], status: dict[str, str], sent: int) -> None:
        """The client has its answer: each sub-block recorded with what the client was told of it
        (ok, failed, unknown), for the checkers. Shared by every way a client sends (Cluster.insert,
        races.py's client_send_insert)."""
        ack = self.tick()
        for p, sub in subs.items():
            self.history.insert(block_id, p, sub, status[p], sent, ack)

    def drop_partition(self, partition: str) -> int:
        """ALTER TABLE ... DROP PARTITION, sent by a client to a serving replica: the DROP_RANGE
        goes into the log (replica.client_drop_partition) and the history records what it removed.
        Returns the rows removed; GuardFailed if the partition has nothing to drop."""
        at = self.rng.choice(self.serving())
        step = self.tick()
        upto = client_drop_partition(self.replicas[at].keeper, self.layout, partition, source_replica=at)
        n = self.history.drop(f"drop-{step}", partition, step, upto)
        self.log(f"DROP PARTITION {partition} at {at}: blocks up to {upto}, {n} rows")
        return n

    def serving(self) -> list[str]:
        """The running replicas a client can use: those whose Keeper session has not expired (an
        expired one is read-only until its thread re-establishes it). All running ones when none
        is, so the client meets the read-only error rather than nothing."""
        names = sorted(self.replicas)
        return [r for r in names if not self.replicas[r].keeper.expired] or names

    # --- background steps ---------------------------------------------------------------
    def tick(self) -> int:
        self.step += 1
        return self.step

    def background_step(self, attempts: int = 8) -> str | None:
        """One background step of a random replica and kind; None if the `attempts` sampled
        (replica, kind) pairs were all disabled. Sampling, not a scan of every pair, keeps a
        step's Keeper reads bounded on a large cluster."""
        self.read_in_flight()
        kinds = list(self.BACKGROUND_KINDS)
        names = sorted(self.replicas)
        for _ in range(attempts):
            rep = self.replicas[self.rng.choice(names)]
            done = self._try(self.rng.choice(kinds), rep, random_choice=True)
            if done:
                self.tick()
                return done
        return None

    def _try(self, kind: str, rep: Replica, random_choice: bool = False) -> str | None:
        """One step of `kind` on `rep`: what it did, or None if it was not enabled. A step that
        raises unexpectedly is logged (Cluster.failed) and counts as not enabled; after
        MAX_STEP_ERRORS of them that (replica, kind) is no longer tried."""
        if kind not in STEP_KINDS:
            raise ValueError(f"unknown step kind {kind!r}")
        if self.step_errors.get((rep.name, kind), 0) >= MAX_STEP_ERRORS:
            return None
        if rep.keeper.expired:
            # Read-only: when its session expired, ClickHouse's restarting thread stopped the
            # replica's background tasks (partialShutdown); they run again once it re-establishes
            # the session (reestablish). Not enabled, as a step of a crashed replica is not.
            return None
        try:
            return self._run_step(kind, rep, random_choice)
        except KEEPER_FAULTS:
            raise
        except Exception as e:  # noqa: BLE001 - a background task's exception: logged, retried later
            self.step_errors[(rep.name, kind)] = self.step_errors.get((rep.name, kind), 0) + 1
            self.failed(rep.name, kind, e)
            return None

    def _run_step(self, kind: str, rep: Replica, random_choice: bool) -> str | None:
        if rep.unknown_commits:  # Keeper answers again: first decide the commits it could not confirm
            removed = rep.resolve_unknown_commits()
            if removed:
                self.log(f"replica {rep.name}: commits not applied, parts removed: {', '.join(removed)}")
        partitions = rep.keeper.get_children(self.layout.assignments)
        if random_choice:
            self.rng.shuffle(partitions)
        try:
            if kind == "refresh":
                # At random: one partition. Until idle: the whole map in one pass.
                changed = []
                for p in partitions[:1] if random_choice else partitions:
                    before = rep.cache.get(p)
                    after = rep.replica_refresh_cache(p)
                    if before is None or after is None or before.version != after.version:
                        changed.append(p)
                return f"ReplicaRefreshCache({rep.name}, {','.join(changed)})" if changed else None
            if kind == "pull":
                e = rep.replica_pull_log()
                return f"ReplicaPullLog({rep.name}) {e['type']} {'queued' if e['queued'] else 'skipped'}"
            if kind == "execute":
                # At random: the first entry that can run. Until idle: every entry that can, in one pass.
                done = []
                for node, _ in rep.queue():
                    try:
                        done.append(rep.replica_execute_entry(node))
                    except GuardFailed:
                        continue
                    if random_choice:
                        break
                return f"ReplicaExecuteEntry({rep.name}) {'; '.join(done)}" if done else None
            if kind == "merge":
                # The merge-selecting thread: a part mutation owed first (ClickHouse also prefers
                # finishing mutations), else, half the time, a merge.
                for p in partitions:
                    try:
                        e = rep.replica_select_mutation(p)
                        return f"ReplicaSelectMutation({rep.name}, {p}) {e.new_part_name}"
                    except GuardFailed:
                        continue
                if self.rng.random() < 0.5:
                    for p in partitions:
                        try:
                            e = rep.replica_select_merge(p)
                            return f"ReplicaSelectMerge({rep.name}, {p}) {e.new_part_name}"
                        except GuardFailed:
                            continue
                return None
            if kind == "migrate":
                return self._advance_migration(rep)
            if kind == "cleanup":
                return self._cleanup(rep)
        except GuardFailed:
            return None
        raise ValueError(f"unknown step kind {kind!r}")

    def _cleanup(self, rep: Replica) -> str | None:
        """The cleanup thread's round on `rep`: trim the log (marking replicas that are down far
        behind lost), keep blocks/ to the dedup window, unregister parts outdated long enough."""
        done = []
        for name, step in (("logs", lambda: cleanup_clear_old_logs(rep.keeper, self.layout, self.cleanup)),
                           ("blocks", lambda: cleanup_clear_old_blocks(rep.keeper, self.layout, self.cleanup,
                                                                      rep.block_stats))):
            try:
                done.append(f"{step()} {name}")
            except GuardFailed:
                pass
        parts = rep.replica_clear_old_parts(self.cleanup.old_parts_lifetime)
        if parts:
            done.append(f"{len(parts)} old parts")
        return f"Cleanup({rep.name}) {', '.join(done)}" if done else None

    def read_in_flight(self) -> None:
        """The migrations the "migrate" steps look at: read once per step or settle round, not
        once per replica tried (none, logged, if the read raises)."""
        try:
            self._in_flight = migrations_in_flight(self.admin, self.layout)
        except KEEPER_FAULTS:
            raise
        except Exception as e:  # noqa: BLE001 - as a failed step
            self.failed("", "read migrations", e)
            self._in_flight = []

    def _advance_migration(self, rep: Replica) -> str | None:
        """The migration steps `rep` can take now: CLONE's fetch as the target, SWITCH as the
        coordinator (taking over a dead one), CLEANUP as the leaving replica; first, the drop of a
        partition its map says it no longer keeps (a CLEANUP cut short after its state was written)."""
        dropped = drop_foreign_partitions(rep, known_only=True)
        if dropped:
            return f"ReplicaDropForeign({rep.name}, {','.join(dropped)})"
        for p in self._in_flight:
            mig, _ = read_migration(rep.keeper, self.layout, p)
            if not mig:
                continue
            leaver = mig["src"] if mig["state"] == "switched" else mig["dst"]
            try:
                # A replica the migration needs stays down: after down_timeout it ends without it.
                if mig["state"] == "clone" and self._clone_waits_on_down(p, mig, rep.keeper):
                    if mig["coord"] not in self.replicas:
                        replica_take_over_migration(rep.keeper, self.layout, p, rep.name)
                        return f"ReplicaTakeOverMigration({p}, {rep.name})"
                    if mig["coord"] == rep.name:
                        coordinator_cancel(rep.keeper, self.layout, p)
                        self.log(f"CANCEL {p}: target {mig['dst']} down for {self._timeout()}")
                        return f"CoordinatorCancel({p})"
                if (mig["state"] in ("switched", "cancelling") and leaver not in self.replicas
                        and self._down_long(p, leaver)):
                    replica_cleanup_for_down_leaver(rep, p, self.bugs)
                    self.log(f"CLEANUP {p} for {leaver}, down for {self._timeout()}, by {rep.name}")
                    self._mark(p, "cleanup")
                    return f"ReplicaCleanupForDownLeaver({rep.name}, {p}, {leaver})"
            except GuardFailed:
                continue
            if rep.name not in (mig["src"], mig["dst"], mig["coord"]) and mig["coord"] in self.replicas:
                continue
            try:
                if mig["state"] == "clone" and not mig["fetched"] and mig["dst"] == rep.name:
                    n = replica_clone_fetch(rep, p, self.replicas)
                    self._mark(p, "fetch")
                    return f"ReplicaCloneFetch({rep.name}, {p}) {n} parts"
                if mig["state"] == "clone" and mig["fetched"] and mig["dst"] in self.replicas:
                    if mig["coord"] not in self.replicas:
                        replica_take_over_migration(rep.keeper, self.layout, p, rep.name)
                        return f"ReplicaTakeOverMigration({p}, {rep.name})"
                    if mig["coord"] == rep.name:
                        coordinator_switch(rep.keeper, self.layout, p, mig["dst"], self.bugs)
                        self.log(f"SWITCH {p}: {mig['src']} -> {mig['dst']}" if mig["src"] else
                                 f"SWITCH {p}: {mig['dst']} added (repair)")
                        self._mark(p, "switch")
                        return f"CoordinatorSwitch({p})"
                if mig["state"] in ("switched", "cancelling") and rep.name == (
                        mig["src"] if mig["state"] == "switched" else mig["dst"]):
                    replica_cleanup(rep, p, self.bugs)
                    self.log(f"CLEANUP {p} on {rep.name}")
                    self._mark(p, "cleanup")
                    return f"ReplicaCleanup({rep.name}, {p})"
            except GuardFailed:
                continue
        return None

    def settle(self, max_rounds: int = 10_000) -> int:
        """Run every background step until none is enabled (idle); returns the steps taken.
        With `settle_budget`, a settle that takes more steps raises: one step enabled for ever (a
        livelock) would otherwise spin in the inner loop below and the run would never end."""
        taken = 0
        for _ in range(max_rounds):
            progress = 0
            self.read_in_flight()
            for r in sorted(self.replicas):
                rep = self.replicas[r]
                for kind in self.SETTLE_KINDS:
                    while self._try(kind, rep):
                        self.tick()
                        progress += 1
                        if self.settle_budget is not None and taken + progress > self.settle_budget:
                            raise RuntimeError(f"cluster did not settle in {self.settle_budget} steps: "
                                               f"{kind} on {rep.name} is still enabled (a livelock)")
            taken += progress
            if not progress:
                return taken
        raise RuntimeError(f"cluster did not settle in {max_rounds} rounds ({taken} steps)")

    # --- SELECT -------------------------------------------------------------------------
    def _sync_partition(self, rep: Replica, partition: str) -> None:
        """SYSTEM SYNC REPLICA for one partition before reading it (see the module docstring).
        A GET_PART it cannot execute (no running replica has the part: its only holder is down)
        leaves it without a committed part: ReplicaNotInSync, and the read goes to another owner
        or the query fails, as select_sequential_consistency makes it, rather than miss a row."""
        while self._try("pull", rep):
            pass
        for node, e in rep.queue():
            if e.partition == partition:
                try:
                    rep.replica_execute_entry(node)
                except GuardFailed as why:
                    if e.type == GET_PART:
                        raise ReplicaNotInSync(f"{rep.name} cannot fetch {e.new_part_name}: {why}") from why

    def query(self, at: str | None = None, interleave: int = 0, partitions: set[str] | None = None,
              between: Callable[[], None] | None = None, sync: bool = True):
        """ClientStartQuery at a replica, then each partition read in its own step with up to
        `interleave` background steps (or a call of `between`) before each read; recorded in the
        history. A partition whose chosen replica cannot sync it (its Keeper is away or its
        session expired) is read from another owner; a query that cannot go on fails
        (returns None). Whichever way it ends, its pins are released: a pin left behind would
        hold off CLEANUP for good.
        sync=False: no pull at the start and no sync before a read (a stale map, a lagging reader);
        the rows the spec excuses as replication lag are recorded with the query (history/lag.py)."""
        at = at or self.rng.choice(self.serving())
        start = self.tick()
        q, routes, got = None, {}, {}
        lag: dict[str, set[int]] = {}
        try:
            if sync:
                # Sequential consistency, first half: the replica the query starts at pulls the log to
                # its end, so every partition with a committed INSERT is in its map (by the F2 fix). The
                # spec's QueryNoMissingInv counts a row as lost exactly when that entry was pulled.
                while self._try("pull", self.replicas[at]):
                    pass
            try:
                q = client_start_query(self.replicas[at], partitions, choose=self._choose_reader, replicas=self.replicas)
            except GuardFailed:
                if not self.replicas[at].keeper.expired:
                    raise
                # TABLE_IS_READ_ONLY: a replica whose session expired refuses the SELECT (F22)
                return self._query_failed(None, at, start, routes, got, partitions)
            if not sync:
                lag = self.unpulled_lag(at, q.routes, partitions)
            routes = dict(q.routes)
            for p in sorted(q.pending):
                for _ in range(self.rng.randint(0, interleave)):
                    self.background_step()
                if between:
                    between()
                if q.routes[p] not in self.replicas:
                    return self._query_failed(q, at, start, routes, got, partitions)  # ClientQueryFails
                if sync:
                    self._sync_for_read(q, at, p)
                else:
                    lag[p] = lag.get(p, set()) | self.in_flight_lag(q.routes[p], p)
                routes[p] = q.routes[p]
                got[p] = replica_read_partition(q, p, self.replicas)
                read_done(q, p)
        except (KeeperUnavailableError, SessionExpiredError, ReplicaNotInSync):
            return self._query_failed(q, at, start, routes, got, partitions)
        except Exception as e:  # noqa: BLE001 - the server's exception reaches the client: the query failed
            self.failed(at, "query", e)
            return self._query_failed(q, at, start, routes, got, partitions)
        except BaseException:
            if q is not None:
                client_query_fails(q, self.replicas)
            raise
        self.query_answered(at, start, routes, got, "complete", partitions, lag)
        return q

    def unpulled_lag(self, at: str, routes: dict[str, str], partitions: set[str] | None) -> dict[str, set[int]]:
        """An unsynced query's lag of the partitions its map did not know (so did not route): the
        rows of their INSERTs `at` has not pulled yet (history/lag.py)."""
        unknown = [p for p in self.admin.get_children(self.layout.assignments)
                   if p not in routes and (partitions is None or p in partitions)]
        return {p: self._rows_of(ids) for p, ids in not_pulled(self.admin, self.layout, at, unknown).items()}

    def in_flight_lag(self, reader: str, partition: str) -> set[int]:
        """An unsynced read's lag: the partition's rows still on their way to `reader` (history/lag.py)."""
        return self._rows_of(in_flight(self.admin, self.layout, reader, partition))

    def query_answered(self, at: str, start: int, routes: dict, got: dict, status: str, partitions=None,
                       lag: dict[str, set[int]] | None = None, failed_by: str | None = None,
                       pending_at=None) -> None:
        """The client has its answer: the query recorded with its reads, rows and lag, for the
        checkers (and, failed by a crash, whose and where its unread partitions were routed).
        Shared by every way a client reads (Cluster.query, races.py's select_all and open queries)."""
        self.queries += 1
        self.history.query(f"q{self.queries}", at, start, self.tick(), routes, got, status, partitions, lag,
                           failed_by, pending_at)

    def _rows_of(self, block_ids) -> set[int]:
        return {r for b in block_ids for r in self.block_rows.get(b, ())}

    def _choose_reader(self, at: str, candidates: set[str]) -> str:
        """prefer_local among the owners whose session has not expired (a crashed one stays a
        candidate: the query meets it as ClientQueryFails, as the spec has it)."""
        serving = {r for r in candidates if not (r in self.replicas and self.replicas[r].keeper.expired)}
        return prefer_local(at, serving or candidates)

    def _sync_for_read(self, q, at: str, partition: str) -> None:
        """Sync the replica `partition` is routed to; when its Keeper is away, move the read (and
        its pin) to another owner the starting replica's map names, as a Distributed query
        tries the next replica of a shard."""
        tried = set()
        while True:
            reader = q.routes[partition]
            tried.add(reader)
            try:
                self._sync_partition(self.replicas[reader], partition)
                return
            except (KeeperUnavailableError, SessionExpiredError, ReplicaNotInSync):
                a = self.replicas[at].cache.get(partition)
                others = sorted(o for o in (a.owners if a else ()) if o not in tried and o in self.replicas
                                and not self.replicas[o].keeper.expired)
                if not others:
                    raise
                unpin(self.replicas[reader], partition)
                q.routes[partition] = others[0]
                pins = self.replicas[others[0]].pins
                pins[partition] = pins.get(partition, 0) + 1

    def _query_failed(self, q, at: str, start: int, routes: dict, got: dict, partitions):
        if q is not None:
            try:
                client_query_fails(q, self.replicas)
            except KEEPER_FAULTS:
                raise
            except Exception as e:  # noqa: BLE001 - its pins may stay; the query failed all the same
                self.failed(at, "query fails", e)
        self.query_answered(at, start, routes, got, "failed", partitions)
        return None

    # --- administration -----------------------------------------------------------------
    def reassign(self, partition: str, dst: str, src: str | None = None) -> dict:
        """ALTER TABLE ... REASSIGN PARTITION, recorded in the history's `commands` with what
        Keeper said right before it (src defaults to the first owner, as admin_reassign's)."""
        seen = commands.observe_reassign(self.admin, self.layout, partition, src, dst, self.max_concurrent)
        with self._command("REASSIGN", seen):
            mig = admin_reassign(self.admin, self.layout, partition, dst, src, self.max_concurrent)
        self._started(partition, mig["src"], dst)
        return mig

    def cancel(self, partition: str) -> Assignment:
        """The CANCEL of a partition's CLONE by its coordinator, recorded as `reassign` is."""
        seen = commands.observe_cancel(self.admin, self.layout, partition, self.max_concurrent)
        with self._command("CANCEL", seen):
            return coordinator_cancel(self.admin, self.layout, partition, target=self.replicas.get(seen["dst"]),
                                      bugs=self.bugs)

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

    def _started(self, partition: str, src: str, dst: str) -> None:
        self.timeline.append({"partition": partition, "src": src, "dst": dst, "clone": self.step,
                              "fetch": None, "switch": None, "cleanup": None})

    def _mark(self, partition: str, step: str) -> None:
        """Record `step` (fetch, switch, cleanup) of the partition's latest migration, at the next tick."""
        for m in reversed(self.timeline):
            if m["partition"] == partition:
                if m[step] is None:
                    m[step] = self.step + 1
                return

    def load(self, work, limit: int | None = None,
             progress: Callable[[int, dict], None] | None = None) -> dict[str, int]:
        """The RFC scenario's first phase: INSERT blocks (block_id, rows) from `work`, at most
        `limit`, with a background step after each; returns the sub-block statuses counted.
        `progress(blocks so far, statuses)` after each block."""
        statuses = {"ok": 0, "failed": 0, "unknown": 0}
        for i, (block_id, rows) in enumerate(work, 1):
            for st in self.insert(rows, block_id).values():
                statuses[st] += 1
            self.background_step()
            if progress:
                progress(i, statuses)
            if i == limit:
                break
        return statuses

    def grow_and_rebalance(self, new_replicas, interleave: Callable[[], None] | None = None) -> list:
        """Its second phase: add replicas, then SYSTEM REBALANCE with `interleave` (queries,
        inserts, crashes) between its steps; returns the moves."""
        for r in new_replicas:
            self.add_replica(r)
        return self.rebalance(interleave=interleave)

    def rebalance(self, interleave: Callable[[], None] | None = None, max_rounds: int = 1000) -> list:
        """SYSTEM REBALANCE until the plan is empty: start moves up to the concurrency limit, run
        background steps (and `interleave`, e.g. queries) until one finishes, repeat."""
        moves = []
        for _ in range(max_rounds):
            # Balanced over every registered replica: one that is down keeps its partitions (a
            # move into it is refused as inactive; a move out of it is coordinated by a taker-over).
            registered = self.admin.get_children(self.layout.replicas)
            # Partitions short of RF after a SYSTEM DROP REPLICA are repaired first (F20).
            repairs = self.repair()
            started = system_rebalance(self.admin, self.layout, registered, self.max_concurrent, self.schedule)
            for m in started:
                self.log(f"REASSIGN {m[0]}: {m[1]} -> {m[2]} (CLONE)")
                self._started(*m)
            moves += repairs + started
            started = repairs + started
            if not started and not migrations_in_flight(self.admin, self.layout):
                return moves
            self.between_cycles(started, interleave)
        raise RuntimeError(f"rebalance did not finish in {max_rounds} rounds")

    def repair_all(self, interleave: Callable[[], None] | None = None, max_rounds: int = 1000) -> list:
        """Repairs only (no balancing), until no partition is short of RF or none can be repaired,
        and none is migrating; returns the repairs started."""
        repairs = []
        for _ in range(max_rounds):
            started = self.repair()
            repairs += started
            if not started and not migrations_in_flight(self.admin, self.layout):
                return repairs
            self.between_cycles(started, interleave)
        raise RuntimeError(f"repairs did not finish in {max_rounds} rounds")

    def between_cycles(self, started, interleave=None) -> None:
        """Between two rebalancer calls: up to 50 background steps, each after the caller's
        interleave (inserts, queries); a settle when the last call started nothing."""
        for _ in range(50):
            if interleave:
                interleave()
            if not self.background_step():
                break
        if not started:
            self.settle()

    def assignment_rows(self) -> list[dict]:
        """system.selective_assignments (History.snapshot). An assignment znode a broken step left
        corrupt (a mutant's CANCEL after SWITCH names an owner as leaving) is logged and left out:
        no replica can read an owner from it, so the checkers see the partition with none, rather
        than the snapshot raising and the run leaving no history."""
        return selective_assignments_rows(self.admin, self.layout,
                                          corrupt=lambda p, e: self.failed("", "read assignment", e))

    def end_of_run(self, restart=(), queries: int = 0, history=None, fmt: str = "parquet") -> list[str]:
        """A `reference run`'s last phase, whichever design: the replicas given back, settled, the
        final queries, the history written (or the final snapshot taken); the history check's
        verdict (checkers/oracle.py)."""
        from checkers.oracle import violations
        for r in restart:
            self.add_replica(r)
        self.settle()
        for _ in range(queries):
            self.query()
        if history:
            paths = self.write_history(history, fmt, settled=True)
            self.log(f"history written to {history} ({', '.join(sorted(paths))})")
        else:
            self.snapshot()
        return violations(self.history, self.table.replication_factor)

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

    def alter_metadata(self, change: str) -> int:
        """ALTER TABLE ... ADD COLUMN sent to a serving replica: /columns and an ALTER_METADATA entry
        (replica.client_alter_metadata). Returns the table's new metadata version."""
        at = self.rng.choice(self.serving())
        self.tick()
        entry = client_alter_metadata(self.replicas[at].keeper, self.layout, change, source_replica=at)
        self.log(f"ALTER {change} at {at}: metadata version {entry.alter_version}")
        return entry.alter_version

    def mutate(self, commands: str) -> dict[str, int]:
        """ALTER TABLE ... UPDATE / DELETE sent to a serving replica: a table-wide mutation in
        mutations/ (replica.client_mutate). Returns the block number it took per partition."""
        at = self.rng.choice(self.serving())
        self.tick()
        m = client_mutate(self.replicas[at].keeper, self.layout, commands, source_replica=at)
        self.log(f"ALTER {commands} at {at}: block numbers {dict(m.block_numbers)}")
        return dict(m.block_numbers)

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

    def close(self) -> None:
        for rep in self.replicas.values():
            rep.keeper.close()
        self.admin.close()
