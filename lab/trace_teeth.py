"""Trace validation's teeth, measured (issue 36): for each broken-variant switch of the RFC design,
the reference's racing run that shows it (lab/teeth.py's profile and seed, at its size) is run on
ZooKeeper, and its trace (what it wrote into Keeper) is validated against the fixed spec. A switch
that changes what the reference writes must be rejected at the first write it changed; the same
profile and seed without the switch must be accepted. A switch that changes only what the
reference reads, answers or routes (a SELECT's routing, a cache it serves from) writes what the
fixed protocol could have written: its trace is accepted, and the table says so.

    python -m lab.trace_teeth [--switch S ...] [--jobs 2] [--record]
    python -m lab.trace_teeth --design pr102244 [--record]    PR #102244's design (about 1 min)

PR #102244's design (--design pr102244) runs its description's switches on its rebalance run
(traces/reference_run.py), validated against spec/pr102244/TracePR102244.tla: PR102244Whole.tla's
Bug(...) strings. The code's own switches drive the code's migration states (PR102244Code.tla),
which that trace spec does not read: the table lists them as not run.

--record writes lab/trace_teeth.json (this run's rows replacing the record's of the same switch,
profile and seed) and the table in traces/README.md (between its markers);
tests/traces/test_trace_teeth.py holds the README to the record. About 20-40 min on 2 cores.
"""

from __future__ import annotations

import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.cli_args import Parser
from lab.records import merge_record, replace_marked
from lab.teeth import GAPS, NOT_YET, SIZE, TEETH
from protocol.bugs import DESIGNS

RECORD = Path(__file__).with_name("trace_teeth.json")
README = Path(__file__).resolve().parents[1] / "traces" / "README.md"
BEGIN, END = "<!-- trace-teeth:begin -->", "<!-- trace-teeth:end -->"
PR_BEGIN, PR_END = "<!-- trace-teeth-pr102244:begin -->", "<!-- trace-teeth-pr102244:end -->"
PR_RUN = ("rebalance", 1)   # the PR design's run: a rebalance onto an added replica, seed 1
PR_BLOCKS = 24
# A switch of the PR design that Keeper cannot show, or that this run does not reach.
PR_READ_SIDE = {
    "retry_new_block_id": "a retry with a new block id is, in Keeper, a new INSERT: the rows twice is the history "
                          "check's to see (NoDuplicateRowsInv there)",
}
# A switch with no teeth row (a gap or not shown yet by any history) runs on the racing profile.
DEFAULT_RUN = ("racing", 0)
# Switches that change what a SELECT reads, which Keeper does not show: their traces are the fixed
# protocol's writes, and acceptance is what the table expects of them.
READ_SIDE = {
    "route_to_clone_target": "it routes SELECTs to a CLONE's target, which Keeper does not show",
    "serve_before_map_loaded": "it answers SELECTs before the map is loaded, which Keeper does not show",
}


def run_of(switch: str) -> tuple[str, int]:
    """The profile and seed a switch runs on: its first teeth row's."""
    return next(((t.profile, t.seed) for t in TEETH if t.switch == switch), DEFAULT_RUN)


def pr_description_switches() -> list[str]:
    """The PR design's switches the module its traces are validated against reads: PR102244Whole's
    Bug(...) strings (the description's migration; the code's switches are PR102244Code.tla's)."""
    whole = Path(__file__).resolve().parents[1] / "spec" / "pr102244" / "PR102244Whole.tla"
    return sorted(set(re.findall(r'Bug\("(\w+)"\)', whole.read_text())) & DESIGNS["pr102244"])


def pr_run_of(switch: str) -> tuple[str, int]:
    """The PR design's run: its rebalance; filter_negative_cache's under the cached filter (O1)."""
    return (PR_RUN[0] + "+filter_cached" if switch == "filter_negative_cache" else PR_RUN[0]), PR_RUN[1]


def judge(profile: str, seed: int, switch: str | None, design: str = "rfc") -> dict:
    """Run the reference on ZooKeeper with the switch (None: fixed) and validate its trace."""
    from traces.reference_run import ReferenceRunFailed, ReferenceWorkload, record_reference
    from traces.validate import validate_run

    t0 = time.monotonic()
    if design == "pr102244":
        # filter_negative_cache is a flaw of the cached filter: it runs under that reading (O1)
        readings = ("filter_cached",) if profile.endswith("filter_cached") else ()
        w = ReferenceWorkload(seed=seed, bug=switch, blocks=PR_BLOCKS, design=design, readings=readings)
    else:
        w = ReferenceWorkload(profile=profile, seed=seed, bug=switch, blocks=SIZE["blocks"], steps=SIZE["steps"],
                              fault_rate=0.0)
    try:
        run = record_reference(w)
    except ReferenceRunFailed as e:
        return {"switch": switch, "profile": profile, "seed": seed, "verdict": "no run", "detail": str(e)}
    _, v = validate_run(run)   # its module, cfg and TLC log in a temporary folder that goes with it
    e = v.first_unexplained
    return {"switch": switch, "profile": profile, "seed": seed, "events": v.events, "design": design,
            "verdict": "accepted" if v.accepted else "rejected",
            "at": None if v.accepted else v.consumed + 1, "kind": e.a if e else None,
            "detail": e.why if e else "", "seconds": round(time.monotonic() - t0)}


