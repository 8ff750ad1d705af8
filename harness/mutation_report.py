"""The mutation report: what `make mutation` measured, per module and per layer, into BENCHMARKS.md.

    python -m harness.mutation_report [--no-write]

Reads what the two runs left behind and writes the `<!-- bench:mutation -->` section:

- the reference (Python) layer: mutmut 3's results in mutants/<module>.meta (`mutmut run`, set up by
  `[tool.mutmut]` in pyproject.toml): per module, mutants, killed by the tests, survived, no test
  reaching the mutated function, timeouts, and those not run yet (mutmut resumes where it stopped,
  so a run cut short is a slice, said so in the table);
- the spec layer: build/mutation/spec.json from `python -m harness.mutation_spec`: per action, guard
  mutants, killed by TLC (invariant named), survived with a one-line reason.

Why mutmut (not cosmic-ray): mutmut 3 runs each mutant in a process forked from one pytest that has
already imported everything and knows which tests reach each function, so a mutant costs the few
tests that cover it, not a pytest start-up and the whole selection; its results are a JSON file per
module that resumes after an interruption. cosmic-ray starts a test command per mutant (seconds of
start-up each here) and needs a session database and a config file of its own.

Exit status (harness/cli_args.py): 0 written (or printed), 2 nothing to report (neither run has
results), 3 an unexpected failure.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from harness.bench_rebalance import splice
from harness.cli_args import HOLDS, BadInput, Parser, run_main

REPO = Path(__file__).resolve().parents[1]
SPEC_JSON = REPO / "build" / "mutation" / "spec.json"
MUTANTS = REPO / "mutants"
BENCHMARKS = REPO / "BENCHMARKS.md"

# mutmut 3's exit codes (mutmut/stats.py status_by_exit_code)
_STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
           24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", None: "not run"}


def reference_results(root: Path = MUTANTS) -> dict[str, dict]:
    """Per module (reference/migration.py, ...): status counts, and survivors by function."""
    out: dict[str, dict] = {}
    for meta in sorted(root.glob("**/*.py.meta")):
        module = str(meta.relative_to(root))[:-len(".meta")]
        codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
        counts = Counter(_STATUS.get(c, "suspicious") for c in codes.values())
        survivors = Counter()
        for key, code in codes.items():
            if _STATUS.get(code) == "survived":
                fn = key.rsplit("__mutmut_", 1)[0].split(".")[-1]
                survivors[fn[2:] if fn.startswith("x_") else fn] += 1
        diffs = mutant_diffs(module, [k for k, c in codes.items() if _STATUS.get(c) == "survived"], root)
        kinds = Counter(classify(*d) for d in diffs.values())
        out[module] = {"mutants": len(codes), **counts, "survivors_by_function": dict(survivors.most_common()),
                       "survivor_kinds": dict(kinds),
                       "survivor_examples": [f"{k.split('.')[-1]}: `{d[0]}` -> `{d[1]}`" for k, d in diffs.items()
                                             if classify(*d) == "unclassified"][:8]}
    return out


def mutant_diffs(module: str, keys: list[str], root: Path = MUTANTS) -> dict[str, tuple[str, str]]:
    """The one changed line of each mutant (original, mutated), read from mutmut's trampolined copy
    of the module, where every mutant is a function `x_<fn>__mutmut_<n>` beside `x_<fn>__mutmut_orig`."""
    import ast
    import difflib

    path = root / module
    if not path.is_file():
        return {}
    source = path.read_text()
    lines = source.splitlines()   # (ast.get_source_segment re-reads the whole file per call: minutes here)
    funcs = {n.name: "\n".join(lines[n.lineno - 1:n.end_lineno]) for n in ast.parse(source).body
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in n.name}
    out = {}
    for key in keys:
        name = key.split(".")[-1]
        orig = funcs.get(name.rsplit("__mutmut_", 1)[0] + "__mutmut_orig")
        mut = funcs.get(name)
        if not orig or not mut:
            continue
        a, b = orig.splitlines()[1:], mut.splitlines()[1:]   # the def lines differ by name only
        diff = list(difflib.unified_diff(a, b, lineterm="", n=0))[2:]
        minus = [x for x in diff if x.startswith("-")]
        plus = [x for x in diff if x.startswith("+")]
        out[key] = (minus[0][1:].strip() if minus else "", plus[0][1:].strip() if plus else "")
    return out


_MESSAGE = ("GuardFailed(", "raise ", "log.", "logger.", "print(", "warn(")


def classify(before: str, after: str) -> str:
    """A first, mechanical reason for a survivor: `message` when only an error or log text changed
    (equivalent for the protocol; no test reads the wording), else `unclassified` (to be read)."""
    if any(m in before for m in _MESSAGE) and any(m in after for m in _MESSAGE):
        return "message"
    return "unclassified"


def reference_markdown(ref: dict[str, dict]) -> str:
    rows = ["| module | mutants | run | killed by the tests | survived | no test reaches it | timeout | not run yet | killed / run | killed / (killed + survived) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for module, r in ref.items():
        run = r["mutants"] - r.get("not run", 0)
        score = f"{100 * r.get('killed', 0) / run:.0f}%" if run else "-"
        tried = r.get("killed", 0) + r.get("survived", 0)
        reached = f"{100 * r.get('killed', 0) / tried:.0f}%" if tried else "-"
        rows.append(f"| `{module}` | {r['mutants']} | {run} | {r.get('killed', 0)} | {r.get('survived', 0)} | "
                    f"{r.get('no tests', 0)} | {r.get('timeout', 0)} | {r.get('not run', 0)} | {score} | {reached} |")
    text = "\n".join(rows) + "\n"
    for module, r in ref.items():
        if r["survivors_by_function"]:
            text += (f"\nSurvivors in `{module}` by function (not yet classified equivalent or gap; "
                     f"`.venv/bin/mutmut show NAME` prints one): "
                     + ", ".join(f"`{f}` {n}" for f, n in r["survivors_by_function"].items()) + ".\n")
            k = r.get("survivor_kinds", {})
            if k:
                text += (f"\nOf those, {k.get('message', 0)} change only an error or log text (`GuardFailed(...)`, "
                         f"`raise ...`: equivalent for the protocol, no test reads the wording) and "
                         f"{k.get('unclassified', 0)} change behaviour and are still to be read, one by one, as "
                         f"equivalent or a gap. Some of them:\n\n"
                         + "".join(f"- {e}\n" for e in r.get("survivor_examples", [])))
    return text


def spec_markdown(spec: dict) -> str:
    from harness.mutation_spec import markdown, verdict_from_json

    verdicts = [verdict_from_json(v) for v in spec["verdicts"]]
    manifest = {m["name"]: m for m in json.loads((REPO / "spec" / "models.json").read_text())["models"]}
    models = [manifest[n] for n in spec["models"]]
    liveness = [manifest[n] for n in spec.get("liveness", [])]
    return markdown(verdicts, models, spec["budget_s"], spec["command"], liveness,
                    [(b["action"], b["conjunct"]) for b in spec.get("bounds", [])])


# What the spec table's columns mean; each survivor's reason is in the table, from
# spec/mutation_survivors.json (keyed by action, kind and conjunct text).
SPEC_READING = """
How to read it: *killed: witness* is a mutant under which TLC exhausted a model without reaching a
state the unmutated spec reaches there (`MCSelectiveReplication.tla`, "Witnesses"): safety held only
because the mutated action never fires. *killed: liveness* is a mutant that let every witness
happen but can stall a migration for ever (MCLiveness). *survived: equivalent* says why the
mutant cannot change what the protocol guarantees; *survived: gap* names what is missing.
A *timeout* has no verdict. The score counts killed over killed + gap + unclassified.
"""


def section(ref: dict[str, dict], spec: dict | None) -> str:
    parts = ["## Mutation score (issue 18): a slice\n",
             "`make mutation` runs `mutmut run` over the reference (`[tool.mutmut]` in `pyproject.toml`: which "
             "modules, which fast in-memory tests), `python -m harness.mutation_spec` over the spec's action guards, "
             "then `python -m harness.mutation_report` writes this section. **A first slice, not the whole run**: "
             "one reference module and the migration actions' guards on the fast migration models; the other "
             "modules (replica, query, insert, assignment), the other actions, and the conformance and Spark "
             "layers are still to be run, and the spec survivors still to be run on MCMigration, MCParallelMigration "
             "and MCLiveness. Machine: 2 cores shared with other jobs (load 7-8).\n"]
    if ref:
        parts += ["### Reference layer (mutmut 3 on the in-memory tests)\n",
                  "Command: `.venv/bin/mutmut run` (tests: `tests/reference/test_migration.py`, "
                  "`tests/reference/test_bugs.py`, in-memory Keeper only); *run* counts the mutants decided so far.\n",
                  reference_markdown(ref)]
    if spec:
        parts += ["### Spec layer (TLC on guard mutants)\n", spec_markdown(spec), SPEC_READING]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m harness.mutation_report", description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    a = ap.parse_args(argv)
    return run_main(ap.prog, lambda: _main(a))


def _main(a) -> int:
    ref = reference_results()
    spec = json.loads(SPEC_JSON.read_text()) if SPEC_JSON.is_file() else None
    if not ref and spec is None:
        raise BadInput(f"no results: neither {MUTANTS}/**/*.meta (mutmut run) nor {SPEC_JSON} (harness.mutation_spec)")
    body = section(ref, spec)
    if a.no_write:
        print(body)
    else:
        BENCHMARKS.write_text(splice(BENCHMARKS.read_text(), "mutation", body))
        print(f"mutation: section written to {BENCHMARKS}")
    return HOLDS


if __name__ == "__main__":
    sys.exit(main())
