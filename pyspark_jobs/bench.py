"""The Spark section of `make bench`: the checker's throughput at 1M, 10M and 50M inserted rows
on local[2], its peak memory, and the same checks in DuckDB (single process) on the same files.

Each check runs in its own process, so its peak memory is its own: for Spark the resident size
of the Python driver and its JVM together, sampled every 0.2 s; for DuckDB the process's
ru_maxrss. Generation (by Spark, synth.py) is timed separately and not counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tree_rss_kib(root: int) -> int:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def run_measured(cmd: list[str]) -> dict:
    """Run cmd; wall seconds, exit code, peak resident memory of its process tree, stdout."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_kib(proc.pid))
        time.sleep(0.2)
    out = proc.stdout.read()
    return {"wall_seconds": round(time.perf_counter() - t0, 1), "rc": proc.returncode,
            "peak_rss_mib": round(peak / 1024), "stdout": out}


def bench_spark(quick: bool) -> dict:
    from harness.spark import spark_session
    from pyspark_jobs.synth import generate
    sizes = [100_000, 1_000_000] if quick else [1_000_000, 10_000_000, 50_000_000]
    results = []
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as d:
        spark = spark_session("bench-generate")
        for n in sizes:
            folder = Path(d) / f"h{n}"
            t0 = time.perf_counter()
            generate(spark, folder, n)
            gen = round(time.perf_counter() - t0, 1)
            print(f"bench: {n:,} rows generated in {gen} s; checking with Spark ...", flush=True)
            report = Path(d) / f"r{n}.json"
            s = run_measured([sys.executable, "-m", "pyspark_jobs.spark_check", "--input", str(folder),
                              "--report", str(report)])
            if s["rc"] != 0:
                raise RuntimeError(f"spark_check failed on a correct synthetic history of {n} rows (exit {s['rc']})")
            check_secs = json.loads(report.read_text())["results"][0]["seconds"]
            print("bench: ... and with DuckDB", flush=True)
            k = run_measured([sys.executable, "-m", "pyspark_jobs.duckdb_check", str(folder)])
            if k["rc"] != 0:
                raise RuntimeError(f"duckdb_check failed on a correct synthetic history of {n} rows (exit {k['rc']})")
            duck = json.loads(k["stdout"])
            results.append({"rows": n, "generate_seconds": gen,
                            "spark": {"check_seconds": check_secs, "wall_seconds": s["wall_seconds"],
                                      "rows_per_second": round(n / check_secs), "peak_rss_mib": s["peak_rss_mib"]},
                            "duckdb": {"check_seconds": duck["seconds"], "wall_seconds": k["wall_seconds"],
                                       "rows_per_second": round(n / duck["seconds"]),
                                       "peak_rss_mib": duck["peak_rss_mib"]}})
            print(f"bench: {results[-1]}", flush=True)
        spark.stop()
    biggest = results[-1]
    return {"sizes": results,
            "summary": f"Spark {biggest['spark']['rows_per_second']:,} rows/s at {biggest['rows']:,} rows "
                       f"(DuckDB {biggest['duckdb']['rows_per_second']:,})"}


def spark_markdown(r: dict) -> str:
    lines = ["## PySpark checker: throughput and memory (local[2])", "",
             "Correct synthetic histories (`pyspark_jobs/synth.py`: 48 partitions, RF 2 of 10 replicas, "
             "every row on two owners, four queries); all eight invariants checked. *check s*: the checks "
             "alone (reading included); *wall s*: the whole process, JVM start included. Peak memory: "
             "resident size of the process tree.", "",
             "| inserted rows | Spark check s | Spark wall s | Spark rows/s | Spark peak MiB | "
             "DuckDB check s | DuckDB rows/s | DuckDB peak MiB | Spark / DuckDB time |",
             "|---|---|---|---|---|---|---|---|---|"]
    for x in r["sizes"]:
        s, k = x["spark"], x["duckdb"]
        lines.append(f"| {x['rows']:,} | {s['check_seconds']} | {s['wall_seconds']} | {s['rows_per_second']:,} | "
                     f"{s['peak_rss_mib']} | {k['check_seconds']} | {k['rows_per_second']:,} | {k['peak_rss_mib']} | "
                     f"{s['check_seconds'] / k['check_seconds']:.1f} |")
    if len(r["sizes"]) > 1:
        a, b = r["sizes"][0], r["sizes"][-1]
        growth = (b["spark"]["check_seconds"] / a["spark"]["check_seconds"]) / (b["rows"] / a["rows"])
        lines += ["", f"Spark time grows {b['spark']['check_seconds'] / a['spark']['check_seconds']:.1f}x for "
                  f"{b['rows'] / a['rows']:.0f}x the rows ({growth:.2f} of linear)."]
    return "\n".join(lines) + "\n"
