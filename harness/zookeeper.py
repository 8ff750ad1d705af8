"""Start real ZooKeeper servers on loopback for tests: one standalone server or a 3-node ensemble.

``python -m harness.zookeeper`` starts a standalone server for a person at a shell, prints its
address as the option the other commands take (``--zk 127.0.0.1:PORT``), and stops it on Ctrl-C
or SIGTERM (exit 0; 3 when no server can be started, harness/cli_args.py).

Where the server comes from, in order: ``ZOOKEEPER_HOME`` (a release tarball: its ``lib/`` jars),
else Debian's ``zookeeper`` package in /usr/share/java (installed by ``make setup``). ``ZK_HOSTS``
names an external ensemble instead, and then nothing is started here (see ``external_hosts``).

Every server is a child JVM in its own process group with a private temporary data directory;
``stop()`` kills it and removes the directory, and an ``atexit`` hook does the same for anything a
crashed or interrupted test left running.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from harness.ports import free_port, free_ports

DEBIAN_JARS = Path("/usr/share/java")
_LIVE: set["_Member"] = set()


class ZooKeeperUnavailable(RuntimeError):
    """No ZooKeeper server can be started on this machine."""


def external_hosts() -> str | None:
    """The external ensemble from ``ZK_HOSTS`` (``host:port,...``), if the user gave one."""
    return os.environ.get("ZK_HOSTS") or None


def server_classpath() -> str:
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(Path(home).glob("lib/*.jar")) + sorted(Path(home).glob("zookeeper-*.jar"))
        if not any("zookeeper" in j.name for j in jars):
            raise ZooKeeperUnavailable(f"ZOOKEEPER_HOME={home} holds no zookeeper jar under lib/")
        return ":".join(map(str, jars))
    if (DEBIAN_JARS / "zookeeper.jar").is_file():
        # zookeeper.jar's manifest pulls in jute, netty and metrics; only the logging
        # binding has to be named.
        names = ["zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-log4j12.jar",
                 "log4j-1.2.jar", "netty-handler.jar", "netty-transport.jar", "netty-common.jar",
                 "netty-buffer.jar", "netty-resolver.jar", "netty-codec.jar",
                 "netty-transport-native-epoll.jar", "netty-transport-native-unix-common.jar",
                 "metrics-core.jar", "commons-cli.jar", "snappy-java.jar"]
        return ":".join(str(DEBIAN_JARS / n) for n in names if (DEBIAN_JARS / n).is_file())
    raise ZooKeeperUnavailable(
        "no ZooKeeper server found: run `make setup` (installs Debian's `zookeeper` package), "
        "or set ZOOKEEPER_HOME to a ZooKeeper release, or ZK_HOSTS to an external ensemble")


def four_letter(port: int, cmd: str, timeout: float = 1.0) -> str:
    """Send a four-letter command (``srvr``, ``ruok``...) and return the reply, '' if none."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(cmd.encode())
            chunks = []
            while True:
                b = s.recv(4096)
                if not b:
                    break
                chunks.append(b)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


_LOG4J = """log4j.rootLogger={level}, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File={log}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d %-5p [%t] %c{{1}} - %m%n
"""


