"""A replica lost for good, and the repair back to RF (issue 18; spec/FINDINGS.md F20), as
spec/rfc/SelectiveReplication.tla's DropReplica and RepairStart.

- `drop_replica`: ClickHouse's SYSTEM DROP REPLICA 'r' (refused for an active replica): the
  `replicas/{r}` subtree goes, and, what selective replication adds, r leaves every assignment,
  each in one multi with its migration: a CLONE into r is cancelled, a CLONE out of r goes on as
  a repair (its SWITCH then only adds the target: REASSIGN away from a dead owner), a SWITCH or
  CANCEL whose leaver is r is done. Each partition r owned is then short of RF.
- `repair_start`: for a partition short of RF, a migration with no source (`"src": null`),
  coordinated by a surviving owner, to an active replica that does not keep the partition. Its
  CLONE is migration.replica_clone_fetch as for any move; its SWITCH (migration.coordinator_switch)
  adds the target and removes nothing, so there is no CLEANUP. No admin CANCEL ends it.
- `system_repair`: what SYSTEM REBALANCE starts first: a repair of every partition short of RF
  with no migration in flight, to the least filled active replica allowed (placement.py's fill
  and fault domains), coordinated by an active owner.
"""

from __future__ import annotations

import json

from protocol.assignment import Assignment, GuardFailed, active_replicas, read_assignment
from protocol.keeper import Keeper, MultiError, NoNodeError, SetData
from protocol.layout import Layout
from protocol.migration import IN_FLIGHT, MigrationError, _write, at_limit, read_migration
from protocol.placement import Placement, PlacementError, allowed_owner, fill, read_placement


class ReplicaIsActive(GuardFailed):
    """SYSTEM DROP REPLICA of a replica whose is_active node exists."""


def replication_factor(keeper: Keeper, layout: Layout) -> int:
    return int(json.loads(keeper.get(layout.config)[0])["replication_factor"])


def _after_drop(mig: dict | None, name: str) -> dict | None:
    """The migration record once `name` is gone (the spec's CASE in DropReplica); None: unchanged."""
    if not mig:
        return None
    st = mig["state"]
    if st == "clone" and mig["dst"] == name:
        return {**mig, "state": "cancelled", "ended_by": "drop_replica"}
    if st == "clone" and mig["src"] == name:
        return {**mig, "src": None, "repair_of": name}
    if st == "switched" and mig["src"] == name:
        return {**mig, "state": "done", "ended_by": "drop_replica"}
    if st == "cancelling" and mig["dst"] == name:
        return {**mig, "state": "cancelled", "ended_by": "drop_replica"}
    return None


def drop_replica(keeper: Keeper, layout: Layout, name: str) -> list[str]:
    """SYSTEM DROP REPLICA 'name'. Refuses an active replica (ReplicaIsActive) and one that is
    not registered (GuardFailed). Returns the partitions it was taken out of."""
    if keeper.exists(layout.replica(name)) is None:
        raise GuardFailed("DropReplica", f"no replica {name!r}; replicas are {keeper.get_children(layout.replicas)}")
    if keeper.exists(layout.is_active(name)) is not None:
        raise ReplicaIsActive("DropReplica", f"replica {name!r} is active: SYSTEM DROP REPLICA removes only a "
                                             f"replica that is down (stop it first)")
    left = []
    for p in keeper.get_children(layout.assignments):
        for _ in range(100):   # a CAS lost to a concurrent step: read again
            a = read_assignment(keeper, layout, p)
            if a is None or name not in a.keepers():
                break
            mig, mig_version = read_migration(keeper, layout, p)
            new = Assignment(tuple(o for o in a.owners if o != name),
                             target=None if a.target == name else a.target,
                             leaving=None if a.leaving == name else a.leaving)
            after = _after_drop(mig, name)
            try:
                if after is None:
                    keeper.multi([SetData(layout.assignment(p), new.encode(), a.version)])
                else:
                    _write(keeper, layout, p, a, new, after, mig_version)
            except (GuardFailed, MultiError):
                continue
            left.append(p)
            break
        else:
            raise GuardFailed("DropReplica", f"{p} kept changing; try again")
    try:
        keeper.delete(layout.replica(name), recursive=True)
    except NoNodeError:
        pass
    return left


