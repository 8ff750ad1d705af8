"""The deterministic driver (reference/cluster.py) on the PR's design: PRReplicas, the PR's INSERT
path, its migration steps as background steps, its rebalancer, and the history's assignments in
the PR's terms. Queries, settling, the history and INSERT retries are the base driver's.

The coordinator is one replica (by default the first), as PR102244.tla's `coord`; when it is down,
another replica's migrate step takes over each of its migrations (TakeOver). A SWITCH refused by
its version check turns the migration into FAILED (the fixed reading of PR-F3).

This is the description's migration, each step one multi (protocol/pr102244/migration.py). The
code's, a driver's read and its later write as separate steps, is code_cluster.py's
PRCodeCluster, a subclass (`run --as-code`, the reproductions).
"""

from __future__ import annotations

import uuid

from protocol.assignment import GuardFailed
from protocol.pr102244 import layout as pr_layout
from protocol.pr102244.assignment import assignments_rows, read_assignment, read_count, set_count
from protocol.pr102244.insert import route_insert
from protocol.pr102244.migration import (done, fail, read_migration, read_migrations, rescan, signal_complete,
                                         start_clone, switch, take_over, write_clone_entries)
from protocol.pr102244.rebalancer import rebalance_cycle
from protocol.pr102244.replica import PRReplica
from protocol.registration import declare_replicas, register_replica
from protocol.replica import _children, log_number
from reference.cluster import Cluster


