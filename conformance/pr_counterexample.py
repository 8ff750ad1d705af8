"""PR #102244's findings (spec/FINDINGS.md PR-F1..PR-F5, and O7's other reading): each failing
model's TLC counterexample carried, action by action, to the reference's PR design
(reference/pr102244/). PR102244.tla's models through conformance/pr_system.py, the first-INSERT
models of PR102244Whole.tla through its PRWholeSystem.

For each state of TLC's trace, the reference's step with the trace's action (any parameters)
whose abstract state (conformance/pr_system.py) equals the spec's next state. With the model's
switches the reference must follow the whole trace and the invariant TLC reports must fail on its
final state, evaluated by checkers/pr102244_live.py. With the finding's switch off (the
other switches of the model kept, as its fixed model keeps them) the reference must not get
there: it cannot take one of the steps, or it takes them all and the invariant holds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from conformance.replay import first_difference
from conformance import pr_system
from conformance.pr_system import PRSystem
from conformance.stategraph import spec_file
from harness.tlc.runner import INVARIANT_VIOLATED, run_tlc

# failing model -> (finding, the switch the finding's fixed model turns off)
FINDINGS = {
    "MCPR102244_snapshot_source_parts.cfg": ("PR-F1", "snapshot_source_parts"),
    "MCPR102244_source_stops_at_switch.cfg": ("PR-F2", "source_stops_at_switch"),
    "MCPR102244_source_stops_at_switch_query.cfg": ("PR-F2", "source_stops_at_switch"),
    "MCPR102244_switch_fresh_version.cfg": ("PR-F3", "switch_fresh_version"),
    "MCPR102244_filter_cached.cfg": ("PR-F4", "complete_without_rescan"),
    "MCPR102244Whole_FirstInsert_filter_negative_cache.cfg": ("PR-F5", "filter_negative_cache"),
    "MCPR102244Whole_FirstInsert_retry_new_block_id.cfg": ("O7", "retry_new_block_id"),
}


def design_of(cfg: str):
    """The TLA+ module, the constants reader, the system and TLC's step labels of a cfg's model."""
    module, read_constants, system_cls, _, labels = pr_system.design(cfg)
    return module, read_constants, system_cls, labels


@dataclass
class CarriedPR:
    cfg: str
    finding: str
    switch: str
    invariant: str | None               # what TLC reported violated
    trace_length: int = 0               # steps in TLC's counterexample
    steps: list = field(default_factory=list)   # the reference's steps, (action, args)
    followed: bool = False              # the reference took every step
    violations: list = field(default_factory=list)   # the invariant's violations on the reference's final state
    without_switch: str = ""            # what the reference does with the finding's switch off
    without_switch_caught: bool = False  # ... and that is: refused a step, or kept the invariant
    stuck: str = ""
    tlc_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def caught(self) -> bool:
        return self.followed and bool(self.violations) and self.without_switch_caught

    def as_dict(self) -> dict:
        return {**self.__dict__, "steps": [f"{a}{tuple(p)}" for a, p in self.steps], "caught": self.caught}


def follow(constants: dict, bugs: frozenset[str], trace, like: list = (), system_cls=PRSystem,
           labels: dict = {}) -> tuple[list, str, PRSystem]:
    """Take the trace's steps on a fresh reference; the steps taken and, when it could not go
    on, where and why: the first differing variable of the state the same step as in `like`
    (the run with the switch) reaches, or of the first instance the reference takes."""
    system = system_cls(constants, bugs, coordinator=trace[0].state["coord"].name)
    diff = first_difference(trace[0].state, system.abstract())
    if diff:
        return [], f"initial state differs in {diff[0]}: spec {diff[1]}, reference {diff[2]}", system
    steps = []
    for n, state in enumerate(trace[1:], 1):
        snap, near = system.snapshot(), None
        for action, args in system.instances():
            if action not in labels.get(state.action, (state.action,)):
                continue
            got = system.attempt(snap, action, args)
            if got is None:
                continue
            if got == state.state:
                steps.append((action, args))
                break
            if near is None or (n <= len(like) and like[n - 1] == (action, args)):
                near = first_difference(state.state, got)
        else:
            system.restore(snap)
            label = state.action + (f": {' or '.join(labels[state.action])}" if state.action in labels else "")
            why = f"step {n} ({label})"
            return steps, why + (f": nearest differs in {near[0]}: spec {near[1]}, reference {near[2]}" if near else
                                 ": the reference refuses every instance"), system
    return steps, "", system


def carry(cfg: str, timeout: float = 300) -> CarriedPR:
    finding, switch = FINDINGS[cfg]
    module, read_constants, system_cls, labels = design_of(cfg)
    constants = read_constants(cfg)
    t0 = time.perf_counter()
    result = run_tlc(spec_file(module), spec_file(cfg), workers=1, check_deadlock=False, timeout_s=timeout)
    r = CarriedPR(cfg, finding, switch, result.violated, tlc_seconds=round(time.perf_counter() - t0, 1))
    if result.outcome != INVARIANT_VIOLATED or not result.trace:
        r.stuck = f"TLC did not report an invariant violation ({result.outcome})"
        return r
    trace = result.trace
    r.trace_length = len(trace) - 1
    r.steps, r.stuck, system = follow(constants, constants["bugs"], trace, (), system_cls, labels)
    r.followed = not r.stuck
    if r.followed:
        r.violations = system.invariants()[result.violated]
    fixed_steps, fixed_stuck, fixed = follow(constants, constants["bugs"] - {switch}, trace, r.steps, system_cls,
                                             labels)
    if fixed_stuck:
        r.without_switch, r.without_switch_caught = f"cannot follow {fixed_stuck}", True
    else:
        broken = fixed.invariants()[result.violated]
        r.without_switch_caught = not broken
        r.without_switch = (f"follows the trace and {result.violated} holds" if not broken else
                            f"also breaks {result.violated}: the switch is not what breaks it ({broken})")
    r.seconds = round(time.perf_counter() - t0, 1)
    return r
