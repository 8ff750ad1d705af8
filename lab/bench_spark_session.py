"""What a Spark session that checks many small histories costs under each driver JVM setting: the
racing histories make spark-check checks (lab/spark_runs.py), made once, then checked one after
another in one fresh session per setting (a JVM's JIT flags are fixed when it starts).

    python -m lab.bench_spark_session [--histories 12]

Prints one row per setting: the first check (JVM warm-up included), the others, all. The table
in BENCHMARKS.md ("make check: the main job, stage by stage") is its output.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.cli_args import Parser, int_at_least, text

# (driver JVM options, SQL settings) compared: C1 alone (the one-history short-job choice), both
# tiers with either collector, and code generation off (is Janino the fixed cost? it is not).
SETTINGS = [
    ("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", {}),
    ("-XX:+UseSerialGC", {}),
    ("-XX:+UseParallelGC", {}),
    ("-XX:+UseParallelGC", {"spark.sql.codegen.wholeStage": "false"}),
]


def make_histories(folder: Path, n: int) -> list[str]:
    """The first n of spark-check's racing runs at the small scale, fixed runs and teeth alternating."""
    from lab.spark_runs import racing_cases
    from lab.teeth import SIZE
    from reference.races import racing_history
    teeth, fixed = racing_cases("small")
    cases = [(p, s, None) for p, s in fixed][:n // 2] + [(t.profile, t.seed, t.switch) for t in teeth][:n - n // 2]
    return [racing_history(folder / f"{p}-{s}-{sw or 'fixed'}", p, s, frozenset({sw}) if sw else frozenset(),
                           **SIZE)["history"] for p, s, sw in cases]


def one_session(jvm: str, sql: dict, histories: list[str]) -> dict:
    """In this process: a session started with `jvm`, each history checked; seconds per check."""
    import checkers.spark.session as session
    from pyspark_jobs.spark_check import check_folder
    session.java_options = lambda rows: jvm  # the setting under test, whatever the job's size
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        spark, _ = session.start(None, log.name, 60, None)
        try:
            for k, v in sql.items():
                spark.conf.set(k, v)
            times = []
            for h in histories:
                t = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):
                    check_folder(spark, h, 3)
                times.append(round(time.perf_counter() - t, 2))
        finally:
            spark.stop()
    return {"jvm": jvm, "sql": sql, "checks": times}


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m lab.bench_spark_session", description=__doc__.splitlines()[0])
    ap.add_argument("--histories", type=int_at_least(1), default=12,
                    help="racing histories to check in each session (default 12)")
    # internal: one setting, in a process of its own
    ap.add_argument("--session", type=text("a session's settings (JSON)", r"\[.*\]"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.session:
        jvm, sql, histories = json.loads(a.session)
        print(json.dumps(one_session(jvm, sql, histories)))
        return 0
    with tempfile.TemporaryDirectory() as d:
        histories = make_histories(Path(d), a.histories)
        print(f"{len(histories)} racing histories, one fresh session per setting\n")
        print("| driver JVM | SQL settings | first check | the others | all |\n|---|---|---|---|---|")
        for jvm, sql in SETTINGS:
            out = subprocess.run([sys.executable, "-m", "lab.bench_spark_session", "--session",
                                  json.dumps([jvm, sql, histories])], capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            c = r["checks"]
            print(f"| `{jvm}` | {', '.join(f'`{k}={v}`' for k, v in sql.items()) or '-'} | {c[0]:.1f} s | "
                  f"{sum(c[1:]):.1f} s | {sum(c):.1f} s |", flush=True)
    return 0


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m lab.bench_spark_session", main))
