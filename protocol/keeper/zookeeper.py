"""The Keeper interface on real ZooKeeper through kazoo, surviving ZooKeeper faults.

kazoo's exceptions are mapped to the interface's, so protocol code behaves the same on both
backends. A failing kazoo transaction returns a list of exceptions instead of raising; it is
turned into a MultiError naming the first op that failed (the rest are RolledBack).

Faults, as a ClickHouse replica meets them:

- ConnectionLoss and OperationTimeout (a leader change, a server killed, a network blip) are
  retried by kazoo's own `KazooRetry`, with back-off and a bounded total time (`retry_deadline`).
  A request is sent only on a live connection (`client.connected`), and its answer is awaited
  at most until that deadline, so no call blocks for longer while the ensemble is away. When the
  deadline passes the call raises `KeeperUnavailableError` (`outcome_unknown` when a write went
  out and could not be read back).
- A retried write must not be applied twice. Reads, unversioned sets and checks are idempotent
  and are simply sent again. A write whose answer was lost (sent, then ConnectionLoss or
  OperationTimeout) is resolved before it is sent again by reading back what it would have
  written, as ClickHouse resolves its block and part nodes after ZCONNECTIONLOSS
  (`_read_back`, one witness per request; a multi is atomic, so one witness decides all of it):
    * a plain create: the node exists with our value (an ephemeral one: owned by this session);
    * a versioned set: the node has our value at the version we set plus one (an unversioned
      set is sent again; its NoNode is a refusal even then: a set never creates or removes one);
    * a sequential create (log-, queue-, block- locks, mutations/): cannot be retried blindly,
      that would make a second entry. The parent's newest children with the prefix are read,
      newest first, for one with exactly our value (an ephemeral one: owned by this session);
      log and queue entries carry their source replica, create time and part name, block
      locks their holder, so the value is unique. Found: applied, and its path is the result;
    * a multi: its first non-sequential create, else its first versioned set, else its
      sequential creates, as above; the sequential creates' paths are then found by value too.
      A multi of only deletes, checks and unversioned sets is sent again (the checks decide);
    * a delete that finds nothing on its retry is done (by us or by another client: the node is
      gone either way; ClickHouse's tryRemove after a connection loss reads it the same way).
  A witness is conclusive when found. When it is not found and the write sent again then
  conflicts (BadVersion, NodeExists, NoNode), the conflict may be the lost write itself, moved
  on since by another writer (a versioned set overwritten, a created node rewritten: the live
  runtime's threads write the same nodes between the loss and the read-back). The outcome is
  then unknown (`KeeperUnavailableError`, `outcome_unknown`), not a refusal.
  The read-back goes through the same session's request queue after the lost request, so a
  request still queued in kazoo when its answer timed out is applied (or not) before it is read.
  What is not covered: a request the old server forwarded to the leader and the leader commits
  after the read-back (ZooKeeper does not promise otherwise; ClickHouse has the same window).
- An expired session is not retried: its ephemeral nodes (is_active, block-number locks) are
  gone and the step that used them must not continue in a new session. Every later call raises
  SessionExpiredError; the replica re-establishes itself with a new session
  (`Cluster.reestablish`: is_active re-created, map reloaded before it serves, F9).
"""

from __future__ import annotations

import time

from kazoo.client import KazooClient, _prefix_root
from kazoo.exceptions import (BadVersionError as KzBadVersion, ConnectionLoss, NoAuthError as KzNoAuth,
                              NodeExistsError as KzNodeExists, NoNodeError as KzNoNode, NotEmptyError as KzNotEmpty,
                              OperationTimeoutError, RolledBackError, RuntimeInconsistency,
                              SessionExpiredError as KzSessionExpired)
from kazoo.protocol.serialization import Create as KzCreate
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.retry import KazooRetry, RetryFailedError
from kazoo.security import ACL as KzACL, OPEN_ACL_UNSAFE, Id as KzId, make_digest_acl

from protocol.keeper.base import (BadVersionError, Check, Create, Delete, Keeper, KeeperError, KeeperUnavailableError,
                                  MultiError, NoAuthError, NodeExistsError, NoNodeError, NotEmptyError, Op,
                                  SessionExpiredError, SetData, Stat, check_path, parent_of, parse_auth)

_ERRORS = {KzNodeExists: NodeExistsError, KzNoNode: NoNodeError, KzBadVersion: BadVersionError,
           KzNotEmpty: NotEmptyError, KzSessionExpired: SessionExpiredError, KzNoAuth: NoAuthError}


def _mapped(e: Exception) -> KeeperError:
    for kz, ours in _ERRORS.items():
        if isinstance(e, kz):
            return ours(str(e) or type(e).__name__)
    return KeeperError(f"{type(e).__name__}: {e}")


