"""The deterministic driver on PR #102244's design as its code drives migrations
(spec/pr102244/PR102244Code.tla; protocol/pr102244/driver.py): what `python -m reference run
--design pr102244 --as-code` and the reproductions (reference/pr102244/repro/*.toml) run.

PRCluster (the description's design) takes each migration step in one multi. Here, as in the
PR's code at cd4d4fe8, every replica's MigrationMonitor drives the migrations it coordinates
with a `MigrationDriver` of its own: a read that decides (DriveSwitch, DriveRollback) is one
background step, the write it decided (SwitchMulti, ApplyRollback) the replica's next "migrate"
step, so other replicas' steps, and other drivers' writes, land between the two. The target
signals clone_complete (the snapshot covered, nothing else); the monitor's drop is the code's
(PRReplica with `code` set). SYSTEM MIGRATE PARTITION and the rebalancer run startClone in a
driver of their own (a query thread, the rebalancer's call), its snapshot read, CLONE multi and
GET_PART entries one after the other. `drive_all` is SYSTEM SYNC SELECTIVE MIGRATIONS: one more
driver, of every migration (own_only=false), beside the coordinators' monitors.

Time: a migration's `created_at` and each replica's `migration_timeout_seconds` are in
`migration_clock()`'s unit, the cluster's steps by default (a run acts at the same step of the
same seed whatever the machine's load), seconds of the reproduction's rounds in
reference/pr102244/repro_reference.py. Each replica holds its own timeout: an ALTER ... MODIFY
SETTING reaches a replica when it applies the log entry, so two drivers may judge one migration
by different timeouts (PR-F7's window).

What this leaves out, and why: takeover does not wait `migration_coordinator_timeout` after the
node's last change (a coordinator that is down is taken over at the next step: the wait changes
when, not what); a migration found partially initialised is rolled back only by a driver that
took it over (isMigrationFullyInitialized's other callers are not modelled, PR102244.md M12).
"""

from __future__ import annotations

import hashlib
import uuid

from protocol.assignment import GuardFailed
from protocol.pr102244.driver import MigrationDriver, Pending, done, signal_complete
from protocol.pr102244.insert import route_insert
from protocol.pr102244.migration import read_migration, read_migrations, take_over
from protocol.pr102244.rebalancer import plan
from reference.pr102244.cluster import PRCluster

# Default of each replica's migration_timeout_seconds, in migration_clock() units (steps). The
# PR's default is in the server's settings, which are not stored (PR102244.md, sources): a run's
# CLONE takes some hundreds of steps, so this times out only a CLONE that is stuck.
MIGRATION_TIMEOUT = 5000


