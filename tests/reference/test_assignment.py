"""Allocation on first INSERT, on both Keeper backends, against the spec's invariants."""

import random
import threading

import pytest

from reference.assignment import (Assignment, CorruptAssignment, GuardFailed, NotEnoughActiveReplicas, replica_allocate,
                                  cas_update, read_assignment, replica_adopt_assignment, replica_choose_owners,
                                  replica_create_assignment, selective_assignments_rows)
from reference.layout import Layout
from reference.registration import RegistrationError, create_table_znodes, register_replica

LAYOUT = Layout("/clickhouse/tables/01/events")


@pytest.fixture
def cluster(connect):
    """(connect, admin session, {replica: its session}) with r1..r4 registered and active."""
    admin = connect()
    create_table_znodes(admin, LAYOUT, 2)
    replicas = {}
    for r in ("r1", "r2", "r3", "r4"):
        replicas[r] = connect()
        register_replica(replicas[r], LAYOUT, r)
    return connect, admin, replicas


def test_first_insert_allocates_rf_least_loaded(cluster):
    _, admin, reps = cluster
    a1 = replica_allocate(reps["r1"], LAYOUT, "r1", "202401-0", 2)
    assert len(a1.owners) == 2 and a1.version == 0
    a2 = replica_allocate(reps["r2"], LAYOUT, "r2", "202401-1", 2)
    assert set(a2.owners).isdisjoint(a1.owners), "the two unloaded replicas must be picked"
    again = replica_allocate(reps["r3"], LAYOUT, "r3", "202401-0", 2)
    assert again.owners == a1.owners
    rows = selective_assignments_rows(admin, LAYOUT)
    assert {r["partition_id"] for r in rows} == {"202401-0", "202401-1"}


def test_lost_race_adopts_the_winner(cluster):
    _, _, reps = cluster
    a = replica_choose_owners(reps["r1"], LAYOUT, "r1", "202401-7", 2, rng=random.Random(1))
    b = replica_choose_owners(reps["r2"], LAYOUT, "r2", "202401-7", 2, rng=random.Random(2))
    won = replica_create_assignment(reps["r2"], LAYOUT, b)
    with pytest.raises(GuardFailed, match="another allocator won"):
        replica_create_assignment(reps["r1"], LAYOUT, a)
    adopted = replica_adopt_assignment(reps["r1"], LAYOUT, a)
    # RoutedToOwnersInv: both allocators route to what the znode says.
    assert a.routed_to == b.routed_to == won.owners == adopted.owners
    assert read_assignment(reps["r3"], LAYOUT, "202401-7").owners == won.owners


def test_concurrent_allocators_agree(cluster):
    connect, _, reps = cluster
    results, errors = {}, []
    barrier = threading.Barrier(4)

    def run(r):
        barrier.wait()
        try:
            results[r] = replica_allocate(reps[r], LAYOUT, r, "202402-3", 2, rng=random.Random(hash(r)))
        except Exception as e:  # a thread's exception would otherwise pass unseen
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in reps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert set(results) == set(reps) and len({a.owners for a in results.values()}) == 1


def test_blind_write_breaks_routed_to_owners(cluster):
    _, _, reps = cluster
    bugs = frozenset({"blind_write"})
    a = replica_choose_owners(reps["r1"], LAYOUT, "r1", "202401-9", 2, bugs, rng=random.Random(1))
    b = replica_choose_owners(reps["r2"], LAYOUT, "r2", "202401-9", 2, bugs, rng=random.Random(5))
    assert a.owners != b.owners
    replica_create_assignment(reps["r1"], LAYOUT, a, bugs)
    replica_create_assignment(reps["r2"], LAYOUT, b, bugs)
    now = read_assignment(reps["r3"], LAYOUT, "202401-9").owners
    assert a.routed_to != now, "r1 routed rows to owners the znode no longer names"


def test_fewer_active_than_rf_is_refused_unless_the_rfc_bug_is_on(cluster):
    _, _, reps = cluster
    for r in ("r2", "r3", "r4"):
        reps[r].close()
    with pytest.raises(NotEnoughActiveReplicas, match="replication_factor 2 but only 1 active"):
        replica_allocate(reps["r1"], LAYOUT, "r1", "202403-1", 2)
    assert read_assignment(reps["r1"], LAYOUT, "202403-1") is None  # nothing written
    short = replica_allocate(reps["r1"], LAYOUT, "r1", "202403-1", 2, frozenset({"allow_short_assignment"}))
    assert short.owners == ("r1",)  # ReplicationFactorInv broken, as in MCAssignment_allow_short_assignment


def test_inactive_replica_cannot_allocate(cluster):
    _, _, reps = cluster
    reps["r4"].close()
    with pytest.raises(GuardFailed, match="not active"):
        replica_choose_owners(reps["r1"], LAYOUT, "r4", "202401-2", 2)


def test_cas_update_retries_on_bad_version(cluster):
    _, admin, reps = cluster
    replica_allocate(reps["r1"], LAYOUT, "r1", "202401-4", 2)
    calls = []

    def add_target(a):
        calls.append(a.version)
        if len(calls) == 1:  # someone else moves the znode between our read and our set
            reps["r2"].set(LAYOUT.assignment("202401-4"), a.encode())
        return Assignment(a.owners, target="r4" if "r4" not in a.owners else "r3")

    new = cas_update(admin, LAYOUT, "202401-4", add_target)
    assert calls == [0, 1] and new.version == 2 and new.target


@pytest.mark.parametrize("raw, message", [
    (b"replica1,replica3", "not JSON"),
    (b'{"owners": []}', "expected keys"),
    (b'{"owners": [], "target": null, "leaving": null}', "non-empty list"),
    (b'{"owners": ["r1", "r1"], "target": null, "leaving": null}', "repeat"),
    (b'{"owners": ["r1", "r2"], "target": "r1", "leaving": null}', "target must be"),
])
def test_corrupted_assignment_is_named_and_left_alone(cluster, raw, message):
    _, admin, _ = cluster
    path = LAYOUT.assignment("202405-0")
    admin.create(path, raw)
    with pytest.raises(CorruptAssignment, match=message):
        read_assignment(admin, LAYOUT, "202405-0")
    assert admin.get(path)[0] == raw


def test_registration_errors(cluster):
    connect, admin, _ = cluster
    with pytest.raises(RegistrationError, match="replication_factor 2, not 3"):
        create_table_znodes(admin, LAYOUT, 3)
    with pytest.raises(RegistrationError, match="already active"):
        register_replica(connect(), LAYOUT, "r1")


def test_malformed_partition_id_is_refused_before_keeper_is_touched(cluster):
    _, _, reps = cluster
    before = dict(reps["r1"].ops)
    with pytest.raises(ValueError, match="malformed partition id"):
        replica_allocate(reps["r1"], LAYOUT, "r1", "202401_5", 2)
    assert dict(reps["r1"].ops) == before
