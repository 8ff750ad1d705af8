"""Which layers kill each mutant of the migration and routing code (issue 18: "every migration and
routing mutant killed by at least two layers, one of them the Spark job on a history").

    python -m lab.mutation_layers [--layers racing,protocol,teeth] [--only GLOB] [--keep-histories N]

Runs on mutmut's trampolined copy of the sources (mutants/, made by `mutmut run`): one process
imports everything once, then forks a child per mutant and layer with `MUTANT_UNDER_TEST` set,
as mutmut's own workers do, so the mutant is live in every call the layer makes. Layers:

- `racing`: the racing history workloads of reference/races.py, every profile (cheapest first),
  the small runs of tests/reference/test_races.py (which `make test` runs, and mutmut's selection
  leaves to this layer for time), each history checked by the in-process oracle
  (checkers/oracle.py, the Spark job's invariants; tests/checkers/test_checkers_agree.py holds
  the two to the same verdicts). Seed 0 of every profile, as test_races.py; then seeds 1, 2, ...
  (`--seeds`) while the mutant's racing time is under `--racing-seconds`. A run goes on past a
  step the mutant makes raise (logged in the history's errors table, reference/cluster.py), so a
  mutant that raises somewhere still leaves a history to judge. Verdicts: `racing` is the
  history's: `violation` (a history the checker refuses, a kill of the history layer; the
  search stops at a protocol invariant's refusal), `survived`, or `crash`/`timeout` when no run
  got to a history. `racing_invariants`: the oracle's checks that refused it; a history refused
  only through `NoLogicalErrorsInv` (an exception logged, ClickHouse's LOGICAL_ERROR) is a
  kill, but the search goes on for a protocol invariant's, and the report counts such kills
  apart. `racing_tests` is what test_races.py (seed 0) says: `raised` (a run logged an error),
  `no queries`, `violation`, or `survived`; any but the last is a kill of `make test`.
  Only the runs that call the mutated function are made: which functions a (profile, seed) run
  calls is recorded once, on the unmutated code (a run is deterministic, so a mutant whose
  function it never calls runs it exactly as the fixed protocol, which holds). The profiles whose
  run calls it are recorded too (`racing_reached`): a survivor no run reaches needs a workload.
- `protocol`: conformance's whole-protocol Hypothesis machine (conformance/machines.py
  protocol_machine, the `ci` profile `make test` runs), its steps' guards and the spec's invariants
  checked on the reference after each step.
- `teeth`: the broken variants' teeth (lab/teeth.py TEETH: per bug switch of
  protocol/bugs.py, a racing profile and seed, at teeth.SIZE, whose history the checkers refuse
  with the switch on). A mutant of code that only a variant runs (`if "switch_without_catchup" not
  in bugs ...`, the switch's string renamed, the variant's own branch broken) is equivalent on the
  fixed protocol, which the racing layer runs; it changes what the switch-on run shows. For a
  mutant whose function names a switch (a string constant of its original's body), each such
  switch's tooth is run with the switch on, the switches on the mutated line first, and the
  oracle's refused-invariant set compared with the unmutated code's on the same run (computed once
  in the parent, `teeth_unmutated_invariants`): a different set is `violation`, a kill of the
  history layer on a switch-on run (`teeth_detail`, `teeth_invariants`); the same set on every
  tooth `survived`; `crash` when no run of the mutant left a history. Mutants whose function names
  no switch are not run (nothing recorded). A mutant that turns a variant on in the fixed protocol
  (`in` -> `not in`) turns it off with the switch on, so the tooth's run differs too.

The mutants: migration.py whole, and the routing functions of query.py and insert.py; a mutant
whose only change is an exception's text (lab.mutants.message_only) is skipped as
equivalent. mutmut's own verdict (the reference tests) comes from mutants/*.meta. Results go to
build/mutation/layers.json keyed by mutmut's name and by module, function and the mutated line
(stable across edits); lab/mutation_report.py reads them and keeps them in the repository
(lab/mutation_store.py), from where a later checkout's run takes them instead of running those
mutants again (`--rerun LAYER` runs a layer again): all of them take hours, so a run goes on over sessions.

`--keep-histories N` keeps the histories of the first N racing kills (the one that killed) under build/mutation/histories/
for the Spark job (`.venv/bin/spark-submit pyspark_jobs/spark_check.py --input DIR`), whose verdicts
`--spark` then records beside the oracle's. The teeth layer keeps its kills' histories under the same
budget (histories/teeth/<mutant>/), and each unmutated tooth's history it compared with once
(histories/teeth-unmutated/<switch>-<profile>-<seed>/); `--spark` judges both and records
`teeth_spark`: `killed` when the job's failing invariants on the mutant's history differ from
its failing invariants on the unmutated tooth's.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from lab import mutation_store
from lab.mutants import only_logical_errors

REPO = Path(__file__).resolve().parents[1]
MUTANTS = REPO / "mutants"
OUT = REPO / "build" / "mutation" / "layers.json"
HISTORIES = REPO / "build" / "mutation" / "histories"

# The routing code: where a SELECT reads (query.py) and where an INSERT's sub-blocks go (insert.py).
ROUTING = ["protocol.query.*", "protocol.insert.*"]
MIGRATION = ["protocol.migration.*"]
# Every profile of reference/races.py, as tests/reference/test_races.py runs them, cheapest first
# (seconds of one core here, seed 0 and 1 of the small runs, with this module's child overhead).
# cancelling, deserting and clients (0.5-1.1 s a small run, seeds 0-3) come early: they aim at
# what the others reach rarely (a CANCEL in each state, CLEANUP for a down leaver, the client API),
# so a mutant there meets them within its racing seconds; so does expiring (0.3-1 s), the only one
# whose Keeper sessions expire (before a write, or right after a commit went out), so the only one
# that runs route_insert's read-only fall-back and client_send_insert's unknown outcome, and
# mutating, the only one with mutations (a CLONE fetch meeting keepers' queued MUTATE_PARTs).
RACING_PROFILES = ("churn", "switching", "cancelling", "deserting", "clients", "overlapping", "refusing", "expiring",
                   "impatient", "mutating", "retrying",
                   "altering", "dropping", "leaving", "lossy", "losing", "racing", "stale", "allocating", "thin")
SMALL = {"steps": 80, "blocks": 16}   # as tests/reference/test_races.py
FULL: dict = {}                       # the profile's own steps, 60 blocks (races.race's defaults)
LAYER_TIMEOUT_S = {"racing": 300, "protocol": 300, "teeth": 300}
SEEDS = (0, 1, 2)
RACING_SECONDS = 10.0   # per mutant, the seeds after 0 only while its racing runs took less

KILLED, SURVIVED, CRASH, TIMEOUT = "killed", "survived", "crash", "timeout"
VIOLATION, NO_QUERIES, RAISED = "violation", "no queries", "raised"   # racing: see the module docstring


def _mutated_function(key: str) -> str:
    """mutmut's name of a mutant's function: protocol.migration.x_f__mutmut_3 -> protocol.migration.x_f"""
    return key.rsplit("__mutmut_", 1)[0]


def calls_by_run(runs: list[tuple[str, int]], modules: list[str]) -> dict[tuple[str, int], set[str]]:
    """Per (profile, seed) racing run on the unmutated code, the mutated functions it calls (by
    _mutated_function's name): each trampoline's original is wrapped to note its call, for the
    runs only. Raises if a run of the fixed protocol does not hold: then no verdict means anything."""
    import functools
    import importlib

    from reference.races import racing_history
    called: set[str] = set()
    wrapped = []
    for name in modules:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if attr.startswith("mutants_x_") and isinstance(value, dict) and "_mutmut_orig" in value:
                fn = f"{name}.{attr[len('mutants_'):-len('__mutmut')]}"
                orig = value["_mutmut_orig"]

                def noted(*a, _fn=fn, _orig=orig, **k):
                    called.add(_fn)
                    return _orig(*a, **k)
                value["_mutmut_orig"] = functools.wraps(orig)(noted)
                wrapped.append((value, orig))
    out = {}
    try:
        for profile, seed in runs:
            called.clear()
            folder = Path(tempfile.mkdtemp(prefix="mutlayer-calls-"))
            try:
                run = racing_history(folder, profile, seed, **SMALL)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            if run["oracle_violations"] or run["errors"]:
                raise RuntimeError(f"the fixed protocol's {profile} seed {seed} run does not hold: "
                                   f"{(run['oracle_sample'] + run['error_sample'])[:1]}")
            out[(profile, seed)] = set(called)
    finally:
        for d, orig in wrapped:
            d["_mutmut_orig"] = orig
    return out


CALLS: dict[tuple[str, int], set[str]] = {}   # filled by main() before the children fork


def _racing(key: str, keep: Path | None) -> tuple[str, str, dict]:
    """Every (seed, profile) run that calls the mutated function, seed 0 first (test_races.py's
    runs) and the cheapest profile first, then the reached profiles at full size, the teeth's runs
    with no switch on, and the other seeds at full size, while the racing seconds last; stops at
    the first history the oracle refuses by a protocol invariant. A history refused only through NoLogicalErrorsInv is a kill too, but the
    search goes on (within --racing-seconds) for one a protocol invariant refuses, so that
    `racing_invariants` says whether the history layer saw more than the exception."""
    from reference.races import racing_history
    fn = _mutated_function(key)
    runs = [(p, s, SMALL) for s in SEEDS for p in RACING_PROFILES if fn in CALLS.get((p, s), {fn})]
    extra = {"racing_reached": sorted({p for p, s, _ in runs if s == 0}), "racing_tests": SURVIVED}
    # Then each reached profile at its full size (seed 0), while the racing seconds last: some
    # refusals need a state a small run seldom makes (an orphaned CLONE, a query still open after
    # one of its reads).
    runs += [(p, 0, FULL) for p in extra["racing_reached"]]
    # Then each broken variant's tooth (profile and seed) with no switch on: a mutant that turns the
    # fixed code into a variant (`stale = None` where the variant's is `[]`) shows where the variant
    # does, and the teeth's seeds were searched for that (lab/teeth.py).
    # A tooth counts when a recorded run of its profile calls the function at any seed, or when the
    # function names the tooth's switch (the variant lives there: `leaving` reaches the down-leaver
    # CLEANUP only after its minimum down time, past a small run's steps).
    from lab.teeth import SIZE as TEETH_SIZE, TEETH
    reached_any = {p for (p, _), fns in CALLS.items() if fn in fns} | set(extra["racing_reached"])
    named = TEETH_OF.get(key, [])
    runs += [(p, s, TEETH_SIZE) for p, s in dict.fromkeys((t.profile, t.seed) for t in TEETH
                                                         if t.profile in reached_any or t in named)]
    # Then the other seeds at full size: a client's lost answer left without a retry needs a long run
    # (`impatient` shows it on full-size seeds 1-3, on no small one of 0-3).
    runs += [(p, s, FULL) for s in SEEDS[1:] for p in extra["racing_reached"]]
    t0, ran, crashes, detail = time.monotonic(), 0, [], ""
    logical: tuple[str, list[str]] | None = None   # the first refusal through NoLogicalErrorsInv alone

    def refused(run: dict, where: str) -> tuple[str, list[str]]:
        return f"{where}: {run['oracle_sample'][0][:160]}", run["oracle_invariants"]
    for profile, seed, size in runs:
        tests_run = seed == 0 and size is SMALL   # test_races.py's run
        if not tests_run and time.monotonic() - t0 > RACING_SECONDS:
            break
        where = f"{profile}/{seed}" + ("" if size is SMALL else "/full" if size is FULL else "/tooth")
        folder = Path(tempfile.mkdtemp(prefix="mutlayer-"))
        try:
            run = racing_history(folder, profile, seed, **size)
        except Exception as e:  # noqa: BLE001 - a run the mutant breaks past the driver's catching is a result
            crashes.append(f"{where}: {type(e).__name__}: {str(e)[:160]}")
            if tests_run:
                extra["racing_tests"] = CRASH
            continue
        else:
            ran += 1
            if tests_run and extra["racing_tests"] == SURVIVED:
                # test_races.py asserts no error was logged before it asks the oracle
                extra["racing_tests"] = (RAISED if run["errors"] else VIOLATION if run["oracle_violations"]
                                         else NO_QUERIES if not run["actions"].get("query", 0) else SURVIVED)
                if run["errors"]:
                    detail = f"{where} raised: {run['error_sample'][0][:160]}"
            if run["oracle_violations"] and (logical is None or not only_logical_errors(run["oracle_invariants"])):
                if keep is not None:   # one history kept: the protocol invariant's when there is one
                    for old in list(keep.iterdir()):
                        shutil.rmtree(old)
                    shutil.copytree(folder / "history", keep / where.replace("/", "-"))
                if only_logical_errors(run["oracle_invariants"]):
                    logical = refused(run, where)
                    continue
                extra.update(racing_runs=ran, racing_invariants=run["oracle_invariants"])
                if crashes:
                    extra["racing_crash"] = crashes[0]
                return VIOLATION, refused(run, where)[0], extra
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    extra["racing_runs"] = ran
    if crashes:
        extra["racing_crash"] = crashes[0]
    if logical:
        extra["racing_invariants"] = logical[1]
        return VIOLATION, logical[0], extra
    if crashes and not ran:
        return CRASH, crashes[0], extra
    return SURVIVED, detail, extra


def _protocol(key: str, keep: Path | None) -> tuple[str, str, dict]:
    os.environ.setdefault("CONFORMANCE_PROFILE", "ci")
    from conformance.machines import profile, protocol_machine
    from conformance.runner import run_machine
    r = run_machine(protocol_machine(), profile(), shrink=False)
    return (KILLED, r["error"][:200], {}) if r["failed"] else (SURVIVED, "", {})


def switches_named(module: str, keys: list[str], switches, diffs: dict, root: Path = MUTANTS) -> dict[str, list[str]]:
    """Per mutant, the bug switches (of `switches`) its function names: string constants in the body
    of mutmut's copy of the original (`x_<fn>__mutmut_orig`), the docstring left out; the mutated
    line's own switches first (a renamed switch is on the original's line, not the mutant's)."""
    import ast
    path = root / module
    if not path.is_file():
        return {}
    funcs = {n.name: n for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.endswith("__mutmut_orig")}
    out = {}
    for key in keys:
        orig = funcs.get(key.split(".")[-1].rsplit("__mutmut_", 1)[0] + "__mutmut_orig")
        if orig is None:
            continue
        body = orig.body[1:] if (orig.body and isinstance(orig.body[0], ast.Expr)
                                 and isinstance(orig.body[0].value, ast.Constant)) else orig.body
        named = {c.value for b in body for c in ast.walk(b) if isinstance(c, ast.Constant) and c.value in switches}
        if named:
            before = diffs.get(key, ("",))[0]
            out[key] = sorted(named, key=lambda sw: (f'"{sw}"' not in before, sw))
    return out


# Filled by main() before the children fork: per mutant, the teeth of the switches its function
# names (switches_named's order; the teeth layer runs them, the racing layer their runs unswitched),
# and per tooth (switch, profile, seed) the unmutated code's run: the oracle's refused invariants
# and the kept history (or the error that left no history).
TEETH_OF: dict[str, list] = {}
TEETH_BASE: dict[tuple[str, str, int], dict] = {}


def teeth_unmutated(teeth, keep: Path | None) -> dict[tuple[str, str, int], dict]:
    """Each tooth's run on the unmutated code (the switch on): its refused invariants, its history
    kept under `keep` if given."""
    from lab.teeth import SIZE
    from reference.races import racing_history
    out = {}
    for t in teeth:
        folder = Path(tempfile.mkdtemp(prefix="mutlayer-tooth-"))
        try:
            run = racing_history(folder, t.profile, t.seed, bugs=frozenset({t.switch}), **SIZE)
        except Exception as e:  # noqa: BLE001 - a tooth with no history: its mutants are not judged by it
            out[(t.switch, t.profile, t.seed)] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
            continue
        else:
            base = {"invariants": run["oracle_invariants"], "seconds": run["seconds"]}
            if keep is not None:
                dst = keep / f"{t.switch}-{t.profile}-{t.seed}"
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(folder / "history", dst)
                base["history"] = str(dst)
            out[(t.switch, t.profile, t.seed)] = base
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return out


def _teeth(key: str, keep: Path | None) -> tuple[str, str, dict]:
    """The teeth of the switches the mutant's function names, run with the mutant live, each
    compared with the unmutated code's run of the same tooth; stops at the first that differs."""
    from lab.teeth import SIZE
    from reference.races import racing_history
    extra: dict = {"teeth_run": []}
    crashes = []
    for t in TEETH_OF.get(key, []):
        where = f"{t.switch} {t.profile}/{t.seed}"
        base = TEETH_BASE.get((t.switch, t.profile, t.seed), {})
        if "invariants" not in base:
            continue
        extra["teeth_run"].append(where)
        folder = Path(tempfile.mkdtemp(prefix="mutlayer-teeth-"))
        try:
            run = racing_history(folder, t.profile, t.seed, bugs=frozenset({t.switch}), **SIZE)
        except Exception as e:  # noqa: BLE001 - no history: no verdict of this tooth
            crashes.append(f"{where}: {type(e).__name__}: {str(e)[:160]}")
            continue
        else:
            if run["oracle_invariants"] != base["invariants"]:
                if keep is not None:
                    shutil.copytree(folder / "history", keep / f"{t.switch}-{t.profile}-{t.seed}")
                extra.update(teeth_tooth=where, teeth_invariants=run["oracle_invariants"],
                             teeth_unmutated_invariants=base["invariants"])
                if "history" in base:
                    extra["teeth_unmutated_history"] = base["history"]
                if crashes:
                    extra["teeth_crash"] = crashes[0]
                sample = f": {run['oracle_sample'][0][:120]}" if run["oracle_sample"] else ""
                return (VIOLATION, f"{where}: unmutated refused by {base['invariants'] or 'none (holds)'}, "
                        f"mutant by {run['oracle_invariants'] or 'none (holds)'}{sample}", extra)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    if not extra["teeth_run"]:
        return CRASH, "no tooth of its switches left a history on the unmutated code", extra
    if crashes:
        extra["teeth_crash"] = crashes[0]
        if len(crashes) == len(extra["teeth_run"]):
            return CRASH, crashes[0], extra
    return SURVIVED, "", extra


LAYERS = {"racing": _racing, "protocol": _protocol, "teeth": _teeth}


def _in_child(layer: str, key: str, keep: Path | None, timeout_s: int) -> tuple[str, str, dict]:
    """Runs one layer on one mutant in a forked child; (verdict, detail, other fields to record)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.environ["MUTANT_UNDER_TEST"] = key
        try:
            verdict = LAYERS[layer](key, keep)
        except BaseException as e:  # noqa: BLE001
            verdict = (CRASH, f"{type(e).__name__}: {str(e)[:160]}", {})
        os.write(w, json.dumps(verdict).encode())
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            return TIMEOUT, f"over {timeout_s} s", {}
        time.sleep(0.05)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    return tuple(json.loads(data)) if data else (CRASH, f"child ended with status {status}", {})


def mutants(patterns: list[str]) -> list[tuple[str, str, int | None]]:
    """(module path, mutant name, mutmut's exit code) of every mutant matching a pattern."""
    out = []
    for meta in sorted(MUTANTS.glob("protocol/*.py.meta")):
        module = str(meta.relative_to(MUTANTS))[:-len(".meta")]
        for key, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if any(fnmatch.fnmatch(key, p) for p in patterns):
                out.append((module, key, code))
    return out


# The folders the mutants' runs take from this checkout: the protocol's modules mutmut did not
# mutate, and the layers above it that drive, record and judge.
UNMUTATED_SYNCED = ("protocol", "history", "checkers", "reference")


def sync_unmutated() -> list[str]:
    """mutants/ holds a copy of every source made when `mutmut run` started; the modules it did not
    mutate (the driver, the history, the oracle) are copied again from this checkout, so the layers
    run today's driver and checker on the mutants. Returns what was copied."""
    copied = []
    for src in sorted(f for folder in UNMUTATED_SYNCED for f in (REPO / folder).rglob("*.py")):
        dst = MUTANTS / src.relative_to(REPO)
        if dst.with_name(dst.name + ".meta").exists():
            continue   # mutated: the trampolined copy is mutmut's
        if not dst.is_file() or dst.read_bytes() != src.read_bytes():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            copied.append(str(src.relative_to(REPO)))
    return copied


class SparkFailed(Exception):
    pass


# The verdict of a history the Spark job refused to read, and the prefix of its one failing entry.
BAD_INPUT = "bad input"


def spark_verdicts(histories: list[str], batch: int = 50):
    """The Spark job (pyspark_jobs/spark_check.py, by spark-submit) on `histories`, `batch` per job
    (one JVM start each: a start costs more than a small history's check); yields per job
    {history: (holds, sorted failing invariants)}. A history the job refuses to read (exit 2, bad
    input: a mutant can leave snapshots that do not fit together) stops its job; it is taken out,
    with (False, ["bad input: ..."]), and the job runs again on the rest. Raises SparkFailed if a
    job ends without a report for any other reason."""
    import subprocess
    for i in range(0, len(histories), batch):
        part, out = histories[i:i + batch], {}
        while part:
            with tempfile.TemporaryDirectory(prefix="mutlayer-spark-") as tmp:
                report = Path(tmp) / "report.json"
                args = [a for h in part for a in ("--input", h)]
                p = subprocess.run([str(REPO / ".venv" / "bin" / "spark-submit"),
                                    str(REPO / "pyspark_jobs" / "spark_check.py"), *args, "--report", str(report)],
                                   capture_output=True, text=True)
                if p.returncode in (0, 1) and report.is_file():
                    by_input = {r["input"]: r for r in json.loads(report.read_text())["results"]}
                    out.update({h: (by_input[h]["holds"], sorted(n for n, inv in by_input[h]["invariants"].items()
                                                                 if not inv["holds"])) for h in part})
                    break
                # (the job's one line goes to stdout under spark-submit when it is not a terminal)
                said = [ln for ln in (p.stdout + "\n" + p.stderr).splitlines() if "spark_check: bad input:" in ln]
                bad = [h for h in part if said and h + "/" in said[-1]] if p.returncode == 2 else []
                if not bad:
                    last = (p.stderr.strip().splitlines() or [""])[-1]
                    raise SparkFailed(f"spark_check exit {p.returncode}: {(said or [last])[-1][:300]}")
                why = said[-1].split(f"{BAD_INPUT}: ", 1)[1].replace(bad[0] + "/", "")
                out[bad[0]] = (False, [f"{BAD_INPUT}: {why[:200]}"])
                part = [h for h in part if h != bad[0]]
        yield out


def _spark(out: Path, batch: int = 50) -> int:
    """The Spark job on the kept histories not yet judged by it. `spark`: `killed` if the job refuses
    a racing kill's history as the in-process oracle did, with the invariants it found
    (`spark_detail`). `teeth_spark`: `killed` if the job's failing invariants on a teeth kill's
    history differ from its failing invariants on the unmutated tooth's history (both judged in the
    same jobs), `teeth_spark_detail` both sets."""
    results = json.loads(out.read_text())
    todo = sorted((r["history"], key) for key, r in results.items() if r.get("history") and "spark" not in r)
    try:
        for verdicts in spark_verdicts([h for h, _ in todo], batch):
            for history, key in todo:
                if history in verdicts:
                    r, (holds, failing) = results[key], verdicts[history]
                    # a history the job cannot read is no kill: it judged no invariant on it
                    r["spark"] = (SURVIVED if holds else BAD_INPUT if failing and failing[0].startswith(BAD_INPUT)
                                  else KILLED)
                    r["spark_detail"] = ", ".join(failing)
                    print(f"{key}: spark {r['spark']} ({r['spark_detail']})", flush=True)
            out.write_text(json.dumps(results, indent=1, sort_keys=True))
        teeth = sorted(key for key, r in results.items()
                       if r.get("teeth_history") and r.get("teeth_unmutated_history") and "teeth_spark" not in r)
        # A job's worth of mutants at a time, each saved once both its histories are judged: the
        # whole set takes hours, and a run stopped part-way keeps what it judged.
        verdicts = {}
        for i in range(0, len(teeth), batch):
            keys = teeth[i:i + batch]
            histories = sorted({results[k][f] for k in keys for f in ("teeth_history", "teeth_unmutated_history")}
                               - set(verdicts))
            for part in spark_verdicts(histories, batch):
                verdicts.update(part)
            for key in keys:
                r = results[key]
                mutant, unmutated = verdicts[r["teeth_history"]][1], verdicts[r["teeth_unmutated_history"]][1]
                r["teeth_spark"] = (BAD_INPUT if any(f.startswith(BAD_INPUT) for f in mutant + unmutated)
                                    else KILLED if mutant != unmutated else SURVIVED)
                r["teeth_spark_detail"] = (f"mutant: {', '.join(mutant) or 'none (holds)'}; "
                                           f"unmutated: {', '.join(unmutated) or 'none (holds)'}")
                print(f"{key}: teeth_spark {r['teeth_spark']} ({r['teeth_spark_detail']})", flush=True)
            out.write_text(json.dumps(results, indent=1, sort_keys=True))
    except SparkFailed as e:
        print(f"mutation_layers: {e}", file=sys.stderr)
        return 3
    return 0


def _resume_from_kept(results: dict, todo: list, diffs: dict) -> int:
    """A mutant the layers already ran, as kept in the repository (lab/mutation_store.py, by
    its mutated line, whatever mutmut numbers it now), enters `results` with those verdicts, so a
    run that all of a session cannot finish goes on in the next checkout instead of starting over."""
    from lab.mutants import function_of, reading_key
    kept = {reading_key(r["module"], r["function"], r["before"], r["after"]): r for r in mutation_store.load_layers()}
    taken = 0
    for module, key, _ in todo:
        before, after, _ = diffs.get(key, ("", "", False))
        r = kept.get(reading_key(module, function_of(key), before, after))
        if key not in results and r is not None:
            results[key] = dict(r)
            taken += 1
    return taken


def main(argv: list[str] | None = None) -> int:
    global SEEDS, RACING_SECONDS   # read by the forked children
    from harness.cli_args import Parser, int_at_least, output_file, positive_float, text
    ap = Parser(prog="python -m lab.mutation_layers", description=__doc__.splitlines()[0])
    layer = "(racing|protocol|teeth)"
    ap.add_argument("--layers", default="racing,protocol,teeth", type=text("layers", rf"{layer}(,{layer})*"))
    ap.add_argument("--only", action="append", type=text("a mutant name glob"), help="mutant name glob (default: migration.py and the routing code)")
    ap.add_argument("--sample", type=int_at_least(0), default=0, metavar="N",
                    help="run N mutants drawn at random (seeded) of those not changing only a text; 0: all")
    ap.add_argument("--seed", type=int_at_least(0), default=0)
    ap.add_argument("--keep-histories", type=int_at_least(0), default=0, metavar="N")
    ap.add_argument("--out", type=output_file, default=OUT)
    ap.add_argument("--spark", action="store_true", help="run the Spark job on the kept histories and record it")
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)), type=text("seeds", r"\d+(,\d+)*"), help="racing seeds, 0 first (default %(default)s)")
    ap.add_argument("--racing-seconds", type=positive_float, default=RACING_SECONDS,
                    help="per mutant, seeds after 0 only while its racing runs took less (default %(default)s)")
    ap.add_argument("--timeout", type=positive_float, default=None, metavar="S",
                    help="seconds a mutant may take on one layer before it counts as a hang (default: "
                         + ", ".join(f"{k} {v:g}" for k, v in LAYER_TIMEOUT_S.items()) + ")")
    ap.add_argument("--rerun", action="append", default=[], metavar="LAYER", choices=sorted(LAYER_TIMEOUT_S),
                    help="run this layer again on mutants layers.json already has a verdict of")
    a = ap.parse_args(argv)
    try:
        SEEDS = tuple(int(x) for x in a.seeds.split(","))
    except ValueError:
        print(f"mutation_layers: --seeds must be integers separated by commas, not {a.seeds!r}", file=sys.stderr)
        return 2
    RACING_SECONDS = a.racing_seconds
    a.out = a.out.resolve()   # the layers run from mutants/ (os.chdir below): a relative --out would land there
    if a.timeout is not None:   # a hang costs this much per layer; the unmutated runs take seconds
        LAYER_TIMEOUT_S.update(dict.fromkeys(LAYER_TIMEOUT_S, a.timeout))
    layers = a.layers.split(",")
    if not MUTANTS.is_dir():
        print(f"mutation_layers: no {MUTANTS}: run `.venv/bin/mutmut run` first", file=sys.stderr)
        return 2
    # This checkout's report module (mutants/ holds a copy made when mutmut started), imported
    # before mutants/ goes first on the path; it imports nothing of the protocol.
    from lab.mutants import STATUS, function_of, mutant_diffs
    from lab.teeth import TEETH  # this checkout's, as the report module
    if a.spark:
        return _spark(a.out)
    synced = sync_unmutated()
    if synced:
        print(f"mutation_layers: copied this checkout's {', '.join(synced)} into {MUTANTS}", flush=True)
    sys.path.insert(0, str(MUTANTS))
    os.chdir(MUTANTS)

    # Import what the layers use before forking, with no mutant live, so each child starts warm.
    os.environ["MUTANT_UNDER_TEST"] = ""
    import protocol.migration
    import reference.races  # noqa: F401
    if not protocol.migration.__file__.startswith(str(MUTANTS)):
        print(f"mutation_layers: the protocol imported from {protocol.migration.__file__}, not {MUTANTS}", file=sys.stderr)
        return 3
    if "protocol" in layers:
        os.environ.setdefault("CONFORMANCE_PROFILE", "ci")
        import conformance.machines  # noqa: F401

    todo = mutants(a.only or MIGRATION + ROUTING)
    results = json.loads(a.out.read_text()) if a.out.is_file() else {}
    diffs = {}
    for module in {m for m, _, _ in todo}:
        diffs.update(mutant_diffs(module, [k for m, k, _ in todo if m == module], MUTANTS))
    todo = [t for t in todo if not diffs.get(t[1], ("", "", False))[2]]
    taken = _resume_from_kept(results, todo, diffs)
    if taken:
        print(f"mutation_layers: {taken} mutants' verdicts taken from {mutation_store.STORE} (the layers ran "
              f"them in an earlier checkout; --rerun LAYER runs a layer again)", flush=True)
    if a.sample:
        todo = [t for t in todo if t[2] is not None]   # drawn among those mutmut has decided
        import random

        # A survivor costs every racing profile (about 10 s here) and a full protocol machine (about
        # 10 s): all of migration.py's and the routing code's mutants take hours, a sample minutes.
        todo = sorted(random.Random(a.seed).sample(todo, min(a.sample, len(todo))))
    kept = sum(1 for r in results.values() if r.get("history")) + sum(1 for r in results.values() if r.get("teeth_history"))
    # The teeth of each mutant's function: the teeth layer runs them, the racing layer runs their
    # (profile, seed) with no switch on. Parsed once here, before the children fork.
    switches = {t.switch for t in TEETH}
    for module in {m for m, _, _ in todo}:
        named = switches_named(module, [k for m, k, _ in todo if m == module], switches, diffs)
        TEETH_OF.update({k: [t for sw in sws for t in TEETH if t.switch == sw] for k, sws in named.items()})
    if "teeth" in layers:
        t_teeth = time.monotonic()
        needed = sorted({t for ts in TEETH_OF.values() for t in ts}, key=lambda t: (t.switch, t.profile, t.seed))
        base_keep = None
        if a.keep_histories:
            base_keep = HISTORIES / "teeth-unmutated"
            base_keep.mkdir(parents=True, exist_ok=True)
        TEETH_BASE.update(teeth_unmutated(needed, base_keep))
        for (sw, profile, seed), b in sorted(TEETH_BASE.items()):
            print(f"tooth {sw} {profile}/{seed} unmutated: "
                  + (f"refused by {b['invariants']} ({b['seconds']} s)" if "invariants" in b else f"no history: {b['error']}"),
                  flush=True)
        print(f"{len(needed)} teeth run on the unmutated code in {time.monotonic() - t_teeth:.0f}s", flush=True)
    if "racing" in layers:
        t_calls = time.monotonic()
        modules = sorted({k.rsplit(".", 1)[0] for _, k, _ in todo})
        CALLS.update(calls_by_run([(p, s) for s in SEEDS for p in RACING_PROFILES], modules))
        print(f"racing runs' calls recorded on the unmutated code in {time.monotonic() - t_calls:.0f}s", flush=True)
    t0 = time.monotonic()
    for i, (module, key, code) in enumerate(todo, 1):
        before, after, message = diffs.get(key, ("", "", False))
        if message:
            continue
        r = results.setdefault(key, {})
        r.update({"module": module, "function": function_of(key), "before": before, "after": after,
                  "tests": STATUS.get(code, "suspicious")})
        for layer in layers:
            if layer in r and layer not in a.rerun:
                continue
            if layer == "teeth" and key not in TEETH_OF:
                continue   # its function names no switch
            if layer == "racing":   # the previous racing verdict's fields go with it
                for f in ("racing_detail", "racing_tests", "racing_reached", "racing_runs", "racing_crash",
                          "racing_invariants", "history", "spark", "spark_detail"):
                    r.pop(f, None)
            if layer == "teeth":
                for f in [f for f in r if f.startswith("teeth_")]:
                    r.pop(f)
            keep = None
            if layer in ("racing", "teeth") and kept < a.keep_histories:
                keep = HISTORIES / ("teeth" if layer == "teeth" else "") / key.split(".")[-1]
                shutil.rmtree(keep, ignore_errors=True)
                keep.mkdir(parents=True)
            verdict, detail, extra = _in_child(layer, key, keep, LAYER_TIMEOUT_S[layer])
            r[layer] = verdict
            r.update(extra)
            if detail:
                r[f"{layer}_detail"] = detail
            if keep is not None:
                if verdict == VIOLATION:
                    r["teeth_history" if layer == "teeth" else "history"] = str(next(keep.iterdir()))
                    kept += 1
                else:
                    shutil.rmtree(keep, ignore_errors=True)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(results, indent=1, sort_keys=True))   # after each mutant: a stop loses one
        print(f"[{i}/{len(todo)} {time.monotonic() - t0:.0f}s] {key}: tests {r['tests']}, "
              + ", ".join(f"{layer} {r.get(layer)}" for layer in layers), flush=True)
    return 0


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m lab.mutation_layers", main))
