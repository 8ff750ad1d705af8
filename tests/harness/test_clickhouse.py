import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest
from kazoo.client import KazooClient

from harness.clickhouse import ClickHouseCluster, ClickHouseError, ClickHouseUnavailable, ReplicaNotSynced, config_root
from harness.zk_txnlog import count_writes, read_txnlog
from harness.ports import port_is_free

pytestmark = pytest.mark.zookeeper
clickhouse = pytest.mark.clickhouse  # on the tests that start clickhouse-server

TABLE = ("CREATE TABLE t (d Date, u UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/t', '{replica}') "
         "PARTITION BY toYYYYMM(d) ORDER BY u")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return open(f"/proc/{pid}/stat").read().split()[2] != "Z"


def _with_table(cluster: ClickHouseCluster) -> ClickHouseCluster:
    for name in cluster.names:
        cluster.query(name, TABLE)
    return cluster


@pytest.fixture
def zk_root(zk_server_hosts):
    """A client on the whole server, to look outside the test's namespace."""
    client = KazooClient(hosts=zk_server_hosts, timeout=10)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@clickhouse
def test_two_replicas_replicate_an_insert(clickhouse_cluster):
    c = _with_table(clickhouse_cluster(2))
    c.query("r1", "INSERT INTO t VALUES ('2024-01-15', 1), ('2024-02-01', 2)")
    c.query("r2", "SYSTEM SYNC REPLICA t")
    assert c.query("r2", "SELECT count(), sum(u) FROM t") == "2\t3\n"
    assert c.query("r2", "SELECT substitution, version() FROM system.macros WHERE macro = 'replica'") == \
        f"r2\t{c.version()}\n"


@clickhouse
def test_table_znodes_are_under_the_tests_own_namespace(clickhouse_cluster, zk_chroot, zk_server_hosts, zk_root):
    _with_table(clickhouse_cluster(["a", "b"]))
    namespace = zk_chroot[len(zk_server_hosts):]
    assert zk_root.get_children(namespace) == ["clickhouse"]
    assert sorted(zk_root.get_children(f"{namespace}/clickhouse/tables/01/t/replicas")) == ["a", "b"]
    assert zk_root.exists("/clickhouse/tables/01/t") is None


@clickhouse
def test_a_query_error_carries_the_servers_code_and_message(clickhouse_cluster):
    c = clickhouse_cluster(1)
    with pytest.raises(ClickHouseError) as e:
        c.query("r1", "SELECT * FROM no_such_table")
    assert e.value.code == 60 and "no_such_table" in e.value.message and e.value.replica == "r1"
    assert c.query("r1", "SELECT 1 + 1") == "2\n"


@clickhouse
def test_settings_reach_the_server(clickhouse_cluster):
    c = clickhouse_cluster(1)
    assert c.query("r1", "SELECT value FROM system.settings WHERE name = 'max_threads'",
                   settings={"max_threads": 3}) == "3\n"


@clickhouse
def test_stopped_replica_comes_back_with_its_data_and_catches_up(clickhouse_cluster):
    c = _with_table(clickhouse_cluster(2))
    c.query("r2", "CREATE TABLE local (x UInt8) ENGINE = MergeTree ORDER BY x")
    c.query("r2", "INSERT INTO local VALUES (7)")
    c.query("r1", "INSERT INTO t VALUES ('2024-01-15', 1)")
    c.query("r2", "SYSTEM SYNC REPLICA t")
    pid, port = c.pid("r2"), c.http_port("r2")

    c.stop("r2")
    assert c.pid("r2") is None and not _alive(pid)
    with pytest.raises(ConnectionError, match="r2"):
        c.query("r2", "SELECT 1")
    c.query("r1", "INSERT INTO t VALUES ('2024-03-01', 2)")

    c.start("r2")
    assert c.http_port("r2") == port and c.pid("r2") != pid
    assert c.query("r2", "SELECT x FROM local") == "7\n"  # a table no replica could refill: kept on disk
    c.query("r2", "SYSTEM SYNC REPLICA t")
    assert c.query("r2", "SELECT count(), sum(u) FROM t") == "2\t3\n"


@clickhouse
def test_a_sync_replica_that_cannot_finish_names_what_the_queue_waits_for(clickhouse_cluster):
    # r2 comes back to a part only r1, now killed, has: its GET_PART cannot be done, and 18.16's
    # SYSTEM SYNC REPLICA would wait for it with no end
    c = _with_table(clickhouse_cluster(2, session_timeout_ms=3000))
    c.stop("r2")
    c.query("r1", "INSERT INTO t VALUES ('2024-01-15', 1)")
    c.stop("r1")
    c.start("r2")
    deadline = time.monotonic() + 60
    while c.query("r2", "SELECT sum(num_tries) FROM system.replication_queue WHERE table = 't'").strip() in ("", "0"):
        assert time.monotonic() < deadline, "r2 never tried the fetch"
        time.sleep(0.5)
    started = time.monotonic()
    with pytest.raises(ReplicaNotSynced) as e:
        c.sync_replica("r2", "t", timeout=2)
    assert time.monotonic() - started < 15   # the bound given (2 s, and 10 s more for an 18.16 that ignores it)
    assert re.search(r"replica r2: SYSTEM SYNC REPLICA t did not return within 2 s; 1 entries in its queue; "
                     r"GET_PART 202401_0_0_0, [1-9]\d* tries, last exception: \S", str(e.value)), str(e.value)
    c.start("r1")   # the part's holder back: the same call now returns
    c.sync_replica("r2", "t", timeout=60)
    assert c.query("r2", "SELECT count() FROM t") == "1\n"


