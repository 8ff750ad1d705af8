"""Every command declares its inputs one way, and a generated bad-input suite holds each declaration
to the contract (issue 41).

The one way: the command's parser is a `harness.cli_args.Parser`, and every option or argument that
takes a value has `choices` or a type of the vocabulary in harness/cli_args.py, which says what it
declares (`declares`: a range, a set of names, a path's kind, a JSON file's schema, a text's
pattern). A value-taking option with a bare `int`, `str` or `Path` (or none) is a declaration
missing, and fails here by name. The commands are found, not listed: every file of the product and
the lab that runs as a program (`if __name__ == "__main__"`) is one.

The suite: for each declared option, Hypothesis draws values outside its declaration (a number out
of range or not a number, a name nobody has, a path of the wrong kind, text off its pattern, a JSON
file malformed or off its schema) and parses them with the command's own parser, the rest of the
command line filled with values the declaration accepts. Each must be refused with exit 2 and one
line that names the option, and nothing written. Parsing is what a command does first, so this is
the refusal "before anything runs"; test_every_command_refuses_in_its_own_process checks the same
on each command run as a process.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import ROOT, no_traceback, run_cli
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from harness.cli_args import BadInput, Declared, Parser, declaration

FOLDERS = ["agreement", "checkers", "conformance", "harness", "history", "lab", "pyspark_jobs", "reference", "traces"]
# The cfg generators run as scripts (`python spec/rfc/gen_cfgs.py`), with the standard library only:
# their one option is checked as a process (test_the_cfg_generators_refuse_what_they_do_not_know).
GENERATORS = ["spec/rfc/gen_cfgs.py", "spec/parallel_replicas/gen_cfgs.py", "spec/part_moves/gen_cfgs.py"]


def command_modules() -> list[str]:
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" in path.parts or "__pycache__" in path.parts:
                continue
            if re.search(r'^if __name__ == "__main__"', path.read_text(), re.M):
                rel = path.relative_to(ROOT).with_suffix("")
                parts = list(rel.parts[:-1]) if rel.name == "__main__" else list(rel.parts)
                found.append(".".join(parts))
    return sorted(set(found))


COMMANDS = command_modules()


def declared(module: str) -> Parser:
    """The command's parser as main() builds it, stopped at its parse_args: nothing runs."""
    mod = importlib.import_module(module + ".__main__" if (ROOT / module.replace(".", "/") / "__main__.py").is_file()
                                  else module)
    with declaration(), contextlib.redirect_stdout(io.StringIO()):
        try:
            mod.main([])
        except Declared as d:
            return d.parser
    raise AssertionError(f"{module}: main([]) returned without parsing its arguments with a harness Parser")


@dataclass(frozen=True)
class Input:
    command: str
    path: tuple[str, ...]          # subcommands leading to the parser that has it
    chain: tuple                   # the parsers from the command's own to the one that has it
    action: argparse.Action

    @property
    def parser(self) -> argparse.ArgumentParser:
        return self.chain[-1]

    @property
    def name(self) -> str:
        return self.action.option_strings[0] if self.action.option_strings else (self.action.metavar or self.action.dest)

    def __str__(self) -> str:
        return " ".join([self.command, *self.path, self.name])


def inputs_of(command: str, parser: argparse.ArgumentParser, path=(), chain=()) -> list[Input]:
    out, chain = [], (*chain, parser)
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                out += inputs_of(command, sub, (*path, name), chain)
        elif a.nargs != 0 and not isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
            out.append(Input(command, path, chain, a))
    return out


PARSERS = {c: declared(c) for c in COMMANDS}
INPUTS = [i for c in COMMANDS for i in inputs_of(c, PARSERS[c])]


def declaration_of(i: Input):
    return ("choices", tuple(i.action.choices)) if i.action.choices is not None else \
        getattr(i.action.type, "declares", None)


