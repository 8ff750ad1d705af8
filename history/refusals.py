"""INSERT tries a replica refused, and what the harness saw of the write path right before and
right after each (history table `insert_refusals`), so that the checkers can judge that a try
was refused only when the spec's write path was closed for the sub-block it failed on
(InsertRefusalsFollowGuardsInv).

Without this table a broken router that refuses writes it should take (no forward, no failover
to another owner when the chosen one is read-only) leaves a history in which the client simply
retried: every acknowledged row is still where it belongs, and every invariant holds.

The spec writes a sub-block of partition p through ReplicaForwardInsert and ReplicaWriteInsert:
the receiver's map names p's owners, and an owner whose map is Keeper's writes it. So a refusal
is justified when, before or after the try, one of these did not hold (`write_path_open`);
`receiver_writable` is recorded for the reader, not judged:

- p was assigned, at the same znode version before and after, and the receiver's map held it
  at that version (a stale map refuses, and a forward on it may reach a former owner). The
  receiver itself need not be writable: with the partition in its map it routes without Keeper,
  and a read-only receiver that owns it hands the sub-block to another owner (route_insert, as
  a Distributed INSERT does). A try whose receiver had no map entry (it reads Keeper first,
  and allocates a new partition) is left unjudged, as is a stale one;
- some owner was writable before and after, and every writable owner's map was at that version,
  or held no entry of p yet (it loads one before it writes). A forward may go to any writable
  owner of the receiver's map (spec ReplicaForwardInsert chooses), and one whose map is stale
  refuses the write (its version check fails; the client retries): a refusal the spec allows.

Or p was not assigned before nor after the try, the receiver was writable and at least
replication_factor replicas were active both times (`active_replicas`): the spec's allocation
(ReplicaChooseOwners, then ReplicaCreateAssignment or, if another allocator won, its adoption)
was enabled, so a refusal breaks the invariant too. With a placement declared (fault domains)
`active_replicas` is not recorded and such a try is left unjudged: the domains decide there.

Read here from Keeper directly, not through protocol/assignment.py or protocol/insert.py, which
are the code under test. Tries that ended with an unknown outcome (a broken connection) are not
refusals and are not recorded; client_send_insert's tries (races.py `clients`, `refusing`) are
not seen one by one, only Cluster.insert's.
"""

from __future__ import annotations

import json

from history.schema import REFUSAL_SIDES, WRITE_PATH
from protocol.keeper import Keeper, KeeperError, NoNodeError
from protocol.layout import Layout


def observe(keeper: Keeper, layout: Layout, replicas: dict, receiver: str, partition: str) -> dict | None:
    """The write path of `partition` from `receiver` as it is now: the assignment's owners and
    znode version (None: not assigned), whether the receiver is writable and its map's version
    of the partition (None: no map entry), and the owners that are writable and those whose map
    is at another version than Keeper's. None if the administrator cannot read Keeper now."""
    try:
        data, stat = keeper.get(layout.assignment(partition))
        owners, version = sorted(json.loads(data)["owners"]), stat.version
    except NoNodeError:
        owners, version = None, None
    except KeeperError:
        return None
    try:
        names = keeper.get_children(layout.replicas)
        placed = any(keeper.exists(layout.placement(r)) is not None for r in names)
        active = None if placed else sum(keeper.exists(layout.is_active(r)) is not None for r in names)
    except KeeperError:
        return None

    def writable(r: str) -> bool:
        return r in replicas and not replicas[r].keeper.expired

    def map_version(r: str) -> int | None:
        a = replicas[r].cache.get(partition) if r in replicas else None
        return None if a is None else a.version

    # in the order of the table's columns of a view (history/schema.py WRITE_PATH)
    return dict(zip((name for name, _ in WRITE_PATH), (
        owners, version, int(writable(receiver)), map_version(receiver),
        [o for o in owners or () if writable(o)], [o for o in owners or () if map_version(o) not in (None, version)],
        active)))


def row(step: int, block_id: str, partition: str, receiver: str, error: Exception, before: dict, after: dict) -> dict:
    """A row of `insert_refusals`: the try, then each view's columns suffixed _before / _after."""
    out = {"step": step, "block_id": block_id, "partition_id": partition, "receiver": receiver,
           "error": type(error).__name__, "reason": str(error)[:300]}
    for side, view in zip(REFUSAL_SIDES, (before, after)):
        out.update({f"{k}_{side}": v for k, v in view.items()})
    return out


def write_path_open(r: dict, rf: int) -> bool:
    """ReplicaForwardInsert / ReplicaWriteInsert enabled for the sub-block on both views, whichever
    writable owner the router picks, or the allocation of an unassigned partition (a row of
    `insert_refusals`; `rf` the run's replication_factor): then its refusal breaks
    InsertRefusalsFollowGuardsInv."""
    if allocation_open(r, rf):
        return True
    v = r["keeper_version_before"]
    writable = {x: set(r[f"writable_owners_{x}"] or ()) for x in REFUSAL_SIDES}
    return (v is not None and r["keeper_version_after"] == v
            and all(r[f"receiver_map_version_{x}"] == v and not writable[x] & set(r[f"stale_owners_{x}"] or ()) for x in REFUSAL_SIDES)
            and bool(writable["before"] & writable["after"]))


def allocation_open(r: dict, rf: int) -> bool:
    """The partition unassigned on both views, the receiver writable and at least `rf` replicas
    active on both (an older history, without active_replicas, is not judged by this)."""
    return all(r[f"keeper_version_{x}"] is None and r[f"receiver_writable_{x}"] == 1
               and r.get(f"active_replicas_{x}") is not None and r[f"active_replicas_{x}"] >= rf
               for x in REFUSAL_SIDES)
