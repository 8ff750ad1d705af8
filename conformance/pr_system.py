"""The reference's PR #102244 design (reference/pr102244/) under the constants of one model of
spec/pr102244/, for the counterexample carry, the state-graph replay and the state machine of the
PR's models: the one bridge between the PR's spec family and its reference. PRSystem runs the
models of PR102244.tla; PRWholeSystem the first-INSERT models of PR102244Whole.tla (conformance/pr_designs.py names, per
wrapper module, the constants reader, the system, its actions and TLC's step labels).

PRSystem (PR102244.tla):
- `instances()` lists every step the harness may try now: each action of PR102244.tla's `Next`
  with each parameter from the model's constants; the reference refuses those whose guard is false.
- `step(action, args)` runs one on the reference's step function of the same name (snake case:
  StartClone -> start_clone, ...); one of REFUSED means the reference refused it.
- `abstract()` reads the reference's state as PR102244.tla's thirteen variables, valued as TLC
  prints them: `asg`/`aver` from the assignment node and its znode version, `counts` from
  `selective/counts/*`, `mig` from `/migrations/<id>` and its `clone_complete` child, `log` from
  `log/` (a GET_PART entry as the block its part holds), `ptr` from each log_pointer, `queue`
  from `replicas/{r}/queue`, `parts` from each replica's parts (a block is a row_id), `view` from
  each replica's cache. The client's side (`committed`, `aux`, `inv_missed`) and the terminal
  states of a migration (DONE and FAILED remove its node; the spec keeps the record with its
  state) are kept here by the spec's rules.
- `snapshot()` / `restore()` take the whole system back to a state.

Refinements (each an abstract stutter, so the reference takes them at once after every step):
a queue entry whose part is already on the replica's disk is executed ("covered": the spec's
Pull does not queue a block the replica has, and its queue is a set, so a Rescan's second entry
for a queued block is the same element).

Not implemented: CoordinatorCrash and TakeOver. The spec's coordinator crash kills the
coordinating process only; the reference's coordinator is a replica whose is_active node decides
takeover, so a crash of the coordinator alone has no reference step. Every model carried or
replayed here has MaxCrashes = 0.

PRWholeSystem: a one-partition model of PR102244Whole.tla whose partition has no assignment node
at the start (InitOwners `P1New`, no migration ids): the models of the first INSERT
(`MCPR102244Whole_FirstInsert*`), for the counterexample carry of PR-F5 and of O7's other
reading (conformance/counterexample.py `carry_pr`). What PR102244Whole.tla adds to PR102244.tla,
and how the harness reads it from the reference:
- `EnsurePartitionAssignment(r, p)`: `ensurePartitionAssignment` on r's session, its result in r's
  cache (the sink learns it). The spec's choice among tied counts is any RF of them; the
  reference's is by name (the carry needs only the trace's choice, which TLC's first is).
- `ForwardBlock(r, b, o)`: r's cache does not make it an owner, o is one (`replica_forward_insert`
  with the choice of o); the send in flight (`fwd`) is the harness's, as the client's `committed`
  is in PRSystem: a connection holds it, not Keeper.
- `CommitForwarded(f, replied)` / `RejectForwarded(f)`: o's `replica_write_insert` with the block
  id the sink's send carries (protocol/pr102244/insert.py `block_id_of_send`: the sub-block's
  hash; a new one for a retry under `retry_new_block_id`); "deduplicated" is the spec's dedup
  branch; a refused commit is the rejection. `unknown`, `inv_dup` and `aux.forwards` are the
  harness's, by the spec's rules. TLC names these two steps `Next` in a trace (they sit under
  `\\E f \\in fwd`), so the carry tries both for a step named `Next` (LABELS).
- `asg`/`aver`/`view` are functions of the partition; a partition with no node has no owners and
  version 0, and the znode's version is one behind the spec's (the spec counts the create).
  A cache with no assignment of the partition (none, or a "no assignment" entry) shows owners {}
  and ver 0, as the spec's Init.

Not implemented in PRWholeSystem (none of these models has them): migrations, the rebalancer,
coordinator crash and TakeOver, several partitions.
"""
from __future__ import annotations

