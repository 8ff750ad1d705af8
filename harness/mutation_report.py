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
        out[module] = {"mutants": len(codes), **counts, "survivors_by_function": dict(survivors.most_common())}
    return out


def reference_markdown(ref: dict[str, dict]) -> str:
    rows = ["| module | mutants | run | killed by the tests | survived | no test reaches it | timeout | not run yet | killed / run |",
            "|---|---|---|---|---|---|---|---|---|"]
    for module, r in ref.items():
        run = r["mutants"] - r.get("not run", 0)
        score = f"{100 * r.get('killed', 0) / run:.0f}%" if run else "-"
        rows.append(f"| `{module}` | {r['mutants']} | {run} | {r.get('killed', 0)} | {r.get('survived', 0)} | "
                    f"{r.get('no tests', 0)} | {r.get('timeout', 0)} | {r.get('not run', 0)} | {score} |")
    text = "\n".join(rows) + "\n"
    for module, r in ref.items():
        if r["survivors_by_function"]:
            text += (f"\nSurvivors in `{module}` by function (not yet classified equivalent or gap; "
                     f"`.venv/bin/mutmut show NAME` prints one): "
                     + ", ".join(f"`{f}` {n}" for f, n in r["survivors_by_function"].items()) + ".\n")
    return text


def spec_markdown(spec: dict) -> str:
    from harness.mutation_spec import Mutant, Run, Verdict, markdown

    verdicts = [Verdict(Mutant(v["id"], v["action"], v["kind"], v["line"], v["original"]), v["status"], v["killed_by"],
                        [Run(**r) for r in v["runs"]]) for v in spec["verdicts"]]
    manifest = {m["name"]: m for m in json.loads((REPO / "spec" / "models.json").read_text())["models"]}
    models = [manifest[n] for n in spec["models"]]
    return markdown(verdicts, models, spec["budget_s"], spec["command"])


def section(ref: dict[str, dict], spec: dict | None) -> str:
    parts = ["## Mutation score (issue 18): a slice\n",
             "`make mutation` runs `mutmut run` over the reference (`[tool.mutmut]` in `pyproject.toml`: which "
             "modules, which fast in-memory tests), `python -m harness.mutation_spec` over the spec's action guards, "
             "then `python -m harness.mutation_report` writes this section. **A first slice, not the whole run**: "
             "one reference module and the migration actions' guards on the fast migration models; the other "
             "modules (replica, query, insert, assignment), the other actions, and the conformance and Spark "
             "layers are still to be run. Machine: 2 cores shared with other jobs (load 7-8).\n"]
    if ref:
        parts += ["### Reference layer (mutmut 3 on the in-memory tests)\n",
                  "Command: `.venv/bin/mutmut run` (tests: `tests/reference/test_migration.py`, "
                  "`tests/reference/test_bugs.py`, in-memory Keeper only); *run* counts the mutants decided so far.\n",
                  reference_markdown(ref)]
    if spec:
        parts += ["### Spec layer (TLC on guard mutants)\n", spec_markdown(spec)]
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
