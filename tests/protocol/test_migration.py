"""CLONE -> SWITCH -> CLEANUP on both backends: the fixed steps keep owners complete; the
switches break what the spec's models of the same name break (spec/FINDINGS.md F3, variants)."""

import json

import pytest
from cluster_helpers import LAYOUT, P, drain

from protocol.assignment import Assignment, GuardFailed, read_assignment
from protocol.migration import (MigrationError, admin_reassign, caught_up, coordinator_cancel, coordinator_switch,
                                migrations_rows, read_migration, replica_cleanup, replica_cleanup_for_down_leaver,
                                replica_clone_fetch)
from protocol.repair import drop_replica

ROWS = [{"date": "2024-01-15", "user_id": 21, "event": "click"}]


def refresh_all(reps):
    for rep in reps.values():
        rep.replica_refresh_cache(P)


def test_full_migration_moves_the_data_and_cleans_the_source(make_cluster):
    admin, reps = make_cluster()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    drain(reps["r2"])
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    assert replica_clone_fetch(reps["r3"], P, reps) == 1
    drain(reps["r3"])
    coordinator_switch(admin, LAYOUT, P, "r3")
    with pytest.raises(GuardFailed, match="have not seen"):
        replica_cleanup(reps["r1"], P)  # r2's map still shows r1 as an owner: a SELECT may go there
    refresh_all(reps)
    replica_cleanup(reps["r1"], P)
    a = read_assignment(admin, LAYOUT, P)
    assert a.owners == ("r2", "r3") and a.leaving is None and a.target is None
    assert reps["r2"].has_rows_of(P) == reps["r3"].has_rows_of(P) == ROWS
    assert reps["r1"].has_rows_of(P) == [] and admin.get_children(LAYOUT.parts("r1")) == []
    assert migrations_rows(admin, LAYOUT)[0]["state"] == "done"


def test_a_reassign_naming_no_source_moves_from_the_first_owner(make_cluster):
    """ALTER TABLE t REASSIGN PARTITION p TO REPLICA dst names no source: the first owner is the
    source and coordinator (what the history's `commands` record as its src)."""
    admin, reps = make_cluster()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    first = read_assignment(admin, LAYOUT, P).owners[0]
    mig = admin_reassign(admin, LAYOUT, P, "r3")
    assert (mig["src"], mig["coord"], mig["dst"]) == (first, first, "r3")


@pytest.mark.parametrize("bugs, complete", [(frozenset(), True), (frozenset({"clone_from_source_only"}), False)])
def test_clone_must_fetch_what_the_source_has_not_fetched_yet(make_cluster, bugs, complete):
    """F3, as MCMigrationWrites_clone_from_source_only: written on r1, r2 has not fetched it,
    r3 skipped the entry; moving p from r2 to r3."""
    admin, reps = make_cluster(bugs)
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    drain(reps["r3"])  # r3 skips the GET_PART: it is no keeper yet
    admin_reassign(admin, LAYOUT, P, "r3", src="r2")
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    coordinator_switch(admin, LAYOUT, P, "r3")  # r3 has nothing left to do for p
    assert read_assignment(admin, LAYOUT, P).owners == ("r1", "r3")
    assert (reps["r3"].has_rows_of(P) == ROWS) == complete
    if not complete:
        assert reps["r3"].queue() == []  # and nothing will ever bring the block: OwnersCompleteInv broken


OTHER_ROWS = [{"date": "2024-02-15", "user_id": 22, "event": "view"}]


def _second_partition_on_r2_and_r3(admin, reps) -> str:
    """A partition besides P, owned by r2 and r3 and written once (both hold the row)."""
    other = "202402-1"
    admin.create(LAYOUT.assignment(other), Assignment(("r2", "r3")).encode())
    for rep in reps.values():
        rep.replica_refresh_cache(other)
    reps["r2"].replica_write_insert(other, OTHER_ROWS, "h-other")
    drain(reps["r3"])
    assert reps["r3"].has_rows_of(other) == OTHER_ROWS
    return other


