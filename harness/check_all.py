"""`make check`, `make check-thorough` and the single-stage targets: run each stage, then print
one summary table with each stage's wall time and cpu time (two cores: cpu near twice the time
means the stage kept both busy).

`make check` is the main job: every small model (two at a time) beside the real-ClickHouse
traces, the ci conformance profile and then the reference's traces beside the Spark job on the
small racing runs, and the long tests that no other stage repeats (17 min on two cores when last
measured, 20-21 min on the slower half hours before; the goal is 20, BENCHMARKS.md says where the
time goes). `make check-thorough` (`--thorough`) is the
hours-long sweep: every model of the manifest, the thorough conformance profile, the large Spark
runs, every long test and the fault suite.

A stage is built when its entry module exists; a stage that is not built yet is reported as
such (and `make <stage>` alone exits 2), never run as an empty pass. Each stage writes
build/reports/<stage>.json with a one-line "summary" of its key figures, shown in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.cli_args import Parser

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "build" / "reports"


@dataclass
class Stage:
    name: str
    entry: str            # module file whose presence means the stage is built
    args: list[str]       # python arguments, {report} replaced by the report path
    issue: str            # where the stage's work is tracked while it is not built

    @property
    def built(self) -> bool:
        return (ROOT / self.entry).is_file()


STAGES = {
    # Two one-worker runs side by side: many models take seconds, and a JVM's start and a model's
    # tail leave the second core idle under one two-worker run (BENCHMARKS.md, "make check").
    "check-spec": Stage("check-spec", "harness/check_models.py",
                        ["-m", "harness.check_models", "--size", "{size}", "--jobs", "2", "--workers", "1",
                         "--report", "{report}"], "spec"),
    "conformance": Stage("conformance", "conformance/__main__.py",
                         ["-m", "conformance", "--profile", "{profile}", "--report", "{report}"], "conformance"),
    "spark-check": Stage("spark-check", "lab/spark_runs.py",
                         ["-m", "lab.spark_runs", "--scale", "{scale}", "--report", "{report}"], "pyspark"),
    "long-tests": Stage("long-tests", "harness/long_tests.py",
                        ["-m", "harness.long_tests", "{thorough}", "--report", "{report}"], "harness"),
    # Trace validation of random real-ClickHouse runs (issue 36): about 25 s a run on 2 cores.
    "traces": Stage("traces", "traces/__main__.py",
                    ["-m", "traces", "clickhouse", "--runs", "{trace_runs}", "--inserts", "60",
                     "--keep", "build/traces", "--report", "{report}"], "traces"),
    # ... and of the reference's racing runs on ZooKeeper: migrations, cancels, take-overs, a down
    # leaver's CLEANUP (racing, leaving; 40-90 s each). make test validates cancelling's.
    "reference-traces": Stage("reference-traces", "traces/__main__.py",
                              ["-m", "traces", "reference", "--design", "rfc", "--design", "pr102244",
                               "--profile", "racing", "--profile", "leaving", "--keep", "build/traces",
                               "--report", "{report}"], "traces"),
    "bench": Stage("bench", "lab/bench.py", ["-m", "lab.bench", "--report", "{report}"], "reference"),
    # The fault x state matrix on a 3-node ensemble (issue 15); its table goes into BENCHMARKS.md.
    "faults": Stage("faults", "lab/faults.py", ["-m", "lab.faults", "--report", "{report}"], "reference"),
    # Every guard clause dropped in a copy of the checkout, the reference tests that fail without
    # it compared with tests/README.md's table (issue 37; about 15 min on 2 cores).
    "guard-clauses": Stage("guard-clauses", "lab/guard_clauses.py",
                           ["-m", "lab.guard_clauses", "--check", "--jobs", "2", "--report", "{report}"], "lab"),
}
# Steps run in turn; the lanes of one step run side by side, and a lane (a tuple) runs its stages
# in turn. check-spec and the long tests keep both cores busy alone (cpu about twice their time);
# the conformance profile (140 cpu s in 122 s) and the Spark job on its runs (414 in 301) leave
# room for each other (7be97a2, each alone; side by side, BENCHMARKS.md "make check"), and the
# reference's traces (one ZooKeeper and one TLC worker, about a core) take conformance's lane when
# it ends, where spark-check's tail left a core idle. The traces' three ClickHouse runs go beside
# check-spec, which starts no ClickHouse: beside spark-check's real-ClickHouse runs a replica of
# theirs failed to start once (exit 70, "Invalid argument" while loading metadata; a fresh clone's
# make check, 2026-11-30), and alone they left a core idle (45 cpu s in 54 s at 7d5cd04).
CHECK_STEPS = [["check-spec", "traces"], [("conformance", "reference-traces"), "spark-check"], ["long-tests"]]
# The sweep: every model's check starts with the longest on record, MCFullOnePartition, whose one
# worker took 56 of check-spec's minutes while the 150 others were done on the other core after
# 38 (a fresh clone at 36bbd2e); the thorough conformance profile, one Python process of an hour
# or so, goes beside it instead of alone in the next step. The three share both cores until the
# small models end, then the large model and the profile have one each.
# Measured on a fresh clone at c67f9e1 (BENCHMARKS.md "make check"): check-spec 66 min, the profile
# 101 min after the traces' 5, so one core idled for the profile's last 39 while the Spark job's
# large runs (10 min) and the reference's traces (1-2 min) waited for the next step. Now the
# profile starts at once with a lane of its own, and the other lane runs the traces, check-spec,
# the Spark job and the reference's traces in turn: about 83 min of stages beside the profile's
# 101, so the step should end with the profile, about 15 min sooner, less what the Spark job's 1.4
# cores take from the profile's one at the end. In one lane the traces' ClickHouse runs can never
# meet the Spark job's (the rule above). Not yet measured end to end (a 3-hour run).
THOROUGH_STEPS = [[("traces", "check-spec", "spark-check", "reference-traces"), "conformance"], ["long-tests"],
                  ["faults"], ["guard-clauses"]]


def lanes(step: list) -> list[tuple[str, ...]]:
    """A step's lanes, each the stages it runs in turn (a name alone is a lane of one)."""
    return [(lane,) if isinstance(lane, str) else tuple(lane) for lane in step]


