"""A cfg held to its module before TLC starts (issue 41, harness/tlc/cfg_check.py): every cfg of the
manifest passes, and each mismatch TLC 2.15 accepts in silence or refuses only from its JVM is
refused in one line naming the cfg's line and the name, with exit 2 from `python -m harness.tlc`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import check_models
from harness.tlc.cfg_check import CfgMismatch, check_cfg, strip_comments

RFC = check_models.SPEC_DIR / "rfc"
MODULE = RFC / "MCSelectiveReplication.tla"
BASE = (RFC / "MCRetry.cfg").read_text()

# what TLC 2.15 did with each (measured 2026-11-30) -> the cfg's text, the words of the refusal
MISMATCHES = {
    "undeclared constant (TLC: accepted)": (BASE.replace("    Bugs = {}", "    Bugs = {}\n    Foo = 1"),
                                            "Foo is no constant or definition of MCSelectiveReplication"),
    "constant assigned twice (TLC: took the last)": (BASE.replace("    RF = 2", "    RF = 2\n    RF = 3"),
                                                     "RF is assigned twice"),
    "unknown switch (TLC: checked the fixed protocol)": (BASE.replace("    Bugs = {}", '    Bugs = {"no_dedupp"}'),
                                                         "Bugs names 'no_dedupp', which MCSelectiveReplication never"),
    "undefined invariant (TLC: a run-time error)": (BASE.replace("    TypeOKInv", "    TypeOKInv\n    NoSuchInv"),
                                                    "INVARIANTS NoSuchInv is not defined"),
    "constant left out (TLC: a run-time error)": (BASE.replace("    MaxTries = 2\n", ""),
                                                  "constant MaxTries of MCSelectiveReplication not assigned"),
    "substitution by nothing (TLC: a run-time error)": (
        BASE.replace("    Bugs = {}", "    Bugs = {}\n    InsertQuorum <- NoSuchDef"), "NoSuchDef is not defined"),
}


def test_every_cfg_of_the_manifest_matches_its_module():
    refused = []
    for m in check_models.load_manifest():
        try:
            check_cfg(check_models.spec_file(m["spec"]), check_models.spec_file(m["config"]))
        except CfgMismatch as e:
            refused.append(f"{m['name']}: {e}")
    assert refused == []


@pytest.mark.parametrize("name", MISMATCHES)
def test_a_mismatch_is_refused_naming_the_line_and_the_name(name, tmp_path):
    text, words = MISMATCHES[name]
    cfg = tmp_path / "Bad.cfg"
    cfg.write_text(text)
    with pytest.raises(CfgMismatch, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_cfg(MODULE, cfg)


def test_a_switch_the_module_tests_and_a_substitution_it_defines_pass(tmp_path):
    cfg = tmp_path / "Good.cfg"
    cfg.write_text(BASE.replace("    Bugs = {}", '    Bugs = {"no_dedup"}\n    InsertQuorum <- QuorumOfRF'))
    check_cfg(MODULE, cfg)


def test_comments_go_and_line_numbers_stay():
    text = "A == 1 \\* one\n(* two\n (* nested *) lines *)\nB == 2\n"
    out = strip_comments(text)
    assert out.splitlines()[0].strip() == "A == 1" and out.splitlines()[3] == "B == 2"
    assert "one" not in out and "nested" not in out


@pytest.mark.tlc
def test_python_m_harness_tlc_refuses_before_the_jvm_with_exit_2(tmp_path):
    cfg = RFC / "_cfg_check_test.cfg"   # TLC reads a cfg beside its module
    cfg.write_text(MISMATCHES["unknown switch (TLC: checked the fixed protocol)"][0])
    try:
        ran = subprocess.run([sys.executable, "-m", "harness.tlc", str(MODULE), "--config", str(cfg), "--no-deadlock"],
                             cwd=check_models.SPEC_DIR.parent, capture_output=True, text=True, timeout=120)
    finally:
        cfg.unlink()
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "Traceback" not in ran.stderr and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    assert "_cfg_check_test.cfg:27: Bugs names 'no_dedupp'" in ran.stderr and ran.stdout == "", ran.stdout


def test_tlcs_own_refusal_of_a_cfg_is_bad_input_not_a_failed_run():
    from harness.tlc.runner import SEMANTIC_ERROR, interpret
    res = interpret([(2222, 1, "The constant parameter MaxTries is not assigned a value by the configuration file.")],
                    [], 150)
    assert res.outcome == SEMANTIC_ERROR
    assert interpret([(1000, 1, "java.lang.OutOfMemoryError")], [], 150).outcome != SEMANTIC_ERROR


def test_the_check_reads_a_module_through_its_extends():
    from harness.tlc.cfg_check import read_module
    m = read_module(Path(MODULE))
    assert {"Replicas", "DedupWindow", "Bugs", "r1"} <= m.constants      # SelectiveReplication's and MC's
    assert {"MergeSelector", "QuorumOfRF", "ReplicaSymmetry", "LiveSpec"} <= m.definitions
    assert "no_dedup" in m.strings


def test_a_module_outside_the_spec_folders_is_checked_as_far_as_its_extends_are_found(tmp_path):
    """A trace module EXTENDS the trace spec, which TLC finds through a library path the caller
    gives: what that module declares is unknown here, so nothing the cfg sets is refused; a module
    whose EXTENDS are all standard is checked whole."""
    (tmp_path / "T.tla").write_text("---- MODULE T ----\nEXTENDS TraceSpecElsewhere\nX == 1\n====\n")
    (tmp_path / "T.cfg").write_text("CONSTANTS\n    Trace <- X\n    Foo = 1\nINIT Init\n")
    check_cfg(tmp_path / "T.tla", tmp_path / "T.cfg")
    (tmp_path / "N.tla").write_text("---- MODULE N ----\nEXTENDS Naturals, TLC\nCONSTANT N\nInit == TRUE\n====\n")
    (tmp_path / "N.cfg").write_text("INIT Init\n")
    with pytest.raises(CfgMismatch, match="constant N of N not assigned"):
        check_cfg(tmp_path / "N.tla", tmp_path / "N.cfg")
