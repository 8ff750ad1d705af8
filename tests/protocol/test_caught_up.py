"""SWITCH's gate read directly (issue 37): protocol.replica.caught_up_to, the spec's
CaughtUpTo(r, p, upto), and caught_up, the gate of a migration fetched before positions were fixed
(to the end of the log). Each assertion states one clause: an entry of the partition in the log
between the replica's log_pointer and the position blocks, one of another partition does not; a
queued entry pulled from below the position blocks, one pulled from at or past it does not (F23:
SWITCH waits only up to the position its fetch fixed)."""

from cluster_helpers import LAYOUT, P

from protocol.replica import caught_up, caught_up_to

OTHER = "202402-5"
ROWS = [{"date": "2024-01-15", "user_id": 21, "event": "click"}]


def _two_writes_around_the_position(reps):
    """h1 at log-0, the position fixed at 1 (the log's length then), h2 at log-1."""
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    reps["r1"].replica_write_insert(P, [{**ROWS[0], "user_id": 37}], "h2")
    return 1


def test_an_entry_of_the_partition_below_the_position_and_not_pulled_blocks(make_cluster):
    admin, reps = make_cluster()
    upto = _two_writes_around_the_position(reps)
    assert not caught_up_to(admin, LAYOUT, "r3", P, upto)        # log-0, at r3's log_pointer 0
    assert caught_up_to(admin, LAYOUT, "r3", OTHER, upto)         # another partition's entries do not


def test_a_queued_entry_blocks_only_if_it_was_pulled_from_below_the_position(make_cluster):
    admin, reps = make_cluster()
    upto = _two_writes_around_the_position(reps)
    r2 = reps["r2"]
    r2.pull_whole_log()                                           # both queued, log_pointer 2
    assert not caught_up_to(admin, LAYOUT, "r2", P, upto)         # h1's GET_PART is from log-0
    first = min(node for node, _ in r2.queue())
    r2.replica_execute_entry(first)                               # h1 fetched; h2's GET_PART still queued
    assert caught_up_to(admin, LAYOUT, "r2", P, upto)             # from log-1, at the position: not waited for


def test_the_gate_to_the_end_waits_for_every_entry_pulled_or_not(make_cluster):
    """caught_up: what a migration record with no position waits for."""
    admin, reps = make_cluster()
    _two_writes_around_the_position(reps)
    assert not caught_up(admin, LAYOUT, "r3", P)                  # not pulled
    assert caught_up(admin, LAYOUT, "r3", OTHER)
    r2 = reps["r2"]
    r2.pull_whole_log()
    assert not caught_up(admin, LAYOUT, "r2", P)                  # pulled, queued
    for node, _ in sorted(r2.queue()):
        r2.replica_execute_entry(node)
    assert caught_up(admin, LAYOUT, "r2", P)
