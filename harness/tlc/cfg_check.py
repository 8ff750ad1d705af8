"""A model's .cfg held to its module before TLC starts (issue 41): TLC 2.15 accepts some mismatches
in silence and reports the others only after the JVM started, as a run-time error.

Measured on TLC 2.15 with spec/rfc/MCRetry.cfg (2026-11-30): a constant the module does not
declare (`Foo = 1`) and a constant assigned twice (`RF = 2`, then `RF = 3`: TLC takes the last)
are accepted in silence, and so is a switch name no action tests (`Bugs = {"no_such_switch"}`:
the broken variant checks the fixed protocol); an undefined invariant, a constant left
unassigned and a substitution by an undefined name are refused by TLC as run-time errors, which
the runner could only report as "no verdict". Each is bad input, said here in one line naming the
cfg, its line and the name.

The module side is read with a few regular expressions, not a TLA+ parser: its CONSTANT(S)
declarations and its top-level definitions (`Name ==`, `Name(x) ==`, `Name[x \\in S] ==`), over
the modules it EXTENDS, found where TLC looks (runner.library_folders; TLC's standard modules
define nothing a cfg of this project names). Every cfg under spec/ passes it (tests/harness/test_cfg_check.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.tlc.runner import library_folders

KEYWORDS = {"CONSTANT", "CONSTANTS", "INIT", "NEXT", "SPECIFICATION", "INVARIANT", "INVARIANTS", "PROPERTY",
            "PROPERTIES", "SYMMETRY", "VIEW", "CONSTRAINT", "CONSTRAINTS", "ACTION_CONSTRAINT", "ACTION_CONSTRAINTS",
            "CHECK_DEADLOCK", "POSTCONDITION", "ALIAS"}
# Sections whose entries are names the module must define.
NAMED = KEYWORDS - {"CONSTANT", "CONSTANTS", "CHECK_DEADLOCK"}
# Constants whose value is a set of switch names the module tests by string: each name must occur
# in the module's text as a string, or the switch turns nothing on.
SWITCH_SETS = {"Bugs", "Fixes", "Readings"}


class CfgMismatch(ValueError):
    """The cfg names something its module does not have, or leaves a constant out."""


# TLC's standard modules (and the community's): they declare no constant a cfg of this project sets.
STANDARD = {"Naturals", "Integers", "Reals", "Sequences", "FiniteSets", "Bags", "TLC", "TLCExt", "RealTime", "Json",
            "Randomization", "IOUtils", "SequencesExt", "FiniteSetsExt", "Functions", "Folds", "Bitwise", "CSV"}


@dataclass
class Module:
    constants: set[str] = field(default_factory=set)
    definitions: set[str] = field(default_factory=set)
    strings: set[str] = field(default_factory=set)
    # a module it EXTENDS was not found where TLC looks from the spec folders: what it declares is
    # unknown, so a name the cfg sets may be its (a trace module TLC is given a library path for)
    incomplete: bool = False


def strip_comments(text: str) -> str:
    """TLA+ without its comments: `(* ... *)` (nested) and `\\*` to the end of the line, newlines
    kept so that line numbers stay."""
    out, depth, i = [], 0, 0
    while i < len(text):
        if text.startswith("(*", i):
            depth, i = depth + 1, i + 2
        elif depth and text.startswith("*)", i):
            depth, i = depth - 1, i + 2
        elif depth:
            out.append("\n" if text[i] == "\n" else " ")
            i += 1
        elif text.startswith("\\*", i):
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


_DEFINITION = re.compile(r"^(?:LOCAL\s+)?([A-Za-z_]\w*)\s*(?:\([^)]*\)|\[[^\]]*\])?\s*==", re.M)
_EXTENDS = re.compile(r"^EXTENDS\s+([\w\s,]+?)\s*$", re.M)
_CONSTANTS = re.compile(r"^CONSTANTS?\b(.*?)(?=^\S)", re.M | re.S)


def read_module(path: Path, seen: set[Path] | None = None) -> Module:
    """The constants, definitions and string literals of `path` and of the modules it EXTENDS that
    are beside it or on TLC's library path."""
    seen = set() if seen is None else seen
    seen.add(path)
    raw = path.read_text()
    text = strip_comments(raw)
    m = Module(strings=set(re.findall(r'"([^"\n]*)"', text)))
    body = text.split("\n", 1)[1] if text.startswith("-") else text
    for block in _CONSTANTS.findall(body + "\nEND"):
        m.constants.update(re.findall(r"([A-Za-z_]\w*)\s*(?:\([_,\s]*\))?\s*(?:,|$)", block.strip(), re.M))
    m.definitions.update(_DEFINITION.findall(text))
    for names in _EXTENDS.findall(text):
        for name in (n.strip() for n in names.split(",")):
            found = [f / f"{name}.tla" for f in (path.parent, *library_folders(path)) if (f / f"{name}.tla").is_file()]
            if not found:
                m.incomplete |= name not in STANDARD
            elif found[0] not in seen:
                sub = read_module(found[0], seen)
                m.constants |= sub.constants
                m.definitions |= sub.definitions
                m.strings |= sub.strings
                m.incomplete |= sub.incomplete
    return m


