"""A scenario's steps on real ClickHouse replicas (harness/clickhouse.py), as SQL over HTTP.

ClickHouse works in the background (fetches, merges, mutations, the cleanup thread), so a step
that needs it done waits for it: SYNC waits for every queue and mutation, CLEANUP for the tree to
stop changing for a while (the cleanup thread runs every cleanup_delay_period, 1 s here)."""

from __future__ import annotations

import time

from agreement.scenario import (COLUMNS, PARTITION_BY, AddColumn, Attach, Cleanup, ClearColumn, Detach, Drop, Insert,
                                Mutate, Optimize, Replace, Settings, Start, Step, Stop, Sync, partition_sql)
from agreement.tree import Tree, read_tree
from harness.clickhouse import ClickHouseCluster
from protocol.keeper import Keeper


class ClickHouseSide:
    def __init__(self, cluster: ClickHouseCluster, keeper: Keeper, table: str, zk_root: str, settings: Settings):
        self.cluster, self.keeper, self.table, self.root, self.settings = cluster, keeper, table, zk_root, settings
        self.up = set(cluster.names)
        self._src = 0

    def sql(self, at: str, statement: str) -> str:
        return self.cluster.query(at, statement)

    def create(self) -> None:
        cols = ", ".join(f"{c} {t}" for c, t in COLUMNS)
        for r in self.cluster.names:
            self.sql(r, f"CREATE TABLE {self.table} ({cols}) ENGINE = ReplicatedMergeTree('{self.root}', '{{replica}}') "
                        f"PARTITION BY {PARTITION_BY} ORDER BY (d, u) SETTINGS {self.settings.sql()}")

    def apply(self, step: Step) -> None:
        t = self.table
        match step:
            case Insert(rows, at, _):
                values = ", ".join(f"('{d}', {u}, '{x}')" for d, u, x in rows)
                self.sql(at, f"INSERT INTO {t} VALUES {values}")
            case Optimize(p, at):
                self.sql(at, f"OPTIMIZE TABLE {t} PARTITION {partition_sql(p)} FINAL")
            case Mutate(commands):
                self.sql("r1", f"ALTER TABLE {t} {commands}")
            case Drop(p):
                self.sql("r1", f"ALTER TABLE {t} DROP PARTITION {partition_sql(p)}")
            case AddColumn(name, type_):
                self.sql("r1", f"ALTER TABLE {t} ADD COLUMN {name} {type_}")
            case ClearColumn(col, p):
                self.sql("r1", f"ALTER TABLE {t} CLEAR COLUMN {col} IN PARTITION {partition_sql(p)}")
            case Detach(p):
                self.sql("r1", f"ALTER TABLE {t} DETACH PARTITION {partition_sql(p)}")
            case Attach(p):
                self.sql("r1", f"ALTER TABLE {t} ATTACH PARTITION {partition_sql(p)}")
            case Replace(p, rows):
                self._src += 1
                src = f"{t}_src{self._src}"
                cols = ", ".join(f"{c} {ty}" for c, ty in COLUMNS)
                self.sql("r1", f"CREATE TABLE {src} ({cols}) ENGINE = MergeTree PARTITION BY {PARTITION_BY} ORDER BY (d, u)")
                self.sql("r1", f"INSERT INTO {src} VALUES " + ", ".join(f"('{d}', {u}, '{x}')" for d, u, x in rows))
                self.sql("r1", f"ALTER TABLE {t} REPLACE PARTITION {partition_sql(p)} FROM {src}")
            case Stop(r):
                self.cluster.stop(r)
                self.up.discard(r)
                self._wait(lambda: self.keeper.exists(f"{self.root}/replicas/{r}/is_active") is None,
                           f"{r}'s session to end")
            case Start(r):
                self.cluster.start(r)
                self.up.add(r)
                self._wait(lambda: self.keeper.exists(f"{self.root}/replicas/{r}/is_active") is not None
                           and self.keeper.get(f"{self.root}/replicas/{r}/is_lost")[0] == b"0", f"{r} to be back")
            case Cleanup():
                self._settle(quiet=3.0)
            case Sync():
                self.sync()
            case _:
                raise TypeError(f"not a step: {step!r}")

    def sync(self) -> None:
        for r in sorted(self.up):
            self.cluster.sync_replica(r, self.table)
        self._wait(lambda: all(self.sql(r, f"SELECT count() FROM system.mutations WHERE table = '{self.table}' "
                                           "AND is_done = 0").strip() == "0"
                               and self.sql(r, f"SELECT count() FROM system.replication_queue "
                                               f"WHERE table = '{self.table}'").strip() == "0"
                               for r in self.up), "every queue and mutation to finish")

    def _settle(self, quiet: float, timeout: float = 60.0) -> None:
        """Until the tree has not changed for `quiet` seconds (the background threads are done)."""
        deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
        while time.monotonic() < deadline:
            now = self.tree()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            time.sleep(0.3)
        raise TimeoutError(f"ClickHouse's tree under {self.root} still changing after {timeout:.0f}s")

    def _wait(self, done, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done():
                return
            time.sleep(0.2)
        raise TimeoutError(f"ClickHouse: waited {timeout:.0f}s for {what}")

    def tree(self) -> Tree:
        return read_tree(self.keeper, self.root)

    def rows(self, at: str = "r1") -> list[str]:
        return sorted(self.sql(at, f"SELECT d, u, x FROM {self.table} FORMAT TSV").splitlines())
