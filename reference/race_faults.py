"""The racing loop's fault injection, a nemesis apart from its workload (a mixin of
reference/races.py's Race): replicas crashed and restarted (`crash`, `restart`, kept down
`min_down` steps), a migration's leaver taken down past the down timeout (`strand`, `desert`) and
brought back once no migration awaits it (`return`) or lost for good (`forsake`, `lose`: crash and
SYSTEM DROP REPLICA), Keeper sessions expired and re-established (`expire`, `reestablish`), and
sessions failed, or a commit's answer lost, around an INSERT's sub-block writes
(`_session_faults`, route_insert's fault points). Each is one of a profile's actions (Race.run
calls `_{action}`), drawn from the race's own random generator in the order the loop has
always drawn; the cluster-level faults are Cluster's (reference/nemesis.py).

The class it is mixed into provides `c` (the Cluster), `p` (the Profile), `rng`, `open` (the
queries in flight), `_count`, `_fail_served` (a crash fails the open queries the replica served:
reference/races.py, where tests patch `served_by`), `_query`, `_start_move`, `_drive` and
`_cancel_of`; `_init_faults` sets the state it keeps.
"""

from __future__ import annotations

import math

from protocol.assignment import read_assignment
from protocol.migration import migrations_in_flight, read_migration


class RaceFaults:
    def _init_faults(self) -> None:
        self.down_at: dict[str, int] = {}   # replica -> the step it went down
        self.doomed: str | None = None      # the leaver `_desert` took down to be lost for good (`_forsake`)

    def _crash(self) -> None:
        c = self.c
        if len(c.replicas) <= self.p.min_live or len(c.down) >= self.p.max_down:
            return
        self._down(self.rng.choice(sorted(c.replicas)))
        self._count("crash")

    def _down(self, name: str) -> None:
        self.c.crash_replica(name)
        self.down_at[name] = self.c.step
        self._fail_served(name)

    def _up(self, name: str) -> None:
        """ReplicaRestart: first every open query routed a partition to `name` while it was down
        fails (its subquery's connection was refused; the new process holds no pin of it)."""
        self._fail_served(name)
        self.c.add_replica(name)

    def _strand(self) -> None:
        """A migration's source goes down in CLONE or after SWITCH: the coordinator (the source)
        is taken over, and once the source has been down for the profile's down_timeout after
        the SWITCH its CLEANUP is done on its behalf; `min_down` keeps it down past that. (A
        cancelled target is a leaver too, but no map routes a read to a target: only a source
        shows what a CLEANUP done too early does.)"""
        c = self.c
        if len(c.replicas) <= self.p.min_live or len(c.down) >= self.p.max_down:
            return
        leavers = set()
        for p in migrations_in_flight(c.admin, c.layout):
            mig, _ = read_migration(c.admin, c.layout, p)
            if mig["state"] in ("clone", "switched"):
                leavers.add(mig["src"])
        leavers &= set(c.replicas)   # a repair's CLONE has no source
        if leavers:
            self._down(self.rng.choice(sorted(leavers)))
            self._count("strand")

    def _orphan(self) -> None:
        """F24's first window, forced (profile `parallel`): every owner of a partition goes down at
        once, a parallel-replicas SELECT starts on a replica that is up, and the owners come back.
        The union of the announcements has nothing of the partition; a routed SELECT would fail
        (its replica is down), the fix fails too, the union answers short. Only where the others
        stay above the profile's min_live."""
        c = self.c
        owners = {}
        for p in sorted(c.admin.get_children(c.layout.assignments)):
            a = read_assignment(c.admin, c.layout, p)
            if a and set(a.owners) <= set(c.replicas) and len(c.replicas) - len(a.owners) >= self.p.min_live:
                owners[p] = sorted(a.owners)
        if not owners or c.down:
            return self._parallel_query()
        p = self.rng.choice(sorted(owners))
        for name in owners[p]:
            self._down(name)
        self._parallel_query()
        for name in owners[p]:
            self._up(name)
        self._count("orphan")

    def _restart(self) -> None:
        c = self.c
        long_enough = sorted(n for n in c.down if c.step - self.down_at.get(n, -math.inf) >= self.p.min_down
                             and n != self.doomed)
        if not long_enough:
            return
        name = self.rng.choice(long_enough)
        self._up(name)
        self._count("restart")
        if self.rng.random() < 0.5:   # a query at once, on the map it loaded (F9 without the fix)
            self._query()

    def _restart_all(self) -> None:
        for name in sorted(n for n, r in self.c.replicas.items() if r.keeper.expired):
            self.c.reestablish(name)   # its restarting thread, before anything else
        for name in sorted(self.c.down):
            self._up(name)

    def _desert(self) -> None:
        """A leaver goes down and stays down past the down timeout (at least `min_down` steps; at
        times for good, `_forsake`): the source of up to two moves driven to SWITCH and the target
        of a CLONE cancelled (fetched or not), so each CLEANUP is done on its behalf
        (replica_cleanup_for_down_leaver). `_strand` (leaving) downs the source of a move
        random steps started, and never a cancelled target: the rule ran in few runs."""
        c = self.c
        if len(c.replicas) <= self.p.min_live or len(c.down) >= self.p.max_down:
            return
        x = self.rng.choice(sorted(c.replicas))
        for_good = (self.doomed is None and not c.gone and not c.down and "forsake" in self.p.actions
                    and self.rng.random() < 0.5)
        if for_good:
            # To be lost for good: only from a settled cluster with every replica up, as `_lose`, so
            # every row it holds is on another owner too (one acknowledged on it alone would be gone
            # with it: F20's bound without insert_quorum, no checker's to excuse). Between here and
            # its going down only the moves below run; once down it takes no write.
            c.settle()
        left = []
        for _ in range(2):
            p = self._start_move(src=x, owned_by=x)
            if p and (self._drive(p, lambda m: m["state"] == "switched") or {}).get("state") == "switched":
                left.append("source")
        p = self._start_move(dst=x)
        if p:
            if self.rng.random() < 0.5:
                self._drive(p, lambda m: m["fetched"])
            if self._cancel_of(p):
                left.append("target")
        if left and x in c.replicas:
            self._down(x)
            self.doomed = x if for_good else self.doomed
            self._count(f"desert {' '.join(sorted(set(left)))}")

    def _forsake(self) -> None:
        """The leaver `_desert` doomed, down for `min_down` steps, is lost for good: SYSTEM DROP
        REPLICA (its disk gone with it), once per run and while a move remains possible (RF + 1
        replicas left). The CLEANUPs done on its behalf meanwhile are what ended its migrations:
        it never comes back to do them."""
        c = self.c
        x = self.doomed
        if c.gone or x not in c.down or len(c.replicas) + len(c.down) <= c.table.replication_factor + 1:
            return
        if c.step - self.down_at[x] >= self.p.min_down and not self._awaited(x):
            c.drop_replica(x)
            self._count("forsake")

    def _return(self) -> None:
        """A deserted replica comes back, once `min_down` steps passed and no migration awaits it
        as its leaver any more (every CLEANUP of its was done on its behalf); the doomed one never."""
        c = self.c
        back = sorted(n for n in c.down if n != self.doomed and c.step - self.down_at[n] >= self.p.min_down
                      and not self._awaited(n))
        if back:
            self._up(self.rng.choice(back))
            self._count("return")

    def _awaited(self, name: str) -> bool:
        """A migration in flight has `name` as its leaver (the source after SWITCH, the target after CANCEL)."""
        c = self.c
        for p in migrations_in_flight(c.admin, c.layout):
            mig, _ = read_migration(c.admin, c.layout, p)
            if (mig["state"] == "switched" and mig["src"] == name) or (mig["state"] == "cancelling" and mig["dst"] == name):
                return True
        return False

    def _lose(self) -> None:
        """A replica lost for good, once per run: crash and SYSTEM DROP REPLICA. Only with every
        replica up and after the cluster settled: an INSERT acknowledged on the lost replica alone
        would be gone with it, the base protocol's bound without insert_quorum (F20,
        MCRepairUnreplicatedInsert), which no repair can undo and no checker should excuse."""
        c = self.c
        if c.gone or c.down or len(c.replicas) <= c.table.replication_factor:
            return
        c.settle()
        name = self.rng.choice(sorted(c.replicas))
        c.crash_replica(name)
        self._fail_served(name)
        c.drop_replica(name)
        self._count("lose")

    def _expire(self) -> None:
        """A running replica's Keeper session expires (a partition from Keeper longer than the
        session timeout): read-only until `_reestablish` gives it a new session."""
        c = self.c
        live = sorted(n for n, r in c.replicas.items() if not r.keeper.expired)
        if len(live) == len(c.replicas):   # one at a time (the forwards' own expire more)
            c.expire_session(self.rng.choice(live))
            self._count("expire")

    def _reestablish(self) -> None:
        """ClickHouse's restarting thread: a replica whose session expired gets a new one
        (Cluster.reestablish: is_active again, the map reloaded before it serves)."""
        c = self.c
        expired = sorted(n for n, r in c.replicas.items() if r.keeper.expired)
        if expired:
            c.reestablish(self.rng.choice(expired))
            self._count("reestablish")

    def _session_faults(self, at: str | None):
        """route_insert's fault points for one block: for 40% of its sub-blocks, at the write (the
        before_write point), sessions fail: the receiver's own when its map makes it an owner (it
        writes the sub-block itself), else an owner's in its map (Keeper's assignment when `at`
        is unknown: a client's receiver is its own pick), or every owner's. Most expire before
        the write; a third instead expire after their commit went out (the in-memory keeper's
        lose_answer: the commit is in Keeper, the writer is told its outcome is unknown, and must
        neither hand the sub-block to another owner nor let the client be told it failed)."""
        c, faults = self.c, self.c._faults

        def blip(where: str, partition: str) -> None:
            if where == "before_write" and self.rng.random() < 0.4 and (at is None or at in c.replicas):
                if at is None:
                    a = read_assignment(c.admin, c.layout, partition)
                    known, receiver = a, None
                else:
                    known, receiver = c.replicas[at].cache.get(partition), at
                live = sorted(o for o in (known.owners if known else ()) if o in c.replicas
                              and not c.replicas[o].keeper.expired)
                if live:
                    every = self.rng.random() < 0.2
                    if every:
                        targets = live
                    else:   # the receiver writes what it owns itself; else one of the owners does
                        targets = [receiver if receiver in live else self.rng.choice(live)]
                    after = self.rng.random() < 1 / 3 and c.lose_answers(targets)
                    if not after:
                        for o in targets:
                            c.expire_session(o)
                    self._count(("lose the commit's answer of " if after else "expire ")
                                + ("every owner" if every else "the receiver" if targets == [receiver]
                                   else "an owner") + (" at" if after else " before") + " the write")
            faults(where, partition)
        return blip
