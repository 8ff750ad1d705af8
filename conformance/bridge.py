"""The bridge between the reference and spec/rfc/SelectiveReplication.tla's actions: the steps
both conformance systems of that spec take the same way, one method per spec action.

- conformance/spec_system.py (SpecSystem): the reference under one model's constants, in
  memory, every choice the spec leaves open a step parameter (the state-graph replay).
- conformance/protocol_system.py (ProtocolSystem): the Hypothesis protocol machine's system,
  fixed constants, real ZooKeeper or memory, the reference making its own choices.

Each keeps what only it has (its constructor, the spec's variables or invariants read back, the
steps that take a choice or count a bound in their own order) and answers the hooks below:

- `layout`: the table's Keeper paths (a class attribute).
- `pid_of(p)`: the partition id of the spec's partition named p; `_insert_pid(i)`: insert i's.
- `_bound(kind)`: the bound on counts[kind] (tries, merges, crashes, migrations).
- `_check_bound(kind, action)`: refuse `action` when that bound is reached (each system words
  its refusal its own way).
- `_pending_pids(x)`: the partition ids a running query x still reads (the client's side).
- `_mark_acked(i)`: the client's record that insert i was acknowledged.
- `_after_crash(r)`: what else the client sees when r crashes (nothing by default).
- `block_during_clone`, `max_concurrent`: the model's BlockDuringClone and MaxConcurrentMigrations.

Both keep the client's side as the spec does: `ins` (st, at, tries), `qry` (st, query, ...),
`counts`, `read_cleaned`; `reps` are the running replicas and `peers` their disks.

Also here, for the replays of either design (pr_system.py too): MemoryPartStore, Pick, Attempts
and REFUSED (still importable from conformance.spec_system).
"""

from __future__ import annotations

import copy
import threading

from protocol.assignment import GuardFailed
from protocol.crash import fail_served, replica_crash
from protocol.keeper import SessionExpiredError
from protocol.layout import Layout
from protocol.migration import (MigrationError, admin_reassign, coordinator_cancel, coordinator_switch,
                                read_migration, replica_cleanup, replica_cleanup_for_down_leaver,
                                replica_clone_fetch, replica_take_over_migration)
from protocol.parts import BadPart, PartGone, PartName, PartStore
from protocol.query import client_query_fails
from protocol.rebalance import RebalanceError
from protocol.replica import InsertRejected, Replica

# The errors by which the reference refuses a step (its guard is false; nothing changed).
REFUSED = (GuardFailed, InsertRejected, MigrationError, RebalanceError, BadPart, SessionExpiredError)


class MemoryPartStore(PartStore):
    """PartStore's semantics (immutable parts, checksums, covering on fetch) held in memory, as
    MemoryEnsemble holds Keeper's: the replay restores whole states thousands of times."""

    def __init__(self, name: str):
        self.folder = name
        self._index = {}
        self._index_lock = threading.Lock()   # PartStore.names takes it
        self.files: dict[str, list] = {}
        self.state: dict = {}

    def load_state(self) -> dict:
        return copy.deepcopy(self.state)

    def save_state(self, state: dict) -> None:
        self.state = copy.deepcopy(state)

    def write(self, name: PartName, rows: list) -> PartName:
        if str(name) in self.files:
            raise BadPart(f"part {name} already exists on {self.folder}: parts are immutable")
        self.files[str(name)] = [dict(r) for r in rows]
        self._index.setdefault(name.partition, set()).add(name)
        return name

    def read(self, name: PartName) -> list:
        try:
            return [dict(r) for r in self.files[str(name)]]
        except KeyError:
            raise PartGone(f"part {name} not found on {self.folder}") from None

    def remove(self, name: PartName) -> None:
        self.files.pop(str(name), None)
        self._index.get(name.partition, set()).discard(name)

    def snapshot(self):
        return dict(self.files), copy.deepcopy(self.state)

    def restore(self, snap) -> None:
        files, state = snap
        self.files, self.state = dict(files), copy.deepcopy(state)
        self._index = {}
        for n in files:
            pn = PartName.parse(n)
            self._index.setdefault(pn.partition, set()).add(pn)


