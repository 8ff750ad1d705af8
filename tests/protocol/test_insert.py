"""INSERT routing on both backends: split by partition, allocate, write or forward, retry."""

import random

import pytest
from cluster_helpers import drain

from protocol.assignment import Assignment, GuardFailed, cas_update
from protocol.insert import InsertOutcomeUnknown, client_send_insert, replica_forward_insert, route_insert
from protocol.keeper import KeeperUnavailableError, SessionExpiredError
from protocol.layout import Layout
from protocol.parts import PartStore
from protocol.registration import create_table_znodes, declare_replicas, register_replica
from protocol.replica import InsertRejected, Replica
from protocol.table import EVENTS

LAYOUT = Layout("/clickhouse/tables/01/events")
BLOCK = [{"date": "2024-01-15", "user_id": u, "event": f"e{u}"} for u in (1, 17, 2, 33, 3)]  # 3 partitions


@pytest.fixture
def reps(connect, tmp_path):
    admin = connect()
    create_table_znodes(admin, LAYOUT, 2)
    stores = {r: PartStore(tmp_path / r) for r in ("r1", "r2", "r3", "r4")}
    declare_replicas(admin, LAYOUT, stores)
    out = {}
    for r in stores:
        k = connect()
        register_replica(k, LAYOUT, r)
        out[r] = Replica(r, k, LAYOUT, stores[r], stores)
        out[r].load_map()
    return out


def drain_all(reps):
    for rep in reps.values():
        drain(rep)


def rows_everywhere(reps):
    """partition -> {replica: sorted user ids} over every replica holding the partition."""
    out = {}
    for r, rep in reps.items():
        for n in rep.store.names():
            out.setdefault(n.partition, {}).setdefault(r, []).extend(x["user_id"] for x in rep.store.read(n))
    return {p: {r: sorted(v) for r, v in m.items()} for p, m in out.items()}


def expire(connect, keeper):
    """Expire a session and let its client see it (ZooKeeper's client learns of a server-side
    expiry at its next request), as a replica does before it serves again."""
    connect.expire(keeper)
    try:
        keeper.exists("/")
    except SessionExpiredError:
        pass
    assert keeper.expired


def test_block_is_split_allocated_and_replicated_exactly_once(reps):
    result = route_insert(reps["r4"], EVENTS, BLOCK, reps, random.Random(3))
    assert set(result) == {"202401-1", "202401-2", "202401-3"}
    # each sub-block's answer names the part its owner committed (Keeper has it under that owner)
    for p, part in result.items():
        assert part.startswith(f"{p}_") and any(
            part in reps["r1"].keeper.get_children(LAYOUT.parts(o)) for o in reps["r1"].replica_refresh_cache(p).owners)
    assert route_insert(reps["r4"], EVENTS, BLOCK, reps, random.Random(3)) == dict.fromkeys(result, "deduplicated")
    drain_all(reps)
    placed = rows_everywhere(reps)
    for p, by_replica in placed.items():
        owners = reps["r1"].replica_refresh_cache(p).owners
        assert set(by_replica) == set(owners)  # on its RF owners, nowhere else
        assert len({tuple(v) for v in by_replica.values()}) == 1
    assert sorted(u for m in placed.values() for u in next(iter(m.values()))) == [1, 2, 3, 17, 33]


@pytest.mark.parametrize("when", ["before_write", "after_write"])
def test_a_broken_forward_and_a_retry_write_every_row_once(reps, when):
    broken = {"done": False}

    def faults(point, partition):
        if point == when and not broken["done"]:
            broken["done"] = True
            raise InsertOutcomeUnknown(f"connection lost {when} for {partition}")

    outcome = client_send_insert(reps, EVENTS, BLOCK, tries=3, rng=random.Random(1), faults=faults)
    assert outcome == "ok" and broken["done"]
    drain_all(reps)
    for p, by_replica in rows_everywhere(reps).items():
        for ids in by_replica.values():
            assert len(ids) == len(set(ids)), f"{p} has a row twice: {by_replica}"
    assert sorted(set(u for m in rows_everywhere(reps).values() for v in m.values() for u in v)) == [1, 2, 3, 17, 33]