import copy
import re

from checkers.pr102244_live import no_acked_block_lost, no_duplicate_rows, owners_complete, replication_factor
from conformance.spec_model import seq_or_fn
from conformance.spec_system import Attempts, MemoryPartStore, Pick
from conformance.stategraph import spec_file
from harness.tlc.values import Fn, ModelValue
from protocol.assignment import GuardFailed
from protocol.insert import replica_forward_insert, sub_block_hash
from protocol.keeper import MemoryEnsemble, SessionExpiredError
from protocol.layout import Layout
from protocol.log_entry import GET_PART, LogEntry
from protocol.parts import BadPart
from protocol.pr102244 import layout as pr_layout
from protocol.pr102244.assignment import ensure_partition_assignment, read_assignment, read_count, set_count
from protocol.pr102244.insert import block_id_of_send
from protocol.pr102244.migration import (
    done,
    fail,
    read_migration,
    rescan,
    signal_complete,
    start_clone,
    switch,
    write_clone_entries,
)
from protocol.pr102244.replica import PRReplica
from protocol.query import client_start_query, replica_read_partition
from protocol.registration import create_table_znodes, declare_replicas, register_replica
from protocol.replica import InsertRejected

LAYOUT = Layout("/clickhouse/tables/replay/pr102244")
P = "202401-5"            # the model's one partition (2024-01-15, user 5)
NONE = "none"
REFUSED = (GuardFailed, InsertRejected, BadPart, SessionExpiredError)
IDLE = {"st": "idle", "src": NONE, "tgt": NONE, "snap": frozenset(), "written": False, "rescanned": False,
        "complete": False, "aver0": 0, "logAtSwitch": 0}
ACTIONS = ("WriteInsert", "RefreshView", "Pull", "DropUnassigned", "TakeOver", "Fetch", "StartClone",
           "WriteCloneEntries", "Rescan", "SignalComplete", "Switch", "Done", "Fail", "CoordinatorCrash", "Query")
PARTITION = "p1"   # the partition id of PR102244Whole's one-partition models (a string there)
WHOLE_ACTIONS = ("WriteInsert", "EnsurePartitionAssignment", "ForwardBlock", "CommitForwarded", "RejectForwarded",
                 "RefreshView", "Pull", "Fetch", "DropUnassigned", "Query")
# TLC's label of a PR102244Whole step -> the harness's actions it may be
LABELS = {"Next": ("CommitForwarded", "RejectForwarded")}


# --- a cfg of PR102244's models, read as Python values --------------------------------------
class _Cfg:
    """A cfg's text and its wrapper module's constant definitions (`OnR1R2 == {r1, r2}`, as
    Python sets)."""

    def __init__(self, cfg: str, wrapper: str):
        self.text, self.defs = spec_file(cfg).read_text(), {}
        for name, body in re.findall(r"^(\w+) == \{([^}]*)\}", spec_file(wrapper).read_text(), re.M):
            items = [x.strip() for x in body.split(",") if x.strip()]
            self.defs[name] = frozenset(int(x) if x.isdigit() else x for x in items)

    def name(self, constant: str) -> str:
        """The definition the cfg substitutes for a constant (`Replicas <- ThreeReplicas`)."""
        return re.search(rf"^\s*{constant} <- (\w+)", self.text, re.M)[1]

    def set(self, constant: str) -> frozenset:
        return self.defs[self.name(constant)]

    def num(self, constant: str) -> int:
        return int(re.search(rf"^\s*{constant} = (\d+)", self.text, re.M)[1])

    def strings(self, constant: str) -> frozenset:
        return frozenset(re.findall(r'"(\w+)"', re.search(rf"^\s*{constant} = \{{([^}}]*)\}}", self.text, re.M)[1]))


