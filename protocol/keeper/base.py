"""The Keeper interface the reference implementation is written against.

Two backends implement it with the same semantics: `MemoryKeeper` (fast, deterministic, for
model-sized runs) and `ZooKeeperKeeper` (real ZooKeeper through kazoo). Errors are this
module's own, so protocol code never imports kazoo: a CAS is `set(path, value, version=v)`
that raises `BadVersionError`, a CAS-create is `create` that raises `NodeExistsError`.
"""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass


class KeeperError(Exception):
    """Base of every error a Keeper operation can raise."""


class NodeExistsError(KeeperError):
    """create() of a path that exists (ZNODEEXISTS)."""


class NoNodeError(KeeperError):
    """The path, or the parent of a path being created, does not exist (ZNONODE)."""


class BadVersionError(KeeperError):
    """A versioned set/delete/check found another version (ZBADVERSION): the CAS lost."""


class NotEmptyError(KeeperError):
    """delete() of a node that has children (ZNOTEMPTY)."""


class NoAuthError(KeeperError):
    """The node's ACL refuses this session the request (ZNOAUTH): other credentials own it."""


class SessionExpiredError(KeeperError):
    """The session is gone: its ephemeral nodes were deleted and it can do nothing more."""


class KeeperUnavailableError(KeeperError):
    """No Keeper to talk to: the ensemble did not answer within the keeper's retry deadline, or
    the session expired and has not been re-established yet. A replica in this state is
    read-only, as a ClickHouse replica without ZooKeeper is (TABLE_IS_READ_ONLY): it refuses
    writes with this error and comes back by itself once Keeper does.

    `outcome_unknown` is True when a write may have been applied before the connection went and
    could not be read back: the caller must treat it as possibly done (an INSERT's status is
    "unknown"; a retry with the same block id is deduplicated)."""

    def __init__(self, message: str, outcome_unknown: bool = False):
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class MultiError(KeeperError):
    """An atomic multi failed at op `index`, with `cause`; nothing in it was applied."""

    def __init__(self, index: int, cause: KeeperError):
        super().__init__(f"multi op #{index} failed: {type(cause).__name__}: {cause}")
        self.index, self.cause = index, cause


@dataclass(frozen=True)
class Stat:
    version: int          # data version: 0 at create, +1 per set
    ephemeral_owner: int  # session id of the owner, 0 for persistent nodes
    num_children: int
    ctime: int = 0        # creation time, ms (the dedup window orders blocks/ by it)


# Operations of an atomic multi (ZooKeeper's multi / kazoo's transaction).
@dataclass(frozen=True)
class Create:
    path: str
    value: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True)
class SetData:
    path: str
    value: bytes
    version: int = -1


@dataclass(frozen=True)
class Delete:
    path: str
    version: int = -1


@dataclass(frozen=True)
class Check:
    path: str
    version: int


Op = Create | SetData | Delete | Check


def parent_of(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def check_path(path: str, sequential: bool = False) -> None:
    """Absolute, no double slash, no trailing slash, except for a sequential create whose node
    name is the number alone (ClickHouse's mutations/NNNNNNNNNN are made so)."""
    body = path[:-1] if sequential and path.endswith("/") else path
    if not body.startswith("/") or (len(body) > 1 and body.endswith("/")) or "//" in body:
        raise ValueError(f"malformed znode path {path!r}: absolute, no trailing or double slash")


def parse_auth(auth: str) -> tuple[str, str]:
    """"user:password" (the digest scheme's form, as ClickHouse's <identity>); ValueError otherwise,
    whose message never repeats the value: it is a secret."""
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise ValueError("wants USER:PASSWORD (the digest scheme) on its first line")
    return user, password


class Keeper(ABC):
    """One client session on a Keeper ensemble. `ops` counts requests by kind (for benchmarks).

    `deadline`: the monotonic time by which the caller wants an answer (an INSERT's own deadline,
    `answer_by`), or None. A backend that waits for Keeper (ZooKeeperKeeper) retries a call only
    until the sooner of it and its own retry deadline, then raises KeeperUnavailableError; one that
    never waits (MemoryKeeper) has nothing to cut short. The deadline is the calling thread's: in
    the live runtime a replica's session serves its own background thread and the clients' INSERTs
    it receives at once (as a ClickHouse server's one ZooKeeper session does), and one INSERT's
    deadline must not cut short another thread's calls."""

    def __init__(self) -> None:
        self.ops: Counter[str] = Counter()
        self._local = threading.local()

    @property
    def deadline(self) -> float | None:
        return getattr(self._local, "deadline", None)

    @deadline.setter
    def deadline(self, value: float | None) -> None:
        self._local.deadline = value

    @contextlib.contextmanager
    def answer_by(self, deadline: float | None):
        """Calls made inside answer by `deadline` (monotonic seconds) at the latest; a deadline
        already set by an outer caller is kept if it is sooner."""
        before = self.deadline
        if deadline is not None:
            self.deadline = deadline if before is None else min(before, deadline)
        try:
            yield self
        finally:
            self.deadline = before

    @abstractmethod
    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequential: bool = False,
               makepath: bool = False) -> str:
        """Create a node; returns its path (with the sequence suffix for sequential nodes)."""

    @abstractmethod
    def get(self, path: str) -> tuple[bytes, Stat]: ...

    def get_many(self, paths: list[str]) -> list[tuple[bytes, Stat]]:
        """`get` of each path, in order (NoNodeError if one is missing). A backend that waits for
        answers sends them all before it waits (ZooKeeperKeeper), as ClickHouse's
        pullLogsToQueue reads the new log entries with one batch of asynchronous gets."""
        return [self.get(p) for p in paths]

    @abstractmethod
    def set(self, path: str, value: bytes, version: int = -1) -> Stat:
        """Write data; with version >= 0 only if the node has that version (CAS)."""

    @abstractmethod
    def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None: ...

    @abstractmethod
    def exists(self, path: str) -> Stat | None: ...

    @abstractmethod
    def get_children(self, path: str) -> list[str]:
        """Child names, sorted (ZooKeeper returns them unordered; sorting makes runs replayable)."""

    @abstractmethod
    def multi(self, ops: list[Op]) -> list[str | Stat | None]:
        """Apply all ops atomically or none; raises MultiError naming the op that failed."""

    @property
    @abstractmethod
    def session_id(self) -> int: ...

    # ACLs: only a backend with credentials has them (ZooKeeperKeeper's `auth`).
    identity: tuple[str, str] | None = None   # (scheme, id) this session writes as, None: no credentials

    def get_acls(self, path: str) -> list[tuple[str, str, int]]:
        """(scheme, id, perms) of each entry of the node's ACL (ZooKeeper's Perms bits)."""
        raise NotImplementedError(f"{type(self).__name__} has no ACLs")

    def set_acls(self, path: str, acls: list[tuple[str, str, int]]) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no ACLs")

    @property
    def expired(self) -> bool:
        """The session is known to be gone (its ephemeral nodes with it); it can do nothing more.
        A session that is only disconnected is not expired: its calls retry."""
        return False

    @abstractmethod
    def close(self) -> None:
        """End the session normally (its ephemeral nodes go)."""

    def ensure_path(self, path: str) -> None:
        """Create path and its missing ancestors as empty persistent nodes."""
        check_path(path)
        if self.exists(path) is None:
            try:
                self.create(path, makepath=True)
            except NodeExistsError:
                pass  # created concurrently: same outcome
