"""The reference's whole protocol as a system with the actions of spec/rfc/SelectiveReplication.tla:
`step(action, params)` runs the reference step (GuardFailed and its kin mean the step was
refused), `invariants()` evaluates the spec's invariants on the reference's state.

Constants, as the small models: replicas r1..r3, RF 2, partitions p1 = 202401-0 and
p2 = 202401-1, inserts i1..i3 of one row each (i1, i3 in p1; i2 in p2), queries q1, q2. The
client's view of an insert (the spec's `ins`) and of a query (`qry`, with `expected`, `lost`,
`dup`) are kept here, as the spec keeps them: they are what the client saw, not reference state.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

from checkers.oracle import outcome_contradiction
from conformance.bridge import REFUSED, RFCBridge  # noqa: F401 - REFUSED: imported from here too
from protocol.assignment import GuardFailed, read_assignment, replica_allocate
from protocol.cleanup_thread import CleanupSettings, cleanup_clear_old_blocks, cleanup_clear_old_logs, old_logs
from protocol.insert import replica_forward_insert, sub_block_hash
from protocol.keeper import MemoryEnsemble
from protocol.layout import Layout
from protocol.log_entry import ALTER_METADATA, DROP_RANGE, GET_PART, MUTATE_PART, PART_PRODUCING, LogEntry
from protocol.migration import migrations_in_flight, read_migration
from protocol.mutations import owed
from protocol.parts import PartName, PartStore, active_set
from protocol.query import client_query_fails, client_start_query, replica_read_partition
from protocol.rebalance import RebalanceError, system_rebalance
from protocol.registration import create_table_znodes, declare_replicas, register_replica
from protocol.repair import drop_replica, repair_start
from protocol.replica import InsertRejected, Replica, client_alter_metadata, client_drop_partition, client_mutate
from protocol.restart import replica_restart

LAYOUT = Layout("/clickhouse/tables/conformance/events")
PIDS = {"p1": "202401-0", "p2": "202401-1"}
INSERT_PARTITION = {"i1": "p1", "i2": "p2", "i3": "p1"}
BOUNDS = {"tries": 2, "merges": 2, "mutations": 1, "drops": 1, "alters": 1, "migrations": 2, "crashes": 1,
          "replica_drops": 0}
# SYSTEM DROP REPLICA and the repair back to RF (DropReplica, RepairStart: spec/FINDINGS.md F20)
# are steps of the machine built with repair=True (conformance/machines.py), whose bounds add these:
# one crashed replica may be dropped for good. Not in the default machine: its walks, and the
# switch table measured on them, stay as they were.
REPAIR_BOUNDS = {"replica_drops": 1}
# No holding TLC model lets an INSERT be retried (MaxTries 2) in a table where a DROP PARTITION may
# run (MaxDrops 1), and the spec itself breaks NoDuplicateRowsInv there: the DROP clears the insert's
# hash, and its retry is written again on a replica that has not executed the DROP_RANGE yet, which
# then holds the insert's rows twice (TLC, MCDropRetry: 7 states; spec/FINDINGS.md F21, a bound of
# the base protocol, and the refinement that would let a walk have both).
# So a walk has one or the other, as the models do (conformance/machines.py draws which).
RETRIES_NOT_DROPS, DROPS_NOT_RETRIES = {"drops": 0}, {"tries": 1}
# The cleanup thread trims as soon as it may, and a replica down one entry behind is lost: the
# machine reaches trimmed logs and lost replicas in a few steps.
CLEANUP = CleanupSettings(min_logs_to_keep=0, max_logs_to_keep=1)


def repair_outcome_broken(before: tuple, after: tuple, dropped_now: set[str], rf: int) -> str | None:
    """The spec's RepairOutcomeProp on one step of one partition: `before` and `after` are its
    (assignment, migration record) around the step, `dropped_now` the replicas the step removed
    for good. A step leaves the owner count as it was, except that SYSTEM DROP REPLICA lowers it
    by one per owner it removes and a repair's SWITCH (a CLONE with no source) adds exactly its
    target; an allocation starts at RF. None: it holds; else what broke."""
    (a, mig), (a2, mig2) = before, after
    if a2 is None:
        return None
    if a is None:
        return None if len(a2.owners) == rf else f"allocated with {len(a2.owners)} owners, not {rf}"
    repair = mig.get("state") == "clone" and mig2.get("state") in ("switched", "done") and mig.get("src") is None
    want = len(a.owners) - len(set(a.owners) & dropped_now) + (1 if repair else 0)
    if len(a2.owners) != want:
        return f"has {len(a2.owners)} owners after the step, not {want}"
    if repair and set(a2.owners) != set(a.owners) | {mig["dst"]}:
        return f"repair's SWITCH left owners {sorted(a2.owners)}, not {sorted(set(a.owners) | {mig['dst']})}"
    return None


class ProtocolSystem(RFCBridge):
    layout = LAYOUT

    def __init__(self, bugs=frozenset(), max_concurrent: int = 2, block_during_clone: bool = False,
                 replicas=("r1", "r2", "r3"), rf: int = 2, connect=None, bounds: dict | None = None):
        """`connect`: opens a Keeper session in an empty namespace (real ZooKeeper); by default a
        fresh in-memory ensemble. `bounds`: overrides of BOUNDS."""
        self.bounds = {**BOUNDS, **(bounds or {})}
        self.bugs, self.rf, self.max_concurrent = frozenset(bugs), rf, max_concurrent
        self.block_during_clone = block_during_clone
        self.names = tuple(replicas)
        self.folder = Path(tempfile.mkdtemp(prefix="conformance-"))
        self.ensemble = None if connect else MemoryEnsemble()
        self.connect = connect or self.ensemble.connect
        self.admin = self.connect()
        create_table_znodes(self.admin, LAYOUT, rf)
        self.stores = {r: PartStore(self.folder / r) for r in self.names}
        self.peers: dict[str, PartStore] = dict(self.stores)
        self.reps: dict[str, Replica] = {}
        self.log_seen: dict[int, LogEntry] = {}
        declare_replicas(self.admin, LAYOUT, self.names)   # created with the table: nothing to clone
        for r in self.names:
            self._start(r)
        self.rng = random.Random(0)
        self.ins = {i: {"st": "idle", "at": None, "tries": 0} for i in INSERT_PARTITION}
        self.blocks: dict[str, set[str]] = {i: set() for i in INSERT_PARTITION}  # parts written per insert
        self.qry = {q: {"st": "idle"} for q in ("q1", "q2")}
        self.counts = {k: 0 for k in self.bounds}
        self.read_cleaned = False
        self._rows: dict = {}
        self.restarted: set[str] = set()   # replicas that came back from a crash (for directed walks)
        self.gone: set[str] = set()        # replicas SYSTEM DROP REPLICA removed (the spec's gone)
        # RepairOutcomeProp, an action property, judged on every step taken (step below): the
        # first step that broke it, if one did.
        self.repair_outcome_broken: str | None = None

    def _start(self, r: str) -> None:
        k = self.connect()
        register_replica(k, LAYOUT, r)
        self.peers[r] = self.stores[r]
        rep = Replica(r, k, LAYOUT, self.stores[r], self.peers, self.bugs)
        # The spec's ReplicaRestart drops what a CLEANUP done on its behalf left; a query still
        # routed here for such a partition finds the data gone.
        for pid in replica_restart(rep)[1]:
            self.read_cleaned |= self.routed(pid, r)
        self.reps[r] = rep

    def close(self) -> None:
        for k in [self.admin, *(r.keeper for r in self.reps.values())]:
            try:
                k.close()
            except Exception:
                pass
        shutil.rmtree(self.folder, ignore_errors=True)

    # --- reading the reference's state as the spec's variables ------------------------------
    def active(self) -> set[str]:
        return {r for r in self.names if self.admin.exists(LAYOUT.is_active(r)) is not None}

    def log(self) -> list[LogEntry]:
        """The whole log since the table began, by number: the cleanup thread removes entries
        from Keeper, not from history, and the spec's invariants range over history."""
        for n in self.admin.get_children(LAYOUT.log):
            k = int(n.rsplit("-", 1)[1])
            if k not in self.log_seen:
                self.log_seen[k] = LogEntry.parse(self.admin.get(f"{LAYOUT.log}/{n}")[0])
        return [self.log_seen[k] for k in range(len(self.log_seen))]

    def migration_states(self) -> dict[str, str | None]:
        """Each partition's migration state in Keeper (clone, switched, done, ...; None: never migrated)."""
        return {p: (read_migration(self.admin, LAYOUT, pid)[0] or {}).get("state") for p, pid in PIDS.items()}

    def kept(self) -> list[str]:
        """The replicas that still exist (running or down): not removed by SYSTEM DROP REPLICA,
        whose Keeper subtree is gone with them."""
        return [r for r in self.names if r not in self.gone]

    def ptr(self, r: str) -> int:
        return int(self.admin.get(LAYOUT.log_pointer(r))[0])

    def queue(self, r: str) -> list[LogEntry]:
        q = LAYOUT.queue(r)
        return [LogEntry.parse(self.admin.get(f"{q}/{n}")[0]) for n in self.admin.get_children(q)]

    def held(self, r: str, pid: str) -> list[tuple[PartName, list[dict]]]:
        # Parts are immutable: a part's rows are read from disk once (a mutation or merge makes
        # a part of another name).
        store = self.stores[r]
        out = []
        for n in store.names(pid):
            key = (r, n)
            if key not in self._rows:
                self._rows[key] = [x["row_id"] for x in store.read(n)]
            out.append((n, [{"row_id": x} for x in self._rows[key]]))
        return out

    def rows(self, r: str, pids=tuple(PIDS.values())) -> set[int]:
        """The row ids on r's disk, of the partitions `pids` (every partition by default)."""
        return {x["row_id"] for pid in pids for _, xs in self.held(r, pid) for x in xs}

    def copy_elsewhere(self, r: str) -> bool:
        """Every row on r's disk is on another replica that stays (not dropped)."""
        return self.rows(r) <= set().union(*(self.rows(o) for o in self.kept() if o != r))

    def get_idx(self, i: str, log: list[LogEntry]) -> list[int]:
        """1-based indices of the GET_PARTs committing insert i (a retry after a DROP PARTITION
        cleared its hash writes it again)."""
        return [k for k, e in enumerate(log, 1) if e.type == GET_PART and e.new_part_name in self.blocks[i]]

    def first_idx(self, i: str, log: list[LogEntry]) -> int:
        return min(self.get_idx(i, log), default=0)

    def last_idx(self, i: str, log: list[LogEntry]) -> int:
        return max(self.get_idx(i, log), default=0)

    def block_no(self, i: str) -> int | None:
        """The block of i's last write (the spec's LastIdx)."""
        nums = [PartName.parse(n).min_block for n in self.blocks[i]]
        return max(nums) if nums else None

    def drop_point(self, pid: str, entries: list[LogEntry]) -> int:
        return max([e.part.max_block for e in entries if e.type == DROP_RANGE and e.partition == pid], default=-1)

    def live(self, i: str, log: list[LogEntry]) -> bool:
        b = self.block_no(i)
        return b is not None and b > self.drop_point(PIDS[INSERT_PARTITION[i]], log)

    def live_acked(self, log: list[LogEntry]) -> set[str]:
        return {i for i, x in self.ins.items() if x.get("acked") and self.live(i, log)}

    def in_flight_to(self, r: str, i: str, log: list[LogEntry], ptr: int | None = None,
                     queue: list[LogEntry] | None = None) -> bool:
        """`ptr` and `queue`: r's, when the caller already read them (one Keeper read per check).
        A block no replica's disk has (running or down) is on its way nowhere (the spec's first
        conjunct)."""
        if not any(self.has_block(x, i) for x in self.names):
            return False
        if (self.ptr(r) if ptr is None else ptr) < self.last_idx(i, log):
            return True
        mine = [PartName.parse(n) for n in self.blocks[i]]
        return any(e.type in PART_PRODUCING and any(e.part.covers(b) for b in mine)
                   for e in (self.queue(r) if queue is None else queue))

    def has_block(self, r: str, i: str) -> bool:
        row = int(i[1:])
        return any(x["row_id"] == row for _, rows in self.held(r, PIDS[INSERT_PARTITION[i]]) for x in rows)

    # --- the spec's invariants -----------------------------------------------------------
    def invariants(self) -> dict[str, bool]:
        log = self.log()
        out = {}
        asg = {p: read_assignment(self.admin, LAYOUT, pid) for p, pid in PIDS.items()}
        migs = {p: read_migration(self.admin, LAYOUT, pid)[0] for p, pid in PIDS.items()}
        ok = True
        for p, a in asg.items():
            if a is None:
                continue
            st = (migs[p] or {}).get("state", "none")
            # RF exactly, or short by at most one owner per replica dropped, none of them keeping it
            ok &= self.rf - len(self.gone) <= len(a.owners) <= self.rf and not set(a.keepers()) & self.gone
            ok &= (a.target is not None) == (st == "clone")
            ok &= (a.leaving is not None) == (st == "cancelling" or st == "switched"
                                              and "source_stops_at_switch" not in self.bugs)
        out["ReplicationFactorInv"] = ok
        acked = self.live_acked(log)
        ptrs = {r: self.ptr(r) for r in self.kept()}      # read once for every clause below
        queues = {r: self.queue(r) for r in self.kept()}
        # Committed: the reference returned the part it wrote for i, on this try or an earlier one
        # (a deduplicated retry writes nothing new). The log itself may be trimmed by now.
        out["AckedCommittedInv"] = all(self.blocks[i] for i, x in self.ins.items() if x.get("acked"))
        out["NoAckedBlockLostInv"] = all(any(self.has_block(r, i) for r in self.names) for i in acked)
        out["OwnersCompleteInv"] = all(self.has_block(o, i) or self.in_flight_to(o, i, log, ptrs[o], queues[o])
                                       for i in acked for o in asg[INSERT_PARTITION[i]].owners)
        done = [q for q in self.qry.values() if q["st"] == "done"]
        out["QueryNoMissingInv"] = all(not q["lost"] for q in done)
        out["QueryNoDuplicateInv"] = all(not q["dup"] for q in done)
        dup = True
        for r in self.names:
            for pid in PIDS.values():
                rows = [x["row_id"] for _, xs in self.held(r, pid) for x in xs]
                dup &= len(rows) == len(set(rows))
        out["NoDuplicateRowsInv"] = dup
        out["CleanupSafeInv"] = not self.read_cleaned
        foreign = mutations = drops = alters = True
        for r in self.kept():   # a dropped replica's disk went with it
            passed, queued = log[:ptrs[r]], queues[r]
            alters &= self.reps[r].metadata_version + sum(e.type == ALTER_METADATA for e in queued) == sum(
                e.type == ALTER_METADATA for e in passed) if r in self.reps else True
            for p, pid in PIDS.items():
                a, mig = asg[p], migs[p] or {}
                names = self.stores[r].names(pid)
                if not names:
                    continue
                keeper = a is not None and r in a.keepers()
                leaver = mig.get("src") if mig.get("state") == "switched" else mig.get("dst")
                foreign &= (keeper or (mig.get("state") in ("switched", "cancelling") and r == leaver)
                            or r not in self.reps)   # down: it drops the partition on restart
                if keeper:
                    # MutationsOwed: the highest MUTATE_PART of the part's data r has passed.
                    muts = [e.part for e in passed if e.type == MUTATE_PART and e.partition == pid]
                    pending_mut = any(e.type == MUTATE_PART and e.partition == pid for e in queued)
                    owed_by = lambda x: max([m.mutation for m in muts if m.min_block <= x.max_block  # noqa: E731
                                             and x.min_block <= m.max_block], default=0)
                    fetching = [e.part for e in queued if e.type == GET_PART and e.partition == pid]  # MutatedPartQueued
                    mutations &= pending_mut or all(x.mutation >= owed_by(x) or any(
                        y.covers(x) and y.mutation >= owed_by(x) for y in fetching) for x in names)
                    point = self.drop_point(pid, passed)
                    pending_drop = any(e.type == DROP_RANGE and e.partition == pid for e in queued)
                    drops &= all(x.min_block > point for x in names) or pending_drop
        out["NoForeignPartsInv"] = foreign
        out["MutationsAppliedInv"] = mutations
        out["DropsAppliedInv"] = drops
        out["GlobalEntriesAppliedInv"] = alters
        out["MigrationLimitInv"] = len(migrations_in_flight(self.admin, LAYOUT)) <= self.max_concurrent
        out["MigrationOutcomeInv"] = not any(
            outcome_contradiction(m["state"], m["src"], m["dst"], asg[p].owners if asg[p] else (), gone=self.gone,
                                  leaving=asg[p].leaving if asg[p] else None,
                                  stops_at_switch="source_stops_at_switch" in self.bugs)
            for p, m in migs.items() if m)
        out["RepairOutcomeProp"] = self.repair_outcome_broken is None
        return out

    def step(self, action: str, args: tuple) -> str:
        """The bridge's step, with RepairOutcomeProp judged on it: the owners of every partition
        before and after (the action property's primed and unprimed asg, mig and gone)."""
        before = self._owners_and_migrations()
        gone = set(self.gone)
        out = super().step(action, args)
        if self.repair_outcome_broken is None:
            after = self._owners_and_migrations()
            for p in PIDS:
                why = repair_outcome_broken(before[p], after[p], self.gone - gone, self.rf)
                if why:
                    self.repair_outcome_broken = f"{action}{args}: {p} {why}"
                    break
        return out

    def _owners_and_migrations(self) -> dict:
        return {p: (read_assignment(self.admin, LAYOUT, pid), read_migration(self.admin, LAYOUT, pid)[0] or {})
                for p, pid in PIDS.items()}

    # --- the steps -------------------------------------------------------------------------
    PARAMS = {
        "ReplicaPullLog": ("r",), "ReplicaExecuteEntry": ("r",), "ReplicaCrash": ("r",), "ReplicaRestart": ("r",),
        "ReplicaRefreshCache": ("r", "p"), "ReplicaSelectMerge": ("r", "p"), "ReplicaSelectMutation": ("r", "p"),
        "ClientSendInsert": ("i", "r"),
        "ReplicaAllocate": ("r", "i"), "ReplicaForwardInsert": ("r", "i"), "ReplicaWriteInsert": ("r", "i"),
        "ClientStartQuery": ("q", "r"), "ClientReceiveAck": ("i",), "ClientTimeout": ("i",),
        "ClientQueryFails": ("q",), "ReplicaReadPartition": ("q", "p"), "ClientAlterMetadata": (),
        "ClientMutate": (), "ClientDropPartition": ("p",), "ReplicaCloneFetch": ("p",),
        "CoordinatorSwitch": ("p",), "ReplicaCleanup": ("p",), "CoordinatorCancel": ("p",),
        "ReplicaTakeOverMigration": ("p", "r"), "ReplicaCleanupForDownLeaver": ("p", "r"), "AdminReassign": ("p", "r", "r"), "AdminRebalance": ("p", "r", "r"),
        "CleanupClearOldLogs": (), "CleanupClearOldBlocks": ("i",),
    }
    # The machine built with repair=True has these too (REPAIR_BOUNDS).
    REPAIR_PARAMS = {"DropReplica": ("r",), "RepairStart": ("p", "r", "r")}
    DOMAINS = {"Replicas": ("r1", "r2", "r3"), "Partitions": tuple(PIDS), "Inserts": tuple(INSERT_PARTITION),
               "Queries": ("q1", "q2")}

    def fingerprint(self):
        """Keeper's tree (paths and versions) and every replica's parts and map: a refused step
        must leave all of it as it was."""
        if self.ensemble is not None:
            with self.ensemble.lock:
                tree = frozenset((k, n.version, n.value) for k, n in self.ensemble.nodes.items())
        else:
            tree = frozenset(self._walk(LAYOUT.root))
        disk = tuple((r, tuple(self.stores[r].names())) for r in self.names)
        maps = tuple((r, tuple(sorted((p, a.version) for p, a in rep.cache.items()))) for r, rep in sorted(self.reps.items()))
        return tree, disk, maps

    def _walk(self, path: str):
        data, stat = self.admin.get(path)
        yield path, stat.version, data
        for child in self.admin.get_children(path):
            yield from self._walk(f"{path}/{child}")

    # --- the bridge's hooks (conformance/bridge.py) ------------------------------------------
    def pid_of(self, p: str) -> str:
        return PIDS[p]

    def _insert_pid(self, i) -> str:
        return PIDS[INSERT_PARTITION[i]]

    def _bound(self, kind: str) -> int:
        return self.bounds[kind]

    def _pending_pids(self, x: dict) -> set[str]:
        return x["query"].pending

    def _mark_acked(self, i) -> None:
        self.ins[i]["acked"] = True

    def _after_crash(self, r: str) -> None:
        for x in self.ins.values():  # an insert being routed by the crashed replica is lost with it
            if x["st"] == "sent" and x["at"] == r:
                x["st"] = "unknown"

    # --- its own steps: the reference makes the choices; bounds counted in their own order ---
    def _ReplicaExecuteEntry(self, r, k=0):
        rep = self._rep(r)
        q = rep.queue()
        if not q:
            raise GuardFailed("ReplicaExecuteEntry", "queue empty")
        return rep.replica_execute_entry(q[k % len(q)][0])

    def _ReplicaRestart(self, r):
        if r in self.reps or r in self.gone:
            raise GuardFailed("ReplicaRestart", f"{r} is up or dropped for good")
        self._start(r)
        self.restarted.add(r)
        return "restarted"

    def _ReplicaSelectMutation(self, r, p):
        return self._rep(r).replica_select_mutation(PIDS[p], block_during_clone=self.block_during_clone).new_part_name

    def _ReplicaAllocate(self, r, i):
        rep, pid = self._sent_at("ReplicaAllocate", r, i)
        if pid in rep.cache:
            raise GuardFailed("ReplicaAllocate", f"{r} knows {pid}")
        try:
            rep.learn(pid, replica_allocate(rep.keeper, LAYOUT, r, pid, self.rf, self.bugs, self.rng))
        except GuardFailed:  # NotEnoughActiveReplicas: the INSERT fails
            self.ins[i]["st"] = "failed"
            return "failed"
        return "allocated"

    def _ReplicaForwardInsert(self, r, i):
        rep, pid = self._sent_at("ReplicaForwardInsert", r, i)
        try:
            owner = replica_forward_insert(rep, pid, self.reps, self.rng)
        except InsertRejected as e:
            raise GuardFailed("ReplicaForwardInsert", str(e)) from e
        self.ins[i]["at"] = owner.name
        return owner.name

    def _ReplicaWriteInsert(self, r, i):
        rep, pid = self._sent_at("ReplicaWriteInsert", r, i)
        a = rep.cache.get(pid)
        if a is None or r not in a.owners:
            raise GuardFailed("ReplicaWriteInsert", f"{r}'s map does not make it an owner of {pid}")
        rows = [{"date": "2024-01-15", "user_id": 0 if INSERT_PARTITION[i] == "p1" else 1, "row_id": int(i[1:]),
                 "event": "e"}]
        try:
            got = rep.replica_write_insert(pid, rows, sub_block_hash(pid, rows))
        except InsertRejected:
            self.ins[i]["st"] = "failed"
            return "rejected"
        if got != "deduplicated":
            self.blocks[i].add(got)
        self.ins[i]["st"] = "written"
        return got

    def _ClientStartQuery(self, q, r):
        if self.qry[q]["st"] != "idle" or r not in self.reps:
            raise GuardFailed("ClientStartQuery", f"{q} is {self.qry[q]['st']}")
        rep = self.reps[r]
        query = client_start_query(rep, replicas=self.reps)
        log = self.log()
        known = set(query.routes)
        acked = self.live_acked(log)
        ptr = self.ptr(r)
        lost = {i for i in acked if PIDS[INSERT_PARTITION[i]] not in known and ptr >= self.first_idx(i, log)}
        self.qry[q] = {"st": "running" if query.pending else "done", "query": query, "expected": acked,
                       "seen": [], "dup": False, "lost": lost}
        # A subquery routed to a replica that is down fails at once, as one on a replica that
        # crashes does (_ReplicaCrash): no process holds the pin that keeps the leaver's CLEANUP
        # off, so a CLEANUP after its restart removed data the query still read (CleanupSafeInv,
        # found by issue 18's walks on the fixed reference in the thorough profile: a second
        # migration of the partition away from the replica the query waited for).
        if any(query.routes[p] not in self.reps for p in query.pending):
            client_query_fails(query, self.reps)
            self.qry[q]["st"] = "failed"
        return "started"

    def _ReplicaReadPartition(self, q, p):
        x, pid = self.qry[q], PIDS[p]
        if x["st"] != "running" or pid not in x["query"].pending:
            raise GuardFailed("ReplicaReadPartition", f"{q} does not wait for {pid}")
        reader = x["query"].routes[pid]
        if reader not in self.reps:
            raise GuardFailed("ReplicaReadPartition", f"{reader} is down")
        rows = replica_read_partition(x["query"], pid, self.reps)
        got = [r["row_id"] for r in rows]
        log = self.log()
        x["dup"] |= len(got) != len(set(got)) or bool(set(got) & set(x["seen"]))
        x["seen"] += got
        ptr, queue = self.ptr(reader), self.queue(reader)
        x["lost"] |= {i for i in x["expected"] if INSERT_PARTITION[i] == p and int(i[1:]) not in got
                      and not self.in_flight_to(reader, i, log, ptr, queue) and self.live(i, log)}
        if x["query"].done:
            x["st"] = "done"
        return f"{len(rows)} rows"

    def _bounded(self, kind):
        if self.counts[kind] >= self.bounds[kind]:
            raise GuardFailed(kind, "bound")
        self.counts[kind] += 1

    def _ClientAlterMetadata(self):
        self._bounded("alters")
        client_alter_metadata(self.admin, LAYOUT, "ADD COLUMN x")
        return "alter"

    def _alterable(self, action, p):
        """DROP PARTITION's guard: assigned, and not in a CLONE that blocks it."""
        if read_assignment(self.admin, LAYOUT, PIDS[p]) is None or (
                self.block_during_clone and (read_migration(self.admin, LAYOUT, PIDS[p])[0] or {}).get("state") == "clone"):
            raise GuardFailed(action, f"{p} unassigned or in CLONE")

    def _ClientMutate(self):
        self._bounded("mutations")
        client_mutate(self.admin, LAYOUT, f"UPDATE event = 'm{self.counts['mutations']}' WHERE 1")
        return "mutate"

    def _ClientDropPartition(self, p):
        self._alterable("ClientDropPartition", p)
        self._bounded("drops")
        client_drop_partition(self.admin, LAYOUT, PIDS[p])
        return "drop"

    def _AdminRebalance(self, p=None, src=None, dst=None):
        """SYSTEM REBALANCE starts the moves its plan picks; the spec's (p, src, dst) is one of
        them, so the drawn parameters are not used."""
        self._check_bound("migrations", "AdminRebalance")
        started = system_rebalance(self.admin, LAYOUT, self.kept(), 1)
        if not started:
            raise GuardFailed("AdminRebalance", "balanced")
        self.counts["migrations"] += len(started)
        return str(started)

    def _DropReplica(self, r):
        """SYSTEM DROP REPLICA of a replica that is down (protocol/repair.py drop_replica): its
        Keeper subtree goes, it leaves every assignment, and its disk goes with it."""
        if r in self.reps or r in self.gone:
            raise GuardFailed("DropReplica", f"{r} is up or already dropped")
        self._bounded("replica_drops")
        try:
            left = drop_replica(self.admin, LAYOUT, r)
        except GuardFailed:
            self.counts["replica_drops"] -= 1   # refused: nothing changed, the bound not spent
            raise
        self.gone.add(r)
        for n in list(self.stores[r].names()):
            self.stores[r].remove(n)
        self.peers.pop(r, None)
        return f"dropped from {left}"

    def _RepairStart(self, p, c, dst):
        repair_start(self.admin, LAYOUT, PIDS[p], c, dst, self.max_concurrent)
        return f"repair {c}: ->{dst}"

    def _CleanupClearOldLogs(self):
        self.log()   # history first: the entries are about to leave Keeper
        return f"{cleanup_clear_old_logs(self.admin, LAYOUT, CLEANUP)} entries removed"

    def _CleanupClearOldBlocks(self, i=None):
        """ClickHouse removes the oldest ids beyond the window; the drawn insert is not used."""
        return f"{cleanup_clear_old_blocks(self.admin, LAYOUT, CLEANUP)} ids removed"


