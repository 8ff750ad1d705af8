"""A driver of the PR's migrations as its code drives them (spec/pr102244/PR102244Code.tla;
PR102244.md M7-M12 at cd4d4fe8): every step one Keeper read or one multi, taken by whichever
replica drives the migration (the coordinator's MigrationMonitor, a replica running SYSTEM SYNC
SELECTIVE MIGRATIONS, a replica taking over an orphaned migration), acting on what it read
before.

`MigrationDriver.pending` is PR102244Code.tla's `pend[d]`: what the driver decided from its last
read and has not written yet. It lives in the driver's process: `crash()` loses it, Keeper keeps
the rest. The steps, action for action with the module:

    ReadSnapshot / PlanUnderReplicated   read the source_parts_snapshot, decide a CLONE
    CloneMulti                           create the node and append target:cloning in one multi
    WriteCloneEntries                    the snapshot's GET_PART entries, in later multis
    DriveSwitch / DriveRollback          read the node, decide SWITCH (updateState) or rollback
    SwitchMulti / ApplyRollback          the decided write, against Keeper as it is now
    SignalComplete, Done                 the target's signal; DONE once the target caught up (fixed)

The migration node's states are the code's CLONE and SWITCH (`clone`, `switch`) and, in the fixed
protocol only, `switched` (the SWITCH multi applied, DONE waiting for the target: PR-F2's fix).
DONE and FAILED remove the node, as the code does. A driver given a clock (`now`) records the
node's `created_at` on it, from which its runner judges migration_timeout_seconds
(reference/pr102244/code_cluster.py); the model's DriveRollback needs none. `bugs` holds the module's Bugs strings this
driver implements (`snapshot_source_parts`, `snapshot_before_clone_multi`, `source_stops_at_switch`,
`clone_allows_active_migration`, `switch_without_target_check`, `rollback_ignores_state`,
`repair_moves_replica`); without one, its smallest fix. The description's one-step migration is
protocol/pr102244/migration.py, which this reuses for the node's layout and the snapshot read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from protocol.assignment import GuardFailed
from protocol.keeper import Create, Keeper, SetData
from protocol.layout import Layout
from protocol.log_entry import GET_PART, LogEntry
from protocol.parts import PartName
from protocol.pr102244 import layout as pr_layout
from protocol.pr102244.assignment import PRAssignment, read_assignment, read_count, set_count
from protocol.pr102244.migration import (
    commit,
    next_log_number,
    read_migration,
    read_migrations,
    read_snapshot,
    remove_subtree,
    target_caught_up,
)
from protocol.replica import Replica

# The node states of a migration in flight (Active(m) in the module).
IN_FLIGHT = ("clone", "switch", "switched")


@dataclass(frozen=True)
class Pending:
    """pend[d]: op is "clone" (the snapshot read, the CLONE multi next), "entries" (the node
    exists, its GET_PART entries next), "switch" or "rollback" (the node read, the write next)."""
    op: str
    mig_id: str
    partition: str
    source: str | None = None
    target: str | None = None
    snapshot: tuple[str, ...] = ()
    add: bool = False    # planned by the rebalancer's phase 1 to add a replica (PR-F9)


@dataclass
class Outcome:
    """What a driver's write did to the migration: its state after (None: left as it was) and
    the log length it recorded as the SWITCH point (None: not recorded)."""
    state: str | None = None
    log_at_switch: int | None = None


def _assignment(keeper: Keeper, layout: Layout, partition: str, action: str) -> PRAssignment:
    a = read_assignment(keeper, layout, partition)
    if a is None:
        raise GuardFailed(action, f"partition {partition} has no assignment")
    return a


def _in_flight(keeper: Keeper, layout: Layout, partition: str) -> list[str]:
    """getActiveMigrationPartitions, for one partition: its migrations whose node is in flight."""
    return [m for m, (x, _) in read_migrations(keeper, layout).items()
            if x["partition"] == partition and x["state"] in IN_FLIGHT]


@dataclass
class MigrationDriver:
    """One replica driving migrations with its own Keeper session."""
    name: str
    keeper: Keeper
    layout: Layout
    bugs: frozenset[str] = frozenset()
    pending: Pending | None = None
    # The driver's clock, for the node's created_at (the migration's timeout counts from it);
    # None: not recorded (the model's DriveRollback may decide at any time).
    now: Callable[[], float] | None = None

    def _idle(self, action: str) -> None:
        if self.pending is not None:
            raise GuardFailed(action, f"driver {self.name} is still to write its {self.pending.op} of "
                                      f"migration {self.pending.mig_id}")

    def decided(self, op: str, action: str) -> Pending:
        """The write this driver decided on (`op`), or GuardFailed naming `action`."""
        if self.pending is None or self.pending.op != op:
            raise GuardFailed(action, f"driver {self.name} has no {op} decided")
        return self.pending

    def _snapshot(self, partition: str, source: str) -> tuple[str, ...]:
        return tuple(str(n) for n in read_snapshot(self.keeper, self.layout, partition, source, self.bugs))

    # --- startClone ------------------------------------------------------------------------
    def read_snapshot(self, mig_id: str, partition: str, source: str, target: str) -> Pending:
        """ReadSnapshot: SYSTEM MIGRATE PARTITION's startClone reads the snapshot before its
        multi (`snapshot_before_clone_multi`; fixed, the multi reads it again). Neither the
        command nor startClone checks for another migration of the partition
        (`clone_allows_active_migration`); fixed, a partition with one in flight, or with the
        target already :cloning, is refused."""
        self._idle("ReadSnapshot")
        if read_migration(self.keeper, self.layout, mig_id)[0] is not None:
            raise GuardFailed("ReadSnapshot", f"migration {mig_id} exists")
        a = _assignment(self.keeper, self.layout, partition, "ReadSnapshot")
        if source not in a.owners:
            raise GuardFailed("ReadSnapshot", f"source {source!r} is not an owner of {partition} ({list(a.owners)})")
        if target in a.owners:
            raise GuardFailed("ReadSnapshot", f"target {target!r} already owns {partition}")
        if not "clone_allows_active_migration" in self.bugs and (
                target in a.cloning or _in_flight(self.keeper, self.layout, partition)):
            raise GuardFailed("ReadSnapshot", f"{partition} has a migration in flight")
        return self._decide_clone(mig_id, partition, source, target, add=False, action="ReadSnapshot")

    def plan_under_replicated(self, mig_id: str, partition: str, source: str, target: str, rf: int) -> Pending:
        """PlanUnderReplicated: the rebalancer's phase 1 (computeRebalancePlan under its lock):
        a partition with fewer owners than replication_factor, no migration in flight, gets a
        migration from an owner to a replica not in its list, started like any other. `rf`: the
        table's replication_factor."""
        self._idle("PlanUnderReplicated")
        if read_migration(self.keeper, self.layout, mig_id)[0] is not None:
            raise GuardFailed("PlanUnderReplicated", f"migration {mig_id} exists")
        a = _assignment(self.keeper, self.layout, partition, "PlanUnderReplicated")
        if len(set(a.owners)) >= rf:
            raise GuardFailed("PlanUnderReplicated", f"{partition} has {len(set(a.owners))} owners, "
                                                     f"replication_factor {rf}")
        if _in_flight(self.keeper, self.layout, partition):
            raise GuardFailed("PlanUnderReplicated", f"{partition} has a migration in flight")
        if source not in a.owners or target in a.keepers():
            raise GuardFailed("PlanUnderReplicated", f"not a move from an owner of {partition} to a replica "
                                                     f"outside its list ({source} -> {target})")
        return self._decide_clone(mig_id, partition, source, target, add=True, action="PlanUnderReplicated")

    def _decide_clone(self, mig_id, partition, source, target, add: bool, action: str) -> Pending:
        snapshot = self._snapshot(partition, source)
        if "snapshot_before_clone_multi" in self.bugs and not snapshot:
            raise GuardFailed(action, f"{partition} has no parts on {source}: startClone gives up")
        self.pending = Pending("clone", mig_id, partition, source, target, snapshot, add)
        return self.pending

    def clone_multi(self) -> Pending | None:
        """CloneMulti: one multi creates the node (state CLONE, the snapshot) and appends
        target:cloning to the assignment read just before, at its version. The snapshot is the
        one read before (`snapshot_before_clone_multi`) or, fixed, read now; an empty one gives
        up (the driver's decision is dropped, nothing written). Returns the next step decided."""
        p = self.decided("clone", "CloneMulti")
        snapshot = p.snapshot if "snapshot_before_clone_multi" in self.bugs else self._snapshot(p.partition, p.source)
        if not snapshot:
            self.pending = None
            return None
        if not "clone_allows_active_migration" in self.bugs and _in_flight(self.keeper, self.layout, p.partition):
            raise GuardFailed("CloneMulti", f"{p.partition} has a migration in flight")
        a = _assignment(self.keeper, self.layout, p.partition, "CloneMulti")
        # The code appends target:cloning whatever the list holds: a second CLONE to one target
        # lists it twice (PR-F3's `r3,r3`); the model, and the checkers, read the list as a set.
        cloning = a.cloning + (p.target,)
        node = {"partition": p.partition, "state": "clone", "source": p.source, "target": p.target,
                "coordinator": self.name, "source_parts_snapshot": list(snapshot), "written": False,
                "log_at_switch": None, "add": p.add, "driven": "code",
                "created_at": self.now() if self.now is not None else None}
        commit(self.keeper, [SetData(self.layout.assignment(p.partition), PRAssignment(a.owners, cloning).encode(),
                                      a.version),
                              Create(pr_layout.migration(self.layout, p.mig_id), json.dumps(node).encode())],
                "CloneMulti", f"the assignment of {p.partition}")
        self.pending = Pending("entries", p.mig_id, p.partition, p.source, p.target, snapshot)
        return self.pending

    def write_clone_entries(self, order=None) -> bool:
        """WriteCloneEntries: a GET_PART per snapshot part into the shared log, in multis after
        the node exists (a driver dying before leaves a partially initialised migration). The
        node is marked written if it is still there (another driver may have rolled it back);
        returns whether it was. `order`: a key the entries are written in (the snapshot's order
        when None)."""
        p = self.decided("entries", "WriteCloneEntries")
        for part in (p.snapshot if order is None else sorted(p.snapshot, key=order)):
            self.keeper.create(f"{self.layout.log}/log-",
                               LogEntry(GET_PART, new_part_name=part, source_replica=self.name).format(),
                               sequential=True)
        self.pending = None
        node, version = read_migration(self.keeper, self.layout, p.mig_id)
        if node is None:
            return False
        self.keeper.set(pr_layout.migration(self.layout, p.mig_id), json.dumps({**node, "written": True}).encode(),
                        version)
        return True

    # --- driveStateMachine -------------------------------------------------------------------
    def drive_switch(self, mig_id: str) -> Pending:
        """DriveSwitch: the node read in CLONE with clone_complete is moved to SWITCH (a CAS on
        the node), or read in SWITCH (a driver died between the two); the multi comes next."""
        self._idle("DriveSwitch")
        node, version = read_migration(self.keeper, self.layout, mig_id)
        if node is None or node["state"] not in ("clone", "switch"):
            raise GuardFailed("DriveSwitch", f"migration {mig_id} is {'gone' if node is None else node['state']}")
        if node["state"] == "clone":
            if self.keeper.exists(pr_layout.clone_complete(self.layout, mig_id)) is None:
                raise GuardFailed("DriveSwitch", f"migration {mig_id} has no clone_complete")
            commit(self.keeper, [SetData(pr_layout.migration(self.layout, mig_id),
                                          json.dumps({**node, "state": "switch"}).encode(), version)],
                    "DriveSwitch", f"migration {mig_id}")
        self.pending = Pending("switch", mig_id, node["partition"], node["source"], node["target"],
                               add=bool(node.get("add")))
        return self.pending

    def drive_rollback(self, mig_id: str) -> Pending:
        """DriveRollback: the node read in CLONE and a rollback decided (migration_timeout_seconds
        passed on this replica's clock, or a partially initialised migration found on takeover)."""
        self._idle("DriveRollback")
        node, _ = read_migration(self.keeper, self.layout, mig_id)
        if node is None or node["state"] != "clone":
            raise GuardFailed("DriveRollback", f"migration {mig_id} is {'gone' if node is None else node['state']}")
        self.pending = Pending("rollback", mig_id, node["partition"], node["source"], node["target"])
        return self.pending

    def switch_multi(self) -> Outcome:
        """SwitchMulti: the SWITCH decided earlier, written against the assignment read afresh.
        As the code is (`rollback_ignores_state`) the multi does not look at the node's state,
        which may have moved on or be gone; fixed, it applies only to a node still in SWITCH.

        As the code is (`switch_without_target_check`): a source still listed is removed, every
        entry naming the target is written plain, the counts move (source -1 unless 0, target
        +1); a source no longer listed means "applied before", DONE. Fixed: applied only with the
        source an owner and the target :cloning; "applied before" only with the source gone and
        the target an owner; otherwise the migration FAILS, its :cloning entry removed. After an
        applied SWITCH the node goes to DONE at once (`source_stops_at_switch`) or, fixed, to
        `switched`, DONE waiting for the target to catch up (PR-F2)."""
        p = self.decided("switch", "SwitchMulti")
        self.pending = None
        node, version = read_migration(self.keeper, self.layout, p.mig_id)
        state = node["state"] if node is not None else "gone"
        read = (node, version)
        if not ("rollback_ignores_state" in self.bugs or state == "switch"):
            return Outcome()
        s, t = p.source, p.target
        a = _assignment(self.keeper, self.layout, p.partition, "SwitchMulti")
        keep_source = p.add and not "repair_moves_replica" in self.bugs
        after = "done" if "source_stops_at_switch" in self.bugs else "switched"
        in_flight = state in ("switch", "clone")
        if "switch_without_target_check" in self.bugs:
            if s not in a.keepers():
                return self._end(p, read, "done" if in_flight else None)
            return self._apply(p, read, a, keep_source, after if in_flight else None)
        if s in a.owners and t in a.cloning:
            return self._apply(p, read, a, keep_source, after)
        if s not in a.keepers() and t in a.owners:
            return self._end(p, read, "done")
        return self._end(p, read, "failed", [SetData(self.layout.assignment(p.partition),
                                               PRAssignment(a.owners, tuple(c for c in a.cloning if c != t)).encode(),
                                               a.version)])

    def _apply(self, p: Pending, read: tuple, a: PRAssignment, keep_source: bool, state: str | None) -> Outcome:
        s, t = p.source, p.target
        # the source's entry goes; every entry naming the target is written plain, as many as there were
        owners = tuple(o for o in a.owners if keep_source or o != s) + tuple(c for c in a.cloning if c == t)
        new = PRAssignment(owners, tuple(c for c in a.cloning if c not in (s, t)))
        (cs, vs), (ct, vt) = read_count(self.keeper, self.layout, s), read_count(self.keeper, self.layout, t)
        log_at = next_log_number(self.keeper, self.layout)
        ops = [SetData(self.layout.assignment(p.partition), new.encode(), a.version),
               set_count(self.layout, t, ct + 1, vt),
               *([] if keep_source else [set_count(self.layout, s, max(cs - 1, 0), vs)])]
        return self._end(p, read, state, ops, log_at)

    def _end(self, p: Pending, read: tuple, state: str | None, ops: list = (), log_at: int | None = None) -> Outcome:
        """The multi: `ops` and the node's new state (`switched` kept with the SWITCH point, DONE
        and FAILED removed), at the version `read`; a node already gone is left gone."""
        ops = list(ops)
        node, version = read
        if node is not None and state in ("done", "failed"):
            ops += remove_subtree(self.keeper, self.layout, p.mig_id, version)
        elif node is not None and (state is not None or log_at is not None):
            ops.append(SetData(pr_layout.migration(self.layout, p.mig_id),
                               json.dumps({**node, "state": state or node["state"],
                                           "log_at_switch": log_at if log_at is not None else node["log_at_switch"]})
                               .encode(), version))
        if ops:
            commit(self.keeper, ops, "SwitchMulti", f"migration {p.mig_id} or its assignment")
        return Outcome(state, log_at)

    def apply_rollback(self) -> Outcome:
        """ApplyRollback: every target:cloning leaves the assignment (at a fresh version), the
        node is set FAILED and removed. As the code is (`rollback_ignores_state`) whatever the
        node's state now; fixed, a CAS from CLONE, so a node no longer in CLONE is left alone. A
        node already gone: nothing to undo."""
        p = self.decided("rollback", "ApplyRollback")
        self.pending = None
        node, version = read_migration(self.keeper, self.layout, p.mig_id)
        states = IN_FLIGHT if "rollback_ignores_state" in self.bugs else ("clone",)
        if node is None or node["state"] not in states:
            return Outcome()
        a = _assignment(self.keeper, self.layout, p.partition, "ApplyRollback")
        commit(self.keeper, [SetData(self.layout.assignment(p.partition),
                                      PRAssignment(a.owners, tuple(c for c in a.cloning if c != p.target)).encode(),
                                      a.version),
                              *remove_subtree(self.keeper, self.layout, p.mig_id, version)],
                "ApplyRollback", f"migration {p.mig_id} or its assignment")
        return Outcome("failed")

    def crash(self) -> Pending:
        """DriverCrash: the driver's process dies; what it had read and decided is gone."""
        lost, self.pending = self.pending, None
        if lost is None:
            raise GuardFailed("DriverCrash", f"driver {self.name} has nothing decided to lose")
        return lost