def model_constants(cfg: str) -> dict:
    """Replicas, RF, InitOwners, Blocks, MigIds, the bounds, Bugs and Readings of a PR102244 cfg."""
    c = _Cfg(cfg, "MCPR102244.tla")
    return {"replicas": tuple(sorted(c.set("Replicas"))), "init_owners": c.set("InitOwners"), "blocks": c.set("Blocks"),
            "mig_ids": tuple(sorted(c.set("MigIds"))), "rf": c.num("RF"), "max_fails": c.num("MaxFails"),
            "max_crashes": c.num("MaxCrashes"), "max_queries": c.num("MaxQueries"), "bugs": c.strings("Bugs"),
            "readings": c.strings("Readings")}


def whole_constants(cfg: str) -> dict:
    """The constants of a one-partition PR102244Whole cfg with no assignment at the start."""
    c = _Cfg(cfg, "MCPR102244Whole.tla")
    shape = tuple(c.name(x) for x in ("Partitions", "PartitionOf", "InitOwners", "MigIds"))
    if shape != ("OnePartition", "AllInP1", "P1New", "NoMigrations"):
        raise ValueError(f"{cfg}: the harness carries one partition with no assignment at the start and no "
                         f"migration ids (OnePartition, AllInP1, P1New, NoMigrations), not {shape}")
    return {"replicas": tuple(sorted(c.set("Replicas"))), "init_owners": frozenset(),
            "blocks": c.set("Blocks"), "mig_ids": (), "rf": c.num("RF"), "max_fails": c.num("MaxFails"),
            "max_crashes": c.num("MaxCrashes"), "max_queries": c.num("MaxQueries"),
            "max_forwards": c.num("MaxForwards"), "bugs": c.strings("Bugs"), "readings": c.strings("Readings")}


class _ClusterView:
    """What checkers/pr102244_live.py reads of a cluster: Keeper, the layout, the table's
    replication_factor and the replicas' stores."""

    def __init__(self, system: "PRSystem"):
        self.admin, self.layout, self.stores, self.down = system.admin, LAYOUT, system.stores, {}
        self.table = type("Table", (), {"replication_factor": system.c["rf"]})()


