"""MERGE_PARTS and MUTATE_PART on both backends: the owner that selects a merge merges locally, the
other owner merges its own copies or fetches the result, the non-owner skips the entry, and a merge
never covers a block number that has no part yet; a part mutation rewrites its part where it is
and is fetched where it is not."""

import pytest
from cluster_helpers import LAYOUT, P, build_cluster, drain

from protocol.assignment import GuardFailed
from protocol.replica import held_block_numbers, lock_block_number, release_lock


def row(i):
    return {"date": "2024-01-15", "user_id": 21, "event": f"e{i}"}


@pytest.fixture
def cluster(connect, tmp_path):
    return build_cluster(connect, tmp_path)


def parts_znodes(admin, r):
    """replicas/{r}/parts; each znode empty, as every part znode the reference writes."""
    names = sorted(admin.get_children(LAYOUT.parts(r)))
    assert all(admin.get(f"{LAYOUT.parts(r)}/{n}")[0] == b"" for n in names)
    return names


def test_merge_on_the_selecting_owner_and_the_other_owner(cluster):
    admin, reps = cluster
    for i in range(2):
        reps["r1"].replica_write_insert(P, [row(i)], f"h{i}")
    for r in reps.values():
        drain(r)
    entry = reps["r1"].replica_select_merge(P)
    assert entry.source_parts == (f"{P}_0_0_0", f"{P}_1_1_0") and entry.new_part_name == f"{P}_0_1_1"
    assert admin.get(f"{LAYOUT.log}/{admin.get_children(LAYOUT.log)[-1]}")[0].decode().endswith(
        f"merge\n{P}_0_0_0\n{P}_1_1_0\ninto\n{P}_0_1_1\ndeduplicate: 0\n")  # ClickHouse's own text
    for r in reps.values():
        drain(r)
    for r in ("r1", "r2"):
        assert [str(n) for n in reps[r].store.names(P)] == [f"{P}_0_1_1"]
        # The merged-away parts stay registered, outdated, until old_parts_lifetime has passed.
        assert parts_znodes(admin, r) == [f"{P}_0_0_0", f"{P}_0_1_1", f"{P}_1_1_0"]
        assert reps[r].replica_clear_old_parts(lifetime=3600) == []
        assert reps[r].replica_clear_old_parts(lifetime=0) == [f"{P}_0_0_0", f"{P}_1_1_0"]
        assert parts_znodes(admin, r) == [f"{P}_0_1_1"]
        assert sorted(x["event"] for x in reps[r].has_rows_of(P)) == ["e0", "e1"]
    assert reps["r3"].store.names(P) == [] and reps["r3"].queue() == []


def test_an_owner_without_the_sources_fetches_the_merged_part(cluster):
    admin, reps = cluster
    for i in range(2):
        reps["r1"].replica_write_insert(P, [row(i)], f"h{i}")
    drain(reps["r1"])
    reps["r1"].replica_select_merge(P)
    drain(reps["r1"])  # r1 merged before r2 fetched anything
    drain(reps["r2"])  # the GET_PARTs are covered by 0_1_1 on r1, and the MERGE_PARTS fetches it
    assert [str(n) for n in reps["r2"].store.names(P)] == [f"{P}_0_1_1"]
    assert parts_znodes(admin, "r2") == [f"{P}_0_1_1"]
    assert reps["r2"].queue() == []


def test_merge_never_covers_a_block_number_whose_lock_is_held_but_crosses_a_freed_gap(cluster):
    """Block 1's lock is held: its INSERT has not committed, and merging 0 and 2 into 0_2_1 would
    make block 1's GET_PART look covered (its rows lost). Once the lock goes without a commit, 1 is a
    freed gap no part will fill, and ClickHouse merges across it."""
    admin, reps = cluster
    reps["r1"].replica_write_insert(P, [row(0)], "h0")
    lock, number = lock_block_number(admin, LAYOUT, P)  # an INSERT in flight takes block 1
    assert number == 1 and admin.get_children(LAYOUT.block_numbers(P)) == ["block-0000000001"]
    reps["r1"].replica_write_insert(P, [row(2)], "h2")
    drain(reps["r1"])
    with pytest.raises(GuardFailed, match="lock is held between"):
        reps["r1"].replica_select_merge(P)
    release_lock(admin, lock)  # the INSERT failed: nothing will ever be numbered 1
    assert reps["r1"].replica_select_merge(P).new_part_name == f"{P}_0_2_1"
    drain(reps["r1"])
    assert [str(n) for n in reps["r1"].store.names(P)] == [f"{P}_0_2_1"]


