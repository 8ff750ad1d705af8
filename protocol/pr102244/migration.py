"""The PR's migration, CLONE -> SWITCH -> DONE or CLONE -> FAILED (PR102244.md M7-M12), action
for action with spec/pr102244/PR102244.tla: StartClone, WriteCloneEntries, Rescan (fixed design only),
SignalComplete, Switch, Done, Fail, TakeOver.

`/migrations/<uuid>` holds the migration's metadata as JSON (partition, state, source, target,
coordinator, source_parts_snapshot, written, rescanned, aver0: the assignment version the CLONE
multi left, log_at_switch); its child `clone_complete` is the target's signal. Every step writes
what it changes in one multi with the versions it read, so a replica that takes over from a dead
coordinator continues from Keeper alone. A step whose guard is false raises GuardFailed and
changes nothing.
"""

from __future__ import annotations

import json
import uuid as uuidlib

from protocol.assignment import GuardFailed, active_replicas
from protocol.keeper import Check, Create, Delete, Keeper, MultiError, NoNodeError, SetData
from protocol.layout import Layout
from protocol.log_entry import GET_PART, LogEntry
from protocol.parts import PartName, active_set
from protocol.pr102244 import layout as pr_layout
from protocol.pr102244.assignment import PRAssignment, read_assignment, read_count, set_count
from protocol.replica import Replica, _children, log_number, queued_of


def read_migration(keeper: Keeper, layout: Layout, mig_id: str) -> tuple[dict | None, int]:
    try:
        data, stat = keeper.get(pr_layout.migration(layout, mig_id))
    except NoNodeError:
        return None, -1
    return json.loads(data), stat.version


def read_migrations(keeper: Keeper, layout: Layout) -> dict[str, tuple[dict, int]]:
    """Every migration node, by id (DONE and FAILED remove theirs: all of these are in flight)."""
    out = {}
    for m in _children(keeper, layout.migrations):
        mig, version = read_migration(keeper, layout, m)
        if mig is not None:
            out[m] = (mig, version)
    return out


def registered_parts(keeper: Keeper, layout: Layout, replica: str, partition: str) -> list[PartName]:
    """replicas/{r}/parts of the partition, active ones (outdated parts a merge covers left out)."""
    names = [PartName.parse(n) for n in _children(keeper, layout.parts(replica))]
    return active_set(n for n in names if n.partition == partition)


def registered_anywhere(keeper: Keeper, layout: Layout, partition: str) -> list[PartName]:
    """Registered: every part of the partition registered in Keeper by any replica."""
    return active_set(n for r in _children(keeper, layout.replicas) for n in registered_parts(keeper, layout, r, partition))


def _mig(keeper: Keeper, layout: Layout, mig_id: str, action: str, state: str) -> tuple[dict, int]:
    mig, version = read_migration(keeper, layout, mig_id)
    if mig is None or mig["state"] != state:
        raise GuardFailed(action, f"migration {mig_id} is {'gone' if mig is None else mig['state']}, not {state}")
    return mig, version


def _as_coordinator(keeper: Keeper, layout: Layout, mig: dict, mig_id: str, action: str, actor: str) -> None:
    if mig["coordinator"] != actor:
        raise GuardFailed(action, f"{actor} is not the coordinator of migration {mig_id} ({mig['coordinator']} is)")
    if keeper.exists(layout.is_active(actor)) is None:
        raise GuardFailed(action, f"coordinator {actor} is not active")


def commit(keeper: Keeper, ops: list, action: str, what: str) -> None:
    try:
        keeper.multi(ops)
    except MultiError as e:
        raise GuardFailed(action, f"{what} changed concurrently ({e}); re-read") from e


