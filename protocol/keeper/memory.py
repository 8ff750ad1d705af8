"""An in-memory Keeper with ZooKeeper's semantics, for fast deterministic runs.

One `MemoryEnsemble` is the shared tree; each `MemoryKeeper` is a session on it. Versions,
CAS, ephemeral nodes bound to sessions, sequential nodes (numbered by the parent's count of
child creates, 10 digits, as ZooKeeper does), atomic multi and the error cases follow ZooKeeper. A session can be
expired from outside, as a network partition longer than the session timeout would.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from protocol.keeper.base import (BadVersionError, Check, Create, Delete, Keeper, KeeperError, KeeperUnavailableError,
                                  MultiError, NodeExistsError, NoNodeError, NotEmptyError, Op, SessionExpiredError,
                                  SetData, Stat, check_path, parent_of)


@dataclass
class _Node:
    value: bytes = b""
    version: int = 0
    ephemeral_owner: int = 0
    children: set[str] = field(default_factory=set)
    next_seq: int = 0
    ctime: int = 0


class _Trial(dict):
    """A multi's view of the tree: shares nodes with it until an op writes one (copy on write)."""

    def __init__(self, base: dict):
        super().__init__(base)
        self.copied: set[str] = set()

    def writable(self, path: str) -> _Node:
        if path not in self.copied:
            n = self[path]
            self[path] = _Node(n.value, n.version, n.ephemeral_owner, set(n.children), n.next_seq, n.ctime)
            self.copied.add(path)
        return self[path]


def _writable(nodes: dict, path: str) -> _Node:
    return nodes.writable(path) if isinstance(nodes, _Trial) else nodes[path]


class MemoryEnsemble:
    """The shared znode tree and the live sessions. Thread-safe: one lock serialises requests."""

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {"/": _Node()}
        self.lock = threading.RLock()
        self._session_ids = itertools.count(1)
        self.live_sessions: set[int] = set()
        self._last_ctime = 0
        self._lose_answer: dict[int, Callable[[list[Op]], bool]] = {}

    def ctime(self) -> int:
        """The creation time of a new node, in ms: the wall clock, made strictly increasing so that
        nodes order by creation as ZooKeeper's (ms, zxid) order would."""
        self._last_ctime = max(int(time.time() * 1000), self._last_ctime + 1)
        return self._last_ctime

    def connect(self) -> "MemoryKeeper":
        with self.lock:
            sid = next(self._session_ids)
            self.live_sessions.add(sid)
        return MemoryKeeper(self, sid)

    def snapshot(self):
        """The whole tree and the live sessions, to restore() later (conformance tries a step
        and takes it back, to learn whether the reference would take it)."""
        with self.lock:
            return ({k: _Node(n.value, n.version, n.ephemeral_owner, set(n.children), n.next_seq, n.ctime)
                     for k, n in self.nodes.items()}, set(self.live_sessions))

    def restore(self, snap) -> None:
        nodes, live = snap
        with self.lock:
            self.nodes = {k: _Node(n.value, n.version, n.ephemeral_owner, set(n.children), n.next_seq, n.ctime)
                          for k, n in nodes.items()}
            self.live_sessions = set(live)

    def expire(self, session_id: int) -> None:
        """Expire a session: its ephemeral nodes are deleted, its client gets SessionExpiredError."""
        with self.lock:
            self.live_sessions.discard(session_id)
            for path in sorted((p for p, n in self.nodes.items() if n.ephemeral_owner == session_id),
                               key=len, reverse=True):
                self._remove(path)

    def lose_answer(self, session_id: int, picks: Callable[[list[Op]], bool]) -> None:
        """The session's next multi that `picks` is applied, and then the session expires before the
        answer reaches the client, which gets KeeperUnavailableError with outcome_unknown: the
        case zookeeper.py reports when a session expires after a write went out (a commit that is
        in Keeper though its writer cannot tell). Armed until it fires or keep_answers()."""
        with self.lock:
            self._lose_answer[session_id] = picks

    def keep_answers(self) -> None:
        with self.lock:
            self._lose_answer.clear()

    def _remove(self, path: str) -> None:
        del self.nodes[path]
        self.nodes[parent_of(path)].children.discard(path.rsplit("/", 1)[1])


