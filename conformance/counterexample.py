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

Two designs: SelectiveReplication's broken variants (`carry`, `variants`; conformance/spec_system.py)
and PR #102244's findings (`carry_pr`, FINDINGS; spec/FINDINGS.md PR-F1..PR-F5, and O7's other
reading), PR102244.tla's models and PR102244Whole.tla's first-INSERT models through
conformance/pr_system.py, the invariants evaluated by checkers/pr102244_live.py. For a PR finding,
"without the switch" turns off the finding's switch alone, the model's other switches kept, as
its fixed model keeps them; a variant of SelectiveReplication is run with no switch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from conformance import pr_designs
from conformance.explore import project
from conformance.replay import first_difference
from conformance.spec_model import ModelError, invariants, load_model
from conformance.spec_system import SpecSystem
from conformance.stategraph import SPEC, spec_file
from harness.tlc.runner import INVARIANT_VIOLATED, run_tlc

# failing PR model -> (finding, the switch the finding's fixed model turns off)
FINDINGS = {
    "MCPR102244_snapshot_source_parts.cfg": ("PR-F1", "snapshot_source_parts"),
    "MCPR102244_source_stops_at_switch.cfg": ("PR-F2", "source_stops_at_switch"),
    "MCPR102244_source_stops_at_switch_query.cfg": ("PR-F2", "source_stops_at_switch"),
    "MCPR102244_switch_fresh_version.cfg": ("PR-F3", "switch_fresh_version"),
    "MCPR102244_filter_cached.cfg": ("PR-F4", "complete_without_rescan"),
    "MCPR102244Whole_FirstInsert_filter_negative_cache.cfg": ("PR-F5", "filter_negative_cache"),
    "MCPR102244Whole_FirstInsert_retry_new_block_id.cfg": ("O7", "retry_new_block_id"),
    # PR102244Code.tla: the findings against the PR's code
    "MCPR102244Code_snapshot_source_parts.cfg": ("PR-F1", "snapshot_source_parts"),
    "MCPR102244Code_source_stops_at_switch.cfg": ("PR-F2", "source_stops_at_switch"),
    "MCPR102244Code_source_stops_at_switch_query.cfg": ("PR-F2", "source_stops_at_switch"),
    "MCPR102244Code_same_target.cfg": ("PR-F3", "switch_without_target_check"),
    "MCPR102244Code_second_migration.cfg": ("PR-F3", "switch_without_target_check"),
    "MCPR102244Code_snapshot_before_clone_multi.cfg": ("PR-F6", "snapshot_before_clone_multi"),
    "MCPR102244Code_snapshot_omits_patch_parts.cfg": ("PR-F8", "snapshot_omits_patch_parts"),
    "MCPR102244Code_rollback_races_switch.cfg": ("PR-F7", "switch_without_target_check"),
    "MCPR102244Code_repair_moves_replica.cfg": ("PR-F9", "repair_moves_replica"),
    "MCPR102244Code_read_from_cloning_target.cfg": ("PR-F10", "read_from_cloning_target"),
}


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


def _as_is(state: dict) -> dict:
    return state


@dataclass(frozen=True)
class Following:
    """What following a trace needs of one design (a family's reference), and how it says where it
    could not."""
    system: Callable                  # (switches, the trace's first state) -> a fresh reference
    project: Callable = _as_is        # a spec state as the reference can show it
    labels: dict = field(default_factory=dict)   # TLC's label of a step -> the actions it may be
    differs_at_start: str = "initial state differs in {0}: spec {1}, reference {2}"   # variable, spec, reference
    no_step: str = ":"                # after "step n (action)", before the nearest difference or the refusal


def _spec_following(model) -> Following:
    return Following(lambda bugs, init: SpecSystem(model, bugs), project,
                     differs_at_start="initial state differs in {0}",
                     no_step=": no step of the reference reaches the spec's state;")


def _pr_following(cfg: str) -> tuple[Following, dict]:
    _, read_constants, system_cls, _, labels = pr_designs.design(cfg)
    constants = read_constants(cfg)
    return Following(lambda bugs, init: system_cls.from_trace(constants, bugs, init),
                     labels=labels), constants


def follow(design: Following, bugs: frozenset[str], trace, like: list = (),
           seen: list | None = None) -> tuple[list, str, object]:
    """Take the trace's steps on a fresh reference; the steps taken and, when it could not go
    on, where and why: the first differing variable of the state the same step as in `like`
    (the run with the switch) reaches, or of the first instance the reference takes. `seen`
    gets (action, args, the reference's state) for "Init" and each step taken."""
    system = design.system(bugs, trace[0].state)
    start = system.abstract()
    diff = first_difference(design.project(trace[0].state), start)
    if diff:
        return [], design.differs_at_start.format(*diff), system
    if seen is not None:
        seen.append(("Init", (), start))
    steps = []
    for n, state in enumerate(trace[1:], 1):
        want = design.project(state.state)
        snap, near = system.snapshot(), None
        for action, args in system.instances():
            if action not in design.labels.get(state.action, (state.action,)):
                continue
            got = system.attempt(snap, action, args)
            if got is None:
                continue
            if got == want:
                steps.append((action, args))
                if seen is not None:
                    seen.append((action, args, got))
                break
            if near is None or (n <= len(like) and like[n - 1] == (action, args)):
                near = first_difference(want, got)
        else:
            system.restore(snap)
            label = state.action + (f": {' or '.join(design.labels[state.action])}" if state.action in design.labels
                                    else "")
            why = f"step {n} ({label}){design.no_step}"
            return steps, why + (f" nearest differs in {near[0]}: spec {near[1]}, reference {near[2]}" if near else
                                 " the reference refuses every instance"), system
    return steps, "", system


