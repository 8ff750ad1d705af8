"""The parallel-replicas models (spec/parallel_replicas/, issue 40) are not vacuous and have teeth:
the fixed models reach an answered query, across a finished migration too, and each clause that
makes a coordinator safe is caught when it is dropped: the 2023 coordinator's overlap rule (R3),
and the partition_snapshot fix's "a CLONE target serves nothing" and "a partition no
announcement served fails the query" (R2)."""

from pathlib import Path

import pytest
from tla_mutants import before_and_after

from harness import check_models
from harness.tlc.runner import HOLDS, INVARIANT_VIOLATED, module_library, run_tlc

FAMILY = check_models.SPEC_DIR / "parallel_replicas"
MC = FAMILY / "MCParallelReplicas.tla"


def test_a_family_module_finds_the_rfc_module_it_extends_and_a_stray_spec_gets_no_library(tmp_path):
    (lib,) = module_library(MC)
    assert lib.startswith("-DTLA-Library=") and str(check_models.SPEC_DIR / "rfc") in lib
    assert str(FAMILY) not in lib.split("=", 1)[1].split(":")
    stray = tmp_path / "a" / "M.tla"
    stray.parent.mkdir()
    stray.write_text("---- MODULE M ----\n====\n")
    assert module_library(stray) == []


def _cfg_with_invariants(model: str, invariants: list[str], folder: Path) -> Path:
    text = (FAMILY / f"{model}.cfg").read_text()
    head = text.split("INVARIANTS")[0]
    cfg = folder / f"{model}_probe.cfg"
    cfg.write_text(head + "INVARIANTS\n" + "".join(f"    {i}\n" for i in invariants))
    return cfg


@pytest.mark.tlc
@pytest.mark.parametrize("model,witness", [("MCPRPlain", "NoPRQueryDone"),
                                           ("MCPRSelective_partition_snapshot", "NoPRQueryDone"),
                                           ("MCPRMigration", "NoPRQueryDoneAfterMigration")])
def test_a_fixed_model_reaches_an_answered_query(model, witness, tmp_path):
    res = run_tlc(MC, _cfg_with_invariants(model, [witness], tmp_path), workers=1, check_deadlock=False,
                  timeout_s=120)
    assert (res.outcome, res.violated) == (INVARIANT_VIOLATED, witness), res.summary()


# (what is dropped, the text in ParallelReplicas.tla, what replaces it, the model, the invariant)
MUTANTS = [
    ("the 2023 coordinator's overlap rule", r"{x \in A : \A y \in Q.work : x = y \/ ~Overlap(x, y)}", "A",
     "MCPRPlainMerge_union", "PRQueryNoDuplicateInv"),
    ("a CLONE target serves nothing", r"Serves(r) == {p \in Partitions : r \in cache[r][p].owners}",
     r"Serves(r) == {p \in Partitions : r \in Keepers(cache[r][p])}", "MCPRMigration", "PRQueryNoMissingInv"),
    ("an unserved partition fails the query", r'/\ Coordinator = "partition_snapshot" => Unserved(q) = {}',
     r"/\ TRUE", "MCPRSelective_partition_snapshot", "PRQueryNoMissingInv"),
]


@pytest.mark.tlc
@pytest.mark.parametrize("what,original,replacement,model,invariant", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_dropping_a_safety_clause_is_caught(what, original, replacement, model, invariant, tmp_path):
    before, after = before_and_after("parallel_replicas", "ParallelReplicas.tla", MC.name, model, original,
                                     replacement, tmp_path)
    assert before.outcome == HOLDS, before.summary()
    assert (after.outcome, after.violated) == (INVARIANT_VIOLATED, invariant), after.summary()