def test_the_rfc_clone_copies_the_source_parts_and_waits_for_a_source_that_is_down(make_cluster):
    """F3's variant as the RFC writes it (clone_from_source_only), step by step: the target copies
    the source's local parts, each registered in Keeper under its own name, and reads no other
    replica; with the source down the fetch is refused (GuardFailed: there is nothing to copy
    from), and the migration stays unfetched."""
    bugs = frozenset({"clone_from_source_only"})
    admin, reps = make_cluster(bugs)
    other = _second_partition_on_r2_and_r3(admin, reps)   # the source's other partition stays put
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    drain(reps["r2"])
    source = sorted(str(n) for n in reps["r2"].store.names() if n.partition == P)
    assert source
    admin_reassign(admin, LAYOUT, P, "r3", src="r2")
    up = {r: rep for r, rep in reps.items() if r != "r2"}
    with pytest.raises(GuardFailed, match="source r2 of .* is down"):
        replica_clone_fetch(reps["r3"], P, up)
    assert migrations_rows(admin, LAYOUT)[0]["fetched"] is False
    assert replica_clone_fetch(reps["r3"], P, reps) == len(source)
    assert sorted(str(n) for n in reps["r3"].store.names() if n.partition == P) == source
    assert sorted(n for n in admin.get_children(LAYOUT.parts("r3")) if n.startswith(f"{P}_")) == source
    assert reps["r3"].has_rows_of(P) == ROWS and migrations_rows(admin, LAYOUT)[0]["fetched"] is True
    assert reps["r3"].has_rows_of(other) == reps["r2"].has_rows_of(other) == OTHER_ROWS


def test_the_naive_cancel_drops_the_target_copy_at_once(make_cluster):
    """F7's variant (cancel_drops_target_at_once): the target leaves the assignment at once, its
    copy is dropped by the cancel itself when the caller names it, and the migration is cancelled
    with nothing leaving: no CLEANUP follows (which is what lets a late fetch keep a foreign copy)."""
    bugs = frozenset({"cancel_drops_target_at_once"})
    admin, reps = make_cluster(bugs)
    other = _second_partition_on_r2_and_r3(admin, reps)   # the target's other partition stays put
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    assert reps["r3"].has_rows_of(P) == ROWS
    a = coordinator_cancel(admin, LAYOUT, P, target=reps["r3"], bugs=bugs)
    assert a.keepers() == read_assignment(admin, LAYOUT, P).keepers() == {"r1", "r2"} and a.leaving is None
    assert reps["r3"].has_rows_of(P) == [] and migrations_rows(admin, LAYOUT)[0]["state"] == "cancelled"
    assert reps["r3"].has_rows_of(other) == OTHER_ROWS


def test_switch_waits_for_catch_up_unless_the_variant_is_on(make_cluster):
    admin, reps = make_cluster()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)  # queued, not yet fetched
    with pytest.raises(GuardFailed, match="not caught up"):
        coordinator_switch(admin, LAYOUT, P, "r3")
    coordinator_switch(admin, LAYOUT, P, "r3", frozenset({"switch_without_catchup"}))
    refresh_all(reps)
    with pytest.raises(GuardFailed, match="which no owner staying has yet"):
        replica_cleanup(reps["r1"], P)   # F23's wait at CLEANUP would still keep the only copy
    replica_cleanup(reps["r1"], P, frozenset({"switch_without_catchup"}))  # the only copy goes: r2 never fetched, r3 had not yet
    survivors = [r for r in ("r2", "r3") if reps[r].has_rows_of(P)]
    drain(reps["r3"])
    assert survivors == [] and reps["r3"].has_rows_of(P) == []  # NoAckedBlockLostInv broken


def _switch_with_a_part_written_after_the_catch_up_position(admin, reps):
    """F23's race: the CLONE's fetch fixes the catch-up position, the target catches up to it, then
    the source writes another part of P, which neither the target nor r2 has pulled at SWITCH."""
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    assert read_migration(admin, LAYOUT, P)[0]["catchup_to"] == 1   # the log's length at the fetch
    reps["r1"].replica_refresh_cache(P)   # the writer's map has the CLONE (its commit checks the version)
    late = reps["r1"].replica_write_insert(P, [{**ROWS[0], "user_id": 37}], "h2")
    assert not caught_up(admin, LAYOUT, "r3", P)   # drained it must not be: the stream moved on
    coordinator_switch(admin, LAYOUT, P, "r3")      # caught up to the position is enough (F23)
    refresh_all(reps)
    return late


def test_switch_waits_up_to_the_fetchs_position_and_cleanup_for_what_the_source_wrote_after(make_cluster):
    """F23's fix, as MCMigrationWrites holds it: SWITCH does not wait for what came after the
    position; the source's CLEANUP waits until an owner staying has it."""
    admin, reps = make_cluster()
    late = _switch_with_a_part_written_after_the_catch_up_position(admin, reps)
    with pytest.raises(GuardFailed, match=f"r1 holds {late} of {P}, which no owner staying has yet"):
        replica_cleanup(reps["r1"], P)
    drain(reps["r2"])   # r2, an owner before and after, fetches it from r1
    replica_cleanup(reps["r1"], P)
    drain(reps["r3"])
    assert len(reps["r2"].has_rows_of(P)) == len(reps["r3"].has_rows_of(P)) == 2


