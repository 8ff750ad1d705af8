"""Which layers kill each mutant of the migration and routing code (issue 18: "every migration and
routing mutant killed by at least two layers, one of them the Spark job on a history").

    python -m harness.mutation_layers [--layers racing,protocol] [--only GLOB] [--keep-histories N]

Runs on mutmut's trampolined copy of the sources (mutants/, made by `mutmut run`): one process
imports everything once, then forks a child per mutant and layer with `MUTANT_UNDER_TEST` set,
as mutmut's own workers do, so the mutant is live in every call the layer makes. Layers:

- `racing`: the racing history workloads of reference/races.py, every profile, seed 0, the small
  runs of tests/reference/test_races.py (which `make test` runs, and mutmut's selection leaves to
  this layer for time), each history checked by the in-process oracle (reference/oracle.py, the
  Spark job's invariants; tests/reference/test_checkers_agree.py holds the two to the same
  verdicts). `violation`: a history the checker refuses, a kill of the history layer. `crash` (the
  run raised) and `no queries` fail test_races.py too, so they are kills of `make test`, but
  the Spark job never sees a history from them: not kills of the history layer.
- `protocol`: conformance's whole-protocol Hypothesis machine (conformance/machines.py
  protocol_machine, the `ci` profile `make test` runs), its steps' guards and the spec's invariants
  checked on the reference after each step.

The mutants: migration.py whole, and the routing functions of query.py and insert.py; a mutant
whose only change is an exception's text (harness.mutation_report.message_only) is skipped as
equivalent. mutmut's own verdict (the reference tests) comes from mutants/*.meta. Results go to
build/mutation/layers.json keyed by mutmut's name and by module, function and the mutated line
(stable across edits); harness/mutation_report.py reads them.

`--keep-histories N` keeps the histories of the first N racing kills under build/mutation/histories/
for the Spark job (`.venv/bin/spark-submit pyspark_jobs/spark_check.py --input DIR`), whose verdicts
`--spark` then records beside the oracle's.
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

REPO = Path(__file__).resolve().parents[1]
MUTANTS = REPO / "mutants"
OUT = REPO / "build" / "mutation" / "layers.json"
HISTORIES = REPO / "build" / "mutation" / "histories"

# The routing code: where a SELECT reads (query.py) and where an INSERT's sub-blocks go (insert.py).
ROUTING = ["reference.query.*", "reference.insert.*"]
MIGRATION = ["reference.migration.*"]
# Every profile, as tests/reference/test_races.py runs them, cheapest first (seconds on this machine).
RACING_PROFILES = ("churn", "switching", "racing", "stale", "lossy", "losing", "thin")
SMALL = {"steps": 80, "blocks": 16}   # as tests/reference/test_races.py
LAYER_TIMEOUT_S = {"racing": 180, "protocol": 300}

KILLED, SURVIVED, CRASH, TIMEOUT = "killed", "survived", "crash", "timeout"
VIOLATION, NO_QUERIES = "violation", "no queries"   # racing: a history the checker refuses / a run with no query


def _racing(key: str, keep: Path | None) -> tuple[str, str]:
    """test_races.py's test_fixed_protocol_holds_under_each_profile, profile by profile (the
    cheapest first), stopping at the first that fails it."""
    from reference.races import racing_history
    for profile in RACING_PROFILES:
        folder = Path(tempfile.mkdtemp(prefix="mutlayer-"))
        try:
            run = racing_history(folder, profile, 0, **SMALL)
            if run["oracle_violations"]:
                if keep is not None:
                    shutil.copytree(folder / "history", keep / profile)
                return VIOLATION, f"{profile}: {run['oracle_sample'][0][:160]}"
            if not run["actions"].get("query", 0):
                return NO_QUERIES, f"{profile}: no query ran"
        except Exception as e:  # noqa: BLE001 - a run the mutant breaks is a result
            return CRASH, f"{profile}: {type(e).__name__}: {str(e)[:160]}"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return SURVIVED, ""


def _protocol(key: str, keep: Path | None) -> tuple[str, str]:
    os.environ.setdefault("CONFORMANCE_PROFILE", "ci")
    from conformance.__main__ import run_machine
    from conformance.machines import profile, protocol_machine
    r = run_machine(protocol_machine(), profile(), shrink=False)
    return (KILLED, r["error"][:200]) if r["failed"] else (SURVIVED, "")


LAYERS = {"racing": _racing, "protocol": _protocol}


def _in_child(layer: str, key: str, keep: Path | None, timeout_s: int) -> tuple[str, str]:
    """Runs one layer on one mutant in a forked child; (verdict, detail)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.environ["MUTANT_UNDER_TEST"] = key
        try:
            verdict = LAYERS[layer](key, keep)
        except BaseException as e:  # noqa: BLE001
            verdict = (CRASH, f"{type(e).__name__}: {str(e)[:160]}")
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
            return TIMEOUT, f"over {timeout_s} s"
        time.sleep(0.05)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    return tuple(json.loads(data)) if data else (CRASH, f"child ended with status {status}")


