"""The Spark section of `make bench`: the checker against DuckDB on the same synthetic histories, in
one run, and the checker's end-to-end time on a small history; and Polars against DuckDB on the
invariants over the large tables (lab/polars_check.py), on the same histories.

What is measured, each in its own process (so memory is its own and no process warms another):
- 10k rows end to end: `python -m pyspark_jobs.spark_check --input H` from exec to exit (JVM start,
  reading, the checks, shutdown): the fixed cost a user pays for any history.
- per size (10k always, 1M and 10M by default; 50M with `--spark-sizes`): the Spark check in a fresh process
  below 10M rows (its first check: the JVM's classes loaded and its code compiled during it), DuckDB on the same
  files (every invariant, then the row invariants alone), Polars on the row invariants, and the Spark
  checks of all sizes in one session (`--input` repeated, the 10k history
  first), where a check pays only for its rows: how `make check` and `--scale` use the job.
Peak memory: for Spark the resident size of the Python driver and its JVM together, sampled every
0.2 s; for DuckDB and Polars the process's ru_maxrss. Generation (by Spark, synth.py) is not counted, and its
session is stopped before anything is measured.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.polars_check import ROW_INVARIANTS

ROOT = Path(__file__).resolve().parents[1]
SMALL = 10_000
SIZES = [1_000_000, 10_000_000]          # 50M takes ~15 min here: --spark-sizes 1000000,10000000,50000000
QUICK_SIZES = [100_000, 1_000_000]
GOAL_RATIO, GOAL_SMALL_WALL = 3.0, 20.0  # issue 16
# A fresh process's check also pays the JVM's warm-up, a fixed cost that matters at 1M rows and is
# within the noise at 10M, where one more 10M run would cost minutes of a shared machine.
FRESH_BELOW = 10_000_000
# Issue 16's ratio goal is for histories of a million rows and more: at 10k rows a check is Spark's
# fixed cost, which the end-to-end goal bounds instead.
GOAL_FROM = 1_000_000


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


def _spark(folders: list[Path], report: Path) -> tuple[dict, list[dict]]:
    cmd = [sys.executable, "-m", "pyspark_jobs.spark_check", "--report", str(report)]
    for f in folders:
        cmd += ["--input", str(f)]
    s = run_measured(cmd)
    if s["rc"] != 0:
        raise RuntimeError(f"spark_check failed on correct synthetic histories {[f.name for f in folders]} (exit {s['rc']})")
    return s, json.loads(report.read_text())["results"]


def _single(module_args: list[str], rows: int) -> dict:
    """A single-process checker's report on a correct history (DuckDB's or Polars'), with the
    process's wall time; one that finds a violation or fails stops the bench."""
    k = run_measured([sys.executable, "-m", *module_args])
    if k["rc"] != 0:
        raise RuntimeError(f"{module_args[0]} failed on a correct synthetic history of {rows:,} rows (exit {k['rc']})")
    return {**json.loads(k["stdout"]), "wall_seconds": k["wall_seconds"]}