def test_cleanup_without_catchup_deletes_the_only_copy_of_what_the_source_wrote_after_the_position(make_cluster):
    """The broken variant, as MCMigrationWrites_cleanup_without_catchup: NoAckedBlockLostInv broken."""
    admin, reps = make_cluster()
    _switch_with_a_part_written_after_the_catch_up_position(admin, reps)
    replica_cleanup(reps["r1"], P, frozenset({"cleanup_without_catchup"}))
    for r in ("r2", "r3"):
        drain(reps[r])
    held = [row["user_id"] for r in ("r2", "r3") for row in reps[r].has_rows_of(P)]
    assert held == [21, 21]   # h1 on both owners; h2's row (user 37), acknowledged, is nowhere


def test_after_switch_a_second_switch_or_a_cancel_is_refused(make_cluster):
    """CoordinatorSwitch's guard is mig[p].st = "clone" /\\ mig[p].fetched: a coordinator that retries
    its SWITCH, or one that took over and repeats it, is refused. Let through after CLEANUP, it would
    name the source `leaving` again, owed a CLEANUP for a copy already dropped. CoordinatorCancel's
    is mig[p].st = "clone": a CANCEL after SWITCH would make the new owner leave."""
    admin, reps = make_cluster()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    with pytest.raises(GuardFailed, match="not a fetched CLONE"):
        coordinator_switch(admin, LAYOUT, P, "r3")   # nothing fetched yet
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    with pytest.raises(GuardFailed, match="r2 is not the target"):   # SWITCH to the migration's target only
        coordinator_switch(admin, LAYOUT, P, "r2")
    coordinator_switch(admin, LAYOUT, P, "r3")
    for step in ("switched", "cleaned up"):
        before = admin.get(LAYOUT.assignment(P)), admin.get(LAYOUT.migration(P))
        with pytest.raises(GuardFailed, match="not a fetched CLONE"):
            coordinator_switch(admin, LAYOUT, P, "r3")
        with pytest.raises(GuardFailed, match="not in CLONE"):
            coordinator_cancel(admin, LAYOUT, P, reps["r3"])
        assert (admin.get(LAYOUT.assignment(P)), admin.get(LAYOUT.migration(P))) == before, step
        if step == "switched":
            refresh_all(reps)
            replica_cleanup(reps["r1"], P)
    a = read_assignment(admin, LAYOUT, P)
    assert a.owners == ("r2", "r3") and a.leaving is None and a.target is None


def test_cleanup_only_on_the_leaver_and_only_after_switch(make_cluster):
    """ReplicaCleanup's guard: a SWITCH (or CANCEL) to clean up after, on the replica it made
    leaving. During CLONE the source is still an owner: a CLEANUP there drops the only copy a
    SELECT may still read; once done, a second CLEANUP has nothing to end."""
    admin, reps = make_cluster()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    drain(reps["r2"])
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    refresh_all(reps)
    with pytest.raises(GuardFailed, match="no SWITCH or CANCEL"):
        replica_cleanup(reps["r1"], P)
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    coordinator_switch(admin, LAYOUT, P, "r3")
    refresh_all(reps)
    with pytest.raises(GuardFailed, match="r2 is not the replica leaving"):
        replica_cleanup(reps["r2"], P)
    assert reps["r2"].has_rows_of(P) == ROWS
    replica_cleanup(reps["r1"], P)
    with pytest.raises(GuardFailed, match="no SWITCH or CANCEL"):
        replica_cleanup(reps["r1"], P)


def test_cleanup_waits_for_an_active_replica_that_has_published_no_map(make_cluster, connect):
    """A replica registered after the SWITCH has published no map version of P yet: it may still
    route a SELECT by whatever it learns, so CLEANUP waits for it as for a stale map."""
    from protocol.registration import register_replica
    admin, reps = make_cluster()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    coordinator_switch(admin, LAYOUT, P, "r3")
    refresh_all(reps)
    register_replica(connect(), LAYOUT, "r4")
    with pytest.raises(GuardFailed, match=r"maps of \['r4'\] have not seen"):
        replica_cleanup(reps["r1"], P)
    assert reps["r1"].has_rows_of(P) == ROWS


def test_clone_fetch_only_by_the_target_once_and_only_in_clone(make_cluster):
    """ReplicaCloneFetch's guard: the CLONE's target, once, while the CLONE lasts. Another replica
    fetching would hold parts of a partition it does not own (NoForeignPartsInv); a fetch after
    CANCEL would fill the target that CLEANUP is emptying."""
    admin, reps = make_cluster()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    with pytest.raises(GuardFailed, match="no unfetched CLONE of .* into r2"):
        replica_clone_fetch(reps["r2"], P, reps)
    assert replica_clone_fetch(reps["r3"], P, reps) == 1
    with pytest.raises(GuardFailed, match="no unfetched CLONE"):
        replica_clone_fetch(reps["r3"], P, reps)
    assert len(reps["r3"].queue()) == 1
    p2 = "202402-5"
    admin.create(LAYOUT.assignment(p2), Assignment(("r1", "r2")).encode())
    admin_reassign(admin, LAYOUT, p2, "r3", src="r1")
    coordinator_cancel(admin, LAYOUT, p2)
    with pytest.raises(GuardFailed, match="no unfetched CLONE"):
        replica_clone_fetch(reps["r3"], p2, reps)


