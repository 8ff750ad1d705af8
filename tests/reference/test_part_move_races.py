"""Racing runs of part moves (reference/part_move_races.py) judged by the oracle: today's
orchestrator with the three fixes holds; 21.8's, with its orchestrating replica crashing after
SOURCE_DROP's entry and a source replica lagging behind the drop, leaves the part on that replica
after the move is DONE (NoForeignPartsInv) and a query reads it twice (QueryNoDuplicateInv, F31);
today's code without the fixes lets a mutation keep the row on the source for good, where every
later query reads it a second time (F28)."""

import pytest

from protocol.part_moves import FIXES
from reference.part_move_races import PartMoveRace, part_move_history


@pytest.mark.parametrize("seed", [0, 1])
def test_todays_orchestrator_with_the_fixes_holds_through_a_crash(tmp_path, seed):
    run = part_move_history(tmp_path, seed, "current", FIXES, crash_at="SOURCE_DROP")
    assert run["settled"] and set(run["moves"].values()) == {"DONE"}, run
    assert run["actions"]["orchestrator crash"] == 1 and run["queries"] >= 10
    assert run["oracle_violations"] == 0, run["oracle_sample"]


# Seeds 0-11: NoForeignPartsInv on 12, QueryNoDuplicateInv on 9 (2026-11-29); two of the nine here.
@pytest.mark.parametrize("seed", [0, 2])
def test_the_orchestrator_of_21_8_is_caught_after_the_same_crash(tmp_path, seed):
    run = part_move_history(tmp_path, seed, "v21_8", FIXES, crash_at="SOURCE_DROP")
    assert run["settled"] and run["actions"]["orchestrator crash"] == 1
    assert run["oracle_invariants"] == ["NoForeignPartsInv", "QueryNoDuplicateInv"], run["oracle_sample"]


def test_a_mutation_of_the_pinned_part_keeps_its_row_on_the_source_without_the_fix(tmp_path):
    """F28 in a history: today's code (the query fixes kept, so only the mutation differs)."""
    fixes = {"sync_waits_for_queries", "delays_wait_for_queries"}
    run = part_move_history(tmp_path / "code", 0, "current", fixes, max_crashes=0)
    assert run["actions"].get("mutation") == 1, run
    assert run["oracle_invariants"] == ["NoForeignPartsInv", "QueryNoDuplicateInv"], run["oracle_sample"]
    fixed = part_move_history(tmp_path / "fixed", 0, "current", FIXES, max_crashes=0)
    assert fixed["oracle_violations"] == 0, fixed["oracle_sample"]


def test_killed_moves_roll_back_and_the_history_holds(tmp_path):
    """KILL PART_MOVE_TO_SHARD in the race: the killed moves end CANCELLED, their parts back on the
    source only, and the fixed move's history holds (seeds 0-9: 20 moves cancelled, none flagged)."""
    run = part_move_history(tmp_path, 0, "current", FIXES, kills=2)
    assert run["settled"] and run["actions"].get("kill") == 2, run
    assert sorted(run["moves"].values()).count("CANCELLED") == 2
    assert run["oracle_violations"] == 0, run["oracle_sample"]


def test_a_run_on_real_zookeeper_holds_as_on_the_memory_keeper(zk_chroot, tmp_path):
    from protocol.keeper.zookeeper import ZooKeeperKeeper
    sessions = []

    def connect():
        sessions.append(ZooKeeperKeeper(zk_chroot))
        return sessions[-1]
    try:
        run = part_move_history(tmp_path, 0, "current", FIXES, connect=connect, steps=150)
    finally:
        for s in sessions:
            s.close()
    assert run["settled"] and run["oracle_violations"] == 0, run["oracle_sample"]


def test_the_command_line_gives_the_verdict_as_its_exit_code(tmp_path, capsys):
    from reference.part_move_races import main
    assert main(["--out", str(tmp_path / "old"), "--version", "v21_8", "--crash-at", "SOURCE_DROP"]) == 1
    assert "violated: NoForeignPartsInv, QueryNoDuplicateInv" in capsys.readouterr().out
    assert main(["--out", str(tmp_path / "today"), "--crash-at", "SOURCE_DROP"]) == 0
    assert "holds" in capsys.readouterr().out
    before = sorted(p.name for p in (tmp_path / "today" / "history").iterdir())
    assert main(["--out", str(tmp_path / "today")]) == 2   # a history there already: refused, kept
    assert "holds a history already" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "today" / "history").iterdir()) == before
    with pytest.raises(SystemExit) as refused:
        main(["--out", str(tmp_path / "x"), "--fixes", "nope"])
    assert refused.value.code == 2 and "argument --fixes" in capsys.readouterr().err
    assert main(["--out", str(tmp_path / "x"), "--crash-at", "SOURCE_DROP", "--crashes", "0"]) == 2
    assert not (tmp_path / "x").exists()


def test_an_unknown_version_is_refused(tmp_path):
    with pytest.raises(ValueError, match="orchestrator version"):
        PartMoveRace(lambda: None, tmp_path, 0, version="v20")
