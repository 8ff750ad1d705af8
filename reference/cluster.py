"""A deterministic driver: a cluster of reference replicas on one Keeper, composed from the
protocol's steps. It decides which step runs next (from a seeded RNG, or "until idle"), and is
what the command line, the end-to-end tests and the benchmarks drive. What it records of the run
is reference/recorder.py's (Recorder), the faults it can be dealt reference/nemesis.py's
(Nemesis), both mixed into Cluster; the verdict on the history is the caller's
(checkers.oracle.violations).

Driver policies that are not protocol: a query first pulls the log on the replica it starts
at, and syncs the replica it reads each partition from (SYSTEM SYNC REPLICA for that partition;
what select_sequential_consistency gives), so a missed acknowledged row is a protocol bug, not
replication lag; a query with sync=False does neither and records the rows the spec excuses as
lag instead (history/lag.py, reference/races.py's racing profiles); faults are injected at INSERT
forwarding with `fault_rate`.

The protocol's steps are called by the names this module imports: a test that breaks one
patches it here (`monkeypatch.setattr("reference.cluster.coordinator_switch", ...)`), so the
methods that call them (migration steps, REASSIGN, CANCEL, a query's reads) stay in this module.
"""

from __future__ import annotations

import contextlib
import errno
import random
import time
from pathlib import Path
from typing import Callable

from history import commands
from protocol.assignment import Assignment, GuardFailed, NotEnoughActiveReplicas
from protocol.cleanup_thread import CleanupSettings, cleanup_clear_old_blocks, cleanup_clear_old_logs
from protocol.insert import InsertOutcomeUnknown, ReplicaBusy, route_insert
from protocol.keeper import Keeper, KeeperError, KeeperUnavailableError, SessionExpiredError
from protocol.layout import Layout
from protocol.log_entry import GET_PART
from protocol.migration import (admin_reassign, coordinator_cancel, coordinator_switch, drop_foreign_partitions,
                                migrations_in_flight, read_migration, replica_cleanup, replica_cleanup_for_down_leaver,
                                replica_clone_fetch, replica_take_over_migration)
from protocol.parts import PartStore, covers_as_new
from protocol.query import client_query_fails, client_start_query, prefer_local, replica_read_partition, unpin
from protocol.rebalance import system_rebalance
from protocol.recovery import replica_clone_if_lost
from protocol.registration import create_table_znodes, register_replica
from protocol.repair import system_repair
from protocol.replica import InsertRejected, Replica, ReplicaReadOnly, client_alter_metadata, client_drop_partition, client_mutate
from protocol.restart import replica_check_parts, replica_restart
from protocol.scheduler import Schedule
from protocol.table import Table
from reference.nemesis import Nemesis
from reference.parallel_reads import ParallelReads
from reference.recorder import KEEPER_FAULTS, Recorder
from reference.windows import clone_target_of, switch_with_target_queued
from reference.workload import WORKLOAD

# A (replica, step kind) whose step raised this many times is not tried again in the run. An
# exception other than the disk's is a bug the history records (NoLogicalErrorsInv: the run fails
# anyway); a run needs an end, and a step that raises every time would otherwise keep a settle or
# the wind-down going for ever, and fill the errors table.
MAX_STEP_ERRORS = 20
# A step the disk failed (OSError: read-only, full, an I/O error) is postponed and retried for
# ever, as ClickHouse postpones a queue entry whose fetch or merge failed and backs off a failing
# background task: the fault is the environment's and passes, and every step is safe to take
# again (it starts over from what Keeper and the disk hold). After the n-th failure in a row the
# (replica, kind) sits out its next min(2**(n-1), DISK_POSTPONE_CAP) attempts; one that does not
# fail resets it. Counted in attempts, not seconds, so the deterministic driver stays
# deterministic; the live runtime attempts each kind once a round of its replica thread.
DISK_POSTPONE_CAP = 32
# What a failing disk answers: read-only, full (or over quota), an I/O error, access refused.
DISK_ERRNOS = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EACCES, errno.EPERM})
STEP_KINDS = ("refresh", "pull", "execute", "merge", "migrate", "cleanup")   # what Cluster._try runs
# Seconds an INSERT's or a SELECT's deadline keeps back from its Keeper calls for what follows the
# last one (Cluster._keeper_deadline): a client that asked for an answer in 3 s gets one by then.
ANSWER_MARGIN = 0.2


