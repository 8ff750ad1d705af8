"""Histories written by real ClickHouse replicas, for the Spark checker: the same tables a
reference run writes (history/record.py), taken from plain ReplicatedMergeTree servers
(harness/clickhouse.py) under the faults a client meets.

The workload, on one table of every replica (so every partition is owned by all of them and the
replication factor is the replica count):

- blocks of rows, one month each (one partition, so one part and one block id: a sub-block in the
  history's sense), sent to a random replica over HTTP and recorded with what the client was told:
  ``ok`` (HTTP 200), ``failed`` (an exception from the server), ``unknown`` (the connection broke);
- **a replica killed during an INSERT** (kill -9 from a second thread a few milliseconds in),
  restarted, and the block retried at another replica with the same data, as a client must;
- **an acknowledgement lost**: the client sends a block and hangs up before reading the answer,
  then retries it, either at once or after ``retry_after`` other blocks. ClickHouse deduplicates the
  retry by the block's hash while it is among the last ``replicated_deduplication_window`` blocks
  (100 in 18.16); after that the retry is a second copy (finding F17, ``MCRetryBeyondDedupWindow``);
- queries of the whole table at a random replica after SYSTEM SYNC REPLICA (ClickHouse replicas
  are eventually consistent; a synced read is what R2 promises), each partition's rows recorded;
- the final snapshot: SYNC every replica, then ``SELECT _part, row_id`` on each.

Time is a logical step counter, as in the reference's histories. A retried block keeps one entry
in ``inserts`` with the outcome of its last attempt, as ``reference/cluster.py`` records retries.
"""

from __future__ import annotations

import contextlib
import http.client
import random
import threading
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from harness.clickhouse import ClickHouseCluster, ClickHouseError
from history.record import History

TABLE_COLUMNS = "d Date, row_id UInt64"


@dataclass(frozen=True)
class Workload:
    table: str = "events"
    blocks: int = 24              # ordinary blocks
    rows: int = 20                # rows per ordinary block
    months: int = 3
    kill_rows: int = 200_000      # the block a replica is killed under: large enough to be mid-way
    dedup_window: int = 100       # replicated_deduplication_window of the table
    retry_after: int = 0          # other blocks sent before the lost-ack block is retried
    queries: int = 4

    @property
    def broken(self) -> bool:
        """The retry comes after the window has forgotten the block: a second copy is expected."""
        return self.retry_after >= self.dedup_window


