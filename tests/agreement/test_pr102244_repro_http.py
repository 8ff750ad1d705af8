"""agreement/pr102244_repro.py: a reproduction file run over HTTP on real clickhouse-server replicas
(Debian's 18.16, or CLICKHOUSE_BIN). The base steps run and their expectations are judged; a
selective step is refused with one line on a server without selective replication; a bad file
is one line and exit 2 before any server starts."""

import subprocess
import sys
from pathlib import Path

import pytest

from reference.pr102244.repro import load

ROOT = Path(__file__).resolve().parents[2]
HEAD = """finding = "PR-F0"
title = "{title}"
replicas = ["r1", "r2"]
invariant = "NoAckedBlockLostInv"
code = ["none"]
fix = ["none"]
"""
# 18.16's syntax; {shard} and {replica} are the server's macros, which the driver leaves alone.
CREATE = ("CREATE TABLE events (date Date, user_id UInt64, v String) ENGINE = "
          "ReplicatedMergeTree('/clickhouse/tables/{shard}/repro_events', '{replica}') "
          "PARTITION BY toYYYYMM(date) ORDER BY (date, user_id)")


CREATE_ON_BOTH = f"""
[[step]]
on = "r1"
sql = "{CREATE}"

[[step]]
on = "r2"
sql = "{CREATE}"
"""


def write(tmp_path: Path, title: str, steps: str) -> Path:
    p = tmp_path / "repro.toml"
    p.write_text(HEAD.format(title=title) + steps)
    return p


def _base_steps() -> str:
    return CREATE_ON_BOTH + f"""

[[step]]
on = "r1"
sql = "INSERT INTO events VALUES ('2024-01-10', 1, 'a')"

[[step]]
on = "r2"
until = "SELECT count() = 1 FROM events"
timeout_s = 30

[[step]]
kill = "r2"

[[step]]
on = "r1"
sql = "INSERT INTO events VALUES ('2024-01-11', 2, 'b')"

[[step]]
restart = "r2"

[[step]]
why = "r2 pulls what it missed once its old ZooKeeper session is gone"
on = "r2"
until = "SELECT count() = 2 FROM events"
timeout_s = 45

[[step]]
name = "r2 caught up"
on = "r2"
expect = "SELECT count() FROM events"
equals = 2

[[step]]
name = "written to fail"
on = "r2"
expect = "SELECT count() FROM events"
equals = 3
"""


@pytest.mark.clickhouse
@pytest.mark.zookeeper
def test_base_steps_run_and_an_expectation_can_fail(clickhouse_cluster, tmp_path):
    from agreement.pr102244_repro import run_over_http
    repro = load(write(tmp_path, "base steps only", _base_steps()))
    # A short session, as the CLI's: the restarted r2 is writable again within seconds.
    cluster = clickhouse_cluster(["r1", "r2"], session_timeout_ms=3000)
    said = []
    out = run_over_http(repro, cluster, say=said.append)
    assert out.refused is None
    assert out.steps_run == len(repro.steps)
    assert [(e.name, e.expected, e.got, e.held) for e in out.expectations] == [
        ("r2 caught up", "2", "2", True), ("written to fail", "3", "2", False)]
    assert not out.held
    assert any("FAILED: got 2, expected 3" in line for line in said)
    assert cluster.pid("r2") is not None   # restarted, and running


@pytest.mark.clickhouse
@pytest.mark.zookeeper
def test_a_selective_step_is_refused_on_a_server_without_it(clickhouse_cluster, tmp_path):
    from agreement.pr102244_repro import StepFailed, run_over_http, supports_selective
    steps = CREATE_ON_BOTH + f"""

[[step]]
on = "r1"
sql = "SYSTEM MIGRATE PARTITION '202401' TO REPLICA 'r2'"

[[step]]
name = "never reached"
on = "r2"
expect = "SELECT 1"
equals = 1
"""
    repro = load(write(tmp_path, "a selective step", steps))
    cluster = clickhouse_cluster(["r1", "r2"])
    if supports_selective(cluster, "r1"):
        # A build of the PR (CLICKHOUSE_BIN): nothing is refused; the statement reaches the server,
        # which runs it or answers with its own error (the table here is not selective).
        try:
            assert run_over_http(repro, cluster, say=lambda line: None).refused is None
        except StepFailed as e:
            assert str(e).startswith("step 3 on r1") and "the server refused it" in str(e), e
        return
    out = run_over_http(repro, cluster, say=lambda line: None)
    assert out.refused == (
        "step 3 on r1: SYSTEM MIGRATE PARTITION '202401' TO REPLICA 'r2' needs a server with selective "
        "replication (ClickHouse PR #102244's replication_factor setting); "
        f"clickhouse-server {cluster.version()} has none")
    assert "\n" not in out.refused
    assert out.steps_run == 2 and out.expectations == [] and not out.held
    for r in ("r1", "r2"):   # the two base steps did run: each replica has the table
        tables = cluster.query(r, "SELECT count() FROM system.tables WHERE database = 'default' AND name = 'events'")
        assert tables.strip() == "1"


def test_the_cli_refuses_a_malformed_file_before_starting_any_server(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(HEAD.format(title="no steps"))   # `step` is required
    # As a user runs it: exit 2, one line, nothing on stdout.
    p = subprocess.run([sys.executable, "-m", "agreement", "repro", str(bad)], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "bad input" in p.stderr and "step" in p.stderr, p.stderr
    # In process, with the launchers replaced: neither is ever constructed.
    import agreement.pr102244_repro as driver

    def no_server(*a, **kw):
        raise AssertionError("a server was started for a file that does not load")
    monkeypatch.setattr(driver, "ZooKeeperServer", no_server)
    monkeypatch.setattr(driver, "ClickHouseCluster", no_server)
    assert driver.main([str(bad)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