def mutants(patterns: list[str]) -> list[tuple[str, str, int | None]]:
    """(module path, mutant name, mutmut's exit code) of every mutant matching a pattern."""
    out = []
    for meta in sorted(MUTANTS.glob("reference/*.py.meta")):
        module = str(meta.relative_to(MUTANTS))[:-len(".meta")]
        for key, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if any(fnmatch.fnmatch(key, p) for p in patterns):
                out.append((module, key, code))
    return out


def _spark(out: Path) -> int:
    """The Spark job (pyspark_jobs/spark_check.py) on each kept history: exit 1 is a violation found,
    as the in-process oracle found on the same history."""
    import subprocess
    results = json.loads(out.read_text())
    for key, r in sorted(results.items()):
        if not r.get("history") or "spark" in r:
            continue
        p = subprocess.run([str(REPO / ".venv" / "bin" / "spark-submit"), str(REPO / "pyspark_jobs" / "spark_check.py"),
                            "--input", r["history"]], capture_output=True, text=True)
        r["spark"] = {1: KILLED, 0: SURVIVED}.get(p.returncode, f"exit {p.returncode}")
        r["spark_detail"] = (p.stdout.strip().splitlines() or [""])[-1][:200]
        out.write_text(json.dumps(results, indent=1, sort_keys=True))
        print(f"{key}: spark {r['spark']} ({r['spark_detail']})", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m harness.mutation_layers", description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="racing,protocol")
    ap.add_argument("--only", action="append", help="mutant name glob (default: migration.py and the routing code)")
    ap.add_argument("--sample", type=int, default=0, metavar="N",
                    help="run N mutants drawn at random (seeded) of those not changing only a text; 0: all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-histories", type=int, default=0, metavar="N")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--spark", action="store_true", help="run the Spark job on the kept histories and record it")
    a = ap.parse_args(argv)
    layers = a.layers.split(",")
    if not MUTANTS.is_dir():
        print(f"mutation_layers: no {MUTANTS}: run `.venv/bin/mutmut run` first", file=sys.stderr)
        return 2
    # This checkout's report module (mutants/ holds a copy made when mutmut started), imported
    # before mutants/ goes first on the path; it imports nothing of reference/.
    from harness.mutation_report import _STATUS, function_of, mutant_diffs
    if a.spark:
        return _spark(a.out)
    sys.path.insert(0, str(MUTANTS))
    os.chdir(MUTANTS)

    # Import what the layers use before forking, with no mutant live, so each child starts warm.
    os.environ["MUTANT_UNDER_TEST"] = ""
    import reference.migration
    import reference.races  # noqa: F401
    if not reference.migration.__file__.startswith(str(MUTANTS)):
        print(f"mutation_layers: reference imported from {reference.migration.__file__}, not {MUTANTS}", file=sys.stderr)
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
    if a.sample:
        todo = [t for t in todo if t[2] is not None]   # drawn among those mutmut has decided
        import random
        # A survivor costs every racing profile (about 10 s here) and a full protocol machine (about
        # 10 s): all of migration.py's and the routing code's mutants take hours, a sample minutes.
        todo = sorted(random.Random(a.seed).sample(todo, min(a.sample, len(todo))))
    kept = sum(1 for r in results.values() if r.get("history"))
    t0 = time.monotonic()
    for i, (module, key, code) in enumerate(todo, 1):
        before, after, message = diffs.get(key, ("", "", False))
        if message:
            continue
        r = results.setdefault(key, {})
        r.update({"module": module, "function": function_of(key), "before": before, "after": after,
                  "tests": _STATUS.get(code, "suspicious")})
        for layer in layers:
            if layer in r:
                continue
            keep = None
            if layer == "racing" and kept < a.keep_histories:
                keep = HISTORIES / key.split(".")[-1]
                shutil.rmtree(keep, ignore_errors=True)
                keep.mkdir(parents=True)
            verdict, detail = _in_child(layer, key, keep, LAYER_TIMEOUT_S[layer])
            r[layer] = verdict
            if detail:
                r[f"{layer}_detail"] = detail
            if keep is not None:
                if verdict == VIOLATION:
                    r["history"] = str(next(keep.iterdir()))
                    kept += 1
                else:
                    shutil.rmtree(keep, ignore_errors=True)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(results, indent=1, sort_keys=True))   # after each mutant: a stop loses one
        print(f"[{i}/{len(todo)} {time.monotonic() - t0:.0f}s] {key}: tests {r['tests']}, "
              + ", ".join(f"{layer} {r.get(layer)}" for layer in layers), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