def test_block_numbers_are_locks_released_at_commit_and_a_duplicate_takes_none(cluster):
    """block_numbers/{p}/ is empty at rest; a deduplicated INSERT does not take a number, so the
    next one gets the next number in line, as on a real server."""
    admin, reps = cluster
    assert reps["r1"].replica_write_insert(P, [row(0)], "h0") == f"{P}_0_0_0"
    assert reps["r1"].replica_write_insert(P, [row(0)], "h0") == "deduplicated"
    assert reps["r1"].replica_write_insert(P, [row(1)], "h1") == f"{P}_1_1_0"
    assert admin.get_children(LAYOUT.block_numbers(P)) == []
    assert admin.get(f"{LAYOUT.blocks}/{P}_h1")[0] == f"{P}_1_1_0".encode()  # the id names its part


def test_non_owner_cannot_select_a_merge(cluster):
    _, reps = cluster
    with pytest.raises(GuardFailed, match="ReplicaSelectMerge"):
        reps["r3"].replica_select_merge(P)


def test_merge_blocked_during_clone_when_the_policy_says_so(cluster):
    from protocol.migration import admin_reassign
    admin, reps = cluster
    for i in range(2):
        reps["r1"].replica_write_insert(P, [row(i)], f"h{i}")
    drain(reps["r1"])
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    reps["r1"].replica_refresh_cache(P)
    with pytest.raises(GuardFailed, match="merges and mutations are blocked"):
        reps["r1"].replica_select_merge(P, block_during_clone=True)
    assert reps["r1"].replica_select_merge(P).type == "MERGE_PARTS"  # the other policy merges


def test_only_an_owner_caught_up_on_the_partition_selects(cluster):
    """Its parts are then what the whole log makes of the partition: a merge selected from a
    view that misses a pending entry could overlap one already in the log."""
    admin, reps = cluster
    for i in range(2):
        reps["r1"].replica_write_insert(P, [row(i)], f"h{i}")
    with pytest.raises(GuardFailed, match="not caught up"):
        reps["r1"].replica_select_merge(P)   # its own GET_PARTs are in the log, not pulled yet
    drain(reps["r1"])
    reps["r1"].replica_select_merge(P)


def test_system_tables_show_the_queue_and_the_assignment(cluster):
    from protocol.system_tables import all_tables
    admin, reps = cluster
    reps["r1"].replica_write_insert(P, [row(0)], "h0")
    reps["r2"].replica_pull_log()  # queued, not executed
    t = all_tables(admin, LAYOUT, {r: rep.store for r, rep in reps.items()})
    by_name = {x["replica_name"]: x for x in t["system.replicas"]}
    assert by_name["r1"]["parts"] == 1 and by_name["r1"]["partitions_on_disk"] == [P]
    assert by_name["r2"]["log_pointer"] == 1 and by_name["r2"]["queue_size"] == 1
    assert by_name["r3"]["assigned_partitions"] == [] and by_name["r1"]["assigned_partitions"] == [P]
    assert [(x["replica_name"], x["type"], x["new_part_name"]) for x in t["system.replication_queue"]] == [
        ("r2", "GET_PART", f"{P}_0_0_0")]
    assert t["system.selective_assignments"][0]["replicas"] == ["r1", "r2"]


# --- MUTATE_PART: one part at a time, to the number of the last mutation it owes --------------

Q = "202402-5"
NOW = 1_700_000_000


def events(rep, partition=P):
    return sorted(r["event"] for r in rep.has_rows_of(partition))


def run_nodes(rep, kind):
    """Execute the queued entries of one type in queue order; what each returned."""
    return [rep.replica_execute_entry(node) for node, e in rep.queue() if e.type == kind]