def test_forward_to_a_replica_whose_map_moved_on_is_rejected_for_retry(reps):
    route_insert(reps["r1"], EVENTS, BLOCK[:1], reps)  # allocates 202401-1
    p = "202401-1"
    owners = reps["r1"].cache[p].owners
    others = tuple(sorted(set(reps) - set(owners)))
    cas_update(reps["r1"].keeper, LAYOUT, p, lambda a: Assignment(others))  # moved while r-receiver's map is old
    receiver = reps[others[0]]
    receiver.cache[p] = Assignment(owners, version=0)  # stale map: forwards to an old owner
    for o in owners:
        reps[o].cache[p] = Assignment(owners, version=0)
    with pytest.raises(InsertRejected):
        route_insert(receiver, EVENTS, [{"date": "2024-01-15", "user_id": 17, "event": "late"}], reps)
    # the old owner that refused re-read its map, so the client's retry is not refused again by it
    assert len([o for o in owners if reps[o].cache[p].owners == others]) == 1


@pytest.mark.parametrize("fault, outcome", [(InsertRejected, "failed"), (InsertOutcomeUnknown, "unknown")])
def test_the_client_is_told_failed_or_unknown_by_what_broke_every_try(reps, fault, outcome):
    """ClientSendInsert's outcome once its tries run out: refused every time (nothing written,
    "failed"), or lost every time after the request went out (it may be written, "unknown"): the
    history's status, which decides whether the checker owes the rows."""
    tries = []

    def faults(point, partition):
        if point == "before_write":
            tries.append(partition)
            raise fault(f"{fault.__name__} for {partition}")

    assert client_send_insert(reps, EVENTS, BLOCK, tries=2, rng=random.Random(1), faults=faults) == outcome
    assert len(tries) == 2   # each try broke at its first sub-block


@pytest.mark.parametrize("faults_in_order", [(InsertOutcomeUnknown, InsertRejected), (InsertRejected, InsertOutcomeUnknown)])
def test_a_lost_try_leaves_the_outcome_unknown_whatever_the_other_tries_say(reps, faults_in_order):
    """A try lost after its request went out may have written the rows; a refusal of another
    try says nothing about it. So the client's outcome is "unknown" (the checker may find the
    rows, or not), never "failed" (which would promise they are absent)."""
    left = list(faults_in_order)

    def faults(point, partition):
        if point == "before_write" and left:
            fault = left.pop(0)
            raise fault(f"{fault.__name__} for {partition}")

    assert client_send_insert(reps, EVENTS, BLOCK, tries=2, rng=random.Random(1), faults=faults) == "unknown"
    assert not left


def test_a_block_partly_committed_before_a_refusal_is_unknown_not_failed(reps):
    """An INSERT is not atomic across partitions: a try commits the block's first sub-blocks and
    is refused at a later one, every time. The committed parts stay (the retries deduplicate
    them), so the client may not be told "failed", which promises no row of the block is
    anywhere: its outcome is "unknown" (found by the `clients` racing profile, NoPhantomRowsInv)."""
    last = sorted(EVENTS.split_by_partition(BLOCK))[-1]
    refused = []

    def faults(point, partition):
        if point == "before_write" and partition == last:
            refused.append(partition)
            raise InsertRejected(f"no owner of {partition} is reachable")

    assert client_send_insert(reps, EVENTS, BLOCK, tries=2, rng=random.Random(1), faults=faults) == "unknown"
    assert len(refused) == 2
    drain_all(reps)
    written = {p for p, by_replica in rows_everywhere(reps).items() if any(by_replica.values())}
    assert written == set(EVENTS.split_by_partition(BLOCK)) - {last}


