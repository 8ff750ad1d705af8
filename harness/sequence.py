"""A counterexample as a sequence diagram (SVG): a lane for the client, one per replica and one
for Keeper; one row per step, a box on the lane of whoever takes the step labelled with the
spec's action name (and its parameters, when the source names them), and an arrow to every
other lane whose state the step changed, labelled with what changed, in short.

Two sources give the same input, a list of `Step` (action, parameters or None, state):
TLC's counterexample (`from_tlc`: TLC prints no parameters) and a conformance walk replayed on
the reference (`conformance replay FILE --svg`: parameters known, states read back from the
reference as the spec's variables).

Which lane a variable lives on is the domain's, not the picture's: Keeper's znodes (assignments,
log, blocks, migrations, is_active, is_lost), each replica's memory and disk (a function from
the replicas: its parts, queue, log pointer, map), the client's view (inserts, queries, what it
saw acknowledged). Bound counters of a model (aux_counts) are not the system's and are left out.

Written as SVG directly, not with matplotlib: a sequence diagram has no axes or data scale, only
boxes, lines and text; written by hand every label stays a <text> element a test (or a browser's
search) finds, each lane and step is a <g> with its name, and the file is the same byte for byte
for the same trace (matplotlib's SVG carries a date and random ids, and draws text as paths
unless told otherwise).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.tlc.values import Fn, ModelValue

CLIENT, KEEPER = "client", "Keeper"
# Variables of the modules (SelectiveReplication, Assignment, PR102244) by where they live.
KEEPER_VARS = {"active", "asg", "log", "dedup", "muts", "trimmed", "lost", "mig", "aver", "counts", "coord"}
CLIENT_VARS = {"ins", "qry", "inv_acked", "inv_read_cleaned", "committed", "inv_missed", "inv_based_on", "inv_routed"}
BOUND_VARS = {"aux_counts", "aux"}
REPLICA_VARS = ("parts", "ptr", "queue", "cache", "meta", "alloc", "view")

LANE_GAP, LEFT, TOP, ROW, LINE = 230, 70, 70, 22, 15
LABEL_CHARS = 58


@dataclass
class Step:
    action: str                 # "Init" for the first state; otherwise the spec's action name
    params: tuple | None        # None when the source does not name them (TLC)
    state: dict[str, Any]       # every variable after the step, as harness.tlc.values parses them


def from_tlc(trace) -> list[Step]:
    """TLC's trace (harness.tlc.runner.TraceStep list); a stuttering step keeps the state before it."""
    steps: list[Step] = []
    for t in trace:
        steps.append(Step(t.action, None, t.state or (steps[-1].state if steps else {})))
    return steps


def replicas_of(state: dict) -> list[str]:
    """The replicas: the domain of the first per-replica variable the module has."""
    for var in REPLICA_VARS:
        v = state.get(var)
        if isinstance(v, Fn) and len(v):
            return sorted(_name(k) for k in v)
    return []


def _name(v) -> str:
    return v.name if isinstance(v, ModelValue) else str(v)


def _param(v) -> str:
    return "(" + ", ".join(map(_param, v)) + ")" if isinstance(v, (tuple, list)) else _name(v)


def _short(text: str, n: int = LABEL_CHARS) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def short(v) -> str:
    """A value compactly: records as [k=v ...], strings unquoted (labels, not TLA+ to paste back)."""
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, Fn):
        return "[" + " ".join(f"{_name(k)}={short(x)}" for k, x in v.items()) + "]"
    if isinstance(v, tuple):
        return "<<" + ",".join(short(x) for x in v) + ">>"
    if isinstance(v, frozenset):
        return "{" + ",".join(sorted(short(x) for x in v)) + "}"
    return _name(v)


def delta(a, b) -> str:
    """What changed from `a` to `b`, in short: set elements added and removed, a record's or
    function's changed fields, a sequence's appended elements, else the new value."""
    if isinstance(a, frozenset) and isinstance(b, frozenset):
        return " ".join([*(f"+{short(x)}" for x in sorted(b - a, key=repr)),
                         *(f"-{short(x)}" for x in sorted(a - b, key=repr))])
    if isinstance(a, Fn) and isinstance(b, Fn):
        keys = [k for k in b if k not in a or a[k] != b[k]] + [k for k in a if k not in b]
        return ", ".join(f"{_name(k)}: {delta(a.get(k), b[k]) if k in b else 'gone'}" for k in keys)
    if isinstance(a, tuple) and isinstance(b, tuple):
        if b[:len(a)] == a:
            return "+" + ", ".join(short(x) for x in b[len(a):])
        if len(a) == len(b):
            return ", ".join(f"[{i}] {delta(x, y)}" for i, (x, y) in enumerate(zip(a, b), 1) if x != y)
    return short(b)


