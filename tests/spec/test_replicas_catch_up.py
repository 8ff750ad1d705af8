"""ReplicasCatchUpProp closes the two liveness gaps issue 18's audit left open (spec/README.md):
MutationsAppliedInv and DropsAppliedInv excuse a MUTATE or DROP_RANGE still pending in a
keeper's queue, and GlobalEntriesAppliedInv an ALTER_METADATA still queued, as replication lag;
nothing said the lag ends. A replica that never executes one kind of entry is the mutant that
shows it: it breaks no safety invariant, since the entry stays pending for ever and pending is
excused, and it breaks ReplicasCatchUpProp on the fair model."""

from pathlib import Path

import pytest

from lab import mutation_spec as ms

SPEC = Path(ms.SPEC_DIR) / ms.SPEC_FILE


def never_executes(kind: str) -> ms.Mutant:
    """The spec with every branch of ReplicaExecuteEntry that executes a `kind` entry disabled."""
    mutant, n = ms.hand_mutant(SPEC.read_text(), "ReplicaExecuteEntry", rf'/\\ e\.type = "{kind}"',
                               rf'/\\ e.type = "{kind}" /\\ FALSE', f"never_{kind.lower()}", f'e.type = "{kind}"')
    assert n, f"no {kind} branch in ReplicaExecuteEntry"
    return mutant


@pytest.mark.tlc
@pytest.mark.parametrize("kind, safety, fair", [
    ("MUTATE", "MCMutationDuringClone", "MCLivenessMutation"),
    ("DROP", "MCDropDuringClone", "MCLivenessDrop"),
    ("ALTER", "MCGlobalEntries", "MCLivenessGlobal"),
])
def test_an_entry_left_pending_for_ever_breaks_only_replicas_catch_up(tmp_path, monkeypatch, kind, safety, fair):
    # The MUTATE and DROP models also name a witness (an entry of the kind executed) that kills this
    # mutant first; the claim here is about the liveness property, so it is checked without them.
    monkeypatch.setattr(ms, "WITNESSES", {})
    verdict = ms.run_mutant(never_executes(kind), ms.holding_models([safety]), budget=300, workdir=tmp_path,
                            workers=1, liveness=ms.holding_models([fair], liveness=True))
    assert [r.outcome for r in verdict.runs if r.check == "safety"] == ["holds"], verdict
    assert verdict.status == "killed" and verdict.layer == "liveness", verdict
    # The fair models state ReplicasCatchUpProp alone, so TLC's "temporal property" is that one.
    assert verdict.killed_by == f"{fair}: temporal property", verdict


@pytest.mark.tlc
@pytest.mark.parametrize("kind, safety, witness", [
    ("MUTATE", "MCMutationDuringClone", "MutationAppliedWitness"),
    ("DROP", "MCDropDuringClone", "DropExecutedWitness"),
])
def test_the_models_witnesses_catch_it_before_liveness(tmp_path, kind, safety, witness):
    verdict = ms.run_mutant(never_executes(kind), ms.holding_models([safety]), budget=300, workdir=tmp_path,
                            workers=1)
    assert verdict.status == "killed" and verdict.layer == "witness", verdict
    assert verdict.killed_by == f"{safety}: witness {witness} unreached", verdict
