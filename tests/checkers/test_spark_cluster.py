"""The checker on a real standalone Spark cluster: a master and two workers on 127.0.0.1 started
from pyspark's own scripts (harness/spark_cluster.py), the job submitted with the venv's
spark-submit from a shell that never activated the venv, as the README says. Its verdicts on a
correct and on a violating history are the ones local[2] gives; every process the cluster started
is gone afterwards, and so is its folder."""

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.spark_cluster import SparkCluster
from lab.synth import generate
from pyspark_jobs.spark_check import check_folder

# Long (a master and two workers, ~2 min on 2 cores): `make check` runs it (harness/long_tests.py).
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.long]
ROOT = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def verdicts(result: dict) -> dict:
    return {name: r["violations"] for name, r in result["invariants"].items()}


def test_a_standalone_cluster_gives_the_verdicts_of_local_mode(spark, tmp_path):
    generate(spark, tmp_path / "correct", 2000)
    generate(spark, tmp_path / "violating", 2000, frozenset({"deleted_row", "query_duplicated_row"}))
    local = {}
    for name in ("correct", "violating"):
        with contextlib.redirect_stdout(io.StringIO()):
            local[name] = check_folder(spark, str(tmp_path / name), 5)
    assert local["correct"]["holds"] and not local["violating"]["holds"]

    # a shell that never activated the venv: the venv's bin is not on PATH
    env = {"HOME": str(Path.home()), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    submit = Path(sys.prefix) / "bin" / "spark-submit"
    with SparkCluster(workers=2, cores=1, memory="1g") as cluster:
        workers = cluster.alive_workers()
        assert len(workers) == 2 and all(w["cores"] == 1 for w in workers)
        started = cluster.pids
        # One application for both histories, as an operator checks a batch: exit 1 since one
        # violates, each history's verdicts in the report in --input order. (Two submits cost a
        # second driver and two more executors, about a minute of make check's long tests.)
        report = tmp_path / "report.json"
        r = subprocess.run([str(submit), "--master", cluster.url, "pyspark_jobs/spark_check.py",
                            "--input", str(tmp_path / "correct"), "--input", str(tmp_path / "violating"),
                            "--report", str(report), "--log", str(tmp_path / "job.log")],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
        assert "Traceback" not in r.stderr and "\tat " not in r.stderr, r.stderr[-2000:]
        results = dict(zip(("correct", "violating"), json.loads(report.read_text())["results"]))
        for name, result in results.items():
            assert result["spark"]["master"] == cluster.url and result["spark"]["executors"] == 2
            assert verdicts(result) == verdicts(local[name])
        assert results["correct"]["holds"] and not results["violating"]["holds"]
        assert "OwnersCompleteInv" in r.stdout and "VIOLATED" in r.stdout
        apps = cluster.status()["completedapps"]
        assert len(apps) == 1 and apps[0]["state"] == "FINISHED"
        folder = cluster.folder
    assert not any(alive(pid) for pid in started)
    assert not folder.exists()
