"""Migration CLONE -> SWITCH -> CLEANUP (RFC phase 2a-2c), step for step with
spec/rfc/SelectiveReplication.tla: AdminReassign, ReplicaCloneFetch, CoordinatorSwitch,
ReplicaCleanup, CoordinatorCancel.

`selective/migrations/{partition}` holds the migration's state as JSON. Every step changes the
assignment and that state in one multi, with the versions it read, so a coordinator that
crashes between steps leaves a state any replica can continue from (ReplicaTakeOverMigration
is just the next step, called by another replica).
"""

from __future__ import annotations

import json

from protocol.assignment import Assignment, GuardFailed, active_replicas, read_assignment
from protocol.keeper import BadVersionError, Create, Keeper, MultiError, NoNodeError, SetData
from protocol.layout import Layout
from protocol.log_entry import DROP_PART, DROP_RANGE, GET_PART, MUTATE_PART, LogEntry
from protocol.parts import PartName, active_set
from protocol.replica import Replica, _children, caught_up, caught_up_to, log_number

IN_FLIGHT = ("clone", "switched", "cancelling")


class MigrationError(ValueError):
    """A REASSIGN / REBALANCE request that cannot be started; nothing was changed."""


def read_migration(keeper: Keeper, layout: Layout, partition: str) -> tuple[dict | None, int]:
    try:
        data, stat = keeper.get(layout.migration(partition))
    except NoNodeError:
        return None, -1
    return json.loads(data), stat.version


def migrations_in_flight(keeper: Keeper, layout: Layout) -> list[str]:
    return [p for p in keeper.get_children(layout.migrations)
            if (read_migration(keeper, layout, p)[0] or {}).get("state") in IN_FLIGHT]


def _write(keeper: Keeper, layout: Layout, partition: str, a: Assignment, new: Assignment,
           mig: dict, mig_version: int) -> None:
    path = layout.migration(partition)
    ops = [SetData(layout.assignment(partition), new.encode(), a.version)]
    ops.append(Create(path, json.dumps(mig).encode()) if mig_version < 0
               else SetData(path, json.dumps(mig).encode(), mig_version))
    try:
        keeper.multi(ops)
    except MultiError as e:
        raise GuardFailed("migration step", f"{partition} changed concurrently ({e}); re-read and retry") from e


def at_limit(keeper: Keeper, layout: Layout, max_concurrent: int | None) -> bool:
    """No migration may start: StartMigration's Cardinality(MigrationsInFlight) <
    MaxConcurrentMigrations is false (None: the table has no limit)."""
    return max_concurrent is not None and len(migrations_in_flight(keeper, layout)) >= max_concurrent


def admin_reassign(keeper: Keeper, layout: Layout, partition: str, dst: str, src: str | None = None,
                   max_concurrent: int | None = 4) -> dict:
    """ALTER TABLE t REASSIGN PARTITION p TO REPLICA dst: CLONE adds dst as the target. At most
    `max_concurrent` migrations in flight (None: no limit; SYSTEM REBALANCE's default schedule has
    none of its own, scheduler.py)."""
    a = read_assignment(keeper, layout, partition)
    if a is None:
        raise MigrationError(f"partition {partition} is not assigned (no INSERT has created it)")
    known = keeper.get_children(layout.replicas)
    if dst not in known:
        raise MigrationError(f"unknown replica {dst!r}; replicas are {known}")
    if dst not in active_replicas(keeper, layout):
        raise MigrationError(f"replica {dst!r} is not active")
    if dst in a.owners:
        raise MigrationError(f"replica {dst!r} already owns {partition}")
    mig, mig_version = read_migration(keeper, layout, partition)
    if mig and mig["state"] in IN_FLIGHT:
        raise MigrationError(f"partition {partition} is already migrating ({mig['state']} {mig['src']} -> {mig['dst']})")
    src = src or a.owners[0]
    if src not in a.owners:
        raise MigrationError(f"source {src!r} does not own {partition}; owners are {list(a.owners)}")
    if src not in active_replicas(keeper, layout):
        # The source coordinates the CLONE (spec StartMigration's src \in active); a takeover
        # covers only a coordinator that fails later.
        raise MigrationError(f"source {src!r} of {partition} is not active")
    if at_limit(keeper, layout, max_concurrent):
        raise MigrationError(f"{max_concurrent} migrations already in flight (the concurrency limit)")
    new_mig = {"state": "clone", "src": src, "dst": dst, "coord": src, "fetched": False}
    _write(keeper, layout, partition, a, Assignment(a.owners, target=dst), new_mig, mig_version)
    return new_mig