def _mentioned(v, replicas: set[str]) -> set[str]:
    """Replicas a value names (an insert's `at`, a query's routes)."""
    if isinstance(v, ModelValue):
        return {v.name} & replicas
    if isinstance(v, str):
        return {v} & replicas
    if isinstance(v, Fn):
        return set().union(*(_mentioned(x, replicas) for x in v.values()), set())
    if isinstance(v, (tuple, frozenset)):
        return set().union(*(_mentioned(x, replicas) for x in v), set())
    return set()


REQUESTS = ("ClientSendInsert", "ClientStartQuery", "Admin", "Query")


def changes(before: dict, after: dict, replicas: list[str]) -> tuple[dict[str, list[str]], set[str]]:
    """lane -> short descriptions of what changed there; and the replicas the changed client
    entries name (the replica an INSERT or a query was sent to)."""
    out: dict[str, list[str]] = {}
    named: set[str] = set()
    reps = set(replicas)
    for var in after:
        if var in BOUND_VARS or before.get(var) == after[var]:
            continue
        a, b = before.get(var), after[var]
        per_replica = var not in KEEPER_VARS | CLIENT_VARS and isinstance(b, Fn) and {_name(k) for k in b} == reps
        if per_replica:
            for k in b:
                if not isinstance(a, Fn) or a.get(k) != b[k]:
                    out.setdefault(_name(k), []).append(f"{var}: {delta(a.get(k) if isinstance(a, Fn) else None, b[k])}")
            continue
        lane = CLIENT if var in CLIENT_VARS else KEEPER
        if isinstance(a, Fn) and isinstance(b, Fn):
            for k in b:
                if a.get(k) != b[k]:
                    out.setdefault(lane, []).append(f"{var}[{_name(k)}] {delta(a.get(k), b[k])}")
                    named |= _mentioned(b[k], reps) if lane == CLIENT else set()
        elif isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and lane == CLIENT:
            for i, (x, y) in enumerate(zip(a, b), 1):
                if x != y:
                    out[lane] = out.get(lane, []) + [f"{var}[{i}] {delta(x, y)}"]
                    named |= _mentioned(y, reps)
        else:
            out.setdefault(lane, []).append(f"{var}: {delta(a, b)}")
    return out, named


def actor(step: Step, before: dict, changed: dict[str, list[str]], replicas: list[str]) -> str:
    """Whose step it is: the client's for Client*/Admin* actions and a query; a replica named in
    the parameters; a Coordinator* action's coordinating replica (mig[p].coord, or PR #102244's
    coord); else the first replica whose state changed; else, for a step that changed Keeper
    alone, the coordinator if there is one (PR #102244's StartClone, Switch), or Keeper (the
    cleanup thread's trims)."""
    name = step.action
    if name.startswith(("Client", "Admin")) or name == "Query":
        return CLIENT
    named = [_name(p) for p in step.params or () if _name(p) in replicas]
    if named:
        return named[0]
    coords = []
    mig, after_mig = before.get("mig"), step.state.get("mig")
    if isinstance(mig, Fn) and isinstance(after_mig, Fn):
        params = {_name(p) for p in step.params or ()}
        for p, m in mig.items():
            if (_name(p) in params) if step.params is not None else after_mig.get(p) != m:
                coords += [_name(rec["coord"]) for rec in (m, after_mig.get(p))
                           if isinstance(rec, Fn) and _name(rec.get("coord")) in replicas]
    if _name(before.get("coord")) in replicas:
        coords.append(_name(before["coord"]))
    if name.startswith("Coordinator") and coords:
        return coords[0]
    changed_reps = [r for r in replicas if r in changed]
    if changed_reps:
        return changed_reps[0]
    # A step that changes Keeper alone (PR #102244's StartClone, Switch, ...) is the coordinator's;
    # the cleanup thread's (trimming the log and blocks/) is drawn on Keeper, which it tidies.
    return coords[0] if coords and not name.startswith("Cleanup") else KEEPER


def _text(parent, x, y, text, cls, anchor="start", **extra) -> ET.Element:
    t = ET.SubElement(parent, "text", {"x": f"{x:g}", "y": f"{y:g}", "class": cls, "text-anchor": anchor, **extra})
    t.text = text
    return t


