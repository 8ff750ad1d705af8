"""A `python -m reference run` as a process of its own, killed with SIGKILL once its output says
it has reached a point (a progress line: "SWITCH", "(CLONE)", "inserted 16/"), or while an INSERT
it sent has no answer (its journal says so), as an operator's machine kills a server: no handler
runs, no file is closed, the Keeper session is left to expire.
For the runs that are then carried on with `--attach` (tests/reference/test_attach.py, the fault
suite's process_kill rows in lab/faults.py).
"""

from __future__ import annotations

import json
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


def _kill_once(proc: subprocess.Popen, ready, poll: float, timeout: float, missed) -> bool:
    """SIGKILL as soon as `ready()`; False if the run ended first. A run that does neither within
    `timeout` is killed and raises TimeoutError(missed())."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        if ready():
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(poll)
    proc.kill()
    proc.wait()
    raise TimeoutError(missed())


def kill_when(proc: subprocess.Popen, out: Path, marker: str, timeout: float = 120) -> bool:
    """SIGKILL once `marker` is in the output; False if the run ended before it showed. A run that
    neither ends nor shows it within `timeout` is killed and raises (its output's tail named)."""
    return _kill_once(proc, lambda: marker in out.read_text(), 0.02, timeout,
                      lambda: f"{marker!r} not seen in {timeout:g} s:\n{out.read_text()[-2000:]}")


def _unanswered(journal: Path) -> set[str]:
    """The block ids the journal has as sent and not answered (history/journal.py): its last
    line may be half written, which reads as not there yet."""
    def block_ids(name: str) -> set[str]:
        try:
            lines = (journal / f"{name}.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return set()
        out = set()
        for line in lines:
            try:
                out.add(json.loads(line)["block_id"])
            except ValueError:
                pass
        return out
    return block_ids("sent") - block_ids("inserts")


def kill_while_inserting(proc: subprocess.Popen, journal: Path, out: Path, after: str = "",
                         timeout: float = 120) -> bool:
    """SIGKILL while the run's journal has an INSERT sent and not answered, once `after` is in its
    output; False if the run ended first. The answer may still land between the look and the
    kill: the attach says how many it sends again ("sent again"), which is how a caller knows the
    kill caught one. Polled every 5 ms: an INSERT on a loopback ZooKeeper takes tens of them."""
    return _kill_once(proc, lambda: after in out.read_text() and bool(_unanswered(journal)), 0.005, timeout,
                      lambda: f"no INSERT in flight seen in {timeout:g} s in {journal}")
