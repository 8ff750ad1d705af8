"""Count Keeper writes exactly, from a local ZooKeeper server's transaction log.

Every write request a server accepts (a create, a setData, a delete, a multi, and a write that
failed, logged as ``error``) is one record in ``DATA_DIR/version-2/log.<first zxid>``, with the
client's session id; a multi is one record that lists its sub-ops. This module dumps those files
with ZooKeeper's own ``org.apache.zookeeper.server.persistence.TxnLogToolkit`` and parses the
dump, so a test can say "replica r1's session made 3 requests, 5 ops, between zxid A and B"
without instrumenting the client (ClickHouse's, or kazoo's).

Bracket a workload with ``ZooKeeperServer.last_zxid()`` before and after: every transaction up
to the second figure is already in the log (the server syncs the log before it applies a
transaction). Record times come at one-second resolution (the toolkit's format), so a window of
time is coarse; a zxid range is exact.

The toolkit prints a multi's sub-ops as their serialized bytes; the path is read from between
the 4-byte length and the next field. Two things this cannot tell apart, neither of which the
project's paths or ClickHouse's data contain: a path holding ``;`` or ``,``, and a znode value
inside a multi holding text such as ``;create:`` + 4 bytes + ``/``. The record count is checked
against the toolkit's own ("EOF reached after N txns"), and zxids must increase.

To tell ClickHouse replicas apart, use the session that owns each replica's ephemeral
``<table path>/replicas/<name>/is_active`` znode (its ``ephemeralOwner``). Paths here are the
server's, so they carry the client's chroot.

Reading time (one JVM per log file; 2 cores, Java 17, ZooKeeper 3.8.0, the machine at load 8-9,
measured 2026-11-23 with ``python -m harness.clickhouse --measure`` and a kazoo loop of creates):
0.5-1.3 s for a handful of transactions (JVM start-up), 1.2-2.3 s for 2,000 (200 ClickHouse INSERTs
on two replicas), 5-6.5 s for 20,000.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from harness.zookeeper import server_classpath

TOOLKIT = "org.apache.zookeeper.server.persistence.TxnLogToolkit"
# Records that are a client's write request; createSession/closeSession are session bookkeeping.
WRITE_TYPES = frozenset({"create", "create2", "createContainer", "createTTL", "setData", "delete",
                         "deleteContainer", "setACL", "multi", "error"})


class TxnLogError(RuntimeError):
    """The transaction log could not be read or its dump did not parse."""


@dataclass(frozen=True)
class Op:
    """One write: a plain request's, or one sub-op of a multi (``check`` and ``error`` included)."""
    type: str
    path: str | None


@dataclass(frozen=True)
class Txn:
    zxid: int
    session: int
    cxid: int
    time: datetime          # UTC, whole seconds
    type: str               # create, setData, delete, multi, error, createSession, closeSession, ...
    ops: tuple[Op, ...]     # a multi's sub-ops; a plain write's one op; () for session records

    @property
    def is_write(self) -> bool:
        return self.type in WRITE_TYPES

    @property
    def failed(self) -> bool:
        """A write that changed nothing: a plain write refused, or a multi with an error sub-op."""
        return any(op.type == "error" for op in self.ops)

    @property
    def paths(self) -> list[str]:
        return [op.path for op in self.ops if op.path is not None]


@dataclass
class WriteCount:
    """A session's writes: ``requests`` (a multi is one), ``ops`` (a multi counts each sub-op)."""
    requests: int = 0
    ops: int = 0
    by_type: Counter = field(default_factory=Counter)  # request types; a multi's sub-ops as "multi.<type>"

    def add(self, txn: Txn) -> None:
        self.requests += 1
        self.ops += len(txn.ops)
        self.by_type[txn.type] += 1
        if txn.type == "multi":
            self.by_type.update(f"multi.{op.type}" for op in txn.ops)


def log_files(data_dir: Path | str) -> list[Path]:
    """The server's log files, oldest first (the suffix is the first zxid in the file, in hex)."""
    files = Path(data_dir, "version-2").glob("log.*")
    return sorted((f for f in files if re.fullmatch(r"log\.[0-9a-f]+", f.name)), key=lambda f: int(f.suffix[1:], 16))


def read_txnlog(data_dir: Path | str, first_zxid: int = 0, last_zxid: int | None = None) -> list[Txn]:
    """Every transaction with ``first_zxid <= zxid <= last_zxid`` in the server's log, oldest first."""
    files = log_files(data_dir)
    if not files:
        raise TxnLogError(f"no transaction log under {Path(data_dir, 'version-2')} (is this a ZooKeeper dataDir?)")
    txns: list[Txn] = []
    for i, f in enumerate(files):
        starts_after = i + 1 < len(files) and int(files[i + 1].suffix[1:], 16) <= first_zxid
        if starts_after or (last_zxid is not None and int(f.suffix[1:], 16) > last_zxid):
            continue  # the whole file lies outside the range: skip the JVM start
        txns += [t for t in _read_file(f) if t.zxid >= first_zxid and (last_zxid is None or t.zxid <= last_zxid)]
    return txns


