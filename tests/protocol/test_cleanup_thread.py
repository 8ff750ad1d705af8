"""The cleanup thread on both backends: the log is trimmed only below every replica that still
pulls it, a replica that is down too far behind is marked lost instead of holding it back, and
blocks/ keeps the dedup window (an INSERT retried after its id went is written again)."""

import pytest
from cluster_helpers import LAYOUT, P, build_cluster, drain

from protocol.assignment import GuardFailed
from protocol.cleanup_thread import CleanupSettings, cleanup_clear_old_blocks, cleanup_clear_old_logs
from protocol.registration import register_replica
from protocol.replica import Replica


def row(i):
    return {"date": "2024-01-15", "user_id": 21, "event": f"e{i}"}


@pytest.fixture
def cluster(connect, tmp_path):
    return build_cluster(connect, tmp_path)


def test_the_log_is_trimmed_below_the_slowest_replica_that_is_up_keeping_the_last_ones(cluster):
    admin, reps = cluster
    for i in range(5):
        reps["r1"].replica_write_insert(P, [row(i)], f"h{i}")
    drain(reps["r1"])
    drain(reps["r2"])
    for _ in range(2):
        reps["r3"].replica_pull_log()   # r3 is up but slow: at 2
    settings = CleanupSettings(min_logs_to_keep=1, max_logs_to_keep=1)
    assert cleanup_clear_old_logs(admin, LAYOUT, settings) == 2
    assert admin.get_children(LAYOUT.log)[0] == "log-0000000002"  # r3's next entry is still there
    drain(reps["r3"])
    assert cleanup_clear_old_logs(admin, LAYOUT, settings) == 2   # the last one is kept
    assert admin.get_children(LAYOUT.log) == ["log-0000000004"]
    with pytest.raises(GuardFailed, match="nothing to remove"):
        cleanup_clear_old_logs(admin, LAYOUT, settings)
    assert all(admin.get(LAYOUT.is_lost(r))[0] == b"0" for r in reps)  # up replicas are never lost


def test_a_replica_down_too_far_behind_is_marked_lost_and_refuses_to_pull_until_it_clones(connect, cluster):
    admin, reps = cluster
    drain(reps["r3"])
    connect.expire(reps["r3"].keeper)
    for i in range(3):
        reps["r1"].replica_write_insert(P, [row(i)], f"h{i}")
    drain(reps["r1"])
    drain(reps["r2"])
    with pytest.raises(GuardFailed, match="nothing to remove"):   # 3 behind is within 5: r3 holds it back
        cleanup_clear_old_logs(admin, LAYOUT, CleanupSettings(min_logs_to_keep=0, max_logs_to_keep=5))
    assert cleanup_clear_old_logs(admin, LAYOUT, CleanupSettings(min_logs_to_keep=0, max_logs_to_keep=2)) == 3
    assert admin.get(LAYOUT.is_lost("r3"))[0] == b"1"
    back = Replica("r3", connect(), LAYOUT, reps["r3"].store, reps["r3"].peers)
    register_replica(back.keeper, LAYOUT, "r3")   # back, but not cloned yet
    with pytest.raises(GuardFailed, match="is lost and must clone"):
        back.replica_pull_log()   # its next entries are gone


def test_dedup_window_keeps_the_newest_ids_and_an_insert_retried_after_its_id_went_is_written_again(cluster):
    """replicated_deduplication_window (MCRetryBeyondDedupWindow): the base protocol's bound."""
    admin, reps = cluster
    for i in range(3):
        reps["r1"].replica_write_insert(P, [row(i)], f"h{i}")
    assert cleanup_clear_old_blocks(admin, LAYOUT, CleanupSettings(dedup_window=2)) == 1
    assert sorted(admin.get_children(LAYOUT.blocks)) == [f"{P}_h1", f"{P}_h2"]   # the oldest went
    assert reps["r1"].replica_write_insert(P, [row(2)], "h2") == "deduplicated"
    assert reps["r1"].replica_write_insert(P, [row(0)], "h0") == f"{P}_3_3_0"   # written twice now
    assert sorted(x["event"] for x in reps["r1"].has_rows_of(P)) == ["e0", "e0", "e1", "e2"]


def test_dedup_window_in_seconds_keeps_only_ids_near_the_newest(cluster):
    admin, reps = cluster
    for i in range(3):
        reps["r1"].replica_write_insert(P, [row(i)], f"h{i}")
    newest = max(admin.exists(f"{LAYOUT.blocks}/{n}").ctime for n in admin.get_children(LAYOUT.blocks))
    older = [n for n in admin.get_children(LAYOUT.blocks) if admin.exists(f"{LAYOUT.blocks}/{n}").ctime < newest]
    assert cleanup_clear_old_blocks(admin, LAYOUT, CleanupSettings(dedup_window_seconds=0)) == len(older)
    assert len(admin.get_children(LAYOUT.blocks)) == 3 - len(older)


@pytest.mark.parametrize("bad", [dict(max_logs_to_keep=0), dict(dedup_window=-1), dict(min_logs_to_keep=-2)])
def test_settings_out_of_range_are_refused_naming_the_setting(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        CleanupSettings(**bad)
