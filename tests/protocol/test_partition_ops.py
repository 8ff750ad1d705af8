"""The partition-wide ALTERs of 18.16 on the in-memory keeper: REPLACE PARTITION (REPLACE_RANGE),
DETACH and ATTACH PARTITION (a `detach` DROP_RANGE, then GET_PARTs under new numbers) and CLEAR
COLUMN (CLEAR_COLUMN over a range). agreement/ holds the same steps to a real ClickHouse (aspects
replace_partition, detach_attach, clear_column: log entries, blocks/, block_numbers/, parts, rows);
these tests check what it compares, step by step, where mutmut's tests can see it (issue 18)."""

import re

import pytest
from cluster_helpers import LAYOUT, P, build_cluster, drain

from protocol.assignment import Assignment, GuardFailed
from protocol.log_entry import CLEAR_COLUMN, DROP_RANGE, GET_PART, REPLACE_RANGE, LogEntry, ReplaceRange
from protocol.parts import PartName
from protocol.replica import (client_attach_partition, client_clear_column, client_detach_partition,
                              client_drop_partition, client_mutate, client_replace_partition, held_block_numbers)

Q = "202402-5"
NOW = 1_700_000_000
A = [{"date": "2024-01-15", "user_id": 21, "event": "click"}]
B = [{"date": "2024-01-16", "user_id": 21, "event": "buy"}]
OTHER = [{"date": "2024-02-15", "user_id": 21, "event": "view"}]


@pytest.fixture
def cluster(connect, tmp_path):
    """r1..r3; P and Q owned by r1 and r2; every replica's entries stamped at NOW."""
    admin, reps = build_cluster(connect, tmp_path, load_maps=False)
    admin.create(LAYOUT.assignment(Q), Assignment(("r1", "r2")).encode())
    for rep in reps.values():
        rep.clock = lambda: NOW
        rep.load_map()
    return admin, reps


def logged(admin) -> list[LogEntry]:
    """The log's entries in order; every node a sequential log-NNNNNNNNNN (log_pointer counts them)."""
    names = sorted(admin.get_children(LAYOUT.log))
    assert all(re.fullmatch(r"log-\d{10}", n) for n in names), names
    return [LogEntry.parse(admin.get(f"{LAYOUT.log}/{n}")[0]) for n in names]


def registered(admin, replica: str, partition: str) -> list[str]:
    """replicas/{r}/parts of one partition; each znode empty, as every part znode the reference writes."""
    names = sorted(n for n in admin.get_children(LAYOUT.parts(replica)) if n.startswith(partition + "_"))
    assert all(admin.get(f"{LAYOUT.parts(replica)}/{n}")[0] == b"" for n in names)
    return names


def blocks_of(admin, partition: str) -> list[str]:
    return sorted(n for n in admin.get_children(LAYOUT.blocks) if n.startswith(partition + "_"))


def run_queue(rep) -> dict[str, str]:
    """Pull the whole log, then execute each queued entry once; what each execution returned, by type."""
    rep.pull_whole_log()
    return {e.type: rep.replica_execute_entry(node) for node, e in rep.queue()}


def write_and_sync(reps, writes):
    for partition, rows, block_hash in writes:
        reps["r1"].replica_write_insert(partition, rows, block_hash)
    for r in ("r1", "r2", "r3"):
        drain(reps[r])


def test_replace_partition_logs_a_replace_range_and_every_keeper_ends_with_the_copied_part(cluster):
    admin, reps = cluster
    r1, r2, r3 = reps["r1"], reps["r2"], reps["r3"]
    write_and_sync(reps, [(P, A, "h1"), (Q, OTHER, "hq")])
    entry = client_replace_partition(r1, P, B, "t_src", source_parts=("all_3_3_0",))
    # Block 1 is the drop's (its range: every block up to it, at the legacy top level), 2 the new part's.
    new = PartName.parse(f"{P}_2_2_0")
    assert entry == LogEntry(REPLACE_RANGE, source_replica="r1", create_time=NOW, replace=ReplaceRange(
        f"{P}_0_1_4294967295", "default", "t_src", ("all_3_3_0",), (str(new),), (r1.store.checksum(new),), 0))
    assert logged(admin)[-1] == entry
    assert r1.store.read(new) == B and registered(admin, "r1", P) == [f"{P}_0_0_0", str(new)]
    assert held_block_numbers(admin, LAYOUT, P) == []          # both locks released by the commit
    assert blocks_of(admin, P) == [] and blocks_of(admin, Q) == [f"{Q}_hq"]   # the range's ids cleared
    for rep in (r1, r2):
        drain(rep)   # REPLACE_RANGE queues a GET_PART of the new part ...
        drain(rep)   # ... run here (r1 has it: covered; r2 fetches it)
        assert rep.store.names(P) == [new] and rep.has_rows_of(P) == B and rep.has_rows_of(Q) == OTHER
        assert registered(admin, rep.name, P) == [str(new)] and rep.queue() == []
        assert rep.store.detached(P) == []   # REPLACE drops its range's parts; only DETACH keeps them
    drain(r3)
    assert r3.store.names() == [] and r3.queue() == []         # not a keeper: the entry is skipped
    # The replaced block's id went with it: the same INSERT is written again, above the new part.
    assert r1.replica_write_insert(P, A, "h1") == f"{P}_3_3_0"