def test_a_mutation_rewrites_a_merged_part_under_its_name_and_only_up_to_its_own_number(cluster):
    from protocol.mutations import MutationEntry
    from protocol.replica import client_mutate
    admin, reps = cluster
    r1, r2 = reps["r1"], reps["r2"]
    for i in range(2):
        r1.replica_write_insert(P, [row(i)], f"h{i}")
    for r in reps.values():
        drain(r)
    r1.replica_select_merge(P)
    for r in reps.values():
        drain(r)
    first = client_mutate(admin, LAYOUT, "UPDATE event = 'x' WHERE 1", source_replica="r1", clock=lambda: NOW)
    [node] = admin.get_children(LAYOUT.mutations)
    assert MutationEntry.parse(admin.get(f"{LAYOUT.mutations}/{node}")[0]) == first
    assert (first.block_numbers, first.source_replica, first.create_time) == (((P, 2),), "r1", NOW)
    entry = r1.replica_select_mutation(P)
    assert (entry.source_parts, entry.new_part_name) == ((f"{P}_0_1_1",), f"{P}_0_1_1_2")
    # A second mutation arrives before the MUTATE_PART runs: the part is rewritten with the first
    # only (it is named _2); the second gets its own MUTATE_PART later.
    client_mutate(admin, LAYOUT, "UPDATE event = 'y' WHERE 1", source_replica="r1")
    for r in (r1, r2):
        r.pull_whole_log()
        assert run_nodes(r, "MUTATE_PART") == [f"mutated {P}_0_1_1 to {P}_0_1_1_2"]
        assert [str(n) for n in r.store.names(P)] == [f"{P}_0_1_1_2"] and events(r) == ["x", "x"]
        assert f"{P}_0_1_1_2" in parts_znodes(admin, r.name)
    assert r1.replica_select_mutation(P).new_part_name == f"{P}_0_1_1_3"


def test_mutate_part_picks_the_part_it_names_in_its_own_partition(cluster):
    from protocol.assignment import Assignment
    from protocol.replica import client_mutate
    admin, reps = cluster
    admin.create(LAYOUT.assignment(Q), Assignment(("r1", "r2")).encode())
    r1, r2 = reps["r1"], reps["r2"]
    for rep in reps.values():
        rep.load_map()
    r1.replica_write_insert(P, [row(0)], "h0")
    r1.replica_write_insert(P, [row(1)], "h1")
    r1.replica_write_insert(Q, [{"date": "2024-02-15", "user_id": 21, "event": "q"}], "hq")
    for r in reps.values():
        drain(r)
    client_mutate(admin, LAYOUT, "UPDATE event = 'x' WHERE 1", source_replica="r1")   # P at 2, Q at 1
    picked = r1.replica_select_mutation(P, part=f"{P}_1_1_0")
    assert (picked.source_parts, picked.new_part_name) == ((f"{P}_1_1_0",), f"{P}_1_1_0_2")
    q = r1.replica_select_mutation(Q)
    assert (q.source_parts, q.new_part_name) == ((f"{Q}_0_0_0",), f"{Q}_0_0_0_1")
    with pytest.raises(GuardFailed, match=f"no part of {P} on r1 owes a mutation \\({P}_9_9_0\\)") as refused:
        r1.replica_select_mutation(P, part=f"{P}_9_9_0")
    assert refused.value.action == "ReplicaSelectMutation"
    # r2 holds P_0_0_0, P_1_1_0 and Q_0_0_0: each MUTATE_PART rewrites the part of its own
    # partition and block range, not another at the same blocks or at an older mutation.
    r2.pull_whole_log()
    assert run_nodes(r2, "MUTATE_PART") == [f"mutated {P}_1_1_0 to {P}_1_1_0_2", f"mutated {Q}_0_0_0 to {Q}_0_0_0_1"]
    assert [str(n) for n in r2.store.names()] == [f"{P}_0_0_0", f"{P}_1_1_0_2", f"{Q}_0_0_0_1"]
    assert events(r2) == ["e0", "x"] and events(r2, Q) == ["x"]


