"""The PySpark invariant checker: no acknowledged row lost, none duplicated (R2/R3 of seed 001),
on the history a reference run wrote.

    spark-submit pyspark_jobs/spark_check.py --input HISTORY_DIR [--report out.json]
    python -m pyspark_jobs.spark_check --input HISTORY_DIR [--master local[2]|spark://HOST:PORT]

Prints a line per invariant as it finishes. Exit status: 0 every invariant holds, 1 a violation
was found, 2 bad input or usage, 3 the environment failed (Java, Spark, the cluster). Errors are
one line on stderr naming the problem and the log with the details; never a traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make `pyspark_jobs` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkers.spark.errors import root_cause, unreadable_file  # noqa: E402
from harness import cli_args  # noqa: E402
from harness.cli_args import (BAD_INPUT, ENVIRONMENT, HOLDS, INTERRUPTED, VIOLATED, BadInput, EnvironmentFailure,  # noqa: E402
                              existing_dir, int_at_least, output_file, positive_float, text)
from history.folder import find_tables  # noqa: E402

log = logging.getLogger("spark_check")


class Parser(cli_args.Parser):
    def error(self, message):  # one line and exit 2 by guarded, which logs it too
        raise BadInput(f"{message} (see {self.prog} --help)")


def history_folder(text: str) -> str:
    """A history folder (its path or file:// URL) that exists, as a str: Spark and the folder
    reader take paths as text."""
    return str(existing_dir(text))


history_folder.declares = existing_dir.declares


def say(line: str = "") -> None:
    print(line, flush=True)


def print_progress(name: str, r: dict, seconds: float, width: int = 26) -> None:
    if "counts" in r:  # the pass over the large tables
        n = r["counts"]
        say(f"  {name}: {seconds:.1f} s; {n['inserted_rows']:,} inserted rows ({n['acknowledged_rows']:,} "
            f"acknowledged, {n['unknown_rows']:,} unknown) in {n['partitions']:,} partitions, {n['part_rows']:,} part "
            f"rows, {n['complete_queries']:,} completed queries returning {n['returned_rows']:,} rows")
        return
    verdict = "holds" if r["holds"] else f"VIOLATED ({r['violations']:,} rows)"
    say(f"  {name.ljust(width)}  {verdict:<30} {seconds:6.1f} s")
    for row in r["sample"]:
        say(f"  {' ' * width}    e.g. {row}")


def check_folder(spark, folder: str, sample: int, partitions: int | None = None) -> dict:
    """Read, check the input, decide the invariants (printing each as it is decided); the result."""
    from checkers.spark.checks import check
    from checkers.spark.jobstats import counted
    from checkers.spark.load import load_history, plan_settings

    t0 = time.perf_counter()
    say(f"{folder}: reading ...")
    with counted(spark, "spark-check") as stats:
        h = load_history(spark, folder, partitions)
        say(f"  small tables read and checked in {time.perf_counter() - t0:.1f} s: final snapshot at step "
            f"{h.final_step}, {len(h.assignment):,} partitions assigned to {len(h.replicas)} replicas, "
            f"replication factor {h.replication_factor}")
        try:
            with plan_settings(spark, h.partitions):
                report, counts = check(spark, h, sample, print_progress)
        finally:
            h.close()
    return {"input": folder, "invariants": report, "seconds": round(time.perf_counter() - t0, 2),
            "inserted_rows": counts["inserted_rows"], "counts": counts, "partitions": h.partitions,
            "final_step": h.final_step, "spark": {**stats.as_dict(), "master": spark.sparkContext.master,
                                                  "executors": _executors(spark)},
            "holds": all(r["holds"] for r in report.values())}


def _executors(spark) -> int:
    """Executors that served the job (the driver is one in local mode)."""
    n = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    return n if spark.sparkContext.master.startswith("local") else n - 1


def _default_log() -> str:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return str(Path(tempfile.gettempdir()) / f"spark_check-{stamp}-{__import__('os').getpid()}.log")


def _open_log(path: str) -> logging.Handler:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.captureWarnings(True)  # pyspark's warnings go to the log, not the terminal
    return handler


def _fail(prog: str, kind: str, message: str, log_path: str | None, code: int) -> int:
    where = f" (log: {log_path})" if log_path else ""  # a usage error happens before there is a log
    print(f"{prog}: {kind}: {message}{where}", file=sys.stderr, flush=True)
    return code


def check_inputs(spark, a: argparse.Namespace) -> tuple[list[dict], bool, str]:
    """The job: each history folder of --input checked; every invariant must hold in all."""
    results = [check_folder(spark, folder, a.sample, a.partitions) for folder in a.input]
    ok = all(r["holds"] for r in results)
    return results, ok, f"{len(results)} histories, {'all invariants hold' if ok else 'VIOLATIONS'}"


def sized_by(inputs: list[str]) -> int | None:
    """What the driver JVM is sized by (session.java_options): one history's rows of the large
    tables; None for several histories, or none given (a lab job checking the ones it makes)."""
    rows = [sum(src.rows for src in find_tables(f).values() if src.table.large) for f in inputs]  # each checked
    return rows[0] if len(rows) == 1 else None


def run(a: argparse.Namespace, work) -> int:
    """A Spark session for `work(spark, a) -> (results, ok, summary)`, its report written."""
    from checkers.spark import session
    rows = sized_by(getattr(a, "input", None) or [])  # a folder of the wrong shape is refused before a JVM starts
    spark, owned = session.start(a.master, a.log, a.executor_timeout, rows)
    try:
        results, ok, summary = work(spark, a)
        if a.report:
            Path(a.report).parent.mkdir(parents=True, exist_ok=True)
            Path(a.report).write_text(json.dumps({"results": results, "summary": summary}, indent=1, default=str))
        say(summary)
        return HOLDS if ok else VIOLATED
    except (BadInput, EnvironmentFailure):
        raise
    except Exception as e:
        # A Py4J error's text is asked of the JVM when str() is called, and the finally below stops
        # that JVM: read it now, or guarded sees "<exception str() failed>" and cannot tell an
        # unreadable input file (exit 2) from a failed Spark (exit 3).
        raise SparkJobFailed(_text_of(e)) from e
    finally:
        if owned:
            session.shutdown(spark)


class SparkJobFailed(Exception):
    """A Spark job failed; its text was read while the JVM that knew it still ran."""


def _text_of(e: Exception) -> str:
    try:
        return str(e)
    except Exception as inner:  # noqa: BLE001 - the JVM died first (a Ctrl-C, an OOM kill): say what is known
        return f"{type(e).__name__} (its text was lost with the JVM: {type(inner).__name__})"


class _Interrupts:
    """Ctrl-C reaches the whole process group: this process and its driver JVM, which may die of it
    before Python sees the KeyboardInterrupt, so that the next Py4J call fails. What was seen tells
    the two apart: an interrupted run is 130 whatever error follows, a failed one 3."""

    seen = False

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame) -> None:
        self.seen = True
        raise KeyboardInterrupt


_interrupts = _Interrupts()


def _interrupted(prog: str, timeout: float = 30.0) -> int:
    """130, once the driver JVM (this process's child, its launcher exec'd into java) has ended: it
    got the Ctrl-C too and runs its shutdown hooks; a JVM interrupted while it started has no
    session to stop it by."""
    # What pyspark started ignores SIGINT (launch_gateway's preexec_fn), the spark-submit script
    # included while it still starts the JVM: this process's descendants are asked to end.
    for pid in _descendants():
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (_group_left() or _descendants()):
        try:
            os.waitpid(-1, os.WNOHANG)   # reap a child that ended, so that it is not counted
        except ChildProcessError:
            pass
        time.sleep(0.1)
    while True:   # and the children that ended reaped, not left as zombies of the group
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    return _fail(prog, "interrupted", "stopped by Ctrl-C", None, INTERRUPTED)


def _processes() -> list[tuple[int, int, int, bytes]]:
    """(pid, parent, process group, command line) of every live process (Linux's /proc; elsewhere
    none): what an interrupted run waits for is found here."""
    out = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
            cmdline = (entry.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if fields[0] != "Z":
            out.append((int(entry.parent.name), int(fields[1]), int(fields[2]), cmdline))
    return out


def _descendants() -> list[int]:
    """The live processes whose parents lead back to this one."""
    parent = {pid: ppid for pid, ppid, _, _ in _processes()}
    me, out = os.getpid(), []
    for pid in parent:
        p, seen = parent.get(pid), 0
        while p is not None and p > 1 and seen < 64:
            if p == me:
                out.append(pid)
                break
            p, seen = parent.get(p), seen + 1
    return out


def _group_left() -> bool:
    """A live process of Spark's in this process group: the driver JVM, spark-submit's launcher JVM
    (which a Ctrl-C during the start leaves to its own end), or the Python workers the JVM forked,
    which end once its socket closes. Only Spark's (by the command line): under make the group
    holds make and its other jobs too."""
    me, group = os.getpid(), os.getpgrp()
    return any(pid != me and pgid == group and any(s in cmd for s in (b"org.apache.spark", b"pyspark.daemon",
                                                                          b"pyspark.worker"))
               for pid, _, pgid, cmd in _processes())


def session_options(ap: argparse.ArgumentParser) -> None:
    """The options of a run on Spark: where, how much to show, what to write."""
    ap.add_argument("--master", type=text("a Spark master", r"local(\[(\d+|\*)\])?|spark://[\w.:,-]+|yarn|k8s://\S+"),
                    help="Spark master (default: SPARK_MASTER or local[2]; spark-submit sets it)")
    ap.add_argument("--sample", type=int_at_least(0), default=5, help="violating rows shown per invariant")
    ap.add_argument("--report", type=output_file, help="write the JSON report there")
    ap.add_argument("--log", default=None, type=output_file,
                    help="the log file (default: a new file in the temporary folder)")
    ap.add_argument("--partitions", type=int_at_least(1), help="partitions of the large tables (default: from their size)")
    ap.add_argument("--executor-timeout", type=positive_float, default=60.0,
                    help="seconds to wait for a cluster executor before giving up (exit 3)")


def guarded(ap: argparse.ArgumentParser, argv: list[str] | None, work) -> int:
    """Parse, log, run `work` on Spark, and turn every failure into the contract's one line and code."""
    log_path, handler = _default_log(), None
    _interrupts.install()   # before the JVM starts: a Ctrl-C during its start is an interruption too
    try:
        a = ap.parse_args(argv)
        log_path = a.log = str(a.log) if a.log else log_path   # a str: the session passes it to log4j
        handler = _open_log(log_path)
        log.info("%s %s", ap.prog, argv if argv is not None else sys.argv[1:])
        return run(a, work)
    except BadInput as e:
        log.info("bad input: %s", e)
        return _fail(ap.prog, "bad input", str(e), log_path if handler else None, BAD_INPUT)
    except KeyboardInterrupt:
        log.info("interrupted")
        return _interrupted(ap.prog)
    except EnvironmentFailure as e:
        if _interrupts.seen:   # the JVM died of the same Ctrl-C first: no failure, an interruption
            return _interrupted(ap.prog)
        log.exception("environment")
        return _fail(ap.prog, "environment", str(e), log_path, ENVIRONMENT)
    except Exception as e:  # a Spark job failed: a file it could not read is the input's fault
        if _interrupts.seen:
            log.info("interrupted: %s", e)
            return _interrupted(ap.prog)
        log.exception("failed")
        text = str(e)
        path = unreadable_file(text)
        if path:
            return _fail(ap.prog, "bad input", f"{path}: cannot be read ({root_cause(text)})", log_path, BAD_INPUT)
        return _fail(ap.prog, "environment", f"Spark failed: {root_cause(text)}", log_path, ENVIRONMENT)
    finally:
        if handler:
            logging.getLogger().removeHandler(handler)
            handler.close()


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="spark_check", description=__doc__.splitlines()[0])
    ap.add_argument("--input", action="append", required=True, type=history_folder,
                    help="a history folder (repeatable)")
    session_options(ap)
    return guarded(ap, argv, check_inputs)


if __name__ == "__main__":
    sys.exit(main())