class PRCodeCluster(PRCluster):
    def __init__(self, *a, migration_timeout: float = MIGRATION_TIMEOUT, **kw):
        self.drivers: dict[str, MigrationDriver] = {}   # each running replica's monitor's driver
        self.timeouts: dict[str, float] = {}           # each replica's migration_timeout_seconds
        self.migration_timeout = migration_timeout
        super().__init__(*a, **kw)

    def migration_clock(self) -> float:
        return self.step

    # --- lightweight UPDATE -------------------------------------------------------------------
    _patch = ""   # the hash of the lightweight UPDATE `update` is writing, else ""

    def route_insert(self, receiver, table, rows, replicas, rng=None, faults=None, out=None):
        return route_insert(receiver, table, rows, replicas, rng, faults, out=out, patch=self._patch)

    def update(self, rows: list[dict], block_id: str, at: str) -> dict[str, str]:
        """A lightweight UPDATE on replica `at`: `rows` (the updated rows, each with a row id of its
        own) written as patch parts (patch-<hash>-<p>) through the INSERT path, committed with a
        GET_PART like any part. The history records it as an INSERT of those rows: an acknowledged
        write every owner must hold, as PR102244Code.tla's PatchBlocks are Blocks. Forwarding an
        UPDATE from a replica that does not own the partition is not in the stored code; this
        routes it as an INSERT."""
        self._patch = hashlib.sha256(block_id.encode()).hexdigest()[:8]
        try:
            return self.insert(rows, block_id, tries=1, at=at)
        finally:
            self._patch = ""

    # --- membership: a replica's monitor starts with it and dies with it ---------------------
    def add_replica(self, name: str):
        rep = super().add_replica(name)
        rep.code = True
        self.drivers[name] = self.driver_for(name)
        self.timeouts.setdefault(name, self.migration_timeout)
        return rep

    def crash_replica(self, name: str) -> None:
        """A crash loses what the replica's monitor had read and decided (DriverCrash)."""
        super().crash_replica(name)
        lost = self.drivers.pop(name).pending
        if lost is not None:
            self.log(f"{name}'s monitor loses its decided {lost.op} of migration {lost.mig_id}")

    def driver_for(self, name: str) -> MigrationDriver:
        """A new driver on replica `name`'s session (a monitor's, a command's, a SYNC's)."""
        rep = self.replicas[name]
        return MigrationDriver(name, rep.keeper, self.layout, self.bugs, now=self.migration_clock)

    # --- startClone ------------------------------------------------------------------------------
    def reassign(self, partition: str, dst: str, src: str | None = None, snapshot_read_before=None,
                 on: str | None = None) -> str:
        """SYSTEM MIGRATE PARTITION on replica `on` (default the coordinator): startClone in the
        command's own driver; returns the migration id. `snapshot_read_before`: a driver that has
        read its snapshot already (paused there: PR-F6's reproduction), to finish."""
        d = snapshot_read_before or self.read_snapshot(partition, dst, src, on)
        return self.finish_clone(d)

    def read_snapshot(self, partition: str, dst: str, src: str | None = None, on: str | None = None) -> MigrationDriver:
        """startClone's first step (ReadSnapshot) in a new driver on `on`, which it returns."""
        a = self._assignment(partition)
        d = self.driver_for(on or self.coordinator)
        d.read_snapshot(uuid.uuid4().hex, partition, src or a.owners[0], dst)
        return d

    def finish_clone(self, d: MigrationDriver) -> str:
        """startClone's CLONE multi and GET_PART entries, by the driver that read the snapshot.
        An empty snapshot gives up (GuardFailed: nothing was written)."""
        p = d.decided("clone", "CloneMulti")
        if d.clone_multi() is None:
            raise GuardFailed("CloneMulti", f"{p.partition} has no parts on {p.source}: startClone gives up")
        d.write_clone_entries()
        self._started(p.partition, p.source, p.target)
        return p.mig_id

    def rebalance_cycle(self, failed: frozenset[str] = frozenset()) -> list:
        """One cycle of computeRebalancePlan on the coordinator: phase 1's repairs (planned to add
        a replica, which as the code is moves it: PR-F9), then phase 2's moves, each started by
        startClone, up to `per_cycle`; a plan whose startClone is refused is left out."""
        rf = self.table.replication_factor
        started = []
        for p, s, t, add in plan(self.admin, self.layout, self.per_cycle, failed, rf):
            d = self.driver_for(self.coordinator)
            try:
                if add:
                    d.plan_under_replicated(uuid.uuid4().hex, p, s, t, rf)
                else:
                    d.read_snapshot(uuid.uuid4().hex, p, s, t)
                m = self.finish_clone(d)
            except GuardFailed:
                continue
            self.log(f"CLONE {p}: {s} -> {t}")
            started.append((p, s, t, m))
        return started

    # --- driveStateMachine ------------------------------------------------------------------------
    def _advance_migration(self, rep) -> str | None:
        """The replica's monitor, one step: the write its driver decided last, if any; else, for
        each migration in flight, the target's SignalComplete, or a decision of the migrations it
        drives (its own, and those whose coordinator is down, taken over first)."""
        d = self.drivers[rep.name]
        if d.pending is not None:
            return self.write(d)
        for m in self._in_flight:
            node, _ = read_migration(rep.keeper, self.layout, m)
            if node is None:
                continue
            if self._signal(rep, m, node):
                return f"SignalComplete({m}) by {rep.name}"
            took = False
            if node["coordinator"] != rep.name:
                try:
                    take_over(rep.keeper, self.layout, m, rep.name)
                except GuardFailed:
                    continue
                self.log(f"{rep.name} takes over migration {m} of {node['partition']} from {node['coordinator']}")
                took = True
            decided = self.decide(d, m, partially_initialised_rolls_back=took)
            if decided is not None:
                if d.pending is not None:
                    self._decided(d)
                return decided
            if took:
                return f"TakeOver({m}) by {rep.name}"
        return None

    def _signal(self, rep, m: str, node: dict) -> bool:
        """checkAndSignalCloneComplete on `rep` for migration m (its node as read): whether it
        signalled."""
        if node["target"] != rep.name or node["state"] != "clone":
            return False
        try:
            signal_complete(rep, m)
        except GuardFailed:
            return False
        return True

    def decide(self, d: MigrationDriver, m: str, partially_initialised_rolls_back: bool = False) -> str | None:
        """driveStateMachine's read by driver `d`: in CLONE, a rollback once `d`'s replica's
        timeout has passed since created_at (checked before clone_complete, as the code does), or
        SWITCH with clone_complete; in SWITCH (a driver died between the two), SWITCH again; a
        `switched` node (the fix of PR-F2) DONE once its target caught up. The write is `d`'s next
        step (`write`). None: nothing to decide now."""
        node, _ = read_migration(d.keeper, self.layout, m)
        if node is None:
            return None
        try:
            if node["state"] == "switched":
                done(d.keeper, self.layout, m)
                self.log(f"DONE {node['partition']}: {node['source']} -> {node['target']}")
                return f"Done({m}) by {d.name}"
            created = node.get("created_at")   # None: a node written without a clock never times out
            if node["state"] == "clone" and (
                    (created is not None and self.migration_clock() - created > self.timeouts[d.name])
                    or (partially_initialised_rolls_back and not node["written"])):
                d.drive_rollback(m)
                return f"DriveRollback({m}) by {d.name}"
            d.drive_switch(m)
            return f"DriveSwitch({m}) by {d.name}"
        except GuardFailed:
            return None

    def _decided(self, d: MigrationDriver) -> None:
        """A replica's monitor decided a write: a hook for a failpoint that pauses the monitor
        there (the reproductions'); here the write is simply the monitor's next step."""

    def write(self, d: MigrationDriver) -> str:
        """The write `d` decided: the SWITCH multi or the rollback, against Keeper as it is now."""
        p: Pending = d.pending
        out = d.switch_multi() if p.op == "switch" else d.apply_rollback()
        if out.state == "failed":
            self._failed.add(p.partition)
            self.log(f"FAILED migration {p.mig_id} of {p.partition}: rolled back by {d.name}")
        elif out.log_at_switch is not None:
            self.log(f"SWITCH {p.partition}: {p.source} -> {p.target} by {d.name}"
                     + (" (DONE)" if out.state == "done" else ""))
        elif out.state == "done":
            self.log(f"DONE {p.partition}: {p.source} -> {p.target}, the SWITCH applied before")
        return (f"{'SwitchMulti' if p.op == 'switch' else 'ApplyRollback'}({p.mig_id}) by {d.name} -> "
                f"{out.state or 'the node left as it was'}")

    def drive_all(self, d: MigrationDriver):
        """SYSTEM SYNC SELECTIVE MIGRATIONS' pass on the replica of driver `d` (own_only=false):
        its own clone_complete signals, then a decision and its write for every migration in
        flight. A generator: it yields each decided write (the driver's Pending) before taking it,
        so a caller can hold it there (a pause failpoint), and yields what it did as strings."""
        rep = self.replicas[d.name]
        for m, (node, _) in sorted(read_migrations(d.keeper, self.layout).items()):
            if self._signal(rep, m, node):
                yield f"SignalComplete({m}) by {d.name}"
            what = self.decide(d, m)
            if what is not None:
                yield what
                if d.pending is not None:
                    yield d.pending
                    yield self.write(d)