class MemoryKeeper(Keeper):
    def __init__(self, ensemble: MemoryEnsemble, session_id: int):
        super().__init__()
        self.ensemble, self._sid = ensemble, session_id

    @property
    def session_id(self) -> int:
        return self._sid

    @property
    def expired(self) -> bool:
        return self._sid not in self.ensemble.live_sessions

    def _live(self) -> None:
        if self._sid not in self.ensemble.live_sessions:
            raise SessionExpiredError(f"session {self._sid} expired")

    def _node(self, nodes: dict[str, _Node], path: str) -> _Node:
        check_path(path)
        node = nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node

    @staticmethod
    def _stat(node: _Node) -> Stat:
        return Stat(node.version, node.ephemeral_owner, len(node.children), node.ctime)

    # Each primitive works on a given `nodes` dict so that multi can apply ops to a copy and
    # swap it in only when every op succeeded.
    def _create(self, nodes, path, value, ephemeral, sequential, makepath=False) -> str:
        check_path(path, sequential)
        if path == "/":
            raise NodeExistsError(path)
        parent = parent_of(path)
        if parent not in nodes:
            if not makepath:
                raise NoNodeError(f"parent of {path} does not exist")
            self._create(nodes, parent, b"", False, False, makepath=True)
        pnode = _writable(nodes, parent)
        if pnode.ephemeral_owner:
            raise KeeperError(f"ephemeral node {parent} cannot have children")
        if sequential:
            path = f"{path}{pnode.next_seq:010d}"
        if path in nodes:
            raise NodeExistsError(path)
        # ZooKeeper numbers a sequential child by the parent's count of child creates of any kind.
        pnode.next_seq += 1
        nodes[path] = _Node(value=bytes(value), ephemeral_owner=self._sid if ephemeral else 0,
                            ctime=self.ensemble.ctime())
        pnode.children.add(path.rsplit("/", 1)[1])
        return path

    def _set(self, nodes, path, value, version) -> Stat:
        self._node(nodes, path)
        node = _writable(nodes, path)
        if version != -1 and node.version != version:
            raise BadVersionError(f"{path}: version {node.version}, expected {version}")
        node.value, node.version = bytes(value), node.version + 1
        return self._stat(node)

    def _delete(self, nodes, path, version) -> None:
        node = self._node(nodes, path)
        if path == "/":
            raise KeeperError("cannot delete the root")
        if version != -1 and node.version != version:
            raise BadVersionError(f"{path}: version {node.version}, expected {version}")
        if node.children:
            raise NotEmptyError(path)
        del nodes[path]
        _writable(nodes, parent_of(path)).children.discard(path.rsplit("/", 1)[1])

    def _check(self, nodes, path, version) -> None:
        node = self._node(nodes, path)
        if node.version != version:
            raise BadVersionError(f"{path}: version {node.version}, expected {version}")

    def create(self, path, value=b"", *, ephemeral=False, sequential=False, makepath=False) -> str:
        self.ops["create"] += 1
        with self.ensemble.lock:
            self._live()
            return self._create(self.ensemble.nodes, path, value, ephemeral, sequential, makepath)

    def get(self, path):
        self.ops["get"] += 1
        with self.ensemble.lock:
            self._live()
            node = self._node(self.ensemble.nodes, path)
            return node.value, self._stat(node)

    def set(self, path, value, version=-1):
        self.ops["set"] += 1
        with self.ensemble.lock:
            self._live()
            return self._set(self.ensemble.nodes, path, value, version)

    def delete(self, path, version=-1, *, recursive=False):
        self.ops["delete"] += 1
        with self.ensemble.lock:
            self._live()
            if recursive:
                node = self._node(self.ensemble.nodes, path)
                for child in sorted(node.children):
                    self.delete(f"{path.rstrip('/')}/{child}", recursive=True)
            self._delete(self.ensemble.nodes, path, version)

    def exists(self, path):
        self.ops["exists"] += 1
        with self.ensemble.lock:
            self._live()
            check_path(path)
            node = self.ensemble.nodes.get(path)
            return self._stat(node) if node else None

    def get_children(self, path):
        self.ops["get_children"] += 1
        with self.ensemble.lock:
            self._live()
            return sorted(self._node(self.ensemble.nodes, path).children)

    def multi(self, ops: list[Op]):
        self.ops["multi"] += 1
        self.ops["multi_ops"] += len(ops)  # the entries a multi writes or checks, for benchmarks
        with self.ensemble.lock:
            self._live()
            trial = _Trial(self.ensemble.nodes)
            results: list = []
            for i, op in enumerate(ops):
                try:
                    if isinstance(op, Create):
                        results.append(self._create(trial, op.path, op.value, op.ephemeral, op.sequential))
                    elif isinstance(op, SetData):
                        results.append(self._set(trial, op.path, op.value, op.version))
                    elif isinstance(op, Delete):
                        results.append(self._delete(trial, op.path, op.version))
                    elif isinstance(op, Check):
                        results.append(self._check(trial, op.path, op.version))
                    else:
                        raise TypeError(f"not a multi op: {op!r}")
                except KeeperError as e:
                    raise MultiError(i, e) from e
            self.ensemble.nodes = dict(trial)
            picks = self.ensemble._lose_answer.get(self._sid)
            if picks is not None and picks(ops):
                del self.ensemble._lose_answer[self._sid]
                self.ensemble.expire(self._sid)
                raise KeeperUnavailableError(f"session {self._sid} expired after a multi went out: its outcome "
                                             f"is unknown", outcome_unknown=True)
            return results

    def close(self) -> None:
        self.ensemble.expire(self._sid)