@clickhouse
def test_a_replica_that_exits_during_start_up_is_reported_with_its_error_log(clickhouse_cluster):
    c = clickhouse_cluster(2)
    c.stop("r2")
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", c.http_port("r2")))
        squatter.listen()
        with pytest.raises(ClickHouseUnavailable, match="replica r2") as e:
            c.start("r2")
    assert "Address already in use" in str(e.value)
    assert c.pid("r2") is None and c.query("r1", "SELECT 1") == "1\n"


@clickhouse
def test_nothing_is_left_after_the_with_block(clickhouse_command, zk_chroot):
    with ClickHouseCluster(zk_chroot, ["r1", "r2"]) as c:
        pids = [c.pid(n) for n in c.names]
        ports = [c.http_port(n) for n in c.names] + [c.tcp_port(n) for n in c.names]
        folder = c.directory
        assert all(map(_alive, pids)) and folder.is_dir()
    assert not any(map(_alive, pids))
    assert all(map(port_is_free, ports))
    assert not folder.exists()


@clickhouse
def test_nothing_is_left_when_the_body_raises(clickhouse_command, zk_chroot):
    cluster = ClickHouseCluster(zk_chroot, ["r1"])
    with pytest.raises(RuntimeError, match="inside the with block"):
        with cluster:
            pid = cluster.pid("r1")
            raise RuntimeError("test failure inside the with block")
    assert not _alive(pid) and not cluster.directory.exists()


def test_bad_clickhouse_bin_is_named(monkeypatch, tmp_path):
    zk_server_hosts = "127.0.0.1:2181"  # never dialled: the binary is checked first
    missing = tmp_path / "no-such-clickhouse-server"
    monkeypatch.setenv("CLICKHOUSE_BIN", str(missing))
    with pytest.raises(ClickHouseUnavailable, match="no-such-clickhouse-server") as e:
        ClickHouseCluster(zk_server_hosts)
    assert "\n" not in str(e.value)
    monkeypatch.setenv("CLICKHOUSE_BIN", "/bin/true")  # runs, but is no ClickHouse
    with pytest.raises(ClickHouseUnavailable, match="/bin/true is not a ClickHouse server"):
        ClickHouseCluster(zk_server_hosts)


def test_config_root_follows_the_release():
    assert config_root((18, 16, 1)) == "yandex"
    assert config_root((24, 8, 1)) == "clickhouse"


def test_missing_clickhouse_skips_with_the_reason(tmp_path):
    (tmp_path / "test_needs_clickhouse.py").write_text(
        "def test_cluster(clickhouse_cluster):\n    clickhouse_cluster(1)\n")
    env = dict(os.environ, CLICKHOUSE_BIN=str(tmp_path / "gone"))
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "harness.pytest_fixtures", "-q", "-rs",
                        "-p", "no:cacheprovider", "test_needs_clickhouse.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "1 skipped" in r.stdout, r.stdout + r.stderr
    assert f"CLICKHOUSE_BIN={tmp_path / 'gone'} is not an executable file" in r.stdout


def test_txnlog_counts_a_known_kazoo_sequence_exactly(zk_server, zk_client):
    first = zk_server.last_zxid() + 1
    zk_client.create("/a", b"1")
    zk_client.create("/b", b"2")
    tx = zk_client.transaction()
    tx.create("/a/c", b"3")
    tx.set_data("/a", b"4")
    tx.delete("/b")
    assert not [r for r in tx.commit() if isinstance(r, Exception)]
    txns = read_txnlog(zk_server.data_dir, first, zk_server.last_zxid())

    counts = count_writes(txns)
    session = zk_client.client_id[0]
    assert list(counts) == [session]
    assert (counts[session].requests, counts[session].ops) == (3, 5)
    assert counts[session].by_type == {"create": 2, "multi": 1, "multi.create": 1, "multi.setData": 1,
                                       "multi.delete": 1}
    namespace = zk_client.chroot
    assert [(op.type, op.path) for op in txns[-1].ops] == [
        ("create", f"{namespace}/a/c"), ("setData", f"{namespace}/a"), ("delete", f"{namespace}/b")]


