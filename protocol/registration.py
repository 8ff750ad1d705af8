"""Creating a table's znodes and registering replicas (CREATE TABLE on each replica)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from protocol.keeper import BadVersionError, Keeper, NodeExistsError, NoNodeError
from protocol.layout import Layout


class RegistrationError(RuntimeError):
    """The table or replica cannot be registered as asked; nothing was changed."""


def create_table_znodes(keeper: Keeper, layout: Layout, replication_factor: int) -> None:
    """The base protocol's nodes plus selective/; an existing table must agree on replication_factor."""
    if replication_factor < 1:
        raise RegistrationError(f"replication_factor must be >= 1, not {replication_factor}")
    config = json.dumps({"replication_factor": replication_factor}).encode()
    try:
        data, _ = keeper.get(layout.config)
    except Exception:
        data = None
    if data is not None:
        existing = json.loads(data).get("replication_factor")
        if existing != replication_factor:
            raise RegistrationError(f"{layout.root} exists with replication_factor {existing}, not {replication_factor}")
        return
    for path in (layout.log, layout.replicas, layout.blocks, layout.all_block_numbers, layout.mutations,
                 layout.assignments, layout.migrations):
        keeper.ensure_path(path)
    if keeper.exists(layout.columns) is None:
        try:
            keeper.create(layout.columns, b"columns format version: 1\n")
        except NodeExistsError:
            pass
    try:
        keeper.create(layout.config, config)
    except NodeExistsError:
        create_table_znodes(keeper, layout, replication_factor)  # a concurrent CREATE: check it agrees


def declare_replicas(keeper: Keeper, layout: Layout, replicas) -> None:
    """Replicas created together with the table (CREATE TABLE on each before any data): none
    joins a table with data, so none starts lost; register_replica keeps what this writes."""
    for r in replicas:
        if keeper.exists(layout.is_lost(r)) is None:
            keeper.create(layout.is_lost(r), b"0", makepath=True)


def register_replica(keeper: Keeper, layout: Layout, replica: str, identifier: bytes = b"") -> None:
    """replicas/{r}/ with log_pointer, is_lost, queue, parts, host, and the ephemeral is_active of
    this session. A replica that joins a table other replicas already have starts lost, as
    ClickHouse's createReplica makes it: it clones one of them (the log may be trimmed) instead of
    replaying the log from its start."""
    others = [r for r in keeper.get_children(layout.replicas) if r != replica]
    keeper.ensure_path(layout.replica(replica))
    if keeper.exists(layout.log_pointer(replica)) is None:
        keeper.create(layout.log_pointer(replica), b"0")
    if keeper.exists(layout.is_lost(replica)) is None:
        keeper.create(layout.is_lost(replica), b"1" if others else b"0")
    try:
        keeper.set(layout.host(replica), b"reference")
    except NoNodeError:
        keeper.create(layout.host(replica), b"reference")
    keeper.ensure_path(layout.queue(replica))
    keeper.ensure_path(layout.parts(replica))
    # is_active holds `identifier`, one per running replica (ClickHouse's active_node_identifier):
    # a node with our own identifier is ours, left by a session this replica gave up on (it
    # expired for the client but not yet on the server). As ClickHouse's restarting thread does,
    # it is removed and created again in the new session; any other value is another replica.
    for _ in range(2):
        try:
            keeper.create(layout.is_active(replica), identifier, ephemeral=True)
            return
        except NodeExistsError:
            try:
                value, stat = keeper.get(layout.is_active(replica))
            except NoNodeError:
                continue
            if not identifier or value != identifier:
                break
            try:
                keeper.delete(layout.is_active(replica), stat.version)
            except (NoNodeError, BadVersionError):
                pass
    raise RegistrationError(f"replica {replica!r} is already active in another session")


class RootInUse(RegistrationError):
    """Another run holds the table's root, or replicas are live on it (exit 3: the environment)."""


class LeftoverRoot(RegistrationError):
    """The root holds an earlier run's table and no run is live on it (exit 2: choose --fresh or
    another --root)."""


RUN_LOCK = "reference_run"   # under the root: the ephemeral node of the run that holds it

# ZooKeeper's Perms bits: all but READ change the tree (create or delete a child, write the
# value, change the ACL).
PERM_READ, PERM_ALL = 1, 31


class UnsafeRootAcl(RegistrationError):
    """With credentials, the table's root lets someone else change it (exit 2: fix its ACL, or
    let the run fix it)."""


