"""A `python -m reference run` as a process of its own, killed with SIGKILL once its output says
it has reached a point (a progress line: "SWITCH", "(CLONE)", "inserted 16/"), as an operator's
machine kills a server: no handler runs, no file is closed, the Keeper session is left to expire.
For the runs that are then carried on with `--attach` (tests/reference/test_attach.py, the fault
suite's process_kill rows in lab/faults.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start_run(args: list[str], out: Path) -> subprocess.Popen:
    """`python -m reference run ARGS`, stdout and stderr into `out`."""
    with open(out, "w") as f:   # the child holds its own descriptor
        return subprocess.Popen([sys.executable, "-m", "reference", "run", *args], stdout=f,
                                stderr=subprocess.STDOUT, cwd=ROOT)


def kill_when(proc: subprocess.Popen, out: Path, marker: str, timeout: float = 120) -> bool:
    """SIGKILL once `marker` is in the output; False if the run ended before it showed. A run that
    neither ends nor shows it within `timeout` is killed and raises (its output's tail named)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        if marker in out.read_text():
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise TimeoutError(f"{marker!r} not seen in {timeout:g} s:\n{out.read_text()[-2000:]}")
