"""The reference under the constants of one model of spec/rfc/SelectiveReplication.tla, for the
state-graph replay (conformance/explore.py).

- `instances()` lists every step the harness may try now: each action of the spec with each
  parameter from the model's constants, and each choice the spec leaves open (the owners an
  allocation picks, the owner a forward goes to, the replica each partition of a query is read
  from, the peer a fetch copies from). The reference refuses those whose guard is false.
- `step(action, args)` runs one; one of REFUSED means the reference refused it (nothing changed).
- `abstract()` reads the reference's state as the spec's variables, valued as TLC prints them.
- `snapshot()` / `restore()` take the whole system back to a state, so that every step from a
  state can be tried.

The spec's client-side variables (ins, qry, inv_acked, inv_read_cleaned, aux_counts) are what
the client saw and what the harness bounds; they are kept here, by the spec's rules. Everything
else is read from Keeper and from the replicas' parts.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections import Counter

# MemoryPartStore, Pick, Attempts and REFUSED live in conformance/bridge.py; imported from here too.
from conformance.bridge import REFUSED, Attempts, MemoryPartStore, Pick, RFCBridge  # noqa: F401
from conformance.spec_model import ABSENT, NONE, Model, View, at, ids, seq_or_fn
from harness.tlc.values import Fn
from protocol.assignment import GuardFailed, NotEnoughActiveReplicas, read_assignment, replica_allocate
from protocol.cleanup_thread import cleanup_clear_old_blocks, cleanup_clear_old_logs
from protocol.insert import replica_forward_insert, sub_block_hash
from protocol.keeper import MemoryEnsemble
from protocol.layout import Layout
from protocol.log_entry import ALTER_METADATA, DROP_RANGE, GET_PART, MERGE_PARTS, MUTATE_PART, LogEntry
from protocol.migration import migrations_in_flight, read_migration
from protocol.mutations import owed
from protocol.parts import PartName, PartStore
from protocol.query import client_start_query, replica_read_partition
from protocol.rebalance import system_rebalance
from protocol.registration import create_table_znodes, declare_replicas, register_replica
from protocol.repair import drop_replica, repair_start
from protocol.replica import InsertRejected, Replica, client_alter_metadata, client_drop_partition, client_mutate
from protocol.restart import replica_restart

LAYOUT = Layout("/clickhouse/tables/replay/events")
NO_ASG = Fn({"owners": frozenset(), "target": NONE, "leaving": NONE, "version": ABSENT})
NO_PART = Fn({"p": NONE, "b": frozenset(), "mv": 0})
SPEC_TYPE = {GET_PART: "GET", MERGE_PARTS: "MERGE", MUTATE_PART: "MUTATE", DROP_RANGE: "DROP", ALTER_METADATA: "ALTER"}
# The client's counts (aux_counts, and an insert's tries) and the spec's constant bounding each.
BOUND = {"tries": "MaxTries", "merges": "MaxMerges", "alters": "MaxAlters", "mutations": "MaxMutations",
         "drops": "MaxDrops", "migrations": "MaxMigrations", "crashes": "MaxCrashes"}


class SpecSystem(RFCBridge, Attempts):
    layout = LAYOUT
    def __init__(self, model: Model, bugs: frozenset[str] | None = None):
        self.m = model
        self.bugs = model.bugs if bugs is None else frozenset(bugs)
        self.names = tuple(r.name for r in model.replicas)
        self.mv = {r.name: r for r in model.replicas} | {p.name: p for p in model.partitions}
        self.pid = {p: f"202401-{n}" for n, p in enumerate(model.partitions)}   # model value -> partition id
        self.part_of = {v: k for k, v in self.pid.items()}
        self.ensemble = MemoryEnsemble()
        self.admin = self.ensemble.connect()
        create_table_znodes(self.admin, LAYOUT, model.rf)
        for p, owners in model.init_owners.items():
            if owners:
                self.admin.create(LAYOUT.assignment(self.pid[p]),
                                  json.dumps({"owners": sorted(o.name for o in owners), "target": None,
                                              "leaving": None}, separators=(",", ":")).encode(), makepath=True)
        self.stores = {r: MemoryPartStore(r) for r in self.names}
        self.peers: dict[str, PartStore] = {}
        self.reps: dict[str, Replica] = {}
        self.cleanup = model.cleanup_settings()
        self.log_seen: dict[int, bytes] = {}   # every log entry ever read, by number: the spec's log is history
        declare_replicas(self.admin, LAYOUT, self.names)   # created with the table: the spec's lost = {}
        for r in self.names:
            self._start(r, init=True)
        # The client's side, as the spec's variables.
        self.ins = {i: {"st": "idle", "at": NONE, "tries": 0} for i in model.inserts}
        self.qry = {q: self._idle_query() for q in model.queries}
        self.acked: set = set()
        self.read_cleaned = False
        self.counts = {"merges": 0, "alters": 0, "mutations": 0, "drops": 0, "migrations": 0, "crashes": 0}
        self.writer = {}        # (partition id, block number) -> insert id whose GET_PART wrote it
        self.hashes = {}        # blocks/ node name -> insert id
        # (partition id, block number a mutation took there) -> the spec's number of that mutation
        # (the log index the next INSERT would take when it was issued)
        self.mutation_k: dict = {}
        self.muts_k: list[int] = []   # the spec's muts: each mutation's number, in creation order
        # Replicas SYSTEM DROP REPLICA removed: what the spec keeps of them (DropReplica leaves ptr,
        # meta and lost as they were; their Keeper subtree and disk are gone here).
        self.gone: dict[str, dict] = {}
        self._init_blocks()

    @staticmethod
    def _idle_query() -> dict:
        return {"st": "idle", "at": NONE, "routes": (), "pending": frozenset(), "expected": frozenset(),
                "seen": frozenset(), "dup": False, "lost": frozenset(), "query": None}

    def _init_blocks(self) -> None:
        """InitBlocks: written by an initial owner and replicated to the others before the start."""
        for i in sorted(self.m.init_blocks):
            p = self.m.insert_partition[i]
            writer = min(o.name for o in self.m.init_owners[p])
            self._write(self.reps[writer], i)
            self.ins[i] = {"st": "acked", "at": NONE, "tries": 0}
            self.acked.add(i)
        for rep in self.reps.values():
            rep.pull_whole_log()
            for node, _ in rep.queue():
                rep.replica_execute_entry(node)

    def _start(self, r: str, sources=None, init: bool = False) -> None:
        """The process up, registered, then ReplicaRestart: it drops what a CLEANUP done on its
        behalf left (no query waits for it any more: _ReplicaRestart failed the ones routed to it).
        At Init every replica starts with the map (the spec's cache = asg), whatever the switches."""
        k = self.ensemble.connect()
        register_replica(k, LAYOUT, r)
        self.peers[r] = self.stores[r]
        rep = Replica(r, k, LAYOUT, self.stores[r], self.peers, self.bugs)
        if init:
            rep.load_map()
        replica_restart(rep, sources)
        self.reps[r] = rep

    def close(self) -> None:
        pass  # nothing outside this process: the ensemble and the stores are in memory

    # --- snapshot / restore -----------------------------------------------------------------
    def snapshot(self):
        reps = {r: (rep, dict(rep.cache), rep.metadata_version, dict(rep.dropped), dict(rep.pins),
                    dict(rep.outdated), rep.keeper_reads())
                for r, rep in self.reps.items()}
        return (self.ensemble.snapshot(), {r: s.snapshot() for r, s in self.stores.items()}, reps,
                {i: dict(x) for i, x in self.ins.items()},
                {q: {**x, "query": copy.deepcopy(x["query"])} for q, x in self.qry.items()},
                set(self.acked), self.read_cleaned, dict(self.counts), dict(self.writer), dict(self.hashes),
                dict(self.mutation_k), list(self.muts_k), dict(self.log_seen), dict(self.gone))

    def restore(self, snap) -> None:
        ens, stores, reps, ins, qry, acked, cleaned, counts, writer, hashes, mutation_k, muts_k, log_seen, gone = snap
        self.gone = dict(gone)
        self.ensemble.restore(ens)
        for r, s in stores.items():
            self.stores[r].restore(s)
        self.reps, self.peers = {}, {}
        for r, (rep, cache, mv, dropped, pins, outdated, reads) in reps.items():
            rep.cache, rep.metadata_version, rep.dropped, rep.pins = dict(cache), mv, dict(dropped), dict(pins)
            rep.outdated, rep.peers = dict(outdated), self.peers
            rep.restore_keeper_reads(reads)
            self.reps[r] = rep
            self.peers[r] = self.stores[r]
        self.ins = {i: dict(x) for i, x in ins.items()}
        self.qry = {q: {**x, "query": copy.deepcopy(x["query"])} for q, x in qry.items()}
        self.acked, self.read_cleaned, self.counts = set(acked), cleaned, dict(counts)
        self.writer, self.hashes, self.mutation_k, self.muts_k = dict(writer), dict(hashes), dict(mutation_k), list(muts_k)
        self.log_seen = dict(log_seen)

    # --- the abstraction: reference state -> the spec's variables ---------------------------
    def _assignment(self, a) -> Fn:
        if a is None:
            return NO_ASG
        return Fn({"owners": frozenset(self.mv[o] for o in a.owners),
                   "target": self.mv[a.target] if a.target else NONE,
                   "leaving": self.mv[a.leaving] if a.leaving else NONE, "version": a.version})

    def _blocks(self, name: PartName, get_idx: dict) -> frozenset:
        """The spec's blocks <<insert id, log index of its GET_PART>> in a part's block range."""
        return frozenset((self.writer[(name.partition, n)], get_idx[(name.partition, n)])
                         for n in range(name.min_block, name.max_block + 1) if (name.partition, n) in get_idx)

    def _part(self, name: PartName, get_idx: dict, rows: list | None = None) -> Fn:
        blocks = self._blocks(name, get_idx)
        if rows is not None:
            # The part's name says which blocks it holds; its rows must say the same. Rows the
            # name does not explain show as blocks of log index -1, so the states differ.
            want = Counter(i for i, _ in blocks)
            got = Counter(r["row_id"] for r in rows)
            if want != got:
                blocks = frozenset(b for b in blocks if got[b[0]]) | frozenset(
                    (i, -1) for i in (got - want))
        mv = self.mutation_k[(name.partition, name.mutation)] if name.mutation else 0
        return Fn({"p": self.part_of[name.partition], "b": blocks, "mv": mv})

    def _entry(self, e: LogEntry, k: int, get_idx: dict) -> Fn:
        kind = SPEC_TYPE[e.type]
        if kind == "ALTER":
            return Fn({"type": kind, "p": NONE, "part": NO_PART, "k": k})
        p = self.part_of[e.partition]
        if kind in ("GET", "MERGE", "MUTATE"):
            part = self._part(e.part, get_idx)
        else:
            part = Fn({"p": p, "b": frozenset(), "mv": 0})
        return Fn({"type": kind, "p": p, "part": part, "k": k})

    def _children(self, path: str) -> list[str]:
        node = self.ensemble.nodes.get(path)
        return sorted(node.children) if node else []

    def _text(self, path: str) -> bytes:
        return self.ensemble.nodes[path].value

    def abstract(self) -> dict:
        nodes = self.ensemble.nodes
        present = self._children(LAYOUT.log)
        for n in present:
            self.log_seen.setdefault(int(n.rsplit("-", 1)[1]), self._text(f"{LAYOUT.log}/{n}"))
        # The spec's log keeps what the cleanup thread removed; trimmed counts the entries removed.
        texts = [self.log_seen[k] for k in range(len(self.log_seen))]
        trimmed = int(present[0].rsplit("-", 1)[1]) if present else len(texts)
        log_raw = [LogEntry.parse(t) for t in texts]
        get_idx = {}
        for k, e in enumerate(log_raw, 1):
            if e.type == GET_PART:
                get_idx.setdefault((e.part.partition, e.part.min_block), k)
        log = tuple(self._entry(e, k, get_idx) for k, e in enumerate(log_raw, 1))
        # A queue entry is its log entry's text (pullLogsToQueue copies it; so does a CLONE that
        # re-queues a skipped one); an entry a CLONE queues itself has no log entry: index 0.
        index_of = {t: k for k, t in enumerate(texts, 1)}
        active = frozenset(self.mv[r] for r in self.names if LAYOUT.is_active(r) in nodes)
        asg = {p: self._assignment(read_assignment(self.admin, LAYOUT, pid)) for p, pid in self.pid.items()}
        ptr, queue, parts, meta = {}, {}, {}, {}
        for r in self.names:
            mr = self.mv[r]
            if r in self.gone:
                ptr[mr], queue[mr], parts[mr], meta[mr] = self.gone[r]["ptr"], frozenset(), frozenset(), self.gone[r]["meta"]
                continue
            ptr[mr] = int(nodes[LAYOUT.log_pointer(r)].value)
            q = set()
            for n in self._children(LAYOUT.queue(r)):
                text = self._text(f"{LAYOUT.queue(r)}/{n}")
                q.add(self._entry(LogEntry.parse(text), index_of.get(text, 0), get_idx))
            queue[mr] = frozenset(q)
            store = self.stores[r]
            parts[mr] = frozenset(self._part(n, get_idx, store.read(n)) for n in store.names())
            state = store.load_state()
            drop_k = {}
            for pid, upto in state.get("dropped", {}).items():
                drop_k[pid] = next((k for k, e in enumerate(log_raw, 1) if e.type == DROP_RANGE
                                    and e.partition == pid and e.part.max_block == upto), -1)
            meta[mr] = Fn({"alters": state.get("metadata_version", 0),
                           "dropped": Fn({p: drop_k.get(pid, 0) for p, pid in self.pid.items()})})
        cache = {self.mv[r]: Fn({p: self._assignment(rep.cache.get(pid)) for p, pid in self.pid.items()})
                 for r, rep in self.reps.items()}
        dedup = frozenset(self.hashes[n] for n in self._children(LAYOUT.blocks) if n in self.hashes)
        mig = {}
        for p, pid in self.pid.items():
            x = read_migration(self.admin, LAYOUT, pid)[0]
            mig[p] = Fn({"st": x["state"], "src": self.mv.get(x["src"], NONE), "dst": self.mv[x["dst"]],
                         "coord": self.mv[x["coord"]], "fetched": x["fetched"], "pos": x.get("catchup_to", 0)} if x else
                        {"st": "none", "src": NONE, "dst": NONE, "coord": NONE, "fetched": False, "pos": 0})
        return {
            "active": active, "asg": seq_or_fn(asg), "cache": seq_or_fn(cache), "log": log,
            "ptr": seq_or_fn(ptr), "queue": seq_or_fn(queue), "parts": seq_or_fn(parts), "meta": seq_or_fn(meta),
            "dedup": dedup, "muts": self._muts(), "trimmed": trimmed,
            "lost": frozenset(self.mv[r] for r in self.names
                              if (self.gone[r]["lost"] if r in self.gone else nodes[LAYOUT.is_lost(r)].value == b"1")),
            "mig": seq_or_fn(mig),
            "ins": seq_or_fn({i: Fn({"st": x["st"], "at": self.mv.get(x["at"], NONE), "tries": x["tries"]})
                              for i, x in self.ins.items()}),
            "qry": seq_or_fn({q: Fn({k: v for k, v in x.items() if k != "query"}) for q, x in self.qry.items()}),
            "inv_acked": frozenset(self.acked), "inv_read_cleaned": self.read_cleaned,
            "aux_counts": Fn(self.counts),
            "gone": frozenset(self.mv[r] for r in self.gone),
        }

    def _muts(self) -> tuple:
        """mutations/ as the spec's muts: the number recorded when each was issued (a znode the
        harness did not see issued shows as -1, so the states differ)."""
        n = len(self._children(LAYOUT.mutations))
        return tuple(self.muts_k[:n]) + (-1,) * (n - len(self.muts_k))

    # --- the steps ------------------------------------------------------------------------
    def instances(self) -> list[tuple[str, tuple]]:
        """Every step worth trying now. Only what the harness itself owns is filtered here (a
        replica that is down has no process to run a step; a client's state); the reference
        refuses the rest."""
        m, up, R = self.m, sorted(self.reps), self.names
        P = [p.name for p in m.partitions]
        out = [("ClientAlterMetadata", ())]
        for r in up:
            out += [("ReplicaPullLog", (r,)), ("ReplicaCrash", (r,))]
            for node, e in self.reps[r].queue():
                if e.type in (GET_PART, MERGE_PARTS, MUTATE_PART):   # these may fetch: which peer is a choice
                    out += [("ReplicaExecuteEntry", (r, node, s)) for s in up if s != r] or [
                        ("ReplicaExecuteEntry", (r, node, None))]
                else:
                    out.append(("ReplicaExecuteEntry", (r, node, None)))
            for p in P:
                out += [("ReplicaRefreshCache", (r, p)), ("ReplicaSelectMerge", (r, p))]
                rep, pid = self.reps[r], self.pid_of(p)
                muts = rep.mutations()
                out += [("ReplicaSelectMutation", (r, p, str(n))) for n in rep.store.names(pid) if owed(n, muts)]
        out += [("ReplicaRestart", (r, choice)) for r in R if r not in self.reps and r not in self.gone
                for choice in self._clone_choices(r)]
        out += [("DropReplica", (r,)) for r in R if r not in self.reps and r not in self.gone]
        out.append(("CleanupClearOldLogs", ()))
        out += [("CleanupClearOldBlocks", (i,)) for i in m.inserts]
        for i, x in self.ins.items():
            out += [("ClientSendInsert", (i, r)) for r in up]
            out += [("ClientReceiveAck", (i,)), ("ClientTimeout", (i,))]
            if x["st"] == "sent" and x["at"] in self.reps:
                r = x["at"]
                out += [("ReplicaAllocate", (r, i, tuple(S))) for S in itertools.combinations(R, m.rf)]
                out += [("ReplicaForwardInsert", (r, i, o)) for o in R]
                out.append(("ReplicaWriteInsert", (r, i)))
        for q, x in self.qry.items():
            for r in up:
                known = sorted(self.reps[r].cache)
                out += [("ClientStartQuery", (q, r, routes)) for routes in itertools.product(R, repeat=len(known))]
            out.append(("ClientQueryFails", (q,)))
            out += [("ReplicaReadPartition", (q, p)) for p in P]
        out.append(("ClientMutate", ()))
        for p in P:
            out += [(a, (p,)) for a in ("ClientDropPartition", "ReplicaCloneFetch",
                                        "CoordinatorSwitch", "ReplicaCleanup", "CoordinatorCancel")]
            out += [("ReplicaTakeOverMigration", (p, r)) for r in R]
            out += [("ReplicaCleanupForDownLeaver", (p, r)) for r in up]
            out += [("AdminReassign", (p, s, d)) for s in R for d in R]
            out += [("RepairStart", (p, c, d)) for c in up for d in up]
        out.append(("AdminRebalance", ()))
        return out

    # --- the bridge's hooks (conformance/bridge.py) ------------------------------------------
    def pid_of(self, p: str) -> str:
        return self.pid[self.mv[p]]

    def _insert_pid(self, i) -> str:
        return self.pid[self.m.insert_partition[i]]

    def _bound(self, kind: str) -> int:
        return self.m.bounds[BOUND[kind]]

    def _check_bound(self, kind: str, action: str) -> None:
        if self.counts[kind] >= self.m.bounds.get(BOUND[kind], 0):
            raise GuardFailed(BOUND[kind], f"{kind} bound reached")

    def _pending_pids(self, x: dict) -> set[str]:
        return {self.pid[p] for p in x["pending"]}

    def _mark_acked(self, i) -> None:
        self.acked.add(i)

    @property
    def block_during_clone(self) -> bool:
        return self.m.block_during_clone

    @property
    def max_concurrent(self) -> int:
        return self.m.bounds["MaxConcurrentMigrations"]

    # --- its own steps: those that take the spec's choices, or count in their own order ------
    def _blocked(self, p: str) -> bool:
        mig = read_migration(self.admin, LAYOUT, self.pid_of(p))[0] or {}
        return self.block_during_clone and mig.get("state") == "clone"

    def _ReplicaExecuteEntry(self, r, node, source):
        return self._rep(r).replica_execute_entry(node, source)

    def _clone_choices(self, r: str) -> list:
        """The spec's choices for a lost replica's clone (CloneLostReplica): a source per partition it
        keeps, and the log_pointer source among them; [None] when it is not lost."""
        if self.ensemble.nodes[LAYOUT.is_lost(r)].value != b"1":
            return [None]
        lost = {x for x in self.names if self.ensemble.nodes[LAYOUT.is_lost(x)].value == b"1"}
        others = [x for x in self.names if x not in lost and x != r]
        ptr = {x: int(self.ensemble.nodes[LAYOUT.log_pointer(x)].value) for x in self.names}
        if "clone_lost_replica_from_one_peer" in self.bugs:
            return [({}, g) for g in others]
        kept = [pid for pid in self.pid.values()
                if (a := read_assignment(self.admin, LAYOUT, pid)) is not None and r in a.keepers()]
        per = [[x for x in others if x in read_assignment(self.admin, LAYOUT, pid).keepers()] for pid in kept]
        out = []
        for combo in itertools.product(*per):
            src = dict(zip(kept, combo))
            pool = sorted(set(combo)) or others
            low = min((ptr[x] for x in pool), default=0)
            out += [(src, g) for g in pool if ptr[g] == low]
        return out or [None]   # no source: the restart is refused (ReplicaRestart raises)

    def _ReplicaRestart(self, r, choice=None):
        if r in self.reps:
            raise GuardFailed("ReplicaRestart", f"{r} is up")
        self._fail_served(r)   # a query that waited for r failed: its subquery was refused
        self._start(r, sources=choice)
        return "restarted"

    def _CleanupClearOldLogs(self):
        return f"{cleanup_clear_old_logs(self.admin, LAYOUT, self.cleanup)} entries removed"

    def _CleanupClearOldBlocks(self, i):
        """The spec lets any hash beyond the window go; ClickHouse removes the oldest: the step is
        taken only where that is insert i's."""
        ids = {n for n, x in self.hashes.items() if x == i}
        if not ids & set(self._children(LAYOUT.blocks)):
            raise GuardFailed("CleanupClearOldBlocks", f"no hash of insert {i} in blocks/")
        cleanup_clear_old_blocks(self.admin, LAYOUT, self.cleanup)
        return "cleared"

    def _ReplicaSelectMutation(self, r, p, part):
        return self._rep(r).replica_select_mutation(self.pid_of(p), part, self.block_during_clone).new_part_name

    def _ReplicaAllocate(self, r, i, owners):
        rep, pid = self._sent_at("ReplicaAllocate", r, i)
        if pid in rep.cache:
            raise GuardFailed("ReplicaAllocate", f"{r} knows {pid}")
        try:
            a = replica_allocate(rep.keeper, LAYOUT, r, pid, self.m.rf, self.bugs, owners=owners)
        except NotEnoughActiveReplicas:
            self.ins[i]["st"] = "failed"   # the INSERT fails (spec F1)
            return "failed"
        rep.learn(pid, a)
        return "allocated"

    def _ReplicaForwardInsert(self, r, i, o):
        rep, pid = self._sent_at("ReplicaForwardInsert", r, i)
        owner = replica_forward_insert(rep, pid, self.reps, Pick(o))
        self.ins[i]["at"] = owner.name
        return owner.name

    def _write(self, rep: Replica, i) -> str:
        pid = self.pid[self.m.insert_partition[i]]
        rows = [{"date": "2024-01-15", "user_id": 0, "row_id": i, "event": "e"}]
        h = sub_block_hash(pid, rows)
        self.hashes[f"{pid}_{h}"] = i
        got = rep.replica_write_insert(pid, rows, h)
        if got != "deduplicated":
            self.writer[(pid, PartName.parse(got).min_block)] = i
        return got

    def _ReplicaWriteInsert(self, r, i):
        rep, _ = self._sent_at("ReplicaWriteInsert", r, i)
        try:
            got = self._write(rep, i)
        except InsertRejected:
            self.ins[i]["st"] = "failed"
            return "rejected"
        self.ins[i]["st"] = "written"
        return got

    def _ClientStartQuery(self, q, r, routes):
        if self.qry[q]["st"] != "idle":
            raise GuardFailed("ClientStartQuery", f"{q} is {self.qry[q]['st']}")
        rep = self._rep(r)
        forced = iter(routes)

        def choose(_, candidates):
            want = next(forced)
            if want not in candidates:
                raise GuardFailed("ClientStartQuery", f"{want} may not be read from ({sorted(candidates)})")
            return want
        view = View(self.abstract(), self.m)
        query = client_start_query(rep, choose=choose, replicas=self.reps)
        known = {self.part_of[pid] for pid in query.routes}
        acked = view.live_acked()
        self.qry[q] = {
            "st": "running" if known else "done", "at": self.mv[r],
            "routes": seq_or_fn({self.part_of[pid]: self.mv[o] for pid, o in query.routes.items()}),
            "pending": frozenset(known), "expected": frozenset(acked), "seen": frozenset(), "dup": False,
            "lost": frozenset(i for i in acked if self.m.insert_partition[i] not in known
                              and not at(view.s["ptr"], self.mv[r]) < view.first_idx.get(i, 0)),
            "query": query}
        return "started"

    def _ReplicaReadPartition(self, q, p):
        x, part = self.qry[q], self.mv[p]
        if x["st"] != "running" or part not in x["pending"]:
            raise GuardFailed("ReplicaReadPartition", f"{q} does not wait for {p}")
        o = x["query"].routes[self.pid[part]]
        self._rep(o)
        view = View(self.abstract(), self.m)
        got = frozenset().union(*[y["b"] for y in at(view.s["parts"], self.mv[o]) if y["p"] == part])
        rows = replica_read_partition(x["query"], self.pid[part], self.reps)
        if Counter(r["row_id"] for r in rows) != Counter(i for i, _ in got):
            got = got | {(r["row_id"], -1) for r in rows}   # rows its parts do not explain: a difference
        seen = x["seen"]
        x.update(
            pending=x["pending"] - {part}, st="done" if x["pending"] == {part} else x["st"], seen=seen | got,
            dup=x["dup"] or len({i for i, _ in got | seen}) < len(got | seen) or bool(got & seen),
            lost=x["lost"] | {i for i in x["expected"] if self.m.insert_partition[i] == part
                              and i not in ids(got) and not view.in_flight_to(self.mv[o], i) and view.live(i)})
        return f"{len(rows)} rows"

    def _ClientAlterMetadata(self):
        self._check_bound("alters", "ClientAlterMetadata")
        client_alter_metadata(self.admin, LAYOUT, "ADD COLUMN x")
        self.counts["alters"] += 1
        return "alter"

    def _ClientMutate(self):
        self._check_bound("mutations", "ClientMutate")
        k = self.ensemble.nodes[LAYOUT.log].next_seq + 1   # the spec's number: the next INSERT's log index
        m = client_mutate(self.admin, LAYOUT, f"UPDATE event = 'm{self.counts['mutations'] + 1}' WHERE 1")
        for key in m.block_numbers:
            self.mutation_k[key] = k
        self.muts_k.append(k)
        self.counts["mutations"] += 1
        return "mutate"

    def _ClientDropPartition(self, p):
        self._check_bound("drops", "ClientDropPartition")
        if self._blocked(p):
            raise GuardFailed("ClientDropPartition", f"{p} is in CLONE and drops are blocked")
        client_drop_partition(self.admin, LAYOUT, self.pid_of(p))
        self.counts["drops"] += 1
        return "drop"

    def _DropReplica(self, r):
        """SYSTEM DROP REPLICA of a replica that is down: repair.drop_replica, and its disk goes."""
        if r in self.reps or r in self.gone:
            raise GuardFailed("DropReplica", f"{r} is up or already dropped")
        if len(self.gone) >= self.m.bounds.get("MaxReplicaDrops", 0):
            raise GuardFailed("MaxReplicaDrops", "drops bound reached")
        if self.m.drops_keep_a_copy and not self._copy_elsewhere(r):
            raise GuardFailed("DropKeepsACopy", f"{r} holds the only copy of a block (the model's NEXT rules it out)")
        before, mr = self.abstract(), self.mv[r]
        kept = {"ptr": at(before["ptr"], mr), "lost": mr in before["lost"], "meta": at(before["meta"], mr)}
        drop_replica(self.admin, LAYOUT, r)
        self.gone[r] = kept
        for n in list(self.stores[r].names()):
            self.stores[r].remove(n)
        return "dropped"

    def _copy_elsewhere(self, r: str) -> bool:
        """Every row on r's disk is on another replica that stays (MCSelectiveReplication's
        DropKeepsACopy)."""
        def rows(x):
            return {row["row_id"] for n in self.stores[x].names() for row in self.stores[x].read(n)}
        return rows(r) <= set().union(*(rows(o) for o in self.names if o != r and o not in self.gone))

    def _RepairStart(self, p, c, dst):
        repair_start(self.admin, LAYOUT, self.pid_of(p), c, dst, self.max_concurrent)
        return f"repair {c}: ->{dst}"

    def _AdminRebalance(self):
        """SYSTEM REBALANCE starting one move (the spec's AdminRebalance is one move)."""
        self._check_bound("migrations", "AdminRebalance")
        busy = len(migrations_in_flight(self.admin, LAYOUT))
        limit = min(busy + 1, self.max_concurrent)
        started = system_rebalance(self.admin, LAYOUT, list(self.names), limit)
        if not started:
            raise GuardFailed("AdminRebalance", "balanced, or no move may start")
        self.counts["migrations"] += len(started)
        return str(started)
