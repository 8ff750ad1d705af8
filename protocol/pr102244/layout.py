"""The znodes the PR adds under the table's `/selective` subtree (PR102244.md M2, M7), beside the
base layout's: the counts, one node per replica, and the migration nodes named by uuid. The
assignment node keeps the base layout's path (`selective/assignments/{partition_id}`); only its
value differs (assignment.py)."""

from __future__ import annotations

from protocol.layout import Layout


def counts_root(layout: Layout) -> str:
    return f"{layout.root}/selective/counts"


def counts(layout: Layout, replica: str) -> str:
    """The replica's partition count: how many assignments list it (M2)."""
    layout.replica(replica)  # the same check of the name
    return f"{counts_root(layout)}/{replica}"


def migration(layout: Layout, mig_id: str) -> str:
    """`/migrations/<uuid>`: the migration's metadata (M7)."""
    if not mig_id or "/" in mig_id:
        raise ValueError(f"malformed migration id {mig_id!r}")
    return f"{layout.migrations}/{mig_id}"


def clone_complete(layout: Layout, mig_id: str) -> str:
    """Created by the target when it has the snapshot's parts (M8)."""
    return f"{migration(layout, mig_id)}/clone_complete"