def read_done(q, partition: str) -> None:
    """ReplicaReadPartition's effect, checked by the harness after each read: the partition is no
    longer pending (spec: pending' = pending \\ {p}). A subquery answered yet still awaited would
    leave the query waiting for ever (a hang in the run, nothing in the history); raised instead,
    it is logged as the server's error and the query fails (NoLogicalErrorsInv)."""
    if partition in q.pending:
        raise RuntimeError(f"the query at {q.at} read {partition}, which is still pending")


class ReplicaNotInSync(Exception):
    """A replica cannot sync a partition before a read (a part it must fetch has no running holder)."""


class Cluster(Recorder, Nemesis, ParallelReads):
    """The driver; the history side is Recorder's, the faults Nemesis's (their modules)."""
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
                 clock: Callable[[], float] = time.monotonic, journal: str | Path | None = None,
                 resume: bool = False):
        """`journal`: a folder the history is written to as it is recorded (history/journal.py);
        `resume`: carry on the history a killed run journaled there, `replicas` being the ones it
        had running, each recorded as crashed (the kill took the whole process) and started
        again, as a restarted server attaches its tables from Keeper and its disk."""
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
        # Log entries a "pull" step moves into the queue: 1, the spec's ReplicaPullLog, unless a
        # driver asks for ClickHouse's batches (Replica.replica_pull_logs; the live runtime does).
        self.pull_batch = 1
        # The windows a racing run counts (reference/windows.py): None, nothing observed (each
        # observation reads Keeper; only the racing runs ask for them).
        self.windows = None
        self._down_since: dict[tuple[str, str], float] = {}
        # down_timeout is a number of the history's steps (count_steps): the history records it
        # (run.down_timeout) and the checkers judge DownWaitBoundedProp against it.
        self.steps_clock = False
        # What SYSTEM REBALANCE starts: the default schedule (largest first, per source and per
        # target limits in proportion to the bytes left) under the table's cap, max_concurrent,
        # which REASSIGN and REPAIR obey too.
        self.schedule = (schedule or Schedule()).capped(max_concurrent)
        self._init_record(f"{backend}-seed{seed}")   # the history, its clock and the timeline (Recorder)
        # The INSERTs a killed run sent and had no answer to, by block id: its client sends them
        # again (reference run --attach), as a ClickHouse client retries an INSERT whose
        # connection broke with the same data, which deduplication makes exactly-once.
        self.unanswered_at_resume: list[str] = []
        if journal is not None and resume:
            self.unanswered_at_resume = self.resume_record(journal)
            self.log(f"history resumed from {journal} at step {self.step}: {len(self.unanswered_at_resume)} INSERTs "
                     f"sent and not answered before the kill recorded unknown")
            for r in replicas:
                self.history.crash(self.step, r)
        elif journal is not None:
            self.history.journal_to(journal)
        self.admin = connect()
        create_table_znodes(self.admin, self.layout, table.replication_factor)
        self.stores: dict[str, PartStore] = {}  # the peers a fetch can reach: live replicas only
        self.replicas: dict[str, Replica] = {}
        self.down: dict[str, PartStore] = {}
        self.gone: set[str] = set()   # removed for good by SYSTEM DROP REPLICA (drop_replica)
        self._in_flight: list[str] = []  # migrations in flight, read once per step or round
        self.step_errors: dict[tuple[str, str], int] = {}   # (replica, kind) -> its steps that raised
        self.disk_failures: dict[tuple[str, str], int] = {}   # (replica, kind) -> its steps the disk failed, in a row
        self.postponed: dict[tuple[str, str], int] = {}       # (replica, kind) -> attempts it still sits out
        # (step, replica, kind, error) of every step the disk failed: the environment's fault, not
        # the protocol's, so not in the history's errors table (as Keeper faults are not) but in its
        # own, disk_faults
        self.disk_faults: list[tuple[int, str, str, str]] = []
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
        active_id = store.server_uuid()   # a restart takes over the is_active a killed process left
        register_replica(keeper, self.layout, name, active_id)
        self.stores[name] = store
        # Back up: a later stay down is timed from its own start, not from this one's.
        for key in [k for k in self._down_since if k[1] == name]:
            del self._down_since[key]
        rep = Replica(name, keeper, self.layout, store, self.stores, self.bugs, active_id=active_id)
        try:
            # A part a killed process wrote and did not commit, or committed and lost: first.
            detached, refetch = replica_check_parts(rep)
            if detached or refetch:
                self.log(f"replica {name}: parts not committed, detached as ignored_: {', '.join(detached) or 'none'}; "
                         f"registered and not on disk, fetched again: {', '.join(refetch) or 'none'}")
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
            rep.read_pointer_again()   # in the new session
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

    def repair(self) -> list:
        """Start the repairs the concurrency limit allows (repair.system_repair, as SYSTEM REBALANCE
        does first); returns them as (partition, None, dst)."""
        started = system_repair(self.admin, self.layout, self.max_concurrent)
        for p, _, dst in started:
            self.log(f"REPAIR {p}: CLONE to {dst}")
            self._started(p, None, dst)
        return started

    # --- INSERT -------------------------------------------------------------------------
    def insert(self, rows: list[dict], block_id: str, tries: int = 3, at: str | None = None,
               deadline: float | None = None) -> dict[str, str]:
        """ClientSendInsert with retries to random replicas (the first to `at` if given); returns
        partition -> ok/failed/unknown and records each sub-block in the history.
        `deadline` (seconds): the INSERT answers within it whatever Keeper does, as a client's own
        timeout bounds its wait. Every Keeper call made for it (the routing, the commits, the
        harness's reads of the write path, the background step between tries) is cut short there
        (Keeper.answer_by), and no try starts after it; a sub-block it stopped is failed, or
        unknown if its commit went out unanswered."""
        t_end = self._keeper_deadline(deadline)
        with self._answer_by(t_end):
            return self._insert(rows, block_id, tries, at, t_end)

    @staticmethod
    def _keeper_deadline(deadline: float | None) -> float | None:
        """When Keeper must have answered for a request due in `deadline` seconds: ANSWER_MARGIN
        earlier (a tenth of a deadline under ten times it), left for the work after the last call
        (the history's rows, a part's files, a lock's release), so the answer itself comes in time
        (the load sweep saw 3.05 s at a 3 s deadline without it)."""
        if deadline is None:
            return None
        return time.monotonic() + deadline - min(ANSWER_MARGIN, deadline / 10)

    @contextlib.contextmanager
    def _answer_by(self, t_end: float | None):
        """Every keeper of the cluster (the replicas', the administrator's) answers by t_end."""
        if t_end is None:   # no deadline: nothing to set on each keeper for every INSERT and SELECT
            yield
            return
        with contextlib.ExitStack() as stack:
            for k in (self.admin, *(r.keeper for r in self.replicas.values())):
                stack.enter_context(k.answer_by(t_end))
            yield

    def insert_not_sent(self, rows: list[dict], block_id: str) -> dict[str, str]:
        """An INSERT its client gave up on before it reached a replica (the live runtime's
        membership held past its deadline): every sub-block failed (nothing was written),
        recorded as every answered INSERT is."""
        sent, subs = self.insert_sent(rows, block_id)
        status = {p: "failed" for p in subs}
        self.insert_answered(block_id, subs, status, sent)
        return status

    def _insert(self, rows: list[dict], block_id: str, tries: int, at: str | None, t_end: float | None) -> dict[str, str]:
        sent, subs = self.insert_sent(rows, block_id)
        status = {p: "failed" for p in subs}
        for attempt in range(tries):
            if attempt and t_end is not None and time.monotonic() >= t_end:
                break   # the deadline: no try more
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
            except OSError as e:
                # The receiver's (or a forwarded-to owner's) disk failed: an error the client sees,
                # not a bug of the protocol's (unless no disk's errno: then as below). Whether a
                # sub-block was committed first it cannot tell: the "unknown" of a lost answer.
                if not self._disk_fault(e, receiver.name, "insert"):
                    self.failed(receiver.name, "insert", e)
                error = "unknown"
            except Exception as e:  # noqa: BLE001 - the server's exception reaches the client
                # The client is told its INSERT raised; whether a sub-block was committed first it
                # cannot tell, so it is the "unknown" of a lost answer (a block id retry settles it).
                self.failed(receiver.name, "insert", e)
                error = "unknown"
            for p in done:
                status[p] = "ok"
            pending = sorted(p for p in subs if p not in done)
            # Refused at pending[0] (route_insert goes in partition order); a try its deadline cut
            # short while it waited for a busy replica, or whose Keeper did not answer (unlike a
            # read-only replica's refusal, ReplicaReadOnly), was not refused by the protocol
            # (InsertRefusalsFollowGuardsInv judges the protocol's refusals; a ZooKeeper that
            # committed nothing while it still served reads showed the harness an open write path
            # beside a try that timed out).
            not_refused = isinstance(why, ReplicaBusy) or (isinstance(why, KeeperUnavailableError)
                                                           and not isinstance(why, ReplicaReadOnly))
            if error == "failed" and pending and not not_refused:
                after = self.write_path(receiver.name, pending[0])
                if before[pending[0]] is not None and after is not None:
                    self.insert_refused(block_id, pending[0], receiver.name, why, before[pending[0]], after)
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

    def _disk_fault(self, e: OSError, replica: str, what: str) -> bool:
        """Whether `e` is the disk's (DISK_ERRNOS); if so it is recorded in disk_faults and in the
        history (its table disk_faults)."""
        if e.errno not in DISK_ERRNOS:
            return False
        self.disk_faults.append((self.step, replica, what, f"{type(e).__name__}: {e}"))
        self.history.disk_fault(self.step, replica, what, e)
        return True

    def _try(self, kind: str, rep: Replica, random_choice: bool = False) -> str | None:
        """One step of `kind` on `rep`: what it did, or None if it was not enabled. A step that
        raises unexpectedly is logged (Cluster.failed) and counts as not enabled; after
        MAX_STEP_ERRORS of them that (replica, kind) is no longer tried. A step the disk failed
        is postponed and tried again (DISK_POSTPONE_CAP)."""
        if kind not in STEP_KINDS:
            raise ValueError(f"unknown step kind {kind!r}")
        # The live runtime's other threads act on this replica too (Replica.lock). A step taken on
        # an INSERT's or a SELECT's behalf (its deadline set: Keeper.answer_by) waits for the lock no
        # longer than that deadline, and is then not enabled.
        with rep.locked_by_deadline() as got:
            return self._try_locked(kind, rep, random_choice) if got else None

    def _try_locked(self, kind: str, rep: Replica, random_choice: bool) -> str | None:
        key = (rep.name, kind)
        if self.step_errors.get(key, 0) >= MAX_STEP_ERRORS:
            return None
        if self.postponed.get(key):
            self.postponed[key] -= 1
            return None
        if rep.keeper.expired:
            # Read-only: when its session expired, ClickHouse's restarting thread stopped the
            # replica's background tasks (partialShutdown); they run again once it re-establishes
            # the session (reestablish). Not enabled, as a step of a crashed replica is not.
            return None
        try:
            done = self._run_step(kind, rep, random_choice)
        except KEEPER_FAULTS:
            raise
        except OSError as e:
            if not self._disk_fault(e, rep.name, kind):   # a file the step expected and did not find is the protocol's
                self.step_errors[key] = self.step_errors.get(key, 0) + 1
                self.failed(rep.name, kind, e)
                return None
            n = self.disk_failures[key] = self.disk_failures.get(key, 0) + 1
            self.postponed[key] = min(2 ** (n - 1), DISK_POSTPONE_CAP)
            if n == 1:   # once per spell, not once per retry
                self.log(f"{rep.name} {kind}: the disk failed ({type(e).__name__}: {e}); postponed, tried again")
            return None
        except Exception as e:  # noqa: BLE001 - a background task's exception: logged, retried later
            self.step_errors[key] = self.step_errors.get(key, 0) + 1
            self.failed(rep.name, kind, e)
            return None
        if self.disk_failures.pop(key, None):
            self.log(f"{rep.name} {kind}: the disk works again")
        return done

    def _run_step(self, kind: str, rep: Replica, random_choice: bool) -> str | None:
        if rep.unknown_commits or rep.unknown_entry_commits:  # Keeper answers again: first decide the commits it could not confirm
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
                if self.pull_batch > 1:
                    done = rep.replica_pull_logs(self.pull_batch)
                    return f"ReplicaPullLog({rep.name}) x{len(done)}: {sum(e['queued'] for e in done)} queued"
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
                        if self.windows is not None and switch_with_target_queued(rep.keeper, self.layout, p,
                                                                                  mig["dst"]):
                            self.windows.open("switch_with_target_queued", self.step)
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
        """Run every background step until none is enabled (idle), a step the disk failed tried
        again until it succeeds; returns the steps taken.
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
            # Idle: nothing enabled, and no step of a running replica that the disk failed last
            # time it ran (each round is one more attempt of it: it runs again within
            # DISK_POSTPONE_CAP rounds; a disk that stays broken ends in the error below).
            if not progress and not any(k[0] in self.replicas and k[1] in self.SETTLE_KINDS for k in self.disk_failures):
                return taken
        raise RuntimeError(f"cluster did not settle in {max_rounds} rounds ({taken} steps)"
                           + (f"; the disk still fails {sorted(self.disk_failures)}" if self.disk_failures else ""))

    # --- SELECT -------------------------------------------------------------------------
    def _sync_partition(self, rep: Replica, partition: str) -> None:
        """SYSTEM SYNC REPLICA for one partition before reading it (see the module docstring).
        A GET_PART it cannot execute (no running replica has the part: its only holder is down)
        leaves it without a committed part: ReplicaNotInSync, and the read goes to another owner
        or the query fails, as select_sequential_consistency makes it, rather than miss a row."""
        with rep.lock:
            self._sync_locked(rep, partition)

    def _sync_locked(self, rep: Replica, partition: str) -> None:
        while self._try("pull", rep):
            pass
        for node, e in rep.queue():
            if e.partition == partition:
                try:
                    rep.replica_execute_entry(node)
                except GuardFailed as why:
                    if e.type == GET_PART:
                        raise ReplicaNotInSync(f"{rep.name} cannot fetch {e.new_part_name}: {why}") from why
                except OSError as why:
                    if not self._disk_fault(why, rep.name, "sync"):
                        raise
                    # Its disk failed: it cannot sync, so the read goes to another owner (or the
                    # query fails), as for a part it cannot fetch; the step is tried again later.
                    raise ReplicaNotInSync(f"{rep.name} cannot sync {partition}: its disk failed ({why})") from why

    def query(self, at: str | None = None, interleave: int = 0, partitions: set[str] | None = None,
              between: Callable[[], None] | None = None, sync: bool = True, deadline: float | None = None):
        """Cluster._query; `deadline` (seconds): the SELECT answers within it whatever Keeper
        does, as an INSERT's (Cluster.insert): every Keeper call made for it (the pull at its
        start, its readers' syncs, the background steps it interleaves) is cut short there, and a
        query its deadline stopped has failed."""
        with self._answer_by(self._keeper_deadline(deadline)):
            return self._run_query(at, interleave, partitions, between, sync)

    def _run_query(self, at: str | None, interleave: int, partitions: set[str] | None,
               between: Callable[[], None] | None, sync: bool):
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
                with self.every_replica_locked():   # it pins each replica it routes to
                    q = client_start_query(self.replicas[at], partitions, choose=self._choose_reader,
                                           replicas=self.replicas)
                self.note_clone_target_query(at)
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
                with self.replicas[q.routes[p]].lock:
                    got[p] = replica_read_partition(q, p, self.replicas)
                read_done(q, p)
        except (KeeperUnavailableError, SessionExpiredError, ReplicaNotInSync):
            return self._query_failed(q, at, start, routes, got, partitions)
        except Exception as e:  # noqa: BLE001 - the server's exception reaches the client: the query failed
            self.failed(at, "query", e)
            return self._query_failed(q, at, start, routes, got, partitions)
        except BaseException:
            if q is not None:
                with self.every_replica_locked():
                    client_query_fails(q, self.replicas)
            raise
        self.query_answered(at, start, routes, got, "complete", partitions, lag)
        return q

    def note_clone_target_query(self, at: str) -> None:
        """A SELECT received by `at`: a window opened if `at` is a CLONE's target (windows.py)."""
        if self.windows is not None and clone_target_of(self.admin, self.layout, at, self.replicas[at].cache):
            self.windows.open("query_at_clone_target", self.step)

    @contextlib.contextmanager
    def every_replica_locked(self):
        """Every running replica's lock, in name order (Replica.lock): for a step that acts on
        several replicas at once, as a query's start pins each replica it routes to."""
        with contextlib.ExitStack() as stack:
            for name in sorted(self.replicas):
                stack.enter_context(self.replicas[name].lock)
            yield

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
                with self.replicas[reader].lock:
                    unpin(self.replicas[reader], partition)
                q.routes[partition] = others[0]
                with self.replicas[others[0]].lock:
                    pins = self.replicas[others[0]].pins
                    pins[partition] = pins.get(partition, 0) + 1

    def query_not_sent(self, at: str | None):
        """A SELECT its client gave up on before it reached a replica (the live runtime's
        membership held past its deadline): failed, recorded as every answered query is."""
        at = at or self.rng.choice(sorted(self.replicas))
        self.query_answered(at, self.tick(), {}, {}, "failed", None)

    def _query_failed(self, q, at: str, start: int, routes: dict, got: dict, partitions):
        if q is not None:
            try:
                with self.every_replica_locked():
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
            # self.schedule is already under the table's cap, max_concurrent (__init__)
            started = system_rebalance(self.admin, self.layout, registered, schedule=self.schedule)
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

    def end_of_run(self, restart=(), queries: int = 0, history=None, fmt: str = "parquet") -> None:
        """A `reference run`'s last phase, whichever design: the replicas given back, settled, the
        final queries, the history written (or the final snapshot taken). The verdict is the
        caller's: checkers.oracle.violations on `self.history`, as the CLI's runs ask it."""
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

    def close(self) -> None:
        for rep in self.replicas.values():
            rep.keeper.close()
        self.admin.close()
        if self.history.journal is not None:
            self.history.journal.close()
