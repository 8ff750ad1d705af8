"""Creating a table's znodes and registering replicas (CREATE TABLE on each replica)."""

from __future__ import annotations

import json

from .keeper import Keeper, NodeExistsError
from .layout import Layout


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


def register_replica(keeper: Keeper, layout: Layout, replica: str) -> None:
    """replicas/{r}/ with log_pointer, queue, parts, and the ephemeral is_active of this session."""
    keeper.ensure_path(layout.replica(replica))
    if keeper.exists(layout.log_pointer(replica)) is None:
        keeper.create(layout.log_pointer(replica), b"0")
    keeper.ensure_path(layout.queue(replica))
    keeper.ensure_path(layout.parts(replica))
    try:
        keeper.create(layout.is_active(replica), b"", ephemeral=True)
    except NodeExistsError:
        raise RegistrationError(f"replica {replica!r} is already active in another session") from None
