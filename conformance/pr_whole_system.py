"""The reference's PR #102244 design (reference/pr102244/) under the constants of a one-partition
model of spec/pr102244/PR102244Whole.tla whose partition has no assignment node at the start (InitOwners
`P1New`, no migration ids): the models of the first INSERT (`MCPR102244Whole_FirstInsert*`), for
the counterexample carry of PR-F5 and of O7's other reading (conformance/pr_counterexample.py).

What PR102244Whole.tla adds to PR102244.tla, and how the harness reads it from the reference:
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
  `\\E f \\in fwd`), so the carry tries both for a step named `Next`.
- `asg`/`aver`/`view` are functions of the partition; a partition with no node has no owners and
  version 0, and the znode's version is one behind the spec's (the spec counts the create).
  A cache with no assignment of the partition (none, or a "no assignment" entry) shows owners {}
  and ver 0, as the spec's Init.

Not implemented (none of these models has them): migrations, the rebalancer, coordinator crash
and TakeOver, several partitions.
"""

from __future__ import annotations

import re

from checkers.pr102244_live import no_duplicate_rows
from conformance.pr_system import LAYOUT, P, PRSystem, _ClusterView
from conformance.spec_system import Pick
from conformance.stategraph import spec_file
from harness.tlc.values import Fn, ModelValue
from protocol.assignment import GuardFailed
from protocol.insert import replica_forward_insert
from protocol.pr102244.assignment import ensure_partition_assignment, read_assignment, read_count
from protocol.pr102244.insert import block_id_of_send

PARTITION = "p1"   # the model's partition id (a string in PR102244Whole's models)
ACTIONS = ("WriteInsert", "EnsurePartitionAssignment", "ForwardBlock", "CommitForwarded", "RejectForwarded",
           "RefreshView", "Pull", "Fetch", "DropUnassigned", "Query")
# TLC's label of a step -> the harness's actions it may be
LABELS = {"Next": ("CommitForwarded", "RejectForwarded")}


def whole_constants(cfg: str) -> dict:
    """The constants of a one-partition PR102244Whole cfg with no assignment at the start."""
    text = spec_file(cfg).read_text()
    defs = {name: frozenset(int(x) if x.strip().isdigit() else x.strip() for x in body.split(",") if x.strip())
            for name, body in re.findall(r"^(\w+) == \{([^}]*)\}", spec_file("MCPR102244Whole.tla").read_text(), re.M)}

    def sub(name):
        return re.search(rf"^\s*{name} <- (\w+)", text, re.M)[1]

    def num(name):
        return int(re.search(rf"^\s*{name} = (\d+)", text, re.M)[1])

    def strings(name):
        return frozenset(re.findall(r'"(\w+)"', re.search(rf"^\s*{name} = \{{([^}}]*)\}}", text, re.M)[1]))
    shape = (sub("Partitions"), sub("PartitionOf"), sub("InitOwners"), sub("MigIds"))
    if shape != ("OnePartition", "AllInP1", "P1New", "NoMigrations"):
        raise ValueError(f"{cfg}: the harness carries one partition with no assignment at the start and no "
                         f"migration ids (OnePartition, AllInP1, P1New, NoMigrations), not {shape}")
    return {"replicas": tuple(sorted(defs[sub("Replicas")])), "init_owners": frozenset(),
            "blocks": defs[sub("Blocks")], "mig_ids": (), "rf": num("RF"), "max_fails": num("MaxFails"),
            "max_crashes": num("MaxCrashes"), "max_queries": num("MaxQueries"),
            "max_forwards": num("MaxForwards"), "bugs": strings("Bugs"), "readings": strings("Readings")}


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

