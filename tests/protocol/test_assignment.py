"""Allocation on first INSERT, on both Keeper backends, against the spec's invariants."""

import random
import threading

import pytest

from protocol.assignment import (AlreadyAssigned, Assignment, CorruptAssignment, GuardFailed, NotEnoughActiveReplicas,
                                 cas_update, loads, read_assignment, replica_adopt_assignment, replica_allocate,
                                 replica_choose_owners, replica_create_assignment, selective_assignments_rows)
from protocol.layout import Layout
from protocol.registration import RegistrationError, create_table_znodes, register_replica

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


def test_a_corrupt_assignment_raises_unless_the_caller_takes_it(cluster):
    """system.selective_assignments over a corrupt znode raises (an operator reading it must see
    the problem); a caller that passes `corrupt` (Cluster's snapshot, to leave a history) is told
    the partition and the error, and gets the other rows."""
    _, admin, reps = cluster
    replica_allocate(reps["r1"], LAYOUT, "r1", "202401-0", 2)
    replica_allocate(reps["r1"], LAYOUT, "r1", "202401-1", 2)
    replica_allocate(reps["r1"], LAYOUT, "r1", "202401-2", 2)   # after the corrupt one: read all the same
    admin.set(LAYOUT.assignment("202401-1"), b"not json")
    with pytest.raises(CorruptAssignment, match="not JSON"):
        selective_assignments_rows(admin, LAYOUT)
    told = []
    rows = selective_assignments_rows(admin, LAYOUT, corrupt=lambda p, e: told.append((p, type(e))))
    assert [r["partition_id"] for r in rows] == ["202401-0", "202401-2"]
    assert told == [("202401-1", CorruptAssignment)]


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
    (b'{"owners": ["r1", ""], "target": null, "leaving": null}', "non-empty list"),  # an empty name
    (b'{"owners": ["r1", 2], "target": null, "leaving": null}', "non-empty list"),
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


# --- issue 18: tests for the gaps mutmut found in assignment.py -------------------------------------

class _RivalAt:
    """A Keeper session that lets a rival allocator create the assignment znode (owners r3, r4) just
    before this session's first call of `method` on `path`: the interleavings the RFC's allocation
    must survive (another replica's first INSERT of the same partition), made deterministic."""

    def __init__(self, keeper, rival, method, path, partition):
        self._keeper, self._rival, self._method, self._path, self._partition = keeper, rival, method, path, partition
        self.fired = False

    def __getattr__(self, name):
        attr = getattr(self._keeper, name)
        if name != self._method:
            return attr

        def call(path, *a, **kw):
            if path == self._path and not self.fired:
                self.fired = True
                self._rival.create(LAYOUT.assignment(self._partition), Assignment(("r3", "r4")).encode())
            return attr(path, *a, **kw)
        return call


def test_allocator_that_finds_the_znode_created_after_its_read_adopts_it(cluster):
    # replica_allocate read no assignment; before its choice another allocator created one: the
    # choice is refused (AlreadyAssigned) and the loop reads the winner's instead of returning nothing.
    _, admin, reps = cluster
    k = _RivalAt(reps["r1"], admin, "exists", LAYOUT.assignment("202406-0"), "202406-0")
    a = replica_allocate(k, LAYOUT, "r1", "202406-0", 2)
    assert k.fired and a is not None and a.owners == ("r3", "r4")
    with pytest.raises(AlreadyAssigned):  # the step itself, on an assigned partition
        replica_choose_owners(reps["r2"], LAYOUT, "r2", "202406-0", 2)


def test_allocator_that_loses_the_create_routes_to_the_winner(cluster):
    # The rival creates between the choice (which now counts r3 and r4 as loaded, so picks r1, r2)
    # and the create: the create fails and the allocator adopts the winner's owners (RoutedToOwnersInv).
    _, admin, reps = cluster
    k = _RivalAt(reps["r1"], admin, "get_children", LAYOUT.assignments, "202406-1")
    a = replica_allocate(k, LAYOUT, "r1", "202406-1", 2)
    assert k.fired and a.owners == ("r3", "r4") and a.version == 0
    assert read_assignment(admin, LAYOUT, "202406-1").owners == ("r3", "r4")


def test_blind_write_allocator_overwrites_the_winner(cluster):
    # The RFC as written (blind_write): the same race, and the loser's set overwrites the winner's
    # owners, which the rival has already routed rows to: what MCAssignment_blind_write finds.
    _, admin, reps = cluster
    k = _RivalAt(reps["r1"], admin, "get_children", LAYOUT.assignments, "202406-2")
    a = replica_allocate(k, LAYOUT, "r1", "202406-2", 2, frozenset({"blind_write"}))
    assert k.fired and a.owners == ("r1", "r2") and a.version == 1
    assert read_assignment(admin, LAYOUT, "202406-2").owners == ("r1", "r2")


