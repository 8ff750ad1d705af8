"""State-graph replay of the whole protocol, in both directions at once.

TLC dumps a model's state graph (conformance/stategraph.py). From each spec state the reference
is put in (by restoring the snapshot taken when it first reached that state), every step the
harness can try is tried (conformance/spec_system.py: every action, parameter and open choice):

- each step the reference takes must be an edge of the spec's graph from that state, with the
  same action, to a state equal to the reference's abstract state (the other direction: the
  reference does nothing the spec does not allow);
- each edge of the spec's graph from that state must be taken by some step of the reference
  (the reference can do everything the spec does), unless a named refinement says why not.

Each state is expanded once, so each edge costs one step. The spec's invariants are evaluated
on the reference's abstract state after every step (conformance/spec_model.py): run with a
broken variant's switch, the reference must reach a state that breaks one.

The cache of a replica that is down is not compared: the reference loses it with the process,
and no action of the spec reads it before ReplicaRestart replaces it.

PR #102244's models (spec/pr102244/PR102244.tla) are replayed the same way on the reference's PR
design (`explore_pr`; conformance/pr_system.py `instances()`: every action of PR102244.tla's `Next`
with every parameter), with these differences (the Design of each): states are compared as they
are, no refinement excuses an edge, the cfg's invariants but TypeOKInv are evaluated on the
reference's state by checkers/pr102244_live.py once per state reached, and a state's out-edges
are all counted past a spec-only one. With `depth`, only states fewer than `depth` steps from
the initial state are expanded (the dump holds every out-edge of those). With `sample` (a
fraction, and `seed`), a seeded share of the expandable states is checked: every state is still
reached (a state's snapshot comes from its BFS parent, so the parents on the way are stepped),
but only the sampled ones have all their instances tried and their out-edges required; the
report gives the edges covered.
"""

from __future__ import annotations

import json
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from conformance import pr_designs
from conformance.replay import first_difference
from conformance.spec_model import invariants, load_model
from conformance.spec_system import SpecSystem
from conformance.stategraph import cfg_invariants, dump, expanded, graph_cfg, spec_file, state_key, wrapper_of
from harness.tlc.values import Fn, to_json


# Spec steps the reference does not take, on purpose: the reference's choice is narrower than
# the spec's "some", and the narrower choice is the safe one. Each is a refinement, not a gap,
# and is excused only where its test on the spec's edge holds (state, next state, the actions the
# reference took from that state).
def _forward_to_crashed(s: dict, t: dict, taken: set) -> bool:
    before, after = _values(s["ins"]), _values(t["ins"])
    return any(x["at"] != y["at"] and y["at"] not in t["active"] for x, y in zip(before, after))


def _values(f):
    return list(f) if isinstance(f, tuple) else list(f.values())


def _planned_move_taken(s: dict, t: dict, taken: set) -> bool:
    return "AdminRebalance" in taken


def _switch_waits_for_trimmed_entry(s: dict, t: dict, taken: set) -> bool:
    """The SWITCH the reference holds off: CaughtUpTo reads each queued entry's log number, which
    the reference knows only while the log entry is there (protocol.replica.caught_up_to matches a
    queue entry's text against the log), so a queued entry of the partition whose log entry the
    cleanup thread has trimmed counts as below the CLONE's position and is waited for."""
    for p, m in s["mig"].items():
        if m["st"] != "clone" or s["asg"][p] == t["asg"][p]:
            continue
        if any(e["p"] == p and m["pos"] < e["k"] <= s["trimmed"] for e in s["queue"][m["dst"]]):
            return True
    return False


REFINEMENTS = {
    "ReplicaForwardInsert": ("forwards only to an owner that is up; the spec may forward to a crashed owner, and "
                             "the INSERT then times out (the client sees the same)", _forward_to_crashed),
    "AdminRebalance": ("SYSTEM REBALANCE starts the move its min-cost plan picks, one of the moves the spec allows "
                       "from this state (excused only when the reference took one of them here)", _planned_move_taken),
    "CoordinatorSwitch": ("SWITCH waits for a queued entry of the partition whose log entry was trimmed, which the "
                          "spec knows to be beyond the CLONE's position and the reference cannot tell from one below: "
                          "it waits (never too early)", _switch_waits_for_trimmed_entry),
}


def project(state: dict) -> dict:
    """A spec state as the reference can show it: caches of active replicas only."""
    cache = state["cache"]
    return {**state, "cache": Fn({r: cache[r] for r in sorted(state["active"])}) if state["active"] else ()}


