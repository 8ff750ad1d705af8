"""Mutation testing of the spec's guards: does TLC notice when a guard is weakened or flipped?

    python -m lab.mutation_spec [--actions A,B] [--models M1,M2] [--liveness M] [--budget S] [--markdown]
    python -m lab.mutation_spec --check-witnesses [--models M1,M2]

Each action of spec/rfc/SelectiveReplication.tla (a top-level `Name(args) ==` whose body is a list of
`/\\` conjuncts, after an optional LET ... IN) gives two kinds of mutant:

- drop:   one guard conjunct replaced by TRUE. A guard conjunct is one that assigns no primed
          variable, is no UNCHANGED and calls no other action (AdminReassign's StartMigration(...)
          is the action, not its guard). Conjuncts sharing one line (`/\\ a /\\ b`) are split.
- negate: one guard conjunct that names no Bug(...) switch, as ~(...). A guard with a Bug switch
          in it (`Bug("x") \\/ CaughtUp(..)`) is the broken variant's own door; dropping it is
          the mutant that matters, negating it only swaps which variant runs.

A model bound (`aux_counts.merges < MaxMerges`, `ins[i].tries < MaxTries`, ...: a `< Max...` of
the models' bounds) is no protocol guard and gives no mutant: dropped, the state space is
infinite (a timeout whatever the spec); negated, the action never fires. They are listed as bounds.

Each mutant is a copy of spec/ in a temporary folder with SelectiveReplication.tla changed (spec/
itself is never written), checked in three layers, each until one kills it:

1. safety: the chosen holding models (spec/models.json, fastest first) with their invariants;
2. witness: for each of those models, the states WITNESSES names (defined in
   MCSelectiveReplication.tla) that the fixed protocol must reach. TLC checks ~W as the only
   invariant (MCWitness.tla, written beside the copy): the unmutated model violates it, which the
   run checks first; a mutant under which TLC exhausts the model without a W state is killed by
   the witness. This kills the mutants that make an action never fire (safety holds vacuously);
3. liveness: the --liveness models (MCLiveness: MigrationsEndProp, OwnersEventuallyCompleteProp),
   for a mutant that lets a step happen sometimes but can stall it for ever.

Outcomes per mutant:

- killed:   by an invariant (named), a TLC error evaluating a state the mutant reaches (a runtime
            error: the weakened guard let an action apply a function outside its domain; TLC stops,
            so `make check` would fail), a witness no longer reached, or a liveness property;
- survived: every model held, every witness was reached, every property held. Its one-line reason
            comes from spec/rfc/mutation_survivors.json (keyed by action, kind and conjunct text):
            equivalent (and why) or a gap; a survivor with no entry there is `unclassified`;
- timeout:  a model ran out of --budget before deciding (no verdict);
- invalid:  TLC refused the mutant (a parse or semantic error): a bug of this script.

TLC's -simulate mode is not used: it finds violations but cannot show a mutant survives.

Results go to build/mutation/spec.json (read by lab.mutation_report for BENCHMARKS.md).
Exit status (harness/cli_args.py): 0 every mutant killed or a survivor classified equivalent,
1 an unclassified survivor or a gap, 2 bad input, 3 no verdict (a timeout or an invalid mutant
and no survivor; a witness the unmutated spec does not reach; Java or TLC missing).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.cli_args import (
    BadInput,
    ENVIRONMENT,
    EnvironmentFailure,
    HOLDS,
    Parser,
    VIOLATED,
    int_at_least,
    output_file,
    positive_float,
    run_main,
    text,
)
from harness.tlc.runner import (INVARIANT_VIOLATED, PARSE_ERROR, PROPERTY_VIOLATED, RUNTIME_ERROR, SEMANTIC_ERROR,
                                TIMEOUT, TLCSetupError, run_tlc)

REPO = Path(__file__).resolve().parents[1]
SPEC_DIR = REPO / "spec" / "rfc"   # the RFC design's family: the module mutated and its models
MANIFEST = REPO / "spec" / "models.json"
SPEC_FILE = "SelectiveReplication.tla"
OUT = REPO / "build" / "mutation" / "spec.json"

SURVIVORS = SPEC_DIR / "mutation_survivors.json"

MIGRATION_ACTIONS = ("StartMigration", "ReplicaCloneFetch", "CoordinatorSwitch", "ReplicaCleanup", "CoordinatorCancel")
# The holding models that exercise a migration, each under about 30 s recorded (MCMigration's 158 s
# is too long to run per mutant here), and between them every guard of the migration actions
# binds somewhere: an insert racing it (Writes), a crash, a takeover, a down leaver and a query
# (DownLeaver: MCMigrationCrash's 110k states timed out per mutant under load), the concurrency
# limit binding (Limit), two migrations in flight (Parallel).
MIGRATION_MODELS = ("MCMigrationWrites", "MCDownLeaver", "MCMigrationLimit", "MCParallelMigration")
# Fair-spec models whose properties kill a mutant that can stall a step for ever: a migration's
# (MCLiveness) or a query's (MCLivenessQuery, 6 s: a query that waits for ever or fails with its
# replicas up).
LIVENESS_MODELS = ("MCLiveness", "MCLivenessQuery")
# States each model must reach under the fixed protocol (MCSelectiveReplication.tla, "Witnesses").
# A witness costs a TLC run up to the depth of its first state (4-24 s here; AllMigratedWitness
# 54 s on MCParallelMigration), paid by every mutant that safety leaves alive, so each model
# names only the states the others do not: the end of a migration and of a cancel where an
# insert races them, the crash paths (takeover, a down leaver) and a query across a SWITCH where
# they happen, the limit reached where it binds.
WITNESSES: dict[str, tuple[str, ...]] = {
    "MCMigrationWrites": ("MigrationDoneWitness", "MigrationCancelledWitness", "InsertAckedDuringCloneWitness"),
    "MCDownLeaver": ("TakeOverWitness", "DownLeaverEndedWitness", "QueryAcrossSwitchWitness"),
    "MCMigrationLimit": ("MigrationLimitReachedWitness", "AllMigratedWitness"),
    "MCParallelMigration": ("MigrationLimitReachedWitness",),
    "MCMigrationCrash": ("MigrationDoneWitness", "MigrationCancelledWitness", "TakeOverWitness"),
    "MCRestartQuery": ("QueryDoneWitness", "QueryFailedWitness", "QueryDoneWithoutCrashWitness"),
    "MCQueryTwoPartitions": ("QueryDoneWitness", "QueryFailedWitness", "QueryDoneWithoutCrashWitness"),
    "MCRetry": ("InsertAckedWitness", "RetriedInsertAckedWitness", "AckLostStepWitness"),
    "MCFilteredLog": ("InsertAckedWitness", "ForwardStepWitness"),
    "MCRepairDuringMigration": ("RepairedWitness",),
    "MCRepair": ("RepairedWitness", "RestartedWitness"),
    "MCMergeDuringClone": ("MergedWitness",),
    "MCMutationDuringClone": ("MutationAppliedWitness",),
    "MCDropDuringClone": ("DropExecutedWitness",),
    "MCMutationTrimmedLog": ("LogTrimmedWitness", "MutationAppliedWitness"),
    "MCDropTrimmedLog": ("LogTrimmedWitness", "DropExecutedWitness"),
    "MCFaultDomainsRebalance": ("MigrationStartedWitness",),
}
# The routing and insert actions (issue 18's "routing mutants"), and models that decide them: a
# query racing a crash (RestartQuery), over two partitions (QueryTwoPartitions), a retried
# insert (Retry), allocation on the first insert
# with stale maps (FilteredLog), an insert racing a migration (MigrationWrites).
ROUTING_ACTIONS = ("ClientSendInsert", "ReplicaAllocate", "ReplicaForwardInsert", "ReplicaWriteInsert", "ClientReceiveAck",
                   "ClientTimeout", "ClientStartQuery", "ReplicaReadPartition", "ClientQueryFails")
ROUTING_MODELS = ("MCRestartQuery", "MCQueryTwoPartitions", "MCRetry", "MCFilteredLog", "MCMigrationWrites")
# A guard against one of the models' bounds (constants that only keep a state space finite).
_BOUND = re.compile(r"<\s*Max(Tries|Merges|Alters|Mutations|Drops|Migrations|Crashes|ReplicaDrops)\b")

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
    check: str = "safety"        # safety | witness | liveness
    witness: str | None = None   # for a witness run: which


@dataclass
class Verdict:
    mutant: Mutant
    status: str           # killed | survived | timeout | invalid
    killed_by: str | None
    runs: list[Run]
    layer: str | None = None          # killed: invariant | runtime_error | witness | liveness
    classification: str | None = None  # survived: equivalent | gap | unclassified

    def reason(self, recorded: dict[str, int]) -> str:
        if self.status == "killed":
            return ""
        if self.status != "survived":
            return "; ".join(f"{r.model}{' ' + r.witness if r.witness else ''}: {r.outcome}" for r in self.runs)
        known = survivor_reasons().get(survivor_key(self.mutant))
        if known:
            return known["reason"]
        safety = [r for r in self.runs if r.check == "safety"]
        same = [r.model for r in safety if r.distinct_states is not None and r.distinct_states == recorded.get(r.model)]
        if len(same) == len(safety):
            return "same distinct states as the unmutated models: the guard never binds there (equivalent on them, or a missing model)"
        return "behaviour changed but no invariant, witness or property broke: " + ", ".join(
            f"{r.model} {r.distinct_states} states (recorded {recorded.get(r.model)})" for r in safety)


# ---- survivors read by hand


def survivor_key(m: Mutant) -> str:
    """Stable across edits elsewhere in the spec: the action, the kind and the conjunct's text
    (not its line or its number within the action)."""
    return f"{m.action} | {m.kind} | {m.original}"


def survivor_reasons(path: Path | None = None) -> dict[str, dict]:
    """spec/rfc/mutation_survivors.json: per survivor key, its class (equivalent | gap) and reason."""
    path = path or SURVIVORS
    if not path.is_file():
        return {}
    entries = json.loads(path.read_text())["survivors"]
    out = {}
    for e in entries:
        if e.get("class") not in ("equivalent", "gap") or not e.get("reason"):
            raise BadInput(f"{path}: entry {e.get('action')} {e.get('kind')} {e.get('conjunct')!r} needs class "
                           f"equivalent or gap and a reason")
        out[f"{e['action']} | {e['kind']} | {e['conjunct']}"] = e
    return out


def classify(v: Verdict) -> str | None:
    if v.status != "survived":
        return None
    known = survivor_reasons().get(survivor_key(v.mutant))
    return known["class"] if known else "unclassified"


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
    # an action named in a comment (CoordinatorCancel's "a repair is not cancelled (RepairStart)") is no call
    code = "\n".join(_strip_comment_lines(c.text))
    return not any(re.search(rf"\b{re.escape(a)}\b", code) for a in acts)


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


def is_bound(c: Conjunct) -> bool:
    code = " ".join(_strip_comment_lines(c.text))
    return bool(_BOUND.search(code))


def bounds(lines: list[str], only: set[str] | None = None) -> list[tuple[str, str]]:
    """(action, conjunct) of the guards left out as model bounds."""
    conjuncts = parse_actions(lines)
    acts = action_names(conjuncts)
    return [(name, " ".join(x.strip() for x in _strip_comment_lines(c.text)))
            for name in sorted(acts, key=lambda n: conjuncts[n][0].first) if only is None or name in only
            for c in conjuncts[name] if is_guard(c, acts) and is_bound(c)]


def hand_mutant(spec: str, action: str, pattern: str, replacement: str, name: str,
                original: str | None = None) -> tuple[Mutant, int]:
    """A mutant written by hand, not by generate: `spec` with `pattern` replaced by `replacement`
    (re.sub) within `action`'s definition alone (up to its first blank line). Returns it, named
    `{action}.{name}` (`original`: the text it changes, the pattern by default), with the number
    of replacements made."""
    start = re.search(rf"^{action}\([^)]*\) ==", spec, re.M).start()
    end = spec.index("\n\n", start)
    body, n = re.subn(pattern, replacement, spec[start:end])
    return Mutant(f"{action}.{name}", action, "drop", spec[:start].count("\n") + 1, original or pattern,
                  spec[:start] + body + spec[end:]), n


def generate(lines: list[str], only: set[str] | None = None) -> list[Mutant]:
    conjuncts = parse_actions(lines)
    acts = action_names(conjuncts)
    mutants: list[Mutant] = []
    for name in sorted(acts, key=lambda n: conjuncts[n][0].first):
        if only is not None and name not in only:
            continue
        n = 0
        for c in conjuncts[name]:
            if not is_guard(c, acts) or is_bound(c):
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


def _manifest() -> dict[str, dict]:
    return {m["name"]: m for m in json.loads(MANIFEST.read_text())["models"]}


def is_liveness(m: dict) -> bool:
    return "SPECIFICATION" in (SPEC_DIR / m["config"]).read_text()


def holding_models(names: list[str] | None, liveness: bool = False) -> list[dict]:
    by_name = _manifest()
    if names is None:
        names = list(LIVENESS_MODELS if liveness else MIGRATION_MODELS)
    flag = "--liveness" if liveness else "--models"
    missing = [n for n in names if n not in by_name]
    if missing:
        raise BadInput(f"{flag}: no model {', '.join(missing)} in spec/models.json")
    chosen = [by_name[n] for n in names]
    wrong = [m["name"] for m in chosen if m["expect"] != "holds" or m["spec"] != "MCSelectiveReplication.tla"
             or is_liveness(m) != liveness]
    if wrong:
        raise BadInput(f"{flag}: {', '.join(wrong)} is not a holding SelectiveReplication "
                       f"{'liveness' if liveness else 'safety'} model")
    return sorted(chosen, key=lambda m: m.get("recorded_seconds", 1e9))


def is_step_witness(witness: str) -> bool:
    """A witness named `...StepWitness` is an action (primed variables): a step the fixed protocol
    must take, where no state tells it apart (a forwarded INSERT's state is the one a resend to
    the owner gives). TLC checks it as the action property [][~W]_vars, violated by a W step."""
    return witness.endswith("StepWitness")


def witness_cfg(model_cfg: str, step: bool = False) -> str:
    """The model's cfg with its invariants and properties replaced by WitnessUnreachedInv alone
    (WitnessUnreachedProp for a step witness): constants, symmetry, Init and Next stay, so TLC
    explores the same states."""
    out, skipping = [], False
    for line in model_cfg.splitlines():
        head = line.split()[0] if line.split() else ""
        if head in ("INVARIANT", "INVARIANTS", "PROPERTY", "PROPERTIES"):
            skipping = head in ("INVARIANTS", "PROPERTIES") and len(line.split()) == 1
            continue
        if skipping and line[:1] in (" ", "\t") and line.strip():
            continue
        skipping = False
        out.append(line)
    return "\n".join(out + ["PROPERTY WitnessUnreachedProp" if step else "INVARIANT WitnessUnreachedInv", ""])


def write_witness(folder: Path, model: dict, witness: str) -> tuple[Path, Path]:
    """MCWitness.tla and its cfg in folder (a copy of spec/): TLC violates WitnessUnreachedInv
    exactly when it reaches a state where the witness holds."""
    spec = folder / "MCWitness.tla"
    spec.write_text("---- MODULE MCWitness ----\n"
                    "\\* Written by lab/mutation_spec.py: a violation is a reached witness state.\n"
                    "EXTENDS MCSelectiveReplication\n"
                    + (f"WitnessUnreachedProp == [][~({witness})]_vars\n" if is_step_witness(witness)
                       else f"WitnessUnreachedInv == ~({witness})\n")
                    + "====\n")
    cfg = folder / f"MCWitness_{model['name']}_{witness}.cfg"
    cfg.write_text(witness_cfg((folder / model["config"]).read_text(), is_step_witness(witness)))
    return spec, cfg


def without_view(cfg_text: str) -> str:
    """A cfg without its VIEW line. ReductionView is sound because of which variables the actions
    and invariants read (its comment): a mutant's action may read one the view leaves out, and a
    witness may hold only in a state the view merged away, so mutants and witnesses run on every
    variable."""
    return "".join(line for line in cfg_text.splitlines(keepends=True) if not line.startswith("VIEW"))


def _copy_spec(folder: Path, source: str | None = None) -> None:
    for f in SPEC_DIR.iterdir():
        if f.suffix == ".tla":
            shutil.copy(f, folder / f.name)
        elif f.suffix == ".cfg":
            (folder / f.name).write_text(without_view(f.read_text()))
    if source is not None:
        (folder / SPEC_FILE).write_text(source)


def _tlc(folder: Path, spec: Path, cfg: Path, m: dict, budget: float, workers: int):
    return run_tlc(spec, cfg, workers=workers, check_deadlock=m.get("check_deadlock", False), timeout_s=budget,
                   # TLC 2.15 unpacks its standard modules (Naturals.tla, ...) into java.io.tmpdir;
                   # parallel runs sharing /tmp read each other's half-written copies (parse errors)
                   jvm_args=[f"-Djava.io.tmpdir={folder}"])


def check_witness(folder: Path, model: dict, witness: str, budget: float, workers: int = 1) -> Run:
    """One witness on one model of the spec copy in folder: outcome `reached` (TLC found a W
    state), `unreached` (TLC exhausted the model without one), or TLC's own outcome."""
    spec, cfg = write_witness(folder, model, witness)
    res = _tlc(folder, spec, cfg, model, budget, workers)
    outcome = {INVARIANT_VIOLATED: "reached", PROPERTY_VIOLATED: "reached", "holds": "unreached"}.get(res.outcome,
                                                                                                       res.outcome)
    return Run(model["name"], outcome, None, round(res.duration_s, 1), res.distinct_states, "witness", witness)


