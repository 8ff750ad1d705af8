"""The reference's PR #102244 design driven as the PR's code drives it (protocol/pr102244/driver.py,
replicas with `code` set) under the constants of one model of spec/pr102244/PR102244Code.tla: the
bridge for the counterexample carry, the state-graph replay and the state machine of the code's
models, as conformance/pr_system.py's PRSystem is for the description's.

- `instances()` lists each action of PR102244Code.tla's `Next` with each parameter from the
  model's constants; the reference refuses those whose guard is false.
- `step(action, args)` runs it: the driver's steps (ReadSnapshot, PlanUnderReplicated,
  CloneMulti, WriteCloneEntries, DriveSwitch, DriveRollback, SwitchMulti, ApplyRollback,
  DriverCrash) on `MigrationDriver`s, one per replica of `Drivers`, each with its replica's
  session; SignalComplete and Done from driver.py; the write path, Pull, Fetch, the monitor's
  DropUnassigned and Query on the replicas (the code's filter: cache first, Keeper on "not
  assigned", written back; the monitor's drop at a fresh read, queue left alone).
- `abstract()` reads the reference back as the module's thirteen variables: `asg`/`aver` from the
  assignment node (a list naming a replica twice reads as the set it is), `counts`, `mig` from the
  migration nodes (the code's states `clone`, `switch`, the fix's `switched`; DONE and FAILED
  remove the node, the harness keeps the record with its state), `pend` from each driver's
  pending decision, `log`, `ptr`, `queue`, `parts` (a block is a row_id), `view`; `committed`,
  `aux` and `inv_missed` are the client's.

The harness's own rules, each the spec's: migration ids are taken in order (the module's
symmetry rule: uuids are interchangeable) and never twice; `aux` counts rollbacks, crashes and
queries against the bounds; Allocate runs with the replicas outside UpAtFirstInsert inactive
(their is_active removed, and back right after, as the module says), its choice of owners among
the tied counts passed to the reference's allocation.

A block of PatchBlocks is written as a patch part (protocol/parts.py: named patch-<hash>-<p>,
which the code's snapshot leaves out: PR-F8). Not implemented: the `filter_cached` reading (the
description's filter, the code retires it); a model with it is refused by `model_constants`.
"""
from __future__ import annotations

import itertools

from checkers.pr102244_live import cloning_has_migration, no_acked_block_lost, replication_factor
from conformance.pr_system import LAYOUT, NONE, REFUSED, P, PRSystem, _Cfg, _ClusterView
from conformance.spec_model import seq_or_fn
from conformance.stategraph import cfg_invariants, spec_file
from harness.tlc.values import Fn, ModelValue
from protocol.assignment import GuardFailed
from protocol.pr102244 import layout as pr_layout
from protocol.pr102244.assignment import ensure_partition_assignment, read_assignment, read_count
from protocol.pr102244.driver import MigrationDriver, Pending, done, signal_complete

ACTIONS = ("Allocate", "WriteInsert", "RefreshView", "Pull", "Fetch", "DropUnassigned", "ReadSnapshot",
           "PlanUnderReplicated", "CloneMulti", "WriteCloneEntries", "SignalComplete", "DriveSwitch", "DriveRollback",
           "SwitchMulti", "ApplyRollback", "Done", "DriverCrash", "Query")
IDLE = {"st": "idle", "src": NONE, "tgt": NONE, "snap": frozenset(), "written": False, "complete": False,
        "logAtSwitch": 0, "add": False}
NO_PEND = {"op": "none", "m": 0, "s": NONE, "t": NONE, "snap": frozenset(), "add": False}


def model_constants(cfg: str) -> dict:
    """The constants of a PR102244Code cfg, and its invariants."""
    c = _Cfg(cfg, "MCPR102244Code.tla")
    out = {"replicas": tuple(sorted(c.set("Replicas"))), "drivers": tuple(sorted(c.set("Drivers"))),
           "init_owners": c.set("InitOwners"), "up_at_first_insert": c.set("UpAtFirstInsert"),
           "blocks": c.set("Blocks"), "patch_blocks": c.set("PatchBlocks"),
           "mig_ids": tuple(sorted(c.set("MigIds"))), "rf": c.num("RF"),
           "max_fails": c.num("MaxFails"), "max_crashes": c.num("MaxCrashes"), "max_queries": c.num("MaxQueries"),
           "bugs": c.strings("Bugs"), "readings": c.strings("Readings"),
           "invariants": tuple(cfg_invariants(spec_file(cfg).read_text()))}
    if out["readings"]:
        raise ValueError(f"{cfg}: the code's system implements the code's filter, not the readings "
                         f"{sorted(out['readings'])}")
    return out