class PRCluster(Cluster):
    BACKGROUND_KINDS = ("refresh", "pull", "execute", "migrate", "drop")
    SETTLE_KINDS = ("refresh", "pull", "execute", "migrate", "drop")
    route_insert = staticmethod(route_insert)

    def __init__(self, connect, data_dir, replicas=("r1", "r2", "r3"), *, readings=frozenset(), cache_ttl: int = 20,
                 coordinator: str | None = None, per_cycle: int = 2, clone_timeout: int = 200, **kw):
        self.readings, self.cache_ttl, self.per_cycle = frozenset(readings), cache_ttl, per_cycle
        self._initial = set(replicas)   # created with the table: none starts lost
        self.clone_timeout = clone_timeout
        self._clone_seen: dict[str, int] = {}   # the coordinator's polls of each CLONE (its timeout)
        self._failed: set[str] = set()   # partitions whose CLONE timed out in this rebalance
        self.coordinator = coordinator or sorted(replicas)[0]
        super().__init__(connect, data_dir, replicas, **kw)

    def write_path(self, receiver: str, partition: str) -> None:
        """Not recorded: the PR's sink reroutes a sub-block on its own cache (with a TTL) until an
        owner takes it, a write path history/refusals.py does not model, and its assignment
        znode is not the RFC's JSON. InsertRefusalsFollowGuardsInv judges the RFC design only."""
        return None

    # --- membership ---------------------------------------------------------------------
    def add_replica(self, name: str) -> PRReplica:
        """A replica joins or restarts: registers, its count node, its cache loaded before it serves."""
        if name in self.replicas:
            raise ValueError(f"replica {name!r} is already running")
        from protocol.parts import PartStore
        store = self.down.pop(name, None) or PartStore(self.data_dir / name)
        keeper = self.connect()
        if name in self._initial:
            declare_replicas(keeper, self.layout, [name])
        active_id = uuid.uuid4().hex.encode()
        register_replica(keeper, self.layout, name, active_id)
        keeper.ensure_path(pr_layout.counts_root(self.layout))
        if read_count(keeper, self.layout, name)[1] < 0:
            keeper.multi([set_count(self.layout, name, 0, -1)])
        self.stores[name] = store
        rep = PRReplica(name, keeper, self.layout, store, self.stores, self.bugs, active_id=active_id,
                        readings=self.readings, now=lambda: self.step, cache_ttl=self.cache_ttl)
        rep.load_map()
        self._join(rep)
        self.replicas[name] = rep
        self.log(f"replica {name} up")
        return rep

    def _join(self, rep: PRReplica) -> None:
        """A replica new to a table with data starts lost (registration.py). Assigned nothing, it
        has nothing to clone: it starts pulling at the log's end. One the assignment lists must
        clone, which this design's driver does not do (the base's recovery reads the RFC's value)."""
        k, lay = rep.keeper, self.layout
        if k.get(lay.is_lost(rep.name))[0] != b"1":
            return
        if any(rep.name in read_assignment(k, lay, p).keepers() for p in k.get_children(lay.assignments)):
            raise RuntimeError(f"replica {rep.name} is lost and assigned partitions: cloning it is not implemented "
                               "for the PR's design")
        end = max((log_number(n) for n in k.get_children(lay.log)), default=-1) + 1
        k.set(lay.log_pointer(rep.name), str(end).encode())
        k.set(lay.is_lost(rep.name), b"0")

    # --- background steps ---------------------------------------------------------------
    def _try(self, kind: str, rep, random_choice: bool = False) -> str | None:
        if kind != "drop":
            return super()._try(kind, rep, random_choice)
        held = {n.partition for n in rep.store.names()} | {e.partition for _, e in rep.queue() if e.partition}
        for p in sorted(held):
            try:
                n = rep.drop_unassigned(p)
            except GuardFailed:
                continue
            self.log(f"{rep.name} drops {p} ({n} parts): not assigned")
            return f"DropUnassigned({rep.name}, {p})"
        return None

    def read_in_flight(self) -> None:
        self._in_flight = sorted(read_migrations(self.admin, self.layout))

    def _advance_migration(self, rep: PRReplica) -> str | None:
        """The migration steps `rep` can take now: as the target Rescan and SignalComplete; as the
        coordinator WriteCloneEntries, Switch (Fail when its version check refuses it), Done; any
        replica TakeOver of a migration whose coordinator is down."""
        for m in self._in_flight:
            mig, _ = read_migration(rep.keeper, self.layout, m)
            if mig is None:
                continue
            steps = []
            if mig["target"] == rep.name:
                steps += [("Rescan", lambda: rescan(rep, m)), ("SignalComplete", lambda: signal_complete(rep, m))]
            if mig["coordinator"] == rep.name:
                steps += [("Fail", lambda: self._fail_on_timeout(rep, m, mig)),
                          ("WriteCloneEntries", lambda: write_clone_entries(rep.keeper, self.layout, m, rep.name)),
                          ("Switch", lambda: self._switch_or_fail(rep, m)),
                          ("Done", lambda: done(rep.keeper, self.layout, m, rep.name, self.bugs))]
            elif mig["coordinator"] not in self.replicas:
                steps.append(("TakeOver", lambda: take_over(rep.keeper, self.layout, m, rep.name)))
            for name, step in steps:
                try:
                    result = step()
                except GuardFailed:
                    continue
                if name in ("Switch", "Done"):
                    self.log(f"{name.upper()} {mig['partition']}: {mig['source']} -> {mig['target']}")
                return f"{name}({m}) {result if result is not None else ''}".rstrip()
        return None

    def _fail_on_timeout(self, rep: PRReplica, m: str, mig: dict) -> str:
        """CLONE -> FAILED on a timeout (M11): a CLONE whose target never completes (it dropped or
        skipped the snapshot's parts while its cache did not show it :cloning) ends."""
        if mig["state"] != "clone":
            raise GuardFailed("Fail", f"migration {m} is not in CLONE")
        # The coordinator's clock is its own polls: it advances while nothing else can.
        self._clone_seen[m] = self._clone_seen.get(m, 0) + 1
        if self._clone_seen[m] <= self.clone_timeout:
            raise GuardFailed("Fail", f"migration {m} has not timed out")
        fail(rep.keeper, self.layout, m, rep.name)
        self._failed.add(mig["partition"])
        self.log(f"FAILED migration {m} of {mig['partition']}: CLONE timed out")
        return "FAILED"

    def _switch_or_fail(self, rep: PRReplica, m: str):
        try:
            return switch(rep.keeper, self.layout, m, rep.name, self.bugs)
        except GuardFailed as e:
            if "not" in e.reason and "as CLONE left it" in e.reason:
                fail(rep.keeper, self.layout, m, rep.name)   # FAILED: the assignment moved since CLONE
                self.log(f"FAILED migration {m}: {e.reason}")
                return "FAILED"
            raise

    # --- administration -----------------------------------------------------------------
    def reassign(self, partition: str, dst: str, src: str | None = None, snapshot_read_before=None) -> str:
        """SYSTEM MIGRATE PARTITION: StartClone by the coordinator; returns the migration id.
        `snapshot_read_before`: the snapshot a paused startClone read before its multi (PR-F6)."""
        src = src or self._assignment(partition).owners[0]
        m = start_clone(self.admin, self.layout, partition, src, dst, self.coordinator, self.bugs,
                        snapshot_read_before=snapshot_read_before)
        self._started(partition, src, dst)
        return m

    def _assignment(self, partition: str):
        a = read_assignment(self.admin, self.layout, partition)
        if a is None:
            raise ValueError(f"partition {partition} is not assigned (no INSERT has created it)")
        return a

    def rebalance_cycle(self, failed: frozenset[str] = frozenset()) -> list:
        """One cycle of the rebalancer (SYSTEM START SELECTIVE REBALANCE runs one): its repairs and
        moves started, each logged; [(partition, source, target, migration id)]."""
        started = rebalance_cycle(self.admin, self.layout, self.coordinator, self.per_cycle, self.bugs, failed,
                                  rf=self.table.replication_factor)
        for p, s, t, _ in started:
            self.log(f"CLONE {p}: {s} -> {t}")
            self._started(p, s, t)
        return started

    def rebalance(self, interleave=None, max_rounds: int | None = None) -> list:
        """The background rebalancer: a cycle starts up to `per_cycle` migrations; background steps
        (and `interleave`) run meanwhile; the next cycle starts once the last one's migrations are
        DONE or FAILED, until a cycle plans nothing. Cycles that overlap would plan on counts a CLONE
        in flight does not change, and overshoot (FINDINGS F13), with no end to a run; this driver
        reads M13's open point that way (no row is at stake in it). A move whose CLONE timed out is not
        planned again in this rebalance (plan_cycle), so a rebalance whose only moves left keep failing (their
        CLONE waits on a down replica's parts) ends, and says which; the next rebalance retries them."""
        moves = []
        self._failed = set()
        if max_rounds is None:   # each partition's CLONE may time out once, after clone_timeout rounds or fewer
            partitions = len(self.admin.get_children(self.layout.assignments))
            max_rounds = 1000 + self.clone_timeout * partitions
        for _ in range(max_rounds):
            if self.coordinator not in self.replicas:
                self.coordinator = sorted(self.replicas)[0]   # the rebalancer runs on a live replica
            started = []
            if not read_migrations(self.admin, self.layout):
                started = self.rebalance_cycle(frozenset(self._failed))
                if not started and self._failed:
                    self.log(f"rebalancer: stops; the CLONEs of {', '.join(sorted(self._failed))} timed out, and "
                             f"the next rebalance retries them")
            moves += started
            if not started and not read_migrations(self.admin, self.layout):
                return moves
            self.between_cycles(started, interleave)
        raise RuntimeError(f"rebalance did not finish in {max_rounds} rounds")

    def migrations_in_flight(self) -> list[str]:
        return sorted(read_migrations(self.admin, self.layout))

    def assignment_rows(self) -> list[dict]:
        """The history's assignments: owners as the spec's set. The PR's list may name a replica
        twice (PR-F3 against the code: `r3,r3` is one copy), which a count of entries would take
        for two."""
        return [{**r, "replicas": list(dict.fromkeys(r["replicas"]))} for r in assignments_rows(self.admin, self.layout)]

    def migration_rows(self) -> list[dict]:
        """None: the PR's migrations (/migrations/<uuid>) have no CLONE/SWITCH/CLEANUP states; its
        assignment rows name the keepers themselves (`:cloning` targets, the leaving replica)."""
        return []

    def counts(self) -> dict[str, int]:
        return {r: read_count(self.admin, self.layout, r)[0]
                for r in _children(self.admin, pr_layout.counts_root(self.layout))}