def render(steps: list[Step], path: str | Path, title: str, footer: str = "") -> dict:
    """Write the diagram to `path`; return what it drew: the lanes, and per step its action, the
    lane taking it and the lanes it reaches."""
    if not steps:
        raise ValueError("no steps to draw")
    replicas = replicas_of(steps[0].state)
    lanes = [CLIENT, *replicas, KEEPER]
    x_of = {lane: LEFT + i * LANE_GAP for i, lane in enumerate(lanes)}
    rows, y = [], TOP + 40
    for n in range(1, len(steps)):
        before, step = steps[n - 1].state, steps[n]
        changed, named = changes(before, step.state, replicas)
        who = actor(step, before, changed, replicas)
        if not step.action.startswith(REQUESTS):
            named = set()   # the replica an insert was sent to, named again by its timeout or ack
        reached = [lane for lane in lanes if lane != who and (lane in changed or lane in named
                   or (who == CLIENT and lane in {_name(p) for p in step.params or ()}))]
        own = changed.get(who, [])
        own = own if len(own) <= 4 else own[:3] + [f"... {len(own) - 3} more"]
        height = ROW + LINE * (1 + len(reached) + len(own))
        rows.append((n, step, who, reached, changed, own, y))
        y += height
    width, height = LEFT + (len(lanes) - 1) * LANE_GAP + 420, y + 50
    svg = ET.Element("svg", {"xmlns": "http://www.w3.org/2000/svg", "width": str(width), "height": str(height),
                             "viewBox": f"0 0 {width} {height}", "font-family": "DejaVu Sans, sans-serif",
                             "font-size": "11"})
    style = ET.SubElement(svg, "style")
    style.text = (".title{font-size:14px;font-weight:bold} .head{font-weight:bold;font-size:12px} "
                  ".action{font-weight:bold} .change{fill:#333} .own{fill:#555;font-size:10px} "
                  ".lifeline{stroke:#999;stroke-dasharray:4 3} .message{stroke:#1f4e9c;stroke-width:1.2} "
                  ".named{stroke:#1f4e9c;stroke-dasharray:3 2} .footer{fill:#b00020;font-weight:bold}")
    defs = ET.SubElement(svg, "defs")
    marker = ET.SubElement(defs, "marker", {"id": "arrow", "markerWidth": "8", "markerHeight": "8", "refX": "7",
                                            "refY": "4", "orient": "auto"})
    ET.SubElement(marker, "path", {"d": "M0,0 L8,4 L0,8 z", "fill": "#1f4e9c"})
    _text(svg, 10, 22, title, "title")
    for lane in lanes:
        g = ET.SubElement(svg, "g", {"class": "lane", "id": f"lane-{lane}"})
        x = x_of[lane]
        ET.SubElement(g, "rect", {"x": f"{x - 55}", "y": f"{TOP - 22}", "width": "110", "height": "26", "rx": "4",
                                  "fill": "#e8eef8" if lane not in (CLIENT, KEEPER) else "#f3e8d8", "stroke": "#333"})
        _text(g, x, TOP - 5, lane, "head", "middle")
        ET.SubElement(g, "line", {"x1": f"{x}", "y1": f"{TOP + 4}", "x2": f"{x}", "y2": f"{height - 40}",
                                  "class": "lifeline"})
    drawn = []
    for n, step, who, reached, changed, own, y in rows:
        g = ET.SubElement(svg, "g", {"class": "step", "data-index": str(n), "data-action": step.action,
                                     "data-lane": who})
        label = f"{n}. {step.action}" + (_param(step.params) if step.params is not None else "")
        x = x_of[who]
        ET.SubElement(g, "rect", {"x": f"{x - 8}", "y": f"{y - 12}", "width": "16", "height": "16", "fill": "#1f4e9c"})
        _text(g, x + 12, y + 1, label, "action")
        for k, lane in enumerate(reached):
            ly = y + 4 + LINE * (k + 1)
            x2 = x_of[lane]
            ET.SubElement(g, "line", {"x1": f"{x + (8 if x2 > x else -8)}", "y1": f"{ly}", "x2": f"{x2}",
                                      "y2": f"{ly}", "class": "message" if lane in changed else "named",
                                      "marker-end": "url(#arrow)", "data-to": lane})
            what = "; ".join(changed.get(lane, [])) or "(request)"
            _text(g, min(x, x2) + 12, ly - 3, _short(what, max(LABEL_CHARS, int(abs(x2 - x) / 6.2))), "change",
                  **{"data-to": lane})
        for k, line in enumerate(own):
            _text(g, x + 12, y + 1 + LINE * (1 + len(reached) + k), _short(line), "own")
        drawn.append({"index": n, "action": step.action, "lane": who, "reaches": reached})
    if footer:
        _text(svg, 10, height - 18, footer, "footer")
    ET.indent(svg)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(svg).write(path, encoding="utf-8", xml_declaration=True)
    return {"lanes": lanes, "steps": drawn}
