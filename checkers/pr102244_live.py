"""PR102244.tla's invariants, evaluated on a running PR cluster (Keeper and the replicas' disks):
ReplicationFactorInv, NoAckedBlockLostInv, OwnersCompleteInv, PR102244Whole.tla's
NoDuplicateRowsInv and PR102244Code.tla's CloningHasMigrationInv. Each returns the violations in plain words ([] when it holds). `acked` maps
an acknowledged row_id to its partition. QueryNoMissingInv is the history check's
(checkers/oracle.py) on the run's queries."""

from __future__ import annotations

import json

from protocol.keeper import NoNodeError
from protocol.log_entry import LogEntry
from protocol.pr102244.assignment import read_assignment, read_count
from protocol.replica import _children, log_number


def rows_on(cluster, replica: str, partition: str) -> set[int]:
    store = cluster.stores.get(replica) or cluster.down.get(replica)
    return {int(r["row_id"]) for n in store.names(partition) for r in store.read(n)} if store else set()


def replication_factor(cluster) -> list[str]:
    """RF replicas own each partition, none also `:cloning`, and the counts agree with the assignments.
    A list naming a replica twice (the PR's code writes such lists: FINDINGS PR-F3) is one copy."""
    k, lay, rf = cluster.admin, cluster.layout, cluster.table.replication_factor
    out, owned = [], {}
    for p in k.get_children(lay.assignments):
        a = read_assignment(k, lay, p)
        if len(set(a.owners)) != rf:
            out.append(f"{p} has owners {list(a.owners)}, replication_factor {rf}")
        if set(a.owners) & set(a.cloning):
            out.append(f"{p} lists {sorted(set(a.owners) & set(a.cloning))} as owner and :cloning")
        for o in set(a.owners):
            owned[o] = owned.get(o, 0) + 1
    for r in k.get_children(lay.replicas):
        n = read_count(k, lay, r)[0]
        if n != owned.get(r, 0):
            out.append(f"counts/{r} is {n}, the assignments list it {owned.get(r, 0)} times")
    return out


def cloning_has_migration(cluster) -> list[str]:
    """A `:cloning` entry belongs to a migration in CLONE or SWITCH of its partition; otherwise its
    replica replicates the partition for ever, is never read, and counts in the rebalancer's load."""
    k, lay = cluster.admin, cluster.layout
    live = []
    for m in _children(k, lay.migrations):
        try:
            live.append(json.loads(k.get(f"{lay.migrations}/{m}")[0]))
        except NoNodeError:
            continue
    return [f"{p} lists {t}:cloning with no migration of it in CLONE or SWITCH"
            for p in k.get_children(lay.assignments) for t in sorted(set(read_assignment(k, lay, p).cloning))
            if not any(x["partition"] == p and x["target"] == t and x["state"] in ("clone", "switch") for x in live)]


def no_acked_block_lost(cluster, acked: dict[int, str]) -> list[str]:
    """Every acknowledged row is on some replica's disk."""
    names = set(cluster.stores) | set(cluster.down)
    return [f"row {row} of {p} is on no replica" for row, p in sorted(acked.items())
            if not any(row in rows_on(cluster, r, p) for r in names)]


def _on_its_way(cluster, replica: str, partition: str) -> bool:
    """Replication may still bring the replica something of the partition: a queued entry of it,
    or an entry of it in the log beyond its log_pointer (InFlightTo, per partition)."""
    k, lay = cluster.admin, cluster.layout
    q = lay.queue(replica)
    for n in _children(k, q):
        try:
            if LogEntry.parse(k.get(f"{q}/{n}")[0]).partition == partition:
                return True
        except NoNodeError:
            continue
    ptr = int(k.get(lay.log_pointer(replica))[0])
    return any(LogEntry.parse(k.get(f"{lay.log}/{n}")[0]).partition == partition
               for n in k.get_children(lay.log) if log_number(n) >= ptr)


def owners_complete(cluster, acked: dict[int, str]) -> list[str]:
    """Every owner holds every acknowledged row of its partition, or replication is bringing it."""
    k, lay = cluster.admin, cluster.layout
    out = []
    for p in sorted(set(acked.values())):
        a = read_assignment(k, lay, p)
        for o in a.owners if a else ():
            missing = sorted(row for row, pp in acked.items() if pp == p and row not in rows_on(cluster, o, p))
            if missing and not _on_its_way(cluster, o, p):
                out.append(f"owner {o} of {p} lacks rows {missing} and nothing will bring them")
    return out


def no_duplicate_rows(cluster) -> list[str]:
    """NoDuplicateRowsInv: no replica holds a row twice (a retry `blocks/` did not deduplicate)."""
    out = []
    for r, store in sorted({**cluster.down, **cluster.stores}.items()):
        seen: dict[tuple[str, int], int] = {}
        for n in store.names():
            for row in store.read(n):
                key = (n.partition, int(row["row_id"]))
                seen[key] = seen.get(key, 0) + 1
        out += [f"{r} holds row {row} of {p} {k} times" for (p, row), k in sorted(seen.items()) if k > 1]
    return out
