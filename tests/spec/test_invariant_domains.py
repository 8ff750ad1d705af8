"""AckedCommittedInv closes a gap in the no-loss invariants' domain (issue 18): they range over
LiveAcked, inserts committed after their partition's last DROP_RANGE, so an insert acknowledged
without any commit fell outside every one of them. A spec whose client is acknowledged before
the write is the mutant that showed it: before AckedCommittedInv it survived every model."""

import runpy
from pathlib import Path

import pytest

from conformance.spec_model import INVARIANTS
from harness import mutation_spec as ms

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
