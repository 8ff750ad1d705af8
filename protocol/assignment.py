"""Partition assignment (RFC phase 1b), step for step with spec/Assignment.tla.

`selective/assignments/{partition}` holds JSON with three roles, not the RFC's bare
"replica1,replica3": the owners, the CLONE target and the replica leaving after SWITCH or
CANCEL (spec/FINDINGS.md F5, F6). Its znode version is the CAS token.

Each step has the name and guard of a spec action; a step whose guard is false raises
GuardFailed and changes nothing. `Bugs` switches reproduce the RFC-as-written and broken variants.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Callable

from protocol.keeper import BadVersionError, Keeper, NodeExistsError, NoNodeError
from protocol.layout import Layout
from protocol.placement import Placement, PlacementError, is_least_filled, least_filled, read_placement


class GuardFailed(Exception):
    """A step was asked to run while its spec guard is false; nothing was changed."""

    def __init__(self, action: str, reason: str):
        super().__init__(f"{action}: {reason}")
        self.action, self.reason = action, reason


class CorruptAssignment(ValueError):
    """An assignment znode whose content is not a valid assignment."""


class AlreadyAssigned(GuardFailed):
    """The partition got an assignment meanwhile: the allocator reads it instead."""


class NotEnoughActiveReplicas(GuardFailed):
    """Fewer active replicas than replication_factor: the INSERT must fail (spec F1)."""


@dataclass(frozen=True)
class Assignment:
    owners: tuple[str, ...]
    target: str | None = None
    leaving: str | None = None
    version: int = -1  # znode version it was read at; -1 when not read from Keeper

    def keepers(self) -> set[str]:
        """Replicas that keep replicating the partition (owners, CLONE target, leaving)."""
        return set(self.owners) | {r for r in (self.target, self.leaving) if r}

    def encode(self) -> bytes:
        return json.dumps({"owners": sorted(self.owners), "target": self.target, "leaving": self.leaving},
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, version: int, path: str) -> "Assignment":
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise CorruptAssignment(f"{path}: not JSON: {data[:60]!r}") from None
        if not isinstance(obj, dict) or set(obj) != {"owners", "target", "leaving"}:
            raise CorruptAssignment(f"{path}: expected keys owners, target, leaving; found {obj!r:.80}")
        owners = obj["owners"]
        if not isinstance(owners, list) or not owners or not all(isinstance(o, str) and o for o in owners):
            raise CorruptAssignment(f"{path}: owners must be a non-empty list of replica names, not {owners!r}")
        if len(set(owners)) != len(owners):
            raise CorruptAssignment(f"{path}: owners repeat a replica: {owners}")
        for role in ("target", "leaving"):
            v = obj[role]
            if v is not None and (not isinstance(v, str) or v in owners):
                raise CorruptAssignment(f"{path}: {role} must be null or a replica that is not an owner, not {v!r}")
        return cls(tuple(sorted(owners)), obj["target"], obj["leaving"], version)


def read_assignment(keeper: Keeper, layout: Layout, partition: str) -> Assignment | None:
    path = layout.assignment(partition)
    try:
        data, stat = keeper.get(path)
    except NoNodeError:
        return None
    return Assignment.decode(data, stat.version, path)


def active_replicas(keeper: Keeper, layout: Layout) -> list[str]:
    return [r for r in keeper.get_children(layout.replicas) if keeper.exists(layout.is_active(r)) is not None]


def loads(keeper: Keeper, layout: Layout) -> dict[str, int]:
    """Partitions owned per replica: the RFC's "count partitions already assigned to each replica"."""
    count: dict[str, int] = {}
    for p in keeper.get_children(layout.assignments):
        a = read_assignment(keeper, layout, p)
        for o in a.owners if a else ():
            count[o] = count.get(o, 0) + 1
    return count


@dataclass
class Allocation:
    """What a replica holds in memory between choosing owners and creating the znode."""

    replica: str
    partition: str
    owners: tuple[str, ...]
    read_version: int = -1  # the version seen when choosing (-1: absent), for AssignmentChangesOnlyByCASInv
    routed_to: tuple[str, ...] = field(default=())


def replica_choose_owners(keeper: Keeper, layout: Layout, replica: str, partition: str, rf: int,
                          bugs: frozenset[str] = frozenset(), rng: random.Random | None = None,
                          owners: tuple[str, ...] | None = None, placement: Placement | None = None) -> Allocation:
    """ReplicaChooseOwners: list active replicas, count their partitions, pick the RF least loaded.
    `owners` forces one of the choices the spec allows (conformance replay); any other is refused.
    Where replicas declared fault domains or capacities (`placement`, read from Keeper unless
    given), the RF least full in distinct domains (placement.least_filled); with none declared,
    exactly the spec's LeastLoaded."""
    active = active_replicas(keeper, layout)
    if replica not in active:
        raise GuardFailed("ReplicaChooseOwners", f"replica {replica!r} is not active")
    if keeper.exists(layout.assignment(partition)) is not None:
        raise AlreadyAssigned("ReplicaChooseOwners", f"partition {partition} is already assigned")
    if len(active) < rf and "allow_short_assignment" not in bugs:
        raise NotEnoughActiveReplicas("ReplicaChooseOwners",
                                      f"replication_factor {rf} but only {len(active)} active replicas {active}")
    load = loads(keeper, layout)
    # Least loaded first; ties broken by a seeded shuffle (the spec allows any tie-break).
    order = sorted(active)
    (rng or random.Random(0)).shuffle(order)
    if placement is None:
        try:
            placement = read_placement(keeper, layout, active)
        except PlacementError as e:
            raise GuardFailed("ReplicaChooseOwners", str(e)) from None
    if placement.configured and len(active) >= rf:
        try:
            chosen = least_filled(active, load, rf, placement, order)
        except PlacementError as e:
            raise NotEnoughActiveReplicas("ReplicaChooseOwners", str(e)) from None
        if owners is not None and not is_least_filled(owners, active, load, rf, placement):
            raise GuardFailed("ReplicaChooseOwners", f"{sorted(owners)} are not {rf} least-full active replicas in "
                                                     f"distinct domains (loads {load}, {placement})")
        return Allocation(replica, partition, tuple(sorted(owners if owners is not None else chosen)))
    chosen = sorted(order, key=lambda r: load.get(r, 0))[:rf]
    if owners is not None:
        want = min(rf, len(active))
        left_out = set(active) - set(owners)
        if (len(set(owners)) != want or not set(owners) <= set(active)
                or any(load.get(x, 0) > load.get(y, 0) for x in owners for y in left_out)):
            raise GuardFailed("ReplicaChooseOwners", f"{sorted(owners)} are not {want} least-loaded active replicas "
                                                     f"(loads {load}, active {active})")
        chosen = list(owners)
    return Allocation(replica, partition, tuple(sorted(chosen)))


