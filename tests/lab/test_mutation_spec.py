"""lab.mutation_spec (issue 18): guard mutants come from the real spec, spec/ is never written,
and two known-bad mutants are killed by a small model: CoordinatorSwitch without its catch-up
guard (by SwitchTargetHoldsFetchedProp: since F23's fix CLEANUP's own wait keeps the data, so
the target short at SWITCH loses nothing) and ReplicaCleanup without that wait (LeaverRedundant,
by NoAckedBlockLostInv: F23's second half)."""

import json
from pathlib import Path

import pytest

from lab import mutation_spec as ms

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
    assert verdict.killed_by == "MCMigrationWrites: SwitchTargetHoldsFetchedProp", verdict
    assert list(tmp_path.iterdir()) == []   # the mutant's copy of spec/ is gone


@pytest.mark.tlc
def test_dropping_cleanups_wait_for_an_owner_to_hold_the_sources_parts_is_killed(tmp_path):
    mutant = next(m for m in _mutants(["ReplicaCleanup"]) if m.original == "LeaverRedundant(p)" and m.kind == "drop")
    verdict = ms.run_mutant(mutant, ms.holding_models(["MCMigrationWrites"]), budget=240, workdir=tmp_path, workers=2)
    assert verdict.status == "killed", verdict
    assert verdict.killed_by == "MCMigrationWrites: NoAckedBlockLostInv", verdict


# ---- bounds, witnesses and survivor reasons


def test_model_bounds_give_no_mutant_and_are_listed():
    lines = SPEC.read_text().splitlines()
    muts = _mutants(["StartMigration", "ReplicaCrash", "ClientSendInsert"])
    assert not [m for m in muts if "aux_counts" in m.original or "< MaxTries" in m.original]
    listed = ms.bounds(lines, {"StartMigration", "ReplicaCrash", "ClientSendInsert"})
    assert ("StartMigration", "aux_counts.migrations < MaxMigrations") in listed
    assert ("ClientSendInsert", "ins[i].tries < MaxTries") in listed
    # a protocol setting is no bound: the concurrency limit is mutated
    assert any(m.original == "Cardinality(MigrationsInFlight) < MaxConcurrentMigrations" for m in muts)


def test_an_action_named_in_a_comment_does_not_hide_a_guard():
    # CoordinatorCancel's `mig[p].src # None   \* a repair is not cancelled (RepairStart)`
    assert any(m.original == "mig[p].src # None" for m in _mutants(["CoordinatorCancel"]))


def test_witness_cfg_keeps_the_state_space_and_checks_only_the_witness():
    cfg = (ms.SPEC_DIR / "MCDownLeaver.cfg").read_text()
    out = ms.witness_cfg(cfg)
    kept = [ln for ln in cfg.splitlines() if ln.split() and ln.split()[0] in ("SYMMETRY", "INIT", "NEXT")]
    assert kept and all(ln in out.splitlines() for ln in kept)
    assert "MaxCrashes = 1" in out and "Replicas <- MCReplicas" in out
    assert [ln for ln in out.splitlines() if "Inv" in ln or "Prop" in ln] == ["INVARIANT WitnessUnreachedInv"]


def test_mutants_and_witnesses_run_on_every_variable(tmp_path):
    # MCMigration is checked under ReductionView (gen_cfgs.VIEWS), whose argument is about the
    # unmutated actions: the spec copy a mutant runs in has the cfg without it, and nothing else lost
    source = (ms.SPEC_DIR / "MCMigration.cfg").read_text()
    assert "VIEW ReductionView" in source.splitlines()
    ms._copy_spec(tmp_path)
    copied = (tmp_path / "MCMigration.cfg").read_text()
    assert copied.splitlines() == [ln for ln in source.splitlines() if ln != "VIEW ReductionView"]
    spec = "MCSelectiveReplication.tla"
    assert (tmp_path / spec).read_text() == (ms.SPEC_DIR / spec).read_text()


def test_every_witness_is_defined_and_every_witnessed_model_holds():
    mc = (ms.SPEC_DIR / "MCSelectiveReplication.tla").read_text()
    manifest = ms._manifest()
    for model, witnesses in ms.WITNESSES.items():
        assert manifest[model]["expect"] == "holds", model
        for w in witnesses:
            assert f"\n{w} ==" in mc, w
    assert set(ms.MIGRATION_MODELS) <= set(ms.WITNESSES)


def test_every_survivor_reason_names_a_mutant_that_exists():
    keys = {ms.survivor_key(m) for m in ms.generate(SPEC.read_text().splitlines())}
    stale = [k for k in ms.survivor_reasons() if k not in keys]
    assert stale == [], "spec/rfc/mutation_survivors.json names mutants the spec no longer has"


def test_survivor_reasons_need_a_class_and_a_reason(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps({"survivors": [{"action": "A", "kind": "drop", "conjunct": "x", "class": "maybe",
                                              "reason": "r"}]}))
    with pytest.raises(ms.BadInput):
        ms.survivor_reasons(bad)


