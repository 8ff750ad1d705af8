"""The history's `migrations` table (history/record.py): at each snapshot, every partition's
migration as its znode says (state, source, target), so a checker can tell who may hold the
partition at that snapshot (the spec's Leaver until CLEANUP), not only at the end."""

import pyarrow.parquet as pq

from protocol.keeper import MemoryEnsemble
from protocol.migration import coordinator_cancel
from reference.cluster import Cluster


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


def test_a_wait_on_a_down_replica_is_measured_between_snapshots_that_show_it():
    """oracle.down_waits: a migration waits on its leaver (once no map is behind: maps_behind is
    an empty list) or, in CLONE, on its coordinator, when that replica is not among the
    snapshot's running replicas (metadata); consecutive snapshots showing the same wait are one
    wait, from the first. DownWaitBoundedProp counts the snapshots past down_timeout + grace."""
    from checkers.oracle import DOWN_WAIT_GRACE, down_waits, down_waits_too_long
    limit = 10 + DOWN_WAIT_GRACE
    steps = [0, 5, 5 + limit, 6 + limit, 7 + limit, 8 + limit]
    up = {s: ["r1", "r2"] for s in steps}
    up[7 + limit] = []   # a snapshot with no metadata rows shows no one down: the wait is broken there
    mig = {"partition_id": "p", "state": "switched", "src": "r3", "dst": "r1", "coordinator": "r3"}
    t = {"run": [{"down_timeout": 10}],
         "metadata": [{"snapshot_step": s, "replica": r} for s in steps for r in up[s]],
         "migrations": [{**mig, "snapshot_step": 0, "maps_behind": ["r2"]},   # waiting on a map, not on r3
                        {**mig, "snapshot_step": 5, "maps_behind": []},
                        {**mig, "snapshot_step": 5 + limit, "maps_behind": []},
                        {**mig, "snapshot_step": 6 + limit, "maps_behind": []},
                        {**mig, "snapshot_step": 7 + limit, "maps_behind": []},
                        {**mig, "snapshot_step": 8 + limit, "maps_behind": []}]}
    assert [(w["snapshot_step"], w["since"]) for w in down_waits(t)] == [
        (5, 5), (5 + limit, 5), (6 + limit, 5), (8 + limit, 8 + limit)]
    assert len(down_waits_too_long(t)) == 1 and f"at step {6 + limit}," in down_waits_too_long(t)[0]
    # F23's cost: a row of p acknowledged by then that no running replica holds at the overdue
    # snapshot may be the down source's only copy: the wait is excused (not once a drop removed
    # it, not when a running replica holds it, not for a row acknowledged after the snapshot)
    t["inserts"] = [{"partition_id": "p", "row_id": 7, "status": "ok", "ack_step": 3}]
    assert down_waits_too_long(t) == []
    t["drops"] = [{"partition_id": "p", "row_id": 7, "drop_step": 4}]
    assert len(down_waits_too_long(t)) == 1
    t["drops"] = []
    t["parts"] = [{"snapshot_step": 6 + limit, "replica": "r1", "partition_id": "p", "row_id": 7}]
    assert len(down_waits_too_long(t)) == 1
    t["parts"], t["inserts"][0]["ack_step"] = [], 7 + limit
    assert len(down_waits_too_long(t)) == 1
    t["inserts"] = []
    t["migrations"][1]["maps_behind"] = None   # not recorded: not a wait on the leaver
    assert down_waits_too_long(t) == []
    t["migrations"] = [{**m, "state": "clone", "maps_behind": None} for m in t["migrations"]]   # on the coordinator
    assert len(down_waits_too_long(t)) == 2
    t["run"] = [{"down_timeout": None}]   # infinite: not judged
    assert down_waits_too_long(t) == []
