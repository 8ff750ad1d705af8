"""RepairStart's guard, one clause per test (issue 37; tests/README.md's table): a partition short
of RF after SYSTEM DROP REPLICA gets a CLONE with no source only when the spec's RepairStart(p, c,
dst) is enabled. Each test makes exactly one clause false, so the repair is refused by it alone;
without that clause it would start. On both backends, from make_cluster's r1..r3 with P on r1, r2."""

import pytest
from cluster_helpers import LAYOUT, P

from protocol.assignment import read_assignment
from protocol.migration import MigrationError, read_migration
from protocol.repair import drop_replica, repair_start


def _r2_dropped(make_cluster, connect):
    """r2 lost for good: P is short, owned by r1 alone."""
    admin, reps = make_cluster()
    connect.expire(reps["r2"].keeper)
    assert drop_replica(admin, LAYOUT, "r2") == [P]
    assert read_assignment(admin, LAYOUT, P).owners == ("r1",)
    return admin, reps


def _refused(admin, coord, dst, match):
    before = read_migration(admin, LAYOUT, P)[0]
    with pytest.raises(MigrationError, match=match):
        repair_start(admin, LAYOUT, P, coord, dst)
    assert read_migration(admin, LAYOUT, P)[0] == before and read_assignment(admin, LAYOUT, P).target is None


def test_the_repair_of_a_partition_with_its_rf_owners_is_refused(make_cluster):
    admin, _ = make_cluster()
    _refused(admin, "r1", "r3", "has its 2 owners: nothing to repair")


def test_a_second_repair_of_a_partition_is_refused_while_one_is_in_flight(make_cluster, connect):
    admin, _ = _r2_dropped(make_cluster, connect)
    repair_start(admin, LAYOUT, P, "r1", "r3")
    before = read_migration(admin, LAYOUT, P)[0]
    with pytest.raises(MigrationError, match="already migrating"):
        repair_start(admin, LAYOUT, P, "r1", "r3")
    assert read_migration(admin, LAYOUT, P)[0] == before


def test_a_repair_coordinated_by_a_replica_that_is_no_owner_is_refused(make_cluster, connect):
    admin, _ = _r2_dropped(make_cluster, connect)
    _refused(admin, "r3", "r3", "coordinator 'r3' of the repair of .* is not an active owner")


def test_a_repair_coordinated_by_an_owner_that_is_down_is_refused(make_cluster, connect):
    admin, reps = _r2_dropped(make_cluster, connect)
    connect.expire(reps["r1"].keeper)
    _refused(admin, "r1", "r3", "coordinator 'r1' of the repair of .* is not an active owner")


def test_a_repair_to_a_replica_that_is_down_is_refused(make_cluster, connect):
    admin, reps = _r2_dropped(make_cluster, connect)
    connect.expire(reps["r3"].keeper)
    _refused(admin, "r1", "r3", "replica 'r3' is not active")


def test_a_repair_to_a_replica_that_keeps_the_partition_is_refused(make_cluster, connect):
    admin, _ = _r2_dropped(make_cluster, connect)
    _refused(admin, "r1", "r1", "replica 'r1' already keeps")
