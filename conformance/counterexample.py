"""A broken variant's counterexample, carried over to the reference.

TLC checks the variant's model and prints its shortest counterexample. The same steps are then
taken on the reference with the same switch: for each state of the trace, the step of the
reference (the trace's action, any parameters and choices) whose abstract state equals the
spec's next state. At the end the spec's violated invariant, evaluated on the reference's state,
must be false. Run with the switch off, the reference must not get there: either it cannot take
one of the steps, or it takes them all and the invariant holds; so the switch, not the harness,
is what breaks it.

Where a model's state graph is too big to replay whole at the depth of its counterexample
(MCMigration's variants: nearly a million edges at depth 10), this is the replay's check of the
variant; conformance/explore.py replays the graphs that fit.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from conformance.explore import project
from conformance.replay import first_difference
from conformance.spec_model import invariants, load_model
from conformance.spec_system import SpecSystem
from conformance.stategraph import SPEC, spec_file
from harness.tlc.runner import INVARIANT_VIOLATED, run_tlc


@dataclass
class Carried:
    cfg: str
    invariant: str | None           # what TLC reported violated
    steps: list                     # the reference's steps, (action, args)
    trace_length: int               # steps in TLC's counterexample
    followed: bool                  # the reference took every step
    broken_on_reference: bool       # and the invariant is false on its final state
    without_switch: str             # what the reference does without the switch
    tlc_seconds: float
    seconds: float
    stuck: str = ""                 # where it could not follow, and the first differing variable

    @property
    def caught(self) -> bool:
        return self.followed and self.broken_on_reference and not self.without_switch.startswith("also")

    def as_dict(self) -> dict:
        return {**self.__dict__, "steps": [f"{a}{tuple(p)}" for a, p in self.steps], "caught": self.caught}


def _follow(model, bugs, trace, seen: list | None = None) -> tuple[list, str, SpecSystem]:
    """Take the trace's steps on a fresh reference; returns the steps taken and, when it could not
    go on, why. `seen` gets (action, args, the reference's state) for "Init" and each step taken."""
    system = SpecSystem(model, bugs)
    start = system.abstract()
    diff = first_difference(project(trace[0].state), start)
    if diff:
        return [], f"initial state differs in {diff[0]}", system
    if seen is not None:
        seen.append(("Init", (), start))
    steps = []
    for n, state in enumerate(trace[1:], 1):
        want = project(state.state)
        snap = system.snapshot()
        near = None
        for action, args in system.instances():
            if action != state.action:
                continue
            got = system.attempt(snap, action, args)
            if got is None:
                continue
            if got == want:
                steps.append((action, args))
                if seen is not None:
                    seen.append((action, args, got))
                break
            near = near or first_difference(want, got)
        else:
            system.restore(snap)
            why = f"step {n} ({state.action}): no step of the reference reaches the spec's state"
            return steps, why + (f"; nearest differs in {near[0]}: spec {near[1]}, reference {near[2]}" if near else
                                 "; the reference refuses every instance"), system
    return steps, "", system


def carry(cfg: str, timeout: float = 900, svg: Path | None = None) -> Carried:
    """`svg`: draw the reference's steps (with the switch) as a sequence diagram there."""
    model = load_model(cfg)
    t0 = time.perf_counter()
    m = next(x for x in json.loads((SPEC / "models.json").read_text())["models"] if x["config"] == cfg)
    result = run_tlc(spec_file(m["spec"]), spec_file(cfg), workers=1, check_deadlock=m.get("check_deadlock", False),
                     timeout_s=timeout)
    tlc_seconds = round(time.perf_counter() - t0, 1)
    if result.outcome != INVARIANT_VIOLATED or not result.trace:
        return Carried(cfg, None, [], 0, False, False, "", tlc_seconds, tlc_seconds,
                       f"TLC did not report an invariant violation ({result.outcome})")
    trace = result.trace
    seen: list = []
    steps, stuck, system = _follow(model, model.bugs, trace, seen)
    broken = not stuck and not invariants(system.abstract(), model).get(result.violated, True)
    if svg and seen:
        from harness.sequence import Step, render
        render([Step(a, tuple(p), state) for a, p, state in seen], svg,
               f"{cfg} (switches: {', '.join(sorted(model.bugs))}): TLC's counterexample carried to the reference, "
               f"{len(seen) - 1} of {len(trace) - 1} steps",
               footer=(f"{result.violated} broken on the reference" if broken else
                       f"{result.violated} holds on the reference" if not stuck else f"stuck: {stuck[:120]}"))
    fixed_steps, fixed_stuck, fixed = _follow(model, frozenset(), trace)
    if fixed_stuck:
        without = f"cannot follow: {fixed_stuck}"
    elif not invariants(fixed.abstract(), model).get(result.violated, True):
        without = f"also breaks {result.violated}: the switch is not what breaks it"
    else:
        without = f"follows the trace and {result.violated} holds"
    return Carried(cfg, result.violated, steps, len(trace) - 1, not stuck, broken, without, tlc_seconds,
                   round(time.perf_counter() - t0, 1), stuck)


def variants() -> list[str]:
    """The cfgs of SelectiveReplication's broken variants with a counterexample to carry: a
    switch that breaks an invariant. A model that violates with no switch on states a bound of
    the base protocol itself (MCRetryBeyondDedupWindow), which the reference shares."""
    return [m["config"] for m in json.loads((SPEC / "models.json").read_text())["models"]
            if m["spec"] == "MCSelectiveReplication.tla" and m["expect"] == "violates" and m.get("invariant")
            and m.get("size") == "small" and load_model(m["config"]).bugs]


def write(path: Path, results: list[Carried]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r.as_dict() for r in results], indent=1))