class Pick:
    """A random.Random stand-in (for `choice`) whose choice is the one the replay asks for."""

    def __init__(self, want):
        self.want = want

    def choice(self, seq):
        if self.want not in seq:
            raise GuardFailed("choice", f"{self.want} is not among {list(seq)}")
        return self.want


class Attempts:
    """`attempt`: one step from a snapshot, for the state-graph replays of either design; a system
    names in `refused` the errors by which its reference refuses a step."""
    refused: tuple = REFUSED

    def attempt(self, snap, action: str, args: tuple) -> dict | None:
        """From the state of `snap`, take one step; its abstract state, or None when refused."""
        self.restore(snap)
        try:
            self.step(action, args)
        except self.refused:
            return None
        return self.abstract()


class RFCBridge:
    """The steps of SelectiveReplication.tla both systems take alike (see the module's doc)."""
    layout: Layout
    block_during_clone: bool
    max_concurrent: int
    reps: dict[str, Replica]
    peers: dict[str, PartStore]
    ins: dict
    qry: dict
    counts: dict

    # --- the hooks -------------------------------------------------------------------------
    def pid_of(self, p: str) -> str:
        raise NotImplementedError

    def _insert_pid(self, i) -> str:
        raise NotImplementedError

    def _bound(self, kind: str) -> int:
        raise NotImplementedError

    def _check_bound(self, kind: str, action: str) -> None:
        if self.counts[kind] >= self._bound(kind):
            raise GuardFailed(action, "bound")

    def _pending_pids(self, x: dict) -> set[str]:
        raise NotImplementedError

    def _mark_acked(self, i) -> None:
        raise NotImplementedError

    def _after_crash(self, r: str) -> None:
        pass

    # --- the steps -------------------------------------------------------------------------
    def step(self, action: str, args: tuple) -> str:
        """Run one step; raises one of REFUSED when the reference refuses it."""
        return getattr(self, "_" + action)(*args)

    def _rep(self, r: str) -> Replica:
        if r not in self.reps:
            raise GuardFailed("step", f"{r} is down")
        return self.reps[r]

    def _ReplicaPullLog(self, r):
        return self._rep(r).replica_pull_log()["type"]

    def _ReplicaRefreshCache(self, r, p):
        self._rep(r).replica_refresh_cache(self.pid_of(p))
        return "refreshed"

    def _ReplicaSelectMerge(self, r, p):
        self._check_bound("merges", "ReplicaSelectMerge")
        e = self._rep(r).replica_select_merge(self.pid_of(p), self.block_during_clone)
        self.counts["merges"] += 1
        return e.new_part_name

    def _running(self) -> list[dict]:
        return [x for x in self.qry.values() if x["st"] == "running"]

    def _failed(self, running: list[dict], failed: list) -> None:
        """The client sees the queries the reference failed as failed (the spec's qry[q].st)."""
        ids = {id(q) for q in failed}
        for x in running:
            if id(x["query"]) in ids:
                x["st"] = "failed"

    def _ReplicaCrash(self, r):
        """protocol/crash.py's step: the session ends, the map and pins with it, and the queries it
        served fail (the pins they hold elsewhere released). The queries must fail (spec
        ReplicaCrash, ServedBy): the subquery died with the process, and so did the in-memory pin
        that holds off the leaver's CLEANUP. Before the spec said so, the protocol machine's
        directed walks found a CLEANUP after the restart removing data such a query still read
        (CleanupSafeInv; conformance/README.md)."""
        rep = self._rep(r)
        self._check_bound("crashes", "ReplicaCrash")
        self.counts["crashes"] += 1
        del self.peers[r]
        running = self._running()
        self._failed(running, replica_crash(rep, self.reps, [x["query"] for x in running]))
        self._after_crash(r)
        return "crashed"

    def _fail_served(self, r: str) -> None:
        """Every running query r serves (ServedBy) fails, its pins elsewhere released."""
        running = self._running()
        self._failed(running, fail_served([x["query"] for x in running], r, self.reps))

    def _ClientSendInsert(self, i, r):
        x = self.ins[i]
        if x["st"] not in ("idle", "unknown", "failed") or x["tries"] >= self._bound("tries"):
            raise GuardFailed("ClientSendInsert", f"{i} is {x['st']} after {x['tries']} tries")
        self._rep(r)
        self.ins[i] = {**x, "st": "sent", "at": r, "tries": x["tries"] + 1}
        return "sent"

    def _sent_at(self, action, r, i):
        x = self.ins[i]
        if x["st"] != "sent" or x["at"] != r:
            raise GuardFailed(action, f"{i} is not sent at {r}")
        return self._rep(r), self._insert_pid(i)

    def _ClientReceiveAck(self, i):
        if self.ins[i]["st"] != "written":
            raise GuardFailed("ClientReceiveAck", f"{i} is {self.ins[i]['st']}")
        self.ins[i]["st"] = "acked"
        self._mark_acked(i)
        return "acked"

    def _ClientTimeout(self, i):
        x = self.ins[i]
        if x["st"] not in ("sent", "written") or x["tries"] >= self._bound("tries"):
            raise GuardFailed("ClientTimeout", f"{i} is {x['st']}")
        x["st"] = "unknown"
        return "unknown"

    def _ClientQueryFails(self, q):
        x = self.qry[q]
        if x["st"] != "running" or all(x["query"].routes[pid] in self.reps for pid in self._pending_pids(x)):
            raise GuardFailed("ClientQueryFails", f"{q} can go on")
        client_query_fails(x["query"], self.reps)
        x["st"] = "failed"
        return "failed"

    def _AdminReassign(self, p, src, dst):
        self._check_bound("migrations", "AdminReassign")
        admin_reassign(self.admin, self.layout, self.pid_of(p), dst, src, self.max_concurrent)
        self.counts["migrations"] += 1
        return f"{src}->{dst}"

    # --- a migration's steps, partition p's ---------------------------------------------
    def _mig(self, p):
        mig = read_migration(self.admin, self.layout, self.pid_of(p))[0]
        if not mig:
            raise GuardFailed("migration step", f"no migration of {p}")
        return mig

    def _ReplicaCloneFetch(self, p):
        mig = self._mig(p)
        return str(replica_clone_fetch(self._rep(mig["dst"]), self.pid_of(p), self.reps))

    def _CoordinatorSwitch(self, p):
        mig = self._mig(p)
        coordinator_switch(self.admin, self.layout, self.pid_of(p), mig["dst"], self.bugs)
        return "switched"

    def _ReplicaCleanup(self, p):
        mig = self._mig(p)
        leaver = mig["src"] if mig["state"] == "switched" else mig["dst"]
        routed_here = self.routed(self.pid_of(p), leaver)
        replica_cleanup(self._rep(leaver), self.pid_of(p), self.bugs)
        self.read_cleaned |= routed_here
        return "cleaned"

    def _CoordinatorCancel(self, p):
        mig = self._mig(p)
        coordinator_cancel(self.admin, self.layout, self.pid_of(p), self.reps.get(mig["dst"]), self.bugs)
        return "cancelled"

    def _ReplicaTakeOverMigration(self, p, r):
        replica_take_over_migration(self.admin, self.layout, self.pid_of(p), r)
        return "took over"

    def routed(self, pid: str, replica: str) -> bool:
        """A running query still has to read partition `pid` on `replica`."""
        return any(x["st"] == "running" and pid in self._pending_pids(x) and x["query"].routes[pid] == replica
                   for x in self.qry.values())

    def _ReplicaCleanupForDownLeaver(self, p, r):
        mig = self._mig(p)
        leaver = mig["src"] if mig["state"] == "switched" else mig["dst"]
        # The client's side of the guard: a query routed to the leaver fails before it is ended
        # for (its connection broke with the server; the reference runs queries to the end).
        if self.routed(self.pid_of(p), leaver):
            raise GuardFailed("ReplicaCleanupForDownLeaver", f"a running query is routed to {leaver} for {p}")
        replica_cleanup_for_down_leaver(self._rep(r), self.pid_of(p), self.bugs)
        return "ended"
