"""The runtime layer: a live cluster. One thread per replica runs its background steps (pull the
log, execute the queue, refresh the map on a timer, migration steps, merges) while the caller
inserts, queries, crashes and restarts replicas, and rebalances.

Each step runs under one cluster-wide lock: steps are atomic, as the spec's actions are, and
threads interleave them in an order nobody chose. That is what this layer adds to the
deterministic driver (reference/cluster.py), whose steps it reuses unchanged.
"""

from __future__ import annotations

import random
import threading
import time

from .cluster import Cluster
from .migration import migrations_in_flight
from .rebalance import system_rebalance


class LiveCluster:
    def __init__(self, cluster: Cluster, step_interval: float = 0.0005, refresh_interval: float = 0.2):
        self.cluster = cluster
        self.lock = threading.RLock()
        self.step_interval, self.refresh_interval = step_interval, refresh_interval
        self.threads: dict[str, threading.Thread] = {}
        self.stopping = threading.Event()
        self.steps = 0
        self.errors: list[BaseException] = []

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
        try:
            while not self.stopping.is_set():
                with self.lock:
                    rep = self.cluster.replicas.get(name)
                    if rep is None:
                        return  # crashed: a restart starts a new thread
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
                time.sleep(self.step_interval * rng.random())
        except BaseException as e:  # surfaced by stop(): a thread must not die silently
            self.errors.append(e)

    # --- what a client or an operator does ----------------------------------------------
    def insert(self, rows: list[dict], block_id: str) -> dict[str, str]:
        with self.lock:
            return self.cluster.insert(rows, block_id)

    def query(self, at: str | None = None):
        def let_others_run():
            self.lock.release()
            time.sleep(self.step_interval)
            self.lock.acquire()
        with self.lock:
            return self.cluster.query(at=at, between=let_others_run)

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
            return system_rebalance(c.admin, c.layout, c.admin.get_children(c.layout.replicas), c.max_concurrent)

    def migrations_in_flight(self) -> list[str]:
        with self.lock:
            return migrations_in_flight(self.cluster.admin, self.cluster.layout)

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads.values():
            t.join(timeout=30)
        if self.errors:
            raise RuntimeError(f"a replica thread failed: {self.errors[0]!r}") from self.errors[0]