def check_witnesses(models: list[dict], budget: float, workdir: Path, workers: int = 1) -> list[Run]:
    """Every witness of the chosen models on the unmutated spec: each must be `reached`, or a
    mutant it kills proves nothing."""
    folder = Path(tempfile.mkdtemp(prefix="witness_baseline_", dir=workdir))
    try:
        _copy_spec(folder)
        return [check_witness(folder, m, w, budget, workers) for m in models for w in WITNESSES.get(m["name"], ())]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_mutant(mutant: Mutant, models: list[dict], budget: float, workdir: Path, workers: int = 1,
               liveness: list[dict] | None = None) -> Verdict:
    folder = Path(tempfile.mkdtemp(prefix=f"mut_{mutant.id.replace('.', '_')}_", dir=workdir))
    try:
        _copy_spec(folder, mutant.source)
        runs: list[Run] = []
        # safety first, then the witnesses, then liveness: each layer only for what the one before left alive
        for m in models:
            res = _tlc(folder, folder / m["spec"], folder / m["config"], m, budget, workers)
            runs.append(Run(m["name"], res.outcome, res.violated, round(res.duration_s, 1), res.distinct_states))
            if res.outcome in (INVARIANT_VIOLATED, PROPERTY_VIOLATED):
                return Verdict(mutant, "killed", f"{m['name']}: {res.violated or res.outcome}", runs, "invariant")
            if res.outcome == RUNTIME_ERROR and "semantic analysis failed" in " ".join(res.errors):
                return Verdict(mutant, "invalid", None, runs)   # TLC could not load the copy: no verdict
            if res.outcome == RUNTIME_ERROR:
                err = (res.errors[0].splitlines()[0][:80] if res.errors else "runtime error")
                return Verdict(mutant, "killed", f"{m['name']}: TLC runtime error ({err})", runs, "runtime_error")
            if res.outcome in (PARSE_ERROR, SEMANTIC_ERROR):
                return Verdict(mutant, "invalid", None, runs)
        if any(r.outcome != "holds" for r in runs):
            return Verdict(mutant, "timeout", None, runs)   # a timeout or another no-verdict outcome
        for m in models:
            for w in WITNESSES.get(m["name"], ()):
                run = check_witness(folder, m, w, budget, workers)
                runs.append(run)
                if run.outcome == "unreached":
                    return Verdict(mutant, "killed", f"{m['name']}: witness {w} unreached", runs, "witness")
        if any(r.outcome != "reached" for r in runs if r.check == "witness"):
            return Verdict(mutant, "timeout", None, runs)
        for m in liveness or []:
            res = _tlc(folder, folder / m["spec"], folder / m["config"], m, budget, workers)
            runs.append(Run(m["name"], res.outcome, res.violated, round(res.duration_s, 1), res.distinct_states,
                            "liveness"))
            if res.outcome in (INVARIANT_VIOLATED, PROPERTY_VIOLATED):
                return Verdict(mutant, "killed", f"{m['name']}: {res.violated or res.outcome}", runs, "liveness")
            if res.outcome != "holds":
                return Verdict(mutant, "timeout", None, runs)
        v = Verdict(mutant, "survived", None, runs)
        v.classification = classify(v)
        return v
    finally:
        shutil.rmtree(folder, ignore_errors=True)