def test_an_owner_without_the_part_fetches_the_mutated_one_from_the_source_it_is_told(cluster):
    from protocol.replica import client_mutate
    admin, reps = cluster
    r1, r2 = reps["r1"], reps["r2"]
    r1.replica_write_insert(P, [row(0)], "h0")
    r1.replica_write_insert(P, [row(1)], "h1")
    drain(r1)                       # r2 has pulled nothing yet: it has no part of P
    client_mutate(admin, LAYOUT, "UPDATE event = 'x' WHERE 1", source_replica="r1")
    r1.replica_select_mutation(P, part=f"{P}_1_1_0")
    drain(r1)                       # caught up again: it selects the next one
    r1.replica_select_mutation(P, part=f"{P}_0_0_0")
    drain(r1)
    assert [str(n) for n in r1.store.names(P)] == [f"{P}_0_0_0_2", f"{P}_1_1_0_2"]
    r2.pull_whole_log()
    [(mutate_1, _), (mutate_0, _)] = [(n, e) for n, e in r2.queue() if e.type == "MUTATE_PART"]
    with pytest.raises(GuardFailed, match="no replica has a part covering"):
        r2.replica_execute_entry(mutate_1, source="r3")   # the named source has nothing
    # From r1: the part covering the entry's at its mutation, not r1's first mutated part.
    assert r2.replica_execute_entry(mutate_1, source="r1") == f"fetched {P}_1_1_0_2 from r1"
    get_0 = next(n for n, e in r2.queue() if e.type == "GET_PART")
    with pytest.raises(GuardFailed, match="no replica has a part covering"):
        r2.replica_execute_entry(get_0, source="r3")     # a GET_PART too fetches only from the source named
    assert [r2.replica_execute_entry(n) for n, e in r2.queue() if e.type == "GET_PART"] == [
        f"fetched {P}_0_0_0_2 from r1", "covered"]          # GET_PARTs of 0_0_0 and 1_1_0
    assert r2.replica_execute_entry(mutate_0) == "covered"  # already at the mutation's number
    assert r2.queue() == [] and events(r2) == ["x", "x"]
    assert parts_znodes(admin, "r2") == [f"{P}_0_0_0_2", f"{P}_1_1_0_2"]


def test_a_merge_takes_the_first_pair_and_optimize_final_takes_every_part(cluster):
    # Both name the spec action in their refusals, and a merged part keeps its sources' mutation.
    from protocol.replica import client_mutate
    admin, reps = cluster
    r1 = reps["r1"]
    for i in range(3):
        r1.replica_write_insert(P, [row(i)], f"h{i}")
    with pytest.raises(GuardFailed, match="not caught up") as behind:
        r1.replica_select_merge(P)
    with pytest.raises(GuardFailed) as not_owner:
        reps["r3"].replica_select_merge(P)
    assert behind.value.action == not_owner.value.action == "ReplicaSelectMerge"
    drain(r1)
    # From a session that is no replica (the admin's): the mutation names none.
    assert client_mutate(admin, LAYOUT, "UPDATE event = 'x' WHERE 1").source_replica == ""   # number 3
    for part in ("0_0_0", "1_1_0", "2_2_0"):
        r1.replica_select_mutation(P, part=f"{P}_{part}")
        drain(r1)
    first = r1.replica_select_merge(P, block_during_clone=True)   # no migration: nothing blocks it
    assert (first.source_parts, first.new_part_name) == ((f"{P}_0_0_0_3", f"{P}_1_1_0_3"), f"{P}_0_1_1_3")
    drain(r1)
    for i in (4, 5):
        r1.replica_write_insert(P, [row(i)], f"h{i}")     # blocks 4 and 5, at no mutation
    drain(r1)
    # FINAL when not every part may merge with its neighbour (0_1_1_3 and 4_4_0 differ in
    # mutation): the first pair, as without FINAL.
    partial = r1.replica_select_merge(P, final=True)
    assert (partial.source_parts, partial.new_part_name) == ((f"{P}_0_1_1_3", f"{P}_2_2_0_3"), f"{P}_0_2_2_3")
    drain(r1)
    client_mutate(admin, LAYOUT, "UPDATE event = 'y' WHERE 1")        # number 6, owed by every part
    for part in ("0_2_2_3", "4_4_0", "5_5_0"):
        r1.replica_select_mutation(P, part=f"{P}_{part}")
        drain(r1)
    final = r1.replica_select_merge(P, final=True)
    assert (final.source_parts, final.new_part_name) == (
        (f"{P}_0_2_2_6", f"{P}_4_4_0_6", f"{P}_5_5_0_6"), f"{P}_0_5_3_6")
    drain(r1)
    assert [str(n) for n in r1.store.names(P)] == [f"{P}_0_5_3_6"] and events(r1) == ["y"] * 5