def _witnessed(ops: list[Op]) -> bool:
    """Whether _read_back has a witness for the multi (a create, or a versioned set)."""
    return any(isinstance(o, Create) or isinstance(o, SetData) and o.version >= 0 for o in ops)


def _unknown_conflict(kind: str, e: Exception) -> KeeperUnavailableError:
    """A write sent again after its answer was lost, and no witness found, conflicted: the conflict
    may be with the lost write itself (see the module docstring)."""
    return KeeperUnavailableError(f"a {kind} whose answer was lost was sent again and conflicted "
                                  f"({type(e).__name__}): its first sending may have been applied, its outcome is unknown",
                                  outcome_unknown=True)


def _stat(zs: ZnodeStat) -> Stat:
    return Stat(zs.version, zs.ephemeralOwner, zs.numChildren, zs.ctime)


class _NotSent(ConnectionLoss):
    """No live connection: the request was not sent (KazooRetry retries it as a ConnectionLoss)."""


# How far back (ms of ctime) a sequential create's read-back looks: a lost request is answered
# within the retry deadline, so an older node cannot be it.
_READ_BACK_WINDOW_MS = 120_000


class ZooKeeperKeeper(Keeper):
    """A session on a ZooKeeper ensemble (`hosts` may carry a chroot: "127.0.0.1:2181/ns").

    `retry_deadline`: the longest a call retries ConnectionLoss/OperationTimeout before it raises
    KeeperUnavailableError (a leader election on a loopback ensemble takes about a second).

    `auth`: "user:password", as ClickHouse's `<zookeeper><identity>`: the session authenticates
    with the digest scheme and every znode it creates (plain, in a multi, made as a path's
    parent) carries one ACL, all permissions for that identity only (ClickHouse's
    CREATOR_ALL_ACL), so a client without the credentials can neither read nor change it."""

    def __init__(self, hosts: str, timeout: float = 10.0, retry_deadline: float = 5.0, auth: str | None = None):
        super().__init__()
        self.hosts, self.retry_deadline = hosts, retry_deadline
        acl = None
        if auth is not None:
            user, password = parse_auth(auth)
            acl = [make_digest_acl(user, password, all=True)]
            self.identity = (acl[0].id.scheme, acl[0].id.id)
        # Reconnecting never gives up and waits at most 1 s between tries (kazoo's default backs
        # off to an hour): a session outlives an outage shorter than its timeout only if the
        # client is back within that time. auth_data is sent again on every reconnection.
        self.client = KazooClient(hosts=hosts, timeout=timeout, default_acl=acl,
                                  auth_data=[("digest", auth)] if auth is not None else None,
                                  connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0))
        try:
            self.client.start(timeout=timeout + 5)
        except self.client.handler.timeout_exception as e:
            self.client.stop()
            self.client.close()
            raise KeeperUnavailableError(f"no ZooKeeper session with {hosts} within {timeout + 5:.0f} s") from e
        self._expired = False
        self.client.add_listener(self._on_state)
        # kazoo's retry machinery: ConnectionLoss and OperationTimeout only (ignore_expire=False:
        # an expired session is not retried), exponential back-off capped at 1 s, jitter, and a
        # total deadline per call. copy() per call: a KazooRetry keeps its attempt count.
        self._retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, max_jitter=0.3,
                                 ignore_expire=False, deadline=retry_deadline)

    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.LOST:
            self._expired = True

    @property
    def expired(self) -> bool:
        return self._expired

    @property
    def session_id(self) -> int:
        return self.client.client_id[0] if self.client.client_id else 0

    def get_acls(self, path: str) -> list[tuple[str, str, int]]:
        check_path(path)
        acls, _ = self._call("get_acls", lambda stop, lost: self._send(stop, self.client.get_acls_async, path),
                             write=False)
        return [(a.id.scheme, a.id.id, a.perms) for a in acls]

    def set_acls(self, path: str, acls: list[tuple[str, str, int]]) -> None:
        check_path(path)
        entries = [KzACL(perms, KzId(scheme, ident)) for scheme, ident, perms in acls]
        self._call("set_acls", lambda stop, lost: self._send(stop, self.client.set_acls_async, path, entries))

    # --- one request, and the retry around it --------------------------------------------
    def _send(self, stop: float, async_fn, *args, **kwargs):
        """One attempt: sent only on a live connection, its answer awaited until `stop`."""
        return self._send_all(stop, [lambda: async_fn(*args, **kwargs)])[0]

    def _send_all(self, stop: float, requests):
        """`_send` for several requests (each a call that sends one), all sent before any answer is
        awaited: pipelined on the session's connection, one round trip for the lot."""
        if self._expired:
            raise KzSessionExpired()
        if not self.client.connected:
            raise _NotSent("no connection to ZooKeeper")
        sent = [send() for send in requests]
        try:
            return [a.get(timeout=max(0.05, stop - time.monotonic())) for a in sent]
        except self.client.handler.timeout_exception as e:
            raise OperationTimeoutError("no answer from ZooKeeper within the retry deadline") from e

    def _call(self, kind: str, attempt, write: bool = True):
        """Run `attempt(stop, lost)` under KazooRetry; `lost` says an earlier attempt sent a write
        whose answer never came (the attempt must read back before sending again)."""
        self.ops[kind] += 1
        if self._expired:
            raise SessionExpiredError(f"session of {self.hosts} expired")
        now = time.monotonic()
        budget = self.retry_deadline if self.deadline is None else min(self.retry_deadline, self.deadline - now)
        if budget <= 0:   # the caller's deadline (answer_by) has passed: nothing is sent
            raise KeeperUnavailableError(f"the caller's deadline passed before a {kind} to {self.hosts} was sent")
        stop = now + budget
        lost = [False]

        def once():
            # KazooRetry's own deadline counts from the first failure, so an attempt that waited
            # for its answer until `stop` would buy the call a second budget: past `stop`, no
            # attempt more (the call answers within its budget, the caller's deadline included).
            if time.monotonic() >= stop:
                raise RetryFailedError("retry deadline passed")
            try:
                return attempt(stop, lost[0])
            except _NotSent:
                raise
            except (ConnectionLoss, OperationTimeoutError):
                lost[0] = lost[0] or write
                raise

        retry = self._retry.copy()
        retry.deadline = budget
        try:
            return retry(once)
        except RetryFailedError as e:
            raise KeeperUnavailableError(
                f"ZooKeeper {self.hosts} unavailable: {kind} not done within {budget:.3g} s"
                + (" (the caller's deadline)" if budget < self.retry_deadline else "")
                + (" (a write went out and could not be read back: its outcome is unknown)" if lost[0] else ""),
                outcome_unknown=lost[0]) from e
        except KzSessionExpired as e:
            if lost[0]:   # the session went after a write was sent: nothing can read it back now
                raise KeeperUnavailableError(f"session of {self.hosts} expired after a {kind} went out: its "
                                             f"outcome is unknown", outcome_unknown=True) from e
            raise SessionExpiredError(f"session of {self.hosts} expired") from e
        except (KzNodeExists, KzNoNode, KzBadVersion) as e:
            if lost[0]:   # sent again after a loss the read-back could not witness: maybe our own write
                raise _unknown_conflict(kind, e) from e
            raise _mapped(e) from e
        except (KzNotEmpty, KzNoAuth) as e:
            raise _mapped(e) from e

    # --- resolving a write whose answer was lost ----------------------------------------------
    def _read_back(self, stop: float, ops: list[Op]) -> list | None:
        """The results `ops` would have returned if the lost attempt applied them, or None if it
        did not (see the module docstring for the witness of each kind of request)."""
        sid = self.session_id
        deleted = {o.path for o in ops if isinstance(o, Delete)}
        # A create the same multi deletes ("check not exists": blocks/<id> created and deleted) leaves nothing to read.
        plain = [o for o in ops if isinstance(o, Create) and not o.sequential and o.path not in deleted]
        versioned = [o for o in ops if isinstance(o, SetData) and o.version >= 0]
        sequential = [o for o in ops if isinstance(o, Create) and o.sequential]
        if plain:
            o = plain[0]
            try:
                value, zs = self._send(stop, self.client.get_async, o.path)
            except KzNoNode:
                return None
            if value != bytes(o.value) or (o.ephemeral and zs.ephemeralOwner != sid):
                return None
        elif versioned:
            o = versioned[0]
            try:
                value, zs = self._send(stop, self.client.get_async, o.path)
            except KzNoNode:
                return None
            if value != bytes(o.value) or zs.version != o.version + 1:
                return None
        elif not sequential:
            return None   # deletes, checks, unversioned sets: sending again is the resolution
        found = self._find_sequential(stop, sequential, sid)
        if found is None:
            if plain or versioned:
                raise KeeperError(f"a multi read back as applied, but its sequential nodes were not found: {ops!r}")
            return None
        out: list = []
        for o in ops:
            if isinstance(o, Create):
                out.append(found[id(o)] if o.sequential else o.path)
            elif isinstance(o, SetData):
                out.append(_stat(self._send(stop, self.client.exists_async, o.path)))
            else:
                out.append(None)
        return out

    def _find_sequential(self, stop: float, creates: list[Create], sid: int) -> dict[int, str] | None:
        """The node each sequential create made, by value (newest first), or None if one is missing."""
        found: dict[int, str] = {}
        taken: set[str] = set()
        listings: dict[str, list[str]] = {}
        for o in creates:
            parent, prefix = (o.path[:-1], "") if o.path.endswith("/") else (parent_of(o.path), o.path.rsplit("/", 1)[1])
            if parent not in listings:
                try:
                    names = self._send(stop, self.client.get_children_async, parent)
                except KzNoNode:
                    return None   # no parent: the create was not applied (its multi fails on the parent)
                listings[parent] = sorted((n for n in names if n.startswith(prefix) and n[len(prefix):].isdigit()),
                                          key=lambda n: n[-10:], reverse=True)
            newest = None
            for name in listings[parent]:
                path = f"{parent}/{name}"
                if path in taken or not name.startswith(prefix):
                    continue
                try:
                    value, zs = self._send(stop, self.client.get_async, path)
                except KzNoNode:
                    continue
                newest = newest or zs.ctime
                if zs.ctime < newest - _READ_BACK_WINDOW_MS:
                    break
                if value == bytes(o.value) and (not o.ephemeral or zs.ephemeralOwner == sid):
                    found[id(o)] = path
                    taken.add(path)
                    break
            if id(o) not in found:
                return None
        return found

    # --- the interface -------------------------------------------------------------------
    def create(self, path, value=b"", *, ephemeral=False, sequential=False, makepath=False) -> str:
        check_path(path, sequential)
        op = Create(path, bytes(value), ephemeral, sequential)

        def attempt(stop, lost):
            if lost:
                done = self._read_back(stop, [op])
                if done is not None:
                    return done[0]
            return self._send(stop, self.client.create_async, path, bytes(value), ephemeral=ephemeral,
                              sequence=sequential, makepath=makepath)
        return self._call("create", attempt)

    def get(self, path):
        check_path(path)
        value, zs = self._call("get", lambda stop, lost: self._send(stop, self.client.get_async, path), write=False)
        return value, _stat(zs)

    def get_many(self, paths):
        for path in paths:
            check_path(path)

        def attempt(stop, lost):
            return self._send_all(stop, [lambda path=path: self.client.get_async(path) for path in paths])
        if len(paths) < 2:   # nothing to pipeline: a plain get (and counted as one)
            return [self.get(p) for p in paths]
        return [(value, _stat(zs)) for value, zs in self._call("get_many", attempt, write=False)]

    def set(self, path, value, version=-1):
        check_path(path)
        op = SetData(path, bytes(value), version)

        def attempt(stop, lost):
            if lost and version >= 0:
                done = self._read_back(stop, [op])
                if done is not None:
                    return done[0]
            try:
                return _stat(self._send(stop, self.client.set_async, path, bytes(value), version))
            except KzNoNode as e:
                # An unversioned set neither creates nor removes a node, so a lost first sending
                # cannot be what this conflicts with: the node is not there now, a refusal
                # whatever that sending did (a map_version's first publish creates it on this).
                if version < 0:
                    raise NoNodeError(str(e) or path) from e
                raise
        return self._call("set", attempt)

    def delete(self, path, version=-1, *, recursive=False):
        check_path(path)

        def attempt(stop, lost):
            try:
                if recursive:   # kazoo's recursive delete is synchronous: bounded by the deadline between requests
                    if not self.client.connected:
                        raise _NotSent("no connection to ZooKeeper")
                    return self.client.delete(path, version, recursive=True)
                return self._send(stop, self.client.delete_async, path, version)
            except KzNoNode:
                if lost:
                    return None   # gone: by our lost attempt or by another client, the same end state
                raise
        self._call("delete", attempt)

    def exists(self, path):
        check_path(path)
        zs = self._call("exists", lambda stop, lost: self._send(stop, self.client.exists_async, path), write=False)
        return _stat(zs) if zs else None

    def get_children(self, path):
        check_path(path)
        return sorted(self._call("get_children", lambda stop, lost: self._send(stop, self.client.get_children_async,
                                                                                path), write=False))

    def _transaction(self, ops: list[Op]):
        tx = self.client.transaction()
        for op in ops:
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
        return tx

    def multi(self, ops: list[Op]):
        self.ops["multi_ops"] += len(ops)  # the entries a multi writes or checks, for benchmarks
        for op in ops:
            check_path(op.path, isinstance(op, Create) and op.sequential)
        self._transaction(ops)   # a malformed op is refused before anything is sent

        def attempt(stop, lost):
            if lost:
                done = self._read_back(stop, ops)
                if done is not None:
                    return ("applied", done)
                if _witnessed(ops):   # no witness found: sent again, its conflict may be ours
                    return ("resent", self._send(stop, self._transaction(ops).commit_async))
            return ("sent", self._send(stop, self._transaction(ops).commit_async))
        how, results = self._call("multi", attempt)
        if how == "applied":
            return results
        for i, r in enumerate(results):
            if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency)):
                if how == "resent" and isinstance(r, (KzNodeExists, KzNoNode, KzBadVersion)):
                    raise _unknown_conflict("multi", r)
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
