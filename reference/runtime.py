"""The runtime layer: a live cluster. One thread per replica runs its background steps (pull the
log, execute the queue, refresh the map on a timer, migration steps, merges) while the caller
inserts, queries, crashes and restarts replicas, and rebalances.

Each step runs under one cluster-wide lock: steps are atomic, as the spec's actions are, and
threads interleave them in an order nobody chose. That is what this layer adds to the
deterministic driver (reference/cluster.py), whose steps it reuses unchanged.

Keeper faults do not end a replica thread. A step that meets KeeperUnavailableError (the
keeper's retries ran out of time) or SessionExpiredError is abandoned, and the thread backs off
outside the lock, as ClickHouse's background threads do; a replica whose session expired is
re-established by its own thread before it takes another step (Cluster.reestablish: new
session, is_active, map reloaded first). `recoveries` records, per replica, how long it went
from its first Keeper error to its next completed round of steps.
"""

from __future__ import annotations

import random
import threading
import time

from protocol.keeper import KeeperUnavailableError, SessionExpiredError
from protocol.migration import migrations_in_flight
from protocol.rebalance import system_rebalance
from reference.cluster import Cluster


class LiveCluster:
    def __init__(self, cluster: Cluster, step_interval: float = 0.0005, refresh_interval: float = 0.2):
        self.cluster = cluster
        self.lock = threading.RLock()
        self.step_interval, self.refresh_interval = step_interval, refresh_interval
        self.threads: dict[str, threading.Thread] = {}
        self.stopping = threading.Event()
        self.steps = 0
        self.errors: list[BaseException] = []
        self.keeper_errors: list[tuple[str, float, str]] = []   # (replica, monotonic time, error) seen and survived
        self.recoveries: list[tuple[str, float]] = []            # (replica, seconds from first error to next good round)
        self.reestablished: list[str] = []                       # replicas given a new session, in order

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
                with self.lock:
                    rep = self.cluster.replicas.get(name)
                    if rep is None:
                        return  # crashed: a restart starts a new thread
                    try:
                        if self.cluster.admin.expired:
                            self.cluster.reconnect_admin()
                        if rep.keeper.expired:   # its session expired: read-only until this succeeds
                            self.cluster.reestablish(name)
                            self.reestablished.append(name)
                        kinds = ["pull", "execute", "migrate", "merge"]
                        if time.monotonic() >= next_refresh:  # the map refresh timer
                            kinds.insert(0, "refresh")
                            next_refresh = time.monotonic() + self.refresh_interval
                        for kind in kinds:
                            if kind == "migrate":
                                self.cluster.read_in_flight()
                            # The timer refreshes the whole map; other kinds take one random step.
                            if self.cluster._try(kind, rep, random_choice=kind != "refresh"):
                                self.cluster.tick()
                                self.steps += 1
                        if down_since is not None:
                            self.recoveries.append((name, time.monotonic() - down_since))
                        backoff, down_since = 0.0, None
                    except (KeeperUnavailableError, SessionExpiredError) as e:
                        # Keeper is away or this session expired: the step is abandoned (every
                        # step is safe to take again), and the thread waits outside the lock.
                        now = time.monotonic()
                        self.keeper_errors.append((name, now, f"{type(e).__name__}: {e}"))
                        down_since = now if down_since is None else down_since
                        backoff = min(max(2 * backoff, 0.05), 1.0)
                if backoff:
                    self.stopping.wait(backoff * (0.5 + rng.random()))
                time.sleep(self.step_interval * rng.random())
        except BaseException as e:  # surfaced by stop(): a thread must not die silently
            self.errors.append(e)

    # --- what a client or an operator does ----------------------------------------------
    def insert(self, rows: list[dict], block_id: str, deadline: float | None = None) -> dict[str, str]:
        """Cluster.insert under the cluster's lock; `deadline` bounds the INSERT once it holds the
        lock (the wait for the lock is the other threads' steps, each bounded by its Keeper calls'
        retry deadline)."""
        with self.lock:
            return self.cluster.insert(rows, block_id, deadline=deadline)

    def query(self, at: str | None = None, deadline: float | None = None):
        """Cluster.query under the lock, which it lets go between its reads; `deadline` bounds its
        Keeper calls, not its waits for the lock (as LiveCluster.insert's)."""
        def let_others_run():
            self.lock.release()
            time.sleep(self.step_interval)
            self.lock.acquire()
        with self.lock:
            return self.cluster.query(at=at, between=let_others_run, deadline=deadline)

    def crash(self, name: str) -> None:
        with self.lock:
            self.cluster.crash_replica(name)

    def restart(self, name: str) -> None:
        with self.lock:
            self.cluster.add_replica(name)
        self._start_thread(name)

    def reassign(self, partition: str, dst: str, src: str | None = None) -> dict:
        with self.lock:
            return self.cluster.reassign(partition, dst, src)

    def rebalance_started(self) -> list:
        """Start the moves the plan allows now (the replica threads carry them out)."""
        with self.lock:
            c = self.cluster
            # the cluster's schedule is already under its cap (Cluster.__init__)
            return system_rebalance(c.admin, c.layout, c.admin.get_children(c.layout.replicas), schedule=c.schedule)

    def migrations_in_flight(self) -> list[str]:
        with self.lock:
            return migrations_in_flight(self.cluster.admin, self.cluster.layout)

    def threads_alive(self) -> list[str]:
        return sorted(n for n, t in self.threads.items() if t.is_alive())

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads.values():
            t.join(timeout=30)
        if self.errors:
            raise RuntimeError(f"a replica thread failed: {self.errors[0]!r}") from self.errors[0]