class PRSystem(Attempts):
    refused = REFUSED
    idle = IDLE
    # A migration's steps in order, for the state machine's Progress rule (conformance/machines.py):
    # 20 uniform walks reached no SWITCH under some hash seeds
    progress = ("WriteInsert", "WriteCloneEntries", "Pull", "Rescan", "Fetch", "SignalComplete", "Switch", "Done")

    def __init__(self, constants: dict, bugs: frozenset[str] | None = None, readings: frozenset[str] | None = None,
                 coordinator: str = "r1"):
        self.c = constants
        self.bugs = constants["bugs"] if bugs is None else frozenset(bugs)
        self.readings = constants["readings"] if readings is None else frozenset(readings)
        self.names = constants["replicas"]
        self.ensemble = MemoryEnsemble()
        self.admin = self.ensemble.connect()
        create_table_znodes(self.admin, LAYOUT, constants["rf"])
        declare_replicas(self.admin, LAYOUT, self.names)   # created with the table: none starts lost
        self.admin.ensure_path(pr_layout.counts_root(LAYOUT))
        self.stores = {r: MemoryPartStore(r) for r in self.names}
        self.reps: dict[str, PRReplica] = {}
        for r in self.names:
            k = self.ensemble.connect()
            register_replica(k, LAYOUT, r)
            k.multi([set_count(LAYOUT, r, 0, -1)])
            self.reps[r] = PRReplica(r, k, LAYOUT, self.stores[r], self.stores, self.bugs, readings=self.readings)
        self._init_assignment()
        self.coord: str | None = coordinator
        self.committed: set[int] = set()
        self.aux = {"fails": 0, "crashes": 0, "queries": 0}
        self.missed = False
        self.block_of: dict[str, int] = {}     # part name -> the block (INSERT id) it holds
        self.ended: dict[int, dict] = {}       # DONE / FAILED migrations: the spec's record, kept

    @classmethod
    def from_trace(cls, constants: dict, bugs: frozenset[str], init: dict) -> "PRSystem":
        """The system for a trace or graph whose first state is `init` (its coordinator)."""
        return cls(constants, bugs, coordinator=init["coord"].name)

    def _init_assignment(self) -> None:
        """Init: the partition's assignment, as the first INSERT's ensurePartitionAssignment makes
        it (the rf lowest counts, ties by name); the model's InitOwners must be that choice."""
        a = ensure_partition_assignment(self.admin, LAYOUT, P, self.c["rf"])
        if set(a.owners) != set(self.c["init_owners"]):
            raise ValueError(f"ensurePartitionAssignment picks {a.owners}, the model starts on "
                             f"{sorted(self.c['init_owners'])}")
        for rep in self.reps.values():
            rep.refresh_view(P)

    def close(self) -> None:
        pass  # all in memory

    # --- snapshot / restore -----------------------------------------------------------------
    def snapshot(self):
        reps = {r: (dict(rep.cache), dict(rep.cached_at), dict(rep.pins), rep.keeper_reads())
                for r, rep in self.reps.items()}
        return (self.ensemble.snapshot(), {r: s.snapshot() for r, s in self.stores.items()}, reps, self.coord,
                set(self.committed), dict(self.aux), self.missed, dict(self.block_of), copy.deepcopy(self.ended))

    def restore(self, snap) -> None:
        ens, stores, reps, self.coord, committed, aux, self.missed, block_of, ended = snap
        self.ensemble.restore(ens)
        for r, s in stores.items():
            self.stores[r].restore(s)
        for r, (cache, cached_at, pins, reads) in reps.items():
            rep = self.reps[r]
            rep.cache, rep.cached_at, rep.pins = dict(cache), dict(cached_at), dict(pins)
            rep.restore_keeper_reads(reads)
        self.committed, self.aux, self.block_of = set(committed), dict(aux), dict(block_of)
        self.ended = copy.deepcopy(ended)

    # --- the abstraction ----------------------------------------------------------------------
    def _children(self, path: str) -> list[str]:
        node = self.ensemble.nodes.get(path)
        return sorted(node.children) if node else []

    def _block(self, part: str) -> int:
        """The block a part holds, by the INSERT that wrote it; a part the harness did not see
        written shows as -1, so the states differ."""
        return self.block_of.get(part, -1)

    def _rows(self, r: str) -> frozenset:
        store = self.stores[r]
        return frozenset(int(x["row_id"]) for n in store.names(P) for x in store.read(n))

    def _log(self) -> list[LogEntry]:
        return [LogEntry.parse(self.ensemble.nodes[f"{LAYOUT.log}/{n}"].value) for n in self._children(LAYOUT.log)]

    def _queue(self, r: str) -> list[tuple[str, LogEntry]]:
        q = LAYOUT.queue(r)
        return [(n, LogEntry.parse(self.ensemble.nodes[f"{q}/{n}"].value)) for n in self._children(q)]

    def _mig(self, m: int) -> dict:
        """The spec's record of migration m: kept by the harness once ended, idle before its node."""
        if m in self.ended:
            return self.ended[m]
        x, _ = read_migration(self.admin, LAYOUT, str(m))
        return dict(self.idle) if x is None else self._record(m, x)

    def _record(self, m: int, x: dict) -> dict:
        """A migration node read as the module's record."""
        mv = ModelValue
        return {"st": x["state"], "src": mv(x["source"]), "tgt": mv(x["target"]),
                "snap": frozenset(self._block(s) for s in x["source_parts_snapshot"]), "written": x["written"],
                "rescanned": x["rescanned"],
                "complete": self.admin.exists(pr_layout.clone_complete(LAYOUT, str(m))) is not None,
                "aver0": x["aver0"], "logAtSwitch": x["log_at_switch"] or 0}

    @staticmethod
    def _assignment(a, version: bool) -> Fn:
        d = {"owners": frozenset(map(ModelValue, a.owners)), "cloning": frozenset(map(ModelValue, a.cloning))}
        return Fn({**d, "ver": a.version} if version else d)

    def abstract(self) -> dict:
        return {**self._assignment_vars(), **self._rest()}

    def _assignment_vars(self) -> dict:
        """asg, aver, counts and view (PRWholeSystem reads them as PR102244Whole's)."""
        mv = ModelValue
        a = read_assignment(self.admin, LAYOUT, P)
        return {
            "asg": self._assignment(a, version=False), "aver": a.version,
            "counts": Fn({mv(r): read_count(self.admin, LAYOUT, r)[0] for r in self.names}),
            "view": Fn({mv(r): self._assignment(self.reps[r].cache[P], version=True) for r in self.names}),
        }

    def _rest(self) -> dict:
        """The variables read the same way whether or not the partition has an assignment node."""
        mv, nodes = ModelValue, self.ensemble.nodes
        return {
            "mig": seq_or_fn({m: Fn(self._mig(m)) for m in self.c["mig_ids"]}),
            "coord": mv(self.coord) if self.coord else NONE,
            "log": tuple(self._block(e.new_part_name) for e in self._log()),
            "ptr": Fn({mv(r): int(nodes[LAYOUT.log_pointer(r)].value) for r in self.names}),
            "queue": Fn({mv(r): frozenset(self._block(e.new_part_name) for _, e in self._queue(r)) for r in self.names}),
            "parts": Fn({mv(r): self._rows(r) for r in self.names}),
            "committed": frozenset(self.committed),
            "aux": Fn(self.aux),
            "inv_missed": self.missed,
        }

    # --- PR102244.tla's invariants, by checkers/pr102244_live.py ----------------------
    def invariants(self) -> dict[str, list[str]]:
        """Each invariant's violations on the reference's state, in plain words ([] when it holds)."""
        view, acked = _ClusterView(self), {b: P for b in self.committed}
        return {"ReplicationFactorInv": replication_factor(view), "NoAckedBlockLostInv": no_acked_block_lost(view, acked),
                "OwnersCompleteInv": owners_complete(view, acked),
                "QueryNoMissingInv": ["a SELECT missed an acknowledged block"] if self.missed else [],
                "TypeOKInv": []}

    # --- the steps ------------------------------------------------------------------------------
    def instances(self) -> list[tuple[str, tuple]]:
        R, out = self.names, []
        for r in R:
            out += [("WriteInsert", (r, b)) for b in sorted(self.c["blocks"])]
            out += [("RefreshView", (r,)), ("Pull", (r,)), ("DropUnassigned", (r,))]
            out += [("Fetch", (r, b)) for b in sorted(self.c["blocks"])]
        for m in self.c["mig_ids"]:
            out += [("StartClone", (m, s, t)) for s in R for t in R]
            out += [(a, (m,)) for a in ("WriteCloneEntries", "Rescan", "SignalComplete", "Switch", "Done", "Fail")]
        out += [("Query", (x, y)) for x in R for y in R]
        return out

    def step(self, action: str, args: tuple):
        out = getattr(self, "_" + action)(*args)
        self._drain_covered()
        return out

    def _drain_covered(self) -> None:
        for r, rep in self.reps.items():
            have = {str(n) for n in self.stores[r].names(P)}
            for node, e in self._queue(r):
                if e.type == GET_PART and e.new_part_name in have:
                    rep.replica_execute_entry(node)

    def _coordinator(self) -> PRReplica:
        if self.coord is None:
            raise GuardFailed("coordinator", "the coordinator crashed and no replica took over")
        return self.reps[self.coord]

    def _target(self, m: int) -> PRReplica:
        x, _ = read_migration(self.admin, LAYOUT, str(m))
        if x is None:
            raise GuardFailed("migration", f"migration {m} has no node")
        return self.reps[x["target"]]

    def _WriteInsert(self, r, b):
        if b in self.committed:   # the client's: each INSERT id is one block, committed once
            raise GuardFailed("WriteInsert", f"block {b} is committed")
        rows = [{"date": "2024-01-15", "user_id": 5, "row_id": b, "event": "view"}]
        part = self.reps[r].replica_write_insert(P, rows, sub_block_hash(P, rows), patch=self._patch_of(b))
        if part == "deduplicated":
            raise GuardFailed("WriteInsert", f"block {b} deduplicated")
        self.block_of[part] = b
        self.committed.add(b)
        return part

    def _patch_of(self, b) -> str:
        """The patch hash of block b's part: PatchBlocks (PR102244Code.tla's) are patch parts; ""
        for a part of rows (the description's models have no PatchBlocks)."""
        return f"{b:04x}" if b in self.c.get("patch_blocks", ()) else ""

    def _RefreshView(self, r):
        return self.reps[r].refresh_view(P)

    def _Pull(self, r):
        return self.reps[r].pull()

    def _Fetch(self, r, b):
        nodes = [n for n, e in self._queue(r) if e.type == GET_PART and self._block(e.new_part_name) == b]
        if not nodes:
            raise GuardFailed("Fetch", f"{r} has no GET_PART of block {b} queued")
        return self.reps[r].replica_execute_entry(nodes[0])

    def _DropUnassigned(self, r):
        return self.reps[r].drop_unassigned(P)

    def _StartClone(self, m, s, t):
        # The spec names migrations in order (uuids are symmetric); so does the harness.
        if any(n < m and self._mig(n)["st"] == "idle" for n in self.c["mig_ids"]) or self._mig(m)["st"] != "idle":
            raise GuardFailed("StartClone", f"migration id {m} is not the next one")
        k = self._coordinator()
        return start_clone(k.keeper, LAYOUT, P, s, t, k.name, self.bugs, mig_id=str(m))

    def _WriteCloneEntries(self, m):
        k = self._coordinator()
        return write_clone_entries(k.keeper, LAYOUT, str(m), k.name)

    def _Rescan(self, m):
        return rescan(self._target(m), str(m))

    def _SignalComplete(self, m):
        return signal_complete(self._target(m), str(m))

    def _Switch(self, m):
        k = self._coordinator()
        return switch(k.keeper, LAYOUT, str(m), k.name, self.bugs)

    def _end(self, m, state: str, how) -> None:
        """DONE and FAILED remove the migration's node; the spec keeps its record with the state."""
        record = self._mig(m)
        k = self._coordinator()
        how(k.keeper, LAYOUT, str(m), k.name)
        self.ended[m] = {**record, "st": state}

    def _Done(self, m):
        self._end(m, "done", lambda *a: done(*a, self.bugs))

    def _Fail(self, m):
        if self.aux["fails"] >= self.c["max_fails"]:
            raise GuardFailed("Fail", "MaxFails reached")
        self._end(m, "failed", fail)
        self.aux["fails"] += 1

    def _Query(self, x, y):
        """A SELECT routed by x's cache to y, read at once (the spec's Query); it missed a block
        when y lacks a committed block that replication is not bringing it (InFlightTo, with the
        reference's own filter deciding whether y keeps the log entries ahead of its pointer)."""
        if self.aux["queries"] >= self.c["max_queries"]:
            raise GuardFailed("Query", "MaxQueries reached")
        q = client_start_query(self.reps[x], {P}, choose=lambda at, owners: Pick(y).choice(sorted(owners)),
                               replicas=self.reps)
        got = {int(row["row_id"]) for row in replica_read_partition(q, P, self.reps)}
        self.missed = self.missed or any(b not in got and not self._in_flight(y, b) for b in self.committed)
        self.aux["queries"] += 1
        return sorted(got)

    def _in_flight(self, r: str, b: int) -> bool:
        if not any(b in self._rows(x) for x in self.names):
            return False   # no replica has the block: on its way nowhere (InFlightTo's first conjunct)
        if any(self._block(e.new_part_name) == b for _, e in self._queue(r)):
            return True
        ptr = int(self.ensemble.nodes[LAYOUT.log_pointer(r)].value)
        a = read_assignment(self.admin, LAYOUT, P)
        ahead = [e for e in self._log()[ptr:] if self._block(e.new_part_name) == b]
        # the filter's answer without writing r's cache (the code's filter refreshes it: PRCodeSystem)
        return any(self.reps[r].keeps(e, refresh=False) or (a is not None and r in a.keepers()) for e in ahead)