COLUMNS = (("killed", "invariant"), ("killed", "runtime_error"), ("killed", "witness"), ("killed", "liveness"),
           ("survived", "equivalent"), ("survived", "gap"), ("survived", "unclassified"), ("timeout", None),
           ("invalid", None))
HEADINGS = ("killed: invariant", "killed: TLC error", "killed: witness", "killed: liveness", "survived: equivalent",
            "survived: gap", "survived: unclassified", "timeout", "invalid")


def tally(verdicts: list[Verdict]) -> dict[tuple[str, str | None], int]:
    def key(v: Verdict):
        return v.status, v.layer if v.status == "killed" else v.classification if v.status == "survived" else None
    return {c: sum(key(v) == c for v in verdicts) for c in COLUMNS}


def score(verdicts: list[Verdict]) -> str:
    """Killed over the mutants that are not equivalent and have a verdict (issue 18's measure)."""
    t = tally(verdicts)
    killed = sum(n for (s, _), n in t.items() if s == "killed")
    counted = killed + t[("survived", "gap")] + t[("survived", "unclassified")]
    text = f"{killed}/{counted} ({100 * killed / counted:.0f}%)" if counted else "-"
    # and over every mutant, equivalent ones and timeouts included: the score without the hand-made reasons
    return text + (f"; of all mutants {killed}/{len(verdicts)} ({100 * killed / len(verdicts):.0f}%)" if verdicts else "")


