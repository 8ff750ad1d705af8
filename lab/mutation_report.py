"""The mutation report: what `make mutation` measured, per module and per layer, into BENCHMARKS.md.

    python -m lab.mutation_report [--no-write]

Reads what the two runs left behind and writes the `<!-- bench:mutation -->` section:

- the reference (Python) layer: mutmut 3's results in mutants/<module>.meta (`mutmut run`, set up by
  `[tool.mutmut]` in pyproject.toml): per module, mutants, killed by the tests, survived, no test
  reaching the mutated function, timeouts, and those not run yet (mutmut resumes where it stopped,
  so a run cut short is a slice, said so in the table);
- the spec layer: build/mutation/spec.json from `python -m lab.mutation_spec`: per action, guard
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

from harness.cli_args import HOLDS, BadInput, Parser, run_main
from lab.bench_rebalance import splice
from lab.mutants import (LOGICAL_ERRORS, STATUS, function_of, message_only, mutant_diffs,  # noqa: F401
                         only_logical_errors, reading_key)

REPO = Path(__file__).resolve().parents[1]
SPEC_JSON = REPO / "build" / "mutation" / "spec.json"
MUTANTS = REPO / "mutants"
BENCHMARKS = REPO / "BENCHMARKS.md"


READING = REPO / "lab" / "mutation_reading.toml"
LAYERS_JSON = REPO / "build" / "mutation" / "layers.json"


def load_reading(path: Path = READING) -> dict[tuple[str, str, str, str], dict]:
    import tomllib

    if not path.is_file():
        return {}
    out = {}
    for m in tomllib.loads(path.read_text()).get("mutant", []):
        if m.get("verdict") not in ("equivalent", "gap"):
            raise BadInput(f"{path}: verdict must be equivalent or gap, not {m.get('verdict')!r} ({m})")
        out[reading_key(m["module"], m["function"], m["before"], m["after"])] = m
    return out


# What fails a `make test` test in each layer lab/mutation_layers.py runs: test_races.py's
# racing runs (a violation, a run that raises or runs no query, a hang) and conformance's protocol
# machine (tests/conformance/test_conformance.py); mutmut's selection leaves both out for time.
MAKE_TEST_KILLS = {"racing": ("violation", "crash", "no queries", "timeout"), "protocol": ("killed", "timeout")}


def load_layers(path: Path = LAYERS_JSON, root: Path = MUTANTS,
                stored: list[dict] = ()) -> dict[tuple[str, str, str, str], dict]:
    """build/mutation/layers.json by the stable key (module, function, line before and after), each
    with mutmut's verdict as it stands now in mutants/ (a mutant run again after a new test was
    killed by it after the layers ran); a mutant it does not have, as kept in the repository
    (`stored`, lab/mutation_store.py)."""
    out = {reading_key(r["module"], r["function"], r["before"], r["after"]): dict(r) for r in stored}
    if not path.is_file():
        return out
    codes = {}
    for meta in root.glob("**/*.py.meta"):
        codes.update(json.loads(meta.read_text()).get("exit_code_by_key", {}))
    for key, r in json.loads(path.read_text()).items():
        if codes.get(key) is not None:
            r = {**r, "tests": STATUS.get(codes[key], "suspicious")}
        out[reading_key(r["module"], r["function"], r["before"], r["after"])] = {**r, "name": key}
    return out


def tooth_kill(r: dict) -> bool:
    """A kill by the teeth layer (lab/mutation_layers.py): on a broken variant's tooth, the
    switch on, the oracle refused the mutant's history by other invariants than the unmutated
    code's, and the Spark job, once it has judged both histories (`teeth_spark`), told them apart too."""
    return r.get("teeth") == "violation" and r.get("teeth_spark", "killed") == "killed"


