"""The reference's switches are the spec's Bug(...) names, each one wired into the reference."""

import re
from pathlib import Path

import pytest

from reference.bugs import SWITCHES, UnknownSwitch, check_switches

ROOT = Path(__file__).resolve().parents[2]


def test_switches_are_the_specs_bug_names():
    spec = {m for f in (ROOT / "spec").glob("*.tla") for m in re.findall(r'Bug\("([a-z_]+)"\)', f.read_text())}
    assert spec == set(SWITCHES)


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_every_switch_changes_reference_code(name):
    code = "".join(f.read_text() for f in (ROOT / "reference").rglob("*.py") if f.name != "bugs.py")
    assert re.search(rf'"{name}" (not )?in \w*(\.)?bugs', code), f"{name} is not tested anywhere in reference/"


def test_unknown_switch_is_named():
    with pytest.raises(UnknownSwitch, match="no_such_bug"):
        check_switches({"no_dedup", "no_such_bug"})