def markdown(verdicts: list[Verdict], models: list[dict], budget: float, command: str,
             liveness: list[dict] | None = None, bound_guards: list[tuple[str, str]] | None = None) -> str:
    recorded = {m["name"]: m.get("distinct_states") for m in models}
    rows = ["| action | mutants | " + " | ".join(HEADINGS) + " |", "|---|---|" + "---|" * len(HEADINGS)]
    by_action: dict[str, list[Verdict]] = {}
    for v in verdicts:
        by_action.setdefault(v.mutant.action, []).append(v)
    for a, vs in by_action.items():
        t = tally(vs)
        rows.append(f"| {a} | {len(vs)} | " + " | ".join(str(t[c]) for c in COLUMNS) + " |")
    t = tally(verdicts)
    rows.append(f"| **all** | {len(verdicts)} | " + " | ".join(f"**{t[c]}**" for c in COLUMNS) + " |")
    witnessed = [f"{m['name']} ({', '.join(WITNESSES[m['name']])})" for m in models if WITNESSES.get(m["name"])]
    text = [f"Command: `{command}` (each `then` a later pass over some mutants, on its own models: the verdict "
            f"names the model that decided); {budget:g} s per TLC run. Each mutant runs until one layer kills it: "
            f"safety on (over all passes) {', '.join(m['name'] for m in models)}; then the witnesses (`~W` as the only invariant, reached by "
            f"the unmutated spec) {'; '.join(witnessed) or 'none'}; then liveness on "
            f"{', '.join(m['name'] for m in liveness or []) or 'none'}.", "",
            f"Score, killed over the mutants neither equivalent nor without a verdict: **{score(verdicts)}**.", "",
            *rows, ""]
    if bound_guards:
        text += ["Left out as model bounds (no mutant): " + "; ".join(f"{a} `{c}`" for a, c in bound_guards) + ".", ""]
    text += ["| mutant | line | conjunct | verdict |", "|---|---|---|---|"]
    for v in verdicts:
        if v.status == "killed":
            what = f"{v.layer}: {v.killed_by}"
        elif v.status == "survived":
            what = f"**survived, {v.classification or classify(v)}**: {v.reason(recorded)}"
        else:
            what = f"**{v.status}**: {v.reason(recorded)}"
        orig = v.mutant.original.replace("|", "\\|")
        orig = orig if len(orig) <= 70 else orig[:67] + "..."
        text.append(f"| {v.mutant.id} | {v.mutant.line} | `{orig}` | {what.replace('|', '/')} |")
    return "\n".join(text) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m lab.mutation_spec", description=__doc__.splitlines()[0])
    names_of = r"\w+(,\w+)*"   # names checked against the spec and the manifest before TLC starts
    ap.add_argument("--actions", default=",".join(MIGRATION_ACTIONS), type=text("actions", rf"all|{names_of}"),
                    help="comma-separated action names, or 'all'")
    ap.add_argument("--models", default=",".join(MIGRATION_MODELS), type=text("models", names_of), help="comma-separated holding models of spec/models.json")
    ap.add_argument("--liveness", default=",".join(LIVENESS_MODELS), type=text("models", rf"({names_of})?"),
                    help="comma-separated liveness models run on what safety and the witnesses left alive ('' for none)")
    ap.add_argument("--budget", type=positive_float, default=120.0, help="seconds per model run (a longer one is a timeout)")
    ap.add_argument("--jobs", type=int_at_least(1), default=1, help="mutants checked at once (each TLC on one worker)")
    ap.add_argument("--kinds", default="drop,negate", type=text("kinds", r"(drop|negate)(,(drop|negate))?"), help="mutant kinds: drop, negate or both")
    ap.add_argument("--ids", type=text("mutant ids", names_of), help="only these mutants (comma-separated ids as --list prints them)")
    ap.add_argument("--survivors", action="store_true",
                    help="only the mutants that survived in --out's earlier result; their new runs are added to it")
    ap.add_argument("--append", action="store_true",
                    help="add these mutants' verdicts to --out's earlier result (replacing those of the same id)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit without running TLC")
    ap.add_argument("--check-witnesses", action="store_true",
                    help="only check that the unmutated spec reaches every witness of --models, and exit")
    ap.add_argument("--markdown", action="store_true", help="print the result as a Markdown table")
    ap.add_argument("--out", default=str(OUT), type=output_file, help="where the JSON result goes")
    a = ap.parse_args(argv)
    return run_main(ap.prog, lambda: _main(a, argv if argv is not None else sys.argv[1:]), environment=(TLCSetupError,))