class _Member:
    """One ZooKeeper JVM with its own config and data directory."""

    def __init__(self, root: Path, myid: int, client_port: int, servers: list[str] | None, tick_ms: int,
                 log_level: str = "WARN"):
        self.myid, self.client_port, self.dir = myid, client_port, root / f"zk{myid}"
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        (self.dir / "data" / "myid").write_text(f"{myid}\n")
        # initLimit 40 ticks (20 s at 500 ms), syncLimit 10: room for a follower's resync (it may
        # take a snapshot of the whole data tree) after the whole ensemble was stopped (SIGSTOP,
        # the fault suite's stall rows) on a busy machine. At 10 and 5 one suite run on 2026-11-29
        # had an ensemble that no session could reach for 5 minutes after a 5 s stall; the cause
        # was not pinned down (its logs were gone), the room is a guess: lab/faults.py now keeps
        # the members' logs when it happens.
        cfg = [f"tickTime={tick_ms}", "initLimit=40", "syncLimit=10", f"dataDir={self.dir / 'data'}",
               f"clientPort={client_port}", "clientPortAddress=127.0.0.1", "admin.enableServer=false",
               "4lw.commands.whitelist=*", "maxClientCnxns=0", "autopurge.purgeInterval=0",
               # No fsync per transaction: these servers hold test data in a temporary folder that
               # a crash of the machine would lose anyway; the log is still written and flushed at
               # each commit (harness/zk_txnlog.py reads it), only not forced to the disk.
               "forceSync=no"]
        cfg += servers or []
        (self.dir / "zoo.cfg").write_text("\n".join(cfg) + "\n")
        (self.dir / "log4j.properties").write_text(_LOG4J.format(log=self.dir / "zookeeper.log", level=log_level))
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        if self.proc and self.proc.poll() is None:
            return
        java = shutil.which("java")
        if not java:
            raise ZooKeeperUnavailable("java not found on PATH: ZooKeeper needs Java (>= 17 here)")
        cmd = [java, "-Xmx256m", "-Dzookeeper.jmx.log4j.disable=true",
               f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
               "-cp", f"{self.dir}:{server_classpath()}",
               "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.dir / "zoo.cfg")]
        out = open(self.dir / "stdout.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        out.close()
        _LIVE.add(self)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        _LIVE.discard(self)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def mode(self) -> str | None:
        """'standalone', 'leader' or 'follower' once the member serves requests, else None."""
        reply = four_letter(self.client_port, "srvr")
        for line in reply.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def last_zxid(self) -> int:
        for line in four_letter(self.client_port, "srvr").splitlines():
            if line.startswith("Zxid:"):
                return int(line.split(":", 1)[1].strip(), 16)
        raise ZooKeeperUnavailable(f"ZooKeeper server {self.myid} on port {self.client_port} does not answer `srvr`")

    def log_tail(self, n: int = 20) -> str:
        lines = []
        for name in ("stdout.log", "zookeeper.log"):
            p = self.dir / name
            if p.is_file():
                lines += p.read_text(errors="replace").splitlines()[-n:]
        return "\n".join(lines)


def _wait(pred, timeout: float, what: str, members: list[_Member]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        for m in members:
            if m.proc and m.proc.poll() is not None:
                raise ZooKeeperUnavailable(f"ZooKeeper server {m.myid} exited with {m.proc.returncode}:\n{m.log_tail()}")
        time.sleep(0.1)
    raise ZooKeeperUnavailable(f"{what} not ready after {timeout:.0f}s:\n" + "\n".join(m.log_tail() for m in members))


class _Started:
    """`with` starts and stops the server(s); a start that fails part-way stops what it started."""

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


class ZooKeeperServer(_Started):
    """A standalone server on a free 127.0.0.1 port. Use as a context manager."""

    def __init__(self, tick_ms: int = 500, start_timeout: float = 30.0):
        self._root = Path(tempfile.mkdtemp(prefix="zk-standalone-"))
        self._member = _Member(self._root, 1, free_port(), None, tick_ms)
        self._timeout = start_timeout

    @property
    def port(self) -> int:
        return self._member.client_port

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._member.proc.pid if self._member.proc else None

    @property
    def data_dir(self) -> Path:
        """The server's dataDir: its transaction log is ``version-2/log.*`` (read by harness.zk_txnlog)."""
        return self._member.dir / "data"

    def running(self) -> bool:
        return self._member.running()

    def last_zxid(self) -> int:
        """The zxid of the last transaction the server applied (and so already wrote to its log)."""
        return self._member.last_zxid()

    def start(self) -> "ZooKeeperServer":
        self._member.start()
        # `ruok` can answer before the server serves; `srvr` printing a Mode means it does.
        _wait(lambda: self._member.mode() is not None, self._timeout, "ZooKeeper", [self._member])
        return self

    def stop(self) -> None:
        self._member.stop()
        shutil.rmtree(self._root, ignore_errors=True)


class ZooKeeperEnsemble(_Started):
    """A quorum of ``size`` servers on loopback ports; members can be stopped and started."""

    def __init__(self, size: int = 3, tick_ms: int = 500, start_timeout: float = 60.0, log_level: str = "WARN"):
        self._root = Path(tempfile.mkdtemp(prefix="zk-ensemble-"))
        flat = free_ports(3 * size)   # client, quorum and election port of each member, all distinct
        ports = [tuple(flat[3 * i:3 * i + 3]) for i in range(size)]
        servers = [f"server.{i + 1}=127.0.0.1:{p[1]}:{p[2]}" for i, p in enumerate(ports)]
        # log_level INFO keeps what WARN leaves out: sessions established, refused ("has seen zxid"),
        # expired (the fault suite asks for it, to read a wedged ensemble's logs).
        self.members = [_Member(self._root, i + 1, p[0], servers, tick_ms, log_level) for i, p in enumerate(ports)]
        self._timeout = start_timeout

    @property
    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{m.client_port}" for m in self.members)

    def _member(self, myid: int) -> _Member:
        for m in self.members:
            if m.myid == myid:
                return m
        raise ValueError(f"no ensemble member {myid}; members are {[m.myid for m in self.members]}")

    def modes(self) -> dict[int, str | None]:
        return {m.myid: m.mode() for m in self.members}

    def leader(self) -> int | None:
        return next((i for i, mode in self.modes().items() if mode == "leader"), None)

    def stats(self) -> dict[int, dict[str, str]]:
        """Each member's `srvr` answer as fields (Mode, Zxid, Outstanding, Received, Sent, ...);
        an empty dict for a member that does not answer."""
        out = {}
        for m in self.members:
            fields = {}
            for line in four_letter(m.client_port, "srvr").splitlines():
                key, sep, value = line.partition(":")
                if sep:
                    fields[key.strip()] = value.strip()
            out[m.myid] = fields
        return out

    def wedged(self, watch: float = 3.0) -> str | None:
        """Why the ensemble does not serve although every member says it does, or None: each one
        answers `srvr` in a quorum's mode, requests are outstanding, and no member's last zxid
        moves in `watch` seconds, so no proposal is being committed (writes, and new sessions,
        which are writes, wait for good). Seen on Debian's ZooKeeper 3.8.0 after every member
        was stopped and continued at once (SIGSTOP/SIGCONT): the followers re-synced with a
        leader that had not noticed losing them, and nothing after that was committed until the
        members were restarted."""
        before = self.stats()
        if not all(f.get("Mode") in ("leader", "follower") for f in before.values()):
            return None
        if not any(int(f.get("Outstanding", "0")) > 0 for f in before.values()):
            return None
        time.sleep(watch)
        after = self.stats()
        if any(after[i].get("Zxid") != before[i].get("Zxid") for i in before):
            return None
        return "no proposal committed in {:g} s with requests outstanding: {}".format(watch, "; ".join(
            f"{i} {f.get('Mode')} zxid {f.get('Zxid')} outstanding {f.get('Outstanding')} sent {f.get('Sent')}"
            for i, f in sorted(after.items())))

    def start(self) -> "ZooKeeperEnsemble":
        for m in self.members:
            m.start()
        _wait(lambda: all(self.modes().values()), self._timeout, "ZooKeeper ensemble", self.members)
        return self

    def restart_members(self) -> None:
        """Every member stopped and started again (a wedged ensemble's remedy), then a quorum."""
        for m in self.members:
            m.stop()
        self.start()

    def stop_member(self, myid: int) -> None:
        self._member(myid).stop()

    def start_member(self, myid: int) -> None:
        m = self._member(myid)
        m.start()
        _wait(lambda: m.mode() is not None, self._timeout, f"ZooKeeper member {myid}", [m])

    def pause(self) -> None:
        """Stall every member (SIGSTOP): connections stay open and requests go unanswered, which
        a killed member (connection refused at once) never shows; resume() lets them go on."""
        for m in self.members:
            if m.running():
                os.kill(m.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        for m in self.members:
            if m.running():
                os.kill(m.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.resume()   # a stopped JVM takes its SIGKILL all the same, but its children may not
        for m in self.members:
            m.stop()
        shutil.rmtree(self._root, ignore_errors=True)


@atexit.register
def _stop_leftovers() -> None:
    for m in list(_LIVE):
        m.stop()


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def interrupt_on_ctrl_c_and_kill() -> None:
    """Ctrl-C, and a kill from another shell, both raise KeyboardInterrupt, so `with` blocks stop the
    servers. SIGINT is set explicitly: a shell starts background jobs with it ignored."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)


def serve_until_interrupted(stopped: Callable[[], str | None], poll: float = 0.5) -> int:
    """Block a shell session until Ctrl-C (KeyboardInterrupt), or until ``stopped()`` names a server
    that died by itself: then 1."""
    while True:
        time.sleep(poll)
        gone = stopped()
        if gone:
            print(f"{gone} exited by itself; stopping the rest", file=sys.stderr, flush=True)
            return 1


def main(argv: list[str] | None = None) -> int:
    from harness.cli_args import ENVIRONMENT, HOLDS, Parser, fail
    ap = Parser(prog="python -m harness.zookeeper",
                description="Start a standalone ZooKeeper server on loopback until Ctrl-C or SIGTERM.")
    ap.parse_args(argv)
    interrupt_on_ctrl_c_and_kill()
    try:
        with ZooKeeperServer() as zk:
            # The first line is the option to paste (and what a script reads).
            print(f"--zk {zk.hosts}", flush=True)
            print(f"  ZooKeeper pid {zk.pid}, dataDir {zk.data_dir} (removed when it stops)", flush=True)
            print(f"  try: python -m reference run --zk {zk.hosts} --blocks 4; "
                  f"python -m reference tables --zk {zk.hosts}", flush=True)
            print("  Ctrl-C stops it.", flush=True)
            return serve_until_interrupted(lambda: None if zk.running() else f"ZooKeeper (pid {zk.pid})")
    except KeyboardInterrupt:
        print("stopped ZooKeeper", flush=True)
        return HOLDS
    except ZooKeeperUnavailable as e:
        return fail(ap.prog, "environment", str(e).splitlines()[0], ENVIRONMENT)


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m harness.zookeeper", main))
