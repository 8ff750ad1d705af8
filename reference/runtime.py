"""The runtime layer: a live cluster. One thread per replica runs its background steps (pull the
log, execute the queue, refresh the map on a timer, migration steps, merges) while clients insert
and query from their own threads and an operator crashes and restarts replicas and rebalances.

Locks, as a ClickHouse server's: each replica's memory and disk are guarded by its own lock
(protocol/replica.py's Replica.lock, what ClickHouse's parts and queue mutexes guard), taken for
one step at a time, so an INSERT written at one replica waits for at most one step of that
replica, never for the others'. Steps stay atomic, as the spec's actions are, and threads
interleave them in an order nobody chose. Which replicas run (`Membership`) is read by every step,
INSERT and query and changed by a crash or a restart, which wait for the steps in flight to end.
What this layer adds to the deterministic driver (reference/cluster.py), whose steps it reuses
unchanged. Lock order: membership, then one replica's lock (or every replica's in name order,
Cluster.every_replica_locked), then the leaf locks (the history's clock and rows, a part store's
index).

A round of a replica thread pulls the log up to its end as it stands (ClickHouse's
pullLogsToQueue copies every new entry in one call, in multis of up to 100), then executes up to
EXECUTE_BATCH ready queue entries (ClickHouse's queue runs on a pool of background_pool_size = 16
slots), then the other kinds once. One executor per replica, not a pool of threads: the entries
of one replica run one after another under its lock, as the spec executes one entry per step;
running them side by side would need the bookkeeping ClickHouse keeps for it (entries currently
executing, future parts) that the spec does not model.

Keeper faults do not end a replica thread. A step that meets KeeperUnavailableError (the
keeper's retries ran out of time) or SessionExpiredError is abandoned, and the thread backs off
outside every lock, as ClickHouse's background threads do; a replica whose session expired is
re-established by its own thread before it takes another step (Cluster.reestablish: new
session, is_active, map reloaded first). `recoveries` records, per replica, how long it went
from its first Keeper error to its next completed round of steps. An expired administrator
session is re-opened by one thread, outside the membership, which it takes only to swap the
session in; an INSERT or a query with a deadline waits for the membership no longer than that
(answered failed, having reached no replica), so none outlives its deadline while Keeper can
create no session.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter

from protocol.keeper import KeeperUnavailableError, SessionExpiredError
from protocol.migration import migrations_in_flight
from protocol.rebalance import system_rebalance
from protocol.replica import PULL_BATCH
from reference.cluster import Cluster

# Pull batches a round takes at most (each up to PULL_BATCH entries in one multi, as
# pullLogsToQueue's), and queue entries it executes at most (the queue's pool,
# background_pool_size, is 16 by default in ClickHouse).
PULL_BATCHES = 10
EXECUTE_BATCH = 16


class MembershipBusy(TimeoutError):
    """The membership stayed held exclusively (a crash, a restart) past a caller's deadline."""


