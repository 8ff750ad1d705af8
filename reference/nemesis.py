"""Fault injection, the nemesis of reference/cluster.py's Cluster (a mixin), apart from the
workload: a replica crashed (its session and map gone, its disk kept) or lost for good (SYSTEM
DROP REPLICA), an INSERT forward broken at `fault_rate` (`_faults`, route_insert's fault points),
a replica's Keeper session expired, and a commit's answer lost after it was applied. Which
replica goes down, and when, is the caller's choice (a test, the CLI, reference/race_faults.py);
a replica comes back through the driver (Cluster.add_replica, Cluster.reestablish).

`_faults` draws from the driver's random generator (`rng`), in the order route_insert calls it;
a racing run replaces it on the instance for one INSERT (`c._faults = ...`, then `del c._faults`).
The class it is mixed into provides `rng`, `fault_rate`, `replicas`, `stores`, `down`, `gone`,
`admin`, `layout`, `history`, `step`, `log` and `windows`.
"""

from __future__ import annotations

import shutil
import time

from protocol.crash import replica_crash
from protocol.insert import InsertOutcomeUnknown
from protocol.keeper import Create
from protocol.repair import drop_replica
from reference.windows import repair_in_flight


class Nemesis:
    """The faults a Cluster can be dealt (module docstring)."""

    def _faults(self, where: str, partition: str) -> None:
        """route_insert's fault point `where` for a sub-block of `partition`: at `fault_rate`, the
        connection breaks there (InsertOutcomeUnknown: the client cannot tell whether it was written)."""
        if self.fault_rate and self.rng.random() < self.fault_rate:
            raise InsertOutcomeUnknown(f"connection broken {where} of {partition}")

    def _note_loss(self) -> None:
        """A replica lost (crashed, dropped, its session expired) while a repair is in flight: the
        window reference/windows.py names repair_racing_loss (counted only when the driver asks)."""
        if self.windows is not None and repair_in_flight(self.admin, self.layout):
            self.windows.open("repair_racing_loss", self.step)

    def crash_replica(self, name: str) -> None:
        """ReplicaCrash: the session goes (is_active with it), the map is lost, the disk stays."""
        if name not in self.replicas:
            raise ValueError(f"unknown or stopped replica {name!r}; running: {sorted(self.replicas)}")
        self._note_loss()
        self.down[name] = self.stores.pop(name)
        # No query of this driver's is open across a step (Cluster.query runs to its end); the
        # racing workload fails the ones it keeps open itself (race_faults.py, _fail_served).
        replica_crash(self.replicas[name], self.replicas)
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
        self._note_loss()
        left = drop_replica(self.admin, self.layout, name)
        store = self.down.pop(name)
        shutil.rmtree(store.folder, ignore_errors=True)
        self.gone.add(name)
        self.log(f"DROP REPLICA {name}: out of {len(left)} partitions, now short of RF")
        return left

    def expire_session(self, name: str) -> None:
        """A running replica's Keeper session expires (a partition from Keeper longer than the session
        timeout): is_active goes, every request of the session fails, the replica is read-only until
        Cluster.reestablish. At once on the in-memory keeper; on ZooKeeper server-side, waited for
        (20 s at most) until the client hears of it."""
        self._note_loss()
        keeper = self.replicas[name].keeper
        if hasattr(keeper, "ensemble"):   # the in-memory keeper: expired at once
            keeper.ensemble.expire(keeper.session_id)
            return
        keeper.expire_session()           # ZooKeeper: the client hears of it by an event
        deadline = time.monotonic() + 20
        while not keeper.expired and time.monotonic() < deadline:
            time.sleep(0.05)

    def lose_answers(self, names: list[str]) -> bool:
        """Arm lose_answer on these replicas' sessions for their next commit (a multi creating a log
        entry); False on ZooKeeper, which has no such switch (the caller expires them instead)."""
        keepers = [self.replicas[n].keeper for n in names]
        if not all(hasattr(k, "ensemble") for k in keepers):
            return False
        log = self.layout.log + "/"
        for k in keepers:
            k.ensemble.lose_answer(k.session_id, lambda ops: any(isinstance(o, Create) and o.path.startswith(log)
                                                                 for o in ops))
        return True

    def keep_answers(self) -> None:
        """Disarm what `lose_answers` armed and did not fire (the sub-block went elsewhere), so no
        later step meets it."""
        if hasattr(self.admin, "ensemble"):
            self.admin.ensemble.keep_answers()
