"""Read a local ZooKeeper server's transaction log exactly: every write with its paths and data.

Every write request a server accepts (a create, a setData, a delete, a multi, and a write that
failed, logged as ``error``) is one record in ``DATA_DIR/version-2/log.<first zxid>``, with the
client's session id; a multi is one record that lists its sub-ops. A test can say "replica r1's
session made 3 requests, 5 ops, between zxid A and B" without instrumenting the client
(ClickHouse's, or kazoo's), and a trace (traces/keeper_trace.py) can read what each write
put into Keeper: a log entry's text, a queue entry's, a log_pointer's value.

The records are decoded here, in Python, from ZooKeeper's own serialization (jute: big-endian
ints and longs, a length before each string, buffer and vector) rather than by ZooKeeper's
``TxnLogToolkit``, because the toolkit prints a multi's sub-ops as their serialized bytes read
as text: a sub-op's data and version are lost where a length byte is not printable, and every
ClickHouse commit is a multi. The toolkit stays the reference reader: ``toolkit_records`` runs
it, and tests/harness/test_zk_txnlog.py holds the two to the same zxids, sessions and types on
real logs. Each record's Adler-32 checksum is verified, as ZooKeeper's reader does.

Bracket a workload with ``ZooKeeperServer.last_zxid()`` before and after: every transaction up
to the second figure is already in the log (the server syncs the log before it applies a
transaction). A record's time is the leader's clock in milliseconds; a zxid range is exact.

To tell ClickHouse replicas apart, use the session that owns each replica's ephemeral
``<table path>/replicas/<name>/is_active`` znode (its ``ephemeralOwner``), or the session of the
create of that znode in the log. Paths here are the server's, so they carry the client's chroot.

Record layout (ZooKeeper 3.4-3.9, ``FileTxnLog``, ``Util.marshallTxnEntry``): a file header
(magic ``ZKLG``, version 2, dbid), then per record a checksum (long), the record's bytes (a
buffer) and an end-of-record byte ``B``; a zero length marks the preallocated tail. A record is a
``TxnHeader`` (session, cxid, zxid, time, type), the type's body and, from 3.6, a ``TxnDigest``
this reader does not need.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import time
import zlib
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
# ZooKeeper's OpCode values, named as Request.op2String names them (createTTL aside: "createTtl").
OP_NAMES = {1: "create", 2: "delete", 5: "setData", 7: "setACL", 13: "check", 14: "multi", 15: "create2",
            16: "reconfig", 19: "createContainer", 20: "deleteContainer", 21: "createTTL", -1: "error",
            -10: "createSession", -11: "closeSession"}
FILE_MAGIC = 0x5A4B4C47   # "ZKLG"


class TxnLogError(RuntimeError):
    """The transaction log could not be read: not a ZooKeeper log, or a record that does not decode."""


@dataclass(frozen=True)
class Op:
    """One write: a plain request's, or one sub-op of a multi (``check`` and ``error`` included).

    ``data`` is what a create or setData wrote; ``version`` the znode's version after a setData
    or setACL, and after a check as the server records it (the checked version plus one);
    ``ephemeral`` whether a create made an ephemeral node; ``error`` an ``error`` op's code
    (ZooKeeper's KeeperException.Code: -101 no node, -110 node exists, -103 bad version). A multi
    that failed lists the op that failed as ``error``.
    """
    type: str
    path: str | None
    data: bytes | None = None
    version: int | None = None
    ephemeral: bool = False
    error: int | None = None


@dataclass(frozen=True)
class Txn:
    zxid: int
    session: int
    cxid: int
    time: datetime          # UTC, the leader's clock (milliseconds)
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
            continue  # the whole file lies outside the range
        txns += [t for t in read_log_file(f) if t.zxid >= first_zxid and (last_zxid is None or t.zxid <= last_zxid)]
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


# --- decoding --------------------------------------------------------------------------------

class _Jute:
    """A reader of jute's binary archive over one record's bytes."""

    def __init__(self, buf: bytes, where: str):
        self.buf, self.at, self.where = buf, 0, where

    def _take(self, n: int) -> bytes:
        if self.at + n > len(self.buf):
            raise TxnLogError(f"{self.where}: a record ends inside a field "
                              f"({n} bytes wanted at {self.at} of {len(self.buf)})")
        b = self.buf[self.at:self.at + n]
        self.at += n
        return b

    def int(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def long(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def bool(self) -> bool:
        return self._take(1) != b"\x00"

    def buffer(self) -> bytes | None:
        n = self.int()
        return None if n < 0 else self._take(n)

    def string(self) -> str | None:
        b = self.buffer()
        return None if b is None else b.decode("utf-8")

    def acl(self) -> None:
        for _ in range(max(self.int(), 0)):   # perms, then the Id's scheme and id
            self.int()
            self.string()
            self.string()


def _body(kind: str, j: _Jute) -> Op | None:
    """The op a txn body of this kind records (CreateTxn, SetDataTxn, ... in zookeeper.jute)."""
    if kind in ("create", "create2", "createContainer", "createTTL"):
        path, data = j.string(), j.buffer()
        j.acl()
        ephemeral = j.bool() if kind in ("create", "create2") else False
        return Op(kind, path, data=data, ephemeral=ephemeral)   # parentCVersion and a TTL follow
    if kind in ("delete", "deleteContainer"):
        return Op(kind, j.string())
    if kind in ("setData", "reconfig"):
        path, data = j.string(), j.buffer()
        return Op(kind, path, data=data, version=j.int())
    if kind == "setACL":
        path = j.string()
        j.acl()
        return Op(kind, path, version=j.int())
    if kind == "check":
        return Op(kind, j.string(), version=j.int())
    if kind == "error":
        return Op(kind, None, error=j.int())
    return None


def _record(buf: bytes, where: str) -> Txn:
    j = _Jute(buf, where)
    session, cxid, zxid, millis, code = j.long(), j.int(), j.long(), j.long(), j.int()
    kind = OP_NAMES.get(code)
    if kind is None:
        raise TxnLogError(f"{where}: zxid {zxid:#x} has op code {code}, which this reader does not know")
    if kind == "multi":
        ops = []
        for _ in range(j.int()):
            sub_code, sub = j.int(), j.buffer() or b""
            sub_kind = OP_NAMES.get(sub_code)
            op = _body(sub_kind, _Jute(sub, where)) if sub_kind else None
            if op is None:
                raise TxnLogError(f"{where}: zxid {zxid:#x} has a multi sub-op of code {sub_code}")
            ops.append(op)
        ops_t = tuple(ops)
    elif kind in WRITE_TYPES:
        ops_t = (_body(kind, j),)
    else:
        ops_t = ()   # createSession / closeSession: session bookkeeping
    stamp = datetime.fromtimestamp(millis / 1000, tz=timezone.utc)
    return Txn(zxid=zxid, session=session & 0xFFFFFFFFFFFFFFFF, cxid=cxid, time=stamp, type=kind, ops=ops_t)


def read_log_file(path: Path | str, attempts: int = 3) -> list[Txn]:
    """Every record of one log file. A record the server is still appending is read again."""
    for attempt in range(attempts):
        try:
            return decode_log(Path(path).read_bytes(), str(path))
        except _Torn:
            time.sleep(0.1 * (attempt + 1))
    raise TxnLogError(f"{path}: its last record stays incomplete (a server still writing, or a cut file)")


class _Torn(TxnLogError):
    """The file ends inside a record, or a record's checksum does not match: read it again."""


def decode_log(raw: bytes, source: str = "log") -> list[Txn]:
    """Transactions of one log file's bytes, oldest first."""
    if len(raw) < 16 or struct.unpack(">i", raw[:4])[0] != FILE_MAGIC:
        raise TxnLogError(f"{source}: not a ZooKeeper transaction log (no ZKLG header)")
    at, txns = 16, []
    while at + 12 <= len(raw):
        crc, n = struct.unpack(">qi", raw[at:at + 12])
        if n <= 0:
            break   # the preallocated, zero-filled tail
        body = raw[at + 12:at + 12 + n]
        if len(body) < n or at + 12 + n >= len(raw) or raw[at + 12 + n] != ord("B"):
            raise _Torn(f"{source}: the record at byte {at} is incomplete")
        if zlib.adler32(body) != crc & 0xFFFFFFFF:
            raise _Torn(f"{source}: the record at byte {at} fails its checksum")
        txns.append(_record(body, source))
        at += 12 + n + 1
    if any(a.zxid >= b.zxid for a, b in zip(txns, txns[1:])):
        raise TxnLogError(f"{source}: zxids do not increase; the log was misread")
    return txns


# --- ZooKeeper's own reader, to hold the decoder to ------------------------------------------

_HEADER = re.compile(r"session 0x(?P<session>[0-9a-f]+) cxid 0x(?P<cxid>[0-9a-f]+) zxid 0x(?P<zxid>[0-9a-f]+) "
                     r"(?P<type>\w+)(?: |$)", re.M)


def toolkit_records(path: Path | str) -> list[tuple[int, int, str]]:
    """(zxid, session, type) of every record, as ZooKeeper's TxnLogToolkit prints them."""
    java = shutil.which("java")
    if not java:
        raise TxnLogError("java not found on PATH: ZooKeeper's TxnLogToolkit needs Java (>= 17 here)")
    cmd = [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Dfile.encoding=UTF-8",
           "-Dsun.stdout.encoding=UTF-8", "-Dstdout.encoding=UTF-8", "-Duser.timezone=UTC",
           "-Dlog4j.configuration=", "-cp", server_classpath(), TOOLKIT, str(path)]
    r = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL)
    out = r.stdout.decode("utf-8", errors="replace")
    if r.returncode != 0 or "EOF reached after" not in out:
        raise TxnLogError(f"TxnLogToolkit could not read {path} (exit {r.returncode})")
    return [(int(m["zxid"], 16), int(m["session"], 16), m["type"]) for m in _HEADER.finditer(out)]
