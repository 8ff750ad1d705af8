"""Walks the directed protocol machine found on the fixed reference, replayed step by step on
conformance/protocol_system.py (each step one of the spec's actions, taken only where `enabled`,
the spec's guard, allows it)."""

from reference.assignment import read_assignment

from conformance.protocol_system import LAYOUT, PIDS, ProtocolSystem, enabled


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
