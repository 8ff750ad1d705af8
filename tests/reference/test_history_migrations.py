"""The history's `migrations` table (reference/history.py): at each snapshot, every partition's
migration as its znode says (state, source, target), so a checker can tell who may hold the
partition at that snapshot (the spec's Leaver until CLEANUP), not only at the end."""

import pyarrow.parquet as pq

from reference.cluster import Cluster
from reference.keeper import MemoryEnsemble
from reference.migration import coordinator_cancel


def _rows(c: Cluster) -> list[tuple]:
    """(partition_id, state, src, dst) of the migrations rows of the last snapshot."""
    c.snapshot()
    return [(m["partition_id"], m["state"], m["src"], m["dst"]) for m in c.history.tables["migrations"]
            if m["snapshot_step"] == c.step]


def test_each_snapshot_records_each_migrations_state(tmp_path):
    c = Cluster(MemoryEnsemble().connect, tmp_path / "data", replicas=("r1", "r2", "r3"))
    try:
        c.insert([{"date": "2024-01-15", "user_id": 5, "row_id": 1, "event": "view"}], "b1")
        c.settle()
        assert _rows(c) == []   # no migration yet: the spec's "none" is no row
        p = c.admin.get_children(c.layout.assignments)[0]
        owners = c.replicas["r1"].replica_refresh_cache(p).owners
        dst = next(r for r in sorted(c.replicas) if r not in owners)
        src = c.reassign(p, dst)["src"]
        assert _rows(c) == [(p, "clone", src, dst)]
        coordinator_cancel(c.admin, c.layout, p, target=c.replicas[dst])
        assert _rows(c) == [(p, "cancelling", src, dst)]
        c.settle()
        assert _rows(c) == [(p, "cancelled", src, dst)]
        c.reassign(p, dst, src)
        c.settle()
        assert _rows(c) == [(p, "done", src, dst)]
        # written with the other tables, one row per snapshot that had the migration
        paths = c.write_history(tmp_path / "history")
        written = pq.read_table(paths["migrations"]).to_pylist()
        assert [m["state"] for m in written] == ["clone", "cancelling", "cancelled", "done", "done"]
        assert all(m["partition_id"] == p and m["dst"] == dst for m in written)
    finally:
        c.close()
