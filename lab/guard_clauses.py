"""`python -m lab.guard_clauses [--only KEY...] [--jobs N] [--check]`: every clause of every
migration guard and routing rule of the reference, in both designs, dropped one at a time, and
the reference tests that fail without it (issue 37).

A clause is one condition of a step's guard (the spec action's conjunct: SWITCH's "the target
has caught up to the fetch's position"), or one rule of a step's effect that a guard of a later
step relies on (a repair's SWITCH adds its target and leaves no one leaving). `drop` is the
smallest edit of the module that removes it: the condition made false, the check skipped. Each
edit is applied to a copy of the checkout (never the checkout: tests may run from it meanwhile)
and the in-memory tests of tests/protocol run there; the clause has teeth when at least one test
fails. The unedited copy must pass first, or nothing is judged.

The results go to lab/guard_clauses.json and, as a table, to tests/README.md between its
`guard-clauses` markers. tests/lab/test_guard_clauses.py keeps them honest in `make test`: every
clause's code is still in its module exactly once, the table is the rendering of the results,
every test it names exists, and one clause dropped for real fails the tests it names.
`--check` re-runs every clause and exits 1 if one has no test failing or the table would change.

Why not mutmut: it mutates every operator of a module at random and counts; this names the
guards' clauses one by one, in the spec's words, so a reviewer sees which test holds which
clause (and mutmut's score says nothing about a clause no mutant happens to remove).

Exit codes: 0 every clause has teeth (and, with --check, the table is current), 1 a clause has
none (or the table is stale), 2 bad input (an unknown key, an edit whose code is not in its
module exactly once), 3 the unedited copy fails its tests, 130 interrupted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.cli_args import Parser, output_file, text

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "lab" / "guard_clauses.json"
README = ROOT / "tests" / "README.md"
BEGIN, END = "<!-- guard-clauses -->", "<!-- /guard-clauses -->"
# The tests a clause must meet: the protocol's in-memory tests, both designs (make test runs them
# on ZooKeeper too; the in-memory run decides the same guards in a tenth of the time).
TESTS = ["tests/protocol"]
MARKERS = "not (zookeeper or long or slow or tlc or spark or clickhouse or faults)"

RFC, PR = "RFC", "PR #102244"


@dataclass(frozen=True)
class Clause:
    design: str      # RFC: protocol/migration.py, repair.py, query.py; PR #102244 as its code is: pr102244/driver.py
    guard: str       # the spec action whose guard (or effect) it is
    clause: str      # what it requires, in the spec's words
    module: str      # the file the edit applies to
    before: str      # the clause's code, found exactly once in the module
    after: str       # the same code with the clause dropped

    @property
    def key(self) -> str:
        return f"{self.guard}: {self.clause}"


def _c(design, guard, clause, module, before, after) -> Clause:
    return Clause(design, guard, clause, module, before, after)


def _never(design, guard, clause, module, condition) -> Clause:
    """The commonest clause: a guard's `if CONDITION:` (its refusal below) made never true."""
    return Clause(design, guard, clause, module, f"if {condition}:", "if False:")


MIG, REP, QRY = "protocol/migration.py", "protocol/repair.py", "protocol/query.py"
DRV, PRM = "protocol/pr102244/driver.py", "protocol/pr102244/migration.py"