def test_blind_write_on_an_absent_znode_creates_it_with_the_chosen_owners(cluster):
    _, admin, reps = cluster
    bugs = frozenset({"blind_write"})
    a = replica_choose_owners(reps["r1"], LAYOUT, "r1", "202406-3", 2, bugs, rng=random.Random(1))
    got = replica_create_assignment(reps["r1"], LAYOUT, a, bugs)
    assert got.owners == a.owners and got.version == 0 and a.routed_to == a.owners
    assert read_assignment(admin, LAYOUT, "202406-3").owners == a.owners
    with pytest.raises(GuardFailed, match="never adopts"):  # with blind_write there is nothing to adopt
        replica_adopt_assignment(reps["r1"], LAYOUT, a, bugs)


def test_adopt_and_cas_update_on_an_unassigned_partition_are_refused(cluster):
    _, admin, reps = cluster
    a = replica_choose_owners(reps["r1"], LAYOUT, "r1", "202406-4", 2)
    with pytest.raises(GuardFailed, match="no assignment yet"):
        replica_adopt_assignment(reps["r1"], LAYOUT, a)
    with pytest.raises(GuardFailed, match="not assigned"):
        cas_update(admin, LAYOUT, "202406-4", lambda cur: cur)
    assert read_assignment(admin, LAYOUT, "202406-4") is None


def test_cas_update_returns_what_it_wrote(cluster):
    # Callers continue from cas_update's result (its version is their next CAS token): it must be
    # the znode's content, every role included.
    _, admin, reps = cluster
    a = replica_allocate(reps["r1"], LAYOUT, "r1", "202406-5", 2)
    free = sorted({"r1", "r2", "r3", "r4"} - set(a.owners))
    new = cas_update(admin, LAYOUT, "202406-5",
                     lambda cur: Assignment(cur.owners[1:], target=free[0], leaving=cur.owners[0]))
    assert new == read_assignment(admin, LAYOUT, "202406-5")
    assert new.owners == a.owners[1:] and new.target == free[0] and new.leaving == a.owners[0] and new.version == 1
    row = next(r for r in selective_assignments_rows(admin, LAYOUT) if r["partition_id"] == "202406-5")
    assert row == {"partition_id": "202406-5", "replicas": list(new.owners), "clone_target": free[0],
                   "leaving_replica": a.owners[0], "version": 1}


def test_loads_count_every_owned_partition(cluster):
    # The RFC's "count partitions already assigned to each replica", not whether a replica owns any:
    # the counts decide who is least loaded, and with capacities their ratios.
    _, admin, reps = cluster
    for p, owners in (("202407-0", ("r1", "r2")), ("202407-1", ("r1", "r3")), ("202407-2", ("r1", "r2"))):
        admin.create(LAYOUT.assignment(p), Assignment(owners).encode())
    assert loads(admin, LAYOUT) == {"r1": 3, "r2": 2, "r3": 1}


def test_forced_owners_through_replica_allocate(cluster):
    # Conformance replay forces one of the spec's allowed choices through replica_allocate: a
    # least-loaded choice is written as given, any other is refused with nothing written.
    _, admin, reps = cluster
    admin.create(LAYOUT.assignment("202407-3"), Assignment(("r1", "r2")).encode())
    with pytest.raises(GuardFailed, match="least-loaded"):
        replica_allocate(reps["r1"], LAYOUT, "r1", "202407-4", 2, owners=("r1", "r3"))
    assert read_assignment(admin, LAYOUT, "202407-4") is None
    for rng in (random.Random(0), random.Random(1), random.Random(2)):  # whatever the tie-break would pick
        assert replica_choose_owners(reps["r1"], LAYOUT, "r1", "202407-5", 2, rng=rng).owners == ("r3", "r4")
    a = replica_allocate(reps["r1"], LAYOUT, "r1", "202407-5", 2, owners=("r4", "r3"))
    assert a.owners == ("r3", "r4") and read_assignment(admin, LAYOUT, "202407-5").owners == ("r3", "r4")


def test_placement_given_to_replica_allocate_is_used(cluster):
    # A placement passed in (a planner that has read it already) replaces the Keeper read, where no
    # replica declared one: r1 and r2 are the least loaded but share a fault domain, so the owners
    # are one of them and one of r3, r4 (by partition counts alone they would be r1 and r2).
    from protocol.placement import Placement
    _, admin, reps = cluster
    for p in ("202408-0", "202408-1"):
        admin.create(LAYOUT.assignment(p), Assignment(("r3", "r4")).encode())
    domains = {"r1": "a", "r2": "a", "r3": "b", "r4": "b"}
    a = replica_allocate(reps["r1"], LAYOUT, "r1", "202408-2", 2, placement=Placement(domains=domains))
    assert len({domains[o] for o in a.owners}) == 2, a.owners
    assert replica_allocate(reps["r1"], LAYOUT, "r1", "202408-3", 2).owners == ("r1", "r2")


