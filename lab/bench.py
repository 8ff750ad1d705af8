"""`make bench`: the figures the issues ask for, measured, with the command that produced them.

Sections (all by default, or `--only NAME`):
  reference  Keeper requests per INSERT (new / existing partition) beside plain replication,
             replication cost per block cluster-wide, Keeper requests per SELECT, steps per
             second on the in-memory keeper and on real ZooKeeper.
  keeper     (lab/bench_keeper.py) ZooKeeper writes per INSERT of a real ClickHouse and of
             the reference on one ZooKeeper server, from its transaction log.
  rebalance  (lab/bench_rebalance.py) SYSTEM REBALANCE's planner from 12 x 192 to
             1,000 x 100,000 (time, moves against the lower bound, peak memory), and the makespan
             of the RFC scenario's migrations under the landed and the least-busy start rule
             (fluid simulation), with Gantt charts in build/reports/.
  tlc        (lab/bench_tlc.py) the full model's TLC figures as `check_models --record`
             left them in spec/models.json (exhausting it again would take many minutes).
  distributed (lab/bench_distributed.py) the baseline seed 000 starts from, a Distributed table
             over manual shards: Keeper requests per INSERT and SELECT, and the bytes moved to add
             two nodes to ten, beside selective replication's.
  spark      (lab/bench_spark.py) the PySpark checker's end-to-end time on 10k rows, and its
             check time against the same checks in DuckDB at 1M and 10M rows (--spark-sizes),
             in one session and in fresh processes, with peak memory.

Figures go to BENCHMARKS.md (committed: the figures a reader sees) and build/reports/bench.json.
A run of one section (--only) replaces that section of BENCHMARKS.md and keeps the others.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

from harness.cli_args import Parser, optional_output_file, output_file
from lab.insert_costs import _ops, insert_costs

ROOT = Path(__file__).resolve().parents[1]


def steps_per_second(connect, tmp: Path, backend: str, n_blocks: int) -> dict:
    from reference.cluster import Cluster
    from reference.workload import blocks
    c = Cluster(connect, tmp / f"steps-{backend}", replicas=[f"r{i}" for i in range(1, 11)], seed=3, backend=backend)
    try:
        t0 = time.perf_counter()
        c.load(blocks(random.Random(3), n_blocks, 20, months=3))
        c.settle()
        moves = c.grow_and_rebalance(["r11", "r12"], lambda: c.query(interleave=2) if c.rng.random() < 0.1 else None)
        c.settle()
        secs = time.perf_counter() - t0
        return {"backend": backend, "steps": c.step, "seconds": round(secs, 2), "steps_per_second": round(c.step / secs, 1),
                "moves": len(moves), "keeper_requests": sum(v for k, v in _ops(c).items() if k != "multi_ops")}
    finally:
        c.close()


def bench_reference(quick: bool) -> dict:
    from harness.zookeeper import ZooKeeperServer
    from protocol.keeper import MemoryEnsemble
    from protocol.keeper.zookeeper import ZooKeeperKeeper
    res = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for mode in ("plain", "selective"):
            res[f"insert_{mode}"] = insert_costs(MemoryEnsemble().connect, tmp, 10, mode)
        res["steps_memory"] = steps_per_second(MemoryEnsemble().connect, tmp, "memory", 10 if quick else 40)
        with ZooKeeperServer() as zk:
            res["steps_zookeeper"] = steps_per_second(lambda: ZooKeeperKeeper(zk.hosts), tmp, "zookeeper",
                                                      5 if quick else 20)
    return res


def reference_markdown(r: dict) -> str:
    p, s = r["insert_plain"], r["insert_selective"]
    lines = ["## Reference implementation: Keeper requests (10 replicas)", "",
             "One one-row INSERT, counted over the replicas' Keeper sessions (the harness's own reads, "
             "through the administrator's session, are not the protocol's). *requests* are round trips to Keeper; "
             "*entries* are the operations inside multi requests (what the seeds' \"about ten Keeper entries "
             "per inserted block\" counts; the reference's part is one znode where ClickHouse writes several). "
             "*until settled*: write requests (create/set/delete/multi) and entries while every replica pulls, "
             "queues and fetches what it keeps, and publishes its map version (reads are the driver's polling, "
             "not counted).", "",
             "| case | INSERT requests | INSERT multi entries | writes until settled | entries until settled |",
             "|---|---|---|---|---|"]
    for name, m in (("plain replication (all 10 keep it), existing partition", p["existing_partition"]),
                    ("selective RF=2, new partition (allocation)", s["new_partition"]),
                    ("selective RF=2, existing partition", s["existing_partition"])):
        lines.append(f"| {name} | {m['insert']['requests']} | {m['insert']['entries_in_multi']} | "
                     f"{m['until_settled']['writes']} | {m['until_settled']['entries_in_multi']} |")
    lines += ["", f"Keeper requests per SELECT over every partition: {s['select']['requests']} "
              f"(plain: {p['select']['requests']}).", "",
              "Request kinds, selective new partition: "
              f"`{json.dumps(s['new_partition']['insert']['by_kind'])}`", "",
              "## Reference implementation: steps per second", "",
              "The RFC scenario: 10 replicas, inserts over 3 months x 16 buckets, 2 replicas added, "
              "REBALANCE with queries during it.", "",
              "| backend | steps | seconds | steps/s | Keeper requests | moves |", "|---|---|---|---|---|---|"]
    for k in ("steps_memory", "steps_zookeeper"):
        m = r[k]
        lines.append(f"| {m['backend']} | {m['steps']} | {m['seconds']} | {m['steps_per_second']} | "
                     f"{m['keeper_requests']} | {m['moves']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m lab.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["reference", "keeper", "rebalance", "tlc", "distributed", "spark"])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (for a smoke run)")
    ap.add_argument("--spark-sizes", type=_sizes, default=None, metavar="N,N,...",
                    help="inserted rows of the Spark section's histories (default 1000000,10000000; "
                         "50000000 adds ~15 min here)")
    ap.add_argument("--report", type=output_file, default=str(ROOT / "build" / "reports" / "bench.json"))
    ap.add_argument("--markdown", type=optional_output_file, default=str(ROOT / "BENCHMARKS.md"),
                    help="the file whose sections this run replaces; '' to write none")
    a = ap.parse_args(argv)
    command = ("python -m lab.bench" + (f" --only {a.only}" if a.only else "") + (" --quick" if a.quick else "")
               + (f" --spark-sizes {','.join(map(str, a.spark_sizes))}" if a.spark_sizes else ""))
    results, sections, summary = {}, [], []
    if a.only in (None, "reference"):
        print("bench: reference ...", flush=True)
        r = results["reference"] = bench_reference(a.quick)
        sections.append(("reference", reference_markdown(r)))
        summary.append(f"INSERT requests new/existing {r['insert_selective']['new_partition']['insert']['requests']}/"
                       f"{r['insert_selective']['existing_partition']['insert']['requests']}, SELECT "
                       f"{r['insert_selective']['select']['requests']}, {r['steps_memory']['steps_per_second']} steps/s memory")
    if a.only in (None, "keeper"):
        from lab.bench_keeper import bench_keeper, keeper_markdown
        print("bench: keeper (a real ClickHouse and the reference on one ZooKeeper) ...", flush=True)
        r = results["keeper"] = bench_keeper()
        sections.append(("keeper", keeper_markdown(r, command)))
        ch, ref = r["clickhouse"][0], r["reference"][0]
        summary.append(f"INSERT ops ClickHouse {ch['insert_ops']} in {ch['insert_requests']} requests, "
                       f"reference {ref['insert_ops']} in {ref['insert_requests']}")
    if a.only in (None, "rebalance"):
        from lab.bench_rebalance import bench_rebalance, rebalance_markdown, summary as rebalance_summary
        print("bench: rebalance ...", flush=True)
        r = results["rebalance"] = bench_rebalance(a.quick)
        sections.append(("rebalance", rebalance_markdown(r, f"`{command}` on {dt.date.today()}, {platform.machine()}, "
                                                               f"Python {platform.python_version()}, {_cores()} cores")))
        summary.append(rebalance_summary(r))
    if a.only in (None, "tlc"):
        from lab.bench_tlc import bench_tlc, tlc_markdown
        print("bench: tlc (recorded figures of the full model) ...", flush=True)
        r = results["tlc"] = bench_tlc()
        sections.append(("tlc", tlc_markdown(r)))
    if a.only in (None, "distributed"):
        from lab.bench_distributed import bench_distributed, distributed_markdown
        print("bench: distributed (manual shards beside selective replication) ...", flush=True)
        r = results["distributed"] = bench_distributed(a.quick)
        sections.append(("distributed", distributed_markdown(r, command)))
        summary.append(f"add 2 nodes to 10: selective {r['selective_gb']} GB, resharding {r['rehash_gb']} GB")
    if a.only in (None, "spark"):
        try:
            from lab.bench_spark import bench_spark, spark_markdown
        except ImportError as e:
            print(f"bench: spark section not built ({e})", file=sys.stderr)
        else:
            print("bench: spark ...", flush=True)
            r = results["spark"] = bench_spark(a.quick, a.spark_sizes)
            sections.append(("spark", spark_markdown(r, command)))
            summary.append(r["summary"])
    header = (f"# Benchmarks\n\nProduced by `{command}` (run by `make bench`) on {dt.date.today()}, "
              f"{platform.machine()}, Python {platform.python_version()}, {_cores()} cores.\n\n")
    from lab.bench_rebalance import splice
    # Each section replaces its own, between its markers: the rest of the file (the sections
    # measured by hand, their notes) is kept, a whole run included. A new file starts with the header.
    text = a.markdown.read_text() if a.markdown is not None and a.markdown.exists() else header
    for name, body in sections:
        text = splice(text, name, body)
    if a.markdown is not None:
        a.markdown.write_text(text)
    report = {"command": command, "results": results, "summary": "; ".join(summary)}
    Path(a.report).parent.mkdir(parents=True, exist_ok=True)
    Path(a.report).write_text(json.dumps(report, indent=1))
    print("\n\n".join(body for _, body in sections))
    return 0


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of row counts: {text!r}") from None
    if not sizes or min(sizes) < 1000:
        raise argparse.ArgumentTypeError(f"row counts of at least 1000 expected: {text!r}")
    return sizes


_sizes.declares = ("text", r"\d{4,}(,\d{4,})*")   # its shape, for the generated bad-input suite (tests/cli/)


def _cores() -> int:
    import os
    return os.cpu_count() or 0


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m lab.bench", main))
