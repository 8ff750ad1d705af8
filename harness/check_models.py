"""Run the TLC models listed in spec/models.json and compare each with its expected outcome.

A model fails the check when its outcome differs from the manifest (holds vs. violates the named
invariant), when it runs past three times its time budget (an overrun below that is reported,
not failed: timing is the machine's), or when a holding model's distinct-state count
differs from the recorded one (the spec changed: re-record on purpose with ``--record``).
Violating models keep their counterexample length and time as figures, not as checks: with
2 workers TLC's trace for a violation may differ between runs. A simulation (`"simulate"`:
depth, seconds, optionally seed) passes when it stops at its time bound with no violation; a
seed makes it draw the same behaviours on every run. `--workers 1` for a shared machine.

Exit status (harness/cli_args.py): 0 every model as expected, 1 some model not, 2 bad input (an
unknown --only, a malformed manifest), 3 no verdict (Java or TLC missing), 130 Ctrl-C.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.cli_args import BadInput, Parser, int_at_least, output_file, run_main, text
from harness.tlc.cfg_check import CfgMismatch, check_cfg
from harness.tlc.runner import (HOLDS, INVARIANT_VIOLATED, PROPERTY_VIOLATED, STOPPED, TLCResult, TLCSetupError,
                                print_progress, run_tlc, stop_all)

SPEC_DIR = Path(__file__).resolve().parents[1] / "spec"
MANIFEST = SPEC_DIR / "models.json"
REQUIRED = ("name", "spec", "config", "size", "expect", "budget_s")


class ManifestError(ValueError):
    """spec/models.json is malformed."""


def _finding_order(finding: str) -> tuple[bool, int]:
    return finding.startswith("PR-"), int(finding.rsplit("F", 1)[1])


def spec_file(name: str, root: Path = SPEC_DIR) -> Path:
    """A module or cfg of spec/ by its file name. Each family of models has a folder (spec/assignment,
    spec/rfc, spec/pr102244, each module with its MC wrappers and cfgs) and the manifest names files
    alone: a name is unique across the families (tests/spec/test_models.py). A name found nowhere
    comes back as root/name, so that reading it fails naming the file."""
    if (root / name).is_file():
        return root / name
    found = sorted(root.glob(f"*/{name}"))
    return found[0] if found else root / name


def load_manifest(path: Path = MANIFEST) -> list[dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ManifestError(f"cannot read {path}: {e}") from e
    models = data.get("models")
    if not isinstance(models, list):
        raise ManifestError(f"{path}: top-level 'models' list missing")
    names = set()
    for i, m in enumerate(models):
        missing = [k for k in REQUIRED if k not in m]
        if missing:
            raise ManifestError(f"{path}: model #{i} ({m.get('name', '?')}) lacks {', '.join(missing)}")
        if m["expect"] not in ("holds", "violates"):
            raise ManifestError(f"{path}: model {m['name']}: expect must be 'holds' or 'violates', not {m['expect']!r}")
        if m["expect"] == "violates" and bool(m.get("invariant")) == bool(m.get("property")):
            raise ManifestError(f"{path}: model {m['name']} expects a violation: name one invariant or one property")
        if m["size"] not in ("small", "large"):
            raise ManifestError(f"{path}: model {m['name']}: size must be 'small' or 'large'")
        if m["name"] in names:
            raise ManifestError(f"{path}: model name {m['name']} appears twice")
        if "finding" in m and (m["expect"] != "violates" or not re.fullmatch(r"(PR-)?F\d+", str(m["finding"]))):
            raise ManifestError(f"{path}: model {m['name']}: 'finding' names a finding of spec/FINDINGS.md "
                                f"(F3, PR-F1) that the model shows by failing, not {m['finding']!r}")
        retires = m.get("retires", [])
        if retires and (m["expect"] != "holds" or not all(re.fullmatch(r"(PR-)?F\d+", str(f)) for f in retires)):
            raise ManifestError(f"{path}: model {m['name']}: 'retires' lists findings of spec/FINDINGS.md that this "
                                f"holding model shows do not hold against the code, not {retires!r}")
        names.add(m["name"])
        for key in ("spec", "config"):
            if not spec_file(m[key], path.parent).is_file():
                raise ManifestError(f"{path}: model {m['name']}: {m[key]} does not exist")
    return models


@dataclass
class Verdict:
    model: dict
    result: TLCResult
    problems: list[str]

    @property
    def passed(self) -> bool:
        return not self.problems


def judge(model: dict, res: TLCResult) -> list[str]:
    """What is wrong with this run, measured against the manifest entry (empty: as expected)."""
    problems = []
    if model["expect"] == "holds" and model.get("simulate"):
        # A bounded random simulation can only fail to find a violation; it never proves one absent.
        if res.outcome != STOPPED:
            problems.append(f"expected no violation within the simulation bound, got {res.outcome} {res.violated or ''}".strip())
    elif model["expect"] == "holds":
        if res.outcome != HOLDS:
            what = f"{res.outcome} {res.violated or ''}".strip()
            problems.append(f"expected to hold, got {what}" + (f": {res.errors[0][:300]}" if res.errors else ""))
        elif model.get("distinct_states") is not None and res.distinct_states != model["distinct_states"]:
            problems.append(f"distinct states drifted: recorded {model['distinct_states']}, now {res.distinct_states}"
                            " (re-record with --record if the spec changed on purpose)")
    elif model.get("property"):
        # TLC 2.15 does not name the temporal property that failed: such a cfg checks just one.
        if res.outcome != PROPERTY_VIOLATED:
            problems.append(f"expected to violate {model['property']}, got {res.outcome} {res.violated or ''}".strip())
    elif res.outcome != INVARIANT_VIOLATED or res.violated != model["invariant"]:
        got = f"{res.outcome} {res.violated or ''}".strip()
        problems.append(f"expected to violate {model['invariant']}, got {got}")
    return problems


def over_budget(model: dict, res: TLCResult) -> str | None:
    """A note, not a failure: time depends on the machine and its load (a run is only stopped,
    and fails, at three times its budget)."""
    if res.duration_s > model["budget_s"]:
        return f"took {res.duration_s:.1f}s, over its {model['budget_s']}s budget (reported, not failed)"
    return None


# A model whose last recorded run took at most this long runs under the JIT's first tier alone
# (runner.SHORT_RUN_JVM, which says why): 120 of the 132 small models when this was set.
SHORT_S = 10


def short_run(m: dict) -> bool:
    """Whether the model is known to take seconds (a model not yet recorded is not)."""
    return m.get("recorded_seconds") is not None and m["recorded_seconds"] <= SHORT_S


def run_model(m: dict, progress=None, workers: int = 2) -> TLCResult:
    """Run one manifest entry: exhaustively, or as a bounded -simulate run when it says so."""
    extra, jvm = [], []
    sim = m.get("simulate")
    if sim:
        extra = ["-simulate", "-depth", str(sim["depth"])]
        if "seed" in sim:  # a fixed seed: the same behaviours, so the same verdict and figures, on every run
            extra += ["-seed", str(sim["seed"])]
        jvm = [f"-Dtlc2.TLC.stopAfter={sim['seconds']}"]  # -simulate never stops on its own
    return run_tlc(spec_file(m["spec"]), spec_file(m["config"]), workers=workers, check_deadlock=m.get("check_deadlock", True),
                   timeout_s=m["budget_s"] * 3, extra_args=extra, jvm_args=jvm, progress=progress,
                   short=short_run(m))


def check(models: list[dict], verbose: bool = True, workers: int = 2, jobs: int = 1) -> list[Verdict]:
    """Run the models, `jobs` TLC processes at a time (each with `workers` workers), and return
    their verdicts in the manifest's order. With several jobs the longest on record start first,
    so that no long model is left to run alone at the end, and progress lines are left out (they
    would interleave); each model's verdict is printed as it ends."""
    order = sorted(models, key=lambda m: -(m.get("recorded_seconds") or 0)) if jobs > 1 else models
    lock = threading.Lock()
    done = [0]

    def header(i: int, m: dict) -> None:
        target = m.get("invariant") or m.get("property") or ""
        print(f"[{i}/{len(models)}] {m['name']}: expect {m['expect']} {target}".rstrip(), flush=True)

    def one(m: dict) -> Verdict:
        alone = verbose and jobs == 1   # one run at a time: its header first, then its progress
        if alone:
            header(done[0] + 1, m)
        res = run_model(m, progress=print_progress if alone else None, workers=workers)
        v = Verdict(m, res, judge(m, res))
        with lock:
            done[0] += 1
            if verbose:
                if not alone:
                    header(done[0], m)
                print(f"    {'ok  ' if v.passed else 'FAIL'} {res.summary()}", flush=True)
                for p in v.problems:
                    print(f"    - {p}", flush=True)
                slow = over_budget(m, res)
                if slow:
                    print(f"    - note: {slow}", flush=True)
        return v

    pool = ThreadPoolExecutor(max_workers=jobs)   # TLC runs in its own JVM: the threads only wait
    try:
        verdicts = {v.model["name"]: v for v in pool.map(one, order)}
    except BaseException:
        # Ctrl-C reaches this thread only (each TLC has a session of its own): end the runs in
        # flight and start no other, or the pool would finish the whole list first.
        pool.shutdown(wait=False, cancel_futures=True)
        stop_all()
        raise
    pool.shutdown()
    return [verdicts[m["name"]] for m in models]


