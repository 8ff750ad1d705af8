"""Directed steps for the protocol machine: the instances of a spec action that land in the
windows a migration or a restart opens, offered as rules of their own so that a walk takes
them more often than uniform choice among enabled actions would.

Faithful by construction: each function returns a subset of the instances `enabled` (the spec's
guard read through the reference, conformance/protocol_system.py) returns for one of the spec's
actions, and the machine runs the chosen instance as that action. Only which enabled step is
picked changes, never what a step may do.

Why these windows: the switches the invariants alone missed (F5 route_to_clone_target, F6
source_stops_at_switch, F9 serve_before_map_loaded, cleanup_no_delay) each need a query started
on a map that disagrees with Keeper (it has seen a CLONE, has not seen a SWITCH, or was not
loaded after a restart) while a migration is part-way, with rows written around it. Uniform
choice over ~25 actions reaches a migration's end with traffic around it in few walks.
The windows beyond a migration's own (issue 18: the ci machine must catch every switch on
invariants alone) are a lost replica's restart, a down leaver's CLEANUP and a skipped entry
trimmed from the log before a CLONE (Walk's lost_restart, down_leaver, alter_first).
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.protocol_system import CLEANUP, INSERT_PARTITION, LAYOUT, PIDS, ProtocolSystem
from protocol.assignment import read_assignment
from protocol.cleanup_thread import old_logs
from protocol.log_entry import DROP_RANGE, MUTATE_PART
from protocol.migration import read_migration
from protocol.replica import log_number

MIGRATION_ACTIONS = ("ReplicaCloneFetch", "CoordinatorSwitch", "ReplicaCleanup")


@dataclass(frozen=True)
class Walk:
    """Choices a walk draws once (swarm-style), which order a migration's steps among the
    windows: the SWITCH waits for an INSERT on its way or not (a write in CLONE, or one that
    lands after the SWITCH); the fetch waits for a query to start and read or not; a replica
    crashes and restarts before the first migration or not; the migration is cancelled before
    its fetch instead of switched or not. `left_out`: the swarm's choice.

    Three windows the whole protocol opens beyond a migration's own, each a broken variant's
    (spec/FINDINGS.md): `lost_restart`, the walk's crash comes before the first migration and
    the replica stays down until the cleanup thread marks it lost, so that it clones on its
    restart (crashed when it alone holds a block it wrote: F14, F15); `down_leaver`, the migration's source crashes after
    the SWITCH, another replica ends the migration for it and it restarts
    (ReplicaCleanupForDownLeaver: restart_keeps_foreign_parts, down_leaver_cleanup_ignores_maps);
    `alter_first`, a DROP PARTITION or a mutation of a partition is logged, pulled by every
    replica and trimmed from the log before the partition's first migration, whose target
    skipped it (F16)."""
    switch_waits_for_writes: bool = True
    query_before_fetch: bool = True
    restart_before_migration: bool = False
    cancel: bool = False
    left_out: frozenset = frozenset()
    lost_restart: bool = False
    down_leaver: bool = False
    alter_first: bool = False
INSERT_ACTIONS = ("ReplicaAllocate", "ReplicaForwardInsert", "ReplicaWriteInsert", "ClientReceiveAck")


def unwritten(s: ProtocolSystem, p: str) -> set[str]:
    """The INSERTs of partition p not sent yet or on their way (not written): those a migration of
    p can still have written in its CLONE, or across its SWITCH."""
    return {i for i, x in s.ins.items() if INSERT_PARTITION[i] == p and x["st"] in ("idle", "sent")}


def cancels(s: ProtocolSystem, walk: Walk) -> bool:
    """A cancelling walk cancels its first migration only: the next one (the bound allows two) runs
    to its end, so that the walk still completes a migration with traffic around it."""
    return walk.cancel and s.counts["migrations"] < 2


def migration_start(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """ALTER TABLE ... MOVE PARTITION (AdminReassign) of a partition that holds acknowledged rows:
    a migration of an empty partition has nothing to lose. In walks that query before the fetch,
    once every replica has pulled the log."""
    if walk.restart_before_migration and s.counts["crashes"] < s.bounds["crashes"] and "ReplicaCrash" not in walk.left_out:
        return []   # this walk's crash and restart come first (restart_after_writes)
    if walk.lost_restart and len(s.reps) < len(s.kept()) and "RestartAfterWrites" not in walk.left_out:
        return []   # ... and a lost replica's restart too
    if walk.alter_first and "AlterBeforeMigration" not in walk.left_out and alter_before_migration(s, enabled_of, walk):
        return []   # the skipped entry is trimmed first
    acked = {INSERT_PARTITION[i] for i, x in s.ins.items() if x.get("acked")}
    if walk.query_before_fetch and acked and enabled_of("AdminReassign"):
        # Every replica pulls the log first: the replica that becomes the target then has passed
        # the rows' entries as a non-owner, so a read it serves in CLONE misses them (F5) instead
        # of having their fetches queued (in flight).
        behind = [("ReplicaPullLog", x) for x in enabled_of("ReplicaPullLog")]
        if behind:
            return behind
    # Once per partition: a second migration right after a first (a CANCEL's, say) would make
    # its target a keeper again before the first's window is used; once the CANCEL has ended
    # (cancelled) and every map has seen it, that window is spent and the partition may move again.
    before = {p for p, st in s.migration_states().items()
              if st not in (None, "cancelled") or st == "cancelled" and any(stale_map(s, r, p) for r in s.reps)}
    # A partition with an INSERT still to write, so that one lands in the CLONE (or, in walks
    # whose writes wait for the SWITCH, across it); else any that holds acknowledged rows.
    for tier in ({p for p in acked if unwritten(s, p)}, acked):
        out = [("AdminReassign", params) for params in enabled_of("AdminReassign") if params[0] in tier - before]
        if out:
            return out
    return []


def migration_next_steps(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """The step that takes an in-flight migration towards its next state: fetch the CLONE, SWITCH,
    CLEANUP, whichever the guard allows, or a step that unblocks one: the fetched target pulls or
    executes its queue (SWITCH waits for its catch-up), a map behind Keeper refreshes (CLEANUP
    waits for every map to have seen the SWITCH). Before the fetch, while a query is still to be
    started, a map refreshes to see the CLONE first, and a running query reads the partition
    first: the window in which a map that lists the target may route to it (F5)."""
    migs = {p: read_migration(s.admin, LAYOUT, pid)[0] or {} for p, pid in PIDS.items()}
    idle_query = any(x["st"] == "idle" for x in s.qry.values())
    # With walk.switch_waits_for_writes the SWITCH waits until every INSERT of the partition is
    # written (each one a write during CLONE); without, until each is sent and only the last is
    # still on its way: the SWITCH comes between its send and its write (F4, F6), after the
    # others were written in CLONE.
    writing = {p for p in PIDS if switch_waits(s, walk, p)}
    out = []
    for p, pid in PIDS.items():
        m = migs[p]
        st = m.get("state")
        a = read_assignment(s.admin, LAYOUT, pid)
        stale = [(r, p) for r, q in enabled_of("ReplicaRefreshCache") if q == p
                 and (s.reps[r].cache.get(pid) is None or s.reps[r].cache[pid].version != a.version)]
        if st == "clone" and not m["fetched"] and cancels(s, walk):
            # The target's map sees the CLONE, then the CANCEL comes before the fetch: a target
            # that still thinks so keeps taking the partition's entries (F7).
            # It waits for an INSERT of the partition on its way: an entry the target then pulls.
            target_stale = [x for x in stale if x[0] == m["dst"]]
            sent = any(INSERT_PARTITION[i] == p and x["st"] == "sent" for i, x in s.ins.items())
            out += ([("ReplicaRefreshCache", x) for x in target_stale]
                    or ([("CoordinatorCancel", (p,))] if (p,) in enabled_of("CoordinatorCancel") and not sent else []))
        elif st == "clone" and not m["fetched"]:
            read_first = any(x["st"] == "running" and pid in x["query"].pending for x in s.qry.values())
            if idle_query and stale and walk.query_before_fetch and not walk.alter_first:
                # the target's own pull too: a read it serves misses rows only once it has passed
                # their entries (before that they are in flight to it)
                out += [("ReplicaPullLog", x) for x in enabled_of("ReplicaPullLog") if x[0] == m["dst"]] or [
                    ("ReplicaRefreshCache", x) for x in stale]
            elif not read_first or not walk.query_before_fetch or walk.alter_first:
                # (alter_first: the fetch comes before the keepers execute the trimmed entry)
                out += [("ReplicaCloneFetch", (p,))] if (p,) in enabled_of("ReplicaCloneFetch") else []
        elif st == "clone":
            if (p,) in enabled_of("CoordinatorSwitch"):
                if p not in writing:
                    out.append(("CoordinatorSwitch", (p,)))
            else:
                out += [(x, params) for x in ("ReplicaPullLog", "ReplicaExecuteEntry") for params in enabled_of(x)
                        if params[0] == m["dst"]]
        elif st == "switched" and walk.down_leaver and (down := down_leaver_steps(s, enabled_of, p, m, stale)):
            out += down
        elif st == "done" and walk.down_leaver and (m["src"],) in enabled_of("ReplicaRestart"):
            out += [("ReplicaRestart", (m["src"],))]
        elif st in ("switched", "cancelling"):
            out += [("ReplicaCleanup", (p,))] if (p,) in enabled_of("ReplicaCleanup") else []
            # Walks that query after the SWITCH keep the target's map stale until the queries
            # have started: it is the reader whose old map routes to the source (F6).
            keep_stale = m["dst"] if st == "switched" and not walk.query_before_fetch and idle_query else None
            leaver = m["src"] if st == "switched" else m["dst"]
            leaver_pulls = [("ReplicaPullLog", x) for x in enabled_of("ReplicaPullLog") if x[0] == leaver]
            if st == "cancelling" and leaver_pulls:
                # The cancelled target pulls what was logged before its map sees the CANCEL: its
                # filter still takes the partition's entries, and a target dropped at the CANCEL
                # fetches them back (F7); the fixed one keeps the partition until the CLEANUP.
                keep_stale = leaver
            out += [("ReplicaRefreshCache", x) for x in stale if x[0] != keep_stale]
            # the leaver pulls: its filter stops taking the partition's entries once its map has
            # seen the SWITCH, and a stale reader routed to it then misses what they wrote (F6)
            if st == "cancelling" or not any(x[0] == leaver for x in stale):
                out += leaver_pulls
            if st == "cancelling":
                out += [("ReplicaExecuteEntry", x) for x in enabled_of("ReplicaExecuteEntry") if x[0] == leaver]
        elif st == "cancelled" and stale:
            # Ended, but a map has not seen it (a CANCEL that ends at once, as F7's switch does: the
            # fixed CANCEL ends at a CLEANUP that waits for every map). The old target pulls and
            # executes first, as above, then the maps refresh.
            target = [(x, params) for x in ("ReplicaPullLog", "ReplicaExecuteEntry") for params in enabled_of(x)
                      if params[0] == m["dst"]]
            out += target or [("ReplicaRefreshCache", x) for x in stale]
    return out


def insert_next_steps(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """The next step of an INSERT in flight (allocate, forward, write, acknowledge), or the first
    INSERT sent when none has been; no other new one, so that some are left to be sent while a
    migration runs."""
    out = [(a, params) for a in INSERT_ACTIONS for params in enabled_of(a) if not write_waits(s, walk, a, params)]
    if all(x["st"] == "idle" for x in s.ins.values()):
        # The first INSERT leaves its partition another to write around the migration
        # (migration_start moves a partition with acknowledged rows): one of a partition with two.
        sends = enabled_of("ClientSendInsert")
        first = [x for x in sends if len(unwritten(s, INSERT_PARTITION[x[0]])) >= 2] or sends
        out += [("ClientSendInsert", params) for params in first]
    return out


def migrating(s: ProtocolSystem) -> set[str]:
    return {p for p, st in s.migration_states().items() if st in ("clone", "switched", "cancelling")}


def map_disagrees(s: ProtocolSystem, r: str, moving: dict[str, str]) -> bool:
    """r's map is in a window of a migrating partition: it has seen the CLONE (it lists the
    target) and r is not an owner (F5's window), or it has not seen the SWITCH or CANCEL (a stale reader: F6's); or r came
    back from a crash and its map lacks a partition Keeper assigns (not loaded yet: F9's)."""
    rep = s.reps[r]
    asg = {p: read_assignment(s.admin, LAYOUT, pid) for p, pid in PIDS.items()}
    if r in s.restarted and any(a is not None and PIDS[p] not in rep.cache for p, a in asg.items()):
        return True
    for p, st in moving.items():
        a, c = asg[p], rep.cache.get(PIDS[p])
        if a is None:
            continue
        # An owner reads its own copy whatever its map says; a replica that is not one routes by
        # the map, which now lists the target.
        if st == "clone" and c is not None and c.target is not None and r not in c.owners:
            return True
        if st != "clone" and (c is None or c.version != a.version):
            return True
    return False


def queries_in_window(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """ClientStartQuery on a replica whose map is in a migration's window (map_disagrees)."""
    states = s.migration_states()
    moving = {p: st for p, st in states.items() if st in ("clone", "switched", "cancelling")}
    if walk.down_leaver:
        # q2 waits for a map that has not seen the SWITCH of a migration a down leaver's CLEANUP
        # ended, once the leaver is back (a query routed to a replica that is down fails at once):
        # the target's, which lists the old owners and not itself (down_leaver_cleanup_ignores_maps)
        up = len(s.reps) == len(s.kept())
        readers = {(read_migration(s.admin, LAYOUT, PIDS[p])[0] or {}).get("dst"): p
                   for p, st in states.items() if st == "done" and up}
        return [("ClientStartQuery", (q, r)) for q, r in enabled_of("ClientStartQuery")
                if q == "q2" and r in readers and stale_map(s, r, readers[r])
                or q != "q2" and map_disagrees(s, r, moving)]
    if not walk.query_before_fetch:
        # This walk's queries wait for a SWITCH and for every INSERT of the partition to be
        # settled (those not sent yet are sent after the SWITCH): a stale reader then misses
        # rows written after the SWITCH (F6).
        writing = {INSERT_PARTITION[i] for i, x in s.ins.items() if x["st"] in ("idle", "sent", "written")}
        moving = {p: st for p, st in moving.items() if st == "switched" and p not in writing}
    return [("ClientStartQuery", (q, r)) for q, r in enabled_of("ClientStartQuery") if map_disagrees(s, r, moving)]


def reads_in_window(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """A running query reads a migrating partition from the replica its map chose."""
    moving = migrating(s)
    return [("ReplicaReadPartition", (q, p)) for q, p in enabled_of("ReplicaReadPartition")
            if p in moving or walk.down_leaver and q == "q2"]   # q2: see queries_in_window


def inserts_around_migration(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """An INSERT into a partition that is migrating (CLONE or SWITCHED): sent, or its next step
    (allocate, forward, write, acknowledge) taken."""
    states = s.migration_states()
    moving = {p for p, st in states.items() if st in ("clone", "switched")}
    # After the SWITCH, sent to a replica whose map has seen it: one with a stale map is refused
    # at the write by the version check (the client retries), which ends no window.
    out = [("ClientSendInsert", (i, r)) for i, r in enabled_of("ClientSendInsert") if INSERT_PARTITION[i] in moving
           and (states[INSERT_PARTITION[i]] == "clone" or fresh(s, r, INSERT_PARTITION[i]))]
    for a in INSERT_ACTIONS:
        for params in enabled_of(a):
            if INSERT_PARTITION[params[-1]] in moving and not write_waits(s, walk, a, params):
                out.append((a, params))
    return out


def stale_map(s: ProtocolSystem, r: str, p: str) -> bool:
    """r's map of p is behind Keeper's assignment."""
    a, c = read_assignment(s.admin, LAYOUT, PIDS[p]), s.reps[r].cache.get(PIDS[p])
    return a is not None and (c is None or c.version != a.version)


def fresh(s: ProtocolSystem, r: str, p: str) -> bool:
    a, c = read_assignment(s.admin, LAYOUT, PIDS[p]), s.reps[r].cache.get(PIDS[p])
    return a is not None and c is not None and c.version == a.version


def write_waits(s: ProtocolSystem, walk: Walk, action: str, params: tuple) -> bool:
    """Without walk.switch_waits_for_writes, it is the partition's last INSERT still to write that
    waits, here, for the SWITCH of its partition: a write on a map the SWITCH made stale (F4), or
    one the source no longer takes (F6). The others are written in CLONE."""
    if walk.switch_waits_for_writes or action != "ReplicaWriteInsert":
        return False
    p = INSERT_PARTITION[params[-1]]
    return s.migration_states()[p] == "clone" and len(unwritten(s, p)) == 1


def switch_waits(s: ProtocolSystem, walk: Walk, p: str) -> bool:
    """The SWITCH of p holds off for its INSERTs (see migration_next_steps)."""
    left = unwritten(s, p)
    if walk.switch_waits_for_writes:
        return bool(left)
    return len(left) > 1 or any(s.ins[i]["st"] == "idle" for i in left)


def restart_after_writes(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """With no migration in flight: a replica that has pulled past an acknowledged INSERT crashes
    (or, if none has, one pulls the log), and a replica that is down restarts: the window in which
    a map not yet loaded serves a query that should see the INSERT (F9)."""
    if migrating(s) or not walk.restart_before_migration:
        return []
    if walk.lost_restart:
        return lost_restart(s, enabled_of, walk)
    log = s.log()
    acked = [i for i, x in s.ins.items() if x.get("acked")]
    seen = [(r,) for (r,) in enabled_of("ReplicaCrash") if any(s.ptr(r) >= s.first_idx(i, log) > 0 for i in acked)]
    out = [("ReplicaCrash", x) for x in seen] or [("ReplicaPullLog", x) for x in enabled_of("ReplicaPullLog")
                                                  if acked and enabled_of("ReplicaCrash")]
    return out + [("ReplicaRestart", params) for params in enabled_of("ReplicaRestart")]


def is_lost(s: ProtocolSystem, r: str) -> bool:
    # (protocol.recovery.is_lost reads it through a live Replica; r is down)
    return s.admin.get(LAYOUT.is_lost(r))[0] == b"1"


def lost_restart(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """A replica holding written rows crashes, the log moves on while it is down (an INSERT, a
    mutation or an ALTER) until the cleanup thread trims an entry every other replica has pulled
    and marks it lost, and it restarts: CloneLostReplica, whose sources must between them hold
    every partition it keeps (F14) and whose local parts must outlive a source that has not
    pulled their entries yet (F15). (Walks that first waited for the replica to hold rows of
    both partitions, F14's TLC trace, ran out of steps before their migration and caught
    nothing these do not.)"""
    def writes():
        """The INSERTs' next steps, a new one sent once none is on its way (each writes its block
        before the next is sent), and the refreshes a write waits for."""
        in_flight = [(a, x) for a in INSERT_ACTIONS for x in enabled_of(a)]
        return in_flight + ([] if any(x["st"] == "sent" for x in s.ins.values()) else [
            ("ClientSendInsert", (i, r)) for i, r in enabled_of("ClientSendInsert") if s.ins[i]["st"] == "idle"]) + [
            ("ReplicaRefreshCache", (r, p)) for r, p in enabled_of("ReplicaRefreshCache") if stale_map(s, r, p)]

    down = [r for r in s.kept() if r not in s.reps]
    pulls = [("ReplicaPullLog", x) for x in enabled_of("ReplicaPullLog")]
    if not down:
        log = s.log()
        written = [i for i, x in s.ins.items() if x.get("acked") or x["st"] == "written"]
        holds = {r: {i for i in written if s.has_block(r, i)} for (r,) in enabled_of("ReplicaCrash")}
        # r alone holds a block and no other replica has pulled its entry, and an older entry
        # every replica has pulled is there for the cleanup thread to trim: F15's source has not
        # pulled the block; F14's one peer does not keep the other partition r keeps, if r kept two
        def sole(r, i):
            return all(not s.has_block(o, i) and s.ptr(o) < s.first_idx(i, log) for o in s.kept() if o != r)
        ready = min(s.ptr(r) for r in s.kept()) >= 1
        crash = [r for r, mine in holds.items() if ready and any(sole(r, i) for i in mine)]
        return [("ReplicaCrash", (r,)) for r in crash] or (writes() + pulls if ready or not log else pulls)
    if any(is_lost(s, r) for r in down):
        return [("ReplicaRestart", (r,)) for r in down if is_lost(s, r)]
    # Only a trim that marks it lost: one before would take the older entry, and the next could
    # only take one the others pulled after it (F15's block, which its source must not have).
    if enabled_of("CleanupClearOldLogs") and old_logs(s.admin, LAYOUT, CLEANUP)[1]:
        return [("CleanupClearOldLogs", ())]
    # The log moves on by an ALTER or a mutation first (an INSERT left over is one the walk's
    # migration can write in its CLONE), then by INSERTs; the others pull only once nothing else
    # does, for the same reason.
    alters = [(a, x) for a in ("ClientAlterMetadata", "ClientMutate") for x in enabled_of(a)]
    return alters or writes() or pulls or [("ReplicaRestart", (r,)) for r in down]


def down_leaver_steps(s: ProtocolSystem, enabled_of, p: str, m: dict, stale: list) -> list[tuple[str, tuple]]:
    """After the SWITCH of p, its source crashes before its CLEANUP; an active replica ends the
    migration for it once every active map has seen the SWITCH (the target's map last: a query it
    starts while stale routes to the leaver), and the leaver restarts (migration_next_steps)."""
    leaver = m["src"]
    if leaver in s.reps:
        return [("ReplicaCrash", (leaver,))] if (leaver,) in enabled_of("ReplicaCrash") else []
    # run by a replica other than the target: the one that ends it has seen its own write
    ends = [("ReplicaCleanupForDownLeaver", x) for x in enabled_of("ReplicaCleanupForDownLeaver")
            if x[0] == p and x[1] != m["dst"]]
    fails = [("ClientQueryFails", x) for x in enabled_of("ClientQueryFails")]
    others = [x for x in stale if x[0] != m["dst"]]
    return ends or fails or [("ReplicaRefreshCache", x) for x in others or stale]


def alter_before_migration(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """Before any migration, once a partition holds acknowledged rows: a DROP PARTITION or a
    mutation of it (its MUTATE_PART selected by an owner), every replica pulls the entry, and
    the cleanup thread trims it from the log before the keepers execute it: the CLONE target
    that skipped it must find it in their queues, not in the log (F16)."""
    if not walk.alter_first or s.counts["migrations"] or migrating(s):
        return []
    acked = {INSERT_PARTITION[i] for i, x in s.ins.items() if x.get("acked")}
    if not acked:
        return []
    logged = [k for k, e in enumerate(s.log()) if e.type in (DROP_RANGE, MUTATE_PART)]
    if not logged:
        if s.counts["mutations"]:
            return [("ReplicaSelectMutation", x) for x in enabled_of("ReplicaSelectMutation")]
        return [("ClientDropPartition", (p,)) for (p,) in enabled_of("ClientDropPartition") if p in acked] + (
            [("ClientMutate", ())] if enabled_of("ClientMutate") else [])
    live = {log_number(n) for n in s.admin.get_children(LAYOUT.log)}
    if not live & set(logged):
        return []
    return [("ReplicaPullLog", x) for x in enabled_of("ReplicaPullLog")] or (
        [("CleanupClearOldLogs", ())] if enabled_of("CleanupClearOldLogs") else [])


def insert_retry(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """An INSERT written but not acknowledged times out, and one whose fate is unknown is sent
    again: a retry the block's hash must deduplicate (no_dedup)."""
    out = [("ClientTimeout", (i,)) for (i,) in enabled_of("ClientTimeout") if s.ins[i]["st"] == "written"]
    return out + [("ClientSendInsert", (i, r)) for i, r in enabled_of("ClientSendInsert") if s.ins[i]["st"] == "unknown"]


def repair_after_loss(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """Only in the machine built with repair=True (a bound on replica drops): once an INSERT is
    acknowledged, an owner whose rows all have a copy elsewhere crashes, is dropped for good
    while down (SYSTEM DROP REPLICA), and each partition left short of RF is repaired
    (RepairStart; its CLONE and SWITCH are then MigrationNextStep's). The repair meets whatever
    else the walk has under way: a move of the partition, a query on a stale map, an INSERT.
    First, where a move's target has copied rows that of the owners only the source holds, the
    move is cancelled and the source is the one lost: the cancelled target then holds their last
    copy (F32's window)."""
    if not s.bounds["replica_drops"]:
        return []
    out = [("RepairStart", x) for x in enabled_of("RepairStart")] + [
        ("DropReplica", x) for x in enabled_of("DropReplica")]
    if out or s.gone or not any(x.get("acked") for x in s.ins.values()):
        return out
    for p, pid in PIDS.items():
        m = read_migration(s.admin, LAYOUT, pid)[0] or {}
        if m.get("state") not in ("clone", "cancelling") or m["src"] is None:
            continue
        owners = read_assignment(s.admin, LAYOUT, pid).owners
        others = set().union(*(s.rows(o, (pid,)) for o in owners if o != m["src"]))
        if not s.rows(m["dst"], (pid,)) & s.rows(m["src"], (pid,)) - others:
            continue
        if m["state"] == "clone":
            out += [("CoordinatorCancel", x) for x in enabled_of("CoordinatorCancel") if x == (p,)]
        else:
            out += [("ReplicaCrash", x) for x in enabled_of("ReplicaCrash") if x == (m["src"],)]
    if out:
        return out
    owners = {o for pid in PIDS.values() if (a := read_assignment(s.admin, LAYOUT, pid)) for o in a.owners}
    return [("ReplicaCrash", (r,)) for (r,) in enabled_of("ReplicaCrash") if r in owners and s.copy_elsewhere(r)]


def alter_during_clone(s: ProtocolSystem, enabled_of, walk: Walk) -> list[tuple[str, tuple]]:
    """A mutation or a DROP PARTITION while a partition is in CLONE: entries the target's filter
    skipped and its CLONE must still apply (F8)."""
    cloning = {p for p, st in s.migration_states().items() if st == "clone"}
    if not cloning:
        return []
    return ([("ClientMutate", ())] if enabled_of("ClientMutate") else []) + [
        ("ClientDropPartition", (p,)) for (p,) in enabled_of("ClientDropPartition") if p in cloning]


# rule name -> the instances it chooses among; each name says the window, each instance is a
# spec action's. In this order: a walk whose draws are all zero (where Hypothesis starts, and
# what it shrinks towards) takes the first that can run, and so plays the scenario: an INSERT,
# a migration, a query on a map that disagrees and an INSERT while it runs, SWITCH, CLEANUP.
DIRECTED = {
    "QueryOnDisagreeingMap": queries_in_window,
    "InsertAroundMigration": inserts_around_migration,
    "InsertNextStep": insert_next_steps,
    "MigrationNextStep": migration_next_steps,
    "RestartAfterWrites": restart_after_writes,
    "MigrationStart": migration_start,
    "ReadDuringMigration": reads_in_window,
    "AlterDuringClone": alter_during_clone,
    "InsertRetry": insert_retry,
    "AlterBeforeMigration": alter_before_migration,
    "RepairAfterLoss": repair_after_loss,
}


def window_of(system: ProtocolSystem, name: str, params: tuple) -> str | None:
    """The window a step about to be taken opens, as reference/windows.py names the racing runs'
    (issue 37), for lab/migration_coverage.py's count per hundred walks: a SWITCH taken while its
    target has an entry of the partition queued (SWITCH's gate decides there: F23), a CANCEL; None
    for any other step. SYSTEM DROP REPLICA, a repair's start and its SWITCH (the machine built
    with repair=True) are windows of their own, and so is a drop that leaves a cancelled target
    with the last copy of rows (F32)."""
    if name == "RepairStart":
        return "repair"
    if name == "DropReplica":
        # F32's window: a cancelled move's target holds rows of which the replica dropped now held
        # the only other copy among the owners
        for pid in PIDS.values():
            m = read_migration(system.admin, LAYOUT, pid)[0] or {}
            if m.get("state") != "cancelling":
                continue
            owners = read_assignment(system.admin, LAYOUT, pid).owners
            staying = set().union(*(system.rows(o, (pid,)) for o in owners if o != params[0]))
            if system.rows(m["dst"], (pid,)) - staying:
                return "drop_with_cancelled_target_last_copy"
        return "drop_replica"
    if name == "CoordinatorSwitch":
        pid = PIDS[params[0]]
        mig = read_migration(system.admin, LAYOUT, pid)[0]
        if mig and mig["src"] is None:
            return "repair_switch"
        if mig and any(e.partition == pid for e in system.queue(mig["dst"])):
            return "switch_with_target_queued"
        return "switch"
    if name == "CoordinatorCancel":
        return "cancel"
    return None