# --- the target's side, and DONE ----------------------------------------------------------------
def signal_complete(target: Replica, mig_id: str) -> None:
    """SignalComplete (checkAndSignalCloneComplete, run by the target): every snapshot part is
    covered by a part on the target's disk; nothing about its queue, the log or the entries."""
    k, lay = target.keeper, target.layout
    node, version = read_migration(k, lay, mig_id)
    if node is None or node["state"] != "clone" or node["target"] != target.name:
        raise GuardFailed("SignalComplete", f"{target.name} is not the target of migration {mig_id} in CLONE")
    if k.exists(pr_layout.clone_complete(lay, mig_id)) is not None:
        raise GuardFailed("SignalComplete", f"migration {mig_id} is complete already")
    have = target.store.names(node["partition"])
    missing = [s for s in node["source_parts_snapshot"] if not any(h.covers(PartName.parse(s)) for h in have)]
    if missing:
        raise GuardFailed("SignalComplete", f"{target.name} lacks snapshot parts {missing}")
    k.create(pr_layout.clone_complete(lay, mig_id), b"")


def done(keeper: Keeper, layout: Layout, mig_id: str) -> None:
    """Done (fixed protocol only, PR-F2's fix): a `switched` node goes once its target has pulled
    the log past the SWITCH and has nothing of the partition queued."""
    node, version = read_migration(keeper, layout, mig_id)
    if node is None or node["state"] != "switched":
        raise GuardFailed("Done", f"migration {mig_id} is not switched")
    target_caught_up(keeper, layout, node)
    commit(keeper, remove_subtree(keeper, layout, mig_id, version), "Done", f"migration {mig_id}")

