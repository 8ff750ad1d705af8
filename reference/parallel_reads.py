"""A SELECT with parallel replicas (protocol/parallel_replicas.py, seed 004), driven over a
Cluster and recorded like any query, so the history checkers judge its answer (R2 modulo the lag
its announcements excuse, R3). Mixed into Cluster, as Recorder and Nemesis are.

Driver policy, not protocol: the participants announce in a random order, with up to
`interleave` background steps before each announcement and each read, so migrations, merges and
crashes land between them; a participant whose process is down, or whose Keeper session
expired, cannot be reached and is skipped. The lag recorded for a partition is the spec's LagAt:
the partition's rows in flight, when it announced, to each replica whose announcement gave the
partition's parts and that keeps the partition by Keeper's assignment.
"""

from __future__ import annotations

from protocol.assignment import GuardFailed, read_assignment
from protocol.keeper import KeeperUnavailableError, SessionExpiredError
from protocol.parallel_replicas import (SAFE_COORDINATOR, pr_announce, pr_fail, pr_finish, pr_lost, pr_read,
                                        pr_skip, pr_start)


class ParallelReads:
    """Cluster.parallel_query (module docstring)."""

    # The coordinator of the parallel-replicas SELECTs a racing profile makes (`reference run
    # --parallel-replicas`): the fix unless a run asks for ClickHouse's own.
    coordinator: str = SAFE_COORDINATOR

    def parallel_query(self, at: str | None = None, coordinator: str | None = None,
                       max_parallel_replicas: int | None = None, interleave: int = 0):
        """One SELECT with parallel replicas started at `at`: announcements, reads, the answer
        recorded (status complete, or failed when a step it needs cannot happen). Returns the
        query, or None when it failed. `coordinator`: the cluster's (`coordinator`) by default;
        max_parallel_replicas: all replicas of the cluster by default."""
        at = at or self.rng.choice(self.serving())
        coordinator = coordinator or self.coordinator
        start = self.tick()
        cluster = sorted(set(self.replicas) | set(self.down))
        routes: dict[str, str] = {}
        lag: dict[str, set[int]] = {}
        q = None
        try:
            q = pr_start(self.replicas[at], cluster, max_parallel_replicas or len(cluster), coordinator, self.rng)
            for name in self.rng.sample(q.participants, len(q.participants)):
                self._interleave(q, interleave)
                if q.failed:
                    break
                rep = self.replicas.get(name)
                if rep is None or rep.keeper.expired:
                    pr_skip(q, name)
                    continue
                with rep.lock:
                    gave = pr_announce(q, rep)
                if gave is None:
                    gave = set(self.admin.get_children(self.layout.assignments))
                for p, rows in self.in_flight_lags(name, [p for p in sorted(gave) if self._keeps(name, p)]).items():
                    lag[p] = lag.get(p, set()) | rows
            while not q.failed and q.unread() and not q.stuck():
                self._interleave(q, interleave)
                part = q.unread()[0]
                readers = sorted(r for r in q.live if part in q.announced[r].parts)
                if not readers:
                    break
                pr_read(q, part, self.rng.choice(readers))
                routes.setdefault(part.partition, q.read[part])
            if not q.failed and q.stuck():
                pr_fail(q)
            if q.failed:
                return self._parallel_failed(at, start, routes, q)
            rows = pr_finish(q)
        except (GuardFailed, KeeperUnavailableError, SessionExpiredError):
            return self._parallel_failed(at, start, routes, q)
        except Exception as e:  # noqa: BLE001 - the server's exception reaches the client: the query failed
            self.failed(at, "parallel query", e)
            return self._parallel_failed(at, start, routes, q)
        got = {p: rows.get(p, []) for p in sorted(set(rows) | set(routes))}
        self.query_answered(at, start, routes, got, "complete", None, lag)
        return q

    def _interleave(self, q, interleave: int) -> None:
        """Background steps between two of the query's; a participant gone meanwhile reads nothing
        more (its snapshot was in its memory), and the query fails with its initiator."""
        for _ in range(self.rng.randint(0, interleave)):
            self.background_step()
        for name in list(q.live) + [q.at]:
            rep = self.replicas.get(name)
            if rep is None or rep.keeper.expired:
                pr_lost(q, name)

    def _keeps(self, name: str, partition: str) -> bool:
        """`name` keeps the partition by Keeper's assignment now (the spec's Keepers(asg[p]))."""
        a = read_assignment(self.admin, self.layout, partition)
        return a is not None and name in a.keepers()

    def _parallel_failed(self, at: str, start: int, routes: dict, q):
        self.query_answered(at, start, routes, {}, "failed", None)
        return None
