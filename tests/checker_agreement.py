"""The three checkers held to one verdict on a history folder: the in-process oracle
(checkers/oracle.py), DuckDB (checkers/duckdb_check.py) and the Spark job (pyspark_jobs/). Shared
by tests/checkers/test_checkers_agree*.py, which are split by what they feed the checkers so that
make check's long tests can run them in two workers."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from checkers.duckdb_check import check as duckdb_check
from checkers.oracle import check
from history.record import History
from pyspark_jobs.spark_check import check_folder

# make test: the oracle and DuckDB; make check's long tests: the Spark job too (over make test's budget)
WITH_SPARK = [False, pytest.param(True, marks=pytest.mark.long, id="spark")]


def read_history(folder: Path) -> History:
    h = History()
    for f in folder.glob("*.parquet"):
        h.tables[f.stem] = pq.read_table(f).to_pylist()
    return h


def three_agree(spark, folder: Path) -> dict:
    """The oracle's, the Spark job's and DuckDB's violation counts on one history, asserted equal
    (and the Spark job's verdict with them); the checks that found any, with their counts."""
    oracle = {name: len(problems) for name, problems in check(read_history(folder), 2).items()}
    with contextlib.redirect_stdout(io.StringIO()):
        spark_report = check_folder(spark, str(folder), 3)
    spark_counts = {n: r["violations"] for n, r in spark_report["invariants"].items()}
    assert spark_counts == oracle == duckdb_check(folder)
    assert spark_report["holds"] == (not any(oracle.values()))
    return {n: v for n, v in oracle.items() if v}


def two_agree(folder: Path) -> dict:
    """The oracle's and DuckDB's counts, asserted equal; those that found any (make test's half of
    three_agree: the Spark job's runs go to the long tests)."""
    oracle = {n: len(v) for n, v in check(read_history(folder), 2).items() if v}
    assert oracle == {n: v for n, v in duckdb_check(folder).items() if v}
    return oracle


def checkers_for(request, with_spark: bool):
    """The checkers that must agree: all three, or (make test) the oracle and DuckDB."""
    if with_spark:
        spark = request.getfixturevalue("spark")
        return lambda folder: three_agree(spark, folder)
    return two_agree
