"""Command line: ``python -m harness.tlc Model.tla [--config M.cfg] [--json]``.

Exit status 0 when the model holds, 1 for any other outcome, 2 when TLC cannot be run.
"""

from __future__ import annotations

import argparse
import json
import sys

from .runner import TLCSetupError, print_progress, run_tlc
from .values import format_value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.tlc", description=__doc__.splitlines()[0])
    ap.add_argument("spec", help="the .tla module to check")
    ap.add_argument("--config", help="the .cfg (default: the spec's name with .cfg)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-deadlock", action="store_true", help="do not report deadlocks (TLC's -deadlock)")
    ap.add_argument("--timeout", type=float, help="kill TLC after this many seconds")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--log", help="write TLC's raw output here")
    ap.add_argument("--diff", action="store_true", help="in a trace, print only the variables each step changed")
    ap.add_argument("--simulate", type=int, metavar="DEPTH", help="random simulation of behaviours up to DEPTH steps")
    ap.add_argument("--stop-after", type=int, default=60, metavar="SECONDS",
                    help="with --simulate: stop after this long (TLC's simulation never stops by itself)")
    ap.epilog = "Arguments after a lone -- go to TLC unchanged (e.g. -- -dump dot,actionlabels g.dot)."
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    jvm = []
    if a.simulate:
        extra = ["-simulate", "-depth", str(a.simulate), *extra]
        jvm = [f"-Dtlc2.TLC.stopAfter={a.stop_after}"]
    try:
        res = run_tlc(a.spec, a.config, workers=a.workers, check_deadlock=not a.no_deadlock,
                      timeout_s=a.timeout, extra_args=extra, jvm_args=jvm, log_path=a.log,
                      progress=None if a.quiet else print_progress)
    except TLCSetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(res.to_json(), indent=2))
    else:
        print(res.summary())
        for err in res.errors:
            print("  " + err.replace("\n", "\n  "))
        prev: dict = {}
        for step in res.trace:
            print(f"{step.index}: {step.action}")
            for var, val in step.state.items():
                if not a.diff or prev.get(var) != val:
                    print(f"    {var} = {format_value(val)}")
            prev = step.state
    return 0 if res.ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # output piped into head: not an error
        sys.exit(1)