def off_graph(near: list[dict], here: dict, reached: dict) -> tuple[str, object, object]:
    """Why a step the reference took from `here` to `reached` is not an edge: against the spec's
    first next state by the same action (`near`), or, when the spec has none, against `here`."""
    return first_difference(near[0], reached) if near else first_difference(here, reached)


class SpecGraph:
    """A model's state graph for checking one step at a time: the other direction for a random
    walk (conformance/machines.py model_machine). A step from a state of the graph must be an
    edge of it, with the same action, to a state equal to the reference's. With `depth`, only
    steps from states fewer than `depth` steps from the initial state are checked: the dump has
    every out-edge of those, and none of the states at the bound. `without_switches`: the graph
    of the cfg's constants with no switch on, the fixed spec a broken variant is judged by."""

    def __init__(self, cfg: str, depth: int | None = None, without_switches: bool = False):
        self.cfg, self.depth, self.without_switches = cfg, depth, without_switches
        model = load_model(cfg)
        self.model = replace(model, bugs=frozenset()) if without_switches else model
        self.name = (f"{cfg} without {', '.join(sorted(model.bugs))}" if without_switches and model.bugs else cfg) \
            + (f" to depth {depth}" if depth is not None else "")
        g = dump(cfg, depth=depth, without_switches=without_switches)
        self.states = g.number_of_nodes()
        seen = {n: project(d["state"]) for n, d in g.nodes(data=True)}  # one copy per state, shared by its edges
        self._node = {state_key(state): n for n, state in seen.items()}
        self._edges = {u: [(act, seen[v]) for _, v, act in g.out_edges(u, data="action")] for u in expanded(g, depth)}

    def check(self, before: dict, action: str, after: dict) -> str | None:
        """None when the step is an edge or cannot be checked; else what is wrong with it."""
        edges = self._edges.get(self._node.get(state_key(before)))
        if edges is None:
            return None
        if any(a == action and v == after for a, v in edges):
            return None
        near = [v for a, v in edges if a == action]
        var, spec, ref = off_graph(near, before, after)
        return (f"{action} is not a step the spec takes here ({self.name}): "
                + (f"its {action} changes {var} to {spec}, the reference's to {ref}" if near else
                   f"the spec has no {action} from this state; the reference changed {var} to {ref}"))


_graphs: dict = {}


def spec_graph(cfg: str, depth: int | None = None, without_switches: bool = False) -> SpecGraph:
    """One dump per distinct model and depth in a process (TLC takes seconds to a minute): the
    fixed twins of MCMigration's six variants are one graph."""
    text = graph_cfg(spec_file(cfg).read_text(), without_switches)
    key = (wrapper_of(cfg), "\n".join(x for x in text.splitlines() if not x.startswith("\\*")), depth)
    if key not in _graphs:
        _graphs[key] = SpecGraph(cfg, depth, without_switches)
    return _graphs[key]


@dataclass
class Failure:
    kind: str                       # "reference-only step", "spec-only step", "differs at start"
    steps: list                     # (action, args) from the initial state
    action: str = ""
    variable: str = ""
    spec: object = None
    reference: object = None

    def describe(self) -> str:
        lines = [f"  {i}. {a}{tuple(p)}" for i, (a, p) in enumerate(self.steps, 1)]
        if self.kind == "spec-only step":
            what = (f"the spec takes {self.action} from the state after these steps; no step of the reference "
                    f"does.\n    the spec's next state changes {self.variable}; the reference stays at:\n"
                    f"    spec:      {self.spec}\n    reference: {self.reference}")
        else:
            what = (f"{self.kind}: first differing variable {self.variable}\n"
                    f"    spec:      {self.spec}\n    reference: {self.reference}")
        return "steps:\n" + "\n".join(lines) + "\n" + what


@dataclass
class ExploreReport:
    model: str
    depth: int | None
    states: int
    edges: int
    covered: int = 0
    refined: int = 0                # edges left out by a named refinement
    steps_tried: int = 0
    steps_taken: int = 0
    seconds: float = 0.0
    failure: Failure | None = None
    violation: dict | None = None
    by_action: dict = field(default_factory=dict)
    refined_by_action: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "failure"}
        d["coverage"] = round(self.covered / self.edges, 4) if self.edges else 1.0
        d["coverage_without_refinements"] = (round(self.covered / (self.edges - self.refined), 4)
                                             if self.edges > self.refined else 1.0)
        d["failure"] = self.failure.describe() if self.failure else None
        return d

    @staticmethod
    def violation_record(name: str, steps: list, what, seconds: float) -> dict:
        return {"invariant": name, "steps": [f"{a}{tuple(p)}" for a, p in steps], "length": len(steps),
                "seconds_to_first": seconds}

    def close(self, failure: Failure | None, expanded: int, edges_checkable: int) -> None:
        self.failure = failure

    def failure_record(self) -> dict:
        f = self.failure
        return {"steps": f.steps, "kind": f.kind, "action": f.action, "variable": f.variable,
                "spec": to_json(f.spec) if f.spec is not None else None}


