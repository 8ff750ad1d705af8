"""harness.mutation_spec (issue 18): guard mutants come from the real spec, spec/ is never written,
and a known-bad mutant (CoordinatorSwitch without its catch-up guard, F-switch_without_catchup)
is killed by a small model."""

from pathlib import Path

import pytest

from harness import mutation_spec as ms

SPEC = Path(ms.SPEC_DIR) / ms.SPEC_FILE


def _mutants(actions):
    return ms.generate(SPEC.read_text().splitlines(), set(actions))


def test_every_migration_action_has_guard_mutants_of_both_kinds():
    muts = _mutants(ms.MIGRATION_ACTIONS)
    for action in ms.MIGRATION_ACTIONS:
        kinds = {m.kind for m in muts if m.action == action}
        assert kinds == {"drop", "negate"}, action
    # conjuncts sharing a line are split: ReplicaCloneFetch's `mig[p].st = "clone" /\ ~mig[p].fetched`
    originals = {m.original for m in muts if m.action == "ReplicaCloneFetch"}
    assert {'mig[p].st = "clone"', "~mig[p].fetched"} <= originals
    # no assignment, UNCHANGED or call of another action is taken for a guard
    assert not [m for m in muts if "'" in m.original or "UNCHANGED" in m.original]
    assert not [m for m in _mutants(["AdminReassign"]) if "StartMigration" in m.original]


def test_a_bug_switch_guard_is_dropped_not_negated_and_its_nested_guards_are_mutated():
    muts = {m.id: m for m in _mutants(["CoordinatorSwitch", "ReplicaCleanup"])}
    catchup = [m for m in muts.values() if "CaughtUp" in m.original]
    assert [m.kind for m in catchup] == ["drop"]
    # ReplicaCleanup's `\/ Bug("cleanup_no_delay") \/ /\ <every map saw it> /\ ~routedHere`
    assert any(m.original == "~routedHere" and m.kind == "negate" for m in muts.values())


def test_mutants_change_one_place_and_leave_spec_alone():
    before = SPEC.read_text()
    lines = before.splitlines()
    for m in _mutants(ms.MIGRATION_ACTIONS):
        changed = [i for i, (a, b) in enumerate(zip(lines, m.source.splitlines())) if a != b]
        assert changed and changed[0] + 1 == m.line, m.id
        assert len(m.source.splitlines()) == len(lines), m.id
    assert SPEC.read_text() == before


@pytest.mark.tlc
def test_dropping_the_switch_catch_up_guard_is_killed(tmp_path):
    mutant = next(m for m in _mutants(["CoordinatorSwitch"]) if "CaughtUp" in m.original)
    models = ms.holding_models(["MCMigrationWrites"])
    verdict = ms.run_mutant(mutant, models, budget=240, workdir=tmp_path, workers=2)
    assert verdict.status == "killed", verdict
    assert verdict.killed_by.startswith("MCMigrationWrites: ")
    assert list(tmp_path.iterdir()) == []   # the mutant's copy of spec/ is gone