def test_cleanup_no_delay_does_not_wait_for_stale_maps(make_cluster):
    admin, reps = make_cluster({"cleanup_no_delay"})
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    coordinator_switch(admin, LAYOUT, P, "r3")
    replica_cleanup(reps["r1"], P, frozenset({"cleanup_no_delay"}))
    # r2's map still routes SELECTs of p to r1, which no longer has it (CleanupSafeInv's concern).
    assert "r1" in reps["r2"].cache[P].owners and reps["r1"].has_rows_of(P) == []


def test_cancel_sends_the_target_through_cleanup(make_cluster):
    admin, reps = make_cluster()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    coordinator_cancel(admin, LAYOUT, P)
    assert read_assignment(admin, LAYOUT, P).leaving == "r3"
    refresh_all(reps)
    replica_cleanup(reps["r3"], P)
    assert reps["r3"].has_rows_of(P) == [] and read_assignment(admin, LAYOUT, P).keepers() == {"r1", "r2"}
    assert migrations_rows(admin, LAYOUT)[0]["state"] == "cancelled"


def _cancelled_after_its_writer_is_dropped(make_cluster, connect):
    """F32's race, as MCRepairCancel: r1 writes a part of P that r2 has not pulled; the CLONE to r3
    copies it from r1 and is cancelled; r1 crashes and is dropped for good. The cancelled target,
    leaving, holds the only copy left."""
    admin, reps = make_cluster()
    part = reps["r1"].replica_write_insert(P, ROWS, "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    coordinator_cancel(admin, LAYOUT, P)
    dead = reps.pop("r1")
    connect.expire(dead.keeper)
    assert drop_replica(admin, LAYOUT, "r1") == [P]
    dead.peers.pop("r1")   # its disk goes with it: no replica fetches from it any more
    assert read_assignment(admin, LAYOUT, P).owners == ("r2",) and read_assignment(admin, LAYOUT, P).leaving == "r3"
    refresh_all(reps)
    return admin, reps, part


def test_a_cancelled_targets_cleanup_waits_while_it_holds_the_last_copy_of_a_dropped_owners_part(make_cluster, connect):
    """F32's fix: the cancelled target's CLEANUP waits, as a switched source's does (F23), until an
    owner staying holds every part it has; r2 then fetches the part from r3 and the CANCEL ends."""
    admin, reps, part = _cancelled_after_its_writer_is_dropped(make_cluster, connect)
    with pytest.raises(GuardFailed, match=f"r3 holds {part} of {P}, which no owner staying has yet"):
        replica_cleanup(reps["r3"], P)
    drain(reps["r2"])
    replica_cleanup(reps["r3"], P)
    assert [row["user_id"] for row in reps["r2"].has_rows_of(P)] == [21] and reps["r3"].has_rows_of(P) == []
    assert migrations_rows(admin, LAYOUT)[0]["state"] == "cancelled"


def test_cancel_cleanup_trusts_owners_deletes_the_last_copy_after_a_drop(make_cluster, connect):
    """The broken variant, as MCRepairCancel_cancel_cleanup_trusts_owners: NoAckedBlockLostInv."""
    admin, reps, _ = _cancelled_after_its_writer_is_dropped(make_cluster, connect)
    replica_cleanup(reps["r3"], P, frozenset({"cancel_cleanup_trusts_owners"}))
    drain(reps["r2"])
    assert reps["r2"].has_rows_of(P) == [] and reps["r3"].has_rows_of(P) == []   # acknowledged, nowhere


@pytest.mark.parametrize("args, message", [
    (("202401-6", "r3"), "not assigned"),
    ((P, "r9"), "unknown replica 'r9'"),
    ((P, "r1"), "already owns"),
    ((P, "r3", "r3"), "does not own"),
])
def test_bad_reassign_requests_are_named_and_change_nothing(make_cluster, args, message):
    admin, _ = make_cluster()
    before = read_assignment(admin, LAYOUT, P)
    with pytest.raises(MigrationError, match=message):
        admin_reassign(admin, LAYOUT, *args)
    assert read_assignment(admin, LAYOUT, P) == before and migrations_rows(admin, LAYOUT) == []


def test_reassigning_a_partition_already_migrating_is_refused(make_cluster):
    admin, _ = make_cluster()
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    with pytest.raises(MigrationError, match="already migrating"):
        admin_reassign(admin, LAYOUT, P, "r3", src="r2")


def test_the_default_concurrency_limit_admits_four_migrations_and_refuses_a_fifth(make_cluster):
    """The limit on migrations in flight per table (the RFC's default, 4; spec MaxConcurrentMigrations):
    exactly that many start, the next is refused until one ends."""
    admin, reps = make_cluster()
    partitions = [P] + [f"20240{m}-5" for m in range(2, 6)]
    for p in partitions[1:]:
        admin.create(LAYOUT.assignment(p), Assignment(("r1", "r2")).encode())
    for p in partitions[:4]:
        admin_reassign(admin, LAYOUT, p, "r3", src="r1")
    with pytest.raises(MigrationError, match="4 migrations already in flight"):
        admin_reassign(admin, LAYOUT, partitions[4], "r3", src="r1")
    coordinator_cancel(admin, LAYOUT, partitions[0])
    with pytest.raises(MigrationError, match="4 migrations already in flight"):   # cancelling is in flight
        admin_reassign(admin, LAYOUT, partitions[4], "r3", src="r1")
    refresh_all(reps)
    replica_cleanup(reps["r3"], P)   # the cancel ends
    assert admin_reassign(admin, LAYOUT, partitions[4], "r3", src="r1")["state"] == "clone"


def test_reassign_to_an_inactive_replica_is_refused(make_cluster, connect):
    admin, reps = make_cluster()
    connect.expire(reps["r3"].keeper)
    with pytest.raises(MigrationError, match="not active"):
        admin_reassign(admin, LAYOUT, P, "r3")


def mutate_or_drop_on_both_owners(admin, reps, kind: str) -> list[dict]:
    """A row on the owners r1 and r2, then a mutation (its MUTATE_PART for r1's part in the log)
    or a DROP PARTITION that neither owner has applied yet; the rows every owner must end with."""
    from protocol.replica import client_drop_partition, client_mutate
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    drain(reps["r1"])
    drain(reps["r2"])
    if kind == "drop":
        client_drop_partition(admin, LAYOUT, P)
        return []
    client_mutate(admin, LAYOUT, "UPDATE event = 'updated' WHERE 1")
    entry = reps["r1"].replica_select_mutation(P)   # the table-wide mutation, for r1's part
    assert (entry.source_parts, entry.new_part_name) == ((f"{P}_0_0_0",), f"{P}_0_0_0_1")
    return [{**ROWS[0], "event": "updated"}]


@pytest.mark.parametrize("kind", ["mutation", "drop"])
@pytest.mark.parametrize("bugs, converged", [(frozenset(), True),
                                             (frozenset({"clone_ignores_skipped_entries"}), False)])
def test_clone_target_applies_mutations_and_drops_it_skipped(make_cluster, kind, bugs, converged):
    """F8, as MC{Mutation,Drop}DuringClone_clone_ignores_skipped_entries: the owner r1 put a
    MUTATE_PART of its part (or the DROP_RANGE) into the log before CLONE, neither owner applied
    it yet, the target skipped it; the target clones from r1, whose part predates it."""
    admin, reps = make_cluster(bugs)
    expected = mutate_or_drop_on_both_owners(admin, reps, kind)
    drain(reps["r3"])  # r3 pulls and skips it: not a keeper yet
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)  # r1 has not applied it: the fetched part predates it
    drain(reps["r3"])
    for r in ("r1", "r2"):
        drain(reps[r])
        assert reps[r].has_rows_of(P) == expected
    assert (reps["r3"].has_rows_of(P) == expected) == converged