def read_snapshot(keeper: Keeper, layout: Layout, partition: str, source: str, bugs=frozenset()) -> list[PartName]:
    """source_parts_snapshot: as written (`snapshot_source_parts`) the source's registered parts
    of the partition; fixed, every part of it registered by any replica (PR-F1). As the code
    is (`snapshot_omits_patch_parts`, readActivePartsForPartition) only parts whose partition id
    is the partition's: a patch part's is patch-<hash>-<p>, so none is listed (PR-F8); fixed, by
    the original partition, patch parts included."""
    parts = (registered_parts(keeper, layout, source, partition) if "snapshot_source_parts" in bugs
             else registered_anywhere(keeper, layout, partition))
    return [n for n in parts if n.partition_id == partition] if "snapshot_omits_patch_parts" in bugs else parts


def start_clone(keeper: Keeper, layout: Layout, partition: str, source: str, target: str, coordinator: str,
                bugs=frozenset(), mig_id: str | None = None, snapshot_read_before: list[PartName] | None = None,
                add: bool = False) -> str:
    """StartClone: one multi creates `/migrations/<uuid>` with `source_parts_snapshot` and appends
    `target:cloning` to the assignment (M7). As written (`snapshot_source_parts`) the snapshot is
    the source's registered parts; fixed, every part of the partition registered by any replica
    (PR-F1). Unless `second_migration_allowed` (O4), a partition with a `:cloning` entry is refused."""
    a = read_assignment(keeper, layout, partition)
    if a is None:
        raise GuardFailed("StartClone", f"partition {partition} has no assignment")
    if source not in a.owners:
        raise GuardFailed("StartClone", f"source {source!r} is not an owner of {partition} ({list(a.owners)})")
    # The code's startClone (PR102244Code.tla, `clone_allows_active_migration`) appends
    # target:cloning whatever the list holds: a target already :cloning, or another migration's.
    code_appends = "clone_allows_active_migration" in bugs
    if target in a.owners or (target in a.keepers() and not code_appends):
        raise GuardFailed("StartClone", f"target {target!r} is already in the assignment of {partition}")
    if target not in active_replicas(keeper, layout):
        raise GuardFailed("StartClone", f"target {target!r} is not an active replica")
    if "second_migration_allowed" not in bugs and not code_appends and a.cloning:
        raise GuardFailed("StartClone", f"{partition} already has a :cloning entry ({', '.join(a.cloning)})")
    if "snapshot_before_clone_multi" in bugs and snapshot_read_before is not None:
        # The code's startClone (PR102244Code.tla ReadSnapshot, CloneMulti): the snapshot read
        # before this multi, by the caller; an empty one gave up (no migration). PR-F6.
        if not snapshot_read_before:
            raise GuardFailed("StartClone", f"{partition} had no parts on {source} when its snapshot was read")
        snapshot = snapshot_read_before
    else:
        snapshot = read_snapshot(keeper, layout, partition, source, bugs)
    mig_id = mig_id or uuidlib.uuid4().hex
    mig = {"partition": partition, "state": "clone", "source": source, "target": target,
           "coordinator": coordinator, "source_parts_snapshot": [str(n) for n in snapshot],
           "written": False, "rescanned": False, "aver0": a.version + 1, "log_at_switch": None,
           "add": add}   # planned by the rebalancer's phase 1 to add a replica (PR-F9)
    new = PRAssignment(a.owners, a.cloning + (target,))
    commit(keeper, [SetData(layout.assignment(partition), new.encode(), a.version),
                     Create(pr_layout.migration(layout, mig_id), json.dumps(mig).encode())],
            "StartClone", f"the assignment of {partition}")
    return mig_id