def replica_clone_fetch(dst: Replica, partition: str, replicas: dict[str, Replica]) -> int:
    """CLONE's bulk copy, by the target, as spec ReplicaCloneFetch. Fixed: re-read the assignment
    (its filter keeps the partition from now on); queue a fetch of every active part of the
    partition registered in Keeper by any replica (F3; outdated parts, covered by what replaced
    them, are left out); re-queue the MUTATE_PART and DROP_RANGE entries of the partition that a
    keeper has still to apply: those in the keepers' queues and those in the log between the
    keeper furthest behind and the target's own log_pointer, which it skipped (F8). No entry older
    than every keeper's log_pointer is read, so a trimmed log cannot hide one (F16). RFC as written
    (clone_from_source_only): copy the source's local parts. Returns the parts queued/copied."""
    keeper, layout = dst.keeper, dst.layout
    mig, mig_version = read_migration(keeper, layout, partition)
    if not mig or mig["state"] != "clone" or mig["fetched"] or mig["dst"] != dst.name:
        raise GuardFailed("ReplicaCloneFetch", f"no unfetched CLONE of {partition} into {dst.name}: {mig}")
    if mig["src"] is None and "repair_without_clone" in dst.bugs:
        # The naive repair (F20): the new owner is left to the log, whose entries of the partition
        # below its log_pointer it skipped while it was no keeper: nothing brings them.
        dst.replica_refresh_cache(partition)
        names = []
    elif "clone_from_source_only" in dst.bugs:
        if mig["src"] not in replicas:
            raise GuardFailed("ReplicaCloneFetch", f"source {mig['src']} of {partition} is down (RFC: copy from it)")
        src = replicas[mig["src"]]
        names = src.store.names(partition)
        for n in names:
            dst.store.fetch_from(src.store, n)
            keeper.create(f"{layout.parts(dst.name)}/{n}")
    else:
        a = dst.replica_refresh_cache(partition)
        registered = [PartName.parse(n) for r in keeper.get_children(layout.replicas)
                      for n in _children(keeper, layout.parts(r))]
        names = active_set(n for n in registered if n.partition == partition)
        # As cloneReplica queues them: no source replica, no block id.
        texts = [LogEntry(GET_PART, new_part_name=str(n), create_time=int(dst.clock())).format() for n in names]
        # F8's fix: the partition's mutations and drops a keeper has still to apply, 26.x's DROP_PART too
        texts += [data for data, e in _skipped_entries(dst, partition, a)
                  if e.type in (MUTATE_PART, DROP_RANGE, DROP_PART)]
        queued = {e.format() for _, e in dst.queue()}   # pulled since the target became a keeper
        for data in dict.fromkeys(texts):
            if data not in queued:
                keeper.create(f"{layout.queue(dst.name)}/queue-", data, sequential=True)
    # The catch-up position SWITCH waits for (F23), the log's length now: what the spec's
    # ReplicaCloneFetch fixes as mig.pos.
    fetched = {**mig, "fetched": True, "catchup_to": log_head(keeper, layout)}
    keeper.set(layout.migration(partition), json.dumps(fetched).encode(), mig_version)
    return len(names)


