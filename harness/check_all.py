"""`make check`, `make check-thorough` and the single-stage targets: run each stage, then print
one summary table with each stage's time.

`make check` is the main job: every small model (two at a time), the ci conformance profile, the
Spark job on the small racing runs, and the long tests that no other stage repeats (28 min on two
cores when last measured; the goal is 20, BENCHMARKS.md says where the time goes). `make
check-thorough` (`--thorough`) is the hours-long sweep: every model of the manifest, the thorough
conformance profile, the large Spark runs, every long test and the fault suite.

A stage is built when its entry module exists; a stage that is not built yet is reported as
such (and `make <stage>` alone exits 2), never run as an empty pass. Each stage writes
build/reports/<stage>.json with a one-line "summary" of its key figures, shown in the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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
    "bench": Stage("bench", "lab/bench.py", ["-m", "lab.bench", "--report", "{report}"], "reference"),
    # The fault x state matrix on a 3-node ensemble (issue 15); its table goes into BENCHMARKS.md.
    "faults": Stage("faults", "lab/faults.py", ["-m", "lab.faults", "--report", "{report}"], "reference"),
}
CHECK_STAGES = ["check-spec", "conformance", "spark-check", "long-tests"]
THOROUGH_STAGES = CHECK_STAGES + ["faults"]


def run_stage(stage: Stage, thorough: bool, alone: bool = False) -> dict:
    if not stage.built:
        return {"stage": stage.name, "result": "not built", "summary": f"{stage.entry} does not exist yet ({stage.issue} issue)",
                "seconds": 0.0}
    REPORTS.mkdir(parents=True, exist_ok=True)
    report = REPORTS / f"{stage.name}.json"
    report.unlink(missing_ok=True)
    subst = {"{report}": str(report), "{size}": "all" if thorough else "small",
             # make conformance alone: the dev profile (with the switch table); make check: ci;
             # make check-thorough: thorough
             "{profile}": "thorough" if thorough else ("dev" if alone else "ci"),
             "{scale}": "large" if thorough else "small", "{thorough}": "--thorough" if thorough else None}
    args = [subst.get(a, a) for a in stage.args]
    cmd = [sys.executable, *[a for a in args if a is not None]]   # None: a flag this form leaves out
    print(f"==> {stage.name}: {' '.join(cmd[1:])}", flush=True)
    start = time.monotonic()
    rc = subprocess.call(cmd, cwd=ROOT)
    secs = time.monotonic() - start
    summary = "no report written"
    if report.is_file():
        summary = json.loads(report.read_text()).get("summary", summary)
    return {"stage": stage.name, "result": "passed" if rc == 0 else f"FAILED (exit {rc})", "summary": summary,
            "seconds": round(secs, 1)}


def print_table(rows: list[dict]) -> None:
    head = ("stage", "result", "key figures", "time")
    cells = [head] + [(r["stage"], r["result"], r["summary"], f"{r['seconds']:.0f}s") for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    line = "-+-".join("-" * w for w in widths)
    print("\n" + line)
    for i, c in enumerate(cells):
        print(" | ".join(x.ljust(w) for x, w in zip(c, widths)))
        if i == 0:
            print(line)
    print(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.check_all", description=__doc__.splitlines()[0])
    ap.add_argument("--stage", choices=sorted(STAGES), help="run one stage alone (exit 2 if it is not built)")
    ap.add_argument("--thorough", action="store_true",
                    help="make check-thorough: every model, thorough profile, large Spark run, every long test, faults")
    a = ap.parse_args(argv)
    if a.stage:
        row = run_stage(STAGES[a.stage], a.thorough, alone=True)
        if row["result"] == "not built":
            print(f"{a.stage}: not built yet: {row['summary']}", file=sys.stderr)
            return 2
        print_table([row])
        return 0 if row["result"] == "passed" else 1
    start = time.monotonic()
    rows = [run_stage(STAGES[name], a.thorough) for name in (THOROUGH_STAGES if a.thorough else CHECK_STAGES)]
    rows.append({"stage": "total", "result": "", "summary": "make check-thorough" if a.thorough else "make check",
                 "seconds": round(time.monotonic() - start, 1)})
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
    sys.exit(main())