def write_clone_entries(keeper: Keeper, layout: Layout, mig_id: str, actor: str) -> int:
    """WriteCloneEntries: the coordinator writes a GET_PART per snapshot part into the shared log
    (M8), ordinary entries of the partition: owners find them covered, others skip them, the
    target (kept by its filter as `:cloning`) fetches. Marked written in the same multi."""
    mig, version = _mig(keeper, layout, mig_id, "WriteCloneEntries", "clone")
    _as_coordinator(keeper, layout, mig, mig_id, "WriteCloneEntries", actor)
    if mig["written"]:
        raise GuardFailed("WriteCloneEntries", f"migration {mig_id}'s entries are written")
    ops = [Create(f"{layout.log}/log-", LogEntry(GET_PART, new_part_name=p, source_replica=actor).format(),
                  sequential=True) for p in mig["source_parts_snapshot"]]
    ops.append(SetData(pr_layout.migration(layout, mig_id), json.dumps({**mig, "written": True}).encode(), version))
    commit(keeper, ops, "WriteCloneEntries", f"migration {mig_id}")
    return len(ops) - 1


def rescan(target: Replica, mig_id: str) -> int:
    """Rescan (fixed design only, PR-F4): once the target's cache shows it `:cloning`, it queues
    a fetch of every part of the partition registered by any replica that it lacks: the GET_PARTs
    it skipped before it knew it was a target. Marked rescanned in the same multi."""
    if "complete_without_rescan" in target.bugs:
        raise GuardFailed("Rescan", "as written (complete_without_rescan) the target does not rescan")
    k, lay = target.keeper, target.layout
    mig, version = _mig(k, lay, mig_id, "Rescan", "clone")
    p = mig["partition"]
    if mig["target"] != target.name or mig["rescanned"]:
        raise GuardFailed("Rescan", f"{target.name} has no rescan to do for migration {mig_id}")
    view = target.cache.get(p)
    if view is None or target.name not in view.cloning:
        raise GuardFailed("Rescan", f"{target.name}'s cache does not show it :cloning in {p}")
    have = target.store.names(p)
    lacking = [n for n in registered_anywhere(k, lay, p) if not any(h.covers(n) for h in have)]
    ops = [Create(f"{lay.queue(target.name)}/queue-", LogEntry(GET_PART, new_part_name=str(n)).format(),
                  sequential=True) for n in lacking]
    ops.append(SetData(pr_layout.migration(lay, mig_id), json.dumps({**mig, "rescanned": True}).encode(), version))
    commit(k, ops, "Rescan", f"migration {mig_id}")
    return len(lacking)


def signal_complete(target: Replica, mig_id: str) -> None:
    """SignalComplete: the target creates `clone_complete` once every snapshot part is on its disk
    (M8, O2). Fixed (not `complete_without_rescan`): also after its rescan, with nothing of the
    partition left in its queue."""
    k, lay = target.keeper, target.layout
    mig, version = _mig(k, lay, mig_id, "SignalComplete", "clone")
    p = mig["partition"]
    if mig["target"] != target.name:
        raise GuardFailed("SignalComplete", f"{target.name} is not the target of migration {mig_id}")
    if not mig["written"]:
        raise GuardFailed("SignalComplete", f"migration {mig_id}'s GET_PART entries are not written yet")
    if k.exists(pr_layout.clone_complete(lay, mig_id)) is not None:
        raise GuardFailed("SignalComplete", f"migration {mig_id} is complete already")
    have = target.store.names(p)
    missing = [s for s in mig["source_parts_snapshot"] if not any(h.covers(PartName.parse(s)) for h in have)]
    if missing:
        raise GuardFailed("SignalComplete", f"{target.name} lacks snapshot parts {missing}")
    if "complete_without_rescan" not in target.bugs:
        if not mig["rescanned"] or any(e.partition == p for _, e in target.queue()):
            raise GuardFailed("SignalComplete", f"{target.name} has not rescanned or still has {p} queued")
    commit(k, [Check(pr_layout.migration(lay, mig_id), version), Create(pr_layout.clone_complete(lay, mig_id), b"")],
            "SignalComplete", f"migration {mig_id}")


def next_log_number(keeper: Keeper, layout: Layout) -> int:
    """Len(log): the sequence number the next log entry will take (log_pointer's unit)."""
    names = keeper.get_children(layout.log)
    return max((log_number(n) for n in names), default=-1) + 1