@dataclass
class PRExploreReport:
    model: str
    depth: int | None
    sample: float | None
    states: int
    edges: int
    expanded: int = 0               # states whose every step was tried
    edges_checkable: int = 0        # the out-edges of those states
    covered: int = 0                # ... that a step of the reference took
    steps_tried: int = 0
    steps_taken: int = 0
    seconds: float = 0.0
    failure: dict | None = None
    violation: dict | None = None
    by_action: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["agreement"] = round(self.covered / self.edges_checkable, 4) if self.edges_checkable else 1.0
        return d

    @staticmethod
    def violation_record(name: str, steps: list, what, seconds: float) -> dict:
        return {"invariant": name, "steps": [f"{a}{tuple(p)}" for a, p in steps], "what": what}

    def close(self, failure: Failure | None, expanded: int, edges_checkable: int) -> None:
        """The failure as JSON values (a failure at the start names no action)."""
        self.expanded, self.edges_checkable = expanded, edges_checkable
        if failure:
            self.failure = {"kind": failure.kind, "steps": [(a, list(p)) for a, p in failure.steps],
                            **({"action": failure.action} if failure.kind != "differs at start" else {}),
                            "variable": failure.variable,
                            "spec": to_json(failure.spec) if failure.spec is not None else None,
                            "reference": to_json(failure.reference) if failure.reference is not None else None}

    def failure_record(self) -> dict:
        return self.failure


def _path(parent: dict, node) -> list:
    out = []
    while parent.get(node) is not None:
        node, step = parent[node]
        out.append(step)
    return out[::-1]


def _as_is(state: dict) -> dict:
    return state


@dataclass(frozen=True)
class Design:
    """One spec family's side of the exploration."""
    module: str                     # named in the failure file
    report: Callable                # (cfg, depth, sample, states, edges) -> an empty report
    system: Callable                # (switches or None, the initial spec state) -> a fresh reference
    broken: Callable                # (system, its abstract state, invariant names) -> [(name, what)] broken
    project: Callable = _as_is      # a spec state as the reference can show it
    refinements: dict = field(default_factory=dict)
    per_step: bool = True           # the invariants after every step taken, else once per state reached
    stop_at_spec_only: bool = True  # stop counting a state's out-edges at its first spec-only one
    skip: frozenset = frozenset()   # the cfg's invariants not evaluated


def explore(cfg: str, bugs: frozenset[str] | None = None, depth: int | None = None, progress=print,
            failure_file: Path | None = None, stop_at_violation: bool = False) -> ExploreReport:
    """Replay spec/<family>/{cfg}'s graph (states within `depth` steps) on the reference, with `bugs`
    instead of the cfg's switches when given."""
    model = load_model(cfg)

    def broken(system, state, names):
        return [(n, None) for n, ok in invariants(state, model).items() if n in names and not ok]
    design = Design(module="SelectiveReplication",
                    report=lambda cfg, depth, sample, states, edges: ExploreReport(cfg, depth, states, edges),
                    system=lambda bugs, init: SpecSystem(model, bugs), broken=broken,
                    project=project, refinements=REFINEMENTS)
    return _explore(design, cfg, bugs, depth, None, 0, progress, failure_file, stop_at_violation)


def explore_pr(cfg: str, bugs: frozenset[str] | None = None, depth: int | None = None, sample: float | None = None,
               seed: int = 0, progress=print, failure_file: Path | None = None) -> PRExploreReport:
    """Replay a PR #102244 model's graph on the reference's PR design (this module's docstring)."""
    _, read_constants, system_cls, _, _ = pr_designs.design(cfg)
    constants = read_constants(cfg)

    def broken(system, state, names):
        found = system.invariants()
        return [(n, found[n]) for n in names if found[n]]
    design = Design(module="PR102244", report=PRExploreReport,
                    system=lambda bugs, init: system_cls.from_trace(constants, bugs, init),
                    broken=broken, per_step=False, stop_at_spec_only=False, skip=frozenset({"TypeOKInv"}))
    return _explore(design, cfg, bugs, depth, sample, seed, progress, failure_file)