def repair_start(keeper: Keeper, layout: Layout, partition: str, coord: str, dst: str,
                 max_concurrent: int | None = 4) -> dict:
    """RepairStart(p, coord, dst): a CLONE with no source for a partition short of RF."""
    a = read_assignment(keeper, layout, partition)
    if a is None:
        raise MigrationError(f"partition {partition} is not assigned")
    rf = replication_factor(keeper, layout)
    if len(a.owners) >= rf:
        raise MigrationError(f"partition {partition} has its {rf} owners: nothing to repair")
    mig, mig_version = read_migration(keeper, layout, partition)
    if mig and mig["state"] in IN_FLIGHT:
        raise MigrationError(f"partition {partition} is already migrating ({mig['state']} {mig['src']} -> {mig['dst']})")
    active = active_replicas(keeper, layout)
    if coord not in a.owners or coord not in active:
        raise MigrationError(f"coordinator {coord!r} of the repair of {partition} is not an active owner "
                             f"(owners {list(a.owners)})")
    if dst not in active:
        raise MigrationError(f"replica {dst!r} is not active")
    if dst in a.keepers():
        raise MigrationError(f"replica {dst!r} already keeps {partition}")
    if at_limit(keeper, layout, max_concurrent):
        raise MigrationError(f"{max_concurrent} migrations already in flight (the concurrency limit)")
    new_mig = {"state": "clone", "src": None, "dst": dst, "coord": coord, "fetched": False, "repair": True}
    _write(keeper, layout, partition, a, Assignment(a.owners, target=dst), new_mig, mig_version)
    return new_mig


def short_partitions(keeper: Keeper, layout: Layout) -> list[str]:
    """Partitions with fewer owners than the replication factor."""
    rf = replication_factor(keeper, layout)
    out = []
    for p in keeper.get_children(layout.assignments):
        a = read_assignment(keeper, layout, p)
        if a is not None and len(a.owners) < rf:
            out.append(p)
    return out


def system_repair(keeper: Keeper, layout: Layout, max_concurrent: int | None = 4,
                  placement: Placement | None = None) -> list[tuple[str, None, str]]:
    """Start a repair of every partition short of RF that has no migration in flight, while the
    concurrency limit allows: to the least filled active replica allowed (not keeping it, in no
    domain of its owners), coordinated by its first active owner. A partition with no active
    owner, or no replica to take it, waits for a later call. Returns (partition, None, dst)."""
    short = short_partitions(keeper, layout)
    if not short:
        return []
    active = active_replicas(keeper, layout)
    if placement is None:
        try:
            placement = read_placement(keeper, layout, active)
        except PlacementError:
            placement = Placement()
    # Loads as planned: a CLONE in flight counted as switched (F13), a repair's target included.
    load = {r: 0 for r in active}
    for p in keeper.get_children(layout.assignments):
        a = read_assignment(keeper, layout, p)
        mig = read_migration(keeper, layout, p)[0] if a and a.target else None
        owners = set(a.owners) if a else set()
        if mig and mig["state"] == "clone":
            owners = (owners - {mig["src"]}) | {mig["dst"]}
        for o in owners:
            load[o] = load.get(o, 0) + 1
    started = []
    for p in short:
        if at_limit(keeper, layout, max_concurrent):
            break
        a = read_assignment(keeper, layout, p)
        mig = read_migration(keeper, layout, p)[0]
        if mig and mig["state"] in IN_FLIGHT:
            continue
        coords = [o for o in sorted(a.owners) if o in active]
        takers = sorted((r for r in active if r not in a.keepers() and allowed_owner(placement, a.owners, None, r)),
                        key=lambda r: (fill(placement, r, load.get(r, 0)), r))
        if not coords or not takers:
            continue
        try:
            repair_start(keeper, layout, p, coords[0], takers[0], max_concurrent)
        except (MigrationError, GuardFailed):
            continue
        load[takers[0]] = load.get(takers[0], 0) + 1
        started.append((p, None, takers[0]))
    return started


__all__ = ["ReplicaIsActive", "drop_replica", "repair_start", "system_repair", "short_partitions", "replication_factor"]