@pytest.mark.parametrize("kind", ["mutation", "drop"])
def test_a_lost_keeper_adds_nothing_to_what_a_clone_re_queues(make_cluster, kind):
    """A keeper marked lost (is_lost = 1: it clones from a peer when it comes back, ClickHouse's
    cloneReplicaIfNeeded) has nothing left to apply: its old log_pointer and its queue are left
    out of the scan of skipped entries, so a CLONE re-queues only what a live keeper still has to
    apply. Here both owners applied the MUTATE_PART (or DROP_RANGE) before r2 was marked lost
    with its pointer back at 0: the target's queue gets the fetches of the partition's parts and
    no entry already applied everywhere."""
    from protocol.log_entry import DROP_RANGE, MUTATE_PART
    admin, reps = make_cluster()
    expected = mutate_or_drop_on_both_owners(admin, reps, kind)
    for r in ("r1", "r2", "r3"):
        drain(reps[r])
    assert all(reps[r].has_rows_of(P) == expected for r in ("r1", "r2"))
    admin.set(LAYOUT.is_lost("r2"), b"1")
    admin.set(LAYOUT.log_pointer("r2"), b"0")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)
    assert not [e for _, e in reps["r3"].queue() if e.type in (MUTATE_PART, DROP_RANGE)]
    drain(reps["r3"])
    assert reps["r3"].has_rows_of(P) == expected