CLAUSES: tuple[Clause, ...] = (
    # --- RFC design ---------------------------------------------------------------------------
    _c(RFC, "AdminReassign", "the partition is assigned", MIG,
       'if a is None:\n        raise MigrationError(f"partition {partition} is not assigned (no INSERT',
       'if False:\n        raise MigrationError(f"partition {partition} is not assigned (no INSERT'),
    _c(RFC, "AdminReassign", "the target is active", MIG,
       'if dst not in active_replicas(keeper, layout):\n        raise MigrationError',
       'if False:\n        raise MigrationError'),
    _c(RFC, "AdminReassign", "the target is no owner", MIG,
       'if dst in a.owners:\n        raise MigrationError(f"replica {dst!r} already owns',
       'if False:\n        raise MigrationError(f"replica {dst!r} already owns'),
    _c(RFC, "AdminReassign", "no migration of the partition in flight", MIG,
       'if mig and mig["state"] in IN_FLIGHT:\n        raise MigrationError(f"partition {partition} is '
       'already migrating',
       'if False:\n        raise MigrationError(f"partition {partition} is already migrating'),
    _c(RFC, "AdminReassign", "the source is an owner", MIG,
       'if src not in a.owners:\n        raise MigrationError(f"source {src!r} does not own',
       'if False:\n        raise MigrationError(f"source {src!r} does not own'),
    _never(RFC, "AdminReassign", "the source is active", MIG,
           'src not in active_replicas(keeper, layout)'),
    _c(RFC, "AdminReassign", "fewer migrations in flight than the limit", MIG,
       'if at_limit(keeper, layout, max_concurrent):\n        raise MigrationError(f"{max_concurrent} migrations '
       'already '
       'in flight (the concurrency limit)")\n    new_mig = {"state": "clone", "src": src',
       'if False:\n        raise MigrationError(f"{max_concurrent} migrations already '
       'in flight (the concurrency limit)")\n    new_mig = {"state": "clone", "src": src'),
    _c(RFC, "ReplicaCloneFetch", "the migration is in CLONE", MIG,
       'if not mig or mig["state"] != "clone" or mig["fetched"] or mig["dst"] != dst.name:',
       'if not mig or mig["fetched"] or mig["dst"] != dst.name:'),
    _c(RFC, "ReplicaCloneFetch", "not fetched yet", MIG,
       'if not mig or mig["state"] != "clone" or mig["fetched"] or mig["dst"] != dst.name:',
       'if not mig or mig["state"] != "clone" or mig["dst"] != dst.name:'),
    _c(RFC, "ReplicaCloneFetch", "run by the migration's target", MIG,
       'if not mig or mig["state"] != "clone" or mig["fetched"] or mig["dst"] != dst.name:',
       'if not mig or mig["state"] != "clone" or mig["fetched"]:'),
    _c(RFC, "CoordinatorSwitch", "the migration is in CLONE", MIG,
       'if not mig or mig["state"] != "clone" or not mig["fetched"]:',
       'if not mig or not mig["fetched"]:'),
    _c(RFC, "CoordinatorSwitch", "the target has fetched", MIG,
       'if not mig or mig["state"] != "clone" or not mig["fetched"]:',
       'if not mig or mig["state"] != "clone":'),
    _c(RFC, "CoordinatorSwitch", "its coordinator is active", MIG,
       '_require_live_coordinator(keeper, layout, "CoordinatorSwitch", partition, mig)', 'pass'),
    _never(RFC, "CoordinatorSwitch", "it switches to the migration's target", MIG,
           'dst != mig["dst"]'),
    _c(RFC, "CoordinatorSwitch", "the target has caught up to the fetch's position (F23)", MIG,
       'not _caught_up_for_switch(keeper, layout, dst, partition, mig)', 'False'),
    _c(RFC, "CoordinatorSwitch", "the source leaves through CLEANUP, not at once (F6)", MIG,
       'leaving = None if "source_stops_at_switch" in bugs or repair else src', 'leaving = None'),
    _c(RFC, "CoordinatorSwitch", "a repair's SWITCH ends it: done, no one leaving", MIG,
       '"state": "done" if repair else "switched"}', '"state": "switched"}'),
    _c(RFC, "CoordinatorCancel", "the migration is in CLONE", MIG,
       'if not mig or mig["state"] != "clone":\n        raise GuardFailed("CoordinatorCancel"',
       'if not mig:\n        raise GuardFailed("CoordinatorCancel"'),
    _c(RFC, "CoordinatorCancel", "it is no repair", MIG,
       'if mig["src"] is None:\n        # A repair is owed', 'if False:\n        # A repair is owed'),
    _c(RFC, "CoordinatorCancel", "its coordinator is active", MIG,
       '_require_live_coordinator(keeper, layout, "CoordinatorCancel", partition, mig)', 'pass'),
    _c(RFC, "CoordinatorCancel", "the target leaves through CLEANUP, not at once (F7)", MIG,
       'new = Assignment(a.owners, target=None, leaving=mig["dst"])',
       'new = Assignment(a.owners, target=None, leaving=None)'),
    _c(RFC, "ReplicaTakeOverMigration", "the migration is in CLONE", MIG,
       'if not mig or mig["state"] != "clone":\n        raise GuardFailed("ReplicaTakeOverMigration"',
       'if not mig:\n        raise GuardFailed("ReplicaTakeOverMigration"'),
    _never(RFC, "ReplicaTakeOverMigration", "its coordinator is not active", MIG,
           'keeper.exists(layout.is_active(mig["coord"])) is not None'),
    _never(RFC, "ReplicaTakeOverMigration", "the replica taking over is active", MIG,
           'keeper.exists(layout.is_active(replica)) is None'),
    _c(RFC, "ReplicaCleanup", "after a SWITCH or a CANCEL", MIG,
       'if not mig or mig["state"] not in ("switched", "cancelling"):\n        raise GuardFailed("ReplicaCleanup"',
       'if not mig:\n        raise GuardFailed("ReplicaCleanup"'),
    _never(RFC, "ReplicaCleanup", "run by the replica leaving", MIG,
           'who != leaver.name'),
    _c(RFC, "ReplicaCleanup", "no part of the leaver's that no owner staying has (F23)", MIG,
       'unique = leaver_unique_parts(keeper, layout, partition, mig, leaver.store.names(partition), bugs)',
       'unique = []'),
    _c(RFC, "ReplicaCleanup", "a cancelled target's parts too, once an owner may have been dropped (F32)", MIG,
       'if st not in ("switched", "cancelling"):\n        return []', 'if st != "switched":\n        return []'),
    _never(RFC, "ReplicaCleanup", "no running query pinned to the leaver's copy", MIG,
           'leaver.pins.get(partition)'),
    _c(RFC, "ReplicaCleanup", "every active replica's map has seen the assignment", MIG,
       'stale = _maps_not_seen(keeper, layout, partition, a.version)\n        if stale:',
       'stale = []\n        if stale:'),
    _c(RFC, "ReplicaCleanupForDownLeaver", "after a SWITCH or a CANCEL", MIG,
       'if not mig or mig["state"] not in ("switched", "cancelling"):\n        raise GuardFailed('
       '"ReplicaCleanupForDownLeaver"',
       'if not mig:\n        raise GuardFailed("ReplicaCleanupForDownLeaver"'),
    _never(RFC, "ReplicaCleanupForDownLeaver", "the leaver is down", MIG,
           'keeper.exists(layout.is_active(who)) is not None'),
    _c(RFC, "ReplicaCleanupForDownLeaver", "no part of the leaver's that no owner staying has (F23)", MIG,
       'unique = leaver_unique_parts(keeper, layout, partition, mig, registered, bugs)', 'unique = []'),
    _c(RFC, "ReplicaCleanupForDownLeaver", "every active replica's map has seen the assignment", MIG,
       'stale = [] if "down_leaver_cleanup_ignores_maps" in bugs else _maps_not_seen(',
       'stale = [] if True else _maps_not_seen('),
    _never(RFC, "RepairStart", "the partition is short of RF", REP,
           'len(a.owners) >= rf'),
    _c(RFC, "RepairStart", "no migration of the partition in flight", REP,
       'if mig and mig["state"] in IN_FLIGHT:\n        raise MigrationError',
       'if False:\n        raise MigrationError'),
    _never(RFC, "RepairStart", "its coordinator is an active owner", REP,
           'coord not in a.owners or coord not in active'),
    _c(RFC, "RepairStart", "the target is active", REP,
       'if dst not in active:\n        raise MigrationError', 'if False:\n        raise MigrationError'),
    _never(RFC, "RepairStart", "the target keeps no copy of the partition", REP,
           'dst in a.keepers()'),
    _never(RFC, "DropReplica", "refused for an active replica", REP,
           'keeper.exists(layout.is_active(name)) is not None'),
    _c(RFC, "DropReplica", "a CLONE out of the dropped replica goes on as a repair", REP,
       'return {**mig, "src": None, "repair_of": name}', 'return {**mig, "state": "cancelled"}'),
    _never(RFC, "ClientStartQuery", "the receiver is not read-only (F22)", QRY,
           'replica.keeper.expired'),
    _c(RFC, "ClientStartQuery", "each partition routed to an owner, not the CLONE target or the leaver (F5)", QRY,
       'candidates = set(a.owners)', 'candidates = set(a.keepers())'),
    _c(RFC, "ClientStartQuery", "each chosen replica pinned at the start", QRY,
       'replicas[r].pins[p] = replicas[r].pins.get(p, 0) + 1', 'pass'),
    _never(RFC, "ReplicaReadPartition", "the partition is still pending in the query", QRY,
           'partition not in query.pending'),
    # --- PR #102244 as its code is (driver.py), with the fixed design's guards ------------------
    _c(PR, "ReadSnapshot", "the migration id is new", DRV,
       'raise GuardFailed("ReadSnapshot", f"migration {mig_id} exists")', 'pass'),
    _c(PR, "ReadSnapshot", "the source is an owner", DRV,
       'if source not in a.owners:\n            raise GuardFailed("ReadSnapshot"',
       'if False:\n            raise GuardFailed("ReadSnapshot"'),
    _c(PR, "ReadSnapshot", "the target is no owner", DRV,
       'if target in a.owners:\n            raise GuardFailed("ReadSnapshot"',
       'if False:\n            raise GuardFailed("ReadSnapshot"'),
    _c(PR, "ReadSnapshot", "no migration of the partition in flight, the target not :cloning (PR-F3)", DRV,
       'target in a.cloning or _in_flight(self.keeper, self.layout, partition)):', 'False):'),
    _never(PR, "PlanUnderReplicated", "the partition is short of replication_factor", DRV,
           'len(set(a.owners)) >= rf'),
    _c(PR, "PlanUnderReplicated", "no migration of the partition in flight", DRV,
       'if _in_flight(self.keeper, self.layout, partition):\n            raise GuardFailed("PlanUnderReplicated"',
       'if False:\n            raise GuardFailed("PlanUnderReplicated"'),
    _never(PR, "PlanUnderReplicated", "from an owner to a replica outside the list", DRV,
           'source not in a.owners or target in a.keepers()'),
    _c(PR, "CloneMulti", "an empty snapshot gives up", DRV,
       'if not snapshot:\n            self.pending = None\n            return None',
       'if False:\n            self.pending = None\n            return None'),
    _c(PR, "CloneMulti", "no migration of the partition in flight (PR-F3)", DRV,
       'if not "clone_allows_active_migration" in self.bugs and _in_flight(self.keeper, self.layout, p.partition):',
       'if False:'),
    _c(PR, "DriveSwitch", "the migration is in CLONE or SWITCH", DRV,
       'if node is None or node["state"] not in ("clone", "switch"):', 'if node is None:'),
    _never(PR, "DriveSwitch", "clone_complete exists", DRV,
           'self.keeper.exists(pr_layout.clone_complete(self.layout, mig_id)) is None'),
    _c(PR, "DriveRollback", "the migration is in CLONE", DRV,
       'if node is None or node["state"] != "clone":\n            raise GuardFailed("DriveRollback"',
       'if node is None:\n            raise GuardFailed("DriveRollback"'),
    _never(PR, "SwitchMulti", "the node is still in SWITCH", DRV,
           'not ("rollback_ignores_state" in self.bugs or state == "switch")'),
    _c(PR, "SwitchMulti", "applied only with the source an owner and the target :cloning", DRV,
       'if s in a.owners and t in a.cloning:', 'if True:'),
    _c(PR, "SwitchMulti", "\"applied before\" only with the source gone and the target an owner", DRV,
       'if s not in a.keepers() and t in a.owners:', 'if s not in a.keepers():'),
    _c(PR, "SwitchMulti", "a phase-1 repair keeps its source (PR-F9)", DRV,
       'keep_source = p.add and not "repair_moves_replica" in self.bugs', 'keep_source = False'),
    _c(PR, "SwitchMulti", "switched, not done: DONE waits for the target (PR-F2)", DRV,
       'after = "done" if "source_stops_at_switch" in self.bugs else "switched"', 'after = "done"'),
    _c(PR, "ApplyRollback", "the node is still in CLONE", DRV,
       'states = IN_FLIGHT if "rollback_ignores_state" in self.bugs else ("clone",)', 'states = IN_FLIGHT'),
    _c(PR, "SignalComplete", "the migration is in CLONE and this is its target", DRV,
       'if node is None or node["state"] != "clone" or node["target"] != target.name:', 'if node is None:'),
    _c(PR, "SignalComplete", "not complete already", DRV,
       'if k.exists(pr_layout.clone_complete(lay, mig_id)) is not None:\n        raise GuardFailed("SignalComplete", '
       'f"migration {mig_id} is complete already")\n    have = target.store.names(node["partition"])',
       'if False:\n        raise GuardFailed("SignalComplete", '
       'f"migration {mig_id} is complete already")\n    have = target.store.names(node["partition"])'),
    _c(PR, "SignalComplete", "every snapshot part is on the target", DRV,
       'missing = [s for s in node["source_parts_snapshot"] if not any(', 'missing = [s for s in () if not any('),
    _c(PR, "Done", "the migration is switched", DRV,
       'if node is None or node["state"] != "switched":', 'if node is None:'),
    _never(PR, "Done", "the target has pulled the log past the SWITCH (PR-F2)", PRM,
           'int(keeper.get(layout.log_pointer(t))[0]) < mig["log_at_switch"]'),
    _never(PR, "Done", "the target has nothing of the partition queued (PR-F2)", PRM,
           'queued_of(keeper, layout, t, p)'),
    _c(PR, "ClientStartQuery", "each partition routed to an owner, not a :cloning target (PR-F10)", QRY,
       'if "read_from_cloning_target" in replica.bugs:\n            candidates |= set(a.cloning)',
       'if True:\n            candidates |= set(a.cloning)'),
)