def switch(keeper: Keeper, layout: Layout, mig_id: str, actor: str, bugs=frozenset()) -> PRAssignment:
    """Switch: one multi replaces the source by the target in the assignment and moves the counts
    (source -1, target +1), guarded by versions (M9, O3): as written (`switch_fresh_version`) the
    versions read just before; fixed, the assignment version the CLONE multi left (aver0), so a
    SWITCH after anything else changed the assignment fails and the migration goes to FAILED."""
    mig, version = _mig(keeper, layout, mig_id, "Switch", "clone")
    _as_coordinator(keeper, layout, mig, mig_id, "Switch", actor)
    if keeper.exists(pr_layout.clone_complete(layout, mig_id)) is None:
        raise GuardFailed("Switch", f"migration {mig_id} has no clone_complete")
    p, s, t = mig["partition"], mig["source"], mig["target"]
    a = read_assignment(keeper, layout, p)
    if "switch_without_target_check" in bugs:
        return _switch_as_the_code_does(keeper, layout, mig_id, mig, version, a, adds(mig, bugs))
    guard = a.version if "switch_fresh_version" in bugs else mig["aver0"]
    if a.version != guard:
        raise GuardFailed("Switch", f"the assignment of {p} is at version {a.version}, not {guard} as CLONE left it")
    keep = adds(mig, bugs)
    new = PRAssignment(tuple(o for o in a.owners if keep or o != s) + (t,), tuple(c for c in a.cloning if c != t))
    (cs, vs), (ct, vt) = read_count(keeper, layout, s), read_count(keeper, layout, t)
    state = {**mig, "state": "switch", "log_at_switch": next_log_number(keeper, layout)}
    commit(keeper, [SetData(layout.assignment(p), new.encode(), guard),
                     *([] if keep else [set_count(layout, s, cs - 1, vs)]), set_count(layout, t, ct + 1, vt),
                     SetData(pr_layout.migration(layout, mig_id), json.dumps(state).encode(), version)],
            "Switch", f"the assignment of {p} or the counts")
    return read_assignment(keeper, layout, p)


def adds(mig: dict, bugs=frozenset()) -> bool:
    """A phase-1 migration adds its target and keeps its source; as the code is
    (`repair_moves_replica`) its SWITCH removes the source like any other (PR-F9)."""
    return bool(mig.get("add")) and "repair_moves_replica" not in bugs


def _switch_as_the_code_does(keeper: Keeper, layout: Layout, mig_id: str, mig: dict, version: int,
                             a: PRAssignment, keep_source: bool = False) -> PRAssignment:
    """PR102244Code.tla's SwitchMulti with `switch_without_target_check` (driveStateMachine at
    cd4d4fe8): the assignment read afresh; a source no longer listed means "applied before" and
    nothing changes; otherwise the source goes, every entry naming the target is written without
    :cloning (whether or not one is there), the counts move (source -1 unless 0, target +1)."""
    p, s, t = mig["partition"], mig["source"], mig["target"]
    state = {**mig, "state": "switch", "log_at_switch": next_log_number(keeper, layout)}
    ops = [SetData(pr_layout.migration(layout, mig_id), json.dumps(state).encode(), version)]
    if s in a.keepers():
        new = PRAssignment(tuple(o for o in a.owners if keep_source or o != s) + tuple(t for c in a.cloning if c == t),
                           tuple(c for c in a.cloning if c not in (s, t)))
        (cs, vs), (ct, vt) = read_count(keeper, layout, s), read_count(keeper, layout, t)
        ops += [SetData(layout.assignment(p), new.encode(), a.version), set_count(layout, t, ct + 1, vt),
                *([] if keep_source else [set_count(layout, s, max(cs - 1, 0), vs)])]
    commit(keeper, ops, "Switch", f"the assignment of {p} or the counts")
    return read_assignment(keeper, layout, p)


