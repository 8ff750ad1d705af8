"""`python -m lab.switch_table [--profile ci]`: the power of one profile's machines on the spec's
invariants alone, switch by switch.

For each switch of protocol/bugs.py that spec/rfc/SelectiveReplication.tla models, the
whole-protocol machine (conformance/machines.py protocol_machine, the profile's examples and
steps, no example database, not shrunk) runs with that switch on and nothing but the spec's
invariants to fail it: caught or not, the invariant that failed, the seconds and the walks it
took. Then once with no switch (it must hold) to count the walks that complete a migration with
writes and queries around it (lab/migration_coverage.py). `--model-machine` adds the
model machine under each broken variant's own constants, on invariants alone (slow: every step
tries every instance). `--undirected` runs the protocol machine without the directed rules of
conformance/windows.py (one rule per action, uniform choice: the machine before them).

The repair's switches (REPAIR_SWITCHES) run on the protocol machine built with repair=True, which
drops a replica for good and repairs; the assignment's two (OTHER_SWITCHES) on the ci machine that
drives them, on invariants alone too; a switch another guard covers (COVERED) must hold alone.

Exit 0 when the fixed run holds, every switch is caught and every covered one holds alone, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

from hypothesis import settings

from conformance.runner import run_machine
# The switches of protocol/bugs.py that SelectiveReplication.tla models and the protocol machine
# drives (the repair's with its repair steps), and the assignment's two with the machine that does.
from conformance.switches import COVERED, OTHER_SWITCHES, PROTOCOL_SWITCHES, REPAIR_SWITCHES

# Walks a switch gets, at least, stopping at the first that fails: a switch's window is one kind
# of walk among several (windows.py Walk), and which walks a process draws varies (F6 was missed
# by 71 walks in one fresh clone's make test; the down leaver's switch by 63 in one run).
SWITCH_WALKS = 300
# ... and the narrowest, more: the down leaver's maps switch needs a SWITCH, its source's crash,
# the migration ended for it while the target's map is stale, the source's restart and a query on
# that map. Unseeded ci runs caught it at walks 29, 122, 201 and 261 (2026-11-30); a fresh clone's
# make test missed it in 329 walks. Caught early, a switch costs no more walks.
SWITCH_WALKS_FOR = {"down_leaver_cleanup_ignores_maps": 800}


def _invariant(error: str) -> str:
    m = re.search(r"(\w+(?:Inv|Prop)) violated", error)
    return m.group(1) if m else error[:80]


def protocol_row(bug: str | None, prof: settings, directed: bool = True, repair: bool = False) -> dict:
    """`repair`: the machine with SYSTEM DROP REPLICA and RepairStart steps (REPAIR_SWITCHES)."""
    from conformance.machines import protocol_machine, repair_settings
    from lab.migration_coverage import MigrationCoverage
    coverage = MigrationCoverage()
    if repair:
        prof = repair_settings(prof)
    r = run_machine(protocol_machine(frozenset({bug}) if bug else frozenset(), coverage=coverage,
                                     directed=directed, repair=repair),
                    settings(prof, database=None), shrink=False)
    return {"switch": bug, "caught": r["failed"], "repair": repair,
            "invariant": _invariant(r["error"]) if r["failed"] else None,
            "seconds": r["seconds"], **coverage.as_dict(),
            # The failing walk: the instances taken (Hypothesis's notes), not its rule lines.
            "walk": [x for x in r.get("sequence", []) if not x.startswith("state.")]}


def other_row(bug: str, prof: settings) -> dict:
    """A switch the protocol machine does not drive (OTHER_SWITCHES), on invariants alone: the
    Assignment machine with no state graph, or the model machine under the variant's constants."""
    from conformance.machines import assignment_machine, model_machine
    cfg = OTHER_SWITCHES[bug]
    machine = f"model machine {cfg}" if cfg else "Assignment machine"
    built = model_machine(cfg) if cfg else assignment_machine(frozenset({bug}))
    r = run_machine(built, settings(prof, database=None), shrink=False)
    return {"switch": bug, "machine": machine, "caught": r["failed"],
            "invariant": _invariant(r["error"]) if r["failed"] else None, "seconds": r["seconds"]}


def model_rows(prof: settings) -> list[dict]:
    from conformance.counterexample import variants
    from conformance.machines import model_machine
    out = []
    for cfg in variants():
        r = run_machine(model_machine(cfg), settings(prof, database=None), shrink=False)
        out.append({"model": cfg, "caught": r["failed"], "error": r.get("error", "")[:120], "seconds": r["seconds"]})
        print(f"  model machine {cfg}, invariants alone: "
              + (f"caught in {r['seconds']} s: {r['error'][:90]}" if r["failed"] else f"not caught in {r['seconds']} s"),
              flush=True)
    return out