def log_head(keeper: Keeper, layout: Layout) -> int:
    """The number the next log entry will take (the spec's Len(log)): one past the newest entry's,
    or, once the cleanup thread has trimmed every entry, the furthest log_pointer (it trims only
    what every replica has pulled)."""
    numbers = [log_number(n) for n in keeper.get_children(layout.log)]
    if numbers:
        return max(numbers) + 1
    return max((int(keeper.get(layout.log_pointer(r))[0]) for r in keeper.get_children(layout.replicas)), default=0)


def _skipped_entries(dst: Replica, partition: str, a: Assignment) -> list[tuple[bytes, LogEntry]]:
    """The partition's entries a keeper has still to apply, which the target may have skipped
    before it was one (F8); with clone_reads_skipped_entries_from_log, F8's first fix instead:
    every entry of the partition still in the log below the target's log_pointer."""
    keeper, layout = dst.keeper, dst.layout
    if "clone_ignores_skipped_entries" in dst.bugs:
        return []
    ptr = int(keeper.get(layout.log_pointer(dst.name))[0])
    out = []
    if "clone_reads_skipped_entries_from_log" in dst.bugs:
        lo = 0
    else:
        keepers = [k for k in sorted(a.keepers()) if k != dst.name and keeper.get(layout.is_lost(k))[0] != b"1"]
        lo = min([int(keeper.get(layout.log_pointer(k))[0]) for k in keepers] + [ptr])
        for k in keepers:
            q = layout.queue(k)
            for n in _children(keeper, q):
                try:
                    data = keeper.get(f"{q}/{n}")[0]
                except NoNodeError:
                    continue  # executed meanwhile: its effect is in the keeper's parts
                e = LogEntry.parse(data, f"{q}/{n}")
                if e.partition == partition:
                    out.append((data, e))
    for n in keeper.get_children(layout.log):
        if lo <= log_number(n) < ptr:
            data = keeper.get(f"{layout.log}/{n}")[0]
            e = LogEntry.parse(data, f"{layout.log}/{n}")
            if e.partition == partition:
                out.append((data, e))
    return out


def coordinator_switch(keeper: Keeper, layout: Layout, partition: str, dst: str,
                       bugs: frozenset[str] = frozenset()) -> Assignment:
    """SWITCH: the source becomes `leaving` (fixed, F6) or is dropped (source_stops_at_switch).
    `dst` names the target the coordinator switches to; it must be the migration's."""
    mig, mig_version = read_migration(keeper, layout, partition)
    if not mig or mig["state"] != "clone" or not mig["fetched"]:
        raise GuardFailed("CoordinatorSwitch", f"{partition} is not a fetched CLONE: {mig}")
    _require_live_coordinator(keeper, layout, "CoordinatorSwitch", partition, mig)
    if dst != mig["dst"]:
        raise GuardFailed("CoordinatorSwitch", f"{dst} is not the target of {partition}'s migration ({mig['dst']} is)")
    if "switch_without_catchup" not in bugs and not _caught_up_for_switch(keeper, layout, dst, partition, mig):
        raise GuardFailed("CoordinatorSwitch", f"target {dst} has not caught up on {partition} to log entry "
                                               f"{mig.get('catchup_to', 'the end')}")
    a = read_assignment(keeper, layout, partition)
    src = mig["src"]
    if src is None and "repair_moves_coordinator" in bugs and mig["coord"] in a.owners:
        # The broken variant: the repair's SWITCH takes its coordinator, an owner, for the source it
        # moves away from, as PR #102244's rebalancer does with its phase-1 migration (PR-F9): the
        # coordinator leaves through CLEANUP and the partition stays one owner short.
        src = mig["coord"]
    owners = tuple(sorted((set(a.owners) - {src}) | {mig["dst"]}))
    # A repair (no source: protocol/repair.py, F20) only adds the target: nothing leaves, no CLEANUP.
    repair = src is None
    leaving = None if "source_stops_at_switch" in bugs or repair else src
    new = Assignment(owners, target=None, leaving=leaving)
    _write(keeper, layout, partition, a, new, {**mig, "src": src, "state": "done" if repair else "switched"},
           mig_version)
    return new


