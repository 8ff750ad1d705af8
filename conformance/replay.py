"""State-graph replay: every edge of a model's TLC state graph, executed on the reference along
paths from the initial state; after each step the reference's abstract state must equal the
spec's. A mismatch names the first differing variable and is written to a file that
`python -m conformance replay FILE` runs again.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from conformance.assignment_system import AssignmentSystem
from conformance.stategraph import cfg_invariants, dump, edge_cover, spec_file
from harness.tlc.values import to_json

SYSTEMS = {"Assignment": AssignmentSystem}


def model_constants(cfg: str) -> dict:
    """RF, Bugs and the model values of replicas (r*) and partitions (p*) from a cfg."""
    text = spec_file(cfg).read_text()
    names = re.findall(r"\b([rp]\d+) = \1\b", text)
    bugs = re.search(r"Bugs = \{([^}]*)\}", text)
    return {"replicas": tuple(n for n in names if n.startswith("r")),
            "partitions": tuple(n for n in names if n.startswith("p")),
            "rf": int(re.search(r"\bRF = (\d+)", text)[1]),
            "bugs": frozenset(re.findall(r'"(\w+)"', bugs[1])) if bugs else frozenset()}


@dataclass
class Mismatch:
    steps: list[tuple[str, tuple]]
    variable: str
    spec: object
    reference: object
    error: str = ""

    def describe(self) -> str:
        lines = [f"  {i}. {a}{p}" for i, (a, p) in enumerate(self.steps, 1)]
        what = (f"the reference refused or failed the last step: {self.error}" if self.error else
                f"first differing variable after step {len(self.steps)}: {self.variable}\n"
                f"    spec:      {self.spec}\n    reference: {self.reference}")
        return "steps:\n" + "\n".join(lines) + "\n" + what


@dataclass
class ReplayReport:
    model: str
    states: int
    edges: int
    covered: int = 0
    transitions: int = 0
    paths: int = 0
    seconds: float = 0.0
    mismatch: Mismatch | None = None
    violation: dict | None = None   # the first spec invariant the reference's states broke
    by_action: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "mismatch"}
        d["coverage"] = round(self.covered / self.edges, 4) if self.edges else 1.0
        d["mismatch"] = self.mismatch.describe() if self.mismatch else None
        return d


def first_difference(spec: dict, ref: dict) -> tuple[str, object, object] | None:
    for var in sorted(spec):
        if spec[var] != ref.get(var):
            return var, spec[var], ref.get(var)
    return None


def run_steps(module: str, constants: dict, steps: list[tuple[str, tuple]], expected: list[dict] | None = None,
              bugs: frozenset[str] | None = None, invariants: list[str] = (),
              seen: list | None = None) -> tuple[Mismatch | None, tuple | None]:
    """Run steps on a fresh reference system; compare with expected states when given, and
    evaluate the named spec invariants on the reference's state after each step. Returns the
    mismatch (or None) and the first violated invariant as (name, steps to it) (or None).
    `seen`, when given, gets (action, params, state) for "Init" and after each step taken."""
    cls = SYSTEMS[module]
    system = cls(constants["replicas"], constants["partitions"], constants["rf"],
                 constants["bugs"] if bugs is None else bugs)
    violated = None
    try:
        if seen is not None:
            seen.append(("Init", (), system.abstract()))
        if expected:
            diff = first_difference(expected[0], system.abstract())
            if diff:
                return Mismatch([], *diff), None
        for i, (action, params) in enumerate(steps):
            try:
                system.step(action, params)
            except Exception as e:  # the reference refused a step the spec takes, or broke
                return Mismatch(steps[:i + 1], "", None, None, f"{type(e).__name__}: {e}"), violated
            got = system.abstract()
            if seen is not None:
                seen.append((action, params, got))
            if invariants and violated is None:
                holds = cls.invariants(got, constants["rf"])
                bad = [n for n in invariants if not holds.get(n, True)]
                if bad:
                    violated = (bad[0], steps[:i + 1])
            if expected:
                diff = first_difference(expected[i + 1], got)
                if diff:
                    return Mismatch(steps[:i + 1], *diff), violated
        return None, violated
    finally:
        system.close()


def replay(module: str, cfg: str, bugs: frozenset[str] | None = None, progress=print,
           failure_file: Path | None = None, stop_at_violation: bool = False) -> ReplayReport:
    """Replay every edge of spec/<family>/{cfg}'s graph on the reference (with `bugs` instead of the
    cfg's switches when given). Stops at the first mismatch, or at the first violated spec
    invariant with stop_at_violation (a broken variant's time to first failure)."""
    constants = model_constants(cfg)
    invariants = cfg_invariants(spec_file(cfg).read_text())
    t0 = time.perf_counter()
    g = dump(cfg)
    paths = edge_cover(g)
    report = ReplayReport(cfg, g.number_of_nodes(), g.number_of_edges(), paths=len(paths))
    covered = set()
    infer = SYSTEMS[module].infer_params
    for n, path in enumerate(paths, 1):
        states = [g.nodes[path[0][0]]["state"]] + [g.nodes[e[1]]["state"] for e in path]
        steps = []
        for e in path:
            action = g.edges[e]["action"]
            steps.append((action, infer(action, g.nodes[e[0]]["state"], g.nodes[e[1]]["state"])))
        mismatch, violated = run_steps(module, constants, steps, states, bugs, invariants)
        report.transitions += len(steps)
        if violated and report.violation is None:
            report.violation = {"invariant": violated[0], "steps": [f"{a}{p}" for a, p in violated[1]],
                                "seconds_to_first": round(time.perf_counter() - t0, 2)}
        if mismatch:
            report.mismatch = mismatch
            if failure_file:
                failure_file.parent.mkdir(parents=True, exist_ok=True)
                failure_file.write_text(json.dumps({"module": module, "cfg": cfg, "bugs": sorted(bugs or constants["bugs"]),
                                                    "steps": mismatch.steps,
                                                    "expected": [{k: to_json(v) for k, v in s.items()} for s in states[:len(mismatch.steps) + 1]]},
                                                   indent=1, default=str))
            break
        for e in path:
            if e not in covered:
                covered.add(e)
                a = g.edges[e]["action"]
                report.by_action[a] = report.by_action.get(a, 0) + 1
        if report.violation and stop_at_violation:
            break
        if progress and n % 500 == 0:
            progress(f"  {cfg}: {n}/{len(paths)} paths, {len(covered)}/{report.edges} edges")
    report.covered = len(covered)
    report.seconds = round(time.perf_counter() - t0, 1)
    return report
