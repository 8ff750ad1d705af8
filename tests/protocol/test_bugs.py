"""The reference's switches are the spec's Bug(...) names, each one wired into the reference."""

import re
from pathlib import Path

import pytest

from protocol.bugs import DESIGNS, SWITCHES, UnknownSwitch, check_switches

ROOT = Path(__file__).resolve().parents[2]


def spec_switches(files):
    return {m for f in files for m in re.findall(r'Bug\("([a-z_]+)"\)', f.read_text())}


# Two designs: the RFC's modules, and PR102244.tla for the open PR's (`--design pr102244`).
RFC_DESIGN_SPECS = [f for f in (ROOT / "spec").glob("*/*.tla") if "PR102244" not in f.name]
PR_DESIGN_SPECS = [f for f in (ROOT / "spec").glob("*/*.tla") if "PR102244" in f.name]

# Switches the spec has before the reference does, each to be wired into reference/ (and listed in
# protocol/bugs.py) by its owners; a name here that the reference already knows fails the test.
# ignore_fault_domains (issue 16): allocation and REBALANCE count every replica as its own fault
# domain (placement.py's domains ignored): protocol/placement.py's allowed_owner / least_filled.
SPEC_AHEAD_OF_REFERENCE = {"ignore_fault_domains"}


def test_switches_are_the_specs_bug_names():
    spec = spec_switches(RFC_DESIGN_SPECS) | spec_switches(PR_DESIGN_SPECS)
    assert spec - SPEC_AHEAD_OF_REFERENCE == set(SWITCHES)
    assert not SPEC_AHEAD_OF_REFERENCE & set(SWITCHES), "now in protocol/bugs.py: drop it from SPEC_AHEAD_OF_REFERENCE"


@pytest.mark.parametrize("design, specs", [("rfc", RFC_DESIGN_SPECS), ("pr102244", PR_DESIGN_SPECS)])
def test_each_design_takes_its_specs_switches(design, specs):
    assert DESIGNS[design] == spec_switches(specs) - SPEC_AHEAD_OF_REFERENCE


def test_pr_readings_are_the_specs_reading_names():
    from protocol.pr102244 import READINGS
    names = {m for f in PR_DESIGN_SPECS for m in re.findall(r'Reading\("([a-z_]+)"\)', f.read_text())}
    assert names == set(READINGS)


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_every_switch_changes_reference_code(name):
    code = "".join(f.read_text() for folder in ("protocol", "reference") for f in (ROOT / folder).rglob("*.py")
                   if f.name != "bugs.py")
    assert re.search(rf'"{name}" (not )?in \w*(\.)?bugs', code), f"{name} is not tested anywhere in protocol/ or reference/"


def test_unknown_switch_is_named():
    with pytest.raises(UnknownSwitch, match="no_such_bug"):
        check_switches({"no_dedup", "no_such_bug"})


def test_a_switch_of_the_other_design_is_refused():
    with pytest.raises(UnknownSwitch, match="snapshot_source_parts"):
        check_switches({"snapshot_source_parts"})
    with pytest.raises(UnknownSwitch, match="no_dedup"):
        check_switches({"no_dedup"}, design="pr102244")
