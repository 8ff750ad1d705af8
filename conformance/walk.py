"""A walk of the reference under one model's constants: how each step is checked, and the
shortest failing walk inside a failing one.

The model machine (conformance/machines.py model_machine) checks each step it takes with
`WalkChecks`; a failing walk it found is then cut down here by replaying sub-walks on a fresh
reference, without Hypothesis: its stateful shrinker re-derives every step's enabled instances
(every instance tried on a snapshot) and can spend minutes on a walk of twenty steps, while a
replay of one sub-walk takes milliseconds.
"""

from __future__ import annotations

from conformance.spec_model import Model, invariants
from conformance.spec_system import REFUSED, SpecSystem
from conformance.stategraph import cfg_invariants, spec_file


class WalkChecks:
    """The checks of one step: with a graph (conformance/explore.py SpecGraph), the step is one
    of its edges; after it, the cfg's invariants hold."""

    def __init__(self, model: Model, graph=None):
        if graph is not None and not graph.model.same_constants(model):
            raise ValueError(f"{graph.name}'s constants are not {model.cfg}'s: its graph cannot judge {model.cfg}'s steps")
        self.model, self.graph = model, graph
        self.names = cfg_invariants(spec_file(model.cfg).read_text())

    def step(self, before: dict, action: str, after: dict) -> tuple[str, str] | None:
        """(what failed, message), or None. A step that changes nothing stutters: not checked."""
        if self.graph is None or after == before:
            return None
        wrong = self.graph.check(before, action, after)
        return (f"{action} not an edge", wrong) if wrong else None

    def broken(self, state: dict) -> tuple[str, str] | None:
        bad = [n for n, ok in invariants(state, self.model).items() if n in self.names and not ok]
        return (bad[0], f"{bad[0]} violated") if bad else None


def replay(checks: WalkChecks, bugs, steps: list, seen: list | None = None) -> tuple[int, tuple[str, str] | None]:
    """Take `steps` on a fresh reference: how many were taken, and the first failure. A refused
    step fails as ("refused", ...); one that raises anything else as ("raised", ...): in a
    sub-walk a step's argument can name what no longer exists (a queue entry's znode is named by
    a sequence number that earlier steps set). `seen`, when given, gets (action, args, state) for
    the initial state ("Init") and after each step taken (for a picture of the walk)."""
    system = SpecSystem(checks.model, bugs)
    state = system.abstract()
    if seen is not None:
        seen.append(("Init", (), state))
    for n, (action, args) in enumerate(steps, 1):
        try:
            system.step(action, args)
        except REFUSED as e:
            return n, ("refused", f"{action}{args} refused: {e}")
        except Exception as e:  # noqa: BLE001 - reported, not hidden: the caller sees what raised
            return n, ("raised", f"{action}{args} raised {type(e).__name__}: {e}")
        after = system.abstract()
        if seen is not None:
            seen.append((action, args, after))
        failed = checks.step(state, action, after) or checks.broken(after)
        if failed:
            return n, failed
        state = after
    return len(steps), None


def shrink(checks: WalkChecks, bugs, steps: list) -> tuple[list, str]:
    """A sub-walk of `steps` that fails the same way (same invariant, or the same action off the
    graph) and from which no single step can be left out: 1-minimal, not always the shortest."""
    n, failed = replay(checks, bugs, steps)
    if failed is None or failed[0] in ("refused", "raised"):
        raise ValueError(f"the walk does not fail on a fresh reference ({failed and failed[1]}): "
                         "it cannot be shrunk")
    what = failed[0]
    walk, message = steps[:n], failed[1]
    cut = True
    while cut:
        cut = False
        for i in reversed(range(len(walk))):
            n, got = replay(checks, bugs, walk[:i] + walk[i + 1:])
            if got is not None and got[0] == what:
                walk, message, cut = (walk[:i] + walk[i + 1:])[:n], got[1], True
                break
    return walk, message