def _explore(design: Design, cfg: str, bugs, depth, sample, seed, progress, failure_file,
             stop_at_violation: bool = False):
    """The one exploration loop: breadth first from the initial state, each reachable state
    restored from its BFS parent's step, its instances tried (all of them when it is in the
    sample) and its out-edges required; the design says what differs between the families."""
    names = [n for n in cfg_invariants(spec_file(cfg).read_text()) if n not in design.skip]
    t0 = time.perf_counter()
    g = dump(cfg, depth=depth)
    report = design.report(cfg, depth, sample, g.number_of_nodes(), g.number_of_edges())
    start = next(n for n, d in g.nodes(data=True) if d["init"])
    system = design.system(bugs, g.nodes[start]["state"])
    diff = first_difference(design.project(g.nodes[start]["state"]), system.abstract())
    if diff:
        report.close(Failure("differs at start", [], "", *diff), 0, 0)
        return _finish(design, report, t0, failure_file, cfg, system)
    projected = {}

    def proj(n):
        if n not in projected:
            projected[n] = design.project(g.nodes[n]["state"])
        return projected[n]

    # States at the depth bound have no edges in the dump: their steps cannot be checked.
    checkable = expanded(g, depth)
    rng = random.Random(seed)
    chosen = checkable if sample is None else {n for n in sorted(checkable) if rng.random() < sample}
    parent = {start: None}
    todo = deque([(start, system.snapshot())])  # breadth first: the first violation found is a shortest one
    failure, n_expanded, n_edges = None, 0, 0
    while todo and failure is None:
        u, snap = todo.popleft()
        if u not in checkable:
            continue
        here = proj(u)
        out_edges = list(g.out_edges(u, keys=True, data="action"))
        whole = u in chosen
        # A state outside the sample is only stepped along its edges to states not reached yet
        # (their snapshots), each by the first instance of the edge's action that reaches it.
        wanted = None if whole else {act for _, v, _, act in out_edges if v not in parent}
        if wanted == set():
            continue
        system.restore(snap)
        taken = set()
        for action, args in system.instances():
            if wanted is not None and action not in wanted:
                continue
            report.steps_tried += 1
            w = system.attempt(snap, action, args)
            if w is None or w == here:
                continue  # refused, or a step that changes nothing: a stutter, allowed
            report.steps_taken += 1
            match = [(a, v, k) for a, v, k, act in out_edges if act == action and proj(v) == w]
            if not match:
                var, s, r = off_graph([proj(v) for _, v, _, act in out_edges if act == action], here, w)
                failure = Failure("reference-only step", _path(parent, u) + [(action, args)], action, var, s, r)
                break
            if (names and report.violation is None
                    and (design.per_step or any(v not in parent for _, v, _ in match))):
                bad = design.broken(system, w, names)
                if bad:
                    report.violation = report.violation_record(bad[0][0], _path(parent, u) + [(action, args)],
                                                               bad[0][1], round(time.perf_counter() - t0, 2))
                    if stop_at_violation:
                        break
            new_snap = None
            for e in match:
                taken.add(e)
                v = e[1]
                if v not in parent:
                    parent[v] = (u, (action, args))
                    new_snap = new_snap or system.snapshot()
                    todo.append((v, new_snap))
        if failure or (report.violation and stop_at_violation):
            break
        if not whole:
            continue
        n_expanded += 1
        taken_actions = {act for a, v, k, act in out_edges if (a, v, k) in taken}
        for a, v, k, act in out_edges:
            n_edges += 1
            e = (a, v, k)
            if e in taken:
                report.covered += 1
                report.by_action[act] = report.by_action.get(act, 0) + 1
            elif act in design.refinements and design.refinements[act][1](g.nodes[u]["state"], g.nodes[v]["state"],
                                                                           taken_actions):
                report.refined += 1
                report.refined_by_action[act] = report.refined_by_action.get(act, 0) + 1
            elif failure is None:
                var, s, r = first_difference(proj(v), here) or ("", None, None)
                failure = Failure("spec-only step", _path(parent, u), act, var, s, r)
                if design.stop_at_spec_only:
                    break
        if progress and n_expanded % 2000 == 0:
            progress(f"  {cfg}: {n_expanded}/{len(chosen)} states expanded, {report.covered}/{report.edges} edges, "
                     f"{time.perf_counter() - t0:.0f} s")
    report.close(failure, n_expanded, n_edges)
    return _finish(design, report, t0, failure_file, cfg, system)


def _finish(design: Design, report, t0, failure_file, cfg, system):
    report.seconds = round(time.perf_counter() - t0, 1)
    if report.failure and failure_file:
        failure_file.parent.mkdir(parents=True, exist_ok=True)
        failure_file.write_text(json.dumps({"module": design.module, "cfg": cfg, "bugs": sorted(system.bugs),
                                            **report.failure_record()}, indent=1, default=str))
    return report
