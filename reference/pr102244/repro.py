"""Reproductions of the PR #102244 findings as a ClickHouse integration test would write them: a
TOML file of steps (SQL on a named replica, kills, restarts, waits, expected answers) that one
driver runs on the reference's PR design (reference/pr102244/repro_reference.py) and another,
unchanged, over ClickHouse's HTTP interface (agreement/pr102244_repro.py).

The expectations are what a correct system answers; a reproduction shows its finding when an
expectation fails on the code as it is and every expectation holds with the fix. The files are
in reference/pr102244/repro/, one per finding; this module states their schema once (jsonschema:
a bad file gets one line naming the field) and sorts their statements into the base protocol's
(which any ReplicatedMergeTree server runs) and the PR's selective ones.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import jsonschema

REPRO_DIR = Path(__file__).parent / "repro"

_REPLICA = {"type": "string", "pattern": "^r[0-9]+$"}
KINDS = ("sql", "kill", "restart", "until", "sleep", "expect")
_STEP = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "why": {"type": "string"},          # for the reader: what this step forces
        "on": _REPLICA,                      # the replica a statement or a wait runs on
        "sql": {"type": "string", "minLength": 1},
        "kill": _REPLICA,                    # kill -9 of a replica's server
        "restart": _REPLICA,                 # start a killed replica again
        "until": {"type": "string", "minLength": 1},   # a query answering 1 when the wait is over
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
        "expect": {"type": "string", "minLength": 1},  # the query whose answer is checked
        "equals": {"type": ["string", "integer"]},     # its correct answer
        "name": {"type": "string", "minLength": 1},    # the expectation's name in reports
        "sleep": {"type": "number", "exclusiveMinimum": 0, "maximum": 600},   # seconds (a background task's period)
        "refusable": {"type": "boolean"},   # a statement the fix may refuse: its error is reported, not fatal
        "background": {"type": "boolean"},  # a statement that blocks (at a pause failpoint): run on, joined later
    },
    # exactly one kind: a statement, a kill, a restart, a wait, a sleep, an expectation
    "oneOf": [
        {"required": ["sql", "on"], "not": {"anyOf": [{"required": [k]} for k in KINDS if k != "sql"]}},
        {"required": ["kill"], "not": {"anyOf": [{"required": [k]} for k in (*KINDS, "on") if k != "kill"]}},
        {"required": ["restart"], "not": {"anyOf": [{"required": [k]} for k in (*KINDS, "on") if k != "restart"]}},
        {"required": ["until", "on"], "not": {"anyOf": [{"required": [k]} for k in KINDS if k != "until"]}},
        {"required": ["sleep"], "not": {"anyOf": [{"required": [k]} for k in (*KINDS, "on") if k != "sleep"]}},
        {"required": ["expect", "on", "equals", "name"],
         "not": {"anyOf": [{"required": [k]} for k in KINDS if k != "expect"]}},
    ],
}
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["finding", "title", "replicas", "invariant", "code", "fix", "step"],
    "properties": {
        "finding": {"type": "string", "pattern": "^PR-F[0-9]+$"},
        "title": {"type": "string", "minLength": 1},
        "replicas": {"type": "array", "items": _REPLICA, "minItems": 1, "uniqueItems": True},
        "invariant": {"type": "string", "pattern": "^[A-Za-z]+Inv$"},   # the history checkers' (checkers/invariants.py) the run breaks
        # PR102244Code.tla's Bugs: `code` is the behaviour of the code the scenario runs into,
        # `fix` the strings whose removal is the fix (a subset of `code`)
        "code": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
        "fix": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
        "step": {"type": "array", "items": _STEP, "minItems": 1},
    },
}

# Statements of the PR's selective replication (a server without it refuses them); everything
# else a scenario says is the base protocol's (CREATE TABLE, INSERT, SELECT, SYSTEM STOP FETCHES).
SELECTIVE = re.compile(r"\bSYSTEM\s+(MIGRATE\s+PARTITION|SYNC\s+SELECTIVE|START\s+SELECTIVE|STOP\s+SELECTIVE)"
                       r"|\breplication_factor\b|\bmigration_timeout_seconds\b|\bsystem\.selective_"
                       r"|\bFAILPOINT\s+selective_", re.I)


class ReproError(ValueError):
    """A reproduction file that does not follow the schema (bad input)."""


@dataclass(frozen=True)
class Step:
    index: int
    kind: str                    # one of KINDS
    on: str | None = None
    text: str = ""               # the statement, the wait's query or the expectation's query
    equals: str | None = None
    name: str | None = None
    timeout_s: float = 60.0
    why: str = ""
    seconds: float = 0.0         # a sleep's
    refusable: bool = False      # a statement whose refusal is an answer, not a failure of the run
    background: bool = False     # a statement the run does not wait for (joined before the expectations)
    @property
    def selective(self) -> bool:
        return bool(SELECTIVE.search(self.text))

    def describe(self) -> str:
        where = f" on {self.on}" if self.on else ""
        if self.kind in ("kill", "restart"):
            return f"step {self.index}: {self.kind} {self.on}"
        if self.kind == "sleep":
            return f"step {self.index}: sleep {self.seconds:g} s"
        if self.kind == "expect":
            return f"step {self.index}: expect {self.name}{where}: {self.text} = {self.equals}"
        if self.kind == "until":
            return f"step {self.index}: wait{where} until {self.text}"
        return f"step {self.index}{where}: {self.text}"


@dataclass(frozen=True)
class Repro:
    path: Path
    finding: str
    title: str
    replicas: tuple[str, ...]
    invariant: str
    code: frozenset[str]
    fix: frozenset[str]
    steps: tuple[Step, ...]

    @property
    def expectations(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "expect"]


def load(path: str | Path) -> Repro:
    """The reproduction in `path`, checked against SCHEMA and for replicas it does not declare."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ReproError(f"{path}: cannot read: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise ReproError(f"{path}: not TOML: {e}") from e
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(SCHEMA).iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "top level"
        raise ReproError(f"{path}: {where}: {error.message}")
    if not set(data["fix"]) <= set(data["code"]):
        raise ReproError(f"{path}: fix {sorted(set(data['fix']) - set(data['code']))} is not in code")
    steps = []
    for i, s in enumerate(data["step"], 1):
        kind = next(k for k in KINDS if k in s)
        on = s.get("on") or s.get("kill") or s.get("restart")
        if kind != "sleep" and on not in data["replicas"]:
            raise ReproError(f"{path}: step/{i}: replica {on!r} is not in replicas {data['replicas']}")
        steps.append(Step(i, kind, on, s.get(kind, "") if kind in ("sql", "until", "expect") else "",
                          str(s["equals"]) if "equals" in s else None, s.get("name"),
                          float(s.get("timeout_s", 60.0)), s.get("why", ""), float(s.get("sleep", 0.0)),
                          bool(s.get("refusable", False)), bool(s.get("background", False))))
    return Repro(path, data["finding"], data["title"], tuple(data["replicas"]), data["invariant"],
                 frozenset(data["code"]), frozenset(data["fix"]), tuple(steps))


def all_repros(folder: Path = REPRO_DIR) -> list[Repro]:
    return [load(p) for p in sorted(folder.glob("*.toml"))]
