"""The directed rules' windows (conformance/windows.py): which enabled instance of a spec action a
walk is steered to, for the migration to end with an INSERT in its CLONE (or across its SWITCH)
and a query around it. Each directed instance must still be one the spec's guard enables."""

from conformance.protocol_system import ProtocolSystem, enabled
from conformance.windows import DIRECTED, Walk, insert_next_steps, migration_next_steps, migration_start, write_waits



def take(s: ProtocolSystem, action: str, params: tuple) -> None:
    assert params in enabled(s, action), f"{action}{params} is not enabled here"
    s.step(action, params)


def write_and_ack(s: ProtocolSystem, i: str, at: str) -> None:
    take(s, "ClientSendInsert", (i, at))
    while s.ins[i]["st"] == "sent":       # allocate, forward (a map may need loading first), write
        take(s, *next((a, x) for a in ("ReplicaAllocate", "ReplicaForwardInsert", "ReplicaWriteInsert")
                      for x in enabled(s, a) if x[-1] == i))
    assert s.ins[i]["st"] == "written", (i, s.ins[i])
    take(s, "ClientReceiveAck", (i,))


def enabled_of(s):
    return lambda action: enabled(s, action)


def directed_are_enabled(s: ProtocolSystem, walk: Walk) -> None:
    for name, rule in DIRECTED.items():
        for action, params in rule(s, enabled_of(s), walk):
            assert params in enabled(s, action), f"{name} offers {action}{params}, which is not enabled"


def cloned(s: ProtocolSystem, walk: Walk) -> tuple[str, str]:
    """i1 written and acknowledged, p1 moved (MigrationStart), fetched, and the target caught up:
    CoordinatorSwitch enabled. (source, target)"""
    write_and_ack(s, "i1", "r1")
    directed_are_enabled(s, walk)
    while (starts := migration_start(s, enabled_of(s), walk)) and starts[0][0] == "ReplicaPullLog":
        take(s, *starts[0])                                         # every replica pulls first (F5)
    assert starts and all(params[0] == "p1" for _, params in starts), starts   # p1 still has i3 to write
    _, (p, src, dst) = starts[0]
    take(s, "AdminReassign", (p, src, dst))
    take(s, "ReplicaCloneFetch", ("p1",))
    catch_up(s, dst)
    return src, dst


def catch_up(s: ProtocolSystem, dst: str) -> None:
    """The target pulls and executes until the SWITCH's guard holds (its catch-up)."""
    while ("p1",) not in enabled(s, "CoordinatorSwitch"):
        take(s, *next((a, x) for a in ("ReplicaPullLog", "ReplicaExecuteEntry") for x in enabled(s, a) if x[0] == dst))


def switch_offered(s: ProtocolSystem, walk: Walk) -> bool:
    return ("CoordinatorSwitch", ("p1",)) in migration_next_steps(s, enabled_of(s), walk)


def test_the_first_insert_leaves_its_partition_another_to_write():
    s = ProtocolSystem()
    try:
        sends = [params for a, params in insert_next_steps(s, enabled_of(s), Walk()) if a == "ClientSendInsert"]
        assert sends and {i for i, _ in sends} == {"i1", "i3"}, sends   # p1's: p2 has one INSERT only
    finally:
        s.close()


def test_a_switch_that_waits_for_writes_comes_after_the_insert_written_in_clone():
    walk = Walk()
    s = ProtocolSystem()
    try:
        _, dst = cloned(s, walk)
        assert not switch_offered(s, walk)           # i3 not sent yet
        take(s, "ReplicaRefreshCache", ("r1", "p1"))  # a map that has seen the CLONE takes the write
        write_and_ack(s, "i3", "r1")                  # written in CLONE
        catch_up(s, dst)
        assert switch_offered(s, walk)
        directed_are_enabled(s, walk)
    finally:
        s.close()


def test_a_walk_that_writes_across_the_switch_switches_between_the_last_inserts_send_and_write():
    walk = Walk(switch_waits_for_writes=False, query_before_fetch=False)
    s = ProtocolSystem()
    try:
        cloned(s, walk)
        assert not switch_offered(s, walk)           # i3 not sent yet
        take(s, "ClientSendInsert", ("i3", "r1"))
        for params in enabled(s, "ReplicaAllocate"):
            take(s, "ReplicaAllocate", params)
        assert switch_offered(s, walk)
        writes = enabled(s, "ReplicaWriteInsert")
        assert writes and all(write_waits(s, walk, "ReplicaWriteInsert", params) for params in writes)
        directed_are_enabled(s, walk)
    finally:
        s.close()