def _baseline(models: list[dict], budget: float, work: Path) -> list[Run]:
    runs = check_witnesses(models, budget, work)
    for r in runs:
        print(f"witness {r.model:22} {r.witness:32} {r.outcome} ({r.seconds:.0f}s)", flush=True)
    bad = [r for r in runs if r.outcome != "reached"]
    if bad:
        raise EnvironmentFailure("the unmutated spec does not reach witness " + ", ".join(
            f"{r.witness} on {r.model} ({r.outcome})" for r in bad) + ": it would kill every mutant")
    return runs


def verdict_json(v: Verdict, recorded: dict[str, int]) -> dict:
    return {**{k: x for k, x in asdict(v.mutant).items() if k != "source"}, "status": v.status,
            "killed_by": v.killed_by, "layer": v.layer, "classification": v.classification,
            "key": survivor_key(v.mutant), "runs": [asdict(r) for r in v.runs], "reason": v.reason(recorded)}


def verdict_from_json(d: dict) -> Verdict:
    """A verdict read back from spec.json; a survivor's class is read again from
    spec/rfc/mutation_survivors.json, so a reason written after the run counts."""
    v = Verdict(Mutant(**{k: d[k] for k in ("id", "action", "kind", "line", "original")}), d["status"], d["killed_by"],
                [Run(**r) for r in d["runs"]], d.get("layer"))
    v.classification = classify(v)
    return v