def count_writes(txns: Iterable[Txn]) -> dict[int, WriteCount]:
    """Write requests and ops per session id."""
    counts: dict[int, WriteCount] = {}
    for t in txns:
        if t.is_write:
            counts.setdefault(t.session, WriteCount()).add(t)
    return counts


def total_writes(txns: Iterable[Txn]) -> WriteCount:
    """Write requests and ops of all sessions together."""
    total = WriteCount()
    for t in txns:
        if t.is_write:
            total.add(t)
    return total


def _read_file(path: Path, attempts: int = 3) -> list[Txn]:
    java = shutil.which("java")
    if not java:
        raise TxnLogError("java not found on PATH: reading ZooKeeper's transaction log needs Java (>= 17 here)")
    # A fixed locale and zone give one date format; UTF-8 keeps each undecodable byte one character.
    # A JVM that lives a second: the quick compiler only and the serial collector halve its run time.
    cmd = [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Dsun.stdout.encoding=UTF-8", "-Dstdout.encoding=UTF-8", "-Dfile.encoding=UTF-8",
           "-Duser.timezone=UTC", "-Duser.language=en", "-Duser.country=US", "-Dlog4j.configuration=",
           "-cp", server_classpath(), TOOLKIT, str(path)]
    for attempt in range(attempts):
        r = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL)
        out = r.stdout.decode("utf-8", errors="replace")
        # The server may be appending the record the toolkit reads last: read again.
        torn = r.returncode != 0 or "CRC ERROR - " in out
        if not torn:
            return parse_dump(out, str(path))
        time.sleep(0.1 * (attempt + 1))
    raise TxnLogError(f"TxnLogToolkit could not read {path} (exit {r.returncode}): "
                      f"{(r.stderr.decode(errors='replace') or out).strip().splitlines()[-1:]}")


_HEADER = re.compile(
    r"^(?P<date>\d+/\d+/\d+), (?P<clock>\d+:\d+:\d+)\W(?P<ampm>[AP]M) UTC session 0x(?P<session>[0-9a-f]+) "
    r"cxid 0x(?P<cxid>[0-9a-f]+) zxid 0x(?P<zxid>[0-9a-f]+) (?P<type>\w+)(?: |$)", re.M)
_EOF = re.compile(r"^EOF reached after (\d+) txns\.$", re.M)
# A multi's sub-op: type, ':', its 4-byte path length (one character a byte), the path. A path ends
# where the next field's length starts (a control byte, or a replaced one) or at the next sub-op.
_SUB_OP = re.compile(r"(?:^|;)(?P<type>[a-zA-Z]+):(?:.{4}(?P<path>/[^\x00-\x1f;\ufffd]*)|.{4}(?=;|$))", re.S)


def parse_dump(out: str, source: str = "dump") -> list[Txn]:
    """Transactions from TxnLogToolkit's dump of one log file."""
    eof = _EOF.search(out)
    if not eof:
        raise TxnLogError(f"{source}: the dump has no 'EOF reached' line; it ends {out[-200:]!r}")
    body = out[:eof.start()]
    heads = list(_HEADER.finditer(body))
    txns = []
    for h, nxt in zip(heads, heads[1:] + [None]):
        rest = body[h.end():nxt.start() if nxt else len(body)].removesuffix("\n")
        kind = h["type"]
        stamp = datetime.strptime(f"{h['date']} {h['clock']} {h['ampm']}", "%m/%d/%y %I:%M:%S %p")
        txns.append(Txn(zxid=int(h["zxid"], 16), session=int(h["session"], 16), cxid=int(h["cxid"], 16),
                        time=stamp.replace(tzinfo=timezone.utc), type=kind, ops=_ops(kind, rest)))
    if len(txns) != int(eof.group(1)):
        raise TxnLogError(f"{source}: parsed {len(txns)} records, the toolkit read {eof.group(1)}")
    if any(a.zxid >= b.zxid for a, b in zip(txns, txns[1:])):
        raise TxnLogError(f"{source}: zxids do not increase; the dump was misread")
    return txns


def _ops(kind: str, rest: str) -> tuple[Op, ...]:
    if kind == "multi":
        ops = tuple(Op(m["type"], m["path"]) for m in _SUB_OP.finditer(rest))
        if not ops:
            raise TxnLogError(f"a multi with no sub-op read from {rest[:120]!r}")
        return ops
    if kind == "error":
        return (Op("error", None),)
    if kind in WRITE_TYPES:
        # "create /p,data,acl,..." and "setData /p,data,v"; jute's toString gives "delete '/p".
        return (Op(kind, re.split(r"[,\n]", rest.lstrip("'"), maxsplit=1)[0]),)
    return ()