def layers_of(r: dict) -> set[str]:
    """The layers that kill one mutant of layers.json: `tests` (mutmut's selection, or a racing run
    of test_races.py that raises, runs no query or hangs), `history` (a racing history the checker
    refuses: the Spark job's invariants; or a broken variant's tooth whose history the mutant
    changes, tooth_kill), `conformance` (the protocol machine). A racing run that
    raises goes on to a history since issue 18 (`racing_tests` says what test_races.py saw), so
    one mutant may be killed by the tests and by a history; before, `racing` was `crash` alone."""
    out = set()
    if (r.get("tests") in ("killed", "timeout") or r.get("racing") in ("crash", "no queries", "timeout")
            or r.get("racing_tests") in ("raised", "crash", "no queries")):
        out.add("tests")
    if r.get("racing") == "violation" or tooth_kill(r):
        out.add("history")
    if r.get("protocol") in ("killed", "timeout"):
        out.add("conformance")
    return out


def history_only_logical_error(r: dict, layers: set[str]) -> bool:
    """A history kill through NoLogicalErrorsInv alone (lab/mutation_layers.py's
    `racing_invariants`): the mutant made something raise, which the history logged, and no
    protocol invariant refused the history. Told apart because such a kill says the code broke,
    not that the history shows a lost row or a wrong owner. Results written before the check
    existed have no `racing_invariants`: their kills were protocol invariants'. A kill through a
    tooth alone counts here when NoLogicalErrorsInv is all the mutant's history is refused by and
    the unmutated tooth's is not (the mutant raised where the variant ran; what the variant broke
    may then not show, as the step never completed)."""
    if history_only_through_tooth(r, layers):
        return only_logical_errors(set(r.get("teeth_invariants", ())) - set(r.get("teeth_unmutated_invariants", ())))
    return "history" in layers and only_logical_errors(r.get("racing_invariants", ()))


def history_only_through_tooth(r: dict, layers: set[str]) -> bool:
    """A history kill by a broken variant's tooth and by no racing run of the fixed protocol: the
    mutant changes only what a switch-on run shows (code only a variant runs)."""
    return "history" in layers and r.get("racing") != "violation"


def reference_verdicts(root: Path = MUTANTS, stored: list[dict] = ()) -> dict[str, list[dict]]:
    """Per module, each mutant with the tests' verdict (`tests`) and its mutated line: mutmut's in
    mutants/<module>.meta where it decided the mutant (`from`: `run`), else the one kept in the
    repository for the same stable key (`stored`, lab/mutation_store.py; `from`: `kept`), else
    `not run`. A module no .meta names comes whole from what is kept."""
    kept: dict[tuple, list[dict]] = {}
    for r in stored:
        kept.setdefault(reading_key(r["module"], r["function"], r["before"], r["after"]), []).append(r)
    out: dict[str, list[dict]] = {}
    for meta in sorted(root.glob("**/*.py.meta")):
        module = str(meta.relative_to(root))[:-len(".meta")]
        codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
        diffs = mutant_diffs(module, list(codes), root)
        rows = out[module] = []
        for key, code in codes.items():
            before, after, message = diffs.get(key, ("", "", False))
            row = {"key": key, "module": module, "function": function_of(key), "before": before, "after": after,
                   "message": message, "tests": STATUS.get(code, "suspicious"), "from": "run"}
            same = kept.get(reading_key(module, row["function"], before, after))
            if same:   # popped either way: two mutants of one line text take one kept verdict each
                earlier = same.pop(0)
                if row["tests"] == "not run":
                    row.update(tests=earlier["tests"], **{"from": "kept"})
            rows.append(row)
    run = set(out)
    for r in stored:
        if r["module"] not in run:
            out.setdefault(r["module"], []).append({**r, "key": None, "from": "kept"})
    return out


