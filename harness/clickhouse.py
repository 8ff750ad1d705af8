"""Start real ClickHouse replicas on loopback for tests, against a ZooKeeper server the caller gives.

Where the server comes from, in order: ``CLICKHOUSE_BIN`` (or the ``binary`` argument: a newer
release, or a build of an implementation under review), else Debian's ``clickhouse-server``
(18.16.1, installed by ``make setup``). A single ``clickhouse`` binary is run as ``clickhouse server``.

Every replica is a ``clickhouse-server`` process in its own process group with a generated config
(macros ``shard`` and ``replica``, free 127.0.0.1 ports for http, tcp and interserver, a private
data, tmp and log folder) in one temporary directory per cluster. Leaving the ``with`` block, a
start that fails part-way, Ctrl-C, and an ``atexit`` hook for leftovers all kill the process
groups and remove the directory. ``stop(name)`` is a crash (kill -9) that keeps the replica's
files, so ``start(name)`` brings it back on the same ports with the same data.

The config root element is ``<yandex>`` before release 20 (the name 18.16 documents) and
``<clickhouse>`` from 20 on; the release is read from ``--version``, or, for 18.16, which has no
such option, from the version string inside the binary. (Seen here: 18.16 reading one config file
ignores the root's name, so ``<clickhouse>`` worked too; the name matters to releases that merge
``config.d`` files, which this harness does not write.)

``python -m harness.clickhouse --replicas 2`` starts a ZooKeeper server and the replicas for a
person at a shell, prints their addresses and a ``curl`` example, and stops everything on Ctrl-C;
``--measure`` prints the figures below instead. Measured 2026-11-23 on a 2-core machine that other
jobs kept at load 8-9 (so expect better on a quiet one), ClickHouse 18.16.1:

- start-up, constructor to every replica answering ``SELECT 1``: 0.4-0.8 s for 2 replicas (they
  start in parallel), ~1 s for 3;
- memory: 73 MB resident per idle replica, 86-90 MB after 200 one-row INSERTs;
- one-row INSERT into a replicated table: ~40 ms (200 in 7-8 s, then SYNC REPLICA);
- ``stop(name)`` then ``start(name)``: 0.3-0.6 s; a replica whose port is taken exits after ~2 s;
- leaving the ``with`` block: 0.1-0.4 s for a fresh cluster, 1.6-1.9 s after 200 INSERTs (removing
  ~3,600 part files from ext4).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterable

from harness.cli_args import Parser, int_at_least, text, zk_address
from harness.ports import free_ports
from harness.zookeeper import (ZooKeeperServer, ZooKeeperUnavailable, _Started, interrupt_on_ctrl_c_and_kill,
                               serve_until_interrupted)

DEBIAN_BINARY = "/usr/sbin/clickhouse-server"
INSTALL_HINT = ("run `make setup` (installs Debian's clickhouse-server and clickhouse-client), "
                "or set CLICKHOUSE_BIN to a clickhouse-server binary")
OVERRIDE_HINT = ("point CLICKHOUSE_BIN at a clickhouse-server binary, or unset it to use Debian's "
                 "clickhouse-server (`make setup` installs it)")
_LIVE: set["ClickHouseCluster"] = set()


class ClickHouseUnavailable(RuntimeError):
    """No ClickHouse server can be started here (binary missing, unusable, or exits at start-up)."""


class ClickHouseError(RuntimeError):
    """A query the server refused: ``code`` is ClickHouse's error code, ``message`` its text."""

    def __init__(self, replica: str, code: int | None, message: str):
        self.replica, self.code, self.message = replica, code, message
        super().__init__(f"replica {replica}: {message}")


TIMEOUT_EXCEEDED = 159   # ClickHouse's ErrorCodes


class ReplicaNotSynced(ConnectionError):
    """SYSTEM SYNC REPLICA did not return in time; the message carries what the replica's queue held
    then (each entry's type, part, tries and last exception), which says what it is waiting for."""


def server_command(binary: str | None = None) -> list[str]:
    """The command that runs a server: ``binary``, else CLICKHOUSE_BIN, else the Debian package's."""
    given = binary or os.environ.get("CLICKHOUSE_BIN")
    if given:
        origin = "binary argument" if binary else "CLICKHOUSE_BIN"
        path = shutil.which(given) or given
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise ClickHouseUnavailable(f"{origin}={given} is not an executable file: {OVERRIDE_HINT}")
    else:
        path = shutil.which("clickhouse-server") or (DEBIAN_BINARY if os.access(DEBIAN_BINARY, os.X_OK) else None)
        if not path:
            raise ClickHouseUnavailable(f"no clickhouse-server found: {INSTALL_HINT}")
    # The all-in-one binary picks its tool from argv[0] or from the first argument.
    return [path, "server"] if Path(path).name == "clickhouse" else [path]