class ClickHouseHistory:
    """One run of a Workload against a running ClickHouseCluster; `run()` returns the History."""

    def __init__(self, cluster: ClickHouseCluster, zk_path: str, workload: Workload, seed: int = 1):
        self.cluster, self.zk_path, self.w = cluster, zk_path, workload
        self.rng = random.Random(seed)
        self.seed = seed
        self.history = History(run_id=f"clickhouse-{workload.table}-{seed}")
        self.step = 0
        self.next_row = 1
        self.up = set(cluster.names)
        self.facts = {"killed_insert": None, "lost_ack_landed": False, "retries": 0}

    # --- the client -------------------------------------------------------------------------
    def tick(self) -> int:
        self.step += 1
        return self.step

    def rows(self, n: int) -> tuple[str, list[int]]:
        month = self.rng.randrange(self.w.months)
        ids = list(range(self.next_row, self.next_row + n))
        self.next_row += n
        return date(2024, 1 + month, 1 + self.rng.randrange(28)).isoformat(), ids

    def insert_sql(self, day: str, ids: list[int]) -> str:
        return f"INSERT INTO {self.w.table} FORMAT TSV\n" + "".join(f"{day}\t{i}\n" for i in ids)

    def send(self, at: str, day: str, ids: list[int]) -> str:
        try:
            self.cluster.query(at, self.insert_sql(day, ids))
            return "ok"
        except ClickHouseError as e:
            # 319: the server itself does not know whether the part was committed.
            return "unknown" if e.code == 319 else "failed"
        except ConnectionError:
            return "unknown"

    def record(self, day: str, ids: list[int], status: str, sent: int) -> None:
        partition = day[:4] + day[5:7]
        self.history.insert(f"b{ids[0]}", partition, [{"row_id": i} for i in ids], status, sent, self.tick())

    def insert(self, day: str, ids: list[int], tries: int = 3) -> str:
        """Send to random replicas until told ok or failed; unknown outcomes are retried with
        the same data, so ClickHouse's block hash deduplicates a retry of a committed block."""
        sent, status = self.tick(), "failed"
        for _ in range(tries):
            status = self.send(self.rng.choice(sorted(self.up)), day, ids)
            if status != "unknown":
                break
            self.facts["retries"] += 1
        self.record(day, ids, status, sent)
        return status

    # --- the faults -------------------------------------------------------------------------
    def kill_during_insert(self, victim: str) -> None:
        day, ids = self.rows(self.w.kill_rows)
        sent, outcome = self.tick(), {}
        worker = threading.Thread(target=lambda: outcome.setdefault("status", self.send(victim, day, ids)))
        worker.start()
        time.sleep(self.rng.uniform(0.005, 0.05))
        self.cluster.stop(victim)
        worker.join()
        status = outcome["status"]
        self.up.discard(victim)
        self.facts["killed_insert"] = status
        if status == "unknown":  # retried elsewhere with the same data
            self.facts["retries"] += 1
            status = self.send(self.rng.choice(sorted(self.up)), day, ids)
        self.record(day, ids, status, sent)
        self.cluster.start(victim)
        self.wait_active(victim)
        self.up.add(victim)

    def hang_up_after_sending(self, at: str, day: str, ids: list[int]) -> None:
        """The whole block is sent, the answer never read: the client cannot know the outcome."""
        conn = http.client.HTTPConnection("127.0.0.1", self.cluster.http_port(at), timeout=30)
        conn.request("POST", "/", body=self.insert_sql(day, ids).encode())
        conn.sock.shutdown(2)  # SHUT_RDWR: the request is out; nothing will be read
        conn.close()

    def lost_ack(self) -> list[int]:
        day, ids = self.rows(self.w.rows)
        sent, at = self.tick(), self.rng.choice(sorted(self.up))
        self.hang_up_after_sending(at, day, ids)
        # The scenario needs the first copy in (the client does not know it; the harness waits).
        self.facts["lost_ack_landed"] = self.wait(lambda: self.count(at, ids) == len(ids), 30)
        for _ in range(self.w.retry_after):
            self.insert(*self.rows(self.w.rows))
        if self.w.broken:  # the cleanup thread (every second here) trims blocks/ to the window
            self.facts["window_trimmed"] = self.wait(lambda: self.block_ids(at) <= self.w.dedup_window, 30)
        self.facts["retries"] += 1
        self.record(day, ids, self.send(self.rng.choice(sorted(self.up)), day, ids), sent)
        return ids

    # --- reads ------------------------------------------------------------------------------
    def sync(self) -> None:
        for r in sorted(self.up):   # a replica stuck on an entry is named with it (ReplicaNotSynced)
            self.cluster.sync_replica(r, self.w.table)

    def read(self, at: str) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for line in self.cluster.query(at, f"SELECT _part, row_id FROM {self.w.table} FORMAT TSV").splitlines():
            part, row_id = line.split("\t")
            out.setdefault(part.split("_")[0], []).append({"row_id": int(row_id), "part": part})
        return out

    def settled(self, replicas, timeout: float) -> bool:
        """SYSTEM SYNC REPLICA on each, then until they all hold the same number of rows (`timeout`
        seconds at most). 18.16's SYNC REPLICA waits only for the queue the replica has: one killed
        and restarted may not have pulled the log entries it missed yet, and returns at once (seen
        in make check on 2026-11-28: a query at r1 after the sync was 40 rows short)."""
        self.sync()
        return self.wait(lambda: len({self.count(r) for r in sorted(replicas)}) == 1, timeout)

    def query(self) -> None:
        self.settled(self.up, 30)
        at, start = self.rng.choice(sorted(self.up)), self.tick()
        rows = self.read(at)
        self.history.query(f"q{start}", at, start, self.tick(), {p: at for p in rows}, rows)

    def snapshot(self) -> None:
        """The settled end: every replica synced and, since a replica killed and restarted may still
        be fetching what it missed after SYSTEM SYNC REPLICA returns (seen once in a full make test
        on this 2-core machine: 20 rows short on r1), until all hold the same number of rows (60 s
        at most; a replica still short then is what the checkers judge)."""
        self.settled(self.cluster.names, 60)
        step, partitions = self.tick(), set()
        for r in sorted(self.cluster.names):
            for p, rows in sorted(self.read(r).items()):
                partitions.add(p)
                self.history.tables["parts"] += [{"snapshot_step": step, "replica": r, "partition_id": p,
                                                  "part_name": x["part"], "row_id": x["row_id"]} for x in rows]
        partitions |= {x["partition_id"] for x in self.history.tables["inserts"]}
        self.history.tables["assignments"] += [{"snapshot_step": step, "partition_id": p,
                                                "owners": sorted(self.cluster.names), "clone_target": "",
                                                "leaving_replica": None} for p in sorted(partitions)]

    # --- helpers ----------------------------------------------------------------------------
    def count(self, at: str, ids: list[int] | None = None) -> int:
        """Rows of the table at `at` (with `ids`, of that row_id range); -1 if it cannot answer."""
        where = f" WHERE row_id BETWEEN {ids[0]} AND {ids[-1]}" if ids else ""
        try:
            return int(self.cluster.query(at, f"SELECT count() FROM {self.w.table}{where}"))
        except (ClickHouseError, ConnectionError):
            return -1

    def block_ids(self, at: str) -> int:
        return int(self.cluster.query(at, "SELECT count() FROM system.zookeeper "
                                          f"WHERE path = '{self.zk_path}/blocks'"))

    @staticmethod
    def wait(done, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done():
                return True
            time.sleep(0.2)
        return False

    def wait_active(self, replica: str, timeout: float = 90.0) -> None:
        """Until the restarted replica answers queries on the replicated table again (it waits for
        its old session's is_active node to expire before it becomes active)."""
        def active():
            try:
                return self.cluster.query(replica, "SELECT is_readonly FROM system.replicas "
                                                   f"WHERE table = '{self.w.table}'").strip() == "0"
            except (ClickHouseError, ConnectionError):
                return False
        if not self.wait(active, timeout):
            raise TimeoutError(f"ClickHouse replica {replica} not active {timeout:.0f}s after its restart")

    # --- the run ----------------------------------------------------------------------------
    def create(self) -> None:
        for r in self.cluster.names:
            self.cluster.query(r, f"CREATE TABLE {self.w.table} ({TABLE_COLUMNS}) ENGINE = "
                                  f"ReplicatedMergeTree('{self.zk_path}', '{{replica}}') PARTITION BY toYYYYMM(d) "
                                  f"ORDER BY row_id SETTINGS replicated_deduplication_window = {self.w.dedup_window}, "
                                  "cleanup_delay_period = 1, cleanup_delay_period_random_add = 0")

    def run(self) -> History:
        self.create()
        half = self.w.blocks // 2
        for i in range(self.w.blocks):
            self.insert(*self.rows(self.w.rows))
            if i == half:
                self.kill_during_insert(self.rng.choice(sorted(self.cluster.names)))
                self.lost_ack()
            if self.w.queries and i % max(1, self.w.blocks // self.w.queries) == 0:
                self.query()
        self.snapshot()
        self.history.finish(len(self.cluster.names), f"clickhouse {self.cluster.version()}",
                            ["retry_beyond_dedup_window"] if self.w.broken else [], self.seed, self.step)
        return self.history


# The correct run, and the one that retries beyond a dedup window of 2 (F17): the checker must say
# that the first holds and find the second copy of the retried block in the other.
RUNS = (Workload(table="events"),
        Workload(table="events_small_window", blocks=8, queries=2, dedup_window=2, retry_after=3))


def clickhouse_histories(folder: Path, zk_hosts: str | None = None, seed: int = 1, say=print) -> list[dict]:
    """Start two ClickHouse replicas (on `zk_hosts`, else on a ZooKeeper server started here), run
    RUNS, write each history under `folder`; per run: its folder, whether a duplicate is expected,
    the in-process oracle's verdict and what the faults did."""
    from checkers.oracle import violations
    from harness.zookeeper import ZooKeeperServer

    with contextlib.ExitStack() as stack:
        if zk_hosts is None:
            zk_hosts = stack.enter_context(ZooKeeperServer()).hosts
        # A short session: the killed replica's is_active node expires in seconds, not 30.
        cluster = stack.enter_context(ClickHouseCluster(zk_hosts, ["r1", "r2"], session_timeout_ms=3000))
        out = []
        for w in RUNS:
            t0 = time.monotonic()
            run = ClickHouseHistory(cluster, f"/clickhouse/tables/{w.table}-{seed}", w, seed)
            h = run.run()
            h.write(folder / w.table)
            out.append({"history": str(folder / w.table), "table": w.table, "broken": w.broken,
                        "oracle_violations": len(violations(h, len(cluster.names))), "facts": run.facts,
                        "rows": len(h.tables["inserts"]), "version": cluster.version(),
                        "seconds": round(time.monotonic() - t0, 1)})
            say(f"  clickhouse {cluster.version()} {w.table}: {out[-1]['rows']:,} rows, killed INSERT "
                f"{run.facts['killed_insert']}, {run.facts['retries']} retries, "
                f"dedup window {w.dedup_window}, lost-ack retry after {w.retry_after} blocks ({out[-1]['seconds']} s)")
        return out