class PRCodeSystem(PRSystem):
    refused = REFUSED
    idle = IDLE
    # A migration's steps in order, for the state machine's Progress rule (conformance/machines.py)
    progress = ("WriteInsert", "CloneMulti", "WriteCloneEntries", "Pull", "Fetch", "SignalComplete", "DriveSwitch", "SwitchMulti",
                "Done")

    def __init__(self, constants: dict, bugs: frozenset[str] | None = None, readings: frozenset[str] | None = None):
        super().__init__(constants, bugs, frozenset(), coordinator=constants["drivers"][0])
        for rep in self.reps.values():
            rep.code = True
        self.drivers = {d: MigrationDriver(d, self.reps[d].keeper, LAYOUT, self.bugs) for d in constants["drivers"]}
        # aver counts the create when the model starts with no assignment (the spec's Init is 0)
        self.aver_offset = 0 if constants["init_owners"] else 1

    @classmethod
    def from_trace(cls, constants: dict, bugs: frozenset[str], init: dict) -> "PRCodeSystem":
        return cls(constants, bugs)

    def _init_assignment(self) -> None:
        """Init: InitOwners as the first INSERT's allocation makes them (every replica up), or,
        with InitOwners = {}, no assignment node and every cache without the partition."""
        if self.c["init_owners"]:
            super()._init_assignment()
        else:
            for rep in self.reps.values():
                rep.refresh_view(P)

    # --- snapshot / restore -----------------------------------------------------------------
    def snapshot(self):
        return (super().snapshot(), {d: x.pending for d, x in self.drivers.items()},
                {r: set(rep.absent) for r, rep in self.reps.items()})

    def restore(self, snap) -> None:
        base, pending, absent = snap
        super().restore(base)
        for d, p in pending.items():
            self.drivers[d].pending = p
        for r, a in absent.items():
            self.reps[r].absent = set(a)

    # --- the abstraction ----------------------------------------------------------------------
    def _blocks(self, parts) -> frozenset:
        return frozenset(self._block(s) for s in parts)

    def _record(self, m: int, x: dict) -> dict:
        return {"st": x["state"], "src": ModelValue(x["source"]), "tgt": ModelValue(x["target"]),
                "snap": self._blocks(x["source_parts_snapshot"]), "written": x["written"],
                "complete": self.admin.exists(pr_layout.clone_complete(LAYOUT, str(m))) is not None,
                "logAtSwitch": x["log_at_switch"] or 0, "add": bool(x.get("add"))}

    def _pend(self, p: Pending | None) -> Fn:
        if p is None:
            return Fn(NO_PEND)
        mv = ModelValue
        if p.op in ("switch", "rollback"):
            return Fn({**NO_PEND, "op": p.op, "m": int(p.mig_id)})
        return Fn({"op": p.op, "m": int(p.mig_id), "s": mv(p.source), "t": mv(p.target),
                   "snap": self._blocks(p.snapshot), "add": p.add if p.op == "clone" else False})

    def _entry(self, a) -> Fn:
        if a is None:
            return Fn({"owners": frozenset(), "cloning": frozenset(), "ver": 0})
        return Fn({"owners": frozenset(map(ModelValue, a.owners)), "cloning": frozenset(map(ModelValue, a.cloning)),
                   "ver": a.version + self.aver_offset})

    def abstract(self) -> dict:
        mv = ModelValue
        a = read_assignment(self.admin, LAYOUT, P)
        entry = self._entry(a)
        rest = self._rest()
        del rest["coord"]
        return {"asg": Fn({"owners": entry["owners"], "cloning": entry["cloning"]}), "aver": entry["ver"],
                "counts": Fn({mv(r): self._count(r) for r in self.names}),
                "mig": seq_or_fn({m: Fn(self._mig(m)) for m in self.c["mig_ids"]}),
                "pend": Fn({mv(d): self._pend(x.pending) for d, x in self.drivers.items()}),
                "view": Fn({mv(r): self._entry(self.reps[r].cache.get(P)) for r in self.names}), **rest}

    def _count(self, r: str) -> int:
        return read_count(self.admin, LAYOUT, r)[0]

    def in_window(self) -> bool:
        """A query now may see a migration half done: a migration node in flight, a driver with a
        write decided, or a replica whose cache is not Keeper's (for the machine's QueryInWindow)."""
        a = read_assignment(self.admin, LAYOUT, P)
        return (any(self._mig(m)["st"] in ("clone", "switch", "switched") for m in self.c["mig_ids"])
                or any(x.pending is not None for x in self.drivers.values())
                or any(rep.cache.get(P) != a for rep in self.reps.values()))

    # --- the invariants ----------------------------------------------------------------------
    def invariants(self) -> dict[str, list[str]]:
        """The cfg's invariants on the reference's state: checkers/pr102244_live.py on Keeper and
        the disks; OwnersCompleteInv per block; RepairAddsInv from the migrations' records, which
        DONE removes from Keeper."""
        view = _ClusterView(self)
        allocated = read_assignment(self.admin, LAYOUT, P) is not None
        found = {"TypeOKInv": [],
                 "ReplicationFactorInv": replication_factor(view) if allocated or self.c["init_owners"] else [],
                 "CloningHasMigrationInv": cloning_has_migration(view),
                 "RepairAddsInv": self._repair_adds(),
                 "NoAckedBlockLostInv": no_acked_block_lost(view, {b: P for b in self.committed}),
                 "OwnersCompleteInv": self._owners_complete(),
                 "QueryNoMissingInv": ["a SELECT missed an acknowledged block"] if self.missed else []}
        return {n: found[n] for n in self.c["invariants"]}

    def _owners_complete(self) -> list[str]:
        """OwnersCompleteInv per block, as the module's InFlightTo is (checkers/pr102244_live.py's
        is per partition: any entry of the partition on its way counts, which a snapshot that
        left one block out passes)."""
        a = read_assignment(self.admin, LAYOUT, P)
        return [f"owner {o} lacks block {b} and nothing will bring it" for o in sorted(set(a.owners) if a else ())
                for b in sorted(self.committed) if b not in self._rows(o) and not self._in_flight(o, b)]

    def _repair_adds(self) -> list[str]:
        a = read_assignment(self.admin, LAYOUT, P)
        owners = set(a.owners) if a else set()
        out = []
        for m in self.c["mig_ids"]:
            x = self._mig(m)
            if x["add"] and x["st"] in ("switched", "done") and not {x["src"].name, x["tgt"].name} <= owners:
                out.append(f"migration {m} planned to add {x['tgt'].name} ended with owners {sorted(owners)}, "
                           f"not both {x['src'].name} and {x['tgt'].name}")
        return out

    # --- the steps ------------------------------------------------------------------------------
    def instances(self) -> list[tuple[str, tuple]]:
        R, B, D, M = self.names, sorted(self.c["blocks"]), self.c["drivers"], self.c["mig_ids"]
        out = []
        for r in R:
            out += [("Allocate", (r, owners)) for owners in self._allocations()]
            out += [("RefreshView", (r,)), ("Pull", (r,)), ("DropUnassigned", (r,))]
            out += [(a, (r, b)) for b in B for a in ("WriteInsert", "Fetch")]
        for d in D:
            out += [(a, (d, m, s, t)) for m in M for s in R for t in R for a in ("ReadSnapshot", "PlanUnderReplicated")]
            out += [(a, (d,)) for a in ("CloneMulti", "WriteCloneEntries", "SwitchMulti", "ApplyRollback",
                                        "DriverCrash")]
            out += [(a, (d, m)) for m in M for a in ("DriveSwitch", "DriveRollback")]
        out += [(a, (m,)) for m in M for a in ("SignalComplete", "Done")]
        out += [("Query", (x, y)) for x in R for y in R]
        return out

    def _allocations(self) -> list[tuple[str, ...]]:
        """The owners the first INSERT may choose: min(RF, |UpAtFirstInsert|) of the replicas up."""
        up = sorted(self.c["up_at_first_insert"])
        return [tuple(x) for x in itertools.combinations(up, min(self.c["rf"], len(up)))]

    def _Allocate(self, r, owners):
        """The first INSERT's allocation, by r, with the replicas outside UpAtFirstInsert down;
        `owners`: the spec's choice (every count is 0 then: all tied)."""
        up = self.c["up_at_first_insert"]
        if r not in up:
            raise GuardFailed("Allocate", f"{r} is not up at the first INSERT")
        if read_assignment(self.admin, LAYOUT, P) is not None or self.committed:
            raise GuardFailed("Allocate", f"{P} has been allocated")
        down = [x for x in self.names if x not in up]
        for x in down:
            self.admin.delete(LAYOUT.is_active(x))
        try:
            a = ensure_partition_assignment(self.reps[r].keeper, LAYOUT, P, self.c["rf"],
                                            choose=lambda ranked, n: list(owners))
        finally:
            for x in down:
                self.reps[x].keeper.create(LAYOUT.is_active(x), b"", ephemeral=True)
        return self.reps[r].learn(P, a)

    def _RefreshView(self, r):
        before, after = self.reps[r].cache.get(P), read_assignment(self.admin, LAYOUT, P)
        if before == after or (before is not None and after is not None and before.version == after.version):
            raise GuardFailed("RefreshView", f"{r}'s cache is Keeper's already")
        return self.reps[r].refresh_view(P)

    def _next_id(self, m: int, action: str) -> str:
        """Migration ids in order, each taken once (the module's symmetry rule)."""
        taken = {int(x.pending.mig_id) for x in self.drivers.values() if x.pending is not None}
        if self._mig(m)["st"] != "idle" or m in taken or any(
                n < m and self._mig(n)["st"] == "idle" and n not in taken for n in self.c["mig_ids"]):
            raise GuardFailed(action, f"migration id {m} is not the next one")
        return str(m)

    def _ReadSnapshot(self, d, m, s, t):
        return self.drivers[d].read_snapshot(self._next_id(m, "ReadSnapshot"), P, s, t)

    def _PlanUnderReplicated(self, d, m, s, t):
        return self.drivers[d].plan_under_replicated(self._next_id(m, "PlanUnderReplicated"), P, s, t,
                                                           self.c["rf"])

    def _CloneMulti(self, d):
        return self.drivers[d].clone_multi()

    def _WriteCloneEntries(self, d):
        x = self.drivers[d]
        m = int(x.decided("entries", "WriteCloneEntries").mig_id)
        # SeqOf(snap): TLC's CHOOSE gives the blocks in ascending order
        if not x.write_clone_entries(order=self._block) and m in self.ended:
            self.ended[m] = {**self.ended[m], "written": True}

    def _SignalComplete(self, m):
        return signal_complete(self._target(m), str(m))

    def _DriveSwitch(self, d, m):
        return self.drivers[d].drive_switch(str(m))

    def _DriveRollback(self, d, m):
        if self.aux["fails"] >= self.c["max_fails"]:
            raise GuardFailed("DriveRollback", "MaxFails reached")
        out = self.drivers[d].drive_rollback(str(m))
        self.aux["fails"] += 1
        return out

    def _write(self, d, op: str, action: str) -> object:
        """A driver's decided write (SwitchMulti, ApplyRollback). The spec keeps the record of a
        migration the write ended (its node removed), and the SWITCH point it recorded on one
        already ended (`switch_without_target_check` with `rollback_ignores_state`)."""
        x = self.drivers[d]
        m = int(x.decided(op, action).mig_id)
        before = self._mig(m)
        out = x.switch_multi() if op == "switch" else x.apply_rollback()
        at = before["logAtSwitch"] if out.log_at_switch is None else out.log_at_switch
        if out.state in ("done", "failed"):
            self.ended[m] = {**before, "st": out.state, "logAtSwitch": at}
        elif m in self.ended:
            self.ended[m] = {**self.ended[m], "logAtSwitch": at}
        return out

    def _SwitchMulti(self, d):
        return self._write(d, "switch", "SwitchMulti")

    def _ApplyRollback(self, d):
        return self._write(d, "rollback", "ApplyRollback")

    def _Done(self, m):
        before = self._mig(m)
        done(self.admin, LAYOUT, str(m))
        self.ended[m] = {**before, "st": "done"}

    def _DriverCrash(self, d):
        if self.aux["crashes"] >= self.c["max_crashes"]:
            raise GuardFailed("DriverCrash", "MaxCrashes reached")
        out = self.drivers[d].crash()
        self.aux["crashes"] += 1
        return out
