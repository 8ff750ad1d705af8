"""Mutation testing of the spec's guards: does TLC notice when a guard is weakened or flipped?

    python -m harness.mutation_spec [--actions A,B] [--models M1,M2] [--budget S] [--markdown]

Each action of spec/SelectiveReplication.tla (a top-level `Name(args) ==` whose body is a list of
`/\\` conjuncts, after an optional LET ... IN) gives two kinds of mutant:

- drop:   one guard conjunct replaced by TRUE. A guard conjunct is one that assigns no primed
          variable, is no UNCHANGED and calls no other action (AdminReassign's StartMigration(...)
          is the action, not its guard). Conjuncts sharing one line (`/\\ a /\\ b`) are split.
- negate: one guard conjunct that names no Bug(...) switch, as ~(...). A guard with a Bug switch
          in it (`Bug("x") \\/ CaughtUp(..)`) is the broken variant's own door; dropping it is
          the mutant that matters, negating it only swaps which variant runs.

Each mutant is a copy of spec/ in a temporary folder with SelectiveReplication.tla changed (spec/
itself is never written), run on the chosen models (holding ones from spec/models.json, fastest
first) until one kills it. Outcomes per mutant:

- killed:   a model violated an invariant or a property (named), or TLC failed evaluating a state
            the mutant reaches (a runtime error: the weakened guard let an action apply a function
            outside its domain; TLC stops, so `make check` would fail);
- survived: every model held; the distinct-state count says whether the mutant changed the
            model's behaviour at all (same count as recorded: probably equivalent on that model);
- timeout:  a model ran out of --budget before deciding (no verdict);
- invalid:  TLC refused the mutant (a parse or semantic error): a bug of this script.

Results go to build/mutation/spec.json (read by harness.mutation_report for BENCHMARKS.md).
Exit status (harness/cli_args.py): 0 every mutant killed, 1 some mutant survived, 2 bad input,
3 no verdict (a timeout or an invalid mutant and no survivor; Java or TLC missing).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.cli_args import BAD_INPUT, ENVIRONMENT, HOLDS, VIOLATED, BadInput, Parser, positive_float, run_main, \
    int_at_least
from harness.tlc.runner import (INVARIANT_VIOLATED, PARSE_ERROR, PROPERTY_VIOLATED, RUNTIME_ERROR, SEMANTIC_ERROR,
                                TIMEOUT, TLCSetupError, run_tlc)

REPO = Path(__file__).resolve().parents[1]
SPEC_DIR = REPO / "spec"
SPEC_FILE = "SelectiveReplication.tla"
OUT = REPO / "build" / "mutation" / "spec.json"

MIGRATION_ACTIONS = ("StartMigration", "ReplicaCloneFetch", "CoordinatorSwitch", "ReplicaCleanup", "CoordinatorCancel")
# The holding models that exercise a migration, each under about 30 s recorded (MCMigration's 158 s
# is too long to run per mutant here).
MIGRATION_MODELS = ("MCMigrationWrites", "MCParallelMigration", "MCMigrationCrash")

_DEF = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\([^)]*\))?\s*==(.*)$")
_IN = re.compile(r"(?<![\\\w])IN(?!\w)")
_PRIMED = re.compile(r"[\w\]\)]'")


@dataclass
class Conjunct:
    action: str
    first: int            # 0-based line of the spec where it starts
    last: int             # last line (inclusive)
    col: int              # column of its `/\`
    text: str             # the conjunct without its `/\`, lines joined by newlines
    start: int | None = None   # for one of several on a line: offsets of its text within the line
    end: int | None = None


@dataclass
class Mutant:
    id: str
    action: str
    kind: str             # drop | negate
    line: int             # 1-based, in SelectiveReplication.tla
    original: str         # the conjunct's text, one line
    source: str = field(repr=False, default="")


@dataclass
class Run:
    model: str
    outcome: str
    violated: str | None
    seconds: float
    distinct_states: int | None


@dataclass
class Verdict:
    mutant: Mutant
    status: str           # killed | survived | timeout | invalid
    killed_by: str | None
    runs: list[Run]

    def reason(self, recorded: dict[str, int]) -> str:
        if self.status == "killed":
            return ""
        if self.status != "survived":
            return "; ".join(f"{r.model}: {r.outcome}" for r in self.runs)
        same = [r.model for r in self.runs if r.distinct_states is not None and r.distinct_states == recorded.get(r.model)]
        if len(same) == len(self.runs):
            return "same distinct states as the unmutated models: the guard never binds there (equivalent on them, or a missing model)"
        return "behaviour changed but no invariant broke: " + ", ".join(
            f"{r.model} {r.distinct_states} states (recorded {recorded.get(r.model)})" for r in self.runs)


# ---- parsing


def _strip_comment(line: str) -> str:
    i = line.find("\\*")
    return line if i < 0 else line[:i]


def _top_level_splits(text: str) -> list[tuple[int, int]] | None:
    """Spans of the `/\\`-separated pieces of a one-line conjunct, or None when splitting it would
    change its meaning (a quantifier, IF, LET, CHOOSE or a disjunction at bracket depth 0)."""
    depth, cuts, i = 0, [], 0
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == '"':
            i = text.index('"', i + 1)
        elif depth == 0:
            two = text[i:i + 2]
            if two in ("\\A", "\\E", "\\/", "=>") or re.match(r"(IF|LET|CHOOSE)\b", text[i:]) and (i == 0 or not text[i - 1].isalnum()):
                return None
            if text[i:i + 4] == " /\\ ":
                cuts.append(i)
        i += 1
    spans, start = [], 0
    for c in cuts:
        spans.append((start, c))
        start = c + 4
    spans.append((start, len(text)))
    return spans


def parse_actions(lines: list[str]) -> dict[str, list[Conjunct]]:
    """Every top-level definition whose body is a conjunct list, with its conjuncts (split where
    one line holds several). Actions are told from state predicates later, by their primes."""
    defs: dict[str, tuple[int, int]] = {}
    i = 0
    while i < len(lines):
        m = _DEF.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() and (lines[j][0] in " \t"):
            j += 1
        defs[m.group(1)] = (i, j)   # body lines i+1 .. j-1
        i = j
    out: dict[str, list[Conjunct]] = {}
    for name, (head, end) in defs.items():
        body = list(range(head + 1, end))
        if not body:
            continue
        k = 0
        if lines[body[0]].strip().startswith("LET"):
            while k < len(body) and not _IN.search(_strip_comment(lines[body[k]])):
                k += 1
            if k == len(body):
                continue
            m_in = _IN.search(_strip_comment(lines[body[k]]))
            rest = lines[body[k]][m_in.end():]
            if not rest.strip().startswith("/\\"):
                k += 1
        if k >= len(body):
            continue
        first_line = lines[body[k]]
        col = first_line.find("/\\", _IN.search(first_line).end() if _IN.search(_strip_comment(first_line)) else 0)
        if col < 0 or first_line[:col].strip() not in ("", "IN"):
            continue
        conj: list[Conjunct] = []
        cur: list[int] = []

        def close():
            while len(cur) > 1 and not _strip_comment(lines[cur[-1]]).strip():
                cur.pop()   # comment lines before the next conjunct are not this one's
            if cur:
                text = "\n".join([lines[cur[0]][col + 2:]] + [lines[x] for x in cur[1:]])
                conj.append(Conjunct(name, cur[0], cur[-1], col, text))

        for ln in body[k:]:
            line = lines[ln]
            if len(line) > col + 1 and line[col:col + 2] == "/\\" and line[:col].strip() in ("", "IN"):
                close()
                cur = [ln]
            elif cur:
                cur.append(ln)
        close()
        # split one-line conjuncts holding several
        split: list[Conjunct] = []
        for c in conj:
            if c.first == c.last:
                raw = _strip_comment(lines[c.first])
                offset = col + 2
                spans = _top_level_splits(raw[offset:].rstrip())
                if spans and len(spans) > 1:
                    for a, b in spans:
                        piece = raw[offset + a:offset + b]
                        lead = len(piece) - len(piece.lstrip())
                        split.append(Conjunct(name, c.first, c.first, col, piece.strip(),
                                              offset + a + lead, offset + a + lead + len(piece.strip())))
                    continue
            split.append(c)
        # nested bullets of a multi-line guard (ReplicaCleanup's `\/ Bug(..) \/ /\ A /\ B`): each
        # one-line `/\ X` inside is a conjunct of its own, so the guard behind a Bug switch is mutated too
        nested: list[Conjunct] = []
        for c in split:
            if c.first == c.last or _is_primed(c.text):
                continue
            for ln in range(c.first + 1, c.last + 1):
                code = _strip_comment(lines[ln]).rstrip()
                m = re.match(r"^(\s*(?:\\/\s+)?)/\\ ", code)
                if not m:
                    continue
                ncol = len(m.group(1))
                nxt = lines[ln + 1] if ln + 1 <= c.last else ""
                if nxt.strip() and len(nxt) - len(nxt.lstrip()) > ncol:
                    continue   # continues on the next line: left whole
                nested.append(Conjunct(name, ln, ln, ncol, code[ncol + 2:].strip(), ncol + 3, len(code)))
        out[name] = split + nested
    return out


def _is_primed(text: str) -> bool:
    code = "\n".join(_strip_comment(x) for x in text.splitlines())   # "leaver's" in a comment is no prime
    no_strings = re.sub(r'"[^"]*"', '""', code)
    return bool(_PRIMED.search(no_strings)) or "UNCHANGED" in no_strings


def action_names(conjuncts: dict[str, list[Conjunct]]) -> set[str]:
    """Definitions that change state: a primed variable or UNCHANGED in a conjunct, or a call of
    one that does (to a fixed point)."""
    acts = {n for n, cs in conjuncts.items() if any(_is_primed(c.text) for c in cs)}
    while True:
        more = {n for n, cs in conjuncts.items() if n not in acts
                and any(re.search(rf"\b{re.escape(a)}\(", c.text) or re.search(rf"\b{re.escape(a)}\b", c.text)
                        for c in cs for a in acts)}
        if not more:
            return acts
        acts |= more


def is_guard(c: Conjunct, acts: set[str]) -> bool:
    if _is_primed(c.text):
        return False
    return not any(re.search(rf"\b{re.escape(a)}\b", c.text) for a in acts)


def _replace(lines: list[str], c: Conjunct, new_first: str, drop_rest: bool, shift: int = 0, close: str = "") -> list[str]:
    out = list(lines)
    if c.start is not None:
        line = out[c.first]
        out[c.first] = line[:c.start] + new_first + line[c.end:]
        return out
    first = out[c.first]
    out[c.first] = first[:c.col + 2] + " " + new_first
    if drop_rest:
        for ln in range(c.first + 1, c.last + 1):
            out[ln] = ""
    else:
        for ln in range(c.first + 1, c.last + 1):
            out[ln] = " " * shift + out[ln]
        last = _strip_comment(out[c.last]).rstrip()
        out[c.last] = last + close
    return out


def generate(lines: list[str], only: set[str] | None = None) -> list[Mutant]:
    conjuncts = parse_actions(lines)
    acts = action_names(conjuncts)
    mutants: list[Mutant] = []
    for name in sorted(acts, key=lambda n: conjuncts[n][0].first):
        if only is not None and name not in only:
            continue
        n = 0
        for c in conjuncts[name]:
            if not is_guard(c, acts):
                continue
            one_line = " ".join(x.strip() for x in _strip_comment_lines(c.text))
            n += 1
            src = _replace(lines, c, "TRUE", drop_rest=True)
            mutants.append(Mutant(f"{name}.{n}.drop", name, "drop", c.first + 1, one_line, "\n".join(src) + "\n"))
            if "Bug(" not in c.text:
                if c.start is not None:
                    src = _replace(lines, c, f"~({c.text})", drop_rest=True)
                else:
                    body = _strip_comment(lines[c.first])[c.col + 2:].strip() if c.first == c.last else \
                        lines[c.first][c.col + 2:].lstrip()
                    if c.first == c.last:
                        src = _replace(lines, c, f"~({body})", drop_rest=True)
                    else:
                        # keep the layout of a multi-line conjunct: its continuation lines move right
                        # by the two characters `~(` adds, so nested bullets stay aligned
                        src = _replace(lines, c, "~(" + _strip_comment(body).rstrip(), drop_rest=False,
                                       shift=2, close=")")
                mutants.append(Mutant(f"{name}.{n}.negate", name, "negate", c.first + 1, one_line, "\n".join(src) + "\n"))
    return mutants


def _strip_comment_lines(text: str) -> list[str]:
    return [_strip_comment(x) for x in text.splitlines() if _strip_comment(x).strip()]


# ---- running


def holding_models(names: list[str] | None) -> list[dict]:
    manifest = json.loads((SPEC_DIR / "models.json").read_text())["models"]
    by_name = {m["name"]: m for m in manifest}
    if names is None:
        names = list(MIGRATION_MODELS)
    missing = [n for n in names if n not in by_name]
    if missing:
        raise BadInput(f"--models: no model {', '.join(missing)} in spec/models.json")
    chosen = [by_name[n] for n in names]
    wrong = [m["name"] for m in chosen if m["expect"] != "holds" or m["spec"] != "MCSelectiveReplication.tla"]
    if wrong:
        raise BadInput(f"--models: {', '.join(wrong)} is not a holding SelectiveReplication model")
    return sorted(chosen, key=lambda m: m.get("recorded_seconds", 1e9))


def run_mutant(mutant: Mutant, models: list[dict], budget: float, workdir: Path, workers: int = 1) -> Verdict:
    folder = Path(tempfile.mkdtemp(prefix=f"mut_{mutant.id.replace('.', '_')}_", dir=workdir))
    try:
        for f in SPEC_DIR.iterdir():
            if f.suffix in (".tla", ".cfg"):
                shutil.copy(f, folder / f.name)
        (folder / SPEC_FILE).write_text(mutant.source)
        runs: list[Run] = []
        for m in models:
            res = run_tlc(folder / m["spec"], folder / m["config"], workers=workers,
                          check_deadlock=m.get("check_deadlock", False), timeout_s=budget,
                          # TLC 2.15 unpacks its standard modules (Naturals.tla, ...) into java.io.tmpdir;
                          # parallel runs sharing /tmp read each other's half-written copies (parse errors)
                          jvm_args=[f"-Djava.io.tmpdir={folder}"])
            runs.append(Run(m["name"], res.outcome, res.violated, round(res.duration_s, 1), res.distinct_states))
            if res.outcome in (INVARIANT_VIOLATED, PROPERTY_VIOLATED):
                return Verdict(mutant, "killed", f"{m['name']}: {res.violated or res.outcome}", runs)
            if res.outcome == RUNTIME_ERROR and "semantic analysis failed" in " ".join(res.errors):
                return Verdict(mutant, "invalid", None, runs)   # TLC could not load the copy: no verdict
            if res.outcome == RUNTIME_ERROR:
                err = (res.errors[0].splitlines()[0][:80] if res.errors else "runtime error")
                return Verdict(mutant, "killed", f"{m['name']}: TLC runtime error ({err})", runs)
            if res.outcome in (PARSE_ERROR, SEMANTIC_ERROR):
                return Verdict(mutant, "invalid", None, runs)
        if any(r.outcome == TIMEOUT for r in runs):
            return Verdict(mutant, "timeout", None, runs)
        if all(r.outcome == "holds" for r in runs):
            return Verdict(mutant, "survived", None, runs)
        return Verdict(mutant, "timeout", None, runs)   # another no-verdict outcome
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def markdown(verdicts: list[Verdict], models: list[dict], budget: float, command: str) -> str:
    recorded = {m["name"]: m.get("distinct_states") for m in models}
    rows = ["| action | mutants | killed | survived | timeout | invalid |", "|---|---|---|---|---|---|"]
    by_action: dict[str, list[Verdict]] = {}
    for v in verdicts:
        by_action.setdefault(v.mutant.action, []).append(v)
    for a, vs in by_action.items():
        cnt = {s: sum(v.status == s for v in vs) for s in ("killed", "survived", "timeout", "invalid")}
        rows.append(f"| {a} | {len(vs)} | {cnt['killed']} | {cnt['survived']} | {cnt['timeout']} | {cnt['invalid']} |")
    tot = {s: sum(v.status == s for v in verdicts) for s in ("killed", "survived", "timeout", "invalid")}
    rows.append(f"| **all** | {len(verdicts)} | {tot['killed']} | {tot['survived']} | {tot['timeout']} | {tot['invalid']} |")
    text = [f"Command: `{command}`; models {', '.join(m['name'] for m in models)} (each run until one kills the "
            f"mutant), {budget:g} s per model.", "", *rows, "", "| mutant | line | conjunct | verdict |", "|---|---|---|---|"]
    for v in verdicts:
        what = v.killed_by if v.status == "killed" else f"**{v.status}**: {v.reason(recorded)}"
        orig = v.mutant.original.replace("|", "\\|")
        orig = orig if len(orig) <= 70 else orig[:67] + "..."
        text.append(f"| {v.mutant.id} | {v.mutant.line} | `{orig}` | {what} |")
    return "\n".join(text) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m harness.mutation_spec", description=__doc__.splitlines()[0])
    ap.add_argument("--actions", default=",".join(MIGRATION_ACTIONS), help="comma-separated action names, or 'all'")
    ap.add_argument("--models", default=",".join(MIGRATION_MODELS), help="comma-separated holding models of spec/models.json")
    ap.add_argument("--budget", type=positive_float, default=120.0, help="seconds per model run (a longer one is a timeout)")
    ap.add_argument("--jobs", type=int_at_least(1), default=1, help="mutants checked at once (each TLC on one worker)")
    ap.add_argument("--kinds", default="drop,negate", help="mutant kinds: drop, negate or both")
    ap.add_argument("--ids", help="only these mutants (comma-separated ids as --list prints them)")
    ap.add_argument("--survivors", action="store_true",
                    help="only the mutants that survived in --out's earlier result; their new runs are added to it")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit without running TLC")
    ap.add_argument("--markdown", action="store_true", help="print the result as a Markdown table")
    ap.add_argument("--out", default=str(OUT), help="where the JSON result goes")
    a = ap.parse_args(argv)
    return run_main(ap.prog, lambda: _main(a, argv if argv is not None else sys.argv[1:]), environment=(TLCSetupError,))


def _main(a, argv: list[str]) -> int:
    lines = (SPEC_DIR / SPEC_FILE).read_text().splitlines()
    conjuncts = parse_actions(lines)
    acts = action_names(conjuncts)
    only = None if a.actions == "all" else {x.strip() for x in a.actions.split(",") if x.strip()}
    if only is not None and only - acts:
        raise BadInput(f"--actions: no action {', '.join(sorted(only - acts))} in spec/{SPEC_FILE}")
    kinds = {x.strip() for x in a.kinds.split(",") if x.strip()}
    if not kinds or kinds - {"drop", "negate"}:
        raise BadInput(f"--kinds: wants drop, negate or drop,negate, not {a.kinds!r}")
    models = holding_models([x.strip() for x in a.models.split(",") if x.strip()])
    mutants = [m for m in generate(lines, only) if m.kind in kinds]
    earlier = None
    if a.survivors:
        if not Path(a.out).is_file():
            raise BadInput(f"--survivors: no earlier result {a.out}")
        earlier = json.loads(Path(a.out).read_text())
        again = {v["id"] for v in earlier["verdicts"] if v["status"] == "survived"}
        mutants = [m for m in mutants if m.id in again]
    if a.ids:
        ids = {x.strip() for x in a.ids.split(",") if x.strip()}
        unknown = ids - {m.id for m in mutants}
        if unknown:
            raise BadInput(f"--ids: no mutant {', '.join(sorted(unknown))} (see --list)")
        mutants = [m for m in mutants if m.id in ids]
    if a.list:
        for m in mutants:
            print(f"{m.id:32} line {m.line:4}  {m.original}")
        return HOLDS
    work = Path(tempfile.mkdtemp(prefix="mutation-spec-"))
    verdicts: list[Verdict] = []
    start = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:
            for v in pool.map(lambda m: run_mutant(m, models, a.budget, work), mutants):
                verdicts.append(v)
                print(f"{v.mutant.id:32} {v.status:9} {v.killed_by or ''} "
                      f"({sum(r.seconds for r in v.runs):.0f}s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = "python -m harness.mutation_spec " + " ".join(argv)
    result = {
        "command": command.strip(), "budget_s": a.budget, "models": [m["name"] for m in models],
        "seconds": round(time.monotonic() - start, 1),
        "verdicts": [{**{k: v for k, v in asdict(x.mutant).items() if k != "source"}, "status": x.status,
                      "killed_by": x.killed_by, "runs": [asdict(r) for r in x.runs],
                      "reason": x.reason({m["name"]: m.get("distinct_states") for m in models})} for x in verdicts],
    }
    if earlier is not None:
        # a survivor re-run on more models: its verdict now counts the earlier runs and the new ones
        new = {v["id"]: v for v in result["verdicts"]}
        for v in earlier["verdicts"]:
            if v["id"] in new:
                n = new[v["id"]]
                n["runs"] = v["runs"] + n["runs"]
                recorded = {m["name"]: m.get("distinct_states") for m in holding_models(
                    list(dict.fromkeys(earlier["models"] + result["models"])))}
                if n["status"] == "survived":
                    n["reason"] = Verdict(Mutant(**{k: v[k] for k in ("id", "action", "kind", "line", "original")}),
                                          "survived", None, [Run(**r) for r in n["runs"]]).reason(recorded)
                v.clear()
                v.update(n)
        earlier["models"] = list(dict.fromkeys(earlier["models"] + result["models"]))
        earlier["command"] = earlier["command"] + "; then " + result["command"]
        earlier["seconds"] = round(earlier["seconds"] + result["seconds"], 1)
        result = earlier
        verdicts = [Verdict(Mutant(**{k: v[k] for k in ("id", "action", "kind", "line", "original")}), v["status"],
                            v["killed_by"], [Run(**r) for r in v["runs"]]) for v in result["verdicts"]]
        models = holding_models(result["models"])
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    if a.markdown:
        print(markdown(verdicts, models, a.budget, command.strip()))
    killed = sum(v.status == "killed" for v in verdicts)
    print(f"spec mutants: {len(verdicts)}, killed {killed}, survived {sum(v.status == 'survived' for v in verdicts)}, "
          f"no verdict {sum(v.status in ('timeout', 'invalid') for v in verdicts)} ({result['seconds']:.0f}s; {out})")
    if any(v.status == "survived" for v in verdicts):
        return VIOLATED
    if any(v.status in ("timeout", "invalid") for v in verdicts):
        return ENVIRONMENT
    return HOLDS


if __name__ == "__main__":
    sys.exit(main())