def _figures(report: dict) -> dict:
    return {k: report[k] for k in ("seconds", "wall_seconds", "peak_rss_mib")}


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def bench_spark(quick: bool, sizes: list[int] | None = None) -> dict:
    from harness.spark import spark_session
    from lab.synth import generate
    sizes = [n for n in (sizes or (QUICK_SIZES if quick else SIZES)) if n != SMALL]
    out = {"date": str(dt.date.today()), "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
           f"Python {platform.python_version()}", "load_before": _load()}
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as d:
        folder = {n: Path(d) / f"h{n}" for n in [SMALL, *sizes]}
        spark = spark_session("bench-generate")
        for n, f in folder.items():
            t0 = time.perf_counter()
            generate(spark, f, n)
            print(f"bench: {n:,} rows generated in {time.perf_counter() - t0:.1f} s", flush=True)
        spark.stop()  # its JVM would hold memory and threads through the measurements

        print("bench: 10k rows end to end ...", flush=True)
        s, (r,) = _spark([folder[SMALL]], Path(d) / "small.json")
        out["small"] = {"rows": SMALL, "wall_seconds": s["wall_seconds"], "check_seconds": r["seconds"],
                        "peak_rss_mib": s["peak_rss_mib"], "jobs": r["spark"]["jobs"]}
        print(f"bench: {out['small']}", flush=True)

        print("bench: every size in one session ...", flush=True)
        s, results = _spark([folder[n] for n in [SMALL, *sizes]], Path(d) / "session.json")
        in_session = {r["inserted_rows"]: r for r in results}
        out["session"] = {"wall_seconds": s["wall_seconds"], "peak_rss_mib": s["peak_rss_mib"],
                          "small_check_seconds": in_session[SMALL]["seconds"]}

        points = []
        for n in [SMALL, *sizes]:
            r, s = None, None
            if n == SMALL:   # the end-to-end run above is this size's fresh process
                s, r = {k: out["small"][k] for k in ("wall_seconds", "peak_rss_mib")}, {"seconds": out["small"]["check_seconds"]}
            elif n < FRESH_BELOW:
                print(f"bench: {n:,} rows, Spark in a fresh process ...", flush=True)
                s, (r,) = _spark([folder[n]], Path(d) / f"r{n}.json")
            print("bench: ... DuckDB, every invariant and the row invariants, then Polars", flush=True)
            duck = _single(["checkers.duckdb_check", str(folder[n])], n)
            only = [a for name in ROW_INVARIANTS for a in ("--only", name)]
            duck_rows = _single(["checkers.duckdb_check", str(folder[n]), *only], n)
            polars = _single(["lab.polars_check", str(folder[n])], n)
            if polars["violations"] != duck_rows["violations"]:
                raise RuntimeError(f"Polars and DuckDB count differently at {n:,} rows: "
                                   f"{polars['violations']} against {duck_rows['violations']}")
            one = in_session[n]
            points.append({"rows": n,
                           "spark_session": {"check_seconds": one["seconds"], "jobs": one["spark"]["jobs"],
                                             "stages": one["spark"]["stages"], "partitions": one["partitions"]},
                           "spark_fresh": r and {"check_seconds": r["seconds"], "wall_seconds": s["wall_seconds"],
                                                 "peak_rss_mib": s["peak_rss_mib"]},
                           "duckdb": _figures(duck), "duckdb_rows": _figures(duck_rows), "polars": _figures(polars)})
            p = points[-1]
            p["ratio_session"] = round(one["seconds"] / duck["seconds"], 2)
            p["ratio_fresh"] = r and round(r["seconds"] / duck["seconds"], 2)
            p["ratio_polars"] = round(polars["seconds"] / duck_rows["seconds"], 2)
            print(f"bench: {p}", flush=True)
    out["sizes"] = points
    out["load_after"] = _load()
    worst = max(p["ratio_session"] for p in points if p["rows"] >= GOAL_FROM)
    out["summary"] = (f"Spark {SMALL:,} rows end to end {out['small']['wall_seconds']} s; Spark / DuckDB "
                      + ", ".join(f"{p['rows']:,}: {p['ratio_session']}x" + (f" ({p['ratio_fresh']}x fresh)" if p["ratio_fresh"] else "")
                                   for p in points)
                      + "; Polars / DuckDB on the row invariants " + ", ".join(f"{p['rows']:,}: {p['ratio_polars']}x"
                                                                          for p in points))
    out["goal_met"] = worst <= GOAL_RATIO and out["small"]["wall_seconds"] <= GOAL_SMALL_WALL
    return out