def reference_results(root: Path = MUTANTS, reading: dict | None = None, layers: dict | None = None,
                      verdicts: dict[str, list[dict]] | None = None) -> dict[str, dict]:
    """Per module (protocol/migration.py, ...): status counts, and every mutant not killed with its
    diff and its class: `message` (the rule: only an exception's text changed), `equivalent` or `gap`
    (read by hand, lab/mutation_reading.toml), or `unread`. A mutant mutmut's tests leave alive
    that a layer of layers.json kills with a `make test` test counts as `killed by layers`.
    `verdicts`: reference_verdicts' (default: mutants/ alone)."""
    reading = load_reading() if reading is None else reading
    layers = load_layers() if layers is None else layers
    verdicts = reference_verdicts(root) if verdicts is None else verdicts
    out: dict[str, dict] = {}
    for module, rows in verdicts.items():
        counts = Counter(r["tests"] for r in rows)
        classes = Counter()
        mutants = []
        for m in rows:
            if m["tests"] not in ("survived", "no tests"):
                continue
            stable = reading_key(module, m["function"], m["before"], m["after"])
            lay = layers.get(stable, {})
            if any(lay.get(layer) in kills for layer, kills in MAKE_TEST_KILLS.items()):
                counts[m["tests"]] -= 1
                counts["killed by layers"] += 1
                continue
            r = reading.get(stable)
            cls = "message" if m["message"] else (r["verdict"] if r else "unread")
            classes[(m["tests"], cls)] += 1
            mutants.append({"key": m["key"], "function": m["function"], "status": m["tests"],
                            "before": m["before"], "after": m["after"], "class": cls, "reason": r["reason"] if r else ""})
        out[module] = {"mutants": len(rows), **counts, "classes": {f"{s}/{c}": n for (s, c), n in classes.items()},
                       "not_killed": mutants, "kept": sum(m["from"] != "run" and m["tests"] != "not run" for m in rows)}
    return out