def _caught_up_for_switch(keeper: Keeper, layout: Layout, dst: str, partition: str, mig: dict) -> bool:
    """The spec's CaughtUpTo(dst, p, mig.pos): up to the position the fetch fixed. A migration
    fetched before positions were fixed has none: caught up to the end, as then."""
    if mig.get("catchup_to") is None:
        return caught_up(keeper, layout, dst, partition)
    return caught_up_to(keeper, layout, dst, partition, mig["catchup_to"])


def leaver_unique_parts(keeper: Keeper, layout: Layout, partition: str, mig: dict, leaver_parts: list[PartName],
                        bugs: frozenset[str] = frozenset()) -> list[PartName]:
    """The spec's LeaverRedundant, its negation: the parts of the partition the leaver holds that
    no owner staying (not lost) has a part covering, by the parts the owners have registered in
    Keeper; its CLEANUP must not delete those. A switched source: SWITCH waits for the target only
    up to the position the fetch fixed (F23), so what the source wrote after it may be the
    source's alone until an owner fetches it. A cancelled target only copied, but the owner it
    copied from may since have been dropped for good (SYSTEM DROP REPLICA) before another owner
    fetched the part, and the target's copy is then the last (F32). None to wait for with
    switch_without_catchup or cleanup_without_catchup (a switched source) or
    cancel_cleanup_trusts_owners (a cancelled target)."""
    st = mig["state"]
    if st not in ("switched", "cancelling"):
        return []
    if st == "switched" and ("switch_without_catchup" in bugs or "cleanup_without_catchup" in bugs):
        return []
    if st == "cancelling" and "cancel_cleanup_trusts_owners" in bugs:
        return []
    a = read_assignment(keeper, layout, partition)
    staying = [o for o in a.owners if not _is_lost(keeper, layout, o)]
    held = [PartName.parse(n) for o in staying for n in _children(keeper, layout.parts(o))]
    return [x for x in leaver_parts if not any(y.covers(x) for y in held if y.partition == partition)]


def _is_lost(keeper: Keeper, layout: Layout, r: str) -> bool:
    try:
        return keeper.get(layout.is_lost(r))[0] == b"1"
    except NoNodeError:
        return False


def coordinator_cancel(keeper: Keeper, layout: Layout, partition: str, target: Replica | None = None,
                       bugs: frozenset[str] = frozenset()) -> Assignment:
    """Cancel before SWITCH: the target becomes `leaving` and goes through CLEANUP (F7).
    cancel_drops_target_at_once: the target is removed and `target` drops its copy now."""
    mig, mig_version = read_migration(keeper, layout, partition)
    if not mig or mig["state"] != "clone":
        raise GuardFailed("CoordinatorCancel", f"{partition} is not in CLONE: {mig}")
    if mig["src"] is None:
        # A repair is owed, not chosen (spec RepairStart): a target that goes for good is cancelled
        # by its SYSTEM DROP REPLICA.
        raise GuardFailed("CoordinatorCancel", f"{partition}'s migration is a repair, which is not cancelled")
    _require_live_coordinator(keeper, layout, "CoordinatorCancel", partition, mig)
    a = read_assignment(keeper, layout, partition)
    if "cancel_drops_target_at_once" in bugs:
        new = Assignment(a.owners, target=None, leaving=a.leaving)
        _write(keeper, layout, partition, a, new, {**mig, "state": "cancelled"}, mig_version)
        if target is not None:
            target.drop_partition_locally(partition)
        return new
    new = Assignment(a.owners, target=None, leaving=mig["dst"])
    _write(keeper, layout, partition, a, new, {**mig, "state": "cancelling"}, mig_version)
    return new