def switch_table(prof: settings, profile: str, model_machine: bool = False, directed: bool = True) -> tuple[bool, dict]:
    t0 = time.perf_counter()
    fixed = protocol_row(None, prof, directed)
    print(f"protocol machine ({profile}), no switch: {'FAILED: ' + str(fixed['invariant']) if fixed['caught'] else 'holds'} "
          f"in {fixed['seconds']} s; {fixed['migrations_completed']}/{fixed['walks']} walks complete a migration, "
          f"{fixed['migrations_completed_with_writes_and_queries']} with an INSERT in CLONE and a query around "
          "the SWITCH; windows per 100 walks: "
          + (", ".join(f"{w} {n}" for w, n in fixed["windows_per_100_walks"].items()) or "none"), flush=True)
    if fixed["caught"]:
        print("    " + "\n    ".join(fixed["walk"]), flush=True)
    rows = []
    hunt = settings(prof, max_examples=max(prof.max_examples, SWITCH_WALKS))
    for bug in PROTOCOL_SWITCHES:
        r = protocol_row(bug, settings(hunt, max_examples=max(hunt.max_examples, SWITCH_WALKS_FOR.get(bug, 0))),
                         directed)
        rows.append(r)
        print(f"  {bug}: " + (f"caught, {r['invariant']}, {r['seconds']} s, walk {r['walks']}" if r["caught"]
                              else f"NOT caught in {r['walks']} walks, {r['seconds']} s"), flush=True)
    repair = protocol_row(None, prof, directed, repair=True)
    print(f"protocol machine with repair steps ({profile}), no switch: "
          f"{'FAILED: ' + str(repair['invariant']) if repair['caught'] else 'holds'} in {repair['seconds']} s; "
          "windows per 100 walks: " + (", ".join(f"{w} {n}" for w, n in repair["windows_per_100_walks"].items())
                                       or "none"), flush=True)
    if repair["caught"]:
        print("    " + "\n    ".join(repair["walk"]), flush=True)
    for bug in REPAIR_SWITCHES:
        r = protocol_row(bug, hunt, directed, repair=True)
        rows.append(r)
        seen = (f"caught, {r['invariant']}, {r['seconds']} s, walk {r['walks']}" if r["caught"]
                else f"NOT caught in {r['walks']} walks, {r['seconds']} s")
        print(f"  {bug} (with repair steps): {seen}", flush=True)
    for bug in OTHER_SWITCHES:
        r = other_row(bug, prof)
        rows.append(r)
        print(f"  {bug} ({r['machine']}): " + (f"caught, {r['invariant']}, {r['seconds']} s" if r["caught"]
                                               else f"NOT caught, {r['seconds']} s"), flush=True)
    # A switch another guard covers (COVERED) must hold alone: a walk it fails is a path that guard misses.
    covered = []
    for bug, guard in COVERED.items():
        r = {**protocol_row(bug, hunt, directed), "covered_by": guard}
        covered.append(r)
        print(f"  {bug} (covered by {guard}'s guard): " + (f"FAILED, {r['invariant']}, walk {r['walks']}" if r["caught"]
              else f"holds alone in {r['walks']} walks, {r['seconds']} s"), flush=True)
    out = {"profile": profile, "directed": directed, "fixed": fixed, "fixed_with_repair": repair, "switches": rows,
           "covered": covered}
    if model_machine:
        out["model_machine"] = model_rows(prof)
    caught = sum(r["caught"] for r in rows)
    print(f"{caught}/{len(rows)} switches caught on invariants alone ({time.perf_counter() - t0:.0f} s)")
    return (not fixed["caught"] and not repair["caught"] and caught == len(rows)
            and not any(r["caught"] for r in covered)), out


def main(argv: list[str] | None = None) -> int:
    from harness.cli_args import Parser, output_file, run_main
    ap = Parser(prog="python -m lab.switch_table", description="each switch of protocol/bugs.py on the spec's invariants alone, and the fixed run's coverage")
    ap.add_argument("--profile", choices=["ci", "dev", "thorough"], default=os.environ.get("CONFORMANCE_PROFILE", "dev"))
    ap.add_argument("--report", type=output_file, help="write the JSON table here")
    ap.add_argument("--model-machine", action="store_true",
                    help="also the model machine under each broken variant's constants (slow)")
    ap.add_argument("--undirected", action="store_true",
                    help="the protocol machine without its directed rules (conformance/windows.py)")
    a = ap.parse_args(argv)

    def table() -> int:
        os.environ["CONFORMANCE_PROFILE"] = a.profile   # read by conformance.machines when it is imported
        from conformance.machines import profile
        ok, out = switch_table(profile(), a.profile, a.model_machine, directed=not a.undirected)
        if a.report:
            Path(a.report).parent.mkdir(parents=True, exist_ok=True)
            Path(a.report).write_text(json.dumps(out, indent=1, default=str))
        return 0 if ok else 1

    from harness.tlc.runner import TLCSetupError
    return run_main(ap.prog, table, environment=(TLCSetupError,))


if __name__ == "__main__":
    sys.exit(main())