def merge(earlier: dict, result: dict) -> dict:
    """A later pass into an earlier result: a mutant run again (survivors, timeouts, on more
    models) takes its new verdict, with the runs of both passes; a mutant new to it is added."""
    new = {v["id"]: v for v in result["verdicts"]}
    for v in earlier["verdicts"]:
        n = new.pop(v["id"], None)
        if n is not None:
            runs = v["runs"] + n["runs"]
            v.clear()
            v.update(n, runs=runs)
    earlier["verdicts"] += list(new.values())
    seen = {(b["action"], b["conjunct"]) for b in earlier.get("bounds", [])}
    earlier["bounds"] = earlier.get("bounds", []) + [b for b in result["bounds"] if (b["action"], b["conjunct"]) not in seen]
    earlier["witness_baseline"] = earlier.get("witness_baseline", []) + result["witness_baseline"]
    earlier["command"] = earlier["command"] + "; then " + result["command"]
    earlier["seconds"] = round(earlier["seconds"] + result["seconds"], 1)
    for k in ("models", "liveness"):
        earlier[k] = list(dict.fromkeys(earlier.get(k, []) + result[k]))
    earlier.setdefault("witnesses", {}).update(result["witnesses"])
    return earlier


def _main(a, argv: list[str]) -> int:
    lines = (SPEC_DIR / SPEC_FILE).read_text().splitlines()
    conjuncts = parse_actions(lines)
    acts = action_names(conjuncts)
    only = None if a.actions == "all" else {x.strip() for x in a.actions.split(",") if x.strip()}
    if only is not None and only - acts:
        raise BadInput(f"--actions: no action {', '.join(sorted(only - acts))} in spec/rfc/{SPEC_FILE}")
    kinds = {x.strip() for x in a.kinds.split(",") if x.strip()}
    if not kinds or kinds - {"drop", "negate"}:
        raise BadInput(f"--kinds: wants drop, negate or drop,negate, not {a.kinds!r}")
    models = holding_models([x.strip() for x in a.models.split(",") if x.strip()])
    liveness = holding_models([x.strip() for x in a.liveness.split(",") if x.strip()], liveness=True) \
        if a.liveness.strip() else []
    survivor_reasons()   # a malformed reasons file is bad input before anything runs
    mutants = [m for m in generate(lines, only) if m.kind in kinds]
    earlier = None
    if a.survivors or a.append:
        if not Path(a.out).is_file():
            raise BadInput(f"--{'survivors' if a.survivors else 'append'}: no earlier result {a.out}")
        earlier = json.loads(Path(a.out).read_text())
    if a.survivors:
        again = {v["id"] for v in earlier["verdicts"] if v["status"] in ("survived", "timeout")}
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
        for act, c in bounds(lines, only):
            print(f"{'(bound) ' + act:32}            {c}")
        return HOLDS
    work = Path(tempfile.mkdtemp(prefix="mutation-spec-"))
    verdicts: list[Verdict] = []
    start = time.monotonic()
    try:
        baseline = _baseline(models, a.budget, work)
        if a.check_witnesses:
            print(f"every witness reached by the unmutated spec ({len(baseline)} on {len(models)} models)")
            return HOLDS
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:
            for v in pool.map(lambda m: run_mutant(m, models, a.budget, work, liveness=liveness), mutants):
                verdicts.append(v)
                print(f"{v.mutant.id:32} {v.status:9} {v.layer or v.classification or ''} {v.killed_by or ''} "
                      f"({sum(r.seconds for r in v.runs):.0f}s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = ("python -m lab.mutation_spec " + shlex.join(argv)).strip()
    recorded = {m["name"]: m.get("distinct_states") for m in models}
    result = {
        "command": command, "budget_s": a.budget, "models": [m["name"] for m in models],
        "liveness": [m["name"] for m in liveness], "witnesses": {m["name"]: list(WITNESSES.get(m["name"], ()))
                                                                 for m in models},
        "witness_baseline": [asdict(r) for r in baseline],
        "bounds": [{"action": x, "conjunct": c} for x, c in bounds(lines, only)],
        "seconds": round(time.monotonic() - start, 1),
        "verdicts": [verdict_json(v, recorded) for v in verdicts],
    }
    if earlier is not None:
        result = merge(earlier, result)
        verdicts = [verdict_from_json(v) for v in result["verdicts"]]
        models = holding_models(result["models"])
        liveness = holding_models(result["liveness"], liveness=True) if result["liveness"] else []
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    if a.markdown:
        print(markdown(verdicts, models, a.budget, result["command"], liveness,
                       [(b["action"], b["conjunct"]) for b in result["bounds"]]))
    t = tally(verdicts)
    print(f"spec mutants: {len(verdicts)}; killed by invariant {t[('killed', 'invariant')]}, TLC error "
          f"{t[('killed', 'runtime_error')]}, witness {t[('killed', 'witness')]}, liveness {t[('killed', 'liveness')]}; "
          f"survived equivalent {t[('survived', 'equivalent')]}, gap {t[('survived', 'gap')]}, unclassified "
          f"{t[('survived', 'unclassified')]}; timeout {t[('timeout', None)]}, invalid {t[('invalid', None)]}; "
          f"score {score(verdicts)} ({result['seconds']:.0f}s; {out})")
    if t[("survived", "gap")] or t[("survived", "unclassified")]:
        return VIOLATED
    if t[("timeout", None)] or t[("invalid", None)]:
        return ENVIRONMENT
    return HOLDS


if __name__ == "__main__":
    sys.exit(main())