def test_the_commands_are_found():
    assert {"reference", "traces", "conformance", "harness.tlc", "harness.check_models", "pyspark_jobs.spark_check",
            "checkers.duckdb_check", "lab.faults"} <= set(COMMANDS)
    assert len(COMMANDS) >= 30 and len(INPUTS) >= 150


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_declares_with_the_one_parser(command):
    def walk(p, path=()):
        assert isinstance(p, Parser), f"{command} {' '.join(path)}: a {type(p).__name__}, not harness.cli_args.Parser"
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, (*path, name))
    walk(PARSERS[command])


def test_every_value_an_option_takes_is_declared():
    missing = [str(i) for i in INPUTS if declaration_of(i) is None]
    assert missing == [], f"options taking a value with no declared type or choices: {missing}"


# --- values inside and outside each declaration --------------------------------------------------

def _file(tmp: Path, name: str, content: str = "x") -> str:
    p = tmp / name
    p.write_text(content)
    return str(p)


def good(decl, tmp: Path, draw) -> str:
    kind = decl[0]
    if kind == "choices":
        return str(decl[1][0])
    if kind in ("integer", "integers"):
        return str(decl[1])
    if kind == "number":
        return f"{decl[1]:g}"
    if kind in ("one of", "names"):
        return decl[1][0]
    if kind == "text":
        return draw(st.from_regex(decl[1], fullmatch=True).filter(lambda s: not s.startswith("-")))
    if kind == "json file":
        return _file(tmp, "good.json", json.dumps(decl[1]["examples"][0]))
    return {"fraction": "0.5", "positive number": "1", "zk address": "127.0.0.1:2181", "znode path": "/t",
            "output folder": str(tmp / "out"), "output file": str(tmp / "out.json"), "output file or nothing": "",
            "existing file": _file(tmp, "exists.txt"), "existing folder": str(tmp)}[kind]


NOT_INT = st.text(min_size=1, max_size=8).filter(lambda s: not re.fullmatch(r"\s*[-+]?\d+\s*", s))
NOT_NUMBER = st.sampled_from(["nan", "inf", "-inf", "one", "1,5", "", "0x"])


def bad(decl, tmp: Path):
    """A strategy of values the declaration refuses."""
    kind = decl[0]
    if kind == "choices":
        known = {str(c) for c in decl[1]}
        return st.text(min_size=1, max_size=12).filter(lambda s: s not in known and not s.startswith("-"))
    if kind == "integer":
        return st.one_of(st.integers(max_value=decl[1] - 1).map(str), NOT_INT.filter(lambda s: not s.startswith("-")))
    if kind == "integers":
        return st.one_of(st.integers(max_value=decl[1] - 1).map(lambda v: f"{decl[1]},{v}"),
                         st.sampled_from(["", ",", f"{decl[1]},", "a,b"]))
    if kind == "number":
        return st.one_of(st.floats(max_value=decl[1], exclude_max=True, allow_nan=False).map(repr), NOT_NUMBER)
    if kind == "fraction":
        return st.one_of(st.floats(min_value=1, exclude_min=True, allow_infinity=False).map(repr),
                         st.floats(max_value=0, exclude_max=True, allow_infinity=False).map(repr), NOT_NUMBER)
    if kind == "positive number":
        return st.one_of(st.floats(max_value=0, allow_infinity=False, allow_nan=False).map(repr), NOT_NUMBER)
    if kind in ("one of", "names"):
        known = set(decl[1])
        unknown = st.from_regex(r"[a-z_]{1,12}", fullmatch=True).filter(lambda s: s not in known)
        if kind == "one of":
            return unknown
        return st.one_of(unknown.map(lambda s: f"{decl[1][0]},{s}"), st.just(f"{decl[1][0]},{decl[1][0]}"),
                         st.just(""), st.just(f"{decl[1][0]},"))
    if kind == "text":
        return st.text(max_size=16).filter(lambda s: not re.fullmatch(decl[1], s) and not s.startswith("-"))
    if kind == "zk address":
        return st.sampled_from(["localhost", "127.0.0.1:0", "127.0.0.1:70000", ":2181", "h:p", "127.0.0.1:2181/",
                                "127.0.0.1:2181//x", ""])
    if kind == "znode path":
        return st.sampled_from(["t", "t/x", "/t/", "//t", ""])
    if kind == "refused":
        return st.text(max_size=12).filter(lambda s: not s.startswith("-"))
    a_file = _file(tmp, "a_file")
    if kind == "output folder":
        return st.sampled_from([a_file, f"{a_file}/under", "/proc/version/x"])
    if kind in ("output file", "output file or nothing"):
        return st.sampled_from([str(tmp), f"{a_file}/under.json", "/proc/version/x.json"])
    if kind == "existing file":
        return st.sampled_from([str(tmp / "gone.txt"), str(tmp)])
    if kind == "existing folder":
        return st.sampled_from([str(tmp / "gone"), a_file, "hdfs://x/y"])
    if kind == "json file":
        return _bad_json(decl[1], tmp)
    raise AssertionError(f"no bad values for a declaration of kind {kind!r}")


