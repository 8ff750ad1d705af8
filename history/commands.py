"""Operator commands of a run and what the harness saw right before each (history table
`commands`): ALTER TABLE ... REASSIGN PARTITION (spec AdminReassign) and the CANCEL of a CLONE
(spec CoordinatorCancel), each with its outcome, so that the checkers can judge that a command was
accepted exactly when its spec action's guard held (CommandsFollowGuardsInv: the guards and
effects are history/semantics.py's).

Without this table a command refused although the spec allows it (a mutant's `if dst in known`)
leaves no trace: the history shows a run in which the operator simply moved nothing.

The guard inputs are read here from Keeper directly (znodes and their JSON), not through
protocol/migration.py or protocol/assignment.py: those are the code under test, and a broken
reader would see what the broken command saw. What the harness cannot observe is left out of the
guard: StartMigration's fault-domain half of AllowedOwner (the racing clusters have no fault
domains, so every replica is its own) and aux_counts.migrations < MaxMigrations (a bound of the
model's state space, no limit of the design).
"""

from __future__ import annotations

import json

from history.schema import COMMAND_EFFECT
from history.semantics import ACCEPTED, IN_FLIGHT, RAISED, REFUSED  # noqa: F401 - the drivers' outcomes
from protocol.keeper import Keeper, NoNodeError
from protocol.layout import Layout

# The history's columns of what a command left in Keeper (observe_after).
AFTER = tuple(f"{name}_after" for name, _ in COMMAND_EFFECT)


def _json(keeper: Keeper, path: str) -> dict | None:
    try:
        data, _ = keeper.get(path)
    except NoNodeError:
        return None
    return json.loads(data)


def _active(keeper: Keeper, layout: Layout, replica: str | None) -> int:
    return int(replica is not None and keeper.exists(layout.is_active(replica)) is not None)


def observe(keeper: Keeper, layout: Layout, partition: str, src: str | None, dst: str | None,
            max_in_flight: int) -> dict:
    """The guard inputs of a command on `partition`, as Keeper holds them now: the owners (None:
    not assigned), the migration's state ("none": no znode), source and coordinator, whether
    src, dst and the coordinator are active, and the migrations in flight beside the limit."""
    asg = _json(keeper, layout.assignment(partition))
    mig = _json(keeper, layout.migration(partition)) or {}
    in_flight = sum(1 for p in keeper.get_children(layout.migrations)
                    if (_json(keeper, layout.migration(p)) or {}).get("state") in IN_FLIGHT)
    return {"partition_id": partition, "src": src, "dst": dst,
            "owners": sorted(asg["owners"]) if asg else None,
            "migration_state": mig.get("state", "none"), "migration_src": mig.get("src"),
            "migration_coordinator": mig.get("coord"),
            "src_active": _active(keeper, layout, src), "dst_active": _active(keeper, layout, dst),
            "coordinator_active": _active(keeper, layout, mig.get("coord")),
            "in_flight": in_flight, "max_in_flight": max_in_flight}


def observe_after(keeper: Keeper, layout: Layout, partition: str) -> dict:
    """What the command left in Keeper, read right after it (nothing else runs in between): the
    partition's migration state ("none": no znode), source and target, and its assignment's
    owners (None: not assigned), CLONE target and leaver. The effect half of
    CommandsFollowGuardsInv: a command accepted must have written its spec action's migration
    and assignment, one refused must have written nothing."""
    mig = _json(keeper, layout.migration(partition)) or {}
    asg = _json(keeper, layout.assignment(partition))
    return dict(zip(AFTER, (mig.get("state", "none"), mig.get("src"), mig.get("dst"),
                            sorted(asg["owners"]) if asg else None, (asg or {}).get("target"),
                            (asg or {}).get("leaving"))))


def observe_reassign(keeper: Keeper, layout: Layout, partition: str, src: str | None, dst: str,
                     max_in_flight: int) -> dict:
    """observe() for a REASSIGN; no src given is the first owner, as ALTER TABLE ... REASSIGN's default."""
    if src is None:
        asg = _json(keeper, layout.assignment(partition))
        src = asg["owners"][0] if asg and asg["owners"] else None
    return observe(keeper, layout, partition, src, dst, max_in_flight)


def observe_cancel(keeper: Keeper, layout: Layout, partition: str, max_in_flight: int) -> dict:
    """observe() for a CANCEL: src and dst are the migration's (none when it has no znode)."""
    mig = _json(keeper, layout.migration(partition)) or {}
    return observe(keeper, layout, partition, mig.get("src"), mig.get("dst"), max_in_flight)

