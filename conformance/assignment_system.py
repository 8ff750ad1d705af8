"""The reference's allocation (protocol/assignment.py) as a system with the spec's actions and
variables (spec/assignment/Assignment.tla): `step(action, params)` runs the reference step, `abstract()`
reads the reference's state (Keeper and the replicas' in-memory allocations) as the spec's
variables, `enabled(action)` lists the parameter tuples whose spec guard holds there.

The ghost variables (inv_based_on, inv_routed) are kept here from what the reference returns:
the version the allocator read and the owners it routed rows to; the znode versions they are
compared with come from Keeper.
"""

from __future__ import annotations

import copy
from itertools import combinations

from harness.tlc.values import Fn, ModelValue
from protocol.assignment import (Allocation, AlreadyAssigned, GuardFailed, read_assignment, replica_adopt_assignment,
                                 replica_choose_owners, replica_create_assignment)
from protocol.keeper import MemoryEnsemble
from protocol.layout import Layout
from protocol.registration import create_table_znodes, register_replica

ABSENT = -1
LAYOUT = Layout("/clickhouse/tables/conformance/assignment")
# Model values of the spec's small models -> reference names (partition ids must be valid ids).
PARTITION_IDS = {"p1": "202401-1", "p2": "202401-2", "p3": "202401-3"}