@pytest.mark.parametrize("kind", ["mutation", "drop"])
@pytest.mark.parametrize("bugs, converged", [(frozenset(), True),
                                             (frozenset({"clone_reads_skipped_entries_from_log"}), False)])
def test_clone_target_gets_skipped_entries_the_cleanup_thread_trimmed(make_cluster, kind, bugs, converged):
    """F16, as MC{Mutation,Drop}TrimmedLog_clone_reads_skipped_entries_from_log: every replica has
    pulled the MUTATE_PART (or DROP_RANGE), so the cleanup thread removes it from the log, but the
    owners have not executed it yet. F8's first fix re-reads skipped entries from the log and finds
    none; the fix takes them from the keepers' queues."""
    from protocol.cleanup_thread import CleanupSettings, cleanup_clear_old_logs
    admin, reps = make_cluster(bugs)
    expected = mutate_or_drop_on_both_owners(admin, reps, kind)
    for rep in reps.values():
        rep.pull_whole_log()          # queued on r1 and r2, skipped by r3; nobody executes it yet
    cleanup_clear_old_logs(admin, LAYOUT, CleanupSettings(min_logs_to_keep=0))
    assert admin.get_children(LAYOUT.log) == []
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    for r in ("r1", "r2"):
        drain(reps[r])
        assert reps[r].has_rows_of(P) == expected
    assert (reps["r3"].has_rows_of(P) == expected) == converged


def test_f8s_first_fix_re_reads_the_partitions_entries_from_the_start_of_the_log(make_cluster):
    """clone_reads_skipped_entries_from_log (F8's first fix, F16's variant) re-reads every entry of
    the partition still in the log below the target's log_pointer, the log's first entry
    included: here the GET_PART of P's first INSERT, which r3 pulled and skipped as no keeper."""
    from protocol.log_entry import GET_PART
    from protocol.migration import _skipped_entries
    admin, reps = make_cluster(frozenset({"clone_reads_skipped_entries_from_log"}))
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    assert admin.get_children(LAYOUT.log) == ["log-0000000000"]
    drain(reps["r3"])
    skipped = _skipped_entries(reps["r3"], P, read_assignment(admin, LAYOUT, P))
    assert [(e.type, e.partition) for _, e in skipped] == [(GET_PART, P)]


def test_a_crashed_coordinator_is_taken_over_and_the_migration_finishes(make_cluster, connect):
    """The coordinator (the source r1) loses its session mid-CLONE: SWITCH is refused until an
    active replica takes over (ReplicaTakeOverMigration), and the takeover is refused while the
    coordinator is alive. Rows written before the crash end up on both new owners."""
    from protocol.migration import replica_take_over_migration
    admin, reps = make_cluster()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    drain(reps["r2"])
    with pytest.raises(MigrationError):
        admin_reassign(admin, LAYOUT, P, "r9")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    with pytest.raises(GuardFailed, match="is active"):
        replica_take_over_migration(admin, LAYOUT, P, "r2")
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    connect.expire(reps["r1"].keeper)  # the coordinator crashes
    with pytest.raises(GuardFailed, match="not active"):
        coordinator_switch(admin, LAYOUT, P, "r3")
    assert replica_take_over_migration(admin, LAYOUT, P, "r2")["coord"] == "r2"
    coordinator_switch(admin, LAYOUT, P, "r3")
    a = read_assignment(admin, LAYOUT, P)
    assert a.owners == ("r2", "r3") and a.leaving == "r1"
    assert reps["r2"].has_rows_of(P) == reps["r3"].has_rows_of(P) == ROWS
    with pytest.raises(GuardFailed, match="not in CLONE"):   # only a CLONE has a coordinator to take over
        replica_take_over_migration(admin, LAYOUT, P, "r3")


def test_a_replica_that_is_not_active_cannot_take_over(make_cluster, connect):
    from protocol.migration import replica_take_over_migration
    admin, reps = make_cluster()
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    connect.expire(reps["r1"].keeper)   # the coordinator
    connect.expire(reps["r2"].keeper)
    with pytest.raises(GuardFailed, match="r2 is not active"):
        replica_take_over_migration(admin, LAYOUT, P, "r2")
    assert replica_take_over_migration(admin, LAYOUT, P, "r3")["coord"] == "r3"


