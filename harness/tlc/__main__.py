"""Command line: ``python -m harness.tlc Model.tla [--config M.cfg] [--json]``.

Exit status (harness/cli_args.py): 0 the model holds (or a bounded simulation found nothing),
1 TLC found a violation or a deadlock, 2 bad input (a missing file, a model TLC cannot parse, a cfg
that does not match its module: harness/tlc/cfg_check.py, checked before the JVM starts),
3 no verdict (Java or TLC missing, --timeout reached, TLC failed while running), 130 Ctrl-C.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.cli_args import (BAD_INPUT, ENVIRONMENT, HOLDS, VIOLATED, BadInput, Parser, existing_file, int_at_least,
                              output_file, positive_float, run_main)
from harness.tlc.cfg_check import CfgMismatch, check_cfg
from harness.tlc.runner import (DEADLOCK, INVARIANT_VIOLATED, PARSE_ERROR, PROPERTY_VIOLATED, SEMANTIC_ERROR, STOPPED,
                                TLCSetupError, print_progress, run_tlc)

EXIT = {INVARIANT_VIOLATED: VIOLATED, PROPERTY_VIOLATED: VIOLATED, DEADLOCK: VIOLATED, STOPPED: HOLDS,
        PARSE_ERROR: BAD_INPUT, SEMANTIC_ERROR: BAD_INPUT}


def exit_code(outcome: str, ok: bool) -> int:
    """holds 0, a violation 1, a model TLC refuses 2; a timeout or a run-time failure is no verdict."""
    return HOLDS if ok else EXIT.get(outcome, ENVIRONMENT)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m harness.tlc", description=__doc__.splitlines()[0])
    ap.add_argument("spec", type=existing_file, help="the .tla module to check")
    ap.add_argument("--config", type=existing_file, help="the .cfg (default: the spec's name with .cfg)")
    ap.add_argument("--workers", type=int_at_least(1), default=2)
    ap.add_argument("--no-deadlock", action="store_true", help="do not report deadlocks (TLC's -deadlock)")
    ap.add_argument("--timeout", type=positive_float, help="kill TLC after this many seconds")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--log", type=output_file, help="write TLC's raw output here")
    ap.add_argument("--diff", action="store_true", help="in a trace, print only the variables each step changed")
    ap.add_argument("--svg", type=output_file, metavar="FILE",
                    help="draw the counterexample as a sequence diagram (client, replicas, Keeper) into FILE")
    ap.add_argument("--simulate", type=int_at_least(1), metavar="DEPTH",
                    help="random simulation of behaviours up to DEPTH steps")
    ap.add_argument("--stop-after", type=int_at_least(1), default=60, metavar="SECONDS",
                    help="with --simulate: stop after this long (TLC's simulation never stops by itself)")
    ap.epilog = f"Arguments after a lone -- go to TLC unchanged (e.g. -- -dump dot,actionlabels g.dot). {ap.epilog}"
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    return run_main(ap.prog, lambda: check(a, extra), environment=(TLCSetupError,))


def check(a, extra: list[str]) -> int:
    config = a.config or Path(a.spec).with_suffix(".cfg")
    if not config.is_file():
        raise BadInput(f"no {config} beside {a.spec}: name the model's .cfg with --config")
    try:   # what TLC would accept in silence, or refuse only once its JVM runs (cfg_check.py)
        check_cfg(Path(a.spec), config)
    except CfgMismatch as e:
        raise BadInput(str(e)) from None
    jvm = []
    if a.simulate:
        extra = ["-simulate", "-depth", str(a.simulate), *extra]
        jvm = [f"-Dtlc2.TLC.stopAfter={a.stop_after}"]
    res = run_tlc(a.spec, config, workers=a.workers, check_deadlock=not a.no_deadlock,
                  timeout_s=a.timeout, extra_args=extra, jvm_args=jvm, log_path=a.log,
                  progress=None if a.quiet else print_progress)
    if a.json:
        print(json.dumps(res.to_json(), indent=2))
    else:
        print(res.summary())
        for err in res.errors:
            print("  " + err.replace("\n", "\n  "))
        for line in res.trace_lines(a.diff):
            print(line)
    if a.svg:
        draw(res, a.svg, Path(config).stem)
    return exit_code(res.outcome, res.ok)


def draw(res, path: Path, model: str) -> None:
    """The counterexample as a sequence diagram (harness/sequence.py); nothing to draw without one."""
    from harness.sequence import from_tlc, render
    if not res.trace:
        print(f"no counterexample ({res.outcome}): {path} not written", file=sys.stderr)
        return
    what = f"{res.violated} violated" if res.violated else res.outcome
    render(from_tlc(res.trace), path, f"{model}: TLC's counterexample, {len(res.trace) - 1} steps",
           footer=f"after step {len(res.trace) - 1}: {what}")
    print(f"sequence diagram written to {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