class AssignmentSystem:
    ACTIONS = ("ReplicaChooseOwners", "ReplicaCreateAssignment", "ReplicaAdoptAssignment", "ReplicaSessionExpire",
               "ReplicaRestart")

    def __init__(self, replicas=("r1", "r2", "r3"), partitions=("p1", "p2"), rf: int = 2, bugs=frozenset()):
        self.replicas, self.partitions, self.rf, self.bugs = tuple(replicas), tuple(partitions), rf, frozenset(bugs)
        self.ensemble = MemoryEnsemble()
        self.admin = self.ensemble.connect()
        create_table_znodes(self.admin, LAYOUT, rf)
        self.sessions = {}
        for r in self.replicas:
            self._connect(r)
        self.alloc: dict[str, Allocation | None] = {r: None for r in self.replicas}
        self.based_on = {p: ABSENT - 1 for p in self.partitions}
        self.routed: set[tuple[str, frozenset]] = set()

    def _connect(self, r: str) -> None:
        self.sessions[r] = self.ensemble.connect()
        register_replica(self.sessions[r], LAYOUT, r)

    # --- the spec's variables, read from the reference ---------------------------------
    def active(self) -> set[str]:
        return {r for r in self.replicas if self.admin.exists(LAYOUT.is_active(r)) is not None}

    def assignment(self, p: str):
        a = read_assignment(self.admin, LAYOUT, PARTITION_IDS[p])
        return (set(), ABSENT) if a is None else (set(a.owners), a.version)

    def abstract(self) -> dict:
        mv = ModelValue
        asg = {mv(p): Fn({"owners": frozenset(map(mv, o)), "version": v})
               for p in self.partitions for o, v in [self.assignment(p)]}
        alloc = {}
        for r in self.replicas:
            a = self.alloc[r]
            alloc[mv(r)] = (Fn({"st": "idle", "p": "none", "owners": frozenset(), "read": ABSENT}) if a is None else
                            Fn({"st": "chosen", "p": mv(self._model_p(a.partition)),
                                "owners": frozenset(map(mv, a.owners)), "read": a.read_version}))
        return {"active": frozenset(map(mv, self.active())), "asg": Fn(asg), "alloc": Fn(alloc),
                "inv_based_on": Fn({mv(p): self.based_on[p] for p in self.partitions}),
                "inv_routed": frozenset((mv(p), frozenset(map(mv, o))) for p, o in self.routed)}

    @staticmethod
    def _model_p(pid: str) -> str:
        return next(k for k, v in PARTITION_IDS.items() if v == pid)

    # --- guards, as the spec states them, on the abstract state -------------------------
    def enabled(self, action: str) -> list[tuple]:
        active = self.active()
        load = {r: sum(1 for p in self.partitions if r in self.assignment(p)[0]) for r in self.replicas}
        assigned = {p for p in self.partitions if self.assignment(p)[1] != ABSENT}
        out = []
        for r in self.replicas:
            a = self.alloc[r]
            if action == "ReplicaChooseOwners" and r in active and a is None:
                for p in self.partitions:
                    if p in assigned:
                        continue
                    if len(active) >= self.rf:
                        for s in combinations(sorted(active), self.rf):
                            if all(load[x] <= load[y] for x in s for y in active - set(s)):
                                out.append((r, p, s))
                    elif "allow_short_assignment" in self.bugs:
                        out.append((r, p, tuple(sorted(active))))
            elif action == "ReplicaCreateAssignment" and r in active and a is not None:
                if self._model_p(a.partition) not in assigned or "blind_write" in self.bugs:
                    out.append((r,))
            elif action == "ReplicaAdoptAssignment" and r in active and a is not None:
                if self._model_p(a.partition) in assigned and "blind_write" not in self.bugs:
                    out.append((r,))
            elif action == "ReplicaSessionExpire" and r in active:
                out.append((r,))
            elif action == "ReplicaRestart" and r not in active:
                out.append((r,))
        return out

    # --- the reference's steps ------------------------------------------------------------
    def step(self, action: str, params: tuple) -> None:
        r = params[0]
        keeper = self.sessions[r]
        # The replica's process holds one allocation at a time, and a crashed process does nothing.
        if action == "ReplicaChooseOwners" and self.alloc[r] is not None:
            raise GuardFailed(action, f"{r} is in the middle of an allocation")
        if action in ("ReplicaCreateAssignment", "ReplicaAdoptAssignment") and self.alloc[r] is None:
            raise GuardFailed(action, f"{r} has chosen no owners")
        if action == "ReplicaSessionExpire" and r not in self.active():
            raise GuardFailed(action, f"{r} has no live session")
        if action == "ReplicaChooseOwners":
            _, p, owners = params
            self.alloc[r] = replica_choose_owners(keeper, LAYOUT, r, PARTITION_IDS[p], self.rf, self.bugs,
                                                  owners=tuple(owners))
        elif action == "ReplicaCreateAssignment":
            a = self.alloc[r]
            replica_create_assignment(keeper, LAYOUT, a, self.bugs)
            self.based_on[self._model_p(a.partition)] = a.read_version
            self.routed.add((self._model_p(a.partition), frozenset(a.routed_to)))
            self.alloc[r] = None
        elif action == "ReplicaAdoptAssignment":
            a = self.alloc[r]
            replica_adopt_assignment(keeper, LAYOUT, a, self.bugs)
            self.routed.add((self._model_p(a.partition), frozenset(a.routed_to)))
            self.alloc[r] = None
        elif action == "ReplicaSessionExpire":
            self.ensemble.expire(keeper.session_id)
            self.alloc[r] = None  # the allocation lived in the crashed process's memory
        elif action == "ReplicaRestart":
            self._connect(r)
        else:
            raise ValueError(f"unknown action {action!r}; the module has {self.ACTIONS}")

    # --- the parameters of a spec edge, from the states it joins ---------------------------
    @staticmethod
    def infer_params(action: str, s: dict, t: dict) -> tuple:
        """TLC's dump names the action, not its arguments: read them off the change."""
        changed = [r.name for r in s["alloc"] if s["alloc"][r] != t["alloc"][r]]
        if action == "ReplicaChooseOwners":
            (r,) = changed
            a = t["alloc"][ModelValue(r)]
            return r, a["p"].name, tuple(sorted(o.name for o in a["owners"]))
        if action in ("ReplicaCreateAssignment", "ReplicaAdoptAssignment"):
            (r,) = changed
            return (r,)
        if action == "ReplicaSessionExpire":
            (r,) = s["active"] - t["active"]
            return (r.name,)
        if action == "ReplicaRestart":
            (r,) = t["active"] - s["active"]
            return (r.name,)
        raise ValueError(f"unknown action {action!r}")

    # --- the spec's invariants, on the abstract state --------------------------------------
    @staticmethod
    def invariants(v: dict, rf: int) -> dict[str, bool]:
        asg = v["asg"]
        return {
            "TypeOKInv": v["active"] <= set(v["alloc"]) and all(a["st"] in ("idle", "chosen") for a in v["alloc"].values()),
            "AssignmentChangesOnlyByCASInv": all(v["inv_based_on"][p] == asg[p]["version"] - 1
                                                 for p in asg if asg[p]["version"] != ABSENT),
            "ReplicationFactorInv": all(len(asg[p]["owners"]) == rf for p in asg if asg[p]["version"] != ABSENT),
            "RoutedToOwnersInv": all(asg[p]["owners"] == owners for p, owners in v["inv_routed"]),
            "NoPartitionEverAssignedFalseInv": all(asg[p]["version"] == ABSENT for p in asg),
        }

    # --- trying a step and taking it back ---------------------------------------------------
    def snapshot(self):
        return (self.ensemble.snapshot(), dict(self.sessions), {r: copy.copy(a) for r, a in self.alloc.items()},
                dict(self.based_on), set(self.routed))

    def restore(self, snap) -> None:
        tree, sessions, alloc, based_on, routed = snap
        self.ensemble.restore(tree)
        self.sessions, self.alloc = dict(sessions), {r: copy.copy(a) for r, a in alloc.items()}
        self.based_on, self.routed = dict(based_on), set(routed)

    def domain(self, action: str) -> list[tuple]:
        """Every parameter tuple of an action over the model's constants."""
        if action == "ReplicaChooseOwners":
            subsets = [s for k in range(1, self.rf + 1) for s in combinations(self.replicas, k)]
            return [(r, p, s) for r in self.replicas for p in self.partitions for s in subsets]
        return [(r,) for r in self.replicas]

    def accepted(self, action: str) -> list[tuple]:
        """The instances the reference takes here (each tried, then taken back)."""
        out = []
        for params in self.domain(action):
            snap = self.snapshot()
            try:
                self.step(action, params)
                out.append(params)
            except Exception as e:
                if not refused(e):
                    raise
            finally:
                self.restore(snap)
        return out

    def close(self) -> None:
        for k in [self.admin, *self.sessions.values()]:
            try:
                k.close()
            except Exception:
                pass


def refused(e: Exception) -> bool:
    from protocol.keeper import SessionExpiredError
    from protocol.registration import RegistrationError
    return isinstance(e, (GuardFailed, AlreadyAssigned, SessionExpiredError, RegistrationError))
