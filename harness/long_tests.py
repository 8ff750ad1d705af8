"""`make check`'s long-tests stage: the tests marked `long`, which `make test` leaves out to stay
within its time (pyproject.toml's addopts deselects them): the slower small TLC models and the
standalone Spark cluster. Writes the stage report check_all reads.

    python -m harness.long_tests [--report build/reports/long-tests.json] [pytest args...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.long_tests", description=__doc__.splitlines()[0])
    ap.add_argument("--report", help="write the stage's JSON report here")
    a, rest = ap.parse_known_args(argv)
    start = time.monotonic()
    # `-m long` after addopts' `-m 'not long'`: pytest keeps the last one.
    rc = subprocess.call([sys.executable, "-m", "pytest", "-m", "long", "-q", *rest], cwd=ROOT)
    secs = time.monotonic() - start
    # pytest's 5 (nothing collected) is a failure here too: the stage would prove nothing.
    result = {0: "every long test passed", 5: "NO long tests collected"}.get(rc, f"pytest exit {rc}")
    if a.report:
        Path(a.report).parent.mkdir(parents=True, exist_ok=True)
        Path(a.report).write_text(json.dumps({"summary": f"{result} in {secs:.0f} s", "exit": rc}))
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
