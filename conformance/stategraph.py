"""TLC's full state graph of a model, in networkx, and a set of paths from the initial states
that covers every edge.

TLC dumps the graph with `-dump dot,actionlabels`. The model is checked without its SYMMETRY
(a symmetric graph holds one state per orbit; replaying it would need the permutation of every
step), in a copy of spec/ so that the repository is not touched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections import deque
from pathlib import Path

import networkx as nx

from harness.check_models import spec_file
from harness.tlc.runner import private_tmpdir
from harness.tlc.values import parse_state

SPEC = Path(__file__).resolve().parents[1] / "spec"
JAR = Path(__file__).resolve().parents[1] / ".tools" / "tla2tools.jar"

_NODE = re.compile(r'^(-?\d+) \[label="(.*)"(,style = filled)?\];?$')
_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="(\w+)"')


class StateGraphError(RuntimeError):
    """TLC did not produce a state graph (the model failed, or the dump is unreadable)."""


def wrapper_of(cfg: str) -> str:
    """The MC module a cfg of spec/models.json is checked with."""
    import json
    for m in json.loads((SPEC / "models.json").read_text())["models"]:
        if m["config"] == cfg:
            return m["spec"]
    raise StateGraphError(f"{cfg} is not a model of spec/models.json")


def dump(cfg: str, timeout: float = 600, depth: int | None = None, without_switches: bool = False) -> nx.MultiDiGraph:
    """Run TLC on the model of spec/<family>/{cfg} (SYMMETRY dropped) and load its graph; with `depth`,
    only the states at most that many steps from an initial state (and the edges between them);
    `without_switches`: the same constants with `Bugs = {}` (the fixed twin of a broken variant)."""
    spec = wrapper_of(cfg)
    with tempfile.TemporaryDirectory(prefix="stategraph-") as d:
        work = Path(d)
        for f in spec_file(spec).parent.glob("*.tla"):   # the model's family (spec/<family>/)
            shutil.copy(f, work)
        text = graph_cfg(spec_file(cfg).read_text(), without_switches)
        if depth is not None:
            # TLCGet("level") is 0 in an initial state; a state the constraint rejects is left out.
            module = spec.removesuffix(".tla")
            (work / "DumpBounded.tla").write_text(
                f"---- MODULE DumpBounded ----\nEXTENDS {module}, TLC\n"
                f"DepthBound == TLCGet(\"level\") <= {depth}\n====\n")
            text += "CONSTRAINT DepthBound\n"
            spec = "DumpBounded.tla"
        (work / "dump.cfg").write_text(text)
        cmd = ["java", "-XX:+UseParallelGC", *private_tmpdir(work), "-cp", str(JAR), "tlc2.TLC",
               "-config", "dump.cfg", "-deadlock",
               "-workers", "1", "-dump", "dot,actionlabels", str(work / "graph"), "-metadir", str(work / "meta"),
               spec]
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=timeout)
        dot = work / "graph.dot"
        if not dot.exists():
            raise StateGraphError(f"TLC wrote no state graph for {spec}/{cfg} (exit {proc.returncode}):\n"
                                  f"{proc.stdout[-2000:]}")
        return load_dot(dot.read_text())


def graph_cfg(text: str, without_switches: bool = False) -> str:
    """The cfg without SYMMETRY, VIEW, invariants and properties: TLC stops at a violation, and the
    graph of a broken variant is wanted whole (its invariants are checked on the reference). Under a
    VIEW TLC keeps one state of each view and draws an edge to it from every state whose successor
    has that view, so an edge's target need not be what its action makes of its source."""
    if without_switches:
        text, n = re.subn(r"^(\s+Bugs = ).*$", r"\1{}", text, flags=re.M)
        if n != 1:
            raise StateGraphError("the cfg has no `Bugs = ...` line to empty")
    out, skipping = [], False
    for line in text.splitlines():
        head = line.split()[0] if line.strip() else ""
        if line[:1].strip():  # a keyword line ends any section being skipped
            skipping = head in ("INVARIANT", "INVARIANTS", "PROPERTY", "PROPERTIES")
            if skipping or head in ("SYMMETRY", "VIEW"):
                continue
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def cfg_invariants(text: str) -> list[str]:
    names, inside = [], False
    for line in text.splitlines():
        if line[:1].strip():
            inside = line.split()[0] in ("INVARIANT", "INVARIANTS")
            names += line.split()[1:] if inside else []
        elif inside:
            names += line.split()
    return [n for n in names if not n.startswith("\\*")]


def load_dot(text: str) -> nx.MultiDiGraph:
    """Nodes carry `state` (variable -> parsed value) and `init`; edges carry `action`."""
    g = nx.MultiDiGraph()
    for line in text.splitlines():
        m = _NODE.match(line)
        if m:
            label = m[2].replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
            g.add_node(m[1], state=parse_state(label), init=bool(m[3]))
            continue
        m = _EDGE.match(line)
        if m:
            g.add_edge(m[1], m[2], action=m[3])
    if not g.number_of_nodes():
        raise StateGraphError("the dump has no states")
    return g


def initial_states(g: nx.MultiDiGraph) -> list[str]:
    return [n for n, d in g.nodes(data=True) if d["init"]]


def expanded(g: nx.MultiDiGraph, depth: int | None) -> set[str]:
    """The states whose every out-edge is in a dump cut at `depth`: those fewer than `depth`
    steps from an initial state (a state at the bound was never expanded)."""
    if depth is None:
        return set(g.nodes)
    near = nx.multi_source_dijkstra_path_length(g, initial_states(g))  # edges carry no weight: 1 each
    return {n for n, d in near.items() if d < depth}


def state_key(state: dict) -> frozenset:
    """A hashable key of a state (variable -> value), to find the node of a state."""
    return frozenset(state.items())


def edge_cover(g: nx.MultiDiGraph) -> list[list[tuple[str, str, int]]]:
    """Paths from an initial state that together take every edge reachable from one.

    Greedy: for the first edge not yet taken, the shortest path to its source, the edge, then
    on along edges not yet taken while there are some. Not the minimum (a directed Chinese
    postman); the report gives the transitions it costs beside the edge count."""
    parent: dict[str, tuple[str, str, int] | None] = {}
    depth: dict[str, int] = {}  # len(way_to(n)), kept as the BFS goes: the sort below needs it per edge
    todo = deque()
    for s in initial_states(g):
        parent[s], depth[s] = None, 0
        todo.append(s)
    while todo:  # BFS tree: the shortest way into every state
        u = todo.popleft()
        for _, v, k in g.out_edges(u, keys=True):
            if v not in parent:
                parent[v], depth[v] = (u, v, k), depth[u] + 1
                todo.append(v)

    def way_to(n: str) -> list[tuple[str, str, int]]:
        out = []
        while parent[n] is not None:
            out.append(parent[n])
            n = parent[n][0]
        return out[::-1]

    untaken = {e for e in g.edges(keys=True) if e[0] in parent}
    order = sorted(untaken, key=lambda e: (depth[e[0]], e))
    paths = []
    for e in order:
        if e not in untaken:
            continue
        path = way_to(e[0]) + [e]
        untaken.discard(e)
        for x in path:
            untaken.discard(x)
        node = e[1]
        while True:
            nxt = next((x for x in g.out_edges(node, keys=True) if x in untaken), None)
            if nxt is None:
                break
            path.append(nxt)
            untaken.discard(nxt)
            node = nxt[1]
        paths.append(path)
    return paths
