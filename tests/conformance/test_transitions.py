"""The transition list agrees with the TLA+ modules and with the reference."""

import re
from pathlib import Path

import pytest

from conformance.transitions import TRANSITIONS, of_module
from harness.check_models import spec_file



# Definitions a Next names that are no action: ParallelReplicas' Survive(q) is the record a running
# query becomes after a base step (the replicas gone from active' read nothing more).
NOT_ACTIONS = ("Survive",)


def next_actions(module: str, nxt: str = "Next") -> dict[str, int]:
    """Action name -> arity, for every action `nxt` calls, read from the module text (the base
    protocol's Next that ParallelReplicas' PRNext calls is SelectiveReplication's, not its own)."""
    text = spec_file(f"{module}.tla").read_text()
    body = text.split(f"\n{nxt} ==", 1)[1].split("\n\n", 1)[0]
    body = re.sub(r"\\in\s+[A-Z][A-Za-z]+", "", body)  # the sets quantified over are not actions
    calls = re.findall(r"\b([A-Z][A-Za-z]+)(?:\(([^()]*)\))?", body)
    defined = dict(re.findall(r"^([A-Z][A-Za-z]+)(?:\(([^()]*)\))? ==", text, re.M))
    out = {}
    for name, _ in calls:
        if name in defined and name not in ("Next", nxt, *NOT_ACTIONS):
            args = defined[name]
            out[name] = len([a for a in args.split(",") if a.strip()]) if args else 0
    return out


@pytest.mark.parametrize("module, nxt", [("Assignment", "Next"), ("SelectiveReplication", "Next"),
                                         ("ParallelReplicas", "PRNext"), ("PartMoves", "Next")])
def test_the_list_is_the_modules_next(module, nxt):
    spec = next_actions(module, nxt)
    listed = {t.name: len(t.params) for t in of_module(module)}
    assert listed == spec


@pytest.mark.parametrize("t", TRANSITIONS, ids=lambda t: f"{t.module}.{t.name}")
def test_every_reference_step_exists_and_is_named_after_its_action(t):
    step = t.resolve()
    assert callable(step)
    if not t.note:
        assert step.__name__ == t.snake