CHECK_STAGES = [name for step in CHECK_STEPS for lane in lanes(step) for name in lane]
THOROUGH_STAGES = [name for step in THOROUGH_STEPS for lane in lanes(step) for name in lane]


def stage_command(stage: Stage, thorough: bool, alone: bool = False) -> tuple[list[str], Path]:
    report = REPORTS / f"{stage.name}.json"
    subst = {"{report}": str(report), "{size}": "all" if thorough else "small",
             # make conformance alone: the dev profile (with the switch table); make check: ci;
             # make check-thorough: thorough
             "{profile}": "thorough" if thorough else ("dev" if alone else "ci"),
             "{scale}": "large" if thorough else "small", "{thorough}": "--thorough" if thorough else None,
             "{trace_runs}": "8" if thorough else "3"}
    args = [subst.get(a, a) for a in stage.args]
    return [sys.executable, *[a for a in args if a is not None]], report   # None: a flag this form leaves out


def run_stage(stage: Stage, thorough: bool, alone: bool = False, prefix: str | None = None) -> dict:
    """Run one stage; with `prefix`, its output lines are shown under that prefix (a stage running
    beside another), else as they come."""
    if not stage.built:
        return {"stage": stage.name, "result": "not built", "summary": f"{stage.entry} does not exist yet ({stage.issue} issue)",
                "seconds": 0.0}
    REPORTS.mkdir(parents=True, exist_ok=True)
    cmd, report = stage_command(stage, thorough, alone)
    report.unlink(missing_ok=True)
    print(f"==> {stage.name}: {' '.join(cmd[1:])}", flush=True)
    start = time.monotonic()
    if prefix is None:
        rc = subprocess.call(cmd, cwd=ROOT)
    else:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", bufsize=1)
        for line in proc.stdout:
            sys.stdout.write(prefix + line)
            sys.stdout.flush()
        rc = proc.wait()
    secs = time.monotonic() - start
    summary = "no report written"
    if report.is_file():
        summary = json.loads(report.read_text()).get("summary", summary)
    return {"stage": stage.name, "result": "passed" if rc == 0 else f"FAILED (exit {rc})", "summary": summary,
            "seconds": round(secs, 1)}