def test_replace_range_is_executed_as_its_drop_then_a_get_part_per_new_part(cluster):
    admin, reps = cluster
    r1, r2 = reps["r1"], reps["r2"]
    write_and_sync(reps, [(P, A, "h1"), (P, B, "h2")])
    entry = client_replace_partition(r1, P, B, "t_src")
    r2.pull_whole_log()
    [(node, queued)] = r2.queue()
    assert queued == entry
    assert r2.replica_execute_entry(node) == "replaced: 1 parts to fetch"
    # The drop is done at once (both parts in the range 0..2), the fetch is queued in the entry's place.
    assert r2.store.names(P) == [] and registered(admin, "r2", P) == [] and r2.dropped[P] == 2
    [(get_node, get)] = r2.queue()
    assert re.fullmatch(r"queue-\d{10}", get_node)
    assert get == LogEntry(GET_PART, new_part_name=f"{P}_3_3_0", source_replica="r1", create_time=NOW)
    assert r2.replica_execute_entry(get_node) == f"fetched {P}_3_3_0 from r1"
    assert r2.has_rows_of(P) == B and r2.queue() == []


def test_detach_partition_moves_the_parts_aside_and_attach_brings_them_back_under_new_numbers(cluster):
    admin, reps = cluster
    r1, r2 = reps["r1"], reps["r2"]
    write_and_sync(reps, [(P, A, "h1"), (P, B, "h2"), (Q, OTHER, "hq")])
    assert client_detach_partition(admin, LAYOUT, P, source_replica="r1", clock=lambda: NOW) == 1
    assert logged(admin)[-1] == LogEntry(DROP_RANGE, new_part_name=f"{P}_0_1_999999999", detach=True,
                                         source_replica="r1", create_time=NOW)
    assert held_block_numbers(admin, LAYOUT, P) == []
    assert blocks_of(admin, P) == [] and blocks_of(admin, Q) == [f"{Q}_hq"]   # as DROP PARTITION
    for rep in (r1, r2):
        assert run_queue(rep) == {DROP_RANGE: "applied"}
        assert rep.store.names(P) == [] and registered(admin, rep.name, P) == []
        assert rep.store.detached(P) == [(PartName.parse(f"{P}_0_0_0"), A), (PartName.parse(f"{P}_1_1_0"), B)]
        assert rep.has_rows_of(Q) == OTHER and rep.queue() == []
    before = len(logged(admin))
    # ATTACH on r1: its detached parts, each under a new number (2 was the detach's), as 18.16's
    # GET_PART with no block id; r2 fetches them and keeps its own detached copies.
    assert client_attach_partition(r1, P) == [f"{P}_3_3_0", f"{P}_4_4_0"]
    assert logged(admin)[before:] == [LogEntry(GET_PART, new_part_name=f"{P}_{n}_{n}_0", source_replica="r1",
                                               create_time=NOW) for n in (3, 4)]
    assert r1.store.detached(P) == [] and held_block_numbers(admin, LAYOUT, P) == []
    assert registered(admin, "r1", P) == [f"{P}_3_3_0", f"{P}_4_4_0"] and r1.has_rows_of(P) == A + B
    drain(r2)
    assert r2.has_rows_of(P) == A + B and registered(admin, "r2", P) == [f"{P}_3_3_0", f"{P}_4_4_0"]
    assert len(r2.store.detached(P)) == 2
    assert client_attach_partition(r1, P) == [] and len(logged(admin)) == before + 2   # nothing left to attach
    assert r1.replica_write_insert(P, A, "h1") == f"{P}_5_5_0"   # the detached blocks' ids were cleared