def _cfg_sections(text: str) -> list[tuple[str, int, str]]:
    """(keyword, line of the keyword, the section's text) in order."""
    sections, current, start, lines = [], None, 0, []
    for no, line in enumerate(text.splitlines(), 1):
        word = line.split(None, 1)[0] if line.strip() else ""
        if word in KEYWORDS:
            if current:
                sections.append((current, start, "\n".join(lines)))
            current, start, lines = word, no, [line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""]
        elif current:
            lines.append(line)
    if current:
        sections.append((current, start, "\n".join(lines)))
    return sections


_ASSIGN = re.compile(r'([A-Za-z_]\w*)\s*(=|<-)\s*(\{[^{}]*\}|"[^"]*"|\[\w+\]\s*\w+|[\w.]+)')


def check_cfg(module_path: Path, cfg_path: Path) -> None:
    """Raise CfgMismatch naming the first thing in the cfg its module does not have."""
    module = read_module(Path(module_path))
    text = strip_comments(Path(cfg_path).read_text())
    where = Path(cfg_path).name
    known = module.constants | module.definitions
    assigned: dict[str, int] = {}
    for keyword, line, body in _cfg_sections(text):
        if keyword in ("CONSTANT", "CONSTANTS"):
            for off, row in enumerate(body.splitlines()):
                for name, op, value in _ASSIGN.findall(row):
                    no = line + off
                    if name in assigned:
                        raise CfgMismatch(f"{where}:{no}: {name} is assigned twice (line {assigned[name]} too): "
                                          "TLC would take the last in silence")
                    assigned[name] = no
                    if name not in known and not module.incomplete:
                        raise CfgMismatch(f"{where}:{no}: {name} is no constant or definition of "
                                          f"{Path(module_path).stem}")
                    if op == "<-" and value.split("]")[-1].strip() not in module.definitions and not module.incomplete:
                        raise CfgMismatch(f"{where}:{no}: {name} <- {value}: {value} is not defined")
                    if name in SWITCH_SETS and op == "=":
                        for switch in re.findall(r'"([^"]*)"', value):
                            if switch not in module.strings and not module.incomplete:
                                raise CfgMismatch(f"{where}:{no}: {name} names {switch!r}, which "
                                                  f"{Path(module_path).stem} never tests: it would turn nothing on")
        elif keyword in NAMED:
            for off, row in enumerate(body.splitlines()):
                for name in re.findall(r"[A-Za-z_]\w*", row):
                    if name not in module.definitions and not module.incomplete:
                        raise CfgMismatch(f"{where}:{line + off}: {keyword} {name} is not defined in "
                                          f"{Path(module_path).stem}")
    missing = sorted(module.constants - set(assigned))
    if missing and not module.incomplete:
        raise CfgMismatch(f"{where}: constant{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                          f"of {Path(module_path).stem} not assigned")
