"""INSERT tries a replica refused, and what the harness saw of the write path right before and
right after each (history table `insert_refusals`), so that the checkers can judge that a try
was refused only when the spec's write path was closed for the sub-block it failed on
(InsertRefusalsFollowGuardsInv).

Without this table a broken router that refuses writes it should take (no forward, no failover
to another owner when the chosen one is read-only) leaves a history in which the client simply
retried: every acknowledged row is still where it belongs, and every invariant holds.

What the history records is judged by history/semantics.py's `write_path_open`: a refusal is
justified when, before or after the try, the spec's write path of the sub-block was closed.

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

