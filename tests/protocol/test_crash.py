"""ReplicaCrash as one step (protocol/crash.py): the session ends, the map and pins go with the
process, and every query the replica served fails, its pins on the others released."""

from cluster_helpers import LAYOUT, P

from protocol.crash import replica_crash
from protocol.query import client_start_query


def test_a_crash_ends_the_session_and_fails_the_queries_it_served(make_cluster):
    admin, reps = make_cluster()   # P on r1 and r2
    started_here = client_start_query(reps["r2"], choose=lambda _p, _owners: "r1", replicas=reps)
    read_here = client_start_query(reps["r3"], choose=lambda _p, _owners: "r2", replicas=reps)
    elsewhere = client_start_query(reps["r1"], choose=lambda _p, _owners: "r1", replicas=reps)
    assert reps["r1"].pins == {P: 2} and reps["r2"].pins == {P: 1}
    r2 = reps["r2"]
    failed = replica_crash(r2, reps, [started_here, read_here, elsewhere])
    assert failed == [started_here, read_here] and started_here.done and read_here.done
    assert not elsewhere.done and reps["r1"].pins == {P: 1}   # the failed query's pin released
    assert "r2" not in reps and r2.keeper.expired and admin.exists(LAYOUT.is_active("r2")) is None
    assert r2.cache == {} and r2.pins == {}
    assert replica_crash(reps["r3"], reps) == [] and sorted(reps) == ["r1"]
