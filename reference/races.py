"""The racing loop: one profile's seeded run over the deterministic driver (reference/cluster.py)
for the history checkers (the in-process oracle, pyspark_jobs/): the interleavings TLC explores,
on the reference, so a history can show a lost, doubled or short-replicated row. A (profile,
seed) is one history, step for step. The profiles are reference/profiles.py's (re-exported
here: PROFILES, Profile, profile_of, UnknownProfile); Race draws one of the profile's actions per
loop turn: the clients' and operators' workload is here, the faults (crashes, restarts, losses,
session expiry) are RaceFaults's (reference/race_faults.py), mixed into Race. Tests break a
protocol step the workload calls by patching its name in this module (`served_by`,
`client_send_insert`, `select_all`, `coordinator_switch`, `replica_read_partition`), so the
methods that call them stay here.

Time is the history's logical clock (Cluster.step), not the wall clock: the down timeout is a
number of steps, so a run acts the same at any machine load. In the profiles without one it is
infinite (the rule never acts), as it never did within a run's seconds of wall clock.

Every SNAPSHOT_EVERY loop turns, and at the race's end before anything is restarted, a snapshot is
taken: NoForeignPartsInv is judged on each. Then every replica is restarted (re-established when
read-only), the migrations run to their end, the cluster settles and one synced query per replica
is made: the final snapshot is the settled state every invariant judges. A migration that cannot end (no step is enabled any
more, or the wind-down's step budget is spent) is left in flight: the history shows it, and
MigrationsEndProp is judged on it.

An unexpected exception of a replica's step, a client's call or an operator's command (not the
protocol's refusals) is logged in the history's errors table and the run goes on, as a server
logs a failed task and retries it (Cluster.failed): the fixed protocol raises none, and a broken
one still leaves a history for the checkers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from protocol.assignment import (GuardFailed, NotEnoughActiveReplicas, read_assignment, replica_choose_owners,
                                 replica_commit_allocation)
from protocol.insert import client_send_insert, replica_forward_insert
from protocol.migration import (IN_FLIGHT, MigrationError, coordinator_cancel, coordinator_switch, migrations_in_flight,
                                read_migration, replica_cleanup, replica_cleanup_for_down_leaver, replica_clone_fetch,
                                replica_take_over_migration)
from protocol.query import client_query_fails, client_start_query, replica_read_partition, select_all, served_by
from protocol.replica import InsertRejected, caught_up
from reference.cluster import KEEPER_FAULTS, Cluster, read_done
from reference.profiles import PROFILES, Profile, UnknownProfile, profile_of  # noqa: F401 - re-exported
from reference.race_faults import RaceFaults
from reference.race_windows import RaceWindows
from reference.windows import WindowLog

# Steps one Cluster.settle may take in a racing run (racing_cluster): 100x the most measured.
SETTLE_BUDGET = 30_000

# SELECTs in flight at once in `overlapping` (Race._open_query).
MAX_OPEN_QUERIES = 4


@dataclass
class OpenQuery:
    """A SELECT started and not yet answered: what Cluster.query keeps on its stack, kept across
    loop turns (routes and rows so far, the partitions asked for, the rows excused as lag)."""
    q: object                       # protocol.query.Query
    at: str
    start: int
    partitions: set[str] | None
    lag: dict[str, set[int]]
    got: dict[str, list[dict]] = field(default_factory=dict)


# Loop turns between two snapshots taken during the race (0: none but the race's end and the
# settled end): a foreign copy lives only until its replica's map catches up, so only a snapshot
# taken while it lives shows it (NoForeignPartsInv is judged on every snapshot). Every 10 turns,
# measured on racing, stale and churn seeds 0-3 at teeth.SIZE: 5.6x the parts rows of the end
# snapshots alone, +13% Parquet bytes, no run time seen beyond the noise; F7 is caught on many
# more seeds than by the race's end snapshot alone (lab/teeth.py).
SNAPSHOT_EVERY = 10


class Race(RaceFaults, RaceWindows):
    """One profile's loop over a cluster; `counts` says what was done (and what was refused). The
    clients' and operators' actions are below, the faults RaceFaults's (reference/race_faults.py)."""

    def __init__(self, c: Cluster, profile: Profile, seed: int, work, steps: int | None = None,
                 snapshot_every: int = SNAPSHOT_EVERY):
        self.c, self.p, self.work = c, profile, work
        self.steps = profile.steps if steps is None else steps
        self.snapshot_every = snapshot_every
        # the last step a snapshot was taken at: the race's own are observations that do not
        # advance the clock (the down timeout counts steps: a tick would change the run's course)
        self.observed = max((a["snapshot_step"] for a in c.history.tables["assignments"]), default=-1)
        self.rng = random.Random(f"race-{profile.name}-{seed}")
        self.counts: dict[str, int] = {}
        self._init_faults()                 # down_at, doomed (RaceFaults)
        if c.windows is None:
            c.windows = WindowLog()          # what the run opened (reference/windows.py)
        self._init_windows(seed, self.steps)   # force_at (RaceWindows)
        self.open: list[OpenQuery] = []     # SELECTs in flight (`overlapping`)

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def run(self) -> dict[str, int]:
        names, weights = zip(*sorted(self.p.actions.items()))
        for turn in range(1, self.steps + 1):
            action = self.rng.choices(names, weights)[0]
            self._force_due(turn)
            try:
                getattr(self, f"_{action}")()
            except KEEPER_FAULTS:
                raise
            except Exception as e:  # noqa: BLE001 - a client's or operator's call that raised: logged, the run goes on
                self.c.failed("", action, e)
                self._count(f"{action} raised")
            if self.snapshot_every and turn % self.snapshot_every == 0:
                self._observe()
        self.wind_down()
        self.counts.update(self.c.windows.as_counts())
        return self.counts

    # --- actions: clients and operators (the faults: race_faults.py) -------------------
    def _insert(self) -> None:
        nxt = next(self.work, None)
        if nxt is None:
            return self._step()
        self._send(*nxt)

    def _send(self, block_id: str, rows: list[dict], at: str | None = None) -> None:
        try:
            for st in self.c.insert(rows, block_id, at=at).values():
                self._count(f"insert {st}")
        except (InsertRejected, NotEnoughActiveReplicas, GuardFailed):
            self._count("insert refused")

    def _rival(self) -> None:
        """The next block is sent to replica A while replica B, allocating one of the block's new
        partitions for an INSERT of its own, has read (ReplicaChooseOwners: no assignment yet, its
        choice of owners) and writes only some background steps after A's INSERT allocated the
        partition and wrote its rows (ReplicaCreateAssignment: refused, so B adopts A's; with
        blind_write it overwrites A's owners). B's own INSERT goes no further (its client hung up
        after the allocation): what the race did to A's rows is what the history shows."""
        c = self.c
        nxt = next(self.work, None)
        if nxt is None:
            return self._step()
        block_id, rows = nxt
        serving = c.serving()
        new = sorted(set(c.table.split_by_partition(rows)) - set(c.admin.get_children(c.layout.assignments)))
        if not new or len(serving) < 2:
            return self._send(block_id, rows)
        at, b = self.rng.sample(serving, 2)
        rival = c.replicas[b]
        try:
            alloc = replica_choose_owners(rival.keeper, c.layout, b, self.rng.choice(new),
                                          c.table.replication_factor, rival.bugs, c.rng)
        except GuardFailed:   # fewer active replicas than RF: B's INSERT fails there
            self._count("rival refused")
            return self._send(block_id, rows)
        self._send(block_id, rows, at=at)
        for _ in range(self.rng.randint(0, self.p.interleave)):
            c.background_step()
        before = read_assignment(c.admin, c.layout, alloc.partition)
        rival.learn(alloc.partition, replica_commit_allocation(rival.keeper, c.layout, alloc, rival.bugs))
        self._count("rival allocated" if before is None else "rival adopted" if "blind_write" not in c.bugs
                    else "rival overwrote")

    def _step(self) -> None:
        c = self.c
        kinds, weights = zip(*sorted(self.p.kinds.items()))
        c.read_in_flight()
        for _ in range(self.p.attempts):   # one draw (the older profiles) or until a step is enabled
            rep = c.replicas[self.rng.choice(sorted(c.replicas))]
            if c._try(self.rng.choices(kinds, weights)[0], rep, random_choice=True):
                c.tick()
                self._count("step")
                return

    def _reassign(self, p: str | None = None, dst: str | None = None, src: str | None = None) -> bool:
        """REASSIGN of `p` (random by default) to `dst` from `src` (random by default); whether it started."""
        c = self.c
        partitions = sorted(c.admin.get_children(c.layout.assignments))
        if not partitions:
            return False
        p = p or self.rng.choice(partitions)
        a = read_assignment(c.admin, c.layout, p)
        candidates = sorted(r for r in c.replicas if r not in a.owners)
        if not candidates or (dst is not None and dst not in candidates):
            return False
        if src is None and "retry_stale" in self.p.actions and self.rng.random() < 0.1:
            # `retrying`: an operator's REASSIGN on a stale view of the owners, naming a source
            # that does not own the partition (any more): AdminReassign refuses it
            src = self.rng.choice(candidates)
        dst = dst or self.rng.choice(candidates)
        src = src or self.rng.choice(sorted(a.owners))
        try:
            # the first owner goes unnamed (ALTER TABLE ... REASSIGN's default source, so the
            # default's code runs); the same choice, the same draws, as naming it
            c.reassign(p, dst, None if src == a.owners[0] else src)
            self._count("reassign")
            return True
        except (MigrationError, GuardFailed):
            self._count("reassign refused")
            return False

    def _cancel(self) -> None:
        c = self.c
        flying = migrations_in_flight(c.admin, c.layout)
        if not flying:
            return
        self._cancel_of(self.rng.choice(sorted(flying)))

    def _cancel_of(self, p: str) -> bool:
        """ALTER TABLE ... CANCEL of `p`'s migration, whatever its state: whether it was accepted."""
        c = self.c
        mig, _ = read_migration(c.admin, c.layout, p)
        what = f"{mig['state']}{' fetched' if mig.get('fetched') else ''}{' repair' if mig['src'] is None else ''}"
        try:
            c.cancel(p)   # recorded in the history's commands, with what Keeper said before it
            self._count(f"cancel in {what}")
            return True
        except GuardFailed:
            self._count(f"cancel refused in {what}")
            return False

    # Where `aim_cancel` aims: each state a CANCEL can meet (the coordinator accepts it only in
    # CLONE, fetched or not, and never for a repair).
    CANCEL_AIMS = ("clone", "fetched", "switched", "cancelling", "ended", "repair")

    def _aim_cancel(self) -> None:
        """A CANCEL aimed at one migration state, drawn from CANCEL_AIMS: a REASSIGN started and
        driven to the state (_drive) before the CANCEL, or a migration already there (a repair, an
        ended one). `_cancel` draws among the migrations in flight, which random steps leave mostly
        in an unfetched CLONE: a CANCEL accepted after SWITCH or refused in CLONE changed no run."""
        c = self.c
        aim = self.rng.choice(self.CANCEL_AIMS)
        if aim in ("ended", "repair"):
            if aim == "repair":
                if not c.gone:
                    self._lose()   # a repair needs a replica lost for good first
                if c.gone:
                    c.repair()
            pool = [p for p in sorted(c.admin.get_children(c.layout.migrations))
                    if self._is_aim(read_migration(c.admin, c.layout, p)[0], aim)]
            if not pool:
                return self._count(f"aim {aim}: none")
            self._cancel_of(self.rng.choice(pool))
            return None
        p = self._start_move()
        if p is None:
            return None
        if aim == "fetched":
            self._drive(p, lambda m: m["fetched"])
        elif aim == "switched":
            self._drive(p, lambda m: m["state"] == "switched")
        elif aim == "cancelling":
            self._cancel_of(p)
        if self._cancel_of(p) and aim == "fetched":
            self._switch_after_cancel(p)
        return None

    def _switch_after_cancel(self, p: str) -> None:
        """The coordinator's SWITCH of a fetched CLONE, decided before a CANCEL overtook it (a task
        queued before the CANCEL was accepted), runs after it: CoordinatorSwitch's state guard must
        refuse it. Its target first catches up on the partition (pulls the log, runs its queue: it
        is still a keeper, as the leaver), so the catch-up guard cannot refuse it instead. An
        accepted SWITCH is raised here and logged by `run` (NoLogicalErrorsInv); the history shows
        the cancelled migration switched too (CancelHonouredInv, MigrationOutcomeInv)."""
        c = self.c
        mig, _ = read_migration(c.admin, c.layout, p)
        if not mig or mig["state"] != "cancelling" or not {mig["coord"], mig["dst"]} <= set(c.replicas):
            return
        dst = c.replicas[mig["dst"]]
        for _ in range(20):
            if caught_up(c.admin, c.layout, dst.name, p):
                break
            stepped = [kind for kind in ("pull", "execute") if c._try(kind, dst)]
            for _ in stepped:
                c.tick()
            if not stepped:
                break
        try:
            coordinator_switch(c.replicas[mig["coord"]].keeper, c.layout, p, mig["dst"], c.bugs)
        except GuardFailed:
            return self._count("switch after its cancel refused")
        raise RuntimeError(f"the SWITCH of {p} to {mig['dst']} decided before its CANCEL was accepted after it")

    @staticmethod
    def _is_aim(mig: dict | None, aim: str) -> bool:
        if not mig:
            return False
        if aim == "repair":
            return mig["state"] == "clone" and mig["src"] is None
        return mig["state"] not in IN_FLIGHT

    def _start_move(self, dst: str | None = None, src: str | None = None, owned_by: str | None = None) -> str | None:
        """A REASSIGN of a partition with no migration in flight (owned by `owned_by`, kept by no
        `dst`, if given); the partition if it started."""
        c = self.c
        flying = set(migrations_in_flight(c.admin, c.layout))
        pool = []
        for p in sorted(c.admin.get_children(c.layout.assignments)):
            a = read_assignment(c.admin, c.layout, p)
            if p in flying or (owned_by and owned_by not in a.owners) or (dst and dst in a.keepers()):
                continue
            pool.append(p)
        if not pool:
            return None
        p = self.rng.choice(pool)
        return p if self._reassign(p, dst, src) else None

    def _drive(self, p: str, reached, budget: int = 30) -> dict | None:
        """The migration's own replicas (its target and coordinator) pull, execute and take their
        migration steps until `reached(mig)`, the migration ends or `budget` rounds are spent:
        random background steps get a CLONE through its target's catch-up to SWITCH rarely
        before a CANCEL or a crash comes. Returns the migration as it is then."""
        c = self.c
        for _ in range(budget):
            mig, _ = read_migration(c.admin, c.layout, p)
            if not mig or mig["state"] not in IN_FLIGHT or reached(mig):
                return mig
            c.read_in_flight()
            for name in sorted({mig["dst"], mig["coord"]} & set(c.replicas)):
                for kind in ("pull", "execute", "migrate"):
                    if name in c.replicas and c._try(kind, c.replicas[name]):
                        c.tick()
        return read_migration(c.admin, c.layout, p)[0]

    def _forward(self) -> None:
        """The next block sent to a replica that does not own one of its partitions (Keeper's
        assignment; a new partition: any serving replica), so that sub-block is forwarded. At
        times an owner's session expires before (the forward must go to another owner), and, for
        half the blocks, sessions fail around each sub-block's write (`_session_faults`). Now and
        then a forward is retried by a replica that owns the partition (its map changed since it
        decided): ReplicaForwardInsert's guard must refuse it."""
        c = self.c
        nxt = next(self.work, None)
        if nxt is None:
            return self._step()
        block_id, rows = nxt
        p = self.rng.choice(sorted(c.table.split_by_partition(rows)))
        a = read_assignment(c.admin, c.layout, p)
        owners = set(a.owners) if a else set()
        serving = c.serving()
        at = self.rng.choice(sorted(set(serving) - owners) or serving)
        if a and self.rng.random() < 0.1:
            self._forward_by_owner(p)
        if a and self.rng.random() < 0.3:
            live = sorted(o for o in owners if o in c.replicas and not c.replicas[o].keeper.expired)
            if live:
                c.expire_session(self.rng.choice(live))
                self._count("expire an owner before the forward")
        if self.rng.random() < 0.5:
            return self._send(block_id, rows, at=at)
        # Cluster.insert passes its own `_faults` to route_insert: this call's goes first
        c._faults = self._session_faults(at)
        try:
            self._send(block_id, rows, at=at)
        finally:
            del c._faults
            c.keep_answers()
        return None

    def _forward_by_owner(self, p: str) -> None:
        c = self.c
        mine = sorted(n for n, r in c.replicas.items() if p in r.cache and n in r.cache[p].owners)
        if mine:
            rep = c.replicas[self.rng.choice(mine)]
            try:
                replica_forward_insert(rep, p, c.replicas, self.rng)
            except GuardFailed:
                self._count("forward by an owner refused")
                return
            raise RuntimeError(f"{rep.name} forwarded {p}, which its map makes it own")

    def _client_insert(self) -> None:
        """The next block through the reference's client API, client_send_insert (retries to random
        replicas, the same rows so the same dedup ids, one answer for the block), recorded as the
        client was told it: every sub-block ok, failed or unknown alike. An exception the API lets
        through (an allocation refused: NotEnoughActiveReplicas; or any other, logged as Cluster.insert
        logs one) reaches the client as an error after tries it cannot see: unknown."""
        c = self.c
        nxt = next(self.work, None)
        if nxt is None:
            return self._step()
        block_id, rows = nxt
        sent, subs = c.insert_sent(rows)
        # with sessions expiring (`expiring`), the client's tries meet them as forwards do
        faults = self._session_faults(None) if "expire" in self.p.actions else c._faults
        try:
            told = client_send_insert(c.replicas, c.table, rows, tries=self.p.client_tries, rng=c.rng, faults=faults)
        except GuardFailed as e:
            told = "unknown"
            self._count(f"client insert raised {type(e).__name__}")
        except KEEPER_FAULTS:
            raise
        except Exception as e:  # noqa: BLE001 - the server's exception reaches the client, as in Cluster.insert
            c.failed("", "client insert", e)
            told = "unknown"
        finally:
            c.keep_answers()
        if told not in ("ok", "failed", "unknown"):   # no answer a client can act on: a server's error
            c.failed("", "client insert", ValueError(f"client_send_insert answered {told!r}"))
            told = "unknown"
        c.insert_answered(block_id, subs, {p: told for p in subs}, sent)
        self._count(f"client insert {told}")
        return None

    def _client_query(self) -> None:
        """An unsynced SELECT through the reference's client API, select_all (routes and pins at
        the start, every partition read at once), recorded as Cluster.query records one, lag
        included. select_all has no ClientQueryFails: a route to a replica that is not running
        would raise with the other reads' pins left behind, so a map naming one is left to
        Cluster.query."""
        c = self.c
        at = self.rng.choice(sorted(c.replicas))
        rep = c.replicas[at]
        if any(r not in c.replicas for a in rep.cache.values() for r in (*a.owners, a.target) if r):
            return self._query()
        if rep.keeper.expired:   # read-only: it refuses the SELECT (F22), as Cluster.query records
            return self._query()
        start = c.tick()
        c.note_clone_target_query(at)
        q = select_all(rep, c.replicas, choose=c._choose_reader)
        lag = c.unpulled_lag(at, q.routes, None)
        for p, reader in q.routes.items():
            lag[p] = lag.get(p, set()) | c.in_flight_lag(reader, p)
        c.query_answered(at, start, q.routes, c.table.split_by_partition(q.rows), "complete", None, lag)
        self._count("client query")
        return None

    def _parallel_query(self) -> None:
        """A SELECT with parallel replicas (`parallel`): Cluster.parallel_query with the run's
        coordinator, recorded as any query with the lag its announcements excuse."""
        c = self.c
        at = self.rng.choice(sorted(c.replicas))
        q = c.parallel_query(at=at, max_parallel_replicas=self.p.max_parallel_replicas, interleave=self.p.interleave)
        self._count("parallel query" if q is not None else "parallel query failed")

    def _query(self) -> None:
        c = self.c
        at = self.rng.choice(sorted(c.replicas))
        q = c.query(at=at, interleave=self.p.interleave, sync=False)
        self._count("query" if q is not None else "query failed")

    def _open_query(self) -> None:
        """ClientStartQuery at a random replica, on its map as it is (unsynced): every routed
        partition pinned at once, as a distributed query sends its subqueries; about half the
        queries are pruned to some partitions (a WHERE on the partition key). The reads come on
        later turns (`_read_query`). At MAX_OPEN_QUERIES in flight, one is read instead."""
        c = self.c
        if len(self.open) >= MAX_OPEN_QUERIES:
            return self._read_query()
        at = self.rng.choice(sorted(c.replicas))
        known = sorted(c.admin.get_children(c.layout.assignments))
        partitions = (set(self.rng.sample(known, self.rng.randint(1, len(known))))
                      if known and self.rng.random() < 0.5 else None)
        # Each partition read from a random owner (ClickHouse's default load_balancing = random),
        # not the local one first as Cluster.query does: the source of a move is read from by
        # queries started anywhere, so its CLEANUP meets their pins.
        self._open(at, partitions, lambda _, owners: self.rng.choice(sorted(owners)))
        return None

    def _open(self, at: str, partitions: set[str] | None, choose) -> None:
        c = self.c
        start = c.tick()
        if c.replicas[at].keeper.expired:   # read-only: it refuses the SELECT (F22)
            c.query_answered(at, start, {}, {}, "failed", partitions)
            self._count("open query refused")
            return None
        c.note_clone_target_query(at)
        q = client_start_query(c.replicas[at], partitions, choose=choose, replicas=c.replicas)
        o = OpenQuery(q, at, start, partitions, c.unpulled_lag(at, q.routes, partitions))
        self.open.append(o)
        self._count("open query")
        if q.done:   # nothing routed: answered at once
            self._answer(o, "complete")
        return None

    def _read_across_switch(self) -> None:
        """One or two SELECTs of one partition routed to a move's source while it is in CLONE, the
        move then driven to SWITCH; the reads come on later turns. The source's CLEANUP must wait
        for the last of them: its copy is the one they were told to read."""
        c = self.c
        p = self._start_move()
        if p is None:
            return
        src = read_migration(c.admin, c.layout, p)[0]["src"]
        for _ in range(self.rng.randint(1, 2)):   # two: the CLEANUP must wait for the last pin
            at = self.rng.choice(sorted(c.replicas))
            self._open(at, {p}, lambda _, owners: src if src in owners else self.rng.choice(sorted(owners)))
        if (self._drive(p, lambda m: m["state"] == "switched") or {}).get("state") != "switched":
            return
        # Every map catches up on the SWITCH (each replica watches its assignments) and the source
        # tries its CLEANUP: only the queries' pins hold it off now.
        for name in sorted(c.replicas):
            if c._try("refresh", c.replicas[name]):
                c.tick()
        if src in c.replicas and c._try("migrate", c.replicas[src]):
            c.tick()

    def _read_query(self) -> None:
        """One partition of an open query read from the replica it was routed to (its pin released
        by the read); the query answered once its last partition is read. A reader that is not
        running fails it (ClientQueryFails). Up to `interleave` background steps come first, as
        before each read of Cluster.query: the protocol moves while the query waits.
        """
        if not self.open:
            return self._open_query()
        o = self.rng.choice(self.open)
        p = self.rng.choice(sorted(o.q.pending))
        for _ in range(self.rng.randint(0, self.p.interleave)):
            self.c.background_step()
        self._read(o, p)
        if o in self.open and p not in o.q.pending and self.rng.random() < 0.5:
            self._read_again(o, p)
        return None

    def _read_again(self, o: OpenQuery, p: str) -> None:
        """A subquery's answer delivered a second time (a retried connection): ReplicaReadPartition's
        guard must refuse it, or the query would count the partition's rows twice."""
        try:
            replica_read_partition(o.q, p, self.c.replicas)
        except GuardFailed:
            self._count("repeated read refused")
            return
        raise RuntimeError(f"the query at {o.at} read {p} a second time")

    def _read(self, o: OpenQuery, p: str) -> None:
        c = self.c
        reader = o.q.routes[p]
        if reader not in c.replicas:
            return self._answer(o, "failed")
        try:
            o.lag[p] = o.lag.get(p, set()) | c.in_flight_lag(reader, p)
            o.got[p] = replica_read_partition(o.q, p, c.replicas)
            read_done(o.q, p)
        except KEEPER_FAULTS:
            raise
        except Exception as e:  # noqa: BLE001 - as Cluster.query: the server's exception fails the query
            c.failed(o.at, "query", e)
            return self._answer(o, "failed")
        if o.q.done:
            self._answer(o, "complete")
        return None

    def _answer(self, o: OpenQuery, status: str, failed_by: str | None = None) -> None:
        """The client's answer, recorded as Cluster.query records one; a failed query's other pins
        released (ClientQueryFails). `failed_by`: the replica whose crash failed it."""
        c = self.c
        self.open.remove(o)
        pending_at = [o.q.routes[p] for p in o.q.pending]   # read before ClientQueryFails clears them
        if status == "failed":
            client_query_fails(o.q, c.replicas)
        routes = {p: o.q.routes[p] for p in o.got}
        c.query_answered(o.at, o.start, routes, o.got, status, o.partitions, o.lag if status == "complete" else None,
                         failed_by, pending_at)
        self._count("query" if status == "complete" else "query failed")   # as `_query` counts

    def _close_open_queries(self) -> None:
        """At the race's end every open query reads the rest of its partitions (or fails), in a
        fixed order: no pin outlives the race."""
        while self.open:
            o = self.open[0]
            self._read(o, sorted(o.q.pending)[0])

    def _fail_served(self, name: str) -> None:
        """ReplicaCrash fails every open query `name` served (its initiator, or a reader of a
        partition still to read): the pins were in that process's memory."""
        for o in [o for o in self.open if served_by(o.q, name)]:
            self._answer(o, "failed", failed_by=name)

    def _drop(self) -> None:
        """DROP PARTITION of a partition with data: half the time one a migration is moving (its
        DROP_RANGE meets a CLONE target that queues it), else one the operator then moves. Before
        the move every replica pulls the log up to date (ClickHouse pulls on every change, far
        ahead of executing): the target skipped the DROP_RANGE as no keeper, the owners queued it,
        and the cleanup thread may trim it from the log before they execute it. The CLONE fetch
        may then find the owners not yet past it (F8), with the entry gone from the log (F16)."""
        c = self.c
        partitions = sorted(c.admin.get_children(c.layout.assignments))
        moving = sorted(migrations_in_flight(c.admin, c.layout))
        then_move = not moving or self.rng.random() < 0.5
        # a partition to move after its drop: one with no migration in flight, which the REASSIGN
        # would refuse
        pool = ([p for p in partitions if p not in moving] or partitions) if then_move else moving
        if not pool:
            return
        p = self.rng.choice(pool)
        lag = then_move and self.rng.random() < 0.5
        if lag:
            self._pull_all()   # the DROP_RANGE is then every keeper's next entry
        try:
            c.drop_partition(p)
            self._count("drop")
        except GuardFailed:
            self._count("drop refused")
            return
        if not then_move:
            return
        dst = self._pull_then_move(p, keepers_lag=lag)
        if lag and dst in c.replicas:   # the CLONE fetch at once, and the fetches it queued
            c.read_in_flight()
            for kind in ("migrate", "execute", "execute", "execute"):
                if dst in c.replicas and c._try(kind, c.replicas[dst]):
                    c.tick()

    def _pull_all(self, skip=frozenset()) -> None:
        """Every running replica but `skip` pulls the log up to date (ClickHouse pulls on every
        change of log/, far ahead of executing)."""
        for rep in self.c.replicas.values():
            if rep.name in skip:
                continue
            try:
                rep.pull_whole_log()
            except GuardFailed:
                pass   # lost: it clones before it pulls again

    def _pull_then_move(self, p: str, keepers_lag: bool = False) -> str | None:
        """Every replica pulls the log up to date, then, some steps later, p moves to a replica
        that does not own it: its keepers have the latest entries queued, not yet executed.
        With `keepers_lag`, the keepers' pulling threads are behind (a slow Keeper session): only
        the other replicas pull, and the move starts at once, so the CLONE fetch finds the
        partition's latest entries in the log between the keepers' log_pointers and the
        target's, skipped by the target and in no keeper's queue (F8's log range). Returns the
        target if the REASSIGN started."""
        c = self.c
        a = read_assignment(c.admin, c.layout, p)
        candidates = sorted(r for r in c.replicas if r not in a.owners)
        if not candidates:
            return None
        dst = self.rng.choice(candidates)
        self._pull_all(skip=a.keepers() if keepers_lag else frozenset())
        if not keepers_lag:
            for _ in range(self.rng.randint(0, 3 * self.p.interleave)):
                self._step()
        return dst if self._reassign(p, dst) else None

    def _mutate(self) -> None:
        """ALTER TABLE ... UPDATE (table-wide); then, for a partition it took a number in, each
        owner writes at once a MUTATE_PART for every part of its own that owes it, and the
        partition moves as after a drop (_pull_then_move): the CLONE fetch may find every keeper
        with the MUTATE_PARTs queued and none executed, so only what it re-queues from the
        keepers' queues brings the mutation to the target (F8, for mutations: MutationsAppliedInv)."""
        c = self.c
        partitions = sorted(c.admin.get_children(c.layout.assignments))
        if not partitions:
            return
        n = self.counts.get("mutate", 0) + 1
        numbers = c.mutate(f"UPDATE event = 'mutated {n}' WHERE 1")
        self._count("mutate")
        held = sorted(set(partitions) & set(numbers))
        if not held:
            return
        p = self.rng.choice(held)
        lag = self.rng.random() < 0.5
        if lag:
            self._pull_all()   # the MUTATE_PARTs are then every keeper's next entries
        for owner in read_assignment(c.admin, c.layout, p).owners:
            for _ in range(64):   # one MUTATE_PART per part; GuardFailed when none owes it (or not an owner)
                if owner not in c.replicas:
                    break
                try:
                    c.replicas[owner].replica_select_mutation(p)
                except GuardFailed:
                    break
        dst = self._pull_then_move(p, keepers_lag=lag)
        if dst is None or self.rng.random() < 0.3:
            return
        # Most times the target fetches at once, before a keeper executes its MUTATE_PARTs (a
        # keeper that did registers the mutated part, and the CLONE fetches that instead).
        for kind in ("migrate", "execute", "execute"):
            if dst in c.replicas and c._try(kind, c.replicas[dst]):
                c.tick()

    def _retry_stale(self) -> None:
        """A migration step retried on a stale read, as a replica's background task is when its
        Keeper answer was lost after the write went through, or when it was queued for an earlier
        migration of the partition (or for a partition with none). Tried only where the step's
        spec guard is false on what Keeper holds now: the step itself must refuse it
        (GuardFailed). Any other exception is logged by `run` (NoLogicalErrorsInv), and so is an
        accepted retry: a guard the step does not check."""
        c = self.c
        partitions = sorted(c.admin.get_children(c.layout.assignments))
        if not partitions:
            return
        flying = sorted(migrations_in_flight(c.admin, c.layout))   # most retries meet a migration in flight
        p = self.rng.choice(flying if flying and self.rng.random() < 0.7 else partitions)
        # A fetched CLONE lasts a few steps (its SWITCH comes soon, sooner since F23's fix waits
        # only up to the fetch's position): when there is one, half the retries go to it, and
        # every one until its refusal has been met once, where only a SWITCH to another replica
        # than the target is refused.
        migs = {x: read_migration(c.admin, c.layout, x)[0] or {} for x in flying}
        fetched = [x for x, m in migs.items() if m.get("state") == "clone" and m.get("fetched")]
        unmet = self.counts.get("retried switch to another replica than the target refused", 0) == 0
        if fetched and (unmet or self.rng.random() < 0.5):
            p = self.rng.choice(fetched)
        # Likewise a SWITCHed or cancelling migration, until a CLEANUP for a down leaver that is
        # up has been refused once: its leaver is live, and the window lasts as long as CLEANUP's
        # waits (maps, queries, and since F23 an owner holding what the source wrote).
        left = [x for x, m in migs.items() if m.get("state") in ("switched", "cancelling")]
        if left and not (fetched and unmet) and \
                self.counts.get("retried cleanup for a down leaver that is up refused", 0) == 0:
            p = self.rng.choice(left)
        # So does a CLONE whose coordinator is down (until a replica takes it over): the tasks it
        # queued before its crash meet the live-coordinator guard.
        live = lambda name: name is not None and c.admin.exists(c.layout.is_active(name)) is not None  # noqa: E731
        orphaned = [x for x, m in migs.items() if m.get("state") == "clone" and not live(m["coord"])]
        if orphaned and self.rng.random() < 0.5:
            p = self.rng.choice(orphaned)
        mig = migs[p] if p in migs else read_migration(c.admin, c.layout, p)[0] or {}
        state, running = mig.get("state"), sorted(c.replicas)
        rep = c.replicas[self.rng.choice(running)]
        leaver = mig.get("src") if state == "switched" else mig.get("dst") if state == "cancelling" else None
        fetched_clone = state == "clone" and mig["fetched"]
        coord_up = state == "clone" and live(mig["coord"])   # read once: every case below asks
        retries = []   # (the guard the retry meets, the call): each case is a different refusal
        if fetched_clone:   # SWITCH's state guard holds: only one to another replica than the target is refused
            others = [r for r in running if r != mig["dst"]]
            if others and coord_up:
                retries.append(("switch to another replica than the target",
                                lambda: coordinator_switch(rep.keeper, c.layout, p, self.rng.choice(others), c.bugs)))
        else:
            retries.append(("switch of no fetched CLONE", lambda: coordinator_switch(
                rep.keeper, c.layout, p, mig.get("dst") or rep.name, c.bugs)))
        if state == "clone" and not coord_up:   # a coordinator's task queued before its crash
            if fetched_clone:
                retries.append(("switch by a down coordinator", lambda: coordinator_switch(
                    rep.keeper, c.layout, p, mig["dst"], c.bugs)))
            if mig.get("src") is not None:
                retries.append(("cancel by a down coordinator", lambda: coordinator_cancel(rep.keeper, c.layout, p)))
        if rep.name != leaver:
            retries.append(("cleanup by another replica than the leaver", lambda: replica_cleanup(rep, p, c.bugs)))
        if state not in ("switched", "cancelling"):
            retries.append(("cleanup for a down leaver with no SWITCH or CANCEL",
                            lambda: replica_cleanup_for_down_leaver(rep, p, c.bugs)))
        elif live(leaver):   # queued while the leaver was down; it is back and cleans up itself
            retries.append(("cleanup for a down leaver that is up", lambda: replica_cleanup_for_down_leaver(rep, p, c.bugs)))
        if state != "clone":
            retries.append(("clone fetch of no CLONE", lambda: replica_clone_fetch(rep, p, c.replicas)))
        elif mig["fetched"] and mig["dst"] in c.replicas:
            retries.append(("clone fetch of a fetched CLONE", lambda: replica_clone_fetch(
                c.replicas[mig["dst"]], p, c.replicas)))
        elif rep.name != mig["dst"]:
            retries.append(("clone fetch by another replica than the target",
                            lambda: replica_clone_fetch(rep, p, c.replicas)))
        if state != "clone":
            retries.append(("take over no CLONE", lambda: replica_take_over_migration(rep.keeper, c.layout, p, rep.name)))
        elif coord_up:
            retries.append(("take over from a live coordinator",
                            lambda: replica_take_over_migration(rep.keeper, c.layout, p, rep.name)))
        else:   # the down coordinator's own task, queued before its crash: it is not active itself
            retries.append(("take over by a replica that is not active",
                            lambda: replica_take_over_migration(rep.keeper, c.layout, p, mig["coord"])))
        # The case tried least so far, so that every refusal is met in a short run (seed 0 of a
        # mutation run's racing layer) rather than only the common ones.
        fewest = min(self.counts.get(f"retried {what} refused", 0) for what, _ in retries)
        what, retry = self.rng.choice([r for r in retries if self.counts.get(f"retried {r[0]} refused", 0) == fewest])
        try:
            retry()
        except GuardFailed:
            self._count(f"retried {what} refused")
            return
        raise RuntimeError(f"a retried {what} of {p} ({state or 'no migration'}) on {rep.name} was accepted "
                           f"where its spec guard is false")

    def _alter(self) -> None:
        n = self.counts.get("alter", 0) + 1
        self.c.alter_metadata(f"extra_{n} UInt8")
        self._count("alter")

    def _repair(self) -> None:
        c = self.c
        if c.repair():
            self._count("repair")

    def _observe(self) -> None:
        """A snapshot at the current step, unless one was taken at it already: the checkers read a
        snapshot's rows by its step, so two at one step (a CANCEL, say, changes state without a
        tick) would read as one."""
        if self.c.step > self.observed:
            self.c.snapshot(tick=False)
            self.observed = self.c.step

    # --- the end: a state to judge -----------------------------------------------------
    def wind_down(self, max_steps: int = 20_000) -> None:
        """Every replica back, the migrations run until they end or nothing more can run (no step
        enabled: the state stays as it is) or `max_steps` are spent; settled; a synced query per
        replica. Whatever is still in flight is the history's to show (MigrationsEndProp)."""
        c = self.c
        self._close_open_queries()
        # The race's own end, before the restarts and settling below undo what they undo: a
        # restart (and a map refresh) drops a partition the replica no longer keeps, so a foreign
        # copy (F7) is in this snapshot and no later one. The checkers judge NoForeignPartsInv on
        # every snapshot.
        self._observe()
        for what, act in (("restart", self._restart_all), ("repair", lambda: c.repair_all() if c.gone else None),
                          ("wind down", lambda: self._migrations_end(max_steps)), ("settle", c.settle)):
            try:
                act()
            except KEEPER_FAULTS:
                raise
            except Exception as e:  # noqa: BLE001 - as in run(): logged, the end is judged as it is
                c.failed("", what, e)
                self._count(f"{what} raised")
        for r in sorted(c.replicas):
            c.query(at=r)

    def _migrations_end(self, max_steps: int) -> None:
        c = self.c
        for _ in range(max_steps):
            if not migrations_in_flight(c.admin, c.layout):
                return
            if not c.background_step() and not c.settle():
                break   # nothing enabled anywhere: no step will ever run again (time is steps)
        self._count("migrations left in flight")