def reference_markdown(ref: dict[str, dict]) -> str:
    rows = ["| module | mutants | run | killed by mutmut's tests | killed by test_races / protocol machine "
            "| not killed: equivalent by rule (error text) | not killed: equivalent (read) "
            "| not killed: gap | not killed: not read | (of the not killed, no test reaches it) | timeout | not run yet "
            "| killed / non-equivalent run |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    total = Counter()
    for module, r in ref.items():
        c = Counter(m["class"] for m in r["not_killed"])   # survivors and mutants no test reaches alike
        run = r["mutants"] - r.get("not run", 0)
        equivalent = c["message"] + c["equivalent"]
        row = {"mutants": r["mutants"], "run": run, "killed": r.get("killed", 0),
               "layers": r.get("killed by layers", 0), "message": c["message"],
               "equivalent": c["equivalent"], "gap": c["gap"], "unread": c["unread"], "no tests": r.get("no tests", 0),
               "timeout": r.get("timeout", 0), "not run": r.get("not run", 0), "nonequiv": run - equivalent}
        total.update(row)
        rows.append(_row(f"`{module}`", row))
    if len(ref) > 1:
        rows.append(_row("**all**", total))
    text = "\n".join(rows) + "\n"
    text += ("\n*killed / non-equivalent run*: mutants killed over mutants run less those classed equivalent (by the "
             "error-text rule or by reading, `lab/mutation_reading.toml`); a timeout counts as killed by mutmut's "
             "rule (the tests stopped), it is listed apart. A mutant no selected test reaches counts as not killed "
             "unless read as equivalent.\n")
    for module, r in ref.items():
        gaps = [m for m in r["not_killed"] if m["class"] == "gap"]
        unread = [m for m in r["not_killed"] if m["class"] == "unread"]
        if gaps:
            text += f"\nGaps left in `{module}` (read, no test kills them yet):\n\n" + "".join(
                f"- `{m['function']}`: `{m['before']}` -> `{m['after']}`: {m['reason']}\n" for m in gaps)
        if unread:
            by_fn = Counter(m["function"] for m in unread)
            text += (f"\nNot read yet in `{module}`, by function: "
                     + ", ".join(f"`{f}` {n}" for f, n in by_fn.most_common()) + ".\n")
    return text


def layers_markdown(layers: dict[tuple, dict], reading: dict | None = None) -> str:
    """Per module of layers.json (migration and routing): which layers kill its mutants, and how many
    are killed by two layers one of which is the history check (issue 18's bar); a mutant read as
    equivalent is counted apart, no layer can kill it."""
    reading = load_reading() if reading is None else reading
    rows = ["| module | mutants run on the layers | of which equivalent (read) | killed by the tests | killed by a "
            "history (racing runs or a broken variant's tooth, the Spark job's invariants) | of those, only through NoLogicalErrorsInv | of those, "
            "only through a broken variant's tooth | of those, "
            "run by the Spark job: refused | protocol machine run | killed by it | two layers, one a history | of those, "
            "the history only through NoLogicalErrorsInv | of those, the history only through a broken variant's tooth "
            "| short of two layers, one a history (not equivalent) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    short: dict[str, Counter] = {}
    by_module: dict[str, list[dict]] = {}
    for k, r in layers.items():
        by_module.setdefault(r["module"], []).append({**r, "equivalent": reading.get(k, {}).get("verdict") == "equivalent"})
    for module, rs in sorted(by_module.items()):
        ls = [layers_of(r) for r in rs]
        two = [len(x) >= 2 and "history" in x for x in ls]
        # issue 18's bar: two layers, one of them a history (two others, as tests and the protocol
        # machine, fall short of it)
        short[module] = Counter(r["function"] for r, t in zip(rs, two) if not t and not r["equivalent"])
        tooth = [history_only_through_tooth(r, x) for r, x in zip(rs, ls)]
        # the Spark job's verdict on the history that killed: the racing run's, or the tooth's
        spark = [r["teeth_spark"] if t else r["spark"] for r, t in zip(rs, tooth) if ("teeth_spark" if t else "spark") in r]
        logical = [history_only_logical_error(r, x) for r, x in zip(rs, ls)]
        rows.append(f"| `{module}` | {len(rs)} | {sum(r['equivalent'] for r in rs)} | {sum('tests' in x for x in ls)} "
                    f"| {sum('history' in x for x in ls)} | {sum(logical)} | {sum(tooth)} "
                    f"| {spark.count('killed')} of {len(spark)} "
                    f"| {sum('protocol' in r for r in rs)} | {sum('conformance' in x for x in ls)} | {sum(two)} "
                    f"| {sum(t and g for t, g in zip(two, logical))} | {sum(t and g for t, g in zip(two, tooth))} "
                    f"| {sum(short[module].values())} |")
    text = "\n".join(rows) + "\n"
    for module, c in short.items():
        if c:
            text += (f"\nShort of two layers, one a history, in `{module}`, by function: "
                     + ", ".join(f"`{f}` {n}" for f, n in c.most_common()) + ".\n")
    return text


def _row(name: str, r) -> str:
    killed = r["killed"] + r["layers"] + r["timeout"]
    # Rounded down: 1296 of 1302 must not read 100% while six mutants survive.
    score = f"{100 * killed // r['nonequiv']}%" if r["nonequiv"] else "-"
    return (f"| {name} | {r['mutants']} | {r['run']} | {r['killed']} | {r['layers']} | {r['message']} | {r['equivalent']} "
            f"| {r['gap']} "
            f"| {r['unread']} | {r['no tests']} | {r['timeout']} | {r['not run']} | {score} |")


def spec_markdown(spec: dict) -> str:
    from lab.mutation_spec import markdown, verdict_from_json

    verdicts = [verdict_from_json(v) for v in spec["verdicts"]]
    manifest = {m["name"]: m for m in json.loads((REPO / "spec" / "models.json").read_text())["models"]}
    models = [manifest[n] for n in spec["models"]]
    liveness = [manifest[n] for n in spec.get("liveness", [])]
    return markdown(verdicts, models, spec["budget_s"], spec["command"], liveness,
                    [(b["action"], b["conjunct"]) for b in spec.get("bounds", [])])


# What the spec table's columns mean; each survivor's reason is in the table, from
# spec/rfc/mutation_survivors.json (keyed by action, kind and conjunct text).
SPEC_READING = """
How to read it: *killed: witness* is a mutant under which TLC exhausted a model without reaching a
state the unmutated spec reaches there (`MCSelectiveReplication.tla`, "Witnesses"): safety held only
because the mutated action never fires. *killed: liveness* is a mutant that let every witness
happen but can stall a migration for ever (MCLiveness). *survived: equivalent* says why the
mutant cannot change what the protocol guarantees; *survived: gap* names what is missing.
A *timeout* has no verdict. The score counts killed over killed + gap + unclassified.
"""


def not_run_sentence(ref: dict[str, dict]) -> str:
    """Which of `[tool.mutmut]`'s modules mutmut has not run, or run only in part, read from the
    results (a sentence written by hand went stale as soon as the next module ran)."""
    unrun, part = [], []
    for module, r in sorted(ref.items()):
        left = r.get("not run", 0)
        name = f"`{module.rsplit('/', 1)[-1]}`"
        if left and left == r["mutants"]:
            unrun.append(name)
        elif left:
            part.append(f"{name} ({r['mutants'] - left} of {r['mutants']})")
    said = []
    if unrun:
        said.append(" and ".join(unrun) + (" are" if len(unrun) > 1 else " is") + " listed in `[tool.mutmut]` but not run")
    if part:
        said.append("run in part: " + ", ".join(part))
    return "; ".join(said) + "; " if said else ""


def layers_sentence(layers: dict, total: int) -> str:
    """How much of the migration and routing code the layers ran, from their results."""
    if layers and len(layers) < total:
        return f"the layers ran {len(layers)} of the {total} migration and routing mutants; "
    return ""


def run_sentence(ref: dict[str, dict], spec: dict | None, layers: dict | None, total: int) -> str:
    """Whether the results cover the whole run, and if not what is missing."""
    missing = not_run_sentence(ref) + layers_sentence(layers or {}, total)
    covered = spec_sentence(spec)
    if missing or not covered.startswith("the spec's guard mutants cover all"):
        return "**Not the whole run yet**: " + missing + covered
    return ("**The whole run**: every mutant of `[tool.mutmut]`'s modules, every migration and routing mutant on "
            "the layers, and " + covered)


def spec_sentence(spec: dict | None) -> str:
    """Which of the spec's actions with guard mutants the results cover, read from them and the
    spec (a sentence written by hand said "not the others" after every action had run)."""
    from lab.mutation_spec import SPEC_DIR, SPEC_FILE, generate
    actions = {m.action for m in generate((SPEC_DIR / SPEC_FILE).read_text().splitlines())}
    missing = sorted(actions - {v["action"] for v in (spec or {}).get("verdicts", [])})
    if not missing:
        return f"the spec's guard mutants cover all {len(actions)} actions that have a guard."
    return f"the spec's guard mutants of {len(missing)} of its {len(actions)} actions are not run: {', '.join(missing)}."


def section(ref: dict[str, dict], spec: dict | None, layers: dict | None = None, layer_total: int = 0) -> str:
    parts = ["## Mutation score (issue 18)\n",
             "`make mutation` runs `mutmut run` over the reference (`[tool.mutmut]` in `pyproject.toml`: which "
             "modules, which fast in-memory tests), `python -m lab.mutation_layers` over the "
             "migration and routing mutants (racing histories and the protocol machine; `--spark` runs the Spark "
             "job on the histories it kept), `python -m lab.mutation_spec` over the spec's action guards, then "
             "`python -m lab.mutation_report` writes this section. " + run_sentence(ref, spec, layers, layer_total)
             + " Machine: 2 cores shared with other jobs (load 3-8).\n"]
    if ref:
        parts += ["### Reference layer (mutmut 3 on the in-memory tests)\n",
                  "Command: `.venv/bin/mutmut run --max-children 1` over `[tool.mutmut]`'s modules and tests (the "
                  "in-memory tests of `tests/protocol` that drive them; their list and what is left out, and why, "
                  "is in `pyproject.toml`); *run* counts the mutants decided so far. Survivors are classed by "
                  "`lab/mutation_reading.toml` (read one by one) and by one rule: a mutant changing only an "
                  "exception's text is equivalent.\n",
                  reference_markdown(ref)]
        if layers:
            parts += ["### Layers of the migration and routing mutants\n",
                      "Command: `python -m lab.mutation_layers --layers racing,teeth --racing-seconds 20 "
                      "--keep-histories 2000` (2026-11-24, over every mutant but those whose only change is an exception's text, "
                      "in two processes, one of them with `--only` over the last 360 and its own `--out`; every racing "
                      "profile at seed 0, then seeds 1 and 2 while the mutant's racing runs took under 20 s, only the runs "
                      "that call the mutated function; the teeth layer on every mutant whose function names a bug switch), "
                      "then `python -m lab.mutation_layers --spark` for the kept histories, racing and teeth "
                      "(every one judged by 2026-11-25). "
                      "The mutants short of two "
                      "layers, one a history, were then run again on the racing layer alone (`--layers racing "
                      "--racing-seconds 30 --only NAME...`: the `retrying` profile's refusals in turn, "
                      "MigrationOutcomeInv, this checkout's oracle), and their racing verdicts replace the first run's; "
                      "on 2026-11-25 once more (`--layers racing --rerun racing --racing-seconds 60 --only NAME...`): "
                      "the `expiring` profile's lost commit answers and client INSERTs, the new refusals of `retrying` "
                      "and `overlapping`, runs that log a broken part, migration row or dedup hash instead of ending, "
                      "and after the small seeds each reached profile at its full size while the 60 s last; then "
                      "eight INSERT-routing survivors again with `--racing-seconds 90`. Later that day the 43 then "
                      "short once more (`--racing-seconds 60`, eleven of them again with 90): CommandsFollowGuardsInv's "
                      "effect half and CrashFailsQueriesInv, the `impatient` profile (clients that try once), a read that "
                      "leaves its partition pending logged instead of hanging, and after the full-size seed 0 the teeth's "
                      "runs with no switch on, then seeds 1 and 2 at full size; and every `client_start_query` mutant "
                      "(`--racing-seconds 20`), whose numbers moved when `mutants/protocol/query.py` was made again with "
                      "F22's guard (layers.json is merged by module, function and mutated line, not by mutmut's number). "
                      "On 2026-11-27 the 19 then short and not read as equivalent once more, racing and teeth "
                      "(`--layers racing,teeth --rerun racing --rerun teeth --racing-seconds 90 --keep-histories 200 "
                      "--only NAME...`): MigrationOutcomeInv's leaving clause, CrashFailsQueriesInv's second half (a crash "
                      "fails only the queries it served), `cancelling`'s SWITCH after an accepted CANCEL, `dropping`'s and "
                      "`mutating`'s keepers whose pulling lags the target's, and a second tooth for three switches "
                      "(a variant's code the first tooth never reaches). "
                      "The seconds are wall-clock "
                      "on a loaded machine, so how many seeds a survivor met depends on the load; a verdict is from the "
                      "layer as it was when its "
                      "mutant was last run. A racing run goes on past a step "
                      "the mutant makes raise (the history's errors table), so a mutant that raises can still be "
                      "killed by its history. *Tests*: mutmut's selection, or a racing run of `test_races.py` that "
                      "raises, runs no query or hangs; *history*: a racing run's history refused by the in-process "
                      "checker, which holds the Spark job's invariants (`tests/checkers/test_checkers_agree.py`), "
                      "MigrationsEndProp at the settled end among them, CommandsFollowGuardsInv (each REASSIGN and CANCEL "
                      "accepted exactly when its spec guard held on what the harness read from Keeper before it, "
                      "and leaving the migration and assignment its action writes, read right after it), "
                      "CrashFailsQueriesInv (no query answered complete across its receiver's crash, and none failed "
                      "by the crash of a replica that did not serve it), "
                      "CancelHonouredInv (an accepted CANCEL's migration ends cancelled, never switched), "
                      "MigrationOutcomeInv (a migration's state agrees with its partition's owners and leaving replica), "
                      "DownWaitBoundedProp (no migration is seen waiting on a down leaver or coordinator much "
                      "longer than the down timeout), "
                      "and NoLogicalErrorsInv: every logged exception is a "
                      "violation, as ClickHouse's CI fails on a LOGICAL_ERROR; *only through NoLogicalErrorsInv*: "
                      "no protocol invariant refused any history the mutant's runs left (the mutant raises, "
                      "nothing shows a lost row or a wrong owner); *only through a broken variant's tooth*: no racing "
                      "run of the fixed protocol refused the mutant's history, but on a tooth of `lab/teeth.py` "
                      "(a bug switch of `protocol/bugs.py` on, the profile and seed whose history the checkers "
                      "refuse with it) the mutant's history is refused by other invariants than the unmutated "
                      "code's on the same run (held instead of refused, or another invariant), by the in-process "
                      "checker and, once `--spark` has judged both histories, by the Spark job. Mostly mutants of code "
                      "only a variant runs (the switch's name renamed, `in` turned to `not in`, the variant's own "
                      "branch broken), equivalent on the fixed protocol; a few are of code the fixed protocol runs "
                      "too that no racing run showed (the teeth run larger: `teeth.SIZE`), which a racing workload "
                      "should show on the fixed protocol instead. Such a kill through NoLogicalErrorsInv "
                      "alone (the mutant raised where the variant ran) is counted in that column too; "
                      "*protocol machine*: conformance's whole-protocol machine, `ci` profile.\n", layers_markdown(layers)]
    if spec:
        parts += ["### Spec layer (TLC on guard mutants)\n", spec_markdown(spec), SPEC_READING]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m lab.mutation_report", description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    a = ap.parse_args(argv)
    return run_main(ap.prog, lambda: _main(a))


def _main(a) -> int:
    from lab import mutation_store as store

    verdicts = reference_verdicts(MUTANTS, store.load_reference())
    layers = load_layers(LAYERS_JSON, MUTANTS, store.load_layers())
    decided = {reading_key(m["module"], m["function"], m["before"], m["after"]): m["tests"]
               for rows in verdicts.values() for m in rows if m["tests"] != "not run"}
    for k, r in layers.items():   # the tests' verdict as it stands, a kept layers verdict's too
        r["tests"] = decided.get(k, r.get("tests"))
    ref = reference_results(layers=layers, verdicts=verdicts)
    spec = json.loads(SPEC_JSON.read_text()) if SPEC_JSON.is_file() else store.load_spec()
    if not ref and spec is None:
        raise BadInput(f"no results: neither {MUTANTS}/**/*.meta (mutmut run), {SPEC_JSON} (lab.mutation_spec) "
                       f"nor {store.STORE}")
    rows = [m for ms in verdicts.values() for m in ms if m["tests"] != "not run"]
    print(f"mutation: tests' verdicts {sum(m['from'] == 'run' for m in rows)} from {MUTANTS}, "
          f"{sum(m['from'] != 'run' for m in rows)} kept in {store.STORE}; layers {len(layers)}"
          f"{' (build/mutation/layers.json over the kept)' if LAYERS_JSON.is_file() else ' (kept)'}; spec "
          + ("none" if spec is None else str(SPEC_JSON) if SPEC_JSON.is_file() else "kept"))
    body = section(ref, spec, layers, layer_total(verdicts))
    if a.no_write:
        print(body)
        return HOLDS
    BENCHMARKS.write_text(splice(BENCHMARKS.read_text(), "mutation", body))
    store.save_reference(rows)
    store.save_layers(list(layers.values()))
    if spec is not None:
        store.save_spec(spec)
    print(f"mutation: section written to {BENCHMARKS}; what it reports kept in {store.STORE}")
    return HOLDS


def layer_total(verdicts: dict[str, list[dict]]) -> int:
    """How many mutants lab.mutation_layers runs when it runs them all: migration.py's and the
    routing modules' (its MIGRATION and ROUTING), less those changing only an exception's text;
    counted by the key the results are kept under (module, function, line before and after), as
    load_layers counts what ran: two mutants making the same change to two equal lines of one
    function are one result (eight such pairs, which made the report say 1032 of 1040 run)."""
    modules = ("protocol/migration.py", "protocol/insert.py", "protocol/query.py")
    return len({reading_key(m["module"], m["function"], m["before"], m["after"])
                for mod in modules for m in verdicts.get(mod, ()) if not m["message"]})

if __name__ == "__main__":
    sys.exit(main())