def replica_create_assignment(keeper: Keeper, layout: Layout, alloc: Allocation,
                              bugs: frozenset[str] = frozenset()) -> Assignment:
    """ReplicaCreateAssignment: CAS-create the znode (blind_write: set it whatever it holds)."""
    path = layout.assignment(alloc.partition)
    value = Assignment(alloc.owners).encode()
    if "blind_write" in bugs:
        try:
            stat = keeper.set(path, value)  # no expected version: overwrites a winner
        except NoNodeError:
            keeper.create(path, value)
            stat = keeper.exists(path)
        alloc.routed_to = alloc.owners
        return Assignment(alloc.owners, version=stat.version)
    try:
        keeper.create(path, value)
    except NodeExistsError:
        raise GuardFailed("ReplicaCreateAssignment", f"{path} exists: another allocator won") from None
    alloc.routed_to = alloc.owners
    return Assignment(alloc.owners, version=0)


def replica_adopt_assignment(keeper: Keeper, layout: Layout, alloc: Allocation,
                             bugs: frozenset[str] = frozenset()) -> Assignment:
    """ReplicaAdoptAssignment: the create found the node; route to the winner's owners."""
    if "blind_write" in bugs:
        raise GuardFailed("ReplicaAdoptAssignment", "with blind_write a replica never adopts")
    a = read_assignment(keeper, layout, alloc.partition)
    if a is None:
        raise GuardFailed("ReplicaAdoptAssignment", f"partition {alloc.partition} has no assignment yet")
    alloc.routed_to = a.owners
    return a


def replica_allocate(keeper: Keeper, layout: Layout, replica: str, partition: str, rf: int,
                     bugs: frozenset[str] = frozenset(), rng: random.Random | None = None,
                     owners: tuple[str, ...] | None = None, placement: Placement | None = None) -> Assignment:
    """The RFC's allocation on first INSERT: choose, CAS-create, or adopt the winner's.
    `owners` forces one of the choices the spec allows (conformance replay)."""
    while True:
        existing = read_assignment(keeper, layout, partition)
        if existing is not None:
            return existing
        try:
            alloc = replica_choose_owners(keeper, layout, replica, partition, rf, bugs, rng, owners, placement)
        except AlreadyAssigned:
            continue  # another allocator created it between our read and our choice: read it
        return replica_commit_allocation(keeper, layout, alloc, bugs)


def replica_commit_allocation(keeper: Keeper, layout: Layout, alloc: Allocation,
                              bugs: frozenset[str] = frozenset()) -> Assignment:
    """The write half of an allocation (replica_choose_owners is the read half): CAS-create the
    assignment, or adopt the winner's. Apart from replica_allocate, only a driver that races two
    allocators between the halves calls it (reference/races.py's `rival` action)."""
    try:
        return replica_create_assignment(keeper, layout, alloc, bugs)
    except GuardFailed:
        return replica_adopt_assignment(keeper, layout, alloc, bugs)


def cas_update(keeper: Keeper, layout: Layout, partition: str, change) -> Assignment:
    """Read, change, set with the version read; on BadVersionError re-read and retry."""
    while True:
        current = read_assignment(keeper, layout, partition)
        if current is None:
            raise GuardFailed("cas_update", f"partition {partition} is not assigned")
        new = change(current)
        try:
            stat = keeper.set(layout.assignment(partition), new.encode(), version=current.version)
            return Assignment(new.owners, new.target, new.leaving, stat.version)
        except BadVersionError:
            continue


def selective_assignments_rows(keeper: Keeper, layout: Layout,
                               corrupt: Callable[[str, CorruptAssignment], None] | None = None) -> list[dict]:
    """Rows of system.selective_assignments. A corrupt assignment znode raises, unless `corrupt`
    is given: then it is told the partition and the error, and the row is left out."""
    rows = []
    for p in keeper.get_children(layout.assignments):
        try:
            a = read_assignment(keeper, layout, p)
        except CorruptAssignment as e:
            if corrupt is None:
                raise
            corrupt(p, e)
            continue
        rows.append({"partition_id": p, "replicas": list(a.owners), "clone_target": a.target,
                     "leaving_replica": a.leaving, "version": a.version})
    return rows