def _counterexample(cfg: str, timeout: float):
    """TLC's check of a failing model (its wrapper and deadlock setting from spec/models.json)."""
    m = next(x for x in json.loads((SPEC / "models.json").read_text())["models"] if x["config"] == cfg)
    return run_tlc(spec_file(m["spec"]), spec_file(cfg), workers=1, check_deadlock=m.get("check_deadlock", False),
                   timeout_s=timeout)


def carry(cfg: str, timeout: float = 900, svg: Path | None = None) -> Carried:
    """A SelectiveReplication variant's counterexample. `svg`: draw the reference's steps (with
    the switch) as a sequence diagram there."""
    model = load_model(cfg)
    design = _spec_following(model)
    t0 = time.perf_counter()
    result = _counterexample(cfg, timeout)
    tlc_seconds = round(time.perf_counter() - t0, 1)
    if result.outcome != INVARIANT_VIOLATED or not result.trace:
        return Carried(cfg, None, [], 0, False, False, "", tlc_seconds, tlc_seconds,
                       f"TLC did not report an invariant violation ({result.outcome})")
    trace = result.trace
    seen: list = []
    steps, stuck, system = follow(design, model.bugs, trace, seen=seen)
    broken = not stuck and not invariants(system.abstract(), model).get(result.violated, True)
    if svg and seen:
        from harness.sequence import Step, render
        render([Step(a, tuple(p), state) for a, p, state in seen], svg,
               f"{cfg} (switches: {', '.join(sorted(model.bugs))}): TLC's counterexample carried to the reference, "
               f"{len(seen) - 1} of {len(trace) - 1} steps",
               footer=(f"{result.violated} broken on the reference" if broken else
                       f"{result.violated} holds on the reference" if not stuck else f"stuck: {stuck[:120]}"))
    fixed_steps, fixed_stuck, fixed = follow(design, frozenset(), trace)
    if fixed_stuck:
        without = f"cannot follow: {fixed_stuck}"
    elif not invariants(fixed.abstract(), model).get(result.violated, True):
        without = f"also breaks {result.violated}: the switch is not what breaks it"
    else:
        without = f"follows the trace and {result.violated} holds"
    return Carried(cfg, result.violated, steps, len(trace) - 1, not stuck, broken, without, tlc_seconds,
                   round(time.perf_counter() - t0, 1), stuck)


def design_of(cfg: str):
    """The TLA+ module, the constants reader, the system and TLC's step labels of a PR cfg's model."""
    module, read_constants, system_cls, _, labels = pr_designs.design(cfg)
    return module, read_constants, system_cls, labels


def carry_pr(cfg: str, timeout: float = 300) -> CarriedPR:
    """A PR finding's counterexample (FINDINGS)."""
    finding, switch = FINDINGS[cfg]
    design, constants = _pr_following(cfg)
    t0 = time.perf_counter()
    result = _counterexample(cfg, timeout)
    r = CarriedPR(cfg, finding, switch, result.violated, tlc_seconds=round(time.perf_counter() - t0, 1))
    if result.outcome != INVARIANT_VIOLATED or not result.trace:
        r.stuck = f"TLC did not report an invariant violation ({result.outcome})"
        return r
    trace = result.trace
    r.trace_length = len(trace) - 1
    r.steps, r.stuck, system = follow(design, constants["bugs"], trace)
    r.followed = not r.stuck
    if r.followed:
        r.violations = system.invariants()[result.violated]
    fixed_steps, fixed_stuck, fixed = follow(design, constants["bugs"] - {switch}, trace, r.steps)
    if fixed_stuck:
        r.without_switch, r.without_switch_caught = f"cannot follow {fixed_stuck}", True
    else:
        broken = fixed.invariants()[result.violated]
        r.without_switch_caught = not broken
        r.without_switch = (f"follows the trace and {result.violated} holds" if not broken else
                            f"also breaks {result.violated}: the switch is not what breaks it ({broken})")
    r.seconds = round(time.perf_counter() - t0, 1)
    return r


def broken_variants() -> tuple[list[str], dict[str, str]]:
    """SelectiveReplication's small models that violate an invariant: those with a switch the
    reference drives, and the others the reference does not drive yet, each with why (the
    constants spec_model.load_model refuses: a placement other than the RFC's, a log that keeps
    no entry)."""
    driven, undriven = [], {}
    for m in json.loads((SPEC / "models.json").read_text())["models"]:
        if (m["spec"], m["expect"], m.get("size")) != ("MCSelectiveReplication.tla", "violates", "small") \
                or not m.get("invariant"):
            continue
        try:
            if load_model(m["config"]).bugs:
                driven.append(m["config"])
        except ModelError as e:
            undriven[m["config"]] = str(e).removeprefix(f"{m['config']}: ")
    return driven, undriven


def variants() -> list[str]:
    """The cfgs of SelectiveReplication's broken variants with a counterexample to carry: a
    switch that breaks an invariant, under constants the reference drives (broken_variants:
    the others too). A model that violates with no switch on states a bound of the base protocol
    itself (MCRetryBeyondDedupWindow), which the reference shares."""
    return broken_variants()[0]


def write(path: Path, results: list[Carried]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r.as_dict() for r in results], indent=1))
