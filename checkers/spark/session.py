"""The checker's SparkSession, however the job was started, with nothing of Java's on the terminal.

- `python -m pyspark_jobs.spark_check`: the JVM is started here, with its stdout and stderr going
  to the run's log (pyspark's `launch_gateway(popen_kwargs=...)`), local[2] unless `--master`.
- `spark-submit pyspark_jobs/spark_check.py`: spark-submit's JVM and settings rule; log4j is
  pointed at the log when the session is up.
- A `spark://` master is tried before Spark is (a refused connection would otherwise hang for a
  minute in Spark's registration retries), and the job waits for an executor before it starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import socket
import sys
import time
from pathlib import Path

from harness.cli_args import EnvironmentFailure
from harness.spark import LOCAL_DEFAULTS

SUBMITTED = "PYSPARK_GATEWAY_PORT" in os.environ  # set by spark-submit for the Python driver
LOG4J = Path(__file__).with_name("log4j2-file.properties")


def _tail(path: str) -> str:
    try:
        lines = [x.strip() for x in Path(path).read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def master_reachable(master: str, timeout: float = 3.0) -> None:
    """Raise EnvironmentFailure unless some host:port of a spark:// master URL accepts a connection."""
    if not master.startswith("spark://"):
        return
    for hostport in master.removeprefix("spark://").split(","):
        host, _, port = hostport.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return
        except (OSError, ValueError):
            continue
    raise EnvironmentFailure(f"the Spark cluster is unreachable: nothing accepts connections at {master}")


def wait_for_executor(spark, master: str, timeout: float) -> None:
    """On a cluster, jobs would wait forever for resources: give up after `timeout` seconds."""
    if not master.startswith("spark://"):
        return
    deadline = time.monotonic() + timeout
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus  # the driver's entry included
    while status().size() < 2:
        if time.monotonic() > deadline:
            raise EnvironmentFailure(f"no executor joined from {master} within {timeout:.0f} s "
                                     f"(no worker alive, or none with the cores and memory asked for)")
        time.sleep(0.25)


def log_to(spark, log: str) -> None:
    """Send the JVM's log4j output to `log` (spark-submit started the JVM with its own settings)."""
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.setProperty("spark_check.log", log)
    jvm.org.apache.logging.log4j.LogManager.getContext(False).setConfigLocation(jvm.java.net.URI(LOG4J.as_uri()))


# Measured here (BENCHMARKS.md): a run over a few million rows spends much of its CPU compiling in
# the JIT's optimising tier and collecting with parallel threads on two cores; C1 alone and the
# serial collector halve it. Over tens of millions, the optimised code pays for its compiling, and
# so it does over many small histories in one session (make spark-check: 12 racing histories
# checked in 137 s under C1 alone, 98 s with both tiers; from the second history on, each check
# spends most of its time in the driver, planning, which C2 speeds up).
SHORT_JOB_ROWS = 10_000_000
SHORT_JOB_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
LONG_JOB_JVM = "-XX:+UseParallelGC"


def java_options(rows: int | None) -> str:
    """The driver JVM's JIT and collector for a job over one history of `rows` rows of the large
    tables; None: a job over several histories, or ones it makes itself."""
    return SHORT_JOB_JVM if rows is not None and rows < SHORT_JOB_ROWS else LONG_JOB_JVM


@contextlib.contextmanager
def _callers_sigint():
    """SparkContext puts in a SIGINT handler of its own that asks the JVM to cancel its jobs and
    then raises KeyboardInterrupt; while the context is still being made that call fails, and a
    Ctrl-C then reads as a Py4J error, "Spark could not start" (seen: exit 3 on a Ctrl-C two seconds
    in). Its attempt to set one is passed over (pyspark.context's `signal` seen through a shim), so
    the caller's handler stays: a Ctrl-C is a KeyboardInterrupt wherever the start is."""
    import pyspark.context as context

    class Shim:
        def __getattr__(self, name):
            return getattr(signal, name)

        @staticmethod
        def signal(signum, handler):
            return signal.getsignal(signum) if signum == signal.SIGINT else signal.signal(signum, handler)

    real, context.signal = context.signal, Shim()
    try:
        yield
    finally:
        context.signal = real


def _stop_jvm(gateway, wait: float = 20.0) -> None:
    """End the driver JVM and wait for it: pyspark starts it ignoring SIGINT, so a Ctrl-C to the
    process group leaves it running until its stdin closes with this process."""
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def shutdown(spark) -> None:
    """Stop the session and make sure its driver JVM is gone (a stop() a Ctrl-C cut short, or one
    that failed, leaves it running)."""
    gateway = getattr(spark.sparkContext, "_gateway", None)
    try:
        spark.stop()
    except Exception:   # noqa: BLE001 - the JVM is ended below whatever stop() said
        pass
    finally:
        _stop_jvm(gateway)


def start(master: str | None, log: str, executor_timeout: float = 60.0, rows: int | None = None):
    """(session, owned): the active session when there is one (a caller's, left running), else a
    new one sized for `rows` rows; EnvironmentFailure when Java, Spark or the cluster fails."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # otherwise Spark binds a non-loopback address
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    if SUBMITTED:
        SparkContext._ensure_initialized()  # connects to the JVM spark-submit started
        conf = SparkConf()  # spark-submit's settings, read from that JVM
        master = conf.get("spark.master", "local[*]")
        master_reachable(master)
        spark = SparkSession.builder.appName("spark-check").getOrCreate()
        log_to(spark, log)
    else:
        from pyspark.java_gateway import launch_gateway
        master = master or os.environ.get("SPARK_MASTER") or "local[2]"
        master_reachable(master)
        conf = SparkConf().setAppName("spark-check").setMaster(master)
        loopback = master.startswith("local") or any(h in master for h in ("//127.0.0.1:", "//localhost:"))
        for k, v in LOCAL_DEFAULTS.items():
            if master.startswith("local") or k.startswith(("spark.ui", "spark.sql.session")) or (
                    loopback and k in ("spark.driver.host", "spark.driver.bindAddress")):
                conf.set(k, v)
        if not master.startswith("local"):  # executors run this Python too, not the first python3 on PATH
            conf.set("spark.pyspark.python", sys.executable)
        conf.set("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J.as_uri()} -Dspark_check.log={log} "
                 + java_options(rows))
        gateway = None
        try:
            with open(log, "ab") as out:
                gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
            with _callers_sigint():
                spark = SparkSession(SparkContext(conf=conf, gateway=gateway))
        except Exception as e:  # PySparkRuntimeError JAVA_GATEWAY_EXITED, Py4J errors, a missing java
            _stop_jvm(gateway)
            raise EnvironmentFailure(f"Spark could not start ({_tail(log) or type(e).__name__})") from e
        except BaseException:   # Ctrl-C while it started: its JVM ignores SIGINT (pyspark starts it so)
            _stop_jvm(gateway)
            raise
    wait_for_executor(spark, master, executor_timeout)
    return spark, True