def test_clear_column_rewrites_the_parts_of_its_range_only(cluster):
    admin, reps = cluster
    r1, r2 = reps["r1"], reps["r2"]
    with_y = lambda rows: [{**r, "y": 7} for r in rows]  # noqa: E731
    write_and_sync(reps, [(P, with_y(A), "h1"), (P, with_y(B), "h2"), (Q, with_y(OTHER), "hq")])
    assert client_clear_column(admin, LAYOUT, P, "y", clock=lambda: NOW) == 1
    # 18.16 writes it with no source replica; its range is P's blocks so far (0..1).
    assert logged(admin)[-1] == LogEntry(CLEAR_COLUMN, new_part_name=f"{P}_0_1_999999999", column_name="y",
                                         create_time=NOW)
    assert held_block_numbers(admin, LAYOUT, P) == []
    r1.replica_write_insert(P, with_y(A + B), "h3")    # block 3, after the range: keeps its y
    for rep in (r1, r2):
        assert run_queue(rep)[CLEAR_COLUMN] == "applied"
        drain(rep)
        assert [str(n) for n in rep.store.names(P)] == [f"{P}_0_0_0", f"{P}_1_1_0", f"{P}_3_3_0"]
        assert [rep.store.read(n) for n in rep.store.names(P)] == [A, B, with_y(A + B)]
        assert rep.has_rows_of(Q) == with_y(OTHER) and rep.queue() == []
    # Not a drop: the blocks' ids stay, so a retried INSERT is still deduplicated.
    assert blocks_of(admin, P) == [f"{P}_h1", f"{P}_h2", f"{P}_h3"]
    assert r1.replica_write_insert(P, with_y(A), "h1") == "deduplicated"


def test_a_range_entry_names_the_mutation_version_its_blocks_have_reached(cluster):
    # ClickHouse names a drop range at the partition's latest mutation at or below its number: a
    # range at mutation 0 would not cover the mutated parts (P_0_0_0_2) and leave them behind.
    admin, reps = cluster
    write_and_sync(reps, [(P, A, "h1"), (P, B, "h2"), (Q, OTHER, "hq")])
    m = client_mutate(admin, LAYOUT, "UPDATE event = 'x' WHERE 1", source_replica="r1")
    assert dict(m.block_numbers)[P] == 2 and dict(m.block_numbers)[Q] == 1
    assert client_clear_column(admin, LAYOUT, P, "event", clock=lambda: NOW) == 2
    assert logged(admin)[-1].new_part_name == f"{P}_0_2_999999999_2"


def test_a_mutation_made_before_the_partition_had_data_leaves_its_range_at_version_0(cluster):
    # The mutation took a number in Q only (P had none): it says nothing of P's blocks.
    admin, reps = cluster
    write_and_sync(reps, [(Q, OTHER, "hq")])
    m = client_mutate(admin, LAYOUT, "UPDATE event = 'x' WHERE 1", source_replica="r1")
    assert m.number_in(P) is None
    write_and_sync(reps, [(P, A, "h1")])
    assert client_detach_partition(admin, LAYOUT, P, source_replica="r1", clock=lambda: NOW) == 0
    assert logged(admin)[-1].new_part_name == f"{P}_0_0_999999999"


def test_drop_partition_logs_a_drop_range_by_who_ran_it(cluster):
    admin, reps = cluster
    write_and_sync(reps, [(P, A, "h1")])
    assert client_drop_partition(admin, LAYOUT, P, source_replica="r1", clock=lambda: NOW) == 0
    assert logged(admin)[-1] == LogEntry(DROP_RANGE, new_part_name=f"{P}_0_0_999999999", source_replica="r1",
                                         create_time=NOW)
    # An ALTER from a session that is no replica (the admin's) names none, DROP and DETACH alike.
    write_and_sync(reps, [(P, B, "h2")])
    client_drop_partition(admin, LAYOUT, P, clock=lambda: NOW)
    write_and_sync(reps, [(P, B, "h3")])
    client_detach_partition(admin, LAYOUT, P, clock=lambda: NOW)
    drops = [(e.source_replica, e.detach) for e in logged(admin) if e.type == DROP_RANGE]
    assert drops == [("r1", False), ("", False), ("", True)]


def test_range_entries_refuse_a_partition_that_never_took_a_block_number(cluster):
    admin, reps = cluster
    for step in (lambda: client_clear_column(admin, LAYOUT, P, "y"),
                 lambda: client_detach_partition(admin, LAYOUT, P)):
        with pytest.raises(GuardFailed, match=f"partition {P} has no data"):
            step()
    assert admin.get_children(LAYOUT.log) == []


def test_drop_partition_refuses_a_partition_unassigned_or_without_data(cluster):
    admin, _ = cluster
    with pytest.raises(GuardFailed, match=f"ClientDropPartition: partition {P} has no data to drop"):
        client_drop_partition(admin, LAYOUT, P)
    with pytest.raises(GuardFailed, match="ClientDropPartition: partition 202403-5 is not assigned"):
        client_drop_partition(admin, LAYOUT, "202403-5")
    assert admin.get_children(LAYOUT.log) == []