# --- PR102244Whole's first-INSERT models -----------------------------------------------------
class PRWholeSystem(PRSystem):
    def __init__(self, constants: dict, bugs: frozenset[str] | None = None, readings: frozenset[str] | None = None,
                 coordinator: str = "r1"):
        super().__init__(constants, bugs, readings, coordinator)
        self.aux = {"fails": 0, "crashes": 0, "queries": 0, "forwards": 0, "cycles": 0, "planned": 0}
        self.fwd: frozenset = frozenset()       # sends in flight: (block, to, retry)
        self.unknown: set[int] = set()          # blocks whose send ended without a reply
        self.dup = False                        # inv_dup
        self.retries: dict[int, int] = {}       # retries sent per block (the retry's block id)

    def _init_assignment(self) -> None:
        """Init: no assignment node; every cache holds the partition as unassigned (RefreshView)."""
        for rep in self.reps.values():
            rep.refresh_view(P)

    # --- snapshot / restore -----------------------------------------------------------------
    def snapshot(self):
        reps = {r: set(rep.absent) for r, rep in self.reps.items()}
        return (super().snapshot(), reps, self.fwd, set(self.unknown), self.dup, dict(self.retries))

    def restore(self, snap) -> None:
        base, absent, self.fwd, unknown, self.dup, retries = snap
        super().restore(base)
        for r, a in absent.items():
            self.reps[r].absent = set(a)
        self.unknown, self.retries = set(unknown), dict(retries)

    # --- the abstraction ----------------------------------------------------------------------
    def _assignment_vars(self) -> dict:
        mv = ModelValue
        a = read_assignment(self.admin, LAYOUT, P)

        def view(r):
            c = self.reps[r].cache.get(P)
            if c is None:   # none, or a "no assignment" entry
                return Fn({"owners": frozenset(), "cloning": frozenset(), "ver": 0})
            return Fn({"owners": frozenset(map(mv, c.owners)), "cloning": frozenset(map(mv, c.cloning)),
                       "ver": c.version + 1})
        none = Fn({"owners": frozenset(), "cloning": frozenset()})
        return {"asg": Fn({PARTITION: self._assignment(a, version=False) if a else none}),
                "aver": Fn({PARTITION: a.version + 1 if a else 0}),
                "counts": Fn({mv(r): read_count(self.admin, LAYOUT, r)[0] for r in self.names}),
                "view": Fn({mv(r): Fn({PARTITION: view(r)}) for r in self.names})}

    def abstract(self) -> dict:
        return {**super().abstract(),
                "fwd": frozenset(Fn({"blk": b, "to": ModelValue(o), "retry": retry}) for b, o, retry in self.fwd),
                "unknown": frozenset(self.unknown), "inv_dup": self.dup}

    def invariants(self) -> dict[str, list[str]]:
        return {**super().invariants(), "NoDuplicateRowsInv": no_duplicate_rows(_ClusterView(self))}

    # --- the steps ------------------------------------------------------------------------------
    def instances(self) -> list[tuple[str, tuple]]:
        R, B, out = self.names, sorted(self.c["blocks"]), []
        for r in R:
            out += [("WriteInsert", (r, b)) for b in B]
            out += [("EnsurePartitionAssignment", (r,)), ("RefreshView", (r,)), ("Pull", (r,)),
                    ("DropUnassigned", (r,))]
            out += [("Fetch", (r, b)) for b in B]
            out += [("ForwardBlock", (r, b, o)) for b in B for o in R]
        for f in sorted(self.fwd):
            out += [("CommitForwarded", (f, True)), ("CommitForwarded", (f, False)), ("RejectForwarded", (f,))]
        out += [("Query", (x, y)) for x in R for y in R]
        return out

    def _to_send(self, b) -> bool:
        """ToSend(b): never committed, or committed with no reply; and no send of it in flight."""
        return (b not in self.committed or b in self.unknown) and not any(f[0] == b for f in self.fwd)

    @staticmethod
    def _block_rows(b):
        return [{"date": "2024-01-15", "user_id": 5, "row_id": b, "event": "view"}]

    def _WriteInsert(self, r, b):
        if not self._to_send(b):
            raise GuardFailed("WriteInsert", f"block {b} is not to send")
        return super()._WriteInsert(r, b)

    def _EnsurePartitionAssignment(self, r):
        if read_assignment(self.admin, LAYOUT, P) is not None:
            raise GuardFailed("EnsurePartitionAssignment", f"{P} has an assignment node")
        if not set(self.c["blocks"]) - self.committed:
            raise GuardFailed("EnsurePartitionAssignment", "no block left to insert")
        rep = self.reps[r]
        return rep.learn(P, ensure_partition_assignment(rep.keeper, LAYOUT, P, self.c["rf"]))

    def _ForwardBlock(self, r, b, o):
        if self.aux["forwards"] >= self.c["max_forwards"] or not self._to_send(b):
            raise GuardFailed("ForwardBlock", f"block {b} is not to send, or MaxForwards")
        replica_forward_insert(self.reps[r], P, self.reps, Pick(o))   # r is not an owner, o is, by r's cache
        self.fwd = self.fwd | {(b, o, b in self.unknown)}
        self.aux["forwards"] += 1

    def _block_id(self, f) -> str:
        b, _, retry = f
        return block_id_of_send(P, self._block_rows(b), self.retries.get(b, 0) + 1 if retry else 0, self.bugs)

    def _CommitForwarded(self, f, replied):
        b, o, retry = f
        part = self.reps[o].replica_write_insert(P, self._block_rows(b), self._block_id(f))
        if part != "deduplicated":
            self.block_of[part] = b
            self.dup = self.dup or b in self.committed
            self.committed.add(b)
        if retry:
            self.retries[b] = self.retries.get(b, 0) + 1
        self.fwd = self.fwd - {f}
        (self.unknown.discard if replied else self.unknown.add)(b)
        return part

    def _RejectForwarded(self, f):
        b, o, _ = f
        cached, a = self.reps[o].cache.get(P), read_assignment(self.admin, LAYOUT, P)
        dedup = self.admin.exists(f"{LAYOUT.blocks}/{P}_{self._block_id(f)}") is not None
        if dedup or (cached is not None and o in cached.owners and a is not None and cached.version == a.version):
            raise GuardFailed("RejectForwarded", f"{o} would take block {b}")
        self.fwd = self.fwd - {f}

    def _RefreshView(self, r):
        before = self.reps[r].cache.get(P)
        after = self.reps[r].refresh_view(P)
        if before == after or (before is not None and after is not None and before.version == after.version):
            raise GuardFailed("RefreshView", f"{r}'s cache is Keeper's already")
        return after
