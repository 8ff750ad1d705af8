"""Walks the directed protocol machine found on the fixed reference, replayed step by step on
conformance/protocol_system.py (each step one of the spec's actions, taken only where `enabled`,
the spec's guard, allows it)."""

import pytest

from conformance.protocol_system import LAYOUT, PIDS, RETRIES_NOT_DROPS, ProtocolSystem, enabled
from protocol.assignment import read_assignment
from protocol.log_entry import GET_PART


def take(s: ProtocolSystem, action: str, params: tuple) -> None:
    assert params in enabled(s, action), f"{action}{params} is not enabled here"
    s.step(action, params)


def write_and_ack(s: ProtocolSystem, i: str, at: str) -> None:
    take(s, "ClientSendInsert", (i, at))
    for action in ("ReplicaAllocate", "ReplicaForwardInsert", "ReplicaWriteInsert"):
        for params in enabled(s, action):
            take(s, action, params)
    take(s, "ClientReceiveAck", (i,))


def write_then_reassign(s: ProtocolSystem, i: str, p: str) -> tuple[str, str]:
    """Insert i written and acknowledged through r1, then p REASSIGNed from its first owner to a
    replica that does not own it: (source, target)."""
    write_and_ack(s, i, "r1")
    owners = read_assignment(s.admin, LAYOUT, PIDS[p]).owners
    src, dst = sorted(owners)[0], next(r for r in s.names if r not in owners)
    take(s, "AdminReassign", (p, src, dst))
    return src, dst


def test_a_clone_target_cancelled_while_down_drops_its_queued_fetches_on_restart():
    """The CLONE's fetches are queued on the target, the target crashes before running them, the
    migration is cancelled and ended on its behalf. Back up, it must drop the partition's queue
    entries as the spec's ReplicaRestart does, not only its parts (it has none yet): running
    them fetched the partition back onto a replica that does not keep it (NoForeignPartsInv)."""
    s = ProtocolSystem()
    try:
        src, dst = write_then_reassign(s, "i2", "p2")
        take(s, "ReplicaCloneFetch", ("p2",))
        assert any(e.partition == PIDS["p2"] for e in s.queue(dst)) and not s.stores[dst].names(PIDS["p2"])
        take(s, "ReplicaCrash", (dst,))
        take(s, "CoordinatorCancel", ("p2",))
        for r in sorted(s.reps):
            take(s, "ReplicaRefreshCache", (r, "p2"))
        take(s, "ReplicaCleanupForDownLeaver", ("p2", src))
        take(s, "ReplicaRestart", (dst,))
        assert not any(e.partition == PIDS["p2"] for e in s.queue(dst))
        while enabled(s, "ReplicaExecuteEntry"):
            take(s, "ReplicaExecuteEntry", enabled(s, "ReplicaExecuteEntry")[0])
        assert s.invariants()["NoForeignPartsInv"]
    finally:
        s.close()


def test_a_query_whose_reader_crashes_fails_and_no_longer_holds_off_cleanup():
    """A query routed to the source for its partition, the source crashes and comes back, the
    migration switches and the source's CLEANUP runs: the query failed at the crash (its subquery
    died with the process, and the pin with it), so the CLEANUP removes nothing it still reads."""
    s = ProtocolSystem()
    try:
        src, _ = write_then_reassign(s, "i1", "p1")
        take(s, "ReplicaRefreshCache", (src, "p1"))
        take(s, "ClientStartQuery", ("q1", src))      # a local read: p1 routed to src
        assert s.routed(PIDS["p1"], src)
        take(s, "ReplicaCrash", (src,))
        assert s.qry["q1"]["st"] == "failed" and not s.routed(PIDS["p1"], src)
        take(s, "ReplicaRestart", (src,))
        take(s, "ReplicaCloneFetch", ("p1",))
        while enabled(s, "ReplicaPullLog") or enabled(s, "ReplicaExecuteEntry"):
            for action in ("ReplicaPullLog", "ReplicaExecuteEntry"):
                if enabled(s, action):
                    take(s, action, enabled(s, action)[0])
        take(s, "CoordinatorSwitch", ("p1",))
        for r in sorted(s.reps):
            take(s, "ReplicaRefreshCache", (r, "p1"))
        take(s, "ReplicaCleanup", ("p1",))
        assert s.invariants()["CleanupSafeInv"]
    finally:
        s.close()


def test_a_query_whose_initiator_crashes_fails_and_releases_its_readers_pins():
    """The spec's ReplicaCrash fails every query the replica served, the ones started there too:
    the client's connection to it broke. A query started on a replica that does not own the
    partition reads it remotely; that initiator crashes: the query failed, and the owner's pin
    that held off its CLEANUP went with it (ClickHouse cancels a remote subquery whose initiator
    hung up)."""
    s = ProtocolSystem()
    try:
        write_and_ack(s, "i1", "r1")
        owners = read_assignment(s.admin, LAYOUT, PIDS["p1"]).owners
        initiator = next(r for r in s.names if r not in owners)
        take(s, "ReplicaRefreshCache", (initiator, "p1"))
        take(s, "ClientStartQuery", ("q1", initiator))
        reader = s.qry["q1"]["query"].routes[PIDS["p1"]]
        assert reader in owners and s.reps[reader].pins == {PIDS["p1"]: 1}
        take(s, "ReplicaCrash", (initiator,))
        assert s.qry["q1"]["st"] == "failed" and s.reps[reader].pins == {}
    finally:
        s.close()