def enabled(s: ProtocolSystem, action: str) -> list[tuple]:
    """The instances of an action whose spec guard holds on the reference's state (the guards of
    spec/rfc/SelectiveReplication.tla, read through the reference; bounds as in s.bounds)."""
    from protocol.migration import caught_up, leaver_unique_parts
    from protocol.rebalance import plan_rebalance
    from protocol.replica import caught_up_to
    up = sorted(s.reps)
    P = s.DOMAINS["Partitions"]
    out: list[tuple] = []
    if action == "ReplicaPullLog":
        n = len(s.admin.get_children(LAYOUT.log))
        out = [(r,) for r in up if s.ptr(r) < n]
    elif action == "ReplicaExecuteEntry":
        out = [(r, k) for r in up for k in range(len(s.admin.get_children(LAYOUT.queue(r))))]
    elif action == "ReplicaCrash":
        out = [(r,) for r in up] if s.counts["crashes"] < s.bounds["crashes"] else []
    elif action == "ReplicaRestart":
        out = [(r,) for r in s.kept() if r not in s.reps]
    elif action == "DropReplica":
        # The machine's bound, not the spec's guard: a replica is dropped only when every row on
        # its disk is on another replica too. Dropping the only copy of an INSERT acknowledged or
        # on its way loses it by the base protocol's bound (MCRepairUnreplicatedInsert breaks
        # NoAckedBlockLostInv in the spec too), which is the operator's loss, not a repair's; the
        # repair models start from replicated blocks (MCRepair's InitBlocks) for the same reason.
        if s.counts["replica_drops"] < s.bounds["replica_drops"]:
            out = [(r,) for r in s.kept() if r not in s.reps and s.copy_elsewhere(r)]
    elif action == "RepairStart":
        if len(migrations_in_flight(s.admin, LAYOUT)) < s.max_concurrent:
            active = s.active()
            for p in P:
                a = read_assignment(s.admin, LAYOUT, PIDS[p])
                mig = read_migration(s.admin, LAYOUT, PIDS[p])[0] or {}
                if a is None or len(a.owners) >= s.rf or mig.get("state") not in (None, "done", "cancelled"):
                    continue
                out += [(p, c, d) for c in a.owners if c in active for d in sorted(active) if d not in a.keepers()]
    elif action == "ReplicaRefreshCache":
        # Always enabled in the spec; the refreshes that change a map are offered first, so that
        # runs do not spend their steps on refreshes that change nothing.
        for r in up:
            for p in P:
                a, c = read_assignment(s.admin, LAYOUT, PIDS[p]), s.reps[r].cache.get(PIDS[p])
                if (a is None) != (c is None) or (a and c and a.version != c.version):
                    out.append((r, p))
        out = out or [(r, p) for r in up for p in P]
    elif action == "ReplicaSelectMerge":
        if s.counts["merges"] < s.bounds["merges"]:
            for r in up:
                for p in P:
                    a = s.reps[r].cache.get(PIDS[p])
                    names = s.stores[r].names(PIDS[p])
                    if a and r in a.owners and any(y.min_block == x.max_block + 1 and x.mutation == y.mutation
                                                   for x, y in zip(names, names[1:])) \
                            and caught_up(s.admin, LAYOUT, r, PIDS[p]):
                        out.append((r, p))
    elif action == "ReplicaSelectMutation":
        for r in up:
            for p in P:
                a = s.reps[r].cache.get(PIDS[p])
                muts = s.reps[r].mutations()
                blocked = s.block_during_clone and (read_migration(s.admin, LAYOUT, PIDS[p])[0] or {}).get("state") == "clone"
                if a and r in a.owners and not blocked and any(owed(n, muts) for n in s.stores[r].names(PIDS[p])) \
                        and caught_up(s.admin, LAYOUT, r, PIDS[p]):
                    out.append((r, p))
    elif action == "ClientSendInsert":
        out = [(i, r) for i, x in s.ins.items() if x["st"] in ("idle", "unknown", "failed")
               and x["tries"] < s.bounds["tries"] for r in up]
    elif action in ("ReplicaAllocate", "ReplicaForwardInsert", "ReplicaWriteInsert"):
        for i, x in s.ins.items():
            r = x["at"]
            if x["st"] != "sent" or r not in s.reps:
                continue
            a = s.reps[r].cache.get(PIDS[INSERT_PARTITION[i]])
            if (action == "ReplicaAllocate" and a is None
                    or action == "ReplicaForwardInsert" and a is not None and r not in a.owners
                    and any(o in s.reps for o in a.owners)
                    or action == "ReplicaWriteInsert" and a is not None and r in a.owners):
                out.append((r, i))
    elif action == "ClientReceiveAck":
        out = [(i,) for i, x in s.ins.items() if x["st"] == "written"]
    elif action == "ClientTimeout":
        out = [(i,) for i, x in s.ins.items() if x["st"] in ("sent", "written") and x["tries"] < s.bounds["tries"]]
    elif action == "ClientStartQuery":
        out = [(q, r) for q, x in s.qry.items() if x["st"] == "idle" for r in up]
    elif action == "ReplicaReadPartition":
        out = [(q, p) for q, x in s.qry.items() if x["st"] == "running" for p in P
               if PIDS[p] in x["query"].pending and x["query"].routes[PIDS[p]] in s.reps]
    elif action == "ClientQueryFails":
        out = [(q,) for q, x in s.qry.items() if x["st"] == "running"
               and any(x["query"].routes[p] not in s.reps for p in x["query"].pending)]
    elif action == "ClientAlterMetadata":
        out = [()] if s.counts["alters"] < s.bounds["alters"] else []
    elif action == "CleanupClearOldLogs":
        try:
            old_logs(s.admin, LAYOUT, CLEANUP)
            out = [()]
        except GuardFailed:
            out = []
    elif action == "CleanupClearOldBlocks":
        out = [("i1",)] if len(s.admin.get_children(LAYOUT.blocks)) > CLEANUP.dedup_window else []
    elif action == "ClientMutate":
        out = [()] if s.counts["mutations"] < s.bounds["mutations"] else []
    elif action == "ClientDropPartition":
        if s.counts["drops"] < s.bounds["drops"]:
            for p in P:
                mig = read_migration(s.admin, LAYOUT, PIDS[p])[0] or {}
                if read_assignment(s.admin, LAYOUT, PIDS[p]) and not (s.block_during_clone and mig.get("state") == "clone") \
                        and s.admin.exists(LAYOUT.block_numbers(PIDS[p])) is not None:
                    out.append((p,))
    elif action in ("AdminReassign", "AdminRebalance"):
        in_flight = migrations_in_flight(s.admin, LAYOUT)
        if s.counts["migrations"] < s.bounds["migrations"] and len(in_flight) < s.max_concurrent:
            active = s.active()
            if action == "AdminReassign":
                for p in P:
                    a = read_assignment(s.admin, LAYOUT, PIDS[p])
                    if a is None or PIDS[p] in in_flight:
                        continue
                    out += [(p, src, dst) for src in a.owners for dst in sorted(active) if dst not in a.owners]
            else:
                owners = {pid: read_assignment(s.admin, LAYOUT, pid).owners for pid in PIDS.values()
                          if read_assignment(s.admin, LAYOUT, pid)}
                try:
                    plan = plan_rebalance(owners, s.kept(), set(in_flight))
                except RebalanceError:
                    plan = []
                out = [("p1", "r1", "r1")] if any(dst in active for _, _, dst in plan) else []
    else:  # migration steps of partition p
        for p in P:
            mig = read_migration(s.admin, LAYOUT, PIDS[p])[0]
            if not mig:
                continue
            st, coord_up = mig["state"], mig["coord"] in s.reps
            if action == "ReplicaCloneFetch" and st == "clone" and not mig["fetched"] and mig["dst"] in s.reps:
                out.append((p,))
            elif action == "CoordinatorSwitch" and st == "clone" and mig["fetched"] and coord_up \
                    and ("switch_without_catchup" in s.bugs
                         or caught_up_to(s.admin, LAYOUT, mig["dst"], PIDS[p], mig["catchup_to"])):
                out.append((p,))
            elif action == "CoordinatorCancel" and st == "clone" and coord_up:
                out.append((p,))
            elif action == "ReplicaTakeOverMigration" and st == "clone" and not coord_up:
                out += [(p, r) for r in up]
            elif action == "ReplicaCleanupForDownLeaver" and st in ("switched", "cancelling"):
                leaver = mig["src"] if st == "switched" else mig["dst"]
                a = read_assignment(s.admin, LAYOUT, PIDS[p])
                seen = all(s.reps[r].cache.get(PIDS[p]) is not None and s.reps[r].cache[PIDS[p]].version >= a.version
                           for r in s.active() if r in s.reps)
                routed = s.routed(PIDS[p], leaver)
                held = [PartName.parse(n) for n in s.admin.get_children(LAYOUT.parts(leaver))]
                redundant = not leaver_unique_parts(s.admin, LAYOUT, PIDS[p], mig,
                                                    active_set(n for n in held if n.partition == PIDS[p]), s.bugs)
                if leaver not in s.reps and (seen or "down_leaver_cleanup_ignores_maps" in s.bugs) and not routed \
                        and redundant:
                    out += [(p, r) for r in up]
            elif action == "ReplicaCleanup" and st in ("switched", "cancelling"):
                leaver = mig["src"] if st == "switched" else mig["dst"]
                if leaver not in s.reps or leaver_unique_parts(s.admin, LAYOUT, PIDS[p], mig,
                                                               s.reps[leaver].store.names(PIDS[p]), s.bugs):
                    continue
                if "cleanup_no_delay" in s.bugs:
                    out.append((p,))
                    continue
                a = read_assignment(s.admin, LAYOUT, PIDS[p])
                seen = all(s.reps[r].cache.get(PIDS[p]) is not None and s.reps[r].cache[PIDS[p]].version >= a.version
                           for r in s.active() if r in s.reps)
                if seen and not s.reps[leaver].pins.get(PIDS[p]):
                    out.append((p,))
    return out