_VERSION = re.compile(rb"(?:version |ClickHouse )(\d+)\.(\d+)\.(\d+)")


def server_version(command: list[str]) -> tuple[int, int, int]:
    """The release of the server ``command`` runs, e.g. (18, 16, 1)."""
    try:
        out = subprocess.run([*command, "--version"], capture_output=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ClickHouseUnavailable(f"{command[0]} does not run ({e}): {OVERRIDE_HINT}") from None
    m = _VERSION.search(out)
    if not m:
        # 18.16 has no --version; its banner string is in the (small, dynamically linked) binary.
        # Newer releases are one large static binary and answer --version, so this read stays small.
        size = os.path.getsize(command[0])
        if size < 64 << 20:
            m = _VERSION.search(Path(command[0]).read_bytes())
    if not m:
        raise ClickHouseUnavailable(f"{command[0]} is not a ClickHouse server: it prints no version "
                                    f"and holds no version string; {OVERRIDE_HINT}")
    return tuple(int(g) for g in m.groups())  # type: ignore[return-value]


def config_root(version: tuple[int, ...]) -> str:
    """``<yandex>`` is 18.16's documented root; releases from 20 on take ``<clickhouse>`` (and still ``<yandex>``)."""
    return "clickhouse" if version[0] >= 20 else "yandex"


def split_zookeeper(connection: str) -> tuple[list[tuple[str, int]], str]:
    """``host:port[,host:port...][/chroot]`` (kazoo's connection string) -> nodes and chroot."""
    hosts, slash, chroot = connection.partition("/")
    nodes = []
    for hp in hosts.split(","):
        host, _, port = hp.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bad ZooKeeper address {hp!r} in {connection!r}: want host:port")
        nodes.append((host, int(port)))
    return nodes, (slash + chroot).rstrip("/")


_CONFIG = """<?xml version="1.0"?>
<{root}>
    <logger>
        <level>information</level>
        <log>{dir}/log/server.log</log>
        <errorlog>{dir}/log/server.err.log</errorlog>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <http_port>{http}</http_port>
    <tcp_port>{tcp}</tcp_port>
    <interserver_http_port>{interserver}</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <path>{dir}/data/</path>
    <tmp_path>{dir}/tmp/</tmp_path>
    <user_files_path>{dir}/user_files/</user_files_path>
    <format_schema_path>{dir}/format_schemas/</format_schema_path>
    <users_config>{dir}/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <!-- The defaults (5 GB mark cache, 8 GB uncompressed cache) are for a production box. -->
    <mark_cache_size>5368709</mark_cache_size>
    <uncompressed_cache_size>16777216</uncompressed_cache_size>
    <mlock_executable>false</mlock_executable>
    <zookeeper>
{nodes}{chroot}        <session_timeout_ms>{session_timeout_ms}</session_timeout_ms>
    </zookeeper>
    <macros>
        <shard>{shard}</shard>
        <replica>{replica}</replica>
    </macros>
</{root}>
"""

# The default user without password, from loopback only: what the HTTP queries here use.
_USERS = """<?xml version="1.0"?>
<{root}>
    <profiles><default></default></profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas><default></default></quotas>
</{root}>
"""


class _Replica:
    """One clickhouse-server process with its own config, ports and folders."""

    def __init__(self, root: Path, name: str, command: list[str]):
        self.name, self.dir, self.command = name, root / name, command
        self.proc: subprocess.Popen | None = None
        self.http = self.tcp = self.interserver = 0

    def configure(self, config_root: str, zookeeper: str, shard: str, session_timeout_ms: int = 30_000) -> None:
        """Write the config with fresh free ports (again after a port was taken under us)."""
        self.http, self.tcp, self.interserver = free_ports(3)
        for sub in ("data", "tmp", "user_files", "format_schemas", "log"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        for log in (self.dir / "log").iterdir():  # an earlier try's "Address already in use" is no news
            log.unlink()
        nodes, chroot = split_zookeeper(zookeeper)
        node_xml = "".join(f"        <node><host>{h}</host><port>{p}</port></node>\n" for h, p in nodes)
        chroot_xml = f"        <root>{chroot}</root>\n" if chroot else ""
        (self.dir / "config.xml").write_text(_CONFIG.format(
            root=config_root, dir=self.dir, http=self.http, tcp=self.tcp, interserver=self.interserver,
            nodes=node_xml, chroot=chroot_xml, shard=shard, replica=self.name, session_timeout_ms=session_timeout_ms))
        (self.dir / "users.xml").write_text(_USERS.format(root=config_root))

    def start(self) -> None:
        if self.running():
            return
        out = open(self.dir / "log" / "stdout.log", "ab")
        self.proc = subprocess.Popen([*self.command, f"--config-file={self.dir / 'config.xml'}"], cwd=self.dir,
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        out.close()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.running():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/?query=SELECT%201", timeout=2) as r:
                return r.read().strip() == b"1"
        except OSError:
            return False

    def error_tail(self, n: int = 15) -> str:
        lines: list[str] = []
        for name in ("server.err.log", "stdout.log"):
            p = self.dir / "log" / name
            if p.is_file():
                lines += p.read_text(errors="replace").splitlines()[-n:]
        return "\n".join(lines)


class ClickHouseCluster(_Started):
    """Replicas of one shard on loopback, all on the ZooKeeper ``zookeeper`` names. A context manager.

    ``zookeeper`` is kazoo's connection string, ``host:port[,host:port...][/chroot]``; with a chroot
    every znode the replicas write lands under it (the path must exist).
    """

    def __init__(self, zookeeper: str, replicas: Iterable[str] = ("r1", "r2"), shard: str = "01",
                 binary: str | None = None, start_timeout: float = 60.0, query_timeout: float = 120.0,
                 session_timeout_ms: int = 30_000):
        """`session_timeout_ms`: the replicas' ZooKeeper session timeout (ClickHouse's default 30 s);
        a short one lets a test see a killed replica's is_active go, and the replica marked lost."""
        names = list(replicas)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"replica names must be distinct and at least one: {names}")
        split_zookeeper(zookeeper)  # a bad address fails here, not as a server that never connects
        self._command = server_command(binary)
        self._version = server_version(self._command)
        self._zookeeper, self._shard = zookeeper, shard
        self._start_timeout, self._query_timeout = start_timeout, query_timeout
        self._session_timeout_ms = session_timeout_ms
        self._root = Path(tempfile.mkdtemp(prefix="clickhouse-cluster-"))
        self._replicas = {n: _Replica(self._root, n, self._command) for n in names}
        _LIVE.add(self)  # from here on the folder exists: the atexit hook removes it even if never started

    @property
    def names(self) -> list[str]:
        return list(self._replicas)

    @property
    def directory(self) -> Path:
        return self._root

    def version(self) -> str:
        """The server release, e.g. '18.16.1' (read from the binary, so known before start)."""
        return ".".join(map(str, self._version))

    def pid(self, name: str) -> int | None:
        r = self._replica(name)
        return r.proc.pid if r.running() else None

    def http_port(self, name: str) -> int:
        return self._replica(name).http

    def tcp_port(self, name: str) -> int:
        return self._replica(name).tcp

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.http_port(name)}/"

    def start(self, name: str | None = None) -> "ClickHouseCluster":
        """Start every replica (the first time), or bring one stopped replica back as it was."""
        if name is not None:
            r = self._replica(name)
            if not (r.dir / "config.xml").is_file():
                raise ValueError(f"replica {name} was never started: start the cluster first")
            r.start()
            self._wait_ready([r])
            return self
        root = config_root(self._version)
        for r in self._replicas.values():
            r.configure(root, self._zookeeper, self._shard, self._session_timeout_ms)
            r.start()
        for _ in range(3):
            # Between free_ports() and the server's bind another process can take a port; only a
            # replica that died of that is configured anew and restarted.
            taken = self._wait_ready(list(self._replicas.values()), retry_taken_ports=True)
            if not taken:
                return self
            for r in taken:
                r.configure(root, self._zookeeper, self._shard, self._session_timeout_ms)
                r.start()
        raise ClickHouseUnavailable("ports kept being taken while ClickHouse started")

    def stop(self, name: str | None = None) -> None:
        """Without a name: stop everything and remove the files. With one: kill -9 that replica, keep its files."""
        if name is not None:
            self._replica(name).kill()
            return
        for r in self._replicas.values():
            r.kill()
        shutil.rmtree(self._root, ignore_errors=True)
        _LIVE.discard(self)

    def query(self, name: str, sql: str, settings: dict[str, object] | None = None,
              timeout: float | None = None) -> str:
        """Run ``sql`` on replica ``name`` over HTTP and return the body (TSV for a SELECT);
        ``timeout`` seconds for its answer (default: the cluster's query timeout)."""
        params = urllib.parse.urlencode({k: int(v) if isinstance(v, bool) else v for k, v in (settings or {}).items()})
        url = self.url(name) + (f"?{params}" if params else "")
        req = urllib.request.Request(url, data=sql.encode())
        try:
            with urllib.request.urlopen(req, timeout=timeout or self._query_timeout) as resp:
                return resp.read().decode()
        except urllib.error.HTTPError as e:
            body = e.read().decode(errors="replace").strip()
            header = e.headers.get("X-ClickHouse-Exception-Code")
            m = re.match(r"Code: (\d+)", body)
            code = int(header) if header else int(m.group(1)) if m else None
            raise ClickHouseError(name, code, body) from None
        except OSError as e:
            state = "running" if self._replica(name).running() else "stopped"
            raise ConnectionError(f"replica {name} ({state}) at {self.url(name)}: {getattr(e, 'reason', e)}") from None

    def sync_replica(self, name: str, table: str, timeout: float | None = None) -> None:
        """SYSTEM SYNC REPLICA ``table`` on ``name``, for about ``timeout`` seconds at most (default:
        the cluster's query timeout). ClickHouse's InterpreterSystemQuery::syncReplica waits for
        the replica's queue to empty up to the ``receive_timeout`` setting; later releases then
        throw TIMEOUT_EXCEEDED, the code of 18.x's time ignores what the wait returned. With an
        entry it cannot do (a part no live replica has) 18.16 did not answer at all: 12 s with
        receive_timeout 2 in tests/harness/test_clickhouse.py, over 120 s once in make check's
        Spark runs (2026-12-02, after a replica was killed during an INSERT), a bare HTTP time-out
        then. The server is given the bound, the HTTP wait 10 s more, and past either
        ReplicaNotSynced names the entries the replica was waiting for."""
        bound = timeout or self._query_timeout
        try:
            self.query(name, f"SYSTEM SYNC REPLICA {table}", settings={"receive_timeout": max(1, int(bound))},
                       timeout=bound + 10)
        except (ConnectionError, ClickHouseError) as e:
            if (isinstance(e, ClickHouseError) and e.code != TIMEOUT_EXCEEDED) or not self._replica(name).running():
                raise
            try:   # TSV escapes a value's newlines and tabs: one line an entry, four fields
                queue = self.query(name, "SELECT type, new_part_name, num_tries, last_exception "
                                   f"FROM system.replication_queue WHERE table = '{table}' ORDER BY position "
                                   "FORMAT TSV", timeout=10)
                entries = [line.split("\t") for line in queue.splitlines()]
                held = f"{len(entries)} entries in its queue" + "".join(
                    f"; {kind} {part}, {tries} tries, last exception: {error[:300] or 'none'}"
                    for kind, part, tries, error in entries)
            except (ConnectionError, ClickHouseError) as again:
                held = f"its queue could not be read: {again}"
            raise ReplicaNotSynced(f"replica {name}: SYSTEM SYNC REPLICA {table} did not return within {bound:g} s; "
                                   f"{held} ({str(e)[:200]})") from None

    def _replica(self, name: str) -> _Replica:
        try:
            return self._replicas[name]
        except KeyError:
            raise ValueError(f"no replica {name!r}; replicas are {self.names}") from None

    def _wait_ready(self, replicas: list[_Replica], retry_taken_ports: bool = False) -> list[_Replica]:
        """Wait until each replica answers SELECT 1; return those that died because a port was taken."""
        deadline = time.monotonic() + self._start_timeout
        waiting, taken = list(replicas), []
        while waiting:
            for r in list(waiting):
                if r.answers():
                    waiting.remove(r)
                elif not r.running():
                    tail = r.error_tail()
                    if retry_taken_ports and "Address already in use" in tail:
                        waiting.remove(r)
                        taken.append(r)
                        continue
                    raise ClickHouseUnavailable(
                        f"ClickHouse replica {r.name} ({' '.join(self._command)}) exited with "
                        f"{r.proc.returncode} during start-up; its error log ends:\n{tail}")
            if waiting and time.monotonic() > deadline:
                raise ClickHouseUnavailable(f"ClickHouse replicas {[r.name for r in waiting]} did not answer "
                                            f"SELECT 1 within {self._start_timeout:.0f}s:\n{waiting[0].error_tail()}")
            if waiting:
                time.sleep(0.05)
        return taken


@atexit.register
def _stop_leftovers() -> None:
    for cluster in list(_LIVE):
        cluster.stop()


def _first_stopped(cluster: ClickHouseCluster, zk: ZooKeeperServer | None) -> str | None:
    if zk is not None and not zk.running():
        return f"ZooKeeper (pid {zk.pid})"
    return next((f"replica {n}" for n in cluster.names if cluster.pid(n) is None), None)


def _rss_mb(pid: int | None) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024


def measure(names: list[str], inserts: int = 200) -> list[str]:
    """The figures in this module's docstring, measured anew: start-up, memory, restart, txnlog read."""
    from harness.zk_txnlog import read_txnlog, total_writes

    figures = []
    with ZooKeeperServer() as zk:
        began = time.monotonic()
        cluster = ClickHouseCluster(zk.hosts, names)
        with cluster as c:
            figures.append(f"start {len(names)} replicas: {time.monotonic() - began:.2f} s "
                           f"(ClickHouse {c.version()}, constructor to every replica answering SELECT 1)")
            figures.append(f"memory idle: {', '.join(f'{n} {_rss_mb(c.pid(n)):.0f} MB' for n in names)}")
            for n in names:
                c.query(n, "CREATE TABLE t (d Date, u UInt64) ENGINE = "
                           "ReplicatedMergeTree('/clickhouse/tables/{shard}/t', '{replica}') ORDER BY u")
            began = time.monotonic()
            for i in range(inserts):
                c.query(names[0], f"INSERT INTO t VALUES ('2024-01-01', {i})")
            for n in names[1:]:
                c.sync_replica(n, "t")
            figures.append(f"{inserts} one-row INSERTs on {names[0]}, then SYNC REPLICA on the others: "
                           f"{time.monotonic() - began:.2f} s")
            figures.append(f"memory after them: {', '.join(f'{n} {_rss_mb(c.pid(n)):.0f} MB' for n in names)}")
            began = time.monotonic()
            c.stop(names[-1])
            c.start(names[-1])
            figures.append(f"kill -9 and start {names[-1]} again: {time.monotonic() - began:.2f} s")
            began = time.monotonic()
            txns = read_txnlog(zk.data_dir)
            writes = total_writes(txns)
            figures.append(f"read the transaction log: {len(txns)} transactions ({writes.requests} write requests, "
                           f"{writes.ops} ops) in {time.monotonic() - began:.2f} s")
            began = time.monotonic()
        figures.append(f"stop the cluster and remove its files: {time.monotonic() - began:.2f} s")
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m harness.clickhouse",
                                 description="Start ClickHouse replicas (and a ZooKeeper server) on loopback until Ctrl-C.")
    ap.add_argument("--replicas", type=int_at_least(1), default=2, help="how many replicas, named r1, r2, ... (default 2)")
    ap.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", type=zk_address,
                    help="use this ZooKeeper instead of starting one (the chroot must exist)")
    ap.add_argument("--shard", default="01", type=text("the {shard} macro", r"[A-Za-z0-9_]+"), help="the {shard} macro (default 01)")
    ap.add_argument("--measure", action="store_true",
                    help="print start-up, memory and transaction-log figures (with a local ZooKeeper), then stop")
    args = ap.parse_args(argv)
    if args.replicas < 1:
        ap.error("--replicas must be at least 1")
    if args.measure:
        for line in measure([f"r{i}" for i in range(1, args.replicas + 1)]):
            print(line, flush=True)
        return 0
    interrupt_on_ctrl_c_and_kill()
    names = [f"r{i}" for i in range(1, args.replicas + 1)]
    stopped = "stopped ClickHouse" + ("" if args.zookeeper else " and ZooKeeper")
    try:
        with contextlib.ExitStack() as running:
            zk = None if args.zookeeper else running.enter_context(ZooKeeperServer())
            zookeeper = args.zookeeper or zk.hosts
            print(f"zookeeper {zookeeper}" + (f" (pid {zk.pid})" if zk else ""), flush=True)
            cluster = running.enter_context(ClickHouseCluster(zookeeper, names, shard=args.shard))
            for n in names:
                print(f"{n} {cluster.url(n)} (tcp 127.0.0.1:{cluster.tcp_port(n)}, pid {cluster.pid(n)}, "
                      f"ClickHouse {cluster.version()})", flush=True)
            print(f"  try: curl -sS '{cluster.url(names[0])}' --data-binary 'SELECT * FROM system.macros'", flush=True)
            print("Ctrl-C stops everything.", flush=True)
            return serve_until_interrupted(lambda: _first_stopped(cluster, zk))
    except KeyboardInterrupt:
        print(stopped, flush=True)
        return 0
    except (ClickHouseUnavailable, ZooKeeperUnavailable, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m harness.clickhouse", main))