def _require_live_coordinator(keeper: Keeper, layout: Layout, action: str, partition: str, mig: dict) -> None:
    if keeper.exists(layout.is_active(mig["coord"])) is None:
        raise GuardFailed(action, f"coordinator {mig['coord']} of {partition} is not active; a replica must take over")


def replica_take_over_migration(keeper: Keeper, layout: Layout, partition: str, replica: str) -> dict:
    """ReplicaTakeOverMigration: an active replica becomes the coordinator of a CLONE whose
    coordinator is gone. CAS on the migration znode, so two replicas cannot both take over."""
    mig, mig_version = read_migration(keeper, layout, partition)
    if not mig or mig["state"] != "clone":
        raise GuardFailed("ReplicaTakeOverMigration", f"{partition} is not in CLONE: {mig}")
    if keeper.exists(layout.is_active(mig["coord"])) is not None:
        raise GuardFailed("ReplicaTakeOverMigration", f"coordinator {mig['coord']} of {partition} is active")
    if keeper.exists(layout.is_active(replica)) is None:
        raise GuardFailed("ReplicaTakeOverMigration", f"{replica} is not active")
    new = {**mig, "coord": replica}
    try:
        keeper.set(layout.migration(partition), json.dumps(new).encode(), mig_version)
    except BadVersionError:
        raise GuardFailed("ReplicaTakeOverMigration", f"{partition}'s migration changed concurrently") from None
    return new


def replica_cleanup(leaver: Replica, partition: str, bugs: frozenset[str] = frozenset()) -> None:
    """CLEANUP on the leaving replica, once every active replica's published map has seen the
    current assignment and no started query is still to read the partition here (what
    old_parts_lifetime must outlast); cleanup_no_delay skips the wait."""
    keeper, layout = leaver.keeper, leaver.layout
    mig, mig_version = read_migration(keeper, layout, partition)
    if not mig or mig["state"] not in ("switched", "cancelling"):
        raise GuardFailed("ReplicaCleanup", f"{partition} has no SWITCH or CANCEL to clean up after: {mig}")
    who = mig["src"] if mig["state"] == "switched" else mig["dst"]
    if who != leaver.name:
        raise GuardFailed("ReplicaCleanup", f"{leaver.name} is not the replica leaving {partition} ({who} is)")
    unique = leaver_unique_parts(keeper, layout, partition, mig, leaver.store.names(partition), bugs)
    if unique:
        raise GuardFailed("ReplicaCleanup", f"{leaver.name} holds {', '.join(map(str, unique))} of {partition}, which "
                                            f"no owner staying has yet")
    a = read_assignment(keeper, layout, partition)
    if "cleanup_no_delay" not in bugs:
        if leaver.pins.get(partition):
            raise GuardFailed("ReplicaCleanup", f"{leaver.pins[partition]} running queries will read {partition} on {leaver.name}")
        stale = _maps_not_seen(keeper, layout, partition, a.version)
        if stale:
            raise GuardFailed("ReplicaCleanup", f"maps of {stale} have not seen version {a.version} of {partition}")
    done = {**mig, "state": "done" if mig["state"] == "switched" else "cancelled"}
    _write(keeper, layout, partition, a, Assignment(a.owners, a.target, leaving=None), done, mig_version)
    leaver.replica_refresh_cache(partition)  # its own filter stops keeping the partition at once
    leaver.drop_partition_locally(partition)


def _maps_not_seen(keeper: Keeper, layout: Layout, partition: str, version: int) -> list[str]:
    """Active replicas whose published map of `partition` is older than `version`."""
    stale = []
    for r in active_replicas(keeper, layout):
        try:
            seen = int(keeper.get(layout.map_version(r, partition))[0])
        except NoNodeError:
            seen = -1
        if seen < version:
            stale.append(r)
    return stale