def racing_cluster(connect, data_dir, profile: Profile, seed: int, bugs=frozenset(), replicas: int = 4,
                   buckets: int | None = None, rf: int | None = None, **kw) -> Cluster:
    """A cluster for a profile: few partitions (so moves, writes and reads meet on them), at the
    profile's replication factor unless `rf` is given."""
    buckets = profile.buckets if buckets is None else buckets
    rf = profile.rf if rf is None else rf
    from protocol.table import Table
    from reference.workload import WORKLOAD
    table = Table(WORKLOAD.name, WORKLOAD.columns, f"(toYYYYMM(date), user_id % {buckets})", WORKLOAD.order_by,
                  replication_factor=rf)
    c = Cluster(connect, data_dir, replicas=[f"r{i}" for i in range(1, replicas + 1)], table=table, seed=seed,
                fault_rate=profile.fault_rate, bugs=bugs, cleanup=profile.cleanup, down_timeout=profile.down_timeout,
                **kw)
    c.count_steps()   # the race's time is its steps (module docstring)
    # A settle of these runs takes at most ~300 steps (every profile, seeds 0-1, teeth.SIZE; 2026-11-24):
    # far past that a step is enabled for ever, and the run ends with it logged rather than hang.
    c.settle_budget = SETTLE_BUDGET
    return c


