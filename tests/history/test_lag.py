"""The lag allowance audited (issue 37): a query that reads without syncing is not owed a row
still on its way to its reader (history/lag.py, the spec's InFlightTo), but a row that no replica
will ever send (its only copy lost for good) is not on its way: the query that misses it is
flagged, and so is every owner left without it."""

from protocol.assignment import read_assignment
from protocol.keeper import MemoryEnsemble
from reference.cluster import Cluster

ROW = {"row_id": 1, "date": "2024-01-15", "user_id": 1, "event": "e"}


def _written_and_queued(tmp_path):
    """A row acknowledged on one owner, its GET_PART pulled into the other owner's queue, not
    fetched: (cluster, partition, writer, other owner)."""
    c = Cluster(MemoryEnsemble().connect, tmp_path / "data", replicas=("r1", "r2", "r3"), seed=0)
    (p, status), = c.insert([ROW], "b1").items()
    assert status == "ok"
    owners = read_assignment(c.admin, c.layout, p).owners
    writer = next(r for r in owners if c.stores[r].names(p))
    other = next(r for r in owners if r != writer)
    c.replicas[other].replica_pull_logs()
    assert [e.type for _, e in c.replicas[other].queue()] == ["GET_PART"] and not c.stores[other].names(p)
    return c, p, writer, other


def _violations(c) -> dict:
    from checkers.oracle import check
    return {name: found for name, found in check(c.history, 2).items() if found}


def test_a_row_whose_only_copy_is_down_is_excused_and_arrives(tmp_path):
    c, p, writer, other = _written_and_queued(tmp_path)
    try:
        c.crash_replica(writer)                    # down, its disk kept: it will send the row
        assert c.query(at=other, sync=False) is not None
        assert c.history.tables["query_lag"] == [{"query_id": "q1", "partition_id": p, "row_id": 1}]
        c.add_replica(writer)                      # ReplicaRestart: back with its disk
        c.settle()
        c.snapshot()
        assert _violations(c) == {}
    finally:
        c.close()


def test_a_row_lost_for_good_is_not_excused_as_lag(tmp_path):
    c, p, writer, other = _written_and_queued(tmp_path)
    try:
        c.crash_replica(writer)
        c.drop_replica(writer)                     # SYSTEM DROP REPLICA: the only copy is gone
        assert c.query(at=other, sync=False) is not None
        c.snapshot()
        assert c.history.tables["query_lag"] == []
        found = _violations(c)
        assert found["QueryNoMissingInv"] == [f"q1 missed row 1 of {p}, acknowledged at 2"]
        assert found["OwnersCompleteInv"] == [f"{other} owns {p} and lacks 1 acknowledged rows"]
    finally:
        c.close()