def _bad_json(schema: dict, tmp: Path):
    """Files off the schema: not JSON, a document of another type, the schema's example with a
    required key dropped or a property of another type."""
    example = schema["examples"][0]
    docs = [[], "text", 1, None]
    docs += [{k: v for k, v in example.items() if k != drop} for drop in schema.get("required", []) if drop in example]
    for key, prop in schema.get("properties", {}).items():
        wrong = {"string": 7, "array": "x", "object": [], "integer": "x"}.get(prop.get("type"), {"x": 1})
        docs.append({**example, key: wrong})
    texts = [json.dumps(d) for d in docs] + ["{", "not json", "\ufffe\x00"]
    return st.sampled_from(texts).map(lambda t: _file(tmp, "bad.json", t))


def argv_for(i: Input, value: str, tmp: Path, draw) -> list[str]:
    """The whole command line: each parser's required inputs on the way filled in, the subcommands
    that lead to i's parser, and i given `value`."""
    argv = []
    for depth, parser in enumerate(i.chain):
        for other in parser._actions:   # in order: a positional's place is its value's
            if isinstance(other, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if other is i.action:
                v = value
            elif other.required or (not other.option_strings and other.nargs not in ("?", "*")):
                v = good(declaration_of(Input(i.command, i.path, i.chain, other)), tmp, draw)
            else:
                continue
            argv += [other.option_strings[0], v] if other.option_strings else [v]
        if depth < len(i.path):
            argv.append(i.path[depth])
    return argv


def refusal(parser: Parser, argv: list[str]) -> tuple[int | None, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(argv)
        except SystemExit as e:
            return e.code, err.getvalue()
        except BadInput as e:   # the Spark job's parser: guarded() prints this line and exits 2
            return 2, f"{parser.prog}: bad input: {e}\n"
    return None, err.getvalue()


@pytest.mark.parametrize("i", INPUTS, ids=str)
@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_value_outside_the_declaration_is_refused_in_one_line_naming_the_option(i, data, tmp_path_factory):
    decl = declaration_of(i)
    assert decl is not None, f"{i}: no declared type or choices, so no value outside it to try"
    tmp = tmp_path_factory.mktemp("bad")
    value = data.draw(bad(decl, tmp), label="bad value")
    argv = argv_for(i, value, tmp, data.draw)
    before = sorted(p.name for p in tmp.rglob("*"))
    code, err = refusal(i.chain[0], argv)
    assert code == 2, f"{i.command} {argv}: {'accepted' if code is None else f'exit {code}'}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and no_traceback(err), err
    named = [s for s in (*i.action.option_strings, i.action.metavar, i.action.dest) if s]
    assert any(f"argument {n}" in lines[0] or f"argument {n}/" in lines[0] or f"/{n}:" in lines[0] for n in named), \
        (argv, lines[0])
    assert sorted(p.name for p in tmp.rglob("*")) == before, f"{argv} wrote into {tmp}"


# --- as processes --------------------------------------------------------------------------------

def first_ranged(command: str) -> Input | None:
    """The command's first option with a range or a path kind, without subcommands."""
    for i in INPUTS:
        if i.command == command and i.action.option_strings and (declaration_of(i) or ("",))[0] in (
                "integer", "number", "fraction", "positive number", "choices", "output file", "existing folder"):
            return i
    return None


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_in_its_own_process(command, tmp_path):
    """`python -m COMMAND` with an unknown option, and with one declared value out of range: exit 2,
    one line, no traceback, nothing written (the process's whole path, run_main included)."""
    module = ["pyspark_jobs/spark_check.py"] if command == "pyspark_jobs.spark_check" else ["-m", command]
    top = PARSERS[command]
    required = [a for a in top._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
                and (a.required or (not a.option_strings and a.nargs not in ("?", "*")))]
    filled = [x for a in required for x in ([a.option_strings[0]] if a.option_strings else [])
              + [good(declaration_of(Input(command, (), (top,), a)), tmp_path, lambda s: find(s, lambda _: True))]]
    ran = run_cli([*module, *filled, "--no-such-option"], tmp_path / "tmp", timeout=120)
    assert ran.code == 2 and no_traceback(ran.err), ran.text
    # a command of subcommands names the one missing first
    assert len(ran.err.strip().splitlines()) == 1 and ("--no-such-option" in ran.err or "required" in ran.err), \
        ran.err
    i = first_ranged(command)
    if i is not None:
        value = {"integer": "-7", "number": "-7", "fraction": "2", "positive number": "0", "choices": "no-such",
                 "output file": str(tmp_path), "existing folder": str(tmp_path / "gone")}[declaration_of(i)[0]]
        argv = argv_for(i, value, tmp_path, lambda s: find(s, lambda _: True))
        ran = run_cli([*module, *argv], tmp_path / "tmp", timeout=120)
        assert ran.code == 2 and no_traceback(ran.err), (argv, ran.text)
        assert len(ran.err.strip().splitlines()) == 1 and i.name in ran.err, (argv, ran.err)
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("script", GENERATORS)
def test_the_cfg_generators_refuse_what_they_do_not_know(script):
    """`--chek` used to rewrite every cfg of the family: now exit 2, one line, nothing written."""
    before = subprocess.run(["git", "status", "--porcelain", "spec"], cwd=ROOT, capture_output=True, text=True).stdout
    ran = subprocess.run([sys.executable, script, "--chek"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2 and len(ran.stderr.strip().splitlines()) == 1 and "--chek" in ran.stderr, ran.stderr
    after = subprocess.run(["git", "status", "--porcelain", "spec"], cwd=ROOT, capture_output=True, text=True).stdout
    assert after == before
    ok = subprocess.run([sys.executable, script, "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr


def test_the_readmes_contract_table_names_every_command():
    """The README's table of commands (between its markers) names each command found here, and
    the cfg generators: the contract's reach, stated where a user reads it."""
    text = (ROOT / "README.md").read_text()
    table = text.split("<!-- commands:begin -->")[1].split("<!-- commands:end -->")[0]
    named = set(re.findall(r"(?:python -m )?((?:lab|harness|history|checkers|agreement|reference|traces|conformance)"
                           r"(?:\.\w+)*|pyspark_jobs/spark_check\.py|spec/\w+/gen_cfgs\.py)", table))
    named = {n.replace("pyspark_jobs/spark_check.py", "pyspark_jobs.spark_check") for n in named}
    missing = [c for c in COMMANDS if c not in named] + [g for g in GENERATORS if g not in named]
    assert missing == [], f"commands the README's contract table does not name: {missing}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_leaves_through_the_contracts_one_way_out(command):
    """Its program hands main to run_main (the Spark job to guarded, which does the same): Ctrl-C is
    130 and one line, an internal error 3 with the traceback in a log, never a traceback on the
    terminal. Eighteen commands called main() bare before (issue 41)."""
    path = ROOT / command.replace(".", "/")
    path = path / "__main__.py" if path.is_dir() else path.with_suffix(".py")
    text = path.read_text()
    block = text[text.index('if __name__ == "__main__"'):]
    main_src = text[text.index("def main("):] if "def main(" in text else ""
    assert "run_main(" in block or "run_main(" in main_src.split("\ndef ")[0] or "guarded(" in main_src, \
        f"{path.relative_to(ROOT)}: main is not run through harness.cli_args.run_main"