def race(c: Cluster, profile: Profile, seed: int, blocks: int = 60, rows: int = 4, months: int | None = None,
         first_blocks: int = 4, steps: int | None = None, snapshot_every: int = SNAPSHOT_EVERY) -> dict[str, int]:
    """Insert `first_blocks` blocks, then race the rest with the profile's actions (`steps` loop
    turns, the profile's by default; `months`, the profile's by default)."""
    from reference.workload import blocks as gen
    work = gen(random.Random(seed), blocks, rows, profile.months if months is None else months)
    c.load(work, limit=first_blocks)
    return Race(c, profile, seed, work, steps, snapshot_every).run()


def racing_history(folder, profile: str, seed: int, bugs=frozenset(), coordinator: str | None = None, **kw) -> dict:
    """Run a profile on the in-memory keeper and write its history to `folder`/history; the
    in-process oracle's verdict and the run's figures. `coordinator`: of the parallel-replicas
    SELECTs (profile `parallel`), the cluster's default when None."""
    import time
    from pathlib import Path

    from checkers.oracle import violations
    from protocol.keeper import MemoryEnsemble
    folder = Path(folder)
    t0 = time.perf_counter()
    c = racing_cluster(MemoryEnsemble().connect, folder / "data", profile_of(profile), seed, bugs)
    if coordinator:
        c.coordinator = coordinator
    try:
        counts = race(c, profile_of(profile), seed, **kw)
        # wind_down settled the cluster, unless its settle raised (a step going on for ever)
        c.write_history(folder / "history", settled="settle raised" not in counts)
        problems = violations(c.history, c.table.replication_factor)
        return {"profile": profile, "seed": seed, "bugs": sorted(bugs), "history": str(folder / "history"),
                "oracle_violations": len(problems), "oracle_sample": problems[:5],
                "oracle_invariants": sorted({x.split(":")[0] for x in problems}), "actions": counts,
                "errors": len(c.history.tables["errors"]),
                "error_sample": [f"{e['replica'] or 'admin'} {e['action']}: {e['error']}: {e['message'][:120]}"
                                 for e in c.history.tables["errors"][:5]],
                "rows": len(c.history.tables["inserts"]), "queries": c.queries, "steps": c.step,
                "seconds": round(time.perf_counter() - t0, 2)}
    finally:
        c.close()
