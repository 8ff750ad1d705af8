"""State-graph replay of a PR #102244 model (spec/pr102244/PR102244.tla) on the reference's PR design
(reference/pr102244/), in both directions, as conformance/explore.py does it for
SelectiveReplication.tla:

- TLC dumps the model's state graph (conformance/stategraph.py); from each state, the reference
  is restored to the snapshot taken when it first reached that state, and every step the harness
  can take there (conformance/pr_system.py `instances()`: every action of PR102244.tla's `Next`
  with every parameter) is tried;
- each step the reference takes must be an edge of the graph from that state, with the same
  action, to a state equal to the reference's abstract state (a step that changes nothing is a
  stutter);
- each edge from that state must be taken by some step of the reference;
- the cfg's invariants are evaluated on the reference's state, by checkers/pr102244_live.py,
  once per state reached.

With `depth`, only states fewer than `depth` steps from the initial state are expanded (the dump
holds every out-edge of those). With `sample` (a fraction, and `seed`), a seeded share of the
expandable states is checked: every state is still reached (a state's snapshot comes from its
BFS parent, so the parents on the way are stepped), but only the sampled ones have all their
instances tried and their out-edges required; the report gives the edges covered.
"""

from __future__ import annotations

import json
import random
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from conformance.explore import _path
from conformance.replay import first_difference
from conformance.pr_system import PRSystem, model_constants
from conformance.stategraph import cfg_invariants, dump, expanded, spec_file
from harness.tlc.values import to_json


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


def explore(cfg: str, bugs: frozenset[str] | None = None, depth: int | None = None, sample: float | None = None,
            seed: int = 0, progress=print, failure_file: Path | None = None) -> PRExploreReport:
    constants = model_constants(cfg)
    names = [n for n in cfg_invariants(spec_file(cfg).read_text()) if n != "TypeOKInv"]
    t0 = time.perf_counter()
    g = dump(cfg, depth=depth)
    report = PRExploreReport(cfg, depth, sample, g.number_of_nodes(), g.number_of_edges())
    start = next(n for n, d in g.nodes(data=True) if d["init"])
    init = g.nodes[start]["state"]
    system = PRSystem(constants, bugs, coordinator=init["coord"].name)
    diff = first_difference(init, system.abstract())
    if diff:
        report.failure = {"kind": "differs at start", "steps": [], "variable": diff[0], "spec": diff[1],
                          "reference": diff[2]}
        return _finish(report, t0, failure_file, cfg, system.bugs)
    checkable = expanded(g, depth)
    rng = random.Random(seed)
    chosen = checkable if sample is None else {n for n in sorted(checkable) if rng.random() < sample}
    parent = {start: None}
    todo = deque([(start, system.snapshot())])
    while todo and report.failure is None:
        u, snap = todo.popleft()
        if u not in checkable:
            continue
        here = g.nodes[u]["state"]
        out_edges = list(g.out_edges(u, keys=True, data="action"))
        whole = u in chosen
        taken = set()
        # A state outside the sample is only stepped along its edges to states not reached yet
        # (their snapshots), each by the first instance of the edge's action that reaches it.
        wanted = None if whole else {act for _, v, _, act in out_edges if v not in parent}
        if wanted == set():
            continue
        for action, args in system.instances():
            if wanted is not None and action not in wanted:
                continue
            report.steps_tried += 1
            w = system.attempt(snap, action, args)
            if w is None or w == here:
                continue
            report.steps_taken += 1
            match = [(a, v, k) for a, v, k, act in out_edges if act == action and g.nodes[v]["state"] == w]
            if not match:
                near = [g.nodes[v]["state"] for _, v, _, act in out_edges if act == action]
                var, s, r = first_difference(near[0], w) if near else first_difference(here, w)
                report.failure = {"kind": "reference-only step", "steps": _path(parent, u) + [(action, args)],
                                  "action": action, "variable": var, "spec": s, "reference": r}
                break
            new_snap = None
            for e in match:
                taken.add(e)
                v = e[1]
                if v not in parent:
                    parent[v] = (u, (action, args))
                    new_snap = new_snap or system.snapshot()
                    todo.append((v, new_snap))
                    if names and report.violation is None:
                        bad = [n for n in names if system.invariants()[n]]
                        if bad:
                            steps = _path(parent, v)
                            report.violation = {"invariant": bad[0], "steps": [f"{a}{tuple(p)}" for a, p in steps],
                                                "what": system.invariants()[bad[0]]}
        if report.failure or not whole:
            continue
        report.expanded += 1
        for a, v, k, act in out_edges:
            report.edges_checkable += 1
            if (a, v, k) in taken:
                report.covered += 1
                report.by_action[act] = report.by_action.get(act, 0) + 1
            elif report.failure is None:
                var, s, r = first_difference(g.nodes[v]["state"], here) or ("", None, None)
                report.failure = {"kind": "spec-only step", "steps": _path(parent, u), "action": act,
                                  "variable": var, "spec": s, "reference": r}
        if progress and report.expanded % 2000 == 0:
            progress(f"  {cfg}: {report.expanded}/{len(chosen)} states expanded, {report.covered} edges, "
                     f"{time.perf_counter() - t0:.0f} s")
    return _finish(report, t0, failure_file, cfg, system.bugs)


def _finish(report, t0, failure_file, cfg, bugs) -> PRExploreReport:
    report.seconds = round(time.perf_counter() - t0, 1)
    if report.failure:
        f = report.failure
        f["steps"] = [(a, list(p)) for a, p in f["steps"]]
        f["spec"], f["reference"] = (to_json(f["spec"]) if f.get("spec") is not None else None,
                                     to_json(f["reference"]) if f.get("reference") is not None else None)
        if failure_file:
            failure_file.parent.mkdir(parents=True, exist_ok=True)
            failure_file.write_text(json.dumps({"module": "PR102244", "cfg": cfg, "bugs": sorted(bugs), **f},
                                               indent=1, default=str))
    return report