class BadClause(ValueError):
    """An edit whose code is not in its module exactly once: the module moved on."""


def edited(c: Clause, root: Path = ROOT) -> str:
    text = (root / c.module).read_text()
    n = text.count(c.before)
    if n != 1:
        raise BadClause(f"{c.module}: the code of '{c.key}' ({c.design}) occurs {n} times, not once")
    return text.replace(c.before, c.after)


def copy_checkout(dest: Path) -> Path:
    """The checkout's files (tracked and untracked, not ignored) copied to dest: what a test run
    there imports, since the working directory comes first on sys.path."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for n in filter(None, names):
        src = ROOT / n
        if src.is_file():
            (dest / n).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / n)
    return dest


def failing_tests(copy: Path, tests: list[str] = TESTS) -> tuple[list[str], int]:
    """The test ids that fail (or error) in `copy`, and how many ran."""
    xml = copy / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", MARKERS,
                    f"--junit-xml={xml}", *tests], cwd=copy, capture_output=True)
    if not xml.exists():
        return ["(pytest did not run)"], 0
    failed, ran = [], 0
    for case in ET.parse(xml).getroot().iter("testcase"):
        ran += 1
        if case.find("failure") is not None or case.find("error") is not None:
            cls = case.get("classname", "").replace(".", "/")
            failed.append(f"{cls}.py::{case.get('name')}")
    xml.unlink()
    return sorted(failed), ran


def run_clause(c: Clause, copy: Path) -> list[str]:
    original = (copy / c.module).read_text()
    (copy / c.module).write_text(edited(c, copy))   # the copy's module: the checkout may move on meanwhile
    try:
        return failing_tests(copy)[0]
    finally:
        (copy / c.module).write_text(original)


def table(results: dict[str, dict]) -> str:
    """The markdown table of tests/README.md: one row per clause, the tests that fail without it
    (the first three by name, then how many more)."""
    rows = ["| design | step | clause | tests failing with the clause dropped |", "|---|---|---|---|"]
    for c in CLAUSES:
        r = results.get(f"{c.design}/{c.key}")
        if r is None:
            cell = "not run"
        elif not r["failing"]:
            cell = "**none: no teeth**"
        else:
            names = [f"`{t.split('/')[-1]}`" for t in r["failing"][:3]]
            more = len(r["failing"]) - 3
            cell = ", ".join(names) + (f" and {more} more" if more > 0 else "")
        rows.append(f"| {c.design} | {c.guard} | {c.clause} | {cell} |")
    return "\n".join(rows)


def write_readme(results: dict[str, dict], readme: Path = README) -> bool:
    """Replace the table between the markers; True when it changed."""
    text = readme.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{table(results)}\n{END}{tail}"
    if new != text:
        readme.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m lab.guard_clauses", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="KEY", type=text("a clause key"), help="clauses whose 'step: clause' contains KEY")
    ap.add_argument("--jobs", type=int, default=2, choices=range(1, 9), metavar="N", help="copies run at once (1-8)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the recorded table would change")
    ap.add_argument("--report", type=output_file, help="write a JSON summary here (make check-thorough's stage)")
    a = ap.parse_args(argv)
    chosen = [c for c in CLAUSES if not a.only or any(k in c.key for k in a.only)]
    if not chosen:
        print(f"guard_clauses: no clause matches {a.only}", file=sys.stderr)
        return 2
    try:
        for c in chosen:
            edited(c)
    except BadClause as e:
        print(f"guard_clauses: {e}", file=sys.stderr)
        return 2
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    before = dict(results)
    with tempfile.TemporaryDirectory(prefix="guard-clauses-") as tmp:
        try:
            copies = [copy_checkout(Path(tmp) / f"c{i}") for i in range(a.jobs)]
            failed, ran = failing_tests(copies[0])
            if failed or not ran:
                print(f"guard_clauses: the unedited checkout fails {len(failed)} of {ran} tests: {failed[:3]}",
                      file=sys.stderr)
                return 3
            print(f"unedited: {ran} tests pass; {len(chosen)} clauses to drop", flush=True)

            def batch(j: int) -> None:
                # job j owns copy j: its clauses run there one at a time, each reported as it ends
                for c in chosen[j::a.jobs]:
                    failing = run_clause(c, copies[j])
                    results[f"{c.design}/{c.key}"] = {"module": c.module, "failing": failing}
                    print(f"{'ok  ' if failing else 'NONE'} {c.design}: {c.key}: {len(failing)} failing", flush=True)

            with ThreadPoolExecutor(a.jobs) as pool:
                list(pool.map(batch, range(a.jobs)))
        except KeyboardInterrupt:
            print("guard_clauses: interrupted; nothing recorded", file=sys.stderr)
            return 130
    known = {f"{c.design}/{c.key}" for c in CLAUSES}
    results = {k: v for k, v in sorted(results.items()) if k in known}
    toothless = [k for k in known if k in results and not results[k]["failing"]]
    if a.check:
        stale = {k: v["failing"] for k, v in results.items()} != {k: v["failing"] for k, v in before.items()
                                                                    if k in known}
        summary = (f"{len(results) - len(toothless)} of {len(results)} clauses have teeth; "
                   f"table {'stale' if stale else 'current'}")
        print(summary)
        if a.report:
            a.report.parent.mkdir(parents=True, exist_ok=True)
            a.report.write_text(json.dumps({"summary": summary, "toothless": sorted(toothless), "stale": stale},
                                           indent=1))
        return 1 if toothless or stale else 0
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_readme(results)
    print(f"{len(results)} clauses recorded in {RESULTS.relative_to(ROOT)} and tests/README.md; "
          + (f"{len(toothless)} without teeth: " + ", ".join(sorted(toothless)) if toothless
             else "every one has teeth"))
    return 1 if toothless else 0


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m lab.guard_clauses", main))