def test_select_mutation_refusals_name_the_action_and_the_part(cluster):
    from protocol.migration import admin_reassign
    from protocol.replica import client_mutate
    admin, reps = cluster
    r1 = reps["r1"]
    with pytest.raises(GuardFailed) as not_owner:
        reps["r3"].replica_select_mutation(P)
    r1.replica_write_insert(P, [row(0)], "h0")
    drain(r1)
    with pytest.raises(GuardFailed) as nothing_owed:
        r1.replica_select_mutation(P)
    assert str(nothing_owed.value) == f"ReplicaSelectMutation: no part of {P} on r1 owes a mutation"
    client_mutate(admin, LAYOUT, "UPDATE event = 'x' WHERE 1")
    r1.replica_write_insert(P, [row(1)], "h1")   # its GET_PART is in the log, not pulled yet
    with pytest.raises(GuardFailed, match="r1 is not caught up") as behind:
        r1.replica_select_mutation(P)
    drain(r1)
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    r1.replica_refresh_cache(P)
    with pytest.raises(GuardFailed, match="merges and mutations are blocked") as in_clone:
        r1.replica_select_mutation(P, block_during_clone=True)
    assert {e.value.action for e in (not_owner, nothing_owed, behind, in_clone)} == {"ReplicaSelectMutation"}
    client_mutate(admin, LAYOUT, "UPDATE event = 'y' WHERE 1")
    assert r1.replica_select_mutation(P).new_part_name == f"{P}_0_0_0_3"   # the other policy (the default)


def test_a_block_number_lock_goes_with_the_session_that_took_it(cluster, connect):
    """An INSERT whose replica dies mid-write must not hold its number for good: the lock is
    ephemeral, so merges across the number are possible again once the session is gone."""
    admin, reps = cluster
    session = connect()
    lock, number = lock_block_number(session, LAYOUT, P, holder="r9")
    assert held_block_numbers(admin, LAYOUT, P) == [number] == [0]
    session.close()
    assert held_block_numbers(admin, LAYOUT, P) == []
    assert admin.get_children(LAYOUT.block_numbers(P)) == []


def test_caught_up_reads_the_queue_and_the_next_log_entry_of_the_partition_only(cluster):
    from protocol.assignment import Assignment
    admin, reps = cluster
    admin.create(LAYOUT.assignment(Q), Assignment(("r1", "r2")).encode())
    r1 = reps["r1"]
    r1.load_map()
    for i in range(2):
        r1.replica_write_insert(P, [row(i)], f"h{i}")
    drain(r1)
    r1.replica_write_insert(P, [row(2)], "h2")
    with pytest.raises(GuardFailed, match="not caught up"):
        r1.replica_select_merge(P)       # one entry of P in the log, the very next to pull
    r1.replica_pull_log()
    with pytest.raises(GuardFailed, match="not caught up"):
        r1.replica_select_merge(P)       # pulled, still queued
    drain(r1)
    r1.replica_write_insert(Q, [{"date": "2024-02-15", "user_id": 21, "event": "q"}], "hq")
    r1.replica_pull_log()                # Q's GET_PART queued: nothing of P pending
    assert r1.replica_select_merge(P).new_part_name == f"{P}_0_1_1"


def test_old_parts_are_unregistered_after_their_lifetime_on_the_replicas_clock(cluster):
    admin, reps = cluster
    r1 = reps["r1"]
    now = [1000.0]
    r1.clock = lambda: now[0]
    for i in range(2):
        r1.replica_write_insert(P, [row(i)], f"h{i}")
    drain(r1)
    r1.replica_select_merge(P)
    drain(r1)
    # A registered part not on disk that r1 does not know as outdated (a restart forgot when):
    # outdated from now on.
    admin.create(f"{LAYOUT.parts('r1')}/{P}_7_7_0", b"")
    now[0] = 1010.0
    assert r1.replica_clear_old_parts(lifetime=10) == [f"{P}_0_0_0", f"{P}_1_1_0"]   # exactly 10 s old
    assert r1.replica_clear_old_parts(lifetime=10) == []
    now[0] = 1020.0
    assert r1.replica_clear_old_parts(lifetime=10) == [f"{P}_7_7_0"]
    assert parts_znodes(admin, "r1") == [f"{P}_0_1_1"] and r1.outdated == {}