def test_score_counts_killed_over_all_but_equivalent_and_undecided():
    def v(status, layer=None, cls=None):
        out = ms.Verdict(ms.Mutant("A.1.drop", "A", "drop", 1, "x"), status, None, [], layer)
        out.classification = cls
        return out
    vs = [v("killed", "invariant"), v("killed", "witness"), v("killed", "liveness"), v("survived", cls="equivalent"),
          v("survived", cls="gap"), v("survived", cls="unclassified"), v("timeout")]
    t = ms.tally(vs)
    assert (t[("killed", "witness")], t[("survived", "equivalent")], t[("timeout", None)]) == (1, 1, 1)
    assert ms.score(vs) == "3/5 (60%); of all mutants 3/7 (43%)"


@pytest.mark.tlc
def test_a_mutant_that_never_starts_a_migration_is_killed_by_the_witness_the_spec_reaches(tmp_path):
    # StartMigration with Assigned(p) negated never fires on a model whose p is assigned from the
    # start: every invariant holds (39 states), only the witness sees it
    mutant = next(m for m in _mutants(["StartMigration"]) if m.id == "StartMigration.1.negate")
    model = ms.holding_models(["MCMigrationWrites"])[0]
    fixed = tmp_path / "fixed"
    mutated = tmp_path / "mutated"
    for folder, source in ((fixed, None), (mutated, mutant.source)):
        folder.mkdir()
        ms._copy_spec(folder, source)
    assert ms.check_witness(fixed, model, "MigrationDoneWitness", budget=240, workers=1).outcome == "reached"
    assert ms.check_witness(mutated, model, "MigrationDoneWitness", budget=240, workers=1).outcome == "unreached"
    work = tmp_path / "work"
    work.mkdir()
    verdict = ms.run_mutant(mutant, [model], budget=240, workdir=work, workers=1)
    assert (verdict.status, verdict.layer) == ("killed", "witness"), verdict
    assert verdict.killed_by == "MCMigrationWrites: witness MigrationDoneWitness unreached"


def test_a_step_witness_is_checked_as_an_action_property():
    out = ms.witness_cfg((ms.SPEC_DIR / "MCFilteredLog.cfg").read_text(), step=True)
    assert [ln for ln in out.splitlines() if "Inv" in ln or "Prop" in ln] == ["PROPERTY WitnessUnreachedProp"]
    assert ms.is_step_witness("ForwardStepWitness") and not ms.is_step_witness("InsertAckedWitness")


@pytest.mark.tlc
def test_a_receiver_that_never_forwards_is_killed_by_the_forward_step_witness(tmp_path):
    # ReplicaForwardInsert with `r \notin cache[r][p].owners` negated: only an owner forwards. Every
    # invariant holds and every state witness is reached (a client may send to an owner at
    # once); no step forwards from a receiver whose current map names other owners.
    mutant = next(m for m in _mutants(["ReplicaForwardInsert"]) if m.id == "ReplicaForwardInsert.5.negate")
    model = ms.holding_models(["MCFilteredLog"])[0]
    fixed, mutated = tmp_path / "fixed", tmp_path / "mutated"
    for folder, source in ((fixed, None), (mutated, mutant.source)):
        folder.mkdir()
        ms._copy_spec(folder, source)
    assert ms.check_witness(fixed, model, "ForwardStepWitness", budget=240, workers=1).outcome == "reached"
    assert ms.check_witness(mutated, model, "ForwardStepWitness", budget=240, workers=1).outcome == "unreached"
    assert ms.check_witness(mutated, model, "InsertAckedWitness", budget=240, workers=1).outcome == "reached"


def test_a_later_pass_replaces_its_mutants_verdicts_keeps_both_runs_and_adds_new_ones():
    def result(verdicts, models, cmd):
        return {"command": cmd, "seconds": 1.0, "models": models, "liveness": [], "witnesses": {},
                "witness_baseline": [], "bounds": [], "verdicts": verdicts}
    run = {"model": "M1", "outcome": "holds", "violated": None, "seconds": 1.0, "distinct_states": 5}
    first = result([{"id": "A.1.drop", "status": "survived", "runs": [run]},
                    {"id": "A.1.negate", "status": "killed", "runs": [run]}], ["M1"], "first")
    later = result([{"id": "A.1.drop", "status": "killed", "runs": [dict(run, model="M2", outcome="invariant_violated")]},
                    {"id": "B.1.drop", "status": "survived", "runs": [run]}], ["M2"], "later")
    merged = ms.merge(first, later)
    by_id = {v["id"]: v for v in merged["verdicts"]}
    assert by_id["A.1.drop"]["status"] == "killed" and [r["model"] for r in by_id["A.1.drop"]["runs"]] == ["M1", "M2"]
    assert by_id["A.1.negate"]["status"] == "killed" and "B.1.drop" in by_id
    assert merged["models"] == ["M1", "M2"] and merged["command"] == "first; then later"