def table(rows: list[dict], design: str = "rfc") -> str:
    rows = [r for r in rows if r.get("design", "rfc") == design]
    fixed = {(r["profile"], r["seed"]): r for r in rows if r["switch"] is None}
    out = ["| switch | run | trace | first event no action explains | fixed run, same seed |",
           "|---|---|---|---|---|"]
    for r in sorted((r for r in rows if r["switch"]), key=lambda r: r["switch"]):
        f = fixed.get((r["profile"], r["seed"]), {})
        why = f"{r['at']}/{r['events']}: {r['kind']}, {r['detail']}" if r["verdict"] == "rejected" else (
            "none: " + (READ_SIDE[r["switch"]] if r["switch"] in READ_SIDE else
                        PR_READ_SIDE[r["switch"]] if r["switch"] in PR_READ_SIDE else
                        "covered by another guard (a gap in lab/teeth.py)" if r["switch"] in GAPS else
                        "its history is not shown yet either (lab/teeth.py NOT_YET)" if r["switch"] in NOT_YET else
                        "it changes no write on this run") if r["verdict"] == "accepted" else r["detail"])
        out.append(f"| `{r['switch']}` | {r['profile']} {r['seed']} | {r['verdict']} | {why} | "
                   f"{f.get('verdict', '?')} ({f.get('events', '?')} events) |")
    return "\n".join(out) + "\n"


def write_readme(rows: list[dict]) -> None:
    replace_marked(README, BEGIN, END, table(rows))
    pr = table(rows, "pr102244")
    pr += "".join(f"| `{s}` | not run | - | a switch of the code's migration (`--as-code`, PR102244Code.tla), which "
                  f"TracePR102244.tla does not read | - |\n"
                  for s in sorted(DESIGNS["pr102244"] - set(pr_description_switches())))
    replace_marked(README, PR_BEGIN, PR_END, pr)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m lab.trace_teeth", description=__doc__.split("\n\n")[0])
    ap.add_argument("--design", choices=sorted(DESIGNS), default="rfc")
    ap.add_argument("--switch", action="append", choices=sorted(DESIGNS["rfc"] | DESIGNS["pr102244"]),
                    metavar="SWITCH")
    ap.add_argument("--jobs", type=int, choices=range(1, 9), default=2, metavar="1-8")
    ap.add_argument("--record", action="store_true", help="write lab/trace_teeth.json and the README's table")
    a = ap.parse_args(argv)
    if a.design == "pr102244":
        known = pr_description_switches()
        if set(a.switch or ()) - set(known):
            ap.error(f"--design pr102244 runs its description's switches: {', '.join(known)}")
        switches = a.switch or known
        of = pr_run_of
    else:
        if set(a.switch or ()) - DESIGNS["rfc"]:
            ap.error("a switch of PR #102244's design: add --design pr102244")
        switches, of = a.switch or sorted(DESIGNS["rfc"]), run_of
    runs = sorted({of(s) for s in switches})
    work = [(p, seed, None, a.design) for p, seed in runs] + [(*of(s), s, a.design) for s in switches]
    rows = []
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        for r in pool.map(lambda w: judge(*w), work):
            rows.append(r)
            print(f"{r['switch'] or 'fixed'} on {r['profile']} {r['seed']}: {r['verdict']}"
                  + (f" at {r['at']}/{r['events']} ({r['kind']}: {r['detail']})" if r.get("at") else
                     f", {r.get('events')} events") + f", {r.get('seconds', '?')} s", flush=True)
    if a.record:   # rows of this run replace the record's for the same switch, profile and seed
        rows = merge_record(RECORD, rows, key=lambda r: (r.get("design", "rfc"), r["switch"], r["profile"], r["seed"]),
                            order=lambda r: (r.get("design", "rfc"), r["switch"] or "", r["profile"], r["seed"]))
        write_readme(rows)
    bad_fixed = [r for r in rows if r["switch"] is None and r["verdict"] != "accepted"]
    return 1 if bad_fixed else 0


if __name__ == "__main__":
    from harness.cli_args import run_main
    sys.exit(run_main("python -m lab.trace_teeth", main))   # Ctrl-C: 130 and one line, as every command
