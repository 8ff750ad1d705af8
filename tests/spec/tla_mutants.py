"""One clause of a spec module dropped, for the tests that show each clause matters: spec/ copied
to a temporary folder with the clause's text replaced once (spec/ itself is never written), and
TLC run on the model before and after."""

from __future__ import annotations

import shutil
from functools import lru_cache
from pathlib import Path

from harness import check_models
from harness.tlc.runner import TLCResult, run_tlc


def before_and_after(family: str, module: str, mc: str, model: str, original: str, replacement: str,
                     tmp_path: Path) -> tuple[TLCResult, TLCResult]:
    """TLC on `model` of spec/`family`, as it is and with `original` (found exactly once in
    `module`) replaced by `replacement`."""
    here = check_models.SPEC_DIR / family
    copy = tmp_path / "spec"
    shutil.copytree(check_models.SPEC_DIR, copy, ignore=shutil.ignore_patterns("*.cfg", "states"))
    path = copy / family / module
    text = path.read_text()
    assert text.count(original) == 1, original
    path.write_text(text.replace(original, replacement))
    shutil.copy(here / f"{model}.cfg", copy / family)
    before = _as_it_is(family, mc, model)
    after = run_tlc(copy / family / mc, copy / family / f"{model}.cfg", workers=1, check_deadlock=False, timeout_s=120)
    return before, after


@lru_cache(maxsize=None)
def _as_it_is(family: str, mc: str, model: str) -> TLCResult:
    """The unmutated model's run, once per test process: several clauses are dropped from one model."""
    here = check_models.SPEC_DIR / family
    return run_tlc(here / mc, here / f"{model}.cfg", workers=1, check_deadlock=False, timeout_s=120)