def replica_cleanup_for_down_leaver(rep: Replica, partition: str, bugs: frozenset[str] = frozenset()) -> str:
    """CLEANUP on behalf of a leaving replica (the source after SWITCH, the target after CANCEL)
    that is down, so that a migration whose leaver stays down ends. An active replica records the
    end (done / cancelled, `leaving` cleared) once every active map has seen the current
    assignment; the leaver's copy is not read by anyone from then on (no map lists it) and it
    drops it when it registers again, before it serves (`drop_foreign_partitions`). A down
    replica's query pins went with it. The caller decides when the leaver has been down long
    enough (Cluster.down_timeout). Returns the leaver's name."""
    keeper, layout = rep.keeper, rep.layout
    mig, mig_version = read_migration(keeper, layout, partition)
    if not mig or mig["state"] not in ("switched", "cancelling"):
        raise GuardFailed("ReplicaCleanupForDownLeaver", f"{partition} has no SWITCH or CANCEL to end: {mig}")
    who = mig["src"] if mig["state"] == "switched" else mig["dst"]
    if keeper.exists(layout.is_active(who)) is not None:
        raise GuardFailed("ReplicaCleanupForDownLeaver", f"leaver {who} of {partition} is active: it cleans up itself")
    registered = active_set(n for n in map(PartName.parse, _children(keeper, layout.parts(who))) if n.partition == partition)
    unique = leaver_unique_parts(keeper, layout, partition, mig, registered, bugs)
    if unique:
        raise GuardFailed("ReplicaCleanupForDownLeaver", f"{who} holds {', '.join(map(str, unique))} of {partition}, "
                                                         f"which no owner staying has yet")
    a = read_assignment(keeper, layout, partition)
    stale = [] if "down_leaver_cleanup_ignores_maps" in bugs else _maps_not_seen(keeper, layout, partition, a.version)
    if stale:
        raise GuardFailed("ReplicaCleanupForDownLeaver", f"maps of {stale} have not seen version {a.version} of {partition}")
    done = {**mig, "state": "done" if mig["state"] == "switched" else "cancelled", "ended_by": rep.name}
    _write(keeper, layout, partition, a, Assignment(a.owners, a.target, leaving=None), done, mig_version)
    rep.replica_refresh_cache(partition)
    return who


def drop_foreign_partitions(rep: Replica, known_only: bool = False) -> list[str]:
    """Drop the local copy of every partition this replica neither owns, CLONEs into nor is
    leaving. At start-up, after load_map (a CLEANUP done on its behalf while it was down); and in
    the migrate step with `known_only` (only partitions its map has), for a CLEANUP whose state
    was written and whose local drop was cut short by Keeper going away: the state says done, so
    CLEANUP itself does not run again. Idempotent. With restart_keeps_foreign_parts nothing is
    dropped."""
    if "restart_keeps_foreign_parts" in rep.bugs:
        return []
    mine = {p for p, a in rep.cache.items() if rep.name in a.keepers()}
    # Queued entries too, as the spec's ReplicaRestart drops them: a CLONE target cancelled while
    # it was down may hold the CLONE's fetches and no part yet, and would fetch the partition back.
    held = {n.partition for n in rep.store.names()} | {e.partition for _, e in rep.queue() if e.partition}
    if known_only:
        held &= set(rep.cache)
    dropped = sorted(held - mine)
    for p in dropped:
        rep.drop_partition_locally(p)
    return dropped


def migrations_rows(keeper: Keeper, layout: Layout) -> list[dict]:
    """Rows of a system.selective_migrations table."""
    return [{"partition_id": p, **(read_migration(keeper, layout, p)[0] or {})}
            for p in keeper.get_children(layout.migrations)]


__all__ = ["MigrationError", "admin_reassign", "replica_clone_fetch", "coordinator_switch", "coordinator_cancel",
           "replica_cleanup", "replica_cleanup_for_down_leaver", "drop_foreign_partitions", "migrations_rows", "caught_up", "replica_take_over_migration"]
