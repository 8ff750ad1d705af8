"""A real standalone Spark cluster on 127.0.0.1, from pyspark's own scripts and jars: a master and
workers, each started with `$SPARK_HOME/bin/spark-class` in its own process group, on free ports,
with its logs and work folders in one temporary folder.

    with SparkCluster(workers=2) as cluster:
        subprocess.run([".venv/bin/spark-submit", "--master", cluster.url, "job.py"])

Ready means the master's status page lists every worker ALIVE. On exit every process started here
is stopped by its process group (a worker's executors with it), and the folder is removed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from harness.ports import free_port, free_ports


def spark_home() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        raise RuntimeError("pyspark is not installed: run `make setup`")
    return Path(spec.origin).parent


class SparkCluster:
    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g", start_timeout: float = 120.0):
        self.workers, self.cores, self.memory, self.start_timeout = workers, cores, memory, start_timeout
        self.folder: Path | None = None
        self.procs: list[subprocess.Popen] = []
        self.port = self.ui_port = 0

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _env(self) -> dict:
        env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=str(self.folder / "logs"), SPARK_PID_DIR=str(self.folder))
        env.pop("PYSPARK_GATEWAY_PORT", None)
        return env

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")
        try:
            proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=self._env(),
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=self.folder, start_new_session=True)  # its own process group
        finally:
            log.close()
        self.procs.append(proc)
        return proc

    def status(self) -> dict:
        """The master's status page as JSON (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.loads(r.read())

    def alive_workers(self) -> list[dict]:
        try:
            return [w for w in self.status().get("workers", []) if w.get("state") == "ALIVE"]
        except OSError:
            return []

    def _wait(self, what: str, ready) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"spark cluster: a process exited while waiting for {what}; logs in {self.folder}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"spark cluster: no {what} after {self.start_timeout:.0f} s; logs in {self.folder}")
            time.sleep(0.5)

    def __enter__(self) -> "SparkCluster":
        self.folder = Path(tempfile.mkdtemp(prefix="spark-cluster-"))
        try:
            self.port, self.ui_port = free_ports(2)
            self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(self.port), "--webui-port", str(self.ui_port)])
            self._wait("master", lambda: self._answers())
            for i in range(self.workers):
                work = self.folder / f"worker{i}"
                work.mkdir()
                self._start(f"worker{i}", ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                                           "--cores", str(self.cores), "--memory", self.memory,
                                           "--webui-port", str(free_port()), "--work-dir", str(work)])
            self._wait(f"{self.workers} workers", lambda: len(self.alive_workers()) >= self.workers)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _answers(self) -> bool:
        try:
            return self.status().get("status") == "ALIVE"
        except OSError:
            return False

    def __exit__(self, *exc) -> None:
        for proc in reversed(self.procs):  # workers (and their executors) first, then the master
            _stop_group(proc)
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)


def _stop_group(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM to the process's group (spark-class execs the JVM, so the group is the JVM's and
    its children's), then SIGKILL if it has not exited within `grace` seconds."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:  # the leader gone or stuck: nothing of its group may outlive the cluster
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=grace)