def remove_subtree(keeper: Keeper, layout: Layout, mig_id: str, version: int) -> list:
    ops = []
    if keeper.exists(pr_layout.clone_complete(layout, mig_id)) is not None:
        ops.append(Delete(pr_layout.clone_complete(layout, mig_id)))
    return ops + [Delete(pr_layout.migration(layout, mig_id), version)]


def target_caught_up(keeper: Keeper, layout: Layout, mig: dict) -> None:
    """DONE's guard in the fixed design (PR-F2): the target has pulled the log past the SWITCH and
    has nothing of the partition queued; GuardFailed otherwise."""
    t, p = mig["target"], mig["partition"]
    if int(keeper.get(layout.log_pointer(t))[0]) < mig["log_at_switch"]:
        raise GuardFailed("Done", f"target {t} has not pulled the log past the SWITCH")
    if queued_of(keeper, layout, t, p):
        raise GuardFailed("Done", f"target {t} still has {p} queued")


def done(keeper: Keeper, layout: Layout, mig_id: str, actor: str, bugs=frozenset()) -> None:
    """Done: the migration's subtree goes (M10). As written (`source_stops_at_switch`) at once;
    fixed, only once the target has pulled the log past the SWITCH and has nothing of the
    partition queued, so every block committed before SWITCH is on it (PR-F2)."""
    mig, version = _mig(keeper, layout, mig_id, "Done", "switch")
    _as_coordinator(keeper, layout, mig, mig_id, "Done", actor)
    if "source_stops_at_switch" not in bugs:
        target_caught_up(keeper, layout, mig)
    commit(keeper, remove_subtree(keeper, layout, mig_id, version), "Done", f"migration {mig_id}")


def fail(keeper: Keeper, layout: Layout, mig_id: str, actor: str) -> None:
    """Fail: FAILED on a timeout or error in CLONE, or a SWITCH that failed its version check:
    the `:cloning` entry leaves the assignment and the subtree goes, in one multi (M11). The
    target's parts go by DropUnassigned; the counts never counted it."""
    mig, version = _mig(keeper, layout, mig_id, "Fail", "clone")
    _as_coordinator(keeper, layout, mig, mig_id, "Fail", actor)
    p, t = mig["partition"], mig["target"]
    a = read_assignment(keeper, layout, p)
    new = PRAssignment(a.owners, tuple(c for c in a.cloning if c != t))
    commit(keeper, [SetData(layout.assignment(p), new.encode(), a.version),
                     *remove_subtree(keeper, layout, mig_id, version)], "Fail", f"migration {mig_id}")


def take_over(keeper: Keeper, layout: Layout, mig_id: str, actor: str) -> None:
    """TakeOver: an active replica becomes the coordinator of a migration whose coordinator is
    not active, and resumes it from its Keeper state (M12, O6)."""
    mig, version = read_migration(keeper, layout, mig_id)
    if mig is None:
        raise GuardFailed("TakeOver", f"migration {mig_id} is gone")
    if keeper.exists(layout.is_active(mig["coordinator"])) is not None:
        raise GuardFailed("TakeOver", f"coordinator {mig['coordinator']} of migration {mig_id} is active")
    if keeper.exists(layout.is_active(actor)) is None:
        raise GuardFailed("TakeOver", f"{actor} is not active")
    commit(keeper, [SetData(pr_layout.migration(layout, mig_id), json.dumps({**mig, "coordinator": actor}).encode(),
                             version)], "TakeOver", f"migration {mig_id}")


def migrations_rows(keeper: Keeper, layout: Layout) -> list[dict]:
    """Rows of a system.selective_migrations table in the PR's terms."""
    return [{"migration": m, "partition_id": x["partition"], "state": x["state"], "source": x["source"],
             "target": x["target"], "coordinator": x["coordinator"], "snapshot_parts": len(x["source_parts_snapshot"]),
             "clone_complete": keeper.exists(pr_layout.clone_complete(layout, m)) is not None}
            for m, (x, _) in sorted(read_migrations(keeper, layout).items())]