def run_step(step: list, thorough: bool, alone: bool = False) -> list[dict]:
    """The lanes of one step, side by side when there are several, each running its stages in turn;
    each row gets the step's cpu seconds (one process tree's time cannot be told from the other's
    once orphans are adopted) and the stages of the other lanes as `beside`.
    `alone`: a stage run by itself (`make conformance`), which picks its own form."""
    cpu = _children_cpu()
    step_lanes = lanes(step)
    side_by_side = len(step_lanes) > 1
    width = max(len(name) for lane in step_lanes for name in lane)

    def run_lane(lane: tuple[str, ...]) -> list[dict]:
        return [run_stage(STAGES[n], thorough, alone, prefix=f"[{n.ljust(width)}] " if side_by_side else None)
                for n in lane]
    if side_by_side:
        with ThreadPoolExecutor(max_workers=len(step_lanes)) as pool:   # threads only wait on the stages
            rows = [row for lane_rows in pool.map(run_lane, step_lanes) for row in lane_rows]
    else:
        rows = run_lane(step_lanes[0])
    cpu = round(_children_cpu() - cpu, 1)   # reaps orphans: only once every stage of the step is done
    for row in rows:
        row["cpu_seconds"] = cpu
        if side_by_side:
            row["beside"] = [n for lane in step_lanes if row["stage"] not in lane for n in lane]
    return rows


def _children_cpu() -> float:
    """User + system CPU seconds of the finished descendants: with the wall time, it says how much
    of the two cores a stage kept busy. A process counts only once something waits for it, and
    pyspark never waits for its JVM (it exits after its Python does, orphaned), so check_all
    adopts orphans (_adopt_orphans) and reaps them here."""
    _reap_orphans()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _adopt_orphans() -> None:
    # PR_SET_CHILD_SUBREAPER (36, Linux >= 3.4): a descendant whose parent exits is handed to this
    # process, not to init, so its CPU time reaches RUSAGE_CHILDREN once reaped.
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass   # not Linux: the cpu column then leaves out orphans' time


def _reap_orphans(wait: float = 3.0) -> None:
    """Reap adopted orphans, giving those still running (a JVM shutting down after its Python)
    up to `wait` seconds; one still alive after that is left, and counted when it ends."""
    deadline = time.monotonic() + wait
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return            # no children at all
        if pid == 0 and time.monotonic() >= deadline:
            return
        if pid == 0:
            time.sleep(0.1)


def print_table(rows: list[dict]) -> None:
    head = ("stage", "result", "key figures", "time", "cpu")

    def cpu(r: dict) -> str:
        if "cpu_seconds" not in r:
            return "-"
        return f"{r['cpu_seconds']:.0f}s" + (f" (with {', '.join(r['beside'])})" if r.get("beside") else "")
    cells = [head] + [(r["stage"], r["result"], r["summary"], f"{r['seconds']:.0f}s", cpu(r)) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    line = "-+-".join("-" * w for w in widths)
    print("\n" + line)
    for i, c in enumerate(cells):
        print(" | ".join(x.ljust(w) for x, w in zip(c, widths)))
        if i == 0:
            print(line)
    print(line)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m harness.check_all", description=__doc__.splitlines()[0])
    ap.add_argument("--stage", choices=sorted(STAGES), help="run one stage alone (exit 2 if it is not built)")
    ap.add_argument("--thorough", action="store_true",
                    help="make check-thorough: every model, thorough profile, large Spark run, every long test, faults")
    a = ap.parse_args(argv)
    _adopt_orphans()
    try:
        return run(a)
    except KeyboardInterrupt:   # the stages got the terminal's Ctrl-C too, and stop on it
        print("python -m harness.check_all: interrupted", file=sys.stderr)
        return 130


def run(a: argparse.Namespace) -> int:
    if a.stage:
        [row] = run_step([a.stage], a.thorough, alone=True)
        if row["result"] == "not built":
            print(f"{a.stage}: not built yet: {row['summary']}", file=sys.stderr)
            return 2
        print_table([row])
        return 0 if row["result"] == "passed" else 1
    start, cpu = time.monotonic(), _children_cpu()
    rows = [row for step in (THOROUGH_STEPS if a.thorough else CHECK_STEPS) for row in run_step(step, a.thorough)]
    rows.append({"stage": "total", "result": "", "summary": "make check-thorough" if a.thorough else "make check",
                 "seconds": round(time.monotonic() - start, 1), "cpu_seconds": round(_children_cpu() - cpu, 1)})
    print_table(rows)
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / ("check-thorough.json" if a.thorough else "check.json")).write_text(json.dumps(rows, indent=1))
    missing = [r["stage"] for r in rows if r["result"] == "not built"]
    failed = [r["stage"] for r in rows if r["result"].startswith("FAILED")]
    if missing:
        print(f"not built yet: {', '.join(missing)} (reported, not run)")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m harness.check_all", main))
