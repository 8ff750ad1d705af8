"""The reference's switches are the spec's Bug(...) names, each one wired into the reference."""

import re
from pathlib import Path

import pytest

from reference.bugs import SWITCHES, UnknownSwitch, check_switches

ROOT = Path(__file__).resolve().parents[2]


def spec_switches(files):
    return {m for f in files for m in re.findall(r'Bug\("([a-z_]+)"\)', f.read_text())}


# PR102244.tla models the open PR's design, which the reference does not implement yet (issue 14's
# `--design pr102244`); its switches are compared once it does.
RFC_DESIGN_SPECS = [f for f in (ROOT / "spec").glob("*.tla") if "PR102244" not in f.name]


# Switches the spec has before the reference does, each to be wired into reference/ (and listed in
# reference/bugs.py) by its owners; a name here that the reference already knows fails the test.
# ignore_fault_domains (issue 16): allocation and REBALANCE count every replica as its own fault
# domain (placement.py's domains ignored): reference/placement.py's allowed_owner / least_filled.
SPEC_AHEAD_OF_REFERENCE = {"ignore_fault_domains"}


def test_switches_are_the_specs_bug_names():
    assert spec_switches(RFC_DESIGN_SPECS) - SPEC_AHEAD_OF_REFERENCE == set(SWITCHES)
    assert not SPEC_AHEAD_OF_REFERENCE & set(SWITCHES), "now in reference/bugs.py: drop it from SPEC_AHEAD_OF_REFERENCE"


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_every_switch_changes_reference_code(name):
    code = "".join(f.read_text() for f in (ROOT / "reference").rglob("*.py") if f.name != "bugs.py")
    assert re.search(rf'"{name}" (not )?in \w*(\.)?bugs', code), f"{name} is not tested anywhere in reference/"


def test_unknown_switch_is_named():
    with pytest.raises(UnknownSwitch, match="no_such_bug"):
        check_switches({"no_dedup", "no_such_bug"})
