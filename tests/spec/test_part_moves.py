"""The part-moves models (spec/part_moves/, issue 39) are not vacuous and have teeth: the fixed
model finishes a move and answers a query that started during it, and each of its clauses is
caught when dropped: deduplication, the syncs waiting for queries (PR #50777), each sleep
waiting for the queries it is there for, and the merge predicate's pin check."""

import pytest
from tla_mutants import before_and_after

from harness import check_models
from harness.tlc.runner import HOLDS, INVARIANT_VIOLATED, run_tlc

FAMILY = check_models.SPEC_DIR / "part_moves"
MC = FAMILY / "MCPartMoves.tla"


def _cfg(model: str, invariants: list[str], folder):
    head = (FAMILY / f"{model}.cfg").read_text().split("INVARIANTS")[0]
    cfg = folder / f"{model}_probe.cfg"
    cfg.write_text(head + "INVARIANTS\n" + "".join(f"    {i}\n" for i in invariants))
    return cfg


@pytest.mark.tlc
@pytest.mark.parametrize("model, witness", [("MCPartMoves", "NoMoveDone"), ("MCPartMoves", "NoQueryDoneDuringMove"),
                                            ("MCPartMovesKill", "NoMoveDone")])
def test_the_fixed_model_moves_the_part_and_answers_a_query_during_the_move(model, witness, tmp_path):
    res = run_tlc(MC, _cfg(model, [witness], tmp_path), workers=1, check_deadlock=False, timeout_s=120)
    assert (res.outcome, res.violated) == (INVARIANT_VIOLATED, witness), res.summary()


# (what is dropped, its text in PartMoves.tla, what replaces it, the invariant that catches it on MCPartMoves)
MUTANTS = [
    ("the merge predicate's pin check", "/\\ Attached.uuid \\notin pinK.dst", "/\\ TRUE", "QueryNoDuplicateInv"),
    ("a conflicting UUID re-runs the shard without it", "kept == {x \\in read : x.uuid \\notin conflict}",
     "kept == read", "QueryNoDuplicateInv"),
    ("the pre-drop wait", '/\\ st = "SOURCE_DROP_PRE_DELAY" /\\ Fix("delays_wait_for_queries")', "/\\ FALSE",
     "QueryNoMissingInv"),
]


@pytest.mark.tlc
@pytest.mark.parametrize("what, original, replacement, invariant", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_dropping_a_clause_of_the_fixed_move_is_caught(what, original, replacement, invariant, tmp_path):
    before, after = before_and_after("part_moves", "PartMoves.tla", MC.name, "MCPartMoves", original, replacement,
                                     tmp_path)
    assert before.outcome == HOLDS, before.summary()
    assert (after.outcome, after.violated) == (INVARIANT_VIOLATED, invariant), after.summary()


def _without_crashes(model: str, folder):
    """The model's cfg with MaxCrashes = 0: the same orchestrator, never crashing."""
    text = (FAMILY / f"{model}.cfg").read_text()
    assert "    MaxCrashes = 1\n" in text
    cfg = folder / f"{model}_no_crash.cfg"
    cfg.write_text(text.replace("    MaxCrashes = 1\n", "    MaxCrashes = 0\n"))
    return cfg


@pytest.mark.tlc
@pytest.mark.parametrize("model", ["MCPartMovesCrash_v21_8", "MCPartMovesCrashQuery_v21_8"])
def test_the_orchestrator_of_21_8_fails_only_through_the_crash(model, tmp_path):
    """F30 and F31 are the crash's: without it, 21.8's orchestrator holds every invariant its
    model checks, as today's does."""
    res = run_tlc(MC, _without_crashes(model, tmp_path), workers=1, check_deadlock=False, timeout_s=120)
    assert res.outcome == HOLDS, res.summary()


@pytest.mark.tlc
def test_dropping_the_barrier_makes_todays_orchestrator_wedge_after_a_crash(tmp_path):
    """The barrier znode is what keeps today's orchestrator whole across a crash: kept only in
    the crashed thread, as in 21.8, MCPartMovesCrash wedges (F30)."""
    before, after = before_and_after("part_moves", "PartMoves.tla", MC.name, "MCPartMovesCrash",
                                     "/\\ issued' = IF Orchestrator = \"current\" THEN issued ELSE 0",
                                     "/\\ issued' = 0", tmp_path)
    assert before.outcome == HOLDS, before.summary()
    assert (after.outcome, after.violated) == (INVARIANT_VIOLATED, "MoveNotWedgedInv"), after.summary()


@pytest.mark.tlc
@pytest.mark.parametrize("witness", ["NoMigrationDuringDrop", "NoRequeuedDrop"])
def test_the_selective_model_migrates_during_the_drop_and_requeues_it(witness, tmp_path):
    """MCPartMovesSelective is not vacuous: the CLONE starts while the drop is under way, and the
    RFC's fixed CLONE re-queues a drop a keeper has still to apply."""
    res = run_tlc(MC, _cfg("MCPartMovesSelective", [witness], tmp_path), workers=1, check_deadlock=False,
                  timeout_s=120)
    assert (res.outcome, res.violated) == (INVARIANT_VIOLATED, witness), res.summary()


SELECTIVE_MUTANTS = [
    ("a drop's execution removes the queued fetch it covers (removePartProducingOpsInRange)",
     "THEN SelectSeq(migQueue, LAMBDA q : ~(q.type = \"GET\" /\\ q.part = e.part)) ELSE migQueue",
     "THEN migQueue ELSE migQueue"),
    ("the CLONE re-queues the drops a keeper has still to apply",
     "/\\ migQueue' = Gets(registered) \\o (IF pendingDrops # {}", "/\\ migQueue' = Gets(registered) \\o (IF FALSE"),
]


@pytest.mark.tlc
@pytest.mark.parametrize("what, original, replacement", SELECTIVE_MUTANTS, ids=[m[0] for m in SELECTIVE_MUTANTS])
def test_each_guard_of_the_clone_that_meets_a_part_move_is_needed(what, original, replacement, tmp_path):
    """Without either, a copy of the moved part outlives the move on the migration's target."""
    before, after = before_and_after("part_moves", "PartMoves.tla", MC.name, "MCPartMovesSelective", original,
                                     replacement, tmp_path)
    assert before.outcome == HOLDS, before.summary()
    assert (after.outcome, after.violated) == (INVARIANT_VIOLATED, "RowsOnOneShardInv"), after.summary()