def record(verdicts: list[Verdict], path: Path = MANIFEST) -> None:
    """Write measured figures back into the manifest (only for runs that met their expectation)."""
    data = json.loads(path.read_text())
    by_name = {m["name"]: m for m in data["models"]}
    for v in verdicts:
        if v.problems and not all("drifted" in p for p in v.problems):
            continue
        m, r = by_name[v.model["name"]], v.result
        if m.get("simulate"):
            m["states_generated"] = r.states_generated
        elif m["expect"] == "holds":
            m["distinct_states"], m["depth"] = r.distinct_states, r.depth
        else:
            m["trace_length"] = len(r.trace)
        m["recorded_seconds"] = round(r.duration_s, 1)
    path.write_text(json.dumps(data, indent=2) + "\n")


def table(verdicts: list[Verdict]) -> str:
    rows = [("model", "expect", "outcome", "distinct", "depth", "trace", "time", "verdict")]
    for v in verdicts:
        r = v.result
        target = v.model.get("invariant") or v.model.get("property")
        rows.append((v.model["name"], v.model["expect"] + (" " + target if target else ""),
                     r.outcome + (" " + r.violated if r.violated else ""),
                     str(r.distinct_states or (f"{r.states_generated} gen" if r.states_generated else "-")),
                     str(r.depth or "-"), str(len(r.trace) or "-"), f"{r.duration_s:.1f}s",
                     "ok" if v.passed else "FAIL"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m harness.check_models", description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=["small", "all"], default="small", help="small models only, or all")
    # Names the manifest knows, checked against it before the first JVM starts (run)
    ap.add_argument("--only", action="append", type=text("a model name", r"MC\w+"),
                    help="run just this model (repeatable)")
    ap.add_argument("--finding", action="append", metavar="ID", type=text("a finding id", r"(PR-)?F\d+[a-z]?"),
                    help="reproduce a finding of spec/FINDINGS.md (F3, PR-F1; repeatable): run the models that "
                         "show it and print each counterexample, step by step, with what each step changed")
    # One worker on a shared machine: a simulation's figures then depend less on the others' load.
    ap.add_argument("--workers", type=int_at_least(1), default=2, help="TLC workers (default 2)")
    # Many small models: two one-worker runs side by side keep both cores busy through each JVM's
    # start and each model's short tail, which one two-worker run does not (BENCHMARKS.md).
    ap.add_argument("--jobs", type=int_at_least(1), default=1, help="models checked at a time (default 1)")
    ap.add_argument("--record", action="store_true", help="write measured state counts back to the manifest")
    ap.add_argument("--report", type=output_file, help="write a JSON report here")
    a = ap.parse_args(argv)
    return run_main(ap.prog, lambda: run(a), bad_input=(ManifestError,), environment=(TLCSetupError,))


def run(a) -> int:
    models = load_manifest()
    if a.finding:
        known = {m.get("finding") for m in models}
        unknown = [f for f in a.finding if f not in known]
        if unknown:
            raise BadInput(f"--finding {', '.join(unknown)}: no model of {MANIFEST} shows it (the findings with a "
                           f"failing model: {', '.join(sorted((k for k in known if k), key=_finding_order))}; the others say in "
                           "spec/FINDINGS.md which layer shows them)")
        models = [m for m in models if m.get("finding") in a.finding]
    elif a.only:
        unknown = set(a.only) - {m["name"] for m in models}
        if unknown:
            raise BadInput(f"--only {', '.join(sorted(unknown))}: no such model in {MANIFEST}")
        models = [m for m in models if m["name"] in a.only]
    elif a.size == "small":
        models = [m for m in models if m["size"] == "small"]
    for m in models:   # every cfg held to its module before the first JVM starts (issue 41)
        try:
            check_cfg(spec_file(m["spec"]), spec_file(m["config"]))
        except CfgMismatch as e:
            raise BadInput(f"model {m['name']}: {e}") from None
    start = time.monotonic()
    verdicts = check(models, workers=a.workers, jobs=a.jobs)
    print()
    print(table(verdicts))
    failed = [v for v in verdicts if not v.passed]
    if a.finding:
        for v in verdicts:
            print(f"\n{v.model['finding']}: {v.model['name']} ({spec_file(v.model['config']).relative_to(SPEC_DIR.parent)}),"
                  f" {v.result.summary()}")
            print("\n".join(v.result.trace_lines(diff=True)))
    print(f"\n{len(verdicts) - len(failed)}/{len(verdicts)} models as expected in {time.monotonic() - start:.0f}s")
    if a.record:
        record(verdicts)
        print(f"recorded figures in {MANIFEST}")
    if a.report:
        Path(a.report).parent.mkdir(parents=True, exist_ok=True)
        Path(a.report).write_text(json.dumps({
            "summary": f"{len(verdicts) - len(failed)}/{len(verdicts)} models as expected, "
                       f"{sum(v.result.distinct_states or 0 for v in verdicts if v.model['expect'] == 'holds'):,}"
                       " distinct states in holding models",
            "models": len(verdicts), "failed": [v.model["name"] for v in failed],
            "distinct_states_total": sum(v.result.distinct_states or 0 for v in verdicts),
            "seconds": round(time.monotonic() - start, 1),
            "runs": [{"name": v.model["name"], "problems": v.problems, **v.result.to_json()} for v in verdicts],
        }, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
