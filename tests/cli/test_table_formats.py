"""The system tables as ClickHouse's own formats (issue 17c): `--format tsv` (TSVWithNames) and
`--format jsoneachrow` (JSONEachRow) print the rows of one --show table on stdout, progress on
stderr, so they pipe into clickhouse-local; read back here by a parser, by clickhouse-local when
one is installed, and by a real ClickHouse server (INSERT ... FORMAT) where the tests have one."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess

import pytest
from cli_runner import no_traceback, run_cli

from protocol.system_tables import to_json_each_row, to_tsv


def test_tsv_escapes_as_clickhouse_does():
    rows = [{"a": "x\ty\nz\\", "b": None, "c": ["202401-5", "it's"], "d": True, "e": 7}]
    assert to_tsv(rows) == "a\tb\tc\td\te\nx\\ty\\nz\\\\\t\\N\t['202401-5','it\\\\'s']\t1\t7\n"
    assert to_tsv([], "system.replication_queue").startswith("replica_name\tnode_name\ttype\t")   # header alone
    assert to_tsv([{"a": 1}, {"a": 2, "b": 3}]) == "a\tb\n1\t\\N\n2\t3\n"   # a column a row lacks is NULL


def test_json_each_row_is_one_object_per_line():
    text = to_json_each_row([{"a": [1, 2], "b": None, "d": False}, {"a": [], "b": "x", "d": True}])
    assert [json.loads(line) for line in text.splitlines()] == [{"a": [1, 2], "b": None, "d": 0},
                                                                {"a": [], "b": "x", "d": 1}]


def _run(tmp_path, *args):
    ran = run_cli(["-m", "reference", "run", "--blocks", "4", *args], tmp_path / "tmp")
    assert ran.code == 0 and no_traceback(ran.err), ran.text
    if "--json" not in args and "json" not in args:
        assert "history check: 0 violations" in ran.err   # the verdict on stderr, the rows alone on stdout
    return ran.out


def test_run_prints_one_table_as_tsv_with_names(tmp_path):
    out = _run(tmp_path, "--format", "tsv", "--show", "system.replicas")
    rows = list(csv.DictReader(io.StringIO(out), delimiter="\t", quoting=csv.QUOTE_NONE))
    assert [r["replica_name"] for r in rows] == ["r1", "r2", "r3"]
    assert all(r["is_active"] == "1" and r["queue_size"] == "0" for r in rows)
    assert all(r["assigned_partitions"].startswith("['") for r in rows)


def test_run_prints_one_table_as_json_each_row(tmp_path):
    out = _run(tmp_path, "--format", "jsoneachrow", "--show", "system.selective_assignments")
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows and all(len(r["replicas"]) == 2 and r["clone_target"] is None for r in rows)   # RF 2, settled


def test_json_alias_still_prints_one_document(tmp_path):
    doc = json.loads(_run(tmp_path, "--json"))
    assert set(doc["tables"]) >= {"system.replicas", "system.selective_assignments"} and doc["violations"] == []
    assert json.loads(_run(tmp_path, "--format", "json"))["tables"].keys() == doc["tables"].keys()


def _clickhouse_local() -> list[str] | None:
    if shutil.which("clickhouse-local"):
        return ["clickhouse-local"]
    if shutil.which("clickhouse"):
        return ["clickhouse", "local"]
    return None


@pytest.mark.skipif(_clickhouse_local() is None, reason="no clickhouse-local here (Debian's 18.16 packages lack it)")
def test_tsv_pipes_into_clickhouse_local(tmp_path):
    out = _run(tmp_path, "--format", "tsv", "--show", "system.replicas")
    p = subprocess.run([*_clickhouse_local(), "--input-format", "TSVWithNames", "--structure",
                        "replica_name String, is_active UInt8, log_pointer UInt64, log_max_index UInt64, queue_size UInt64,"
                        " parts UInt64, assigned_partitions Array(String), partitions_on_disk Array(String)",
                        "--query", "SELECT replica_name, length(assigned_partitions) > 0 FROM table ORDER BY replica_name"],
                       input=out, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["r1", "1", "r2", "1", "r3", "1"]


@pytest.mark.clickhouse
@pytest.mark.zookeeper
def test_real_clickhouse_reads_both_formats(tmp_path, zk_server_hosts):
    """Where clickhouse-local is missing, a real server takes the same text: INSERT ... FORMAT
    TSVWithNames / JSONEachRow into tables of the system tables' types, then SELECT."""
    from harness.clickhouse import ClickHouseCluster
    tsv = _run(tmp_path, "--format", "tsv", "--show", "system.replicas")
    each = _run(tmp_path, "--format", "jsoneachrow", "--show", "system.selective_assignments")
    with ClickHouseCluster(zk_server_hosts, ["r1"]) as ch:
        ch.query("r1", "CREATE TABLE replicas (replica_name String, is_active UInt8, log_pointer UInt64, "
                       "log_max_index UInt64, queue_size UInt64, parts UInt64, assigned_partitions Array(String), "
                       "partitions_on_disk Array(String)) ENGINE = Memory")
        ch.query("r1", "INSERT INTO replicas FORMAT TSVWithNames\n" + tsv)
        ch.query("r1", "CREATE TABLE assignments (partition_id String, replicas Array(String), clone_target "
                       "Nullable(String), leaving_replica Nullable(String), version Int64) ENGINE = Memory")
        ch.query("r1", "INSERT INTO assignments FORMAT JSONEachRow\n" + each)
        got = ch.query("r1", "SELECT replica_name, is_active, length(assigned_partitions) = length(partitions_on_disk) "
                             "FROM replicas ORDER BY replica_name")
        owners = ch.query("r1", "SELECT count(), sum(length(replicas)), countIf(isNull(clone_target)) FROM assignments")
    assert got.split() == ["r1", "1", "1", "r2", "1", "1", "r3", "1", "1"]
    n = len(each.splitlines())
    assert owners.split() == [str(n), str(2 * n), str(n)]