def test_a_sub_block_whose_owner_turned_read_only_is_written_by_the_other_owner(reps, connect):
    """The receiver owns the partition but its session expired (read-only, TABLE_IS_READ_ONLY):
    nothing of the write can have been applied, so the sub-block goes to the other owner, as a
    Distributed INSERT does, and is written once."""
    route_insert(reps["r1"], EVENTS, BLOCK[:1], reps)   # allocates 202401-1
    p = "202401-1"
    receiver, other = (reps[o] for o in reps["r1"].cache[p].owners)
    expire(connect, receiver.keeper)
    late = {"date": "2024-01-15", "user_id": 17, "event": "late"}
    assert set(route_insert(receiver, EVENTS, [late], reps)) == {p}
    drain(other)
    assert sorted(x["user_id"] for n in other.store.names() for x in other.store.read(n)) == [1, 17]
    expire(connect, other.keeper)   # no writable owner left: the client is told the owner's error
    with pytest.raises(KeeperUnavailableError, match="read-only"):
        route_insert(receiver, EVENTS, [late], reps)


def test_a_client_retries_a_try_a_read_only_replica_refused(reps, connect):
    """A try whose commit was cut off (Keeper's answer lost) makes the block "unknown". Both owners
    of a partition read-only (their sessions expired): each try is refused with the owner's error,
    which the client takes as a refusal and retries, then is told "failed" (nothing was written),
    not an exception."""
    def cut(where, partition):
        if where == "before_write":
            raise KeeperUnavailableError("the commit went out, its answer did not come", outcome_unknown=True)
    assert client_send_insert(reps, EVENTS, BLOCK[:1], tries=2, rng=random.Random(3), faults=cut) == "unknown"
    p = "202401-1"
    for o in reps["r1"].cache[p].owners:
        expire(connect, reps[o].keeper)
    late = [{"date": "2024-01-15", "user_id": 17, "event": "late"}]
    assert client_send_insert(reps, EVENTS, late, tries=3, rng=random.Random(3)) == "failed"
    assert not any(x["user_id"] == 17 for rep in reps.values() for n in rep.store.names() for x in rep.store.read(n))


def test_a_forward_goes_to_a_writable_owner_and_only_from_a_replica_that_owns_nothing(reps, connect):
    """ReplicaForwardInsert: only a receiver the map says does not own the partition forwards; the
    forward goes to an owner whose session is live (one that expired is read-only), and with none
    the INSERT is refused for the client to retry."""
    route_insert(reps["r1"], EVENTS, BLOCK[:1], reps)   # allocates 202401-1
    p = "202401-1"
    owners = reps["r1"].cache[p].owners
    receiver = reps[next(r for r in sorted(reps) if r not in owners)]
    receiver.replica_refresh_cache(p)
    with pytest.raises(GuardFailed, match="needs no forward"):
        replica_forward_insert(reps[owners[0]], p, reps, random.Random(0))
    expire(connect, reps[owners[0]].keeper)
    assert {replica_forward_insert(receiver, p, reps, random.Random(seed)).name for seed in range(8)} == {owners[1]}
    expire(connect, reps[owners[1]].keeper)
    with pytest.raises(InsertRejected, match="no owner of 202401-1"):
        replica_forward_insert(receiver, p, reps, random.Random(0))


def test_a_forward_target_whose_map_lags_refuses_once_and_learns_its_ownership(reps):
    """The receiver's map is newer than the owners': they do not know yet that they own the
    partition, so the one the INSERT is forwarded to refuses it (ReplicaWriteInsert's guard) and
    re-reads its map, so that the client's retry is written."""
    route_insert(reps["r1"], EVENTS, BLOCK[:1], reps)   # allocates 202401-1
    p = "202401-1"
    old = reps["r1"].cache[p].owners
    new = tuple(sorted(set(reps) - set(old)))
    cas_update(reps["r1"].keeper, LAYOUT, p, lambda a: Assignment(new))
    receiver = reps[old[0]]
    receiver.replica_refresh_cache(p)
    for o in new:
        reps[o].cache[p] = Assignment(old, version=0)
    late = [{"date": "2024-01-15", "user_id": 17, "event": "late"}]
    with pytest.raises(InsertRejected, match="does not make it an owner"):
        route_insert(receiver, EVENTS, late, reps, random.Random(0))
    assert len([o for o in new if reps[o].cache[p].owners == new]) == 1


