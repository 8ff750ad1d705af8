"""The history's `commands` table (history/commands.py): each operator command with its outcome
and the guard inputs the harness read from Keeper before it, and CommandsFollowGuardsInv, which
the oracle judges on it (the Spark job and DuckDB: tests/checkers/test_checkers_agree_on_broken_commands.py)."""

import pytest

from checkers.oracle import commands_off_guard
from protocol.assignment import GuardFailed
from protocol.keeper import MemoryEnsemble
from protocol.migration import MigrationError
from reference.cluster import Cluster


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(MemoryEnsemble().connect, tmp_path / "data", replicas=("r1", "r2", "r3"))
    c.insert([{"date": "2024-01-15", "user_id": 5, "row_id": 1, "event": "view"}], "b1")
    c.settle()
    yield c
    c.close()


def _commands(c: Cluster) -> list[tuple]:
    return [(x["command"], x["outcome"]) for x in c.history.tables["commands"]]


def test_each_command_is_recorded_with_its_outcome_and_what_keeper_said_before_it(cluster):
    """A REASSIGN accepted, a second one refused while the first is in CLONE (StartMigration's
    mig[p].st \\in {none, done, cancelled}), a CANCEL accepted, a CANCEL refused (no longer in
    CLONE): each row says what the guard saw, and all four follow their guards."""
    c = cluster
    p = c.admin.get_children(c.layout.assignments)[0]
    owners = sorted(c.replicas["r1"].replica_refresh_cache(p).owners)
    dst = next(r for r in sorted(c.replicas) if r not in owners)
    c.reassign(p, dst, owners[0])
    with pytest.raises(MigrationError):
        c.reassign(p, dst, owners[1])
    c.cancel(p)
    with pytest.raises(GuardFailed):
        c.cancel(p)
    assert _commands(c) == [("REASSIGN", "accepted"), ("REASSIGN", "refused"), ("CANCEL", "accepted"),
                            ("CANCEL", "refused")]
    first, second, cancel, late = c.history.tables["commands"]
    assert (first["owners"], first["migration_state"], first["src"], first["dst"]) == (owners, "none", owners[0], dst)
    assert (first["src_active"], first["dst_active"], first["in_flight"]) == (1, 1, 0)
    assert (second["migration_state"], second["in_flight"]) == ("clone", 1)
    assert (cancel["migration_state"], cancel["migration_src"], cancel["coordinator_active"]) == ("clone", owners[0], 1)
    assert late["migration_state"] == "cancelling" and "not in CLONE" in late["reason"]
    assert commands_off_guard(c.history.tables) == []


def test_a_reassign_to_a_replica_that_is_down_is_refused_and_its_guard_says_why(cluster):
    c = cluster
    p = c.admin.get_children(c.layout.assignments)[0]
    owners = sorted(c.replicas["r1"].replica_refresh_cache(p).owners)
    dst = next(r for r in sorted(c.replicas) if r not in owners)
    c.crash_replica(dst)
    with pytest.raises(MigrationError):
        c.reassign(p, dst, owners[0])
    (row,) = c.history.tables["commands"]
    assert (row["outcome"], row["dst_active"]) == ("refused", 0)
    assert commands_off_guard(c.history.tables) == []


def test_an_outcome_against_the_guard_is_a_violation_either_way(cluster):
    """Refused though the guard held (a broken guard: `if dst in known`), and accepted though it
    did not (a guard dropped): each is one CommandsFollowGuardsInv line; raised is not judged here
    (NoLogicalErrorsInv's)."""
    c = cluster
    p = c.admin.get_children(c.layout.assignments)[0]
    owners = sorted(c.replicas["r1"].replica_refresh_cache(p).owners)
    dst = next(r for r in sorted(c.replicas) if r not in owners)
    c.reassign(p, dst, owners[0])
    row = c.history.tables["commands"][0]
    refused = {**row, "outcome": "refused", "reason": "unknown replica"}
    assert commands_off_guard({"commands": [refused]}) == [
        f"REASSIGN of {p} {owners[0]} -> {dst} at step {row['step']} was refused though its guard held: unknown replica"]
    down = {**row, "dst_active": 0}
    assert commands_off_guard({"commands": [down]}) == [
        f"REASSIGN of {p} {owners[0]} -> {dst} at step {row['step']} was accepted though its guard did not hold"]
    assert commands_off_guard({"commands": [{**row, "outcome": "raised", "dst_active": 0}]}) == []
    assert commands_off_guard({}) == []   # an older history: no commands recorded, none judged