def _switched_r1_to_r3(make_cluster, connect, bugs=frozenset(), check_guards=False):
    """P moved from r1 to r3 up to SWITCH; then r1 goes down. No map has been refreshed since."""
    admin, reps = make_cluster(bugs)
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    drain(reps["r2"])
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    if check_guards:
        with pytest.raises(GuardFailed, match="no SWITCH or CANCEL"):
            replica_cleanup_for_down_leaver(reps["r2"], P)
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    coordinator_switch(admin, LAYOUT, P, "r3")
    if check_guards:
        with pytest.raises(GuardFailed, match="is active"):
            replica_cleanup_for_down_leaver(reps["r2"], P)
    connect.expire(reps["r1"].keeper)
    return admin, reps


def test_a_down_leaver_is_cleaned_up_for_once_every_active_map_saw_the_switch(make_cluster, connect):
    """ReplicaCleanupForDownLeaver: the source r1 goes down after SWITCH; an active replica ends the
    migration for it, but, as CLEANUP, only once every active replica's map has seen the SWITCH (a
    map still listing r1 would send a SELECT to it). Refused for a CLONE and while r1 is active."""
    admin, reps = _switched_r1_to_r3(make_cluster, connect, check_guards=True)
    with pytest.raises(GuardFailed, match="have not seen"):
        replica_cleanup_for_down_leaver(reps["r2"], P)
    reps["r3"].replica_refresh_cache(P)
    with pytest.raises(GuardFailed, match=r"maps of \['r2'\] have not seen"):
        replica_cleanup_for_down_leaver(reps["r2"], P)
    reps["r2"].replica_refresh_cache(P)
    assert replica_cleanup_for_down_leaver(reps["r2"], P) == "r1"
    a = read_assignment(admin, LAYOUT, P)
    assert a.owners == ("r2", "r3") and a.leaving is None and a.target is None
    (row,) = migrations_rows(admin, LAYOUT)   # system.selective_migrations
    assert (row["partition_id"], row["state"], row["ended_by"]) == (P, "done", "r2")


def test_down_leaver_cleanup_ignores_maps_ends_the_migration_under_stale_maps(make_cluster, connect):
    """The switch: r2's and r3's maps still list r1 as an owner, and the migration ends anyway; a
    SELECT they route to r1 once it is back finds its copy dropped (drop_foreign_partitions)."""
    bugs = frozenset({"down_leaver_cleanup_ignores_maps"})
    admin, reps = _switched_r1_to_r3(make_cluster, connect, bugs)
    assert replica_cleanup_for_down_leaver(reps["r2"], P, bugs) == "r1"
    assert read_assignment(admin, LAYOUT, P).leaving is None and "r1" in reps["r3"].cache[P].owners


@pytest.mark.parametrize("bugs, foreign", [(frozenset(), False), (frozenset({"cancel_drops_target_at_once"}), True)])
def test_naive_cancel_leaves_the_target_with_foreign_parts(make_cluster, bugs, foreign):
    """F7, as MCMigration_cancel_drops_target_at_once: NoForeignPartsInv broken. A block written
    during CLONE is pulled by r3 only after the cancel; r3's map still says it is the target."""
    admin, reps = make_cluster(bugs)
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    for r in ("r1", "r3"):
        reps[r].replica_refresh_cache(P)  # both know r3 is the target
    replica_clone_fetch(reps["r3"], P, reps)
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    coordinator_cancel(admin, LAYOUT, P, reps["r3"], bugs)
    drain(reps["r3"])  # the entry is no newer than r3's map, which still says target
    refresh_all(reps)
    if not foreign:
        replica_cleanup(reps["r3"], P)
    keepers = read_assignment(admin, LAYOUT, P).keepers()
    assert "r3" not in keepers
    assert (reps["r3"].has_rows_of(P) != []) == foreign
    assert [m["state"] for m in migrations_rows(admin, LAYOUT)] == ["cancelled"]   # ended, either way


# --- one clause each (issue 37; tests/README.md's table) ---------------------------------------
def test_reassign_from_a_source_that_is_not_active_is_refused(make_cluster, connect):
    """StartMigration's src \\in active: the source coordinates the CLONE; a takeover covers only
    a coordinator that fails later."""
    admin, reps = make_cluster()
    connect.expire(reps["r1"].keeper)
    with pytest.raises(MigrationError, match="source 'r1' of .* is not active"):
        admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    assert read_migration(admin, LAYOUT, P)[0] is None


