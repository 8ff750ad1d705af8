"""The Keeper interface on real ZooKeeper through kazoo.

kazoo's exceptions are mapped to the interface's, so protocol code behaves the same on both
backends. A failing kazoo transaction returns a list of exceptions instead of raising; it is
turned into a MultiError naming the first op that failed (the rest are RolledBack).
"""

from __future__ import annotations

from kazoo.client import KazooClient, _prefix_root
from kazoo.protocol.serialization import Create as KzCreate
from kazoo.security import OPEN_ACL_UNSAFE
from kazoo.exceptions import (BadVersionError as KzBadVersion, NodeExistsError as KzNodeExists,
                              NoNodeError as KzNoNode, NotEmptyError as KzNotEmpty,
                              SessionExpiredError as KzSessionExpired, RolledBackError, RuntimeInconsistency)
from kazoo.protocol.states import KazooState, ZnodeStat

from .base import (BadVersionError, Check, Create, Delete, Keeper, KeeperError, MultiError, NodeExistsError,
                   NoNodeError, NotEmptyError, Op, SessionExpiredError, SetData, Stat, check_path)

_ERRORS = {KzNodeExists: NodeExistsError, KzNoNode: NoNodeError, KzBadVersion: BadVersionError,
           KzNotEmpty: NotEmptyError, KzSessionExpired: SessionExpiredError}


def _mapped(e: Exception) -> KeeperError:
    for kz, ours in _ERRORS.items():
        if isinstance(e, kz):
            return ours(str(e) or type(e).__name__)
    return KeeperError(f"{type(e).__name__}: {e}")


def _stat(zs: ZnodeStat) -> Stat:
    return Stat(zs.version, zs.ephemeralOwner, zs.numChildren, zs.ctime)


class ZooKeeperKeeper(Keeper):
    """A session on a ZooKeeper ensemble (`hosts` may carry a chroot: "127.0.0.1:2181/ns")."""

    def __init__(self, hosts: str, timeout: float = 10.0):
        super().__init__()
        self.hosts = hosts
        self.client = KazooClient(hosts=hosts, timeout=timeout)
        self.client.start(timeout=timeout + 5)
        self._expired = False
        self.client.add_listener(self._on_state)

    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.LOST:
            self._expired = True

    def _call(self, kind: str, fn, *args, **kwargs):
        self.ops[kind] += 1
        if self._expired:
            raise SessionExpiredError(f"session of {self.hosts} expired")
        try:
            return fn(*args, **kwargs)
        except (KzNodeExists, KzNoNode, KzBadVersion, KzNotEmpty, KzSessionExpired) as e:
            raise _mapped(e) from e

    @property
    def session_id(self) -> int:
        return self.client.client_id[0] if self.client.client_id else 0

    def create(self, path, value=b"", *, ephemeral=False, sequential=False, makepath=False) -> str:
        check_path(path, sequential)
        return self._call("create", self.client.create, path, bytes(value), ephemeral=ephemeral,
                          sequence=sequential, makepath=makepath)

    def get(self, path):
        check_path(path)
        value, zs = self._call("get", self.client.get, path)
        return value, _stat(zs)

    def set(self, path, value, version=-1):
        check_path(path)
        return _stat(self._call("set", self.client.set, path, bytes(value), version))

    def delete(self, path, version=-1, *, recursive=False):
        check_path(path)
        self._call("delete", self.client.delete, path, version, recursive)

    def exists(self, path):
        check_path(path)
        zs = self._call("exists", self.client.exists, path)
        return _stat(zs) if zs else None

    def get_children(self, path):
        check_path(path)
        return sorted(self._call("get_children", self.client.get_children, path))

    def multi(self, ops: list[Op]):
        self.ops["multi_ops"] += len(ops)  # the entries a multi writes or checks, for benchmarks
        tx = self.client.transaction()
        for op in ops:
            check_path(op.path, isinstance(op, Create) and op.sequential)
            if isinstance(op, Create) and op.sequential and op.path.endswith("/"):
                # kazoo's TransactionRequest.create normalises the path and drops the trailing slash
                # (KazooClient.create keeps it): mutations/ + sequence would become a sibling
                # "mutationsNNNNNNNNNN". Build the request as create() would.
                flags = (1 if op.ephemeral else 0) | 2
                tx._add(KzCreate(_prefix_root(self.client.chroot, op.path, trailing=True), bytes(op.value),
                                 self.client.default_acl or OPEN_ACL_UNSAFE, flags), None)
            elif isinstance(op, Create):
                tx.create(op.path, bytes(op.value), ephemeral=op.ephemeral, sequence=op.sequential)
            elif isinstance(op, SetData):
                tx.set_data(op.path, bytes(op.value), op.version)
            elif isinstance(op, Delete):
                tx.delete(op.path, op.version)
            elif isinstance(op, Check):
                tx.check(op.path, op.version)
            else:
                raise TypeError(f"not a multi op: {op!r}")
        results = self._call("multi", tx.commit)
        for i, r in enumerate(results):
            if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency)):
                raise MultiError(i, _mapped(r))
        out: list = []
        for op, r in zip(ops, results):
            if isinstance(op, Create):
                out.append(r)
            elif isinstance(op, SetData):
                out.append(_stat(r))
            else:
                out.append(None)
        return out

    def close(self) -> None:
        self.client.stop()
        self.client.close()

    def expire_session(self) -> None:
        """Expire this session from the server side, as kazoo's own test harness does."""
        sid, pwd = self.client.client_id
        other = KazooClient(hosts=self.hosts.split("/", 1)[0], client_id=(sid, pwd))
        other.start(timeout=15)
        other.stop()  # closing a session with our id expires ours
        other.close()
