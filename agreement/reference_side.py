"""A scenario's steps on reference replicas (reference/cluster.py) on the same ZooKeeper server as
the real ClickHouse, under another root. Every replica owns every partition (replication_factor
= the number of replicas), so the selective protocol behaves as plain replication and the two
trees can be compared; what selective mode adds lives under selective/ and is not compared.

ClickHouse's leader (r1, the first replica created) selects merges and part mutations in the
background; here r1 does it at the steps that need it (OPTIMIZE, a mutation, SYNC)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from agreement.scenario import (COLUMNS, PARTITION_BY, AddColumn, Attach, Cleanup, ClearColumn, Detach, Drop, Insert,
                                Mutate, Optimize, Replace, Row, Settings, Start, Step, Stop, Sync)
from agreement.tree import Tree, read_tree
from protocol.assignment import GuardFailed
from protocol.cleanup_thread import CleanupSettings
from protocol.insert import route_insert
from protocol.keeper import Keeper
from protocol.replica import (client_alter_metadata, client_attach_partition, client_clear_column,
                              client_detach_partition, client_drop_partition, client_mutate, client_replace_partition)
from protocol.table import Table
from reference.cluster import Cluster


def as_dict(row: Row) -> dict:
    d, u, x = row
    return {"d": d, "u": u, "x": x}


class ReferenceSide:
    def __init__(self, connect: Callable[[], Keeper], folder: Path, zk_root: str, settings: Settings,
                 replicas=("r1", "r2")):
        table = Table("t", COLUMNS, PARTITION_BY, ("d", "u"), replication_factor=len(replicas))
        cleanup = CleanupSettings(min_logs_to_keep=settings.min_logs_to_keep, max_logs_to_keep=settings.max_logs_to_keep,
                                  dedup_window=settings.dedup_window, old_parts_lifetime=settings.old_parts_lifetime)
        self.c = Cluster(connect, folder, replicas=list(replicas), table=table, root=zk_root, backend="zookeeper",
                         cleanup=cleanup)
        self.leader = replicas[0]

    def apply(self, step: Step) -> None:
        c, k, lay = self.c, self.c.admin, self.c.layout
        match step:
            case Insert(rows, at, _):
                # The client's id does not reach the reference's hash, as it does not ClickHouse's.
                route_insert(c.replicas[at], c.table, [as_dict(r) for r in rows], c.replicas, c.rng)
            case Optimize(p, _):
                self.sync()
                c.replicas[self.leader].replica_select_merge(p, final=True)
                self.sync()
            case Mutate(commands):
                client_mutate(k, lay, commands, source_replica=self.leader)
                self.sync()
            case Drop(p):
                client_drop_partition(k, lay, p, source_replica=self.leader)
            case AddColumn(name, type_):
                client_alter_metadata(k, lay, f"`{name}` {type_}", source_replica=self.leader)
            case ClearColumn(col, p):
                client_clear_column(k, lay, p, col)
            case Detach(p):
                client_detach_partition(k, lay, p, source_replica=self.leader)
            case Attach(p):
                self.sync()
                client_attach_partition(c.replicas[self.leader], p)
            case Replace(p, rows):
                self.sync()
                client_replace_partition(c.replicas[self.leader], p, [as_dict(r) for r in rows], "t_src")
            case Stop(r):
                c.crash_replica(r)
            case Start(r):
                c.add_replica(r)
            case Cleanup():
                c._cleanup(c.replicas[self.leader])
            case Sync():
                self.sync()
            case _:
                raise TypeError(f"not a step: {step!r}")

    def sync(self) -> None:
        """Every replica idle, and the leader's part mutations selected and done."""
        c = self.c
        while True:
            c.settle()
            leader = c.replicas.get(self.leader)
            if leader is None:
                return
            # One part mutation at a time, the first part that owes one in (partition, block)
            # order, as ClickHouse's merge-selecting task walks the parts.
            for p in sorted(c.admin.get_children(c.layout.assignments)):
                try:
                    leader.replica_select_mutation(p)
                    break
                except GuardFailed:
                    continue
            else:
                return

    def tree(self) -> Tree:
        return read_tree(self.c.admin, self.c.layout.root)

    def rows(self, at: str = "r1") -> list[str]:
        rep = self.c.replicas[at]
        return sorted(f"{r['d']}\t{r['u']}\t{r['x']}" for n in rep.store.names() for r in rep.store.read(n))

    def close(self) -> None:
        self.c.close()