def test_a_cancel_whose_coordinator_is_down_waits_for_a_takeover(make_cluster, connect):
    """CoordinatorCancel's mig[p].coord \\in active: a dead coordinator's CANCEL is no one's to
    make until an active replica takes the migration over."""
    from protocol.migration import replica_take_over_migration
    admin, reps = make_cluster()
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    connect.expire(reps["r1"].keeper)
    with pytest.raises(GuardFailed, match="coordinator r1 of .* is not active"):
        coordinator_cancel(admin, LAYOUT, P)
    assert read_migration(admin, LAYOUT, P)[0]["state"] == "clone"
    replica_take_over_migration(admin, LAYOUT, P, "r2")
    coordinator_cancel(admin, LAYOUT, P)
    assert read_migration(admin, LAYOUT, P)[0]["state"] == "cancelling"


def test_a_down_leaver_is_not_cleaned_up_for_while_it_holds_a_part_no_owner_staying_has(make_cluster, connect):
    """F23 on the down leaver's path: r1 wrote a part after the fetch's position and went down
    after the SWITCH; ending the migration for it would make it drop that part when it comes back,
    the only copy. Refused until r2, an owner staying, has it registered."""
    admin, reps = make_cluster()
    late = _switch_with_a_part_written_after_the_catch_up_position(admin, reps)
    connect.expire(reps["r1"].keeper)
    with pytest.raises(GuardFailed, match=f"r1 holds {late} of {P}, which no owner staying has yet"):
        replica_cleanup_for_down_leaver(reps["r2"], P)
    assert read_migration(admin, LAYOUT, P)[0]["state"] == "switched"


def test_a_migration_fetched_before_positions_were_fixed_switches_once_caught_up_to_the_end(make_cluster):
    """A migration record with no catch-up position (fetched by a checkout before F23's fix, read
    from its Keeper tree): SWITCH waits for the target to be caught up to the end of the log, as it
    did then, not to a position."""
    admin, reps = make_cluster()
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)
    drain(reps["r3"])
    mig, version = read_migration(admin, LAYOUT, P)
    admin.set(LAYOUT.migration(P), json.dumps({k: v for k, v in mig.items() if k != "catchup_to"}).encode(), version)
    reps["r1"].replica_refresh_cache(P)
    reps["r1"].replica_write_insert(P, [{**ROWS[0], "user_id": 37}], "h2")   # past the end r3 has pulled
    with pytest.raises(GuardFailed, match="has not caught up on .* to log entry the end"):
        coordinator_switch(admin, LAYOUT, P, "r3")
    drain(reps["r3"])
    coordinator_switch(admin, LAYOUT, P, "r3")
    assert read_assignment(admin, LAYOUT, P).owners == ("r2", "r3")


def test_an_owner_staying_that_is_lost_does_not_cover_the_leavers_part(make_cluster):
    """CLEANUP's F23 wait counts only owners staying that are not lost: r2 has the late part
    registered but is marked lost (is_lost = 1: it will clone and may not keep it), so r1's copy
    is still the one to keep."""
    admin, reps = make_cluster()
    late = _switch_with_a_part_written_after_the_catch_up_position(admin, reps)
    drain(reps["r2"])   # r2 fetches the late part from r1 and registers it
    admin.set(LAYOUT.is_lost("r2"), b"1")
    with pytest.raises(GuardFailed, match=f"r1 holds {late} of {P}, which no owner staying has yet"):
        replica_cleanup(reps["r1"], P)
    admin.set(LAYOUT.is_lost("r2"), b"0")
    replica_cleanup(reps["r1"], P)


@pytest.mark.parametrize("bugs, converged", [(frozenset(), True),
                                             (frozenset({"clone_ignores_skipped_entries"}), False)])
def test_clone_target_applies_a_drop_part_it_skipped(make_cluster, bugs, converged):
    """F8 for 26.x's DROP PART: a DROP_PART names one part of the partition, so the filter treats
    it as the partition's (a non-keeper skips it), and a CLONE target that skipped it before it
    became a keeper must get it re-queued, as a DROP_RANGE: it fetched the part from an owner that
    had not executed the drop yet. Without the re-queue the dropped rows stay on the target."""
    from protocol.replica import client_drop_part
    admin, reps = make_cluster(bugs)
    reps["r1"].replica_write_insert(P, ROWS, "h1")
    drain(reps["r1"])
    drain(reps["r2"])
    client_drop_part(reps["r1"], str(reps["r1"].store.names(P)[0]))   # neither owner has executed it
    drain(reps["r3"])  # r3 pulls and skips it: not a keeper yet
    admin_reassign(admin, LAYOUT, P, "r3", src="r1")
    replica_clone_fetch(reps["r3"], P, reps)  # r1 still has the part: the target fetches it
    drain(reps["r3"])
    for r in ("r1", "r2"):
        drain(reps[r])
        assert reps[r].has_rows_of(P) == []
    assert (reps["r3"].has_rows_of(P) == []) == converged