def test_each_owner_is_tried_once_when_every_owner_is_read_only_without_expiry(reps, monkeypatch):
    """Both owners' Keepers away (KeeperUnavailableError, nothing written; their sessions not
    expired, so the map still names them writable): the sub-block goes to each owner once, then
    the client is told the last owner's error. A router that forgets whom it tried (route_insert's
    mutant 80, `tried.add(None)`) goes back and forth between them for ever; the stub stops it."""
    route_insert(reps["r1"], EVENTS, BLOCK[:1], reps)   # allocates 202401-1
    p = "202401-1"
    owners = reps["r1"].cache[p].owners
    calls = []

    def away(name):
        def write(partition, rows, block_hash):
            calls.append(name)
            if len(calls) > 8:
                raise AssertionError(f"route_insert tried the owners {calls}: it loops")
            raise KeeperUnavailableError(f"{name}: no ZooKeeper within the retry deadline")
        return write
    for o in owners:
        monkeypatch.setattr(reps[o], "replica_write_insert", away(o))
    late = {"date": "2024-01-15", "user_id": 17, "event": "late"}
    with pytest.raises(KeeperUnavailableError, match="retry deadline"):
        route_insert(reps[owners[0]], EVENTS, [late], reps)
    assert sorted(calls) == sorted(owners)


def test_a_commit_whose_answer_is_lost_is_not_written_again_and_the_client_is_told_unknown(tmp_path):
    """The owner's session expires right after its commit went out (the in-memory keeper's
    lose_answer): the sub-block is in Keeper, its writer cannot tell. route_insert must not hand
    it to the other owner (that is for a refusal before the commit), and the client, whose other
    tries the dedup id answers or a read-only owner refuses, is told "unknown", never "failed":
    the rows are there, once."""
    from protocol.keeper import Create, MemoryEnsemble
    ensemble = MemoryEnsemble()
    admin = ensemble.connect()
    create_table_znodes(admin, LAYOUT, 2)
    stores = {r: PartStore(tmp_path / r) for r in ("r1", "r2", "r3")}
    declare_replicas(admin, LAYOUT, stores)
    reps = {}
    for r in stores:
        k = ensemble.connect()
        register_replica(k, LAYOUT, r)
        reps[r] = Replica(r, k, LAYOUT, stores[r], stores)
        reps[r].load_map()
    route_insert(reps["r1"], EVENTS, BLOCK[:1], reps)   # allocates 202401-1
    p = "202401-1"
    writer = reps[reps["r1"].cache[p].owners[0]]
    commits = lambda ops: any(isinstance(o, Create) and o.path.startswith(LAYOUT.log + "/") for o in ops)  # noqa: E731
    late = [{"date": "2024-01-15", "user_id": 17, "event": "late"}]
    ensemble.lose_answer(writer.keeper.session_id, commits)
    with pytest.raises(KeeperUnavailableError) as err:
        route_insert(writer, EVENTS, late, reps)
    assert err.value.outcome_unknown and writer.keeper.expired
    assert writer.unknown_commits                      # the part stays until Keeper can tell
    again = [{"date": "2024-01-15", "user_id": 33, "event": "again"}]
    for o in reps["r1"].cache[p].owners:
        if not reps[o].keeper.expired:
            ensemble.lose_answer(reps[o].keeper.session_id, commits)
    assert client_send_insert(reps, EVENTS, again, tries=3, rng=random.Random(1)) == "unknown"
    ensemble.keep_answers()
    drain_all({r: rep for r, rep in reps.items() if not rep.keeper.expired})
    held = rows_everywhere(reps)[p]
    assert all(sorted(v).count(17) <= 1 and sorted(v).count(33) <= 1 for v in held.values())
    assert any(17 in v for v in held.values()) and any(33 in v for v in held.values())
