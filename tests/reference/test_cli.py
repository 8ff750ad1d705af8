"""The command line: a run end to end (in-memory and ZooKeeper), its JSON, its history, and bad
input named with exit status 2."""

import json

import pyarrow.parquet as pq
import pytest

from reference.__main__ import main


def test_run_with_rebalance_writes_a_history_and_passes_its_check(tmp_path, capsys):
    rc = main(["run", "--replicas", "4", "--blocks", "8", "--add-replicas", "1", "--rebalance",
               "--fault-rate", "0.1", "--history", str(tmp_path / "h"), "--json", "--data", str(tmp_path / "d")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["violations"] == []
    owned = {r["replica_name"]: len(r["assigned_partitions"]) for r in out["tables"]["system.replicas"]}
    assert owned["r5"] > 0 and max(owned.values()) - min(owned.values()) <= 1
    assert pq.read_table(tmp_path / "h" / "inserts.parquet").num_rows == sum(
        1 for _ in pq.read_table(tmp_path / "h" / "inserts.parquet").to_pylist())
    assert {p.name for p in (tmp_path / "h").iterdir()} >= {"inserts.parquet", "queries.parquet", "parts.parquet"}


def test_a_switch_makes_the_run_fail_its_check(capsys):
    """source_stops_at_switch (F6) with queries during the rebalance: some query misses rows."""
    rcs = [main(["run", "--replicas", "3", "--blocks", "12", "--add-replicas", "1", "--rebalance", "--query-rate",
                 "0.5", "--bug", "source_stops_at_switch", "--bug", "cleanup_no_delay", "--seed", str(s)])
           for s in range(4)]
    assert 1 in rcs
    assert "violations" in capsys.readouterr().out


@pytest.mark.zookeeper
def test_run_and_tables_on_zookeeper(zk_chroot, capsys):
    assert main(["run", "--zk", zk_chroot, "--replicas", "3", "--blocks", "4", "--add-replicas", "1",
                 "--rebalance", "--seed", "1", "--json"]) == 0
    capsys.readouterr()
    assert main(["tables", "--zk", zk_chroot, "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)
    assert len(tables["system.replicas"]) == 4 and tables["system.selective_assignments"]


@pytest.mark.parametrize("args, message", [
    (["--bug", "nope"], "unknown switch"),
    (["--reassign", "202401_5:r2"], "malformed partition id '202401_5'"),
    (["--reassign", "202401-5"], "PARTITION:REPLICA"),
    (["--replication-factor", "4"], "above the 3 replicas"),
])
def test_bad_input_is_named(args, message, capsys):
    assert exit_code(["run", "--blocks", "2", *args]) == 2
    assert message in capsys.readouterr().err


def exit_code(argv: list[str]) -> int:
    """main's answer, or its parser's exit: a value refused while the arguments are parsed
    (a switch nobody has, a PARTITION:REPLICA without its colon) ends in SystemExit(2)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.zookeeper
def test_tables_on_an_empty_zookeeper_path_is_an_error(zk_chroot, capsys):
    assert main(["tables", "--zk", zk_chroot, "--root", "/nothing/here"]) == 2
    assert "--root /nothing/here: no selective table" in capsys.readouterr().err
