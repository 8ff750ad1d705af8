"""The Spark checker on histories a real ClickHouse wrote (agreement/clickhouse_workload.py):
a replica killed during an INSERT and an acknowledgement lost then retried leave every invariant
holding; the same retry after the dedup window forgot the block is a second copy on every replica,
and Spark, DuckDB and the in-process oracle all say so."""

import contextlib
import io

import pytest

from agreement.clickhouse_workload import ClickHouseHistory, Workload
from checkers import duckdb_check
from checkers.oracle import violations
from pyspark_jobs.spark_check import check_folder

pytestmark = [pytest.mark.clickhouse, pytest.mark.zookeeper, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(zk_server_hosts, clickhouse_command):
    from harness.clickhouse import ClickHouseCluster
    with ClickHouseCluster(zk_server_hosts, ["r1", "r2"], session_timeout_ms=3000) as ch:
        yield ch


def run(cluster, folder, workload, seed=1):
    ch = ClickHouseHistory(cluster, f"/clickhouse/tables/{workload.table}", workload, seed)
    history = ch.run()
    history.write(folder)
    return ch, history


def spark_failing(spark, folder) -> dict:
    with contextlib.redirect_stdout(io.StringIO()):
        result = check_folder(spark, str(folder), 5)
    return {n: r for n, r in result["invariants"].items() if not r["holds"]}


def test_a_kill_during_an_insert_and_a_lost_ack_retried_hold(cluster, spark, tmp_path):
    ch, history = run(cluster, tmp_path, Workload(table="kill_and_retry", blocks=12, queries=3))
    assert ch.facts["killed_insert"] in ("ok", "unknown", "failed")
    assert ch.facts["lost_ack_landed"]          # the first copy is in: the retry had something to deduplicate
    statuses = {r["status"] for r in history.tables["inserts"]}
    assert statuses == {"ok"}, statuses          # every retry was answered
    assert violations(history, 2) == []
    assert spark_failing(spark, tmp_path) == {}
    assert {n: c for n, c in duckdb_check.check(tmp_path).items() if c} == {}   # violations per invariant


def test_a_retry_after_the_dedup_window_is_a_second_copy_found_by_every_checker(cluster, spark, tmp_path):
    w = Workload(table="small_window", blocks=6, queries=2, dedup_window=2, retry_after=3, kill_rows=20)
    ch, history = run(cluster, tmp_path, w)
    assert ch.facts["lost_ack_landed"] and ch.facts["window_trimmed"]
    failing = spark_failing(spark, tmp_path)
    assert "NoDuplicateRowsInv" in failing
    assert failing["NoDuplicateRowsInv"]["violations"] == 2 * w.rows   # the block's rows, twice on r1 and r2
    assert not [n for n in failing if n not in ("NoDuplicateRowsInv", "QueryNoDuplicateInv")], failing
    assert any("2 times" in v for v in violations(history, 2))
    assert duckdb_check.check(tmp_path)["NoDuplicateRowsInv"] > 0
