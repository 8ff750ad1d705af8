"""AckedCommittedInv closes a gap in the no-loss invariants' domain (issue 18): they range over
LiveAcked, inserts committed after their partition's last DROP_RANGE, so an insert acknowledged
without any commit fell outside every one of them. A spec whose client is acknowledged before
the write is the mutant that showed it: before AckedCommittedInv it survived every model."""

import runpy
from pathlib import Path

import pytest

from conformance.spec_model import INVARIANTS
from lab import mutation_spec as ms

SPEC = Path(ms.SPEC_DIR) / ms.SPEC_FILE
SAFETY = runpy.run_path(str(Path(ms.SPEC_DIR) / "gen_cfgs.py"))["SAFETY"]   # spec/ is no package


def test_every_safety_invariant_is_evaluated_by_the_conformance_model():
    # DomainAntiAffinityInv is the one the conformance model leaves to TLC (fault domains are
    # placement, which the replayed models do not vary).
    assert set(SAFETY) - set(INVARIANTS) == {"DomainAntiAffinityInv"}


@pytest.mark.tlc
@pytest.mark.parametrize("kind", ["drop", "negate"])
def test_an_ack_before_the_write_is_caught_by_acked_committed(tmp_path, kind):
    mutant = next(m for m in ms.generate(SPEC.read_text().splitlines(), {"ClientReceiveAck"})
                  if m.kind == kind and m.original == 'ins[i].st = "written"')
    verdict = ms.run_mutant(mutant, ms.holding_models(["MCRetry"]), budget=240, workdir=tmp_path, workers=1)
    assert verdict.status == "killed", verdict
    assert verdict.killed_by == "MCRetry: AckedCommittedInv", verdict


@pytest.mark.tlc
def test_a_query_failing_with_its_replicas_up_breaks_query_answered(tmp_path):
    """No invariant reads a failed query (R2 and R3 judge answers), so a ClientQueryFails without
    its down-replica guard broke nothing until QueryAnsweredProp (MCLivenessQuery): a query is
    answered unless a replica serving it goes down."""
    mutant = next(m for m in ms.generate(SPEC.read_text().splitlines(), {"ClientQueryFails"})
                  if m.kind == "drop" and m.original.startswith("\\E p \\in qry[q].pending"))
    verdict = ms.run_mutant(mutant, ms.holding_models(["MCRestartQuery"]), budget=240, workdir=tmp_path, workers=1,
                            liveness=ms.holding_models(["MCLivenessQuery"], liveness=True))
    assert [r.outcome for r in verdict.runs if r.check == "safety"] == ["holds"], verdict
    assert verdict.status == "killed" and verdict.killed_by == "MCLivenessQuery: temporal property", verdict


def _cleanup_ends_as(state: str, action: str) -> ms.Mutant:
    """The spec with `action` (a CLEANUP) recording every migration it ends as `state`."""
    mutant, n = ms.hand_mutant(SPEC.read_text(), action, r'!\[p\]\.st = IF @ = "switched" THEN "done" ELSE "cancelled"',
                               f'![p].st = "{state}"', f"ends_as_{state}", 'IF @ = "switched" THEN "done" ELSE "cancelled"')
    assert n == 1, f"no end of a migration in {action}"
    return mutant


@pytest.mark.tlc
@pytest.mark.parametrize("action, model, state", [
    ("ReplicaCleanup", "MCMigrationWrites", "cancelled"),
    ("ReplicaCleanupForDownLeaver", "MCDownLeaver", "done"),
    # the other two ends: `make check` (make test's budget)
    pytest.param("ReplicaCleanup", "MCMigrationWrites", "done", marks=pytest.mark.long),
    pytest.param("ReplicaCleanupForDownLeaver", "MCDownLeaver", "cancelled", marks=pytest.mark.long),
])
def test_a_migration_ended_with_the_wrong_outcome_is_caught_by_migration_outcome(tmp_path, action, model, state):
    """No reader of the data looks at how a migration ended, so a CLEANUP that records a switched
    migration as cancelled (or a cancelled one as done) broke nothing until MigrationOutcomeInv."""
    verdict = ms.run_mutant(_cleanup_ends_as(state, action), ms.holding_models([model]), budget=240,
                            workdir=tmp_path, workers=1)
    assert verdict.status == "killed", verdict
    assert verdict.killed_by == f"{model}: MigrationOutcomeInv", verdict


@pytest.mark.tlc
def test_trimming_that_moves_backwards_is_caught_by_trimmed_monotonic(tmp_path):
    """clearOldLogs without `upto > trimmed` may lower `trimmed` (a replica behind the trimming
    back among those kept), putting removed entries back into the log: no invariant reads that,
    TrimmedMonotonicProp does."""
    mutant = next(m for m in ms.generate(SPEC.read_text().splitlines(), {"CleanupClearOldLogs"})
                  if m.kind == "drop" and m.original == "upto > trimmed")
    verdict = ms.run_mutant(mutant, ms.holding_models(["MCFilteredLog"]), budget=240, workdir=tmp_path, workers=1)
    assert verdict.status == "killed", verdict
    assert verdict.killed_by == "MCFilteredLog: TrimmedMonotonicProp", verdict