@clickhouse
def test_txnlog_attributes_an_insert_to_the_replica_that_took_it(clickhouse_cluster, zk_server, zk_chroot, zk_root):
    c = _with_table(clickhouse_cluster(2))
    table = f"{zk_chroot[len(zk_server.hosts):]}/clickhouse/tables/01/t"
    # A replica's ZooKeeper session owns its is_active node.
    session = {n: zk_root.exists(f"{table}/replicas/{n}/is_active").ephemeralOwner for n in c.names}
    first = zk_server.last_zxid() + 1
    c.query("r1", "INSERT INTO t VALUES ('2024-01-15', 1)")
    c.query("r2", "SYSTEM SYNC REPLICA t")
    txns = read_txnlog(zk_server.data_dir, first, zk_server.last_zxid())

    by_replica = {n: [t for t in txns if t.session == session[n]] for n in c.names}
    assert f"{table}/log/log-0000000000" in [p for t in by_replica["r1"] for p in t.paths]
    assert f"{table}/replicas/r1/parts/202401_0_0_0" in [p for t in by_replica["r1"] for p in t.paths]
    assert f"{table}/replicas/r2/parts/202401_0_0_0" in [p for t in by_replica["r2"] for p in t.paths]
    counts = count_writes(txns)
    assert counts[session["r1"]].ops > counts[session["r1"]].requests >= 1
    assert all(p.startswith(table) for t in txns for p in t.paths if t.is_write)


# --- the command lines, as a person at a shell uses them ---------------------------------------

class _Shell:
    """``python -m MODULE`` run as a person would, its output read line by line as it comes."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        # A reader thread, not select(): lines already in the pipe's read buffer would not wake select.
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in iter(self.proc.stdout.readline, ""):
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def lines_until(self, prefix: str, timeout: float = 90) -> list[str]:
        seen, deadline = [], time.monotonic() + timeout
        while not (seen and seen[-1].startswith(prefix)):
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {prefix!r} line within {timeout:.0f}s: {seen}") from None
            assert line is not None, f"exited with {self.proc.wait()} before {prefix!r}: {seen} {self.proc.stderr.read()}"
            seen.append(line)
        return seen

    def ctrl_c(self) -> list[str]:
        """Send SIGINT; check a clean exit with no traceback; return the lines printed after it."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)
        rest = list(iter(lambda: self._lines.get(timeout=10), None))
        err = self.proc.stderr.read()
        assert self.proc.returncode in (0, 130), err
        assert "Traceback" not in err and not any("Traceback" in line for line in rest), err
        return rest

    def __enter__(self) -> "_Shell":
        return self

    def __exit__(self, *exc) -> None:
        # After a failed assertion: SIGTERM lets the command stop its servers (SIGKILL would leak them).
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_python_m_harness_zookeeper_serves_until_ctrl_c():
    with _Shell("harness.zookeeper") as shell:
        lines = shell.lines_until("  Ctrl-C")
        m = re.match(r"--zk (127\.0\.0\.1:(\d+))$", lines[0])   # the address first, to paste after --zk
        pid = re.search(r"ZooKeeper pid (\d+)", "\n".join(lines))
        assert m and pid, lines
        hosts, port, pid = m.group(1), int(m.group(2)), int(pid.group(1))
        client = KazooClient(hosts=hosts, timeout=10)
        client.start(timeout=15)
        client.create("/from-the-shell", b"hello")
        assert client.get("/from-the-shell")[0] == b"hello"
        client.stop()
        client.close()
        assert shell.ctrl_c() == ["stopped ZooKeeper"]
    assert not _alive(pid) and port_is_free(port)


@clickhouse
def test_python_m_harness_clickhouse_serves_until_ctrl_c(clickhouse_command):
    with _Shell("harness.clickhouse", "--replicas", "2") as shell:
        lines = shell.lines_until("Ctrl-C")
        pids = [int(p) for p in re.findall(r"pid (\d+)", "\n".join(lines))]
        replicas = dict(re.findall(r"^(r\d) (http://127\.0\.0\.1:\d+/)", "\n".join(lines), re.M))
        assert len(pids) == 3 and sorted(replicas) == ["r1", "r2"], lines
        curl = next(line for line in lines if "curl" in line)
        url, sql = re.search(r"'(http://[^']+)' --data-binary '([^']+)'", curl).groups()
        with urllib.request.urlopen(urllib.request.Request(url, data=sql.encode()), timeout=30) as r:
            assert r.read().decode() == "replica\tr1\nshard\t01\n"
        for name, base in replicas.items():
            query = urllib.parse.quote("SELECT substitution FROM system.macros WHERE macro = 'replica'")
            with urllib.request.urlopen(f"{base}?query={query}", timeout=30) as r:
                assert r.read().decode() == f"{name}\n"
        assert shell.ctrl_c() == ["stopped ClickHouse and ZooKeeper"]
    assert not any(map(_alive, pids))