class Membership:
    """Which replicas run: held shared by every step, INSERT and query, exclusively by a crash, a
    restart and an operator's section that must see the cluster still (`LiveCluster.lock`).
    Writer-preferring, so a crash is not put off for ever by a steady INSERT stream; re-entrant on
    both sides for the thread that holds it. The standard library has no readers-writer lock:
    this is the textbook one on a Condition."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0            # shared holds of every thread, each counted once
        self._writer: int | None = None
        self._writers_waiting = 0
        self._local = threading.local()   # this thread's depth: shared, exclusive

    def _depth(self, side: str) -> int:
        return getattr(self._local, side, 0)

    @contextlib.contextmanager
    def _reentered(self, side: str):
        """The thread holds it already: one level deeper on `side`, nothing to wait for."""
        setattr(self._local, side, self._depth(side) + 1)
        try:
            yield
        finally:
            setattr(self._local, side, self._depth(side) - 1)

    @contextlib.contextmanager
    def shared(self, until: float | None = None):
        """Held shared; `until` (time.monotonic()): raise MembershipBusy rather than wait past it,
        so an INSERT or a query with a deadline answers within it whatever a crash or a restart
        holds (issue 38: no INSERT outlives its deadline)."""
        if self._depth("shared") or self._depth("exclusive"):
            with self._reentered("shared"):
                yield
            return
        with self._cond:
            while self._writer is not None or self._writers_waiting:
                left = None if until is None else until - time.monotonic()
                if left is not None and left <= 0:
                    raise MembershipBusy("the replicas' membership was changing past the deadline")
                self._cond.wait(left)
            self._readers += 1
        self._local.shared = 1
        try:
            yield
        finally:
            self._local.shared = 0
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self):
        if self._depth("exclusive"):
            with self._reentered("exclusive"):
                yield
            return
        if self._depth("shared"):
            raise RuntimeError("the membership is held shared by this thread: taking it exclusively would wait for "
                               "ever")
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer is not None or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = threading.get_ident()
        self._local.exclusive = 1
        try:
            yield
        finally:
            self._local.exclusive = 0
            with self._cond:
                self._writer = None
                self._cond.notify_all()


class LiveCluster:
    def __init__(self, cluster: Cluster, step_interval: float = 0.0005, refresh_interval: float = 0.2):
        self.cluster = cluster
        cluster.pull_batch = PULL_BATCH   # a pull step is pullLogsToQueue's batch (Replica.replica_pull_logs)
        self.membership = Membership()
        self._admin_reconnecting = threading.Lock()   # one thread opens a new administrator session
        self.step_interval, self.refresh_interval = step_interval, refresh_interval
        self.threads: dict[str, threading.Thread] = {}
        self.stopping = threading.Event()
        self.steps_by: Counter[str] = Counter()   # replica -> steps taken (each key written by its thread only)
        self.errors: list[BaseException] = []
        self.keeper_errors: list[tuple[str, float, str]] = []   # (replica, monotonic time, error) seen and survived
        self.recoveries: list[tuple[str, float]] = []            # (replica, seconds from first error to next good round)
        self.reestablished: list[str] = []                       # replicas given a new session, in order

    @property
    def steps(self) -> int:
        return sum(self.steps_by.values())

    @property
    def lock(self):
        """The cluster held still: no step, INSERT or query runs inside (`with live.lock:`)."""
        return self.membership.exclusive()

    def __enter__(self) -> "LiveCluster":
        for r in sorted(self.cluster.replicas):
            self._start_thread(r)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start_thread(self, name: str) -> None:
        t = threading.Thread(target=self._run, args=(name,), name=f"replica-{name}", daemon=True)
        self.threads[name] = t
        t.start()

    def _run(self, name: str) -> None:
        rng = random.Random(hash((self.cluster.seed, name)))
        next_refresh = 0.0
        backoff, down_since = 0.0, None
        try:
            while not self.stopping.is_set():
                try:
                    if self.cluster.admin.expired:   # the administrator's session is every thread's
                        self._reconnect_admin()
                    with self.membership.shared():
                        rep = self.cluster.replicas.get(name)
                        if rep is None:
                            return  # crashed: a restart starts a new thread
                        if rep.keeper.expired:   # its session expired: read-only until this succeeds
                            with rep.lock:
                                self.cluster.reestablish(name)
                            self.reestablished.append(name)
                        refresh = time.monotonic() >= next_refresh   # the map refresh timer
                        if refresh:
                            next_refresh = time.monotonic() + self.refresh_interval
                        self._round(rep, refresh)
                    if down_since is not None:
                        self.recoveries.append((name, time.monotonic() - down_since))
                    backoff, down_since = 0.0, None
                except (KeeperUnavailableError, SessionExpiredError) as e:
                    # Keeper is away or this session expired: the step is abandoned (every step is
                    # safe to take again), and the thread waits outside every lock.
                    now = time.monotonic()
                    self.keeper_errors.append((name, now, f"{type(e).__name__}: {e}"))
                    down_since = now if down_since is None else down_since
                    backoff = min(max(2 * backoff, 0.05), 1.0)
                if backoff:
                    self.stopping.wait(backoff * (0.5 + rng.random()))
                time.sleep(self.step_interval * rng.random())
        except BaseException as e:  # surfaced by stop(): a thread must not die silently
            self.errors.append(e)

    def _reconnect_admin(self) -> None:
        """A new administrator session, opened by one thread at a time and outside the membership:
        opening one can take the session timeout while Keeper cannot create sessions, and held
        exclusively for that long it stopped every INSERT and query past its deadline (found by
        the fault suite's stall rows). Only the swap is exclusive."""
        if not self._admin_reconnecting.acquire(blocking=False):
            return   # another thread is at it
        try:
            if not self.cluster.admin.expired:
                return
            new = self.cluster.connect()
            with self.membership.exclusive():
                old, self.cluster.admin = self.cluster.admin, new
            with contextlib.suppress(Exception):
                old.close()
        finally:
            self._admin_reconnecting.release()

    def _round(self, rep, refresh: bool) -> None:
        """One round of `rep`'s background work, each step under its lock (Cluster._try): the
        whole map when the timer is due, the log pulled to its end, a batch of queue entries, one
        migration step, one merge selection."""
        for kind, most in (("refresh", 1 if refresh else 0), ("pull", PULL_BATCHES), ("execute", EXECUTE_BATCH),
                           ("migrate", 1), ("merge", 1)):
            if kind == "migrate":
                self.cluster.read_in_flight()
            for _ in range(most):
                # The timer refreshes the whole map; other kinds take one random step each time.
                if not self.cluster._try(kind, rep, random_choice=kind != "refresh"):
                    break
                self.cluster.tick()
                self.steps_by[rep.name] += 1

    # --- what a client or an operator does ----------------------------------------------
    def insert(self, rows: list[dict], block_id: str, deadline: float | None = None,
               at: str | None = None) -> dict[str, str]:
        """Cluster.insert from the caller's thread, beside the replica threads: it waits only for
        the one step of the replica it is working at (Replica.lock). `deadline` bounds its Keeper
        calls and its tries; `at`, the replica its first try is sent to (Cluster.insert)."""
        until = None if deadline is None else time.monotonic() + deadline
        try:
            with self.membership.shared(until):
                left = None if until is None else until - time.monotonic()
                return self.cluster.insert(rows, block_id, at=at, deadline=left)
        except MembershipBusy:   # not sent to any replica: failed, in time
            return self.cluster.insert_not_sent(rows, block_id)

    def query(self, at: str | None = None, deadline: float | None = None):
        """Cluster.query from the caller's thread; each partition's sync and read hold the reading
        replica's lock. `deadline` bounds its Keeper calls and its wait for the membership."""
        until = None if deadline is None else time.monotonic() + deadline
        try:
            with self.membership.shared(until):
                left = None if until is None else until - time.monotonic()
                return self.cluster.query(at=at, deadline=left)
        except MembershipBusy:
            return self.cluster.query_not_sent(at)

    def crash(self, name: str) -> None:
        with self.membership.exclusive():
            self.cluster.crash_replica(name)

    def restart(self, name: str) -> None:
        with self.membership.exclusive():
            self.cluster.add_replica(name)
        self._start_thread(name)

    def reassign(self, partition: str, dst: str, src: str | None = None) -> dict:
        with self.membership.shared():
            return self.cluster.reassign(partition, dst, src)

    def rebalance_started(self) -> list:
        """Start the moves the plan allows now (the replica threads carry them out)."""
        with self.membership.shared():
            c = self.cluster
            # the cluster's schedule is already under its cap (Cluster.__init__)
            return system_rebalance(c.admin, c.layout, c.admin.get_children(c.layout.replicas), schedule=c.schedule)

    def migrations_in_flight(self) -> list[str]:
        with self.membership.shared():
            return migrations_in_flight(self.cluster.admin, self.cluster.layout)

    def threads_alive(self) -> list[str]:
        return sorted(n for n, t in self.threads.items() if t.is_alive())

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads.values():
            t.join(timeout=30)
        if self.errors:
            raise RuntimeError(f"a replica thread failed: {self.errors[0]!r}") from self.errors[0]
