"""The load sweep (issue 38): the live runtime under a steady INSERT stream, 1 to 64 clients on 3
and 8 replicas, with one migration of the busiest partition started while the stream runs.

    python -m lab.load_sweep [--clients 1,4,16,64] [--replicas 3,8] [--seconds 20] [--markdown BENCHMARKS.md]

Each cell: a standalone ZooKeeper server on loopback (one for the sweep, a chroot per cell), a
cluster of the replicas at RF 2, `clients` threads each sending 3-row INSERT blocks over two
months (32 partitions) one after another for `seconds`, each with a deadline of INSERT_DEADLINE;
after a quarter of the time, REASSIGN of the partition that has received the most rows to a
replica that does not own it. Sampled every SAMPLE_EVERY s while the stream runs: the log's head,
every replica's log_pointer and the migration's state. Then the stream stops, the migration is
given MIGRATION_AFTER s to end, the threads stop, the cluster settles, a final query reads every
partition, and the oracle, DuckDB and the Spark job judge the history.

Columns: *lag*, the log's head minus the slowest replica's log_pointer (entries), its largest and
at the stream's end; *lag s*, for how long the oldest entry the slowest replica had not pulled
had been in the log (the head's samples date each entry), its largest; *queue*, the longest
replica queue (entries pulled and not executed yet: what the pointer does not show); *switched under load*,
whether the migration's SWITCH came while the stream still ran, and how long after its REASSIGN.
Prints the table and writes it into BENCHMARKS.md between `<!-- bench:load -->` markers. Exit 0
when every cell lost and duplicated nothing, the checkers agree and every invariant holds, and
the slowest replica stayed within LAG_BOUND_S of the stream in the 16 x 3 cell; 1 otherwise; 2 on
bad options; 3 when no ZooKeeper or Spark could be started; 130 interrupted.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from harness.cli_args import Parser, integers, number_at_least, optional_output_file
from lab.suite_command import Stopped, command_line, with_spark, write_section

ROOT = Path(__file__).resolve().parents[1]
RF = 2
INSERT_DEADLINE = 3.0     # seconds: each INSERT answers within it (Cluster.insert)
SAMPLE_EVERY = 0.25       # seconds between two samples of the log's head and the pointers
MIGRATION_AFTER = 60.0    # seconds the migration may take to end once the stream has stopped
# The bound the issue asks to state and measure: under 16 clients x 3 replicas the slowest
# replica's log_pointer is never further behind the log's head than the entries of the last
# LAG_BOUND_S seconds of the stream (lag s). A replica thread pulls the whole log each round
# (PULL_BATCHES multis of PULL_BATCH entries, runtime.py), so what it can fall behind by is one
# round's duration, under the machine's load.
LAG_BOUND_S = 5.0
BOUND_CELL = (16, 3)


@dataclass
class Cell:
    clients: int
    replicas: int
    seconds: float
    inserts: dict = field(default_factory=dict)           # sub-block status -> count
    insert_seconds: list = field(default_factory=list)    # each INSERT's call to answer
    lag_max: int = 0
    lag_end: int = 0
    lag_s_max: float = 0.0
    queue_max: int = 0                                    # the longest replica queue (entries not executed yet)
    queue_end: int = 0
    head: int = 0                                         # log entries at the stream's end
    switch_after: float | None = None                     # seconds from REASSIGN to SWITCH, during the stream
    ended_after_stream: float | None = None               # the migration's end, seconds after the stream stopped
    lost: int = -1
    duplicated: int = -1
    oracle: dict = field(default_factory=dict)
    spark: dict = field(default_factory=dict)
    duckdb: dict = field(default_factory=dict)
    note: str = ""

    @property
    def agree(self) -> bool:
        """All three checkers give the same verdict on every invariant."""
        return bool(self.spark) and self.oracle == self.spark == self.duckdb

    @property
    def held(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.agree and all(self.oracle.values())


def _lag_seconds(heads: list[tuple[float, int]], t: float, slowest: int) -> float:
    """How long before `t` the log's head passed `slowest`: the age of the oldest entry the slowest
    replica has not pulled (0 when it has pulled everything)."""
    for when, head in heads:
        if head > slowest:
            return max(0.0, t - when)
    return 0.0


def run_cell(hosts: str, clients: int, replicas: int, seconds: float, folder: Path, spark, seed: int = 1) -> Cell:
    from checkers.oracle import check
    from lab.faults import _lost_and_duplicated, duckdb_verdicts, spark_verdicts
    from protocol.assignment import read_assignment
    from protocol.keeper.zookeeper import ZooKeeperKeeper
    from protocol.migration import read_migration
    from protocol.replica import log_number
    from reference.cluster import Cluster
    from reference.runtime import LiveCluster
    from reference.workload import blocks

    cell = Cell(clients, replicas, seconds)
    chroot = f"/load/{uuid.uuid4().hex[:12]}"
    setup = ZooKeeperKeeper(hosts)
    try:
        setup.ensure_path(chroot)
    finally:
        setup.close()
    names = tuple(f"r{i}" for i in range(1, replicas + 1))
    c = Cluster(lambda: ZooKeeperKeeper(hosts + chroot, retry_deadline=1.5), folder / "data", replicas=names, seed=seed)
    stop, rows_into = threading.Event(), {}
    lock = threading.Lock()
    try:
        with LiveCluster(c, refresh_interval=0.3) as live:
            def client(i: int) -> None:
                work = blocks(random.Random(seed * 1000 + i), 10**9, 3, months=2, first_row_id=i * 10**7)
                while not stop.is_set():
                    block_id, rows = next(work)
                    t0 = time.monotonic()
                    status = live.insert(rows, block_id, deadline=INSERT_DEADLINE)
                    took = time.monotonic() - t0
                    with lock:
                        cell.insert_seconds.append(took)
                        for p, st in status.items():
                            cell.inserts[st] = cell.inserts.get(st, 0) + 1
                            if st == "ok":
                                rows_into[p] = rows_into.get(p, 0) + 1

            threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
            t_start = time.monotonic()
            for t in threads:
                t.start()
            heads: list[tuple[float, int]] = []
            moved = reassigned = None
            while (now := time.monotonic()) - t_start < seconds:
                if moved is None and now - t_start >= seconds / 4 and rows_into:
                    with lock:
                        moved = max(rows_into, key=rows_into.get)
                    with live.membership.shared():
                        a = read_assignment(c.admin, c.layout, moved)
                    live.reassign(moved, next(r for r in names if r not in a.owners))
                    reassigned = time.monotonic()
                with live.membership.shared():
                    log = c.admin.get_children(c.layout.log)
                    head = max(map(log_number, log)) + 1 if log else 0
                    slowest = min(int(c.admin.get(c.layout.log_pointer(r))[0]) for r in names)
                    queue = max(c.admin.exists(c.layout.queue(r)).num_children for r in names)
                    state = read_migration(c.admin, c.layout, moved)[0]["state"] if moved else None
                t = time.monotonic()
                heads.append((t, head))
                cell.lag_max = max(cell.lag_max, head - slowest)
                cell.lag_s_max = max(cell.lag_s_max, _lag_seconds(heads, t, slowest))
                cell.lag_end, cell.head = head - slowest, head
                cell.queue_max, cell.queue_end = max(cell.queue_max, queue), queue
                if state in ("switched", "done") and cell.switch_after is None:
                    cell.switch_after = t - reassigned
                time.sleep(SAMPLE_EVERY)
            stop.set()
            stream_end = time.monotonic()
            for t in threads:
                t.join(INSERT_DEADLINE * 10)
            while moved is not None and time.monotonic() - stream_end < MIGRATION_AFTER:
                if read_migration(c.admin, c.layout, moved)[0]["state"] == "done":
                    cell.ended_after_stream = time.monotonic() - stream_end
                    break
                time.sleep(SAMPLE_EVERY)
            if moved is None:
                cell.note = "no partition received a row before the REASSIGN was due"
            elif cell.ended_after_stream is None:
                cell.note = f"the migration of {moved} did not end within {MIGRATION_AFTER:g} s of the stream's end"
        c.settle()
        c.query()
        c.write_history(folder / "history")
        cell.oracle = {k: not v for k, v in check(c.history, RF).items()}
        cell.lost, cell.duplicated = _lost_and_duplicated(c.history)
        cell.spark = spark_verdicts(spark, str(folder / "history"))
        cell.duckdb = duckdb_verdicts(str(folder / "history"))
    finally:
        c.close()
    return cell


def table(cells: list[Cell]) -> list[str]:
    lines = ["| clients x replicas | INSERTs (ok, failed, unknown sub-blocks) | INSERT s (median, p99, max) | "
             "log entries | lag (max, at the end) | lag s (max) | queue (max, at the end) | switched under load | "
             "rows lost | rows duplicated | checkers agree | invariants violated |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in cells:
        xs = sorted(x.insert_seconds)
        lat = (f"{statistics.median(xs):.2f}, {xs[min(len(xs) - 1, int(0.99 * len(xs)))]:.2f}, {xs[-1]:.2f}"
               if xs else "-")
        ins = ", ".join(str(x.inserts.get(s, 0)) for s in ("ok", "failed", "unknown"))
        switched = (f"yes, {x.switch_after:.1f} s after REASSIGN" if x.switch_after is not None else
                    "no" + (f" (ended {x.ended_after_stream:.1f} s after the stream)" if x.ended_after_stream is not None
                            else f" ({x.note})"))
        violated = ", ".join(sorted(k for k, holds in x.oracle.items() if not holds)) or "none"
        lines.append(f"| {x.clients} x {x.replicas} | {ins} | {lat} | {x.head} | {x.lag_max}, {x.lag_end} | "
                     f"{x.lag_s_max:.1f} | {x.queue_max}, {x.queue_end} | {switched} | {x.lost} | {x.duplicated} | {'yes' if x.agree else 'NO'} | "
                     f"{violated} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m lab.load_sweep", description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=integers(1), default="1,4,16,64", help="INSERT clients per cell (comma-separated)")
    ap.add_argument("--replicas", type=integers(RF + 1), default="3,8", help="replicas per cell (comma-separated, each >= 3)")
    # at least 4: the REASSIGN comes after a quarter of it
    ap.add_argument("--seconds", type=number_at_least(4), default=20.0, help="how long the stream runs in each cell")
    ap.add_argument("--markdown", type=optional_output_file, default=str(ROOT / "BENCHMARKS.md"),
                    help="'' to write nothing")
    a = ap.parse_args(argv)
    clients, replicas = a.clients, a.replicas   # at least RF + 1 replicas: RF owners and a migration target
    command = command_line("python -m lab.load_sweep", argv)
    t0 = time.monotonic()

    def sweep(spark) -> list:
        from harness.zookeeper import ZooKeeperServer
        cells = []
        with ZooKeeperServer() as zk, tempfile.TemporaryDirectory(prefix="load-") as d:
            for r in replicas:
                for n in clients:
                    t1 = time.monotonic()
                    cell = run_cell(zk.hosts, n, r, a.seconds, Path(d) / f"{n}x{r}", spark)
                    cells.append(cell)
                    print(f"  {n} clients x {r} replicas: " + table([cell])[-1] + f" [{time.monotonic() - t1:.0f} s]",
                          flush=True)
        return cells
    try:
        cells = with_spark("load-sweep", sweep, "the server is stopped, no table written")
    except Stopped as e:
        return e.code
    lines = table(cells)
    print("\n".join(lines))
    bound = [x for x in cells if (x.clients, x.replicas) == BOUND_CELL]
    within = all(x.lag_s_max <= LAG_BOUND_S for x in bound)
    if bound:
        print(f"bound: under {BOUND_CELL[0]} clients x {BOUND_CELL[1]} replicas the slowest replica stayed within "
              f"{max(x.lag_s_max for x in bound):.1f} s of the stream (stated bound {LAG_BOUND_S:g} s): "
              + ("held" if within else "EXCEEDED"))
    if a.markdown:
        body = "\n".join(["## Load sweep: the live runtime under a steady INSERT stream", "",
                          f"Produced by `{command}` (run by `make faults`) in {time.monotonic() - t0:.0f} s. "
                          "A standalone ZooKeeper server on loopback, RF 2, each client thread sending 3-row "
                          f"INSERT blocks one after another for {a.seconds:g} s (each with a "
                          f"{INSERT_DEADLINE:g} s deadline), a REASSIGN of the busiest partition after a quarter "
                          "of it. *lag*: the log's head minus the slowest replica's log_pointer, in entries; *queue*: the "
                          "longest replica queue, entries pulled and not executed yet; "
                          "*lag s*: the age of the oldest entry the slowest replica had not pulled, sampled every "
                          f"{SAMPLE_EVERY:g} s. The stated bound: under {BOUND_CELL[0]} clients x "
                          f"{BOUND_CELL[1]} replicas, lag s <= {LAG_BOUND_S:g}. *switched under load*: the "
                          "migration's SWITCH came while the stream still ran; otherwise when it ended after. "
                          "Rows lost / duplicated, checkers and invariants as in the fault suite.", "",
                          *lines, ""])
        write_section(a.markdown, "load", body)
    return 0 if all(x.held for x in cells) and within else 1


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m lab.load_sweep", main))