def check_root_acl(keeper: Keeper, layout: Layout, fix: bool = False) -> bool:
    """With credentials (keeper.identity), the root must let no one but this identity change it:
    a root another client may create under or delete from lets it delete the table's empty nodes
    (columns, mutations) and squat the run's lock, though every node the run creates carries the
    identity's ACL. Only the root can be that door: the run refuses a root that holds an earlier
    table unless --fresh clears it (claim_root), so every node under it is the run's own, and no
    ancestor can take the table away (ZooKeeper deletes no node that has children). A root that
    does not exist yet is created with the identity's ACL. Refused (UnsafeRootAcl, naming the
    root and whom it lets in) before anything changes, unless `fix`: then its ACL becomes the
    identity's alone. Returns whether it was fixed."""
    if keeper.identity is None:
        return False
    try:
        acls = keeper.get_acls(layout.root)
    except NoNodeError:
        return False
    others = [f"{scheme}:{ident}" for scheme, ident, perms in acls
              if (scheme, ident) != keeper.identity and perms & (PERM_ALL & ~PERM_READ)]
    if not others:
        return False
    if not fix:
        raise UnsafeRootAcl(f"{layout.root} lets {', '.join(others)} change it (its ACL): another client could "
                            f"delete the table's nodes under it; --fix-acls gives it to these credentials alone")
    keeper.set_acls(layout.root, [(*keeper.identity, PERM_ALL)])
    return True


def _own_is_active(keeper: Keeper, layout: Layout, replica: str, attach: Attach) -> bool:
    try:
        return replica in attach.own and keeper.get(layout.is_active(replica))[0] == attach.own[replica]
    except NoNodeError:
        return True   # gone since it was listed: not live


def live_replicas(keeper: Keeper, layout: Layout) -> list[str]:
    try:
        names = keeper.get_children(layout.replicas)
    except NoNodeError:
        return []
    return [r for r in names if keeper.exists(layout.is_active(r)) is not None]


class NothingToAttach(RegistrationError):
    """--attach to a root that holds no table (exit 2)."""


@dataclass(frozen=True)
class Attach:
    """A run that carries on the table a killed run left (`reference run --attach`): the
    identifiers its replicas keep on disk (PartStore.server_uuid), by which an is_active the
    killed process left is known for its own and not another run's, and how long to wait for
    the killed process's session to expire and take its `reference_run` node with it."""
    own: dict[str, bytes]
    wait: float


def claim_root(keeper: Keeper, layout: Layout, holder: str, fresh: bool = False, where: str = "",
               attach: Attach | None = None) -> None:
    """One root, one table: hold `layout.root` for this run with an ephemeral `reference_run`
    node of `keeper`'s session (held until that session ends). Refused (RootInUse) when another
    run holds it or replicas are live on it, naming the root and the live replicas; refused
    (LeftoverRoot) when an earlier run's table is there, unless `fresh`, which clears it first.
    With `attach` the earlier table is the point (NothingToAttach if there is none), replicas
    live with the run's own identifiers are the killed process's, and its `reference_run` node
    is waited for until its session expires (RootInUse if it outlives `attach.wait`).
    Nothing is changed when it is refused."""
    lock = f"{layout.root}/{RUN_LOCK}"
    name = f"{layout.root}" + (f" on {where}" if where else "")
    if attach is not None and keeper.exists(layout.config) is None:
        raise NothingToAttach(f"{name} holds no table to attach to (no znode {layout.config})")

    def others_live() -> list[str]:
        return [r for r in live_replicas(keeper, layout) if attach is None or not _own_is_active(keeper, layout, r, attach)]
    live = others_live()
    if live:
        raise RootInUse(f"{name} is in use: live replicas {', '.join(live)} (stop that run or choose another --root)")
    deadline = time.monotonic() + (attach.wait if attach else 0)
    while True:
        try:
            keeper.create(lock, holder.encode(), ephemeral=True, makepath=True)
            break
        except NodeExistsError:
            if time.monotonic() < deadline:   # the killed run's session has yet to expire
                time.sleep(0.2)
                continue
            try:
                other = keeper.get(lock)[0].decode(errors="replace")
            except NoNodeError:
                other = "a run that just ended"
            live = live_replicas(keeper, layout)
            waited = f" (waited {attach.wait:g} s for it to expire)" if attach else ""
            raise RootInUse(f"{name} is in use by {other}{waited}: live replicas {', '.join(live) or 'none yet'} "
                            f"(stop that run or choose another --root)") from None
    live = others_live()   # a replica may have registered between the two reads
    # An attach comes for the earlier table: it is no leftover.
    leftover = [] if attach else [c for c in keeper.get_children(layout.root) if c != RUN_LOCK]
    if live or (leftover and not fresh):
        keeper.delete(lock)
        if live:
            raise RootInUse(f"{name} is in use: live replicas {', '.join(live)} (stop that run or choose another --root)")
        raise LeftoverRoot(f"{name} holds a table left by an earlier run ({', '.join(sorted(leftover))}): "
                           f"--fresh clears it, or choose another --root")
    for c in leftover:   # --fresh, and no replica is live: the old table goes
        keeper.delete(f"{layout.root}/{c}", recursive=True)