def test_replace_partition_into_an_empty_partition_drops_nothing_and_keeps_the_new_part(cluster):
    # The drop takes block 0 (its range 0..0 holds no part), the new part block 1: the range must
    # not reach block 1, or every keeper would drop the part it is about to fetch.
    admin, reps = cluster
    entry = client_replace_partition(reps["r1"], P, B, "t_src")
    assert (entry.replace.drop_range_name, entry.replace.new_parts) == (f"{P}_0_0_4294967295", (f"{P}_1_1_0",))
    for rep in (reps["r1"], reps["r2"]):
        drain(rep)
        drain(rep)
        assert rep.has_rows_of(P) == B and rep.dropped[P] == 0 and rep.queue() == []
        assert rep.store.detached(P) == []   # REPLACE drops its range's parts; only DETACH keeps them


def test_entries_a_drop_made_obsolete_are_removed_without_running(cluster):
    # A GET_PART or MUTATE_PART of a part below a DROP_RANGE this replica executed (queued after it,
    # as by a clone) does nothing: its data is dropped. The drop's point is the highest executed,
    # whatever order the DROP_RANGEs ran in.
    admin, reps = cluster
    r1, r2 = reps["r1"], reps["r2"]
    r1.replica_write_insert(P, A, "h1")
    client_drop_partition(admin, LAYOUT, P, source_replica="r1")        # range 0..0
    r1.replica_write_insert(P, B, "h2")                                 # block 2
    client_drop_partition(admin, LAYOUT, P, source_replica="r1")        # range 0..2
    r2.pull_whole_log()
    drops = [node for node, e in r2.queue() if e.type == DROP_RANGE]
    assert [r2.replica_execute_entry(n) for n in reversed(drops)] == ["applied", "applied"]
    assert r2.dropped[P] == 2
    queue = LAYOUT.queue("r2")
    for obsolete in (LogEntry(GET_PART, new_part_name=f"{P}_2_2_0"),
                     LogEntry("MUTATE_PART", source_parts=(f"{P}_2_2_0",), new_part_name=f"{P}_2_2_0_4")):
        admin.create(f"{queue}/queue-", obsolete.format(), sequential=True)
    assert [r2.replica_execute_entry(n) for n, _ in r2.queue()] == ["dropped", "dropped"]
    assert r2.queue() == [] and r2.store.names(P) == []


def test_drop_part_takes_the_one_part_out_of_every_keeper_and_its_block_id_out_of_blocks(cluster):
    """26.x's ALTER TABLE DROP PART (dropPartImpl): the part's block id leaves blocks/, a DROP_PART
    naming it goes into the log (`drop` and a real part's name: told from a DROP_RANGE by the
    level), and each keeper executing it removes that part only; the partition's other part stays,
    and no block number is marked dropped (a later INSERT into the partition is kept)."""
    from protocol.log_entry import DROP_PART
    from protocol.replica import client_drop_part
    admin, reps = cluster
    write_and_sync(reps, [(P, A, "ha"), (P, B, "hb")])
    first, second = registered(admin, "r1", P)
    assert len(blocks_of(admin, P)) == 2
    entry = client_drop_part(reps["r2"], first)
    assert logged(admin)[-1] == entry and entry.type == DROP_PART
    assert entry.format().endswith(f"drop\n{first}\n".encode())
    assert len(blocks_of(admin, P)) == 1
    for r in ("r1", "r2", "r3"):
        drain(reps[r])
    for r in ("r1", "r2"):
        assert registered(admin, r, P) == [second] and reps[r].has_rows_of(P) == B
    reps["r1"].replica_write_insert(P, A, "ha")   # its id went: written again, and kept
    for r in ("r1", "r2"):
        drain(reps[r])
        assert sorted(x["event"] for x in reps[r].has_rows_of(P)) == ["buy", "click"]


def test_drop_part_leaves_a_part_that_contains_it_and_refuses_a_part_the_replica_lacks(cluster):
    """ClickHouse's "very weak guarantees" for DROP PART: a replica that merged the part first
    keeps the merged part (it contains the dropped one, not the other way round); and a replica
    that does not hold the part cannot drop it (NO_SUCH_DATA_PART): under selective replication
    the ALTER has to reach an owner."""
    from protocol.replica import client_drop_part
    admin, reps = cluster
    write_and_sync(reps, [(P, A, "ha"), (P, B, "hb")])
    first, _ = registered(admin, "r1", P)
    with pytest.raises(GuardFailed, match="r3 has no active part"):
        client_drop_part(reps["r3"], first)   # r3 keeps nothing of P
    reps["r1"].replica_select_merge(P)
    drain(reps["r1"])   # r1 merges before it pulls the drop
    client_drop_part(reps["r2"], first)
    drain(reps["r1"])
    merged = [n for n in reps["r1"].store.names(P)]   # its active parts (the replaced ones stay registered a while)
    assert len(merged) == 1 and merged[0].level == 1 and str(merged[0]) in registered(admin, "r1", P)
    assert sorted(x["event"] for x in reps["r1"].has_rows_of(P)) == ["buy", "click"]
