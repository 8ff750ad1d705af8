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
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path

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


REFINEMENTS = {
    "ReplicaForwardInsert": ("forwards only to an owner that is up; the spec may forward to a crashed owner, and "
                             "the INSERT then times out (the client sees the same)", _forward_to_crashed),
    "AdminRebalance": ("SYSTEM REBALANCE starts the move its min-cost plan picks, one of the moves the spec allows "
                       "from this state (excused only when the reference took one of them here)", _planned_move_taken),
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


def _path(parent: dict, node) -> list:
    out = []
    while parent.get(node) is not None:
        node, step = parent[node]
        out.append(step)
    return out[::-1]


def explore(cfg: str, bugs: frozenset[str] | None = None, depth: int | None = None, progress=print,
            failure_file: Path | None = None, stop_at_violation: bool = False) -> ExploreReport:
    """Replay spec/<family>/{cfg}'s graph (states within `depth` steps) on the reference, with `bugs`
    instead of the cfg's switches when given."""
    model = load_model(cfg)
    names = cfg_invariants(spec_file(cfg).read_text())
    t0 = time.perf_counter()
    g = dump(cfg, depth=depth)
    report = ExploreReport(cfg, depth, g.number_of_nodes(), g.number_of_edges())
    system = SpecSystem(model, bugs)
    start = [n for n, d in g.nodes(data=True) if d["init"]]
    got = system.abstract()
    diff = first_difference(project(g.nodes[start[0]]["state"]), got)
    if diff:
        report.failure = Failure("differs at start", [], "", *diff)
        return _finish(report, t0, failure_file, cfg, bugs, model)
    projected = {}

    def proj(n):
        if n not in projected:
            projected[n] = project(g.nodes[n]["state"])
        return projected[n]

    # States at the depth bound have no edges in the dump: their steps cannot be checked.
    checkable = expanded(g, depth)
    parent = {start[0]: None}
    todo = deque([(start[0], system.snapshot())])  # breadth first: the first violation found is a shortest one
    covered = set()
    done = 0
    while todo and report.failure is None:
        u, snap = todo.popleft()
        if u not in checkable:
            continue
        system.restore(snap)
        here = proj(u)
        out_edges = list(g.out_edges(u, keys=True, data="action"))
        taken = set()
        for action, args in system.instances():
            report.steps_tried += 1
            w = system.attempt(snap, action, args)
            if w is None:
                continue
            if w == here:
                continue  # a step that changes nothing is a stutter, allowed
            report.steps_taken += 1
            match = [(a, v, k) for a, v, k, act in out_edges if act == action and proj(v) == w]
            if not match:
                var, s, r = off_graph([proj(v) for _, v, _, act in out_edges if act == action], here, w)
                report.failure = Failure("reference-only step", _path(parent, u) + [(action, args)], action,
                                         var, s, r)
                break
            if names and report.violation is None:
                bad = [n for n, ok in invariants(w, model).items() if n in names and not ok]
                if bad:
                    steps = _path(parent, u) + [(action, args)]
                    report.violation = {"invariant": bad[0], "steps": [f"{a}{tuple(p)}" for a, p in steps],
                                        "length": len(steps), "seconds_to_first": round(time.perf_counter() - t0, 2)}
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
        if report.failure or (report.violation and stop_at_violation):
            break
        taken_actions = {act for a, v, k, act in out_edges if (a, v, k) in taken}
        for a, v, k, act in out_edges:
            e = (a, v, k)
            if e in taken:
                covered.add(e)
                report.by_action[act] = report.by_action.get(act, 0) + 1
            elif act in REFINEMENTS and REFINEMENTS[act][1](g.nodes[u]["state"], g.nodes[v]["state"],
                                                                    taken_actions):
                report.refined += 1
                report.refined_by_action[act] = report.refined_by_action.get(act, 0) + 1
            else:
                var, s, r = first_difference(proj(v), here) or ("", None, None)
                report.failure = Failure("spec-only step", _path(parent, u), act, var, s, r)
                break
        done += 1
        if progress and done % 2000 == 0:
            progress(f"  {cfg}: {done}/{report.states} states expanded, {len(covered)}/{report.edges} edges, "
                     f"{time.perf_counter() - t0:.0f} s")
    report.covered = len(covered)
    return _finish(report, t0, failure_file, cfg, bugs, model)


def _finish(report, t0, failure_file, cfg, bugs, model) -> ExploreReport:
    report.seconds = round(time.perf_counter() - t0, 1)
    if report.failure and failure_file:
        failure_file.parent.mkdir(parents=True, exist_ok=True)
        failure_file.write_text(json.dumps({
            "module": "SelectiveReplication", "cfg": cfg, "bugs": sorted(model.bugs if bugs is None else bugs),
            "steps": report.failure.steps, "kind": report.failure.kind, "action": report.failure.action,
            "variable": report.failure.variable, "spec": to_json(report.failure.spec) if report.failure.spec is not None else None,
        }, indent=1, default=str))
    return report
