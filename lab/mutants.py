"""mutmut's mutants as the lab reads them: a mutant's function and its stable key (what neither
moves when other code is edited, as mutmut's numbers do), the changed line read from mutmut's
trampolined copy, mutmut's exit codes as verdicts, and which history refusals name only a logged
exception. Shared by the layers (lab/mutation_layers.py) and the report (lab/mutation_report.py)."""

from __future__ import annotations

from pathlib import Path

MUTANTS = Path(__file__).resolve().parents[1] / "mutants"


# mutmut 3's exit codes (mutmut/stats.py status_by_exit_code)
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
           24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", None: "not run"}


def function_of(key: str) -> str:
    """`coordinator_switch` or `Replica.replica_write_insert` from mutmut's mutant name
    (`protocol.migration.x_coordinator_switch__mutmut_3`, `...xǁReplicaǁreplica_write_insert__mutmut_7`)."""
    fn = key.rsplit("__mutmut_", 1)[0].split(".")[-1]
    if fn.startswith("xǁ"):
        return ".".join(fn[2:].split("ǁ"))
    return fn[2:] if fn.startswith("x_") else fn


def reading_key(module: str, function: str, before: str, after: str) -> tuple[str, str, str, str]:
    """What a survivor is known by in lab/mutation_reading.toml: module, function and the mutated
    line before and after, none of which moves when other code is edited (mutmut's numbers do)."""
    return module, function, " ".join(before.split()), " ".join(after.split())


def mutant_diffs(module: str, keys: list[str], root: Path = MUTANTS) -> dict[str, tuple[str, str, bool]]:
    """Per mutant: the changed line (original, mutated) read from mutmut's trampolined copy of the
    module, where each mutant is a function `x_<fn>__mutmut_<n>` (or a method `xǁClassǁ<fn>__mutmut_<n>`)
    beside its `..._orig`, and whether only an exception's text changed (`message_only`)."""
    import ast
    import difflib

    path = root / module
    if not path.is_file():
        return {}
    source = path.read_text()
    lines = source.splitlines()   # (ast.get_source_segment re-reads the whole file per call: minutes here)
    funcs = {n.name: n for n in ast.walk(ast.parse(source))
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in n.name}
    out = {}
    for key in keys:
        name = key.split(".")[-1]
        orig, mut = funcs.get(name.rsplit("__mutmut_", 1)[0] + "__mutmut_orig"), funcs.get(name)
        if not orig or not mut:
            continue
        # from the def line (a default argument is mutated there), the mutant's name read as the original's
        plain = function_of(orig.name).split(".")[-1] + "("
        a = [x.split("# type: ignore # mutmut generated")[0].rstrip().replace(orig.name + "(", plain)
             for x in lines[orig.lineno - 1:orig.end_lineno]]
        b = [x.split("# type: ignore # mutmut generated")[0].rstrip().replace(mut.name + "(", plain)
             for x in lines[mut.lineno - 1:mut.end_lineno]]
        diff = list(difflib.unified_diff(a, b, lineterm="", n=0))[2:]
        minus = [x for x in diff if x.startswith("-")]
        plus = [x for x in diff if x.startswith("+")]
        out[key] = (minus[0][1:].strip() if minus else "", plus[0][1:].strip() if plus else "",
                    message_only(orig, mut))
    return out


def message_only(orig, mut) -> bool:
    """True when the two function bodies differ only in string constants (or a string turned into
    None) inside `raise` statements: the text of an exception, which no code of reference/ reads
    (GuardFailed's action and reason are for people; grep `.reason`). The rule by which surviving
    error-text mutants are equivalent (a test matching the text kills its mutant before this is
    asked), decided on the syntax tree so that a condition sharing the line with a raise is not
    taken for its text, nor a dropped argument (GuardFailed(text) raises TypeError) for a text."""
    import ast

    diffs: list[tuple[list, object, object]] = []

    def walk(x, y, inside: list) -> None:
        if type(x) is not type(y):
            diffs.append((inside, x, y))
            return
        if isinstance(x, ast.AST):
            for field in x._fields:
                walk(getattr(x, field), getattr(y, field), inside + [x])
        elif isinstance(x, list):
            if len(x) != len(y):
                diffs.append((inside, x, y))
                return
            for u, v in zip(x, y):
                walk(u, v, inside)
        elif x != y:
            diffs.append((inside, x, y))

    walk(orig.body, mut.body, [])

    def textual(n) -> bool:
        return (isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant) and isinstance(n.value, str))
                or (isinstance(n, ast.Constant) and n.value is None) or isinstance(n, str))

    def ok(inside, x, y) -> bool:
        raises = [i for i, a in enumerate(inside) if isinstance(a, ast.Raise)]
        # Under the raise only the exception's call, an f-string and its literal parts: a key or a
        # call inside `{...}` (mig['dst'] -> mig['XXdstXX']) is evaluated, it may raise.
        if not raises or not all(isinstance(a, (ast.Call, ast.JoinedStr, ast.Constant)) for a in inside[raises[-1] + 1:]):
            return False
        if isinstance(inside[-1], ast.Constant):   # a constant's value: str (in an f-string too) or None for it
            return all(isinstance(v, str) or v is None for v in (x, y))
        return textual(x) and textual(y)

    return bool(diffs) and all(ok(*d) for d in diffs)


# The oracle's check that refuses a history for an exception logged in it (ClickHouse's
# LOGICAL_ERROR), not for what the replicas hold or the clients were told: a kill through it alone
# is told apart in `racing_invariants` and in the report.
LOGICAL_ERRORS = "NoLogicalErrorsInv"


def only_logical_errors(invariants) -> bool:
    """A refusal by NoLogicalErrorsInv and by no protocol invariant."""
    return set(invariants) == {LOGICAL_ERRORS}