def test_declared_fault_domains_decide_the_owners(cluster):
    # Where the replicas declared fault domains, ReplicaChooseOwners picks the least full in
    # distinct domains, and refuses a forced choice that puts two owners in one domain.
    from protocol.placement import publish_placement
    _, admin, reps = cluster
    domains = {"r1": "a", "r2": "a", "r3": "b", "r4": "b"}
    for r, d in domains.items():
        publish_placement(reps[r], LAYOUT, r, domain=d)
    for seed in range(4):
        a = replica_choose_owners(reps["r1"], LAYOUT, "r1", "202409-0", 2, rng=random.Random(seed))
        assert len({domains[o] for o in a.owners}) == 2, a.owners
    with pytest.raises(GuardFailed, match="distinct domains"):
        replica_choose_owners(reps["r1"], LAYOUT, "r1", "202409-0", 2, owners=("r1", "r2"))
    for forced in (("r3", "r1"), ("r1", "r4"), ("r2", "r3"), ("r4", "r2")):  # any one per domain: all empty
        a = replica_choose_owners(reps["r1"], LAYOUT, "r1", "202409-0", 2, owners=forced)
        assert (a.replica, a.partition, a.owners) == ("r1", "202409-0", tuple(sorted(forced)))
    got = replica_allocate(reps["r2"], LAYOUT, "r2", "202409-2", 2)  # written where the choice said
    assert len({domains[o] for o in got.owners}) == 2 and read_assignment(admin, LAYOUT, "202409-2") == got
    # r3 and r4 gone: the two active replicas span one domain, too few for RF 2 (F1's refusal).
    reps["r3"].close()
    reps["r4"].close()
    with pytest.raises(NotEnoughActiveReplicas, match="span 1 fault domains"):
        replica_allocate(reps["r1"], LAYOUT, "r1", "202409-0", 2)
    assert read_assignment(admin, LAYOUT, "202409-0") is None


def test_a_domain_declared_by_some_replicas_only_is_refused(cluster):
    from protocol.placement import publish_placement
    _, admin, reps = cluster
    publish_placement(reps["r1"], LAYOUT, "r1", domain="a")
    with pytest.raises(GuardFailed, match="declares none"):
        replica_allocate(reps["r1"], LAYOUT, "r1", "202409-1", 2)
    assert read_assignment(admin, LAYOUT, "202409-1") is None


def test_forced_owners_by_partition_counts(cluster):
    # The spec's LeastLoaded(rf) as a guard on a forced choice (conformance replay): rf distinct
    # active replicas, none more loaded than a replica left out; ties are free.
    _, admin, reps = cluster
    free = replica_choose_owners(reps["r1"], LAYOUT, "r1", "202410-0", 2, owners=("r3", "r1"))
    assert (free.replica, free.partition, free.owners) == ("r1", "202410-0", ("r1", "r3"))  # all loads 0: a tie
    assert replica_choose_owners(reps["r1"], LAYOUT, "r1", "202410-0", 4, owners=("r4", "r3", "r2", "r1")).owners \
        == ("r1", "r2", "r3", "r4")
    for bad in (("r1",), ("r1", "r5"), ("r1", "r1")):
        with pytest.raises(GuardFailed, match="least-loaded"):
            replica_choose_owners(reps["r1"], LAYOUT, "r1", "202410-0", 2, owners=bad)
    for p, owners in (("202410-1", ("r1", "r2")), ("202410-2", ("r1", "r3"))):
        admin.create(LAYOUT.assignment(p), Assignment(owners).encode())
    # loads r1 2, r2 1, r3 1, r4 0: r4 with either of r2, r3 (a tie between them), never r1
    assert replica_choose_owners(reps["r1"], LAYOUT, "r1", "202410-0", 2, owners=("r4", "r2")).owners == ("r2", "r4")
    with pytest.raises(GuardFailed, match="least-loaded"):
        replica_choose_owners(reps["r1"], LAYOUT, "r1", "202410-0", 2, owners=("r4", "r1"))


def test_short_assignment_bug_with_declared_domains(cluster):
    # allow_short_assignment (the RFC as written, ReplicationFactorInv broken) takes the replicas
    # there are, domains declared or not: the domain rule applies only with rf active replicas.
    from protocol.placement import publish_placement
    _, _, reps = cluster
    for r, d in {"r1": "a", "r2": "a", "r3": "b", "r4": "b"}.items():
        publish_placement(reps[r], LAYOUT, r, domain=d)
    for r in ("r2", "r3", "r4"):
        reps[r].close()
    short = replica_allocate(reps["r1"], LAYOUT, "r1", "202411-0", 2, frozenset({"allow_short_assignment"}))
    assert short.owners == ("r1",)
