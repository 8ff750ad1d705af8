"""One suite for the Keeper interface, run identically against the in-memory backend and real
ZooKeeper: a behaviour the protocol relies on must be the same on both."""

import threading

import pytest

from protocol.keeper import (BadVersionError, Check, Create, Delete, MultiError, NodeExistsError, NoNodeError,
                             NotEmptyError, SessionExpiredError, SetData)


def test_create_get_and_versions(connect):
    k = connect()
    assert k.create("/selective", b"") == "/selective"
    k.create("/selective/config", b'{"replication_factor": 2}')
    value, stat = k.get("/selective/config")
    assert value == b'{"replication_factor": 2}' and stat.version == 0
    assert k.set("/selective/config", b"x").version == 1
    assert k.get("/selective/config")[1].version == 1


def test_cas_set_with_stale_version_raises_bad_version(connect):
    k = connect()
    k.create("/a", b"replica1,replica3")
    k.set("/a", b"replica1,replica3,replica5", version=0)
    with pytest.raises(BadVersionError):
        k.set("/a", b"lost update", version=0)
    assert k.get("/a")[0] == b"replica1,replica3,replica5"


def test_create_existing_raises_node_exists_and_keeps_the_winner(connect):
    a, b = connect(), connect()
    a.create("/p", b"replica1,replica3")
    with pytest.raises(NodeExistsError):
        b.create("/p", b"replica2,replica4")
    assert b.get("/p")[0] == b"replica1,replica3"


def test_missing_nodes_and_parents(connect):
    k = connect()
    with pytest.raises(NoNodeError):
        k.get("/nope")
    with pytest.raises(NoNodeError):
        k.create("/no/parent")
    assert k.create("/made/by/makepath", makepath=True) == "/made/by/makepath"
    assert k.exists("/nope") is None and k.exists("/made/by").num_children == 1


def test_delete_rules(connect):
    k = connect()
    k.create("/d/x", makepath=True)
    with pytest.raises(NotEmptyError):
        k.delete("/d")
    with pytest.raises(BadVersionError):
        k.delete("/d/x", version=3)
    k.delete("/d", recursive=True)
    assert k.exists("/d") is None


def test_sequential_numbers_count_every_child_create_of_the_parent(connect):
    k = connect()
    k.create("/q")
    k.create("/q/plain")
    assert k.create("/q/entry-", sequential=True) == "/q/entry-0000000001"


def test_sequential_nodes_count_up_per_parent(connect):
    k = connect()
    k.create("/log")
    names = [k.create("/log/log-", b"GET_PART", sequential=True) for _ in range(3)]
    assert names == ["/log/log-0000000000", "/log/log-0000000001", "/log/log-0000000002"]
    k.delete(names[-1])
    assert k.create("/log/log-", sequential=True) == "/log/log-0000000003"  # counters never go back
    assert k.get_children("/log") == ["log-0000000000", "log-0000000001", "log-0000000003"]


def test_ephemeral_nodes_go_with_their_session(connect):
    a, b = connect(), connect()
    a.create("/replicas/r1", makepath=True)
    a.create("/replicas/r1/is_active", ephemeral=True)
    assert b.exists("/replicas/r1/is_active").ephemeral_owner == a.session_id != 0
    connect.expire(a)
    assert b.exists("/replicas/r1/is_active") is None
    assert b.exists("/replicas/r1") is not None
    with pytest.raises(SessionExpiredError):
        a.get("/replicas/r1")


def test_multi_is_all_or_nothing(connect):
    k = connect()
    k.create("/assignments")
    k.create("/assignments/202401_0", b"replica1,replica3")
    with pytest.raises(MultiError) as err:
        k.multi([Create("/blocks-hash", b""), SetData("/assignments/202401_0", b"x", version=7)])
    assert err.value.index == 1 and isinstance(err.value.cause, BadVersionError)
    assert k.exists("/blocks-hash") is None
    assert k.get("/assignments/202401_0")[0] == b"replica1,replica3"


def test_multi_commit_with_check_create_set_delete(connect):
    k = connect()
    k.create("/assignments")
    k.create("/assignments/p", b"r1,r2")
    k.create("/gone")
    out = k.multi([Check("/assignments/p", 0), Create("/log-", b"GET", sequential=True),
                   SetData("/assignments/p", b"r1,r3", 0), Delete("/gone")])
    # The sequence number is the parent's count of child creates so far: /assignments and /gone.
    assert out[1] == "/log-0000000002" and out[2].version == 1 and out[3] is None
    assert k.exists("/gone") is None and k.get("/assignments/p")[0] == b"r1,r3"
    with pytest.raises(MultiError) as err:
        k.multi([Check("/assignments/p", 0)])
    assert isinstance(err.value.cause, BadVersionError)


def test_concurrent_cas_has_exactly_one_winner(connect):
    clients = [connect() for _ in range(4)]
    clients[0].create("/counter", b"0")
    wins = []

    def bump(c):
        value, stat = c.get("/counter")
        try:
            c.set("/counter", str(int(value) + 1).encode(), version=stat.version)
            wins.append(c)
        except BadVersionError:
            pass

    barrier = threading.Barrier(len(clients))

    def run(c):
        barrier.wait()
        bump(c)

    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # However the reads interleave, each successful CAS moved the version by one.
    assert int(clients[0].get("/counter")[0]) == len(wins) >= 1
    assert clients[0].get("/counter")[1].version == len(wins)


def test_operations_are_counted(connect):
    k = connect()
    k.create("/x")
    k.get("/x")
    k.multi([SetData("/x", b"1")])
    assert k.ops["create"] == 1 and k.ops["get"] == 1 and k.ops["multi"] == 1


@pytest.mark.parametrize("bad", ["relative", "/trailing/", "/double//slash"])
def test_malformed_paths_are_named(connect, bad):
    k = connect()
    with pytest.raises(ValueError, match="malformed znode path"):
        k.create(bad)


def test_a_lost_answer_applies_the_multi_and_expires_its_session():
    """The in-memory keeper's lose_answer (racing profile `expiring`): the picked multi is applied,
    then the session expires and the client is told KeeperUnavailableError with outcome_unknown,
    as zookeeper.py reports a session lost after a write went out. A multi it does not pick, and
    every multi once keep_answers() disarmed it, is answered as usual. (ZooKeeper has no such
    switch: the in-memory backend only.)"""
    from protocol.keeper import KeeperUnavailableError, MemoryEnsemble
    ensemble = MemoryEnsemble()
    k, other = ensemble.connect(), ensemble.connect()
    k.create("/log")
    ensemble.lose_answer(k.session_id, lambda ops: any(o.path.startswith("/log/") for o in ops))
    k.multi([Create("/blocks-hash", b"")])                        # not picked: answered
    with pytest.raises(KeeperUnavailableError) as err:
        k.multi([Create("/log/log-", b"entry", sequential=True), Delete("/blocks-hash")])
    assert err.value.outcome_unknown and k.expired
    assert other.get_children("/log") == ["log-0000000000"] and other.exists("/blocks-hash") is None
    again = ensemble.connect()
    ensemble.lose_answer(again.session_id, lambda ops: True)
    ensemble.keep_answers()
    again.multi([Create("/log/log-", b"entry", sequential=True)])
    assert not again.expired and len(other.get_children("/log")) == 2