def spark_markdown(r: dict, command: str) -> str:
    small = r["small"]
    lines = ["## PySpark checker against DuckDB (local[2])", "",
             f"Produced by `{command}` on {r['date']}, {r['machine']}; load average (1, 5, 15 min) "
             f"{r['load_before']} before, {r['load_after']} after (a shared machine: the ratios, from one run, are "
             "what compare). Correct synthetic histories (`lab/synth.py`: 48 partitions, RF 2 of 10 "
             "replicas, every row on two owners, four queries); every invariant decided, the same verdicts "
             "from both. *check s*: reading and deciding (the `seconds` of the report; DuckDB's from its connect); "
             "*one session*: every size checked by one `spark_check --input ... --input ...` process, the 10k "
             "history first; *fresh*: a process of its own, whose check also pays for loading and compiling the "
             f"JVM's code (run below {FRESH_BELOW:,} rows only). Peak memory: resident size of the process tree.", "",
             f"**{small['rows']:,} rows end to end** (`python -m pyspark_jobs.spark_check --input H`, JVM start to "
             f"exit): **{small['wall_seconds']} s** (goal <= {GOAL_SMALL_WALL:.0f} s), of which the check "
             f"{small['check_seconds']} s in {small['jobs']} Spark jobs (the same check as the one-session process's first: "
             f"{r['session']['small_check_seconds']} s).", "",
             "| inserted rows | Spark check s, one session | Spark jobs / stages | shuffle partitions | "
             "Spark check s, fresh | Spark wall s, fresh | Spark peak MiB, fresh | DuckDB check s | DuckDB peak MiB | "
             "Spark / DuckDB, one session | Spark / DuckDB, fresh |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in r["sizes"]:
        s, f, k = p["spark_session"], p["spark_fresh"] or {}, p["duckdb"]
        fresh = f"{p['ratio_fresh']:.1f}" if f else "not run"
        lines.append(f"| {p['rows']:,} | {s['check_seconds']} | {s['jobs']} / {s['stages']} | {s['partitions']} | "
                     f"{f.get('check_seconds', '')} | {f.get('wall_seconds', '')} | {f.get('peak_rss_mib', '')} | "
                     f"{k['seconds']} | {k['peak_rss_mib']} | **{p['ratio_session']:.1f}** | {fresh} |")
    lines += ["", f"One-session process: {r['session']['wall_seconds']} s wall, peak {r['session']['peak_rss_mib']} MiB.",
              "", _verdict(r), "",
              f"**Polars against DuckDB** on the {len(ROW_INVARIANTS)} invariants whose cost grows with the rows "
              f"(`lab/polars_check.py`: {', '.join(ROW_INVARIANTS)}; the others read tables of a few thousand rows at "
              "most, absent here), each a process of its own on the same files, the same counts from both (the bench "
              "stops otherwise). *check s*: from the process's start, its import of the engine included; *wall s*: "
              "exec to exit.", "",
              "| inserted rows | DuckDB check s | DuckDB wall s | DuckDB peak MiB | Polars check s | Polars wall s | "
              "Polars peak MiB | Polars / DuckDB |",
              "|---|---|---|---|---|---|---|---|"]
    for p in r["sizes"]:
        k, o = p["duckdb_rows"], p["polars"]
        lines.append(f"| {p['rows']:,} | {k['seconds']} | {k['wall_seconds']} | {k['peak_rss_mib']} | {o['seconds']} | "
                     f"{o['wall_seconds']} | {o['peak_rss_mib']} | **{p['ratio_polars']:.1f}** |")
    return "\n".join(lines) + "\n"


def _verdict(r: dict) -> str:
    """The issue's goal, met or missed by how much, in words."""
    small = r["small"]["wall_seconds"]
    parts = [f"Goal (issue 16): Spark <= {GOAL_RATIO:.0f}x DuckDB at each size from {GOAL_FROM:,} rows, "
             f"<= {GOAL_SMALL_WALL:.0f} s end to end at 10k rows."]
    for p in (p for p in r["sizes"] if p["rows"] >= GOAL_FROM):
        x = p["ratio_session"]
        parts.append(f"{p['rows']:,} rows: {x:.1f}x in one session, "
                     + ("met" if x <= GOAL_RATIO else f"missed: {x / GOAL_RATIO:.2f} times the goal")
                     + ("." if not p["ratio_fresh"] else f" ({p['ratio_fresh']:.1f}x fresh, "
                        + ("met" if p["ratio_fresh"] <= GOAL_RATIO else f"missed: {p['ratio_fresh'] / GOAL_RATIO:.2f} times the goal")
                        + ")."))
    parts.append(f"10k end to end: {small} s, " + ("met." if small <= GOAL_SMALL_WALL
                                                 else f"missed by {small - GOAL_SMALL_WALL:.1f} s."))
    return " ".join(parts)