# Found by the directed walks of issue 18 (a bug-variant run that re-moved a partition at once
# after its CANCEL reached it; shrunk here to 22 steps of the fixed reference, each enabled, no
# migration left): r1, lost while down past the trimmed log, cloned from a peer whose log
# pointer is behind the ALTER r1 had applied, and kept its own metadata_version 1 (the peer had
# saved no state) with the pointer moved back before the ALTER (GlobalEntriesAppliedInv). Fixed
# in protocol/recovery.py: the source's version, 0 when it saved none, as the spec's
# CloneLostReplica takes meta[g].
LOST_REPLICA_BEHIND_ITS_PEERS = [
    ("ClientSendInsert", ("i3", "r2")), ("ReplicaAllocate", ("r2", "i3")), ("ReplicaForwardInsert", ("r2", "i3")),
    ("ReplicaAllocate", ("r1", "i3")), ("ReplicaWriteInsert", ("r1", "i3")), ("ClientAlterMetadata", ()),
    ("ClientSendInsert", ("i1", "r2")), ("ReplicaForwardInsert", ("r2", "i1")), ("ReplicaAllocate", ("r3", "i1")),
    ("ReplicaPullLog", ("r1",)), ("ReplicaWriteInsert", ("r3", "i1")), ("ReplicaPullLog", ("r2",)),
    ("ReplicaExecuteEntry", ("r1", 0)), ("ReplicaPullLog", ("r1",)), ("ReplicaExecuteEntry", ("r1", 0)),
    ("ClientSendInsert", ("i2", "r1")), ("ReplicaAllocate", ("r1", "i2")), ("ReplicaWriteInsert", ("r1", "i2")),
    ("ReplicaCrash", ("r1",)), ("ReplicaPullLog", ("r3",)), ("CleanupClearOldLogs", ()), ("ReplicaRestart", ("r1",)),
]


def test_a_lost_replica_that_clones_from_a_peer_behind_it_keeps_its_global_entries_applied_once():
    s = ProtocolSystem(bounds=RETRIES_NOT_DROPS)
    try:
        for action, params in LOST_REPLICA_BEHIND_ITS_PEERS:
            take(s, action, params)
        assert s.invariants()["GlobalEntriesAppliedInv"]
    finally:
        s.close()


# Found by the thorough fixed machine (walk 142 of 1000 with issue 18's walks, 864 before them),
# shrunk to 21 steps, each enabled: r1 selects the mutation of p1, crashes, the log is trimmed
# past it, and r1 comes back lost while p1 is in CLONE. Its clone source had executed the
# MUTATE_PART: r1 queues a fetch of the mutated part and keeps its own older one, which the fetch
# replaces. Not a protocol fault but an invariant too narrow: the spec's MutationsAppliedInv
# excused a pending MUTATE_PART only, not a pending fetch of a part that covers the old one with
# the mutation applied (MutatedPartQueued, in the spec now). The source was the CLONE target r2
# when it was found; since F33 it must be an owner, so the owner r3 pulls and executes the
# mutation first (five steps more) and is the source.
LOST_REPLICA_WITH_A_MUTATION_UNDER_WAY = [
    ("ClientSendInsert", ("i1", "r3")), ("ReplicaAllocate", ("r3", "i1")), ("ReplicaWriteInsert", ("r3", "i1")),
    ("ClientMutate", ()), ("ClientSendInsert", ("i2", "r3")), ("ReplicaAllocate", ("r3", "i2")),
    ("ReplicaWriteInsert", ("r3", "i2")), ("ReplicaPullLog", ("r1",)), ("ReplicaExecuteEntry", ("r1", 0)),
    ("ReplicaSelectMutation", ("r1", "p1")), ("AdminReassign", ("p1", "r3", "r2")), ("ReplicaPullLog", ("r2",)),
    ("ReplicaPullLog", ("r2",)), ("ReplicaPullLog", ("r2",)), ("ReplicaExecuteEntry", ("r2", 0)),
    ("ReplicaExecuteEntry", ("r2", 0)), ("ReplicaExecuteEntry", ("r2", 0)), ("ReplicaPullLog", ("r3",)),
    ("ReplicaPullLog", ("r3",)), ("ReplicaPullLog", ("r3",)), ("ReplicaExecuteEntry", ("r3", 0)),
    ("ReplicaExecuteEntry", ("r3", 0)), ("ReplicaExecuteEntry", ("r3", 0)),
    ("ReplicaCrash", ("r1",)), ("CleanupClearOldLogs", ()), ("ReplicaRestart", ("r1",)),
]


def test_a_lost_replica_with_a_mutation_under_way_comes_back_with_its_mutations_applied():
    s = ProtocolSystem(bounds=RETRIES_NOT_DROPS)
    try:
        for action, params in LOST_REPLICA_WITH_A_MUTATION_UNDER_WAY:
            take(s, action, params)
        fetching = [e for e in s.queue("r1") if e.type == GET_PART and e.part.mutation > 0]
        assert fetching and s.invariants()["MutationsAppliedInv"]
        while enabled(s, "ReplicaExecuteEntry"):   # the fetches done, every kept part is mutated
            take(s, "ReplicaExecuteEntry", enabled(s, "ReplicaExecuteEntry")[0])
        assert not any(e.type == GET_PART for e in s.queue("r1")) and s.invariants()["MutationsAppliedInv"]
    finally:
        s.close()
