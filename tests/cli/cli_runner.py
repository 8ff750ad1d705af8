"""Run a command line as a user does (a subprocess from the checkout) and see what it left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Folders that change while tests run for reasons of their own (caches, the shared venv).
NOT_OURS = {".git", ".venv", ".tools", ".pytest_cache", ".hypothesis", "__pycache__"}


@dataclass
class Ran:
    argv: list[str]
    code: int
    out: str
    err: str
    left: int = 0   # processes of its group still there after it answered (interrupt(group=True))

    @property
    def text(self) -> str:
        return self.out + self.err


def run_cli(argv: list[str], tmp: Path, env: dict | None = None, timeout: float = 120) -> Ran:
    """`python -m ...` from the checkout, its temporary files in `tmp` (so what it leaves is seen)."""
    tmp.mkdir(parents=True, exist_ok=True)
    full = {**os.environ, "TMPDIR": str(tmp), "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    p = subprocess.run([sys.executable, *argv], cwd=ROOT, env=full, capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    return Ran(argv, p.returncode, p.stdout, p.stderr)


def interrupt(argv: list[str], under_way, env: dict | None = None, timeout: float = 60, group: bool = False) -> Ran:
    """Start `python -m ...` as a terminal does, wait until `under_way(process)` says it is at work,
    send SIGINT (Ctrl-C) and return what it answered. The child gets SIGINT's default action back:
    a make test started in the background by a shell without job control ignores SIGINT, the child
    would inherit that, and Python leaves an ignored SIGINT ignored (no KeyboardInterrupt).

    group: the command leads a process group of its own and SIGINT goes to the whole group, as a
    terminal's Ctrl-C does, its JVMs and servers included (issue 41); whatever of the group is left
    after the answer is killed, and `Ran.left` counts it."""
    def child():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if group:
            os.setpgrp()
    p = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=child)
    left = 0
    try:
        under_way(p)
        if group:
            os.killpg(p.pid, signal.SIGINT)
        else:
            p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=timeout)
        if group:
            # Running ones only: a zombie (a shell spark-class forked, reparented to init when its
            # java ended) is init's to reap, and this machine's init may take its time.
            rows = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout.splitlines()
            left = sum(1 for r in rows if r.split()[0] == str(p.pid) and not r.split()[1].startswith("Z"))
    finally:
        if group:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.kill()
        p.wait()
    return Ran(argv, p.returncode, out, err, left)


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` with its size and modification time (caches and the venv left out)."""
    state = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in NOT_OURS]
        for name in files:
            p = Path(folder, name)
            try:
                st = p.lstat()
            except FileNotFoundError:
                continue
            state[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return state


def no_traceback(err: str) -> bool:
    return "Traceback (most recent call last)" not in err and "\tat " not in err and "Exception in thread" not in err
